"""confluent-kafka's ``confluent_kafka.schema_registry.json_schema``: trafka's serializers
(:mod:`trafka.sdk.schemas`), which take confluent-kafka's arguments and settings."""

from trafka.sdk import schemas as _schemas

from ..serialization import Deserializer, Serializer
from ._errors import as_confluent

__all__ = ["JSONDeserializer", "JSONSerializer"]

JSONSerializer = as_confluent(_schemas.JSONSerializer, Serializer, __name__)
JSONDeserializer = as_confluent(_schemas.JSONDeserializer, Deserializer, __name__)
