"""brokerlite's Prometheus metrics: Kafka's JMX names, as Prometheus sees them.

Names follow the usual JMX-to-Prometheus mapping of Kafka's metrics (the
``domain_type_name`` of the JMX bean, lowercased, ``_total`` on counters), so
dashboards made for Kafka carry over:

=================================================================  ==============================
metric                                                             from
=================================================================  ==============================
``kafka_server_brokertopicmetrics_messagesin_total{topic}``        records appended by Produce
``kafka_server_brokertopicmetrics_bytesin_total{topic}``           bytes appended by Produce
``kafka_server_brokertopicmetrics_bytesout_total{topic}``          record bytes sent in Fetch answers
``kafka_server_brokertopicmetrics_failedproducerequests_total``    partitions a Produce failed on (not
                                                                   for the errors Kafka expects: not
                                                                   the leader, unknown, too large,
                                                                   corrupt, not authorized)
``kafka_server_brokertopicmetrics_failedfetchrequests_total``      partitions a Fetch failed on (not for
                                                                   the errors Kafka expects: not the
                                                                   leader, out of range...)
``kafka_network_requestmetrics_requests_total{request}``           requests handled, per API
``kafka_network_requestmetrics_totaltime_seconds{request}``        time handling a request (histogram;
                                                                   the wait of a parked request is
                                                                   not included)
``kafka_server_replicamanager_partitioncount``                     partitions with a log here
``kafka_server_replicamanager_leadercount``                        partitions led here
``kafka_server_replicamanager_underreplicatedpartitions``          led here, ISR short of the replicas
``kafka_server_replicamanager_offlinepartitions``                  logs taken offline by a failed write
``kafka_server_replicamanager_isrshrinks_total`` / ``isrexpands``  ISR changes of partitions led here
                                                                   (cluster mode; by the leader or
                                                                   the controller)
``kafka_controller_kafkacontroller_activecontrollercount``         1 on the controller (a single node: 1)
``kafka_log_log_size{topic,partition}``                            bytes of a partition's segments
``kafka_server_replicamanager_underminisrpartitioncount``          led here, ISR below min.insync
``kafka_server_delayedoperationpurgatory_purgatorysize``          requests waiting parked, per API
``{delayedoperation}``                                             (``Produce``: acks=all; ``Fetch``:
                                                                   long polls; ...)
``kafka_network_requestmetrics_totaltimems{request,quantile}``     the same in ms, at Kafka's
                                                                   percentiles (0.50 ... 0.999),
                                                                   estimated from the histogram
``kafka_log_log_logstartoffset{topic,partition}`` / ``logendoffset``  each log's bounds here
``kafka_network_requestchannel_requestqueuesize``                  requests received whole, not yet
                                                                   handed to the core
``kafka_network_requestchannel_responsequeuesize``                 replies handed to connections'
                                                                   writers, not yet fully written
``kafka_network_socketserver_networkprocessoravgidlepercent``,      the loop's share of time waiting
``..._requesthandleravgidlepercent``                               for I/O (trafka.common.idle)
``kafka_server_replicafetchermanager_maxlag{clientid}``,            how far followed partitions are
``kafka_server_fetcherlagmetrics_consumerlag{clientid,topic,...}``  behind their leaders
``kafka_server_leaderreplication_byte_rate`` /                     replication throttles' measured
``kafka_server_followerreplication_byte_rate``                     rates, bytes/s (KIP-73)
``kafka_controller_kafkacontroller_offlinepartitionscount``        partitions without a leader (on
                                                                   the controller; 0 elsewhere)
``kafka_controller_kafkacontroller_globalpartitioncount`` /        partitions and topics of the
``globaltopiccount``                                               cluster (on the controller)
``kafka_consumergroup_lag{consumergroup,topic,partition}``         log end minus the committed offset
                                                                   (kafka_exporter's name; groups
                                                                   coordinated here)
``kafka_consumergroup_lag_sum{consumergroup,topic}``               the same summed over partitions
``kafka_consumergroup_current_offset{consumergroup,topic,partition}`` the committed offset
``kafka_consumergroup_members{consumergroup}``                     members of a live group
``kafka_brokers``                                                  brokers of the cluster (controller)
``kafka_topic_partitions{topic}``                                  partitions per topic (controller)
``kafka_topic_partition_current_offset{topic,partition}``          log end (high watermark), leader
``kafka_topic_partition_oldest_offset{topic,partition}``           log start offset, leader
``kafka_topic_partition_leader``, ``_replicas``,                   the leader, replica and ISR
``_in_sync_replica``, ``_under_replicated_partition``,             counts, 1 when short or led by
``_leader_is_preferred`` ``{topic,partition}``                     its preferred replica (leader)
=================================================================  ==============================

The ``brokertopicmetrics`` counters also have a series with ``topic=""``
(Prometheus reads an empty label as no label): the broker-wide total, as
Kafka's JMX bean without a topic and the JMX exporter show it. Sum either the
per-topic series or the total, never both.

kafka_exporter asks one client connection for the whole cluster; a cluster of
brokerlite nodes answers from each broker, so that nothing is counted twice
when the brokers' scrapes are added up: a cluster-wide series comes from the
controller alone, a partition's from its leader, a group's from its
coordinator. ``/metrics/cluster`` gives the whole cluster's groups and
offline partitions from any one broker (:mod:`.server.cluster_metrics`
gathers them; the families are built here, by :func:`consumer_group_families`).

Rules: the counters are plain integers the broker core bumps on its own thread
(no locks on the request path); everything else is read from the core when
Prometheus scrapes, on the same thread (the driver builds the answer there).
``prometheus_client`` formats the answer, imported at the first scrape (a broker
without a metrics listener never loads it); each broker has a registry of its
own, so that several brokers in one process (tests, ``serve_cluster``) never
mix.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from trafka.codec.errors import ErrorCode
from trafka.codec.protocol import api
from trafka.common.histograms import Histograms
from trafka.common.idle import IdleRatio
from trafka.common.metrics_http import Endpoint

from .errors import BrokerError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from .cluster.view import ClusterView
    from .config import BrokerConfig
    from .groups.coordinator import GroupCoordinator
    from .storage.log_manager import LogManager
    from .storage.partition import PartitionLog

__all__ = [
    "BrokerMetrics",
    "MetricsSource",
    "ParkedRequests",
    "committed",
    "consumer_group_families",
    "endpoint",
    "live_members",
    "offline_partitions",
    "ready",
]


class ParkedRequests(Protocol):
    """What the metrics read of the parked requests (the broker's purgatory)."""

    def by_api(self) -> dict[int, int]: ...


class MetricsSource(Protocol):
    """What the metrics read of the broker core (:class:`~.broker.Broker` is
    one); declared here so that the core's parts need not import the broker."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def node_id(self) -> int: ...

    @property
    def logs(self) -> LogManager: ...

    @property
    def cluster(self) -> ClusterView | None: ...

    @property
    def groups(self) -> GroupCoordinator: ...

    @property
    def metrics(self) -> BrokerMetrics: ...

    @property
    def purgatory(self) -> ParkedRequests: ...


# Request handling times (s): what a broker in one process spends on a request.
# What Kafka's ReplicaManager answers without counting a failed fetch.
_EXPECTED_FETCH_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.OFFSET_OUT_OF_RANGE,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    }
)
# What Kafka answers a Produce without counting a failed produce: the errors its
# ReplicaManager expects of an append (not the leader, too large, corrupt...), and
# what KafkaApis refuses before any append (authorization, acks).
_EXPECTED_PRODUCE_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_REQUIRED_ACKS,
    }
)
#: The percentiles Kafka's request histograms report (50thPercentile...999thPercentile).
_QUANTILES = ("0.50", "0.75", "0.95", "0.98", "0.99", "0.999")
_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class BrokerMetrics:
    """The counters the broker core keeps, and its Prometheus registry."""

    def __init__(self) -> None:
        self.messages_in: dict[str, int] = {}
        self.bytes_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        self.failed_produce: dict[str, int] = {}
        self.failed_fetch: dict[str, int] = {}
        self._times = Histograms(_BUCKETS)  # per API key
        self._broker: MetricsSource | None = None
        self._registry: CollectorRegistry | None = None
        #: The broker loop's I/O waits (its driver feeds them; see trafka.common.idle).
        self.loop_idle = IdleRatio(time.monotonic())
        #: (requests, replies) waiting in the driver's connections, read at a scrape;
        #: set by the driver that owns them (None: a core served without one).
        self.network_queues: Callable[[], tuple[int, int]] | None = None

    def attach(self, broker: MetricsSource) -> None:
        """The broker whose state the gauges read at a scrape."""
        self._broker = broker

    # -- on the request path ---------------------------------------------------------------

    def produced(self, topic: str, records: int, nbytes: int) -> None:
        self.messages_in[topic] = self.messages_in.get(topic, 0) + records
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + nbytes

    def produce_failed(self, topic: str, code: ErrorCode) -> None:
        """A partition of a Produce answered ``code``: a failed produce unless
        Kafka expects that error (then the client's to handle, not the broker's)."""
        if code not in _EXPECTED_PRODUCE_ERRORS:
            self.failed_produce[topic] = self.failed_produce.get(topic, 0) + 1

    def fetch_answered(self, body: Any) -> None:
        """Count a Fetch answer's record bytes per topic (BytesOut) as it is sent
        (an error answer, which carries no records plan, counts nothing), and its
        partitions that failed for a reason Kafka counts as a failed fetch (not
        the expected ones: not the leader, out of range, unknown...)."""
        for topic in getattr(body, "topics", None) or ():
            size = sum(getattr(p, "size", 0) for p in topic.partitions)
            if size:
                self.bytes_out[topic.name] = self.bytes_out.get(topic.name, 0) + size
            failed = sum(
                1
                for p in topic.partitions
                if getattr(p, "error_code", 0) and p.error_code not in _EXPECTED_FETCH_ERRORS
            )
            if failed:
                self.failed_fetch[topic.name] = self.failed_fetch.get(topic.name, 0) + failed

    def handled(self, api_key: int, seconds: float) -> None:
        """One request of ``api_key`` took ``seconds`` to handle."""
        self._times.observe(api_key, seconds)

    # -- a scrape ------------------------------------------------------------------------------

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric now."""
        from prometheus_client import CollectorRegistry, generate_latest

        if self._registry is None:
            self._registry = CollectorRegistry(auto_describe=False)
            self._registry.register(self)
        return generate_latest(self._registry)

    def collect(self) -> Iterator[Any]:
        yield from self._topic_counters()
        yield from self._requests()
        yield from self._queues()
        broker = self._broker
        if broker is not None:
            yield from _partition_gauges(broker)
            yield _purgatories(broker)
            yield from self._idle()
            yield from _controller_gauges(broker)
            yield from _log_offsets(broker)
            yield from _exporter_partitions(broker)
            yield from consumer_group_families(broker, list(committed(broker)))

    def _queues(self) -> Iterator[Any]:
        """Kafka's RequestChannel queue sizes, from the driver's real queues (see
        :meth:`~trafka.brokerlite.server.connections.Server.queue_sizes`)."""
        from prometheus_client.core import GaugeMetricFamily

        if self.network_queues is None:
            return
        requests, replies = self.network_queues()
        yield GaugeMetricFamily(
            "kafka_network_requestchannel_requestqueuesize",
            "Requests received whole and not yet handed to the broker core.",
            value=requests,
        )
        yield GaugeMetricFamily(
            "kafka_network_requestchannel_responsequeuesize",
            "Replies handed to connections' writers and not yet fully written.",
            value=replies,
        )

    def _idle(self) -> Iterator[Any]:
        """Kafka's idle ratios: one trio loop is the broker's network thread and
        request handler, so both report its share of time waiting for I/O."""
        from prometheus_client.core import GaugeMetricFamily

        ratio = self.loop_idle.ratio(time.monotonic())
        if ratio is None:
            return
        for name, what in (
            (
                "kafka_network_socketserver_networkprocessoravgidlepercent",
                "Share of the recent time the broker's loop waited for I/O (0 to 1).",
            ),
            (
                "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
                "Share of the recent time the broker's loop had no request to handle (0 to 1).",
            ),
        ):
            yield GaugeMetricFamily(name, what, value=ratio)

    def _topic_counters(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        for name, values, what in (
            ("messagesin", self.messages_in, "Records appended by Produce."),
            ("bytesin", self.bytes_in, "Bytes appended by Produce."),
            ("bytesout", self.bytes_out, "Record bytes sent in Fetch answers."),
            ("failedproducerequests", self.failed_produce, "Partitions a Produce failed on."),
            ("failedfetchrequests", self.failed_fetch, "Partitions a Fetch failed on."),
        ):
            family = CounterMetricFamily(
                f"kafka_server_brokertopicmetrics_{name}", what, labels=["topic"]
            )
            # topic="": the broker-wide total (JMX's bean without a topic).
            family.add_metric([""], sum(values.values()))
            for topic, value in sorted(values.items()):
                family.add_metric([topic], value)
            yield family

    def _requests(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        total = CounterMetricFamily(
            "kafka_network_requestmetrics_requests", "Requests handled.", labels=["request"]
        )
        for key, count in sorted(self._times.totals().items()):
            total.add_metric([_api_name(key)], count)
        yield total
        yield self._times.family(
            "kafka_network_requestmetrics_totaltime_seconds",
            "Time handling a request (a parked request's wait not included).",
            "request",
            _api_name,
        )
        from prometheus_client.core import GaugeMetricFamily

        ms = GaugeMetricFamily(
            "kafka_network_requestmetrics_totaltimems",
            "Time handling a request, ms, at Kafka's percentiles (estimated from the "
            "histogram's buckets, since the broker started).",
            labels=["request", "quantile"],
        )
        for key in sorted(self._times.totals()):
            for q in _QUANTILES:
                seconds = self._times.quantile(key, float(q))
                if seconds is not None:
                    ms.add_metric([_api_name(key), q], seconds * 1000.0)
        yield ms


def _api_name(key: int) -> str:
    try:
        return api(key).name
    except (KeyError, ValueError):
        return str(key)


def _purgatories(broker: MetricsSource) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily(
        "kafka_server_delayedoperationpurgatory_purgatorysize",
        "Requests waiting parked: acks=all Produce, long-poll Fetch, DeleteRecords...",
        labels=["delayedoperation"],
    )
    parked = broker.purgatory.by_api()
    for key in sorted({0, 1, *parked}):  # Produce and Fetch always, as Kafka's
        family.add_metric([_api_name(key)], parked.get(key, 0))
    return family


def _partition_gauges(broker: MetricsSource) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    logs = broker.logs
    partitions = offline = 0
    sizes = GaugeMetricFamily(
        "kafka_log_log_size", "Bytes of a partition's segments.", labels=["topic", "partition"]
    )
    for info in logs.topics():
        for index, plog in logs.hosted(info.name):
            partitions += 1
            if plog.offline is not None:
                offline += 1
            sizes.add_metric([info.name, str(index)], plog.size)
    cluster = broker.cluster
    if cluster is None:
        leaders, under, under_min, controller = partitions, 0, 0, 1
        shrinks = expands = 0
    else:
        replicas = cluster.replicas
        led = list(replicas.led())
        leaders = len(led)
        under = len(replicas.under_replicated())
        default_min = broker.config.min_insync_replicas
        under_min = sum(
            1 for r in led if len(r.isr) < cluster.min_insync_replicas(r.topic, default_min)
        )
        controller = 1 if cluster.image.controller_id == broker.node_id else 0
        shrinks, expands = replicas.isr_shrinks, replicas.isr_expands
    for name, value, what in (
        ("partitioncount", partitions, "Partitions with a log on this broker."),
        ("leadercount", leaders, "Partitions this broker leads."),
        ("underreplicatedpartitions", under, "Partitions led here whose ISR is short."),
        ("underminisrpartitioncount", under_min, "Partitions led here below min.insync."),
        ("offlinepartitions", offline, "Logs taken offline by a failed write."),
    ):
        yield GaugeMetricFamily(f"kafka_server_replicamanager_{name}", what, value=value)
    yield CounterMetricFamily(
        "kafka_server_replicamanager_isrshrinks",
        "ISR shrinks of partitions led here.",
        value=shrinks,
    )
    yield CounterMetricFamily(
        "kafka_server_replicamanager_isrexpands",
        "ISR expands of partitions led here.",
        value=expands,
    )
    yield GaugeMetricFamily(
        "kafka_controller_kafkacontroller_activecontrollercount",
        "1 on the cluster's controller.",
        value=controller,
    )
    yield from _fetcher_lag(broker)
    yield from _replication_rates(broker)
    yield sizes


def _fetcher_lag(broker: MetricsSource) -> Iterator[Any]:
    """Kafka's replica fetcher lag: per followed partition, how far this log's end
    is behind the leader's high watermark at its last answer, and the largest of
    them (0 when nothing is followed, a single node included)."""
    from prometheus_client.core import GaugeMetricFamily

    lags = broker.cluster.replicas.fetcher_lags() if broker.cluster is not None else {}
    family = GaugeMetricFamily(
        "kafka_server_replicafetchermanager_maxlag",
        "The largest lag of a followed partition behind its leader, in records.",
        labels=["clientid"],
    )
    family.add_metric(["Replica"], max(lags.values(), default=0))
    yield family
    per = GaugeMetricFamily(
        "kafka_server_fetcherlagmetrics_consumerlag",
        "A followed partition's lag behind its leader's high watermark, in records.",
        labels=["clientid", "topic", "partition"],
    )
    for (topic, partition), lag in sorted(lags.items()):
        per.add_metric(["Replica", topic, str(partition)], lag)
    yield per


def _replication_rates(broker: MetricsSource) -> Iterator[Any]:
    """The replication throttles' measured rates (Kafka's LeaderReplication and
    FollowerReplication ``byte-rate``, KIP-73): bytes per second of throttled
    partitions sent to followers and fetched as a follower (0 on a single node)."""
    from prometheus_client.core import GaugeMetricFamily

    quotas = broker.cluster.replication_quotas if broker.cluster is not None else None
    for side, what in (("leader", "sent to followers"), ("follower", "fetched from leaders")):
        quota = getattr(quotas, side) if quotas is not None else None
        yield GaugeMetricFamily(
            f"kafka_server_{side}replication_byte_rate",
            f"Bytes per second of throttled partitions {what} (replication throttles).",
            value=quota.rate() if quota is not None else 0.0,
        )


def _end(broker: MetricsSource, plog: PartitionLog) -> int:
    """What consumers can read to: the high watermark in a cluster, the log end on
    a single node (where every append is committed at once)."""
    return plog.high_watermark if broker.cluster is not None else plog.log_end_offset


def _controller_gauges(broker: MetricsSource) -> Iterator[Any]:
    """The controller's cluster-wide gauges (Kafka's KafkaController beans and
    kafka_exporter's ``kafka_brokers``/``kafka_topic_partitions``): on the
    controller only; other brokers report 0 (and no per-topic series), as
    Kafka's non-active controllers do."""
    from prometheus_client.core import GaugeMetricFamily

    cluster = broker.cluster
    per_topic: dict[str, int] = {}
    offline = offline_partitions(broker)
    if cluster is None:
        active, brokers = True, 1
        for info in broker.logs.topics():  # (an internal topic's partitions have no logs here)
            per_topic[info.name] = info.num_partitions
    else:
        image = cluster.image
        active = image.controller_id == broker.node_id
        brokers = len(image.brokers)
        for name, assignment in image.topics.items():
            per_topic[name] = len(assignment.replicas)
    if not active:
        brokers = offline = 0
        per_topic = {}
    for name, value, what in (
        ("offlinepartitionscount", offline, "Partitions without a leader (on the controller)."),
        ("globalpartitioncount", sum(per_topic.values()), "Partitions of the cluster."),
        ("globaltopiccount", len(per_topic), "Topics of the cluster."),
    ):
        yield GaugeMetricFamily(f"kafka_controller_kafkacontroller_{name}", what, value=value)
    yield GaugeMetricFamily("kafka_brokers", "Brokers of the cluster (on the controller).", brokers)
    partitions = GaugeMetricFamily(
        "kafka_topic_partitions", "Partitions of a topic (on the controller).", labels=["topic"]
    )
    for name, count in sorted(per_topic.items()):
        partitions.add_metric([name], count)
    yield partitions


def _log_offsets(broker: MetricsSource) -> Iterator[Any]:
    """Kafka's Log beans: every local log's start and end offsets (a follower's too)."""
    from prometheus_client.core import GaugeMetricFamily

    labels = ["topic", "partition"]
    start = GaugeMetricFamily(
        "kafka_log_log_logstartoffset", "A log's start offset.", labels=labels
    )
    end = GaugeMetricFamily("kafka_log_log_logendoffset", "A log's end offset.", labels=labels)
    for info in broker.logs.topics():
        for index, plog in broker.logs.hosted(info.name):
            start.add_metric([info.name, str(index)], plog.log_start_offset)
            end.add_metric([info.name, str(index)], plog.log_end_offset)
    yield start
    yield end


def _exporter_partitions(broker: MetricsSource) -> Iterator[Any]:
    """kafka_exporter's per-partition series, for the partitions led here."""
    from prometheus_client.core import GaugeMetricFamily

    labels = ["topic", "partition"]
    families = {
        name: GaugeMetricFamily(f"kafka_topic_partition_{name}", what, labels=labels)
        for name, what in (
            ("current_offset", "The partition's log end (high watermark)."),
            ("oldest_offset", "The partition's log start offset."),
            ("leader", "The partition's leader."),
            ("replicas", "The partition's replica count."),
            ("in_sync_replica", "The partition's in-sync replica count."),
            ("under_replicated_partition", "1 when the ISR is short of the replicas."),
            ("leader_is_preferred", "1 when the preferred replica leads."),
        )
    }
    cluster = broker.cluster
    led: list[tuple[str, int, tuple[int, ...], tuple[int, ...]]]
    if cluster is None:
        led = [
            (info.name, index, (broker.node_id,), (broker.node_id,))
            for info in broker.logs.topics()
            for index, _ in broker.logs.hosted(info.name)
        ]
    else:
        led = [(r.topic, r.partition, r.replicas, r.isr) for r in cluster.replicas.led()]
    for topic, index, replicas, isr in sorted(led):
        try:
            plog = broker.logs.partition(topic, index)
        except BrokerError:
            continue  # the topic is being deleted
        values = {
            "current_offset": _end(broker, plog),
            "oldest_offset": plog.log_start_offset,
            "leader": broker.node_id,
            "replicas": len(replicas),
            "in_sync_replica": len(isr),
            "under_replicated_partition": int(len(isr) < len(replicas)),
            "leader_is_preferred": int(bool(replicas) and replicas[0] == broker.node_id),
        }
        for name, value in values.items():
            families[name].add_metric([topic, str(index)], value)
    yield from families.values()


def consumer_group_families(
    broker: MetricsSource,
    rows: list[tuple[str, str, int, int, int | None]],
    members: dict[str, int] | None = None,
) -> list[Any]:
    """kafka_exporter's group series from ``rows`` of (group, topic, partition,
    committed offset, lag or None: unknown): the lag per partition where known,
    the committed offsets, the lag summed per topic (only where every partition's
    lag is known: a partial sum would understate it), and the members per group
    (``members``; None: the live groups coordinated here)."""
    from prometheus_client.core import GaugeMetricFamily

    lag = GaugeMetricFamily(
        "kafka_consumergroup_lag",
        "Log end minus the group's committed offset.",
        labels=["consumergroup", "topic", "partition"],
    )
    current = GaugeMetricFamily(
        "kafka_consumergroup_current_offset",
        "The group's committed offset.",
        labels=["consumergroup", "topic", "partition"],
    )
    lag_sum = GaugeMetricFamily(
        "kafka_consumergroup_lag_sum",
        "Log end minus the committed offset, summed over the topic's partitions.",
        labels=["consumergroup", "topic"],
    )
    family = GaugeMetricFamily(
        "kafka_consumergroup_members", "Members of a live group.", labels=["consumergroup"]
    )
    sums: dict[tuple[str, str], int | None] = {}
    for group, topic, partition, offset, behind in rows:
        current.add_metric([group, topic, str(partition)], offset)
        if behind is not None:
            lag.add_metric([group, topic, str(partition)], behind)
        known = sums.get((group, topic), 0)
        sums[group, topic] = None if known is None or behind is None else known + behind
    for (group, topic), total in sorted(sums.items()):
        if total is not None:
            lag_sum.add_metric([group, topic], total)
    for group_id, count in sorted((live_members(broker) if members is None else members).items()):
        family.add_metric([group_id], count)
    return [lag, current, lag_sum, family]


def live_members(broker: MetricsSource) -> dict[str, int]:
    """Members of each live group coordinated here (classic and KIP-848 groups)."""
    coordinator = broker.groups
    counts = {
        g: len(live.members) for g in coordinator.group_ids() if (live := coordinator.group(g))
    }
    for group_id, consumer_group in coordinator.consumer.groups.items():
        counts[group_id] = len(consumer_group.members)
    return counts


def committed(broker: MetricsSource) -> Iterator[tuple[str, str, int, int, int | None]]:
    """(group, topic, partition, committed offset, lag) of the groups coordinated
    here; the lag is None when the partition's log is not here (a topic gone, or a
    partition this broker does not replicate)."""
    store = broker.groups.store
    for group in sorted(store.offset_groups()):
        for (topic, partition), offset in sorted(store.group_offsets(group).items()):
            try:
                plog = broker.logs.partition(topic, partition)
            except BrokerError:
                yield group, topic, partition, offset.offset, None
                continue
            lag = max(_end(broker, plog) - offset.offset, 0)
            yield group, topic, partition, offset.offset, lag


def offline_partitions(broker: MetricsSource) -> int:
    """Partitions without a leader in the whole cluster, as this broker's cluster
    image has them (a single node: its logs taken offline by a failed write)."""
    cluster = broker.cluster
    if cluster is None:
        return sum(
            1
            for info in broker.logs.topics()
            for plog in broker.logs.partitions(info.name)
            if plog.offline is not None
        )
    return sum(1 for state in cluster.image.states.values() if state.leader < 0)


def ready(broker: MetricsSource) -> bool:
    """``/readyz``: whether the broker serves clients. On a single node at once;
    in a cluster once this broker sees itself registered and a controller elected."""
    cluster = broker.cluster
    if cluster is None:
        return True
    image = cluster.image
    return broker.node_id in image.brokers and image.controller_id >= 0


def endpoint(
    broker: MetricsSource, pages: Mapping[str, Callable[[], Awaitable[bytes]]] | None = None
) -> Endpoint:
    """What the broker's metrics listener answers with (``/metrics`` is built on
    the trio thread that owns the broker core), and the driver's ``pages``
    (``/metrics/cluster``)."""
    return Endpoint(broker.metrics.exposition, lambda: ready(broker), pages)
