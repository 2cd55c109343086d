"""Client statistics, the counting side: the counters the protocol layers keep.

:mod:`.statistics` turns them into the snapshots users read; this module is
what the I/O-free layers and the drivers import, so that counting costs an
import of plain classes, not of every snapshot type.

Rules:

* Counters live in the I/O-free layers, next to the event they count: a request
  framed or answered (:class:`~trafka.sdk.connection_state.ConnectionState`), a
  batch acknowledged, failed or retried (the accumulator), records handed to the
  application (the fetcher), a transaction ended, a commit done. Nothing is
  counted per record on a hot path: record counts come from batch and chunk
  lengths.
* Totals only grow, from the moment the client opened; the few values that say
  "now" (connected, in flight, buffered, positions, lag) are read when the
  snapshot is taken. A reconnect adds to the same node's totals (``connects``
  counts them), so a rate is the difference of two snapshots over their time.
* Quota throttling (KIP-219) is counted per broker from every response that
  carries a positive ``throttle_time_ms``, whatever its API, as librdkafka's
  ``throttle`` window and Java's ``throttle-time-avg``/``-max`` do (those two
  average over every response; here the average is over the throttled ones,
  which says how long a throttle lasts, and ``count`` says how often).
* Brokers are keyed by node id. A client's separate coordinator connection to a
  node counts under that node; the bootstrap connections made before metadata
  names any node are under negative ids (``-1`` for the first bootstrap
  address).
* Rates, and the ``-avg``/``-max`` that Java computes over a window, come from
  :class:`Windowed`: Java's ``SampledStat`` with its defaults
  (``metrics.num.samples`` = 2 samples of ``metrics.sample.window.ms`` = 30 s).
  An event goes into the newest sample until that sample is 30 s old, then a
  new one starts and the oldest beyond two is dropped; a reading ignores the
  samples started 60 s or more before it. A rate divides the events (or their
  sum, for bytes) of the live samples by the time since the oldest one started,
  stretched to at least one full window as Java's ``Rate.windowSize`` does
  (so a client's first seconds do not read as a burst). An ``-avg`` or ``-max``
  with no event in the window is NaN, as Java's. Every reading takes ``now``,
  the driver's clock: nothing here reads a clock, so tests control time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

__all__ = [
    "WINDOW_S",
    "WINDOW_SAMPLES",
    "CoordinatorCounters",
    "Interval",
    "NodeCounters",
    "PartitionCounters",
    "TopicCounters",
    "WindowView",
    "Windowed",
    "error_name",
    "topic_totals",
]


@dataclasses.dataclass(slots=True)
class Interval:
    """Totals a client keeps for an interval metric (KIP-714's ``.avg``/``.max``):
    added ``total`` over ``count`` events, the ``peak`` since the last push
    (reset by it) and the ``max`` of all time (for ``statistics()``)."""

    total: float = 0.0
    count: int = 0
    peak: float = 0.0
    max: float = 0.0

    def add(self, value: float) -> None:
        self.total += value
        self.count += 1
        if value > self.peak:
            self.peak = value
            if value > self.max:
                self.max = value

    def take_peak(self) -> float:
        peak, self.peak = self.peak, 0.0
        return peak


#: Java's metrics defaults: ``metrics.num.samples`` and ``metrics.sample.window.ms`` (seconds).
WINDOW_SAMPLES = 2
WINDOW_S = 30.0


class Windowed:
    """Events in a sliding window (Java's ``SampledStat`` with its default of
    :data:`WINDOW_SAMPLES` = 2 samples of :data:`WINDOW_S` seconds; see the
    module doc), with their all-time ``count`` and ``sum`` for the ``-total``
    metrics.

    The current sample is kept in plain attributes (``start``, ``events``,
    ``total``, ``peak``) and the one before it in ``previous``: recording, once
    per request on the connection's path, costs a compare and a few additions.
    """

    __slots__ = ("count", "events", "peak", "previous", "start", "sum", "total")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.start = -math.inf  # the first event starts a sample
        self.events = 0
        self.total = 0.0
        self.peak = 0.0
        self.previous: tuple[float, int, float, float] | None = None

    def record(self, now: float, value: float = 0.0) -> None:
        """One event of ``value`` at ``now`` (the driver's clock, seconds)."""
        self.count += 1
        self.sum += value
        if now - self.start >= WINDOW_S:
            if self.events:
                self.previous = (self.start, self.events, self.total, self.peak)
            self.start, self.events, self.total, self.peak = now, 0, 0.0, value
        self.events += 1
        self.total += value
        if value > self.peak:
            self.peak = value

    @property
    def samples(self) -> list[tuple[float, int, float, float]]:
        """``(start, events, sum, max)`` per sample kept, oldest first."""
        out = [] if self.previous is None else [self.previous]
        if self.events:
            out.append((self.start, self.events, self.total, self.peak))
        return out


class WindowView:
    """A reading at ``now`` of one or more :class:`Windowed` (the connections of
    one broker are read together): the events, sum and max of their live
    samples, and the time they span."""

    __slots__ = ("events", "max", "span", "sum")

    def __init__(self, windows: Iterable[Windowed], now: float) -> None:
        live = [s for w in windows for s in w.samples if now - s[0] < WINDOW_SAMPLES * WINDOW_S]
        self.events = int(sum(s[1] for s in live))
        self.sum = sum(s[2] for s in live)
        self.max = max((s[3] for s in live if s[1]), default=math.nan)
        span = now - min((s[0] for s in live), default=now)
        # Java's Rate.windowSize: at least (samples - 1) full windows.
        full = int(span // WINDOW_S)
        if full < WINDOW_SAMPLES - 1:
            span += (WINDOW_SAMPLES - 1 - full) * WINDOW_S
        self.span = span

    def rate(self, per: float = 1.0) -> float:
        """Events per second (``per``: 3600 for per hour)."""
        return self.events / self.span * per

    def sum_rate(self) -> float:
        """The values' sum per second (bytes per second)."""
        return self.sum / self.span

    def avg(self) -> float:
        """The values' average (NaN with no event in the window)."""
        return self.sum / self.events if self.events else math.nan


class NodeCounters:
    """Totals for the connections of one connection id (kept across reconnects).

    ``apis`` maps an API key to ``[requests, responses, latency_total_s, latency_max_s]``.
    ``throttles``, ``throttle_ms_total`` and ``throttle_ms_max`` count the
    responses with a throttle time; ``throttle_held`` the requests the driver
    held back for one, ``throttle_expired`` those of them whose timeout passed
    while held. ``peaks`` (per API key, seconds) and ``throttle_ms_peak`` are the
    highest latency and throttle since :meth:`take_peaks` last read them (the
    client metrics push, KIP-714, reports each push interval's maximum).
    ``window_sent`` (request sizes), ``window_answered`` (latencies, seconds)
    and ``window_received`` (bytes read) feed Java's windowed node metrics
    (``request-rate``, ``request-size-avg``, ``request-latency-avg``,
    ``incoming-byte-rate``...); they are fed only when the driver gives its
    clock.
    """

    __slots__ = (
        "apis",
        "bytes_received",
        "bytes_sent",
        "connect_failures",
        "connects",
        "disconnects",
        "peaks",
        "requests_failed",
        "requests_sent",
        "responses_received",
        "throttle_expired",
        "throttle_held",
        "throttle_ms_max",
        "throttle_ms_peak",
        "throttle_ms_total",
        "throttles",
        "window_answered",
        "window_received",
        "window_sent",
    )

    def __init__(self) -> None:
        self.window_sent = Windowed()
        self.window_answered = Windowed()
        self.window_received = Windowed()
        self.connects = 0
        self.connect_failures = 0
        self.disconnects = 0
        self.requests_sent = 0
        self.responses_received = 0
        self.requests_failed = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.apis: dict[int, list[float]] = {}
        self.throttles = 0
        self.throttle_ms_total = 0
        self.throttle_ms_max = 0
        self.throttle_held = 0
        self.throttle_expired = 0
        self.peaks: dict[int, float] = {}
        self.throttle_ms_peak = 0

    def sent(self, api_key: int, size: int, now: float | None = None) -> None:
        """A request of ``size`` bytes was framed (at ``now``, the driver's clock)."""
        if now is not None:
            self.window_sent.record(now, size)
        self.requests_sent += 1
        self.bytes_sent += size
        entry = self.apis.get(api_key)
        if entry is None:
            self.apis[api_key] = [1, 0, 0.0, 0.0]
        else:
            entry[0] += 1

    def answered(self, api_key: int, latency: float | None, now: float | None = None) -> None:
        """A response arrived ``latency`` seconds after its request was framed
        (at ``now``, the driver's clock)."""
        if now is not None and latency is not None:
            self.window_answered.record(now, latency)
        self.responses_received += 1
        entry = self.apis.get(api_key)
        if entry is None:
            entry = self.apis[api_key] = [0, 0, 0.0, 0.0]
        entry[1] += 1
        if latency is not None:
            entry[2] += latency
            if latency > entry[3]:
                entry[3] = latency
            peaks = self.peaks
            if latency > peaks.get(api_key, 0.0):
                peaks[api_key] = latency

    def received(self, size: int, now: float | None) -> None:
        """``size`` bytes were read from the connection."""
        self.bytes_received += size
        if now is not None:
            self.window_received.record(now, size)

    def throttled(self, throttle_ms: int) -> None:
        """A response carried a throttle time of ``throttle_ms`` (> 0)."""
        self.throttles += 1
        self.throttle_ms_total += throttle_ms
        if throttle_ms > self.throttle_ms_max:
            self.throttle_ms_max = throttle_ms
        if throttle_ms > self.throttle_ms_peak:
            self.throttle_ms_peak = throttle_ms

    def take_peaks(self) -> tuple[dict[int, float], int]:
        """The highest latency per API key (seconds) and throttle (ms) since the
        last call; resets them."""
        peaks = (self.peaks, self.throttle_ms_peak)
        self.peaks = {}
        self.throttle_ms_peak = 0
        return peaks


class CoordinatorCounters:
    """A consumer's measures of its group coordination, for Java's
    ``consumer-coordinator-metrics``, kept by the membership state machine
    (:class:`~trafka.sdk.membership.Membership`) with the driver's clock.

    ``commit``, ``join``, ``sync`` and ``heartbeat`` hold each answered
    request's time from its sending (:meth:`sending`) to its answer, in
    seconds: every OffsetCommit and heartbeat answer, as Java's ``commit`` and
    ``heartbeat`` sensors, and the JoinGroup and SyncGroup answers without an
    error, as its ``join`` and ``sync`` sensors. ``failed_rebalances`` counts
    the JoinGroup and SyncGroup of the current rebalance that failed (an error
    answer, MEMBER_ID_REQUIRED of KIP-394 included as in Java, or no answer). ``last_heartbeat_sent``
    is when the last heartbeat went out (None before one).
    """

    __slots__ = (
        "commit",
        "failed_rebalances",
        "heartbeat",
        "join",
        "last_heartbeat_sent",
        "sent_at",
        "sync",
    )

    def __init__(self) -> None:
        self.commit = Windowed()
        self.join = Windowed()
        self.sync = Windowed()
        self.heartbeat = Windowed()
        self.failed_rebalances = Windowed()
        self.last_heartbeat_sent: float | None = None
        # When each request in flight was sent (an entry lives until its answer or failure).
        self.sent_at: dict[Any, float] = {}

    def sending(self, request: Any, now: float, heartbeat: bool) -> None:
        """``request`` is being sent now."""
        self.sent_at[request] = now
        if heartbeat:
            self.last_heartbeat_sent = now

    def took(self, request: Any, now: float) -> float | None:
        """``request`` got its answer or failed at ``now``: how long since it was sent."""
        at = self.sent_at.pop(request, None)
        return None if at is None else max(0.0, now - at)


class TopicCounters:
    """A producer's totals for one topic."""

    __slots__ = (
        "batch_retries",
        "batches_sent",
        "bytes_sent",
        "errors",
        "records_failed",
        "records_sent",
    )

    def __init__(self) -> None:
        self.records_sent = 0
        self.bytes_sent = 0
        self.batches_sent = 0
        self.records_failed = 0
        self.batch_retries = 0
        self.errors: dict[str, int] = {}

    def failed(self, records: int, error: BaseException) -> None:
        self.records_failed += records
        name = error_name(error)
        self.errors[name] = self.errors.get(name, 0) + records


class PartitionCounters(TopicCounters):
    """A producer's totals for one partition (the accumulator keeps one per
    partition queue; a topic's totals are their sums). Beyond a topic's:
    ``records_retried``, the records of the batches sent again, and
    ``latency``, each acknowledged batch's time from its first record's
    append to its acknowledgement, in seconds (KIP-714's per-partition
    latency: the batch's oldest record's; its peak is the push interval's)."""

    __slots__ = ("latency", "records_retried")

    def __init__(self) -> None:
        super().__init__()
        self.records_retried = 0
        self.latency = Interval()


def topic_totals(partitions: Iterable[tuple[str, TopicCounters]]) -> dict[str, TopicCounters]:
    """Per topic, the sums of its partitions' counters."""
    out: dict[str, TopicCounters] = {}
    for topic, c in partitions:
        t = out.get(topic)
        if t is None:
            t = out[topic] = TopicCounters()
        t.records_sent += c.records_sent
        t.bytes_sent += c.bytes_sent
        t.batches_sent += c.batches_sent
        t.records_failed += c.records_failed
        t.batch_retries += c.batch_retries
        for name, n in c.errors.items():
            t.errors[name] = t.errors.get(name, 0) + n
    return out


def error_name(error: BaseException) -> str:
    """A short name for a failure: the Kafka error code's name, else the exception class."""
    code = getattr(error, "code", None)
    name = getattr(code, "name", None)
    return name if isinstance(name, str) else type(error).__name__
