"""The SDK clients' Prometheus metrics (opt-in: ``metrics.listen`` = ``host:port``).

A client with ``metrics.listen`` serves, for as long as it is open, over HTTP:
``/metrics`` (the Prometheus text format, made by ``prometheus_client`` from
the client's :meth:`statistics` at each scrape), ``/healthz`` (200 while the
client is open) and ``/readyz`` (200 while a connection to a broker is up,
else 503).

Names follow the Java clients' JMX metrics as the Prometheus JMX exporter names
them (``kafka.producer:type=producer-metrics,client-id=X`` attribute
``record-send-total`` becomes ``kafka_producer_producer_metrics_record_send_total
{client_id="X"}``), so dashboards made for Java clients carry over:

==============================================================  =====================================
metric                                                          from
==============================================================  =====================================
``kafka_producer_producer_metrics_record_send_total``           records acknowledged
``kafka_producer_producer_metrics_record_error_total``          records failed
``kafka_producer_producer_metrics_record_retry_total``          records of batches sent again
``kafka_producer_producer_metrics_batch_size_avg``              bytes per batch sent (average)
``kafka_producer_producer_metrics_buffer_available_bytes``      ``buffer.memory`` not in use
``kafka_producer_producer_metrics_buffer_total_bytes``          ``buffer.memory``
``kafka_producer_producer_metrics_requests_in_flight``          Produce requests awaiting answers
``kafka_producer_producer_topic_metrics_record_send_total``     per ``topic``
``kafka_consumer_consumer_fetch_manager_metrics_records_consumed_total``  records handed out
``kafka_consumer_consumer_fetch_manager_metrics_bytes_consumed_total``    record bytes fetched
``kafka_consumer_consumer_fetch_manager_metrics_records_lag_max``         the largest lag now
``kafka_consumer_consumer_fetch_manager_metrics_records_lag``             per ``topic``, ``partition``
``kafka_<client>_<client>_node_metrics_request_total``                    per ``node_id``
``kafka_<client>_<client>_node_metrics_response_total``                   per ``node_id``
``kafka_<client>_<client>_node_metrics_outgoing_byte_total`` / ``incoming``  per ``node_id``
``kafka_<client>_<client>_node_metrics_request_rate`` / ``response_rate``  per second, windowed
``kafka_<client>_<client>_node_metrics_outgoing_byte_rate`` / ``incoming``  per second, windowed
``kafka_<client>_<client>_node_metrics_request_size_avg`` / ``_max``       bytes, windowed
``kafka_<client>_<client>_node_metrics_request_latency_avg`` / ``_max``    ms, windowed
``kafka_<client>_<client>_node_metrics_connection_count``                 connections up now
``kafka_consumer_consumer_coordinator_metrics_*``                         Java's
                                                                          ``consumer-coordinator-metrics``
                                                                          (with a ``group.id``)
==============================================================  =====================================

(``<client>``: ``producer``, ``consumer``, ``share_consumer`` or ``admin``.)
Every series carries ``client_id``; the node series carry ``node_id`` as Java
tags them, ``node-<id>`` (``node--1`` for the first bootstrap address). The
coordinator series are the attributes of
:class:`~trafka.sdk.statistics.CoordinatorStatistics`: ``commit_latency_avg``
/ ``_max``, ``commit_rate``, ``commit_total``, ``join_time_avg`` / ``_max``,
``join_rate``, ``join_total``, the same for ``sync``, ``heartbeat_rate``,
``heartbeat_total``, ``heartbeat_response_time_max``,
``last_heartbeat_seconds_ago``, ``rebalance_latency_avg`` / ``_max`` /
``_total``, ``rebalance_total``, ``rebalance_rate_per_hour``,
``failed_rebalance_total``, ``failed_rebalance_rate_per_hour``,
``last_rebalance_seconds_ago`` and ``assigned_partitions``. "Windowed" is
Java's: two samples of 30 s (:class:`~trafka.sdk.statistics.Windowed`); an
average or maximum with nothing in the window is NaN, as Java's.

Rules: the HTTP exchange is one request per connection (head at most 8 KiB,
within 5 s), on the client's own task group (asyncio or trio, through anyio);
``prometheus_client`` is imported when the listener starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.abc

from trafka.common.metrics_http import HEAD_TIMEOUT_S, MAX_HEAD, http_answer, http_response

__all__ = ["ClientCollector", "serve_client_metrics"]


class ClientCollector:
    """A ``prometheus_client`` collector reading a client's ``statistics()``."""

    def __init__(self, client: Any, kind: str) -> None:
        self.client = client
        self.kind = kind  # producer, consumer, share_consumer, admin

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = self.client.statistics()
        cid = str(self.client.config.client_id)
        kind = self.kind

        def counter(name: str, what: str, value: float, **labels: str) -> Any:
            family = CounterMetricFamily(name, what, labels=["client_id", *labels])
            family.add_metric([cid, *labels.values()], value)
            return family

        def gauge(name: str, what: str, value: float) -> Any:
            family = GaugeMetricFamily(name, what, labels=["client_id"])
            family.add_metric([cid], value)
            return family

        if kind == "producer":
            base = "kafka_producer_producer_metrics"
            yield counter(f"{base}_record_send", "Records acknowledged.", stats.records_sent)
            yield counter(f"{base}_record_error", "Records failed.", stats.records_failed)
            # Java counts the records of each batch sent again (Sender.reenqueueBatch).
            retried = sum(p.records_retried for p in stats.partitions.values())
            yield counter(f"{base}_record_retry", "Records of batches sent again.", retried)
            avg = stats.bytes_sent / stats.batches_sent if stats.batches_sent else 0.0
            yield gauge(f"{base}_batch_size_avg", "Bytes per batch sent.", avg)
            free = stats.buffer_memory - stats.buffer_memory_used
            yield gauge(f"{base}_buffer_available_bytes", "buffer.memory not in use.", free)
            yield gauge(f"{base}_buffer_total_bytes", "buffer.memory.", stats.buffer_memory)
            yield gauge(
                f"{base}_requests_in_flight", "Produce requests awaiting answers.",
                stats.requests_in_flight,
            )  # fmt: skip
            topics = CounterMetricFamily(
                "kafka_producer_producer_topic_metrics_record_send",
                "Records acknowledged, per topic.",
                labels=["client_id", "topic"],
            )
            for name, topic in sorted(stats.topics.items()):
                topics.add_metric([cid, name], topic.records_sent)
            yield topics
        if kind in ("consumer", "share_consumer"):
            base = f"kafka_{kind}_consumer_fetch_manager_metrics"
            consumed = getattr(stats, "records_consumed", None)
            if consumed is None:  # a share consumer counts deliveries
                consumed = stats.records_delivered
            yield counter(f"{base}_records_consumed", "Records handed out.", consumed)
            yield counter(f"{base}_bytes_consumed", "Record bytes fetched.", stats.bytes_fetched)
            partitions = getattr(stats, "partitions", {})
            lag = GaugeMetricFamily(
                f"{base}_records_lag", "Lag per partition.",
                labels=["client_id", "topic", "partition"],
            )  # fmt: skip
            lags = []
            for tp, p in sorted(partitions.items(), key=lambda kv: tuple(kv[0])):
                if getattr(p, "lag", None) is not None:
                    lag.add_metric([cid, tp.topic, str(tp.partition)], p.lag)
                    lags.append(p.lag)
            yield lag
            # No partition's lag known (none fetched yet): unknown, NaN as Java's Max.
            most = max(lags, default=float("nan"))
            yield gauge(f"{base}_records_lag_max", "The largest lag now (NaN: unknown).", most)
        yield from _node_families(kind, cid, stats.brokers)
        group = getattr(stats, "group", None)
        coordinator = getattr(group, "coordinator", None)
        if kind == "consumer" and coordinator is not None:
            yield from _coordinator_families(cid, coordinator)

    def ready(self) -> bool:
        return any(b.connected for b in self.client.statistics().brokers.values())


