"""The proxy's authorization of consumer groups and producer ids (see
:mod:`.authz_apis`' rules): what Kafka checks and answers for each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k11_join_group as join_m
from trafka.codec.messages import k12_heartbeat as heartbeat_m
from trafka.codec.messages import k13_leave_group as leave_m
from trafka.codec.messages import k14_sync_group as sync_m
from trafka.codec.messages import k15_describe_groups as describe_m
from trafka.codec.messages import k22_init_producer_id as init_pid_m
from trafka.codec.messages import k25_add_offsets_to_txn as add_offsets_m
from trafka.codec.messages import k26_end_txn as end_txn_m
from trafka.codec.messages import k42_delete_groups as delete_groups_m
from trafka.codec.messages import k69_consumer_group_describe as cg_describe_m

from .authz_parts import OMITTED, described_groups
from .filters import Respond

__all__ = ["GROUP_HANDLERS"]

GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def join_group(j: Any, body: Any, version: int) -> Any:
    if j.ok("READ", "group", body.group_id):
        return body
    return Respond(
        join_m.JoinGroupResponse(
            error_code=GROUP_DENIED,
            generation_id=-1,
            protocol_name=None if version >= 7 else "",
            leader="",
            member_id="",
            members=[],
        )
    )


def sync_group(j: Any, body: Any, version: int) -> Any:
    if j.ok("READ", "group", body.group_id):
        return body
    return Respond(
        sync_m.SyncGroupResponse(
            error_code=GROUP_DENIED, protocol_type=None, protocol_name=None, assignment=b""
        )
    )


def heartbeat(j: Any, body: Any, version: int) -> Any:
    if j.ok("READ", "group", body.group_id):
        return body
    return Respond(heartbeat_m.HeartbeatResponse(error_code=GROUP_DENIED))


def leave_group(j: Any, body: Any, version: int) -> Any:
    if j.ok("READ", "group", body.group_id):
        return body
    return Respond(leave_m.LeaveGroupResponse(error_code=GROUP_DENIED, members=[]))


def describe_groups(j: Any, body: Any, version: int) -> Any:
    m = describe_m.DescribeGroupsResponse
    keep = [g for g in body.groups if j.ok("DESCRIBE", "group", g)]
    errors = [
        m.DescribedGroup(
            error_code=GROUP_DENIED,
            error_message=None,
            group_id=g,
            group_state="",
            protocol_type="",
            protocol_data="",
            members=[],
            authorized_operations=OMITTED,
        )
        for g in body.groups
        if g not in keep
    ]
    include = body.include_authorized_operations

    def merge(r: Any) -> Any:
        groups = [
            replace(
                g, authorized_operations=g.authorized_operations & j.operations("group", g.group_id)
            )
            if include and g.authorized_operations != OMITTED
            else g
            for g in r.groups
        ]
        return replace(r, groups=[*groups, *errors])

    if not keep:
        return Respond(m(groups=errors))
    j.later(merge)
    return replace(body, groups=keep) if errors else body


def consumer_group_describe(j: Any, body: Any, version: int) -> Any:
    return described_groups(j, body, cg_describe_m.ConsumerGroupDescribeResponse)


def list_groups(j: Any, body: Any, version: int) -> Any:
    if j.allows("DESCRIBE", "cluster", "kafka-cluster"):
        return body
    j.later(
        lambda r: replace(r, groups=[g for g in r.groups if j.ok("DESCRIBE", "group", g.group_id)])
    )
    return body


def delete_groups(j: Any, body: Any, version: int) -> Any:
    m = delete_groups_m.DeleteGroupsResponse
    keep = [g for g in body.groups_names if j.ok("DELETE", "group", g)]
    errors = [
        m.DeletableGroupResult(group_id=g, error_code=GROUP_DENIED)
        for g in body.groups_names
        if g not in keep
    ]
    if not errors:
        return body
    if not keep:
        return Respond(m(results=errors))
    j.later(lambda r: replace(r, results=[*r.results, *errors]))
    return replace(body, groups_names=keep)


def init_producer_id(j: Any, body: Any, version: int) -> Any:
    txn = body.transactional_id
    if txn is not None:
        if j.ok("WRITE", "transactional_id", txn):
            return body
        code = TXN_DENIED
    else:
        # KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
        cluster = "kafka-cluster"
        allowed = j.allows("IDEMPOTENT_WRITE", "cluster", cluster) or j.on_any("WRITE", "topic")
        j.record(allowed, "IDEMPOTENT_WRITE", "cluster", cluster)
        if allowed:
            return body
        code = CLUSTER_DENIED
    return Respond(
        init_pid_m.InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)
    )


def add_offsets_to_txn(j: Any, body: Any, version: int) -> Any:
    if not j.ok("WRITE", "transactional_id", body.transactional_id):
        code = TXN_DENIED
    elif not j.ok("READ", "group", body.group_id):
        code = GROUP_DENIED
    else:
        return body
    return Respond(add_offsets_m.AddOffsetsToTxnResponse(error_code=code))


def end_txn(j: Any, body: Any, version: int) -> Any:
    if j.ok("WRITE", "transactional_id", body.transactional_id):
        return body
    return Respond(
        end_txn_m.EndTxnResponse(error_code=TXN_DENIED, producer_id=-1, producer_epoch=-1)
    )


GROUP_HANDLERS: dict[int, Callable[[Any, Any, int], Any]] = {
    ApiKey.JOIN_GROUP: join_group,
    ApiKey.SYNC_GROUP: sync_group,
    ApiKey.HEARTBEAT: heartbeat,
    ApiKey.LEAVE_GROUP: leave_group,
    ApiKey.DESCRIBE_GROUPS: describe_groups,
    ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_group_describe,
    ApiKey.LIST_GROUPS: list_groups,
    ApiKey.DELETE_GROUPS: delete_groups,
    ApiKey.INIT_PRODUCER_ID: init_producer_id,
    ApiKey.ADD_OFFSETS_TO_TXN: add_offsets_to_txn,
    ApiKey.END_TXN: end_txn,
}
