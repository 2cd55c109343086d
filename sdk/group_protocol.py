"""The classic consumer group protocol's pure parts: error handling and messages.

Rules:

* :func:`classify` is the one place that decides how a coordinator error code
  is handled (retry, find the coordinator again, rejoin, start afresh with the
  partitions lost, or give up); :mod:`.membership` and the drivers act on it.
* Request builders take the negotiated version and leave out what that
  version lacks; readers take the version and return plain values, so the
  state machine never looks at version differences.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

from trafka.codec import ApiKey, ErrorCode, KafkaError, api
from trafka.codec.messages import k08_offset_commit as oc
from trafka.codec.messages import k09_offset_fetch as of
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k11_join_group as jg
from trafka.codec.messages import k12_heartbeat as hb
from trafka.codec.messages import k13_leave_group as lg
from trafka.codec.messages import k14_sync_group as sg

from .consumer_types import TopicPartition

__all__ = [
    "Action",
    "CommitFailedError",
    "classify",
    "find_coordinator_request",
    "heartbeat_request",
    "join_group_request",
    "leave_group_request",
    "offset_commit_request",
    "offset_fetch_request",
    "read_find_coordinator",
    "read_offset_commit",
    "read_offset_fetch",
    "sync_group_request",
]


class CommitFailedError(KafkaError):
    """The commit cannot succeed: the group rebalanced and the partitions may have moved."""


class Action(enum.Enum):
    """What to do after an error code from the coordinator."""

    OK = "ok"
    RETRY = "retry"  # transient: back off and retry
    REDISCOVER = "rediscover"  # find the coordinator again, then retry
    REJOIN = "rejoin"  # the group is rebalancing
    RESET = "reset"  # our membership is gone: partitions lost, join afresh
    FATAL = "fatal"


_ACTIONS = {
    ErrorCode.NONE: Action.OK,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: Action.RETRY,
    ErrorCode.REQUEST_TIMED_OUT: Action.RETRY,
    ErrorCode.NOT_COORDINATOR: Action.REDISCOVER,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: Action.REDISCOVER,
    ErrorCode.REBALANCE_IN_PROGRESS: Action.REJOIN,
    ErrorCode.MEMBER_ID_REQUIRED: Action.REJOIN,
    ErrorCode.UNKNOWN_MEMBER_ID: Action.RESET,
    ErrorCode.ILLEGAL_GENERATION: Action.RESET,
    ErrorCode.FENCED_INSTANCE_ID: Action.FATAL,
    ErrorCode.GROUP_AUTHORIZATION_FAILED: Action.FATAL,
    ErrorCode.INVALID_SESSION_TIMEOUT: Action.FATAL,
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: Action.FATAL,
    ErrorCode.GROUP_MAX_SIZE_REACHED: Action.FATAL,
    ErrorCode.UNSUPPORTED_VERSION: Action.FATAL,
}


def classify(code: int) -> Action:
    """How the group logic reacts to an error code from a group API."""
    try:
        ec = ErrorCode(code)
    except ValueError:
        return Action.FATAL
    action = _ACTIONS.get(ec)
    if action is not None:
        return action
    return Action.RETRY if ec.retriable else Action.FATAL


def _fit(api_key: int, version: int, cls: type, **fields: Any) -> Any:
    """Build a request, leaving out the fields ``version`` does not have."""
    schema = api(api_key).module.REQUEST_SCHEMAS[version]
    absent = {name for name, _ in schema.absent}
    return cls(**{k: v for k, v in fields.items() if k not in absent})


# -- request builders and response readers -------------------------------------------------


def find_coordinator_request(version: int, key: str, key_type: int = 0) -> Any:
    """FindCoordinator for a group (``key_type`` 0) or a transactional id (1)."""
    if version >= 4:
        return fc.FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
    return _fit(
        ApiKey.FIND_COORDINATOR, version, fc.FindCoordinatorRequest, key=key, key_type=key_type
    )


def read_find_coordinator(version: int, response: Any) -> tuple[int, int, str, int]:
    """``(error_code, node_id, host, port)``."""
    if version >= 4:
        if not response.coordinators:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", 0
        c = response.coordinators[0]
        return c.error_code, c.node_id, c.host, c.port
    return response.error_code, response.node_id, response.host, response.port


def offset_commit_request(
    version: int,
    group_id: str,
    offsets: Mapping[TopicPartition, int],
    *,
    generation: int = -1,
    member_id: str = "",
    instance_id: str | None = None,
) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for tp, off in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            oc.OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=tp.partition,
                committed_offset=off,
                # An OffsetAndMetadata carries its metadata; a plain int none.
                committed_metadata=getattr(off, "metadata", ""),
            )
        )
    return _fit(
        ApiKey.OFFSET_COMMIT,
        version,
        oc.OffsetCommitRequest,
        group_id=group_id,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance_id if version >= 7 else None,
        topics=[
            oc.OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=p)
            for t, p in by_topic.items()
        ],
    )


def read_offset_commit(response: Any) -> dict[TopicPartition, int]:
    """Error code per partition."""
    return {
        TopicPartition(t.name, p.partition_index): p.error_code
        for t in response.topics
        for p in t.partitions
    }


def offset_fetch_request(
    version: int, group_id: str, tps: Iterable[TopicPartition], *, require_stable: bool = False
) -> Any:
    """OffsetFetch for one group. ``require_stable`` (v7+, what a consumer sends,
    as Java's does; the admin does not) makes the coordinator answer
    UNSTABLE_OFFSET_COMMIT (retriable) while a transaction holds an offset, rather
    than the last stable one."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(tps):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if version >= 8:
        return of.OffsetFetchRequest(
            groups=[
                of.OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=group_id,
                    topics=[
                        of.OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=p)
                        for t, p in by_topic.items()
                    ],
                )
            ],
            require_stable=require_stable,
        )
    return _fit(
        ApiKey.OFFSET_FETCH,
        version,
        of.OffsetFetchRequest,
        require_stable=require_stable,  # dropped by _fit below v7
        group_id=group_id,
        topics=[
            of.OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=p)
            for t, p in by_topic.items()
        ],
    )


