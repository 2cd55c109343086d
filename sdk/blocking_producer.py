"""The blocking producer: :class:`~trafka.sdk.producer.Producer` on a loop in a
thread of its own (see :mod:`.blocking` for what every blocking client does;
``trafka.sdk.blocking`` exports the names of this module).

Rules:

* :meth:`Producer.send` does not cross to the loop per record. A bytes record
  whose partition is filling a batch goes straight into it from the caller's
  thread, through the producer core's one fast path (:mod:`.hot_append`, the
  async ``send``'s too: an appender of its own whose ``take`` makes the record's
  :class:`SendFuture` in the same C call), while the loop's thread waits for
  I/O (:class:`~._loop_thread.LoopLock`: the loop's thread holds a lock
  whenever it runs, and such a sender gives it its turn when it asks). Other records queue in the
  caller's thread, and the loop takes them in order, as one task, and hands them
  to the async producer. A record the fast path could take but for a batch to
  open takes the async send's general path in the caller's thread too
  (its core's :meth:`~trafka.sdk.producer_core.ProducerCore.open_batch`),
  the loop then doing what touches sockets (sending the batch that filled up)
  while the thread goes on. Others (a serializer, headers, a partition, no memory, no metadata
  yet) only queue, as waiting would gain them nothing. No record passes one
  of its topic queued before it. A record whose topic's metadata is not known
  yet waits for it aside (:mod:`.producer_parking`), so that the other topics'
  records go on meanwhile: up to ``max.block.ms`` from its send, as Java's
  ``send()`` waits for it, or, with ``metadata_wait="delivery.timeout.ms"``
  (confluent-kafka's drop-in), up to ``delivery.timeout.ms``, as librdkafka
  queues a record of a topic it does not know yet. Each send returns a
  :class:`SendFuture` for its :class:`~trafka.sdk.accumulator.RecordMetadata`
  (``result()``, ``exception()``, ``done()``, ``add_done_callback()``,
  ``cancel()`` while still queued or waiting for metadata). At most
  ``max_queued`` records wait there: beyond that ``send`` blocks until the loop
  catches up (which itself waits for ``buffer.memory``, as the async producer
  does). Misuse (an argument of the wrong type or out of range, a key or value
  the serializer refuses) is raised by ``send`` itself: the arguments are
  checked and serialized in the caller's thread, before anything is queued.
  Errors that depend on the cluster (an unknown partition, a closed or failed
  producer, a send outside a transaction) arrive through the future.
* Order: every other producer call first hands every queued record over, so
  ``flush()`` waits for them and ``commit_transaction()`` commits what was sent
  before it (``flush()``, ``close()``, ``commit_transaction()`` and
  ``send_offsets_to_transaction()`` also wait for the records waiting for
  metadata; ``abort_transaction()`` fails them). Sends are thread-safe; the
  records of one thread keep their order within a topic.
* Closed as the interpreter exits (:func:`._loop_thread._close_open_portals`),
  the producer delivers what it holds as :meth:`Producer.close` does, but gives
  up what it cannot deliver without waiting: everything left once every broker
  is out of reach (:meth:`~.transport.Cluster.wait_all_down`: a script with no
  broker exits after its connects fail, not after its records' timeouts; when
  they were all down already, none reached within a reconnect backoff and a
  connect's time means they still are), and the records of a topic the brokers
  say does not exist.
"""

from __future__ import annotations

import logging
import threading
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import CancelledError
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import trio
import trio.lowlevel

from trafka.codec import TrafkaError

