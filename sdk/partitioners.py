"""Choosing a partition for a record: the hash functions of the main Kafka clients.

Rules (each partitioner is named after the client that made it the default):

* ``murmur2`` (Java client, kafka-python, aiokafka): a keyed record goes to
  ``toPositive(murmur2(key)) % num_partitions`` over *all* partitions, with
  Java's ``Utils.murmur2`` (seed ``0x9747b28c``) and ``toPositive(n) = n &
  0x7fffffff``. A record without a key is *sticky* (KIP-480): it goes to the
  topic's current sticky partition, chosen at random among the available
  ones; the producer calls :meth:`Partitioner.on_new_batch` when that
  partition's batch is full or sent, and the next sticky partition is chosen
  (different from the previous one when there is a choice).
* ``murmur2_random`` (librdkafka's Java-compatible one): the same hash for
  keyed records; records with a NULL key go to a random partition.
* ``consistent_random`` (librdkafka's default) / ``crc32``: ``crc32(key) %
  num_partitions``; NULL *or empty* keys go to a random available partition.
* ``consistent``: ``crc32(key) % num_partitions`` for every record (a NULL
  key hashes as empty, so it always lands on partition 0).
* ``fnv1a`` (sarama's default ``NewHashPartitioner``, and librdkafka's
  ``fnv1a``): 32-bit FNV-1a, read as a signed int32, then ``abs(h %
  num_partitions)`` with Go's truncating ``%`` -- which equals ``abs(h) %
  num_partitions``, including for ``-2**31``. A NULL key hashes as empty
  (librdkafka). ``fnv1a_random`` sends NULL keys to a random partition (sarama).
* ``random``: a random available partition. ``roundrobin`` (Java's
  ``RoundRobinPartitioner``): a per-topic counter over the available partitions
  (all partitions while none is available); keys are ignored.
* Any callable ``(key, num_partitions, available) -> int`` is accepted.

librdkafka's sticky partitioning (``sticky.partitioning.linger.ms``, 10 ms by
default there): under librdkafka's partitioners (those above that hash keys,
but Java's ``murmur2``), a record with a NULL key, or an empty one under
``consistent_random``/``crc32``, goes to the topic's sticky partition, drawn at
random among the available ones and drawn again once the linger has passed
since it was drawn (or at once when it is no longer available); 0 turns it off
(such records then go where the list above says). ``random`` ignores it, as in
librdkafka.

"Available" means partitions with a known leader; when none are, every
partition is a candidate.
"""

from __future__ import annotations

import dataclasses
import random
import struct
import time
import zlib
from collections.abc import Callable, Sequence

from trafka.codec import records as _codec_records

from .errors import ConfigError

__all__ = [
    "KEY_HASHES",
    "PARTITIONERS",
    "PartitionFunction",
    "Partitioner",
    "PartitionerInfo",
    "crc32_partition",
    "fnv1a_32",
    "fnv1a_partition",
    "get_partitioner",
    "lingers",
    "murmur2",
    "murmur2_partition",
    "to_positive",
]

PartitionFunction = Callable[[bytes | None, int, Sequence[int]], int]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2_py(data: bytes) -> int:
    """Java's ``Utils.murmur2``: a 32-bit MurmurHash2, returned as a signed int32.

    The pure-Python version of :func:`murmur2` (which is the C one when the
    accelerator is built).

    Args:
        data: the serialized key.

    Returns:
        The hash as Java's ``int`` (in ``[-2**31, 2**31)``).
    """
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length & ~3
    if n4:
        for (k,) in struct.iter_unpack("<I", data[:n4]):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    rest = length - n4
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


_c_murmur2: Callable[[bytes], int] | None = _codec_records.accelerated("murmur2")
murmur2: Callable[[bytes], int] = _c_murmur2 if _c_murmur2 is not None else murmur2_py
"""Java's ``Utils.murmur2`` of ``data``, as a signed int32 (C when available)."""


