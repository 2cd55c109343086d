"""brokerlite's group coordinator: Kafka's classic consumer-group protocol, sans-IO.

:class:`GroupCoordinator` takes decoded requests (the generated codec dataclasses)
and the current time, and returns response dataclasses. It owns no socket, task or
clock: the server passes ``now_ms`` into every call, calls :meth:`~GroupCoordinator.tick`
when :meth:`~GroupCoordinator.next_deadline` is reached, and sends the
``(token, response)`` pairs that calls return. It follows Kafka's classic group
coordinator (``GroupMetadataManager``/``ClassicGroup``); the state machine itself is
described in :mod:`trafka.brokerlite.groups.state`.

Rules and invariants:

* Parking. JoinGroup and SyncGroup may not be answerable yet: the request is parked
  under the caller's ``token`` and its response comes out of a later call (of any
  method that returns pairs, including :meth:`~GroupCoordinator.tick`). Every parked
  request is answered exactly once, or dropped by
  :meth:`~GroupCoordinator.connection_closed`; a pair is returned only for a token
  that was parked and not yet answered.
* JoinGroup: v4+ members without a member id get MEMBER_ID_REQUIRED and a fresh id
  (``client.id-uuid``) and must rejoin with it (KIP-394); static members
  (``group.instance.id``, KIP-345) skip that round trip. A member rejoining a Stable
  group with unchanged metadata gets the current generation back without a
  rebalance (the leader's rejoin always forces one). A static member that rejoins
  with a new member id takes over its old id: without a rebalance when the group is
  Stable and neither the selected protocol nor its metadata changed; the old id is
  fenced (FENCED_INSTANCE_ID).
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
* Fencing. Heartbeat, SyncGroup and OffsetCommit check the member id (and instance
  id), then the generation: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
  ILLEGAL_GENERATION, then REBALANCE_IN_PROGRESS where Kafka returns it. A commit
  with generation -1 and no member id ("simple" or admin commit) is accepted only
  while the group is Empty or does not exist (it then creates an Empty group).
* Durability. Offsets are written to the :class:`~trafka.brokerlite.groups.offsets.GroupStore`
  before the commit is acknowledged. Group metadata is written when a generation's
  assignment is set (leader SyncGroup), when a group becomes Empty and when a static
  member is replaced. After a restart each group resumes its last persisted
  generation, as Kafka does: a Stable group's members keep working if they heartbeat
  within their session timeout (counted from the restart) and are removed, with a
  rebalance, otherwise.
* Housekeeping. Every ``offsets_retention_check_interval_ms``, the offsets of Empty
  groups expire ``offsets_retention_ms`` after the group became Empty (standalone
  groups: after each offset's commit), and Empty groups without offsets are deleted.
* Group types. A group id names a classic group, a consumer group (KIP-848,
  :mod:`.consumer_groups`) or a share group (KIP-932, :mod:`.share_groups`), never
  two: JoinGroup on a share group id is INCONSISTENT_GROUP_PROTOCOL,
  ConsumerGroupHeartbeat and OffsetCommit on one GROUP_ID_NOT_FOUND, as in Kafka;
  ListGroups and DeleteGroups cover all three types.
* Timers. Due timers fire only in :meth:`~GroupCoordinator.tick`; request methods
  never fire them, so a member whose session expired a moment ago can still
  heartbeat if the server has not ticked yet.
"""

from __future__ import annotations

import heapq
import logging
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from trafka.brokerlite.groups.consumer_groups import ConsumerGroup, ConsumerGroups, TopicMeta
from trafka.brokerlite.groups.offsets import (
    CommittedOffset,
    GroupRecord,
    GroupStore,
    MemberRecord,
    OffsetStoreError,
)
from trafka.brokerlite.groups.state import ClassicGroup, GroupState, Member, Waiter
from trafka.codec import DecodeError, decode_versioned
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import consumer_protocol as _cp
from trafka.codec.messages import k08_offset_commit as _oc
from trafka.codec.messages import k09_offset_fetch as _of
from trafka.codec.messages import k11_join_group as _jg
from trafka.codec.messages import k12_heartbeat as _hb
from trafka.codec.messages import k13_leave_group as _lg
from trafka.codec.messages import k14_sync_group as _sg
from trafka.codec.messages import k15_describe_groups as _dg
from trafka.codec.messages import k16_list_groups as _lsg
from trafka.codec.messages import k42_delete_groups as _dlg
from trafka.codec.messages import k47_offset_delete as _od
from trafka.codec.messages import k68_consumer_group_heartbeat as _cgh
from trafka.codec.messages import k69_consumer_group_describe as _cgd

if TYPE_CHECKING:
    from trafka.brokerlite.groups.share_groups import ShareGroups

__all__ = ["GroupCoordinator", "GroupState"]

log = logging.getLogger(__name__)

Released = list[tuple[Hashable, Any]]

# DescribeGroups' authorized_operations: "not requested", and what a group allows
# without an authorizer (READ=3, DELETE=6, DESCRIBE=8 as bits of AclOperation codes).
_OPS_NOT_REQUESTED = -(2**31)
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
_GROUP_TYPE = "classic"

