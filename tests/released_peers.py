"""Session peers a worker stops as soon as the run no longer needs them.

The costly session fixtures of :data:`conftest.CONFINED`'s files (the three-node
Kafka clusters, Spark's session) are started by the first two xdist workers,
which take that work before anything else (tests/conftest.py's scheduler). Once
such a worker is handed a file from outside it, none of that work is left in
the queue, yet the fixtures lived on to the end of the run: a three-node Kafka
4 cluster idles at about 9% of a core (its KRaft heartbeats and no-op records),
for the last 60% of a run. :func:`hold` registers a fixture's stop;
:func:`release` runs every held stop once (the fixture's own teardown runs
later, and must then do nothing more); :func:`released` tells which were.
"""

from __future__ import annotations

from collections.abc import Callable

_held: dict[str, Callable[[], None]] = {}
_released: set[str] = set()


def hold(name: str, stop: Callable[[], None]) -> None:
    """``stop`` ends session fixture ``name`` early (see :func:`release`)."""
    _held[name] = stop
    _released.discard(name)


def drop(name: str) -> None:
    """Fixture ``name`` ended the usual way (its teardown): nothing left to release."""
    _held.pop(name, None)


def release() -> list[str]:
    """Stop every held fixture; their names, in the order held."""
    names = list(_held)
    while _held:
        name, stop = next(iter(_held.items()))
        del _held[name]
        _released.add(name)
        stop()
    return names


def released() -> frozenset[str]:
    return frozenset(_released)