from . import hot_append
from ._loop_thread import (
    Forwarding,
    LoopLock,
    Portal,
    locked,
    refuse_loop_thread,
    unlocked,
    wait_turn,
    with_loop_lock,
)
from ._validate import check_bool, check_callable, check_int, check_timeout
from .accumulator import ProducerBatch, RecordHandle, RecordMetadata
from .consumer_types import TopicPartition
from .errors import (
    ArgumentValueError,
    ClientClosedError,
    RecordPurgedError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from .hot_append import HandleBase
from .interceptors import ProducerRecord
from .producer import PendingCommit as AsyncPendingCommit
from .producer import Producer as AsyncProducer
from .producer import RecordFuture, open_producer, transaction_offsets
from .producer_batches import delivery_reporter, report_delivery
from .producer_parking import METADATA_WAITS
from .send_queue import SendQueue
from .transactions import ConsumerGroupMetadata

if TYPE_CHECKING:
    from .statistics.producing import ProducerStatistics

__all__ = ["PendingCommit", "Producer", "SendFuture"]

log = logging.getLogger("trafka.sdk.blocking")


def _run_callback(fn: Callable[[SendFuture], Any], future: SendFuture, _: Any) -> None:
    try:
        fn(future)
    except Exception:
        log.exception("a send callback failed")


class _FutureSide:
    """What a :class:`SendFuture` needs of its producer: the lock of its queue,
    a wait on the loop for it to be done, and a call on the loop."""

    __slots__ = ("call", "lock", "register", "wait")

    def __init__(
        self,
        lock: threading.Lock,
        wait: Callable[[SendFuture, float | None], None],
        call: Callable[..., Any],
        register: Callable[[RecordHandle, Callable[..., Any]], None],
    ) -> None:
        self.lock = lock
        self.wait = wait
        self.call = call
        self.register = register


class _Pending:
    """A queued record's future until the loop takes the record: refused,
    cancelled, or callbacks to move onto its handle."""

    __slots__ = ("callbacks", "cancelled", "error")

    def __init__(self) -> None:
        self.error: BaseException | None = None  # refused before reaching the async producer
        self.cancelled = False
        self.callbacks: list[Callable[[SendFuture], Any]] | None = None


class SendFuture(HandleBase):
    """The outcome of :meth:`Producer.send`, as a :class:`concurrent.futures.Future`
    is used: :meth:`result`, :meth:`exception`, :meth:`done`,
    :meth:`add_done_callback`, :meth:`cancel`.

    It costs nothing per record while nobody waits: it is the record's place
    (:class:`~trafka.sdk.hot_append.HandleBase`: ``batch`` and ``index``, the
    batch None while the record is queued here), made by the fast path in the
    same C call that appends the record, and waiting crosses to the loop only
    for a record not yet acknowledged (after :meth:`Producer.flush` every
    record is). A queued record's future keeps what it needs until the loop
    takes it in ``state``. :meth:`taken` and :meth:`set_exception` are the
    producer's, as ``set_result`` is an executor's in :mod:`concurrent.futures`.
    Each producer has a subclass of its own, whose ``_side`` is the producer's.
    """

    __slots__ = ()

    _side: _FutureSide
    batch: ProducerBatch | None
    state: _Pending | None

    @classmethod
    def queued(cls) -> SendFuture:
        """A future for a record queued for the loop."""
        future = cls(None, 0)
        future.state = _Pending()
        return future

    def record_handle(self) -> RecordHandle | None:
        """The async producer's handle of the record; None while it is queued here
        (or refused or cancelled before the producer took it)."""
        batch = self.batch
        return None if batch is None else RecordFuture(batch, self.index)

    def done(self) -> bool:
        """Delivered, failed or cancelled."""
        batch = self.batch
        if batch is not None:
            return batch.done
        state = self.state
        return state is not None and (state.error is not None or state.cancelled)

    def cancelled(self) -> bool:
        state = self.state
        return state is not None and state.cancelled

    def cancel(self) -> bool:
        """Drop the record if it is still queued here; False once the loop took it."""
        with self._side.lock:
            state = self.state
            if self.batch is not None or state is None or state.error is not None:
                return False
            state.cancelled = True
            return True

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata, waiting up to ``timeout`` seconds (default: as long as it takes).

        Raises:
            The delivery error; ``concurrent.futures.CancelledError`` after
            :meth:`cancel`; ``TimeoutError`` when ``timeout`` passes.
        """
        error = self.exception(timeout)
        if error is not None:
            raise error
        handle = self.record_handle()
        assert handle is not None
        return handle.result()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The delivery error, or None once delivered (waiting as :meth:`result`).

        Raises:
            TypeError, ValueError: ``timeout`` is not None or a number >= 0.
        """
        check_timeout("timeout", timeout)
        if self.cancelled():
            raise CancelledError()
        if not self.done():
            self._side.wait(self, timeout)
        state = self.state
        if state is not None and self.batch is None:
            if state.cancelled:
                raise CancelledError()
            return state.error
        handle = self.record_handle()
        assert handle is not None
        return handle.exception()

    def add_done_callback(self, fn: Callable[[SendFuture], Any]) -> None:
        """Call ``fn(future)`` once done: at once if it is, else on the client's
        thread (keep it short, and do not call the producer from it).

        Raises:
            TypeError: ``fn`` is not callable.
        """
        check_callable("fn", fn, none=False)
        with self._side.lock:
            handle = self.record_handle()
            state = self.state
            if handle is None and state is not None and state.error is None and not state.cancelled:
                if state.callbacks is None:
                    state.callbacks = []
                state.callbacks.append(fn)
                return
        if handle is not None and not handle.done():
            self._side.register(handle, partial(_run_callback, fn, self))
        else:
            fn(self)

    def taken(self, handle: RecordHandle) -> None:
        """On the loop (or before the future is returned): the async producer
        has the record."""
        self.index = handle.index
        self.batch = handle.batch  # after its index: another thread reads the batch first
        state = self.state
        if state is not None:
            callbacks, state.callbacks = state.callbacks, None
            for fn in callbacks or ():
                handle.add_done_callback(partial(_run_callback, fn, self))

    def set_exception(self, error: BaseException) -> None:
        """The record was refused before the async producer took it."""
        state = self.state
        assert state is not None  # only queued records are refused
        state.error = error
        callbacks, state.callbacks = state.callbacks, None
        for fn in callbacks or ():
            _run_callback(fn, self, None)


class PendingCommit:
    """A commit started with ``commit_transaction(wait=False)`` (blocking).

    Its failure also dooms the transaction begun after it, which must then be
    aborted.
    """

    __slots__ = ("_call", "_pending")

    def __init__(self, call: Callable[..., Any], pending: AsyncPendingCommit) -> None:
        self._call = call  # on the loop, once the records queued before are handed over
        self._pending = pending

    def done(self) -> bool:
        """Whether the commit has completed (or failed)."""
        return self._pending.done()

    def result(self) -> None:
        """Raise the commit's failure, if it failed.

        Raises:
            InvalidTxnStateError: not completed yet.
        """
        self._pending.result()

    def wait(self) -> None:
        """Wait for the commit (up to ``max.block.ms``) and raise its failure, if any."""
        if not self._pending.done():
            self._call(self._pending.wait)
        self._pending.result()

    def __repr__(self) -> str:
        return repr(self._pending).replace("<PendingCommit", "<blocking PendingCommit", 1)


class Producer(Forwarding):
    """A blocking Kafka producer (see the module doc for how it runs).

    Args:
        config: a :class:`~trafka.sdk.config.ProducerConfig` or a mapping of
            Kafka-style keys, as :func:`~trafka.sdk.open_producer` takes.
        max_queued: records that may wait for the loop before ``send`` blocks.
        metadata_wait: how long a record may wait for its topic's metadata:
            ``"max.block.ms"`` (Java's ``send()``; it then fails with
            ``ProducerBlockedError``) or ``"delivery.timeout.ms"``
            (librdkafka's: ``DeliveryTimeoutError``); see
            :mod:`trafka.sdk.producer_parking`.
        **settings: settings in Python spelling (``linger_ms=5``).

    Raises:
        ConfigError: invalid configuration.
    """

    def __init__(
        self,
        config: Any = None,
        *,
        max_queued: int = 10_000,
        metadata_wait: str = "max.block.ms",
        **settings: Any,
    ) -> None:
        check_int("max_queued", max_queued, minimum=1, maximum=None)
        if metadata_wait not in METADATA_WAITS:
            raise ArgumentValueError(
                f"metadata_wait must be one of {', '.join(METADATA_WAITS)}, got {metadata_wait!r}"
            )
        # The records the fast path does not take, for the loop (and those
        # waiting for their topic's metadata).
        self._sends = SendQueue(max_queued, lambda: self._loop.closing)
        self._loop_lock = LoopLock()
        self._loop = Portal(
            lambda: with_loop_lock(
                open_producer(config, **settings), self._loop_lock, self._sends.drainer
            ),
            self,
            at_exit=self._close_at_exit,
        )
        self._producer: AsyncProducer = self._loop.client
        self._loop.portal.call(self._sends.attach, self._producer, metadata_wait)
        self._core = self._producer.core  # its hot path, from the sending threads
        lock = self._sends.lock
        self._side = _FutureSide(lock, self._wait_for, self._loop.call, self._register)
        # This producer's futures (their _side is its), made by its appender's
        # take(): the core's one fast path, answering a future per record.
        self._future: type[SendFuture] = type(
            "SendFuture", (SendFuture,), {"__slots__": (), "_side": self._side}
        )
        appender = self._core.appender_for(self._future)
        self._hot_take = appender.take
        self._token: trio.lowlevel.TrioToken = self._loop.token
        self._interceptors = self._producer.interceptors  # on_send runs in send()'s thread
        self._clock = self._loop.clock  # read by sending threads for the batches they open
        self._initialized = False  # init_transactions() done (later calls change nothing)
        cfg = self._producer.config
        # The configuration's delivery callback (on_delivery), for every record;
        # delivery.report.only.error applies to the callbacks given to send too.
        self._report = delivery_reporter(cfg.on_delivery, cfg.delivery_report_only_error)
        self._only_errors = cfg.delivery_report_only_error
        # send() may take the fast path: no interceptor sees the record.
        self._hot = self._core.hot_path and self._interceptors is None
        C = hot_append.accelerated
        if (
            C is not None
            and self._hot
            and self._report is None
            and type(appender) is C.Appender
            and type(self).send is Producer.send  # (a subclass's own send stays)
        ):
            # send() of a record given nothing else in one C call: the steps of
            # the fast path below, which is its reference and takes every call
            # the C one does not finish.
            self.send = C.Front(  # type: ignore[method-assign]
                appender,
                self._loop_lock.lock,
                self._loop_lock,
                self._sends,  # (its _draining)
                self._loop,
                types.MethodType(Producer.send, self),
                self._send_general,
                self._wake_sender,
                self._give_turn,
                self._wait_turn,
            ).send

    # -- sending ---------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        partition: int | None = None,
        headers: Sequence[tuple[str, Any]] | Mapping[str, Any] | None = None,
        timestamp_ms: int | None = None,
        on_delivery: Callable[[BaseException | None, RecordMetadata | None], Any] | None = None,
    ) -> SendFuture:
        """Queue a record for sending; returns at once unless ``max_queued`` are waiting.

        Args:
            on_delivery: called once the record is delivered or failed, as
                confluent-kafka's delivery callback: ``on_delivery(error,
                metadata)``, the error None and the :class:`RecordMetadata`
                given when delivered, the error given and None when not. It
                runs on the client's thread (keep it short; do not call the
                producer from it); there is nothing to poll.

        Returns:
            A :class:`SendFuture` for the record's :class:`RecordMetadata` (its
            exception: why the record was not delivered).

        Raises:
            TypeError, ValueError: an argument of the wrong type or out of
                range, as the async ``send`` raises it (here, in the calling
                thread); nothing was queued.
            SerializationError: the key or value could not be serialized (the
                serializers run in the calling thread).
            ClientClosedError: the producer is closed.
        """
        if on_delivery is not None:
            check_callable("on_delivery", on_delivery)  # before anything is sent
        if self._hot and partition is None and headers is None and timestamp_ms is None:
            # Straight into the batch the record's partition is filling, from this
            # thread, while no task of the loop runs (the core's one fast path,
            # which decides what it takes and makes the future); unless records
            # wait in the queue (they go first). The lock is taken inline: this
            # runs per record, where a call costs a tenth of the send.
            loop_lock = self._loop_lock
            lock = loop_lock.lock
            if not lock.acquire(False):
                self._check_thread()
                lock.acquire()
            try:
                if self._sends.draining or self._loop.closing:
                    taken: SendFuture | bool = False
                else:
                    taken = self._hot_take(topic, value, key)
                turn = self._give_turn() if loop_lock.wanted else None
            finally:
                lock.release()
            if turn is not None:
                self._wait_turn(turn)
            if taken is True or taken is False:
                future = self._send_general(topic, value, key, None, None, None, taken)
            else:
                future = taken
                if taken.batch.full:  # type: ignore[union-attr]
                    self._wake_sender()  # once per batch, with the lock released
        elif self._interceptors is not None:
            future = self._send_intercepted(
                ProducerRecord(topic, value, key, partition, headers, timestamp_ms)
            )
        else:
            future = self._send_general(topic, value, key, partition, headers, timestamp_ms, False)
        report: Callable[[BaseException | None, Any], Any] | None = self._report
        if on_delivery is not None:
            report = delivery_reporter(on_delivery, True) if self._only_errors else on_delivery
        if report is None:
            return future
        future.add_done_callback(partial(report_delivery, report))
        return future

    def _send_general(
        self,
        topic: Any,
        value: Any,
        key: Any,
        partition: Any,
        headers: Any,
        timestamp_ms: Any,
        needs_batch: bool,
    ) -> SendFuture:
        """A record the fast path did not take: with ``needs_batch`` (a batch
        to open) the async send's general path in this thread when it can
        (:meth:`_open_batch`), else queued for the loop."""
        if needs_batch:
            taken = self._open_batch(topic, value, key)
            if taken is not None:
                return taken
        else:
            self._check_thread()
        # The general path: once the loop has taken the record (its turn,
        # below), a batch it opened takes the next records straight again.
        future = self._future.queued()
        return self._queue_record(
            topic, value, key, partition, headers, timestamp_ms, future, needs_batch
        )

    def _wake_sender(self) -> None:
        """Tell the loop a batch filled up (from a sending thread)."""
        try:
            self._token.run_sync_soon(self._producer.wake_sender)
        except trio.RunFinishedError:
            # Closed since the append (this thread held up that long): the close
            # flushed the batch, and the record's future tells how that went.
            # Raising here would lose it.
            pass

    def _send_intercepted(self, record: ProducerRecord) -> SendFuture:
        """:meth:`send` with interceptors (or tracing): ``on_send`` in this thread, then
        ``on_acknowledgement`` for the record whatever becomes of it (its
        future's first callback, given before the record is queued, so that it
        costs no crossing to the loop)."""
        interceptors = self._interceptors
        assert interceptors is not None
        self._check_thread()
        record, span = interceptors.begin(record)
        future = self._future.queued()
        future.add_done_callback(partial(interceptors.acknowledge, span, record))
        try:
            return self._queue_record(*record.send_args(), future, False)
        except BaseException as exc:
            if not future.done():
                interceptors.end(span, record, None, exc)
            raise

    def _queue_record(
        self,
        topic: Any,
        value: Any,
        key: Any,
        partition: Any,
        headers: Any,
        timestamp_ms: Any,
        future: SendFuture,
        turn_helps: bool,
    ) -> SendFuture:
        """:meth:`send`'s general path: the record checked, serialized and queued
        for the loop to hand over."""
        # Checked and serialized here, in the caller's thread: misuse is raised
        # at the call and never reaches the loop.
        record = self._core.prepare(topic, value, key, partition, headers, timestamp_ms)
        if not self._sends.put((record, future, self._clock.current_time())):
            return future  # a drain is under way
        # Where it helps, the loop's turn: this thread waits while the loop hands
        # the queue over (opening the batch the next records go straight into)
        # and does whatever else it has to do (sending full batches, taking
        # answers), until it is done or would wait. Other records (a serializer,
        # headers, a partition, no memory) gain nothing from waiting: they queue
        # on while the loop takes them.
        turn = threading.Event() if turn_helps else None
        try:
            self._token.run_sync_soon(self._start_drain, turn)
        except trio.RunFinishedError:
            self._sends.fail_all(ClientClosedError("the producer is closed"))
            return future
        if turn is not None:
            self._wait_turn(turn)
        return future

    def _register(self, handle: RecordHandle, callback: Callable[..., Any]) -> None:
        """A callback on a record's handle, from any thread: under the loop's
        lock (the loop idle, its batches ours to touch) rather than a crossing
        to the loop per record (which made a delivery callback per record cost
        a round trip)."""
        loop_lock = self._loop_lock
        if threading.get_ident() == loop_lock.thread:
            handle.add_done_callback(callback)
            return
        locked(loop_lock, "add_done_callback()")
        try:
            handle.add_done_callback(callback)
        finally:
            turn = unlocked(loop_lock)
        if turn is not None:
            self._wait_turn(turn)

    def _wait_turn(self, turn: threading.Event) -> None:
        wait_turn(self._loop, turn)

    def _give_turn(self) -> threading.Event:
        """With the loop's lock held: an event set once the loop has had the turn
        it asked for (wait for it, with the lock released, by :meth:`_wait_turn`)."""
        turn = threading.Event()
        self._loop_lock.release_when_idle(turn)
        return turn

    def _open_batch(self, topic: str, value: bytes, key: bytes | None) -> SendFuture | None:
        """For a record of :meth:`send`'s fast path that needs a batch opened: the
        async producer's general path from this thread (its core's ``open_batch``),
        the loop then starting what the batch needs. None when that path would
        wait or refuse the record: it is queued for the loop instead."""
        loop_lock = self._loop_lock
        locked(loop_lock, "send()")
        placed = None
        try:
            if not (self._sends.draining or self._loop.closing):
                placed = self._core.open_batch(topic, value, key, self._clock.current_time())
        finally:
            turn = unlocked(loop_lock)
        if placed is None:
            if turn is not None:
                self._wait_turn(turn)
            return None
        handle, _ = placed
        future = self._future(handle.batch, handle.index)
        try:
            # The loop sends the batch that filled up while this thread goes on
            # appending to the new one; it takes its turn when it asks for the lock
            # (LoopLock.wanted). Waiting here for the loop to send it (as this did
            # while appends were Python) measured 18% fewer records/s for
            # trafka.sdk.blocking and 22% fewer for the confluent-kafka drop-in
            # (bench/clients.py --suite producer, 500k records, 3 rounds); buffer.memory
            # still bounds how far appends run ahead.
            self._token.run_sync_soon(self._producer.after_append)
        except trio.RunFinishedError:
            return future  # closed meanwhile: its close flushed or failed the batch
        if turn is not None:
            self._wait_turn(turn)
        return future

    def _start_drain(self, turn: threading.Event | None) -> None:
        """On the loop: the drainer hands the queue over; ``turn`` is set once idle."""
        if turn is not None:
            self._loop_lock.release_when_idle(turn)
        self._sends.drain_soon()

    def _check_thread(self) -> None:
        refuse_loop_thread(self._loop_lock, "send()")

    def send_and_wait(
        self, topic: str, value: Any = None, key: Any = None, **kwargs: Any
    ) -> RecordMetadata:
        """:meth:`send`, then wait for the record's :class:`RecordMetadata`."""
        return self.send(topic, value, key, **kwargs).result()

    def _wait_for(self, future: SendFuture, timeout: float | None) -> None:
        """Wait on the loop until ``future`` is done (its record handed over first)."""

        async def wait() -> None:
            await self._sends.wait_taken(future)
            handle = future.record_handle()
            if handle is not None and not handle.done():
                try:
                    await handle  # type: ignore[misc]  # a RecordFuture: awaitable
                except Exception:
                    pass  # the record's own error: the caller reads it from the handle

        async def bounded() -> None:
            if timeout is None:
                await wait()
                return
            with anyio.move_on_after(timeout) as scope:
                await wait()
            if scope.cancelled_caught:
                raise TimeoutError(f"the record was not delivered within {timeout} s")

        self._loop.call(bounded)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        async def after_queued() -> Any:
            await self._sends.hand_over()
            result = fn(*args, **kwargs)
            if hasattr(result, "__await__"):
                result = await result
            return result

        return self._loop.call(after_queued)

    def _call_settled(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """:meth:`_call`, once the records waiting for metadata are handed over too
        (or failed: each waits at most its bound)."""

        async def settled() -> Any:
            await self._sends.settle()
            result = fn(*args, **kwargs)
            if hasattr(result, "__await__"):
                result = await result
            return result

        return self._loop.call(settled)

    # -- the rest of the API, explicitly (typed); others are forwarded ----------------------

    def flush(self) -> None:
        """Send everything sent so far and wait for the outcomes."""
        self._call_settled(self._producer.flush)

    def partitions_for(self, topic: str) -> list[int]:
        result: list[int] = self._call(self._producer.partitions_for, topic)
        return result

    def init_transactions(self, timeout_ms: float | None = None) -> None:
        self._call(self._producer.init_transactions, timeout_ms)
        self._initialized = True

    def purge(self) -> None:
        """Fail every record not sent yet with
        :class:`~trafka.sdk.errors.RecordPurgedError`, those waiting for their
        topic's metadata included; see the async :meth:`trafka.sdk.producer.Producer.purge`."""
        self._call(self._purge)

    async def _purge(self) -> None:
        self._sends.parked.fail_all(RecordPurgedError("the record was purged before it was sent"))
        self._producer.purge()

    def begin_transaction(self) -> None:
        # Local to the async producer (nothing is sent), so taken from this
        # thread while the loop waits, as the fast path of send(); through the
        # loop when records are queued (they were sent before it).
        loop_lock = self._loop_lock
        locked(loop_lock, "begin_transaction()")
        try:
            here = not self._sends.draining and not self._loop.closing
            if here:
                self._producer.begin_transaction()
        finally:
            turn = unlocked(loop_lock)
            if turn is not None:
                self._wait_turn(turn)
        if not here:
            self._call(self._producer.begin_transaction)

    def commit_transaction(self, *, wait: bool = True) -> PendingCommit:
        """Commit the transaction, with every record sent before this call.

        With ``wait=False``, return once the commit has started, so that the
        next transaction can begin and fill its batches while this one commits;
        see the async :meth:`trafka.sdk.producer.Producer.commit_transaction`.
        """
        check_bool("wait", wait)
        pending = self._call_settled(self._producer.commit_transaction, wait=wait)
        return PendingCommit(self._call, pending)

    def abort_transaction(self) -> None:
        self._call(self._abort)

    async def _abort(self) -> None:
        """On the loop: the records waiting for metadata were the transaction's."""
        aborted = TransactionAbortedError("the transaction was aborted before the record was sent")
        self._sends.parked.fail_all(aborted)
        await self._producer.abort_transaction()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        transaction_offsets(offsets, group_metadata)  # misuse raised here, before the queue
        self._call_settled(self._producer.send_offsets_to_transaction, offsets, group_metadata)

    @contextmanager
    def transaction(self) -> Iterator[Producer]:
        """A transaction as a ``with`` block: committed when it ends normally,
        aborted when it raises (``KeyboardInterrupt`` included).

        Raises:
            TransactionAbortableError: the commit failed; the transaction was aborted.
            ProducerFencedError / TransactionFatalError: fatal.
        """
        if not self._initialized:
            self.init_transactions()
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            self._abort_quietly()
            raise
        try:
            self.commit_transaction()
        except TransactionAbortableError:
            self._abort_quietly()
            raise

    def _abort_quietly(self) -> None:
        try:
            self.abort_transaction()
        except TrafkaError:
            pass  # the block's own exception is the one to see

    def statistics(self) -> ProducerStatistics:
        """The async producer's :meth:`~trafka.sdk.producer.Producer.statistics`,
        once the records queued here are handed over."""
        result: ProducerStatistics = self._call(self._producer.statistics)
        return result

    def close(self) -> None:
        """Send what is queued and buffered, wait for it, and stop (idempotent)."""
        if self._loop.closing:
            return
        try:
            self._call_settled(lambda: None)  # hand the queue over first
        finally:
            self._loop.close()
            self._sends.fail_all(ClientClosedError("the producer is closed"))

    def _close_at_exit(self) -> None:
        """:meth:`close` as the interpreter exits (see the module's rules): what
        cannot be delivered without waiting is given up."""
        if self._loop.closing:
            return
        delivered = False
        try:
            delivered = self._loop.call(self._deliver_while_reachable)
        finally:
            if delivered:
                self._loop.close()
            else:
                self._loop.close(
                    ClientClosedError("the interpreter exited with no broker in reach")
                )
            self._sends.fail_all(ClientClosedError("the producer is closed"))

    async def _deliver_while_reachable(self) -> bool:
        """On the loop: flush, unless (or until) every broker is out of reach;
        whether everything was delivered (or failed on its own)."""
        cluster = self._producer.cluster
        was_down = cluster.all_brokers_down
        cluster.recheck_all_down()  # (as last tried: a broker may be back)
        self._sends.parked.give_up_unknown()
        delivered = False
        cfg = self._producer.config
        # A broker back since is reached within a reconnect backoff and a connect;
        # none reached by then, they are still all down (a retry the client's other
        # tasks put off must not hold the exit until the records' timeouts).
        window = (cfg.reconnect_backoff_max_ms + cfg.socket_connection_setup_timeout_ms) / 1000
        async with anyio.create_task_group() as tg:

            async def stop_once_all_down() -> None:
                await cluster.wait_all_down()
                tg.cancel_scope.cancel()

            async def stop_unless_one_is_back() -> None:
                await anyio.sleep(window)
                if cluster.least_loaded_connection() is None:
                    tg.cancel_scope.cancel()

            tg.start_soon(stop_once_all_down)
            if was_down:
                tg.start_soon(stop_unless_one_is_back)
            await self._sends.settle()
            await self._producer.flush()
            delivered = True
            tg.cancel_scope.cancel()
        return delivered

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
        elif not self._loop.closing:
            # As the async producer's block: no waiting; what is not sent fails.
            try:
                self._loop.close(exc)
            finally:
                self._sends.fail_all(ClientClosedError("the producer is closed"))
