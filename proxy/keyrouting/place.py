"""Where placing a Produce's records runs: at once, or on a worker thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import trio

from .placement import Hashing
from .plan import cheap_to_plan

__all__ = ["place"]

T = TypeVar("T")


async def place(body: Any, hash_name: Hashing, origin_headers: bool, plan: Callable[[], T]) -> T:
    """``plan()``, which places the records of the Produce ``body``: at once when
    the codec's C pass makes that cheap (:func:`.plan.cheap_to_plan`), else
    on a worker thread, so that no client's batches hold up the others."""
    if cheap_to_plan(body, hash_name=hash_name, origin_headers=origin_headers):
        return plan()
    return await trio.to_thread.run_sync(plan)
