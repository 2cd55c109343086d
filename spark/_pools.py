"""The clients a Spark Python worker keeps between Spark's calls: a trio loop in
a daemon thread (:func:`shared_loop`) for the async clients, the pools of async
consumers, producers and the driver's planning clients on it
(:class:`ClientPool`), and the pool of blocking range readers
(:class:`ReaderPool`), with the bookkeeping of their idle entries
(:class:`Idle`).

No pyspark here; :mod:`._kafka` uses them to plan, read and write.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
from anyio.from_thread import BlockingPortal

from ..sdk.config import ConsumerConfig
from ._wire import RangeReader, reader_settings

if TYPE_CHECKING:
    from ..sdk.config import ProducerConfig
    from ..sdk.consumer import Consumer
    from ..sdk.producer import Producer


class Loop:
    """A trio loop in a daemon thread, for the clients this process keeps open
    between Spark's calls. A daemon thread, so that a Python worker that ends is
    never held up by it; made again after a fork (Spark forks its workers from a
    daemon process, and threads do not survive a fork)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        ready = threading.Event()
        self.portal: BlockingPortal | None = None

        async def serve() -> None:
            async with BlockingPortal() as portal:
                self.portal = portal
                ready.set()
                await portal.sleep_until_stopped()

        self.thread = threading.Thread(
            target=anyio.run, args=(serve,), kwargs={"backend": "trio"}, daemon=True,
            name="trafka-spark",
        )  # fmt: skip
        self.thread.start()
        ready.wait()

    def call(self, fn: Any, *args: Any) -> Any:
        assert self.portal is not None
        return self.portal.call(fn, *args)

    def enter(self, manager: Any) -> tuple[Any, Any]:
        """Enter an async context manager on this loop: (its value, its exit)."""
        assert self.portal is not None
        wrapped = self.portal.wrap_async_context_manager(manager)
        return wrapped.__enter__(), wrapped.__exit__


_loop: Loop | None = None
_loop_lock = threading.Lock()


def shared_loop() -> Loop:
    global _loop
    with _loop_lock:
        if _loop is None or _loop.pid != os.getpid() or not _loop.thread.is_alive():
            _loop = Loop()
        return _loop


_E = TypeVar("_E")


