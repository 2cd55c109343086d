"""Field-level encryption's KMS drivers (``confluent_kafka.schema_registry.rules.encryption``)."""
