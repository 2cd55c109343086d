"""The producer: an anyio driver of :mod:`.producer_core` (what is decided) and
:mod:`.producer_sender` (the requests on the connections).

Rules:

* :func:`open_producer` owns every task it starts (sender, connection readers,
  metadata refresher); leaving the block flushes buffered records and then
  cancels them; from the moment it starts closing, ``send`` refuses records
  (:class:`~trafka.sdk.errors.ClientClosedError`). Leaving it with an exception
  (or cancellation) does not wait: unsent records fail with
  :class:`~trafka.sdk.errors.ClientClosedError`, and records whose request was
  written but not answered with :class:`~trafka.sdk.errors.OutcomeUnknownError`
  (they may be in the log); a record is never told it was not written when it
  may have been.
  Errors leave as themselves, never as an ExceptionGroup.
* :meth:`Producer.send` only blocks when it must: for the first metadata of a
  topic, or for ``buffer.memory`` to free up (both bounded by
  ``max.block.ms``). Otherwise it yields to the scheduler once per new batch
  (a checkpoint), so that the sender runs while a tight loop of sends goes on;
  before that, when no Produce is in flight (once the answers already received
  are taken), it sends the batches that are ready itself.
  Its result is a :class:`RecordFuture`, awaitable for the
  :class:`~trafka.sdk.accumulator.RecordMetadata`. A bytes record whose
  partition's batch has room is appended to it directly (:meth:`Producer.try_send`,
  which ``send`` starts with, over the core's one fast path); everything else
  takes the general path (``_send_general``: the core's ``prepare``, then
  :meth:`Producer.send_prepared`), with interceptors too.
* One sender task (:class:`~trafka.sdk.producer_sender.Sender`) writes the
  Produce requests and the transaction manager's requests; their answers come
  back to completions in the connections' readers, which hand them to the
  core (retries, metadata refresh, resolution). A broker that throttles the
  connection for a quota (KIP-219) gets no Produce until the throttle time
  has passed, as with Java's producer.
* The producer id, epoch and transactions are the
  :class:`~trafka.sdk.transactions.TransactionManager`'s decisions, stepped by
  the core when the sender runs, when ``send()`` adds a partition to the
  transaction, and when a request or the last batch completes; no idempotent
  batch is drained before it has a producer id. Idempotent producers
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
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread

from trafka.codec import ErrorCode, KafkaError

from ._util import loop_clock, owned_task_group
from ._validate import (
    check_bool,
    check_topic,
)
from .accumulator import (
    BATCH_OVERHEAD,
    BufferFullError,
    ProducerBatch,
    RecordHandle,
    RecordMetadata,
)
from .client_hooks import start_client_hooks
from .config import ProducerConfig, make_config
from .consumer_types import TopicPartition
from .errors import (
    ClientClosedError,
    ProducerBlockedError,
    RecordPurgedError,
    TransactionAbortableError,
)
from .interceptors import ProducerInterceptors, ProducerRecord
from .lifecycle import Hostable
from .producer_batches import delivery_reporter, report_delivery
from .producer_core import PreparedRecord, ProducerCore, error_kind
from .producer_sender import Sender
from .producer_transactions import PendingCommit, TransactionCalls, transaction_offsets
from .telemetry import IntervalAverages, MetricSample, MetricsPush, Peaks, producer_samples
from .transactions import ConsumerGroupMetadata, TxnRequest, TxnResult, TxnState
from .transport import Cluster

if TYPE_CHECKING:
    from .statistics.producing import ProducerStatistics

__all__ = [
    "PendingCommit",
    "Producer",
    "RecordFuture",
    "RecordMetadata",
    "error_kind",
    "open_producer",
    "transaction_offsets",
]

# A transaction begun ahead of a commit polls for the commit's answers every
# this many records appended (see Producer._window_poll), a power of two. An
# empty poll is one poll(2) call; answers taken sooner shorten the commit's chain
# of round trips, which the next commit may have to wait for: 16 measured less
# CPU per transaction than 64, 32 or 8.
_WINDOW_RECORDS = 16

log = logging.getLogger("trafka.sdk.producer")


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
        await _wait_batch(self.batch)
        return self.result()


async def _wait_batch(batch: ProducerBatch) -> None:
    if not batch.done:
        if batch.waker is None:
            batch.waker = anyio.Event()
        await batch.waker.wait()


class Producer(Hostable):
    """A Kafka producer. Create it with :func:`open_producer`.

    The driver of a :class:`~trafka.sdk.producer_core.ProducerCore` (:attr:`core`):
    it owns the tasks (the sender), the events a send waits on and the
    connections' requests; the core decides.
    """

    def __init__(self, config: ProducerConfig, task_group: anyio.abc.TaskGroup) -> None:
        self.config = config
        self._tg = task_group
        self._now = loop_clock()  # anyio.current_time, without its backend lookup
        self._cluster = Cluster(config, task_group)
        self._cluster.on_change.append(self.wake_sender)
        self._memory = anyio.Event()
        self.core = ProducerCore(
            config,
            self._cluster.metadata,
            self._now,
            handle_class=RecordFuture,
            wake=self.wake_sender,
            memory_freed=self._memory_freed,
            start_request=self._start_txn_request,
            limit_reached=self._limit_reached,
        )
        core = self.core
        # Transaction version 2 or 1: the cluster's finalized level (transaction_state).
        cluster = self._cluster
        core.txn.version.features = lambda: cluster.finalized_features
        self._sender = Sender(config, core, self._cluster, task_group, self._now)
        self._txn_calls = TransactionCalls(core, self._sender, config)
        # The core's parts this driver uses on every record or request.
        self._acc = core.acc
        self._txn = core.txn
        self._report = delivery_reporter(config.on_delivery, config.delivery_report_only_error)
        self._hot_path = core.hot_path and self._report is None
        # try_send is the appender's own (C where built): no Python frame per record.
        core.appender.enabled = self._hot_path
        if type(self).try_send is Producer.try_send:  # (a subclass's own try_send stays)
            self.try_send = core.appender.try_send  # type: ignore[method-assign]
        self._transactional = core.transactional
        # A transaction is (or was, until the next check) begun ahead of a commit.
        self._window = False
        # Until when a batch opened in that window may skip send()'s yield.
        self._yield_by = -math.inf
        self.interceptors = ProducerInterceptors.of(config)
        resource = {"transactional_id": config.transactional_id}
        self._telemetry = MetricsPush(
            config, self._cluster, "producer", resource, self.statistics, self._telemetry_samples
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
            value: serialized with the configured value serializer.
            key: serialized with the configured key serializer; None for no key.
            partition: an explicit partition; default: the partitioner's choice.
            headers: ``(str, bytes | str | None)`` pairs or a mapping.
            timestamp_ms: the record's timestamp; default now.

        Returns:
            A :class:`RecordFuture` (await it for the :class:`RecordMetadata`).

        Raises:
            TypeError, ValueError: an argument of the wrong type or out of
                range (a bad topic name, partition, timestamp, headers...),
                named in the message. Nothing was buffered.
            ClientClosedError: the producer is closed.
            SerializationError: the key or value could not be serialized (the
                message starts with ``key:`` or ``value:``).
            ProducerBlockedError: no metadata or buffer space within ``max.block.ms``.
            KafkaError: the topic does not exist, the partition is not one of
                its partitions, or the record is too large.
        """
        if partition is None and headers is None and timestamp_ms is None:
            # The common case in a tight loop: the one fast path (try_send).
            future = self.try_send(topic, value, key)
            if future is not None:
                return future
        if self.interceptors is not None:
            given = ProducerRecord(topic, value, key, partition, headers, timestamp_ms)
            future = await self.interceptors.send(partial(_send_general, self), given)
        else:  # (the configured on_delivery below: no fast path with it)
            future = await _send_general(self, topic, value, key, partition, headers, timestamp_ms)
        if self._report is not None:
            future.add_done_callback(partial(report_delivery, self._report))
        return future

    async def send_prepared(self, record: PreparedRecord, *, hot: bool = False) -> RecordFuture:
        """:meth:`send` of a record :meth:`ProducerCore.prepare
        <trafka.sdk.producer_core.ProducerCore.prepare>` has checked and
        serialized (the blocking producer prepares in the caller's thread);
        with ``hot``, the core's hot path is tried first (records :meth:`send`
        did not see).

        The errors are :meth:`send`'s, but for misuse: ``prepare`` refused that.
        """
        topic, value_bytes, key_bytes, partition, hdrs, timestamp_ms = record
        if hot and partition is None and not hdrs and timestamp_ms is None:
            future = self.try_send(topic, value_bytes, key_bytes)
            if future is not None:
                return future
        core = self.core
        core.check_open()
        if self._transactional:
            self._txn.check_can_send()
        ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        md = self._cluster.metadata
        info = md.topics.get(topic)
        n = len(info.partitions) if info is not None else 0
        if not n:
            n = await self._wait_for_topic(topic)
            info = md.topics[topic]
        assert info is not None
        p, sticky = core.pick(topic, key_bytes, n, info, partition)
        remember = partition is None and self._hot_path
        deadline: float | None = None
        while True:
            try:
                handle, _ = core.append_at(
                    topic, p, sticky, n, ts, key_bytes, value_bytes, hdrs, remember
                )
            except BufferFullError:
                # Again from the partition first chosen: a sticky move already made
                # is not made twice (on_new_batch is then a no-op).
                if deadline is None:
                    deadline = self._now() + self.config.max_block_ms / 1000
                await self._wait_for_memory(deadline)
                continue
            break
        assert isinstance(handle, RecordFuture)
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
                    # cannot leave before the commit ends (the window's polls carry
                    # it on), so the yield would run a sender with nothing to send.
                    # At most 10 ms go by without one.
                    self._window_poll()
                    return handle
            self._sender.batch_opened()
            await anyio.lowlevel.cancel_shielded_checkpoint()
            self._yield_by = self._now() + 0.01
        else:
            if handle.batch.full:
                self._sender.wake()
            if self._window and not (handle.index + 1) & (_WINDOW_RECORDS - 1):
                self._window_poll()  # every _WINDOW_RECORDS-th record of a window's batch
        return handle

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
        if batch_bytes >= batch_size or batch.full:  # (full in records: batch.num.messages)
            batch.full = True
            self._sender.wake()
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
        if self._sender.take_answers() and not self._sender.in_flight:
            self._sender.send_now()

    def try_send(self, topic: str, value: Any = None, key: Any = None) -> RecordFuture | None:
        """:meth:`send` without awaiting, for a record that fits the batch its
        partition is filling now; None for any other, which :meth:`send` must
        then take (``send`` starts with this, the driver's one fast path, over
        :mod:`trafka.sdk.hot_append`)::

            future = producer.try_send(topic, value) or await producer.send(topic, value)

        Taken: a bytes value, with no key or a bytes key (under any named
        partitioner but ``roundrobin``), under the default serializers, whose
        partition has an open batch with room for it, within ``buffer.memory``
        and, for a transactional producer, inside a transaction. None: anything
        else, such as a batch to open (:meth:`send` opens it and lets the sender
        run), the producer closed, or headers, a partition or a timestamp (which
        this method does not take). It never waits and is no checkpoint; call it
        from a task of the producer's event loop, as :meth:`send`.

        It saves an ``await`` (a coroutine) per record: 13-20% in a loop that
        only sends (``bench/clients.py``, ``trafka-try-send``). The instance's
        ``try_send`` is its core's appender's (:mod:`.hot_append`: one C call
        per record where the extension is built), which this method calls too.
        """
        future: RecordFuture | None = self.core.appender.try_send(topic, value, key)
        return future

    def after_append(self) -> None:
        """On the loop, after the core opened a batch from another thread
        (:meth:`ProducerCore.open_batch <trafka.sdk.producer_core.ProducerCore.open_batch>`):
        what :meth:`send` does at once on the loop (a transaction's request too)."""
        if self._transactional and not self.core.closed:
            self.core.step(self._now())
        self._sender.batch_opened()

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
        return self.core.statistics(
            requests_in_flight=self._sender.in_flight,
            brokers=self._cluster.broker_statistics(),
            telemetry=self._telemetry.statistics(),
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
        return await self._telemetry.instance_id(timeout_ms)

    def _telemetry_samples(
        self, averages: IntervalAverages, stats: ProducerStatistics, peaks: Peaks, now: float
    ) -> list[MetricSample]:
        queue_time, partitions = self._sender.queue_time, self._acc.partition_counters()
        return producer_samples(
            averages, stats, peaks, queue_time, now, partitions=partitions, acks=self.config.acks
        )

    async def flush(self) -> None:
        """Send everything buffered now (ignoring ``linger.ms``) and wait for the outcomes.

        Records that fail do not make ``flush`` raise; their futures hold the errors.
        """
        acc = self._acc
        acc.flushing += 1
        try:
            self.wake_sender()
            if not self._sender.done:
                self._sender.send_now()
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

    async def init_transactions(self, timeout_ms: float | None = None) -> None:
        """Register the ``transactional.id`` with its coordinator and get a producer id.

        Fences every older producer with the same ``transactional.id`` and
        aborts (or completes) any transaction it left open. Needed once before
        the first transaction; later calls do nothing. ``timeout_ms`` bounds
        this call instead of ``max.block.ms``.

        Raises:
            InvalidTxnStateError: no ``transactional.id``.
            ProducerFencedError / TransactionFatalError: the coordinator refused.
            ProducerBlockedError: not done within ``max.block.ms`` (or
                ``timeout_ms``); it goes on: call again to keep waiting.
            ClientClosedError: the producer is closed.
        """
        await self._txn_calls.init(None if timeout_ms is None else timeout_ms / 1000)

    def purge(self) -> None:
        """Fail every record no request has carried yet with
        :class:`~trafka.sdk.errors.RecordPurgedError` (librdkafka's ``purge``
        of its queues): none of them is in any log. Records in flight, or put
        back for a retry, keep their outcome; a ``send`` still waiting for its
        topic's metadata has not queued its record yet.
        """
        core = self.core
        purged = RecordPurgedError("the record was purged before it was sent")
        if core.acc.abort_undrained(purged, purge=True):
            core.memory_freed()

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
        self._txn_calls.check("begin_transaction()")
        if self.core.begin_transaction():
            # Begun ahead of a commit: the window's polls carry that commit on.
            self._window = True

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
        await self._txn_calls.send_offsets(offsets, group_metadata)

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
        return await self._txn_calls.commit(wait)

    async def abort_transaction(self) -> None:
        """Abort the transaction: unsent records fail with
        :class:`~trafka.sdk.errors.TransactionAbortedError`, sent ones are
        never visible to ``read_committed`` consumers.

        Raises:
            ProducerFencedError / TransactionFatalError: fatal.
            InvalidTxnStateError: no transaction open, or it is committing.
            ProducerBlockedError: not done within ``max.block.ms``.
        """
        await self._txn_calls.abort()

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
            await self._txn_calls.abort_shielded()
            raise
        try:
            await self.commit_transaction()
        except TransactionAbortableError:
            await self._txn_calls.abort_shielded()
            raise
        except anyio.get_cancelled_exc_class():
            await self._txn_calls.finish_commit_shielded()
            raise

    async def wait_transaction_result(self, result: TxnResult) -> None:
        """Wait for a transaction operation's ``result`` up to ``max.block.ms``,
        then raise its failure, if any.

        Raises:
            ProducerBlockedError: not done within ``max.block.ms``; it goes on.
        """
        await self._txn_calls.wait_result(result)

    # -- internals ----------------------------------------------------------------------

    def wake_sender(self) -> None:
        """Have the sender look at the batches again (on the loop)."""
        self._sender.wake()

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
        self.wake_sender()
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

    def _start_txn_request(self, request: TxnRequest) -> None:
        """The core's ``start_request``: the sender writes it."""
        self._sender.start_txn_request(request)

    async def _close(self, *, flush: bool) -> None:
        if flush and not self.core.closed:
            txn = self._txn
            if self._transactional and txn.in_transaction and self.core.fatal is None:
                # Java's close does the same: an open transaction cannot survive its producer.
                log.warning("closing the producer aborts its open transaction")
                await self._txn_calls.abort_shielded()
            # No record is taken from here on: one appended during the flush
            # below would not be waited for, and could be in flight when the
            # core closes (a send racing close gets ClientClosedError instead).
            self.core.stop_appends()
            await self.flush()
            await self._telemetry.close()  # Java's initiateClose, once the records are out
        self.core.close(ClientClosedError("the producer was closed before the record was sent"))

    async def __aenter__(self) -> Producer:
        """Start the producer's tasks (:func:`open_producer` does, with its task group)."""
        self._cluster.start()
        self._tg.start_soon(self._sender.run, name="trafka producer sender")
        self._telemetry.start(self._tg)
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Flush and close; after an exception (or cancellation), close at once:
        unsent records fail. Then its tasks are cancelled and connections closed."""
        try:
            if exc is not None:
                with anyio.CancelScope(shield=True):
                    await self._close(flush=False)
            else:
                await self._close(flush=True)
        finally:
            if self.interceptors is not None:
                self.interceptors.close()  # after the last records' acknowledgements
            self._tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await self._cluster.aclose()


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
    async with owned_task_group() as tg, Producer(cfg, tg) as producer:
        await start_client_hooks(tg, producer, "producer", cfg)
        yield producer


async def _send_general(producer: Producer, *args: Any) -> RecordFuture:
    """:meth:`Producer.send`'s general path (``args`` are its arguments), with
    interceptors too: ``core.prepare(*args)``, on a worker thread when a schema
    serializer would ask its registry (a subject's first record: the loop is not
    held for the request), then :meth:`Producer.send_prepared` (which checks
    the producer is still open)."""
    core = producer.core
    topic, value, key = args[:3]
    if core.asks_registry is not None and core.asks_registry(topic, key, value):
        record = await anyio.to_thread.run_sync(core.prepare, *args)
    else:
        record = core.prepare(*args)
    return await producer.send_prepared(record)
