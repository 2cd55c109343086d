"""The producer: an anyio driver around :mod:`.accumulator` and :mod:`.transport`.

Rules:

* :func:`open_producer` owns every task it starts (sender, connection readers,
  metadata refresher); leaving the block flushes buffered records and then
  cancels them. Leaving it with an exception (or cancellation) does not wait:
  unsent records fail with :class:`~trafka.sdk.errors.ClientClosedError`.
  Errors leave as themselves, never as an ExceptionGroup.
* :meth:`Producer.send` only blocks when it must: for the first metadata of a
  topic, or for ``buffer.memory`` to free up (both bounded by
  ``max.block.ms``). Otherwise it yields to the scheduler once per new batch
  (a checkpoint), so that the sender runs while a tight loop of sends goes on;
  before that, when no Produce is in flight (once the answers already received
  are taken), it sends the batches that are ready itself.
  Its result is a :class:`RecordFuture`, awaitable for the
  :class:`~trafka.sdk.accumulator.RecordMetadata`. A key-less bytes record
  whose topic's sticky batch (KIP-480) has room is appended to it directly
  (the hot path); everything else takes the general path.
* One sender task decides what to send (the accumulator's ready check) and
  drains per broker, writing each Produce request at once
  (:meth:`~trafka.sdk.transport.BrokerConnection.send`), at most
  ``max.in.flight.requests.per.connection`` per broker. The response comes
  back to a completion called by the connection's reader: no task per request.
  Response handling (retries, metadata refresh, resolution) is in the
  accumulator's terms. A broker that throttles the connection for a quota
  (KIP-219) gets no Produce until the throttle time has passed, as with Java's
  producer: its batches stay in the accumulator (growing, within
  ``delivery.timeout.ms``) and the sender wakes when the time is up.
* The producer id, epoch and transactions are the
  :class:`~trafka.sdk.transactions.TransactionManager`'s decisions: the
  producer asks it for its next request (one at a time: written through a
  completion on a live coordinator connection, else in a task that connects
  first) when the sender runs, when ``send()`` adds a partition to the
  transaction, and when a request or the last batch completes; it drains no
  idempotent batch before it has a producer id. Idempotent producers
  get their id lazily (with the first batch); transactional ones in
  :meth:`Producer.init_transactions`.
* Idempotence across errors (KIP-360): OUT_OF_ORDER_SEQUENCE_NUMBER or
  UNKNOWN_PRODUCER_ID for a partition's oldest incomplete batch means a gap
  that retries cannot close; the partition is renumbered under a new producer
  id/epoch and its batches resent, so nothing is lost, duplicated or reordered.
  For a younger batch the error is the echo of an older batch's retry, and it
  is simply retried behind it. In a transaction the same errors doom the
  transaction instead (its abort is followed by an epoch bump).
* Retries are told as they happen: the error a batch is retried after is
  logged (WARNING, ``trafka.sdk.producer``) at its first occurrence and then at
  most once per kind of error and half minute, with a count of those held back
  (:class:`~trafka.common.lograte.RateLimitedLog`), so a cause retried until ``delivery.timeout.ms``
  (NOT_ENOUGH_REPLICAS...) is known at once; the
  :class:`~trafka.sdk.errors.DeliveryTimeoutError` the records finally fail
  with carries it as ``last_error``.
* Transaction calls wait at most ``max.block.ms``
  (:class:`~trafka.sdk.errors.ProducerBlockedError`); the operation goes on
  and calling it again waits for the same outcome.
  :meth:`Producer.transaction` aborts on any exception or cancellation, under a
  shielded cancel scope bounded by ``max.block.ms``. When the cancellation
  also stops the producer's own tasks (a scope around :func:`open_producer`),
  nothing can be sent any more: transaction calls fail at once with
  :class:`~trafka.sdk.errors.ClientClosedError` and the open transaction is
  left to the coordinator, which aborts it on ``transaction.timeout.ms`` or
  when the next producer with the same ``transactional.id`` initializes.
"""

from __future__ import annotations

import logging
import math
import select
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from trafka.codec import ErrorCode, KafkaError, TrafkaError, UnsupportedVersionError
from trafka.common.lograte import RateLimitedLog

from ._util import (
    Serializer,
    get_serializer,
    loop_clock,
    owned_task_group,
    serve_metrics_if_asked,
)
from ._validate import (
    check_bool,
    check_committed_offset,
    check_headers,
    check_offsets,
    check_partition,
    check_str,
    check_timestamp_ms,
    check_topic,
    describe,
)
from .accumulator import (
    BATCH_OVERHEAD,
    RECORD_MEMORY_OVERHEAD,
    RECORD_OVERHEAD,
    Accumulator,
    BufferFullError,
    ProducerBatch,
    RecordHandle,
    RecordMetadata,
    build_produce_request,
    produce_results,
)
from .config import ProducerConfig, make_config
from .errors import (
    ArgumentTypeError,
    ClientClosedError,
    InvalidTxnStateError,
    ProducerBlockedError,
    SerializationError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from .fetcher import TopicPartition
from .hosting import Hostable
from .metadata import REFRESH_ERRORS
from .partitioners import PARTITIONERS, Partitioner, murmur2_pick
from .statistics import (
    Interval,
    ProducerStatistics,
    producer_partition_statistics,
    topic_statistics,
)
from .telemetry import (
    IntervalAverages,
    MetricSample,
    client_telemetry,
    instance_id,
    producer_samples,
)
from .transactions import (
    ConsumerGroupMetadata,
    Kind,
    TransactionManager,
    TxnRequest,
    TxnResult,
    TxnState,
)
from .transport import BrokerConnection, Cluster, is_coordinator_id

__all__ = ["PendingCommit", "Producer", "RecordFuture", "RecordMetadata", "open_producer"]

# A transaction begun ahead of a commit polls for the commit's answers every
# this many records appended (see Producer._window_poll), a power of two. An
# empty poll is one poll(2) call; answers taken sooner shorten the commit's chain
# of round trips, which the next commit may have to wait for: 16 measured less
# CPU per transaction than 64, 32 or 8.
_WINDOW_RECORDS = 16
_SEQUENCE_GAP = (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID)

log = logging.getLogger("trafka.sdk.producer")


def _transaction_offsets(
    offsets: Any, group_metadata: Any
) -> tuple[dict[TopicPartition, int], ConsumerGroupMetadata]:
    """``send_offsets_to_transaction``'s arguments, checked (pure: the blocking
    producer checks them in the caller's thread too)."""
    clean = check_offsets("offsets", offsets, check_value=check_committed_offset)
    if isinstance(group_metadata, ConsumerGroupMetadata):
        return clean, group_metadata
    if not isinstance(group_metadata, str):
        raise ArgumentTypeError(
            "group_metadata must be a ConsumerGroupMetadata (consumer.group_metadata()) "
            f"or a group id, got {describe(group_metadata)}"
        )
    return clean, ConsumerGroupMetadata(check_str("group_metadata", group_metadata))


def _serialized(what: str, serializer: Serializer, value: Any) -> bytes | None:
    """``serializer(value)``; its SerializationError names ``what`` (key or value)."""
    try:
        return serializer(value)
    except SerializationError as exc:
        raise SerializationError(f"{what}: {exc}") from exc.__cause__


class RecordFuture(RecordHandle):
    """The result of :meth:`Producer.send`: await it for the record's metadata.

    ``await future`` returns a :class:`RecordMetadata` or raises the delivery
    error. :meth:`done`, :meth:`result`, :meth:`exception` and
    :meth:`add_done_callback` work without awaiting.
    """

    __slots__ = ()

    def __await__(self) -> Any:
        return self._wait().__await__()

    async def _wait(self) -> RecordMetadata:
        batch = self.batch
        if not batch.done:
            if batch.waker is None:
                batch.waker = anyio.Event()
            await batch.waker.wait()
        return self.result()


async def _wait_batch(batch: ProducerBatch) -> None:
    if not batch.done:
        if batch.waker is None:
            batch.waker = anyio.Event()
        await batch.waker.wait()


class PendingCommit:
    """A commit started with ``commit_transaction(wait=False)``.

    Its failure also dooms the transaction begun after it: that transaction's
    records and offsets fail, and it must be aborted.
    """

    __slots__ = ("_producer", "_result")

    def __init__(self, producer: Producer, result: TxnResult) -> None:
        self._producer = producer
        self._result = result

    def done(self) -> bool:
        """Whether the commit has completed (or failed)."""
        return self._result.done

    def result(self) -> None:
        """Raise the commit's failure, if it failed.

        Raises:
            InvalidTxnStateError: not completed yet.
            TransactionAbortableError, ProducerFencedError, TransactionFatalError.
        """
        self._result.result()

    async def wait(self) -> None:
        """Wait for the commit (up to ``max.block.ms``), then :meth:`result`.

        Raises:
            ProducerBlockedError: not done within ``max.block.ms``; it goes on.
        """
        await self._producer._wait_txn(self._result)

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self._result.error else "done")
        return f"<PendingCommit {state}>"


