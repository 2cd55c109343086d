"""confluent-kafka's client API over trafka's clients: a service written for
confluent-kafka moves over by changing its import::

    from trafka.compat.confluent import Consumer, KafkaError, KafkaException, Producer

``Producer``, ``Consumer``, ``Message``, ``TopicPartition``, ``KafkaError``
(librdkafka's codes), ``KafkaException``, ``SerializingProducer``,
``DeserializingConsumer``, the model types (``Node``, ``ConsumerGroupState``...),
the key partitioners and ``version()`` / ``libversion()`` are here;
``AdminClient`` and ``NewTopic`` in :mod:`.admin`, the serializers in
:mod:`.serialization`, their errors in :mod:`.error`, as in confluent-kafka. The clients run on :mod:`trafka.sdk.blocking`; the
configuration is confluent-kafka's dict (librdkafka's names, which trafka
takes with librdkafka's rules).
"""

from __future__ import annotations

from importlib.metadata import version as _metadata_version

from trafka.sdk.statistics import ThrottleEvent

from ._consumer import Consumer
from ._errors import KafkaError, KafkaException
from ._model import (
    AcknowledgeType,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    ElectionType,
    IsolationLevel,
    Messages,
    Node,
    TopicCollection,
    TopicPartitionInfo,
    Uuid,
    consistent,
    fnv1a,
    libversion,
    murmur2,
    version,
)
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
    "TRAFKA_VERSION",
    "AcknowledgeType",
    "ConsumerGroupState",
    "ConsumerGroupTopicPartitions",
    "ConsumerGroupType",
    "ElectionType",
    "IsolationLevel",
    "Messages",
    "Node",
    "ThrottleEvent",
    "TopicCollection",
    "TopicPartitionInfo",
    "Uuid",
    "consistent",
    "fnv1a",
    "libversion",
    "murmur2",
    "version",
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

__version__ = version()
#: trafka's own version (``version()`` is the confluent-kafka API the drop-in follows).
TRAFKA_VERSION: str = _metadata_version("trafka")

# The share consumer (KIP-932): one block, kept apart for merges.
from ._share import (  # noqa: E402
    ConcurrentModificationException,
    DeserializingShareConsumer,
    IllegalStateException,
    ShareConsumer,
)

__all__ += [
    "ConcurrentModificationException",
    "DeserializingShareConsumer",
    "IllegalStateException",
    "ShareConsumer",
]
