"""confluent-kafka's ``confluent_kafka.schema_registry.avro``: trafka's serializers
(:mod:`trafka.sdk.schemas`), which take confluent-kafka's arguments and settings."""

from trafka.sdk.schemas import AvroDeserializer, AvroSerializer

__all__ = ["AvroDeserializer", "AvroSerializer"]
