"""confluent-kafka's ``confluent_kafka.schema_registry.common``: what the sync
and async clients and serdes share."""
