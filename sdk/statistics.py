"""Client statistics: the snapshots users read, and how they are built from the counters.

Rules:

* The counting itself (where counters live, which totals only grow, how
  throttling is counted, how brokers are keyed, the 30 s windows of the rates
  and averages) is :mod:`.counters`'s; its names are importable from here too.
* A snapshot (:meth:`Producer.statistics` and the like) is a tree of frozen
  dataclasses copied at the moment of the call: it never changes afterwards and
  shares nothing with the client.
* Building a snapshot reads the counters at ``now``, the driver's clock, given
  by the caller: nothing here reads a clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from trafka.codec import api

from .counters import WINDOW_S as WINDOW_S
from .counters import WINDOW_SAMPLES as WINDOW_SAMPLES
from .counters import CoordinatorCounters as CoordinatorCounters
from .counters import Interval as Interval
from .counters import NodeCounters as NodeCounters
from .counters import PartitionCounters as PartitionCounters
from .counters import TopicCounters as TopicCounters
from .counters import Windowed as Windowed
from .counters import WindowView as WindowView
from .counters import error_name as error_name
from .counters import topic_totals as topic_totals

__all__ = [
    "ApiStatistics",
    "CoordinatorCounters",
    "CoordinatorStatistics",
    "NodeWindowStatistics",
    "Windowed",
    "BrokerStatistics",
    "ConsumerStatistics",
    "FetchSessionStatistics",
    "GroupStatistics",
    "NodeCounters",
    "PartitionCounters",
    "PartitionStatistics",
    "ProducerPartitionStatistics",
    "ProducerStatistics",
    "ShareConsumerStatistics",
    "TelemetryStatistics",
    "ThrottleStatistics",
    "TopicCounters",
    "TopicStatistics",
    "AdminStatistics",
]


# -- snapshots (frozen, public) ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ApiStatistics:
    """Requests of one API to one broker.

    Attributes:
        requests: requests sent.
        responses: responses received (the rest are in flight or failed).
        latency_avg_ms, latency_max_ms: from framing the request to its response
            arriving; None before the first response.
    """

    requests: int
    responses: int
    latency_avg_ms: float | None
    latency_max_ms: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class ThrottleStatistics:
    """Quota throttling by one broker (KIP-219), like librdkafka's ``throttle`` window.

    Attributes:
        count: responses that carried a throttle time (> 0), of any API.
        total_ms: their throttle times added up.
        avg_ms, max_ms: over those responses; None before the first.
        requests_held: requests the client held back (queued, not failed) until
            a throttle time had passed, as Kafka expects of a client for the
            APIs and versions of
            :func:`~trafka.sdk.connection_state.client_throttles`.
        requests_expired: held requests whose timeout passed before the throttle
            time did: each failed with ``RequestTimeoutError`` without being
            sent (a Produce with acks=0 is dropped); the connection stays.
        remaining_ms: how much longer new requests wait now (0: not throttled).
    """

    count: int
    total_ms: int
    avg_ms: float | None
    max_ms: int | None
    requests_held: int
    requests_expired: int
    remaining_ms: float


@dataclasses.dataclass(frozen=True, slots=True)
class NodeWindowStatistics:
    """One broker's windowed metrics, as Java's ``*-node-metrics`` (per
    ``node-id``): over the last 30 to 60 s (see :class:`Windowed`), read when the
    snapshot was taken.

    Attributes:
        request_rate, response_rate: requests framed and responses received per second.
        request_size_avg, request_size_max: bytes per request (NaN: none in the window).
        request_latency_avg_ms, request_latency_max_ms: from framing a request
            to its response (NaN: none in the window).
        outgoing_byte_rate, incoming_byte_rate: bytes per second each way.
    """

    request_rate: float
    response_rate: float
    request_size_avg: float
    request_size_max: float
    request_latency_avg_ms: float
    request_latency_max_ms: float
    outgoing_byte_rate: float
    incoming_byte_rate: float


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerStatistics:
    """One broker, as this client saw it.

    Attributes:
        node_id: the broker (negative: a bootstrap address, see the module doc).
        connected: a connection to it is up now.
        in_flight: requests waiting for their response now.
        connects, connect_failures, disconnects: connections made (the
            handshake included), attempts that failed, and connections lost or
            closed after they were made.
        requests_sent, responses_received: totals over every API.
        requests_failed: requests that got no response: the connection broke
            or the request timed out.
        bytes_sent, bytes_received: on the wire, frames included.
        apis: per API name (``"Produce"``, ``"Fetch"``...).
        throttle: the broker's quota throttling of this client.
        window: the windowed rates, sizes and latencies (None when the snapshot
            was built without a clock).
    """

    node_id: int
    connected: bool
    in_flight: int
    connects: int
    connect_failures: int
    disconnects: int
    requests_sent: int
    responses_received: int
    requests_failed: int
    bytes_sent: int
    bytes_received: int
    apis: Mapping[str, ApiStatistics]
    throttle: ThrottleStatistics
    window: NodeWindowStatistics | None = None

    @property
    def node_name(self) -> str:
        """Java's name for the node in its metrics' ``node-id`` tag: ``node-1``,
        and ``node--1`` for the first bootstrap address."""
        return f"node-{self.node_id}"


@dataclasses.dataclass(frozen=True, slots=True)
class TelemetryStatistics:
    """The client's metrics push (KIP-714, :mod:`trafka.sdk.telemetry`) so far.

    Attributes:
        state: the push's state (``"subscription needed"``, ``"push needed"``,
            ``"terminated"``...).
        enabled: False once the push is off for good (a fatal answer, or a
            broker that does not speak KIP-714).
        client_instance_id: assigned by the broker (None before).
        subscription_id, push_interval_ms: of the current subscription (None before).
        subscriptions: subscription answers taken.
        pushes: pushes the broker accepted (the terminating one included).
        push_failures: pushes the broker refused, that got no answer, or that
            were too large to send.
        last_error: the name of the last error (a Kafka error code, or an
            exception class), or None.
    """

    state: str
    enabled: bool
    client_instance_id: Any
    subscription_id: int | None
    push_interval_ms: int | None
    subscriptions: int
    pushes: int
    push_failures: int
    last_error: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class TopicStatistics:
    """A producer's records for one topic.

    Attributes:
        records_sent, bytes_sent, batches_sent: acknowledged by the broker (with
            ``acks=0``: written to the socket); bytes are record batch bytes.
        records_failed: records whose delivery failed for good.
        batch_retries: batches sent again after a retriable error.
        errors: failed records per error name (``"MESSAGE_TOO_LARGE"``, or an
            exception's class name such as ``"DeliveryTimeoutError"``).
    """

    records_sent: int
    bytes_sent: int
    batches_sent: int
    records_failed: int
    batch_retries: int
    errors: Mapping[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerPartitionStatistics(TopicStatistics):
    """A producer's records for one partition it wrote to: :class:`TopicStatistics`'s
    counts, for this partition, and more.

    Attributes:
        records_retried: records of the batches sent again.
        records_queued, bytes_queued: waiting in the producer to be sent now
            (batches in flight not included; bytes: a batch's encoding once
            it has one, else its estimated size).
        latency_avg_ms, latency_max_ms: from an acknowledged batch's first
            append to its acknowledgement (each batch counts once, with its
            oldest record's time); None before the first.
    """

    records_retried: int
    records_queued: int
    bytes_queued: int
    latency_avg_ms: float | None
    latency_max_ms: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerStatistics:
    """A snapshot of a producer (:meth:`Producer.statistics`).

    Attributes:
        records_sent, bytes_sent, batches_sent, records_failed, batch_retries:
            totals over ``topics``.
        records_buffered: records waiting to be sent or for their acknowledgement now.
        buffer_memory_used, buffer_memory: what the buffered records hold of
            ``buffer.memory``, and the limit.
        requests_in_flight: Produce requests waiting for their response now.
        producer_id, producer_epoch: the idempotent identity (-1 without one).
        transactions_committed, transactions_aborted: transactions ended.
        topics: per topic.
        brokers: per node id.
        telemetry: the metrics push (None with ``enable.metrics.push`` off).
        partitions: per :class:`~trafka.sdk.fetcher.TopicPartition` written to.
    """

    records_sent: int
    bytes_sent: int
    batches_sent: int
    records_failed: int
    batch_retries: int
    records_buffered: int
    buffer_memory_used: int
    buffer_memory: int
    requests_in_flight: int
    producer_id: int
    producer_epoch: int
    transactions_committed: int
    transactions_aborted: int
    topics: Mapping[str, TopicStatistics]
    brokers: Mapping[int, BrokerStatistics]
    telemetry: TelemetryStatistics | None = None
    partitions: Mapping[Any, ProducerPartitionStatistics] = dataclasses.field(default_factory=dict)


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
    maxima are over the last 30 to 60 s (:class:`Windowed`); NaN when nothing
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


@dataclasses.dataclass(frozen=True, slots=True)
class AdminStatistics:
    """A snapshot of an admin client (:meth:`Admin.statistics`).

    Attributes:
        brokers: per node id.
        telemetry: the metrics push (None with ``enable.metrics.push`` off, the
            admin client's default).
    """

    brokers: Mapping[int, BrokerStatistics]
    telemetry: TelemetryStatistics | None = None


# -- building snapshots --------------------------------------------------------------------------


def _topic_fields(counters: TopicCounters) -> dict[str, Any]:
    return {
        "records_sent": counters.records_sent,
        "bytes_sent": counters.bytes_sent,
        "batches_sent": counters.batches_sent,
        "records_failed": counters.records_failed,
        "batch_retries": counters.batch_retries,
        "errors": dict(counters.errors),
    }


def topic_statistics(counters: TopicCounters) -> TopicStatistics:
    return TopicStatistics(**_topic_fields(counters))


def producer_partition_statistics(
    counters: PartitionCounters, records_queued: int, bytes_queued: int
) -> ProducerPartitionStatistics:
    latency = counters.latency
    return ProducerPartitionStatistics(
        **_topic_fields(counters),
        records_retried=counters.records_retried,
        records_queued=records_queued,
        bytes_queued=bytes_queued,
        latency_avg_ms=latency.total / latency.count * 1000 if latency.count else None,
        latency_max_ms=latency.max * 1000 if latency.count else None,
    )


def _api_name(key: int) -> str:
    try:
        return str(api(key).name)
    except Exception:
        return f"api-{key}"


def broker_statistics(
    node_id: int,
    counters: Iterable[NodeCounters],
    connected: bool,
    in_flight: int,
    throttle_remaining: float = 0.0,
    now: float | None = None,
) -> BrokerStatistics:
    """One broker's snapshot from the counters of its connection ids
    (``throttle_remaining``: seconds its live connections still hold requests;
    ``now``: the driver's clock, for the windowed metrics)."""
    counters = list(counters)
    totals = NodeCounters()
    apis: dict[int, list[float]] = {}
    for c in counters:
        totals.connects += c.connects
        totals.connect_failures += c.connect_failures
        totals.disconnects += c.disconnects
        totals.requests_sent += c.requests_sent
        totals.responses_received += c.responses_received
        totals.requests_failed += c.requests_failed
        totals.bytes_sent += c.bytes_sent
        totals.bytes_received += c.bytes_received
        totals.throttles += c.throttles
        totals.throttle_ms_total += c.throttle_ms_total
        totals.throttle_ms_max = max(totals.throttle_ms_max, c.throttle_ms_max)
        totals.throttle_held += c.throttle_held
        totals.throttle_expired += c.throttle_expired
        for key, (req, resp, total, most) in c.apis.items():
            entry = apis.setdefault(key, [0, 0, 0.0, 0.0])
            entry[0] += req
            entry[1] += resp
            entry[2] += total
            entry[3] = max(entry[3], most)
    return BrokerStatistics(
        node_id=node_id,
        connected=connected,
        in_flight=in_flight,
        connects=totals.connects,
        connect_failures=totals.connect_failures,
        disconnects=totals.disconnects,
        requests_sent=totals.requests_sent,
        responses_received=totals.responses_received,
        requests_failed=totals.requests_failed,
        bytes_sent=totals.bytes_sent,
        bytes_received=totals.bytes_received,
        apis={
            _api_name(key): ApiStatistics(
                requests=int(req),
                responses=int(resp),
                latency_avg_ms=total / resp * 1000 if resp else None,
                latency_max_ms=most * 1000 if resp else None,
            )
            for key, (req, resp, total, most) in sorted(apis.items())
        },
        throttle=ThrottleStatistics(
            count=totals.throttles,
            total_ms=totals.throttle_ms_total,
            avg_ms=totals.throttle_ms_total / totals.throttles if totals.throttles else None,
            max_ms=totals.throttle_ms_max if totals.throttles else None,
            requests_held=totals.throttle_held,
            requests_expired=totals.throttle_expired,
            remaining_ms=max(0.0, throttle_remaining * 1000),
        ),
        window=None if now is None else node_window_statistics(counters, now),
    )


def node_window_statistics(counters: list[NodeCounters], now: float) -> NodeWindowStatistics:
    """The windowed node metrics of one broker's connection ids at ``now``."""
    sent = WindowView((c.window_sent for c in counters), now)
    answered = WindowView((c.window_answered for c in counters), now)
    received = WindowView((c.window_received for c in counters), now)
    return NodeWindowStatistics(
        request_rate=sent.rate(),
        response_rate=answered.rate(),
        request_size_avg=sent.avg(),
        request_size_max=sent.max,
        request_latency_avg_ms=answered.avg() * 1000,
        request_latency_max_ms=answered.max * 1000,
        outgoing_byte_rate=sent.sum_rate(),
        incoming_byte_rate=received.sum_rate(),
    )
