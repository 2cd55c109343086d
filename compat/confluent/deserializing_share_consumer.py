"""confluent-kafka's ``confluent_kafka.deserializing_share_consumer`` module path (some services import
``DeserializingShareConsumer`` from it): the drop-in's class."""

from . import DeserializingShareConsumer

__all__ = ["DeserializingShareConsumer"]
