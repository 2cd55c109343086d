"""Finding a group's coordinator (FindCoordinator), without I/O.

A group member (:class:`~trafka.sdk.membership.Membership`, its KIP-848
subclass :class:`~trafka.sdk.consumer_membership.ConsumerMembership`, and the
share group's :class:`~trafka.sdk.share_membership.ShareMembership`) holds one
:class:`CoordinatorLookup`: it asks :meth:`~CoordinatorLookup.start` for a
lookup whenever it has group work and knows no coordinator, wraps what comes
back in its own request type, and reports the answer or the failure. Nothing
here reads a clock or touches a socket.

Rules and invariants:

* At most one FindCoordinator is out at a time; it goes to any broker, with
  the group as its key (key type 0).
* A lookup waits for the backoff of the last one: a retriable error or a
  failure backs off exponentially from ``retry.backoff.ms`` to
  ``retry.backoff.max.ms``, counting the failures since the last success.
* An error no retry can fix (as :func:`~trafka.sdk.group_protocol.classify`
  says, GROUP_AUTHORIZATION_FAILED among them) is the caller's to report: the
  lookup gives it back and tries no more until asked.
* A request to the coordinator that failed, or an answer saying it is not the
  coordinator, forgets it (:meth:`~CoordinatorLookup.lost`) only when it is
  still the one known: an old request's failure never forgets a newer one.
  The next lookup may start at once, or when a backoff already running ends.
* While no coordinator is known, :attr:`~CoordinatorLookup.problem` says why
  (the last lookup's retriable error, or its failure), for the member's user:
  the member itself only retries.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from trafka.codec import KafkaError

from ._backoff import backoff_delay
from .group_protocol import Action, classify, find_coordinator_request, read_find_coordinator

__all__ = ["CoordinatorLookup", "coordinator_problem"]

Coordinator = tuple[int, str, int]


class LookupSettings(Protocol):
    """What a lookup needs of its member's settings (both group machines' configs have it)."""

    @property
    def group_id(self) -> str: ...

    @property
    def retry_backoff(self) -> float: ...

    @property
    def retry_backoff_max(self) -> float: ...


class CoordinatorLookup:
    """The coordinator of one group, and the lookups that find it (see the module doc).

    Args:
        settings: the group (``group_id``) and the backoff's bounds
            (``retry_backoff``, ``retry_backoff_max``, seconds).
        now: the driver's clock (seconds): the first lookup may start at once.
        rng: for backoff jitter.

    Attributes:
        coordinator: ``(node_id, host, port)``, or None while none is known.
        finding: a FindCoordinator is out (neither answered nor failed yet).
        problem: why the last lookup found no coordinator (a retriable error's
            :class:`~trafka.codec.KafkaError`, or the request's failure); None
            once one is found, and before the first lookup ends.
    """

    def __init__(self, settings: LookupSettings, now: float, rng: random.Random) -> None:
        self.group_id = settings.group_id
        self.coordinator: Coordinator | None = None
        self.finding = False
        self.problem: BaseException | None = None
        self._retry_backoff = settings.retry_backoff
        self._retry_backoff_max = settings.retry_backoff_max
        self._rng = rng
        self._failures = 0
        self._find_at = now

    def start(self, now: float) -> Callable[[int], Any] | None:
        """A lookup to send now: ``build(version) -> FindCoordinator request``; None
        when a coordinator is known, a lookup is out or the backoff runs."""
        if self.coordinator is not None or self.finding or now < self._find_at:
            return None
        self.finding = True
        return partial(_find_body, group_id=self.group_id)

    def deadline(self) -> float | None:
        """When :meth:`start` gives a lookup (None: a coordinator is known or a lookup is out)."""
        if self.coordinator is not None or self.finding:
            return None
        return self._find_at

    def on_answer(self, version: int, body: Any, now: float) -> int:
        """The lookup's answer (decoded at ``version``).

        Returns:
            0 when :attr:`coordinator` is known now, or a retriable error backs
            off to look again; otherwise the error code no retry can fix.
        """
        self.finding = False
        code, node, host, port = read_find_coordinator(version, body)
        if code:
            if classify(code) is Action.FATAL:
                return code
            self.on_failure(now, KafkaError(code, f"FindCoordinator for group {self.group_id!r}"))
            return 0
        self._failures = 0
        self.problem = None
        self.coordinator = (node, host, port)
        return 0

    def on_failure(self, now: float, error: BaseException) -> None:
        """The lookup got no answer, or a retriable error (``error`` either way):
        look again after a backoff."""
        self.finding = False
        self.problem = error
        self._failures += 1
        self._find_at = now + backoff_delay(
            self._retry_backoff, self._retry_backoff_max, self._failures, self._rng
        )

    def lost(self, which: Coordinator | None, now: float) -> None:
        """A request meant for coordinator ``which`` failed, or it is not the
        coordinator any more: forget it if it is still the one known."""
        if which is not None and which == self.coordinator:
            self.coordinator = None
            self._find_at = max(self._find_at, now)


def _find_body(version: int, *, group_id: str) -> Any:
    # A module function: requests stay cheap to build and compare.
    return find_coordinator_request(version, group_id)


def coordinator_problem(lookup: CoordinatorLookup, coordinator: Coordinator | None) -> str:
    """Why a member has no coordinator now (its statistics' ``coordinator_problem``):
    "" while it has one, or before its first lookup ended."""
    if coordinator is not None or lookup.problem is None:
        return ""
    return str(lookup.problem)