def read_offset_fetch(version: int, response: Any) -> tuple[int, dict[TopicPartition, int]]:
    """``(group error code, {tp: committed offset or -1})``; partition errors raise."""
    if version >= 8:
        if not response.groups:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, {}
        group = response.groups[0]
        code, topics = group.error_code, group.topics
    else:
        code, topics = response.error_code, response.topics
    out: dict[TopicPartition, int] = {}
    for t in topics:
        for p in t.partitions:
            if p.error_code and p.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise KafkaError(p.error_code, f"OffsetFetch {t.name}-{p.partition_index}")
            out[TopicPartition(t.name, p.partition_index)] = p.committed_offset
    return code, out


def join_group_request(
    version: int,
    group_id: str,
    member_id: str,
    instance_id: str | None,
    *,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    protocols: list[tuple[str, bytes]],
) -> Any:
    return _fit(
        ApiKey.JOIN_GROUP,
        version,
        jg.JoinGroupRequest,
        group_id=group_id,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=[
            jg.JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols
        ],
        reason="rebalance" if version >= 8 else None,
    )


def sync_group_request(
    version: int,
    group_id: str,
    generation: int,
    member_id: str,
    instance_id: str | None,
    protocol: str | None,
    assignments: Mapping[str, bytes],
) -> Any:
    return _fit(
        ApiKey.SYNC_GROUP,
        version,
        sg.SyncGroupRequest,
        group_id=group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer" if version >= 5 else None,
        protocol_name=protocol if version >= 5 else None,
        assignments=[
            sg.SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
            for m, a in assignments.items()
        ],
    )


def heartbeat_request(
    version: int, group_id: str, generation: int, member_id: str, instance_id: str | None
) -> Any:
    return _fit(
        ApiKey.HEARTBEAT,
        version,
        hb.HeartbeatRequest,
        group_id=group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
    )


def leave_group_request(
    version: int, group_id: str, member_id: str, reason: str = "closing"
) -> Any:
    if version >= 3:
        return lg.LeaveGroupRequest(
            group_id=group_id,
            members=[
                lg.LeaveGroupRequest.MemberIdentity(
                    member_id=member_id, reason=reason if version >= 5 else None
                )
            ],
        )
    return lg.LeaveGroupRequest(group_id=group_id, member_id=member_id)
