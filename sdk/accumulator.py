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

The accumulator is three modules: this one (appending, and deciding what to
send: ready partitions, drain, encoding), :mod:`.batch_queues` (the
per-partition queues, the memory they hold, and outcomes: complete, fail,
retry, split, expire, abort) and :mod:`.producer_batches` (the batch, the
record handle, sizes, and the Produce request); every name stays importable
from here.

``now`` is the driver's monotonic clock in seconds; timestamps in records are
wall-clock milliseconds supplied by the caller.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from collections.abc import Callable, Sequence

from trafka.codec import ErrorCode, KafkaError
from trafka.codec.compression import Compression
from trafka.codec.records import encode_batch

from .batch_queues import BatchQueues, PartitionQueue
from .errors import UsageError
from .producer_batches import (
    BATCH_OVERHEAD,
    INT32_MAX,
    RECORD_MEMORY_OVERHEAD,
    RECORD_OVERHEAD,
    BufferFullError,
    ProducerBatch,
    RecordHandle,
    RecordMetadata,
    build_produce_request,
    child_batch,
    estimate_size,
    produce_results,
    produce_version,
    unencodable,
)

__all__ = [
    "Accumulator",
    "BATCH_OVERHEAD",
    "BufferFullError",
    "ProducerBatch",
    "RECORD_MEMORY_OVERHEAD",
    "RECORD_OVERHEAD",
    "RecordHandle",
    "RecordMetadata",
    "ReadyCheck",
    "build_produce_request",
    "estimate_size",
    "produce_results",
    "produce_version",
]

log = logging.getLogger("trafka.sdk.producer")


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


def backing_off(
    head: ProducerBatch, now: float, epoch_of: Callable[[str, int], int] | None
) -> bool:
    """Whether a retried batch still waits out its backoff. Not once its partition
    has a newer leader epoch (``epoch_of``) than the batch was sent under (a KIP-951
    hint or a refresh moved it): it goes to that leader at once, as Java's
    ``RecordAccumulator.shouldBackoff``."""
    if head.retry_at <= now:
        return False
    if epoch_of is not None and 0 <= head.leader_epoch < epoch_of(head.topic, head.partition):
        head.retry_at = -math.inf
        return False
    return True


class Accumulator(BatchQueues):
    """Batches records per partition and decides what to send: the queues
    (:class:`~trafka.sdk.batch_queues.BatchQueues`) and the decisions are one state.

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
        epoch_of: ``(topic, partition) -> leader epoch`` (-1: unknown): see
            :func:`backing_off`.
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
        retries: int = INT32_MAX,
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
        super().__init__(
            delivery_timeout=delivery_timeout,
            retries=retries,
            retry_backoff=retry_backoff,
            retry_backoff_max=retry_backoff_max,
            clock=clock,
            rng=rng,
        )
        self.batch_size = batch_size
        self.linger = linger
        self.buffer_memory = buffer_memory
        self.compression = Compression(compression)
        self.compression_level = compression_level
        self.max_request_size = max_request_size
        self.idempotent = idempotent
        self.transactional = transactional
        self.send_allowed: Callable[[str, int, int], bool] | None = None
        self.epoch_of: Callable[[str, int], int] | None = None
        self.txn_open = 0
        self.partition_in_flight = max_in_flight
        self.handle_class = handle_class
        #: librdkafka's bounds in records (0: none): ``batch.num.messages`` and
        #: ``queue.buffering.max.messages`` (beyond it a record waits for room).
        self.batch_records = 0
        self.max_records = 0
        self.memory_waiters = 0
        self.flushing = 0
        self.closing = False
        self._seq = 0

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
            q = self._queues[(topic, partition)] = PartitionQueue()
        batches = q.batches
        batch = batches[-1] if batches else None
        if batch is None or batch.full or batch.in_flight or batch.encoded is not None:
            if abort_on_new_batch and batch is not None:
                return None
            batch = None
        elif batch.records and (
            batch.size + size > self.batch_size
            or (self.batch_records and len(batch.records) >= self.batch_records)
        ):
            batch.full = True
            if abort_on_new_batch:
                return None
            batch = None
        if charge > self.buffer_memory - self.used_memory or (
            self.max_records and self.records_full()
        ):
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
            and not (self.max_records and self.records_full())
        )

    def records_full(self) -> bool:
        """Whether the buffer holds ``max_records`` records (waiting to be sent
        or for their acknowledgement), when that bound is set."""
        return sum(len(batch.records) for batch in self._incomplete) >= self.max_records

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
        if self.batch_records or self.max_records:
            if self.batch_records and len(batch.records) >= self.batch_records:
                batch.full = True
                return False
            if self.max_records and self.records_full():
                return None
        self.used_memory += charge
        batch.memory += charge
        batch.size = batch_bytes
        batch.records.append((timestamp, key, value, headers))
        if batch_bytes >= self.batch_size:
            batch.full = True
        elif self.batch_records and len(batch.records) >= self.batch_records:
            batch.full = True
            batch.limit = 0  # the hot paths look at a batch reaching its limit
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
        self, topic: str, partition: int, q: PartitionQueue, now: float, hurry: bool
    ) -> float | None:
        """When the partition's first batch may leave; None: not for time alone."""
        head = q.batches[0]
        if head.in_flight or q.in_flight >= self.partition_in_flight:
            return None
        if self._held_back(topic, partition, q, head):
            return None
        if backing_off(head, now, self.epoch_of):
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
            if head.in_flight or backing_off(head, now, self.epoch_of):
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
            if self.epoch_of is not None:
                head.leader_epoch = self.epoch_of(topic, partition)
            head.in_flight = True
            head.attempts += 1
            q.in_flight += 1
            out.append(head)
        return out

    def _held_back(
        self, topic: str, partition: int, q: PartitionQueue, head: ProducerBatch
    ) -> bool:
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

    def _apply_reset(self, q: PartitionQueue) -> None:
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

    def _encode(self, batch: ProducerBatch, q: PartitionQueue) -> bytes:
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
            q.next_seq = (q.next_seq + len(batch.records)) & INT32_MAX
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

    def _isolate(self, batch: ProducerBatch, q: PartitionQueue, error: Exception) -> bool:
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
            self.fail(batch, unencodable(batch, bad[0] if bad else error))
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
            child = child_batch(batch, j, batch.records[first:end])
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
                self.fail(child, unencodable(child, why))
        return True
