"""Other Kafka clients' APIs over trafka's clients, so that code written for
them moves over by changing its import: :mod:`trafka.compat.confluent`
(confluent-kafka's)."""
