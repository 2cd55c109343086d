"""Share groups (KIP-932): ShareGroupDescribe and the share-group offsets
(DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets).
Requests built and answers read here, without I/O; :class:`~trafka.sdk.admin.Admin`
sends them to the group's coordinator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from trafka.codec import ErrorCode, KafkaError, api
from trafka.codec.messages import k77_share_group_describe as sgd
from trafka.codec.messages import k90_describe_share_group_offsets as dsgo
from trafka.codec.messages import k91_alter_share_group_offsets as asgo
from trafka.codec.messages import k92_delete_share_group_offsets as dlsgo

from ..calls import TRANSIENT, Again, check
from ..consumer_types import TopicPartition
from ._common import answered, by_topic

__all__ = [
    "ShareGroupDescription",
    "ShareMemberDescription",
    "SharePartitionOffsetInfo",
    "alter_share_group_offsets_request",
    "delete_share_group_offsets_request",
    "describe_share_group_offsets_request",
    "read_alter_share_group_offsets",
    "read_delete_share_group_offsets",
    "read_describe_share_group_offsets",
    "read_share_group_describe",
    "share_group_describe_request",
    "share_group_describe_unsupported",
    "share_offsets_unsupported",
]


@dataclasses.dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    """A member of a share group as ShareGroupDescribe reports it.

    ``assignment`` holds the partitions the coordinator assigns it (other
    members may be assigned the same ones).
    """

    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    member_epoch: int
    subscribed_topics: tuple[str, ...]
    assignment: frozenset[TopicPartition]


@dataclasses.dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    """A share group (KIP-932): its state (``Empty``, ``Stable``, ``Dead``...),
    epochs, the coordinator's assignor and the members."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMemberDescription, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class SharePartitionOffsetInfo:
    """A share group's position in one partition (DescribeShareGroupOffsets, KIP-932).

    Attributes:
        start_offset: the share-partition start offset: every record below it is
            done (acknowledged or archived); records from it on may still be
            delivered.
        leader_epoch: the leader epoch the broker reports with it, None when it
            reports none (-1).
        lag: the records from the start offset up to the high watermark not yet
            acknowledged or archived (KIP-1226); None when the broker does not
            report it (DescribeShareGroupOffsets v0, before Kafka 4.2) or could
            not compute it (-1).
    """

    start_offset: int
    leader_epoch: int | None
    lag: int | None


# -- describing -----------------------------------------------------------------------------


def share_group_describe_unsupported(group_id: str) -> KafkaError:
    """The error for a coordinator without ShareGroupDescribe."""
    return KafkaError(
        ErrorCode.UNSUPPORTED_VERSION,
        f"describing share group {group_id!r}: the broker does not serve "
        "ShareGroupDescribe v1 (share groups need Kafka 4.1 or later)",
    )


def share_group_describe_request(group_id: str) -> Any:
    """ShareGroupDescribe of one group."""
    return sgd.ShareGroupDescribeRequest(group_ids=[group_id])


def read_share_group_describe(resp: Any, group_id: str) -> ShareGroupDescription | None:
    """The group of a ShareGroupDescribe answer; None when it is not answered for.

    Raises:
        Again: a transient error.
        KafkaError: any other error (GROUP_ID_NOT_FOUND...).
    """
    found = None
    for g in resp.groups:
        if g.group_id != group_id:
            continue
        check(
            g.error_code, f"describing share group {group_id!r}", g.error_message, again=TRANSIENT
        )
        members = tuple(
            ShareMemberDescription(
                m.member_id,
                m.client_id,
                m.client_host,
                m.rack_id,
                m.member_epoch,
                tuple(m.subscribed_topic_names),
                frozenset(
                    TopicPartition(t.topic_name, p)
                    for t in m.assignment.topic_partitions
                    for p in t.partitions
                ),
            )
            for m in g.members
        )
        found = ShareGroupDescription(
            g.group_id, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name, members
        )
    return found


# -- offsets --------------------------------------------------------------------------------


def share_offsets_unsupported(api_key: int, what: str) -> KafkaError:
    """The error for a coordinator without the share-group offsets API ``api_key``."""
    return KafkaError(
        ErrorCode.UNSUPPORTED_VERSION,
        f"{what}: the broker does not serve {api(api_key).name} "
        "(share-group offsets need Kafka 4.1 or later)",
    )


def describe_share_group_offsets_request(
    group_id: str, partitions: Iterable[TopicPartition] | None
) -> Any:
    """DescribeShareGroupOffsets of the group's ``partitions`` (None: all it has state for)."""
    req = dsgo.DescribeShareGroupOffsetsRequest
    topics = (
        None
        if partitions is None
        else [
            req.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
            for t, ps in by_topic(partitions).items()
        ]
    )
    return req(groups=[req.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=topics)])


