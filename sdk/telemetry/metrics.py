"""The metrics a client measures for its pushes (KIP-714): the producer's,
consumer's, share consumer's and admin client's samples, named as Java's
``TelemetryMetricNamingConvention`` names them, from the client's statistics.

Rules:

* A sample is a value now: ``"sum"`` (a total since the client started, which
  the state machine turns into deltas when the subscription asks for them) or
  ``"gauge"``. Averages and rates cover the time since the last push
  (:class:`IntervalAverages`), as librdkafka's rolled-over averages.
* Nothing here does I/O or reads a clock: the time is an argument.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from trafka.codec import ApiKey

from ..statistics.counters import Interval, PartitionCounters


@dataclasses.dataclass(frozen=True, slots=True)
class MetricSample:
    """One value a client measures now: ``kind`` ``"sum"`` (a total since the
    client started, monotonic) or ``"gauge"``."""

    name: str
    kind: str
    value: int | float
    attributes: tuple[tuple[str, str], ...] = ()
    unit: str = ""
    description: str = ""


# -- the metrics a client measures ---------------------------------------------------------

PRODUCER_PREFIX = "org.apache.kafka.producer."
CONSUMER_PREFIX = "org.apache.kafka.consumer."
#: Java's admin client names its network client's metric groups after
#: ``admin-client`` (``admin-client-metrics``, ``admin-client-node-metrics``),
#: which ``TelemetryMetricNamingConvention`` turns into this prefix.
ADMIN_PREFIX = "org.apache.kafka.admin.client."


class IntervalAverages:
    """Averages over the time since the last push, from totals that only grow.

    ``average(key, total, count)`` is ``(total - last total) / (count - last
    count)`` (0.0 when nothing was counted), as librdkafka's rolled-over
    averages: each push reports its own interval.
    """

    def __init__(self) -> None:
        self._last: dict[Any, tuple[float, float]] = {}

    def average(self, key: Any, total: float, count: float) -> float:
        last_total, last_count = self._last.get(key, (0.0, 0.0))
        self._last[key] = (total, count)
        n = count - last_count
        return (total - last_total) / n if n > 0 else 0.0

    def rate(self, key: Any, total: float, now: float) -> float:
        """The change of ``total`` per second since the last call (0.0 the first time)."""
        previous = self._last.get(key)
        self._last[key] = (total, now)
        if previous is None or now <= previous[1]:
            return 0.0
        return (total - previous[0]) / (now - previous[1])


def _peak(peaks: Mapping[int, tuple[Mapping[int, float], int]], api_key: int | None) -> float:
    """The highest latency (ms) of ``api_key`` (None: any API) over every node."""
    most = 0.0
    for apis, _throttle in peaks.values():
        for key, latency in apis.items():
            if (api_key is None or key == api_key) and latency > most:
                most = latency
    return most


def _avg_max(
    name: str,
    average: float,
    peak: float,
    what: str,
    *,
    unit: str = "ms",
    attributes: tuple[tuple[str, str], ...] = (),
) -> list[MetricSample]:
    """The ``<name>.avg`` and ``<name>.max`` gauges of one measure (``what``, as
    the descriptions name it: "The average <what>.")."""
    return [
        MetricSample(name + ".avg", "gauge", average, attributes, unit, f"The average {what}."),
        MetricSample(name + ".max", "gauge", peak, attributes, unit, f"The maximum {what}."),
    ]


def _api_latency(
    averages: IntervalAverages,
    name: str,
    api_name: str,
    api_key: int,
    brokers: Mapping[int, Any],
    peaks: Mapping[int, tuple[Mapping[int, float], int]],
    description: str,
) -> list[MetricSample]:
    """``<name>.avg``/``.max``: one API's latency over every broker since the last push."""
    responses = 0
    total_ms = 0.0
    for b in brokers.values():
        a = b.apis.get(api_name)
        if a is not None and a.responses:
            responses += a.responses
            total_ms += (a.latency_avg_ms or 0.0) * a.responses
    return _avg_max(
        name,
        averages.average(name, total_ms, responses),
        _peak(peaks, api_key),
        f"{description} in ms",
    )


