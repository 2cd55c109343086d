"""Whether the cluster answers, watched for the pages: the checks of
:mod:`.health` run on a timer and when a page asks, and a page's work is
stopped as soon as one fails.

Rules:

* A check is one DescribeCluster that must answer within the check's timeout;
  the client's own timeout is a little shorter, so that a failure says what
  the client saw (a refused connection...) rather than only the time.
* A page's work (:meth:`ClusterWatch.while_reachable`) is refused at once as
  :class:`ClusterDown` while the cluster is down, and cancelled as
  :class:`ClusterDown` as soon as a check fails while it waits (with what
  that check saw, even when a later check found the cluster up before the
  page's task ran on); a page that starts asks for a check when none is under
  way.
* The cluster going away and coming back is logged once each (WARNING), not
  on every check.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from trafka.codec import TrafkaError
from trafka.sdk.admin import Admin

from .health import ClusterHealth

__all__ = ["ClusterDown", "ClusterWatch"]

log = logging.getLogger("trafka.console")


class ClusterDown(Exception):
    """The cluster does not answer the console's checks (see :mod:`.health`).

    Attributes:
        reason: what the last check saw.
        down_for: seconds since a check first found it so.
        during: the page had started its work (a change may or may not have
            been made) rather than being refused before it.
    """

    def __init__(self, reason: str, down_for: float, *, during: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.down_for = down_for
        self.during = during


class ClusterWatch:
    """The checks of one cluster and the pages waiting for it.

    Args:
        admin: the admin client that asks.
        health: the checks' findings and timings.
        bootstrap: the cluster's addresses, for the log.
    """

    def __init__(self, admin: Admin, health: ClusterHealth, bootstrap: str) -> None:
        self.admin = admin
        self.health = health
        self.bootstrap = bootstrap
        # The pages at work, each with what stopped it (None: nothing yet).
        self._pages: dict[anyio.CancelScope, ClusterDown | None] = {}
        self._check_wanted = anyio.Event()

    async def while_reachable(self, work: Callable[[], Awaitable[Any]]) -> Any:
        """``work()``'s result, unless the cluster is down: then
        :class:`ClusterDown`, at once when it was already found down, or as soon
        as a check finds it so while ``work`` waits (which asks for a check
        when none is under way)."""
        self._raise_if_down(during=False)
        self._check_wanted.set()
        scope = anyio.CancelScope()
        self._pages[scope] = None
        try:
            with scope:
                return await work()
        finally:
            stopped = self._pages.pop(scope)
        # Only a failed check cancels the scope, and it says why first: what the
        # page reports even when a later check found the cluster up again
        # before the page's task ran on.
        if stopped is None:
            raise AssertionError("a page's work was cancelled without a failed check")
        raise stopped

    def _raise_if_down(self, *, during: bool) -> None:
        h = self.health
        if h.down:
            raise ClusterDown(h.reason, h.down_for(anyio.current_time()), during=during)

    async def check_cluster(self) -> None:
        """One check of :mod:`.health`: DescribeCluster answered within the
        check's timeout. A failure stops every page waiting for the cluster."""
        h = self.health
        h.check_started(anyio.current_time())
        reason = f"no answer within {h.check_timeout:g} s"
        answered = False
        with anyio.move_on_after(h.check_timeout):
            try:
                # A little less than the check's own time, so that a failure
                # says what the client saw (a refused connection...).
                await self.admin.describe_cluster(timeout_ms=math.ceil(h.check_timeout * 800))
                answered = True
            except TrafkaError as exc:
                reason = str(exc)
        now = anyio.current_time()
        if answered:
            change = h.check_answered(now)
            if change is not None and h.checks > 1:
                log.warning("the cluster at %s answers again", self.bootstrap)
            return
        change = h.check_failed(now, reason)
        for scope in list(self._pages):
            self._pages[scope] = ClusterDown(h.reason, h.down_for(now), during=True)
            scope.cancel()
        if change is not None:
            log.warning(
                "the cluster at %s does not answer (%s); the console's pages say so until it does",
                self.bootstrap,
                reason,
            )

    async def watch_cluster(self) -> None:
        """Check the cluster every ``health.interval`` seconds, and at once when a
        page asks, until cancelled."""
        while True:
            now = anyio.current_time()
            at = self.health.next_check(now, asked=self._check_wanted.is_set())
            if at > now:
                if self._check_wanted.is_set():
                    await anyio.sleep(at - now)
                else:
                    with anyio.move_on_after(at - now):
                        await self._check_wanted.wait()
                continue
            self._check_wanted = anyio.Event()
            await self.check_cluster()
