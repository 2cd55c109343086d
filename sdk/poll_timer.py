"""``max.poll.interval.ms`` for one group member, without I/O.

The group machines (:class:`~trafka.sdk.membership.Membership`, its KIP-848
subclass, and :class:`~trafka.sdk.share_membership.ShareMembership`) each hold
a :class:`PollTimer`: the driver reports the application's polls, the machine
asks whether the application stopped polling, and what it does then (leave,
lose its partitions) is its own.

Rules:

* The interval runs only while the application is outside every poll (polls
  may overlap: a task polling while another one does); it restarts when a
  poll starts and when the last one ends.
* It has expired once the clock reaches the end of a poll plus the interval,
  the deadline the driver sleeps until, so a driver woken then finds it
  expired.
* A member that left because it expired waits for the next poll to join
  again (:attr:`PollTimer.awaiting_poll`); that poll's start says so.
"""

from __future__ import annotations

__all__ = ["PollTimer"]


class PollTimer:
    """The application's polls, timed against ``max.poll.interval.ms`` (see the module doc).

    Args:
        max_poll_interval: seconds.
        now: the driver's clock at creation (the interval runs from then).

    Attributes:
        awaiting_poll: the member left after the interval expired and joins
            again at the next poll.
    """

    def __init__(self, max_poll_interval: float, now: float) -> None:
        self.max_poll_interval = max_poll_interval
        self.awaiting_poll = False
        self._polling = 0
        self._last_poll = now

    def started(self, now: float) -> bool:
        """A poll starts. Returns True when it ends the wait of :attr:`awaiting_poll`."""
        self._polling += 1
        self._last_poll = now
        resumed, self.awaiting_poll = self.awaiting_poll, False
        return resumed

    def ended(self, now: float) -> None:
        """A poll ended; the interval counts from here once no poll is left."""
        self._polling = max(self._polling - 1, 0)
        self._last_poll = now

    def deadline(self) -> float | None:
        """When the interval expires (None: inside a poll)."""
        return None if self._polling else self._last_poll + self.max_poll_interval

    def expired(self, now: float) -> bool:
        """The application has been outside every poll for the whole interval."""
        deadline = self.deadline()
        return deadline is not None and now >= deadline
