"""A group member's ordered commit queue (OffsetCommit), without I/O.

The membership state machines (:class:`~trafka.sdk.membership.Membership` and
:class:`~trafka.sdk.consumer_membership.ConsumerMembership`) hold one
:class:`CommitQueue`: they queue the application's commits, let the head go
when a coordinator is known, and hand the answers back. What a commit's
failure means for the membership itself (a rebalance, a lost coordinator) is
theirs to act on; the queue says which it was. Nothing here reads a clock or
touches a socket.

Rules and invariants:

* Commits leave in call order, one at a time: the head stays at the head
  while it is out and while it backs off after a retriable error or a lost
  connection (``retry.backoff.ms`` to ``retry.backoff.max.ms``), so a later
  commit never overtakes an earlier one.
* Each commit has a deadline (``default.api.timeout.ms`` from its queuing);
  one that has not succeeded by then ends with REQUEST_TIMED_OUT, whether it
  could be sent or not (no coordinator).
* An error code that means the group rebalanced (REJOIN or RESET, as
  :func:`~trafka.sdk.group_protocol.classify` says) fails the commit with
  :class:`~trafka.sdk.group_protocol.CommitFailedError`; a code no retry can
  fix fails it with that code; any other code retries it.
* Every queued commit ends in exactly one
  :class:`~trafka.sdk.membership_types.CommitDone`, in queue order, given to
  the ``emit`` function of the member.
* A member of the group commits with its generation (or member epoch) and
  member id; a consumer that only commits (``managed=False``) or has no
  generation yet commits with -1 and no member id. The static instance id
  goes from OffsetCommit v7 on.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from trafka.codec import ErrorCode, KafkaError

from ._backoff import backoff_delay
from .consumer_types import TopicPartition
from .group_protocol import (
    Action,
    CommitFailedError,
    classify,
    offset_commit_request,
    read_offset_commit,
)
from .membership_types import CommitDone, GroupRequest, Kind, MembershipConfig, Output, QueuedCommit

__all__ = ["CommitQueue"]


class CommitQueue:
    """The commits of one group member (see the module doc).

    Args:
        config: the member's settings.
        rng: for backoff jitter.
        emit: where each :class:`~trafka.sdk.membership_types.CommitDone` and
            OffsetCommit :class:`~trafka.sdk.membership_types.GroupRequest` goes.

    Attributes:
        in_flight: the commit whose OffsetCommit is out, or None.
    """

    def __init__(
        self, config: MembershipConfig, rng: random.Random, emit: Callable[[Output], None]
    ) -> None:
        self.config = config
        self._rng = rng
        self._emit = emit
        self._queue: deque[QueuedCommit] = deque()
        self.in_flight: QueuedCommit | None = None

    @property
    def queued(self) -> bool:
        """Commits wait in the queue (the one out included)."""
        return bool(self._queue)

    def add(self, offsets: Mapping[TopicPartition, int], cookie: Any, now: float) -> None:
        """Queue a commit of ``offsets``; its :class:`CommitDone` carries ``cookie``."""
        self._queue.append(QueuedCommit(dict(offsets), cookie, now + self.config.commit_timeout))

    def fail_all(self, error: BaseException) -> None:
        """End every queued commit with ``error`` (the member cannot go on)."""
        for commit in self._queue:
            self._emit(CommitDone(commit.offsets, commit.cookie, error))
        self._queue.clear()

    def send_due(
        self,
        now: float,
        coordinator: tuple[int, str, int] | None,
        generation: int,
        member_id: str,
    ) -> None:
        """End the commits past their deadline that are not out; then send the
        head if none is out, a coordinator is known and its backoff is over."""
        queue = self._queue
        while queue and self.in_flight is None and now >= queue[0].deadline:
            head = queue[0]
            self.finish(
                head,
                KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"commit not done within default.api.timeout.ms ({head.attempts} attempts)",
                ),
            )
        if not queue or self.in_flight is not None or coordinator is None:
            return
        commit = queue[0]
        if now < commit.retry_at:
            return
        commit.attempts += 1
        self.in_flight = commit
        cfg = self.config
        member = cfg.managed and generation >= 0
        self._emit(
            GroupRequest(
                Kind.OFFSET_COMMIT,
                partial(
                    _commit_body,
                    group_id=cfg.group_id,
                    offsets=commit.offsets,
                    generation=generation if member else -1,
                    member_id=member_id if member else "",
                    instance_id=cfg.instance_id if cfg.managed else None,
                ),
                coordinator,
                cfg.request_timeout,
                generation,
                commit,
            )
        )

    def deadline(self, coordinator_known: bool) -> float | None:
        """When :meth:`send_due` may have something to do (None: nothing queued or one out)."""
        if not self._queue or self.in_flight is not None:
            return None
        head = self._queue[0]
        return min(head.deadline, head.retry_at) if coordinator_known else head.deadline

    def finish(self, commit: QueuedCommit, error: BaseException | None) -> None:
        """``commit`` ended: done (``error`` None) or failed."""
        if self.in_flight is commit:
            self.in_flight = None
        if self._queue and self._queue[0] is commit:
            self._queue.popleft()
        self._emit(CommitDone(commit.offsets, commit.cookie, error))

    def again(self, commit: QueuedCommit, now: float) -> None:
        """Send ``commit`` again at once (its answer asked for a fresher member epoch)."""
        self.in_flight = None
        commit.retry_at = now

    def on_failure(self, request: GroupRequest, error: BaseException, now: float) -> None:
        """The OffsetCommit of ``request`` got no answer: retry it, within its deadline."""
        commit = request.commit
        assert commit is not None
        self.in_flight = None
        self._retry(commit, error, now)

    def on_answer(self, request: GroupRequest, body: Any, now: float) -> Action | None:
        """The OffsetCommit answer to ``request`` (see the rules).

        Returns:
            None when the commit succeeded; else what its error code means
            (:func:`~trafka.sdk.group_protocol.classify`), for the member to act on.
        """
        commit = request.commit
        assert commit is not None
        self.in_flight = None
        errors = {tp: c for tp, c in read_offset_commit(body).items() if c}
        if not errors:
            self.finish(commit, None)
            return None
        code = next(iter(errors.values()))
        action = classify(code)
        if action in (Action.REJOIN, Action.RESET):
            self.finish(
                commit,
                CommitFailedError(
                    code, f"commit failed, the group rebalanced ({len(errors)} partitions)"
                ),
            )
        elif action is Action.FATAL:
            self.finish(commit, KafkaError(code, "OffsetCommit"))
        else:
            self._retry(commit, KafkaError(code, "OffsetCommit"), now)
        return action

    def _retry(self, commit: QueuedCommit, error: BaseException, now: float) -> None:
        if now >= commit.deadline:
            self.finish(
                commit,
                KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"commit not done within default.api.timeout.ms after {commit.attempts} "
                    f"attempts: {error}",
                ),
            )
            return
        cfg = self.config
        commit.retry_at = now + backoff_delay(
            cfg.retry_backoff, cfg.retry_backoff_max, commit.attempts, self._rng
        )


def _commit_body(version: int, **kw: Any) -> Any:
    # A module function: requests stay cheap to build and compare.
    return offset_commit_request(
        version,
        kw["group_id"],
        kw["offsets"],
        generation=kw["generation"],
        member_id=kw["member_id"],
        instance_id=kw["instance_id"] if version >= 7 else None,
    )
