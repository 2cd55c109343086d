"""Consumer groups, classic and of the consumer protocol (KIP-848): listing,
describing and deleting them, removing members, and their committed offsets.
Requests built and answers read here, without I/O; :class:`~trafka.sdk.admin.Admin`
sends them to every broker (ListGroups) or to the group's coordinator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from trafka.codec import ApiKey, ErrorCode, KafkaError, TrafkaError
from trafka.codec.messages import k13_leave_group as lvg
from trafka.codec.messages import k15_describe_groups as dg
from trafka.codec.messages import k16_list_groups as lgr
from trafka.codec.messages import k42_delete_groups as dgr
from trafka.codec.messages import k47_offset_delete as odel
from trafka.codec.messages import k69_consumer_group_describe as cgd

from ..assignors import decode_assignment
from ..calls import TRANSIENT, again_if_transient, check
from ..consumer_types import TopicPartition
from ..errors import ArgumentTypeError, ArgumentValueError
from ..group_protocol import offset_fetch_request, read_offset_commit, read_offset_fetch
from ._common import fit, partition_outcome

__all__ = [
    "DEFAULT_LEAVE_GROUP_REASON",
    "LEAVE_GROUP_RETRIED",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "consumer_group_describe_request",
    "delete_groups_request",
    "describe_groups_request",
    "group_types",
    "leave_group_request",
    "leaving_members",
    "list_groups_request",
    "not_classic",
    "offset_delete_request",
    "offset_fetch_all_request",
    "read_alter_group_offsets",
    "read_classic_group",
    "read_consumer_group_describe",
    "read_delete_groups",
    "read_group_offsets",
    "read_leave_group",
    "read_list_groups",
    "read_offset_delete",
    "removing_all",
]

#: The reason a member removed by :meth:`Admin.remove_members_from_consumer_group`
#: leaves with when none is given (Java's ``KafkaAdminClient.DEFAULT_LEAVE_GROUP_REASON``).
DEFAULT_LEAVE_GROUP_REASON = "member was removed by an admin"
#: LeaveGroup's top-level answers Java's RemoveMembersFromConsumerGroupHandler
#: waits out (a coordinator loading, moved or not there yet); others are final.
LEAVE_GROUP_RETRIED = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class GroupListing:
    """A group as ListGroups reports it; ``group_type`` is ``classic`` or ``consumer``
    (KIP-848), from brokers answering ListGroups v5 (``classic`` before)."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclasses.dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: frozenset[TopicPartition]


@dataclasses.dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group's state and members. For a consumer group of the new protocol
    (``group_type`` ``consumer``, KIP-848) ``protocol`` is its server assignor and
    the assignments are the members' current ones."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    group_type: str = "classic"


# -- listing, describing, deleting ----------------------------------------------------------


def group_types(types: Iterable[str] | None) -> list[str] | None:
    """The group types to list, normalised (lower case, sorted); None for all."""
    return None if types is None else sorted({t.strip().lower() for t in types})


def list_groups_request(version: int, types: list[str] | None) -> Any:
    """ListGroups at ``version`` (v5+ filters by type)."""
    return fit(ApiKey.LIST_GROUPS, version, lgr.ListGroupsRequest, types_filter=types or [])


def read_list_groups(resp: Any, types: list[str] | None) -> list[GroupListing]:
    """One broker's groups of the ``types`` wanted (filtered here too, for
    brokers before v5, whose groups are all ``classic``).

    Raises:
        Again: a transient error.
        KafkaError: any other error.
    """
    check(resp.error_code, "ListGroups", again=TRANSIENT)
    found = [
        GroupListing(g.group_id, g.protocol_type, g.group_state, g.group_type or "classic")
        for g in resp.groups
    ]
    if types is not None:
        found = [g for g in found if g.group_type.lower() in types]
    return found


def describe_groups_request(version: int, group_id: str) -> Any:
    """DescribeGroups at ``version`` of one group."""
    return fit(ApiKey.DESCRIBE_GROUPS, version, dg.DescribeGroupsRequest, groups=[group_id])


