"""confluent-kafka's client API over trafka's clients: a service written for
confluent-kafka moves over by changing its import::

    from trafka.compat.confluent import Consumer, KafkaError, KafkaException, Producer

``Producer``, ``Consumer``, ``Message``, ``TopicPartition``, ``KafkaError``
(librdkafka's codes), ``KafkaException``, ``SerializingProducer`` and
``DeserializingConsumer`` are here; ``AdminClient`` and ``NewTopic`` in
:mod:`.admin`, the serializers in :mod:`.serialization`, as in
confluent-kafka. The clients run on :mod:`trafka.sdk.blocking`; the
configuration is confluent-kafka's dict (librdkafka's names, which trafka
takes with librdkafka's rules).
"""

from __future__ import annotations

from ._consumer import Consumer
from ._errors import KafkaError, KafkaException
from ._producer import Producer
from ._serializing import DeserializingConsumer, SerializingProducer
from ._types import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Message,
    TopicPartition,
)

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "Consumer",
    "DeserializingConsumer",
    "KafkaError",
    "KafkaException",
    "Message",
    "Producer",
    "SerializingProducer",
    "TopicPartition",
]
