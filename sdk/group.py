"""The consumer group driver: I/O around :class:`~trafka.sdk.membership.Membership`.

Rules:

* Every protocol decision (when to find the coordinator, join, sync,
  heartbeat, rejoin, leave, retry a commit, and how each error code is
  handled) is the state machine's. This module only carries out its outputs:
  each request in its own task over the coordinator's dedicated connection
  (id ``transport.COORDINATOR_BASE - node_id``, so that a long JoinGroup or a fetch
  long-poll never delays heartbeats and commits), each answer fed back with
  the clock, and a sleep until the machine's next deadline or an input.
* Rebalance callbacks run one at a time, in the order the machine emits them,
  in their own task, so heartbeats and commit responses go on while a
  listener or a commit before revocation is pending: a revocation first
  commits consumed positions (with auto-commit), then calls
  ``on_partitions_revoked``, then drops the partitions from the fetcher; from
  the revocation's start no poll hands out their records (they are paused).
* Closing: commit (auto-commit), revoke (listener), and LeaveGroup unless the
  member is static (its partitions stay reserved for ``session.timeout.ms``).

The request builders and :func:`classify` live in :mod:`.group_protocol` and
are re-exported here.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.abc

from trafka.codec import ApiKey, KafkaError, TrafkaError

from ._util import loop_clock, sleep_until
from .calls import Calls, again_if_transient
from .consumer_membership import ConsumerMembership
from .consumer_types import TopicPartition
from .coordinator_lookup import coordinator_problem
from .group_protocol import (
    Action,
    CommitFailedError,
    classify,
    find_coordinator_request,
    heartbeat_request,
    join_group_request,
    leave_group_request,
    offset_commit_request,
    offset_fetch_request,
    read_find_coordinator,
    read_offset_commit,
    read_offset_fetch,
    sync_group_request,
)
from .membership import (
    Assign,
    AutoCommitDue,
    CommitDone,
    Fatal,
    GroupRequest,
    Lose,
    Membership,
    MembershipConfig,
    NeedMetadata,
    Output,
    Revoke,
)
from .transaction_state import ConsumerGroupMetadata
from .transport import BrokerConnection, Cluster

if TYPE_CHECKING:
    import re

    from .config.consumer import ConsumerConfig
    from .consumer_core import ConsumerCore
    from .statistics import GroupStatistics

__all__ = [
    "Action",
    "CommitFailedError",
    "CommitFuture",
    "GroupDriver",
    "GroupOwner",
    "classify",
    "fetch_committed",
    "find_coordinator",
    "find_coordinator_request",
    "heartbeat_request",
    "join_group_request",
    "leave_group_request",
    "offset_commit_request",
    "offset_fetch_request",
    "read_find_coordinator",
    "read_offset_commit",
    "read_offset_fetch",
    "sync_group_request",
]

log = logging.getLogger("trafka.sdk.group")


# -- helpers used without a member ---------------------------------------------------------


async def find_coordinator(cluster: Cluster, key: str, *, key_type: int = 0) -> BrokerConnection:
    """The dedicated connection to the coordinator of a group (``key_type`` 0)
    or of a transactional id (1).

    Raises:
        KafkaError: the coordinator could not be found (retriable codes included).
    """
    conn = await cluster.any_connection()
    version = conn.version_for(ApiKey.FIND_COORDINATOR)
    resp = await conn.request(
        ApiKey.FIND_COORDINATOR, find_coordinator_request(version, key, key_type)
    )
    code, node, host, port = read_find_coordinator(version, resp)
    if code:
        what = "transactional id" if key_type else "group"
        raise KafkaError(code, f"FindCoordinator for {what} {key!r}")
    return await cluster.coordinator_connection((node, host, port))


async def fetch_committed(
    calls: Calls, config: ConsumerConfig, tps: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The group's committed offsets (partitions without one are left out).

    A coordinator that moved or is loading, and an offset a transaction still
    holds (UNSTABLE_OFFSET_COMMIT), are waited out, within ``calls``' default
    bound (``default.api.timeout.ms``). The fetch always asks for stable offsets
    (``require_stable``), whatever the isolation level, as Java's consumer does
    (KIP-447): Kafka answers EndTxn before the commit markers reach the offsets
    partition, so without it a committed() just after commit_transaction() could
    read the offset the transaction replaced.

    Raises:
        KafkaError: a final error (e.g. GROUP_AUTHORIZATION_FAILED).
        ApiTimeoutError: no answer within ``default.api.timeout.ms``.
    """
    group_id = config.group_id
    assert group_id is not None
    tps = list(tps)

    async def attempt(deadline: float) -> dict[TopicPartition, int]:
        with again_if_transient():
            conn = await find_coordinator(calls.cluster, group_id)
            version = conn.version_for(ApiKey.OFFSET_FETCH)
            body = offset_fetch_request(
                version,
                group_id,
                tps,
                require_stable=True,
            )
            resp = await conn.request(ApiKey.OFFSET_FETCH, body)
            code, got = read_offset_fetch(version, resp)
            if code:
                raise KafkaError(code, f"OffsetFetch for group {group_id!r}")
        return {tp: off for tp, off in got.items() if off >= 0}

    return await calls.run("committed offsets", None, attempt)


