"""ElectLeaders (key 43), versions 0-2, as Kafka's controller answers on one node.

Every partition is led by this node, its only (so its preferred) replica: no
election is ever needed. Named partitions are answered ELECTION_NOT_NEEDED, or
UNKNOWN_TOPIC_OR_PARTITION when they do not exist; with a null list (every
partition) each topic is listed with no partitions, since Kafka leaves out the
partitions that needed no election. An election type other than preferred (0)
or unclean (1) is INVALID_REQUEST.

Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED at the
top (v1+) and for every named partition. Version 0 has no top-level error: an
error answer there names it on every named partition only.
"""

from __future__ import annotations

from trafka.brokerlite.authorizer import CLUSTER_NAME
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k43_elect_leaders as m

from ._base import HandlerSpec, RequestContext

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2

TopicResult = m.ElectLeadersResponse.ReplicaElectionResult
PartitionResult = m.ElectLeadersResponse.PartitionResult


def _refused(
    request: m.ElectLeadersRequest | None, version: int, code: ErrorCode
) -> m.ElectLeadersResponse:
    # The error at the top (v1+) and for every named partition: v0 has only the
    # latter (so a v0 request for every partition learns nothing, as from Kafka).
    return m.ElectLeadersResponse(
        error_code=code if version >= 1 else ErrorCode.NONE,
        replica_election_results=[
            TopicResult(
                topic=t.topic,
                partition_result=[
                    PartitionResult(partition_id=p, error_code=code, error_message=code.message)
                    for p in t.partitions
                ],
            )
            for t in (request.topic_partitions if request is not None else None) or []
        ],
    )


def handle(ctx: RequestContext, request: m.ElectLeadersRequest) -> m.ElectLeadersResponse:
    if not ctx.allowed(AclOperation.ALTER, AclResourceType.CLUSTER, CLUSTER_NAME):
        return _refused(request, ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    election = request.election_type if ctx.version >= 1 else 0
    if election not in (0, 1):
        return error_response(request, ctx.version, ErrorCode.INVALID_REQUEST)
    logs = ctx.broker.logs
    results = []
    if request.topic_partitions is None:
        results = [TopicResult(topic=t.name, partition_result=[]) for t in logs.topics()]
    else:
        for topic in request.topic_partitions:
            info = logs.topic(topic.topic)
            parts = []
            for p in topic.partitions:
                if info is None or not 0 <= p < info.num_partitions:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    message: str | None = f"no such partition as {topic.topic}-{p}"
                else:
                    code, message = ErrorCode.ELECTION_NOT_NEEDED, None
                parts.append(
                    PartitionResult(partition_id=p, error_code=code, error_message=message)
                )
            results.append(TopicResult(topic=topic.topic, partition_result=parts))
    return m.ElectLeadersResponse(error_code=ErrorCode.NONE, replica_election_results=results)


def error_response(
    request: m.ElectLeadersRequest | None, version: int, code: ErrorCode
) -> m.ElectLeadersResponse:
    if version >= 1:
        return m.ElectLeadersResponse(error_code=code, replica_election_results=[])
    return _refused(request, version, code)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
