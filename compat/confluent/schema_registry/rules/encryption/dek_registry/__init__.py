"""The DEK registry (``confluent_kafka.schema_registry.rules.encryption.dek_registry``): KEKs and DEKs of field-level encryption."""
