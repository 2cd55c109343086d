"""Client metrics push (KIP-714): the subscription/push state machine.

A client that has ``enable.metrics.push`` on asks one broker which of its
metrics the cluster wants (GetTelemetrySubscriptions, key 71), then pushes them
(PushTelemetry, key 72) every push interval, as OTLP ``MetricsData``
(:mod:`trafka.codec.otlp`). :class:`ClientTelemetry` is the I/O-free state
machine; :class:`~.driver.TelemetryDriver` (:mod:`.driver`) is the task that runs it over a
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
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from trafka.codec import ApiKey, ErrorCode
from trafka.codec.compression import compress
from trafka.codec.errors import EncodeError
from trafka.codec.messages import k71_get_telemetry_subscriptions as k71
from trafka.codec.messages import k72_push_telemetry as k72
from trafka.codec.otlp import CUMULATIVE, DELTA, DataPoint, Metric, encode_metrics

from ..errors import KafkaConnectionError, RequestTimeoutError

if TYPE_CHECKING:
    from ..statistics import TelemetryStatistics

from .metrics import MetricSample

__all__ = [
    "DEFAULT_PUSH_INTERVAL",
    "TRANSITIONS",
    "ClientTelemetry",
    "Subscription",
    "TelemetryState",
]

log = logging.getLogger("trafka.sdk.telemetry")

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
        from ..statistics import TelemetryStatistics

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
            return ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, k71.Request(client_instance_id=instance)
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
        return ApiKey.PUSH_TELEMETRY, k72.Request(
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
        log.debug("client telemetry registered with client instance id %s", instance)

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
        if api_key == ApiKey.PUSH_TELEMETRY:
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
