"""confluent-kafka's ``confluent_kafka.schema_registry.protobuf``: trafka's serializers
(:mod:`trafka.sdk.schemas`), which take confluent-kafka's arguments and settings."""

from trafka.sdk import schemas as _schemas

from ..serialization import Deserializer, Serializer
from ._errors import as_confluent

__all__ = ["ProtobufDeserializer", "ProtobufSerializer"]

ProtobufSerializer = as_confluent(_schemas.ProtobufSerializer, Serializer, __name__)
ProtobufDeserializer = as_confluent(_schemas.ProtobufDeserializer, Deserializer, __name__)
