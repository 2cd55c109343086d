"""Kafka's byte-rate quota arithmetic, I/O-free: a rate measured over sampled
windows, and the throttle time a rate over its bound earns (the tenants
filter's quotas, :mod:`.tenants_quotas`).

The rules are those of Kafka's broker for client quotas (``producer_byte_rate``,
``consumer_byte_rate``: its ClientQuotaManager, a ``Rate`` over a
``SampledStat``; Kafka's design docs, "Quotas"; KIP-13, KIP-219):

* A rate is measured over ``num`` samples of ``size_ms`` each
  (``quota.window.num``, default 11; ``quota.window.size.seconds``, default 1).
  A value recorded goes into the current sample; once ``size_ms`` have passed
  since the current sample started, the next record starts a new one,
  recycling the oldest. ``num + 1`` samples are kept: the extra one is the
  sample that started before the measured window but overlaps it.
* When the rate is measured, a sample whose last record is ``num * size_ms``
  old or more is emptied (and starts at the time of measuring).
* The rate is the samples' sum over the time since the oldest sample
  started, that time counted as at least ``num - 1`` whole windows (plus what
  has passed of the last), and never under 1 ms: a first burst is not divided
  by the few milliseconds the proxy has been measuring.
* A record adds its value, then checks the quota: a rate above the bound (an
  upper bound: equal passes) earns ``round((rate - bound) / bound * window)``
  milliseconds, ``window`` the time the rate was measured over: the delay that
  brings the rate down to the bound if nothing more is recorded (X = (O - T)
  / T * W, as ClientQuotaManager states it). ``round`` is Java's (halves up).
* Byte-rate throttle times are not capped: Kafka caps only the request-time
  quota's (``request_percentage``) and the connection-rate quota's, at one
  window. What bounds a fetch's throttle is the fetch's size instead:
  :meth:`Windows.fetch_cap`, at most ``bound * (num - 1) * size`` bytes
  (Kafka's getMaxValueInQuotaWindow caps a consumer's Fetch and ShareFetch
  ``max_bytes`` so: more would be throttled for sure).
* Times are integer milliseconds of a monotonic clock, given by the caller
  (``now_ms``); nothing here reads a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Rate", "Windows", "throttle_ms"]


@dataclass(frozen=True, slots=True)
class Windows:
    """How a rate is measured: ``num`` samples of ``size_ms`` each (Kafka's
    ``quota.window.num`` and ``quota.window.size.seconds``)."""

    num: int = 11
    size_ms: int = 1000

    def fetch_cap(self, bound: float) -> int:
        """The most bytes a fetch may ask for under ``bound`` bytes/s without
        being throttled for sure (Kafka's getMaxValueInQuotaWindow)."""
        return int(bound * (self.num - 1) * self.size_ms / 1000)


def throttle_ms(rate: float, bound: float, window_ms: int) -> int:
    """The throttle time a ``rate`` over ``bound`` (both per second) measured
    over ``window_ms`` earns; 0 when it is not over."""
    if rate <= bound:
        return 0
    return math.floor((rate - bound) / bound * window_ms + 0.5)


class _Sample:
    __slots__ = ("last_ms", "start_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.value = 0.0
        self.start_ms = now_ms
        self.last_ms = now_ms

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.start_ms = self.last_ms = now_ms


class Rate:
    """A byte rate (bytes per second) over sampled windows (see the module's
    rules); the windows are given at each call, so a reload may change them."""

    __slots__ = ("_current", "_samples")

    def __init__(self) -> None:
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int, windows: Windows) -> None:
        """Add ``value`` at ``now_ms``."""
        samples = self._samples
        if not samples:
            samples.append(_Sample(now_ms))
            self._current = 0
        sample = samples[self._current]
        if now_ms - sample.start_ms >= windows.size_ms:
            self._current = (self._current + 1) % (windows.num + 1)
            if self._current >= len(samples):
                sample = _Sample(now_ms)
                samples.append(sample)
            else:
                sample = samples[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.last_ms = now_ms

    def _purge(self, now_ms: int, windows: Windows) -> None:
        expire = windows.num * windows.size_ms
        for sample in self._samples:
            if now_ms - sample.last_ms >= expire:
                sample.reset(now_ms)

    def window_ms(self, now_ms: int, windows: Windows) -> int:
        """The time the rate is measured over at ``now_ms``."""
        self._purge(now_ms, windows)
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        oldest = min(s.start_ms for s in self._samples)
        elapsed = now_ms - oldest
        full = elapsed // windows.size_ms
        if full < windows.num - 1:
            elapsed += (windows.num - 1 - full) * windows.size_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int, windows: Windows) -> float:
        """The rate at ``now_ms``, in units per second."""
        self._purge(now_ms, windows)
        total = sum(s.value for s in self._samples)
        return total / (self.window_ms(now_ms, windows) / 1000)

    def throttle(self, value: float, now_ms: int, windows: Windows, bound: float | None) -> int:
        """Record ``value`` at ``now_ms``, then the throttle time (ms) the rate
        earns against ``bound`` (None: no quota, 0)."""
        self.record(value, now_ms, windows)
        if bound is None:
            return 0
        rate = self.measure(now_ms, windows)
        if rate <= bound:
            return 0
        return throttle_ms(rate, bound, self.window_ms(now_ms, windows))