def not_classic(g: Any) -> bool:
    """Whether a DescribeGroups answer for a group says it is no classic group
    (perhaps a consumer group of KIP-848, which ConsumerGroupDescribe describes)."""
    return bool(g.error_code == ErrorCode.GROUP_ID_NOT_FOUND or g.group_state == "Dead")


def read_classic_group(g: Any) -> GroupDescription:
    """A group of a DescribeGroups answer (members' assignments decoded for
    ``consumer`` groups; one that cannot be decoded is empty).

    Raises:
        Again: a transient error.
        KafkaError: any other error.
    """
    check(g.error_code, f"describing group {g.group_id!r}", again=TRANSIENT)
    members = []
    for m in g.members:
        try:
            assigned = (
                frozenset(decode_assignment(m.member_assignment))
                if g.protocol_type == "consumer"
                else frozenset()
            )
        except TrafkaError:
            assigned = frozenset()
        members.append(
            MemberDescription(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, assigned
            )
        )
    return GroupDescription(
        g.group_id, g.group_state, g.protocol_type, g.protocol_data, tuple(members)
    )


def consumer_group_describe_request(group_id: str) -> Any:
    """ConsumerGroupDescribe of one group."""
    return cgd.ConsumerGroupDescribeRequest(group_ids=[group_id])


def read_consumer_group_describe(resp: Any, group_id: str) -> GroupDescription | None:
    """The consumer group of a ConsumerGroupDescribe answer; None when it is not one.

    Raises:
        Again: a transient error.
        KafkaError: any other error.
    """
    for g in resp.groups:
        if g.group_id != group_id or g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            continue
        check(g.error_code, f"describing group {group_id!r}", again=TRANSIENT)
        members = tuple(
            MemberDescription(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                frozenset(
                    TopicPartition(t.topic_name, p)
                    for t in m.assignment.topic_partitions
                    for p in t.partitions
                ),
            )
            for m in g.members
        )
        return GroupDescription(
            group_id, g.group_state, "consumer", g.assignor_name, members, "consumer"
        )
    return None


def delete_groups_request(group_id: str) -> Any:
    """DeleteGroups of one group."""
    return dgr.DeleteGroupsRequest(groups_names=[group_id])


def read_delete_groups(resp: Any, group_id: str) -> None:
    """Nothing when the group was deleted.

    Raises:
        Again: a transient error.
        KafkaError: any other error (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND...).
    """
    for r in resp.results:
        if r.group_id == group_id:
            check(r.error_code, f"deleting group {group_id!r}", again=TRANSIENT)


# -- removing members -----------------------------------------------------------------------


def leaving_members(members: Iterable[str]) -> list[tuple[str, str | None]]:
    """``(member id, group instance id)`` of the static members to remove.

    Raises:
        TypeError: one string for the members.
        ValueError: no members.
    """
    if isinstance(members, str):
        raise ArgumentTypeError("members is an iterable of group instance ids, not one string")
    identities: list[tuple[str, str | None]] = [("", iid) for iid in dict.fromkeys(members)]
    if not identities:
        raise ArgumentValueError("members is empty: give group instance ids, or None for all")
    return identities


def removing_all(desc: GroupDescription) -> list[tuple[str, str | None]]:
    """Every member of a described group, by instance id, or by member id for a
    member without one.

    Raises:
        KafkaError: GROUP_ID_NOT_FOUND for a group that is Dead (none).
    """
    if desc.state == "Dead":
        raise KafkaError(
            ErrorCode.GROUP_ID_NOT_FOUND,
            f"removing the members of group {desc.group_id!r}: there is no such group",
        )
    return [
        ("", m.group_instance_id) if m.group_instance_id is not None else (m.member_id, None)
        for m in desc.members
    ]


