"""The proxy's Prometheus metrics.

=================================================================  ==============================
metric                                                             what
=================================================================  ==============================
``trafka_proxy_requests_total{request}``                           client requests, per API
``trafka_proxy_request_bytes_total{request}``                      their bytes
``trafka_proxy_response_bytes_total{request}``                     answer bytes written to clients
``trafka_proxy_records_routed_total{topic,outcome}``               records of routed Produce requests:
                                                                   ``moved`` (to their key's
                                                                   partition) or ``kept``
``trafka_proxy_upstream_request_seconds{broker}``                  round trips on the proxy's own
                                                                   upstream connections (histogram)
``trafka_proxy_produce_coalesced_total{side}``                    plain producers' requests that
                                                                   joined a leader's accumulator
                                                                   (``client``), and the requests
                                                                   the accumulators sent
                                                                   (``upstream``)
``trafka_proxy_errors_total{kind}``                                what a client sees fail:
                                                                   ``bad_request`` (a request that
                                                                   does not decode: its connection
                                                                   closed), ``part_failed`` (a part
                                                                   of a routed Produce got no
                                                                   answer from its broker),
                                                                   ``too_large`` (a batch past
                                                                   max_decompressed_bytes),
                                                                   ``timeout`` (a request not
                                                                   received whole in
                                                                   request.receive.timeout.ms),
                                                                   ``filter`` (a filter raised: its
                                                                   connection closed),
                                                                   ``upstream_unreachable`` (no
                                                                   upstream broker for a client's
                                                                   first request: closed)
``trafka_proxy_flow_control_total{kind}``                          what the proxy made a client
                                                                   wait for, no error: ``held`` (an
                                                                   idempotent producer's batch not
                                                                   written until an earlier one of
                                                                   its partition is answered; the
                                                                   client sends it again),
                                                                   ``budget_wait`` (a request read
                                                                   once the request budget had room)
``trafka_proxy_idle_connections_closed_total``                     client connections closed after
                                                                   connections.max.idle.ms silent
``trafka_proxy_sasl_clients_total{outcome}``                      SASL client connections that
                                                                   authenticated: ``routed`` (the
                                                                   proxy holds a login for their
                                                                   principal), ``unrouted``
                                                                   (forwarded unrouted) or
                                                                   ``refused``
``trafka_proxy_sasl_upstream_logins_total``                        upstream connections logged in
                                                                   as a client's principal
``trafka_proxy_connections_open`` / ``connections_total``          client connections
``trafka_proxy_upstream_connections_open``                         client connections' own upstream
                                                                   connections (opened at a
                                                                   client's first request)
``trafka_proxy_memory_pool_used_bytes`` / ``available_bytes``      the request budget
                                                                   (``queued_max_request_bytes``),
                                                                   as Kafka's SocketServer
                                                                   ``MemoryPoolUsed`` /
                                                                   ``MemoryPoolAvailable`` (+Inf:
                                                                   no bound)
``trafka_proxy_memory_pool_waiting``                               client connections whose
                                                                   reading waits for room in it
``trafka_proxy_worker_up{worker}`` / ``worker_restarts_total``     with ``--workers``: whether each
                                                                   worker serves, and how often the
                                                                   supervisor started it again
=================================================================  ==============================

With ``trafka proxy --workers N`` the supervisor's listener serves every
worker's metrics in one exposition (:func:`merged_exposition`): the samples
above, each with a ``worker`` label (``sum without (worker) (...)`` gives the
proxy's totals), and the two ``worker`` families.

Rules: counters are plain integers bumped on the proxy's trio thread (the
record counts also by the routing worker threads, whose ``+=`` on an int the
GIL keeps whole); ``prometheus_client`` is imported at the first scrape, as
brokerlite's (:mod:`trafka.brokerlite.metrics`); each proxy has its own registry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trafka.codec.protocol import api
from trafka.common.histograms import Histograms

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from trafka.common.request_budget import RequestBudget

    from .filters import Filter, Sample

__all__ = ["ProxyMetrics", "merged_exposition"]

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)


@dataclass(slots=True)
class ProxyStatistics:
    """What the proxy has done so far."""

    connections: int = 0
    open_connections: int = 0
    # Client connections' own upstream connections open now (one per client
    # connection that has sent a request).
    upstream_connections: int = 0
    refused_frames: int = 0
    timeouts: int = 0  # half-received requests; idle connections closed: idle_closed
    idle_closed: int = 0
    closed: dict[str, int] = field(default_factory=dict)  # by the proxy, by why (_closing)
    metadata_refreshes: int = 0  # the proxy's own Metadata requests (ProxyServices.refresh)
    # The filters' counters, by the names they give them (Filter.statistics).
    filters: dict[str, Any] = field(default_factory=dict)
    nodes: dict[int, tuple[str, int]] = field(default_factory=dict)
    # The named listeners' broker ports (.listeners): (listener, node id) -> port.
    listener_nodes: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def routing(self) -> Any:
        """Key routing's counters (:class:`~.keyrouting.stats.RouteStats`), when the
        chain holds it; else None."""
        return self.filters.get("routing")

    @property
    def sasl(self) -> dict[str, int]:
        """The SASL watch's counters (:class:`~.principals.SaslPrincipals`): SASL
        clients that authenticated, by outcome (routed, unrouted, refused), and
        ``logins``, the per-principal pools' connections that logged in; empty
        when the chain holds no SASL watch."""
        sasl: dict[str, int] = self.filters.get("sasl", {})
        return sasl


class ProxyMetrics:
    """The counters the proxy keeps, and its Prometheus registry."""

    def __init__(
        self,
        stats: ProxyStatistics,
        budget: RequestBudget | None = None,
        filters: Sequence[Filter] = (),
    ) -> None:
        self.stats = stats
        self.budget = budget
        self.filters = filters  # each adds its own (Filter.samples)
        self.requests: dict[int, int] = {}
        self.request_bytes: dict[int, int] = {}
        self.response_bytes: dict[int, int] = {}
        self._latency = Histograms(_BUCKETS)  # per broker
        self._registry: CollectorRegistry | None = None

    def request(self, api_key: int, nbytes: int) -> None:
        self.requests[api_key] = self.requests.get(api_key, 0) + 1
        self.request_bytes[api_key] = self.request_bytes.get(api_key, 0) + nbytes

    def answered(self, api_key: int, nbytes: int) -> None:
        self.response_bytes[api_key] = self.response_bytes.get(api_key, 0) + nbytes

    def upstream(self, node_id: int, seconds: float) -> None:
        """One pooled request to broker ``node_id`` was answered in ``seconds``."""
        self._latency.observe(node_id, seconds)

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric now."""
        from prometheus_client import CollectorRegistry, generate_latest

        if self._registry is None:
            self._registry = CollectorRegistry(auto_describe=False)
            self._registry.register(self)
        return generate_latest(self._registry)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for name, values, what in (
            ("requests", self.requests, "Client requests, per API."),
            ("request_bytes", self.request_bytes, "Bytes of client requests, per API."),
            ("response_bytes", self.response_bytes, "Answer bytes written to clients, per API."),
        ):
            family = CounterMetricFamily(f"trafka_proxy_{name}", what, labels=["request"])
            for key, value in sorted(values.items()):
                family.add_metric([_api_name(key)], value)
            yield family
        stats = self.stats
        extra: dict[str, list[Sample]] = {}
        for f in self.filters:
            for sample in f.samples():
                extra.setdefault(sample.family, []).append(sample)
        yield from _errors_and_flow(stats, self.budget, extra)
        yield from _families(extra)
        yield GaugeMetricFamily(
            "trafka_proxy_connections_open", "Client connections open.", stats.open_connections
        )
        yield CounterMetricFamily(
            "trafka_proxy_connections", "Client connections accepted.", stats.connections
        )
        yield GaugeMetricFamily(
            "trafka_proxy_upstream_connections_open",
            "Client connections' own upstream connections open.",
            stats.upstream_connections,
        )
        budget = self.budget
        if budget is not None:
            yield GaugeMetricFamily(
                "trafka_proxy_memory_pool_used_bytes",
                "Bytes of requests the proxy holds (queued_max_request_bytes).",
                budget.used,
            )
            yield GaugeMetricFamily(
                "trafka_proxy_memory_pool_available_bytes",
                "Bytes of requests the proxy may still take in.",
                float("inf") if budget.limit is None else max(budget.limit - budget.used, 0),
            )
            yield GaugeMetricFamily(
                "trafka_proxy_memory_pool_waiting",
                "Client connections whose reading waits for room in the request budget.",
                budget.waiting,
            )
        yield self._latency.family(
            "trafka_proxy_upstream_request_seconds",
            "Round trips on the proxy's own upstream connections.",
            "broker",
        )


