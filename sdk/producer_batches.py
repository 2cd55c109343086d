"""The producer's batches and record handles, without I/O.

A :class:`ProducerBatch` holds the records of one partition sent (and retried)
together; a :class:`RecordHandle` is one record's result. The queues that hold
batches and decide their outcomes are :mod:`.batch_queues`; appending and
draining are the :class:`~trafka.sdk.accumulator.Accumulator`'s.

Rules:

* Sizes: a record counts its estimated encoded size (:func:`estimate_size`,
  ``RECORD_OVERHEAD`` included) toward ``batch.size``, and that plus
  :data:`RECORD_MEMORY_OVERHEAD` (what CPython spends on a buffered record)
  toward ``buffer.memory``; a batch adds :data:`BATCH_OVERHEAD`.
* A batch resolves once: it wakes its waiter, runs its records' callbacks
  (what a callback raises is logged, never passed on), and resolves its parent
  once the parent's last child has. A batch split after MESSAGE_TOO_LARGE, or
  cut into runs around records that do not encode, has *children*
  (:func:`child_batch`): they keep the parent's place in the partition's order
  (:attr:`ProducerBatch.order`) and its transaction, and a record's handle
  reports the child that carried it (:meth:`ProducerBatch.locate`).
* Produce v13+ names topics by id (KIP-516): a request is sent at v13 only when
  every topic in it has an id in the metadata, else at v12
  (:func:`produce_version`); the answer is matched back by the ids sent. A
  transaction of transaction version 1 stays at v11: v12+ adds partitions to the
  transaction implicitly, which is transaction version 2's flow (KIP-890 part
  2; which flow, see :mod:`.transaction_state`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from trafka.codec.messages import k00_produce as produce

from .errors import ArgumentTypeError, SerializationError, UsageError
from .hot_append import BatchBase, HandleBase

__all__ = [
    "BATCH_OVERHEAD",
    "BufferFullError",
    "INT32_MAX",
    "ProducerBatch",
    "RECORD_MEMORY_OVERHEAD",
    "RECORD_OVERHEAD",
    "RecordHandle",
    "RecordMetadata",
    "build_produce_request",
    "child_batch",
    "estimate_size",
    "produce_results",
    "produce_version",
    "unencodable",
]

INT32_MAX = 2**31 - 1

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


class ProducerBatch(BatchBase):
    """Records for one partition, sent (and retried) together.

    Its hot fields (``records``, ``size``, ``memory``, ``limit``, ``full``,
    ``done``) are :class:`~trafka.sdk.hot_append.BatchBase`'s, which the
    per-record path reads without a lookup.
    """

    __slots__ = (
        "attempts",
        "base_offset",
        "base_sequence",
        "callbacks",
        "children",
        "created",
        "encoded",
        "error",
        "in_flight",
        "last_error",
        "leader_epoch",
        "log_append_time",
        "order",
        "parent",
        "partition",
        "pending_children",
        "producer_epoch",
        "producer_id",
        "retry_at",
        "seq",
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
        self.leader_epoch = -1  # the partition's leader epoch at the last send (-1: unknown)
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


class RecordHandle(HandleBase):
    """A future-like result for one record: ``RecordHandle(batch, index)``,
    record ``index`` of ``batch`` (:class:`~trafka.sdk.hot_append.HandleBase`'s
    fields, which the per-record path sets without a Python call).

    The producer's driver subclass makes it awaitable; here it offers
    :meth:`done`, :meth:`result`, :meth:`exception` and callbacks.
    """

    __slots__ = ()

    batch: ProducerBatch

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


def child_batch(
    batch: ProducerBatch,
    index: int,
    records: list[tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
) -> ProducerBatch:
    """Child ``index`` of ``batch`` carrying ``records`` (a run of its own):
    sorted right after it, closed to appends, its memory the records' share."""
    child = ProducerBatch(batch.topic, batch.partition, batch.created, batch.seq)
    child.txn = batch.txn
    child.order = (*batch.order, index)
    child.records = records
    sizes = [estimate_size(k, v, h) for _, k, v, h in records]
    child.size = BATCH_OVERHEAD + sum(sizes)
    child.memory = sum(sizes) + RECORD_MEMORY_OVERHEAD * len(records)
    child.full = True
    child.parent = batch
    return child


