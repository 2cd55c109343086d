"""WriteTxnMarkers (key 27), versions 0-2 (1-2 with ``protocol_version`` 4.0): transaction markers.

In Kafka the transaction coordinator sends this to partition leaders; an admin
client sends it too, to abort a hanging transaction (KIP-664: a partition
holds an open transaction that no coordinator will ever complete, and
read_committed consumers are stuck at its first offset).

Cluster mode: the coordinators' markers come this way (see
:mod:`trafka.brokerlite.transactions.cluster_mode`): each partition led here gets its
marker after the same checks, and the answer waits until the markers are on
the partitions' in-sync replicas (NOT_LEADER_OR_FOLLOWER for a partition led
elsewhere or lost meanwhile, REQUEST_TIMED_OUT for one not replicated within
30 s); a marker for ``__consumer_offsets`` also settles the producer's pending
transactional offsets there.

On one node the coordinator writes its own markers directly, so this serves
the admin use:
each partition gets a COMMIT or ABORT control batch for the producer, with
the checks of the coordinator's markers (INVALID_PRODUCER_EPOCH for an older
producer epoch than the partition has seen, TRANSACTION_COORDINATOR_FENCED
for an older coordinator epoch), fsynced before the answer. Unknown
partitions are UNKNOWN_TOPIC_OR_PARTITION. As in Kafka, nothing checks that
the transaction is really hanging: that is the caller's judgement (the
coordinator's own view is DescribeTransactions).

v2 (KIP-1228, Kafka 4.2) tells each marker's transaction version: a
coordinator of transaction version 2 bumps the producer epoch before writing
its markers, so a version 2 marker whose epoch is not above the partition's
is INVALID_PRODUCER_EPOCH (before v2, and at versions 0 and 1, an equal
epoch is taken), on one node and in a cluster; but the same epoch with no
transaction open on the partition is that marker sent again (a new
coordinator finishing its predecessor's decision) and is written again, as
Kafka does since KAFKA-19999. A cluster's coordinators send v2.

Authorization: ALTER on the cluster (an operator aborting a hanging transaction)
or CLUSTER_ACTION on it (a broker), else every partition gets
CLUSTER_AUTHORIZATION_FAILED and no marker is written.
"""

from __future__ import annotations

from trafka.brokerlite.transactions.cluster_mode import (
    MARKER_REPLICATION_TIMEOUT_MS,
    MarkersReplicated,
)
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k27_write_txn_markers as m

from ..outcomes import Parked
from ._authz import CLUSTER_NAME, AclOperation, AclResourceType
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.WRITE_TXN_MARKERS
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 2

Response = m.WriteTxnMarkersResponse


def handle(ctx: RequestContext, request: m.WriteTxnMarkersRequest) -> Response | Parked:
    if not ctx.allowed(
        AclOperation.ALTER, AclResourceType.CLUSTER, CLUSTER_NAME
    ) and not ctx.allowed(AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER, CLUSTER_NAME):
        return error_response(request, ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if ctx.cluster_txn is not None:
        # A coordinator's markers (or an admin's), answered once replicated.
        response, required = ctx.cluster_txn.write_markers(request, ctx.now_ms)
        if not required:
            return response
        assert ctx.cluster is not None  # (cluster_txn is cluster mode's)
        waiter = MarkersReplicated(
            ctx.cluster, ctx.logs, response, required, ctx.mono_ms + MARKER_REPLICATION_TIMEOUT_MS
        )
        if waiter.replicated():
            # Already on the ISR (a partition without followers): no append to come
            # would wake the waiter, so answer now.
            return waiter.complete(ctx.now_ms)
        return ctx.park(waiter)
    results = []
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            partitions = [
                Response.WritableTxnMarkerPartitionResult(
                    partition_index=index,
                    error_code=ctx.markers.write_requested(
                        topic.name,
                        index,
                        producer_id=marker.producer_id,
                        producer_epoch=marker.producer_epoch,
                        coordinator_epoch=marker.coordinator_epoch,
                        commit=marker.transaction_result,
                        now_ms=ctx.now_ms,
                        transaction_version=marker.transaction_version,
                    ),
                )
                for index in topic.partition_indexes
            ]
            topics.append(
                Response.WritableTxnMarkerTopicResult(name=topic.name, partitions=partitions)
            )
        results.append(
            Response.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics)
        )
    return Response(markers=results)


def error_response(
    request: m.WriteTxnMarkersRequest | None, version: int, code: ErrorCode
) -> Response:
    markers = request.markers if request is not None else []
    return Response(
        markers=[
            Response.WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=[
                    Response.WritableTxnMarkerTopicResult(
                        name=topic.name,
                        partitions=[
                            Response.WritableTxnMarkerPartitionResult(
                                partition_index=index, error_code=code
                            )
                            for index in topic.partition_indexes
                        ],
                    )
                    for topic in marker.topics
                ],
            )
            for marker in markers
        ]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="logs cluster cluster_txn authorizer markers purgatory",
)
