"""AddPartitionsToTxn (key 24), versions 0-5: partitions join a producer's transaction.

Handed to the transaction coordinator. v0-3 are the clients' form (one
transaction); v4-5 batch several transactions, the form brokers use among
themselves since KIP-890: with ``verify_only`` they only check which
partitions are in the transaction (part 1), without it they add them for a
client of transaction version 2 (part 2: a Produce v12+ leader's request; the
transaction then follows TV2, as Kafka's ``transactionVersionForAddPartitionsToTxn``).

* The first partition (or group) added starts the transaction, and its
  ``transaction.timeout.ms`` clock; partitions already in it are accepted again.
* Unknown partitions get UNKNOWN_TOPIC_OR_PARTITION and every other partition of
  the request OPERATION_NOT_ATTEMPTED: nothing is added.
* Otherwise every partition gets the request's one outcome:
  INVALID_PRODUCER_ID_MAPPING (unknown transactional id or another producer id),
  PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2) for an old epoch,
  CONCURRENT_TRANSACTIONS while the previous transaction's markers are written.

Authorization (v0-3, from producers): WRITE on the transactional id, else every
partition gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED; then WRITE per topic
(Kafka's internal topics never pass), else those partitions get
TOPIC_AUTHORIZATION_FAILED, unknown ones UNKNOWN_TOPIC_OR_PARTITION and the rest
OPERATION_NOT_ATTEMPTED: nothing is added. v4-5 (from brokers) need
CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k24_add_partitions_to_txn as m

from ._authz import (
    CLUSTER_NAME,
    AclOperation,
    AclResourceType,
    allowed_topics,
    enabled,
    transactional_id_allowed,
)
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
MIN_VERSION = 0
MAX_VERSION = 5

Response = m.AddPartitionsToTxnResponse

# Kafka's internal topics: a producer may never add them itself.
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def handle(ctx: RequestContext, request: m.AddPartitionsToTxnRequest) -> Response:
    add = ctx.txn.add_partitions_to_txn
    if not enabled(ctx):
        return add(request, ctx.version, ctx.now_ms)
    if ctx.version >= 4:
        if not ctx.allowed(AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER, CLUSTER_NAME):
            return error_response(request, ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return add(request, ctx.version, ctx.now_ms)
    topics = request.v3_and_below_topics
    if not transactional_id_allowed(ctx, AclOperation.WRITE, request.v3_and_below_transactional_id):
        return error_response(request, ctx.version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    names = {t.name for t in topics}
    writable = allowed_topics(ctx, AclOperation.WRITE, names - _INTERNAL_TOPICS)
    if writable == names:
        return add(request, ctx.version, ctx.now_ms)
    order: dict[str, list[int]] = {}
    for topic in topics:
        seen = order.setdefault(topic.name, [])
        seen.extend(p for p in topic.partitions if p not in seen)
    logs = ctx.logs

    def code(name: str, partition: int) -> ErrorCode:
        if name not in writable:
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        info = logs.topic(name)
        if info is None or not 0 <= partition < info.num_partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.OPERATION_NOT_ATTEMPTED

    return Response(
        results_by_topic_v3_and_below=[
            Response.AddPartitionsToTxnTopicResult(
                name=name,
                results_by_partition=[
                    Response.AddPartitionsToTxnPartitionResult(
                        partition_index=p, partition_error_code=code(name, p)
                    )
                    for p in partitions
                ],
            )
            for name, partitions in order.items()
        ]
    )


def _topic_errors(
    topics: list[m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic], code: ErrorCode
) -> list[Response.AddPartitionsToTxnTopicResult]:
    return [
        Response.AddPartitionsToTxnTopicResult(
            name=t.name,
            results_by_partition=[
                Response.AddPartitionsToTxnPartitionResult(
                    partition_index=p, partition_error_code=code
                )
                for p in t.partitions
            ],
        )
        for t in topics
    ]


def error_response(
    request: m.AddPartitionsToTxnRequest | None, version: int, code: ErrorCode
) -> Response:
    if version >= 4:
        return Response(error_code=code)
    topics = request.v3_and_below_topics if request is not None else []
    return Response(results_by_topic_v3_and_below=_topic_errors(topics, code))


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="logs txn authorizer"
)