_HB = "hb"
_PENDING = "pending"
_JOIN = ("join",)
_SYNC = ("sync",)


def _always(_topic: str, _partition: int) -> bool:
    return True


def _no_topic_ids(_topic_id: uuid.UUID) -> str | None:
    return None


def _no_topics() -> dict[str, TopicMeta]:
    return {}


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


# --- responses ---------------------------------------------------------------------------------


def _join_response(
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


def _sync_response(
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


class GroupCoordinator:
    """Kafka's classic group coordinator and offset manager, without I/O.

    Args:
        store: where offsets and group metadata are persisted; groups found in it
            are resumed (see the module docstring).
        initial_rebalance_delay_ms: Kafka's ``group.initial.rebalance.delay.ms``.
        min_session_timeout_ms, max_session_timeout_ms: Kafka's
            ``group.min.session.timeout.ms`` / ``group.max.session.timeout.ms``.
        partition_exists: ``(topic, partition) -> bool``; OffsetCommit answers
            UNKNOWN_TOPIC_OR_PARTITION for partitions where it is False.
        topic_id_to_name: resolves topic ids, for OffsetCommit/OffsetFetch versions
            that carry them (none of the versions the codec knows do yet).
        new_member_join_timeout_ms: how long a new member's first JoinGroup may stay
            parked (Kafka's ``group.classic.new.member.join.timeout.ms``).
        offset_metadata_max_bytes: Kafka's ``offset.metadata.max.bytes``.
        offsets_retention_ms: Kafka's ``offsets.retention.minutes`` in ms; None
            keeps offsets forever.
        offsets_retention_check_interval_ms: Kafka's
            ``offsets.retention.check.interval.ms``.
        consumer_topics: ``() -> {name: TopicMeta}``, the topics consumer groups
            (KIP-848) are assigned from.
        consumer_session_timeout_ms, consumer_heartbeat_interval_ms: Kafka's
            ``group.consumer.session.timeout.ms`` and
            ``group.consumer.heartbeat.interval.ms``.
        share_groups: the broker's share groups (KIP-932), if it has any: their ids
            are refused by the other protocols, listed, deleted and ticked here.
        now_ms: the current time, if known at construction; otherwise the first
            call that passes a time starts the clocks of resumed members (and
            :meth:`next_deadline` returns 0 until then).
    """

    def __init__(
        self,
        store: GroupStore,
        *,
        initial_rebalance_delay_ms: int = 3000,
        min_session_timeout_ms: int = 6000,
        max_session_timeout_ms: int = 1_800_000,
        partition_exists: Callable[[str, int], bool] = _always,
        topic_id_to_name: Callable[[uuid.UUID], str | None] = _no_topic_ids,
        new_member_join_timeout_ms: int = 300_000,
        offset_metadata_max_bytes: int = 4096,
        offsets_retention_ms: int | None = 7 * 24 * 3600 * 1000,
        offsets_retention_check_interval_ms: int = 600_000,
        consumer_topics: Callable[[], Mapping[str, TopicMeta]] = _no_topics,
        consumer_session_timeout_ms: int = 45_000,
        consumer_heartbeat_interval_ms: int = 5_000,
        share_groups: ShareGroups | None = None,
        now_ms: int | None = None,
    ) -> None:
        if initial_rebalance_delay_ms < 0:
            raise ValueError("initial_rebalance_delay_ms must be >= 0")
        if not 0 < min_session_timeout_ms <= max_session_timeout_ms:
            raise ValueError("need 0 < min_session_timeout_ms <= max_session_timeout_ms")
        self._store = store
        self._initial_delay_ms = initial_rebalance_delay_ms
        self._min_session_ms = min_session_timeout_ms
        self._max_session_ms = max_session_timeout_ms
        self._partition_exists = partition_exists
        self._topic_id_to_name = topic_id_to_name
        self._new_member_join_timeout_ms = new_member_join_timeout_ms
        self._metadata_max = offset_metadata_max_bytes
        self._retention_ms = offsets_retention_ms
        self._retention_check_ms = offsets_retention_check_interval_ms
        self._groups: dict[str, ClassicGroup] = {}
        #: The groups of the new consumer protocol (KIP-848); a group id is either
        #: a classic group here or a consumer group there, never both.
        self.consumer = ConsumerGroups(
            consumer_topics,
            session_timeout_ms=consumer_session_timeout_ms,
            heartbeat_interval_ms=consumer_heartbeat_interval_ms,
            persist=self._store.store_consumer_group,
        )
        #: The share groups (KIP-932): a group id is one type of group only.
        self.share = share_groups
        if share_groups is not None:
            share_groups.other_group_type = self._group_type
        self._heap: list[tuple[int, int, str, tuple[str, ...]]] = []
        self._seq = 0
        self._out: Released = []
        self._started = False
        self._next_cleanup_ms: int | None = None
        self._load()
        if now_ms is not None:
            self._start(now_ms)

    # -- introspection --------------------------------------------------------------------------

    @property
    def store(self) -> GroupStore:
        """The offset store the coordinator writes to."""
        return self._store

    def group(self, group_id: str) -> ClassicGroup | None:
        """The live group ``group_id`` (read-only use: diagnostics and tests)."""
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        """Ids of the live classic groups, sorted."""
        return sorted(self._groups)

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group (KIP-848) ``group_id`` (read-only use)."""
        return self.consumer.groups.get(group_id)

    def _group_type(self, group_id: str) -> str | None:
        """``classic`` or ``consumer`` when ``group_id`` is such a group, else None."""
        if group_id in self._groups:
            return _GROUP_TYPE
        if group_id in self.consumer.groups:
            return "consumer"
        return None

    def _is_share(self, group_id: str) -> bool:
        return self.share is not None and self.share.is_share_group(group_id)

    # -- requests -------------------------------------------------------------------------------

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
                    _sync_response(
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

    def consumer_group_heartbeat(
        self,
        request: _cgh.ConsumerGroupHeartbeatRequest,
        version: int,
        now_ms: int,
        *,
        client_id: str = "",
        client_host: str = "",
    ) -> _cgh.ConsumerGroupHeartbeatResponse:
        """Handle a ConsumerGroupHeartbeat (KIP-848; see :mod:`.consumer_groups`).

        A classic group of the same id with members refuses it (GROUP_ID_NOT_FOUND,
        as Kafka without online migration); an empty one (offsets only) becomes a
        consumer group. A share group of the same id refuses it too.
        """
        self._start(now_ms)
        if self._is_share(request.group_id):
            return _cgh.ConsumerGroupHeartbeatResponse(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                error_message=f"group {request.group_id} is not a consumer group "
                "(it is a share group)",
            )
        classic = self._groups.get(request.group_id)
        if classic is not None:
            if classic.state is not GroupState.EMPTY or classic.pending_members:
                return _cgh.ConsumerGroupHeartbeatResponse(
                    error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                    error_message=f"group {request.group_id} is a classic group",
                )
            del self._groups[request.group_id]
        return self.consumer.heartbeat(
            request, version, now_ms, client_id=client_id, client_host=client_host
        )

    def consumer_group_describe(
        self,
        request: _cgd.ConsumerGroupDescribeRequest,
        topic_name: Callable[[uuid.UUID], str | None],
    ) -> _cgd.ConsumerGroupDescribeResponse:
        """Handle a ConsumerGroupDescribe: each group, or GROUP_ID_NOT_FOUND."""
        return _cgd.ConsumerGroupDescribeResponse(
            groups=[self.consumer.describe(g, topic_name) for g in request.group_ids]
        )

    def offset_commit(
        self, request: _oc.OffsetCommitRequest, version: int, now_ms: int
    ) -> _oc.OffsetCommitResponse:
        """Handle an OffsetCommit request; accepted offsets are durable on return.

        Returns:
            The OffsetCommitResponse with one error code per requested partition.
        """
        self._start(now_ms)
        group_id = request.group_id
        codes: list[list[ErrorCode]] = []
        known: list[tuple[int, int]] = []
        for ti, topic in enumerate(request.topics):
            row = []
            for pi, part in enumerate(topic.partitions):
                if self._partition_exists(topic.name, part.partition_index):
                    row.append(ErrorCode.NONE)
                    known.append((ti, pi))
                else:
                    row.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            codes.append(row)
        if known:
            # v0 carries neither: it is always a standalone commit.
            error = self._validate_commit(
                group_id,
                request.generation_id_or_member_epoch if version >= 1 else -1,
                request.member_id if version >= 1 else "",
                request.group_instance_id if version >= 7 else None,
                version,
                now_ms,
            )
            if error is not ErrorCode.NONE:
                for ti, pi in known:
                    codes[ti][pi] = error
            else:
                self._commit(request, version, now_ms, known, codes)
        return _oc.OffsetCommitResponse(
            topics=[
                _oc.OffsetCommitResponse.OffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=[
                        _oc.OffsetCommitResponse.OffsetCommitResponsePartition(
                            partition_index=part.partition_index, error_code=codes[ti][pi]
                        )
                        for pi, part in enumerate(topic.partitions)
                    ],
                )
                for ti, topic in enumerate(request.topics)
            ]
        )

    def offset_fetch(
        self, request: _of.OffsetFetchRequest, version: int, now_ms: int
    ) -> _of.OffsetFetchResponse:
        """Handle an OffsetFetch request: v0-7 (one group) or v8+ (several groups).

        Partitions without a committed offset report offset -1; ``topics`` null
        (v2+) asks for every partition the group has committed. ``require_stable``
        is the OffsetFetch handler's business (pending transactional offsets belong
        to the transaction coordinator).

        Returns:
            The OffsetFetchResponse in the shape of ``version``.
        """
        self._start(now_ms)
        if version >= 8:
            groups = []
            for g in request.groups:
                if version >= 9:
                    error = self.consumer.validate_fetch(g.group_id, g.member_id, g.member_epoch)
                    if error is not ErrorCode.NONE:
                        groups.append(
                            _of.OffsetFetchResponse.OffsetFetchResponseGroup(
                                group_id=g.group_id, error_code=error
                            )
                        )
                        continue
                fetched = self._fetch(g.group_id, g.topics)
                groups.append(
                    _of.OffsetFetchResponse.OffsetFetchResponseGroup(
                        group_id=g.group_id,
                        topics=[
                            _of.OffsetFetchResponse.OffsetFetchResponseTopics(
                                name=name,
                                partitions=[
                                    _of.OffsetFetchResponse.OffsetFetchResponsePartitions(
                                        partition_index=index,
                                        committed_offset=o.offset if o else -1,
                                        committed_leader_epoch=o.leader_epoch if o else -1,
                                        metadata=o.metadata if o else "",
                                    )
                                    for index, o in parts
                                ],
                            )
                            for name, parts in fetched
                        ],
                    )
                )
            return _of.OffsetFetchResponse(groups=groups)
        fetched = self._fetch(request.group_id, request.topics)
        return _of.OffsetFetchResponse(
            topics=[
                _of.OffsetFetchResponse.OffsetFetchResponseTopic(
                    name=name,
                    partitions=[
                        _of.OffsetFetchResponse.OffsetFetchResponsePartition(
                            partition_index=index,
                            committed_offset=o.offset if o else -1,
                            committed_leader_epoch=o.leader_epoch if o else -1,
                            metadata=o.metadata if o else "",
                        )
                        for index, o in parts
                    ],
                )
                for name, parts in fetched
            ]
        )

    def describe_groups(
        self, request: _dg.DescribeGroupsRequest, version: int
    ) -> _dg.DescribeGroupsResponse:
        """Handle a DescribeGroups request.

        Unknown groups are described as ``Dead`` with no error, as Kafka does up to
        v5. Member metadata and assignments are included only for Stable groups.
        """
        ops = (
            _GROUP_OPERATIONS
            if version >= 3 and request.include_authorized_operations
            else _OPS_NOT_REQUESTED
        )
        described = []
        for group_id in request.groups:
            group = self._groups.get(group_id)
            if group is None:
                described.append(
                    _dg.DescribeGroupsResponse.DescribedGroup(
                        group_id=group_id,
                        group_state=GroupState.DEAD.value,
                        authorized_operations=ops,
                    )
                )
                continue
            stable = group.state is GroupState.STABLE and group.protocol_name is not None
            members = [
                _dg.DescribeGroupsResponse.DescribedGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata(group.protocol_name or "") if stable else b"",
                    member_assignment=m.assignment if stable else b"",
                )
                for m in group.members.values()
            ]
            described.append(
                _dg.DescribeGroupsResponse.DescribedGroup(
                    group_id=group_id,
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=(group.protocol_name or "") if stable else "",
                    members=members,
                    authorized_operations=ops,
                )
            )
        return _dg.DescribeGroupsResponse(groups=described)

    def list_groups(self, request: _lsg.ListGroupsRequest, version: int) -> _lsg.ListGroupsResponse:
        """Handle a ListGroups request, applying the states (v4+, case-insensitive)
        and types (v5+: ``classic``, ``consumer`` or ``share``) filters."""
        states = {s.strip().lower() for s in request.states_filter} if version >= 4 else set()
        types = {t.strip().lower() for t in request.types_filter} if version >= 5 else set()
        listed = []
        if not types or _GROUP_TYPE in types:
            for group_id in sorted(self._groups):
                group = self._groups[group_id]
                if states and group.state.value.lower() not in states:
                    continue
                listed.append(
                    _lsg.ListGroupsResponse.ListedGroup(
                        group_id=group_id,
                        protocol_type=group.protocol_type or "",
                        group_state=group.state.value,
                        group_type=_GROUP_TYPE,
                    )
                )
        if not types or "consumer" in types:
            for group_id, cgroup in self.consumer.groups.items():
                if states and cgroup.state.lower() not in states:
                    continue
                listed.append(
                    _lsg.ListGroupsResponse.ListedGroup(
                        group_id=group_id,
                        protocol_type="consumer",
                        group_state=cgroup.state,
                        group_type="consumer",
                    )
                )
        if self.share is not None and (not types or "share" in types):
            for group_id, state in self.share.listed():
                if states and state.lower() not in states:
                    continue
                listed.append(
                    _lsg.ListGroupsResponse.ListedGroup(
                        group_id=group_id,
                        protocol_type="share",
                        group_state=state,
                        group_type="share",
                    )
                )
        listed.sort(key=lambda g: g.group_id)
        return _lsg.ListGroupsResponse(groups=listed)

    def delete_groups(
        self, request: _dlg.DeleteGroupsRequest, version: int
    ) -> _dlg.DeleteGroupsResponse:
        """Handle a DeleteGroups request: only Empty groups can be deleted, with
        their offsets (NON_EMPTY_GROUP otherwise, GROUP_ID_NOT_FOUND if unknown).
        A share group is deleted by the share coordinator, which tells its listeners."""
        results = []
        for group_id in request.groups_names:
            group = self._groups.get(group_id)
            if self.share is not None and self._is_share(group_id):
                error = self.share.delete(group_id)
            elif group_id in self.consumer.groups:
                if not self.consumer.is_empty(group_id):
                    error = ErrorCode.NON_EMPTY_GROUP
                else:
                    error = self._delete_consumer_group(group_id)
            elif group is None:
                error = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.state is not GroupState.EMPTY:
                error = ErrorCode.NON_EMPTY_GROUP
            else:
                error = self._delete_group(group_id)
            results.append(
                _dlg.DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=error)
            )
        return _dlg.DeleteGroupsResponse(results=results)

    def delete_offsets(self, request: _od.OffsetDeleteRequest) -> _od.OffsetDeleteResponse:
        """Handle an OffsetDelete: drop a group's committed offsets, as Kafka does.

        An unknown group is GROUP_ID_NOT_FOUND; a classic group with members that
        is not a consumer group, NON_EMPTY_GROUP. Otherwise each partition's
        offset is deleted (NONE, also when none was committed) unless the group's
        members subscribe to its topic: GROUP_SUBSCRIBED_TO_TOPIC. A member whose
        subscription cannot be read counts as subscribed to every topic.
        """
        group_id = request.group_id
        response = _od.OffsetDeleteResponse

        def refused(code: ErrorCode) -> _od.OffsetDeleteResponse:
            return response(error_code=code, topics=[])

        if not group_id:
            return refused(ErrorCode.INVALID_GROUP_ID)
        subscribed: Callable[[str], bool]
        if group_id in self.consumer.groups:
            subscribed = partial(self.consumer.is_subscribed, group_id)
        else:
            group = self._groups.get(group_id)
            if group is None and not self._store.has_offsets(group_id):
                return refused(ErrorCode.GROUP_ID_NOT_FOUND)
            if group is None or not group.members:
                subscribed = _nothing
            elif group.protocol_type != "consumer":
                return refused(ErrorCode.NON_EMPTY_GROUP)
            else:
                topics = _classic_subscriptions(group)
                subscribed = _everything if topics is None else topics.__contains__
        deleted: list[tuple[str, int]] = []
        topics_out = []
        for topic in request.topics:
            refuse = subscribed(topic.name)
            code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if refuse else ErrorCode.NONE
            if not refuse:
                deleted.extend((topic.name, p.partition_index) for p in topic.partitions)
            topics_out.append(
                response.OffsetDeleteResponseTopic(
                    name=topic.name,
                    partitions=[
                        response.OffsetDeleteResponsePartition(
                            partition_index=p.partition_index, error_code=code
                        )
                        for p in topic.partitions
                    ],
                )
            )
        if deleted:
            try:
                self._store.delete_offsets(group_id, deleted)
            except OffsetStoreError as exc:
                log.error("group %r: offset deletion not stored: %s", group_id, exc)
                return refused(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return response(error_code=ErrorCode.NONE, topics=topics_out)

    def delete_topic_offsets(self, topic: str) -> int:
        """Remove every group's offsets for ``topic`` (call when the topic is deleted).

        Returns:
            How many offsets were removed.

        Raises:
            OffsetStoreError: the journal write failed.
        """
        return self._store.delete_topic_offsets(topic)

    def commit_transactional_offsets(
        self,
        group_id: str,
        offsets: Mapping[tuple[str, int], CommittedOffset],
        now_ms: int,
    ) -> None:
        """Apply the offsets a committed transaction carried (TxnOffsetCommit, KIP-447).

        They were validated when the transaction took them; like Kafka, a group that
        does not exist is created (Empty), so its offsets expire like any other's.

        Raises:
            OffsetStoreError: the journal write failed; nothing was applied.
        """
        if self._is_share(group_id):
            log.warning("group %r is a share group: transactional offsets dropped", group_id)
            return
        self.adopt_offsets_group(group_id, now_ms)
        self._store.commit_offsets(group_id, offsets)

    def adopt_offsets_group(self, group_id: str, now_ms: int) -> None:
        """Make sure a group whose offsets a transaction committed exists: like
        Kafka, an unknown one is created Empty, so its offsets expire like any other's."""
        self._start(now_ms)
        if group_id not in self._groups and group_id not in self.consumer.groups:
            self._create_group(group_id, now_ms)

    # -- time and connections -------------------------------------------------------------------

    def tick(self, now_ms: int) -> Released:
        """Fire every timer due at ``now_ms``: session and join timeouts, rebalance
        and sync timeouts, the initial rebalance delay, offset expiry.

        Returns:
            The parked responses these timers released.
        """
        self._start(now_ms)
        while self._heap and self._heap[0][0] <= now_ms:
            deadline, _, group_id, key = heapq.heappop(self._heap)
            group = self._groups.get(group_id)
            if group is None or group.timers.get(key) != deadline:
                continue
            del group.timers[key]
            self._fire(group, key, deadline, now_ms)
        self.consumer.tick(now_ms)
        if self.share is not None:
            self.share.tick(now_ms)
        if self._next_cleanup_ms is not None and now_ms >= self._next_cleanup_ms:
            self._cleanup(now_ms)
            self._next_cleanup_ms = now_ms + self._retention_check_ms
        return self._drain()

    def next_deadline(self) -> int | None:
        """When :meth:`tick` must next be called (ms), or None if no timer is set.

        Returns 0 before the coordinator has been given a time (resumed members'
        session timers are not started yet).
        """
        if not self._started:
            return 0
        while self._heap:
            deadline, _, group_id, key = self._heap[0]
            group = self._groups.get(group_id)
            if group is not None and group.timers.get(key) == deadline:
                break
            heapq.heappop(self._heap)
        share_deadline = self.share.next_deadline() if self.share is not None else None
        deadlines = [
            d
            for d in (self._next_cleanup_ms, self.consumer.next_deadline(), share_deadline)
            if d is not None
        ]
        if self._heap:
            deadlines.append(self._heap[0][0])
        return min(deadlines) if deadlines else None

    def connection_closed(
        self, tokens: Iterable[Hashable], *, now_ms: int | None = None
    ) -> Released:
        """Drop the parked requests of a closed connection.

        A dynamic member whose JoinGroup was parked on the connection is treated as
        gone: it is removed at the next :meth:`tick` (at once when ``now_ms`` is
        given) unless it rejoins first, so the rebalance need not wait for its
        timeout. A static member stays until its timeouts, as static members
        survive restarts by design.

        Args:
            tokens: the tokens of the connection's requests (unknown ones are ignored).
            now_ms: the current time; when given, due timers fire now and their
                released responses are returned.

        Returns:
            Released parked responses (only when ``now_ms`` is given).
        """
        closed = set(tokens)
        if closed:
            for group in self._groups.values():
                for member in group.members.values():
                    if member.join_waiter is not None and member.join_waiter.token in closed:
                        group.set_join_waiter(member, None)
                        if not member.is_static:
                            # Expire it through its heartbeat timer (the removal needs a
                            # current time, which only tick() is guaranteed to have). A
                            # rejoin before then parks a JoinGroup again, which keeps it.
                            member.is_new = False
                            self._schedule(group, (_HB, member.member_id), 0)
                    if member.sync_waiter is not None and member.sync_waiter.token in closed:
                        member.sync_waiter = None
        if now_ms is not None:
            return self.tick(now_ms)
        return self._drain()

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
            self._schedule(group, (_PENDING, new_id), now_ms + j.session_timeout_ms)
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
        self._cancel(group, (_PENDING, member_id))
        # A new member cannot heartbeat while its JoinGroup is parked, so the session
        # timeout does not apply; this bounds how long a vanished one can linger.
        self._schedule(group, (_HB, member_id), now_ms + self._new_member_join_timeout_ms)
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
        self._cancel(group, (_HB, old_id))
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
        self._cancel(group, _SYNC)
        initial = group.state is GroupState.EMPTY
        if initial:
            group.new_member_added = False
            group.join_timer_is_initial = True
            group.initial_delay_ms = self._initial_delay_ms
            group.initial_remaining_ms = max(
                group.rebalance_timeout_ms() - self._initial_delay_ms, 0
            )
            self._schedule(group, _JOIN, now_ms + self._initial_delay_ms)
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
                self._schedule(group, _JOIN, now_ms + group.rebalance_timeout_ms())

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
            self._schedule(group, _JOIN, fired_at + delay)
        else:
            self._complete_join(group, now_ms)

    def _complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        self._cancel(group, _JOIN)
        for member in group.not_yet_rejoined():
            if not member.is_static:
                log.info(
                    "group %r: removing member %r, which did not rejoin in time",
                    group.group_id,
                    member.member_id,
                )
                self._answer_removed(member)
                group.remove(member.member_id)
                self._cancel(group, (_HB, member.member_id))
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait another round for
            # them to rejoin or for their sessions to expire.
            group.join_timer_is_initial = False
            self._schedule(group, _JOIN, now_ms + group.rebalance_timeout_ms())
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
        self._schedule(group, _SYNC, now_ms + group.rebalance_timeout_ms())

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
                self._cancel(group, (_HB, member_id))
            self._prepare_rebalance(group, now_ms)

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel(group, _SYNC)

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
                    _sync_response(
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

    def _leave_one(self, group: ClassicGroup, member_id: str, instance: str | None) -> ErrorCode:
        if not member_id:
            # Administrative removal of a static member by instance id alone.
            if instance is not None and instance in group.static_members:
                self._remove_current_member(group, group.static_members[instance])
                return ErrorCode.NONE
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_id in group.pending_members:
            group.remove(member_id)
            self._cancel(group, (_PENDING, member_id))
            return ErrorCode.NONE
        error = group.validate_member(member_id, instance)
        if error is ErrorCode.NONE:
            self._remove_current_member(group, member_id)
        return error

    def _remove_current_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members[member_id]
        log.info("group %r: member %r leaves", group.group_id, member_id)
        self._cancel(group, (_HB, member_id))
        self._answer_removed(member)
        group.remove(member_id)

    def _remove_member_and_update(self, group: ClassicGroup, member: Member, now_ms: int) -> None:
        self._answer_removed(member)
        group.remove(member.member_id)
        self._cancel(group, (_HB, member.member_id))
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
        self._schedule(group, (_HB, member.member_id), now_ms + member.session_timeout_ms)

    def _fire(self, group: ClassicGroup, key: tuple[str, ...], deadline: int, now_ms: int) -> None:
        kind = key[0]
        if kind == _HB:
            member = group.members.get(key[1])
            # Members with a parked JoinGroup or SyncGroup are waiting on the group, not
            # the other way round; their timer restarts when the wait ends.
            if member is not None and (
                member.is_new or (member.join_waiter is None and member.sync_waiter is None)
            ):
                log.info("group %r: member %r session expired", group.group_id, member.member_id)
                self._remove_member_and_update(group, member, now_ms)
        elif kind == _PENDING:
            if key[1] in group.pending_members:
                group.remove(key[1])
                if group.state is GroupState.PREPARING_REBALANCE and group.has_all_members_joined():
                    self._complete_join(group, now_ms)
        elif key == _JOIN:
            if group.join_timer_is_initial:
                self._try_complete_initial_rebalance(group, deadline, now_ms)
            else:
                self._complete_join(group, now_ms)
        elif key == _SYNC:
            self._expire_pending_sync(group, now_ms)

    def _start(self, now_ms: int) -> None:
        if self._started:
            return
        self._started = True
        for group in self._groups.values():
            for member in group.members.values():
                self._schedule_heartbeat(group, member, now_ms)
        self.consumer.start(now_ms)
        self._next_cleanup_ms = now_ms + self._retention_check_ms

    # -- offsets --------------------------------------------------------------------------------

    def _validate_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance: str | None,
        version: int,
        now_ms: int,
    ) -> ErrorCode:
        if group_id in self.consumer.groups:
            return self.consumer.validate_commit(group_id, member_id, generation_id, version)
        if self._is_share(group_id):
            # Share groups keep no committed offsets; Kafka answers this.
            return ErrorCode.GROUP_ID_NOT_FOUND
        group = self._groups.get(group_id)
        if group is None:
            if generation_id < 0:
                # A consumer that assigns partitions itself (or an admin tool): Kafka
                # creates a "simple" group to hold its offsets.
                self._create_group(group_id, now_ms)
                return ErrorCode.NONE
            return ErrorCode.GROUP_ID_NOT_FOUND if version >= 9 else ErrorCode.ILLEGAL_GENERATION
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.NONE
        if generation_id >= 0 or member_id or instance is not None:
            error = group.validate_member(member_id, instance)
            if error is not ErrorCode.NONE:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif group.state is not GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Valid member and generation but no assignment yet: let it finish syncing.
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _commit(
        self,
        request: _oc.OffsetCommitRequest,
        version: int,
        now_ms: int,
        known: list[tuple[int, int]],
        codes: list[list[ErrorCode]],
    ) -> None:
        group = self._groups.get(request.group_id)  # None: a consumer group
        member = group.members.get(request.member_id) if group and version >= 1 else None
        if (
            group is not None
            and member is not None
            and group.state
            in (
                GroupState.STABLE,
                GroupState.PREPARING_REBALANCE,
            )
        ):
            # Classic clients commit instead of heartbeating when they commit often.
            self._schedule_heartbeat(group, member, now_ms)
        batch: dict[tuple[str, int], CommittedOffset] = {}
        stored: list[tuple[int, int]] = []
        for ti, pi in known:
            topic = request.topics[ti]
            part = topic.partitions[pi]
            metadata = part.committed_metadata or ""
            if len(metadata) > self._metadata_max:
                codes[ti][pi] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            timestamp = (
                part.commit_timestamp if version == 1 and part.commit_timestamp != -1 else now_ms
            )
            batch[(topic.name, part.partition_index)] = CommittedOffset(
                offset=part.committed_offset,
                leader_epoch=part.committed_leader_epoch,
                metadata=metadata,
                commit_timestamp_ms=timestamp,
            )
            stored.append((ti, pi))
        try:
            self._store.commit_offsets(request.group_id, batch)
        except OffsetStoreError as exc:
            log.error("group %r: offset commit not stored: %s", request.group_id, exc)
            for ti, pi in stored:
                codes[ti][pi] = ErrorCode.COORDINATOR_NOT_AVAILABLE

    def _fetch(
        self,
        group_id: str,
        topics: list[_of.OffsetFetchRequest.OffsetFetchRequestTopic]
        | list[_of.OffsetFetchRequest.OffsetFetchRequestTopics]
        | None,
    ) -> list[tuple[str, list[tuple[int, CommittedOffset | None]]]]:
        if topics is None:
            by_topic: dict[str, list[tuple[int, CommittedOffset | None]]] = {}
            for (name, index), committed in sorted(self._store.group_offsets(group_id).items()):
                by_topic.setdefault(name, []).append((index, committed))
            return list(by_topic.items())
        return [
            (t.name, [(i, self._store.offset(group_id, t.name, i)) for i in t.partition_indexes])
            for t in topics
        ]

    def _cleanup(self, now_ms: int) -> None:
        for group_id in list(self.consumer.groups):
            if self.consumer.is_empty(group_id) and not self._store.has_offsets(group_id):
                self.consumer.delete(group_id)
        for group_id, group in list(self._groups.items()):
            if group.state is not GroupState.EMPTY:
                continue
            if self._retention_ms is not None:
                offsets = self._store.group_offsets(group_id)
                # A group that had members counts from when it became Empty; a
                # standalone group's offsets each count from their own commit.
                base = group.state_timestamp_ms if group.protocol_type is not None else None
                expired = [
                    tp
                    for tp, o in offsets.items()
                    if now_ms - (base if base is not None else o.commit_timestamp_ms)
                    >= self._retention_ms
                ]
                if expired:
                    try:
                        self._store.delete_offsets(group_id, expired)
                        log.info("group %r: %d offsets expired", group_id, len(expired))
                    except OffsetStoreError as exc:
                        log.error("group %r: offset expiry not stored: %s", group_id, exc)
            if (
                not group.members
                and not group.pending_members
                and not self._store.has_offsets(group_id)
            ):
                self._delete_group(group_id)

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

    # -- persistence ----------------------------------------------------------------------------

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

    def load_groups(self, group_ids: set[str], now_ms: int) -> None:
        """Bring groups into memory from the store (their ``__consumer_offsets``
        partition is now led here, cluster mode); a group already in memory is
        replaced by the stored one."""
        self.unload_groups(group_ids)
        self._load(group_ids)
        for group_id in group_ids:
            group = self.consumer.groups.get(group_id)
            if group is not None:
                for member in group.members.values():
                    member.session_deadline_ms = now_ms + self.consumer.session_timeout_ms

    def unload_groups(self, group_ids: set[str]) -> None:
        """Forget groups (their ``__consumer_offsets`` partition is no longer led
        here): their members find the new coordinator (NOT_COORDINATOR)."""
        for group_id in group_ids:
            self._groups.pop(group_id, None)
            self.consumer.groups.pop(group_id, None)

    def _load(self, only: set[str] | None = None) -> None:
        for group_id, record in self._store.groups().items():
            if only is not None and group_id not in only:
                continue
            group = ClassicGroup(group_id, record.state_timestamp_ms)
            group.generation_id = record.generation_id
            for mr in record.members:
                group.add(
                    Member(
                        mr.member_id,
                        mr.group_instance_id,
                        mr.client_id,
                        mr.client_host,
                        mr.rebalance_timeout_ms,
                        mr.session_timeout_ms,
                        mr.protocol_type,
                        list(mr.protocols),
                        mr.assignment,
                    ),
                    None,
                )
            group.protocol_type = record.protocol_type
            if group.members:
                if record.leader_id in group.members:
                    group.leader_id = record.leader_id
                group.protocol_name = record.protocol_name or group.select_protocol()
                group.state = GroupState.STABLE
                group.previous_state = GroupState.COMPLETING_REBALANCE
            else:
                group.protocol_name = None
            self._groups[group_id] = group
        snapshots = self._store.consumer_groups()
        if only is not None:
            snapshots = {g: s for g, s in snapshots.items() if g in only}
        try:
            self.consumer.load(snapshots)
        except ValueError as exc:
            raise OffsetStoreError(f"{self._store.path}: {exc}") from exc
        for group_id in self._store.offset_groups():
            if only is not None and group_id not in only:
                continue
            if (
                group_id not in self._groups
                and group_id not in self.consumer.groups
                and not self._is_share(group_id)
            ):
                self._groups[group_id] = ClassicGroup(group_id, None)

    # -- answering ------------------------------------------------------------------------------

    def _drain(self) -> Released:
        out, self._out = self._out, []
        return out

    def _answer_join(self, waiter: Waiter, error: ErrorCode, member_id: str) -> None:
        self._out.append(
            (waiter.token, _join_response(waiter.version, error=error, member_id=member_id))
        )

    def _answer_sync(self, waiter: Waiter, error: ErrorCode) -> None:
        self._out.append((waiter.token, _sync_response(waiter.version, error=error)))

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
                _join_response(
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


def _nothing(topic: str) -> bool:
    return False


def _everything(topic: str) -> bool:
    return True


def _classic_subscriptions(group: ClassicGroup) -> set[str] | None:
    """The topics a consumer group's members subscribe to (their JoinGroup
    metadata for the chosen protocol), or None when one cannot be read."""
    topics: set[str] = set()
    protocol = group.protocol_name
    for member in group.members.values():
        data = member.metadata(protocol) if protocol is not None else b""
        try:
            sub = decode_versioned(
                _cp.CONSUMERPROTOCOLSUBSCRIPTION_SCHEMAS, data, "ConsumerProtocolSubscription"
            )
        except DecodeError:  # whatever a client wrote: Kafka counts it as "everything"
            return None
        topics.update(sub.topics)
    return topics
