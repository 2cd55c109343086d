"""ListPartitionReassignments (key 46), version 0, as Kafka's controller answers on one node.

No reassignment is ever in progress (see AlterPartitionReassignments), so the
answer lists no topics, whether the request asks for every partition (null
topics) or names some. Kafka lists only partitions being reassigned and skips
what it does not know, so unknown topics and partitions named in the request
are not errors either: they are simply absent. The top-level error is NONE
with a null message.

Authorization: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from trafka.brokerlite.authorizer import CLUSTER_NAME
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k46_list_partition_reassignments as m

from ._base import HandlerSpec, RequestContext

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


def handle(
    ctx: RequestContext, request: m.ListPartitionReassignmentsRequest
) -> m.ListPartitionReassignmentsResponse:
    if not ctx.allowed(AclOperation.DESCRIBE, AclResourceType.CLUSTER, CLUSTER_NAME):
        return error_response(request, ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return m.ListPartitionReassignmentsResponse(
        error_code=ErrorCode.NONE, error_message=None, topics=[]
    )


def error_response(
    request: m.ListPartitionReassignmentsRequest | None, version: int, code: ErrorCode
) -> m.ListPartitionReassignmentsResponse:
    return m.ListPartitionReassignmentsResponse(
        error_code=code, error_message=code.message, topics=[]
    )


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