def to_positive(n: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return n & 0x7FFFFFFF


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    """The Java client's partition for a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions  # to_positive, inlined


def crc32_partition(key: bytes, num_partitions: int) -> int:
    """librdkafka's ``consistent`` partition: CRC-32 (IEEE) of the key."""
    return zlib.crc32(key) % num_partitions


def fnv1a_32(data: bytes) -> int:
    """32-bit FNV-1a, unsigned."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & _MASK
    return h


def fnv1a_partition(key: bytes, num_partitions: int) -> int:
    """sarama's ``NewHashPartitioner`` partition (and librdkafka's ``fnv1a``)."""
    h = fnv1a_32(key)
    signed = h - (1 << 32) if h & 0x80000000 else h
    return abs(signed) % num_partitions


#: The key hashes of Kafka's clients, by the name the proxy and partitioners use.
KEY_HASHES: dict[str, Callable[[bytes, int], int]] = {
    "murmur2": murmur2_partition,  # Java, kafka-python, aiokafka, trafka
    "crc32": crc32_partition,  # librdkafka's "consistent"
    "fnv1a": fnv1a_partition,  # sarama
}


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionerInfo:
    """A named partitioner.

    Attributes:
        key_hash: the partition of a keyed record (None: keys are not hashed).
        null_keys: what happens to a record without a key: ``sticky`` (Java's
            sticky partitioner), ``random``, ``random_if_empty`` (an empty key
            too), ``hash_empty`` (a null key hashes as an empty one),
            ``roundrobin``.
        uses_availability: whether the choice looks at which partitions have a
            leader (the producer computes that only for those that do).
    """

    key_hash: Callable[[bytes, int], int] | None
    null_keys: str
    uses_availability: bool


#: Every partitioner the producer takes by name (the one list; config and
#: producer read it).
PARTITIONERS: dict[str, PartitionerInfo] = {
    "murmur2": PartitionerInfo(murmur2_partition, "sticky", True),
    "murmur2_random": PartitionerInfo(murmur2_partition, "random", False),
    "consistent_random": PartitionerInfo(crc32_partition, "random_if_empty", True),
    "consistent": PartitionerInfo(crc32_partition, "hash_empty", False),
    "crc32": PartitionerInfo(crc32_partition, "random_if_empty", True),
    "fnv1a": PartitionerInfo(fnv1a_partition, "hash_empty", False),
    "fnv1a_random": PartitionerInfo(fnv1a_partition, "random", True),
    "random": PartitionerInfo(None, "random", True),
    "roundrobin": PartitionerInfo(None, "roundrobin", True),
}


def lingers(name: str) -> bool:
    """Whether librdkafka's ``sticky.partitioning.linger.ms`` applies to the
    partitioner named ``name``: librdkafka's, which hash keys (not Java's
    ``murmur2``, sticky per batch; not ``random`` or ``roundrobin``)."""
    info = PARTITIONERS.get(name)
    return info is not None and info.key_hash is not None and info.null_keys != "sticky"


def _candidates(num_partitions: int, available: Sequence[int]) -> Sequence[int]:
    return available if available else range(num_partitions)


class Partitioner:
    """Per-producer partition chooser (holds the sticky and round-robin state).

    Args:
        spec: a partitioner name (see the module docstring) or a callable
            ``(key, num_partitions, available) -> int``.
        sticky_linger_ms: librdkafka's ``sticky.partitioning.linger.ms`` (see the
            module docstring); for the partitioners it does not apply to, ignored.
        rng: the random source (tests pass a seeded one).
        clock: seconds, monotonic, for that linger (tests pass their own).

    Raises:
        ConfigError: unknown partitioner name.
    """

    __slots__ = (
        "_clock",
        "_counters",
        "_fn",
        "_keyed",
        "_linger",
        "_null",
        "_rng",
        "_sticky",
        "_timed",
        "name",
    )

    def __init__(
        self,
        spec: str | PartitionFunction = "murmur2",
        sticky_linger_ms: int = 0,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}
        self._timed: dict[str, tuple[int, float]] = {}
        self._clock = clock
        self._linger = sticky_linger_ms / 1000
        self._counters: dict[str, int] = {}
        self._fn: PartitionFunction | None = None
        if callable(spec):
            self.name = getattr(spec, "__name__", "custom")
            self._fn = spec
            self._keyed = None
            self._null = "custom"
            return
        name = spec.strip().lower()
        self.name = name
        info = PARTITIONERS.get(name)
        if info is None:
            raise ConfigError(f"unknown partitioner {spec!r}")
        self._keyed = info.key_hash
        self._null = info.null_keys
        if not lingers(name):
            self._linger = 0.0

    @property
    def sticky(self) -> bool:
        """Whether key-less records stick to a partition until its batch is done."""
        return self._null == "sticky"

    def partition(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int]
    ) -> int:
        """Choose the partition for one record.

        Args:
            topic: the topic (sticky and round-robin state is per topic).
            key: the serialized key, or ``None``.
            num_partitions: the topic's partition count (> 0).
            available: partitions with a known leader (may be empty).

        Returns:
            A partition in ``range(num_partitions)``.

        Raises:
            ValueError: a custom partitioner returned an out-of-range partition.
        """
        if self._fn is not None:
            p = self._fn(key, num_partitions, available)
            if not isinstance(p, int) or not 0 <= p < num_partitions:
                raise ValueError(
                    f"partitioner {self.name} returned {p!r} for {num_partitions} partitions"
                )
            return p
        keyed = self._keyed
        null = self._null
        if self._linger and (key is None or (not key and null == "random_if_empty")):
            return self._timed_sticky(topic, num_partitions, available)
        if keyed is not None:
            if key is not None and (key or null != "random_if_empty"):
                return keyed(key, num_partitions)
            if key is None and null == "hash_empty":
                return keyed(b"", num_partitions)
        if null == "sticky":
            current = self._sticky.get(topic)
            if current is None or current >= num_partitions:
                current = self._choose_sticky(topic, num_partitions, available, None)
            return current
        if null == "roundrobin":
            n = self._counters.get(topic, 0)
            self._counters[topic] = n + 1
            cands = _candidates(num_partitions, available)
            return cands[n % len(cands)]
        cands = _candidates(num_partitions, available)
        return cands[self._rng.randrange(len(cands))]

    def sticky_until(self, topic: str) -> float | None:
        """When the timed sticky partition of ``topic`` (librdkafka's linger) is
        drawn again, on ``time.monotonic()``'s clock: the producer's per-record
        path keeps the partition until then (and until the metadata changes,
        when this partitioner would check its availability again). None when
        there is none, or when the partitioner runs on a clock of its own."""
        if self._clock is not time.monotonic:
            return None
        current = self._timed.get(topic)
        return None if current is None else current[1]

    def on_new_batch(
        self, topic: str, prev_partition: int, num_partitions: int, available: Sequence[int]
    ) -> None:
        """Tell a sticky partitioner that ``prev_partition``'s batch is complete.

        The next key-less record of ``topic`` goes to a newly chosen partition.
        Does nothing for partitioners that are not sticky, and nothing when the
        sticky partition already moved away from ``prev_partition``.
        """
        if self._null != "sticky":
            return
        if self._sticky.get(topic, prev_partition) != prev_partition:
            return
        self._choose_sticky(topic, num_partitions, available, prev_partition)

    def _timed_sticky(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        """librdkafka's sticky partition of ``topic``: kept for the linger after it
        was drawn, while it is available."""
        now = self._clock()
        current = self._timed.get(topic)
        if current is not None:
            p, until = current
            if now < until and p < num_partitions and (not available or p in available):
                return p
        cands = _candidates(num_partitions, available)
        p = cands[self._rng.randrange(len(cands))]
        self._timed[topic] = (p, now + self._linger)
        return p

    def _choose_sticky(
        self, topic: str, num_partitions: int, available: Sequence[int], avoid: int | None
    ) -> int:
        cands = list(_candidates(num_partitions, available))
        if avoid is not None and len(cands) > 1:
            cands = [c for c in cands if c != avoid] or cands
        p = cands[self._rng.randrange(len(cands))]
        self._sticky[topic] = p
        return p


def get_partitioner(spec: str | PartitionFunction | Partitioner) -> Partitioner:
    """A :class:`Partitioner` from a name, a callable, or an existing one."""
    if isinstance(spec, Partitioner):
        return spec
    return Partitioner(spec)