class _ProduceCompletion:
    """The outcome of one Produce request, called back by the connection's reader."""

    __slots__ = ("batches", "node_id", "producer")

    def __init__(self, producer: Producer, node_id: int, batches: list[ProducerBatch]) -> None:
        self.producer = producer
        self.node_id = node_id
        self.batches = batches

    def resolve(self, response: Any) -> None:
        producer = self.producer
        try:
            if response is None:  # acks=0
                now = producer._now()
                for b in self.batches:
                    producer._acc.complete(b, -1, now=now)
            else:
                producer._on_produce_response(self.batches, response)
        finally:
            producer._produce_done(self.node_id)

    def fail(self, error: BaseException) -> None:
        producer = self.producer
        try:
            producer._produce_failed(self.batches, error)
        finally:
            producer._produce_done(self.node_id)


class _TxnCompletion:
    """The outcome of one transaction manager request written without a task."""

    __slots__ = ("producer", "request", "version")

    def __init__(self, producer: Producer, request: TxnRequest) -> None:
        self.producer = producer
        self.request = request
        self.version = 0

    def resolve(self, body: Any) -> None:
        producer = self.producer
        try:
            producer._txn.on_response(self.request, self.version, body, producer._now())
        finally:
            producer._txn_done()

    def fail(self, error: BaseException) -> None:
        producer = self.producer
        try:
            producer._txn_failed(self.request, error)
        finally:
            producer._txn_done()


def error_kind(exc: BaseException) -> str:
    """What retries of one cause share, for the rate-limited retry log: a Kafka
    error code's name (``"NOT_ENOUGH_REPLICAS"``), else the exception's class."""
    if isinstance(exc, KafkaError):
        if exc.code.value != exc.raw_code:  # a code this codec does not know
            return f"error {exc.raw_code}"
        return exc.code.name
    return type(exc).__name__


