"""The producer's per-partition queues of batches and their outcomes, without I/O.

:class:`BatchQueues` is the part of the
:class:`~trafka.sdk.accumulator.Accumulator` that holds what was appended: a
:class:`PartitionQueue` of batches per partition (in creation order, the
batches in flight counted), the incomplete batches, the memory they hold, and
what a batch's outcome does to them. The accumulator adds appending and
deciding what to send.

Rules:

* A batch leaves its queue when drained (in flight) and comes back in front
  of every younger batch of its partition when retried or split
  (:meth:`BatchQueues.retry_or_fail`, :meth:`BatchQueues.split`); a split's halves keep their records'
  sequence numbers.
* A closing producer fails a batch with its "closed" error only if the batch
  was never sent; one that was may be written, and fails with an error that
  says so (:meth:`BatchQueues.abort_closing`).
* Every batch resolves exactly once (:meth:`BatchQueues.complete`,
  :meth:`BatchQueues.fail`), giving its memory back; a failure is reported to
  ``on_failure``, a retry to ``on_retry``.
* A batch is retried while its error is retriable (connection errors and
  timeouts are), retries remain, and ``delivery.timeout.ms`` has not passed
  since it was created; the backoff doubles per attempt up to
  ``retry.backoff.max.ms``, with +-20% jitter. A batch failed at its deadline
  carries the error of its last retried attempt.
* Counters move once per batch outcome, never per record.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from trafka.codec import KafkaError

from .errors import DeliveryTimeoutError
from .hot_append import AccumulatorBase
from .producer_batches import INT32_MAX, ProducerBatch, child_batch
from .statistics.counters import PartitionCounters, TopicCounters, topic_totals

__all__ = ["BatchQueues", "PartitionQueue"]


class PartitionQueue:
    """One partition's queued batches, its in-flight count and sequence numbers."""

    __slots__ = (
        "acked",
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
        # The identity of the latest batch acknowledged with sequence numbers, and
        # its place in the partition's order (ProducerBatch.order).
        self.acked: tuple[int, int, tuple[int, ...]] = (-1, -1, ())


class BatchQueues(AccumulatorBase):
    """The batches of every partition and their outcomes (see the module doc).

    Args:
        delivery_timeout: ``delivery.timeout.ms`` in seconds.
        retries: how many times a batch may be retried.
        retry_backoff / retry_backoff_max: seconds; the backoff doubles per attempt.
        clock: the driver's clock, read when no ``now`` is given.
        rng: the jitter's random numbers.

    Attributes the driver may set:
        producer_id, producer_epoch: the identity new batches are numbered under.
        on_failure: ``(batch, exception)``, called for every batch that fails.
        on_retry: ``(batch, exception)``, called for every batch put back for
            another attempt after ``exception``.
    """

    def __init__(
        self,
        *,
        delivery_timeout: float,
        retries: int,
        retry_backoff: float,
        retry_backoff_max: float,
        clock: Callable[[], float] | None,
        rng: random.Random | None,
    ) -> None:
        self.delivery_timeout = delivery_timeout
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.clock = clock
        self.on_failure: Callable[[ProducerBatch, BaseException], Any] | None = None
        self.on_retry: Callable[[ProducerBatch, BaseException], Any] | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.used_memory = 0
        self._queues: dict[tuple[str, int], PartitionQueue] = {}
        self._incomplete: set[ProducerBatch] = set()
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

    def _queue_of(self, batch: ProducerBatch) -> PartitionQueue:
        key = (batch.topic, batch.partition)
        q = self._queues.get(key)
        if q is None:  # pragma: no cover - queues are never removed while batches exist
            q = self._queues[key] = PartitionQueue()
        return q

    # -- outcomes --------------------------------------------------------------------------

    def _finish(self, batch: ProducerBatch) -> PartitionQueue:
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
        q = self._finish(batch)
        if batch.base_sequence >= 0:
            pid, epoch, order = q.acked
            if (pid, epoch) != (batch.producer_id, batch.producer_epoch) or batch.order > order:
                q.acked = (batch.producer_id, batch.producer_epoch, batch.order)
        counters = q.counters
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
    def _requeue(q: PartitionQueue, batch: ProducerBatch) -> None:
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
            child = child_batch(batch, i, records)
            if batch.base_sequence >= 0:
                child.base_sequence = (batch.base_sequence + start) & INT32_MAX
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

    def fail_overtaken(self, batch: ProducerBatch, error: KafkaError) -> bool:
        """Fail ``batch``, refused for a sequence gap, if records numbered after
        it under the same identity are already acknowledged: a broker with no
        state for the producer took them first (Kafka accepts any first
        sequence then), and sending ``batch`` again, renumbered, would put its
        records after them. Java's producer never writes it either: it is not
        the next sequence, so it is retried until delivery.timeout.ms fails it
        (TransactionManager.canRetry); this fails it at once. Returns whether it
        failed."""
        q = self._queues.get((batch.topic, batch.partition))
        if q is None or q.acked[:2] != (batch.producer_id, batch.producer_epoch):
            return False
        if q.acked[2] < batch.order:
            return False
        self.fail(
            batch,
            KafkaError(
                error.code,
                f"{batch.topic}-{batch.partition}: records sent after these are already "
                "in the log; sent again they would follow them, out of order",
            ),
        )
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

    def abort_closing(self, unsent: BaseException, sent: BaseException) -> None:
        """Fail every incomplete batch as its producer closes: with ``unsent``
        when none of its records ever left (so none can be in the log), with
        ``sent`` when a request carrying them was written (in flight, or put
        back for a retry after an attempt whose outcome may be a write)."""
        for b in list(self._incomplete):
            self.fail(b, sent if b.in_flight or b.attempts else unsent)

    def abort_undrained(
        self, exc: BaseException, txn: int | None = None, *, purge: bool = False
    ) -> int:
        """Fail every batch that is not in flight (an aborting transaction's),
        or only those of transaction number ``txn``; a ``purge`` spares those a
        request carried (put back for a retry: they may be in the log).

        Returns:
            How many batches failed.
        """
        n = 0
        for q in self._queues.values():
            doomed = [b for b in q.batches if txn in (None, b.txn) and not (purge and b.attempts)]
            gone = {id(b) for b in doomed}
            q.batches = deque(b for b in q.batches if id(b) not in gone)
            for b in doomed:  # queued, so not in flight
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
