"""Client metrics push (KIP-714): the subscription/push state machine and its driver.

A client that has ``enable.metrics.push`` on asks one broker which of its
metrics the cluster wants (GetTelemetrySubscriptions, key 71), then pushes them
(PushTelemetry, key 72) every push interval, as OTLP ``MetricsData``
(:mod:`trafka.codec.otlp`). :class:`ClientTelemetry` is the I/O-free state
machine; :class:`TelemetryDriver` is the task that runs it over a
:class:`~trafka.sdk.transport.Cluster`. The rules are those of Kafka's Java
client (``ClientTelemetryReporter``, ``ClientTelemetryUtils``,
``ClientTelemetryState`` and ``NetworkClient.TelemetrySender``):

* States: ``SUBSCRIPTION_NEEDED -> SUBSCRIPTION_IN_PROGRESS -> PUSH_NEEDED ->
  PUSH_IN_PROGRESS -> PUSH_NEEDED ...``, any of them back to
  ``SUBSCRIPTION_NEEDED`` on an error, and on close ``TERMINATING_PUSH_NEEDED ->
  TERMINATING_PUSH_IN_PROGRESS -> TERMINATED``. A transition outside
  :data:`TRANSITIONS` disables telemetry (Java's ``maybeSetState``).
* Timing: a request is due ``interval`` after the last one was answered. The
  first subscription is asked at once; after a subscription the first push
  waits a random 0.5-1.5 of the push interval (so that clients started
  together do not push together), later pushes one push interval. A
  subscription with no requested metrics is asked again after its interval.
  A push interval the broker gives as 0 or less becomes 5 minutes.
* The first subscription request carries the zero UUID; the broker assigns the
  client instance id, and every later request carries it.
* Errors in a response, as ``ClientTelemetryUtils.maybeFetchErrorIntervalMs``:
  ``UNKNOWN_SUBSCRIPTION_ID`` and ``UNSUPPORTED_COMPRESSION_TYPE``: ask for the
  subscription again at once; ``TELEMETRY_TOO_LARGE`` and
  ``THROTTLING_QUOTA_EXCEEDED``: ask again after the push interval (5 minutes
  before one is known); ``INVALID_REQUEST``, ``INVALID_RECORD``,
  ``UNSUPPORTED_VERSION`` and any other code: telemetry is disabled for the
  life of the client. An error answer received while terminating is ignored.
* A request that got no response (connection lost, timed out) is retriable:
  ask for the subscription again after 5 minutes. A node that does not speak
  the API (ApiVersions) fails the request without sending it, which is not
  retriable: telemetry is disabled, so a cluster without KIP-714 costs one
  look at the ApiVersions answer (Java since KAFKA-19747).
* Node: one broker is used for as long as its connection stays up (KIP-714's
  "sticky" node, Java's ``stickyNode``): the least loaded live connection when
  one is needed. When it goes away the next request picks another.
* Metrics: the broker's requested names are prefixes; an empty list means
  none, ``["*"]`` all (and the empty prefix matches all). Sums are cumulative
  from the client's start, or, when the subscription asks for delta
  temporality, the change since the last push with that push as start time;
  a change of temporality starts the deltas afresh. Gauges are values now.
* Compression: the first of the broker's accepted types (the broker lists them
  in its order of preference) that this client can write, with the codec's
  record-batch compressors; a compression failure sends the push uncompressed
  and that type is not tried again.
* ``TelemetryMaxBytes``: Java sends a push whatever its size and lets the
  broker answer ``TELEMETRY_TOO_LARGE``. Here a push larger than the limit is
  not sent: it is treated at once as that answer would be (no request that is
  known to fail goes on the wire).
* Close: when a subscription was received and the client is not waiting for
  one, one last push with ``terminating=true`` is sent, bounded by the close
  timeout; then the machine is ``TERMINATED`` and sends nothing more.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import anyio

from trafka.codec import ErrorCode, UnsupportedVersionError
from trafka.codec.compression import compress
from trafka.codec.errors import EncodeError, TrafkaError
from trafka.codec.messages import k71_get_telemetry_subscriptions as k71
from trafka.codec.messages import k72_push_telemetry as k72
from trafka.codec.otlp import CUMULATIVE, DELTA, DataPoint, Metric, encode_metrics

from ._validate import check_timeout
from .errors import KafkaConnectionError, RequestTimeoutError, UsageError
from .statistics import Interval, PartitionCounters, TelemetryStatistics

__all__ = [
    "DEFAULT_PUSH_INTERVAL",
    "GET_TELEMETRY_SUBSCRIPTIONS",
    "PUSH_TELEMETRY",
    "TRANSITIONS",
    "ClientTelemetry",
    "MetricSample",
    "Subscription",
    "TelemetryDriver",
    "TelemetryState",
]

log = logging.getLogger("trafka.sdk.telemetry")

GET_TELEMETRY_SUBSCRIPTIONS = 71
PUSH_TELEMETRY = 72
#: Java's ``ClientTelemetryReporter.DEFAULT_PUSH_INTERVAL_MS``, in seconds.
DEFAULT_PUSH_INTERVAL = 300.0
_JITTER = (0.5, 1.5)
_ZERO_UUID = uuid.UUID(int=0)
_KNOWN_CODECS = frozenset(range(5))  # none, gzip, snappy, lz4, zstd


class TelemetryState(enum.Enum):
    SUBSCRIPTION_NEEDED = "subscription needed"
    SUBSCRIPTION_IN_PROGRESS = "subscription in progress"
    PUSH_NEEDED = "push needed"
    PUSH_IN_PROGRESS = "push in progress"
    TERMINATING_PUSH_NEEDED = "terminating push needed"
    TERMINATING_PUSH_IN_PROGRESS = "terminating push in progress"
    TERMINATED = "terminated"


_S = TelemetryState
#: The allowed transitions (Java's ``ClientTelemetryState.validateTransition``).
TRANSITIONS: Mapping[TelemetryState, frozenset[TelemetryState]] = {
    _S.SUBSCRIPTION_NEEDED: frozenset({_S.SUBSCRIPTION_IN_PROGRESS, _S.TERMINATED}),
    _S.SUBSCRIPTION_IN_PROGRESS: frozenset(
        {_S.PUSH_NEEDED, _S.SUBSCRIPTION_NEEDED, _S.TERMINATING_PUSH_NEEDED, _S.TERMINATED}
    ),
    _S.PUSH_NEEDED: frozenset(
        {_S.PUSH_IN_PROGRESS, _S.SUBSCRIPTION_NEEDED, _S.TERMINATING_PUSH_NEEDED, _S.TERMINATED}
    ),
    _S.PUSH_IN_PROGRESS: frozenset(
        {_S.PUSH_NEEDED, _S.SUBSCRIPTION_NEEDED, _S.TERMINATING_PUSH_NEEDED, _S.TERMINATED}
    ),
    _S.TERMINATING_PUSH_NEEDED: frozenset({_S.TERMINATING_PUSH_IN_PROGRESS, _S.TERMINATED}),
    _S.TERMINATING_PUSH_IN_PROGRESS: frozenset({_S.TERMINATED}),
    _S.TERMINATED: frozenset(),
}
_TERMINATING = frozenset(
    {_S.TERMINATING_PUSH_NEEDED, _S.TERMINATING_PUSH_IN_PROGRESS, _S.TERMINATED}
)

# Response error codes and what follows them (seconds until the next
# subscription request; inf disables telemetry; None: the push interval).
_RETRY_AT_ONCE = frozenset(
    {ErrorCode.UNKNOWN_SUBSCRIPTION_ID, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE}
)
_RETRY_NEXT_INTERVAL = frozenset(
    {ErrorCode.TELEMETRY_TOO_LARGE, ErrorCode.THROTTLING_QUOTA_EXCEEDED}
)


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    """What the broker asked of this client (a GetTelemetrySubscriptions answer)."""

    client_instance_id: uuid.UUID
    subscription_id: int
    push_interval: float  # seconds
    accepted_compression_types: tuple[int, ...]
    telemetry_max_bytes: int
    delta_temporality: bool
    requested_metrics: tuple[str, ...]

    def selects(self, name: str) -> bool:
        """Whether the metric ``name`` is requested (prefix match; ``*`` is all)."""
        requested = self.requested_metrics
        if requested == ("*",):
            return True
        return any(name.startswith(prefix) for prefix in requested)


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


class ClientTelemetry:
    """The KIP-714 state machine (I/O-free); see the module doc for its rules.

    Args:
        resource: the OTLP resource attributes (Java's: ``transactional_id``,
            ``group_id``, ``group_instance_id``, ``group_member_id``,
            ``client_rack``, each when known; never ``client_id``, which the
            broker adds itself).
        rng: the random source of the first push's jitter.
        wall_clock: nanoseconds since the epoch, for the metrics' timestamps.
    """

    def __init__(
        self,
        *,
        resource: Mapping[str, str] | None = None,
        rng: random.Random | None = None,
        wall_clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.resource: dict[str, str] = dict(resource or {})
        self._rng = rng or random.Random()
        self._wall = wall_clock
        self.state = TelemetryState.SUBSCRIPTION_NEEDED
        self.enabled = True
        self.subscription: Subscription | None = None
        self._interval = 0.0
        self._last_request: float | None = None  # None: no answer yet (Java's 0)
        self._start_ns = wall_clock()
        # Delta temporality: per (name, attributes), the last value pushed and when.
        self._last_values: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, int]] = {}
        self._last_push_ns = self._start_ns
        self._unsupported_codecs: set[int] = set()
        self.subscriptions = 0
        self.pushes = 0
        self.push_failures = 0
        self.last_error: str | None = None

    # -- reading ------------------------------------------------------------------------

    @property
    def client_instance_id(self) -> uuid.UUID | None:
        sub = self.subscription
        return None if sub is None else sub.client_instance_id

    def statistics(self) -> TelemetryStatistics:
        sub = self.subscription
        return TelemetryStatistics(
            state=self.state.value,
            enabled=self.enabled,
            client_instance_id=None if sub is None else sub.client_instance_id,
            subscription_id=None if sub is None else sub.subscription_id,
            push_interval_ms=None if sub is None else round(sub.push_interval * 1000),
            subscriptions=self.subscriptions,
            pushes=self.pushes,
            push_failures=self.push_failures,
            last_error=self.last_error,
        )

    def time_to_next_update(self, now: float, request_timeout: float) -> float:
        """Seconds until a request is due (0: now; inf: never, telemetry disabled or done).

        A request in flight is given ``request_timeout`` (Java's
        ``timeToNextUpdate``).
        """
        if not self.enabled:
            return math.inf
        state = self.state
        if state in (_S.SUBSCRIPTION_IN_PROGRESS, _S.PUSH_IN_PROGRESS):
            return request_timeout
        if state in (_S.TERMINATING_PUSH_IN_PROGRESS, _S.TERMINATED):
            return math.inf
        if state is _S.TERMINATING_PUSH_NEEDED:
            return 0.0
        last = self._last_request if self._last_request is not None else -math.inf
        return max(0.0, last + self._interval - now)

    # -- transitions --------------------------------------------------------------------

    def _set_state(self, new: TelemetryState) -> bool:
        if new not in TRANSITIONS[self.state]:
            log.warning(
                "invalid telemetry state transition from %s to %s; disabling telemetry",
                self.state.value,
                new.value,
            )
            self.enabled = False
            return False
        self.state = new
        return True

    def _error_result(self, interval: float, now: float) -> None:
        self._interval = interval
        self._last_request = now
        if interval == math.inf:
            self.enabled = False

    def create_request(
        self, now: float, collect: Callable[[], Iterable[MetricSample]]
    ) -> tuple[int, Any] | None:
        """The request to send now, as ``(api_key, body)``, or None.

        ``collect`` is called for a push only, to measure the metrics.
        """
        state = self.state
        if state is _S.SUBSCRIPTION_NEEDED:
            if not self._set_state(_S.SUBSCRIPTION_IN_PROGRESS):
                return None
            sub = self.subscription
            instance = _ZERO_UUID if sub is None else sub.client_instance_id
            return GET_TELEMETRY_SUBSCRIPTIONS, k71.Request(client_instance_id=instance)
        if state not in (_S.PUSH_NEEDED, _S.TERMINATING_PUSH_NEEDED):
            return None
        sub = self.subscription
        if sub is None:
            self._set_state(_S.SUBSCRIPTION_NEEDED)
            return None
        terminating = state is _S.TERMINATING_PUSH_NEEDED
        if not self._set_state(
            _S.TERMINATING_PUSH_IN_PROGRESS if terminating else _S.PUSH_IN_PROGRESS
        ):
            return None
        try:
            payload = self._payload(sub, collect())
        except Exception as exc:  # a collector or encoder bug must not stop the client
            log.warning("cannot build the telemetry payload: %r", exc)
            self.push_failures += 1
            self.last_error = type(exc).__name__
            if terminating:
                self._set_state(_S.TERMINATED)
            else:
                self._set_state(_S.SUBSCRIPTION_NEEDED)
                self._error_result(sub.push_interval, now)
            return None
        codec, metrics = self._compress(sub, payload)
        if 0 < sub.telemetry_max_bytes < len(metrics):
            log.debug(
                "telemetry payload of %d bytes exceeds the broker's %d; not sent",
                len(metrics),
                sub.telemetry_max_bytes,
            )
            self.push_failures += 1
            self.last_error = ErrorCode.TELEMETRY_TOO_LARGE.name
            if terminating:
                self._set_state(_S.TERMINATED)
            else:
                self._set_state(_S.SUBSCRIPTION_NEEDED)
                self._error_result(sub.push_interval, now)
            return None
        return PUSH_TELEMETRY, k72.Request(
            client_instance_id=sub.client_instance_id,
            subscription_id=sub.subscription_id,
            terminating=terminating,
            compression_type=codec,
            metrics=metrics,
        )

    def handle_subscriptions(self, now: float, response: Any) -> None:
        """Take a GetTelemetrySubscriptions answer."""
        sub = self.subscription
        interval = _error_interval(response.error_code, -1.0 if sub is None else sub.push_interval)
        if interval is not None:
            self.last_error = _code_name(response.error_code)
            if not self._set_state(_S.SUBSCRIPTION_NEEDED):
                log.debug("telemetry subscription error in state %s", self.state.value)
            self._error_result(interval, now)
            return
        instance = response.client_instance_id
        if instance == _ZERO_UUID:
            if sub is None:
                # Java raises here (validateClientInstanceId); keep the client
                # alive and ask again after the default interval instead.
                log.warning("the broker assigned no client instance id; asking again later")
                self.last_error = "INVALID_CLIENT_INSTANCE_ID"
                if self._set_state(_S.SUBSCRIPTION_NEEDED):
                    self._error_result(DEFAULT_PUSH_INTERVAL, now)
                return
            instance = sub.client_instance_id  # the broker keeps the one it gave
        push_interval = response.push_interval_ms / 1000
        if push_interval <= 0:
            push_interval = DEFAULT_PUSH_INTERVAL
        new = Subscription(
            client_instance_id=instance,
            subscription_id=response.subscription_id,
            push_interval=push_interval,
            accepted_compression_types=tuple(
                c for c in response.accepted_compression_types if c in _KNOWN_CODECS
            ),
            telemetry_max_bytes=response.telemetry_max_bytes,
            delta_temporality=response.delta_temporality,
            requested_metrics=tuple(response.requested_metrics),
        )
        if sub is not None and sub.delta_temporality != new.delta_temporality:
            self._last_values.clear()
            self._last_push_ns = self._wall()
        if self.state in _TERMINATING:
            return  # closing began after the request left: ignore the answer
        target = _S.PUSH_NEEDED if new.requested_metrics else _S.SUBSCRIPTION_NEEDED
        if not self._set_state(target):
            return
        self.subscription = new
        self.subscriptions += 1
        if target is _S.PUSH_NEEDED:
            self._interval = round(self._rng.uniform(*_JITTER) * push_interval, 3)
        else:
            self._interval = push_interval
        self._last_request = now
        log.info("client telemetry registered with client instance id %s", instance)

    def handle_push(self, now: float, response: Any) -> None:
        """Take a PushTelemetry answer."""
        sub = self.subscription
        interval = _error_interval(response.error_code, -1.0 if sub is None else sub.push_interval)
        if interval is not None:
            self.push_failures += 1
            self.last_error = _code_name(response.error_code)
            if self.state in _TERMINATING:
                if self.state is _S.TERMINATING_PUSH_IN_PROGRESS:
                    self._set_state(_S.TERMINATED)
                return
            self._set_state(_S.SUBSCRIPTION_NEEDED)
            self._error_result(interval, now)
            return
        self.pushes += 1
        if self.state is _S.TERMINATING_PUSH_IN_PROGRESS:
            self._set_state(_S.TERMINATED)
            return
        self._last_request = now
        self._interval = sub.push_interval if sub is not None else DEFAULT_PUSH_INTERVAL
        self._set_state(_S.PUSH_NEEDED)

    def request_failed(self, now: float, api_key: int, error: BaseException | None) -> None:
        """A request of ``api_key`` got no answer: ``error`` None or retriable (the
        connection was lost, the request timed out) waits 5 minutes; any other
        (the node does not speak the API) disables telemetry."""
        if api_key == PUSH_TELEMETRY:
            self.push_failures += 1
        self.last_error = None if error is None else type(error).__name__
        if self.state is _S.TERMINATING_PUSH_IN_PROGRESS:
            self._set_state(_S.TERMINATED)
            return
        if self.state in _TERMINATING:
            return
        if self.state not in (_S.SUBSCRIPTION_IN_PROGRESS, _S.PUSH_IN_PROGRESS):
            self._error_result(math.inf, now)
            return
        retriable = error is None or isinstance(
            error, KafkaConnectionError | RequestTimeoutError | TimeoutError
        )
        self._error_result(DEFAULT_PUSH_INTERVAL if retriable else math.inf, now)
        self._set_state(_S.SUBSCRIPTION_NEEDED)

    def initiate_close(self) -> bool:
        """The client is closing: True when a terminating push is now due."""
        if self._last_request is None or self.state is _S.SUBSCRIPTION_NEEDED:
            return False  # never subscribed, or waiting for a subscription
        if not self.enabled or self.state in _TERMINATING:
            return False
        return self._set_state(_S.TERMINATING_PUSH_NEEDED)

    def close(self) -> None:
        """Nothing more is sent."""
        if self.state is not _S.TERMINATED:
            self._set_state(_S.TERMINATED)

    # -- the payload ---------------------------------------------------------------------

    def _payload(self, sub: Subscription, samples: Iterable[MetricSample]) -> bytes:
        now_ns = self._wall()
        delta = sub.delta_temporality
        last_values = self._last_values
        start_ns = self._last_push_ns if delta else self._start_ns
        metrics: list[Metric] = []
        for s in samples:
            if not sub.selects(s.name):
                continue
            attributes = dict(s.attributes)
            if s.kind == "sum":
                value = s.value
                point_start = start_ns
                if delta:
                    key = (s.name, s.attributes)
                    previous = last_values.get(key)
                    last_values[key] = (value, now_ns)
                    if previous is not None:
                        value = value - previous[0]
                        point_start = previous[1]
                metrics.append(
                    Metric(
                        name=s.name,
                        kind="sum",
                        points=(
                            DataPoint(
                                value=value,
                                time_unix_nano=now_ns,
                                start_time_unix_nano=point_start,
                                attributes=attributes,
                            ),
                        ),
                        description=s.description,
                        unit=s.unit,
                        temporality=DELTA if delta else CUMULATIVE,
                        monotonic=True,
                    )
                )
            else:
                metrics.append(
                    Metric(
                        name=s.name,
                        kind="gauge",
                        points=(
                            DataPoint(value=s.value, time_unix_nano=now_ns, attributes=attributes),
                        ),
                        description=s.description,
                        unit=s.unit,
                    )
                )
        self._last_push_ns = now_ns
        return encode_metrics(metrics, resource=self.resource)

    def _compress(self, sub: Subscription, payload: bytes) -> tuple[int, bytes]:
        for codec in sub.accepted_compression_types:
            if codec in self._unsupported_codecs:
                continue
            if codec == 0:
                return 0, payload
            try:
                return codec, compress(codec, payload)
            except EncodeError as exc:
                log.info("telemetry compression %d failed (%s); sending uncompressed", codec, exc)
                self._unsupported_codecs.add(codec)
                return 0, payload
        return 0, payload


def _error_interval(code: int, push_interval: float) -> float | None:
    """Java's ``maybeFetchErrorIntervalMs``: None for no error, else the wait
    before asking for a subscription again (inf: disable telemetry)."""
    if code == 0:
        return None
    if code in _RETRY_AT_ONCE:
        return 0.0
    if code in _RETRY_NEXT_INTERVAL:
        return push_interval if push_interval >= 0 else DEFAULT_PUSH_INTERVAL
    if code not in (
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_RECORD,
        ErrorCode.UNSUPPORTED_VERSION,
    ):
        log.error("unexpected telemetry error code %d; disabling telemetry", code)
    return math.inf


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


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
        averages, p + "request.latency", "Produce", 0, brokers, peaks, "produce request latency"
    )
    out += _partition_samples(averages, partitions, acks)
    return out


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
        1,
        brokers,
        peaks,
        "fetch latency",
    )
    out += _api_latency(
        averages,
        p + "coordinator.commit.latency",
        "OffsetCommit",
        8,
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
    s = SHARE_CONSUMER_PREFIX
    brokers = stats.brokers
    out = _common_samples(CONSUMER_PREFIX, averages, brokers, peaks, now)

    # consumer-share-metrics: the application's polls.
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

    # consumer-share-fetch-manager-metrics.
    def responses(api_name: str) -> int:
        return sum(a.responses for b in brokers.values() if (a := b.apis.get(api_name)))

    f = s + "fetch.manager."
    out += _meter(averages, f + "fetch", responses("ShareFetch"), now, "fetch requests")
    out += _api_latency(
        averages, f + "fetch.latency", "ShareFetch", 78, brokers, peaks, "share fetch latency"
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

    # consumer-share-coordinator-metrics: the heartbeats.
    c = s + "coordinator."
    out += _meter(averages, c + "heartbeat", responses("ShareGroupHeartbeat"), now, "heartbeats")
    out.append(
        MetricSample(
            c + "heartbeat.response.time.max",
            "gauge",
            _peak(peaks, 76),
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


# -- the driver --------------------------------------------------------------------------


class TelemetryDriver:
    """Runs a :class:`ClientTelemetry` over a client's cluster, in its own task,
    so that it never delays the client's own requests.

    Args:
        cluster: the client's :class:`~trafka.sdk.transport.Cluster`.
        telemetry: the state machine.
        collect: measures the client's metrics (called for each push).
        request_timeout: seconds, the client's ``request.timeout.ms``.
    """

    def __init__(
        self,
        cluster: Any,
        telemetry: ClientTelemetry,
        collect: Callable[[], Sequence[MetricSample]],
        request_timeout: float,
    ) -> None:
        self.cluster = cluster
        self.telemetry = telemetry
        self._collect = collect
        self._request_timeout = request_timeout
        self._wake = anyio.Event()
        self._subscribed = anyio.Event()
        self._idle = anyio.Event()  # set when no request is out (for close)
        self._idle.set()
        self._node: Any = None  # the sticky connection
        self._finished = anyio.Event()

    async def run(self) -> None:
        """The loop; returns when telemetry is disabled or terminated."""
        machine = self.telemetry
        try:
            while True:
                now = anyio.current_time()
                delay = machine.time_to_next_update(now, self._request_timeout)
                if delay == math.inf and (
                    machine.state is TelemetryState.TERMINATED or not machine.enabled
                ):
                    return
                if delay > 0:
                    self._wake = anyio.Event()
                    with anyio.move_on_after(delay):
                        await self._wake.wait()
                    continue
                conn = await self._connection()
                if conn is None:
                    continue
                await self._exchange(conn)
        finally:
            self._subscribed.set()  # wake client_instance_id waiters: nothing more comes
            self._idle.set()
            self._finished.set()

    async def _connection(self) -> Any:
        conn = self._node
        if conn is not None and conn.alive:
            return conn
        self._node = None
        conn = self.cluster.least_loaded_connection()
        if conn is None:
            try:
                conn = await self.cluster.any_connection()
            except TrafkaError:
                await anyio.sleep(self.cluster.config.reconnect_backoff_ms / 1000)
                return None
        self._node = conn
        return conn

    async def _exchange(self, conn: Any) -> None:
        machine = self.telemetry
        now = anyio.current_time()
        # Java picks the request before the version: a node without the API
        # fails it (UnsupportedVersionException) without sending it.
        api_key = (
            GET_TELEMETRY_SUBSCRIPTIONS
            if machine.state is TelemetryState.SUBSCRIPTION_NEEDED
            else PUSH_TELEMETRY
        )
        if not conn.supports(api_key):
            log.debug(
                "node %d does not support API %d: client telemetry off", conn.node_id, api_key
            )
            machine.request_failed(
                now, api_key, UnsupportedVersionError(f"node {conn.node_id} lacks API {api_key}")
            )
            return
        request = machine.create_request(now, self._collect)
        if request is None:
            await anyio.lowlevel.checkpoint()
            return
        api_key, body = request
        self._idle = anyio.Event()
        try:
            response = await conn.request(api_key, body, timeout=self._request_timeout)
        except (TrafkaError, UnsupportedVersionError, OSError) as exc:
            machine.request_failed(anyio.current_time(), api_key, exc)
            if not conn.alive:
                self._node = None
        else:
            now = anyio.current_time()
            if api_key == GET_TELEMETRY_SUBSCRIPTIONS:
                machine.handle_subscriptions(now, response)
                if machine.subscription is not None:
                    self._subscribed.set()
            else:
                machine.handle_push(now, response)
        finally:
            self._idle.set()

    async def client_instance_id(self, timeout: float) -> uuid.UUID | None:
        """Wait up to ``timeout`` seconds for the first subscription's client instance id."""
        if timeout < 0:
            raise ValueError("the timeout cannot be negative")
        machine = self.telemetry
        if machine.client_instance_id is None and not self._finished.is_set():
            with anyio.move_on_after(timeout):
                await self._subscribed.wait()
        return machine.client_instance_id

    async def close(self, timeout: float) -> None:
        """Send the terminating push (within ``timeout`` seconds) and stop."""
        machine = self.telemetry
        with anyio.move_on_after(timeout):
            # A request is out: its answer first. Waiting on a set event is still a
            # checkpoint, in which the driver may send a push: look again after
            # each wait, so that closing never begins with a push in flight (its
            # answer would then find the machine terminating and disable it).
            while True:
                idle = self._idle
                await idle.wait()
                if self._idle.is_set():
                    break
            if not self._finished.is_set() and machine.initiate_close():
                self._wake.set()
                await self._finished.wait()
        machine.close()
        self._wake.set()