def _errors_and_flow(
    stats: ProxyStatistics, budget: RequestBudget | None, extra: dict[str, list[Sample]]
) -> Iterator[Any]:
    """What failed for clients, apart from what the proxy made them wait for
    or do again without an error (flow control) and routine closes."""
    from prometheus_client.core import CounterMetricFamily

    errors = CounterMetricFamily(
        "trafka_proxy_errors",
        "Requests and parts that failed for their client, by why.",
        labels=["kind"],
    )
    for kind, value in (
        ("bad_request", stats.refused_frames),
        ("timeout", stats.timeouts),
        ("filter", stats.closed.get("filter", 0)),
        ("upstream_unreachable", stats.closed.get("upstream_unreachable", 0)),
    ):
        errors.add_metric([kind], value)
    for sample in extra.pop("trafka_proxy_errors", ()):
        errors.add_metric([v for _, v in sample.labels], sample.value)
    yield errors
    flow = CounterMetricFamily(
        "trafka_proxy_flow_control",
        "What the proxy made clients wait for or send again, without an error: "
        "held (an idempotent batch held back until an earlier one is answered), "
        "budget_wait (a request read only once queued_max_request_bytes had room).",
        labels=["kind"],
    )
    flow.add_metric(["budget_wait"], 0 if budget is None else budget.waited)
    for sample in extra.pop("trafka_proxy_flow_control", ()):
        flow.add_metric([v for _, v in sample.labels], sample.value)
    yield flow
    yield CounterMetricFamily(
        "trafka_proxy_idle_connections_closed",
        "Client connections closed after connections.max.idle.ms without a request.",
        stats.idle_closed,
    )


