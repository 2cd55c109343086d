"""What the client commands say and do when the cluster is not all there: brokers
out of reach, partitions without a leader, and Ctrl-C.

Rules:

* Whatever the client retries by itself is still said on stderr, at once and
  once: a broker going out of reach (the SDK's ``error_cb``,
  :class:`BrokerNotices`), and coming back; a partition the command needs
  whose leader is gone or out of reach (:class:`PartitionWatch`), and coming
  back. The command goes on serving what it can reach meanwhile.
* A partition is *unreachable* while metadata names no leader for it (its
  replicas' brokers are down: offline) or while its leader is a broker out of
  reach. One that stays so for the command's ``-m`` seconds is given up by a
  command that must reach every partition's end (``consume -e``), which then
  exits 1 naming it, after printing everything else.
* A group whose coordinator the member cannot find (FindCoordinator keeps
  failing; the SDK retries) is said the same way (:class:`GroupWatch`), once it
  has lasted a second, and once found again. A command that must reach an end
  (``consume -G -e``) and holds no partition gives the group up once it has
  been so for ``-m`` seconds, and exits 1 saying why.
* Long-running commands stop cleanly on SIGINT or SIGTERM (:func:`watch_signals`):
  the first signal ends their main loop and they finish as they would at the
  end (deliver what was read, commit what was printed), a further one cuts the
  next stage short, and after the last stage's signal one more quits at once
  (the handlers they took are given back). They exit 128 + the first signal's
  number (130 for Ctrl-C), as a shell reports a process a signal ended.
* Outside that, Ctrl-C cancels the command's whole run (:func:`run_interruptible`,
  the ``trio.run`` of every client command): the command ends as interrupted
  (exit status 130, one line) wherever the signal lands, even once its work
  is done and trio is shutting down. The command line owns SIGINT for that
  because trio's own handler raises KeyboardInterrupt at whatever bytecode
  outside trio the signal lands on; one landing in anyio's or contextlib's
  ``__exit__`` before the cancel scope or task group under it is closed left
  trio's scope stack corrupted, and the run ended on trio's RuntimeError
  ("Nursery stack corrupted"): a traceback, exit 1, and ``Nursery.__del__``'s
  assertion at exit. A cancellation arrives only where the code awaits, which
  it always copes with. A Ctrl-C that finds the command already stopping
  (after the first, or after a long-running command's last stage) flushes
  what was printed, says so and quits at once, exit 130, waiting for nothing.

The trackers are pure (``now`` and the cluster's state are given), so they are
tested without a broker.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import anyio
import anyio.abc

if TYPE_CHECKING:
    from trafka.sdk import TopicPartition

__all__ = [
    "BrokerNotices",
    "GroupWatch",
    "Interrupts",
    "PartitionWatch",
    "beside",
    "no_coordinator_error",
    "run_interruptible",
    "signals_watched",
    "tasks_beside",
    "watch_signals",
]

Say = Callable[[str], None]
T = TypeVar("T")


class BrokerNotices:
    """The ``error_cb`` of a command's clients: each error the client handles by
    retrying becomes one ``warning:`` line; :meth:`check` says when a broker
    reported out of reach is reachable again.

    Args:
        say: writes one line to stderr.
    """

    def __init__(self, say: Say) -> None:
        self._say = say
        self._out: dict[int, str] = {}  # broker id -> its address, while out of reach

    def __call__(self, error: BaseException) -> None:
        from trafka.sdk import BrokerUnreachableError, NoBrokersAvailableError

        if isinstance(error, NoBrokersAvailableError):
            return  # a command that reaches no broker fails saying so
        if isinstance(error, BrokerUnreachableError):
            if error.node_id < 0:
                return  # a bootstrap address: the same (and no broker to list)
            self._out[error.node_id] = f"{error.host}:{error.port}"
        self._say(f"warning: {error} (retrying)")

    def check(self, unreachable: Mapping[int, Any]) -> None:
        """Say which brokers reported out of reach are no longer in ``unreachable``
        (a cluster's :attr:`~trafka.sdk.transport.Cluster.unreachable_brokers`)."""
        for node in [n for n in self._out if n not in unreachable]:
            self._say(f"broker {node} at {self._out.pop(node)} is reachable again")


def _unreachable_reason(tp: TopicPartition, metadata: Any, unreachable: Mapping[int, Any]) -> str:
    """Why ``tp`` cannot be read or written now, or "" when it can (or when
    metadata does not know its topic yet: that is waited for, not a fault)."""
    info = metadata.topics.get(tp.topic)
    if info is None or tp.partition >= len(info.partitions):
        return ""
    p = info.partitions[tp.partition]
    if p.leader < 0:
        offline = p.offline_replicas or p.replicas
        if offline:
            down = ", ".join(map(str, offline))
            return f"it has no leader (offline: its replicas on broker(s) {down} are down)"
        return "it has no leader"
    if p.leader in unreachable:
        return f"its leader, broker {p.leader}, is unreachable"
    return ""


@dataclasses.dataclass(slots=True)
class _Out:
    since: float
    reason: str
    said: bool = False


class PartitionWatch:
    """Which of a command's partitions it cannot reach now (see the module's rules).

    A partition is announced once it has been unreachable for ``notice``
    seconds, so that a leader moving between brokers (a blink without a
    leader) is not news.

    Args:
        grace: seconds a partition may stay unreachable before :meth:`given_up`
            lists it.
        say: writes one line to stderr.
        waiting: what the first line about a partition adds (what the command
            does meanwhile).
        notice: see above.
    """

    def __init__(self, grace: float, say: Say, waiting: str = "", notice: float = 1.0) -> None:
        self.grace = grace
        self.notice = notice
        self._say = say
        self._waiting = waiting
        self._out: dict[TopicPartition, _Out] = {}

    def update(
        self,
        tps: Iterable[TopicPartition],
        metadata: Any,
        unreachable: Mapping[int, Any],
        now: float,
    ) -> None:
        """Look at ``tps`` again: ``metadata`` (a client's
        :class:`~trafka.sdk.metadata.MetadataCache`) and the brokers out of reach."""
        seen = set()
        for tp in tps:
            seen.add(tp)
            reason = _unreachable_reason(tp, metadata, unreachable)
            out = self._out.get(tp)
            if not reason:
                if out is not None:
                    del self._out[tp]
                    if out.said:
                        self._say(f"partition {tp.topic}-{tp.partition} is reachable again")
                continue
            if out is None:
                out = self._out[tp] = _Out(now, reason)
            out.reason = reason
            if not out.said and now - out.since >= self.notice:
                out.said = True
                more = f"; {self._waiting}" if self._waiting else ""
                name = f"{tp.topic}-{tp.partition}"
                self._say(f"warning: partition {name} is unreachable: {reason}{more}")
        for tp in [tp for tp in self._out if tp not in seen]:
            del self._out[tp]  # no longer the command's (a group took it away)

    @property
    def unreachable(self) -> dict[TopicPartition, str]:
        """The partitions announced unreachable, with why."""
        return {tp: out.reason for tp, out in sorted(self._out.items()) if out.said}

    def given_up(self, now: float) -> dict[TopicPartition, str]:
        """The partitions unreachable for ``grace`` seconds or more, with why."""
        return {
            tp: out.reason
            for tp, out in sorted(self._out.items())
            if out.said and now - out.since >= self.grace
        }


class GroupWatch:
    """Whether a command's group has a coordinator (see the module's rules).

    Args:
        group: the group's id.
        grace: seconds without a coordinator before :meth:`given_up` says why.
        say: writes one line to stderr.
        waiting: what the first line adds (what the command does meanwhile).
        notice: seconds without a coordinator before it is said.
    """

    def __init__(
        self, group: str, grace: float, say: Say, waiting: str = "", notice: float = 1.0
    ) -> None:
        self.group = group
        self.grace = grace
        self.notice = notice
        self._say = say
        self._waiting = waiting
        self._out: _Out | None = None

    def update(self, problem: str, now: float) -> None:
        """Look again: ``problem`` is why the group has no coordinator now ("" when
        it has one: :attr:`~trafka.sdk.GroupStatistics.coordinator_problem`)."""
        out = self._out
        if not problem:
            if out is not None:
                self._out = None
                if out.said:
                    self._say(f"group {self.group} has a coordinator again")
            return
        if out is None:
            out = self._out = _Out(now, problem)
        out.reason = problem
        if not out.said and now - out.since >= self.notice:
            out.said = True
            more = f"; {self._waiting}" if self._waiting else ""
            self._say(f"warning: group {self.group} has no coordinator: {problem}{more}")

    def given_up(self, now: float) -> str:
        """Why the group has had no coordinator for ``grace`` seconds or more, or ""."""
        out = self._out
        if out is None or not out.said or now - out.since < self.grace:
            return ""
        return out.reason


def no_coordinator_error(group: str, grace: float, why: str) -> str:
    """The last line of a command that gave its group up (:meth:`GroupWatch.given_up`)."""
    return f"Error: group {group} was given up after {grace:g} s (-m) without a coordinator: {why}"


@dataclasses.dataclass(slots=True)
class Interrupts:
    """The signals a command received (:func:`watch_signals`)."""

    first: signal.Signals | None = None
    count: int = 0

    @property
    def exit_status(self) -> int | None:
        """128 + the first signal's number, or None without one."""
        return None if self.first is None else 128 + self.first


async def watch_signals(
    interrupts: Interrupts,
    stages: Sequence[anyio.CancelScope],
    say: Callable[[int, signal.Signals], None],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Cancel ``stages[n]`` at the n+1-th SIGINT or SIGTERM, calling ``say(n + 1,
    signal)`` first; after the last stage the usual handlers are back (one more
    signal quits at once, a SIGINT under :func:`run_interruptible` too). A
    SIGINT the process started with ignored (a background job of a script)
    stays ignored. Only the main thread can take signals: elsewhere (a test
    runner's worker thread) nothing is watched."""
    if threading.current_thread() is not threading.main_thread() or not stages:
        task_status.started()
        return
    wanted = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        wanted.append(signal.SIGINT)
    with anyio.open_signal_receiver(*wanted) as signals:
        task_status.started()
        async for signum in signals:
            received = signal.Signals(signum)
            interrupts.count += 1
            if interrupts.first is None:
                interrupts.first = received
            say(interrupts.count, received)
            stages[interrupts.count - 1].cancel()
            if interrupts.count == len(stages):
                if _owner is not None:
                    _owner.quit_on_next()
                return


@asynccontextmanager
async def tasks_beside(
    start: Callable[[anyio.abc.TaskGroup], Awaitable[object]] | None = None,
) -> AsyncIterator[anyio.abc.TaskGroup]:
    """A task group for tasks beside the ``async with`` block (those ``start``
    starts, and any the block starts in it), cancelled when the block ends;
    what the block raises leaves as itself, not inside an ExceptionGroup."""
    try:
        async with anyio.create_task_group() as tg:
            if start is not None:
                await start(tg)
            try:
                yield tg
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


@asynccontextmanager
async def signals_watched(
    interrupts: Interrupts,
    stages: Sequence[anyio.CancelScope],
    say: Callable[[int, signal.Signals], None],
) -> AsyncIterator[None]:
    """:func:`watch_signals` for the ``async with`` block (installed before it
    runs); what the block raises leaves as itself, not inside an ExceptionGroup."""
    async with tasks_beside(lambda tg: tg.start(watch_signals, interrupts, stages, say)):
        yield


@asynccontextmanager
async def beside(*tasks: Callable[[], Coroutine[Any, Any, None]]) -> AsyncIterator[None]:
    """Run ``tasks`` beside the ``async with`` block, cancelled when it ends; what
    the block raises leaves as itself, not inside an ExceptionGroup."""

    async def start(tg: anyio.abc.TaskGroup) -> None:
        for task in tasks:
            tg.start_soon(task)

    async with tasks_beside(start):
        yield


def _quit_at_once() -> NoReturn:
    """Exit 130 now (a SIGINT that found the command already stopping): what was
    printed is flushed, as far as a signal handler can."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a write under way (the signal interrupted it), a closed pipe
            pass
    try:
        os.write(2, b"SIGINT: quitting at once\n")
    except OSError:
        pass
    os._exit(128 + signal.SIGINT)


class _SigintOwner:
    """SIGINT while one command's event loop runs (:func:`run_interruptible`).

    The handler never raises: the first signal is recorded and the run's
    cancellation handed to the loop (``TrioToken.run_sync_soon`` is safe in a
    signal handler); a further one quits at once."""

    def __init__(self) -> None:
        self.received = False
        self._quit_next = False
        self._cancel: Callable[[], object] | None = None
        self._handler = self._on_sigint  # one bound method, to know it again

    def _on_sigint(self, signum: int, frame: object) -> None:
        if self._quit_next:
            _quit_at_once()
        self.received = self._quit_next = True
        if self._cancel is not None:
            self._cancel()

    def quit_on_next(self) -> None:
        """The next SIGINT quits at once (the command is already stopping)."""
        self._quit_next = True

    def cancel_with(self, cancel: Callable[[], object]) -> None:
        """``cancel()`` cancels the run; called at once when a signal came already."""
        self._cancel = cancel
        if self.received:
            cancel()

    @contextmanager
    def owning(self) -> Iterator[None]:
        """The handler, for the ``with`` block: only in the main thread and over
        Python's default handler (a SIGINT the process started with ignored stays
        ignored; one a host program handles stays its own)."""
        global _owner
        if (
            threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        ):
            yield
            return
        signal.signal(signal.SIGINT, self._handler)
        _owner = self
        try:
            yield
        finally:
            _owner = None
            if signal.getsignal(signal.SIGINT) == self._handler:
                signal.signal(signal.SIGINT, signal.default_int_handler)


#: The owner of SIGINT while a command runs (watch_signals tells it when its last stage is done).
_owner: _SigintOwner | None = None


def run_interruptible(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run(fn, *args)`` that Ctrl-C cancels (see the module's rules).

    Raises:
        KeyboardInterrupt: a SIGINT came while it ran (whatever the run ended
            with: an error meanwhile is most likely the interruption's effect).
        BaseException: what ``fn`` raised, without a SIGINT.
    """
    import trio

    owner = _SigintOwner()
    result: list[T] = []

    async def main() -> None:
        token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:

            def cancel() -> None:
                try:
                    token.run_sync_soon(scope.cancel)
                except trio.RunFinishedError:  # trio was done: the flag is enough
                    pass

            owner.cancel_with(cancel)
            result.append(await fn(*args))

    try:
        with owner.owning():
            trio.run(main)
    except BaseException:
        if owner.received:
            raise KeyboardInterrupt from None
        raise
    # Checked once the handler is gone: a later SIGINT raises KeyboardInterrupt itself.
    if owner.received:
        raise KeyboardInterrupt
    return result[0]
