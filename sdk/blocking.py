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
  touched from that thread (but for the fast paths of the producer and the
  consumer, while that
  thread waits); every call crosses to it and back (one hand-off each way:
  :meth:`._loop_thread.Portal.call`) and raises the async client's exceptions in the
  calling thread. A call from the client's own thread (a callback) is a
  ``UsageError``: it could only wait for itself.
* The producer's own rules (its sends that do not cross to the loop per
  record, the order of calls) are in :mod:`.blocking_producer`.
* A consumer is used from one thread at a time, as Java's (its records held
  back are that thread's). Consumers take records in batches (``getmany``) and
  hand them out one at a time, so the group sees one poll per batch, as Java's
  ``poll``. A :class:`Consumer` takes a batch the loop has already fetched
  itself, in its own thread while the loop waits for I/O (as the producer's fast
  path, with the loop's clock), and crosses to the loop only to wait for
  records. Commits and
  closing count only the records handed out: records still held back (the rest
  of a batch) are given back: not committed, and fetched again after
  :meth:`Consumer.pause` / ``resume``. Those of partitions revoked or lost are
  dropped by the loop (under the consumer's lock, before the revocation's
  commit and listener), so that no record of a partition is handed out after
  it went; a batch taken joins what is held back in the same step as it is
  taken (on the loop, or in this thread while the loop waits), never after.
  :meth:`Consumer.take` hands out what is held back in bulk (confluent-kafka's
  ``consume()``).
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
import logging
import re
import threading
from collections.abc import (
    Callable,
    Iterable,
    Iterator,
    Mapping,
)
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, overload

import anyio
import anyio.to_thread
import trio
import trio.abc
import trio.lowlevel

from trafka.common.lazy import lazy_exports

from ._loop_thread import Forwarding, LoopLock, Portal, locked, unlocked, wait_turn, with_loop_lock
from ._validate import (
    check_callable,
    check_int,
    check_offset,
    check_timeout,
    check_topic_partition,
    check_topic_partitions,
)
from .blocking_producer import PendingCommit, Producer, SendFuture
from .consumer import Consumer as AsyncConsumer
from .consumer import check_commit, check_poll, check_subscription, open_consumer
from .consumer_types import ConsumerRecord, K, TopicPartition, V
from .transaction_state import ConsumerGroupMetadata

if TYPE_CHECKING:
    from .admin import Admin as AsyncAdmin
    from .blocking_share import ShareConsumer
    from .statistics import AdminStatistics, ConsumerStatistics

__all__ = ["Admin", "Consumer", "PendingCommit", "Producer", "SendFuture", "ShareConsumer"]

log = logging.getLogger("trafka.sdk.blocking")


# The share consumer (and the async one it runs, with its share sessions and
# acknowledgements) is loaded when first named, as trafka.sdk does (issue #48).
__getattr__, __dir__ = lazy_exports(__name__, {"ShareConsumer": ".blocking_share"})


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


class Consumer(Forwarding, Generic[K, V]):
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
        # Records taken from the loop, not handed out yet. One deque for the
        # consumer's life (changed in place), changed under _held_lock: the
        # loop drops a revoked partition's records from it while this thread
        # may be handing them out.
        self._buffer: collections.deque[ConsumerRecord[K, V]] = collections.deque()
        self._held_lock = threading.Lock()
        self._timeout_ms = consumer_timeout_ms
        self._loop_lock = LoopLock()
        self._loop = Portal(
            lambda: with_loop_lock(open_consumer(config=config, **settings), self._loop_lock),
            self,
        )
        self._consumer: AsyncConsumer = self._loop.client
        self._token: trio.lowlevel.TrioToken = self._loop.token
        self._clock = self._loop.clock  # read by this thread for the polls it makes itself
        self._consumer.core.held_elsewhere = self._drop_going
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
        """The next record, or None when none came within ``timeout_ms`` (default:
        wait); with ``enable.partition.eof``, end-of-partition events come too
        (confluent-kafka's ``poll(timeout)``)."""
        check_timeout("timeout_ms", timeout_ms)
        buffer = self._buffer
        if buffer:  # the usual case, as _next's first step without its frame
            lock = self._held_lock
            lock.acquire()
            try:
                if buffer:
                    return buffer.popleft()
            finally:
                lock.release()
        return self._next(timeout_ms)

    def _next(self, timeout_ms: float | None) -> ConsumerRecord[K, V] | None:
        buffer = self._buffer
        lock = self._held_lock
        while True:
            if buffer:
                # (acquire and release: a third of a with block's cost, per record)
                lock.acquire()
                try:
                    if buffer:  # (unless the loop dropped them meanwhile)
                        return buffer.popleft()
                finally:
                    lock.release()
            if not self._wait_for_records(timeout_ms):
                return None

    def _wait_for_records(self, timeout_ms: float | None) -> bool:
        """Take a batch into what is held back: one at hand (without a
        crossing), else one the loop waits up to ``timeout_ms`` for. Whether
        any record came."""
        if self._poll_here():
            return True
        for left in self._loop.slices(timeout_ms, "the consumer is closed"):
            if self._call(self._fill, int(left * 1000)):
                return True
        return False

    async def _fill(self, timeout_ms: int) -> bool:
        """On the loop: a ``getmany`` held back here in the same step, so that a
        revocation on the loop comes before it or finds it held."""
        batch = await self._consumer.getmany(timeout_ms=timeout_ms)
        with self._held_lock:
            for records in batch.values():
                self._buffer.extend(records)
        return bool(batch)

    def take(self, max_records: int, timeout_ms: float | None = 0) -> list[ConsumerRecord[K, V]]:
        """Up to ``max_records`` records (and end-of-partition events), in the
        order they would come one at a time, in one list; waiting up to
        ``timeout_ms`` (None: without end) when none is at hand, and empty if
        none came. confluent-kafka's ``consume()`` through one call per batch
        instead of one per record.

        Raises:
            TypeError, ValueError: ``max_records`` is not an int >= 1, or
                ``timeout_ms`` not a number >= 0 or None.
            ClientClosedError: the consumer is closed.
            KafkaError: a fetch error.
        """
        if type(max_records) is not int or max_records < 1:
            check_int("max_records", max_records, minimum=1)
        check_timeout("timeout_ms", timeout_ms)
        buffer = self._buffer
        while True:
            if buffer:
                with self._held_lock:  # (unless the loop dropped them meanwhile)
                    if len(buffer) <= max_records:
                        out = list(buffer)
                        buffer.clear()
                    else:
                        popleft = buffer.popleft
                        out = [popleft() for _ in range(max_records)]
                if out:
                    return out
            if not self._wait_for_records(timeout_ms):
                return []

    def _poll_here(self) -> bool:
        """Take the records the loop has fetched already, from this thread while
        the loop waits for I/O (:class:`~._loop_thread.LoopLock`), as a ``getmany`` that finds
        records at hand would; without a crossing to the loop and back per poll.
        False when none were at hand (the loop must wait for some)."""
        if self._loop.closing:
            return False
        consumer = self._consumer
        loop_lock = self._loop_lock
        locked(loop_lock, "a poll")
        wake_group = True  # unless the poll says otherwise (an extra wake-up is harmless)
        try:
            batch, wake_group = consumer.poll_from_thread(self._clock.current_time())
            # Held back while the loop still waits: a revocation comes after.
            with self._held_lock:
                for records in batch.values():
                    self._buffer.extend(records)
        finally:
            turn = unlocked(loop_lock)
            if wake_group or consumer.core.fetcher.fetch_wanted:
                with contextlib.suppress(trio.RunFinishedError):
                    self._token.run_sync_soon(consumer.after_poll_from_thread, wake_group)
            if turn is not None:
                wait_turn(self._loop, turn)
        return bool(batch)

    def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord[K, V]]]:
        """Records per partition, waiting up to ``timeout_ms`` for some (records
        held back by iteration come first)."""
        wanted, limit = check_poll(partitions, timeout_ms, max_records)
        if self._buffer:
            out: dict[TopicPartition, list[ConsumerRecord[K, V]]] = {}
            with self._held_lock:
                buffer = self._buffer
                limit = limit or len(buffer)
                kept: list[ConsumerRecord[K, V]] = []
                n = 0
                for r in buffer:
                    tp = TopicPartition(r.topic, r.partition)
                    if n < limit and (wanted is None or tp in wanted):
                        out.setdefault(tp, []).append(r)
                        n += 1
                    else:
                        kept.append(r)
                buffer.clear()
                buffer.extend(kept)
            if out:
                return out
        result: dict[TopicPartition, list[ConsumerRecord[K, V]]] = self._call(
            self._consumer.getmany, *partitions, timeout_ms=timeout_ms, max_records=max_records
        )
        return result

    # -- what is held back ---------------------------------------------------------------

    def _held(self, tps: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """The first held-back offset per partition (of ``tps``, default all)."""
        with self._held_lock:
            return self._first_held(tps)

    def _first_held(self, tps: Iterable[TopicPartition] | None) -> dict[TopicPartition, int]:
        wanted = None if tps is None else {TopicPartition(*tp) for tp in tps}
        first: dict[TopicPartition, int] = {}
        for r in self._buffer:
            tp = TopicPartition(r.topic, r.partition)
            if tp not in first and (wanted is None or tp in wanted):
                first[tp] = r.offset
        return first

    def _drop(self, tps: Iterable[TopicPartition] | None) -> dict[TopicPartition, int]:
        """Forget the held-back records (and events) of ``tps`` (None: all);
        the first offset dropped per partition."""
        with self._held_lock:
            first = self._first_held(tps)
            buffer = self._buffer
            if tps is None:
                buffer.clear()
            else:
                going = {TopicPartition(*tp) for tp in tps}
                kept = [r for r in buffer if TopicPartition(r.topic, r.partition) not in going]
                if len(kept) < len(buffer):
                    buffer.clear()
                    buffer.extend(kept)
        return first

    def _drop_going(self, tps: set[TopicPartition]) -> dict[TopicPartition, int]:
        """On the loop: partitions revoked or lost (the async consumer's
        ``held_elsewhere``): their held-back records are dropped, not handed out."""
        return self._drop(tps)

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

    def unsubscribe(self) -> None:
        """Give up the subscription and the assignment (the async
        :meth:`~trafka.sdk.consumer.Consumer.unsubscribe`)."""
        self._give_back(None, refetch=True)
        self._call(self._consumer.unsubscribe)

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record to hand out (waiting until it is known)."""
        tp = check_topic_partition("partition", partition)
        held = self._held([tp]).get(tp)
        if held is not None:
            return held
        result: int = self._call(self._consumer.position, tp)
        return result

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: float | None = None
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """For each partition, the first ``(offset, timestamp)`` at or after its
        timestamp, or None (the async ``offsets_for_times``)."""
        result: dict[TopicPartition, tuple[int, int] | None] = self._call(
            self._consumer.offsets_for_times, dict(timestamps), timeout_ms
        )
        return result

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group membership to pass to ``Producer.send_offsets_to_transaction`` (KIP-447)."""
        result: ConsumerGroupMetadata = self._call(self._consumer.group_metadata)
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
            with self._held_lock:
                self._buffer.clear()
            self._loop.close(exc)


# -- admin -----------------------------------------------------------------------------------------


class Admin(Forwarding):
    """A blocking admin client: every method of :class:`~trafka.sdk.admin.Admin`,
    called without ``await``.

    Args:
        config: a :class:`~trafka.sdk.config.AdminConfig` or a mapping of Kafka-style keys.
        **settings: settings in Python spelling.

    Raises:
        ConfigError: invalid configuration.
    """

    def __init__(self, config: Any = None, **settings: Any) -> None:
        # The admin package loads with the first Admin: most scripts never make one (issue #48).
        from .admin import open_admin

        self._loop = Portal(partial(open_admin, config, **settings), self)
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
