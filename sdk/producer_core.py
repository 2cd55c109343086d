"""The producer's core: records into batches, answers into outcomes, and the
transaction's steps, without I/O.

Every producer driver calls this one object's public methods: the async
:class:`~trafka.sdk.producer.Producer` (tasks, events, sockets), and the
blocking producer's sending threads while the loop waits for I/O
(:mod:`.blocking`). It owns the :class:`~trafka.sdk.accumulator.Accumulator`,
the partitioner, the serializers, the
:class:`~trafka.sdk.transactions.TransactionManager` and the batches the hot
path fills.

Rules:

* No task, event, socket or clock of its own: time is passed in (or read from
  the ``clock`` it is given when a batch opens), and the three things only a
  driver can do are asked of it through the functions it hands over: ``wake``
  (the sender has something to do), ``memory_freed`` (``buffer.memory`` has
  room again) and ``start_request`` (write a transaction request). They are
  called synchronously and must not block.
* One append path. A record reaches a batch through :attr:`append_hot` (a bytes
  record, no partition, headers or timestamp: straight into the batch its
  partition is filling, KIP-480's sticky batch for key-less records, the
  murmur2 partition's for keyed ones) or, when that says a batch must open,
  through :meth:`append_at` (the partitioner's choice, joining the transaction,
  opening a batch). Both end in the accumulator's
  :meth:`~trafka.sdk.accumulator.Accumulator.append_to`, the one place that
  adds a record to a batch and charges ``buffer.memory``. :meth:`append_at` is
  also where :attr:`append_hot`'s batches come from: a batch it opens for a
  record without partition becomes the one its partition fills.
* A batch the hot path keeps was opened in the current transaction, so its
  partition has joined it; the moment the transaction takes no more records
  (committing, aborting, doomed) those batches are forgotten.
* The first fatal error (a fenced producer, a fatal transaction error) fails
  every buffered record and every later append.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from trafka.codec import ErrorCode, KafkaError
from trafka.common.lograte import RateLimitedLog

from ._util import Serializer, get_serializer
from ._validate import check_headers, check_partition, check_timestamp_ms, check_topic
from .accumulator import (
    BATCH_OVERHEAD,
    RECORD_MEMORY_OVERHEAD,
    RECORD_OVERHEAD,
    Accumulator,
    ProducerBatch,
    RecordHandle,
    produce_results,
)
from .config import ProducerConfig
from .consumer_types import TopicPartition
from .errors import (
    ClientClosedError,
    OutcomeUnknownError,
    SerializationError,
    TransactionAbortedError,
)
from .hot_append import KEYS_NONE, Appender, key_mode
from .metadata import REFRESH_ERRORS, MetadataCache
from .partitioners import PARTITIONERS, Partitioner
from .tracing import traced
from .transactions import TransactionManager, TxnRequest, TxnResult, TxnState

if TYPE_CHECKING:
    from .statistics.producing import ProducerStatistics

__all__ = ["PreparedRecord", "ProducerCore", "error_kind"]

log = logging.getLogger("trafka.sdk.producer")

_SEQUENCE_GAP = (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID)

# A record as :meth:`ProducerCore.prepare` returns it: (topic, value bytes, key
# bytes, partition, headers, timestamp_ms).
PreparedRecord = tuple[
    str, bytes | None, bytes | None, int | None, Sequence[tuple[str, bytes | None]], int | None
]


def error_kind(exc: BaseException) -> str:
    """What retries of one cause share, for the rate-limited retry log: a Kafka
    error code's name (``"NOT_ENOUGH_REPLICAS"``), else the exception's class."""
    if isinstance(exc, KafkaError):
        if exc.code.value != exc.raw_code:  # a code this codec does not know
            return f"error {exc.raw_code}"
        return exc.code.name
    return type(exc).__name__


def _serialized(what: str, serializer: Serializer, value: Any) -> bytes | None:
    """``serializer(value)``; its SerializationError names ``what`` (key or value)."""
    try:
        return serializer(value)
    except SerializationError as exc:
        raise SerializationError(f"{what}: {exc}") from exc.__cause__


def _framed_serializers(
    config: ProducerConfig, key_ser: Serializer, value_ser: Serializer
) -> Callable[..., PreparedRecord] | None:
    """``prepare``'s serializing when a serializer is told the topic and the
    headers, to which it may add (a schema id header: trafka.sdk.schemas);
    None when neither is. Its errors name the record already."""
    kr = getattr(config.key_serializer, "serialize_record", None)
    vr = getattr(config.value_serializer, "serialize_record", None)
    if kr is None and vr is None:
        return None

    def prepare(
        topic: str, value: Any, key: Any, partition: Any, hdrs: Any, timestamp_ms: Any
    ) -> PreparedRecord:
        headers = list(hdrs)
        key_bytes = kr(key, topic, True, headers) if kr else _serialized("key", key_ser, key)
        if vr is not None:
            value_bytes = vr(value, topic, False, headers)
        else:
            value_bytes = _serialized("value", value_ser, value)
        return topic, value_bytes, key_bytes, partition, tuple(headers), timestamp_ms

    return prepare


def _registry_asker(config: ProducerConfig) -> Callable[[str, Any, Any], bool] | None:
    """``(topic, key, value)`` -> whether serializing them would ask a schema
    registry (trafka.sdk.schemas: a subject's first record); None when no
    serializer can."""
    needs = [
        (ser.needs_registry, is_key)
        for ser, is_key in ((config.key_serializer, True), (config.value_serializer, False))
        if hasattr(ser, "needs_registry")
    ]
    if not needs:
        return None

    def asks(topic: str, key: Any, value: Any) -> bool:
        return any(need(key if is_key else value, topic, is_key) for need, is_key in needs)

    return asks


def _nothing() -> None:
    pass


class ProducerCore:
    """The I/O-free part of a producer (see the module doc).

    Args:
        config: the producer's configuration.
        metadata: the metadata cache its driver keeps fresh.
        clock: the driver's monotonic clock (read when a batch opens).
        handle_class: what :meth:`append_at` returns per record (the async
            driver's awaitable :class:`~trafka.sdk.producer.RecordFuture`).
        wake: the sender has something to do.
        memory_freed: ``buffer.memory`` has room again.
        start_request: write this transaction request (its answer goes to
            :attr:`txn`, then :meth:`request_done`).
        limit_reached: ``(batch, size)``: the appender's ``try_send`` filled
            ``batch`` up to its ``limit`` (the async driver's).

    Attributes:
        acc: the accumulator.
        txn: the transaction manager (an idempotent producer's id too).
        metadata: the metadata cache.
        transactional: a ``transactional.id`` is set.
        hot_path: :attr:`append_hot` can take records (bytes values under a
            named partitioner other than ``roundrobin``, with batches that fit every limit, and no
            interceptors).
        appender: the per-record path (:mod:`.hot_append`, whose rules say what
            it takes and answers), C where built.
        append_hot: its ``append``, every producer's fast path, the one copy.
        closed: closed; nothing is appended any more.
        fatal: the error every append fails with from now on, or None.
        request_busy: a transaction request is out.
    """

    def __init__(
        self,
        config: ProducerConfig,
        metadata: MetadataCache,
        clock: Callable[[], float],
        *,
        handle_class: type[RecordHandle] = RecordHandle,
        wake: Callable[[], None] = _nothing,
        memory_freed: Callable[[], None] = _nothing,
        start_request: Callable[[TxnRequest], None] | None = None,
        limit_reached: Callable[[ProducerBatch, int], None] | None = None,
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.clock = clock
        self.wake = wake
        self.memory_freed = memory_freed
        self.start_request = start_request
        self.acc = Accumulator(
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
            handle_class=handle_class,
            clock=clock,
        )
        self.acc.batch_records = config.batch_num_messages or 0
        self.acc.max_records = config.queue_buffering_max_messages
        self._partitioner = Partitioner(config.partitioner, config.sticky_partitioning_linger_ms)
        self._sticky = self._partitioner.sticky
        # Some partitioners never look at availability; skip computing it.
        info = PARTITIONERS.get(self._partitioner.name)
        self._partitioner_needs_available = info is None or info.uses_availability
        self._key_ser = get_serializer(config.key_serializer)
        self._value_ser = get_serializer(config.value_serializer)
        self._framed = _framed_serializers(config, self._key_ser, self._value_ser)
        self.asks_registry = _registry_asker(config)
        self._raw_keys = config.key_serializer == "bytes"
        self._raw_values = config.value_serializer == "bytes"
        self.closed = False
        self.fatal: BaseException | None = None
        self.transactional = config.transactional_id is not None
        self.txn = TransactionManager(
            config.transactional_id,
            transaction_timeout_ms=config.transaction_timeout_ms,
            request_timeout=config.request_timeout_ms / 1000,
            retry_backoff=config.retry_backoff_ms / 1000,
            retry_backoff_max=config.retry_backoff_max_ms / 1000,
        )
        self.request_busy = False
        # The errors batches are retried after, told as they happen (rate-limited).
        self._retry_log = RateLimitedLog(log, interval=30.0, clock=clock)
        self.acc.on_retry = self._on_batch_retry
        self.acc.epoch_of = self.metadata.leader_epoch
        if self.transactional:
            self.txn.on_unsendable = self.forget_hot_batches
            self.acc.send_allowed = self.txn.is_send_allowed
            self.acc.on_failure = self._on_batch_failed
        # The batch each topic's sticky partition is filling (KIP-480: every
        # key-less record goes there until the batch is done).
        self._sticky_batches: dict[str, ProducerBatch] = {}
        fits = config.batch_size + RECORD_MEMORY_OVERHEAD <= min(
            config.max_request_size - BATCH_OVERHEAD, config.buffer_memory
        )
        # Records a named partitioner places without a counter (a key hash, a
        # random choice) find their partition's open batch by its pick: per
        # topic, the batches indexed by partition (dropped when the count changes).
        self._keyed_batches: dict[str, list[ProducerBatch | None]] = {}
        metadata.resize_listeners.append(self.forget_keyed_batches)
        # librdkafka's timed sticky partitions the appenders keep: (partition, until).
        self._timed_partitions: dict[str, tuple[int, float]] = {}
        metadata.update_listeners.append(self._timed_partitions.clear)
        named = isinstance(config.partitioner, str) and info is not None  # not a callable
        slots = named and self._raw_keys and info.null_keys != "roundrobin"  # type: ignore[union-attr]
        # Interceptors (and spans) see every record in send(): none takes the hot path.
        self.hot_path = bool(
            (self._sticky or slots)
            and self._raw_values
            and fits
            and not config.interceptor_classes
            and not traced(config)
        )
        self._hot_slots = bool(slots and self.hot_path)
        self._keys = key_mode(self._partitioner.name) if self._hot_slots else KEYS_NONE
        self._appenders: list[Any] = []
        self.appender = self.appender_for(handle_class, limit_reached)
        self.append_hot: Callable[[Any, Any, Any], ProducerBatch | bool] = self.appender.append

    # -- records --------------------------------------------------------------------------

    def prepare(
        self, topic: Any, value: Any, key: Any, partition: Any, headers: Any, timestamp_ms: Any
    ) -> PreparedRecord:
        """``send``'s arguments checked and serialized: ``(topic, value bytes,
        key bytes, partition, headers, timestamp_ms)``. Pure: the blocking
        producer calls it in the caller's thread, so that misuse is raised
        there, at the call, and never reaches the loop.

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
        if self._framed is not None:
            return self._framed(topic, value, key, partition, hdrs, timestamp_ms)
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

    def check_open(self) -> None:
        """Raise why nothing can be appended, if something stands in the way.

        Raises:
            ClientClosedError: closed.
            The fatal error, once there is one.
        """
        if self.closed or self.acc.closing or self.fatal is not None:
            raise self.fatal or ClientClosedError("the producer is closed")

    def appender_for(
        self,
        handle_type: type[Any],
        limit_reached: Callable[[ProducerBatch, int], None] | None = None,
    ) -> Any:
        """An appender (:mod:`.hot_append`) over this core's batches whose handles
        are ``handle_type(batch, index)`` (a front's own); closed with the core."""
        appender = Appender(
            self.acc,
            self._sticky_batches,
            self._keyed_batches,
            self._hot_pick,
            handle_type,
            RECORD_OVERHEAD,
            RECORD_MEMORY_OVERHEAD,
            self._keys,
            self._sticky and self.hot_path,
            limit_reached,
            timed=self._timed_partitions,
        )
        appender.open = self.hot_path and not self.closed and self.fatal is None
        self._appenders.append(appender)
        return appender

    def _hot_pick(self, topic: str, key: bytes | None, n: int) -> int | tuple[int, float] | None:
        """The appender's pick (:class:`~.hot_append.PyAppender`): a partition of
        ``n``, ``(partition, until)`` for a timed sticky one, None without metadata."""
        info = self.metadata.topics.get(topic)
        if info is None:
            return None
        p = self.pick(topic, key, n, info)[0]
        if not key:
            until = self._partitioner.sticky_until(topic)
            if until is not None:
                return p, until
        return p

    def pick(
        self, topic: str, key_bytes: bytes | None, n: int, info: Any, partition: int | None = None
    ) -> tuple[int, bool]:
        """The partition of a record for ``topic`` (``n`` partitions, its metadata
        ``info``): ``partition`` when given, else the partitioner's choice; and
        whether that is the sticky partition of a key-less record (KIP-480).

        Raises:
            KafkaError: UNKNOWN_TOPIC_OR_PARTITION, ``partition`` is not one of the topic's.
        """
        if partition is not None:
            if 0 <= partition < n:
                return partition, False
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"partition {partition} of {topic!r} (it has {n})",
            )
        available = info.available_partitions if self._partitioner_needs_available else ()
        p = self._partitioner.partition(topic, key_bytes, n, available)
        return p, key_bytes is None and self._sticky

    def append_at(
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
        now: float | None = None,
    ) -> tuple[RecordHandle, bool]:
        """Append a record to partition ``p`` of ``topic`` (``n`` partitions),
        joining ``p`` to the transaction first, or, when ``sticky`` and ``p``'s
        batch is done, to the sticky partitioner's next choice. With
        ``remember``, the batch becomes the one :attr:`append_hot` fills for its
        partition. ``now`` None: on the loop, where a partition that joins the
        transaction has its request started at once (``start_request``); given
        (the loop's clock read from another thread), that is the driver's to
        do afterwards (:meth:`step`).

        Returns:
            The record's handle, and whether its partition joined the
            transaction now.

        Raises:
            BufferFullError: no memory for it now.
            KafkaError: MESSAGE_TOO_LARGE.
        """
        acc = self.acc
        md = self.metadata
        joined = False
        while True:
            # Before the append: the batch must not leave before its partition joins.
            # A new partition's AddPartitionsToTxn goes now, overlapping with
            # filling the batch.
            if self.transactional and self.txn.add_partition(topic, p):
                joined = True
                if now is None:
                    self.step(self.clock())
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
            self._remember(topic, p, n, key_bytes, handle.batch)
        return handle, joined

    def _remember(
        self, topic: str, p: int, n: int, key: bytes | None, batch: ProducerBatch
    ) -> None:
        if key is None and self._sticky:
            self._sticky_batches[topic] = batch
        elif self._hot_slots and (key is None or type(key) is bytes):
            slots = self._keyed_batches.get(topic)
            current = self.metadata.topics.get(topic)
            # Only for the count the metadata holds now: it may have changed
            # while the caller waited.
            if slots is None and current is not None and len(current.partitions) == n:
                slots = self._keyed_batches[topic] = [None] * n
            if slots is not None and len(slots) == n:
                slots[p] = batch

    def open_batch(
        self, topic: str, value: bytes, key: bytes | None, now: float
    ) -> tuple[RecordHandle, bool] | None:
        """For a record :attr:`append_hot` says needs a batch opened, from a thread
        other than the loop's while it waits: :meth:`append_at` for it when that
        cannot wait or be refused (``now``: the loop's clock, read from that
        thread); the driver then runs :meth:`step` and wakes the sender.

        Returns:
            The record's handle and whether its partition joined the transaction
            now; None when it must take the driver's ``send`` (it would wait for
            metadata or memory, or be refused).
        """
        if self.closed or self.fatal is not None or (self.transactional and not self.txn.sendable):
            return None
        size = RECORD_OVERHEAD + len(value)
        if key is not None:
            if type(key) is not bytes or not self._raw_keys:
                return None
            size += len(key)
        if not self.acc.can_take(size):
            return None
        info = self.metadata.topics.get(topic)
        n = len(info.partitions) if info is not None else 0
        if not n:
            return None
        p, sticky = self.pick(topic, key, n, info)
        ts = int(time.time() * 1000)
        return self.append_at(topic, p, sticky, n, ts, key, value, (), True, now)

    def forget_keyed_batches(self, topic: str) -> None:
        """``topic``'s partition count changed: its keyed batches no longer map."""
        self._keyed_batches.pop(topic, None)

    def forget_hot_batches(self) -> None:
        """The transaction takes no more records (committing, aborting, doomed):
        the hot path must not append to the batches it kept, so the next record
        takes :meth:`append_at`, which asks the transaction."""
        self._sticky_batches.clear()
        self._keyed_batches.clear()

    # -- answers ---------------------------------------------------------------------------

    def on_produce_response(
        self,
        batches: list[ProducerBatch],
        response: Any,
        now: float,
        topic_ids: dict[str, uuid.UUID] | None = None,
    ) -> bool:
        """A Produce answer (None for ``acks=0``): each batch completes, is
        retried or fails. ``topic_ids``: the ids the request named its topics by
        (v13+). Returns whether the metadata must be refreshed (the driver then
        nudges its refresher); a KIP-951 hint moves the partition, and the batches
        sent under the older epoch skip their backoff (:class:`.Accumulator`)."""
        acc = self.acc
        if response is None:
            for b in batches:
                acc.complete(b, -1, now=now)
            return False
        md = self.metadata
        if response.node_endpoints:
            md.learn_endpoints(response.node_endpoints)
        refresh = False
        for b, p in produce_results(batches, response, topic_ids):
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
                refresh = True  # the refresh below is asked for with or without a hint
                hint = p.current_leader  # KIP-951; leader -1: none
                md.on_leader_hint(b.topic, b.partition, hint.leader_id, hint.leader_epoch)
            if code in _SEQUENCE_GAP and b.base_sequence >= 0:
                if acc.has_earlier(b):
                    # An older batch's retry: this one follows it.
                    acc.retry_or_fail(b, err, now, force=True)
                    continue
                if acc.fail_overtaken(b, err):
                    continue
                if not self.transactional:
                    # KIP-360: renumber the partition under a new identity and resend.
                    if acc.retry_or_fail(b, err, now, force=True) and acc.request_sequence_reset(b):
                        self.txn.request_epoch_bump()
                    continue
            acc.retry_or_fail(b, err, now)
        if refresh:  # after a hint too, as KIP-951 and Java's Sender do
            md.request_update()
        return refresh

    def on_produce_failed(
        self, batches: list[ProducerBatch], error: BaseException, now: float
    ) -> None:
        """A Produce request got no answer: its batches are retried or fail, and
        the metadata is refreshed (the driver nudges its refresher)."""
        acc = self.acc
        for b in batches:
            acc.retry_or_fail(b, error, now)
        self.metadata.request_update()

    def _on_batch_retry(self, batch: ProducerBatch, error: BaseException) -> None:
        """Tell the error a batch is retried after, as it happens (once per kind of
        error and interval), so that a cause retried until ``delivery.timeout.ms``
        is known long before the records fail."""
        left = batch.created + self.acc.delivery_timeout - self.clock()
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
        txn = self.txn
        txn.on_batch_failed(error, sequenced=batch.base_sequence >= 0, number=batch.txn)
        if txn.fatal_error is not None:
            # At once, before a caller woken by the fatal error looks at its records.
            self.set_fatal(txn.fatal_error)
        self.wake()

    def set_fatal(self, error: BaseException) -> None:
        """From now on every append fails with ``error``; buffered records fail now."""
        if self.fatal is None:
            self.fatal = error
            for appender in self._appenders:
                appender.open = False
            self.acc.abort(error)
            self.memory_freed()

    # -- the transaction (an idempotent producer's id too) ------------------------------

    def step(self, now: float) -> None:
        """Feed the transaction manager and start its next request, if one is due
        and none is out (``start_request``)."""
        txn = self.txn
        acc = self.acc
        if txn.state is TxnState.UNINITIALIZED:
            if self.transactional or not acc.has_pending():
                return
            txn.init()  # an idempotent producer's id, with its first batch
        if txn.fatal_error is not None:
            self.set_fatal(txn.fatal_error)
            return
        doomed: BaseException | None = None
        if txn.state is TxnState.ABORTABLE_ERROR:
            doomed = txn.last_error
        elif txn.state is TxnState.ABORTING_TRANSACTION:
            doomed = TransactionAbortedError("the transaction was aborted")
        if doomed is not None and acc.abort_undrained(doomed):
            self.memory_freed()
        if not self.request_busy and self.start_request is not None:
            request = txn.poll(now, batches_pending=self.batches_pending())
            if request is not None:
                self.request_busy = True
                self.start_request(request)

    def batches_pending(self) -> bool:
        """Whether the transaction being committed or aborted has batches left
        (not those of a transaction begun ahead of its end)."""
        txn = self.txn
        return self.acc.has_pending(txn.sending_number if txn.pipelined else None)

    def on_request_failed(self, request: TxnRequest, error: BaseException, now: float) -> None:
        """A transaction request got no answer: the manager retries it (after a
        metadata refresh when it went to a coordinator, which may have moved)."""
        log.debug("%s failed: %s", request.kind.name, error)
        if request.coordinator is not None:
            self.metadata.request_update()
        self.txn.on_failure(request, error, now)

    def request_done(self) -> None:
        """A transaction request ended (its answer or failure given to :attr:`txn`):
        apply its outcome. The driver then steps on (:meth:`step`)."""
        txn = self.txn
        self.request_busy = False
        if txn.fatal_error is not None:
            self.set_fatal(txn.fatal_error)
        acc = self.acc
        if acc.producer_id != txn.producer_id or acc.producer_epoch != txn.producer_epoch:
            acc.producer_id = txn.producer_id
            acc.producer_epoch = txn.producer_epoch

    def idempotence_unsupported(self) -> None:
        """The broker has no InitProducerId and idempotence was only implied:
        it is off, as Java quietly turns it off too."""
        log.info("the broker has no InitProducerId: idempotence is off")
        self.acc.idempotent = False
        self.acc.partition_in_flight = 1

    def begin_transaction(self) -> bool:
        """Begin a transaction; whether it began ahead of a commit still under
        way (whose open batches then take no more records)."""
        txn = self.txn
        txn.begin()
        if txn.pipelined:
            self.acc.seal()
        self.acc.txn_open = txn.open_number
        return txn.pipelined

    def begin_abort(self) -> TxnResult:
        """Start aborting the transaction; a transaction begun ahead of a commit
        fails its batches at once (none of them left)."""
        txn = self.txn
        ahead = txn.open_number if txn.pipelined else None
        result = txn.begin_abort()
        if ahead is not None:
            doomed = TransactionAbortedError("the transaction was aborted")
            if self.acc.abort_undrained(doomed, ahead):
                self.memory_freed()
        return result

    def statistics(
        self,
        *,
        requests_in_flight: int,
        brokers: Any,
        telemetry: Any,
    ) -> ProducerStatistics:
        """The producer's statistics from the core's counters, with what only
        the driver knows (Produce requests in flight, the brokers' and the
        metrics push's statistics)."""
        # Built only when asked for: importing the producer does not load them.
        from .statistics.producing import (
            ProducerStatistics,
            producer_partition_statistics,
            topic_statistics,
        )

        acc = self.acc
        topics = {t: topic_statistics(c) for t, c in sorted(acc.topic_counters.items())}
        values = topics.values()
        txn = self.txn
        return ProducerStatistics(
            records_sent=sum(t.records_sent for t in values),
            bytes_sent=sum(t.bytes_sent for t in values),
            batches_sent=sum(t.batches_sent for t in values),
            records_failed=sum(t.records_failed for t in values),
            batch_retries=sum(t.batch_retries for t in values),
            records_buffered=sum(len(b.records) for b in acc.incomplete_batches()),
            buffer_memory_used=acc.used_memory,
            buffer_memory=acc.buffer_memory,
            requests_in_flight=requests_in_flight,
            producer_id=acc.producer_id,
            producer_epoch=acc.producer_epoch,
            transactions_committed=txn.transactions_committed,
            transactions_aborted=txn.transactions_aborted,
            topics=topics,
            brokers=brokers,
            telemetry=telemetry,
            partitions={
                TopicPartition(topic, partition): producer_partition_statistics(c, n, size)
                for topic, partition, n, size, c in sorted(
                    acc.partition_counters(), key=lambda row: row[:2]
                )
            },
        )

    def stop_appends(self) -> None:
        """Closing: no record is taken from now on (:meth:`check_open` raises
        ClientClosedError), so that the close's last flush waits for every
        record there is, and none is appended behind it (Java's close closes
        its accumulator first too)."""
        self.acc.closing = True

    def close(self, error: BaseException) -> None:
        """Closed: records never sent and transaction calls fail with ``error``;
        records whose request was written (unanswered, or to be retried) fail
        with :class:`~trafka.sdk.errors.OutcomeUnknownError`: they may be in
        the log, and ``error`` would tell the caller they are not."""
        self.closed = True
        for appender in self._appenders:
            appender.open = False
        self.acc.closing = True
        self.acc.abort_closing(
            error,
            OutcomeUnknownError(
                "the producer closed before the answer to the request carrying the "
                "record came: it may or may not have been written"
            ),
        )
        self.txn.close(error)
