"""Histograms of seconds for a request path, turned into Prometheus families at a scrape.

Observing is a ``bisect`` and two additions on plain lists (no locks, no
``prometheus_client`` objects): the broker core and the proxy observe on their
own trio thread, and a scrape on that thread reads them. ``prometheus_client``
is imported only when a family is built.
"""

from __future__ import annotations

import bisect
from typing import Any

__all__ = ["Histograms"]


class Histograms:
    """Histograms of seconds, one per key (an API, a broker...), kept as plain
    bucket counts: cheap to observe on a request path, turned into a Prometheus
    family at a scrape."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self._counts: dict[Any, list[int]] = {}
        self._sums: dict[Any, float] = {}

    def observe(self, key: Any, seconds: float) -> None:
        counts = self._counts.get(key)
        if counts is None:
            counts = self._counts[key] = [0] * (len(self.buckets) + 1)
            self._sums[key] = 0.0
        counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self._sums[key] += seconds

    def family(self, name: str, what: str, label: str, label_of: Any = str) -> Any:
        """The histogram family (``label_of(key)`` names each key's series)."""
        from prometheus_client.core import HistogramMetricFamily

        family = HistogramMetricFamily(name, what, labels=[label])
        for key, counts in sorted(self._counts.items()):
            cumulative = []
            running = 0
            for bound, n in zip((*map(str, self.buckets), "+Inf"), counts, strict=True):
                running += n
                cumulative.append((bound, running))
            family.add_metric([label_of(key)], cumulative, self._sums[key])
        return family

    def quantile(self, key: Any, q: float) -> float | None:
        """The ``q`` quantile (0 < q < 1) of ``key``'s observations, estimated as
        Prometheus' ``histogram_quantile`` does: linear within the bucket it
        falls in (from 0 for the first bucket); the top finite bound when it
        falls in the open bucket above it. None without observations.
        """
        counts = self._counts.get(key)
        total = sum(counts) if counts else 0
        if not counts or total == 0:
            return None
        rank = q * total
        below = 0
        for i, n in enumerate(counts):
            if n and below + n >= rank:
                if i == len(self.buckets):
                    return self.buckets[-1]
                lower = self.buckets[i - 1] if i else 0.0
                return lower + (self.buckets[i] - lower) * (rank - below) / n
            below += n
        return self.buckets[-1]

    def totals(self) -> dict[Any, int]:
        """Observations per key."""
        return {key: sum(counts) for key, counts in self._counts.items()}
