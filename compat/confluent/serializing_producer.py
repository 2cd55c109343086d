"""confluent-kafka's ``confluent_kafka.serializing_producer`` module path (some services import
``SerializingProducer`` from it): the drop-in's class."""

from . import SerializingProducer

__all__ = ["SerializingProducer"]
