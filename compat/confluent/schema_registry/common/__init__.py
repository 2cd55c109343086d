"""confluent-kafka's ``confluent_kafka.schema_registry.common``: what the
blocking and the async registry clients and serdes share (the models in
:mod:`.schema_registry_client`)."""
