"""The producer's record accumulator, without I/O.

Rules and invariants:

* Records are appended per partition as plain ``(timestamp, key, value,
  headers)`` tuples into the partition's open batch; a batch is encoded once,
  when first drained (one :func:`~trafka.codec.records.encode_batch` call), and
  the bytes are kept for retries so a retried batch is byte-identical
  (same producer id, epoch and base sequence).
* A batch is *full* once the next record would take it past ``batch.size``
  (its first record is always accepted). A partition is *ready* when its first
  batch is full, older than ``linger.ms``, or when a flush or close is under
  way, or when appends wait for memory; and not in retry backoff, and below
  its in-flight limit.
* Ordering per partition: batches leave a partition in creation order. A
  retried batch goes back in front of every younger batch of its partition.
  Up to ``max.in.flight.requests.per.connection`` batches of a partition are
  in flight. With idempotence the broker's sequence check keeps their order
  across retries; without it a retry can land after a younger batch, as in
  the Java client (set ``max.in.flight.requests.per.connection=1`` for strict
  order without idempotence).
* Idempotence: a batch gets its producer id, epoch and base sequence when it
  is first encoded, and keeps them for every retry (and its split halves keep
  their records' share). A partition's sequence numbers belong to one producer
  identity (id, epoch) at a time: when the identity changes (a new producer id
  or a bumped epoch) the partition moves to it, restarting at sequence 0, only
  once none of its batches is in flight, so batches of two identities are never
  in flight together and cannot overtake each other. A *sequence reset*
  (:meth:`Accumulator.request_sequence_reset`, after the broker reported a gap
  it cannot close, KIP-360) waits until the partition has nothing in flight and
  the identity has changed, then drops the sequence numbers (and encodings) of
  the partition's queued batches so that they are numbered afresh.
* Transactions: :attr:`Accumulator.send_allowed` holds back partitions that
  are not yet part of the transaction (the transaction manager adds them
  first), and batches of a transaction begun while the previous one commits:
  each batch carries the number of the transaction it was opened in
  (:attr:`Accumulator.txn_open`), and :meth:`Accumulator.seal` closes the
  committing transaction's open batches to the next one's records. Batches
  carry the transactional flag.
* Memory: every record reserves its estimated size plus CPython's
  per-record bookkeeping (:data:`RECORD_MEMORY_OVERHEAD`) out of
  ``buffer.memory``, and an encoded batch its bytes too, until the batch
  completes. :meth:`Accumulator.append` raises :class:`BufferFullError`
  instead of blocking; the driver waits for :attr:`Accumulator.free_memory`
  to grow and tries again. (Encoding happens at drain time, so in-flight
  batches can take the total past ``buffer.memory`` by their encoded size.)
* A batch the broker rejects with MESSAGE_TOO_LARGE is split in two halves
  (:meth:`Accumulator.split`), again and again if need be, down to single
  records, which then fail; the halves keep the batch's place in the
  partition's order and its records' sequence numbers.
* Counters (:class:`~trafka.sdk.statistics.PartitionCounters`, one per
  partition queue) move once per batch outcome (acknowledged, failed,
  retried), never per record appended: the append paths (here and the
  producer's inlined hot path) touch no counter.
* Every record gets a :class:`RecordHandle`, resolved exactly once, with its
  :class:`RecordMetadata` or an exception. ``delivery.timeout.ms`` bounds the
  time from append to resolution: a batch not in flight past it fails with
  :class:`~trafka.sdk.errors.DeliveryTimeoutError`; an in-flight one fails
  when its response (or timeout) comes back. The error carries the error of the
  batch's last retried attempt (``last_error``), so that a broker's refusal
  retried until the deadline (NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER...)
  is not reported as a bare timeout. Each retry is reported to ``on_retry``.

``now`` is the driver's monotonic clock in seconds; timestamps in records are
wall-clock milliseconds supplied by the caller.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from trafka.codec import ErrorCode, KafkaError
from trafka.codec.compression import Compression
from trafka.codec.messages import k00_produce as produce
from trafka.codec.records import encode_batch

from .errors import (
    ArgumentTypeError,
    DeliveryTimeoutError,
    SerializationError,
    UsageError,
)
from .statistics import PartitionCounters, TopicCounters, topic_totals

__all__ = [
    "Accumulator",
    "BufferFullError",
    "ProducerBatch",
    "RecordHandle",
    "RecordMetadata",
    "ReadyCheck",
    "build_produce_request",
    "estimate_size",
]

_INT32_MAX = 2**31 - 1

log = logging.getLogger("trafka.sdk.producer")

# Per-record bytes beyond key, value and headers: length, attributes, timestamp
# and offset deltas, key/value lengths and header count as small varints.
RECORD_OVERHEAD = 12
BATCH_OVERHEAD = 61
# What CPython spends on each buffered record besides its bytes: the record
# tuple (72), its timestamp int (32) and its list slot (8). Counted against
# buffer.memory so that the bound holds for the process's real memory.
RECORD_MEMORY_OVERHEAD = 112


def estimate_size(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> int:
    """Approximate encoded size of one record (exact enough for ``batch.size``)."""
    n = RECORD_OVERHEAD
    if key is not None:
        n += len(key)
    if value is not None:
        n += len(value)
    for hk, hv in headers:
        n += len(hk) + 4 + (len(hv) if hv is not None else 0)
    return n


class BufferFullError(Exception):
    """Internal: ``buffer.memory`` cannot hold the record yet (the driver waits)."""

    def __init__(self, needed: int) -> None:
        super().__init__(needed)
        self.needed = needed


@dataclasses.dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record was written.

    Attributes:
        topic, partition, offset: its position in the log (offset -1 with acks=0).
        timestamp: the record's timestamp (the broker's under log-append time).
        serialized_key_size, serialized_value_size: bytes, -1 for None.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1


class ProducerBatch:
    """Records for one partition, sent (and retried) together."""

    __slots__ = (
        "attempts",
        "base_offset",
        "base_sequence",
        "callbacks",
        "children",
        "created",
        "done",
        "encoded",
        "error",
        "full",
        "in_flight",
        "last_error",
        "limit",
        "log_append_time",
        "memory",
        "order",
        "parent",
        "partition",
        "pending_children",
        "producer_epoch",
        "producer_id",
        "records",
        "retry_at",
        "seq",
        "size",
        "topic",
        "txn",
        "waker",
    )

    def __init__(self, topic: str, partition: int, now: float, seq: int) -> None:
        self.topic = topic
        self.partition = partition
        self.records: list[
            tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]
        ] = []
        self.size = BATCH_OVERHEAD
        self.memory = 0  # bytes reserved out of buffer.memory
        self.created = now
        self.seq = seq  # creation order within the partition
        # Sort key within the partition: split halves sort right after their parent.
        self.order: tuple[int, ...] = (seq,)
        # A batch split after MESSAGE_TOO_LARGE: its halves (index of their first
        # record, batch); it resolves once they all have.
        self.children: list[tuple[int, ProducerBatch]] | None = None
        self.parent: ProducerBatch | None = None
        self.pending_children = 0
        self.attempts = 0
        self.retry_at = -math.inf  # not backing off (any clock reading is after it)
        self.base_sequence = -1
        # The identity the sequence numbers belong to (-1 until sequenced).
        self.producer_id = -1
        self.producer_epoch = -1
        self.encoded: bytes | None = None
        self.in_flight = False
        self.full = False
        self.done = False
        # The size at which the producer's hot path must look at the batch: the
        # batch size (it is then full), or less while the producer wants to poll.
        self.limit = 0
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        # The error of the last attempt that was retried (named by a delivery timeout).
        self.last_error: BaseException | None = None
        self.txn = 0  # the transaction's number (Accumulator.txn_open when created)
        self.callbacks: list[tuple[RecordHandle, Callable[[RecordHandle], Any]]] | None = None
        # Set by the driver to something with ``set()`` (an event) while a task waits.
        self.waker: Any = None

    @property
    def record_count(self) -> int:
        return len(self.records)

    def resolve(self) -> None:
        """Done (completed or failed): wake the waiter, run the callbacks, and
        resolve the parent once its last split half is done. The accumulator's."""
        self.done = True
        if self.waker is not None:
            self.waker.set()
        if self.callbacks:
            callbacks, self.callbacks = self.callbacks, None
            for handle, fn in callbacks:
                _call_back(fn, handle)
        parent = self.parent
        if parent is not None:
            parent.pending_children -= 1
            if parent.pending_children == 0:
                parent.resolve()

    def locate(self, index: int) -> tuple[ProducerBatch, int]:
        """The batch that carried record ``index`` of this one, and its index there."""
        batch = self
        while batch.children is not None:
            for start, child in reversed(batch.children):
                if index >= start:
                    batch, index = child, index - start
                    break
        return batch, index

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.topic}-{self.partition} #{self.seq} records={len(self.records)}>"
        )


