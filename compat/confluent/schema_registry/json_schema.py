"""confluent-kafka's ``confluent_kafka.schema_registry.json_schema``: trafka's serializers
(:mod:`trafka.sdk.schemas`), which take confluent-kafka's arguments and settings."""

from trafka.sdk.schemas import JSONDeserializer, JSONSerializer

__all__ = ["JSONDeserializer", "JSONSerializer"]
