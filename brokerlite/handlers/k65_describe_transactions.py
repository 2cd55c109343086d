"""DescribeTransactions (key 65), version 0: the coordinator's view of transactional ids.

Handed to the transaction coordinator: state (Kafka's names: Empty, Ongoing,
PrepareCommit, ...), timeout, start time, producer id and epoch, and the
partitions of the ongoing transaction. Unknown ids are TRANSACTIONAL_ID_NOT_FOUND,
an empty id INVALID_REQUEST.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k65_describe_transactions as m

from ._base import HandlerSpec, RequestContext

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0

Response = m.DescribeTransactionsResponse


def handle(ctx: RequestContext, request: m.DescribeTransactionsRequest) -> Response:
    return ctx.broker.txn.describe_transactions(request, ctx.version)


def error_response(
    request: m.DescribeTransactionsRequest | None, version: int, code: ErrorCode
) -> Response:
    ids = request.transactional_ids if request is not None else []
    return Response(
        transaction_states=[
            Response.TransactionState(error_code=code, transactional_id=tid) for tid in ids
        ]
    )


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