class Producer(Hostable):
    """A Kafka producer. Create it with :func:`open_producer`."""

    def __init__(self, config: ProducerConfig, task_group: anyio.abc.TaskGroup) -> None:
        self.config = config
        self._tg = task_group
        self._now = loop_clock()  # anyio.current_time, without its backend lookup
        self._cluster = Cluster(config, task_group)
        # The sockets this producer's answers arrive on, by file descriptor, for
        # one readiness check per poll of the answers (a failing recv costs about
        # three times as much, per socket); None with TLS, whose decrypted bytes
        # the check cannot see, and where the system has no poll().
        self._poller: Any = None
        if not self._cluster.uses_tls and hasattr(select, "poll"):
            self._poller = select.poll()
        self._watched: dict[int, BrokerConnection] = {}
        self._cluster.on_change.append(self._wake_sender)
        self._acc = Accumulator(
            batch_size=config.batch_size,
            linger=config.linger_ms / 1000,
            buffer_memory=config.buffer_memory,
            delivery_timeout=config.delivery_timeout_ms / 1000,
            retries=config.retries,
            retry_backoff=config.retry_backoff_ms / 1000,
            retry_backoff_max=config.retry_backoff_max_ms / 1000,
            compression=["none", "gzip", "snappy", "lz4", "zstd"].index(config.compression_type),
            compression_level=config.compression_level,
            max_request_size=config.max_request_size,
            idempotent=config.idempotent,
            transactional=config.transactional_id is not None,
            max_in_flight=config.max_in_flight_requests_per_connection,
            handle_class=RecordFuture,
            clock=self._now,
        )
        self._partitioner = Partitioner(config.partitioner)
        self._sticky = self._partitioner.sticky
        # Some partitioners never look at availability; skip computing it.
        info = PARTITIONERS.get(self._partitioner.name)
        self._partitioner_needs_available = info is None or info.uses_availability
        self._key_ser = get_serializer(config.key_serializer)
        self._value_ser = get_serializer(config.value_serializer)
        self._raw_keys = config.key_serializer == "bytes"
        self._raw_values = config.value_serializer == "bytes"
        self._wake = anyio.Event()
        self._memory = anyio.Event()
        self._node_in_flight: dict[int, int] = {}
        # The earliest end of a broker's quota throttle that kept batches back.
        self._throttle_wake = math.inf
        self._closed = False
        self._fatal: BaseException | None = None
        self._transactional = config.transactional_id is not None
        self._txn = TransactionManager(
            config.transactional_id,
            transaction_timeout_ms=config.transaction_timeout_ms,
            request_timeout=config.request_timeout_ms / 1000,
            retry_backoff=config.retry_backoff_ms / 1000,
            retry_backoff_max=config.retry_backoff_max_ms / 1000,
        )
        self._txn_busy = False  # a transaction manager request is out
        self._sender_done = False
        # The errors batches are retried after, told as they happen (rate-limited).
        self._retry_log = RateLimitedLog(log, interval=30.0, clock=self._now)
        self._acc.on_retry = self._on_batch_retry
        if self._transactional:
            self._txn.on_unsendable = self._forget_hot_batches
            self._acc.send_allowed = self._txn.is_send_allowed
            self._acc.on_failure = self._on_batch_failed
        # The hot path of send(): a key-less bytes record appended straight to the
        # batch its topic's sticky partition is filling (KIP-480: every key-less
        # record goes there until the batch is done), a keyed one to its murmur2
        # partition's. None when it may not be
        # used: other serializers, or limits that the batch bound does not
        # already imply.
        self._sticky_batches: dict[str, ProducerBatch] = {}
        # A transaction is (or was, until the next check) begun ahead of a commit.
        self._window = False
        # Until when a batch opened in that window may skip send()'s yield.
        self._yield_by = -math.inf
        fits = config.batch_size + RECORD_MEMORY_OVERHEAD <= min(
            config.max_request_size - BATCH_OVERHEAD, config.buffer_memory
        )
        self._hot_path = self._sticky and self._raw_values and fits
        # Keyed bytes records too, when the partition is Java's murmur2 of the key:
        # per topic, the batch each partition is filling, indexed by partition (the
        # list's length is the topic's partition count; the metadata drops the list
        # when that count changes).
        self._keyed_batches: dict[str, list[ProducerBatch | None]] = {}
        self._cluster.metadata.resize_listeners.append(self._forget_keyed_batches)
        self._hot_keyed = (
            self._hot_path
            and self._raw_keys
            and isinstance(config.partitioner, str)  # not a callable named murmur2
            and self._partitioner.name == "murmur2"
        )
        # KIP-714 client metrics: the time batches wait in the accumulator
        # (measured per Produce request, never per record) and the push's task.
        self._queue_time = Interval()
        self._telemetry_averages = IntervalAverages()
        txn_id = config.transactional_id
        self._telemetry = client_telemetry(
            config,
            self._cluster,
            {} if txn_id is None else {"transactional_id": txn_id},
            self._telemetry_samples,
        )

    # -- public API ---------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        partition: int | None = None,
        headers: Sequence[tuple[str, Any]] | Mapping[str, Any] | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordFuture:
        """Buffer a record for sending.

        Args:
            topic: the topic.
            value, key: serialized with the configured serializers.
            partition: an explicit partition; default: the partitioner's choice.
            headers: ``(str, bytes | str | None)`` pairs or a mapping.
            timestamp_ms: the record's timestamp; default now.

        Returns:
            A :class:`RecordFuture` (await it for the :class:`RecordMetadata`).

        Raises:
            TypeError, ValueError: an argument of the wrong type or out of
                range (a topic name Kafka cannot have, a negative partition or
                timestamp, headers that are not pairs...); the message names
                it. Nothing was buffered.
            ClientClosedError: the producer is closed.
            SerializationError: the key or value could not be serialized (the
                message starts with ``key:`` or ``value:``).
            ProducerBlockedError: no metadata or buffer space within ``max.block.ms``.
            KafkaError: the topic does not exist, the partition is not one of
                its partitions, or the record is too large.
        """
        if (
            type(value) is bytes
            and type(topic) is str
            and partition is None
            and headers is None
            and timestamp_ms is None
            and self._hot_path
            and not self._closed
            and self._fatal is None
        ):
            # The common case in a tight loop; anything unusual takes the general
            # path below. A topic with a batch here passed the checks below when
            # that batch was opened; any other topic gets no batch here.
            batch = self._append_hot(topic, value, key)
            if batch is not True and batch is not False:
                size = batch.size
                if size >= batch.limit:  # full, or a window poll is due
                    self._limit_reached(batch, size)
                return RecordFuture(batch, len(batch.records) - 1)
        record = self._prepare(topic, value, key, partition, headers, timestamp_ms)
        if self._closed or self._fatal is not None:
            raise self._fatal or ClientClosedError("the producer is closed")
        return await self._send_prepared(*record)

    def _prepare(
        self,
        topic: Any,
        value: Any,
        key: Any,
        partition: Any,
        headers: Any,
        timestamp_ms: Any,
    ) -> tuple[
        str, bytes | None, bytes | None, int | None, Sequence[tuple[str, bytes | None]], int | None
    ]:
        """:meth:`send`'s arguments checked and serialized: ``(topic, value
        bytes, key bytes, partition, headers, timestamp_ms)``. Pure: the
        blocking producer calls it in the caller's thread, so that misuse is
        raised there, at the call, and never reaches the loop.

        Raises:
            TypeError, ValueError: an argument of the wrong type or out of range
                (the message names it).
            SerializationError: the key or value could not be serialized (the
                message starts with ``key:`` or ``value:``).
        """
        check_topic("topic", topic)
        if partition is not None:
            partition = check_partition("partition", partition)
        hdrs = check_headers("headers", headers) if headers is not None else ()
        timestamp_ms = check_timestamp_ms("timestamp_ms", timestamp_ms)
        # The default bytes serializer is the identity on bytes and None: skip the call.
        if self._raw_keys and (key is None or type(key) is bytes):
            key_bytes = key
        else:
            key_bytes = _serialized("key", self._key_ser, key)
        if self._raw_values and (value is None or type(value) is bytes):
            value_bytes = value
        else:
            value_bytes = _serialized("value", self._value_ser, value)
        return topic, value_bytes, key_bytes, partition, hdrs, timestamp_ms

    async def _send_prepared(
        self,
        topic: str,
        value_bytes: bytes | None,
        key_bytes: bytes | None,
        partition: int | None,
        hdrs: Sequence[tuple[str, bytes | None]],
        timestamp_ms: int | None,
        *,
        hot: bool = False,
    ) -> RecordFuture:
        """:meth:`send` of a record :meth:`_prepare` has checked and serialized;
        with ``hot``, the hot path is tried first (the blocking producer's
        queued records, which :meth:`send` did not see)."""
        if (
            hot
            and type(value_bytes) is bytes
            and partition is None
            and not hdrs
            and timestamp_ms is None
            and self._hot_path
            and not self._closed
            and self._fatal is None
        ):
            batch = self._append_hot(topic, value_bytes, key_bytes)
            if batch is not True and batch is not False:
                size = batch.size
                if size >= batch.limit:
                    self._limit_reached(batch, size)
                return RecordFuture(batch, len(batch.records) - 1)
        if self._closed or self._fatal is not None:
            raise self._fatal or ClientClosedError("the producer is closed")
        key = key_bytes
        transactional = self._transactional
        if transactional:
            self._txn.check_can_send()
        ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        md = self._cluster.metadata
        info = md.topics.get(topic)
        n = len(info.partitions) if info is not None else 0
        if not n:
            n = await self._wait_for_topic(topic)
            info = md.topics[topic]
        assert info is not None
        if partition is None:
            p, sticky = self._pick(topic, key_bytes, n, info)
        elif 0 <= partition < n:
            p, sticky = partition, False
        else:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"partition {partition} of {topic!r} (it has {n})",
            )
        remember = partition is None and self._hot_path
        deadline: float | None = None
        while True:
            try:
                handle, _ = self._append_at(
                    topic, p, sticky, n, ts, key_bytes, value_bytes, hdrs, remember, key
                )
            except BufferFullError:
                # Again from the partition first chosen: a sticky move already made
                # is not made twice (on_new_batch is then a no-op).
                if deadline is None:
                    deadline = self._now() + self.config.max_block_ms / 1000
                await self._wait_for_memory(deadline)
                continue
            break
        if handle.index == 0:
            # A new batch: an older one may be complete. Yield once, so that the
            # readers and the sender (a linger to start) run while we keep
            # appending; without this a caller that never awaits anything else
            # would fill buffer.memory before the first request left. But first
            # send what is ready if the brokers are idle: the sender would run
            # only at this task's next yield, after another batch of appends.
            # The yield cannot be cancelled: the record is in its batch and will
            # be sent, so the caller must get its future, not Cancelled.
            if self._window:
                self._arm_window(handle.batch)
                if self._txn.pipelined and self._now() < self._yield_by:
                    # Except in a transaction begun ahead of a commit: its batch
                    # cannot leave before the commit ends, which the window's polls
                    # carry on, so the yield would only run a sender with nothing to
                    # send (a scheduler round per transaction). At most 10 ms go by
                    # without one.
                    self._window_poll()
                    return handle
            self._after_new_batch()
            await anyio.lowlevel.cancel_shielded_checkpoint()
            self._yield_by = self._now() + 0.01
        else:
            if handle.batch.full:
                self._wake.set()
            if self._window:
                self._window_tick(handle.index)
        return handle

    def _window_tick(self, index: int) -> None:
        """The record at ``index`` in its batch was appended while a transaction
        is begun ahead of a commit: every ``_WINDOW_RECORDS``-th, :meth:`_window_poll`."""
        if not (index + 1) & (_WINDOW_RECORDS - 1):
            self._window_poll()

    def _arm_window(self, batch: ProducerBatch) -> None:
        """A batch was opened while a transaction is begun ahead of a commit: the
        hot path of :meth:`send` calls :meth:`_limit_reached` once it holds about
        ``_WINDOW_RECORDS`` records more (the poll costs that path no test of its own)."""
        records = len(batch.records)
        if records:
            grown = (batch.size - BATCH_OVERHEAD) * _WINDOW_RECORDS // records
            batch.limit = min(batch.limit, batch.size + max(grown, 1))

    def _limit_reached(self, batch: ProducerBatch, batch_bytes: int) -> None:
        """The hot path of :meth:`send` filled ``batch`` up to its ``limit``: the
        batch is full, or a poll of the window (:meth:`_arm_window`) is due."""
        batch_size = self._acc.batch_size
        if batch_bytes >= batch_size:
            batch.full = True
            self._wake.set()
            return
        batch.limit = batch_size
        if self._window:
            self._window_poll()
            if self._window:
                self._arm_window(batch)

    def _window_poll(self) -> None:
        """Take the answers that have arrived and send what they make ready,
        without a yield, so that the commit goes on while the caller appends
        (a loop that awaits only :meth:`send` would otherwise hold it up until
        the next commit waits for it). The window closes once the commit is
        done."""
        if not self._txn.pipelined:
            self._window = False
            return
        # Only an answer can make something sendable here: the batches of the
        # transaction begun ahead wait for the commit, and the committing one's
        # left at its commit unless its partitions had yet to join.
        if self._take_answers() and not any(self._node_in_flight.values()):
            self._send_now()

    def try_send(self, topic: str, value: Any = None, key: Any = None) -> RecordFuture | None:
        """:meth:`send` without awaiting, for a record that fits the batch its
        partition is filling now; None for any other, which :meth:`send` must
        then take::

            future = producer.try_send(topic, value) or await producer.send(topic, value)

        Taken: a bytes value, with no key or a bytes key (when the partitioner
        is the default ``murmur2``), under the default serializers, whose
        partition has an open batch with room for it, within ``buffer.memory``
        and, for a transactional producer, inside a transaction. None: anything
        else, such as a batch to open (:meth:`send` opens it and lets the sender
        run), the producer closed, or headers, a partition or a timestamp (which
        this method does not take). It never waits and is no checkpoint; call it
        from a task of the producer's event loop, as :meth:`send`.

        It saves an ``await`` (a coroutine) per record: 13-20% in a loop that
        only sends (``bench/clients.py``, ``trafka-try-send``).
        """
        if (
            type(value) is not bytes
            or type(topic) is not str
            or not self._hot_path
            or self._closed
            or self._fatal
        ):
            return None
        batch = self._append_hot(topic, value, key)
        if batch is True or batch is False:
            return None
        if batch.full:
            self._wake.set()
        index = len(batch.records) - 1
        if self._window:
            self._window_tick(index)
        return RecordFuture(batch, index)

    def _pick(self, topic: str, key_bytes: bytes | None, n: int, info: Any) -> tuple[int, bool]:
        """The partitioner's choice for a record of ``topic`` (``n`` partitions),
        and whether it is the sticky partition of a key-less record (KIP-480)."""
        available = info.available_partitions if self._partitioner_needs_available else ()
        p = self._partitioner.partition(topic, key_bytes, n, available)
        return p, key_bytes is None and self._sticky

    def _append_at(
        self,
        topic: str,
        p: int,
        sticky: bool,
        n: int,
        ts: int,
        key_bytes: bytes | None,
        value_bytes: bytes | None,
        hdrs: Sequence[tuple[str, bytes | None]],
        remember: bool,
        key: Any,
        now: float | None = None,
    ) -> tuple[RecordFuture, bool]:
        """Append a record to partition ``p`` of ``topic`` (joining ``p`` to the
        transaction first), or, when ``sticky`` and ``p``'s batch is done, to the
        sticky partitioner's next choice. Returns the record's future and whether
        its partition joined the transaction now. With ``remember``, the batch
        becomes the one the hot path fills for its partition. Touches no task,
        event or socket unless ``now`` is None: from another thread (``now``
        given), starting the transaction's request and waking the sender are the
        caller's to ask of the loop (:meth:`_after_thread_append`).

        Raises:
            BufferFullError: no memory for it now.
            KafkaError: MESSAGE_TOO_LARGE.
        """
        acc = self._acc
        md = self._cluster.metadata
        joined = False
        while True:
            # Before the append: the batch must not leave before its partition joins.
            # A new partition's AddPartitionsToTxn goes now, overlapping with
            # filling the batch.
            if self._transactional and self._txn.add_partition(topic, p):
                joined = True
                if now is None:
                    self._step_txn(self._now())
            handle = acc.append(
                topic, p, ts, key_bytes, value_bytes, hdrs, now, abort_on_new_batch=sticky
            )
            if handle is not None:
                break
            # KIP-480: the sticky partition's batch is done; move on and append there.
            available = md.topics[topic].available_partitions
            self._partitioner.on_new_batch(topic, p, n, available)
            p = self._partitioner.partition(topic, key_bytes, n, available)
            sticky = False
        if remember:
            if key_bytes is None:
                self._sticky_batches[topic] = handle.batch
            elif self._hot_keyed and type(key) is bytes:
                slots = self._keyed_batches.get(topic)
                current = md.topics.get(topic)
                # Only for the count the metadata holds now: it may have changed
                # while this call waited.
                if slots is None and current is not None and len(current.partitions) == n:
                    slots = self._keyed_batches[topic] = [None] * n
                if slots is not None and len(slots) == n:
                    slots[p] = handle.batch
        return handle, joined  # type: ignore[return-value]

    def _after_new_batch(self) -> None:
        """On the loop, after a batch was opened: send what is ready if the
        brokers are idle, and wake the sender (a linger to start)."""
        if not self._sender_done:
            self._send_if_idle()
        self._wake.set()

    def _after_thread_append(self) -> None:
        """On the loop, after :meth:`_open_hot` opened a batch from another thread:
        what :meth:`send` does there at once (a transaction's request too)."""
        if self._transactional and not self._closed:
            self._step_txn(self._now())
        self._after_new_batch()

    def _append_hot(self, topic: str, value: bytes, key: bytes | None) -> ProducerBatch | bool:
        """The hot path of :meth:`send`, for the blocking producer's sending threads:
        a bytes record with no partition, headers or timestamp, appended straight
        to the batch its partition is filling (KIP-480's sticky batch for key-less
        records, the murmur2 partition's for keyed bytes). Never waits and
        touches no task, event or socket: a full batch is the caller's to
        announce (``batch.full``). :meth:`send` and :meth:`try_send` take it
        too; the accumulator keeps the accounting (``append_to``).

        Returns:
            The batch it joined, as its last record (a future costs an object
            per record: the caller makes what it needs); or, for the general
            path to take it: True when
            it needs a batch opened (none is open, or it has no room), after
            which the next records fit; False when something else stands in the
            way (memory, the transaction's state, the producer closing, a key
            the hot path does not hash).
        """
        if key is None:
            batch = self._sticky_batches.get(topic)
            size = RECORD_OVERHEAD + len(value)
        elif type(key) is bytes and self._hot_keyed:
            slots = self._keyed_batches.get(topic)
            batch = murmur2_pick(slots, key) if slots else None
            size = RECORD_OVERHEAD + len(key) + len(value)
        else:
            return False
        # In a transaction, a batch kept here was opened in this one, so its
        # partition is already part of it (the general path adds partitions; a
        # transaction begun ahead of a commit seals that commit's batches), and
        # the transaction may still take records: the moment it may not, these
        # batches are forgotten (_forget_hot_batches).
        if batch is None or batch.full or batch.done:
            return True  # (a transaction that takes no records keeps no batch here)
        appended = self._acc.append_to(batch, int(time.time() * 1000), key, value, size)
        if appended:
            return batch
        return appended is False

    def _open_hot(
        self, topic: str, value: bytes, key: bytes | None, now: float
    ) -> tuple[RecordFuture, bool] | None:
        """For the blocking producer's sending threads, when :meth:`_append_hot`
        says a batch must be opened: :meth:`send`'s general path for that record,
        under the same rules (no task, event or socket touched; ``now`` is the
        loop's clock, read from the calling thread). The caller then asks the
        loop to run :meth:`_after_thread_append`.

        Returns:
            The record's future and whether its partition joined the transaction
            now; None when the record must take :meth:`send` (it would wait for
            metadata or memory, or be refused).
        """
        if self._closed or self._fatal is not None:
            return None
        if self._transactional and not self._txn.sendable:
            return None
        acc = self._acc
        size = RECORD_OVERHEAD + len(value)
        if key is not None:
            if type(key) is not bytes or not self._raw_keys:
                return None
            size += len(key)
        if not acc.can_take(size):
            return None
        info = self._cluster.metadata.topics.get(topic)
        n = len(info.partitions) if info is not None else 0
        if not n:
            return None
        p, sticky = self._pick(topic, key, n, info)
        ts = int(time.time() * 1000)
        return self._append_at(topic, p, sticky, n, ts, key, value, (), True, key, now)

    async def send_and_wait(
        self, topic: str, value: Any = None, key: Any = None, **kwargs: Any
    ) -> RecordMetadata:
        """:meth:`send`, then wait for the record's :class:`RecordMetadata`."""
        future = await self.send(topic, value, key, **kwargs)
        result: RecordMetadata = await future
        return result

    def statistics(self) -> ProducerStatistics:
        """A snapshot of what the producer has done so far (it never changes afterwards).

        Totals count from :func:`open_producer`; see :mod:`trafka.sdk.statistics`
        for what each field means. Cheap enough to call every second.
        """
        acc = self._acc
        topics = {t: topic_statistics(c) for t, c in sorted(acc.topic_counters.items())}
        values = topics.values()
        txn = self._txn
        return ProducerStatistics(
            records_sent=sum(t.records_sent for t in values),
            bytes_sent=sum(t.bytes_sent for t in values),
            batches_sent=sum(t.batches_sent for t in values),
            records_failed=sum(t.records_failed for t in values),
            batch_retries=sum(t.batch_retries for t in values),
            records_buffered=sum(len(b.records) for b in acc.incomplete_batches()),
            buffer_memory_used=acc.used_memory,
            buffer_memory=acc.buffer_memory,
            requests_in_flight=sum(self._node_in_flight.values()),
            producer_id=acc.producer_id,
            producer_epoch=acc.producer_epoch,
            transactions_committed=txn.transactions_committed,
            transactions_aborted=txn.transactions_aborted,
            topics=topics,
            brokers=self._cluster.broker_statistics(),
            telemetry=None if self._telemetry is None else self._telemetry.telemetry.statistics(),
            partitions={
                TopicPartition(topic, partition): producer_partition_statistics(c, n, size)
                for topic, partition, n, size, c in sorted(
                    acc.partition_counters(), key=lambda row: row[:2]
                )
            },
        )

    async def client_instance_id(self, timeout_ms: float = 0) -> uuid.UUID | None:
        """The id the cluster gave this client for its metrics (KIP-714), as Java's
        ``clientInstanceId(Duration)``: waits up to ``timeout_ms`` for the first
        subscription when there is none yet.

        Returns:
            The client instance id, or None when no subscription arrived in time
            (or the cluster does not take client metrics).

        Raises:
            UsageError: ``enable.metrics.push`` is false.
            ValueError: ``timeout_ms`` is negative.
        """
        return await instance_id(self._telemetry, timeout_ms)

    def _telemetry_samples(self) -> list[MetricSample]:
        return producer_samples(
            self._telemetry_averages,
            self.statistics(),
            self._cluster.take_peaks(),
            self._queue_time,
            self._now(),
            partitions=self._acc.partition_counters(),
            acks=self.config.acks,
        )

    async def flush(self) -> None:
        """Send everything buffered now (ignoring ``linger.ms``) and wait for the outcomes.

        Records that fail do not make ``flush`` raise; their futures hold the errors.
        """
        acc = self._acc
        acc.flushing += 1
        try:
            self._wake_sender()
            if not self._sender_done:
                self._send_now()
            for batch in acc.incomplete_batches():
                await _wait_batch(batch)
        finally:
            acc.flushing -= 1

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition numbers (waits for metadata up to ``max.block.ms``).

        Raises:
            TypeError, ValueError: ``topic`` is not a topic name.
        """
        check_topic("topic", topic)
        n = self._cluster.metadata.partition_count(topic)
        if n is None:
            n = await self._wait_for_topic(topic)
        return list(range(n))

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    # -- transactions -------------------------------------------------------------------

    @property
    def transaction_state(self) -> TxnState:
        """The transaction manager's state (``READY`` between transactions).

        A transaction begun while the previous one commits shows as
        ``COMMITTING_TRANSACTION`` until that commit completes."""
        return self._txn.state

    async def init_transactions(self) -> None:
        """Register the ``transactional.id`` with its coordinator and get a producer id.

        Fences every older producer with the same ``transactional.id`` and
        aborts (or completes) any transaction it left open. Needed once before
        the first transaction; later calls do nothing.

        Raises:
            InvalidTxnStateError: no ``transactional.id``.
            ProducerFencedError / TransactionFatalError: the coordinator refused.
            ProducerBlockedError: not done within ``max.block.ms`` (it goes on;
                call again to keep waiting).
            ClientClosedError: the producer is closed.
        """
        await self._check_transactional_async("init_transactions()")
        txn = self._txn
        if txn.state not in (TxnState.UNINITIALIZED, TxnState.INITIALIZING):
            if txn.fatal_error is not None:
                raise txn.fatal_error
            return
        result = txn.init()
        self._wake_sender()
        await self._wait_txn(result)

    def begin_transaction(self) -> None:
        """Start a transaction: records sent from now on are part of it.

        It may begin while the previous transaction commits (after
        ``commit_transaction(wait=False)``): its records are then held back
        until that commit completes, and if that commit fails, this transaction
        must be aborted too.

        Raises:
            InvalidTxnStateError: no ``transactional.id``, not initialized, or a
                transaction is already open.
            TransactionFatalError: the producer can no longer do transactions.
        """
        self._check_transactional("begin_transaction()")
        txn = self._txn
        txn.begin()
        if txn.pipelined:
            # The committing transaction's open batches take no more records.
            self._acc.seal()
            self._window = True
        self._acc.txn_open = txn.open_number

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        """Commit consumer offsets as part of the transaction (consume-transform-produce).

        Args:
            offsets: per partition, the offset of the next record to consume
                (the last processed record's offset + 1), or an
                :class:`OffsetAndMetadata` to commit metadata with it.
            group_metadata: ``consumer.group_metadata()``; the coordinator then
                refuses the offsets if the consumer's generation has moved on
                (KIP-447). A bare group id skips that check.

        Raises:
            TransactionAbortableError: the offsets cannot be committed (e.g. the
                consumer lost its partitions); abort the transaction.
            ProducerFencedError / TransactionFatalError: fatal.
            InvalidTxnStateError: no transaction open.
            ProducerBlockedError: not done within ``max.block.ms``.
            TypeError, ValueError: ``offsets`` is not a mapping of partitions to
                offsets >= 0, or ``group_metadata`` is neither
                ``ConsumerGroupMetadata`` nor a group id.
        """
        clean, group = _transaction_offsets(offsets, group_metadata)
        await self._check_transactional_async("send_offsets_to_transaction()")
        result = self._txn.send_offsets(clean, group)
        self._wake_sender()
        await self._wait_txn(result)

    async def commit_transaction(self, *, wait: bool = True) -> PendingCommit:
        """Send every record of the transaction, then commit it.

        Args:
            wait: False to return as soon as the commit has started, so that
                the next transaction can begin (:meth:`begin_transaction`) and
                fill its batches while this one commits. Its records leave once
                this commit completes. The returned :class:`PendingCommit` tells
                how the commit went; if it fails, the transaction begun after
                it fails too (its commit raises, and it must be aborted), so a
                failure is never lost. One commit at a time: committing while
                the previous commit is still under way first waits for it.

        Returns:
            The commit (completed, unless ``wait`` is False).

        Raises:
            TransactionAbortableError: a record or the offsets failed (or the
                previous commit, when this transaction began while it ran);
                call :meth:`abort_transaction`.
            ProducerFencedError / TransactionFatalError: fatal; close the producer.
            InvalidTxnStateError: no transaction open.
            ProducerBlockedError: not done within ``max.block.ms``; the commit
                goes on, call again to wait for it (it cannot be aborted any more).
            TypeError: ``wait`` is not a bool.
        """
        check_bool("wait", wait)
        await self._check_transactional_async("commit_transaction()")
        txn = self._txn
        previous = txn.committing_result if txn.pipelined else None
        if previous is not None:
            if not previous.done and not self._sender_done:
                # Its last answer has often arrived already: take it here rather
                # than wait for the connection's reader to run.
                self._send_if_idle()
            # Its failure is this transaction's too: begin_commit raises it.
            await self._wait_resolved(previous)
        result = txn.begin_commit()
        acc = self._acc
        if wait:
            acc.flushing += 1
        else:
            acc.seal()  # every batch of the transaction is ready to leave now
        try:
            self._wake_sender()
            if not self._sender_done:
                # The answer to AddPartitionsToTxn has usually arrived while the
                # records were sent: take it now, so that the last batches leave
                # at once rather than once the connection's reader gets to run.
                self._receive_txn_answer()
                self._send_now()
            if wait:
                await self._wait_txn(result)
        finally:
            if wait:
                acc.flushing -= 1
        return PendingCommit(self, result)

    async def abort_transaction(self) -> None:
        """Abort the transaction: unsent records fail with
        :class:`~trafka.sdk.errors.TransactionAbortedError`, sent ones are
        never visible to ``read_committed`` consumers.

        Raises:
            ProducerFencedError / TransactionFatalError: fatal.
            InvalidTxnStateError: no transaction open, or it is committing.
            ProducerBlockedError: not done within ``max.block.ms``.
        """
        await self._check_transactional_async("abort_transaction()")
        txn = self._txn
        ahead = txn.open_number if txn.pipelined else None
        result = txn.begin_abort()
        if ahead is not None:
            # Begun while the previous transaction commits: its batches never left.
            doomed = TransactionAbortedError("the transaction was aborted")
            if self._acc.abort_undrained(doomed, ahead):
                self._memory_freed()
        self._wake_sender()
        await self._wait_txn(result)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Producer]:
        """A transaction as a block: committed when the block ends normally,
        aborted when it raises or is cancelled.

        Calls :meth:`init_transactions` first if needed. The abort (and a commit
        interrupted by cancellation, which can only complete) runs shielded from
        cancellation, bounded by ``max.block.ms``; the block's exception is
        re-raised, never replaced by the abort's.

        Raises:
            TransactionAbortableError: the commit failed; the transaction was
                aborted, the producer can go on.
            ProducerFencedError / TransactionFatalError: fatal.
        """
        await self.init_transactions()
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            await self._abort_shielded()
            raise
        try:
            await self.commit_transaction()
        except TransactionAbortableError:
            await self._abort_shielded()
            raise
        except anyio.get_cancelled_exc_class():
            await self._finish_commit_shielded()
            raise

    async def _abort_shielded(self) -> None:
        txn = self._txn
        if txn.pipelined:
            # Begun ahead of a commit under way: abort it (locally), then let
            # that commit finish below.
            with anyio.CancelScope(shield=True):
                try:
                    await self.abort_transaction()
                except TrafkaError as exc:
                    log.warning("aborting the transaction failed: %s", exc)
        if not txn.in_transaction or txn.state is TxnState.COMMITTING_TRANSACTION:
            if txn.state is TxnState.COMMITTING_TRANSACTION:
                await self._finish_commit_shielded()
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.max_block_ms / 1000):
            try:
                await self.abort_transaction()
            except TrafkaError as exc:
                log.warning("aborting the transaction failed: %s", exc)

    async def _finish_commit_shielded(self) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.max_block_ms / 1000):
            try:
                await self.commit_transaction()
            except TransactionAbortableError:
                await self._abort_shielded()
            except TrafkaError as exc:
                log.warning("completing the transaction failed: %s", exc)

    async def _check_transactional_async(self, what: str) -> None:
        try:
            self._check_transactional(what)
        except ClientClosedError:
            # The producer's tasks end when a scope around it is cancelled; a
            # caller inside that scope must see the cancellation, not this.
            await anyio.lowlevel.checkpoint_if_cancelled()
            raise

    def _check_transactional(self, what: str) -> None:
        if not self._transactional:
            raise InvalidTxnStateError(f"{what} needs a transactional.id")
        if self._closed or self._sender_done:
            raise ClientClosedError("the producer is closed")

    async def _wait_txn(self, result: TxnResult) -> None:
        await self._wait_resolved(result)
        result.result()

    async def _wait_resolved(self, result: TxnResult) -> None:
        """Wait for ``result`` up to ``max.block.ms``, without raising its failure."""
        if not result.done:
            if result.waker is None:
                result.waker = anyio.Event()
            with anyio.move_on_after(self.config.max_block_ms / 1000):
                await result.waker.wait()
            if not result.done:
                raise ProducerBlockedError(
                    f"{result.operation} did not complete within max.block.ms "
                    f"({self.config.max_block_ms} ms); call it again to keep waiting"
                )

    def _on_batch_retry(self, batch: ProducerBatch, error: BaseException) -> None:
        """Tell the error a batch is retried after, as it happens (once per kind of
        error and interval), so that a cause retried until ``delivery.timeout.ms``
        is known long before the records fail."""
        left = batch.created + self._acc.delivery_timeout - self._now()
        self._retry_log.warning(
            error_kind(error),
            "produce %s-%d: %s; retrying (attempt %d; delivery.timeout.ms fails the records in %.0f s)",
            batch.topic,
            batch.partition,
            error,
            batch.attempts,
            max(left, 0.0),
        )

    def _on_batch_failed(self, batch: ProducerBatch, error: BaseException) -> None:
        txn = self._txn
        txn.on_batch_failed(error, sequenced=batch.base_sequence >= 0, number=batch.txn)
        if txn.fatal_error is not None:
            # At once, before a caller woken by the fatal error looks at its records.
            self._set_fatal(txn.fatal_error)
        self._wake_sender()

    # -- internals ----------------------------------------------------------------------

    def _forget_keyed_batches(self, topic: str) -> None:
        self._keyed_batches.pop(topic, None)

    def _forget_hot_batches(self) -> None:
        """The transaction takes no more records (committing, aborting, doomed):
        the hot paths must not append to the batches they kept, so the next
        record takes the general path, which asks the transaction."""
        self._sticky_batches.clear()
        self._keyed_batches.clear()

    def _wake_sender(self) -> None:
        self._wake.set()

    async def _wait_for_topic(self, topic: str) -> int:
        try:
            return await self._cluster.partitions_for(topic, self.config.max_block_ms / 1000)
        except KafkaError as exc:
            if (
                exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                and topic not in self._cluster.metadata.topic_errors
            ):
                why = self._cluster.refresh_error
                raise ProducerBlockedError(
                    f"no metadata for topic {topic!r} within max.block.ms"
                    + ("" if why is None else f" (the last metadata refresh failed: {why})")
                ) from None
            raise

    async def _wait_for_memory(self, deadline: float) -> None:
        acc = self._acc
        acc.memory_waiters += 1
        self._wake_sender()
        try:
            left = deadline - self._now()
            if left <= 0:
                raise ProducerBlockedError(
                    f"buffer.memory ({acc.buffer_memory} bytes) stayed full for max.block.ms"
                )
            event = self._memory
            with anyio.move_on_after(left):
                await event.wait()
        finally:
            acc.memory_waiters -= 1

    def _memory_freed(self) -> None:
        event, self._memory = self._memory, anyio.Event()
        event.set()

    async def _start(self) -> None:
        self._cluster.start()
        self._tg.start_soon(self._sender, name="trafka producer sender")
        if self._telemetry is not None:
            self._tg.start_soon(self._telemetry.run, name="trafka producer telemetry")

    def _set_fatal(self, error: BaseException) -> None:
        if self._fatal is None:
            self._fatal = error
            self._acc.abort(error)
            self._memory_freed()

    def _step_txn(self, now: float) -> None:
        """Feed the transaction manager and start its next request."""
        txn = self._txn
        acc = self._acc
        if txn.state is TxnState.UNINITIALIZED:
            if self._transactional or not acc.has_pending():
                return
            txn.init()  # an idempotent producer's id, with its first batch
        if txn.fatal_error is not None:
            self._set_fatal(txn.fatal_error)
            return
        doomed: BaseException | None = None
        if txn.state is TxnState.ABORTABLE_ERROR:
            doomed = txn.last_error
        elif txn.state is TxnState.ABORTING_TRANSACTION:
            doomed = TransactionAbortedError("the transaction was aborted")
        if doomed is not None and acc.abort_undrained(doomed):
            self._memory_freed()
        if not self._txn_busy:
            request = txn.poll(now, batches_pending=self._txn_batches_pending())
            if request is not None:
                self._txn_busy = True
                if not self._send_txn_request(request):
                    self._tg.start_soon(self._txn_request, request)

    def _txn_batches_pending(self) -> bool:
        """Whether the transaction being committed or aborted has batches left
        (not those of a transaction begun ahead of its end)."""
        txn = self._txn
        return self._acc.has_pending(txn.sending_number if txn.pipelined else None)

    def _receive_txn_answer(self) -> bool:
        """Handle a transaction request's answer already received, if there is
        one; whether anything had arrived."""
        coordinator = self._txn.coordinator
        if self._txn_busy and coordinator is not None:
            conn = self._cluster.ready_coordinator_connection(coordinator[0])
            if conn is not None:
                return conn.receive_ready()
        return False

    def _send_txn_request(self, request: TxnRequest) -> bool:
        """Write ``request`` on a live coordinator connection, without a task.

        Returns False when there is none yet (the caller starts
        :meth:`_txn_request`, which connects first).
        """
        if request.coordinator is None:
            return False
        node, _, _ = request.coordinator
        conn = self._cluster.ready_coordinator_connection(node)
        if conn is None:
            return False
        completion = _TxnCompletion(self, request)
        try:
            completion.version = min(conn.version_for(request.api_key), request.max_version)
            body = request.build(completion.version)
        except UnsupportedVersionError:
            return False  # the task path decides what that means for this request
        try:
            conn.send(
                request.api_key,
                body,
                completion,
                timeout=request.timeout,
                version=completion.version,
            )
        except TrafkaError as exc:
            completion.fail(exc)
        else:
            self._watch(conn)
        return True

    async def _txn_request(self, request: TxnRequest) -> None:
        txn = self._txn
        try:
            conn = await self._cluster.coordinator_connection(request.coordinator)
            version = min(conn.version_for(request.api_key), request.max_version)
            body = await conn.request(
                request.api_key, request.build(version), timeout=request.timeout, version=version
            )
        except UnsupportedVersionError as exc:
            if (
                request.kind is Kind.INIT_PRODUCER_ID
                and not self._transactional
                and not self.config.enable_idempotence
            ):
                # Implicit idempotence: Java quietly turns it off too.
                log.info("the broker has no InitProducerId: idempotence is off")
                self._acc.idempotent = False
                self._acc.partition_in_flight = 1
            else:
                txn.on_failure(request, exc, self._now())
        except TrafkaError as exc:
            self._txn_failed(request, exc)
        else:
            txn.on_response(request, version, body, self._now())
        finally:
            self._txn_done()

    def _txn_failed(self, request: TxnRequest, error: BaseException) -> None:
        log.debug("%s failed: %s", request.kind.name, error)
        if request.coordinator is not None:
            # The coordinator may have moved: look again before the retry.
            self._cluster.metadata.request_update()
        self._txn.on_failure(request, error, self._now())

    def _txn_done(self) -> None:
        """A transaction manager request ended: apply its outcome, then the next request."""
        txn = self._txn
        self._txn_busy = False
        if txn.fatal_error is not None:
            self._set_fatal(txn.fatal_error)
        acc = self._acc
        if acc.producer_id != txn.producer_id or acc.producer_epoch != txn.producer_epoch:
            acc.producer_id = txn.producer_id
            acc.producer_epoch = txn.producer_epoch
        self._wake_sender()
        if not self._sender_done and self._fatal is None:
            # The next request (say EndTxn after the last AddPartitionsToTxn), and
            # the batches that the answer made sendable, at once rather than after
            # a round of the sender loop.
            self._step_txn(self._now())
            if self._acc.flushing or txn.state is TxnState.COMMITTING_TRANSACTION:
                # A commit's batches wait for their partitions to join. Sent
                # here, not by the sender loop: a reader task that took this
                # answer while the caller yielded once (to open a batch of the
                # transaction begun ahead) would leave them until the caller
                # next yields, a whole transaction later.
                self._send_now()

    async def _sender(self) -> None:
        try:
            await self._send_loop()
        finally:
            # Cancelled with its producer (e.g. by a scope around open_producer): no
            # transaction call can complete any more; do not let them wait for it.
            self._sender_done = True
            self._txn.close(ClientClosedError("the producer's tasks were cancelled"))

    async def _send_loop(self) -> None:
        acc = self._acc
        txn = self._txn
        cluster = self._cluster
        md = cluster.metadata
        while True:
            self._wake = anyio.Event()
            now = self._now()
            if acc.expire(now):
                self._memory_freed()
            if acc.idempotent:
                self._step_txn(now)
            check = acc.ready(now, md.leader_for)
            if check.unknown_leaders:
                md.add_topics(check.unknown_leaders)
                md.request_update()
                cluster.nudge()
            self._throttle_wake = math.inf
            self._send_ready(now, check.nodes)
            wake_at = check.next_check
            if self._throttle_wake < math.inf and (
                wake_at is None or self._throttle_wake < wake_at
            ):
                wake_at = self._throttle_wake
            expiry = acc.next_expiry()
            if expiry is not None and (wake_at is None or expiry < wake_at):
                wake_at = expiry
            if acc.idempotent:
                retry = txn.next_deadline(now)
                if retry is not None and (wake_at is None or retry < wake_at):
                    wake_at = retry
            if wake_at is None:
                if not self._wake.is_set():
                    await self._wake.wait()  # nothing timed: no cancel scope needed
                continue
            timeout = max(wake_at - self._now(), 0.0)
            if timeout > 0 and not self._wake.is_set():
                with anyio.move_on_after(timeout):
                    await self._wake.wait()
            elif timeout <= 0:
                await anyio.lowlevel.checkpoint()

    def _send_ready(self, now: float, nodes: Iterable[int]) -> None:
        """Drain and write a Produce request to each of ``nodes`` that can take one."""
        acc = self._acc
        cluster = self._cluster
        leader_for = cluster.metadata.leader_for
        max_in_flight = self.config.max_in_flight_requests_per_connection
        in_flight = self._node_in_flight
        for node in nodes:
            conn = cluster.ready_connection(node)
            if conn is None:
                cluster.connect_soon(node)
                continue
            if now < conn.throttled_until:
                # KIP-219: the broker reads nothing more from us until then.
                if conn.throttled_until < self._throttle_wake:
                    self._throttle_wake = conn.throttled_until
                continue
            # As many requests as the node may have in flight: a drain takes the
            # first batch of each partition only, and full batches queue behind it
            # (a flush, a commit, a burst of sends between two yields).
            while in_flight.get(node, 0) < max_in_flight:
                batches = acc.drain(now, node, leader_for)
                if not batches:
                    break
                in_flight[node] = in_flight.get(node, 0) + 1
                self._produce(conn, batches)
                if cluster.ready_connection(node) is not conn or not acc.node_ready(
                    now, node, leader_for
                ):
                    break

    def _send_if_idle(self) -> None:
        """Send what is ready now if no Produce is in flight, once the answers that
        have already arrived are taken (the readers would take them only when this
        task yields). In a transaction the coordinator's answer comes first: a
        batch leaves only once its partition has joined. With a request still in
        flight, its answer wakes the sender, and the batches filled meanwhile share
        a request."""
        self._take_answers()
        if not any(self._node_in_flight.values()):
            self._send_now()

    def _watch(self, conn: BrokerConnection) -> None:
        """``conn`` was just sent a request: :meth:`_take_answers` checks its socket."""
        fd = conn.fileno
        if fd >= 0 and self._watched.get(fd) is not conn and self._poller is not None:
            self._watched[fd] = conn  # a descriptor closed and reused: the new socket
            self._poller.register(fd, select.POLLIN)

    def _take_answers(self) -> bool:
        """Handle the answers that have already arrived (the transaction
        coordinator's first), without waiting; whether anything had arrived."""
        poller = self._poller
        if poller is not None:
            ready = poller.poll(0)
            if not ready:
                return False
            watched = self._watched
            if len(ready) > 1:  # the coordinator's first, as below
                ready.sort(key=lambda event: not is_coordinator_id(watched[event[0]].node_id))
            arrived = False
            for fd, _ in ready:
                sender = watched[fd]
                if sender.alive:
                    arrived = sender.receive_ready() or arrived
                else:  # closed: its descriptor may be another socket's by now
                    del watched[fd]
                    poller.unregister(fd)
            return arrived
        arrived = self._transactional and self._receive_txn_answer()
        in_flight = self._node_in_flight
        busy = [node for node, n in in_flight.items() if n]
        for node in busy:
            conn = self._cluster.ready_connection(node)
            if conn is not None and conn.receive_ready():
                arrived = True
        return arrived

    def _send_now(self) -> None:
        """Send what is ready at once, ahead of the sender loop (which still runs)."""
        now = self._now()
        self._throttle_wake = math.inf
        self._send_ready(now, self._acc.ready(now, self._cluster.metadata.leader_for).nodes)
        if self._throttle_wake < math.inf:
            self._wake.set()  # the sender loop waits for the throttle's end

    def _produce(self, conn: BrokerConnection, batches: list[ProducerBatch]) -> None:
        """Write one Produce request; its outcome arrives through :class:`_ProduceCompletion`."""
        acks = self.config.acks
        request = build_produce_request(
            batches,
            acks=acks,
            timeout_ms=self.config.request_timeout_ms,
            transactional_id=self.config.transactional_id,
        )
        queue_time = self._queue_time
        now = self._now()
        for batch in batches:
            queue_time.add(now - batch.created)
        completion = _ProduceCompletion(self, conn.node_id, batches)
        try:
            conn.send(0, request, completion if acks != 0 else None)
        except TrafkaError as exc:
            completion.fail(exc)
        else:
            self._watch(conn)
            if acks == 0:
                completion.resolve(None)

    def _produce_failed(self, batches: list[ProducerBatch], exc: BaseException) -> None:
        acc = self._acc
        now = self._now()
        for b in batches:
            acc.retry_or_fail(b, exc, now)
        self._cluster.metadata.request_update()
        self._cluster.nudge()

    def _produce_done(self, node_id: int) -> None:
        self._node_in_flight[node_id] -= 1
        self._memory_freed()
        self._wake.set()
        if self._transactional and not self._txn_busy and not self._txn_batches_pending():
            # A commit or abort waits for the last batch: its EndTxn goes now,
            # not after a round of the sender loop.
            self._step_txn(self._now())

    def _on_produce_response(self, batches: list[ProducerBatch], response: Any) -> None:
        acc = self._acc
        md = self._cluster.metadata
        now = self._now()
        refresh = False
        for b, p in produce_results(batches, response):
            if p is None:
                acc.retry_or_fail(
                    b,
                    KafkaError(
                        ErrorCode.UNKNOWN_SERVER_ERROR, "partition missing from the response"
                    ),
                    now,
                )
                continue
            code = p.error_code
            if code == 0:
                acc.complete(b, p.base_offset, p.log_append_time_ms, now)
                continue
            if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                acc.complete(b, p.base_offset, now=now)
                continue
            if code == ErrorCode.MESSAGE_TOO_LARGE and acc.split(b):
                continue
            err = KafkaError(code, p.error_message)
            if code in REFRESH_ERRORS:
                refresh = True
                leader = p.current_leader
                if leader.leader_id >= 0:
                    md.on_leader_hint(b.topic, b.partition, leader.leader_id, leader.leader_epoch)
                else:
                    md.on_partition_error(code, b.topic, b.partition)
            if code in _SEQUENCE_GAP and b.base_sequence >= 0:
                if acc.has_earlier(b):
                    # An older batch's retry: this one follows it.
                    acc.retry_or_fail(b, err, now, force=True)
                    continue
                if not self._transactional:
                    # KIP-360: renumber the partition under a new identity and resend.
                    if acc.retry_or_fail(b, err, now, force=True) and acc.request_sequence_reset(b):
                        self._txn.request_epoch_bump()
                    continue
            acc.retry_or_fail(b, err, now)
        if refresh:
            md.request_update()
            self._cluster.nudge()

    async def _close(self, *, flush: bool) -> None:
        if flush and not self._closed:
            txn = self._txn
            if self._transactional and txn.in_transaction and self._fatal is None:
                # Java's close does the same: an open transaction cannot survive its producer.
                log.warning("closing the producer aborts its open transaction")
                await self._abort_shielded()
            await self.flush()
            if self._telemetry is not None:
                # Java's initiateClose: one last push (terminating=true) once the
                # records are out, bounded by the request timeout.
                with anyio.CancelScope(shield=True):
                    await self._telemetry.close(self.config.request_timeout_ms / 1000)
        self._closed = True
        self._acc.closing = True
        closed = ClientClosedError("the producer was closed before the record was sent")
        self._acc.abort(closed)
        self._txn.close(closed)


@asynccontextmanager
async def open_producer(
    config: ProducerConfig | Mapping[str, Any] | None = None, **kwargs: Any
) -> AsyncIterator[Producer]:
    """Open a producer; leaving the block flushes and closes it.

    Args:
        config: a :class:`~trafka.sdk.config.ProducerConfig` or a mapping of
            Kafka-style keys (``{"bootstrap.servers": "host:9092", "linger.ms": 5}``).
        **kwargs: settings in Python spelling (``linger_ms=5``); they override ``config``.

    Yields:
        The :class:`Producer`.

    Raises:
        ConfigError: invalid configuration.
    """
    cfg = make_config(ProducerConfig, config, kwargs)
    async with owned_task_group() as tg:
        producer = Producer(cfg, tg)
        await producer._start()
        await serve_metrics_if_asked(tg, producer, "producer", cfg.metrics_listen)
        try:
            yield producer
        except BaseException:
            with anyio.CancelScope(shield=True):
                await producer._close(flush=False)
            raise
        else:
            await producer._close(flush=True)
        finally:
            tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await producer._cluster.aclose()
