"""Whether the cluster answers, as the console's pages need to know it: the
rules, without I/O.

A page that waits for a dead cluster until the admin client's timeout (15 s)
tells a person nothing for 15 s. So the console checks the cluster itself: a
*check* is one cheap request (DescribeCluster) that must be answered within
``check_timeout`` seconds, made every ``interval`` seconds and at once when a
page is asked for while no check is under way. :class:`ClusterHealth` keeps
what the checks found; the driver (:mod:`.server`) makes them and stops the
pages waiting when the cluster is found down.

Rules:

* Three states: ``unknown`` (no check finished yet), ``up`` and ``down``. One
  failed check makes it ``down`` (a page must not wait for a second one), one
  answered check makes it ``up``.
* While ``down`` a page that needs the cluster is answered at once with why
  and since when, and reloads itself; a change is refused without being sent.
* A page started while the cluster was up or unknown is stopped as soon as a
  check finds the cluster down. A page also asks for a check (one at a time,
  their starts at least ``ASKED_GAP`` apart), so a page waits at most
  :meth:`ClusterHealth.bound` before it says so: with the defaults 1.75 s,
  within the 2 s a person should wait to be told. (A check already under way
  when the page comes is failed by a dead cluster within its own timeout.)
* What is said is what was seen: the last check's error, the time of the
  change, and how many seconds ago (from the same clock).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

__all__ = ["ASKED_GAP", "CHECK_INTERVAL", "CHECK_TIMEOUT", "ClusterHealth", "Transition"]

State = Literal["unknown", "up", "down"]

#: Seconds between two checks when no page asks for one.
CHECK_INTERVAL = 1.0
#: Seconds a check may take before the cluster counts as not answering.
CHECK_TIMEOUT = 1.5
#: The least time between the starts of two checks a page asked for: a cluster
#: that has just answered need not be asked again for every page.
ASKED_GAP = 0.25


@dataclasses.dataclass(frozen=True)
class Transition:
    """A change of state a check found (to log it once)."""

    state: State
    reason: str


class ClusterHealth:
    """What the console's checks of the cluster found.

    Args:
        interval: seconds between two checks when no page asks for one.
        check_timeout: seconds a check may take.
    """

    def __init__(
        self, *, interval: float = CHECK_INTERVAL, check_timeout: float = CHECK_TIMEOUT
    ) -> None:
        if interval <= 0 or check_timeout <= 0:
            raise ValueError("the check interval and timeout must be positive")
        self.interval = interval
        self.check_timeout = check_timeout
        self.state: State = "unknown"
        self.since: float | None = None
        self.reason = ""
        self.checks = 0
        self._checking_since: float | None = None
        self._last_start: float | None = None

    # -- the checks ------------------------------------------------------------------

    def next_check(self, now: float, *, asked: bool) -> float:
        """When the next check should start (``now`` or later); ``asked``: a page
        is waiting for the cluster."""
        if self._checking_since is not None:
            return float("inf")  # one at a time: the one under way will answer
        if self._last_start is None:
            return now
        return max(now, self._last_start + (ASKED_GAP if asked else self.interval))

    def check_started(self, now: float) -> None:
        self._checking_since = now
        self._last_start = now

    @property
    def checking(self) -> bool:
        return self._checking_since is not None

    def check_answered(self, now: float) -> Transition | None:
        """The cluster answered a check; a :class:`Transition` when it was not up."""
        self._checking_since = None
        self.checks += 1
        if self.state == "up":
            return None
        self.state, self.since, self.reason = "up", now, ""
        return Transition("up", "")

    def check_failed(self, now: float, reason: str) -> Transition | None:
        """A check failed or was not answered in time; a :class:`Transition` when
        the cluster was not already down."""
        self._checking_since = None
        self.checks += 1
        self.reason = reason
        if self.state == "down":
            return None
        self.state, self.since = "down", now
        return Transition("down", reason)

    # -- what pages see --------------------------------------------------------------

    @property
    def down(self) -> bool:
        return self.state == "down"

    def down_for(self, now: float) -> float:
        """Seconds since the cluster was found down (0 when it is not)."""
        if self.state != "down" or self.since is None:
            return 0.0
        return max(0.0, now - self.since)

    def bound(self) -> float:
        """The longest a page waits for a dead cluster before it says so: the
        check it asks for starts within ``ASKED_GAP`` and fails within
        ``check_timeout``."""
        return ASKED_GAP + self.check_timeout
