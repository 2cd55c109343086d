"""confluent-kafka's model types and top-level functions: ``Node``, the
consumer group and isolation enums, ``TopicCollection``,
``TopicPartitionInfo``, ``Messages``, ``Uuid``, the key partitioners
(``murmur2``, ``consistent``, ``fnv1a``) and ``version()`` /
``libversion()``.

Rules: the enums' values are librdkafka's (``ConsumerGroupState.STABLE`` is
3...); the partitioners answer the partition librdkafka's partitioner of that
name picks for a key (murmur2 as Java's client, ``consistent`` CRC-32,
``fnv1a`` as sarama); ``version()`` and ``libversion()`` answer the
confluent-kafka and librdkafka releases whose API and behaviour the drop-in
follows (the numbers services compare), not trafka's own version
(``trafka.compat.confluent.TRAFKA_VERSION``).
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Iterable, Iterator
from typing import Any

from trafka.sdk.partitioners import crc32_partition, fnv1a_partition, murmur2_partition

__all__ = [
    "AcknowledgeType",
    "ConsumerGroupState",
    "ConsumerGroupTopicPartitions",
    "ConsumerGroupType",
    "ElectionType",
    "IsolationLevel",
    "Messages",
    "Node",
    "TopicCollection",
    "TopicPartitionInfo",
    "Uuid",
    "consistent",
    "fnv1a",
    "libversion",
    "murmur2",
    "version",
]

#: The confluent-kafka release the drop-in's API follows, and its librdkafka.
CONFLUENT_KAFKA_VERSION = "2.16.1"
LIBRDKAFKA_VERSION = ("2.16.0", 0x021000FF)


def version() -> str:
    """The confluent-kafka release whose API the drop-in follows."""
    return CONFLUENT_KAFKA_VERSION


def libversion() -> tuple[str, int]:
    """The librdkafka release whose behaviour the drop-in follows: (name, number)."""
    return LIBRDKAFKA_VERSION


def _partition(fn: Any, key: bytes, partition_count: int) -> int:
    if not isinstance(key, bytes):
        raise TypeError(f"a bytes-like object is required, not {type(key).__name__!r}")
    if not isinstance(partition_count, int) or isinstance(partition_count, bool):
        raise TypeError(f"partition_count must be an int, not {type(partition_count).__name__}")
    if partition_count <= 0:
        raise ValueError(f"partition_count must be > 0, got {partition_count}")
    partition: int = fn(key, partition_count)
    return partition


def murmur2(key: bytes, partition_count: int) -> int:
    """The partition of ``key`` by murmur2, as Java's client and librdkafka's ``murmur2``."""
    return _partition(murmur2_partition, key, partition_count)


def consistent(key: bytes, partition_count: int) -> int:
    """The partition of ``key`` by CRC-32, as librdkafka's ``consistent``."""
    return _partition(crc32_partition, key, partition_count)


def fnv1a(key: bytes, partition_count: int) -> int:
    """The partition of ``key`` by FNV-1a, as librdkafka's ``fnv1a`` (and sarama)."""
    return _partition(fnv1a_partition, key, partition_count)


class Node:
    """A broker: its id, host, port and rack."""

    def __init__(self, id: int, host: str, port: int, rack: str | None = None) -> None:
        self.id = id
        self.id_string = str(id)
        self.host = host
        self.port = port
        self.rack = rack

    def __str__(self) -> str:
        rack = f"(Rack - {self.rack})" if self.rack else ""
        return f"({self.id}) {self.host}:{self.port} {rack}"


class ConsumerGroupTopicPartitions:
    """A group and some of its partitions (admin calls on committed offsets)."""

    def __init__(self, group_id: str, topic_partitions: list[Any] | None = None) -> None:
        self.group_id = group_id
        self.topic_partitions = topic_partitions


class _Ordered(enum.Enum):
    """An enum whose members order by value."""

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        less: bool = self.value < other.value
        return less


class ConsumerGroupState(_Ordered):
    """A consumer group's state, as librdkafka numbers it."""

    UNKNOWN = 0
    UNKOWN = 0  # confluent-kafka's old misspelling, an alias
    PREPARING_REBALANCING = 1
    COMPLETING_REBALANCING = 2
    STABLE = 3
    DEAD = 4
    EMPTY = 5


class ConsumerGroupType(_Ordered):
    """A group's protocol: classic or consumer (KIP-848)."""

    UNKNOWN = 0
    CONSUMER = 1
    CLASSIC = 2


class IsolationLevel(_Ordered):
    """Which records a reader sees."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class ElectionType(_Ordered):
    """A leader election's kind."""

    PREFERRED = 0
    UNCLEAN = 1


class AcknowledgeType(enum.IntEnum):
    """A share consumer's acknowledgement of a record (KIP-932)."""

    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


class TopicCollection:
    """Topics named for an admin call."""

    def __init__(self, topic_names: list[str]) -> None:
        self.topic_names = topic_names


class TopicPartitionInfo:
    """A partition's id, leader, replicas and in-sync replicas (as Nodes)."""

    def __init__(self, id: int, leader: Node, replicas: list[Node], isr: list[Node]) -> None:
        self.id = id
        self.leader = leader
        self.replicas = replicas
        self.isr = isr


class Messages:
    """A sequence of messages (what a share consumer's poll hands out)."""

    def __init__(self, messages: Iterable[Any] = ()) -> None:
        self._records = list(messages)

    def records(self) -> list[Any]:
        return list(self._records)

    def count(self) -> int:
        return len(self._records)

    def is_empty(self) -> bool:
        return not self._records

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._records)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return Messages(self._records[index])
        return self._records[index]

    def __repr__(self) -> str:
        return f"Messages({self._records!r})"


class Uuid:
    """A 128-bit id (a topic's id) from its two 64-bit halves; shown as
    librdkafka shows them: base64 without padding."""

    __slots__ = ("_lsb", "_msb")

    def __init__(self, most_significant_bits: int, least_significant_bits: int) -> None:
        self._msb = most_significant_bits
        self._lsb = least_significant_bits

    def get_most_significant_bits(self) -> int:
        return self._msb

    def get_least_significant_bits(self) -> int:
        return self._lsb

    def _bytes(self) -> bytes:
        return (self._msb & (2**64 - 1)).to_bytes(8, "big") + (self._lsb & (2**64 - 1)).to_bytes(
            8, "big"
        )

    def __str__(self) -> str:
        return base64.b64encode(self._bytes()).decode().rstrip("=")

    def __repr__(self) -> str:
        return str(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Uuid):
            return NotImplemented
        return (self._msb, self._lsb) == (
            other.get_most_significant_bits(),
            other.get_least_significant_bits(),
        )

    def __hash__(self) -> int:
        return hash((self._msb, self._lsb))
