"""The broker's two clocks, read by the drivers only.

The broker core and its coordinators never read a clock: the drivers
(:mod:`.server`, the cluster's and the markers' drivers) read one :class:`Now`
per wake-up and pass it in as ``now_ms``. Kafka reads two clocks, and so does
brokerlite:

* the wall clock (``System.currentTimeMillis``, here ``time.time_ns``) for what
  is a date: record and commit timestamps, retention, segment roll, transaction
  timeouts, delegation-token expiry, producer-id expiry, fetch sessions, quota
  windows;
* a monotonic clock (``System.nanoTime``, Kafka's ``Time.hiResClockMs``; here
  ``time.monotonic_ns``) for what is a wait: parked requests (Kafka's
  purgatories on its ``SystemTimer``), group members' session and rebalance
  timers (the group coordinator's timer), share-record acquisition locks,
  SASL session lifetimes (KIP-368), throttled replies and the periodic work's
  schedule (Kafka's scheduler). A step of the machine's clock (NTP, an
  operator) moves the first and never the second.

A :class:`Now` is an ``int``, the wall-clock milliseconds, that also carries the
monotonic milliseconds read at the same wake-up (:func:`mono_ms`), so it goes
wherever ``now_ms`` went before, without a second argument through every call.
The code that owns a wait reads ``mono_ms(now_ms)``; arithmetic on a
:class:`Now` gives a plain ``int`` (wall), so a deadline is computed from
``mono_ms(now_ms)`` explicitly. A plain ``int`` (what tests pass) stands for
both clocks at once: its two readings agree. ``time.monotonic_ns`` counts from
the machine's boot (never below zero), so a deadline of 0 is "due at once" on
either clock; "never" is ``None``.
"""

from __future__ import annotations

import time

__all__ = ["Now", "mono_ms", "now_ms", "to_mono"]


class Now(int):
    """Wall-clock milliseconds (the ``int``) read with monotonic ones (``mono``).

    Args:
        wall: wall-clock milliseconds since the epoch.
        mono: monotonic milliseconds (any origin, never stepped).
    """

    mono: int

    # (str and repr stay int's: a Now written into a file, a log line or ZooKeeper
    # is the wall-clock number, as a plain int was.)

    def __new__(cls, wall: int, mono: int) -> Now:
        self = super().__new__(cls, wall)
        self.mono = mono
        return self

    def __reduce__(self) -> tuple[type[Now], tuple[int, int]]:
        return (Now, (int(self), self.mono))


def mono_ms(now: int) -> int:
    """The monotonic milliseconds of ``now`` (a plain ``int`` is both clocks)."""
    return now.mono if isinstance(now, Now) else now


def to_mono(wall_deadline: int, now: int) -> int:
    """A wall-clock deadline as a monotonic one, as far from ``now`` on both clocks."""
    return wall_deadline - int(now) + mono_ms(now)


def now_ms() -> Now:
    """Both clocks, read once: what the drivers pass into the broker core."""
    return Now(time.time_ns() // 1_000_000, time.monotonic_ns() // 1_000_000)
