"""The consumers' statistics snapshots: a consumer's (its partitions, its fetch
sessions, its group and Java's coordinator metrics) and a share consumer's
(KIP-932); with how the coordinator metrics are read from the membership's
counters.

The rules of the snapshots are :mod:`trafka.sdk.statistics`'s; the counting is
:mod:`.counters`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .counters import CoordinatorCounters, Windowed, WindowView

if TYPE_CHECKING:
    from .brokers import BrokerStatistics, TelemetryStatistics

__all__ = [
    "ConsumerStatistics",
    "CoordinatorStatistics",
    "FetchSessionStatistics",
    "GroupStatistics",
    "PartitionStatistics",
    "ShareConsumerStatistics",
    "coordinator_statistics",
]


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionStatistics:
    """One assigned partition of a consumer.

    Attributes:
        position: the offset of the next record to hand out (None before it is known).
        high_watermark: from the last fetch (-1 before one).
        lag: ``high_watermark - position`` (with ``read_committed``: from the last
            stable offset); None while either is unknown.
        paused: by :meth:`Consumer.pause`.
        records_consumed: handed to the application.
        bytes_fetched: record bytes received for the partition.
    """

    position: int | None
    high_watermark: int
    lag: int | None
    paused: bool
    records_consumed: int
    bytes_fetched: int


@dataclasses.dataclass(frozen=True, slots=True)
class CoordinatorStatistics:
    """A consumer's group coordination, as Java's ``consumer-coordinator-metrics``
    (the attribute names are Java's with ``_`` for ``-``). Rates, averages and
    maxima are over the last 30 to 60 s (:class:`~trafka.sdk.statistics.counters.Windowed`); NaN when nothing
    happened in that window. Times are in ms.

    Attributes:
        commit_latency_avg, commit_latency_max, commit_rate, commit_total:
            OffsetCommit requests answered (any answer), and their round trip.
        join_time_avg, join_time_max, join_rate, join_total: JoinGroup
            requests answered without an error (classic groups).
        sync_time_avg, sync_time_max, sync_rate, sync_total: the same for SyncGroup.
        heartbeat_rate, heartbeat_total, heartbeat_response_time_max: heartbeat
            answers (Heartbeat, or ConsumerGroupHeartbeat with
            ``group.protocol=consumer``).
        last_heartbeat_seconds_ago: whole seconds since the last heartbeat was
            sent (-1 before the first; Java counts from its epoch then).
        rebalance_latency_avg, rebalance_latency_max: over the window;
            rebalance_latency_total: of all rebalances (see
            :class:`GroupStatistics`).
        rebalance_total, rebalance_rate_per_hour: rebalances completed.
        failed_rebalance_total, failed_rebalance_rate_per_hour: JoinGroup or
            SyncGroup steps of a rebalance that failed (classic groups).
        last_rebalance_seconds_ago: whole seconds since the last rebalance
            ended (-1 before the first, as Java).
        assigned_partitions: the partitions the group assigns this member now.
    """

    commit_latency_avg: float
    commit_latency_max: float
    commit_rate: float
    commit_total: int
    join_time_avg: float
    join_time_max: float
    join_rate: float
    join_total: int
    sync_time_avg: float
    sync_time_max: float
    sync_rate: float
    sync_total: int
    heartbeat_rate: float
    heartbeat_total: int
    heartbeat_response_time_max: float
    last_heartbeat_seconds_ago: int
    rebalance_latency_avg: float
    rebalance_latency_max: float
    rebalance_latency_total: float
    rebalance_total: int
    rebalance_rate_per_hour: float
    failed_rebalance_total: int
    failed_rebalance_rate_per_hour: float
    last_rebalance_seconds_ago: int
    assigned_partitions: int


def coordinator_statistics(
    counters: CoordinatorCounters,
    rebalances: Windowed,
    rebalance_total_s: float,
    last_rebalance: float | None,
    assigned: int,
    now: float,
) -> CoordinatorStatistics:
    """The coordinator metrics at ``now`` (``rebalances``: each completed
    rebalance's latency in seconds; ``last_rebalance``: when the last one ended)."""
    commit = WindowView((counters.commit,), now)
    join = WindowView((counters.join,), now)
    sync = WindowView((counters.sync,), now)
    heartbeat = WindowView((counters.heartbeat,), now)
    rebalance = WindowView((rebalances,), now)
    failed = WindowView((counters.failed_rebalances,), now)
    sent = counters.last_heartbeat_sent
    return CoordinatorStatistics(
        commit_latency_avg=commit.avg() * 1000,
        commit_latency_max=commit.max * 1000,
        commit_rate=commit.rate(),
        commit_total=counters.commit.count,
        join_time_avg=join.avg() * 1000,
        join_time_max=join.max * 1000,
        join_rate=join.rate(),
        join_total=counters.join.count,
        sync_time_avg=sync.avg() * 1000,
        sync_time_max=sync.max * 1000,
        sync_rate=sync.rate(),
        sync_total=counters.sync.count,
        heartbeat_rate=heartbeat.rate(),
        heartbeat_total=counters.heartbeat.count,
        heartbeat_response_time_max=heartbeat.max * 1000,
        last_heartbeat_seconds_ago=-1 if sent is None else int(now - sent),
        rebalance_latency_avg=rebalance.avg() * 1000,
        rebalance_latency_max=rebalance.max * 1000,
        rebalance_latency_total=rebalance_total_s * 1000,
        rebalance_total=rebalances.count,
        rebalance_rate_per_hour=rebalance.rate(3600.0),
        failed_rebalance_total=counters.failed_rebalances.count,
        failed_rebalance_rate_per_hour=failed.rate(3600.0),
        last_rebalance_seconds_ago=-1 if last_rebalance is None else int(now - last_rebalance),
        assigned_partitions=assigned,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class GroupStatistics:
    """A consumer's group membership.

    Attributes:
        group_id, member_id: ``member_id`` is empty until the coordinator gives one.
        protocol: ``"classic"`` or ``"consumer"`` (KIP-848).
        generation: the classic generation, or the KIP-848 member epoch (-1 when
            not a member).
        rebalances: assignments received since the consumer opened.
        commits, commit_failures: offset commits done, and those that failed
            (auto-commits included).
        rebalance_latency_avg_ms, rebalance_latency_max_ms,
        rebalance_latency_total_ms: how long rebalances took, as Java's
            ``rebalance-latency-*``: classic groups from the first JoinGroup
            to the SyncGroup that brought the assignment; KIP-848 groups from
            a new target assignment to its reconciliation (revocations done).
            0.0 before the first.
        coordinator: Java's ``consumer-coordinator-metrics`` (None when the
            snapshot was built without a clock).
        coordinator_problem: why the group has no coordinator now (the last
            FindCoordinator's retriable error, or its failure: the member
            retries by itself); empty while one is known or before the first
            lookup ends.
    """

    group_id: str
    member_id: str
    protocol: str
    generation: int
    rebalances: int
    commits: int
    commit_failures: int
    rebalance_latency_avg_ms: float = 0.0
    rebalance_latency_max_ms: float = 0.0
    rebalance_latency_total_ms: float = 0.0
    coordinator: CoordinatorStatistics | None = None
    coordinator_problem: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class FetchSessionStatistics:
    """The consumer's fetch session with one broker (KIP-227).

    Attributes:
        session_id: the broker's id for the session (0: none now; a broker
            without sessions keeps it 0).
        epoch: the epoch the next fetch carries (0: a full fetch asking for a
            new session; -1: sessions off).
        partitions: partitions in the session now.
        full_fetches, incremental_fetches: fetch requests built of each kind.
    """

    session_id: int
    epoch: int
    partitions: int
    full_fetches: int
    incremental_fetches: int


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerStatistics:
    """A snapshot of a consumer (:meth:`Consumer.statistics`).

    Attributes:
        records_consumed, bytes_fetched: totals since the consumer opened,
            partitions no longer assigned included.
        partitions: per assigned partition.
        group: None without a ``group.id``.
        brokers: per node id.
        telemetry: the metrics push (None with ``enable.metrics.push`` off).
        fetch_sessions: per node id fetched from, its fetch session (full and
            incremental fetches counted).
    """

    records_consumed: int
    bytes_fetched: int
    partitions: Mapping[Any, PartitionStatistics]
    group: GroupStatistics | None
    brokers: Mapping[int, BrokerStatistics]
    telemetry: TelemetryStatistics | None = None
    fetch_sessions: Mapping[int, FetchSessionStatistics] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class ShareConsumerStatistics:
    """A snapshot of a share consumer (:meth:`ShareConsumer.statistics`, KIP-932).

    Attributes:
        group_id, member_id: the share group and this member's own id.
        member_epoch: the member epoch (0 until the member joined).
        joins: times the member joined (a fenced member joins again).
        assignment: the partitions assigned now.
        records_delivered: records handed to the application since it opened.
        acknowledged: per acknowledgement type (``ACCEPT``, ``RELEASE``,
            ``REJECT``, ``GAP``), records whose acknowledgement the brokers took.
        acknowledgements_failed: per error name, records whose acknowledgement failed.
        share_sessions: per node id, the epoch of the share session's next request
            (0: a new session).
        acquisition_lock_timeout_ms: from the last ShareFetch answer (None before).
        brokers: per node id.
        telemetry: the metrics push (None with ``enable.metrics.push`` off).
        bytes_fetched: record bytes of the ShareFetch answers received (the
            records released unseen included).
        coordinator_problem: as :attr:`GroupStatistics.coordinator_problem`.
    """

    group_id: str
    member_id: str
    member_epoch: int
    joins: int
    assignment: frozenset[Any]
    records_delivered: int
    acknowledged: Mapping[str, int]
    acknowledgements_failed: Mapping[str, int]
    share_sessions: Mapping[int, int]
    acquisition_lock_timeout_ms: int | None
    brokers: Mapping[int, BrokerStatistics]
    telemetry: TelemetryStatistics | None = None
    bytes_fetched: int = 0
    coordinator_problem: str = ""
