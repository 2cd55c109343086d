"""The loop in a thread that each blocking client runs its async client on
(:mod:`.blocking`, :mod:`.blocking_producer`).

Rules:

* :class:`Portal` holds one open async client on a private trio loop in a
  thread of its own; every call crosses to it and back (one hand-off each
  way) and raises the async client's exceptions in the calling thread. A call
  from the loop's own thread (a callback) is a ``UsageError``: it could only
  wait for itself.
* :class:`LoopLock` lets a caller's thread touch the async client's plain
  state (never its tasks, events or sockets) while every task of the loop is
  at an ``await``: the loop's thread holds the lock whenever it runs. A holder
  is brief, never waits for the loop while holding it, and gives the loop its
  turn when it asks (:func:`unlocked`, :func:`wait_turn`).
"""

from __future__ import annotations

import atexit
import inspect
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager
from typing import Any

import anyio
import trio
import trio.abc
import trio.lowlevel
from anyio.from_thread import BlockingPortal, start_blocking_portal

from .errors import ClientClosedError, UsageError

__all__ = [
    "Forwarding",
    "LoopLock",
    "Portal",
    "locked",
    "refuse_loop_thread",
    "unlocked",
    "wait_turn",
    "with_loop_lock",
]


class Portal:
    """A trio loop in a thread, holding one open async client."""

    def __init__(
        self,
        opener: Callable[[], AbstractAsyncContextManager[Any]],
        owner: Any = None,
        *,
        at_exit: Callable[[], Any] | None = None,
    ) -> None:
        """``owner``: the blocking client holding this portal, whose ``close()`` (or
        ``at_exit``, a method of its) is called if it is still open when the
        interpreter exits (see :func:`_close_open_portals`)."""
        self._stack = ExitStack()
        close = at_exit if at_exit is not None else None if owner is None else owner.close
        self._owner_close = None if close is None else weakref.WeakMethod(close)
        try:
            self.portal: BlockingPortal = self._stack.enter_context(start_blocking_portal("trio"))
            self.client: Any = self._stack.enter_context(
                self.portal.wrap_async_context_manager(opener())
            )
        except BaseException:
            self._stack.close()
            raise
        # A client dropped without close() must not be closed by the garbage
        # collector on whatever thread it runs in: collecting anyio's portal
        # would join the loop's thread, which waits for the client's block to be
        # left, forever (a console's start hung on a test's forgotten client).
        # The finalizer holds the stack and leaves the block on a thread of its own.
        self._finalizer = weakref.finalize(self, _close_aside, self._stack)
        self._finalizer.atexit = False
        _OPEN.add(self)
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

    def close_as_owner(self) -> None:
        """Close the client as its blocking owner's close() (or at_exit) does (that, if
        the owner is still there; else this portal's)."""
        close = None if self._owner_close is None else self._owner_close()
        if close is not None:
            close()
        else:
            self.close()

    def close(self, exc: BaseException | None = None) -> bool:
        """Leave the async client's block (flushing/committing as it does), then
        stop the thread. Returns False when already closed."""
        with self._lock:
            if self.closing:
                return False
            self.closing = True
        self._finalizer.detach()
        _OPEN.discard(self)
        try:
            if exc is None:
                self._stack.close()
            else:
                self._stack.__exit__(type(exc), exc, exc.__traceback__)
        finally:
            self.closed = True
        return True


#: The portals not yet closed, for :func:`_close_open_portals`.
_OPEN: weakref.WeakSet[Portal] = weakref.WeakSet()


def _close_open_portals() -> None:
    """Close every client still open when the interpreter exits (an atexit hook,
    run while daemon threads still run), with the client's own close (its
    ``at_exit``): a producer delivers what it holds (within its delivery
    timeout, and while a broker is in reach), a consumer commits what it
    handed out. A script that ends without close() must still
    end: left open, the client's objects are collected while the interpreter
    finalizes, and collecting a portal waits for a loop thread that no longer
    runs."""
    for portal in list(_OPEN):
        try:
            portal.close_as_owner()
        except Exception:  # exiting: one client's failure must not keep the rest open
            continue


atexit.register(_close_open_portals)


def _close_aside(stack: ExitStack) -> None:
    """Close a dropped client's stack on a daemon thread (see Portal.__init__)."""
    threading.Thread(target=stack.close, name="trafka-dropped-client", daemon=True).start()


def _loop_identity() -> tuple[trio.lowlevel.TrioToken, int, trio.abc.Clock]:
    return trio.lowlevel.current_trio_token(), threading.get_ident(), trio.lowlevel.current_clock()


def _start_call(
    future: Future[Any], fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """On the loop, for :meth:`Portal.call`: run ``fn``; a coroutine it returns is
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


class Forwarding:
    """Methods the blocking class does not define run on the loop, blocking."""

    _loop: Portal

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


class LoopLock(trio.abc.Instrument):
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
async def with_loop_lock(
    opened: AbstractAsyncContextManager[Any],
    loop_lock: LoopLock,
    background: Callable[..., Coroutine[Any, Any, None]] | None = None,
) -> AsyncIterator[Any]:
    """``opened``'s client, with ``loop_lock`` installed from before it opens until
    after it closes, and ``background`` (if any) running while it is open: started
    as ``background(task_status=...)``, the client given once it says it started."""
    loop_lock.install()
    try:
        async with opened as client, anyio.create_task_group() as tg:
            if background is not None:
                await tg.start(background)
            try:
                yield client
            finally:
                tg.cancel_scope.cancel()
    finally:
        loop_lock.uninstall()


def wait_turn(loop: Portal, turn: threading.Event) -> None:
    """Wait for the loop's turn to end (the loop sets ``turn`` when it is idle)."""
    while not turn.wait(1.0):
        if loop.closed:
            return


def refuse_loop_thread(loop_lock: LoopLock, call: str) -> None:
    """A call from the loop's own thread (a callback) could only wait for itself."""
    if threading.get_ident() == loop_lock.thread:
        raise UsageError(
            f"{call} was called on the client's own thread (from a callback?); "
            "callbacks must not call the client"
        )


def locked(loop_lock: LoopLock, call: str) -> None:
    """Take ``loop_lock``'s lock (see :class:`LoopLock`) for ``call`` from a client's caller."""
    lock = loop_lock.lock
    if not lock.acquire(False):
        refuse_loop_thread(loop_lock, call)
        lock.acquire()


def unlocked(loop_lock: LoopLock) -> threading.Event | None:
    """Release ``loop_lock``'s lock; an event to wait for when the loop asked for
    its turn meanwhile (see :class:`LoopLock`)."""
    turn = None
    if loop_lock.wanted:
        turn = threading.Event()
        loop_lock.release_when_idle(turn)
    loop_lock.lock.release()
    return turn
