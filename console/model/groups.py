"""Consumer and share groups as the pages show them, and the reset of a
group's offsets as kafka-consumer-groups plans it.

Rules:

* A partition's lag is its log end minus the committed offset, never below 0,
  and None when either is unknown; a share group's is the broker's count of
  records not yet acknowledged (KIP-1226) when it gives one.
* A group's total lag is the sum of the lags known, and says how many
  partitions it leaves out: assigned ones with no committed offset ("no
  commit": where the consumer starts depends on its auto.offset.reset, which
  the cluster does not know) and ones whose log end is unknown.
* Kafka resets offsets of, and deletes, only an inactive group
  (:data:`INACTIVE_STATES`, no member): :func:`refuse_unless_inactive` says
  so before the cluster is asked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Literal

from trafka.sdk.admin import (
    GroupDescription,
    GroupListing,
    MemberDescription,
    ShareGroupDescription,
    ShareMemberDescription,
    SharePartitionOffsetInfo,
)
from trafka.sdk.fetcher import TopicPartition

from .forms import InputError, int_field, offset_or_time, topic_name
from .lag import LagHistory, LagSample
from .topics import offset_of

# -- groups and their lag --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class GroupPartitionRow:
    topic: str
    partition: int
    committed: int | None
    end_offset: int | None
    lag: int | None
    member_id: str | None
    client_id: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str
    group_type: str
    protocol_type: str
    protocol: str
    members: tuple[tuple[str, str | None, str, str, tuple[TopicPartition, ...]], ...]
    partitions: tuple[GroupPartitionRow, ...]

    @property
    def total_lag(self) -> int:
        """The lags known, summed (see :attr:`no_commit` and :attr:`unknown_lag`)."""
        return sum(r.lag or 0 for r in self.partitions)

    @property
    def no_commit(self) -> int:
        """Partitions left out of :attr:`total_lag`: no committed offset."""
        return sum(1 for r in self.partitions if r.lag is None and r.committed is None)

    @property
    def unknown_lag(self) -> int:
        """Partitions left out of :attr:`total_lag`: committed, log end unknown."""
        return sum(1 for r in self.partitions if r.lag is None and r.committed is not None)

    def lags(self) -> dict[TopicPartition, int]:
        """Lag per partition, for :class:`LagHistory` (partitions with a known lag)."""
        return {
            TopicPartition(r.topic, r.partition): r.lag
            for r in self.partitions
            if r.lag is not None
        }


def group_view(
    desc: GroupDescription,
    committed: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, tuple[int, int] | None],
) -> GroupView:
    """A consumer group: its members with their assignments, and per partition
    (committed or assigned) the committed offset, the log end and the lag,
    end minus committed (never below 0; None without a commit)."""
    owner: dict[TopicPartition, MemberDescription] = {}
    members = []
    for m in sorted(desc.members, key=lambda m: m.member_id):
        assigned = tuple(sorted(m.assignment))
        for tp in assigned:
            owner[tp] = m
        members.append((m.member_id, m.group_instance_id, m.client_id, m.client_host, assigned))
    rows = []
    for tp in sorted(set(committed) | set(owner)):
        current = committed.get(tp)
        end = offset_of(ends, tp)
        holder = owner.get(tp)
        lag = None if current is None or end is None else max(end - current, 0)
        rows.append(
            GroupPartitionRow(
                tp.topic,
                tp.partition,
                current,
                end,
                lag,
                None if holder is None else holder.member_id,
                None if holder is None else holder.client_id,
            )
        )
    return GroupView(
        desc.group_id,
        desc.state,
        desc.group_type,
        desc.protocol_type,
        desc.protocol,
        tuple(members),
        tuple(rows),
    )


def share_group_view(
    desc: ShareGroupDescription,
    offsets: Mapping[TopicPartition, SharePartitionOffsetInfo | None],
    ends: Mapping[TopicPartition, tuple[int, int] | None],
) -> GroupView:
    """A share group (KIP-932): its members with their subscriptions'
    assignments (several members may share a partition), and per partition with
    share state its start offset (in ``committed``), the log end and the lag:
    the broker's count of records not yet acknowledged (KIP-1226), or end
    minus start offset from a broker that does not count them."""
    holders: dict[TopicPartition, list[ShareMemberDescription]] = {}
    members = []
    for m in sorted(desc.members, key=lambda m: m.member_id):
        assigned = tuple(sorted(m.assignment))
        for tp in assigned:
            holders.setdefault(tp, []).append(m)
        members.append((m.member_id, None, m.client_id, m.client_host, assigned))
    rows = []
    for tp in sorted(set(offsets) | set(holders)):
        info = offsets.get(tp)
        end = offset_of(ends, tp)
        start = None if info is None else info.start_offset
        lag = None if info is None else info.lag
        if lag is None and start is not None and end is not None:
            lag = max(end - start, 0)
        held = holders.get(tp, [])
        rows.append(
            GroupPartitionRow(
                tp.topic,
                tp.partition,
                start,
                end,
                lag,
                ", ".join(m.member_id for m in held) or None,
                ", ".join(sorted({m.client_id for m in held})) or None,
            )
        )
    return GroupView(
        desc.group_id, desc.state, "share", "share", desc.assignor, tuple(members), tuple(rows)
    )


@dataclasses.dataclass(frozen=True, slots=True)
class GroupRow:
    """A row of the groups table: the group, its members now (None: unknown)
    and its last lag sample (None: none yet)."""

    group: GroupListing
    members: int | None
    lag: LagSample | None


def group_rows(
    listings: Iterable[GroupListing], history: LagHistory, members: Mapping[str, int]
) -> list[GroupRow]:
    """The groups table, sorted by id, each with its members and last lag sample."""
    return [
        GroupRow(g, members.get(g.group_id), history.last(g.group_id))
        for g in sorted(listings, key=lambda g: g.group_id)
    ]


# -- resetting a group's offsets and deleting a group ---------------------------------------

#: The states in which Kafka lets a group's offsets be reset or the group be
#: deleted: no member (kafka-consumer-groups: "can only be reset if the group
#: is inactive"; DeleteGroups answers NON_EMPTY_GROUP otherwise).
INACTIVE_STATES = ("Empty", "Dead")
RESET_TARGETS = ("earliest", "latest", "timestamp", "offset")


@dataclasses.dataclass(frozen=True, slots=True)
class ResetForm:
    """A reset of a group's committed offsets, as kafka-consumer-groups
    ``--reset-offsets`` takes it: the partitions (``topic`` None: every
    partition the group has committed; ``partition`` None: all of the topic's),
    the target (``to``, with ``value`` an offset or a time in ms) and whether
    to do it (``execute``) or only show the plan (the tool's dry run)."""

    group_id: str
    topic: str | None
    partition: int | None
    to: Literal["earliest", "latest", "timestamp", "offset"]
    value: int
    execute: bool


def parse_reset_form(group_id: str, form: Mapping[str, str]) -> ResetForm:
    """The reset form: ``topic`` (empty: every committed partition),
    ``partition`` (empty: all), ``to`` (:data:`RESET_TARGETS`), ``offset`` or
    ``timestamp`` as ``to`` needs, and ``execute`` (``1``: do it)."""
    raw_topic = form.get("topic", "").strip()
    topic = topic_name(raw_topic) if raw_topic else None
    partition = int_field(form, "partition", "partition")
    if partition is not None and topic is None:
        raise InputError("partition: name the topic of the partition")
    to = form.get("to", "")
    if to not in RESET_TARGETS:
        raise InputError(f"to must be one of {', '.join(RESET_TARGETS)}, got {to!r}")
    value = offset_or_time(form, to, "reset to") if to in ("offset", "timestamp") else 0
    return ResetForm(group_id, topic, partition, to, value, form.get("execute") == "1")  # type: ignore[arg-type]


def refuse_unless_inactive(group_id: str, state: str, members: int, doing: str) -> None:
    """Kafka's rule for resetting offsets and deleting a group: it must have
    no member. :class:`InputError` naming the state otherwise."""
    if state not in INACTIVE_STATES or members:
        raise InputError(
            f"{doing} only when the group {group_id!r} is inactive (no members), but its "
            f"state is {state} with {members} member{'s' if members != 1 else ''}: stop its "
            "consumers first"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ResetRow:
    topic: str
    partition: int
    current: int | None
    new: int
    note: str


def plan_reset(
    form: ResetForm,
    current: Mapping[TopicPartition, int],
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    by_time: Mapping[TopicPartition, int | None],
) -> list[ResetRow]:
    """The new offset of each partition of ``starts`` (log start), as
    kafka-consumer-groups computes it: ``earliest`` the log start, ``latest``
    the log end; an ``offset`` outside the log is moved to its nearest end; a
    ``timestamp`` is the first offset at or after it (``by_time``), or the log
    end when no message is that recent. Each row says when it was moved."""
    rows = []
    for tp in sorted(starts):
        low, high = starts[tp], ends[tp]
        note = ""
        if form.to == "earliest":
            new = low
        elif form.to == "latest":
            new = high
        elif form.to == "offset":
            new = min(max(form.value, low), high)
            if form.value < low:
                note = f"{form.value} is below the log start: set to {low}"
            elif form.value > high:
                note = f"{form.value} is past the log end: set to {high}"
        else:
            found = by_time.get(tp)
            new = high if found is None else found
            if found is None:
                note = "no message at or after the time: set to the log end"
        rows.append(ResetRow(tp.topic, tp.partition, current.get(tp), new, note))
    return rows
