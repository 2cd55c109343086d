"""Blocking clients: trafka's producer, consumers and admin for code without an event loop.

Each client runs its async counterpart (:class:`~trafka.sdk.producer.Producer`,
:class:`~trafka.sdk.consumer.Consumer`, :class:`~trafka.sdk.share_consumer.ShareConsumer`,
:class:`~trafka.sdk.admin.Admin`) on a
private trio loop in a thread of its own (an anyio blocking portal), so that
scripts, web handlers and notebooks get the same client, with the same settings
and the same delivery semantics, without writing async code.

Rules:

* A client owns its thread: it starts in the constructor (which returns once
  the async client is open, raising its ``ConfigError`` otherwise) and ends in
  :meth:`close` or at the end of a ``with`` block. The async object is only
  touched from that thread (but for the producer's fast path, below, while that
  thread waits); every call crosses to it and back (one hand-off each way:
  :meth:`_Portal.call`) and raises the async client's exceptions in the
  calling thread. A call from the client's own thread (a callback) is a
  ``UsageError``: it could only wait for itself.
* :meth:`Producer.send` does not cross to the loop per record. A bytes record
  whose partition is filling a batch goes straight into it from the caller's
  thread, as the async send's own fast path, while the loop's thread waits for
  I/O (:class:`_LoopLock`: the loop's thread holds a lock whenever it runs, and
  such a sender gives it its turn when it asks). Other records queue in the
  caller's thread, and the loop takes them in order, as one task, and hands them
  to the async producer. A record the fast path could take but for a batch to
  open takes the async send's general path in the caller's thread too
  (:meth:`~trafka.sdk.producer.Producer._open_hot`), the loop then doing what
  touches sockets; it waits for the loop's turn when a filled batch is there
  to send. Others (a serializer, headers, a partition, no memory, no metadata
  yet) only queue, as waiting would gain them nothing. No record passes one
  queued before it. Each send returns a :class:`SendFuture` for its
  :class:`~trafka.sdk.accumulator.RecordMetadata` (``result()``, ``exception()``,
  ``done()``, ``add_done_callback()``, ``cancel()`` while still queued). At most
  ``max_queued`` records wait there: beyond that ``send`` blocks until the loop
  catches up (which itself waits for ``buffer.memory``, as the async producer
  does). Misuse (an argument of the wrong type or out of range, a key or value
  the serializer refuses) is raised by ``send`` itself: the arguments are
  checked and serialized in the caller's thread, before anything is queued.
  Errors that depend on the cluster (an unknown partition, a closed or failed
  producer, a send outside a transaction) arrive through the future.
* Order: every other producer call first hands every queued record over, so
  ``flush()`` waits for them and ``commit_transaction()`` commits what was sent
  before it. Sends are thread-safe; the records of one thread keep their order.
* A consumer is used from one thread at a time, as Java's (its records held
  back are that thread's). Consumers take records in batches (``getmany``) and
  hand them out one at a time, so the group sees one poll per batch, as Java's
  ``poll``. A :class:`Consumer` takes a batch the loop has already fetched
  itself, in its own thread while the loop waits for I/O (as the producer's fast
  path, with the loop's clock), and crosses to the loop only to wait for
  records. Commits and
  closing count only the records handed out: records still held back (the rest
  of a batch) are given back: not committed, and fetched again after
  :meth:`Consumer.pause` / ``resume``.
* Leaving a ``with`` block normally is :meth:`close` (the producer delivers
  what was sent, the consumer commits with auto-commit); leaving it with an
  exception (``KeyboardInterrupt`` included) is what the async block does then:
  no waiting for unsent records (they fail) and no final commit.
* Rebalance listeners are plain functions here (``on_partitions_revoked``,
  ``on_partitions_assigned``, optional ``on_partitions_lost``, each taking a set
  of partitions). They run in a worker thread while the loop waits for them, so
  they may call the consumer (a commit before partitions go, say).
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import logging
import re
import threading
import time
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from concurrent.futures import CancelledError, Future
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager, contextmanager
from functools import partial
from typing import Any, Generic, overload

import anyio
import anyio.to_thread
import trio
import trio.abc
import trio.lowlevel
from anyio.from_thread import BlockingPortal, start_blocking_portal

from trafka.codec import TrafkaError

from ._validate import (
    check_bool,
    check_callable,
    check_int,
    check_offset,
    check_timeout,
    check_topic_partition,
    check_topic_partitions,
    check_topics,
)
from .accumulator import ProducerBatch, RecordHandle, RecordMetadata
from .admin import Admin as AsyncAdmin
from .admin import open_admin
from .consumer import Consumer as AsyncConsumer
from .consumer import check_commit, check_poll, check_subscription, open_consumer
from .errors import ClientClosedError, TransactionAbortableError, UsageError
from .fetcher import ConsumerRecord, K, TopicPartition, V
from .producer import PendingCommit as AsyncPendingCommit
from .producer import Producer as AsyncProducer
from .producer import RecordFuture, open_producer, transaction_offsets
from .producer_core import PreparedRecord
from .share_consumer import AcknowledgeType, ShareRecord, open_share_consumer
from .share_consumer import ShareConsumer as AsyncShareConsumer
from .statistics import AdminStatistics, ConsumerStatistics, ProducerStatistics
from .transactions import ConsumerGroupMetadata

__all__ = ["Admin", "Consumer", "PendingCommit", "Producer", "SendFuture", "ShareConsumer"]

log = logging.getLogger("trafka.sdk.blocking")

# What the producer core's prepare made of a send's arguments (topic, value
# bytes, key bytes, partition, headers, timestamp_ms), and the caller's future.
_QueuedSend = tuple[PreparedRecord, "SendFuture"]


class _Portal:
    """A trio loop in a thread, holding one open async client."""

    def __init__(self, opener: Callable[[], AbstractAsyncContextManager[Any]]) -> None:
        self._stack = ExitStack()
        try:
            self.portal: BlockingPortal = self._stack.enter_context(start_blocking_portal("trio"))
            self.client: Any = self._stack.enter_context(
                self.portal.wrap_async_context_manager(opener())
            )
        except BaseException:
            self._stack.close()
            raise
        # Closing: the async client's block is being left (rebalance listeners may
        # still call in); closed: the loop has stopped.
        self.closing = False
        self.closed = False
        self._lock = threading.Lock()
        # The loop's token, thread and clock (trio's: perf_counter plus an offset,
        # read from callers' threads for what they do while the loop waits).
        self.token: trio.lowlevel.TrioToken
        self.thread: int
        self.clock: trio.abc.Clock
        self.token, self.thread, self.clock = self.portal.call(_loop_identity)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on the loop (awaited if it returns a coroutine),
        blocking until it is done.

        One crossing each way (:func:`_start_call`), where the portal's own
        ``call`` waits for its task to be spawned before it waits for the result:
        about 110 us instead of 165 us here.
        """
        if self.closed:
            raise ClientClosedError("the client is closed")
        if threading.get_ident() == self.thread:
            raise UsageError(
                f"{getattr(fn, '__name__', fn)}() was called on the client's own thread "
                "(from a callback?); callbacks must not call the client"
            )
        future: Future[Any] = Future()
        try:
            self.token.run_sync_soon(_start_call, future, fn, args, kwargs)
        except trio.RunFinishedError:
            raise ClientClosedError("the client is closed") from None
        return future.result()

    def slices(self, timeout_ms: float | None, closed: str) -> Iterator[float]:
        """The waits (seconds) of the calls a blocking wait of ``timeout_ms`` (None:
        without end) is cut into: at most a second each, so that the loop stays
        responsive to Ctrl-C. Ends once a call returns at or past the deadline;
        raises ClientClosedError(``closed``) if the client closes first."""
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while not self.closed:
            yield 1.0 if deadline is None else min(1.0, max(deadline - time.monotonic(), 0.0))
            if deadline is not None and time.monotonic() >= deadline:
                return
        raise ClientClosedError(closed)

    def close(self, exc: BaseException | None = None) -> bool:
        """Leave the async client's block (flushing/committing as it does), then
        stop the thread. Returns False when already closed."""
        with self._lock:
            if self.closing:
                return False
            self.closing = True
        try:
            if exc is None:
                self._stack.close()
            else:
                self._stack.__exit__(type(exc), exc, exc.__traceback__)
        finally:
            self.closed = True
        return True