async def serve_client_metrics(
    client: Any,
    kind: str,
    listen: str,
    *,
    task_status: anyio.abc.TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``client``'s metrics on ``listen`` (``host:port``) until cancelled;
    ``task_status`` gets the bound address.

    Raises:
        OSError: the address cannot be bound.
    """
    from prometheus_client import CollectorRegistry, generate_latest

    collector = ClientCollector(client, kind)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    host, _, port = listen.rpartition(":")
    listener = await anyio.create_tcp_listener(
        local_host=host.strip("[]") or None, local_port=int(port)
    )

    async def exchange(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            head = b""
            try:
                with anyio.move_on_after(HEAD_TIMEOUT_S):
                    while b"\r\n\r\n" not in head and len(head) <= MAX_HEAD:
                        head += await stream.receive(MAX_HEAD)
                if b"\r\n\r\n" not in head:
                    await stream.send(http_response(400, b"bad request\n"))
                    return
                await stream.send(
                    http_answer(lambda: generate_latest(registry), collector.ready, head)
                )
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                pass

    async with listener:
        address = listener.extra(anyio.abc.SocketAttribute.local_address)
        bound = (str(address[0]), int(address[1]))
        client.metrics_address = bound
        task_status.started(bound)
        await listener.serve(exchange)


# Java's node metrics from a broker's snapshot: (name, help, BrokerStatistics attribute).
_NODE_TOTALS = (
    ("request", "Requests sent.", "requests_sent"),
    ("response", "Responses received.", "responses_received"),
    ("outgoing_byte", "Bytes sent.", "bytes_sent"),
    ("incoming_byte", "Bytes received.", "bytes_received"),
)
# (name, help, NodeWindowStatistics attribute), over the window.
_NODE_WINDOWED = (
    ("request_rate", "Requests sent per second.", "request_rate"),
    ("response_rate", "Responses received per second.", "response_rate"),
    ("outgoing_byte_rate", "Bytes sent per second.", "outgoing_byte_rate"),
    ("incoming_byte_rate", "Bytes received per second.", "incoming_byte_rate"),
    ("request_size_avg", "Bytes per request, average.", "request_size_avg"),
    ("request_size_max", "Bytes per request, maximum.", "request_size_max"),
    ("request_latency_avg", "Request latency (ms), average.", "request_latency_avg_ms"),
    ("request_latency_max", "Request latency (ms), maximum.", "request_latency_max_ms"),
)


def _node_families(kind: str, cid: str, brokers: Any) -> Iterator[Any]:
    """``kafka_<client>_<client>_node_metrics_*{client_id, node_id="node-1"}``."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    nodes = f"kafka_{kind}_{kind}_node_metrics"
    labels = ["client_id", "node_id"]
    totals = [
        (CounterMetricFamily(f"{nodes}_{name}", what, labels=labels), attr)
        for name, what, attr in _NODE_TOTALS
    ]
    windowed = [
        (GaugeMetricFamily(f"{nodes}_{name}", what, labels=labels), attr)
        for name, what, attr in _NODE_WINDOWED
    ]
    connected = 0
    for _, broker in sorted(brokers.items()):
        connected += int(broker.connected)
        node = [cid, broker.node_name]
        for family, attr in totals:
            family.add_metric(node, getattr(broker, attr))
        if broker.window is not None:
            for gauge, attr in windowed:
                gauge.add_metric(node, getattr(broker.window, attr))
    for family, _ in totals:
        yield family
    for gauge, _ in windowed:
        yield gauge
    count = GaugeMetricFamily(
        f"{nodes}_connection_count", "Connections to brokers up now.", labels=["client_id"]
    )
    count.add_metric([cid], connected)
    yield count


def _coordinator_families(cid: str, coordinator: Any) -> Iterator[Any]:
    """``kafka_consumer_consumer_coordinator_metrics_*{client_id}``: one per
    attribute of :class:`~trafka.sdk.statistics.CoordinatorStatistics` (Java's
    names); ``*_total`` are counters."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    base = "kafka_consumer_consumer_coordinator_metrics"
    for field in dataclasses.fields(coordinator):
        name = field.name
        value = getattr(coordinator, name)
        what = f"Java's consumer-coordinator-metrics {name.replace('_', '-')}."
        family: Any
        if name.endswith("_total"):
            family = CounterMetricFamily(f"{base}_{name[:-6]}", what, labels=["client_id"])
        else:
            family = GaugeMetricFamily(f"{base}_{name}", what, labels=["client_id"])
        family.add_metric([cid], value)
        yield family
