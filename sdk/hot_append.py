"""The producer's per-record path: a record into the batch its partition is
filling, in one call, without I/O.

Every producer front appends through one :class:`Appender` (the async
``send``/``try_send``, the blocking ``Producer.send`` and the confluent-kafka
drop-in's ``produce``), which its :class:`~trafka.sdk.producer_core.ProducerCore`
makes and names ``append_hot``. Two implementations of the one decision:
the C one (``trafka.sdk._hot_append``, built where a compiler is, used unless
``TRAFKA_NO_SPEEDUPS`` is set) and :class:`PyAppender` here, the fallback and
the reference; the property tests hold them to the same batches, handles and
answers.

Rules:

* ``append(topic, value, key)`` takes a bytes record given no partition,
  headers or timestamp: under KIP-480's sticky partitioner a key-less one goes
  to the batch in ``sticky[topic]``; any other (with ``keys`` not
  :data:`KEYS_NONE`) to ``keyed[topic][p]``, ``p`` the key's hash modulo the
  list's length where the C path hashes it (:data:`KEYS_MURMUR2`...), else
  ``pick(topic, key, n)``. It answers the batch the record joined, as its last
  record; True when a batch must be opened first (none is kept, it is full or
  done, or it has no room; the general path's ``append_at`` opens it and keeps
  it in those dicts); False when the general path must take the record (not
  bytes, no memory now, closing, the appender not :attr:`~PyAppender.open`).
* It never waits and never reads the metadata itself: the dicts it is given
  hold only batches of partitions it may append to (in a transaction, of the
  open transaction: the core empties them when it takes no more records).
* A record counts ``record_overhead + len(key) + len(value)`` toward
  ``batch.size`` and that plus ``memory_overhead`` toward ``buffer.memory``
  (:data:`~trafka.sdk.producer_batches.RECORD_OVERHEAD` and
  :data:`~trafka.sdk.producer_batches.RECORD_MEMORY_OVERHEAD`); a buffer bounded
  in records (``queue.buffering.max.messages``) appends through the
  accumulator's ``append_to``, which counts them.
* ``take(topic, value, key)``: ``append``, answering the record's handle
  (``handle_type(batch, index)``) instead of its batch, after
  ``limit_reached(batch, size)`` when the batch reached ``batch.limit``: the
  blocking front's fast path. ``try_send(topic, value=None, key=None)``: the
  async driver's; None when not :attr:`~PyAppender.enabled` or when ``take``
  did not take the record.

The hot fields live on three bases, C structs where the extension is built so
that it reads them without a lookup: :class:`BatchBase` (of
:class:`~trafka.sdk.producer_batches.ProducerBatch`), :class:`HandleBase` (of
:class:`~trafka.sdk.producer_batches.RecordHandle`) and
:class:`AccumulatorBase` (of the accumulator).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trafka.common.extensions import load_extension

from .partitioners import crc32_partition, fnv1a_partition, murmur2_partition

__all__ = [
    "AccumulatorBase",
    "Appender",
    "BatchBase",
    "HandleBase",
    "KEYS_CRC32",
    "KEYS_CRC32_ALL",
    "KEYS_FNV1A",
    "KEYS_MURMUR2",
    "KEYS_NONE",
    "KEYS_PYTHON",
    "PyAppender",
    "accelerated",
    "key_mode",
]

#: How a keyed (or key-less, not sticky) record finds its batch: no batches kept
#: per partition; ``pick()`` for every record; a key hashed here (murmur2; crc32,
#: an empty key from ``pick()``; crc32 of any key; fnv1a), ``pick()`` for the rest.
KEYS_NONE, KEYS_PYTHON, KEYS_MURMUR2, KEYS_CRC32, KEYS_CRC32_ALL, KEYS_FNV1A = -1, 0, 1, 2, 3, 4

# Partitioner name -> how its keyed records are hashed here (trafka.sdk.partitioners).
_KEY_MODES = {
    "murmur2": KEYS_MURMUR2,
    "murmur2_random": KEYS_MURMUR2,
    "consistent_random": KEYS_CRC32,
    "crc32": KEYS_CRC32,
    "consistent": KEYS_CRC32_ALL,
    "fnv1a": KEYS_FNV1A,
    "fnv1a_random": KEYS_FNV1A,
}


def key_mode(partitioner: str) -> int:
    """The ``keys`` mode of the named partitioner's batches kept per partition."""
    return _KEY_MODES.get(partitioner, KEYS_PYTHON)


