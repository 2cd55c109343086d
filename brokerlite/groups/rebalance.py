"""The classic group protocol's rebalance: the state machine the JoinGroup and
SyncGroup requests drive, its timers and its parked answers (sans-IO).

:class:`ClassicRebalance` is the part of :class:`~.coordinator.GroupCoordinator`
that the classic requests (:mod:`.classic`), the offsets (:mod:`.offset_requests`)
and the group admin (:mod:`.group_admin`) share: the table of live classic groups,
the timer heap and the queue of released answers. It is a base class of theirs
rather than an object of its own because all of them read and change that one
table within a request: a commit restarts a member's session timer, a deletion
drops a group whose timers must lapse. The group's own states are
:mod:`.state`'s (``ClassicGroup``).

Rules and invariants (Kafka's ``GroupCoordinator``):

* Rebalance. The join phase ends when every member has rejoined (and no id handed
  out by MEMBER_ID_REQUIRED is still outstanding), or when the rebalance timeout
  (largest of the members') expires, removing dynamic members that did not rejoin.
  The first rebalance of an empty group waits ``initial_rebalance_delay_ms``,
  extended by the same delay while new members keep arriving, never beyond the
  rebalance timeout. Then the generation id increments, the protocol is chosen by
  vote among the protocols every member supports, every joined member gets its
  JoinGroup response (the leader with the members' metadata) and the group waits
  for the leader's SyncGroup. Members that have not synced within the rebalance
  timeout are removed and the group rebalances again.
* Liveness. A member that neither heartbeats, commits nor rejoins within its session
  timeout is removed and the group rebalances, except while its JoinGroup or
  SyncGroup is parked. A new member whose first JoinGroup stays parked past
  ``new_member_join_timeout_ms`` is removed (Kafka's 5 minutes). An outstanding
  MEMBER_ID_REQUIRED id expires after the session timeout.
* Parking. Every parked JoinGroup or SyncGroup is answered exactly once (its
  answer goes to the queue that :meth:`ClassicRebalance._drain` empties), or
  dropped when its connection closes.
* Timers. A timer is a ``(group, key)`` deadline; cancelling one leaves its heap
  entry, which is skipped when it surfaces (its deadline no longer matches the
  group's). Due timers fire only in the coordinator's ``tick``. Deadlines are
  monotonic milliseconds (``mono_ms(now_ms)``): Kafka's group coordinator runs
  these timers on its ``CoordinatorTimer`` (a ``SystemTimer``, on
  ``Time.hiResClockMs``), so a step of the wall clock expires no session.
* Durability. Group metadata is written when a generation's assignment is set
  (leader SyncGroup), when a group becomes Empty and when a static member is
  replaced; a failed write leaves the live group as it is (only a restart would
  resume an older generation, whose members then rejoin).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from trafka.brokerlite.clock import mono_ms
from trafka.brokerlite.groups.consumer_groups import ConsumerGroups
from trafka.brokerlite.groups.offsets import GroupRecord, GroupStore, MemberRecord, OffsetStoreError
from trafka.brokerlite.groups.state import ClassicGroup, GroupState, Member, Waiter
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k11_join_group as _jg
from trafka.codec.messages import k14_sync_group as _sg

if TYPE_CHECKING:
    from trafka.brokerlite.groups.share_groups import ShareGroups

__all__ = [
    "HB",
    "JOIN",
    "PENDING",
    "SYNC",
    "ClassicRebalance",
    "Released",
    "join_response",
    "sync_response",
]

# The coordinator's logger: its log lines keep the name they had before the split.
log = logging.getLogger("trafka.brokerlite.groups.coordinator")

Released = list[tuple[Hashable, Any]]

HB = "hb"
PENDING = "pending"
JOIN = ("join",)
SYNC = ("sync",)


# --- responses ---------------------------------------------------------------------------------


def join_response(
    version: int,
    *,
    error: ErrorCode = ErrorCode.NONE,
    member_id: str = "",
    generation_id: int = -1,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    leader: str | None = "",
    members: list[_jg.JoinGroupResponse.JoinGroupResponseMember] | None = None,
    skip_assignment: bool = False,
) -> _jg.JoinGroupResponse:
    if version < 7 and protocol_name is None:
        # Non-nullable before v7: Kafka sends an empty string.
        protocol_name = ""
    return _jg.JoinGroupResponse(
        error_code=error,
        generation_id=generation_id,
        protocol_type=protocol_type if version >= 7 else None,
        protocol_name=protocol_name,
        leader=leader or "",
        skip_assignment=skip_assignment if version >= 9 else False,
        member_id=member_id,
        members=members or [],
    )


def sync_response(
    version: int,
    *,
    error: ErrorCode = ErrorCode.NONE,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    assignment: bytes = b"",
) -> _sg.SyncGroupResponse:
    return _sg.SyncGroupResponse(
        error_code=error,
        protocol_type=protocol_type if version >= 5 else None,
        protocol_name=protocol_name if version >= 5 else None,
        assignment=assignment,
    )


class ClassicRebalance:
    """The classic groups, their rebalances, timers and parked answers (see the
    module rules). The coordinator sets the attributes below."""

    _store: GroupStore
    _groups: dict[str, ClassicGroup]
    consumer: ConsumerGroups
    share: ShareGroups | None
    _initial_delay_ms: int
    _new_member_join_timeout_ms: int
    _retention_check_ms: int
    _heap: list[tuple[int, int, str, tuple[str, ...]]]
    _seq: int
    _out: Released
    _started: bool
    _next_cleanup_ms: int | None

    # -- the group table ------------------------------------------------------------------------

    def _start(self, now_ms: int) -> None:
        if self._started:
            return
        self._started = True
        for group in self._groups.values():
            for member in group.members.values():
                self._schedule_heartbeat(group, member, now_ms)
        self.consumer.start(now_ms)
        self._next_cleanup_ms = mono_ms(now_ms) + self._retention_check_ms

    def _is_share(self, group_id: str) -> bool:
        return self.share is not None and self.share.is_share_group(group_id)

    def _create_group(self, group_id: str, now_ms: int) -> ClassicGroup:
        group = ClassicGroup(group_id, now_ms)
        self._groups[group_id] = group
        return group

    def _persist(self, group: ClassicGroup) -> None:
        record = GroupRecord(
            protocol_type=group.protocol_type,
            generation_id=group.generation_id,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id,
            state_timestamp_ms=group.state_timestamp_ms,
            members=tuple(
                MemberRecord(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    protocol_type=m.protocol_type,
                    protocols=tuple(m.protocols),
                    assignment=m.assignment,
                )
                for m in group.members.values()
            ),
        )
        try:
            self._store.store_group(group.group_id, record)
        except OffsetStoreError as exc:
            # The live group is unaffected; only a restart would resume an older
            # generation, whose members then rejoin.
            log.error("group %r: metadata not stored: %s", group.group_id, exc)

    def _delete_consumer_group(self, group_id: str) -> ErrorCode:
        try:
            self._store.delete_group(group_id)
        except OffsetStoreError as exc:
            log.error("group %r: deletion not stored: %s", group_id, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self.consumer.delete(group_id)
        log.info("consumer group %r: deleted", group_id)
        return ErrorCode.NONE

    def _delete_group(self, group_id: str) -> ErrorCode:
        try:
            self._store.delete_group(group_id)
        except OffsetStoreError as exc:
            log.error("group %r: deletion not stored: %s", group_id, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        # Its timers die with it: heap entries of a missing group are skipped.
        del self._groups[group_id]
        log.info("group %r: deleted", group_id)
        return ErrorCode.NONE

    # -- rebalance machinery --------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now_ms)
        else:
            self._maybe_complete_join_phase(group, now_ms)

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(
                group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms
            )
        group.pending_sync.clear()
        self._cancel(group, SYNC)
        initial = group.state is GroupState.EMPTY
        if initial:
            group.new_member_added = False
            group.join_timer_is_initial = True
            group.initial_delay_ms = self._initial_delay_ms
            group.initial_remaining_ms = max(
                group.rebalance_timeout_ms() - self._initial_delay_ms, 0
            )
            self._schedule(group, JOIN, mono_ms(now_ms) + self._initial_delay_ms)
        log.info(
            "group %r: preparing rebalance from %s (generation %d)",
            group.group_id,
            group.state.value,
            group.generation_id,
        )
        group.transition(GroupState.PREPARING_REBALANCE, now_ms)
        if not initial:
            if group.has_all_members_joined():
                self._complete_join(group, now_ms)
            else:
                group.join_timer_is_initial = False
                self._schedule(group, JOIN, mono_ms(now_ms) + group.rebalance_timeout_ms())

    def _maybe_complete_join_phase(self, group: ClassicGroup, now_ms: int) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            # The initial rebalance always waits for its delay to run out.
            and group.previous_state is not GroupState.EMPTY
            and group.has_all_members_joined()
        ):
            self._complete_join(group, now_ms)

    def _try_complete_initial_rebalance(
        self, group: ClassicGroup, fired_at: int, now_ms: int
    ) -> None:
        if group.new_member_added and group.initial_remaining_ms != 0:
            group.new_member_added = False
            delay = min(self._initial_delay_ms, group.initial_remaining_ms)
            remaining = max(group.initial_remaining_ms - group.initial_delay_ms, 0)
            group.initial_delay_ms = delay
            group.initial_remaining_ms = remaining
            # Chain from the deadline, not from a late tick, so the total wait stays
            # bounded by the rebalance timeout.
            self._schedule(group, JOIN, fired_at + delay)
        else:
            self._complete_join(group, now_ms)

    def _complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        self._cancel(group, JOIN)
        for member in group.not_yet_rejoined():
            if not member.is_static:
                log.info(
                    "group %r: removing member %r, which did not rejoin in time",
                    group.group_id,
                    member.member_id,
                )
                self._answer_removed(member)
                group.remove(member.member_id)
                self._cancel(group, (HB, member.member_id))
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait another round for
            # them to rejoin or for their sessions to expire.
            group.join_timer_is_initial = False
            self._schedule(group, JOIN, mono_ms(now_ms) + group.rebalance_timeout_ms())
            return
        group.init_next_generation(now_ms)
        if group.state is GroupState.EMPTY:
            log.info("group %r: generation %d is empty", group.group_id, group.generation_id)
            self._persist(group)
            return
        log.info(
            "group %r: generation %d with %d members, protocol %r, leader %r",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )
        for member in list(group.members.values()):
            waiter = group.set_join_waiter(member, None)
            if waiter is not None:
                self._answer_join_with_generation(group, waiter, member.member_id)
            self._schedule_heartbeat(group, member, now_ms)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        group.sync_generation = group.generation_id
        self._schedule(group, SYNC, mono_ms(now_ms) + group.rebalance_timeout_ms())

    def _expire_pending_sync(self, group: ClassicGroup, now_ms: int) -> None:
        if group.sync_generation != group.generation_id:
            return
        if (
            group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
            and group.pending_sync
        ):
            late = sorted(group.pending_sync)
            log.info("group %r: removing %s, which did not sync in time", group.group_id, late)
            for member_id in late:
                member = group.remove(member_id)
                if member is not None:
                    self._answer_removed(member)
                self._cancel(group, (HB, member_id))
            self._prepare_rebalance(group, now_ms)

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel(group, SYNC)

    def _reset_and_propagate_assignment_error(
        self, group: ClassicGroup, error: ErrorCode, now_ms: int
    ) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error, now_ms)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode, now_ms: int) -> None:
        ok = error is ErrorCode.NONE
        for member in group.members.values():
            waiter = member.sync_waiter
            if waiter is None:
                continue
            member.sync_waiter = None
            self._out.append(
                (
                    waiter.token,
                    sync_response(
                        waiter.version,
                        error=error,
                        protocol_type=group.protocol_type if ok else None,
                        protocol_name=group.protocol_name if ok else None,
                        assignment=member.assignment,
                    ),
                )
            )
            # Its session timer may have lapsed while it waited; start it afresh.
            self._schedule_heartbeat(group, member, now_ms)

    def _remove_member_and_update(self, group: ClassicGroup, member: Member, now_ms: int) -> None:
        self._answer_removed(member)
        group.remove(member.member_id)
        self._cancel(group, (HB, member.member_id))
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
        elif group.state is GroupState.PREPARING_REBALANCE and group.has_all_members_joined():
            self._complete_join(group, now_ms)

    # -- timers ---------------------------------------------------------------------------------

    def _schedule(self, group: ClassicGroup, key: tuple[str, ...], deadline: int) -> None:
        group.timers[key] = deadline
        self._seq += 1
        heapq.heappush(self._heap, (deadline, self._seq, group.group_id, key))

    def _cancel(self, group: ClassicGroup, key: tuple[str, ...]) -> None:
        # The heap entry stays and is skipped when it surfaces.
        group.timers.pop(key, None)

    def _schedule_heartbeat(self, group: ClassicGroup, member: Member, now_ms: int) -> None:
        self._schedule(group, (HB, member.member_id), mono_ms(now_ms) + member.session_timeout_ms)

    def _fire(self, group: ClassicGroup, key: tuple[str, ...], deadline: int, now_ms: int) -> None:
        kind = key[0]
        if kind == HB:
            member = group.members.get(key[1])
            # Members with a parked JoinGroup or SyncGroup are waiting on the group, not
            # the other way round; their timer restarts when the wait ends.
            if member is not None and (
                member.is_new or (member.join_waiter is None and member.sync_waiter is None)
            ):
                log.info("group %r: member %r session expired", group.group_id, member.member_id)
                self._remove_member_and_update(group, member, now_ms)
        elif kind == PENDING:
            if key[1] in group.pending_members:
                group.remove(key[1])
                if group.state is GroupState.PREPARING_REBALANCE and group.has_all_members_joined():
                    self._complete_join(group, now_ms)
        elif key == JOIN:
            if group.join_timer_is_initial:
                self._try_complete_initial_rebalance(group, deadline, now_ms)
            else:
                self._complete_join(group, now_ms)
        elif key == SYNC:
            self._expire_pending_sync(group, now_ms)

    # -- answering ------------------------------------------------------------------------------

    def _drain(self) -> Released:
        out, self._out = self._out, []
        return out

    def _answer_join(self, waiter: Waiter, error: ErrorCode, member_id: str) -> None:
        self._out.append(
            (waiter.token, join_response(waiter.version, error=error, member_id=member_id))
        )

    def _answer_sync(self, waiter: Waiter, error: ErrorCode) -> None:
        self._out.append((waiter.token, sync_response(waiter.version, error=error)))

    def _answer_join_with_generation(
        self,
        group: ClassicGroup,
        waiter: Waiter,
        member_id: str,
        *,
        with_members: bool | None = None,
        leader: str | None = None,
        skip: bool = False,
    ) -> None:
        if with_members is None:
            with_members = group.is_leader(member_id)
        members = None
        if with_members:
            protocol = group.protocol_name or ""
            members = [
                _jg.JoinGroupResponse.JoinGroupResponseMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata(protocol),
                )
                for m in group.members.values()
            ]
        self._out.append(
            (
                waiter.token,
                join_response(
                    waiter.version,
                    member_id=member_id,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=leader if leader is not None else group.leader_id,
                    members=members,
                    skip_assignment=skip,
                ),
            )
        )

    def _answer_removed(self, member: Member) -> None:
        """Answer the parked requests of a member that is being removed."""
        if member.join_waiter is not None:
            # Kafka answers with an empty member id so that a still-alive client
            # rejoins from scratch.
            self._answer_join(member.join_waiter, ErrorCode.UNKNOWN_MEMBER_ID, "")
        if member.sync_waiter is not None:
            self._answer_sync(member.sync_waiter, ErrorCode.UNKNOWN_MEMBER_ID)
            member.sync_waiter = None
