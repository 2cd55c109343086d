"""The consumer: an anyio driver of :mod:`.consumer_core` (what a poll hands
out, what counts as consumed), with :mod:`.consumer_fetching` (the Fetch
requests and offset lookups) and :mod:`.group` for groups.

Rules:

* :func:`open_consumer` owns its tasks: the fetch task (:mod:`.consumer_fetching`:
  one fetch in flight per broker, offset lookups for resets), connection
  readers, the metadata refresher and, with a ``group.id`` and a subscription,
  the group task (join/sync/heartbeat, auto-commit). Leaving the block commits
  (with auto-commit), leaves the group, closes the fetch sessions and cancels
  the tasks; errors leave as themselves, never as an ExceptionGroup.
* Positions advance when records are handed out. For commits, a record counts
  as *consumed* once the next ``getmany`` / ``__anext__`` call starts (the
  caller has processed it): auto-commit and ``commit()`` without arguments
  commit consumed positions, giving at-least-once delivery; with
  ``enable.auto.offset.store=false`` they commit what ``store_offsets`` stored.
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Generic, overload

import anyio
import anyio.abc

from ._util import owned_task_group
from ._validate import (
    check_callable,
    check_committed_offset,
    check_int,
    check_offset,
    check_offsets,
    check_partition,
    check_timeout,
    check_topic,
    check_topic_partition,
    check_topic_partitions,
    describe,
)
from .client_hooks import start_client_hooks
from .config import make_config
from .consumer_core import ConsumerCore
from .consumer_fetching import FetchDriver
from .consumer_offsets import OffsetLookups
from .errors import (
    ArgumentTypeError,
    ArgumentValueError,
    ClientClosedError,
    UsageError,
)
from .fetcher import (
    EARLIEST,
    LATEST,
    ConsumerRecord,
    K,
    PartitionEOF,
    TopicPartition,
    V,
)
from .group import GroupDriver, group_metadata, polling
from .lifecycle import Hostable
from .subscription import Subscription, check_subscription
from .telemetry import (
    IntervalAverages,
    MetricSample,
    MetricsPush,
    Peaks,
    consumer_samples,
    label_group_member,
)
from .transactions import ConsumerGroupMetadata
from .transport import Cluster

if TYPE_CHECKING:
    from .config.consumer import ConsumerConfig
    from .statistics import ConsumerStatistics

__all__ = [
    "Consumer",
    "ConsumerRecord",
    "PartitionEOF",
    "TopicPartition",
    "check_commit",
    "check_poll",
    "check_subscription",
    "open_consumer",
]

log = logging.getLogger("trafka.sdk.consumer")


def check_commit(offsets: Any, message: Any) -> dict[TopicPartition, int] | None:
    """``commit()``'s arguments, checked: the offsets (None when not given)."""
    if isinstance(message, PartitionEOF):
        # Its offset is the end itself: "the offset after it" would skip a record.
        raise ArgumentValueError(
            f"message must be a consumed record, got {message!r}, an end-of-partition "
            f"event: commit {{TopicPartition({message.topic!r}, {message.partition}): "
            f"{message.offset}}} to commit up to it"
        )
    if message is not None:
        for attr, check in (("topic", check_topic), ("partition", check_partition)):
            if not hasattr(message, attr):
                raise ArgumentTypeError(
                    f"message must be a consumed record, got {describe(message)}"
                )
            check(f"message.{attr}", getattr(message, attr))
        check_offset("message.offset", getattr(message, "offset", None))
    if offsets is None:
        return None
    return check_offsets("offsets", offsets, check_value=check_committed_offset)


def check_poll(
    partitions: tuple[Any, ...], timeout_ms: Any, max_records: Any
) -> tuple[set[TopicPartition] | None, int | None]:
    """``getmany()``'s arguments, checked: the partitions wanted (None: all)
    and ``max_records``."""
    check_timeout("timeout_ms", timeout_ms, none=False)
    if max_records is not None:
        check_int("max_records", max_records, minimum=1)
    tps = check_topic_partitions("partitions", partitions)
    return (set(tps) if tps else None), max_records