def _families(extra: dict[str, list[Sample]]) -> Iterator[Any]:
    """The filters' own metric families (:meth:`~.filters.Filter.samples`)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    for name, samples in extra.items():
        first = samples[0]
        kind = CounterMetricFamily if first.kind == "counter" else GaugeMetricFamily
        family = kind(name, first.help, labels=[k for k, _ in first.labels])
        for sample in samples:
            family.add_metric([v for _, v in sample.labels], sample.value)
        yield family


def merged_exposition(
    pages: Mapping[int, bytes | None], up: Mapping[int, bool], restarts: Mapping[int, int]
) -> bytes:
    """The workers' expositions (``pages``, by worker; None: it did not answer)
    as one, each sample labelled with its ``worker``, then whether each is up
    and how often it was restarted.

    Raises:
        ValueError: a page that is not Prometheus text.
    """
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, Metric] = {}
    for worker, page in sorted(pages.items()):
        if page is None:
            continue
        for family in text_string_to_metric_families(page.decode()):
            merged = families.get(family.name)
            if merged is None:
                merged = Metric(family.name, family.documentation, family.type, family.unit)
                families[family.name] = merged
            for sample in family.samples:
                labels = {**sample.labels, "worker": str(worker)}
                merged.samples.append(sample._replace(labels=labels))
    alive = GaugeMetricFamily(
        "trafka_proxy_worker_up", "Whether the worker serves (1) or not.", labels=["worker"]
    )
    started = CounterMetricFamily(
        "trafka_proxy_worker_restarts",
        "Times the supervisor started the worker again.",
        labels=["worker"],
    )
    for worker in sorted(up):
        alive.add_metric([str(worker)], 1 if up[worker] else 0)
        started.add_metric([str(worker)], restarts.get(worker, 0))

    class _Collected:
        def collect(self) -> Iterator[Metric]:
            yield from families.values()
            yield alive
            yield started

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collected())
    return generate_latest(registry)


def _api_name(key: int) -> str:
    try:
        return api(key).name
    except (KeyError, ValueError):
        return str(key)
