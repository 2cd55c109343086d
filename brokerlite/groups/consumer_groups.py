"""Consumer groups of the new protocol (KIP-848, ConsumerGroupHeartbeat), sans-IO.

The coordinator assigns partitions itself; members only heartbeat, saying what
they subscribe to and which partitions they own, and are told which partitions
to own. :class:`ConsumerGroups` holds every such group; the classic coordinator
(:mod:`trafka.brokerlite.groups.coordinator`) owns it and routes to it.

Rules and invariants:

* Epochs. A group has a *group epoch*, bumped whenever something that decides
  the assignment changes: a member joins, leaves or is fenced, a subscription
  changes, or a subscribed topic appears, vanishes or gains partitions. The
  *target assignment* is recomputed (by the server assignor, ``uniform`` or
  ``range``) for every new group epoch and carries that epoch (the assignment
  epoch). Each member has a *member epoch*: the assignment epoch it has caught
  up with. A heartbeat's owned partitions (TopicPartitions) left null mean
  "as last reported".
* Reconciliation, per member, on each of its heartbeats. Partitions it owns
  that the target takes away are revoked first: the member keeps its epoch and
  is told to own only the rest, until a heartbeat shows it owns none of the
  revoked ones. Then it moves to the assignment epoch and is given its target
  partitions that no other member still owns or is revoking; the others follow
  on later heartbeats, once released. A partition is never owned by two
  members at once.
* Heartbeats. Epoch 0 joins (a new member id is made when none is given); -1
  leaves. -2 is a static member leaving for a while (it must name its instance
  id): it stays in the group at epoch -2 with its partitions, which no one else
  is given, and drops what it was still revoking; the group epoch does not
  move. A member joining with that instance id replaces it and takes over its
  assignment without a rebalance; if none does within the session timeout, it
  is removed as a silent member is. A leave naming an instance id must come
  from the member that holds it (FENCED_INSTANCE_ID otherwise); a join naming
  one held by a member that has not left with -2 gets UNRELEASED_INSTANCE_ID. Any
  other epoch must be the member's current one, or its previous one when the
  owned partitions it reports are all still its own (the answer that moved it
  on was lost): else FENCED_MEMBER_EPOCH. An unknown member gets
  UNKNOWN_MEMBER_ID. Fields left null keep their last value. The answer carries
  the assignment when it differs from what the member reported or was last
  told.
* Liveness. A member that does not heartbeat within the session timeout, or
  does not finish revoking within its rebalance timeout, is removed (fenced),
  and the group epoch is bumped. So is a member named by a LeaveGroup of the
  classic API (an admin removing a static member by its instance id, KIP-345),
  as Kafka does; its next heartbeat gets UNKNOWN_MEMBER_ID.
* Offsets (checked by the classic coordinator through :meth:`validate_commit`):
  a commit must name a member of the group and carry its current epoch
  (STALE_MEMBER_EPOCH otherwise, ILLEGAL_GENERATION before OffsetCommit v9);
  a commit without a member id is accepted only while the group is empty.
* Durability. After every heartbeat, leave, fencing or deletion that changed a
  group's epochs, members, subscriptions or assignments, the group is handed to
  ``persist`` as a snapshot (:meth:`ConsumerGroups.snapshot`), which the classic
  coordinator writes to its journal with the offsets (Kafka writes these records
  to ``__consumer_offsets``). After a restart :meth:`ConsumerGroups.load` brings
  the groups back as they were: members carry on heartbeating with their epochs,
  without a rebalance, and their session (and revocation) timers start afresh,
  as on a Kafka coordinator failover. A snapshot leaves out what only matters
  between two heartbeats of a live broker: what a member last reported owning
  (taken to be what it was assigned) and what it was last sent.
* Timers fire only in :meth:`tick`.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from trafka.brokerlite.clock import mono_ms
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k68_consumer_group_heartbeat as _hb
from trafka.codec.messages import k69_consumer_group_describe as _cd

__all__ = ["ASSIGNORS", "ConsumerGroup", "ConsumerGroups", "ConsumerMember", "TopicMeta"]

log = logging.getLogger("trafka.brokerlite")

# (topic id, partition)
TP = tuple[uuid.UUID, int]

# ConsumerGroupDescribe v1's MemberType (KIP-1099): every member here speaks the
# consumer protocol; a classic member cannot join a consumer group (no online
# migration), so 0 (classic) is never the answer.
_CONSUMER_MEMBER = 1


@dataclasses.dataclass(frozen=True, slots=True)
class TopicMeta:
    """What the assignors need of a topic."""

    name: str
    topic_id: uuid.UUID
    partitions: int


# -- assignors ------------------------------------------------------------------------------


def _range(
    subscriptions: Mapping[str, frozenset[str]],
    topics: Mapping[str, TopicMeta],
    current: Mapping[str, frozenset[TP]],
) -> dict[str, set[TP]]:
    """Kafka's range: per topic, contiguous ranges to its subscribers by member id."""
    out: dict[str, set[TP]] = {m: set() for m in subscriptions}
    for name in sorted(topics):
        meta = topics[name]
        members = sorted(m for m, subs in subscriptions.items() if name in subs)
        if not members:
            continue
        share, extra = divmod(meta.partitions, len(members))
        start = 0
        for i, member in enumerate(members):
            count = share + (1 if i < extra else 0)
            out[member].update((meta.topic_id, p) for p in range(start, start + count))
            start += count
    return out


