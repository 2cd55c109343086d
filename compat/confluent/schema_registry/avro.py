"""confluent-kafka's ``confluent_kafka.schema_registry.avro``: trafka's serializers
(:mod:`trafka.sdk.schemas`), which take confluent-kafka's arguments and settings."""

from trafka.sdk import schemas as _schemas

from ..serialization import Deserializer, Serializer
from ._errors import as_confluent

__all__ = ["AvroDeserializer", "AvroSerializer"]

AvroSerializer = as_confluent(_schemas.AvroSerializer, Serializer, __name__)
AvroDeserializer = as_confluent(_schemas.AvroDeserializer, Deserializer, __name__)
