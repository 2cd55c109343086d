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

Authorization: WRITE on the transactional id, then READ on the group (else every
partition gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED or GROUP_AUTHORIZATION_FAILED);
then READ per topic, else that topic's partitions get TOPIC_AUTHORIZATION_FAILED
and only the others join the transaction.
"""

from __future__ import annotations

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k28_txn_offset_commit as m

from ._authz import (
    AclOperation,
    commit_readable_topics,
    enabled,
    group_allowed,
    transactional_id_allowed,
)
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.TXN_OFFSET_COMMIT
MIN_VERSION = 0
MAX_VERSION = 4

Response = m.TxnOffsetCommitResponse


def handle(ctx: RequestContext, request: m.TxnOffsetCommitRequest) -> Response:
    commit = ctx.txn.txn_offset_commit
    if not enabled(ctx):
        return commit(request, ctx.version, ctx.now_ms)
    if not transactional_id_allowed(ctx, AclOperation.WRITE, request.transactional_id):
        return error_response(request, ctx.version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not group_allowed(ctx, AclOperation.READ, request.group_id):
        return error_response(request, ctx.version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return commit_readable_topics(ctx, request, commit, error_response, Response)


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


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="txn authorizer")
