"""A chart's value axis: where its top goes.

Rules and invariants:

* The top is the first 1, 2 or 5 times a power of ten at or above the
  largest value, so that the axis' labels are round numbers; never below 1,
  so that an empty or all-zero chart still has an axis.
"""

from __future__ import annotations

import math

__all__ = ["nice_ceiling"]


def nice_ceiling(value: float) -> int:
    """The next 1, 2 or 5 times a power of ten at or above ``value`` (at least 1)."""
    if value <= 1:
        return 1
    power: int = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5):
        if step * power >= value:
            return step * power
    return 10 * power
