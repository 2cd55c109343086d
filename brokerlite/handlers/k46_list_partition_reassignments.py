"""ListPartitionReassignments (key 46), version 0, as Kafka's controller answers.

In cluster mode: every partition being moved (or those of the named ones), with
its full replicas, the replicas being added and those being removed, as the
cluster's assignments in ZooKeeper hold them.

On one node:

No reassignment is ever in progress (see AlterPartitionReassignments), so the
answer lists no topics, whether the request asks for every partition (null
topics) or names some. Kafka lists only partitions being reassigned and skips
what it does not know, so unknown topics and partitions named in the request
are not errors either: they are simply absent. The top-level error is NONE
with a null message.

Authorization: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k46_list_partition_reassignments as m

from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.LIST_PARTITION_REASSIGNMENTS
MIN_VERSION = 0
MAX_VERSION = 0


def handle(
    ctx: RequestContext, request: m.ListPartitionReassignmentsRequest
) -> m.ListPartitionReassignmentsResponse:
    if not ctx.allowed(AclOperation.DESCRIBE, AclResourceType.CLUSTER, CLUSTER_NAME):
        return error_response(request, ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    cluster = ctx.cluster
    topics = []
    if cluster is not None:
        wanted: dict[str, set[int]] | None = None
        if request.topics is not None:
            wanted = {}
            for t in request.topics:
                wanted.setdefault(t.name, set()).update(t.partition_indexes)
        for name, assignment in sorted(cluster.image.topics.items()):
            moving = sorted(set(assignment.adding) | set(assignment.removing))
            if wanted is not None:
                moving = [p for p in moving if p in wanted.get(name, ())]
            if moving:
                topics.append(
                    Topic(
                        name=name,
                        partitions=[
                            Partition(
                                partition_index=p,
                                replicas=list(assignment.replicas.get(p, ())),
                                adding_replicas=list(assignment.adding.get(p, ())),
                                removing_replicas=list(assignment.removing.get(p, ())),
                            )
                            for p in moving
                        ],
                    )
                )
    return m.ListPartitionReassignmentsResponse(
        error_code=ErrorCode.NONE, error_message=None, topics=topics
    )


Topic = m.ListPartitionReassignmentsResponse.OngoingTopicReassignment
Partition = m.ListPartitionReassignmentsResponse.OngoingPartitionReassignment


def error_response(
    request: m.ListPartitionReassignmentsRequest | None, version: int, code: ErrorCode
) -> m.ListPartitionReassignmentsResponse:
    return m.ListPartitionReassignmentsResponse(
        error_code=code, error_message=code.message, topics=[]
    )


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="cluster authorizer"
)
