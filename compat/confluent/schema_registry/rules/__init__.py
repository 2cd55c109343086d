"""confluent-kafka's ``confluent_kafka.schema_registry.rules``: rule executors
and KMS drivers for the serdes' domain rules. Needs the ``rules`` extra
(``pip install 'trafka[rules]'``: cel-python, jsonata-python, tink, hvac)."""