def _uniform(
    subscriptions: Mapping[str, frozenset[str]],
    topics: Mapping[str, TopicMeta],
    current: Mapping[str, frozenset[TP]],
) -> dict[str, set[TP]]:
    """Balanced and sticky: each member's count is what a least-loaded greedy
    placement gives it; members keep their current partitions up to that count,
    and the rest go to members still below theirs."""
    members = sorted(subscriptions)
    eligible: dict[TP, list[str]] = {}
    for name in sorted(topics):
        meta = topics[name]
        subs = [m for m in members if name in subscriptions[m]]
        if subs:
            for p in range(meta.partitions):
                eligible[(meta.topic_id, p)] = subs
    # Counts: partitions with the fewest candidates first, each to the least loaded.
    quota = dict.fromkeys(members, 0)
    for tp in sorted(eligible, key=lambda tp: (len(eligible[tp]), str(tp[0]), tp[1])):
        chosen = min(eligible[tp], key=lambda m: (quota[m], m))
        quota[chosen] += 1
    out: dict[str, set[TP]] = {m: set() for m in members}
    placed: set[TP] = set()
    for member in members:
        keep = sorted(
            (tp for tp in current.get(member, ()) if member in eligible.get(tp, ())),
            key=lambda tp: (str(tp[0]), tp[1]),
        )
        for tp in keep[: quota[member]]:
            if tp not in placed:
                out[member].add(tp)
                placed.add(tp)
    for tp in sorted(eligible, key=lambda tp: (len(eligible[tp]), str(tp[0]), tp[1])):
        if tp in placed:
            continue
        below = [m for m in eligible[tp] if len(out[m]) < quota[m]]
        chosen = min(below or eligible[tp], key=lambda m: (len(out[m]), m))
        out[chosen].add(tp)
        placed.add(tp)
    return out


ASSIGNORS: dict[str, Callable[..., dict[str, set[TP]]]] = {"uniform": _uniform, "range": _range}
DEFAULT_ASSIGNOR = "uniform"

STABLE, UNREVOKED, UNRELEASED = "stable", "unrevoked_partitions", "unreleased_partitions"
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2  # a static member gone for a while, its partitions kept


@dataclasses.dataclass(slots=True)
class ConsumerMember:
    """One member of a consumer group (see the module rules)."""

    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    instance_id: str | None = None
    rack_id: str | None = None
    subscribed_names: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: str = STABLE
    assigned: set[TP] = dataclasses.field(default_factory=set)
    revoking: set[TP] = dataclasses.field(default_factory=set)
    #: What the member last said it owns (a null TopicPartitions means "unchanged").
    reported: set[TP] = dataclasses.field(default_factory=set)
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None
    last_sent: frozenset[TP] | None = None