def _common_samples(
    prefix: str,
    averages: IntervalAverages,
    brokers: Mapping[int, Any],
    peaks: Mapping[int, tuple[Mapping[int, float], int]],
    now: float,
) -> list[MetricSample]:
    """``connection.creation.total``/``.rate`` and the per-node request latencies."""
    connects = sum(b.connects for b in brokers.values())
    out = [
        MetricSample(
            prefix + "connection.creation.total",
            "sum",
            connects,
            unit="1",
            description="The total number of connections established.",
        ),
        MetricSample(
            prefix + "connection.creation.rate",
            "gauge",
            averages.rate("connects", connects, now),
            unit="1",
            description="The rate of connections established per second.",
        ),
    ]
    for node, b in brokers.items():
        responses = sum(a.responses for a in b.apis.values())
        total_ms = sum((a.latency_avg_ms or 0.0) * a.responses for a in b.apis.values())
        apis = peaks.get(node, ({}, 0))[0]
        out += _avg_max(
            prefix + "node.request.latency",
            averages.average(("node", node), total_ms, responses),
            max(apis.values(), default=0.0),
            "request latency in ms for a node",
            attributes=(("node_id", f"node-{node}"),),
        )
    return out


#: KIP-714's ``acks`` attribute of the per-partition latency, by ``acks`` setting.
_ACKS_NAMES = {-1: "all", 1: "leader", 0: "none"}


def _partition_samples(
    averages: IntervalAverages,
    partitions: Iterable[tuple[str, int, int, int, PartitionCounters]],
    acks: int,
) -> list[MetricSample]:
    """KIP-714's per-partition producer metrics (``partition.*``), each with
    the ``topic`` and ``partition`` attributes, the latency also with ``acks``
    and the failures with ``reason`` (the error's name, one point per reason)."""
    p = PRODUCER_PREFIX + "partition."
    acks_name = _ACKS_NAMES.get(acks, str(acks))
    out: list[MetricSample] = []
    for topic, partition, queued, queued_bytes, c in partitions:
        tp = (("topic", topic), ("partition", str(partition)))
        out.append(
            MetricSample(
                p + "queue.size",
                "gauge",
                queued,
                tp,
                "1",
                "The number of records waiting in the partition's send queue.",
            )
        )
        out.append(
            MetricSample(
                p + "queue.bytes",
                "gauge",
                queued_bytes,
                tp,
                "By",
                "The bytes of the records waiting in the partition's send queue.",
            )
        )
        latency = c.latency
        out += _avg_max(
            p + "latency",
            averages.average(
                ("partition latency", topic, partition), latency.total * 1000, latency.count
            ),
            latency.take_peak() * 1000,
            "time in ms from a record batch's first append to its acknowledgement",
            attributes=(*tp, ("acks", acks_name)),
        )
        out.append(
            MetricSample(
                p + "record.retries",
                "sum",
                c.records_retried,
                tp,
                "1",
                "The number of records sent again to the partition after a retriable error.",
            )
        )
        for reason, n in sorted(c.errors.items()):
            out.append(
                MetricSample(
                    p + "record.failures",
                    "sum",
                    n,
                    (*tp, ("reason", reason)),
                    "1",
                    "The number of records whose delivery to the partition failed for good.",
                )
            )
        out.append(
            MetricSample(
                p + "record.success",
                "sum",
                c.records_sent,
                tp,
                "1",
                "The number of records the partition's leader acknowledged.",
            )
        )
    return out


