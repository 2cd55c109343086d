"""confluent-kafka's :class:`TopicPartition` and :class:`Message`, and the
special offsets (``OFFSET_BEGINNING``...)."""

from __future__ import annotations

import abc
from typing import Any

from ._errors import KafkaError

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "Message",
    "TopicPartition",
]

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001
TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2


class TopicPartition:
    """A partition, with an offset and the error of an operation on it."""

    __slots__ = ("error", "leader_epoch", "metadata", "offset", "partition", "topic")

    def __init__(
        self,
        topic: str,
        partition: int = -1,
        offset: int = OFFSET_INVALID,
        metadata: str | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        if not isinstance(topic, str):
            raise TypeError(
                f"argument 1 must be str, not {'None' if topic is None else type(topic).__name__}"
            )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.metadata = metadata
        self.leader_epoch = leader_epoch
        self.error: KafkaError | None = None

    def _key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return (self.topic, self.partition) == (other.topic, other.partition)

    def __lt__(self, other: TopicPartition) -> bool:
        return (self.topic, self.partition) < (other.topic, other.partition)

    def __le__(self, other: TopicPartition) -> bool:
        return (self.topic, self.partition) <= (other.topic, other.partition)

    def __gt__(self, other: TopicPartition) -> bool:
        return (self.topic, self.partition) > (other.topic, other.partition)

    def __ge__(self, other: TopicPartition) -> bool:
        return (self.topic, self.partition) >= (other.topic, other.partition)

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"TopicPartition{{topic={self.topic},partition={self.partition},"
            f"offset={self.offset},leader_epoch={self.leader_epoch},error={self.error!r}}}"
        )


# ABCMeta only for register(): the consumer's C view of a record (_message.c) is
# a virtual subclass; Message itself is concrete.
class Message(metaclass=abc.ABCMeta):  # noqa: B024
    """A record, a delivery report or an event (``error()`` set), as
    confluent-kafka's ``poll()`` and delivery callbacks hand them out."""

    __slots__ = (
        "_delivery_count",
        "_error",
        "_headers",
        "_key",
        "_latency",
        "_leader_epoch",
        "_offset",
        "_partition",
        "_timestamp",
        "_topic",
        "_value",
    )

    def __init__(
        self,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        key: Any = None,
        value: Any = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        error: KafkaError | None = None,
        timestamp: tuple[int, int] | None = None,
        latency: float | None = None,
        leader_epoch: int | None = None,
        delivery_count: int | None = None,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers
        self._error = error
        # confluent-kafka's Message() without a timestamp answers (NOT_AVAILABLE, 0).
        self._timestamp = (TIMESTAMP_NOT_AVAILABLE, 0) if timestamp is None else timestamp
        self._latency = latency
        self._leader_epoch = leader_epoch
        self._delivery_count = delivery_count

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int | None:
        return self._partition

    def offset(self) -> int | None:
        return self._offset

    def key(self) -> Any:
        return self._key

    def value(self) -> Any:
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers

    def error(self) -> KafkaError | None:
        return self._error

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def latency(self) -> float | None:
        return self._latency

    def leader_epoch(self) -> int | None:
        return self._leader_epoch

    def delivery_count(self) -> int | None:
        """How many times a share group delivered the record; None elsewhere."""
        return self._delivery_count

    def deserialized_key(self) -> Any:
        """The key (a DeserializingConsumer's message holds it deserialized)."""
        return self.key()

    def deserialized_value(self) -> Any:
        """The value (a DeserializingConsumer's message holds it deserialized)."""
        return self.value()

    def set_key(self, key: Any) -> None:
        self._key = key

    def set_value(self, value: Any) -> None:
        self._value = value

    def set_headers(self, headers: list[tuple[str, bytes | None]] | None) -> None:
        self._headers = headers

    def set_error(self, error: KafkaError | None) -> None:
        self._error = error

    def set_topic(self, topic: str | None) -> None:
        self._topic = topic

    def __len__(self) -> int:
        value = self._value
        return len(value) if isinstance(value, bytes | str) else 0

    def __repr__(self) -> str:
        return (
            f"Message(topic={self._topic!r}, partition={self._partition}, "
            f"offset={self._offset}, error={self._error!r})"
        )
