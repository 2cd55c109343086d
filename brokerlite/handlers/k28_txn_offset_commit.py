"""TxnOffsetCommit (key 28), versions 0-4: a transaction's consumer offsets.

Handed to the transaction coordinator, which holds the offsets (durably) with the
transaction: a commit applies them to the group, an abort drops them. Until then
OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for those
partitions.

Per partition, in Kafka's order: UNKNOWN_TOPIC_OR_PARTITION; then the request's
INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH, CONCURRENT_TRANSACTIONS, or
INVALID_TXN_STATE when the group was not added with AddOffsetsToTxn; from v3 the
group's generation checks (KIP-447: FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION), which fence a producer whose consumer lost its partitions in
a rebalance; then OFFSET_METADATA_TOO_LARGE.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k28_txn_offset_commit as m

from ._base import HandlerSpec, RequestContext

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 4

Response = m.TxnOffsetCommitResponse


def handle(ctx: RequestContext, request: m.TxnOffsetCommitRequest) -> Response:
    return ctx.broker.txn.txn_offset_commit(request, ctx.version, ctx.now_ms)


def error_response(
    request: m.TxnOffsetCommitRequest | None, version: int, code: ErrorCode
) -> Response:
    topics = request.topics if request is not None else []
    return Response(
        topics=[
            Response.TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    Response.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in topics
        ]
    )


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