def producer_samples(
    averages: IntervalAverages,
    stats: Any,
    peaks: Mapping[int, tuple[Mapping[int, float], int]],
    queue_time: Interval,
    now: float,
    *,
    partitions: Iterable[tuple[str, int, int, int, PartitionCounters]] = (),
    acks: int = -1,
) -> list[MetricSample]:
    """A producer's KIP-714 metrics from its :class:`~trafka.sdk.statistics.ProducerStatistics`,
    its per-node peaks, its record queue times (seconds), and per partition its
    queue and counters (:meth:`~trafka.sdk.accumulator.Accumulator.partition_counters`;
    ``acks`` names the latency's ``acks`` attribute). The per-partition
    latencies' peaks are taken."""
    p = PRODUCER_PREFIX
    brokers = stats.brokers
    out = _common_samples(p, averages, brokers, peaks, now)
    produce_responses = sum(
        a.responses for b in brokers.values() if (a := b.apis.get("Produce")) is not None
    )
    throttle_total = sum(b.throttle.total_ms for b in brokers.values())
    out += _avg_max(
        p + "produce.throttle.time",
        averages.average("throttle", throttle_total, produce_responses),
        max((t for _apis, t in peaks.values()), default=0),
        "throttle time in ms",
    )
    out += _avg_max(
        p + "record.queue.time",
        averages.average("queue", queue_time.total * 1000, queue_time.count),
        queue_time.take_peak() * 1000,
        "time in ms record batches spent in the send buffer",
    )
    out += _api_latency(
        averages,
        p + "request.latency",
        "Produce",
        ApiKey.PRODUCE,
        brokers,
        peaks,
        "produce request latency",
    )
    out += _partition_samples(averages, partitions, acks)
    return out


def label_group_member(resource: dict[str, Any], member_id: str) -> None:
    """A consumer's resource attributes with its group member id as it is now
    (none while it has none), as Java's ``updateMetricsLabels`` keeps them."""
    if member_id:
        resource["group_member_id"] = member_id
    else:
        resource.pop("group_member_id", None)


def consumer_samples(
    averages: IntervalAverages,
    stats: Any,
    peaks: Mapping[int, tuple[Mapping[int, float], int]],
    poll_idle: float,
    assigned: int,
    now: float,
    rebalance: Interval | None = None,
) -> list[MetricSample]:
    """A consumer's KIP-714 metrics from its :class:`~trafka.sdk.statistics.ConsumerStatistics`,
    its per-node peaks, the seconds it spent waiting for records inside its
    polls, its assigned partitions, and its group membership's rebalance times
    (their peak since the last push is taken)."""
    p = CONSUMER_PREFIX
    brokers = stats.brokers
    out = _common_samples(p, averages, brokers, peaks, now)
    out.append(
        MetricSample(
            p + "poll.idle.ratio.avg",
            "gauge",
            min(1.0, averages.rate("poll idle", poll_idle, now)),
            unit="1",
            description="The fraction of time the consumer's polls waited for records.",
        )
    )
    out.append(
        MetricSample(
            p + "coordinator.assigned.partitions",
            "gauge",
            assigned,
            unit="1",
            description="The number of partitions currently assigned to this consumer.",
        )
    )
    out += _api_latency(
        averages,
        p + "fetch.manager.fetch.latency",
        "Fetch",
        ApiKey.FETCH,
        brokers,
        peaks,
        "fetch latency",
    )
    out += _api_latency(
        averages,
        p + "coordinator.commit.latency",
        "OffsetCommit",
        ApiKey.OFFSET_COMMIT,
        brokers,
        peaks,
        "commit latency",
    )
    if rebalance is not None:
        total_ms = rebalance.total * 1000
        out += _avg_max(
            p + "coordinator.rebalance.latency",
            averages.average("rebalance", total_ms, rebalance.count),
            rebalance.take_peak() * 1000,
            "time taken for a group to complete a rebalance in ms",
        )
        out.append(
            MetricSample(
                p + "coordinator.rebalance.latency.total",
                "sum",
                total_ms,
                unit="ms",
                description="The total time taken for group rebalances in ms.",
            )
        )
    return out


def admin_samples(
    averages: IntervalAverages,
    stats: Any,
    peaks: Mapping[int, tuple[Mapping[int, float], int]],
    now: float,
) -> list[MetricSample]:
    """An admin client's KIP-714 metrics from its
    :class:`~trafka.sdk.statistics.AdminStatistics` and its per-node peaks: the
    connections and per-node request latencies every client measures, under
    :data:`ADMIN_PREFIX`."""
    return _common_samples(ADMIN_PREFIX, averages, stats.brokers, peaks, now)


#: Java's share consumer registers its own groups under ``consumer-share``
#: (``consumer-share-metrics``, ``consumer-share-fetch-manager-metrics``,
#: ``consumer-share-coordinator-metrics``), which KIP-714's naming turns into
#: this prefix; its network metrics stay under ``consumer``.
SHARE_CONSUMER_PREFIX = "org.apache.kafka.consumer.share."