#: The C extension, or None (not built, or ``TRAFKA_NO_SPEEDUPS``).
accelerated: Any = load_extension(f"{__package__}._hot_append")


class _PyBatchBase:
    """The hot fields of a producer batch (see the module doc)."""

    __slots__ = ("done", "full", "limit", "memory", "records", "size")

    records: list[Any]
    size: int
    memory: int
    limit: int
    full: bool
    done: bool


class _PyHandleBase:
    """A record's place: its batch and its index there; ``state`` is a
    subclass's own (None until it sets one)."""

    __slots__ = ("batch", "index", "state")

    def __init__(self, batch: Any, index: int) -> None:
        self.batch = batch
        self.index = index
        self.state: Any = None


class _PyAccumulatorBase:
    """The accumulator's bounds that every append reads."""

    used_memory: int = 0
    buffer_memory: int = 0
    batch_size: int = 0
    batch_records: int = 0
    max_records: int = 0
    closing: bool = False


if TYPE_CHECKING:
    BatchBase = _PyBatchBase
    HandleBase = _PyHandleBase
    AccumulatorBase = _PyAccumulatorBase
elif accelerated is not None:
    BatchBase = accelerated.BatchBase
    HandleBase = accelerated.HandleBase
    AccumulatorBase = accelerated.AccumulatorBase
else:
    BatchBase = _PyBatchBase
    HandleBase = _PyHandleBase
    AccumulatorBase = _PyAccumulatorBase


def _crc32(key: bytes, n: int) -> int | None:
    return crc32_partition(key, n) if key else None


def _hashed(keys: int) -> Callable[[bytes, int], int | None] | None:
    if keys == KEYS_MURMUR2:
        return murmur2_partition
    if keys == KEYS_CRC32:
        return _crc32
    if keys == KEYS_CRC32_ALL:
        return crc32_partition
    if keys == KEYS_FNV1A:
        return fnv1a_partition
    return None


def _wall_ms() -> int:
    return int(time.time() * 1000)


