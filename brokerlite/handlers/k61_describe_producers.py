"""DescribeProducers (key 61), version 0: the active producers of partitions (admin).

Per partition, from its producer state (:mod:`trafka.brokerlite.transactions.eos`): each
producer id's epoch, last sequence, last timestamp, coordinator epoch and the
first offset of its open transaction (-1 when none), as Kafka's
``kafka-transactions.sh describe-producers`` shows them. Unknown partitions are
UNKNOWN_TOPIC_OR_PARTITION. A single node's internal topics have no log here
(:mod:`trafka.brokerlite.storage.internal_topics`): none of their partitions
has active producers.

Authorization: a topic needs READ, else its partitions get
TOPIC_AUTHORIZATION_FAILED before existence is looked at (a name breaking
Kafka's topic rules is not authorized, as Kafka refuses it first).
"""

from __future__ import annotations

from trafka.brokerlite.errors import BrokerError, InvalidTopicError
from trafka.brokerlite.storage.topics import validate_topic_name
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k61_describe_producers as m

from ._base import HandlerSpec, RequestContext
from ._util import code_of, kept_elsewhere, message_of

API_KEY = ApiKey.DESCRIBE_PRODUCERS
MIN_VERSION = 0
MAX_VERSION = 0

Response = m.DescribeProducersResponse


def _partition(ctx: RequestContext, topic: str, index: int) -> Response.PartitionResponse:
    if kept_elsewhere(ctx, topic, index):
        return Response.PartitionResponse(partition_index=index, active_producers=[])
    try:
        state = ctx.producers.state(topic, index)
    except BrokerError as exc:
        return Response.PartitionResponse(
            partition_index=index, error_code=code_of(exc), error_message=message_of(exc)
        )
    return Response.PartitionResponse(
        partition_index=index,
        active_producers=[
            Response.ProducerState(
                producer_id=e.producer_id,
                producer_epoch=e.epoch,
                last_sequence=e.last_seq,
                last_timestamp=e.last_timestamp,
                coordinator_epoch=e.coordinator_epoch,
                current_txn_start_offset=-1 if e.txn_first_offset is None else e.txn_first_offset,
            )
            for _, e in sorted(state.producers.items())
        ],
    )


def _readable(ctx: RequestContext, topic: str) -> bool:
    try:
        validate_topic_name(topic)
    except InvalidTopicError:
        return True  # refused as invalid or unknown below, whoever asks
    return ctx.allowed(AclOperation.READ, AclResourceType.TOPIC, topic)


def handle(ctx: RequestContext, request: m.DescribeProducersRequest) -> Response:
    topics = []
    for t in request.topics:
        if _readable(ctx, t.name):
            partitions = [_partition(ctx, t.name, p) for p in t.partition_indexes]
        else:
            partitions = [
                Response.PartitionResponse(
                    partition_index=p,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    error_message=ErrorCode.TOPIC_AUTHORIZATION_FAILED.message,
                )
                for p in t.partition_indexes
            ]
        topics.append(Response.TopicResponse(name=t.name, partitions=partitions))
    return Response(topics=topics)


def error_response(
    request: m.DescribeProducersRequest | None, version: int, code: ErrorCode
) -> Response:
    topics = request.topics if request is not None else []
    return Response(
        topics=[
            Response.TopicResponse(
                name=t.name,
                partitions=[
                    Response.PartitionResponse(partition_index=p, error_code=code)
                    for p in t.partition_indexes
                ],
            )
            for t in topics
        ]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="logs producers cluster authorizer",
)