class PollTimes:
    """The application's polls as Java's ``KafkaShareConsumerMetrics`` measures
    them (I/O-free; times in seconds).

    * ``between``: at each poll's start, the time since the previous poll
      started (0 for the first poll, as Java records it).
    * ``idle``: at each poll's end, the poll's own duration over that duration
      plus the time between polls (0 when both are 0): near 1 when the
      application spends its time waiting in ``poll``, near 0 when it spends
      it processing records.
    * ``last_start``: when the last poll started (None before any).
    """

    __slots__ = ("_since_last", "_start", "between", "idle", "last_start")

    def __init__(self) -> None:
        self.between = Interval()
        self.idle = Interval()
        self.last_start: float | None = None
        self._start = 0.0
        self._since_last = 0.0

    def started(self, now: float) -> None:
        self._since_last = 0.0 if self.last_start is None else now - self.last_start
        self.between.add(self._since_last)
        self.last_start = self._start = now

    def ended(self, now: float) -> None:
        poll_time = max(0.0, now - self._start)
        cycle = poll_time + self._since_last
        self.idle.add(poll_time / cycle if cycle > 0 else 0.0)


def _seconds_ago(then: float | None, now: float) -> int:
    """Whole seconds since ``then``; -1 when it never happened (Java's gauges)."""
    return -1 if then is None else int(max(0.0, now - then))


def _meter(
    averages: IntervalAverages, name: str, total: int, now: float, what: str, unit: str = "1"
) -> list[MetricSample]:
    """``<name>.total`` (a sum) and ``<name>.rate`` (per second since the last push)."""
    return [
        MetricSample(
            name + ".total", "sum", total, unit=unit, description=f"The total number of {what}."
        ),
        MetricSample(
            name + ".rate",
            "gauge",
            averages.rate(name, total, now),
            unit=unit,
            description=f"The number of {what} per second.",
        ),
    ]


def share_consumer_samples(
    averages: IntervalAverages,
    stats: Any,
    peaks: Mapping[int, tuple[Mapping[int, float], int]],
    polls: PollTimes,
    last_heartbeat: float | None,
    now: float,
    *,
    fetch_bytes: Interval | None = None,
    fetch_records: Interval | None = None,
) -> list[MetricSample]:
    """A share consumer's KIP-714 metrics (KIP-932) from its
    :class:`~trafka.sdk.statistics.ShareConsumerStatistics`, its per-node
    peaks, its polls, when it last sent a ShareGroupHeartbeat, and per
    ShareFetch answer its record bytes and records (their peaks are taken;
    the ``fetch.size``, ``bytes.consumed`` and ``records.per.request``
    metrics are left out without them).

    The names are those Java's ``KafkaShareConsumer`` registers:
    ``consumer.share.*`` (``KafkaShareConsumerMetrics``),
    ``consumer.share.fetch.manager.*`` (``ShareFetchMetricsRegistry``),
    ``consumer.share.coordinator.*`` (``HeartbeatMetricsManager``), and the
    network client's ``consumer.*``. Acknowledgements count once the broker
    answered them (Java counts them when they are written to a request).
    """
    brokers = stats.brokers
    out = _common_samples(CONSUMER_PREFIX, averages, brokers, peaks, now)
    out += _share_poll_samples(averages, polls, now)
    out += _share_fetch_samples(averages, stats, peaks, now, fetch_bytes, fetch_records)
    out += _share_coordinator_samples(averages, brokers, peaks, last_heartbeat, now)
    return out


def _responses(brokers: Mapping[int, Any], api_name: str) -> int:
    """The answers of ``api_name`` received from every broker."""
    return sum(a.responses for b in brokers.values() if (a := b.apis.get(api_name)))