class PyAppender:
    """The per-record path in Python: the reference of the C ``Appender``
    (same arguments, same answers; see the module doc).

    Args:
        acc: the accumulator (an :class:`AccumulatorBase`).
        sticky: topic -> the batch its KIP-480 sticky partition is filling.
        keyed: topic -> the batches its partitions are filling (None: none).
        pick: ``(topic, key, n) -> partition`` for records not hashed here;
            None when there is no metadata for the topic (a batch must open);
            ``(partition, until)`` for a timed sticky partition (librdkafka's
            linger), kept in ``timed`` and taken for the topic's key-less (or
            empty-keyed) records while ``time.monotonic()`` is before ``until``.
        handle_type: what :meth:`try_send` returns per record.
        record_overhead, memory_overhead: bytes counted per record (module doc).
        keys: one of the ``KEYS_*`` modes.
        sticky_nulls: key-less records go to ``sticky[topic]``.
        limit_reached: ``(batch, size)``, called by :meth:`try_send` when the
            batch reached its limit.
        wall_ms: the records' timestamp (default: the system clock, in ms).
        timed: topic -> ``(partition, until)``, the timed sticky picks kept
            (the core empties it when the metadata changes); None: none kept.

    Attributes:
        open: takes records (False once the producer closed or failed).
        enabled: :meth:`try_send` takes records.
    """

    __slots__ = (
        "_append_to",
        "_handle_type",
        "_hashed",
        "_keyed",
        "_keys",
        "_limit_reached",
        "_pick",
        "_record_overhead",
        "_sticky",
        "_sticky_nulls",
        "_timed",
        "_wall_ms",
        "enabled",
        "open",
    )

    def __init__(
        self,
        acc: Any,
        sticky: dict[str, Any],
        keyed: dict[str, list[Any]],
        pick: Callable[[str, bytes | None, int], int | tuple[int, float] | None],
        handle_type: type,
        record_overhead: int,
        memory_overhead: int,
        keys: int,
        sticky_nulls: bool,
        limit_reached: Callable[[Any, int], None] | None = None,
        wall_ms: Callable[[], int] | None = None,
        timed: dict[str, tuple[int, float]] | None = None,
    ) -> None:
        self._append_to = acc.append_to
        self._sticky = sticky
        self._keyed = keyed
        self._pick = pick
        self._handle_type = handle_type
        self._record_overhead = record_overhead
        del memory_overhead  # (charged by the accumulator's append_to, which this calls)
        self._keys = keys
        self._hashed = _hashed(keys)
        self._sticky_nulls = sticky_nulls
        self._limit_reached = limit_reached
        self._wall_ms = wall_ms or _wall_ms
        self._timed = timed
        self.open = True
        self.enabled = True

    def append(self, topic: Any, value: Any, key: Any) -> Any:
        """The batch the record joined, True (open a batch) or False (the
        general path): see the module doc."""
        if type(value) is not bytes or type(topic) is not str or not self.open:
            return False
        size = self._record_overhead + len(value)
        if key is None and self._sticky_nulls:
            batch = self._sticky.get(topic)
        elif self._keys != KEYS_NONE and (key is None or type(key) is bytes):
            slots = self._keyed.get(topic)
            if not slots:
                return True
            n = len(slots)
            p: int | None = None
            if key is not None:
                size += len(key)
                if self._hashed is not None:
                    p = self._hashed(key, n)
            timed = self._timed
            if p is None and timed is not None and not key:
                kept = timed.get(topic)
                if kept is not None and kept[0] < n and time.monotonic() < kept[1]:
                    p = kept[0]
            if p is None:
                picked = self._pick(topic, key, n)
                if isinstance(picked, tuple):
                    if timed is not None:
                        timed[topic] = picked
                    picked = picked[0]
                if picked is None or len(slots) != n:
                    return True
                p = picked
            batch = slots[p]
        else:
            return False
        if batch is None or batch.full or batch.done:
            # In a transaction, a batch kept here was opened in this one, so its
            # partition is already part of it: the moment the transaction takes
            # no more records, the core forgets these batches.
            return True
        appended = self._append_to(batch, self._wall_ms(), key, value, size)
        if appended:
            return batch
        return appended is False  # no room: open a batch; None (no memory): general path

    def take(self, topic: Any, value: Any, key: Any) -> Any:
        """:meth:`append`, answering the record's handle instead of its batch
        (after ``limit_reached(batch, size)`` when the batch reached its limit)."""
        batch = self.append(topic, value, key)
        if batch is True or batch is False:
            return batch
        index = len(batch.records) - 1
        size = batch.size
        if size >= batch.limit and self._limit_reached is not None:
            self._limit_reached(batch, size)
        return self._handle_type(batch, index)

    def try_send(self, topic: Any, value: Any = None, key: Any = None) -> Any:
        """:meth:`take` when :attr:`enabled`; None for a record it did not take."""
        if not self.enabled:
            return None
        handle = self.take(topic, value, key)
        return None if handle is True or handle is False else handle


Appender: type = accelerated.Appender if accelerated is not None else PyAppender
"""The C appender where the extension is built (and not turned off), else :class:`PyAppender`."""
