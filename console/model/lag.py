"""Lag history: each group's lag samples, kept in memory, and the lag
chart's geometry.

Rules:

* Lag history is kept per group in memory, at most ``LagHistory.keep``
  samples each: the console is a window on the cluster, not a time-series
  database. A sample taken less than ``min_gap`` after the newest sample's
  window opened (when that sample's predecessor in the window was appended)
  replaces the newest. The gap is measured from the window's opening, not
  from the sample replaced: a chain of replacements (the sampler's round
  between two visits 0.6 s apart) must not merge samples ``min_gap`` apart
  into one.
* The chart is inline SVG whose geometry is computed here (and tested); a
  template only lays it out.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import deque
from collections.abc import Iterable, Mapping, Sequence

from trafka.sdk.fetcher import TopicPartition

from .axis import nice_ceiling


@dataclasses.dataclass(frozen=True, slots=True)
class LagSample:
    at: float  # seconds since the epoch
    lags: Mapping[TopicPartition, int]
    # Partitions of the group left out of ``lags``: no commit, log end unknown.
    no_commit: int = 0
    unknown: int = 0

    @property
    def total(self) -> int:
        return sum(self.lags.values())


class LagHistory:
    """Lag samples per group, the newest :attr:`keep` of each, oldest first.

    Samples come from the console's periodic sampler and from every group page
    shown; a sample less than ``min_gap`` seconds after the newest one's
    window opened replaces it (a page reloaded ten times a second must not
    push the history out), so two samples ``min_gap`` apart are both kept
    whatever came between them.
    """

    def __init__(self, keep: int = 360, min_gap: float = 0.5) -> None:
        if keep < 2:
            raise ValueError("keep at least two samples: a chart needs two points")
        self.keep = keep
        self.min_gap = min_gap
        self._groups: dict[str, deque[LagSample]] = {}
        # Per group, when the window of its newest sample opened.
        self._opened: dict[str, float] = {}

    def record(
        self,
        group_id: str,
        now: float,
        lags: Mapping[TopicPartition, int],
        no_commit: int = 0,
        unknown: int = 0,
    ) -> None:
        samples = self._groups.get(group_id)
        if samples is None:
            samples = self._groups[group_id] = deque(maxlen=self.keep)
        sample = LagSample(now, dict(lags), no_commit, unknown)
        if samples and now - self._opened[group_id] < self.min_gap:
            samples[-1] = sample
        else:
            samples.append(sample)
            self._opened[group_id] = now

    def samples(self, group_id: str) -> list[LagSample]:
        return list(self._groups.get(group_id, ()))

    def last_total(self, group_id: str) -> int | None:
        samples = self._groups.get(group_id)
        return samples[-1].total if samples else None

    def last(self, group_id: str) -> LagSample | None:
        samples = self._groups.get(group_id)
        return samples[-1] if samples else None

    def forget(self, keep_groups: Iterable[str]) -> None:
        """Drop the history of groups no longer listed."""
        keep = set(keep_groups)
        for gid in [g for g in self._groups if g not in keep]:
            del self._groups[gid]
            del self._opened[gid]


@dataclasses.dataclass(frozen=True, slots=True)
class ChartSeries:
    label: str
    color: str
    points: str  # SVG polyline points, "x,y x,y ..."
    last: int


@dataclasses.dataclass(frozen=True, slots=True)
class LagChart:
    """An SVG line chart's geometry: the total lag and the partitions that lag
    most, over the samples' time span."""

    width: int
    height: int
    left: int
    bottom: int
    y_max: int
    y_ticks: tuple[tuple[float, str], ...]  # (y, label)
    x_labels: tuple[tuple[float, str], ...]  # (x, label)
    series: tuple[ChartSeries, ...]


_COLORS = ("#1f2937", "#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2")


def lag_chart(
    samples: Sequence[LagSample], *, width: int = 720, height: int = 220, partitions: int = 5
) -> LagChart | None:
    """The chart of ``samples`` (None with fewer than two: no line to draw). The
    total lag is the first series; the ``partitions`` partitions with the most
    lag in the last sample follow."""
    if len(samples) < 2:
        return None
    left, bottom, top, right = 56, 24, 8, 8
    plot_w, plot_h = width - left - right, height - top - bottom
    t0, t1 = samples[0].at, samples[-1].at
    span = max(t1 - t0, 1e-9)
    last = samples[-1].lags
    worst = sorted(last, key=lambda tp: (-last[tp], tp))[:partitions]
    peak = max(s.total for s in samples)
    y_max = nice_ceiling(peak)

    def x(at: float) -> float:
        return left + (at - t0) / span * plot_w

    def y(v: int) -> float:
        return top + plot_h - v / y_max * plot_h

    def line(values: list[int]) -> str:
        return " ".join(f"{x(s.at):.1f},{y(v):.1f}" for s, v in zip(samples, values, strict=True))

    series = [ChartSeries("total", _COLORS[0], line([s.total for s in samples]), samples[-1].total)]
    for i, tp in enumerate(worst):
        values = [s.lags.get(tp, 0) for s in samples]
        series.append(
            ChartSeries(
                f"{tp.topic}-{tp.partition}",
                _COLORS[1 + i % (len(_COLORS) - 1)],
                line(values),
                values[-1],
            )
        )
    y_ticks = tuple((y(v), f"{v:,}") for v in sorted({0, y_max // 2, y_max}))
    x_labels = tuple(
        (x(at), dt.datetime.fromtimestamp(at, dt.UTC).strftime("%H:%M:%S")) for at in (t0, t1)
    )
    return LagChart(width, height, left, bottom, y_max, y_ticks, x_labels, tuple(series))