def _share_poll_samples(
    averages: IntervalAverages, polls: PollTimes, now: float
) -> list[MetricSample]:
    """consumer-share-metrics: the application's polls."""
    s = SHARE_CONSUMER_PREFIX
    out: list[MetricSample] = []
    out.append(
        MetricSample(
            s + "poll.idle.ratio.avg",
            "gauge",
            averages.average("share poll idle", polls.idle.total, polls.idle.count),
            unit="1",
            description="The average fraction of time the share consumer's polls were idle "
            "rather than the application processing records.",
        )
    )
    between = polls.between
    out += _avg_max(
        s + "time.between.poll",
        averages.average("share between", between.total * 1000, between.count),
        between.take_peak() * 1000,
        "delay between invocations of poll() in ms",
    )
    out.append(
        MetricSample(
            s + "last.poll.seconds.ago",
            "gauge",
            _seconds_ago(polls.last_start, now),
            unit="s",
            description="The number of seconds since the last poll() invocation.",
        )
    )
    return out


def _share_fetch_samples(
    averages: IntervalAverages,
    stats: Any,
    peaks: Mapping[int, tuple[Mapping[int, float], int]],
    now: float,
    fetch_bytes: Interval | None,
    fetch_records: Interval | None,
) -> list[MetricSample]:
    """consumer-share-fetch-manager-metrics: ShareFetch, its records and the
    acknowledgements."""
    brokers = stats.brokers
    f = SHARE_CONSUMER_PREFIX + "fetch.manager."
    out: list[MetricSample] = []
    out += _meter(averages, f + "fetch", _responses(brokers, "ShareFetch"), now, "fetch requests")
    out += _api_latency(
        averages,
        f + "fetch.latency",
        "ShareFetch",
        ApiKey.SHARE_FETCH,
        brokers,
        peaks,
        "share fetch latency",
    )
    throttle_total = sum(b.throttle.total_ms for b in brokers.values())
    out += _avg_max(
        f + "fetch.throttle.time",
        averages.average(
            "share throttle", throttle_total, sum(b.responses_received for b in brokers.values())
        ),
        max((t for _apis, t in peaks.values()), default=0),
        "throttle time in ms",
    )
    out += _meter(
        averages, f + "records.consumed", stats.records_delivered, now, "records consumed"
    )
    if fetch_bytes is not None:
        out += _avg_max(
            f + "fetch.size",
            averages.average("share fetch size", fetch_bytes.total, fetch_bytes.count),
            fetch_bytes.take_peak(),
            "number of record bytes a share fetch request brought",
            unit="By",
        )
        out += _meter(
            averages,
            f + "bytes.consumed",
            int(fetch_bytes.total),
            now,
            "record bytes share fetched",
            unit="By",
        )
    if fetch_records is not None:
        out += _avg_max(
            f + "records.per.request",
            averages.average("share fetch records", fetch_records.total, fetch_records.count),
            fetch_records.take_peak(),
            "number of records a share fetch request brought",
            unit="1",
        )
    failed = sum(stats.acknowledgements_failed.values())
    out += _meter(
        averages,
        f + "acknowledgements.send",
        sum(stats.acknowledged.values()) + failed,
        now,
        "record acknowledgements sent",
    )
    out += _meter(
        averages,
        f + "acknowledgements.error",
        failed,
        now,
        "record acknowledgements that resulted in errors",
    )
    return out


def _share_coordinator_samples(
    averages: IntervalAverages,
    brokers: Mapping[int, Any],
    peaks: Mapping[int, tuple[Mapping[int, float], int]],
    last_heartbeat: float | None,
    now: float,
) -> list[MetricSample]:
    """consumer-share-coordinator-metrics: the heartbeats."""
    c = SHARE_CONSUMER_PREFIX + "coordinator."
    out: list[MetricSample] = []
    out += _meter(
        averages, c + "heartbeat", _responses(brokers, "ShareGroupHeartbeat"), now, "heartbeats"
    )
    out.append(
        MetricSample(
            c + "heartbeat.response.time.max",
            "gauge",
            _peak(peaks, ApiKey.SHARE_GROUP_HEARTBEAT),
            unit="ms",
            description="The maximum time in ms taken to receive a response to a heartbeat.",
        )
    )
    out.append(
        MetricSample(
            c + "last.heartbeat.seconds.ago",
            "gauge",
            _seconds_ago(last_heartbeat, now),
            unit="s",
            description="The number of seconds since the last coordinator heartbeat was sent.",
        )
    )
    return out