class Idle(Generic[_E]):
    """The idle entries of a pool (bookkeeping only: the pools close what it
    hands back, outside its lock).

    Rules:

    * An entry is kept under its key (the settings it was made with) with when
      it went idle and its weight (a reader's open sockets; 1 without
      ``weight``), in the order the entries were given back: the least
      recently used first.
    * :meth:`take` hands out the most recently given back entry of its key
      (``fits`` passes over, and drops, entries that cannot serve).
    * :meth:`put` keeps an entry, then evicts the least recently used entries,
      of any key, until at most ``capacity`` are kept and their weights add up
      to at most ``max_weight``. The entry just given back is never evicted
      (its owner trims it to ``max_weight`` first), so a pool at its bounds
      keeps the newest entry, not the oldest.
    * An entry idle for ``idle_timeout_s`` or longer expires at the next
      :meth:`take`, :meth:`put` or :meth:`expire`.
    * Every entry evicted, expired or dropped is returned to the caller to close.
    * ``clock`` is monotonic seconds, of any origin.
    """

    def __init__(
        self,
        capacity: int,
        idle_timeout_s: float,
        *,
        max_weight: int | None = None,
        weight: Callable[[_E], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.capacity = capacity
        self.idle_timeout_s = idle_timeout_s
        self.max_weight = max_weight
        self._weight = weight
        self._clock = clock
        # serial -> (key, idle since, weight, entry), the least recently used first.
        self._entries: dict[int, tuple[Any, float, int, _E]] = {}
        self._serials = itertools.count()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def weight(self) -> int:
        """The weights of the idle entries, in all (their sockets, for readers)."""
        return sum(w for _, _, w, _ in self._entries.values())

    def _expired(self, now: float) -> list[_E]:
        old = [
            n for n, (_, since, _, _) in self._entries.items() if now - since >= self.idle_timeout_s
        ]
        return [self._entries.pop(n)[3] for n in old]

    def expire(self) -> list[_E]:
        """Forget the expired entries; they are returned, to close."""
        with self._lock:
            return self._expired(self._clock())

    def take(
        self, key: Any, fits: Callable[[_E], bool] | None = None
    ) -> tuple[_E | None, list[_E]]:
        """An idle entry for ``key`` or None, and the entries to close."""
        with self._lock:
            gone = self._expired(self._clock())
            for n in reversed([n for n, e in self._entries.items() if e[0] == key]):
                entry = self._entries.pop(n)[3]
                if fits is None or fits(entry):
                    return entry, gone
                gone.append(entry)
        return None, gone

    def put(self, key: Any, entry: _E) -> list[_E]:
        """Keep ``entry`` as idle; the entries evicted or expired, to close."""
        weight = 1 if self._weight is None else self._weight(entry)
        with self._lock:
            now = self._clock()
            gone = self._expired(now)
            newest = next(self._serials)
            self._entries[newest] = (key, now, weight, entry)
            total = sum(w for _, _, w, _ in self._entries.values())
            for n in list(self._entries):
                over = len(self._entries) > self.capacity or (
                    self.max_weight is not None and total > self.max_weight
                )
                if not over or n == newest:
                    break
                _, _, w, old = self._entries.pop(n)
                total -= w
                gone.append(old)
            return gone

    def drain(self) -> list[_E]:
        """Every idle entry, forgotten (for the caller to close)."""
        with self._lock:
            entries = [e for _, _, _, e in self._entries.values()]
            self._entries.clear()
        return entries


class _Pooled:
    """A client kept open on the shared loop between tasks."""

    __slots__ = ("client", "close", "loop")

    def __init__(self, loop: Loop, client: Any, close: Any) -> None:
        self.loop = loop
        self.client = client
        self.close = close


class ClientPool:
    """Async clients kept open between the Spark tasks of one Python worker,
    keyed by their settings, as Spark's connector caches its consumers and
    producers: a task takes an idle one with its settings (or opens one), uses
    it, and gives it back, connections and metadata intact. So the tasks of a
    stream's micro-batches, one after another in a worker that Spark reuses,
    open no new connection.

    Rules: a client serves one task at a time; one whose task failed is closed,
    not given back (its state is unknown); ``tidy`` runs on the loop before a
    client goes back (a consumer drops its assignment); at most ``capacity``
    idle clients are kept per process, the least recently used closed to make
    room, and one idle for ``idle_timeout_s`` is closed when the pool is next
    used (Spark's caches evict after 5 minutes too). See :class:`Idle`. With
    ``close_at_exit``, the idle clients are closed when the interpreter exits
    (those of this process's loop: a forked child's copies are left alone).
    """

    def __init__(
        self,
        opener: Any,
        tidy: Any = None,
        *,
        capacity: int = 16,
        idle_timeout_s: float = 300.0,
        close_at_exit: bool = False,
    ) -> None:
        self.opener = opener
        self.tidy = tidy
        self._idle: Idle[_Pooled] = Idle(capacity, idle_timeout_s)
        self.opened = 0  # clients opened (for tests and statistics)
        if close_at_exit:
            atexit.register(self.close)

    def __len__(self) -> int:
        """How many idle clients it keeps."""
        return len(self._idle)

    @contextlib.contextmanager
    def lease(self, config: Any) -> Iterator[_Pooled]:
        """An open client with ``config`` for one task (see the class doc)."""
        entry = self._take(config)
        try:
            yield entry
        except GeneratorExit:
            self._give_back(config, entry)  # Spark stopped reading early: still sound
            raise
        except BaseException as exc:
            # Closed as its block would be on this error (a producer then does not
            # wait for what it had not sent); what that raises again is the same.
            try:
                entry.close(type(exc), exc, exc.__traceback__)
            except BaseException:
                pass
            raise
        else:
            self._give_back(config, entry)

    def _take(self, config: Any) -> _Pooled:
        loop = shared_loop()
        # One of another loop (before a fork) is dropped: that loop is gone.
        entry, stale = self._idle.take(config, lambda e: e.loop is loop)
        for old in stale:
            with contextlib.suppress(Exception):
                old.close(None, None, None)
        if entry is None:
            client, close = loop.enter(self.opener(config))
            entry = _Pooled(loop, client, close)
            self.opened += 1
        return entry

    def _give_back(self, config: Any, entry: _Pooled) -> None:
        try:
            if self.tidy is not None:
                entry.loop.call(self.tidy, entry.client)
        except Exception:
            with contextlib.suppress(Exception):
                entry.close(None, None, None)
            return
        for old in self._idle.put(config, entry):
            with contextlib.suppress(Exception):
                old.close(None, None, None)

    def close(self) -> None:
        """Close every idle client. Those of another process's loop (a forked
        child's copies, whose loop thread did not survive the fork) or of a
        loop that ended are forgotten: their loop cannot run their closing."""
        for entry in self._idle.drain():
            loop = entry.loop
            if loop.pid != os.getpid() or not loop.thread.is_alive():
                continue
            with contextlib.suppress(Exception):
                entry.close(None, None, None)


def _unassign(consumer: Consumer) -> None:
    consumer.assign([])


def open_consumer(config: ConsumerConfig) -> contextlib.AbstractAsyncContextManager[Consumer]:
    """The SDK's ``open_consumer(config=config)``, imported on first use: a Spark
    worker that reads over plain sockets (:data:`READERS`) or only writes never
    loads the consumer (tests/spark/test_spark_worker_imports.py holds this)."""
    from ..sdk.consumer import open_consumer

    return open_consumer(config=config)


def open_producer(config: ProducerConfig) -> contextlib.AbstractAsyncContextManager[Producer]:
    """The SDK's ``open_producer(config=config)``, imported on first use: a task
    that reads never loads the producer."""
    from ..sdk.producer import open_producer

    return open_producer(config=config)


POOL = ClientPool(open_consumer, _unassign)
"""This process's async consumers for reading with OAUTHBEARER (see :class:`ClientPool`)."""

PRODUCERS = ClientPool(open_producer)
"""This process's producers for writing (see :class:`ClientPool`)."""


class ReaderPool:
    """Range readers (:class:`~._wire.RangeReader`, their connections and
    metadata) kept between the Spark tasks of one Python worker, as Spark's
    connector caches its consumers; a reader owns no thread, only sockets.

    Rules (the bookkeeping is :class:`Idle`'s):

    * Readers are keyed by :func:`~._wire.reader_settings`: the cluster,
      security, client and fetch settings, not the group id that each query
      draws at random. Every query reading a cluster the same way shares them.
    * A reader serves one task at a time; one whose task failed is closed, not
      given back.
    * At most ``max_readers`` idle readers and ``max_idle_sockets`` open
      sockets among them are kept: a reader given back first closes its least
      recently used sockets beyond ``max_idle_sockets``, then the least
      recently used other readers are closed until both bounds hold.
    * A reader idle for ``idle_timeout_s`` is closed when the pool is next used
      (no thread watches the clock: a worker that gets no more tasks keeps its
      bounded few until Spark stops it).
    * In a forked child, the parent's readers are closed (the child's copies of
      their sockets; the parent's stay open) and forgotten.
    """

    def __init__(
        self,
        max_readers: int = 8,
        max_idle_sockets: int = 32,
        idle_timeout_s: float = 300.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_idle_sockets = max_idle_sockets
        self._idle: Idle[RangeReader] = Idle(
            max_readers,
            idle_timeout_s,
            max_weight=max_idle_sockets,
            weight=lambda reader: reader.open_connections,
            clock=clock,
        )
        self._pid = os.getpid()
        self.created = 0  # readers made (for tests and statistics)

    @contextlib.contextmanager
    def lease(self, config: ConsumerConfig) -> Iterator[RangeReader]:
        """A reader for ``config`` (see the class doc), for one task."""
        key = reader_settings(config)
        reader = self._take(key)
        try:
            yield reader
        except GeneratorExit:
            self._give_back(key, reader)  # Spark stopped reading early: still sound
            raise
        except BaseException:
            reader.close()
            raise
        else:
            self._give_back(key, reader)

    def _take(self, key: ConsumerConfig) -> RangeReader:
        if self._pid != os.getpid():
            self.close()
            self._pid = os.getpid()
        reader, gone = self._idle.take(key)
        for old in gone:
            old.close()
        if reader is None:
            reader = RangeReader(key)
            self.created += 1
        return reader

    def _give_back(self, key: ConsumerConfig, reader: RangeReader) -> None:
        reader.close_connections(keep=self.max_idle_sockets)
        for old in self._idle.put(key, reader):
            old.close()

    def expire(self) -> None:
        """Close the readers idle for ``idle_timeout_s``."""
        for old in self._idle.expire():
            old.close()

    def statistics(self) -> dict[str, int]:
        """``idle_readers``, ``idle_sockets`` (theirs, open) and ``created`` (ever)."""
        return {
            "idle_readers": len(self._idle),
            "idle_sockets": self._idle.weight,
            "created": self.created,
        }

    def close(self) -> None:
        """Close every idle reader."""
        for reader in self._idle.drain():
            reader.close()


READERS = ReaderPool()
"""This process's range readers (see :class:`ReaderPool`)."""