def leave_group_request(
    version: int,
    group_id: str,
    identities: Iterable[tuple[str, str | None]],
    reason: str | None,
) -> Any:
    """LeaveGroup at ``version`` for members named by ``(member id, instance id)``,
    with ``reason`` (default :data:`DEFAULT_LEAVE_GROUP_REASON`, cut to 255).

    Raises:
        KafkaError: UNSUPPORTED_VERSION before v3, which names one member only.
    """
    if version < 3:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"removing members from group {group_id!r}: the broker does not serve "
            "LeaveGroup v3 (Kafka 2.4 or later)",
        )
    why = (reason or DEFAULT_LEAVE_GROUP_REASON)[:255]
    req = lvg.LeaveGroupRequest
    return req(
        group_id=group_id,
        members=[
            req.MemberIdentity(member_id=mid, group_instance_id=iid, reason=why)
            for mid, iid in identities
        ],
    )


def read_leave_group(
    resp: Any, group_id: str, identities: Iterable[tuple[str, str | None]]
) -> dict[str, KafkaError | None]:
    """Per member (by instance id, else member id), None when removed, else its error.

    Raises:
        Again: a coordinator loading, moved or not available.
        KafkaError: the group's other error.
    """
    check(
        resp.error_code,
        f"removing members from group {group_id!r}",
        again=LEAVE_GROUP_RETRIED,
    )
    answers = {(m.member_id, m.group_instance_id): m.error_code for m in resp.members}
    out: dict[str, KafkaError | None] = {}
    for mid, iid in identities:
        key = iid if iid is not None else mid
        what = f"removing member {key!r} from group {group_id!r}"
        code = answers.get((mid, iid))
        out[key] = (
            KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{what}: the coordinator did not answer")
            if code is None
            else partition_outcome(code, None, what)
        )
    return out


# -- committed offsets ----------------------------------------------------------------------


def offset_fetch_all_request(version: int, group_id: str) -> Any:
    """OffsetFetch of every partition of the group (topics = null; v2+).

    Raises:
        KafkaError: UNSUPPORTED_VERSION before v2.
    """
    if version < 2:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "listing all offsets needs OffsetFetch v2+")
    body = offset_fetch_request(version, group_id, [])
    if version >= 8:
        group = dataclasses.replace(body.groups[0], topics=None)
        return dataclasses.replace(body, groups=[group])
    return dataclasses.replace(body, topics=None)


def read_group_offsets(version: int, resp: Any, group_id: str) -> dict[TopicPartition, int]:
    """The committed offsets of an OffsetFetch answer (partitions without one left out).

    Raises:
        Again: a transient error.
        KafkaError: any other error.
    """
    with again_if_transient():
        code, got = read_offset_fetch(version, resp)
    check(code, f"fetching offsets of group {group_id!r}", again=TRANSIENT)
    return {tp: off for tp, off in got.items() if off >= 0}


def read_alter_group_offsets(resp: Any, group_id: str) -> None:
    """Nothing when every offset of an OffsetCommit answer was committed.

    Raises:
        Again: a partition with a transient error.
        KafkaError: a partition's other error.
    """
    for tp, code in read_offset_commit(resp).items():
        check(
            code,
            f"committing {tp.topic}-{tp.partition} for group {group_id!r}",
            again=TRANSIENT,
        )


def offset_delete_request(group_id: str, partitions: Mapping[str, list[int]]) -> Any:
    """OffsetDelete of the group's offsets of the partitions by topic."""
    req = odel.OffsetDeleteRequest
    return req(
        group_id=group_id,
        topics=[
            req.OffsetDeleteRequestTopic(
                name=t,
                partitions=[req.OffsetDeleteRequestPartition(partition_index=p) for p in ps],
            )
            for t, ps in partitions.items()
        ],
    )


def read_offset_delete(resp: Any, group_id: str) -> None:
    """Nothing when every offset of an OffsetDelete answer was deleted.

    Raises:
        Again: a transient error.
        KafkaError: the group's error, else the first partition's.
    """
    check(resp.error_code, f"deleting offsets of group {group_id!r}", again=TRANSIENT)
    for t in resp.topics:
        for p in t.partitions:
            check(
                p.error_code,
                f"deleting the offset of {t.name}-{p.partition_index} for group {group_id!r}",
                again=TRANSIENT,
            )
