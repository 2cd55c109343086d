"""confluent-kafka's ``confluent_kafka.deserializing_consumer`` module path (some services import
``DeserializingConsumer`` from it): the drop-in's class."""

from . import DeserializingConsumer

__all__ = ["DeserializingConsumer"]
