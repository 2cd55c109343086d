"""The broker's clock: wall-clock milliseconds, read by the drivers only.

The broker core and its coordinators never read a clock: the drivers
(:mod:`.server`, the cluster's and the markers' drivers) read this one and pass
``now_ms`` into every call, as Kafka's brokers use wall-clock time for
timestamps, timeouts and retention. Tests pass their own times instead.
"""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Wall-clock milliseconds, the broker core's notion of time."""
    return time.time_ns() // 1_000_000
