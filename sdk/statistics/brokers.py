"""Statistics snapshots every client has: per broker (its requests, throttling and
windowed rates), the metrics push (KIP-714), and the admin client's, which is
only those; with how a broker's snapshot is built from its connections' counters.

The rules of the snapshots are :mod:`trafka.sdk.statistics`'s; the counting is
:mod:`.counters`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from trafka.codec import api

from .counters import NodeCounters, WindowView

__all__ = [
    "AdminStatistics",
    "ApiStatistics",
    "BrokerStatistics",
    "NodeWindowStatistics",
    "TelemetryStatistics",
    "ThrottleEvent",
    "ThrottleStatistics",
    "broker_statistics",
    "node_window_statistics",
]


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
    ``node-id``): over the last 30 to 60 s (see :class:`~trafka.sdk.statistics.counters.Windowed`), read when the
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
class ThrottleEvent:
    """A broker's response said it throttles this client for a quota: what
    ``throttle_cb`` is given (confluent-kafka's ThrottleEvent's fields).

    Attributes:
        broker_name: the node's name (``node-1``).
        broker_id: its node id.
        throttle_time: how long the broker throttles, in seconds.
    """

    broker_name: str
    broker_id: int
    throttle_time: float

    def __str__(self) -> str:
        return (
            f"{self.broker_name}/{self.broker_id} throttled for {int(self.throttle_time * 1000)} ms"
        )


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
