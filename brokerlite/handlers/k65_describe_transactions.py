"""DescribeTransactions (key 65), version 0: the coordinator's view of transactional ids.

Handed to the transaction coordinator: state (Kafka's names: Empty, Ongoing,
PrepareCommit, ...), timeout, start time, producer id and epoch, and the
partitions of the ongoing transaction. Unknown ids are TRANSACTIONAL_ID_NOT_FOUND,
an empty id INVALID_REQUEST. In cluster mode an id coordinated by another
broker is NOT_COORDINATOR (admin clients ask each id's coordinator).

Authorization: DESCRIBE per transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for it; a described transaction lists only
the topics the principal may DESCRIBE.
"""

from __future__ import annotations

import dataclasses

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k65_describe_transactions as m

from ._authz import AclOperation, allowed_topics, enabled, transactional_id_allowed
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
MIN_VERSION = 0
MAX_VERSION = 0

Response = m.DescribeTransactionsResponse


def handle(ctx: RequestContext, request: m.DescribeTransactionsRequest) -> Response:
    response = _describe(ctx, request)
    ctxn = ctx.cluster_txn
    if ctxn is None:
        return response
    # Cluster mode: each id is described by its own coordinator (admin clients ask it).
    return dataclasses.replace(
        response,
        transaction_states=[
            s
            if s.error_code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND or ctxn.owns(s.transactional_id)
            else Response.TransactionState(
                error_code=ErrorCode.NOT_COORDINATOR, transactional_id=s.transactional_id
            )
            for s in response.transaction_states
        ],
    )


def _describe(ctx: RequestContext, request: m.DescribeTransactionsRequest) -> Response:
    describe = ctx.txn.describe_transactions
    if not enabled(ctx):
        return describe(request, ctx.version)
    ids = request.transactional_ids
    allowed = [transactional_id_allowed(ctx, AclOperation.DESCRIBE, t) for t in ids]
    permitted = [t for t, ok in zip(ids, allowed, strict=True) if ok]
    whole = describe(dataclasses.replace(request, transactional_ids=permitted), ctx.version)
    seen = allowed_topics(
        ctx, AclOperation.DESCRIBE, (t.topic for s in whole.transaction_states for t in s.topics)
    )
    described = iter(whole.transaction_states)
    states = []
    for tid, ok in zip(ids, allowed, strict=True):
        if not ok:
            states.append(
                Response.TransactionState(
                    error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    transactional_id=tid,
                )
            )
            continue
        state = next(described)
        if any(t.topic not in seen for t in state.topics):
            state = dataclasses.replace(state, topics=[t for t in state.topics if t.topic in seen])
        states.append(state)
    return dataclasses.replace(whole, transaction_states=states)


def error_response(
    request: m.DescribeTransactionsRequest | None, version: int, code: ErrorCode
) -> Response:
    ids = request.transactional_ids if request is not None else []
    return Response(
        transaction_states=[
            Response.TransactionState(error_code=code, transactional_id=tid) for tid in ids
        ]
    )


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="txn cluster_txn authorizer"
)
