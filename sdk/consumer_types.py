"""The consumer's value types: partitions, records, offsets to commit, and
what commits commit.

:class:`TopicPartition`, :class:`ConsumerRecord`, :class:`PartitionEOF` and
:class:`OffsetAndMetadata` are what the application sees; :class:`ConsumedPositions` keeps the positions
after the records it processed (at-least-once, see its rules). They live below
the fetcher (:mod:`.fetcher`, which re-exports them, their documented home) so
that the modules the fetcher is made of (:mod:`.fetch_decode`,
:mod:`.fetch_requests`) can name them without importing it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Generic, NamedTuple

from typing_extensions import TypeVar

from trafka.codec import ErrorCode, KafkaError

__all__ = [
    "ConsumedPositions",
    "ConsumerRecord",
    "K",
    "OffsetAndMetadata",
    "OffsetOutOfRangeError",
    "PartitionEOF",
    "TopicPartition",
    "V",
]


class TopicPartition(NamedTuple):
    """A topic and partition."""

    topic: str
    partition: int


class OffsetAndMetadata(int):
    """An offset to commit with its metadata string (Java's ``OffsetAndMetadata``):
    ``consumer.commit({tp: OffsetAndMetadata(42, "batch 7")})``. It is the offset
    itself (an ``int``) wherever an offset is expected; the coordinator keeps
    ``metadata`` with it."""

    metadata: str | None

    def __new__(cls, offset: int, metadata: str | None = "") -> OffsetAndMetadata:
        value = super().__new__(cls, offset)
        value.metadata = metadata
        return value

    @property
    def offset(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return f"OffsetAndMetadata({int(self)}, {self.metadata!r})"


# Bare ConsumerRecord / Consumer mean [Any, Any].
K = TypeVar("K", default=Any)
V = TypeVar("V", default=Any)


class ConsumerRecord(NamedTuple, Generic[K, V]):
    """A consumed record (key and value after deserialization: ``K`` and ``V``
    are the deserializers' result types; ``Any`` unless the consumer was opened
    with typed deserializer functions).

    ``timestamp_type`` is 0 for create time, 1 for log-append time (from the
    batch attributes), -1 for legacy magic 0 messages; ``leader_epoch`` is the
    batch's partition leader epoch (-1 when unknown).
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: K
    value: V
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_type: int = 0
    leader_epoch: int = -1


class PartitionEOF(ConsumerRecord[Any, Any]):
    """The consumer reached the end of a partition: librdkafka's partition EOF
    event, handed out in the record stream only with ``enable.partition.eof=true``.

    ``offset`` is the end reached: the high watermark (the last stable offset
    under ``read_committed``), which is also the partition's position. It comes
    after the partition's records, once each time the position reaches the end
    a fetch answer gave (again after newer records were read to the new end, or
    after a seek or an assignment), and for an empty partition too.

    As librdkafka's event is a message whose ``error()`` says ``_PARTITION_EOF``,
    this is a :class:`ConsumerRecord` (with no key, value, headers or
    timestamp) of its own type: ``isinstance(record, PartitionEOF)`` tells it
    apart, and narrows the type for type checkers. It is not a record to
    commit: ``commit(message=...)`` refuses it (commit
    ``{TopicPartition(eof.topic, eof.partition): eof.offset}`` to commit up to it).
    """

    __slots__ = ()

    def __new__(cls, topic: str, partition: int, offset: int) -> PartitionEOF:
        return tuple.__new__(cls, (topic, partition, offset, -1, None, None, (), -1, -1))

    def __getnewargs__(self) -> tuple[str, int, int]:  # pickle and copy: __new__'s arguments
        return (self.topic, self.partition, self.offset)

    def __repr__(self) -> str:
        return (
            f"PartitionEOF(topic={self.topic!r}, partition={self.partition}, offset={self.offset})"
        )

    # Never equal to a record with the same fields (a legacy message without
    # key, value or timestamp has them).
    def __eq__(self, other: object) -> bool:
        return type(other) is PartitionEOF and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


class OffsetOutOfRangeError(KafkaError):
    """The position is outside the log and ``auto.offset.reset`` is ``none``."""

    def __init__(self, tp: TopicPartition, offset: int) -> None:
        super().__init__(
            ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} of {tp.topic}-{tp.partition}"
        )
        self.tp = tp
        self.offset = offset


class ConsumedPositions:
    """What commits commit: the position after the last record the application processed.

    Rules (at-least-once): records handed out by a poll count as processed
    once the *next* poll starts (:meth:`poll_started`); an explicit
    :meth:`all` (``commit()`` without offsets) counts everything handed out
    so far. Partitions that leave the assignment are forgotten.
    """

    __slots__ = ("_done", "_handed")

    def __init__(self) -> None:
        self._done: dict[TopicPartition, int] = {}
        self._handed: dict[TopicPartition, int] = {}

    def handed_out(self, tp: TopicPartition, next_offset: int) -> None:
        """Records of ``tp`` up to ``next_offset`` went to the application."""
        self._handed[tp] = next_offset

    def poll_started(self) -> None:
        if self._handed:
            self._done.update(self._handed)
            self._handed = {}

    def processed(self, assigned: set[TopicPartition]) -> dict[TopicPartition, int]:
        """Positions as of the last poll's start (auto-commit)."""
        return {tp: off for tp, off in self._done.items() if tp in assigned}

    def all(self, assigned: set[TopicPartition]) -> dict[TopicPartition, int]:
        """Positions after everything handed out (``commit()``)."""
        self.poll_started()
        return self.processed(assigned)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._done.pop(tp, None)
            self._handed.pop(tp, None)

    def rewind(self, tp: TopicPartition, next_offset: int) -> None:
        """Records of ``tp`` from ``next_offset`` on were handed out but not
        processed (a caller gave them back): commits stop before them."""
        for positions in (self._done, self._handed):
            if positions.get(tp, next_offset) > next_offset:
                positions[tp] = next_offset
