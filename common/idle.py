"""How much of the time an event loop waits for I/O: Kafka's idle ratios.

Kafka reports its network threads' ``NetworkProcessorAvgIdlePercent`` and its
request handlers' ``RequestHandlerAvgIdlePercent``: the fraction of the recent
time they had nothing to do (1: idle, 0: saturated). A trio loop does both jobs
on one thread, and the time it spends blocked in its I/O wait is exactly the
time it had nothing to do, so one figure answers both.

Rules (I/O-free; the caller passes the clock's readings):

* :meth:`IdleRatio.waited` adds an I/O wait that began at ``start`` and ended at
  ``end``; :meth:`IdleRatio.ratio` is the idle share of the last two windows
  (the current one and the one before it, as Java's metrics sample: 2 windows
  of ``window`` seconds), None before the first window has any time.
* A wait is counted in the windows it spans; time runs from the first reading.
"""

from __future__ import annotations

from typing import Any

import trio

__all__ = ["IdleInstrument", "IdleRatio"]


class IdleRatio:
    """The idle share of an event loop over the last two windows."""

    def __init__(self, start: float, window: float = 30.0) -> None:
        self.window = window
        self._window_start = start
        self._idle = 0.0
        self._previous_start = start
        self._previous_idle = 0.0

    def _next_window(self) -> None:
        self._previous_start, self._previous_idle = self._window_start, self._idle
        self._window_start += self.window
        self._idle = 0.0

    def waited(self, start: float, end: float) -> None:
        """The loop waited for I/O from ``start`` to ``end`` (a wait across a
        window's end is shared between the windows)."""
        while end >= self._window_start + self.window:
            boundary = self._window_start + self.window
            if start < boundary:
                self._idle += boundary - max(start, self._window_start)
            self._next_window()
        self._idle += max(end - max(start, self._window_start), 0.0)

    def ratio(self, now: float) -> float | None:
        """The idle share (0 to 1) of the time since the previous window began."""
        while now >= self._window_start + self.window:
            self._next_window()
        span = now - self._previous_start
        if span <= 0:
            return None
        return min((self._previous_idle + self._idle) / span, 1.0)


class IdleInstrument(trio.abc.Instrument):
    """A trio instrument feeding an :class:`IdleRatio` the loop's I/O waits
    (add it with ``trio.lowlevel.add_instrument``); ``clock`` is the reading the
    ratio is kept in."""

    def __init__(self, idle: IdleRatio, clock: Any) -> None:
        super().__init__()
        self.idle = idle
        self.clock = clock
        self._began = 0.0

    def before_io_wait(self, timeout: float) -> None:
        self._began = self.clock()

    def after_io_wait(self, timeout: float) -> None:
        self.idle.waited(self._began, self.clock())
