"""Throughput from what any Kafka answers: the console samples the cluster and
keeps the rates between samples, without I/O (the driver, :mod:`.cluster`,
asks the cluster; this module only compares two samples).

A :class:`Snapshot` is one round of questions: every partition's leader
(Metadata), log end offset (ListOffsets ``latest``), log size (DescribeLogDirs,
the largest replica's) and every consumer group's committed offsets
(OffsetFetch). Between two snapshots, per topic and per broker (the leader):

* **messages in/s**: the growth of the log end offsets over the seconds
  between the two samples;
* **bytes in/s**: the growth of the partitions' log sizes;
* **messages out/s**: the growth of the groups' committed offsets (what
  consumer groups have read and committed; readers that do not commit are not
  seen).

Bytes out are not known from the protocol (no request tells what a broker
sent); the brokers' own metrics (brokerlite's ``/metrics``) have them.

Rules: every figure is true or unknown (None), never a guess.

* A rate needs two samples: the first gives none.
* A partition whose value is unknown in either sample (no leader, a leader out
  of reach, log dirs not described, a group's offsets not read), that is new,
  gone, or whose value went down (records deleted by retention, a reset
  group, a topic deleted and made again) makes the figure of its topic for
  that interval unknown: a gap in the chart, not a zero.
* A broker's figure counts the partitions it led in both samples; a partition
  that changed leader between them makes both brokers' figures unknown.
* A group's offsets of a partition that appeared or went between the samples
  (a group that started or was deleted) make that topic's messages out
  unknown: how much it read in between is not known.
* Memory is bounded: each series keeps the newest ``keep`` rates (360: an
  hour at the default 10 s) in an array of 8-byte floats, the samples' times
  are kept once, at most ``max_series`` series (2,000: beyond it, the topics
  after the first in name order are not charted, and
  :attr:`ThroughputHistory.dropped` says how many), and one previous
  snapshot: 5.8 MB of rates at the bound.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from array import array
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Literal

from trafka.sdk.fetcher import TopicPartition

from .model.axis import nice_ceiling

__all__ = [
    "METRICS",
    "RateChart",
    "Snapshot",
    "ThroughputHistory",
    "interval_rates",
    "rate_chart",
]

Metric = Literal["messages_in", "bytes_in", "messages_out"]
METRICS: tuple[Metric, ...] = ("messages_in", "bytes_in", "messages_out")
#: A series: ("topic", name, metric) or ("broker", node id, metric).
SeriesKey = tuple[Literal["topic", "broker"], str | int, Metric]
Point = tuple[float, float | None]


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """One sample of the cluster at ``at`` (seconds of the console's clock).

    Attributes:
        leaders: every partition the metadata listed, with its leader (None:
            no leader).
        ends: log end offsets answered (a partition missing: unknown).
        sizes: log sizes in bytes (missing: unknown); None when the log dirs
            could not be described at all.
        committed: each group's committed offsets; None when the groups'
            offsets could not all be read.
    """

    at: float
    leaders: Mapping[TopicPartition, int | None]
    ends: Mapping[TopicPartition, int]
    sizes: Mapping[TopicPartition, int] | None
    committed: Mapping[str, Mapping[TopicPartition, int]] | None


def _growth(
    before: Mapping[TopicPartition, int] | None,
    after: Mapping[TopicPartition, int] | None,
    tp: TopicPartition,
) -> int | None:
    if before is None or after is None:
        return None
    a, b = before.get(tp), after.get(tp)
    if a is None or b is None or b < a:
        return None
    return b - a


def _consumed(prev: Snapshot, cur: Snapshot) -> dict[TopicPartition, int | None]:
    """Per partition, what the groups committed between the samples (None:
    unknown)."""
    out: dict[TopicPartition, int | None] = {}
    if prev.committed is None or cur.committed is None:
        return {tp: None for tp in cur.leaders}
    for group in set(prev.committed) | set(cur.committed):
        before = prev.committed.get(group, {})
        after = cur.committed.get(group, {})
        for tp in set(before) | set(after):
            grown = _growth(before, after, tp)
            known = out.get(tp, 0)
            out[tp] = None if grown is None or known is None else known + grown
    return out


def interval_rates(prev: Snapshot, cur: Snapshot) -> dict[SeriesKey, float | None]:
    """The rates of every topic and broker between two snapshots (per second;
    None: unknown), by the module's rules."""
    seconds = cur.at - prev.at
    consumed = _consumed(prev, cur)
    sums: dict[SeriesKey, float | None] = {}

    def add(key: SeriesKey, value: int | None) -> None:
        if key not in sums:
            sums[key] = 0.0
        known = sums[key]
        sums[key] = None if value is None or known is None else known + value

    for tp, leader in cur.leaders.items():
        was = prev.leaders.get(tp, None) if tp in prev.leaders else "absent"
        grown: dict[Metric, int | None] = {
            "messages_in": _growth(prev.ends, cur.ends, tp),
            "bytes_in": _growth(prev.sizes, cur.sizes, tp),
            "messages_out": consumed.get(tp, 0),
        }
        if was == "absent" or leader is None:
            # New since the last sample, or leaderless now: not known.
            grown = dict.fromkeys(METRICS)
        for metric, value in grown.items():
            add(("topic", tp.topic, metric), value)
            if leader is not None:
                add(("broker", leader, metric), value if was == leader else None)
            if isinstance(was, int) and was != leader:
                add(("broker", was, metric), None)
    # Partitions gone since the last sample: their topic's figure is unknown.
    for tp in prev.leaders:
        if tp not in cur.leaders and ("topic", tp.topic, "messages_in") in sums:
            for metric in METRICS:
                sums[("topic", tp.topic, metric)] = None
    if seconds <= 0:
        return dict.fromkeys(sums)
    return {k: None if v is None else v / seconds for k, v in sums.items()}


class _Ring:
    """The newest ``keep`` rates of a series, 8 bytes each (NaN: unknown; a
    rate is never NaN otherwise), in one array allocated once."""

    __slots__ = ("size", "start", "values")

    def __init__(self, keep: int) -> None:
        self.values = array("d", bytes(8 * keep))
        self.start = 0
        self.size = 0

    def append(self, value: float | None) -> None:
        keep = len(self.values)
        self.values[(self.start + self.size) % keep] = math.nan if value is None else value
        if self.size < keep:
            self.size += 1
        else:
            self.start = (self.start + 1) % keep

    def __iter__(self) -> Iterator[float | None]:
        keep = len(self.values)
        for i in range(self.size):
            v = self.values[(self.start + i) % keep]
            yield None if math.isnan(v) else v


class ThroughputHistory:
    """The rates of every series between consecutive snapshots, the newest
    :attr:`keep` of each (see the module's rules for the bounds). The times of
    the samples are kept once: every series kept gets a rate at each sample,
    so a series' rates are those of the newest samples' times."""

    def __init__(self, keep: int = 360, max_series: int = 2000) -> None:
        if keep < 1 or max_series < 1:
            raise ValueError("keep at least one point of at least one series")
        self.keep = keep
        self.max_series = max_series
        self.samples = 0
        self.dropped = 0
        self.last_at: float | None = None
        self._prev: Snapshot | None = None
        self._times: deque[float] = deque(maxlen=keep)
        self._series: dict[SeriesKey, _Ring] = {}

    def record(self, snap: Snapshot) -> None:
        """Add a snapshot: the rates since the previous one become a point of
        each series; a series no longer sampled (a topic deleted, a broker
        leading nothing) is dropped."""
        self.samples += 1
        prev, self._prev = self._prev, snap
        self.last_at = snap.at
        if prev is None:
            return
        rates = interval_rates(prev, snap)
        keys = sorted(rates, key=lambda k: (k[0] == "topic", str(k[1]), k[2]))
        kept, self.dropped = keys[: self.max_series], max(0, len(keys) - self.max_series)
        self._times.append(snap.at)
        series: dict[SeriesKey, _Ring] = {}
        for key in kept:
            ring = self._series.get(key)
            if ring is None:
                ring = _Ring(self.keep)
            ring.append(rates[key])
            series[key] = ring
        self._series = series

    def points(self, key: SeriesKey) -> list[Point]:
        ring = self._series.get(key)
        if ring is None:
            return []
        times = list(self._times)[len(self._times) - ring.size :]
        return list(zip(times, ring, strict=True))

    def last(self, key: SeriesKey) -> float | None:
        points = self.points(key)
        return points[-1][1] if points else None

    def brokers(self) -> list[int]:
        return sorted({int(k[1]) for k in self._series if k[0] == "broker"})


# -- charts ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class RateLine:
    label: str
    color: str
    segments: tuple[str, ...]  # SVG polyline points of each run of known rates
    last: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class RateChart:
    """An SVG chart's geometry: one line per series, broken where a rate is
    unknown; a lone known point between gaps is drawn as a dot."""

    title: str
    unit: str
    width: int
    height: int
    left: int
    bottom: int
    y_ticks: tuple[tuple[float, str], ...]
    x_labels: tuple[tuple[float, str], ...]
    lines: tuple[RateLine, ...]
    unknown: int  # points shown as gaps


_COLORS = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#1f2937")


def _short(value: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}"


def rate_chart(
    title: str,
    unit: str,
    series: Sequence[tuple[str, Sequence[Point]]],
    *,
    width: int = 720,
    height: int = 200,
) -> RateChart | None:
    """The chart of ``series`` (label, points); None when no series has a
    point (a rate needs two samples)."""
    spans = [at for _, points in series for at, _ in points]
    if not spans:
        return None
    left, bottom, top, right = 56, 24, 8, 8
    plot_w, plot_h = width - left - right, height - top - bottom
    t0, t1 = min(spans), max(spans)
    span = max(t1 - t0, 1e-9)
    known = [v for _, points in series for _, v in points if v is not None]
    y_max = nice_ceiling(max(known, default=0.0))

    def x(at: float) -> float:
        return left + (at - t0) / span * plot_w if t1 > t0 else left + plot_w

    def y(v: float) -> float:
        return top + plot_h - v / y_max * plot_h

    lines = []
    unknown = 0
    for i, (label, points) in enumerate(series):
        segments: list[str] = []
        run: list[str] = []
        for at, v in points:
            if v is None:
                unknown += 1
                if run:
                    segments.append(" ".join(run))
                run = []
                continue
            run.append(f"{x(at):.1f},{y(v):.1f}")
        if run:
            segments.append(" ".join(run))
        last = points[-1][1] if points else None
        lines.append(RateLine(label, _COLORS[i % len(_COLORS)], tuple(segments), last))
    y_ticks = tuple((y(v), _short(v)) for v in (0.0, y_max / 2, y_max))
    x_labels = tuple(
        (x(at), dt.datetime.fromtimestamp(at, dt.UTC).strftime("%H:%M:%S"))
        for at in sorted({t0, t1})
    )
    return RateChart(
        title, unit, width, height, left, bottom, y_ticks, x_labels, tuple(lines), unknown
    )


def topic_charts(history: ThroughputHistory, topic: str) -> list[RateChart]:
    """A topic's charts: messages in and out per second, bytes in per second."""
    charts = [
        rate_chart(
            "Messages per second",
            "msg/s",
            [
                ("in", history.points(("topic", topic, "messages_in"))),
                ("out (committed)", history.points(("topic", topic, "messages_out"))),
            ],
        ),
        rate_chart(
            "Bytes in per second",
            "B/s",
            [("in (log growth)", history.points(("topic", topic, "bytes_in")))],
        ),
    ]
    return [c for c in charts if c is not None]


def broker_charts(history: ThroughputHistory) -> list[RateChart]:
    """The brokers' charts: one line per broker (the partitions it leads)."""
    brokers = history.brokers()
    titles: Iterable[tuple[Metric, str, str]] = (
        ("messages_in", "Messages in per second, by leader", "msg/s"),
        ("messages_out", "Messages out (committed) per second, by leader", "msg/s"),
        ("bytes_in", "Bytes in (log growth) per second, by leader", "B/s"),
    )
    charts = [
        rate_chart(
            title, unit, [(f"broker {b}", history.points(("broker", b, metric))) for b in brokers]
        )
        for metric, title, unit in titles
    ]
    return [c for c in charts if c is not None]


def rate_rows(
    history: ThroughputHistory, owners: Sequence[tuple[str, SeriesKey]]
) -> list[tuple[str, tuple[float | None, ...]]]:
    """The newest rate of each metric (None: unknown) for each ``(label,
    any key of the owner)``: its messages in, messages out, bytes in."""
    order: tuple[Metric, ...] = ("messages_in", "messages_out", "bytes_in")
    return [
        (label, tuple(history.last((key[0], key[1], m)) for m in order)) for label, key in owners
    ]