def _loop_identity() -> tuple[trio.lowlevel.TrioToken, int, trio.abc.Clock]:
    return trio.lowlevel.current_trio_token(), threading.get_ident(), trio.lowlevel.current_clock()


def _start_call(
    future: Future[Any], fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """On the loop, for :meth:`_Portal.call`: run ``fn``; a coroutine it returns is
    awaited by a task of its own."""
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        future.set_exception(exc)
        return
    if inspect.iscoroutine(result):
        trio.lowlevel.spawn_system_task(_await_call, future, result, name=f"trafka call {fn!r}")
    else:
        future.set_result(result)


async def _await_call(future: Future[Any], coroutine: Coroutine[Any, Any, Any]) -> None:
    try:
        result = await coroutine
    except trio.Cancelled:
        # Only when the loop stops under the call.
        future.set_exception(ClientClosedError("the client is closed"))
        raise
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(result)


class _Forwarding:
    """Methods the blocking class does not define run on the loop, blocking."""

    _loop: _Portal

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        attr = getattr(self._loop.client, name)
        if not callable(attr):
            return attr

        def forwarded(*args: Any, **kwargs: Any) -> Any:
            return self._call(attr, *args, **kwargs)

        forwarded.__name__ = name
        forwarded.__doc__ = getattr(attr, "__doc__", None)
        return forwarded

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._loop.call(fn, *args, **kwargs)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has begun."""
        return self._loop.closing


# -- producer --------------------------------------------------------------------------------------


def _run_callback(fn: Callable[[SendFuture], Any], future: SendFuture, _: Any) -> None:
    try:
        fn(future)
    except Exception:
        log.exception("a send callback failed")


def _report_delivery(
    fn: Callable[[BaseException | None, RecordMetadata | None], Any], future: SendFuture
) -> None:
    error = future.exception()
    fn(error, None if error is not None else future.result())


class _FutureSide:
    """What a :class:`SendFuture` needs of its producer: the lock of its queue,
    a wait on the loop for it to be done, and a call on the loop."""

    __slots__ = ("call", "lock", "wait")

    def __init__(
        self,
        lock: threading.Lock,
        wait: Callable[[SendFuture, float | None], None],
        call: Callable[..., Any],
    ) -> None:
        self.lock = lock
        self.wait = wait
        self.call = call


class SendFuture:
    """The outcome of :meth:`Producer.send`, as a :class:`concurrent.futures.Future`
    is used: :meth:`result`, :meth:`exception`, :meth:`done`,
    :meth:`add_done_callback`, :meth:`cancel`.

    It costs nothing per record while nobody waits: once the loop has taken the
    record it holds the async producer's handle, and waiting crosses to the loop
    only for a record not yet acknowledged (after :meth:`Producer.flush` every
    record is). :meth:`place`, :meth:`taken` and :meth:`set_exception` are the
    producer's, as ``set_result`` is an executor's in :mod:`concurrent.futures`.
    """

    __slots__ = ("_batch", "_callbacks", "_cancelled", "_error", "_handle", "_index", "_side")
    _index: int

    def __init__(self, side: _FutureSide) -> None:
        self._side = side
        self._handle: RecordHandle | None = None
        # Put by the fast path: the batch and place of the record, whose handle
        # is made only when asked for (an object per record saved).
        self._batch: ProducerBatch | None = None  # with _index, set together
        self._error: BaseException | None = None  # refused before reaching the async producer
        self._cancelled = False
        self._callbacks: list[Callable[[SendFuture], Any]] | None = None

    def record_handle(self) -> RecordHandle | None:
        """The async producer's handle of the record; None while it is queued here
        (or refused or cancelled before the producer took it)."""
        handle = self._handle
        if handle is None:
            batch = self._batch
            if batch is not None:
                handle = self._handle = RecordFuture(batch, self._index)
        return handle

    def done(self) -> bool:
        """Delivered, failed or cancelled."""
        if self._error is not None or self._cancelled:
            return True
        handle = self.record_handle()
        return handle is not None and handle.done()

    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> bool:
        """Drop the record if it is still queued here; False once the loop took it."""
        with self._side.lock:
            if self.record_handle() is not None or self._error is not None:
                return False
            self._cancelled = True
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
        if self._cancelled:
            raise CancelledError()
        if not self.done():
            self._side.wait(self, timeout)
        if self._cancelled:
            raise CancelledError()
        if self._error is not None:
            return self._error
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
            if handle is None and self._error is None and not self._cancelled:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        if handle is not None and not handle.done():
            self._side.call(handle.add_done_callback, partial(_run_callback, fn, self))
        else:
            fn(self)

    def place(self, batch: ProducerBatch, index: int) -> None:
        """The producer put the record at ``index`` of ``batch`` (its handle is
        made when asked for: an object per record saved)."""
        self._batch = batch
        self._index = index

    def taken(self, handle: RecordHandle) -> None:
        """On the loop (or before the future is returned): the async producer
        has the record."""
        self._handle = handle
        callbacks, self._callbacks = self._callbacks, None
        for fn in callbacks or ():
            handle.add_done_callback(partial(_run_callback, fn, self))

    def set_exception(self, error: BaseException) -> None:
        """The record was refused before the async producer took it."""
        self._error = error
        callbacks, self._callbacks = self._callbacks, None
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


class _LoopLock(trio.abc.Instrument):
    """A lock the loop's thread holds whenever it runs anything but its wait for I/O.

    A trio instrument: released before each wait for I/O, taken again after it.
    Another thread that holds it knows that no task of the loop is running (each
    is at an ``await``), so it may do what a task could do there with the async
    client's plain state, though never with its tasks, events or sockets.

    Rules for a holder: be brief, never wait for the loop while holding it, and
    give the loop its turn when it asks (:attr:`wanted`): register an event with
    :meth:`release_when_idle` before releasing, and wait for it after. Without
    that a thread that takes the lock again and again would starve the loop (the
    lock is not fair), and the two threads would otherwise only alternate in
    slices of ``sys.getswitchinterval()``.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.thread: int | None = None  # the loop's thread, once installed
        self.wanted = False  # the loop's thread waits for the lock
        self._on_idle: list[threading.Event] = []  # touched only by the lock's holder

    def release_when_idle(self, event: threading.Event) -> None:
        """With the lock held: set ``event`` once the loop has nothing left to run."""
        self._on_idle.append(event)

    def before_io_wait(self, timeout: float) -> None:
        if timeout > 0 and self._on_idle:  # nothing to run until I/O or a deadline
            self._set_idle_events()
        self.lock.release()

    def after_io_wait(self, timeout: float) -> None:
        if not self.lock.acquire(False):
            self.wanted = True
            self.lock.acquire()
            self.wanted = False

    def _set_idle_events(self) -> None:
        for event in self._on_idle:
            event.set()
        self._on_idle.clear()

    def install(self) -> None:
        """On the loop: from here on its thread holds the lock while it runs."""
        self.lock.acquire()
        self.thread = threading.get_ident()
        trio.lowlevel.add_instrument(self)

    def uninstall(self) -> None:
        """On the loop, before it stops: the lock is free from here on."""
        trio.lowlevel.remove_instrument(self)
        self._set_idle_events()
        self.lock.release()


@asynccontextmanager
async def _with_loop_lock(
    opened: AbstractAsyncContextManager[Any],
    loop_lock: _LoopLock,
    background: Callable[[], Coroutine[Any, Any, None]] | None = None,
) -> AsyncIterator[Any]:
    """``opened``'s client, with ``loop_lock`` installed from before it opens until
    after it closes, and ``background`` (if any) running while it is open."""
    loop_lock.install()
    try:
        async with opened as client, anyio.create_task_group() as tg:
            if background is not None:
                tg.start_soon(background)
            try:
                yield client
            finally:
                tg.cancel_scope.cancel()
    finally:
        loop_lock.uninstall()


def _wait_turn(loop: _Portal, turn: threading.Event) -> None:
    """Wait for the loop's turn to end (the loop sets ``turn`` when it is idle)."""
    while not turn.wait(1.0):
        if loop.closed:
            return


def _refuse_loop_thread(loop_lock: _LoopLock, call: str) -> None:
    """A call from the loop's own thread (a callback) could only wait for itself."""
    if threading.get_ident() == loop_lock.thread:
        raise UsageError(
            f"{call} was called on the client's own thread (from a callback?); "
            "callbacks must not call the client"
        )


def _locked(loop_lock: _LoopLock, call: str) -> None:
    """Take ``loop_lock``'s lock (see :class:`_LoopLock`) for ``call`` from a client's caller."""
    lock = loop_lock.lock
    if not lock.acquire(False):
        _refuse_loop_thread(loop_lock, call)
        lock.acquire()


def _unlocked(loop_lock: _LoopLock) -> threading.Event | None:
    """Release ``loop_lock``'s lock; an event to wait for when the loop asked for
    its turn meanwhile (see :class:`_LoopLock`)."""
    turn = None
    if loop_lock.wanted:
        turn = threading.Event()
        loop_lock.release_when_idle(turn)
    loop_lock.lock.release()
    return turn


class Producer(_Forwarding):
    """A blocking Kafka producer (see the module doc for how it runs).

    Args:
        config: a :class:`~trafka.sdk.config.ProducerConfig` or a mapping of
            Kafka-style keys, as :func:`~trafka.sdk.open_producer` takes.
        max_queued: records that may wait for the loop before ``send`` blocks.
        **settings: settings in Python spelling (``linger_ms=5``).

    Raises:
        ConfigError: invalid configuration.
    """

    def __init__(
        self,
        config: Any = None,
        *,
        max_queued: int = 10_000,
        **settings: Any,
    ) -> None:
        check_int("max_queued", max_queued, minimum=1, maximum=None)
        self._queue: collections.deque[_QueuedSend] = collections.deque()
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._waiting = 0  # senders blocked on a full queue
        self._draining = False  # a drain task is scheduled or running
        self._max_queued = max_queued
        self._loop_lock = _LoopLock()
        self._drain_wanted = trio.Event()
        self._loop = _Portal(
            lambda: _with_loop_lock(
                open_producer(config, **settings), self._loop_lock, self._drainer
            )
        )
        self._producer: AsyncProducer = self._loop.client
        self._core = self._producer.core  # its hot path, from the sending threads
        self._side = _FutureSide(self._lock, self._wait_for, self._loop.call)
        self._token: trio.lowlevel.TrioToken = self._loop.token
        self._hot = self._core.hot_path
        self._clock = self._loop.clock  # read by sending threads for the batches they open
        self._initialized = False  # init_transactions() done (later calls change nothing)
        self._drain_lock: anyio.Lock = self._loop.portal.call(_new_lock)

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
            check_callable("on_delivery", on_delivery)
            future = self.send(
                topic, value, key, partition=partition, headers=headers, timestamp_ms=timestamp_ms
            )
            future.add_done_callback(partial(_report_delivery, on_delivery))
            return future
        future = SendFuture(self._side)
        turn_helps = False
        if (
            self._hot
            and type(value) is bytes
            and type(topic) is str
            and partition is None
            and headers is None
            and timestamp_ms is None
        ):
            # Straight into the batch the record's partition is filling, from this
            # thread, while no task of the loop runs (the async send's own hot
            # path); unless records wait in the queue (they go first) or the
            # async producer's general path must take it.
            # _locked/_unlocked inline: this runs per record, where two calls
            # cost about a tenth of the send.
            loop_lock = self._loop_lock
            lock = loop_lock.lock
            if not lock.acquire(False):
                self._check_thread()
                lock.acquire()
            turn = None
            try:
                if self._draining or self._loop.closing:
                    handle: ProducerBatch | bool = False
                else:
                    handle = self._core.append_hot(topic, value, key)
                    if handle is not True and handle is not False:
                        future.place(handle, len(handle.records) - 1)  # its last record
                if loop_lock.wanted:
                    turn = threading.Event()
                    loop_lock.release_when_idle(turn)
            finally:
                lock.release()
            if type(handle) is not bool:
                if handle.full:
                    self._token.run_sync_soon(self._producer.wake_sender)
                if turn is not None:
                    self._wait_turn(turn)
                return future
            if turn is not None:
                self._wait_turn(turn)
            if handle and self._open_batch(topic, value, key, future):
                return future
            # The general path: once the loop has taken the record (its turn,
            # below), a batch it opened takes the next records straight again.
            turn_helps = handle
        else:
            self._check_thread()
        # Checked and serialized here, in the caller's thread: misuse is raised
        # at the call and never reaches the loop.
        item = (self._core.prepare(topic, value, key, partition, headers, timestamp_ms), future)
        with self._lock:
            while len(self._queue) >= self._max_queued and not self._loop.closing:
                self._waiting += 1
                try:
                    self._room.wait()
                finally:
                    self._waiting -= 1
            if self._loop.closing:
                raise ClientClosedError("the producer is closed")
            self._queue.append(item)
            if self._draining:
                return future
            self._draining = True
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
            self._fail_queued(ClientClosedError("the producer is closed"))
            return future
        if turn is not None:
            self._wait_turn(turn)
        return future

    def _wait_turn(self, turn: threading.Event) -> None:
        _wait_turn(self._loop, turn)

    def _open_batch(self, topic: str, value: bytes, key: bytes | None, future: SendFuture) -> bool:
        """For a record of :meth:`send`'s fast path that needs a batch opened: the
        async producer's general path from this thread (its core's ``open_batch``),
        the loop then starting what the batch needs. False when that path would
        wait or refuse the record: it is queued for the loop instead."""
        loop_lock = self._loop_lock
        _locked(loop_lock, "send()")
        placed = None
        try:
            if not (self._draining or self._loop.closing):
                placed = self._core.open_batch(topic, value, key, self._clock.current_time())
        finally:
            turn = _unlocked(loop_lock)
        if placed is None:
            if turn is not None:
                self._wait_turn(turn)
            return False
        handle, joined = placed
        future.taken(handle)  # not returned yet: no callbacks to move
        try:
            if turn is None and not joined:
                # The loop's turn, in which it sends the batch that filled up: the
                # next records are faster for it than racing the loop for the GIL
                # (a partition that has just joined a transaction has none to send).
                turn = threading.Event()
                self._token.run_sync_soon(self._turn_after, turn)
            else:
                self._token.run_sync_soon(self._producer.after_append)
        except trio.RunFinishedError:
            return True  # closed meanwhile: its close flushed or failed the batch
        if turn is not None:
            self._wait_turn(turn)
        return True

    def _turn_after(self, turn: threading.Event) -> None:
        """On the loop: what a batch opened by a sending thread needs, then ``turn``
        is set once the loop is idle."""
        self._loop_lock.release_when_idle(turn)
        self._producer.after_append()

    def _start_drain(self, turn: threading.Event | None) -> None:
        """On the loop: the drainer hands the queue over; ``turn`` is set once idle."""
        if turn is not None:
            self._loop_lock.release_when_idle(turn)
        self._drain_wanted.set()

    async def _drainer(self) -> None:
        """On the loop while the producer is open: hands the queue over when asked."""
        while True:
            await self._drain_wanted.wait()
            self._drain_wanted = trio.Event()
            while True:
                await self._hand_over()
                with self._lock:
                    # Records queued after the hand-over saw an empty queue: go on.
                    if not self._queue:
                        self._draining = False
                        break

    def _check_thread(self) -> None:
        _refuse_loop_thread(self._loop_lock, "send()")

    def send_and_wait(
        self, topic: str, value: Any = None, key: Any = None, **kwargs: Any
    ) -> RecordMetadata:
        """:meth:`send`, then wait for the record's :class:`RecordMetadata`."""
        return self.send(topic, value, key, **kwargs).result()

    async def _hand_over(self) -> None:
        """Give every queued record to the async producer, in order; one hand-over
        at a time (``_drain_lock``), so that two never interleave their records."""
        async with self._drain_lock:
            queue = self._queue
            send = self._producer.send_prepared
            low = self._max_queued // 2
            while True:
                try:
                    record, future = queue.popleft()
                except IndexError:
                    break
                if self._waiting and len(queue) <= low:
                    with self._lock:
                        self._room.notify_all()
                if future.cancelled():
                    continue
                try:
                    handle = await send(record, hot=True)
                except Exception as exc:
                    future.set_exception(exc)
                    continue
                except BaseException:
                    future.set_exception(ClientClosedError("the producer is closed"))
                    raise
                future.taken(handle)
            if self._waiting:
                with self._lock:
                    self._room.notify_all()

    def _fail_queued(self, error: BaseException) -> None:
        with self._lock:
            items, self._queue = list(self._queue), collections.deque()
            self._draining = False
            self._room.notify_all()
        for _, future in items:
            if not future.cancelled():
                future.set_exception(error)

    def _wait_for(self, future: SendFuture, timeout: float | None) -> None:
        """Wait on the loop until ``future`` is done (its record handed over first)."""

        async def wait() -> None:
            await self._hand_over()
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
            await self._hand_over()
            result = fn(*args, **kwargs)
            if hasattr(result, "__await__"):
                result = await result
            return result

        return self._loop.call(after_queued)

    # -- the rest of the API, explicitly (typed); others are forwarded ----------------------

    def flush(self) -> None:
        """Send everything sent so far and wait for the outcomes."""
        self._call(self._producer.flush)

    def partitions_for(self, topic: str) -> list[int]:
        result: list[int] = self._call(self._producer.partitions_for, topic)
        return result

    def init_transactions(self) -> None:
        self._call(self._producer.init_transactions)
        self._initialized = True

    def begin_transaction(self) -> None:
        # Local to the async producer (nothing is sent), so taken from this
        # thread while the loop waits, as the fast path of send(); through the
        # loop when records are queued (they were sent before it).
        loop_lock = self._loop_lock
        _locked(loop_lock, "begin_transaction()")
        try:
            here = not self._draining and not self._loop.closing
            if here:
                self._producer.begin_transaction()
        finally:
            turn = _unlocked(loop_lock)
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
        pending = self._call(self._producer.commit_transaction, wait=wait)
        return PendingCommit(self._call, pending)

    def abort_transaction(self) -> None:
        self._call(self._producer.abort_transaction)

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        transaction_offsets(offsets, group_metadata)  # misuse raised here, before the queue
        self._call(self._producer.send_offsets_to_transaction, offsets, group_metadata)

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
            self._call(lambda: None)  # hand the queue over first
        finally:
            self._loop.close()
            self._fail_queued(ClientClosedError("the producer is closed"))

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
                self._fail_queued(ClientClosedError("the producer is closed"))


async def _new_lock() -> anyio.Lock:
    return anyio.Lock()


# -- consumer --------------------------------------------------------------------------------------


class _ListenerInThread:
    """A plain-function rebalance listener, run in a worker thread by the async consumer."""

    def __init__(self, listener: Any) -> None:
        self._listener = listener
        for name in ("on_partitions_revoked", "on_partitions_assigned", "on_partitions_lost"):
            fn = getattr(listener, name, None)
            if fn is not None:
                setattr(self, name, partial(self._run, fn))

    @staticmethod
    async def _run(fn: Callable[[set[TopicPartition]], Any], tps: set[TopicPartition]) -> None:
        await anyio.to_thread.run_sync(fn, tps)


class Consumer(_Forwarding, Generic[K, V]):
    """A blocking Kafka consumer (see the module doc for how it runs).

    Args:
        *topics: topics to subscribe to (needs ``group_id``); or call
            :meth:`assign` / :meth:`subscribe`.
        config: a :class:`~trafka.sdk.config.ConsumerConfig` or a mapping of
            Kafka-style keys, as :func:`~trafka.sdk.open_consumer` takes.
        listener: a rebalance listener of plain functions (see the module doc).
        consumer_timeout_ms: iteration ends after this long without a record
            (default: it never ends), as in kafka-python.
        **settings: settings in Python spelling.

    Raises:
        ConfigError: invalid configuration.
    """

    @overload
    def __init__(
        self: Consumer[K, V],
        *topics: str,
        config: Any = None,
        listener: Any = None,
        consumer_timeout_ms: float | None = None,
        key_deserializer: Callable[[bytes | None], K],
        value_deserializer: Callable[[bytes | None], V],
        **settings: Any,
    ) -> None: ...

    @overload
    def __init__(
        self: Consumer[Any, V],
        *topics: str,
        config: Any = None,
        listener: Any = None,
        consumer_timeout_ms: float | None = None,
        value_deserializer: Callable[[bytes | None], V],
        key_deserializer: str = "bytes",
        **settings: Any,
    ) -> None: ...

    @overload
    def __init__(
        self: Consumer[K, Any],
        *topics: str,
        config: Any = None,
        listener: Any = None,
        consumer_timeout_ms: float | None = None,
        key_deserializer: Callable[[bytes | None], K],
        value_deserializer: str = "bytes",
        **settings: Any,
    ) -> None: ...

    @overload
    def __init__(
        self: Consumer[Any, Any],
        *topics: str,
        config: Any = None,
        listener: Any = None,
        consumer_timeout_ms: float | None = None,
        key_deserializer: str = "bytes",
        value_deserializer: str = "bytes",
        **settings: Any,
    ) -> None: ...

    def __init__(
        self,
        *topics: str,
        config: Any = None,
        listener: Any = None,
        consumer_timeout_ms: float | None = None,
        **settings: Any,
    ) -> None:
        check_timeout("consumer_timeout_ms", consumer_timeout_ms)
        if topics:
            check_subscription(topics, None, listener)
        self._buffer: collections.deque[ConsumerRecord[K, V]] = collections.deque()
        self._timeout_ms = consumer_timeout_ms
        self._loop_lock = _LoopLock()
        self._loop = _Portal(
            lambda: _with_loop_lock(open_consumer(config=config, **settings), self._loop_lock)
        )
        self._consumer: AsyncConsumer = self._loop.client
        self._token: trio.lowlevel.TrioToken = self._loop.token
        self._clock = self._loop.clock  # read by this thread for the polls it makes itself
        if topics:
            try:
                self.subscribe(topics, listener=listener)
            except BaseException as exc:
                self._loop.close(exc)
                raise

    # -- records ---------------------------------------------------------------------------

    def __iter__(self) -> Iterator[ConsumerRecord[K, V]]:
        """Records as they come; ends only with ``consumer_timeout_ms`` (or close)."""
        while True:
            record = self._next(self._timeout_ms)
            if record is None:
                return
            yield record

    def getone(self, timeout_ms: float | None = None) -> ConsumerRecord[K, V] | None:
        """The next record, or None when none came within ``timeout_ms`` (default: wait)."""
        check_timeout("timeout_ms", timeout_ms)
        return self._next(timeout_ms)

    def _next(self, timeout_ms: float | None) -> ConsumerRecord[K, V] | None:
        buffer = self._buffer
        if buffer:
            return buffer.popleft()
        if self._poll_here():
            return buffer.popleft()
        for left in self._loop.slices(timeout_ms, "the consumer is closed"):
            batch = self._call(self._consumer.getmany, timeout_ms=int(left * 1000))
            for records in batch.values():
                buffer.extend(records)
            if buffer:
                return buffer.popleft()
        return None

    def _poll_here(self) -> bool:
        """Take the records the loop has fetched already, from this thread while
        the loop waits for I/O (:class:`_LoopLock`), as a ``getmany`` that finds
        records at hand would; without a crossing to the loop and back per poll.
        False when none were at hand (the loop must wait for some)."""
        if self._loop.closing:
            return False
        consumer = self._consumer
        loop_lock = self._loop_lock
        _locked(loop_lock, "a poll")
        wake_group = True  # unless the poll says otherwise (an extra wake-up is harmless)
        try:
            batch, wake_group = consumer.poll_from_thread(self._clock.current_time())
        finally:
            turn = _unlocked(loop_lock)
            if wake_group or consumer.core.fetcher.fetch_wanted:
                with contextlib.suppress(trio.RunFinishedError):
                    self._token.run_sync_soon(consumer.after_poll_from_thread, wake_group)
            if turn is not None:
                _wait_turn(self._loop, turn)
        for records in batch.values():
            self._buffer.extend(records)
        return bool(self._buffer)

    def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord[K, V]]]:
        """Records per partition, waiting up to ``timeout_ms`` for some (records
        held back by iteration come first)."""
        wanted, limit = check_poll(partitions, timeout_ms, max_records)
        if self._buffer:
            limit = limit or len(self._buffer)
            out: dict[TopicPartition, list[ConsumerRecord[K, V]]] = {}
            kept: collections.deque[ConsumerRecord[K, V]] = collections.deque()
            n = 0
            for r in self._buffer:
                tp = TopicPartition(r.topic, r.partition)
                if n < limit and (wanted is None or tp in wanted):
                    out.setdefault(tp, []).append(r)
                    n += 1
                else:
                    kept.append(r)
            self._buffer = kept
            if out:
                return out
        result: dict[TopicPartition, list[ConsumerRecord[K, V]]] = self._call(
            self._consumer.getmany, *partitions, timeout_ms=timeout_ms, max_records=max_records
        )
        return result

    # -- what is held back ---------------------------------------------------------------

    def _held(self, tps: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """The first held-back offset per partition (of ``tps``, default all)."""
        wanted = None if tps is None else {TopicPartition(*tp) for tp in tps}
        first: dict[TopicPartition, int] = {}
        for r in self._buffer:
            tp = TopicPartition(r.topic, r.partition)
            if tp not in first and (wanted is None or tp in wanted):
                first[tp] = r.offset
        return first

    def _drop(self, tps: Iterable[TopicPartition] | None) -> dict[TopicPartition, int]:
        first = self._held(tps)
        if first:
            self._buffer = collections.deque(
                r for r in self._buffer if TopicPartition(r.topic, r.partition) not in first
            )
        return first

    def _give_back(self, tps: Iterable[TopicPartition] | None, *, refetch: bool) -> None:
        """Return held-back records: not consumed (commits stop before them) and,
        with ``refetch``, fetched again."""
        first = self._drop(tps)
        if first:
            self._loop.call(self._consumer.unconsume, first, refetch=refetch)

    # -- positions and commits -----------------------------------------------------------

    def consumed_offsets(self) -> dict[TopicPartition, int]:
        """Positions after the records handed out (what :meth:`commit` commits)."""
        offsets: dict[TopicPartition, int] = self._call(self._consumer.consumed_offsets)
        for tp, offset in self._held().items():
            if offsets.get(tp, offset) > offset:
                offsets[tp] = offset
        return offsets

    def commit(
        self, offsets: Mapping[TopicPartition, int] | None = None, *, message: Any = None
    ) -> None:
        """Commit ``offsets`` (default: after the records handed out), or the offset
        after a consumed ``message`` (confluent-kafka's ``commit(message=msg)``),
        and wait."""
        check_commit(offsets, message)
        if message is None and offsets is None:
            offsets = self.consumed_offsets()
        self._call(
            self._consumer.commit, None if offsets is None else dict(offsets), message=message
        )

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, int] | None = None,
        callback: Callable[[Mapping[TopicPartition, int], BaseException | None], Any] | None = None,
        *,
        message: Any = None,
    ) -> Future[None]:
        """Start a commit (of ``offsets``, or of the offset after a consumed
        ``message``); returns a future of its outcome. ``callback(offsets,
        error_or_None)`` runs on the client's thread: keep it short."""
        check_commit(offsets, message)
        check_callable("callback", callback)
        if offsets is not None:
            chosen: dict[TopicPartition, int] | None = dict(offsets)
        else:
            chosen = None if message is not None else self.consumed_offsets()

        async def run() -> None:
            await self._consumer.commit_async(chosen, callback, message=message)

        result: Future[None] = self._loop.portal.start_task_soon(run)
        return result

    # Each call checks its arguments here first (the async consumer's checks),
    # before it changes what is held back.

    def seek(self, partition: TopicPartition, offset: int) -> None:
        tp = check_topic_partition("partition", partition)
        check_offset("offset", offset)
        self._drop([tp])
        self._call(self._consumer.seek, tp, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        tps = check_topic_partitions("partitions", partitions)
        self._drop(tps or None)
        self._call(self._consumer.seek_to_beginning, *tps)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        tps = check_topic_partitions("partitions", partitions)
        self._drop(tps or None)
        self._call(self._consumer.seek_to_end, *tps)

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop handing out and fetching these partitions; records held back for
        them are fetched again after :meth:`resume`."""
        tps = check_topic_partitions("partitions", partitions)
        self._give_back(tps, refetch=True)
        self._call(self._consumer.pause, *tps)

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        tps = check_topic_partitions("partitions", partitions)
        self._give_back(None, refetch=True)
        self._call(self._consumer.assign, tps)

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
        listener: Any = None,
    ) -> None:
        checked, pattern = check_subscription(topics, pattern, listener)
        self._give_back(None, refetch=True)
        wrapped = None if listener is None else _ListenerInThread(listener)
        self._call(self._consumer.subscribe, checked, pattern=pattern, listener=wrapped)

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record to hand out (waiting until it is known)."""
        tp = check_topic_partition("partition", partition)
        held = self._held([tp]).get(tp)
        if held is not None:
            return held
        result: int = self._call(self._consumer.position, tp)
        return result

    def statistics(self) -> ConsumerStatistics:
        result: ConsumerStatistics = self._call(self._consumer.statistics)
        return result

    def close(self) -> None:
        """Commit (with auto-commit) what was handed out, leave the group, stop (idempotent)."""
        if self._loop.closing:
            return
        try:
            self._give_back(None, refetch=False)
        finally:
            self._loop.close()

    def __enter__(self) -> Consumer[K, V]:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
        elif not self._loop.closing:
            # As the async consumer's block: no final commit, the group is left.
            self._buffer.clear()
            self._loop.close(exc)


# -- share consumer --------------------------------------------------------------------------------


class ShareConsumer(_Forwarding):
    """A blocking share consumer (KIP-932): :class:`~trafka.sdk.share_consumer.ShareConsumer`
    on a loop of its own (see the module doc for how it runs).

    Records come in batches (:meth:`poll`) or one at a time (iteration); a poll
    with implicit acknowledgement accepts the records of the previous one.
    Records an iteration has not reached yet are never accepted: a commit or
    close in the middle of a batch leaves them out (closing releases them).
    The acknowledgement commit callback runs on the client's thread while
    ``poll``, ``commit`` or ``close`` waits for it.

    Args:
        *topics: topics to subscribe to; or call :meth:`subscribe`.
        config: a :class:`~trafka.sdk.config.ShareConsumerConfig` or a mapping of
            Kafka-style keys.
        consumer_timeout_ms: iteration ends after this long without a record
            (default: it never ends).
        **settings: settings in Python spelling.

    Raises:
        ConfigError: invalid configuration.
    """

    def __init__(
        self,
        *topics: str,
        config: Any = None,
        consumer_timeout_ms: float | None = None,
        **settings: Any,
    ) -> None:
        check_timeout("consumer_timeout_ms", consumer_timeout_ms)
        if topics:
            check_topics("topics", topics)
        self._buffer: collections.deque[ShareRecord] = collections.deque()
        self._timeout_ms = consumer_timeout_ms
        self._loop = _Portal(partial(open_share_consumer, config=config, **settings))
        self._consumer: AsyncShareConsumer = self._loop.client
        if topics:
            try:
                self.subscribe(list(topics))
            except BaseException as exc:
                self._loop.close(exc)
                raise

    def __iter__(self) -> Iterator[ShareRecord]:
        """Records as they come; ends only with ``consumer_timeout_ms`` (or close)."""
        while True:
            if not self._buffer:
                self._buffer.extend(self._poll(self._timeout_ms))
                if not self._buffer:
                    return
            yield self._buffer.popleft()

    def poll(self, timeout_ms: float | None = None) -> list[ShareRecord]:
        """Records delivered to this member, waiting up to ``timeout_ms`` (None: until
        some come); records an iteration had not reached come first."""
        check_timeout("timeout_ms", timeout_ms)
        if self._buffer:
            out = list(self._buffer)
            self._buffer.clear()
            return out
        return self._poll(timeout_ms)

    def _poll(self, timeout_ms: float | None) -> list[ShareRecord]:
        for left in self._loop.slices(timeout_ms, "the share consumer is closed"):
            records: list[ShareRecord] = self._call(self._consumer.poll, timeout_ms=left * 1000)
            if records:
                return records
        return []

    def _give_back(self) -> None:
        """Records iteration has not reached: not to be accepted."""
        if self._buffer:
            held = list(self._buffer)
            self._buffer.clear()
            self._loop.call(self._consumer.unseen, held)

    def acknowledge(
        self, record: ShareRecord, type: AcknowledgeType | int = AcknowledgeType.ACCEPT
    ) -> None:
        """Acknowledge a record of the last poll (``share.acknowledgement.mode=explicit``):
        accept it (the default), or ``AcknowledgeType.RELEASE`` / ``REJECT`` it."""
        self._call(self._consumer.acknowledge, record, type)

    def acknowledge_offset(
        self,
        topic: str,
        partition: int,
        offset: int,
        type: AcknowledgeType | int = AcknowledgeType.ACCEPT,
    ) -> None:
        """:meth:`acknowledge` a record of the last poll by its coordinates."""
        self._call(self._consumer.acknowledge_offset, topic, partition, offset, type)

    def commit(self, timeout_ms: int | None = None) -> dict[TopicPartition, BaseException | None]:
        """Send the acknowledgements made so far and wait: per partition None or the error."""
        check_timeout("timeout_ms", timeout_ms)
        self._give_back()
        result: dict[TopicPartition, BaseException | None] = self._call(
            self._consumer.commit, timeout_ms
        )
        return result

    def commit_async(self) -> Future[dict[TopicPartition, BaseException | None]]:
        """Send the acknowledgements made so far; the future holds the per-partition outcome."""
        self._give_back()

        async def run() -> dict[TopicPartition, BaseException | None]:
            return await self._consumer.commit_async().wait()

        future: Future[dict[TopicPartition, BaseException | None]] = (
            self._loop.portal.start_task_soon(run)
        )
        return future

    def subscribe(self, topics: Iterable[str]) -> None:
        self._call(self._consumer.subscribe, check_topics("topics", topics))

    def close(self) -> None:
        """Acknowledge (implicit mode) or release what was delivered, close the
        share sessions, leave the group and stop (idempotent)."""
        if self._loop.closing:
            return
        try:
            self._give_back()
        finally:
            self._loop.close()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
        elif not self._loop.closing:
            # As the async block: what was delivered is released, not accepted.
            self._buffer.clear()
            self._loop.close(exc)


# -- admin -----------------------------------------------------------------------------------------


class Admin(_Forwarding):
    """A blocking admin client: every method of :class:`~trafka.sdk.admin.Admin`,
    called without ``await``.

    Args:
        config: a :class:`~trafka.sdk.config.AdminConfig` or a mapping of Kafka-style keys.
        **settings: settings in Python spelling.

    Raises:
        ConfigError: invalid configuration.
    """

    def __init__(self, config: Any = None, **settings: Any) -> None:
        self._loop = _Portal(partial(open_admin, config, **settings))
        self._admin: AsyncAdmin = self._loop.client

    def statistics(self) -> AdminStatistics:
        result: AdminStatistics = self._call(self._admin.statistics)
        return result

    def close(self) -> None:
        self._loop.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self._loop.close(exc)
