"""Retry backoff, shared by the state machines and the drivers (no I/O)."""

from __future__ import annotations

import random

__all__ = ["backoff_delay"]


def backoff_delay(
    base: float, maximum: float, failures: int, rng: random.Random | None = None
) -> float:
    """Exponential backoff with +-20% jitter: ``base * 2**(failures-1)`` capped at ``maximum``."""
    if failures <= 0:
        return 0.0
    delay = float(min(base * (2 ** min(failures - 1, 30)), maximum))
    jitter = (rng or random).random()
    return delay * (0.8 + 0.4 * jitter)