class CommitFuture:
    """The result of :meth:`Consumer.commit_async`: await it (or ignore it)."""

    __slots__ = ("_error", "_event", "offsets")

    def __init__(self, offsets: dict[TopicPartition, int]) -> None:
        self.offsets = offsets
        self._event = anyio.Event()
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._event.is_set()

    def exception(self) -> BaseException | None:
        return self._error

    def finish(self, error: BaseException | None) -> None:
        """The commit is done (``error`` None) or failed: for the group driver."""
        self._error = error
        self._event.set()

    def __await__(self) -> Any:
        return self._wait().__await__()

    async def _wait(self) -> None:
        await self._event.wait()
        if self._error is not None:
            raise self._error


def membership_config(config: ConsumerConfig, *, managed: bool) -> MembershipConfig:
    """The state machine's settings from a consumer's configuration."""
    assert config.group_id is not None
    return MembershipConfig(
        group_id=config.group_id,
        instance_id=config.group_instance_id,
        session_timeout=config.session_timeout_ms / 1000,
        heartbeat_interval=config.heartbeat_interval_ms / 1000,
        max_poll_interval=config.max_poll_interval_ms / 1000,
        request_timeout=config.request_timeout_ms / 1000,
        retry_backoff=config.retry_backoff_ms / 1000,
        retry_backoff_max=config.retry_backoff_max_ms / 1000,
        auto_commit=config.auto_commit,
        auto_commit_interval=config.auto_commit_interval_ms / 1000,
        commit_timeout=config.default_api_timeout_ms / 1000,
        assignors=config.partition_assignment_strategy,
        rack=config.client_rack or None,
        managed=managed,
    )


def group_metadata(config: ConsumerConfig, group: GroupDriver | None) -> ConsumerGroupMetadata:
    """``Consumer.group_metadata()`` of a consumer with a ``group.id``: with a
    managed ``group``, its current generation and member id (KIP-447), else none."""
    assert config.group_id is not None
    if group is None or not group.managed:
        return ConsumerGroupMetadata(config.group_id, group_instance_id=config.group_instance_id)
    machine = group.machine
    return ConsumerGroupMetadata(
        config.group_id, machine.generation, machine.member_id, config.group_instance_id
    )


@contextlib.contextmanager
def polling(group: GroupDriver | None) -> Iterator[None]:
    """A poll of the consumer whose ``group`` this is (None: no group), for
    ``max.poll.interval.ms``: started on entry, ended on exit."""
    if group is None:
        yield
        return
    group.poll_started()
    try:
        yield
    finally:
        group.poll_ended()


class GroupOwner(Protocol):
    """What the group driver uses of the consumer that owns it
    (:class:`~trafka.sdk.consumer.Consumer`)."""

    @property
    def config(self) -> ConsumerConfig: ...
    @property
    def core(self) -> ConsumerCore[Any, Any]: ...
    @property
    def cluster(self) -> Cluster: ...
    @property
    def pattern(self) -> re.Pattern[str] | None: ...
    def subscribed_topics(self) -> set[str]: ...
    def consumed_offsets(self) -> dict[TopicPartition, int]: ...
    def auto_commit_offsets(self) -> dict[TopicPartition, int]: ...
    def data_arrived(self) -> None: ...
    def on_partitions_added(self, tps: set[TopicPartition]) -> None: ...
    def on_partitions_removed(self, tps: set[TopicPartition]) -> None: ...


