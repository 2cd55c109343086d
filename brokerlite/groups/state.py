"""The data model of one classic consumer group (no timers, no responses, no I/O).

:class:`~trafka.brokerlite.groups.coordinator.GroupCoordinator` drives these objects; this
module only keeps their bookkeeping consistent.

States and transitions (Kafka's classic group state machine)::

    Empty ──────────────┐
      ^                 v
      │        PreparingRebalance <──────────┐
      │          │          │                │
      └──────────┘          v                │
                   CompletingRebalance ──────┤
                            │                │
                            v                │
                          Stable ────────────┘

* ``Empty``: no members (there may be pending members and committed offsets).
* ``PreparingRebalance``: waiting for members to (re)join; JoinGroups are parked.
* ``CompletingRebalance``: the generation is decided; waiting for the leader's
  SyncGroup carrying the assignment; followers' SyncGroups are parked.
* ``Stable``: the assignment is known; members heartbeat.
* ``Dead`` is never stored in a live group: a deleted group is simply dropped, and
  the coordinator reports unknown groups as Dead where Kafka does.

Invariants kept by :class:`ClassicGroup`:

* ``num_awaiting_join`` equals the number of members with a parked JoinGroup.
* ``supported_protocols[name]`` equals the number of members listing ``name``.
* ``static_members`` maps every static member's instance id to its member id, and
  nothing else.
* ``leader_id`` is None exactly when there are no members; otherwise it names a member.
* ``pending_members`` (ids handed out with MEMBER_ID_REQUIRED) and ``members`` are
  disjoint, and ``pending_sync`` is a subset of ``members``.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Hashable, Iterable
from typing import NamedTuple

from trafka.codec.errors import ErrorCode

__all__ = ["ClassicGroup", "GroupState", "Member", "Waiter"]


class GroupState(enum.Enum):
    """A classic group's state; the value is Kafka's name for it."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class Waiter(NamedTuple):
    """A parked request: the caller's token and the request's API version."""

    token: Hashable
    version: int


