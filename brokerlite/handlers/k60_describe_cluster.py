"""DescribeCluster (key 60), versions 0-2: cluster id, controller and brokers.

This node is the only broker and the controller; in cluster mode, the live
brokers and the controller as ZooKeeper last had them. No broker is ever fenced
(v2, KIP-1073): fencing is a KRaft controller's state for a registered broker
that stopped heartbeating; here, as in Kafka's ZooKeeper mode, a broker that
lost its session is gone from the list instead. So ``include_fenced_brokers``
adds nobody and every broker listed is ``is_fenced`` false. Asking for controller
endpoints (v1 ``endpoint_type`` 2) gets UNSUPPORTED_ENDPOINT_TYPE, as a Kafka
broker answers. Authorization: none is needed; the cluster authorized
operations, when asked for, are what the principal may do on the cluster, or 0
without DESCRIBE on it (everything, without an authorizer), as Kafka reports.
"""

from __future__ import annotations

from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k60_describe_cluster as m

from ._base import HandlerSpec, RequestContext
from ._util import NO_AUTHORIZED_OPERATIONS

API_KEY = ApiKey.DESCRIBE_CLUSTER
MIN_VERSION = 0
MAX_VERSION = 2

BROKERS = 1


def handle(ctx: RequestContext, request: m.DescribeClusterRequest) -> m.DescribeClusterResponse:
    if request.endpoint_type != BROKERS:
        return m.DescribeClusterResponse(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message=f"endpoint type {request.endpoint_type} is not served here",
            endpoint_type=request.endpoint_type,
            cluster_id=ctx.cluster_id,
        )
    cluster_ops = NO_AUTHORIZED_OPERATIONS
    if request.include_cluster_authorized_operations:
        cluster_ops = (
            ctx.authorized_operations(AclResourceType.CLUSTER, CLUSTER_NAME)
            if ctx.allowed(AclOperation.DESCRIBE, AclResourceType.CLUSTER, CLUSTER_NAME)
            else 0
        )
    host, port = ctx.advertised
    controller = ctx.node_id
    brokers = [
        m.DescribeClusterResponse.DescribeClusterBroker(broker_id=ctx.node_id, host=host, port=port)
    ]
    if ctx.cluster is not None:
        image = ctx.cluster.image
        controller = image.controller_id
        brokers = [
            m.DescribeClusterResponse.DescribeClusterBroker(
                broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack
            )
            for b in sorted(image.brokers.values(), key=lambda b: b.node_id)
        ]
    return m.DescribeClusterResponse(
        endpoint_type=request.endpoint_type,
        cluster_id=ctx.cluster_id,
        controller_id=controller,
        brokers=brokers,
        cluster_authorized_operations=cluster_ops,
    )


def error_response(
    request: m.DescribeClusterRequest | None, version: int, code: ErrorCode
) -> m.DescribeClusterResponse:
    return m.DescribeClusterResponse(
        error_code=code, endpoint_type=request.endpoint_type if request is not None else 1
    )


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="cluster authorizer"
)
