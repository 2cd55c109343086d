"""The classic group protocol's requests: JoinGroup, SyncGroup, Heartbeat and
LeaveGroup (sans-IO), over the rebalance of :mod:`.rebalance`.

Rules and invariants (Kafka's classic group coordinator):

* JoinGroup: v4+ members without a member id get MEMBER_ID_REQUIRED and a fresh id
  (``client.id-uuid``) and must rejoin with it (KIP-394); static members
  (``group.instance.id``, KIP-345) skip that round trip. A member rejoining a Stable
  group with unchanged metadata gets the current generation back without a
  rebalance (the leader's rejoin always forces one). A static member that rejoins
  with a new member id takes over its old id: without a rebalance when the group is
  Stable and neither the selected protocol nor its metadata changed; the old id is
  fenced (FENCED_INSTANCE_ID).
* Parking. JoinGroup and SyncGroup may not be answerable yet: the request is
  parked under the caller's ``token`` and its response comes out of a later call.
  SyncGroup of followers waits for the leader's, which sets the assignment.
* Fencing. Heartbeat and SyncGroup check the member id (and instance id), then
  the generation: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION, then
  REBALANCE_IN_PROGRESS where Kafka returns it.
* Group types. JoinGroup on a share group's id is INCONSISTENT_GROUP_PROTOCOL, as
  on a consumer group (KIP-848) with members; an empty consumer group (offsets
  only) becomes a classic group. LeaveGroup to a consumer group removes the
  members it names.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Hashable, Iterable
from typing import NamedTuple

from trafka.brokerlite.clock import mono_ms
from trafka.brokerlite.groups.rebalance import (
    HB,
    PENDING,
    ClassicRebalance,
    Released,
    sync_response,
)
from trafka.brokerlite.groups.state import ClassicGroup, GroupState, Member, Waiter
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k11_join_group as _jg
from trafka.codec.messages import k12_heartbeat as _hb
from trafka.codec.messages import k13_leave_group as _lg
from trafka.codec.messages import k14_sync_group as _sg

__all__ = ["ClassicRequests"]

# The coordinator's logger: its log lines keep the name they had before the split.
log = logging.getLogger("trafka.brokerlite.groups.coordinator")


class _Join(NamedTuple):
    """A JoinGroup request, normalised across versions."""

    waiter: Waiter
    version: int
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    reason: str | None


def _dedupe_protocols(
    protocols: Iterable[_jg.JoinGroupRequest.JoinGroupRequestProtocol],
) -> list[tuple[str, bytes]]:
    # Kafka keys a member's protocols by name; a repeated name keeps its first entry.
    seen: set[str] = set()
    out: list[tuple[str, bytes]] = []
    for p in protocols:
        if p.name not in seen:
            seen.add(p.name)
            out.append((p.name, bytes(p.metadata)))
    return out


class ClassicRequests(ClassicRebalance):
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup (see the module rules), over
    the coordinator's one state (the live groups)."""

    _min_session_ms: int
    _max_session_ms: int

    def join_group(
        self,
        token: Hashable,
        request: _jg.JoinGroupRequest,
        version: int,
        now_ms: int,
        *,
        client_id: str,
        client_host: str,
    ) -> Released:
        """Handle a JoinGroup request.

        Args:
            token: identifies this request for its (possibly later) response.
            request: the decoded request.
            version: the request's API version (chooses fields and behaviour).
            now_ms: the current time.
            client_id, client_host: from the request header and the connection;
                reported by DescribeGroups.

        Returns:
            ``(token, JoinGroupResponse)`` pairs to send now: this request's own
            response if it is answered at once, and any parked JoinGroups (or
            SyncGroups) that this request released.
        """
        self._start(now_ms)
        session = request.session_timeout_ms
        # v0 has no rebalance timeout: Kafka uses the session timeout.
        rebalance = request.rebalance_timeout_ms if version >= 1 else session
        j = _Join(
            waiter=Waiter(token, version),
            version=version,
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id if version >= 5 else None,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance,
            protocol_type=request.protocol_type,
            protocols=_dedupe_protocols(request.protocols),
            reason=request.reason if version >= 8 else None,
        )
        if not j.group_id:
            self._answer_join(j.waiter, ErrorCode.INVALID_GROUP_ID, j.member_id)
        elif not self._min_session_ms <= session <= self._max_session_ms:
            self._answer_join(j.waiter, ErrorCode.INVALID_SESSION_TIMEOUT, j.member_id)
        elif self._is_share(j.group_id):
            # Kafka answers a share group id this way, with no member id.
            self._answer_join(j.waiter, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
        elif not self.consumer.is_empty(j.group_id):
            self._answer_join(j.waiter, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, j.member_id)
        else:
            # An empty consumer group (offsets only) becomes a classic group.
            self.consumer.delete(j.group_id)
            group = self._groups.get(j.group_id)
            if group is None and j.member_id:
                self._answer_join(j.waiter, ErrorCode.UNKNOWN_MEMBER_ID, j.member_id)
            else:
                if group is None:
                    group = self._create_group(j.group_id, now_ms)
                if j.member_id:
                    self._join_existing_member(group, j, now_ms)
                else:
                    self._join_new_member(group, j, now_ms)
        return self._drain()

    def sync_group(
        self, token: Hashable, request: _sg.SyncGroupRequest, version: int, now_ms: int
    ) -> Released:
        """Handle a SyncGroup request.

        Followers' requests are parked until the leader's SyncGroup sets the
        assignment; the leader's request releases them.

        Returns:
            ``(token, SyncGroupResponse)`` pairs to send now.
        """
        self._start(now_ms)
        waiter = Waiter(token, version)
        member_id = request.member_id
        instance = request.group_instance_id if version >= 3 else None
        protocol_type = request.protocol_type if version >= 5 else None
        protocol_name = request.protocol_name if version >= 5 else None
        group = self._groups.get(request.group_id)
        if not request.group_id:
            self._answer_sync(waiter, ErrorCode.INVALID_GROUP_ID)
        elif group is None or group.state is GroupState.EMPTY:
            self._answer_sync(waiter, ErrorCode.UNKNOWN_MEMBER_ID)
        elif (error := group.validate_member(member_id, instance)) is not ErrorCode.NONE:
            self._answer_sync(waiter, error)
        elif request.generation_id != group.generation_id:
            self._answer_sync(waiter, ErrorCode.ILLEGAL_GENERATION)
        elif (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            self._answer_sync(waiter, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._answer_sync(waiter, ErrorCode.REBALANCE_IN_PROGRESS)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            member = group.members[member_id]
            displaced, member.sync_waiter = member.sync_waiter, waiter
            if displaced is not None:
                self._answer_sync(displaced, ErrorCode.REBALANCE_IN_PROGRESS)
            self._remove_pending_sync(group, member_id)
            if group.is_leader(member_id):
                assignment = {a.member_id: bytes(a.assignment) for a in request.assignments}
                missing = [m for m in group.members if m not in assignment]
                if missing:
                    log.warning(
                        "group %r generation %d: leader gave no assignment to %s",
                        group.group_id,
                        group.generation_id,
                        missing,
                    )
                for m in group.members.values():
                    m.assignment = assignment.get(m.member_id, b"")
                self._persist(group)
                self._propagate_assignment(group, ErrorCode.NONE, now_ms)
                group.transition(GroupState.STABLE, now_ms)
                log.info(
                    "group %r: generation %d stable with %d members",
                    group.group_id,
                    group.generation_id,
                    len(group.members),
                )
        else:  # Stable
            self._remove_pending_sync(group, member_id)
            member = group.members[member_id]
            self._out.append(
                (
                    token,
                    sync_response(
                        version,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        assignment=member.assignment,
                    ),
                )
            )
            self._schedule_heartbeat(group, member, now_ms)
        return self._drain()

    def heartbeat(
        self, request: _hb.HeartbeatRequest, version: int, now_ms: int
    ) -> _hb.HeartbeatResponse:
        """Handle a Heartbeat request (never parked).

        Returns:
            The HeartbeatResponse: NONE, REBALANCE_IN_PROGRESS (rejoin), or an error.
        """
        self._start(now_ms)
        instance = request.group_instance_id if version >= 3 else None
        group = self._groups.get(request.group_id)
        if not request.group_id:
            error = ErrorCode.INVALID_GROUP_ID
        elif group is None:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        elif (error := group.validate_member(request.member_id, instance)) is not ErrorCode.NONE:
            pass
        elif request.generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        elif group.state is GroupState.EMPTY:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        else:
            self._schedule_heartbeat(group, group.members[request.member_id], now_ms)
            if group.state is GroupState.PREPARING_REBALANCE:
                error = ErrorCode.REBALANCE_IN_PROGRESS
        return _hb.HeartbeatResponse(error_code=error)

    def leave_group(
        self, request: _lg.LeaveGroupRequest, version: int, now_ms: int
    ) -> tuple[_lg.LeaveGroupResponse, Released]:
        """Handle a LeaveGroup request (v3+: a batch of members, by member id or,
        for administrative removal, by instance id alone). To a consumer group
        (KIP-848) it removes the members named from it, as Kafka does
        (:meth:`.ConsumerGroups.leave_group`); an unknown group answers
        UNKNOWN_MEMBER_ID for every member.

        Returns:
            ``(LeaveGroupResponse, released)``: the request's own response, and the
            parked responses released by the rebalance the departure causes.
        """
        self._start(now_ms)
        if version < 3:
            identities: list[tuple[str, str | None]] = [(request.member_id, None)]
        else:
            identities = [(m.member_id, m.group_instance_id) for m in request.members]
        top_error = ErrorCode.NONE
        results: list[tuple[str, str | None, ErrorCode]] = []
        group = self._groups.get(request.group_id)
        consumer_codes = (
            self.consumer.leave_group(request.group_id, identities, now_ms)
            if group is None and request.group_id
            else None
        )
        if not request.group_id:
            top_error = ErrorCode.INVALID_GROUP_ID
        elif consumer_codes is not None:
            # A consumer group (KIP-848): Kafka fences the members named.
            results = [
                (mid, iid, code)
                for (mid, iid), code in zip(identities, consumer_codes, strict=True)
            ]
        elif group is None:
            results = [(mid, iid, ErrorCode.UNKNOWN_MEMBER_ID) for mid, iid in identities]
        else:
            for mid, iid in identities:
                results.append((mid, iid, self._leave_one(group, mid, iid)))
            if any(code is ErrorCode.NONE for _, _, code in results):
                if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                    self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
                elif group.state is GroupState.PREPARING_REBALANCE:
                    self._maybe_complete_join_phase(group, now_ms)
        if version < 3:
            # One member, no per-member list: its error is the top-level error.
            if top_error is ErrorCode.NONE and results:
                top_error = results[0][2]
            response = _lg.LeaveGroupResponse(error_code=top_error)
        else:
            response = _lg.LeaveGroupResponse(
                error_code=top_error,
                members=[
                    _lg.LeaveGroupResponse.MemberResponse(
                        member_id=mid, group_instance_id=iid, error_code=code
                    )
                    for mid, iid, code in results
                ],
            )
        return response, self._drain()

    # -- JoinGroup ------------------------------------------------------------------------------

    def _join_new_member(self, group: ClassicGroup, j: _Join, now_ms: int) -> None:
        if not group.supports_protocols(j.protocol_type, (n for n, _ in j.protocols)):
            self._answer_join(j.waiter, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
            return
        prefix = j.group_instance_id if j.group_instance_id is not None else j.client_id
        new_id = f"{prefix}-{uuid.uuid4()}"
        if j.group_instance_id is not None:
            existing = group.static_members.get(j.group_instance_id)
            if existing is not None:
                self._replace_static_member(group, existing, new_id, j, now_ms)
            else:
                self._add_member(group, new_id, j, now_ms)
        elif j.version >= 4:
            # KIP-394: hand out the id first, so a client that times out and retries
            # does not leave a ghost member behind in the rebalance.
            group.pending_members.add(new_id)
            self._schedule(group, (PENDING, new_id), mono_ms(now_ms) + j.session_timeout_ms)
            self._answer_join(j.waiter, ErrorCode.MEMBER_ID_REQUIRED, new_id)
        else:
            self._add_member(group, new_id, j, now_ms)

    def _join_existing_member(self, group: ClassicGroup, j: _Join, now_ms: int) -> None:
        if not group.supports_protocols(j.protocol_type, (n for n, _ in j.protocols)):
            self._answer_join(j.waiter, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, j.member_id)
            return
        if j.member_id in group.pending_members:
            if j.group_instance_id is not None:
                # Ids handed out by MEMBER_ID_REQUIRED belong to dynamic members only.
                self._answer_join(j.waiter, ErrorCode.UNKNOWN_MEMBER_ID, j.member_id)
            else:
                self._add_member(group, j.member_id, j, now_ms)
            return
        error = group.validate_member(j.member_id, j.group_instance_id)
        if error is not ErrorCode.NONE:
            self._answer_join(j.waiter, error, j.member_id)
            return
        member = group.members[j.member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            self._update_member(group, member, j, now_ms)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            if member.matches(j.protocols):
                # A retry of a join whose response got lost: answer from the generation.
                self._answer_join_with_generation(group, j.waiter, member.member_id)
            else:
                self._update_member(group, member, j, now_ms)
        elif group.state is GroupState.STABLE:
            if group.is_leader(member.member_id) or not member.matches(j.protocols):
                # The leader rejoins to make the group reassign (e.g. topics changed).
                self._update_member(group, member, j, now_ms)
            else:
                self._answer_join_with_generation(
                    group, j.waiter, member.member_id, with_members=False
                )
        else:
            self._answer_join(j.waiter, ErrorCode.UNKNOWN_MEMBER_ID, j.member_id)

    def _add_member(self, group: ClassicGroup, member_id: str, j: _Join, now_ms: int) -> None:
        member = Member(
            member_id,
            j.group_instance_id,
            j.client_id,
            j.client_host,
            j.rebalance_timeout_ms,
            j.session_timeout_ms,
            j.protocol_type,
            j.protocols,
        )
        member.is_new = True
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.previous_state is GroupState.EMPTY
        ):
            group.new_member_added = True
        group.add(member, j.waiter)
        self._cancel(group, (PENDING, member_id))
        # A new member cannot heartbeat while its JoinGroup is parked, so the session
        # timeout does not apply; this bounds how long a vanished one can linger.
        self._schedule(group, (HB, member_id), mono_ms(now_ms) + self._new_member_join_timeout_ms)
        log.info(
            "group %r: member %r (instance %r) joins in state %s",
            group.group_id,
            member_id,
            j.group_instance_id,
            group.state.value,
        )
        self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _update_member(self, group: ClassicGroup, member: Member, j: _Join, now_ms: int) -> None:
        displaced = group.update_member(
            member, j.protocols, j.rebalance_timeout_ms, j.session_timeout_ms, j.waiter
        )
        if displaced is not None:
            self._answer_join(displaced, ErrorCode.REBALANCE_IN_PROGRESS, member.member_id)
        self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _replace_static_member(
        self, group: ClassicGroup, old_id: str, new_id: str, j: _Join, now_ms: int
    ) -> None:
        assert j.group_instance_id is not None
        previous_leader = group.leader_id
        old_metadata = (
            group.members[old_id].metadata(group.protocol_name)
            if group.protocol_name is not None
            else None
        )
        member, old = group.replace_static_member(j.group_instance_id, old_id, new_id)
        if old.join_waiter is not None:
            self._answer_join(old.join_waiter, ErrorCode.FENCED_INSTANCE_ID, old_id)
        if old.sync_waiter is not None:
            self._answer_sync(old.sync_waiter, ErrorCode.FENCED_INSTANCE_ID)
        self._cancel(group, (HB, old_id))
        self._schedule_heartbeat(group, member, now_ms)
        group.update_member(
            member, j.protocols, j.rebalance_timeout_ms, j.session_timeout_ms, j.waiter
        )
        log.info(
            "group %r: static member %r replaced member id %r with %r",
            group.group_id,
            j.group_instance_id,
            old_id,
            new_id,
        )
        if group.state is GroupState.STABLE:
            selected = group.select_protocol()
            if group.protocol_name == selected and member.metadata(selected) == old_metadata:
                # Same subscription: the restarted instance takes over its old
                # assignment without disturbing the rest of the group.
                self._persist(group)
                group.set_join_waiter(member, None)
                if j.version >= 9:
                    is_leader = group.is_leader(new_id)
                    # KIP-814: a returning leader learns the members but must not
                    # reassign, since a Stable group would not pass on a new assignment.
                    self._answer_join_with_generation(
                        group, j.waiter, new_id, with_members=is_leader, skip=is_leader
                    )
                else:
                    # Older clients would reassign if told they lead: report the old id.
                    self._answer_join_with_generation(
                        group, j.waiter, new_id, with_members=False, leader=previous_leader
                    )
            else:
                self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            # The leader may be assigning to the old id: rebalance so the new id gets
            # an assignment.
            self._prepare_rebalance(group, now_ms)
        else:
            self._maybe_complete_join_phase(group, now_ms)

    # -- LeaveGroup -----------------------------------------------------------------------------

    def _leave_one(self, group: ClassicGroup, member_id: str, instance: str | None) -> ErrorCode:
        if not member_id:
            # Administrative removal of a static member by instance id alone.
            if instance is not None and instance in group.static_members:
                self._remove_current_member(group, group.static_members[instance])
                return ErrorCode.NONE
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_id in group.pending_members:
            group.remove(member_id)
            self._cancel(group, (PENDING, member_id))
            return ErrorCode.NONE
        error = group.validate_member(member_id, instance)
        if error is ErrorCode.NONE:
            self._remove_current_member(group, member_id)
        return error

    def _remove_current_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members[member_id]
        log.info("group %r: member %r leaves", group.group_id, member_id)
        self._cancel(group, (HB, member_id))
        self._answer_removed(member)
        group.remove(member_id)