def read_describe_share_group_offsets(
    version: int,
    resp: Any,
    group_id: str,
    partitions: list[TopicPartition] | None,
    what: str,
) -> dict[TopicPartition, SharePartitionOffsetInfo | None]:
    """Per partition (those of ``partitions`` in order, else all sorted) its start
    offset and lag (v1+), or None where the group has no state.

    Raises:
        Again: a transient error of the group or of a partition.
        KafkaError: another error of the group or of a partition; UNKNOWN_SERVER_ERROR
            when the group or one of ``partitions`` is not answered for.
    """
    with_lag = version >= 1
    out: dict[TopicPartition, SharePartitionOffsetInfo | None] = {}
    found = False
    for g in resp.groups:
        if g.group_id != group_id:
            continue
        found = True
        check(g.error_code, what, g.error_message, again=TRANSIENT)
        for t in g.topics:
            for p in t.partitions:
                tp = TopicPartition(t.topic_name, p.partition_index)
                check(
                    p.error_code,
                    f"{what}: {tp.topic}-{tp.partition}",
                    p.error_message,
                    again=TRANSIENT,
                )
                out[tp] = (
                    None
                    if p.start_offset < 0
                    else SharePartitionOffsetInfo(
                        p.start_offset,
                        p.leader_epoch if p.leader_epoch >= 0 else None,
                        p.lag if with_lag and p.lag >= 0 else None,
                    )
                )
    if not found:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{what}: no answer")
    if partitions is None:
        return dict(sorted(out.items()))
    return answered(partitions, out, f"{what}: partition")


def alter_share_group_offsets_request(group_id: str, offsets: Mapping[TopicPartition, int]) -> Any:
    """AlterShareGroupOffsets setting each partition's start offset."""
    req = asgo.AlterShareGroupOffsetsRequest
    return req(
        group_id=group_id,
        topics=[
            req.AlterShareGroupOffsetsRequestTopic(
                topic_name=t,
                partitions=[
                    req.AlterShareGroupOffsetsRequestPartition(
                        partition_index=p, start_offset=offsets[TopicPartition(t, p)]
                    )
                    for p in ps
                ],
            )
            for t, ps in by_topic(offsets).items()
        ],
    )


def read_alter_share_group_offsets(
    resp: Any, group_id: str, partitions: Iterable[TopicPartition], what: str
) -> None:
    """Nothing when every one of ``partitions`` was set.

    Raises:
        Again: a transient error of the group or of a partition.
        KafkaError: the group's other error, else the first partition's, in the
            order of ``partitions`` (UNKNOWN_SERVER_ERROR for one not answered).
    """
    check(resp.error_code, what, resp.error_message, again=TRANSIENT)
    got = {
        TopicPartition(t.topic_name, p.partition_index): (p.error_code, p.error_message)
        for t in resp.responses
        for p in t.partitions
    }
    for tp in partitions:
        code, message = got.get(tp, (ErrorCode.UNKNOWN_SERVER_ERROR, "no answer"))
        check(
            code,
            f"setting the start offset of {tp.topic}-{tp.partition} for share group {group_id!r}",
            message,
            again=TRANSIENT,
        )


def delete_share_group_offsets_request(group_id: str, topics: Iterable[str]) -> Any:
    """DeleteShareGroupOffsets of whole topics."""
    req = dlsgo.DeleteShareGroupOffsetsRequest
    return req(
        group_id=group_id,
        topics=[req.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics],
    )


def read_delete_share_group_offsets(resp: Any, pending: list[str], what: str) -> None:
    """Record a DeleteShareGroupOffsets answer: topics deleted leave ``pending``
    (a second delete would find no state and fail); a topic with a transient
    error stays there and asks for another attempt.

    Raises:
        Again: a transient error of the group or of a topic.
        KafkaError: the group's other error, else the first topic's, in the
            order of ``pending`` (UNKNOWN_SERVER_ERROR for one not answered).
    """
    check(resp.error_code, what, resp.error_message, again=TRANSIENT)
    got = {t.topic_name: (t.error_code, t.error_message) for t in resp.responses}
    retry: Again | None = None
    for name in list(pending):
        code, message = got.get(name, (ErrorCode.UNKNOWN_SERVER_ERROR, "no answer"))
        try:
            check(code, f"{what}: topic {name!r}", message, again=TRANSIENT)
        except Again as again:
            retry = retry or again
            continue
        pending.remove(name)
    if retry is not None:
        raise retry
