"""AlterPartitionReassignments (key 45), versions 0-1, as Kafka's controller answers.

In cluster mode (KIP-455, as Kafka's ZooKeeper-era controller): each partition
is checked (it exists; the replicas are registered brokers, none twice, not
empty), and the moves are written to the topics' assignments in ZooKeeper
(target replicas first, then those leaving, with ``adding_replicas`` and
``removing_replicas``). The answer comes once they are written; the controller
completes each move when all its target replicas are in sync (see
:mod:`..cluster.controller`). Null replicas cancel a move under way, restoring the
original replicas (NO_REASSIGNMENT_IN_PROGRESS when none is).

On one node:

Every partition's replicas are ``[node_id]`` and this node is the only broker,
so the only valid target is exactly that: a success with nothing to do (Kafka
writes no record when the target equals the current replicas). Each partition
is checked in Kafka's order, and answered with a code and a message:

1. the topic, then the partition, must exist: UNKNOWN_TOPIC_OR_PARTITION;
2. null replicas cancel a reassignment; none is ever in progress, so that is
   NO_REASSIGNMENT_IN_PROGRESS (no message, as Kafka 4.4);
3. a replica list is INVALID_REPLICA_ASSIGNMENT when it is empty, or, walking
   its broker ids in ascending order, at the first id that is not a
   registered broker (anything but this node) or that repeats the previous one.

Topics and partitions are answered in the request's order, duplicates
included. A request with no topics gets Kafka's empty answer, whose top-level
error message is ``""`` rather than null. ``timeout_ms`` plays no part: the
answer is immediate.

v1 (KIP-860) adds ``allow_replication_factor_change`` (default true), echoed
in the answer: when false, a move whose target has another number of
replicas than the partition has now is INVALID_REPLICATION_FACTOR, checked
after the replica list itself (on one node no valid target changes it; in a
cluster the count is that of the partition's current replicas).

Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED at the
top and for every named partition.
"""

from __future__ import annotations

from trafka.brokerlite.cluster.view import ZkTask
from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k45_alter_partition_reassignments as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import park_on_tasks, task_outcome

API_KEY = ApiKey.ALTER_PARTITION_REASSIGNMENTS
MIN_VERSION = 0
MAX_VERSION = 1

TopicResponse = m.AlterPartitionReassignmentsResponse.ReassignableTopicResponse
PartitionResponse = m.AlterPartitionReassignmentsResponse.ReassignablePartitionResponse


def _check_replicas(replicas: list[int], node: int, brokers: set[int] | None = None) -> str | None:
    """Why ``replicas`` is not a valid assignment on this cluster, or None."""
    if not replicas:
        return "the replica list is empty"
    previous: int | None = None
    for broker in sorted(replicas):
        if brokers is not None and broker not in brokers:
            return f"broker {broker} is not registered (registered: {sorted(brokers)})"
        if brokers is None and broker != node:
            return f"broker {broker} is not registered (this cluster's only broker is {node})"
        if broker == previous:
            return f"broker {broker} is named more than once"
        previous = broker
    return None


def _one(
    ctx: RequestContext, topic: str, partition: int, replicas: list[int] | None
) -> tuple[ErrorCode, str | None]:
    info = ctx.logs.topic(topic)
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic named {topic!r}"
    if not 0 <= partition < info.num_partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {topic}-{partition}"
    if replicas is None:
        return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None
    problem = _check_replicas(replicas, ctx.node_id)
    if problem is not None:
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"cannot reassign {topic}-{partition}: {problem}",
        )
    return ErrorCode.NONE, None


def handle(
    ctx: RequestContext, request: m.AlterPartitionReassignmentsRequest
) -> m.AlterPartitionReassignmentsResponse | Parked:
    if not ctx.allowed(AclOperation.ALTER, AclResourceType.CLUSTER, CLUSTER_NAME):
        return error_response(request, ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    allow = request.allow_replication_factor_change
    if not request.topics:
        return m.AlterPartitionReassignmentsResponse(
            allow_replication_factor_change=allow, error_code=ErrorCode.NONE, error_message=""
        )
    if ctx.cluster is not None:
        return _cluster_reassign(ctx, request)
    responses = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            code, message = _one(ctx, topic.name, p.partition_index, p.replicas)
            parts.append(
                PartitionResponse(
                    partition_index=p.partition_index, error_code=code, error_message=message
                )
            )
        responses.append(TopicResponse(name=topic.name, partitions=parts))
    return m.AlterPartitionReassignmentsResponse(
        allow_replication_factor_change=allow,
        error_code=ErrorCode.NONE,
        error_message=None,
        responses=responses,
    )


def _cluster_reassign(
    ctx: RequestContext, request: m.AlterPartitionReassignmentsRequest
) -> m.AlterPartitionReassignmentsResponse | Parked:
    """Cluster mode: checked here against the cluster's brokers, then written by the
    driver (the controller carries the moves out); answered once they have started."""
    cluster = ctx.cluster
    assert cluster is not None
    brokers = set(cluster.image.brokers)
    checked: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
    moves: dict[tuple[str, int], list[int] | None] = {}
    for topic in request.topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            if not cluster.replicas_of(*key):
                checked[key] = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"no partition {key[0]}-{key[1]}",
                )
                continue
            if p.replicas is not None:
                problem = _check_replicas(p.replicas, ctx.node_id, brokers)
                if problem is not None:
                    checked[key] = (
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"cannot reassign {key[0]}-{key[1]}: {problem}",
                    )
                    continue
                current = len(cluster.replicas_of(*key))
                if not request.allow_replication_factor_change and len(p.replicas) != current:
                    checked[key] = (
                        ErrorCode.INVALID_REPLICATION_FACTOR,
                        f"cannot reassign {key[0]}-{key[1]}: the replication factor would "
                        f"change from {current} to {len(p.replicas)}, which the request "
                        "does not allow",
                    )
                    continue
            moves[key] = None if p.replicas is None else list(p.replicas)
    outcomes: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}

    def answer() -> m.AlterPartitionReassignmentsResponse:
        responses = []
        for topic in request.topics:
            parts = []
            for p in topic.partitions:
                key = (topic.name, p.partition_index)
                code, message = checked.get(key) or outcomes.get(key) or task_outcome(task)
                parts.append(
                    PartitionResponse(
                        partition_index=p.partition_index, error_code=code, error_message=message
                    )
                )
            responses.append(TopicResponse(name=topic.name, partitions=parts))
        return m.AlterPartitionReassignmentsResponse(
            allow_replication_factor_change=request.allow_replication_factor_change,
            error_code=ErrorCode.NONE,
            error_message=None,
            responses=responses,
        )

    task = ZkTask(
        "reassign", {"moves": moves, "outcomes": outcomes, "timeout_ms": request.timeout_ms}
    )
    if not moves:
        task.done = True
        return answer()
    return park_on_tasks(ctx, [task], request.timeout_ms, answer)


def error_response(
    request: m.AlterPartitionReassignmentsRequest | None, version: int, code: ErrorCode
) -> m.AlterPartitionReassignmentsResponse:
    message = code.message
    responses = []
    if request is not None:
        responses = [
            TopicResponse(
                name=t.name,
                partitions=[
                    PartitionResponse(
                        partition_index=p.partition_index, error_code=code, error_message=message
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    return m.AlterPartitionReassignmentsResponse(
        allow_replication_factor_change=True
        if request is None
        else request.allow_replication_factor_change,
        error_code=code,
        error_message=message,
        responses=responses,
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="logs cluster authorizer purgatory",
)
