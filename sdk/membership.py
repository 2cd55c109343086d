"""A consumer's group membership and commits (classic protocol), without I/O.

The driver (:class:`~trafka.sdk.group.GroupDriver`) calls :meth:`Membership.outputs`
with its clock and carries out what comes back: :class:`GroupRequest` objects
to send (each built for the version the connection negotiated), and events for
the consumer (:class:`Revoke`, :class:`Assign`, :class:`Lose`,
:class:`NeedMetadata`, :class:`AutoCommitDue`, :class:`CommitDone`,
:class:`Fatal`). It reports back with :meth:`~Membership.on_response` /
:meth:`~Membership.on_failure`, :meth:`~Membership.revoke_done` and
:meth:`~Membership.assignment_metadata`, and sleeps until
:meth:`~Membership.next_deadline`. Nothing here blocks, reads a clock or
touches a socket.

Its parts with a state of their own are objects it holds: the coordinator
lookup (:class:`~trafka.sdk.coordinator_lookup.CoordinatorLookup`) and the
``max.poll.interval.ms`` timer (:class:`~trafka.sdk.poll_timer.PollTimer`),
both shared with the share group's machine, and the ordered commit queue
(:class:`~trafka.sdk.group_commits.CommitQueue`). The types it takes and
gives are in :mod:`.membership_types` and re-exported here, for
:class:`~trafka.sdk.consumer_membership.ConsumerMembership` (KIP-848) uses
them too.

Rules and invariants:

* Phases: ``PREPARING`` (must (re)join) -> ``JOINING`` (JoinGroup out) ->
  ``ASSIGNING`` (leader only: waiting for partition counts) -> ``SYNCING``
  (SyncGroup out) -> ``STABLE`` (heartbeats). Any phase can go back to
  ``PREPARING``; ``CLOSED`` is final. At most one JoinGroup, SyncGroup,
  Heartbeat, FindCoordinator and OffsetCommit are in flight at a time.
* The coordinator is found with FindCoordinator (to any broker) whenever there
  is group work and none is known; every coordinator request carries the
  coordinator it was meant for, and a failure or NOT_COORDINATOR from the
  current one forgets it. Requests back off exponentially from
  ``retry.backoff.ms`` to ``retry.backoff.max.ms``.
* Errors are handled as :func:`~trafka.sdk.group_protocol.classify` says:
  REJOIN goes back to ``PREPARING`` keeping the partitions; RESET loses them
  (:class:`Lose`, no commit) and forgets the generation (and the member id,
  unless the member is static); FATAL stops everything (:class:`Fatal`).
  A response from an older generation than the current one is ignored.
* Revocation comes first and is a step the driver must finish
  (:meth:`Membership.revoke_done`): the driver commits consumed positions (with
  auto-commit) and runs the listener. Eager protocols revoke every owned
  partition before JoinGroup; cooperative-sticky revokes only what the new
  assignment takes away, after SyncGroup, then rejoins once so the partitions
  can move (KIP-429). :class:`Assign` is only emitted after the revocation of
  the same rebalance is done, so listener calls keep their order.
* JoinGroup offers each assignor with its own metadata: the subscription,
  the owned partitions and the generation, plus the assignor's user data
  (:func:`~trafka.sdk.assignors.subscription_user_data`): ``sticky`` carries
  the last assignment received and its generation, kept across revocations,
  losses and leaves, so that the leader can keep partitions with the members
  that held them even though an eager member owns nothing when it joins.
* Heartbeats go every ``heartbeat.interval.ms`` in ``STABLE``. With no
  successful heartbeat for ``session.timeout.ms`` the coordinator is
  forgotten and found again.
* ``max.poll.interval.ms``: when the application has not polled for that long
  (and is not inside a poll) while ``STABLE``, the member leaves the group
  (LeaveGroup unless static), its partitions are lost, and it rejoins at the
  next poll.
* Metadata: a change of the subscribed topics since the last JoinGroup makes a
  ``STABLE`` member rejoin; a change of their partition counts only the leader's,
  from the counts it assigned with (as the Java client: only the leader watches
  partition counts, and a member that joined before its metadata arrived must
  not rebalance the group when it does). A static leader the coordinator lets
  skip the assignment (KIP-345, JoinGroup v9+) still reads the counts first.
* Commits are queued in call order and leave one at a time, each retried (at
  the head of the queue, so later commits wait) on retriable errors and lost
  connections until its deadline (``default.api.timeout.ms``). A commit that
  the group's rebalance makes impossible fails with
  :class:`~trafka.sdk.group_protocol.CommitFailedError`. Every commit ends in
  exactly one :class:`CommitDone`, in queue order.
* Auto-commit: :class:`AutoCommitDue` every ``auto.commit.interval.ms`` while
  ``STABLE``; the driver answers with :meth:`Membership.commit`.
* Rebalance latency (:class:`RebalanceLatency`, Java's ``rebalance-latency``):
  from the first JoinGroup of a rebalance, retries included, to its successful
  SyncGroup.
* Coordinator metrics (:class:`~trafka.sdk.statistics.CoordinatorCounters`,
  Java's ``consumer-coordinator-metrics``): the driver reports each request it
  sends (:meth:`Membership.sending`, with its clock); the answer or failure
  measures the round trip, before the answer changes any state.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

from trafka.codec import DecodeError, ErrorCode, KafkaError

from ._backoff import backoff_delay
from .assignors import LeaderAssignment, decode_assignment, is_cooperative, join_protocols
from .consumer_types import TopicPartition
from .coordinator_lookup import CoordinatorLookup
from .group_commits import CommitQueue
from .group_protocol import (
    Action,
    classify,
    heartbeat_request,
    join_group_request,
    leave_group_request,
    sync_group_request,
)
from .membership_types import (
    Assign,
    AutoCommitDue,
    CommitDone,
    Fatal,
    GroupRequest,
    Kind,
    Lose,
    MembershipConfig,
    NeedMetadata,
    Output,
    Phase,
    RebalanceLatency,
    Revoke,
)
from .poll_timer import PollTimer
from .statistics import CoordinatorCounters

__all__ = [
    "Assign",
    "AutoCommitDue",
    "CommitDone",
    "Fatal",
    "GroupRequest",
    "Kind",
    "Lose",
    "Membership",
    "MembershipConfig",
    "NeedMetadata",
    "Output",
    "Phase",
    "RebalanceLatency",
    "Revoke",
]


class Membership:
    """The group membership and commit state machine of one consumer.

    Args:
        config: see :class:`MembershipConfig`.
        now: the driver's clock (seconds) at creation.
        rng: for backoff jitter (tests pass a seeded one).
    """

    def __init__(self, config: MembershipConfig, now: float, rng: random.Random | None = None):
        self.config = config
        self._rng = rng or random.Random()
        self.phase = Phase.PREPARING if config.managed else Phase.STABLE
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.owned: frozenset[TopicPartition] = frozenset()
        # The last assignment and its generation, which the sticky assignors report
        # in the next JoinGroup even after the partitions were revoked or lost.
        self._assigned: frozenset[TopicPartition] | None = None
        self._assigned_generation = -1
        self.rebalances = 0
        self.rebalance_latency = RebalanceLatency()
        self.metrics = CoordinatorCounters()
        self.fatal: BaseException | None = None
        self._events: deque[Output] = deque()
        self.lookup = CoordinatorLookup(config, now, self._rng)
        self.commits = CommitQueue(config, self._rng, self._events.append)
        # subscription and metadata
        self._topics: tuple[str, ...] = ()
        self._counts: dict[str, int] = {}
        self._joined: tuple[str, ...] | None = None
        self._assigned_with: dict[str, int] | None = None  # the leader's counts
        self._has_subscription = False
        # rebalancing
        self._join_failures = 0
        self._join_at = now
        self._revoking: frozenset[TopicPartition] | None = None
        self._after_revoke: list[Output] = []
        self._rejoin_after_revoke = False
        self._leading: LeaderAssignment | None = None  # while ASSIGNING
        # liveness
        self._hb_in_flight = False
        self._next_heartbeat = now
        self._last_heartbeat_ok = now
        self.polls = PollTimer(config.max_poll_interval, now)
        self._next_auto_commit = now + config.auto_commit_interval

    # -- inputs from the application --------------------------------------------------------

    def set_subscription(self, topics: Iterable[str], partition_counts: Mapping[str, int]) -> None:
        """The topics the member subscribes to now, with their partition counts."""
        self._topics = tuple(sorted(set(topics)))
        self._counts = {t: partition_counts.get(t, 0) for t in self._topics}
        self._has_subscription = True
        if self.phase is Phase.STABLE and self._metadata_changed():
            self._prepare()

    def request_rejoin(self) -> None:
        """Rejoin the group (e.g. the subscription changed)."""
        if self.config.managed and self.phase is Phase.STABLE:
            self._prepare()

    def poll_started(self, now: float) -> bool:
        """The application entered a poll (``getmany`` / ``getone``).

        Returns:
            True if this lets the member rejoin (after a poll timeout): wake the driver.
        """
        return self.polls.started(now)

    def poll_ended(self, now: float) -> None:
        """The application left a poll; ``max.poll.interval.ms`` counts from here."""
        self.polls.ended(now)

    def commit(self, offsets: Mapping[TopicPartition, int], now: float, cookie: Any = None) -> None:
        """Queue a commit; a :class:`CommitDone` with ``cookie`` reports its end."""
        if not offsets:
            self._events.append(CommitDone({}, cookie, None))
            return
        if self.fatal is not None:
            self._events.append(CommitDone(dict(offsets), cookie, self.fatal))
            return
        self.commits.add(offsets, cookie, now)

    def revoke_done(self, now: float) -> None:
        """The driver finished the :class:`Revoke` it was given."""
        revoked = self._revoking
        if revoked is None:
            return
        self._revoking = None
        self.owned = self.owned - revoked
        self._events.extend(self._after_revoke)
        self._after_revoke = []
        if self._rejoin_after_revoke and self.phase is Phase.STABLE:
            self._rejoin_after_revoke = False
            self._prepare()

    def assignment_metadata(self, partition_counts: Mapping[str, int], now: float) -> None:
        """Partition counts for :class:`NeedMetadata`'s topics (the leader's assignment)."""
        if self.phase is not Phase.ASSIGNING:
            return
        self._assigned_with = {t: partition_counts.get(t, 0) for t in self._topics}
        leading = self._leading
        protocol = self.protocol or "range"
        self._send_sync({} if leading is None else leading.assignments(protocol, partition_counts))

    @property
    def heartbeat_in_flight(self) -> bool:
        """A heartbeat has been handed out and has neither an answer nor a failure yet:
        the leave waits for it, so that it cannot reach the coordinator after the leave
        (and, in the consumer protocol, join the member again)."""
        return self._hb_in_flight

    def leave(self, now: float, reason: str = "closing") -> GroupRequest | None:
        """Stop being a member; the LeaveGroup to send, if any (static members send none)."""
        request = None
        cfg = self.config
        if (
            cfg.managed
            and self.member_id
            and cfg.instance_id is None
            and self.coordinator is not None
        ):
            member = self.member_id
            request = GroupRequest(
                Kind.LEAVE,
                partial(_leave_body, group_id=cfg.group_id, member_id=member, reason=reason),
                self.coordinator,
                cfg.request_timeout,
                self.generation,
            )
        self.phase = Phase.CLOSED
        self.owned = frozenset()
        if cfg.instance_id is None:
            self.member_id = ""
        self.generation = -1
        return request

    # -- what to do now ---------------------------------------------------------------------

    def outputs(self, now: float) -> list[Output]:
        """Requests to send and events to handle now, in order."""
        if self.fatal is None and self.phase is not Phase.CLOSED:
            self._check_timers(now)
            self._maybe_find_coordinator(now)
            if self.config.managed:
                self._maybe_join(now)
                self._maybe_heartbeat(now)
        self.commits.send_due(now, self.coordinator, self.generation, self.member_id)
        out = list(self._events)
        self._events.clear()
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`outputs` may have something new without any input (None: never)."""
        times: list[float] = []
        alive = self.fatal is None and self.phase is not Phase.CLOSED
        find_at = self.lookup.deadline()
        if alive and find_at is not None and self._wants_coordinator():
            times.append(find_at)
        if alive and self.config.managed:
            if self.phase is Phase.PREPARING and self._can_join():
                times.append(self._join_at)
            if self.phase is Phase.STABLE:
                if self.coordinator is not None:
                    if not self._hb_in_flight:
                        times.append(self._next_heartbeat)
                    times.append(self._last_heartbeat_ok + self.config.session_timeout)
                poll_by = self.polls.deadline()
                if poll_by is not None:
                    times.append(poll_by)
                if self.config.auto_commit:
                    times.append(self._next_auto_commit)
        commit_at = self.commits.deadline(self.coordinator is not None)
        if commit_at is not None:
            times.append(commit_at)
        return min(times) if times else None

    # -- responses ----------------------------------------------------------------------------

    def sending(self, request: GroupRequest, now: float) -> None:
        """The driver sends ``request`` now (for the coordinator metrics)."""
        heartbeat = request.kind in (Kind.HEARTBEAT, Kind.CONSUMER_HEARTBEAT)
        self.metrics.sending(request, now, heartbeat and request.generation >= 0)

    def _measure(self, request: GroupRequest, code: int | None, now: float) -> None:
        """Java's coordinator sensors for ``request``'s answer (``code``: its
        error code) or failure (``code`` None), read before it changes the state."""
        took = self.metrics.took(request, now)
        kind = request.kind
        metrics = self.metrics
        if kind in (Kind.JOIN, Kind.SYNC):
            phase = Phase.JOINING if kind is Kind.JOIN else Phase.SYNCING
            if self.phase is not phase or not self._current(request):
                return
            if code == 0:
                if took is not None:
                    (metrics.join if kind is Kind.JOIN else metrics.sync).record(now, took)
            else:
                # As Java, whose join future fails then: MEMBER_ID_REQUIRED (KIP-394)
                # included, so a new member's first join counts one.
                metrics.failed_rebalances.record(now)
        elif code is not None and took is not None:
            if kind is Kind.OFFSET_COMMIT:
                metrics.commit.record(now, took)
            elif kind is Kind.HEARTBEAT or (
                kind is Kind.CONSUMER_HEARTBEAT and request.generation >= 0
            ):
                metrics.heartbeat.record(now, took)

    def on_response(self, request: GroupRequest, version: int, body: Any, now: float) -> None:
        """The response to ``request`` (decoded at ``version``)."""
        kind = request.kind
        self._measure(request, getattr(body, "error_code", 0), now)
        if kind is Kind.FIND_COORDINATOR:
            self._on_find(version, body, now)
        elif kind is Kind.OFFSET_COMMIT:
            self._on_commit(request, body, now)
        elif kind is Kind.JOIN:
            self._on_join(request, body, now)
        elif kind is Kind.SYNC:
            self._on_sync(request, body, now)
        elif kind is Kind.HEARTBEAT:
            self._on_heartbeat(request, body.error_code, now)
        # LeaveGroup's answer changes nothing: the member is gone either way.

    def on_failure(self, request: GroupRequest, error: BaseException, now: float) -> None:
        """``request`` got no response (connection lost, timeout, no common version)."""
        kind = request.kind
        self._measure(request, None, now)
        if kind is Kind.FIND_COORDINATOR:
            self.lookup.on_failure(now, error)
            return
        self._lost_coordinator(request.coordinator, now)
        if kind is Kind.OFFSET_COMMIT:
            self.commits.on_failure(request, error, now)
        elif kind in (Kind.JOIN, Kind.SYNC):
            if self._current(request) and self.phase in (Phase.JOINING, Phase.SYNCING):
                self._join_failed(now)
        elif kind is Kind.HEARTBEAT:
            self._hb_in_flight = False
            self._next_heartbeat = now + self.config.retry_backoff

    # -- coordinator ----------------------------------------------------------------------

    @property
    def coordinator(self) -> tuple[int, str, int] | None:
        """The group's coordinator, ``(node_id, host, port)``; None while it is looked for."""
        return self.lookup.coordinator

    def _wants_coordinator(self) -> bool:
        return self.commits.queued or (
            self.config.managed and self.phase is not Phase.CLOSED and self._has_subscription
        )

    def _maybe_find_coordinator(self, now: float) -> None:
        if not self._wants_coordinator():
            return
        build = self.lookup.start(now)
        if build is not None:
            request = GroupRequest(Kind.FIND_COORDINATOR, build, None, self.config.request_timeout)
            self._events.append(request)

    def _on_find(self, version: int, body: Any, now: float) -> None:
        code = self.lookup.on_answer(version, body, now)
        if code:
            group = self.config.group_id
            hint = (
                f": the client's principal needs READ on group {group!r} (an ACL on the broker)"
                if code == ErrorCode.GROUP_AUTHORIZATION_FAILED
                else ""
            )
            self._fail(KafkaError(code, f"FindCoordinator for group {group!r}{hint}"))
        elif self.coordinator is not None:
            self._last_heartbeat_ok = now  # the session clock restarts with a coordinator

    def _lost_coordinator(self, which: tuple[int, str, int] | None, now: float) -> None:
        self.lookup.lost(which, now)

    # -- joining ----------------------------------------------------------------------------

    def _eager(self) -> bool:
        if self.protocol is not None:
            return not is_cooperative(self.protocol)
        return not all(is_cooperative(p) for p in self.config.assignors)

    def _prepare(self) -> None:
        """Go (back) to PREPARING; the partitions stay owned until revoked or lost."""
        self.phase = Phase.PREPARING
        self._hb_in_flight = False

    def _can_join(self) -> bool:
        return (
            self._has_subscription
            and self.coordinator is not None
            and not self.polls.awaiting_poll
            and self._revoking is None
        )

    def _maybe_join(self, now: float) -> None:
        if self.phase is not Phase.PREPARING or not self._can_join() or now < self._join_at:
            return
        if self._eager() and self.owned:
            self._start_revoke(self.owned)
            return
        cfg = self.config
        assert self.coordinator is not None
        protocols = join_protocols(
            cfg.assignors,
            self._topics,
            self.owned,
            generation=self.generation,
            rack=cfg.rack,
            assigned=self._assigned,
            assigned_generation=self._assigned_generation,
        )
        self._joined = self._topics
        self._assigned_with = None
        self.phase = Phase.JOINING
        self.rebalance_latency.start(now)
        self._events.append(
            GroupRequest(
                Kind.JOIN,
                partial(
                    _join_body,
                    group_id=cfg.group_id,
                    member_id=self.member_id,
                    instance_id=cfg.instance_id,
                    session_timeout_ms=int(cfg.session_timeout * 1000),
                    rebalance_timeout_ms=int(cfg.max_poll_interval * 1000),
                    protocols=protocols,
                ),
                self.coordinator,
                cfg.max_poll_interval + cfg.request_timeout,
                self.generation,
            )
        )

    def _current(self, request: GroupRequest) -> bool:
        return request.generation == self.generation

    def _join_failed(self, now: float) -> None:
        self._join_failures += 1
        cfg = self.config
        self._join_at = now + backoff_delay(
            cfg.retry_backoff, cfg.retry_backoff_max, self._join_failures, self._rng
        )
        self._prepare()

    def _on_join(self, request: GroupRequest, body: Any, now: float) -> None:
        if self.phase is not Phase.JOINING or not self._current(request):
            return
        code = body.error_code
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            # KIP-394: join again at once with the id the coordinator gave us.
            self.member_id = body.member_id
            self._join_at = now
            self._prepare()
            return
        if code:
            self._on_group_error(code, f"JoinGroup {self.config.group_id!r}", request, now)
            return
        kind = body.protocol_type  # v7+; None before, or when not sent
        if body.protocol_name not in self.config.assignors or kind not in (None, "consumer"):
            # As the Java client: a protocol we did not offer cannot be followed.
            self._fail(
                KafkaError(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    f"the coordinator of group {self.config.group_id!r} chose protocol "
                    f"{body.protocol_name!r} (type {kind!r}); this member offered "
                    f"{', '.join(self.config.assignors)} (type 'consumer')",
                )
            )
            return
        self._join_failures = 0
        self.member_id = body.member_id
        self.generation = body.generation_id
        self.protocol = body.protocol_name
        if body.leader == body.member_id:
            skip = getattr(body, "skip_assignment", False)
            self._leading = None if skip else LeaderAssignment.from_join(body.members)
            self.phase = Phase.ASSIGNING
            topics = frozenset(self._topics) if self._leading is None else self._leading.topics
            self._events.append(NeedMetadata(topics))
        else:
            self._send_sync({})

    def _send_sync(self, assignments: dict[str, bytes]) -> None:
        cfg = self.config
        self.phase = Phase.SYNCING
        self._events.append(
            GroupRequest(
                Kind.SYNC,
                partial(
                    _sync_body,
                    group_id=cfg.group_id,
                    generation=self.generation,
                    member_id=self.member_id,
                    instance_id=cfg.instance_id,
                    protocol=self.protocol,
                    assignments=assignments,
                ),
                self.coordinator,
                cfg.max_poll_interval + cfg.request_timeout,
                self.generation,
            )
        )

    def _on_sync(self, request: GroupRequest, body: Any, now: float) -> None:
        if self.phase is not Phase.SYNCING or not self._current(request):
            return
        code = body.error_code
        if code:
            self._on_group_error(code, f"SyncGroup {self.config.group_id!r}", request, now)
            return
        try:
            new = frozenset(decode_assignment(body.assignment))
        except DecodeError as exc:
            self._fail(KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"bad assignment: {exc}"))
            return
        self.rebalances += 1
        self.rebalance_latency.end(now)
        self._assigned, self._assigned_generation = new, self.generation
        eager = self._eager()
        revoked = self.owned - new
        added = new - self.owned
        self.phase = Phase.STABLE
        self._next_heartbeat = now + self.config.heartbeat_interval
        self._last_heartbeat_ok = now
        assigned = Assign(new if eager else added)
        announce = eager or bool(added)
        if revoked:
            # Cooperative: revoke what moved, then assign, then rejoin so that the
            # revoked partitions reach their new owner.
            self.owned = self.owned | added
            self._start_revoke(revoked)
            if announce:
                self._after_revoke.append(assigned)
            self._rejoin_after_revoke = not eager
        else:
            self.owned = new
            if announce:
                self._events.append(assigned)
        if self._revoking is None and self._metadata_changed():
            self._prepare()

    def _start_revoke(self, tps: frozenset[TopicPartition]) -> None:
        self._revoking = tps
        self._events.append(Revoke(tps))

    def _metadata_changed(self) -> bool:
        if self._joined is not None and self._joined != self._topics:
            return True
        counts = self._assigned_with or {}
        return any(self._counts.get(t, 0) != n for t, n in counts.items())

    def _on_group_error(self, code: int, what: str, request: GroupRequest, now: float) -> None:
        action = classify(code)
        if action is Action.FATAL:
            self._fail(KafkaError(code, what))
        elif action is Action.RESET:
            self._reset()
            self._join_at = now
        elif action is Action.REDISCOVER:
            self._lost_coordinator(request.coordinator, now)
            self._join_failed(now)
        elif action is Action.REJOIN:
            self._join_at = now
            self._prepare()
        else:
            self._join_failed(now)

    def _reset(self) -> None:
        """Our membership is gone: lose the partitions, start afresh."""
        lost = self.owned
        self.owned = frozenset()
        if self._revoking is not None:
            self._revoking = None
            self._after_revoke = []
        if lost:
            self._events.append(Lose(lost))
        if self.config.instance_id is None:
            self.member_id = ""
        self.generation = -1
        self.protocol = None
        self._prepare()

    def _fail(self, error: BaseException) -> None:
        if self.fatal is None:
            self.fatal = error
            self._events.append(Fatal(error))
            self.commits.fail_all(error)

    # -- liveness -----------------------------------------------------------------------------

    def _check_timers(self, now: float) -> None:
        if self.phase is not Phase.STABLE or not self.config.managed:
            return
        cfg = self.config
        if self.polls.expired(now):
            self._poll_timeout(now)
            return
        if self.coordinator is not None and now >= self._last_heartbeat_ok + cfg.session_timeout:
            self._lost_coordinator(self.coordinator, now)
        if cfg.auto_commit and now >= self._next_auto_commit:
            self._next_auto_commit = now + cfg.auto_commit_interval
            self._events.append(AutoCommitDue())

    def _poll_timeout(self, now: float) -> None:
        """The application stopped polling: leave, lose the partitions, rejoin at the next poll."""
        lost = self.owned
        request = self.leave(now, reason="consumer poll timeout has expired")
        if request is not None:
            self._events.append(request)
        if lost:
            self._events.append(Lose(lost))
        self.protocol = None
        self.polls.awaiting_poll = True
        self._prepare()

    def _maybe_heartbeat(self, now: float) -> None:
        if (
            self.phase is not Phase.STABLE
            or self._hb_in_flight
            or self.coordinator is None
            or now < self._next_heartbeat
        ):
            return
        cfg = self.config
        self._hb_in_flight = True
        self._events.append(
            GroupRequest(
                Kind.HEARTBEAT,
                partial(
                    _heartbeat_body,
                    group_id=cfg.group_id,
                    generation=self.generation,
                    member_id=self.member_id,
                    instance_id=cfg.instance_id,
                ),
                self.coordinator,
                cfg.request_timeout,
                self.generation,
            )
        )

    def _on_heartbeat(self, request: GroupRequest, code: int, now: float) -> None:
        self._hb_in_flight = False
        cfg = self.config
        if not self._current(request) or self.phase is not Phase.STABLE:
            return
        if not code:
            self._last_heartbeat_ok = now
            self._next_heartbeat = now + cfg.heartbeat_interval
            return
        action = classify(code)
        if action is Action.RETRY:
            self._next_heartbeat = now + cfg.retry_backoff
        elif action is Action.REDISCOVER:
            self._lost_coordinator(request.coordinator, now)
            self._next_heartbeat = now
        else:
            self._on_group_error(code, f"Heartbeat {cfg.group_id!r}", request, now)

    # -- commits ------------------------------------------------------------------------------

    def _on_commit(self, request: GroupRequest, body: Any, now: float) -> None:
        action = self.commits.on_answer(request, body, now)
        if action in (Action.REJOIN, Action.RESET):
            # The commit failed because the group rebalanced: so does this member.
            if self.config.managed and self._current(request) and self.phase is not Phase.CLOSED:
                if action is Action.RESET:
                    self._reset()
                    self._join_at = now
                elif self.phase is Phase.STABLE:
                    self._prepare()
        elif action is Action.REDISCOVER:
            self._lost_coordinator(request.coordinator, now)


# -- request bodies (module functions so that requests are cheap to build and compare) --------


def _join_body(version: int, **kw: Any) -> Any:
    group_id = kw.pop("group_id")
    member_id = kw.pop("member_id")
    instance_id = kw.pop("instance_id")
    return join_group_request(version, group_id, member_id, instance_id, **kw)


def _sync_body(version: int, **kw: Any) -> Any:
    return sync_group_request(
        version,
        kw["group_id"],
        kw["generation"],
        kw["member_id"],
        kw["instance_id"],
        kw["protocol"],
        kw["assignments"],
    )


def _heartbeat_body(version: int, **kw: Any) -> Any:
    return heartbeat_request(
        version, kw["group_id"], kw["generation"], kw["member_id"], kw["instance_id"]
    )


def _leave_body(version: int, *, group_id: str, member_id: str, reason: str) -> Any:
    return leave_group_request(version, group_id, member_id, reason)