class Member:
    """One member of a classic group.

    Attributes:
        member_id: the coordinator-assigned id.
        group_instance_id: the static instance id, or None (dynamic member).
        client_id, client_host: from the member's latest JoinGroup.
        rebalance_timeout_ms, session_timeout_ms: from the latest JoinGroup.
        protocol_type: the member's protocol type.
        protocols: ``(name, metadata)`` pairs in the member's order of preference.
        assignment: the member's assignment in the current generation.
        join_waiter, sync_waiter: the member's parked JoinGroup / SyncGroup.
        is_new: joined for the first time and not yet part of a generation (new
            members expire on the join timeout even while awaiting a rebalance).
    """

    __slots__ = (
        "assignment",
        "client_host",
        "client_id",
        "group_instance_id",
        "is_new",
        "join_waiter",
        "member_id",
        "protocol_type",
        "protocols",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "sync_waiter",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = assignment
        self.join_waiter: Waiter | None = None
        self.sync_waiter: Waiter | None = None
        self.is_new = False

    def __repr__(self) -> str:
        return f"Member({self.member_id!r}, instance={self.group_instance_id!r})"

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        """The member's metadata for ``protocol`` (empty if it does not list it)."""
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether ``protocols`` are exactly the member's (names, metadata and order)."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


class ClassicGroup:
    """One classic group's membership and generation bookkeeping.

    Args:
        group_id: the group id.
        now_ms: creation time (the state timestamp of the initial Empty state).
    """

    def __init__(self, group_id: str, now_ms: int | None) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.previous_state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: set[str] = set()
        self.pending_sync: set[str] = set()
        self.supported_protocols: Counter[str] = Counter()
        self.num_awaiting_join = 0
        # Initial-rebalance bookkeeping (group.initial.rebalance.delay.ms).
        self.new_member_added = False
        self.initial_delay_ms = 0
        self.initial_remaining_ms = 0
        self.join_timer_is_initial = False
        # Generation the pending-sync timer was armed for.
        self.sync_generation = -1
        # Timer key -> deadline; the coordinator's heap entries are checked against it.
        self.timers: dict[tuple[str, ...], int] = {}

    def __repr__(self) -> str:
        return (
            f"ClassicGroup({self.group_id!r}, {self.state.value}, gen={self.generation_id}, "
            f"members={list(self.members)})"
        )

    # -- queries ------------------------------------------------------------------------------

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.join_waiter is None]

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout of the members (0 without members)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        """Whether a member with these protocols can join.

        An empty group accepts any non-empty protocol type and list; otherwise the
        type must be the group's and one of the names must be supported by every
        current member.
        """
        names = list(names)
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols[n] == len(self.members) for n in names
        )

    def candidate_protocols(self) -> set[str]:
        count = len(self.members)
        return {name for name, n in self.supported_protocols.items() if n == count}

    def select_protocol(self) -> str:
        """The protocol for the next generation: each member votes for its most
        preferred protocol that every member supports; most votes wins, ties going
        to the protocol the leader prefers (then the first member's preference)."""
        if not self.members:
            raise ValueError(f"group {self.group_id}: cannot select a protocol without members")
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        tied = {name for name, n in votes.items() if n == best}
        preference = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        for name in preference.protocol_names():
            if name in tied:
                return name
        return min(tied)

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """Kafka's member check for Heartbeat, SyncGroup, LeaveGroup, commits and rejoins.

        Returns:
            NONE, UNKNOWN_MEMBER_ID, or FENCED_INSTANCE_ID when the instance id
            belongs to another member id.
        """
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    # -- changes ------------------------------------------------------------------------------

    def transition(self, state: GroupState, now_ms: int) -> None:
        """Move to ``state``.

        Raises:
            ValueError: the transition is not in the state machine (a coordinator bug).
        """
        if self.state not in _VALID_PREVIOUS[state]:
            raise ValueError(
                f"group {self.group_id}: invalid transition {self.state.value} -> {state.value}"
            )
        self.previous_state = self.state
        self.state = state
        self.state_timestamp_ms = now_ms

    def set_join_waiter(self, member: Member, waiter: Waiter | None) -> Waiter | None:
        """Park (or clear) ``member``'s JoinGroup; returns the waiter it replaces."""
        old = member.join_waiter
        if waiter is not None and old is None:
            self.num_awaiting_join += 1
        elif waiter is None and old is not None:
            self.num_awaiting_join -= 1
        member.join_waiter = waiter
        return old

    def add(self, member: Member, waiter: Waiter | None) -> None:
        """Add a new member, parking its JoinGroup on ``waiter``."""
        if member.member_id in self.members:
            raise ValueError(f"group {self.group_id}: member {member.member_id} already present")
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(
                    f"group {self.group_id}: instance {member.group_instance_id} already present"
                )
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names())
        self.set_join_waiter(member, waiter)
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        """Remove a member (or a pending member id); returns the removed member.

        The member's waiters are left on the returned object for the caller to answer.
        """
        member = self.members.pop(member_id, None)
        if member is not None:
            self._forget_protocols(member)
            if member.join_waiter is not None:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync.discard(member_id)
        return member

    def update_member(
        self,
        member: Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        waiter: Waiter | None,
    ) -> Waiter | None:
        """Apply a rejoin's protocols and timeouts and park its JoinGroup.

        Returns:
            The JoinGroup waiter this one displaces (the member joined twice).
        """
        self._forget_protocols(member)
        member.protocols = protocols
        self.supported_protocols.update(member.protocol_names())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        return self.set_join_waiter(member, waiter)

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> tuple[Member, Member]:
        """Give a static member a new member id, keeping everything else.

        Returns:
            ``(new_member, old_member)``; the old member object still carries the
            waiters the caller must fence.
        """
        old = self.members.pop(old_member_id)
        new = Member(
            new_member_id,
            group_instance_id,
            old.client_id,
            old.client_host,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocol_type,
            list(old.protocols),
            old.assignment,
        )
        if old.join_waiter is not None:
            self.num_awaiting_join -= 1
        self.members[new_member_id] = new
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return new, old

    def _forget_protocols(self, member: Member) -> None:
        for name in member.protocol_names():
            self.supported_protocols[name] -= 1
            if self.supported_protocols[name] <= 0:
                del self.supported_protocols[name]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a rejoined member.

        Returns:
            False when there is no leader or no member rejoined.
        """
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.join_waiter is not None:
            return True
        for member in self.members.values():
            if member.join_waiter is not None:
                self.leader_id = member.member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        """Start the next generation: CompletingRebalance with members, else Empty."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition(GroupState.EMPTY, now_ms)
        self.pending_sync.clear()