@dataclasses.dataclass(slots=True)
class ConsumerGroup:
    """A consumer group: its members, epochs and target assignment."""

    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = dataclasses.field(default_factory=dict)
    target: dict[str, set[TP]] = dataclasses.field(default_factory=dict)
    subscribed: dict[str, TopicMeta] = dataclasses.field(default_factory=dict)
    assignor: str = DEFAULT_ASSIGNOR

    @property
    def state(self) -> str:
        """``Empty``, ``Reconciling`` or ``Stable`` (Kafka's names)."""
        if not self.members:
            return "Empty"
        if any(
            m.epoch != self.assignment_epoch or m.state != STABLE for m in self.members.values()
        ):
            return "Reconciling"
        return "Stable"

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        """The member that holds ``instance_id`` (at most one does)."""
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None

    def owner_of(self, tp: TP, other_than: str) -> str | None:
        for member in self.members.values():
            if member.member_id != other_than and (tp in member.assigned or tp in member.revoking):
                return member.member_id
        return None


def tps_json(pairs: Iterable[TP]) -> list[list[Any]]:
    """Topic-partitions as snapshot JSON: ``[[topic id, partition], ...]``, sorted."""
    return [[str(t), p] for t, p in sorted(pairs, key=lambda tp: (str(tp[0]), tp[1]))]


def tps_from_json(rows: Iterable[Any]) -> set[TP]:
    """The inverse of :func:`tps_json`."""
    return {(uuid.UUID(t), int(p)) for t, p in rows}


def group_core_json(group: Any) -> dict[str, Any]:
    """What every group of the new protocols (KIP-848's, KIP-932's) snapshots alike:
    its epochs, the topics it subscribes to and its target assignment."""
    return {
        "epoch": group.epoch,
        "assignment_epoch": group.assignment_epoch,
        "subscribed": [
            [m.name, str(m.topic_id), m.partitions]
            for m in sorted(group.subscribed.values(), key=lambda m: m.name)
        ],
        "target": {mid: tps_json(target) for mid, target in sorted(group.target.items())},
    }


def load_group_core(group: Any, data: Mapping[str, Any]) -> None:
    """Set the subscribed topics and target assignment of :func:`group_core_json` on
    ``group`` (its epochs are constructor arguments)."""
    for name, topic_id, partitions in data["subscribed"]:
        group.subscribed[str(name)] = TopicMeta(str(name), uuid.UUID(topic_id), int(partitions))
    group.target = {str(mid): tps_from_json(rows) for mid, rows in data["target"].items()}


def _group_from_snapshot(group_id: str, data: Mapping[str, Any]) -> ConsumerGroup:
    tps = tps_from_json
    group = ConsumerGroup(
        group_id,
        epoch=int(data["epoch"]),
        assignment_epoch=int(data["assignment_epoch"]),
        assignor=str(data["assignor"]),
    )
    if group.assignor not in ASSIGNORS:
        raise ValueError(f"unknown assignor {group.assignor!r}")
    load_group_core(group, data)
    for m in data["members"]:
        assigned, revoking = tps(m["assigned"]), tps(m["revoking"])
        member = ConsumerMember(
            member_id=str(m["member_id"]),
            client_id=str(m["client_id"]),
            client_host=str(m["client_host"]),
            rebalance_timeout_ms=int(m["rebalance_timeout_ms"]),
            instance_id=m["instance_id"],
            rack_id=m["rack_id"],
            subscribed_names=tuple(m["subscribed_names"]),
            subscribed_regex=m["subscribed_regex"],
            server_assignor=m["server_assignor"],
            epoch=int(m["epoch"]),
            previous_epoch=int(m["previous_epoch"]),
            state=str(m["state"]),
            assigned=assigned,
            revoking=revoking,
            reported=assigned | revoking,
            last_sent=frozenset(assigned),
        )
        if member.state not in (STABLE, UNREVOKED, UNRELEASED):
            raise ValueError(f"unknown member state {member.state!r}")
        group.members[member.member_id] = member
    return group


def _pairs(parts: Iterable[Any]) -> set[TP]:
    return {(t.topic_id, p) for t in parts for p in t.partitions}


def _by_topic(tps: Iterable[TP]) -> dict[uuid.UUID, list[int]]:
    out: dict[uuid.UUID, list[int]] = {}
    for topic_id, p in sorted(tps, key=lambda tp: (str(tp[0]), tp[1])):
        out.setdefault(topic_id, []).append(p)
    return out