class Consumer(Hostable, Generic[K, V]):
    """A Kafka consumer. Create it with :func:`open_consumer`.

    The driver of a :class:`~trafka.sdk.consumer_core.ConsumerCore` (:attr:`core`):
    it owns the fetch task, the fetches' completions, the waits for records and
    the group's driver; the core decides what a poll hands out and what counts
    as consumed. Its offset lookups (:meth:`partitions_for`, :meth:`beginning_offsets`,
    :meth:`end_offsets`, :meth:`offset_bounds`, :meth:`offsets_for_times`,
    :meth:`committed`) are calls of an :class:`~trafka.sdk.consumer_offsets.OffsetLookups`
    it owns: each is bounded by ``default.api.timeout.ms`` as a whole (then
    ApiTimeoutError), and a partition whose leader moved is asked again after a
    metadata refresh.
    """

    def __init__(self, config: ConsumerConfig, task_group: anyio.abc.TaskGroup) -> None:
        self.config = config
        self._tg = task_group
        self._cluster = Cluster(config, task_group)
        self._cluster.on_change.append(self.wake_fetcher)
        self._cluster.on_change.append(self._wake_if_refused)
        self.core: ConsumerCore[K, V] = ConsumerCore(config, self._cluster.metadata)
        self._fetcher = self.core.fetcher
        self._lookups = OffsetLookups(config, self._cluster)
        self._fetches = FetchDriver(config, self.core, self._cluster, self._lookups, task_group)
        self._closed = False
        self._group: Any = None  # a .group.GroupDriver when subscribed with a group.id
        self._subscription = Subscription()
        resource = {"group_id": config.group_id, "group_instance_id": config.group_instance_id}
        self._telemetry = MetricsPush(
            config, self._cluster, "consumer", resource, self.statistics, self._telemetry_samples
        )

    # -- assignment -----------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Consume exactly these partitions (no group management).

        Raises:
            TypeError, ValueError: ``partitions`` is not an iterable of
                TopicPartition (or ``(topic, partition)`` pairs).
            UsageError: the consumer is subscribed.
        """
        tps = check_topic_partitions("partitions", partitions)
        self._subscription.assign()
        self._fetcher.assign(tps)
        self._cluster.metadata.add_topics({tp.topic for tp in tps})
        self._cluster.nudge()
        self.core.drop_held(set(tps))
        self.wake_fetcher()

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
        listener: Any = None,
    ) -> None:
        """Subscribe to topics (or a regex) with the group's partition assignment.

        Args:
            topics: topic names.
            pattern: a regular expression matched against every topic name.
            listener: a rebalance listener with async ``on_partitions_revoked``,
                ``on_partitions_assigned`` and (optionally) ``on_partitions_lost``.

        Raises:
            TypeError, ValueError: ``topics`` is not an iterable of topic
                names (one string is not), ``pattern`` is not a regular
                expression, or ``listener`` has none of the listener methods.
            UsageError: no group.id, or the consumer uses assign(), or both or
                neither of ``topics`` and ``pattern``.
        """
        topics, pattern = check_subscription(topics, pattern, listener)
        self._subscription.subscribe(topics, pattern, self.config.group_id, self._cluster.metadata)
        self._cluster.nudge()
        if self._group is None:
            self._group = GroupDriver(self, listener)
            self._tg.start_soon(self._group.run, name="trafka consumer group")
        else:
            if listener is not None:
                self._group.listener = listener
            self._group.subscription_changed()

    async def unsubscribe(self) -> None:
        """Give up subscription and assignment, as Java's (a member commits, revokes, leaves)."""
        if self._group is not None and self._group.managed:
            await self._group.leave()
            self._group = None
        self._subscription.clear(self._cluster.metadata)
        self.on_partitions_removed(self._fetcher.assignment)
        self.wake_fetcher()

    def subscribed_topics(self) -> set[str]:
        """The topics the subscription covers now (a pattern's matches in current metadata)."""
        return self._subscription.matching(
            self._cluster.metadata, self.config.exclude_internal_topics
        )

    @property
    def pattern(self) -> re.Pattern[str] | None:
        """The subscription's regular expression, if it is one."""
        return self._subscription.pattern

    @property
    def cluster(self) -> Cluster:
        """The connections and metadata cache this consumer uses."""
        return self._cluster

    def assignment(self) -> set[TopicPartition]:
        """The partitions currently assigned."""
        return self._fetcher.assignment

    # -- positions --------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int, *, until: int | None = None) -> None:
        """Fetch ``partition`` from ``offset`` next.

        Args:
            until: no fetch asks for this offset or a later one, until the next
                seek: for a reader of a known range, which would otherwise leave
                a fetch past its end waiting ``fetch.max.wait.ms`` at the broker
                (holding back the connection's next requests). Records past it
                that come in a batch fetched before it are still returned.

        Raises:
            TypeError, ValueError: ``partition`` is not a TopicPartition, or
                ``offset`` (``until``) is not an offset >= 0.
        """
        tp = check_topic_partition("partition", partition)
        offset = check_offset("offset", offset)
        if until is not None:
            until = check_offset("until", until)
        self.core.seek(tp, offset, until)
        self.wake_fetcher()

    def unconsume(self, first: Mapping[TopicPartition, int], *, refetch: bool) -> None:
        """Records from ``first[tp]`` on were handed out but not processed (the
        blocking consumer held them back): commits stop before them, and with
        ``refetch`` they are fetched again."""
        for tp in self.core.rewind(first):
            if refetch:
                self.seek(tp, first[tp])

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Fetch from the log start (all assigned partitions when none given)."""
        self._reset(partitions, EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Fetch from the log end (all assigned partitions when none given)."""
        self._reset(partitions, LATEST)

    def _reset(self, partitions: tuple[TopicPartition, ...], strategy: int) -> None:
        tps = check_topic_partitions("partitions", partitions) or list(self._fetcher.assignment)
        self.core.request_resets(tps, strategy)
        self.wake_fetcher()

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record to be returned, waiting until it is known.

        Raises:
            KeyError: the partition is not assigned.
            ApiTimeoutError: the position was not known within ``default.api.timeout.ms``.
            TypeError, ValueError: ``partition`` is not a TopicPartition.
        """
        return await self._fetches.position(check_topic_partition("partition", partition))

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning and fetching records for these partitions.

        Raises:
            TypeError, ValueError: one of ``partitions`` is not a TopicPartition.
        """
        self._fetcher.pause(check_topic_partitions("partitions", partitions))
        self.wake_fetcher()  # a fetch held back for their buffered data may go now

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch and return records of these paused partitions again.

        Raises:
            TypeError, ValueError: one of ``partitions`` is not a TopicPartition.
        """
        self._fetcher.resume(check_topic_partitions("partitions", partitions))
        self.wake_fetcher()

    def paused(self) -> set[TopicPartition]:
        return self._fetcher.paused()

    def lag(self, partition: TopicPartition) -> int | None:
        """Records between the position and the last known high watermark (None if unknown)."""
        return self._fetcher.lag(check_topic_partition("partition", partition))

    def highwater(self, partition: TopicPartition) -> int:
        return self._fetcher.high_watermark(check_topic_partition("partition", partition))

    def statistics(self) -> ConsumerStatistics:
        """A snapshot of what the consumer has done so far (it never changes afterwards).

        Totals count from :func:`open_consumer`; ``partitions`` holds the assigned
        partitions; see :mod:`trafka.sdk.statistics` for each field.
        """
        group = self._group
        return self.core.statistics(
            group=None if group is None else group.statistics(),
            brokers=self._cluster.broker_statistics(),
            telemetry=self._telemetry.statistics(),
        )

    async def client_instance_id(self, timeout_ms: float = 0) -> uuid.UUID | None:
        """The id the cluster gave this client for its metrics (KIP-714), as Java's
        ``clientInstanceId(Duration)``: waits up to ``timeout_ms`` for the first
        subscription when there is none yet; None when none arrived in time (or
        the cluster takes no client metrics). Raises UsageError when
        ``enable.metrics.push`` is false, ValueError for a negative ``timeout_ms``."""
        return await self._telemetry.instance_id(timeout_ms)

    def _telemetry_samples(
        self, averages: IntervalAverages, stats: ConsumerStatistics, peaks: Peaks, now: float
    ) -> list[MetricSample]:
        member = stats.group.member_id if stats.group is not None else ""
        label_group_member(self._telemetry.resource, member)
        group, idle = self._group, self._fetches.poll_idle
        rebalance = group.machine.rebalance_latency if group is not None else None
        assigned = len(self._fetcher.assignment)
        return consumer_samples(averages, stats, peaks, idle, assigned, now, rebalance)

    # -- offset lookups (without touching positions) ----------------------------------------

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition numbers, waiting for metadata up to ``default.api.timeout.ms``.

        Raises:
            KafkaError: the topic does not exist (UNKNOWN_TOPIC_OR_PARTITION).
        """
        return await self._lookups.partitions_for(topic)

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The first offset of each partition (0 for an empty one).

        Raises:
            KafkaError: the topic or partition does not exist, or another final error.
            ApiTimeoutError: no answer within ``default.api.timeout.ms``.
        """
        return await self._lookups.beginning_offsets(partitions)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset after the last record of each partition (the LSO under read_committed)."""
        return await self._lookups.end_offsets(partitions)

    async def offset_bounds(
        self, earliest: Iterable[TopicPartition], latest: Iterable[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """:meth:`beginning_offsets` of ``earliest`` and :meth:`end_offsets` of
        ``latest``, asked of each leader in one round trip: two ListOffsets
        (a request names a partition once) written back to back, the first
        offsets' first. A leader answers a connection's requests in order, so
        a partition in both never has its first offset looked up after its end.
        """
        return await self._lookups.offset_bounds(earliest, latest)

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: float | None = None
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """For each partition, the first ``(offset, timestamp)`` at or after the
        timestamp, or None (ApiTimeoutError after ``timeout_ms``, if given)."""
        return await self._lookups.offsets_for_times(timestamps, timeout_ms)

    async def committed(
        self, partition: TopicPartition, timeout_ms: float | None = None
    ) -> int | None:
        """The group's committed offset for ``partition`` (None if none). Raises
        UsageError without a group.id, ApiTimeoutError with no answer within
        ``default.api.timeout.ms`` (or ``timeout_ms``; a coordinator loading or
        moving is waited out)."""
        return await self._lookups.committed(partition, timeout_ms)

    # -- commits ----------------------------------------------------------------------------

    def consumed_offsets(self) -> dict[TopicPartition, int]:
        """Positions after the records the caller has processed (what commit() commits)."""
        return self.core.consumed_offsets()

    def auto_commit_offsets(self) -> dict[TopicPartition, int]:
        """Consumed positions as of the last ``getmany`` / ``__anext__`` call (at-least-once)."""
        return self.core.auto_commit_offsets()

    async def commit(
        self, offsets: Mapping[TopicPartition, int] | None = None, *, message: Any = None
    ) -> None:
        """Commit offsets (default: the consumed positions) and wait for the result.

        Args:
            offsets: the next offset to read, per partition.
            message: instead, a consumed record: commits the offset after it in its
                partition (confluent-kafka's ``commit(message=msg)``).

        Raises:
            TypeError, ValueError: ``offsets`` is not a mapping of
                TopicPartition to offsets >= 0, or ``message`` is not a record.
            UsageError: no group.id, or both ``offsets`` and ``message``.
            KafkaError: the commit failed (e.g. REBALANCE_IN_PROGRESS, fenced member).
        """
        chosen = check_commit(offsets, message)
        group = self._require_group()
        await group.commit(self.core.commit_offsets(chosen, message))

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, int] | None = None,
        callback: Any = None,
        *,
        message: Any = None,
    ) -> Any:
        """Start a commit in the background; commits go out in call order.

        Args:
            offsets: default the consumed positions.
            callback: called as ``callback(offsets, exception_or_None)`` when done.
            message: instead of ``offsets``, a consumed record (see :meth:`commit`).

        Returns:
            An awaitable resolving to None (or raising the commit error).

        Raises:
            TypeError, ValueError: as :meth:`commit`, or ``callback`` is not callable.
            UsageError: as :meth:`commit`.
        """
        chosen = check_commit(offsets, message)
        check_callable("callback", callback)
        group = self._require_group()
        return group.commit_async(self.core.commit_offsets(chosen, message), callback)

    def store_offsets(
        self, offsets: Mapping[TopicPartition, int] | None = None, *, message: Any = None
    ) -> None:
        """Store what the next commit without offsets commits (librdkafka's
        ``store_offsets``; needs ``enable.auto.offset.store=false``): auto-commit,
        ``commit()``, the commit before a revocation and at close commit the
        stored offsets, of the partitions still assigned.

        Args:
            offsets: the next offset to read, per partition.
            message: instead, a consumed record: stores the offset after it.

        Raises:
            TypeError, ValueError: as :meth:`commit`.
            UsageError: neither or both of ``offsets`` and ``message``; the
                offset store is automatic; a partition is not assigned.
        """
        chosen = check_commit(offsets, message)
        if (chosen is None) == (message is None):
            raise UsageError("store_offsets takes offsets or a message (one of them)")
        self.core.store_offsets(self.core.commit_offsets(chosen, message))

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group membership to pass to ``Producer.send_offsets_to_transaction``.

        With group management it carries the current generation and member id,
        so the coordinator refuses the offsets once a rebalance has moved the
        partitions on (KIP-447); with ``assign()`` it carries no generation.

        Raises:
            UsageError: no group.id.
        """
        if self.config.group_id is None:
            raise UsageError("group_metadata() needs a group.id")
        return group_metadata(self.config, self._group)

    def _require_group(self) -> Any:
        if self.config.group_id is None:
            raise UsageError("commits need a group.id")
        if self._group is None:
            self._group = GroupDriver(self, None, managed=False)
            self._tg.start_soon(self._group.run, name="trafka consumer commits")
        return self._group

    # -- consuming --------------------------------------------------------------------------

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord[K, V]]]:
        """Return fetched records, waiting up to ``timeout_ms`` for some.

        Args:
            partitions: restrict to these (default: all assigned).
            timeout_ms: how long to wait when nothing is buffered.
            max_records: default ``max.poll.records``.

        Returns:
            Records per partition, in offset order (empty on timeout); with
            ``enable.partition.eof``, a partition's list ends with a
            :class:`~trafka.sdk.consumer_types.PartitionEOF` when it reached the end.

        Raises:
            TypeError, ValueError: ``timeout_ms`` is not a number >= 0,
                ``max_records`` not an int >= 1, or one of ``partitions`` not a
                TopicPartition.
            ClientClosedError: the consumer is closed.
            KafkaError: a fetch error (e.g. OFFSET_OUT_OF_RANGE with auto.offset.reset=none).
        """
        wanted, limit = check_poll(partitions, timeout_ms, max_records)
        self._check_open()
        self.core.poll_started()
        limit = limit or self.config.max_poll_records
        deadline: float | None = None  # from the first time nothing is buffered
        with polling(self._group):
            while True:
                # What is at hand, then the fetches that taking it made possible.
                out = self.core.poll(limit, wanted)
                self._fetches.send_wanted()
                if out:
                    return out
                if await self.core.schema_loads.run():
                    continue
                now = anyio.current_time()
                if deadline is None:
                    deadline = now + timeout_ms / 1000
                left = deadline - now
                if left <= 0:
                    if self._fetcher.held_back:
                        # Nothing at hand: what was held back is wanted now.
                        self._fetches.send_fetches(hold_back=False)
                    return {}
                await self._fetches.wait_data(left)
                self._check_open()

    def poll_from_thread(
        self, now: float
    ) -> tuple[dict[TopicPartition, list[ConsumerRecord[K, V]]], bool]:
        """``getmany(timeout_ms=0)`` for a blocking consumer's own thread while
        every task of the loop is at an ``await`` (see :mod:`.blocking`): touches
        no task, event or socket and takes ``now`` (the loop's clock) from that
        thread. Returns the records at hand (maybe none) and whether the group's
        task must be woken; :meth:`after_poll_from_thread` must then run on the
        loop (also when ``core.fetcher.fetch_wanted``)."""
        self._check_open()
        core = self.core
        core.poll_started()
        group = self._group
        resumed = group is not None and group.machine.poll_started(now)
        try:
            out = core.poll(self.config.max_poll_records, None)
        finally:
            if group is not None:
                group.machine.poll_ended(now)
        return out, resumed

    def after_poll_from_thread(self, wake_group: bool) -> None:
        """On the loop, after :meth:`poll_from_thread`: what it left to the loop."""
        if wake_group and self._group is not None:
            self._group.wake()
        self._fetches.send_wanted()

    async def getone(self) -> ConsumerRecord[K, V]:
        """The next record (or, with ``enable.partition.eof``, end-of-partition
        event), waiting as long as needed."""
        self._check_open()
        core = self.core
        core.poll_started()
        r = core.next_record()
        if r is not None:
            return r
        with polling(self._group):
            while True:
                r = core.next_record()
                if r is not None:
                    return r
                await self._fill()

    async def _fill(self) -> None:
        """Wait until :meth:`ConsumerCore.fill <trafka.sdk.consumer_core.ConsumerCore.fill>`
        takes something."""
        while True:
            self._check_open()
            if self._fetcher.has_data():
                got = self.core.fill(self.config.max_poll_records)
                self._fetches.send_wanted()
                if got:
                    return
                if await self.core.schema_loads.run():
                    continue
            await self._fetches.wait_data(math.inf)

    def __aiter__(self) -> Consumer[K, V]:
        return self

    async def __anext__(self) -> ConsumerRecord[K, V]:
        if self._closed:
            raise StopAsyncIteration
        return await self.getone()

    # -- internals --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed")
        if self._group is not None and self._group.fatal is not None:
            raise self._group.fatal
        refused = self._cluster.auth_error
        if refused is not None:
            # As Java's poll: raised while no connect succeeds; the client keeps trying.
            raise refused.again()

    def _wake_if_refused(self) -> None:
        if self._cluster.auth_error is not None:
            self.data_arrived()

    def on_partitions_removed(self, tps: set[TopicPartition]) -> None:
        """Called by the group driver when partitions are revoked or lost."""
        self.core.partitions_going(tps)
        self.core.partitions_removed(tps)

    def on_partitions_added(self, tps: set[TopicPartition]) -> None:
        """Called by the group driver when partitions are assigned: fetched from now on."""
        self._fetcher.add(tps)
        self.wake_fetcher()

    def wake_fetcher(self) -> None:
        """Have the fetch task look at the partitions again (on the loop)."""
        self._fetches.wake()

    def data_arrived(self) -> None:
        """Wake the polls waiting for records (records, an error, or the end)."""
        self._fetches.data_arrived()

    async def _close(self, *, graceful: bool) -> None:
        if self._closed:
            return
        if self._group is not None:
            await self._group.close(graceful=graceful)
        if graceful:
            with anyio.CancelScope(shield=True):
                await self._fetches.close_sessions(self.config.request_timeout_ms / 1000)
            await self._telemetry.close()  # Java's initiateClose: the terminating push
        self._closed = self._fetches.stopped = True
        self.data_arrived()

    async def __aenter__(self) -> Consumer[K, V]:
        """Start the consumer's tasks (:func:`open_consumer` does, with its task group)."""
        self._cluster.start()
        self._tg.start_soon(self._fetches.run, name="trafka consumer fetcher")
        self._telemetry.start(self._tg)
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Commit (with auto-commit), leave the group and close; after an exception
        (or cancellation), leave without the final commit, bounded by
        ``request.timeout.ms``. Then its tasks are cancelled and connections closed."""
        try:
            if exc is not None:
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(self.config.request_timeout_ms / 1000),
                ):
                    await self._close(graceful=False)
            else:
                await self._close(graceful=True)
        finally:
            self._closed = self._fetches.stopped = True
            if self.core.interceptors is not None:
                self.core.interceptors.close()
            self._tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await self._cluster.aclose()


@overload
def open_consumer(
    *topics: str,
    config: ConsumerConfig | Mapping[str, Any] | None = None,
    key_deserializer: Callable[[bytes | None], K],
    value_deserializer: Callable[[bytes | None], V],
    **kwargs: Any,
) -> AbstractAsyncContextManager[Consumer[K, V]]: ...


@overload
def open_consumer(
    *topics: str,
    config: ConsumerConfig | Mapping[str, Any] | None = None,
    value_deserializer: Callable[[bytes | None], V],
    key_deserializer: str = "bytes",
    **kwargs: Any,
) -> AbstractAsyncContextManager[Consumer[Any, V]]: ...


@overload
def open_consumer(
    *topics: str,
    config: ConsumerConfig | Mapping[str, Any] | None = None,
    key_deserializer: Callable[[bytes | None], K],
    value_deserializer: str = "bytes",
    **kwargs: Any,
) -> AbstractAsyncContextManager[Consumer[K, Any]]: ...


@overload
def open_consumer(
    *topics: str,
    config: ConsumerConfig | Mapping[str, Any] | None = None,
    key_deserializer: str = "bytes",
    value_deserializer: str = "bytes",
    **kwargs: Any,
) -> AbstractAsyncContextManager[Consumer[Any, Any]]: ...


@asynccontextmanager
async def open_consumer(
    *topics: str, config: ConsumerConfig | Mapping[str, Any] | None = None, **kwargs: Any
) -> AsyncIterator[Consumer[Any, Any]]:
    """Open a consumer; leaving the block commits (with auto-commit), leaves the group and closes.

    Args:
        *topics: topics to subscribe to (needs ``group_id``); or call
            :meth:`Consumer.assign` / :meth:`Consumer.subscribe` inside.
        config: a :class:`~trafka.sdk.config.ConsumerConfig` or a mapping of Kafka-style keys.
        **kwargs: settings in Python spelling; they override ``config``.

    Yields:
        The :class:`Consumer`.

    Raises:
        ConfigError: invalid configuration.
    """
    from .config.consumer import ConsumerConfig  # loaded with the first consumer

    cfg = make_config(ConsumerConfig, config, kwargs)
    async with owned_task_group() as tg, Consumer[Any, Any](cfg, tg) as consumer:
        await start_client_hooks(tg, consumer, "consumer", cfg)
        if topics:
            consumer.subscribe(topics)
        yield consumer