def client_telemetry(
    config: Any,
    cluster: Any,
    resource: Mapping[str, str],
    samples: Callable[[], list[MetricSample]],
) -> TelemetryDriver | None:
    """The push task of a client (None when ``enable.metrics.push`` is off): its
    resource attributes, with ``client_rack`` added when the config sets one (Java's
    ``ClientTelemetryProvider`` does so for every client), the client's samples,
    and its request timeout."""
    if not config.enable_metrics_push:
        return None
    attributes = dict(resource)
    if config.client_rack:
        attributes["client_rack"] = config.client_rack
    return TelemetryDriver(
        cluster, ClientTelemetry(resource=attributes), samples, config.request_timeout_ms / 1000
    )


async def instance_id(driver: TelemetryDriver | None, timeout_ms: float) -> uuid.UUID | None:
    """A client's ``client_instance_id(timeout_ms)`` over its push task (None: push off).

    Raises:
        TypeError, ValueError: ``timeout_ms`` is not a number >= 0.
        UsageError: push is off.
    """
    check_timeout("timeout_ms", timeout_ms, none=False)
    if driver is None:
        raise disabled_error()
    return await driver.client_instance_id(timeout_ms / 1000)


def disabled_error() -> UsageError:
    """Java's IllegalStateException for ``clientInstanceId`` with push disabled."""
    return UsageError("telemetry is not enabled: set enable.metrics.push to true")