class ConsumerGroups:
    """Every consumer group of the new protocol, without I/O.

    Args:
        topics: ``() -> {name: TopicMeta}``, the broker's topics now.
        session_timeout_ms: Kafka's ``group.consumer.session.timeout.ms``.
        heartbeat_interval_ms: Kafka's ``group.consumer.heartbeat.interval.ms``.
        timings: ``group_id -> (session timeout, heartbeat interval)``, the group's
            own (its ``consumer.*`` group configs over the broker's, see
            :meth:`.group_configs.GroupConfigs.consumer_timings`); None: the two above.
        max_size: Kafka's ``group.consumer.max.size``.
        persist: ``(group_id, snapshot or None)``, called when a group's durable
            state changed (None: the group is gone); it may raise, which is logged
            and leaves the group as it is in memory.
    """

    def __init__(
        self,
        topics: Callable[[], Mapping[str, TopicMeta]],
        *,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 5_000,
        max_size: int = 2**31 - 1,
        persist: Callable[[str, dict[str, Any] | None], None] | None = None,
        timings: Callable[[str], tuple[int, int]] | None = None,
    ) -> None:
        self._topics = topics
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self._timings = timings
        self.max_size = max_size
        self.groups: dict[str, ConsumerGroup] = {}
        self._persist = persist
        self._saved: dict[str, dict[str, Any]] = {}

    def timings(self, group_id: str) -> tuple[int, int]:
        """The session timeout and heartbeat interval (ms) of ``group_id``'s members."""
        if self._timings is None:
            return self.session_timeout_ms, self.heartbeat_interval_ms
        return self._timings(group_id)

    # -- heartbeat ----------------------------------------------------------------------------

    def heartbeat(
        self,
        request: _hb.ConsumerGroupHeartbeatRequest,
        version: int,
        now_ms: int,
        *,
        client_id: str = "",
        client_host: str = "",
    ) -> _hb.ConsumerGroupHeartbeatResponse:
        """Handle a ConsumerGroupHeartbeat (the caller has ruled out a classic group
        of the same id)."""
        response = self._heartbeat(request, version, now_ms, client_id, client_host)
        group = self.groups.get(request.group_id)
        if group is not None:
            self._save(group)
        return response

    def _heartbeat(
        self,
        request: _hb.ConsumerGroupHeartbeatRequest,
        version: int,
        now_ms: int,
        client_id: str,
        client_host: str,
    ) -> _hb.ConsumerGroupHeartbeatResponse:
        regex = request.subscribed_topic_regex if version >= 1 else None
        error = self._check(request, regex)
        if error is not None:
            return self._error(*error)
        group = self.groups.get(request.group_id)
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, request, now_ms)
        if group is None:
            group = self.groups[request.group_id] = ConsumerGroup(request.group_id)
        changed = False
        if request.member_epoch == 0:
            instance = request.instance_id
            holder = group.static_member(instance) if instance is not None else None
            if holder is not None and holder.epoch == STATIC_LEAVE_EPOCH:
                # The static member is back (as a new member id, usually): it takes
                # over the assignment it left with; nothing else moves.
                member = self._replace(group, holder, request, client_id, client_host)
            else:
                if holder is not None and holder.member_id != request.member_id:
                    return self._error(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"instance id {instance!r} is held by member {holder.member_id}",
                    )
                if request.member_id not in group.members and len(group.members) >= self.max_size:
                    return self._error(ErrorCode.GROUP_MAX_SIZE_REACHED, "the group is full")
                if request.member_id in group.members:
                    # A member rejoining from scratch gives up what it had.
                    self._remove(group, request.member_id, now_ms)
                member = ConsumerMember(
                    member_id=request.member_id or str(uuid.uuid4()),
                    client_id=client_id,
                    client_host=client_host,
                    rebalance_timeout_ms=request.rebalance_timeout_ms,
                    instance_id=instance,
                )
                group.members[member.member_id] = member
                changed = True
        else:
            found = group.members.get(request.member_id)
            if found is None:
                return self._error(ErrorCode.UNKNOWN_MEMBER_ID, "unknown member")
            member = found
            if member.epoch == STATIC_LEAVE_EPOCH:
                return self._error(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    "the member left (epoch -2); rejoin with epoch 0 and its instance id",
                )
            owned = (
                member.reported
                if request.topic_partitions is None
                else _pairs(request.topic_partitions)
            )
            if request.member_epoch != member.epoch and not (
                request.member_epoch == member.previous_epoch
                and owned <= member.assigned | member.revoking
            ):
                return self._error(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"epoch {request.member_epoch} is not the member's ({member.epoch})",
                )
        member.session_deadline_ms = mono_ms(now_ms) + self.timings(group.group_id)[0]
        changed |= self._update(member, request, regex)
        if request.server_assignor is not None:
            group.assignor = request.server_assignor
        changed |= self._refresh_metadata(group)
        if changed:
            group.epoch += 1
        if group.assignment_epoch < group.epoch:
            self._assign(group)
        if request.topic_partitions is not None:
            member.reported = _pairs(request.topic_partitions)
        self._reconcile(group, member, now_ms)
        send = (
            request.member_epoch != member.epoch  # joining, or behind (a lost answer)
            or member.last_sent != frozenset(member.assigned)
            or (request.topic_partitions is not None and member.reported != member.assigned)
        )
        assignment = None
        if send:
            member.last_sent = frozenset(member.assigned)
            assignment = _hb.ConsumerGroupHeartbeatResponse.Assignment(
                topic_partitions=[
                    _hb.ConsumerGroupHeartbeatResponse.TopicPartitions(topic_id=t, partitions=ps)
                    for t, ps in _by_topic(member.assigned).items()
                ]
            )
        return _hb.ConsumerGroupHeartbeatResponse(
            member_id=member.member_id,
            member_epoch=member.epoch,
            heartbeat_interval_ms=self.timings(group.group_id)[1],
            assignment=assignment,
        )

    def _leave(
        self,
        group: ConsumerGroup | None,
        request: _hb.ConsumerGroupHeartbeatRequest,
        now_ms: int,
    ) -> _hb.ConsumerGroupHeartbeatResponse:
        """A heartbeat with epoch -1 (leave) or -2 (a static member leaving for a while)."""
        instance = request.instance_id
        if instance is None:
            if group is None or request.member_id not in group.members:
                return self._error(ErrorCode.UNKNOWN_MEMBER_ID, "unknown member")
            self._remove(group, request.member_id, now_ms)
        else:
            holder = group.static_member(instance) if group is not None else None
            if holder is None:
                return self._error(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"no static member with instance id {instance!r}"
                )
            if holder.member_id != request.member_id:
                return self._error(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"instance id {instance!r} is held by member {holder.member_id}",
                )
            assert group is not None
            if request.member_epoch == STATIC_LEAVE_EPOCH:
                holder.epoch = STATIC_LEAVE_EPOCH
                holder.revoking = set()  # what it was giving up is free now
                holder.revocation_deadline_ms = None
                holder.state = STABLE
                holder.last_sent = None
            else:
                self._remove(group, holder.member_id, now_ms)
        return _hb.ConsumerGroupHeartbeatResponse(
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            heartbeat_interval_ms=0,
        )

    def leave_group(
        self, group_id: str, identities: Iterable[tuple[str, str | None]], now_ms: int
    ) -> list[ErrorCode] | None:
        """A LeaveGroup (the classic API) to consumer group ``group_id``, as Kafka's
        ``classicGroupLeaveToConsumerGroup``: each ``(member_id, instance_id)`` is
        removed (fenced) or gets its error; None when there is no such group.

        By instance id: UNKNOWN_MEMBER_ID when no member holds it; a member id
        given with it must be the holder's (FENCED_INSTANCE_ID otherwise), an
        empty one is an administrative removal (KIP-345). A static member away
        at epoch -2 is removed as well. Without an instance id: the member by
        its id, else UNKNOWN_MEMBER_ID. The group epoch is bumped once and the
        assignment recomputed when anyone left.
        """
        group = self.groups.get(group_id)
        if group is None:
            return None
        codes: list[ErrorCode] = []
        gone: list[str] = []
        for member_id, instance in identities:
            if instance is None:
                found = group.members.get(member_id)
                if found is None:
                    codes.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
            else:
                found = group.static_member(instance)
                if found is None:
                    codes.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != found.member_id:
                    codes.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
            codes.append(ErrorCode.NONE)
            if found.member_id not in gone:
                gone.append(found.member_id)
        if gone:
            for member_id in gone:
                log.info("consumer group %r: member %r removed by LeaveGroup", group_id, member_id)
                group.members.pop(member_id, None)
                group.target.pop(member_id, None)
            self._refresh_metadata(group)
            group.epoch += 1
            if group.members:
                self._assign(group)
            self._save(group)
        return codes

    @staticmethod
    def _replace(
        group: ConsumerGroup,
        gone: ConsumerMember,
        request: _hb.ConsumerGroupHeartbeatRequest,
        client_id: str,
        client_host: str,
    ) -> ConsumerMember:
        """A member joining as the static member ``gone`` (at epoch -2): same
        subscription and partitions, under the new member id."""
        del group.members[gone.member_id]
        member = dataclasses.replace(
            gone,
            member_id=request.member_id or str(uuid.uuid4()),
            client_id=client_id,
            client_host=client_host,
            epoch=0,
            previous_epoch=-1,
            assigned=set(gone.assigned),
            revoking=set(),
            reported=set(),
            last_sent=None,
        )
        target = group.target.pop(gone.member_id, None)
        if target is not None:
            group.target[member.member_id] = target
        group.members[member.member_id] = member
        return member

    def _check(
        self, request: _hb.ConsumerGroupHeartbeatRequest, regex: str | None
    ) -> tuple[ErrorCode, str] | None:
        if not request.group_id:
            return ErrorCode.INVALID_REQUEST, "GroupId can't be empty"
        if request.member_epoch < STATIC_LEAVE_EPOCH:
            return ErrorCode.INVALID_REQUEST, f"invalid MemberEpoch {request.member_epoch}"
        if request.member_epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
            return ErrorCode.INVALID_REQUEST, "InstanceId can't be null with MemberEpoch -2"
        if request.member_epoch != 0 and not request.member_id:
            return ErrorCode.INVALID_REQUEST, "MemberId can't be empty"
        if request.member_epoch == 0:
            if request.rebalance_timeout_ms <= 0:
                return ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be given when joining"
            if request.subscribed_topic_names is None and regex is None:
                return ErrorCode.INVALID_REQUEST, "a subscription must be given when joining"
            if request.topic_partitions:
                return ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty when joining"
        if request.server_assignor is not None and request.server_assignor not in ASSIGNORS:
            return (
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"assignor {request.server_assignor!r} is not one of {', '.join(ASSIGNORS)}",
            )
        if regex:
            try:
                re.compile(regex)
            except re.error as exc:
                return ErrorCode.INVALID_REQUEST, f"SubscribedTopicRegex is invalid: {exc}"
        return None

    @staticmethod
    def _error(code: ErrorCode, message: str) -> _hb.ConsumerGroupHeartbeatResponse:
        return _hb.ConsumerGroupHeartbeatResponse(error_code=code, error_message=message)

    @staticmethod
    def _update(
        member: ConsumerMember, request: _hb.ConsumerGroupHeartbeatRequest, regex: str | None
    ) -> bool:
        changed = False
        if request.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.subscribed_topic_names is not None:
            names = tuple(sorted(set(request.subscribed_topic_names)))
            changed |= names != member.subscribed_names
            member.subscribed_names = names
        if regex is not None:
            value = regex or None  # an empty regex clears it
            changed |= value != member.subscribed_regex
            member.subscribed_regex = value
        if request.server_assignor is not None:
            changed |= request.server_assignor != member.server_assignor
            member.server_assignor = request.server_assignor
        return changed

    # -- assignment ---------------------------------------------------------------------------

    def _subscriptions(
        self, group: ConsumerGroup, topics: Mapping[str, TopicMeta]
    ) -> dict[str, frozenset[str]]:
        out = {}
        for member in group.members.values():
            names = {n for n in member.subscribed_names if n in topics}
            if member.subscribed_regex:
                pattern = re.compile(member.subscribed_regex)
                # Every topic, internal ones too: Kafka's coordinator matches
                # them all (TopicRegexResolver), so a member may be assigned
                # __consumer_offsets; clients that must not read them filter.
                names.update(n for n in topics if pattern.fullmatch(n))
            out[member.member_id] = frozenset(names)
        return out

    def _refresh_metadata(self, group: ConsumerGroup) -> bool:
        """Record the subscribed topics' ids and sizes; True when they changed."""
        topics = self._topics()
        wanted = set().union(*self._subscriptions(group, topics).values())
        now = {name: topics[name] for name in wanted}
        if now == group.subscribed:
            return False
        group.subscribed = now
        return True

    def _assign(self, group: ConsumerGroup) -> None:
        subs = self._subscriptions(group, group.subscribed)
        current = {
            m.member_id: frozenset(group.target.get(m.member_id, m.assigned))
            for m in group.members.values()
        }
        group.target = ASSIGNORS[group.assignor](subs, group.subscribed, current)
        group.assignment_epoch = group.epoch

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, now_ms: int) -> None:
        if member.state == UNREVOKED:
            if member.reported & member.revoking:
                return  # still revoking
            member.revoking = set()
            member.revocation_deadline_ms = None
            member.state = STABLE if member.epoch == group.assignment_epoch else UNRELEASED
        if member.state == STABLE and member.epoch == group.assignment_epoch:
            return
        target = group.target.get(member.member_id, set())
        keep = member.assigned & target
        revoke = member.assigned - target
        if revoke & member.reported:  # else it never took them: nothing to wait for
            member.assigned = keep
            member.revoking = revoke
            member.state = UNREVOKED
            member.revocation_deadline_ms = mono_ms(now_ms) + member.rebalance_timeout_ms
            return
        free = {tp for tp in target - keep if group.owner_of(tp, member.member_id) is None}
        member.assigned = keep | free
        if member.epoch != group.assignment_epoch:
            member.previous_epoch = member.epoch
            member.epoch = group.assignment_epoch
        member.state = UNRELEASED if target - member.assigned else STABLE

    def _remove(self, group: ConsumerGroup, member_id: str, now_ms: int) -> None:
        group.members.pop(member_id, None)
        group.target.pop(member_id, None)
        self._refresh_metadata(group)
        group.epoch += 1
        if group.members:
            self._assign(group)

    # -- timers -------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Fence members whose session or revocation time ran out (monotonic ms,
        Kafka's coordinator timer)."""
        mono = mono_ms(now_ms)
        for group in list(self.groups.values()):
            fenced = False
            for member in list(group.members.values()):
                late = member.session_deadline_ms <= mono or (
                    member.revocation_deadline_ms is not None
                    and member.revocation_deadline_ms <= mono
                )
                if late:
                    self._remove(group, member.member_id, now_ms)
                    fenced = True
            if fenced:
                self._save(group)

    def next_deadline(self) -> int | None:
        """The earliest time :meth:`tick` has work (monotonic ms), or None."""
        deadlines = [
            d
            for g in self.groups.values()
            for m in g.members.values()
            for d in (m.session_deadline_ms, m.revocation_deadline_ms)
            if d is not None
        ]
        return min(deadlines, default=None)

    # -- offsets, listing, describing, deleting ------------------------------------------------

    def validate_commit(self, group_id: str, member_id: str, epoch: int, version: int) -> ErrorCode:
        """The error of an OffsetCommit (or TxnOffsetCommit) to consumer group ``group_id``."""
        group = self.groups[group_id]
        if not member_id and epoch < 0:
            return ErrorCode.NONE if not group.members else ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != member.epoch:
            return ErrorCode.STALE_MEMBER_EPOCH if version >= 9 else ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def validate_fetch(self, group_id: str, member_id: str | None, epoch: int) -> ErrorCode:
        """The error of an OffsetFetch v9+ naming a member of ``group_id``."""
        group = self.groups.get(group_id)
        if group is None or epoch < 0:
            return ErrorCode.NONE
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE if epoch == member.epoch else ErrorCode.STALE_MEMBER_EPOCH

    def is_subscribed(self, group_id: str, topic: str) -> bool:
        """Whether a member of ``group_id`` subscribes to ``topic`` (by name or regex)."""
        group = self.groups.get(group_id)
        if group is None:
            return False
        for member in group.members.values():
            if topic in member.subscribed_names:
                return True
            if member.subscribed_regex and re.fullmatch(member.subscribed_regex, topic):
                return True
        return False

    def is_empty(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is None or not group.members

    def delete(self, group_id: str) -> None:
        if self.groups.pop(group_id, None) is not None:
            self._saved.pop(group_id, None)
            self._call_persist(group_id, None)

    # -- durability ---------------------------------------------------------------------------

    @staticmethod
    def snapshot(group: ConsumerGroup) -> dict[str, Any]:
        """What of ``group`` survives a restart, as JSON-ready data."""

        tps = tps_json
        return {
            **group_core_json(group),
            "assignor": group.assignor,
            "members": [
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "instance_id": m.instance_id,
                    "rack_id": m.rack_id,
                    "subscribed_names": list(m.subscribed_names),
                    "subscribed_regex": m.subscribed_regex,
                    "server_assignor": m.server_assignor,
                    "epoch": m.epoch,
                    "previous_epoch": m.previous_epoch,
                    "state": m.state,
                    "assigned": tps(m.assigned),
                    "revoking": tps(m.revoking),
                }
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ],
        }

    def load(self, snapshots: Mapping[str, Mapping[str, Any]]) -> None:
        """Bring back groups from their :meth:`snapshot` (before :meth:`start`).

        Raises:
            ValueError: a snapshot is malformed.
        """
        for group_id, data in snapshots.items():
            try:
                group = _group_from_snapshot(group_id, data)
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"consumer group {group_id!r}: bad snapshot: {exc!r}") from exc
            self.groups[group_id] = group
            self._saved[group_id] = self.snapshot(group)

    def start(self, now_ms: int) -> None:
        """Start the loaded members' timers at ``now_ms`` (the broker's start)."""
        for group in self.groups.values():
            session_ms = self.timings(group.group_id)[0]
            for member in group.members.values():
                member.session_deadline_ms = mono_ms(now_ms) + session_ms
                if member.state == UNREVOKED:
                    member.revocation_deadline_ms = mono_ms(now_ms) + member.rebalance_timeout_ms

    def _save(self, group: ConsumerGroup) -> None:
        data = self.snapshot(group)
        if self._saved.get(group.group_id) != data:
            self._saved[group.group_id] = data
            self._call_persist(group.group_id, data)

    def _call_persist(self, group_id: str, data: dict[str, Any] | None) -> None:
        if self._persist is None:
            return
        try:
            self._persist(group_id, data)
        except Exception as exc:  # the store's error: the live group goes on
            log.error("consumer group %r: state not stored: %s", group_id, exc)

    def describe(self, group_id: str, topic_name: Callable[[uuid.UUID], str | None]) -> Any:
        """A ConsumerGroupDescribe entry for ``group_id`` (GROUP_ID_NOT_FOUND if unknown)."""
        r = _cd.ConsumerGroupDescribeResponse
        group = self.groups.get(group_id)
        if group is None:
            return r.DescribedGroup(
                group_id=group_id,
                error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                error_message=f"group {group_id} is not a consumer group",
            )

        def assignment(tps: Iterable[TP]) -> Any:
            return r.Assignment(
                topic_partitions=[
                    r.TopicPartitions(topic_id=t, topic_name=topic_name(t) or "", partitions=ps)
                    for t, ps in _by_topic(tps).items()
                ]
            )

        return r.DescribedGroup(
            group_id=group_id,
            group_state=group.state,
            group_epoch=group.epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.assignor,
            members=[
                r.Member(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    member_epoch=m.epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=list(m.subscribed_names),
                    subscribed_topic_regex=m.subscribed_regex,
                    assignment=assignment(m.assigned),
                    target_assignment=assignment(group.target.get(m.member_id, ())),
                    member_type=_CONSUMER_MEMBER,
                )
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ],
            authorized_operations=-(2**31),
        )
