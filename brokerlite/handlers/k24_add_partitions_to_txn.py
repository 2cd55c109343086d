"""AddPartitionsToTxn (key 24), versions 0-5: partitions join a producer's transaction.

Handed to the transaction coordinator. v0-3 are the clients' form (one
transaction); v4-5 batch several transactions and can only verify
(``verify_only``), the form brokers use among themselves since KIP-890.

* The first partition (or group) added starts the transaction, and its
  ``transaction.timeout.ms`` clock; partitions already in it are accepted again.
* Unknown partitions get UNKNOWN_TOPIC_OR_PARTITION and every other partition of
  the request OPERATION_NOT_ATTEMPTED: nothing is added.
* Otherwise every partition gets the request's one outcome:
  INVALID_PRODUCER_ID_MAPPING (unknown transactional id or another producer id),
  PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2) for an old epoch,
  CONCURRENT_TRANSACTIONS while the previous transaction's markers are written.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k24_add_partitions_to_txn as m

from ._base import HandlerSpec, RequestContext

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5

Response = m.AddPartitionsToTxnResponse


def handle(ctx: RequestContext, request: m.AddPartitionsToTxnRequest) -> Response:
    return ctx.broker.txn.add_partitions_to_txn(request, ctx.version, ctx.now_ms)


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


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
