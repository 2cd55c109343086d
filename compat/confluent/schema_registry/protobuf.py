"""confluent-kafka's ``confluent_kafka.schema_registry.protobuf``: trafka's serializers
(:mod:`trafka.sdk.schemas`), which take confluent-kafka's arguments and settings."""

from trafka.sdk.schemas import ProtobufDeserializer, ProtobufSerializer

__all__ = ["ProtobufDeserializer", "ProtobufSerializer"]
