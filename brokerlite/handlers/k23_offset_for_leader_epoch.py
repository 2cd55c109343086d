"""OffsetForLeaderEpoch (key 23), versions 0-4 (2-4 with ``protocol_version`` 4.0): end offset of a leader epoch.

Consumers (KIP-320) ask it to validate their position after a leader change.
On the single-node broker there is one epoch, 0, which ends at the log end
offset (0 for a partition of an internal topic, which has no log on a single
node: :mod:`trafka.brokerlite.storage.internal_topics`). As in Kafka, a
requested epoch newer than the current one, or
undefined (-1), yields epoch and end offset -1; ``current_leader_epoch`` is
fenced against 0. In cluster mode only the leader answers (else
NOT_LEADER_OR_FOLLOWER), from its log's leader epoch cache
(``PartitionLog.end_offset_for_epoch``): this is how a follower finds where
its log and the new leader's agree before it truncates.

Authorization: CLUSTER_ACTION on the cluster (a follower's right) covers every
topic; otherwise each topic needs DESCRIBE, else its partitions get
TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from trafka.brokerlite.cluster.replica_manager import check_epoch
from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k23_offset_for_leader_epoch as m

from ._base import HandlerSpec, RequestContext
from ._util import LEADER_EPOCH, code_of, denied, kept_elsewhere, leader_log

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 2
MAX_VERSION = 4

Topic = m.OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
Partition = m.OffsetForLeaderEpochResponse.EpochEndOffset


def handle(
    ctx: RequestContext, request: m.OffsetForLeaderEpochRequest
) -> m.OffsetForLeaderEpochResponse:
    hidden: set[str] = set()
    if not ctx.allowed(AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER, CLUSTER_NAME):
        hidden = denied(
            ctx, AclOperation.DESCRIBE, AclResourceType.TOPIC, (t.topic for t in request.topics)
        )
    topics: list[Topic] = []
    for topic in request.topics:
        partitions: list[Partition] = []
        for want in topic.partitions:
            code = ErrorCode.NONE
            if topic.topic in hidden:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            epoch = end = -1
            if not code:
                try:
                    if kept_elsewhere(ctx, topic.topic, want.partition):
                        # An internal topic's partition on one node: an empty log.
                        check_epoch(want.current_leader_epoch, LEADER_EPOCH)
                        if 0 <= want.leader_epoch <= LEADER_EPOCH:
                            epoch, end = LEADER_EPOCH, 0
                    else:
                        epoch, end = _end_of(ctx, topic.topic, want)
                except BrokerError as exc:
                    code = code_of(exc)
            partitions.append(
                Partition(
                    error_code=code, partition=want.partition, leader_epoch=epoch, end_offset=end
                )
            )
        topics.append(Topic(topic=topic.topic, partitions=partitions))
    return m.OffsetForLeaderEpochResponse(topics=topics)


def _end_of(
    ctx: RequestContext, topic: str, want: m.OffsetForLeaderEpochRequest.OffsetForLeaderPartition
) -> tuple[int, int]:
    """The requested epoch's (epoch, end offset) in the partition's log, (-1, -1)
    for an epoch the log does not have."""
    log = leader_log(ctx, topic, want.partition, want.current_leader_epoch)
    if ctx.cluster is not None:
        return log.end_offset_for_epoch(want.leader_epoch)
    if 0 <= want.leader_epoch <= LEADER_EPOCH:
        return LEADER_EPOCH, log.log_end_offset
    return -1, -1


def error_response(
    request: m.OffsetForLeaderEpochRequest | None, version: int, code: ErrorCode
) -> m.OffsetForLeaderEpochResponse:
    if request is None:
        return m.OffsetForLeaderEpochResponse()
    return m.OffsetForLeaderEpochResponse(
        topics=[
            Topic(
                topic=t.topic,
                partitions=[
                    Partition(error_code=code, partition=p.partition) for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="logs cluster authorizer",
)