def _call_back(fn: Callable[[RecordHandle], Any], handle: RecordHandle) -> None:
    """A record's done callback: what it raises is logged, as
    :mod:`concurrent.futures` does; it must not stop whoever resolved the record
    (a connection's reader, the sender) and with it the producer."""
    try:
        fn(handle)
    except Exception:
        log.exception("a record's done callback %r raised", fn)


class RecordHandle:
    """A future-like result for one record.

    The producer's driver subclass makes it awaitable; here it offers
    :meth:`done`, :meth:`result`, :meth:`exception` and callbacks.
    """

    __slots__ = ("batch", "index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self.batch = batch
        self.index = index

    def done(self) -> bool:
        return self.batch.done

    def exception(self) -> BaseException | None:
        """The failure, or ``None`` if the record was written.

        Raises:
            UsageError: not resolved yet.
        """
        if not self.batch.done:
            raise UsageError("the record is not delivered yet")
        return self.batch.locate(self.index)[0].error

    def result(self) -> RecordMetadata:
        """The record's metadata.

        Raises:
            UsageError: not resolved yet.
            KafkaError (or another TrafkaError): the record failed.
        """
        if not self.batch.done:
            raise UsageError("the record is not delivered yet")
        b, index = self.batch.locate(self.index)
        if b.error is not None:
            raise b.error
        ts, key, value, _ = b.records[index]
        offset = b.base_offset + index if b.base_offset >= 0 else -1
        return RecordMetadata(
            b.topic,
            b.partition,
            offset,
            b.log_append_time if b.log_append_time >= 0 else ts,
            -1 if key is None else len(key),
            -1 if value is None else len(value),
        )

    def add_done_callback(self, fn: Callable[[RecordHandle], Any]) -> None:
        """Call ``fn(handle)`` when resolved (at once if it already is).

        Raises:
            TypeError: ``fn`` is not callable.
        """
        if not callable(fn):
            raise ArgumentTypeError(f"fn must be callable, got {fn!r}")
        b = self.batch
        if b.done:
            _call_back(fn, self)
            return
        if b.callbacks is None:
            b.callbacks = []
        b.callbacks.append((self, fn))


@dataclasses.dataclass(slots=True)
class ReadyCheck:
    """What :meth:`Accumulator.ready` found.

    Attributes:
        nodes: leaders with at least one sendable partition.
        next_check: the earliest time something may become ready (``None``: nothing buffered).
        unknown_leaders: topics with batches whose partition has no known leader.
    """

    nodes: set[int]
    next_check: float | None
    unknown_leaders: set[str]


class _Queue:
    __slots__ = (
        "batches",
        "counters",
        "in_flight",
        "next_seq",
        "producer_epoch",
        "producer_id",
        "reset",
    )

    def __init__(self) -> None:
        self.batches: deque[ProducerBatch] = deque()
        # Records and batches acknowledged, failed and retried (counted per batch).
        self.counters = PartitionCounters()
        self.in_flight = 0
        self.next_seq = 0
        # The identity next_seq counts for; a batch encoded under another starts at 0.
        self.producer_id = -1
        self.producer_epoch = -1
        self.reset = False


class Accumulator:
    """Batches records per partition and decides what to send.

    Args:
        batch_size: ``batch.size`` in bytes.
        linger: ``linger.ms`` in seconds.
        buffer_memory: ``buffer.memory`` in bytes.
        delivery_timeout: ``delivery.timeout.ms`` in seconds.
        retries: how many times a batch may be retried.
        retry_backoff / retry_backoff_max: seconds; the backoff doubles per attempt.
        compression, compression_level: the batches' codec.
        max_request_size: bytes per produce request (a batch over it still goes alone).
        idempotent: assign producer ids and sequence numbers.
        transactional: mark batches transactional (needs ``idempotent``).
        max_in_flight: in-flight batches per partition.
        handle_class: the record handle type to return (drivers subclass it).

    Attributes the driver may set:
        producer_id, producer_epoch: the identity new batches are numbered under
            (-1: none yet; idempotent batches then wait).
        send_allowed: ``(topic, partition, batch.txn) -> bool``; partitions whose
            head batch it refuses are held back (transactions: not yet added
            to the transaction, or the batch is of the transaction begun ahead).
        txn_open: the transaction number stamped on new batches.
        on_failure: ``(batch, exception)``, called for every batch that fails.
        on_retry: ``(batch, exception)``, called for every batch put back for
            another attempt after ``exception``.
    """

    def __init__(
        self,
        *,
        batch_size: int = 16384,
        linger: float = 0.005,
        buffer_memory: int = 32 * 1024 * 1024,
        delivery_timeout: float = 120.0,
        retries: int = _INT32_MAX,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = 1.0,
        compression: Compression | int = Compression.NONE,
        compression_level: int | None = None,
        max_request_size: int = 1024 * 1024,
        idempotent: bool = False,
        transactional: bool = False,
        max_in_flight: int = 5,
        handle_class: type[RecordHandle] = RecordHandle,
        clock: Callable[[], float] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.linger = linger
        self.buffer_memory = buffer_memory
        self.delivery_timeout = delivery_timeout
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.compression = Compression(compression)
        self.compression_level = compression_level
        self.max_request_size = max_request_size
        self.idempotent = idempotent
        self.transactional = transactional
        self.send_allowed: Callable[[str, int, int], bool] | None = None
        self.txn_open = 0
        self.on_failure: Callable[[ProducerBatch, BaseException], Any] | None = None
        self.on_retry: Callable[[ProducerBatch, BaseException], Any] | None = None
        self.partition_in_flight = max_in_flight
        self.handle_class = handle_class
        self.clock = clock
        self.producer_id = -1
        self.producer_epoch = -1
        self.used_memory = 0
        self.memory_waiters = 0
        self.flushing = 0
        self.closing = False
        self._queues: dict[tuple[str, int], _Queue] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._seq = 0
        self._rng = rng or random.Random()

    @property
    def topic_counters(self) -> dict[str, TopicCounters]:
        """Per topic, records and batches acknowledged, failed and retried (the
        sums of its partitions' :meth:`partition_counters`, added up now)."""
        return topic_totals((topic, q.counters) for (topic, _p), q in self._queues.items())

    def partition_counters(self) -> list[tuple[str, int, int, int, PartitionCounters]]:
        """Per partition the producer wrote to: ``(topic, partition, queued
        records, queued bytes, counters)``. Queued means waiting in the
        accumulator to be sent (retries included, in-flight batches not); bytes
        are a batch's encoding once it has one, else its estimated size."""
        out = []
        for (topic, partition), q in self._queues.items():
            records = size = 0
            for b in q.batches:
                records += len(b.records)
                size += len(b.encoded) if b.encoded is not None else b.size
            out.append((topic, partition, records, size, q.counters))
        return out

    def _queue_of(self, batch: ProducerBatch) -> _Queue:
        key = (batch.topic, batch.partition)
        q = self._queues.get(key)
        if q is None:  # pragma: no cover - queues are never removed while batches exist
            q = self._queues[key] = _Queue()
        return q

    # -- appending ---------------------------------------------------------------------

    @property
    def free_memory(self) -> int:
        return self.buffer_memory - self.used_memory

    def append(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        now: float | None = None,
        *,
        abort_on_new_batch: bool = False,
    ) -> RecordHandle | None:
        """Add a record to its partition's open batch (or a new one).

        Args:
            now: the driver's clock; when None, ``clock()`` is read if a batch is created.
            abort_on_new_batch: return ``None`` instead of opening a new batch
                (the sticky partitioner then moves on, KIP-480, and appends again).

        Returns:
            The record's handle, or ``None`` (only with ``abort_on_new_batch``).

        Raises:
            KafkaError: MESSAGE_TOO_LARGE, the record can never fit a request or the buffer.
            BufferFullError: no memory for it now.
            UsageError: the accumulator is closed.
        """
        if self.closing:
            raise UsageError("the producer is closed")
        if headers:
            size = estimate_size(key, value, headers)
        else:  # estimate_size inlined: this is the per-record hot path
            size = RECORD_OVERHEAD
            if key is not None:
                size += len(key)
            if value is not None:
                size += len(value)
        charge = size + RECORD_MEMORY_OVERHEAD
        if size > self.max_request_size - BATCH_OVERHEAD or charge > self.buffer_memory:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"the record is {size} bytes, over max.request.size ({self.max_request_size}) "
                f"or buffer.memory ({self.buffer_memory})",
            )
        q = self._queues.get((topic, partition))
        if q is None:
            q = self._queues[(topic, partition)] = _Queue()
        batches = q.batches
        batch = batches[-1] if batches else None
        if batch is None or batch.full or batch.in_flight or batch.encoded is not None:
            if abort_on_new_batch and batch is not None:
                return None
            batch = None
        elif batch.records and batch.size + size > self.batch_size:
            batch.full = True
            if abort_on_new_batch:
                return None
            batch = None
        if charge > self.buffer_memory - self.used_memory:
            raise BufferFullError(charge)
        if batch is None:
            self._seq += 1
            if now is None:
                # The clock is only read when a batch starts: linger and
                # delivery timeouts count from a batch's creation.
                now = self.clock() if self.clock is not None else 0.0
            batch = ProducerBatch(topic, partition, now, self._seq)
            batch.txn = self.txn_open
            batch.limit = self.batch_size
            batches.append(batch)
            self._incomplete.add(batch)
        self.append_to(batch, timestamp, key, value, size, headers)
        return self.handle_class(batch, len(batch.records) - 1)

    def can_take(self, size: int) -> bool:
        """Whether a record of ``size`` bytes can be appended now, without
        waiting for memory or being refused as too large."""
        return (
            not self.closing
            and size <= self.max_request_size - BATCH_OVERHEAD
            and size + RECORD_MEMORY_OVERHEAD <= self.buffer_memory - self.used_memory
        )

    def append_to(
        self,
        batch: ProducerBatch,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        size: int,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> bool | None:
        """Append a record of ``size`` bytes (``RECORD_OVERHEAD`` included) to
        ``batch``, a batch still open for records, if it has room and
        ``buffer.memory`` allows: the one place a record joins a batch and is
        charged, for the producer's hot path (which keeps no accounting of its
        own) and for :meth:`append` alike. The first record of a batch always
        has room (a record larger than ``batch.size`` gets a batch of its own).

        Returns:
            True: appended (``batch.full`` set once it reached ``batch.size``);
            False: the batch has no room (another must be opened); None: no
            memory for it now, or the producer is closing.
        """
        batch_bytes = batch.size + size
        if batch_bytes > self.batch_size and batch.records:
            return False
        charge = size + RECORD_MEMORY_OVERHEAD
        if charge > self.buffer_memory - self.used_memory or self.closing:
            return None
        self.used_memory += charge
        batch.memory += charge
        batch.size = batch_bytes
        batch.records.append((timestamp, key, value, headers))
        if batch_bytes >= self.batch_size:
            batch.full = True
        return True

    # -- deciding what to send ------------------------------------------------------------

    def has_pending(self, txn: int | None = None) -> bool:
        """Whether any batch (of transaction number ``txn``, if given) is
        buffered or in flight."""
        if txn is None:
            return bool(self._incomplete)
        return any(b.txn == txn for b in self._incomplete)

    def seal(self) -> None:
        """Close every partition's open batch to more records: records appended
        from now on start new batches (of a new transaction number)."""
        for q in self._queues.values():
            if q.batches:
                q.batches[-1].full = True

    def incomplete_batches(self) -> list[ProducerBatch]:
        return list(self._incomplete)

    def ready(self, now: float, leader_of: Callable[[str, int], int | None]) -> ReadyCheck:
        """Find the leaders that have sendable batches, and when to look again."""
        nodes: set[int] = set()
        unknown: set[str] = set()
        next_check: float | None = None
        hurry = self.flushing > 0 or self.closing or self.memory_waiters > 0
        for (topic, partition), q in self._queues.items():
            if not q.batches:
                continue
            at = self._ready_at(topic, partition, q, now, hurry)
            if at is None:
                continue
            leader = leader_of(topic, partition)
            if leader is None:
                unknown.add(topic)
            elif at <= now:
                nodes.add(leader)
            elif next_check is None or at < next_check:
                next_check = at
        return ReadyCheck(nodes, next_check, unknown)

    def node_ready(
        self, now: float, node: int, leader_of: Callable[[str, int], int | None]
    ) -> bool:
        """Whether a partition led by ``node`` has a batch to send now."""
        hurry = self.flushing > 0 or self.closing or self.memory_waiters > 0
        for (topic, partition), q in self._queues.items():
            if not q.batches:
                continue
            at = self._ready_at(topic, partition, q, now, hurry)
            if at is not None and at <= now and leader_of(topic, partition) == node:
                return True
        return False

    def _ready_at(
        self, topic: str, partition: int, q: _Queue, now: float, hurry: bool
    ) -> float | None:
        """When the partition's first batch may leave; None: not for time alone."""
        head = q.batches[0]
        if head.in_flight or q.in_flight >= self.partition_in_flight:
            return None
        if self._held_back(topic, partition, q, head):
            return None
        if head.retry_at > now:
            return head.retry_at
        if hurry or head.full or len(q.batches) > 1 or head.attempts:
            return now
        return head.created + self.linger

    def drain(
        self,
        now: float,
        node: int,
        leader_of: Callable[[str, int], int | None],
        *,
        max_bytes: int | None = None,
    ) -> list[ProducerBatch]:
        """Take the sendable head batch of each partition led by ``node``.

        The batches are encoded (sequence numbers assigned on first drain) and
        marked in flight. The total stays within ``max_request_size`` except
        that one batch always goes.
        """
        limit = self.max_request_size if max_bytes is None else max_bytes
        out: list[ProducerBatch] = []
        total = 0
        items = list(self._queues.items())
        # Start at a random partition so that no partition starves when the
        # request limit cuts the drain short.
        if len(items) > 1:
            start = self._rng.randrange(len(items))
            items = items[start:] + items[:start]
        for (topic, partition), q in items:
            if not q.batches or q.in_flight >= self.partition_in_flight:
                continue
            head = q.batches[0]
            if head.in_flight or head.retry_at > now:
                continue
            if leader_of(topic, partition) != node:
                continue
            if self._held_back(topic, partition, q, head):
                continue
            if q.reset:
                self._apply_reset(q)
            data = head.encoded
            while data is None:
                try:
                    data = self._encode(head, q)
                except Exception as exc:
                    # Records are checked when sent; this is the net under that:
                    # the records that cannot be encoded fail, alone, and the
                    # others of their batch go on (nothing else may stop).
                    if not self._isolate(head, q, exc):
                        break
                    head = q.batches[0]
            if data is None:
                continue
            if out and total + len(data) > limit:
                continue
            total += len(data)
            q.batches.popleft()
            head.in_flight = True
            head.attempts += 1
            q.in_flight += 1
            out.append(head)
        return out

    def _held_back(self, topic: str, partition: int, q: _Queue, head: ProducerBatch) -> bool:
        """Whether the partition must wait for something other than time."""
        gate = self.send_allowed
        if gate is not None and not gate(topic, partition, head.txn):
            return True
        if q.reset or (self.idempotent and head.base_sequence < 0):
            if self.producer_id < 0:
                return True
            same = q.producer_id == self.producer_id and q.producer_epoch == self.producer_epoch
            if q.reset:
                # Renumbering needs a new identity and nothing of the old one in flight.
                return same or q.in_flight > 0
            # Moving to a new identity waits until the old one has nothing in flight.
            return not same and q.in_flight > 0
        return False

    def _apply_reset(self, q: _Queue) -> None:
        # Every queued batch of the partition is known unwritten (the broker
        # refused the oldest one, so it refused the rest): number them afresh.
        q.reset = False
        for b in q.batches:
            b.base_sequence = -1
            b.producer_id = b.producer_epoch = -1
            if b.encoded is not None:
                self.used_memory -= len(b.encoded)
                b.memory -= len(b.encoded)
                b.encoded = None

    def _encode(self, batch: ProducerBatch, q: _Queue) -> bytes:
        batch.full = True  # no more appends once encoded
        # Split halves inherit their sequence numbers from the batch they came from.
        if self.idempotent and self.producer_id >= 0 and batch.base_sequence < 0:
            if q.producer_id != self.producer_id or q.producer_epoch != self.producer_epoch:
                q.producer_id, q.producer_epoch, q.next_seq = (
                    self.producer_id,
                    self.producer_epoch,
                    0,
                )
            batch.base_sequence = q.next_seq
            batch.producer_id = self.producer_id
            batch.producer_epoch = self.producer_epoch
            q.next_seq = (q.next_seq + len(batch.records)) & _INT32_MAX
        sequenced = batch.base_sequence >= 0
        encoded = batch.encoded = encode_batch(
            batch.records,
            compression=self.compression,
            compression_level=self.compression_level,
            producer_id=batch.producer_id if sequenced else -1,
            producer_epoch=batch.producer_epoch if sequenced else -1,
            base_sequence=batch.base_sequence,
            is_transactional=self.transactional and sequenced,
        )
        self.used_memory += len(encoded)
        batch.memory += len(encoded)
        return encoded

    def _isolate(self, batch: ProducerBatch, q: _Queue, error: Exception) -> bool:
        """``batch`` (the head of ``q``, never sent) failed to encode with
        ``error``: fail the records that cannot be encoded on their own, and put
        the others back, in order, as runs of the batch (its children, as
        :meth:`split` makes them). Returns True when a run was put back (it is
        the head of ``q`` now); False when the whole batch failed.
        """
        if batch.base_sequence >= 0 and batch.encoded is None and batch.children is None:
            # Numbered by the failed encoding and never sent: give the numbers back.
            q.next_seq = batch.base_sequence
            batch.base_sequence = batch.producer_id = batch.producer_epoch = -1
        bad: dict[int, Exception] = {}
        for i, record in enumerate(batch.records):
            try:
                encode_batch([record])
            except Exception as exc:
                bad[i] = exc
        log.error(
            "a batch of %s-%s could not be encoded (%d of its %d records alone): %s",
            batch.topic,
            batch.partition,
            len(bad),
            len(batch.records),
            error,
        )
        if not bad or len(bad) == len(batch.records):
            self.fail(batch, _unencodable(batch, bad[0] if bad else error))
            return False
        runs: list[tuple[int, int, Exception | None]] = []  # start, end, error of a bad run
        start = 0
        n = len(batch.records)
        for i in range(1, n + 1):
            if i == n or (i in bad) != (start in bad):
                runs.append((start, i, bad.get(start)))
                start = i
        q.batches.popleft()
        self._incomplete.discard(batch)
        batch.children = []
        for j, (first, end, _) in enumerate(runs):
            child = ProducerBatch(batch.topic, batch.partition, batch.created, batch.seq)
            child.txn = batch.txn
            child.order = (*batch.order, j)
            child.records = batch.records[first:end]
            sizes = [estimate_size(k, v, h) for _, k, v, h in child.records]
            child.size = BATCH_OVERHEAD + sum(sizes)
            child.memory = sum(sizes) + RECORD_MEMORY_OVERHEAD * len(child.records)
            child.full = True
            child.parent = batch
            batch.children.append((first, child))
            self._incomplete.add(child)
        batch.pending_children = len(runs)
        self.used_memory -= batch.memory - sum(c.memory for _, c in batch.children)
        batch.memory = 0
        for (_, child), (_, _, why) in zip(batch.children, runs, strict=True):
            if why is None:
                self._requeue(q, child)
        for (_, child), (_, _, why) in zip(batch.children, runs, strict=True):
            if why is not None:
                self.fail(child, _unencodable(child, why))
        return True

    # -- outcomes --------------------------------------------------------------------------

    def _finish(self, batch: ProducerBatch) -> _Queue:
        q = self._queue_of(batch)
        if batch.in_flight:
            batch.in_flight = False
            q.in_flight -= 1
        else:
            try:
                q.batches.remove(batch)
            except ValueError:
                pass
        self._incomplete.discard(batch)
        self.used_memory -= batch.memory
        batch.memory = 0
        return q

    def complete(
        self,
        batch: ProducerBatch,
        base_offset: int,
        log_append_time: int = -1,
        now: float | None = None,
    ) -> None:
        """The batch was written at ``base_offset`` (-1 when unknown, e.g. acks=0),
        acknowledged at ``now`` (default: ``clock()``; no latency is counted
        without either)."""
        if batch.done:
            return
        counters = self._finish(batch).counters
        counters.records_sent += len(batch.records)
        counters.bytes_sent += len(batch.encoded) if batch.encoded is not None else 0
        counters.batches_sent += 1
        if now is None and self.clock is not None:
            now = self.clock()
        if now is not None:
            counters.latency.add(max(0.0, now - batch.created))
        batch.base_offset = base_offset
        batch.log_append_time = log_append_time
        batch.resolve()

    def fail(self, batch: ProducerBatch, exc: BaseException) -> None:
        """The batch failed for good."""
        if batch.done:
            return
        self._finish(batch).counters.failed(len(batch.records), exc)
        batch.error = exc
        batch.resolve()
        if self.on_failure is not None:
            self.on_failure(batch, exc)

    def retry_or_fail(
        self, batch: ProducerBatch, exc: BaseException, now: float, *, force: bool = False
    ) -> bool:
        """Put an in-flight batch back for another attempt, or fail it.

        It is retried when the error is retriable (or ``force``: e.g. an
        out-of-order sequence caused by an earlier batch's retry), retries
        remain, and the delivery deadline has not passed. Connection errors and
        timeouts (not :class:`KafkaError`) count as retriable.

        Returns:
            True if the batch was requeued, False if it failed.
        """
        retriable = force or not isinstance(exc, KafkaError) or exc.retriable
        expired = now >= batch.created + self.delivery_timeout
        if not retriable or batch.attempts > self.retries or expired:
            if expired and retriable:
                exc = DeliveryTimeoutError(
                    f"{len(batch.records)} records for {batch.topic}-{batch.partition} "
                    f"expired: delivery.timeout.ms passed after {batch.attempts} attempts",
                    exc,
                )
            self.fail(batch, exc)
            return False
        batch.last_error = exc
        q = self._queue_of(batch)
        if batch.in_flight:
            batch.in_flight = False
            q.in_flight -= 1
        counters = q.counters
        counters.batch_retries += 1
        counters.records_retried += len(batch.records)
        backoff = min(self.retry_backoff * (2 ** (batch.attempts - 1)), self.retry_backoff_max)
        batch.retry_at = now + backoff * (0.8 + 0.4 * self._rng.random())
        self._requeue(q, batch)
        if self.on_retry is not None:
            self.on_retry(batch, exc)
        return True

    @staticmethod
    def _requeue(q: _Queue, batch: ProducerBatch) -> None:
        """Back in front of every younger batch of the partition."""
        pos = 0
        for pos, other in enumerate(q.batches):  # noqa: B007
            if other.order > batch.order:
                break
        else:
            pos = len(q.batches)
        q.batches.insert(pos, batch)

    def split(self, batch: ProducerBatch) -> bool:
        """Split an in-flight batch the broker rejected as too large into two halves.

        The halves go back in front of the partition's younger batches, in
        order, without counting an attempt (Java splits the same way). With
        idempotence each half keeps its records' sequence numbers, so younger
        batches stay valid. The batch resolves when both halves have; each
        record's handle reports its own half's outcome.

        Returns:
            False if the batch cannot be split (one record, or already done).
        """
        n = len(batch.records)
        if n < 2 or batch.done or batch.children is not None:
            return False
        q = self._queues.get((batch.topic, batch.partition))
        if q is None:  # pragma: no cover - queues are never removed while batches exist
            return False
        if batch.in_flight:
            batch.in_flight = False
            q.in_flight -= 1
        self._incomplete.discard(batch)
        mid = n // 2
        batch.children = []
        for i, (start, records) in enumerate(
            ((0, batch.records[:mid]), (mid, batch.records[mid:]))
        ):
            child = ProducerBatch(batch.topic, batch.partition, batch.created, batch.seq)
            child.txn = batch.txn
            child.order = (*batch.order, i)
            child.records = records
            sizes = [estimate_size(k, v, h) for _, k, v, h in records]
            child.size = BATCH_OVERHEAD + sum(sizes)
            child.memory = sum(sizes) + RECORD_MEMORY_OVERHEAD * len(records)
            child.full = True
            child.parent = batch
            if batch.base_sequence >= 0:
                child.base_sequence = (batch.base_sequence + start) & _INT32_MAX
                child.producer_id = batch.producer_id
                child.producer_epoch = batch.producer_epoch
            batch.children.append((start, child))
            self._incomplete.add(child)
            self._requeue(q, child)
        batch.pending_children = len(batch.children)
        # The halves hold the records' reservation now; the old encoding is dropped.
        self.used_memory -= batch.memory - sum(c.memory for _, c in batch.children)
        batch.memory = 0
        batch.encoded = None
        return True

    def has_earlier(self, batch: ProducerBatch) -> bool:
        """Whether an older batch of the same partition is still incomplete."""
        return any(
            b.order < batch.order and b.topic == batch.topic and b.partition == batch.partition
            for b in self._incomplete
        )

    def expire(self, now: float) -> list[ProducerBatch]:
        """Fail buffered (not in-flight) batches past ``delivery.timeout.ms``."""
        # Within a partition, queued batches are in creation order, so only the
        # oldest ones need looking at.
        limit = now - self.delivery_timeout
        expired = []
        for q in self._queues.values():
            for b in q.batches:
                if b.created > limit:
                    break
                expired.append(b)
        for b in expired:
            attempts = f" after {b.attempts} attempts" if b.attempts else " unsent"
            self.fail(
                b,
                DeliveryTimeoutError(
                    f"{len(b.records)} records for {b.topic}-{b.partition} expired: "
                    f"delivery.timeout.ms passed{attempts}",
                    b.last_error,
                ),
            )
        return expired

    def next_expiry(self) -> float | None:
        """When the oldest queued batch expires (``None``: nothing queued)."""
        heads = [q.batches[0].created for q in self._queues.values() if q.batches]
        return min(heads) + self.delivery_timeout if heads else None

    def abort(self, exc: BaseException, batches: Iterable[ProducerBatch] | None = None) -> None:
        """Fail batches (default: every incomplete one)."""
        for b in list(self._incomplete if batches is None else batches):
            self.fail(b, exc)

    def abort_undrained(self, exc: BaseException, txn: int | None = None) -> int:
        """Fail every batch that is not in flight (an aborting transaction's),
        or only those of transaction number ``txn``.

        Returns:
            How many batches failed.
        """
        n = 0
        for q in self._queues.values():
            batches = q.batches
            if txn is not None:
                doomed = [b for b in batches if b.txn == txn]
                if not doomed:
                    continue
                q.batches = deque(b for b in batches if b.txn != txn)
                batches = deque(doomed)
            while batches:
                b = batches.popleft()  # queued, so not in flight
                self._incomplete.discard(b)
                self.used_memory -= b.memory
                b.memory = 0
                q.counters.failed(len(b.records), exc)
                b.error = exc
                b.resolve()
                if self.on_failure is not None:
                    self.on_failure(b, exc)
                n += 1
        return n

    def in_flight_count(self) -> int:
        """Batches sent and not answered yet."""
        return sum(q.in_flight for q in self._queues.values())

    def request_sequence_reset(self, batch: ProducerBatch) -> bool:
        """Number the batch's partition afresh (KIP-360): the broker reported a
        sequence gap before ``batch`` (its oldest incomplete one) that retries
        cannot close (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID).

        The partition's queued batches wait until nothing of it is in flight and
        the producer identity differs from the batch's, then get new sequence
        numbers under the new identity.

        Returns:
            True if the identity must change for that (the driver asks for a
            new producer id or epoch); False if it already has.
        """
        q = self._queues.get((batch.topic, batch.partition))
        if q is None:  # pragma: no cover - queues are never removed while batches exist
            return False
        q.reset = True
        return batch.producer_id == self.producer_id and batch.producer_epoch == self.producer_epoch

    def reset_sequences(self) -> None:
        """Forget sequence numbers (a new producer id or epoch starts them at 0)."""
        for q in self._queues.values():
            q.next_seq = 0


def _unencodable(batch: ProducerBatch, error: Exception) -> SerializationError:
    failure = SerializationError(
        f"a record for {batch.topic}-{batch.partition} could not be encoded: {error}"
    )
    failure.__cause__ = error
    return failure


def build_produce_request(
    batches: Sequence[ProducerBatch],
    *,
    acks: int,
    timeout_ms: int,
    transactional_id: str | None = None,
) -> Any:
    """A ProduceRequest carrying ``batches`` (already encoded by :meth:`Accumulator.drain`)."""
    by_topic: dict[str, list[Any]] = {}
    for b in batches:
        by_topic.setdefault(b.topic, []).append(
            produce.ProduceRequest.PartitionProduceData(index=b.partition, records=b.encoded)
        )
    return produce.ProduceRequest(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            produce.ProduceRequest.TopicProduceData(name=t, partition_data=p)
            for t, p in by_topic.items()
        ],
    )


def produce_results(
    batches: Sequence[ProducerBatch], response: Any
) -> list[tuple[ProducerBatch, Any]]:
    """Pair each batch with its PartitionProduceResponse (``None`` if the broker left it out)."""
    found: dict[tuple[str, int], Any] = {}
    for t in response.responses:
        for p in t.partition_responses:
            found[(t.name, p.index)] = p
    return [(b, found.get((b.topic, b.partition))) for b in batches]