def unencodable(batch: ProducerBatch, error: Exception) -> SerializationError:
    """The error of ``batch``'s records that could not be encoded (``error``)."""
    failure = SerializationError(
        f"a record for {batch.topic}-{batch.partition} could not be encoded: {error}"
    )
    failure.__cause__ = error
    return failure


# The first Produce version naming topics by id (KIP-516), and the last one a
# transaction of transaction version 1 may use (v12+ adds partitions implicitly).
PRODUCE_TOPIC_ID_VERSION = 13
PRODUCE_TXN_V1_MAX = 11


def produce_version(
    negotiated: int,
    topics: Iterable[str],
    topic_id: Callable[[str], uuid.UUID | None],
    *,
    transactional: bool,
) -> int:
    """The Produce version for a request to ``topics``: ``negotiated``, at most
    v11 in a transaction of transaction version 1 (``transactional``), and v12 instead of v13+ when a topic's id is unknown
    (metadata older than v10, or a broker that has none)."""
    if transactional:
        return min(negotiated, PRODUCE_TXN_V1_MAX)
    if negotiated >= PRODUCE_TOPIC_ID_VERSION and any(topic_id(t) is None for t in topics):
        return PRODUCE_TOPIC_ID_VERSION - 1
    return negotiated


def build_produce_request(
    batches: Sequence[ProducerBatch],
    *,
    acks: int,
    timeout_ms: int,
    transactional_id: str | None = None,
    topic_ids: dict[str, uuid.UUID] | None = None,
) -> Any:
    """A ProduceRequest carrying ``batches`` (already encoded by :meth:`Accumulator.drain`);
    with ``topic_ids`` (v13+) the topics are named by id, not by name."""
    by_topic: dict[str, list[Any]] = {}
    for b in batches:
        by_topic.setdefault(b.topic, []).append(
            produce.ProduceRequest.PartitionProduceData(index=b.partition, records=b.encoded)
        )
    topic_data = produce.ProduceRequest.TopicProduceData
    return produce.ProduceRequest(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            topic_data(name=t, partition_data=p)
            if topic_ids is None
            else topic_data(topic_id=topic_ids[t], partition_data=p)
            for t, p in by_topic.items()
        ],
    )


def produce_results(
    batches: Sequence[ProducerBatch], response: Any, topic_ids: dict[str, uuid.UUID] | None = None
) -> list[tuple[ProducerBatch, Any]]:
    """Pair each batch with its PartitionProduceResponse (``None`` if the broker
    left it out); ``topic_ids``: the ids the request named its topics by (v13+)."""
    names = {i: t for t, i in topic_ids.items()} if topic_ids is not None else None
    found: dict[tuple[str, int], Any] = {}
    for t in response.responses:
        name = t.name if names is None else names.get(t.topic_id)
        if name is None:
            continue
        for p in t.partition_responses:
            found[(name, p.index)] = p
    return [(b, found.get((b.topic, b.partition))) for b in batches]


def delivery_reporter(
    on_delivery: Callable[[BaseException | None, Any], Any] | None, only_error: bool
) -> Callable[[BaseException | None, Any], Any] | None:
    """The delivery callback a producer calls for its records: the given one,
    or, with librdkafka's ``delivery.report.only.error``, one that passes on
    the failures only."""
    if on_delivery is None or not only_error:
        return on_delivery
    report = on_delivery

    def failures_only(error: BaseException | None, metadata: Any) -> None:
        if error is not None:
            report(error, metadata)

    return failures_only


def report_delivery(report: Callable[[BaseException | None, Any], Any], future: Any) -> None:
    """``report(error, metadata)`` for one record's outcome, as either producer's
    delivery callbacks are called (its future done: ``exception()``, ``result()``);
    what it raises is logged."""
    error = future.exception()
    try:
        report(error, None if error is not None else future.result())
    except Exception:
        log.exception("on_delivery raised")