class GroupDriver:
    """Runs a consumer's group membership and commits (started by the consumer).

    Args:
        consumer: the owning consumer (what it offers: :class:`GroupOwner`).
        listener: rebalance listener (async ``on_partitions_revoked``,
            ``on_partitions_assigned``, optional ``on_partitions_lost``), or None.
        managed: False for a consumer that only commits (assign() with a group.id).
    """

    def __init__(self, consumer: GroupOwner, listener: Any, *, managed: bool = True) -> None:
        self.consumer = consumer
        self.config = consumer.config
        self.cluster = consumer.cluster
        self.listener = listener
        self.managed = managed
        settings = membership_config(self.config, managed=managed)
        self.machine: Membership
        if self.config.group_protocol == "consumer" and managed:
            self.machine = ConsumerMembership(
                settings,
                anyio.current_time(),
                remote_assignor=self.config.group_remote_assignor,
            )
        else:
            self.machine = Membership(settings, anyio.current_time())
        self._wake = anyio.Event()
        self._answered = anyio.Event()
        self._callbacks: deque[Revoke | Assign | Lose] = deque()
        self._callback_wake = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self.cluster.on_change.append(self.wake)
        self._commits = 0
        self._commit_failures = 0
        # The loop's clock, callable from anywhere: statistics() may be read off the loop.
        self._clock = loop_clock()

    # -- state, for the consumer and tests ---------------------------------------------------

    @property
    def fatal(self) -> BaseException | None:
        return self.machine.fatal

    @property
    def owned(self) -> frozenset[TopicPartition]:
        return self.machine.owned

    @property
    def rebalances(self) -> int:
        return self.machine.rebalances

    def statistics(self) -> GroupStatistics:
        from .statistics import GroupStatistics, coordinator_statistics

        machine = self.machine
        latency = machine.rebalance_latency
        return GroupStatistics(
            group_id=self.config.group_id or "",
            member_id=machine.member_id,
            protocol="consumer" if isinstance(machine, ConsumerMembership) else "classic",
            generation=machine.generation,
            rebalances=machine.rebalances,
            commits=self._commits,
            commit_failures=self._commit_failures,
            rebalance_latency_avg_ms=latency.total / latency.count * 1000 if latency.count else 0.0,
            rebalance_latency_max_ms=latency.max * 1000,
            rebalance_latency_total_ms=latency.total * 1000,
            coordinator=coordinator_statistics(
                machine.metrics,
                latency.window,
                latency.total,
                latency.ended,
                len(machine.owned),
                self._clock(),
            ),
            coordinator_problem=coordinator_problem(machine.lookup, machine.coordinator),
        )

    # -- inputs from the consumer -----------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def subscription_changed(self) -> None:
        self.wake()

    def poll_started(self) -> None:
        if self.machine.poll_started(anyio.current_time()):
            self.wake()

    def poll_ended(self) -> None:
        # A later poll deadline needs no wake-up: the loop re-reads it when it wakes.
        self.machine.poll_ended(anyio.current_time())

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        await self.commit_async(offsets, None)

    def commit_async(self, offsets: dict[TopicPartition, int], callback: Any) -> CommitFuture:
        future = CommitFuture(offsets)
        self.machine.commit(offsets, anyio.current_time(), (future, callback))
        self.wake()
        return future

    async def close(self, *, graceful: bool) -> None:
        machine = self.machine
        if graceful and self.config.auto_commit:
            try:
                await self.commit(self.consumer.consumed_offsets())
            except TrafkaError as exc:
                log.warning("final commit failed: %s", exc)
        if self.managed and machine.owned:
            await self._call_listener("on_partitions_revoked", set(machine.owned))
        with anyio.move_on_after(self.config.request_timeout_ms / 1000):
            while machine.heartbeat_in_flight:
                await self._answered.wait()
        request = machine.leave(anyio.current_time()) if self.managed else None
        self.wake()
        if request is not None:
            with anyio.move_on_after(self.config.request_timeout_ms / 1000):
                await self._send(request)

    # -- tasks ------------------------------------------------------------------------------

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._callback_worker)
            await self._loop()

    async def leave(self) -> None:
        """Close (as the consumer closes) and end :meth:`run`: ``unsubscribe()``."""
        await self.close(graceful=True)
        self.cluster.on_change.remove(self.wake)
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    async def _loop(self) -> None:
        machine = self.machine
        while True:
            self._wake = anyio.Event()
            if self.managed:
                self._sync_subscription()
            for output in machine.outputs(anyio.current_time()):
                self._dispatch(output)
            await sleep_until(machine.next_deadline(), self._wake)

    def _sync_subscription(self) -> None:
        consumer = self.consumer
        md = self.cluster.metadata
        if consumer.pattern is not None and md.all_topics_version == 0:
            return  # a pattern means nothing before metadata that lists every topic
        topics = consumer.subscribed_topics()
        md.add_topics(topics)
        machine = self.machine
        if isinstance(machine, ConsumerMembership):
            ids = {t: i for t in topics if (i := md.topic_id(t)) is not None}
            machine.set_topic_ids(ids)
        machine.set_subscription(topics, {t: md.partition_count(t) or 0 for t in topics})

    def _dispatch(self, output: Output) -> None:
        assert self._tg is not None
        if isinstance(output, GroupRequest):
            self._tg.start_soon(self._send, output)
        elif isinstance(output, Revoke | Assign | Lose):
            self._callbacks.append(output)
            self._callback_wake.set()
        elif isinstance(output, NeedMetadata):
            self._tg.start_soon(self._leader_metadata, output.topics)
        elif isinstance(output, AutoCommitDue):
            offsets = self.consumer.auto_commit_offsets()
            if offsets:
                self.machine.commit(offsets, anyio.current_time(), None)
                self.wake()
        elif isinstance(output, CommitDone):
            if output.error is None:
                self._commits += 1
            else:
                self._commit_failures += 1
            if output.cookie is not None:
                future, callback = output.cookie
                future.finish(output.error)
                if callback is not None:
                    try:
                        callback(output.offsets, output.error)
                    except Exception:
                        log.exception("commit callback failed")
            elif output.error is not None:
                log.warning("auto-commit failed: %s", output.error)
            self._report_commit(output)
        elif isinstance(output, Fatal):
            log.error("group %s: %s", self.config.group_id, output.error)
            self.consumer.data_arrived()

    def _report_commit(self, done: CommitDone) -> None:
        """librdkafka's ``on_commit``: every commit of offsets, whoever asked for
        it; and the interceptors' ``on_commit`` for each that succeeded."""
        if not done.offsets:
            return
        interceptors = self.consumer.core.interceptors
        if interceptors is not None and done.error is None:
            interceptors.on_commit(dict(done.offsets))  # Java's: successful commits only
        report = self.config.on_commit
        if report is None:
            return
        try:
            report(done.error, dict(done.offsets))
        except Exception:
            log.exception("on_commit raised")

    async def _send(self, request: GroupRequest) -> None:
        machine = self.machine
        try:
            conn = await self.cluster.coordinator_connection(request.coordinator)
            version = conn.version_for(request.api_key)
            machine.sending(request, anyio.current_time())
            body = await conn.request(
                request.api_key, request.build(version), timeout=request.timeout
            )
        except TrafkaError as exc:
            log.debug("group %s: %s failed: %s", self.config.group_id, request.kind.name, exc)
            if request.coordinator is not None:
                self.cluster.metadata.request_update()
            machine.on_failure(request, exc, anyio.current_time())
        else:
            machine.on_response(request, version, body, anyio.current_time())
        self.wake()
        answered, self._answered = self._answered, anyio.Event()
        answered.set()

    async def _leader_metadata(self, topics: frozenset[str]) -> None:
        md = self.cluster.metadata
        if topics - set(md.topics):
            md.add_topics(topics)
            try:
                await self.cluster.refresh_metadata(topics)
            except TrafkaError as exc:
                log.debug("metadata for the assignment failed: %s", exc)
        counts = {t: md.partition_count(t) or 0 for t in topics}
        self.machine.assignment_metadata(counts, anyio.current_time())
        self.wake()

    # -- rebalance callbacks ----------------------------------------------------------------

    async def _callback_worker(self) -> None:
        consumer = self.consumer
        while True:
            while not self._callbacks:
                self._callback_wake = anyio.Event()
                await self._callback_wake.wait()
            event = self._callbacks.popleft()
            tps = set(event.partitions)
            if isinstance(event, Revoke):
                await self._revoke(tps)
                self.machine.revoke_done(anyio.current_time())
                self.wake()
            elif isinstance(event, Assign):
                consumer.on_partitions_added(tps)
                await self._call_listener("on_partitions_assigned", tps)
            else:
                consumer.on_partitions_removed(tps)
                name = (
                    "on_partitions_lost"
                    if hasattr(self.listener, "on_partitions_lost")
                    else "on_partitions_revoked"
                )
                await self._call_listener(name, tps)

    async def _revoke(self, tps: set[TopicPartition]) -> None:
        # No poll hands out their records from here on (a task polling while the
        # listener runs, or a blocking consumer's thread): what the listener
        # commits covers every record handed out, as with Java's single thread.
        fetcher = self.consumer.core.fetcher
        fetcher.pause(tps & fetcher.assignment)
        self.consumer.core.partitions_going(tps)
        if self.config.auto_commit:
            offsets = {tp: off for tp, off in self.consumer.consumed_offsets().items() if tp in tps}
            if offsets:
                try:
                    await self.commit(offsets)
                except TrafkaError as exc:
                    log.warning("commit before revocation failed: %s", exc)
        try:
            await self._call_listener("on_partitions_revoked", tps)
        finally:
            self.consumer.on_partitions_removed(tps)

    async def _call_listener(self, name: str, tps: set[TopicPartition]) -> None:
        fn = getattr(self.listener, name, None) if self.listener is not None else None
        if fn is None:
            return
        try:
            await fn(set(tps))
        except Exception:
            log.exception("rebalance listener %s failed", name)
