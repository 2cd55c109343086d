"""ListTransactions (key 66), versions 0-2: the transactional ids the coordinator knows.

Handed to the transaction coordinator, with Kafka's filters: states (unknown
state names are echoed in ``unknown_state_filters``), producer ids and, from v1,
transactions running longer than ``duration_filter`` ms. From v2 (KIP-1152)
``transactional_id_pattern``, a regular expression the whole transactional id
must match (null or empty: every id); one that does not compile is
INVALID_REGULAR_EXPRESSION with nothing listed. Kafka compiles it with Java's
``java.util.regex``, brokerlite with Python's ``re``: the common syntax
(classes, quantifiers, anchors, groups) means the same in both.

Authorization: only the transactional ids the principal may DESCRIBE are listed.
"""

from __future__ import annotations

import dataclasses
import re

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k66_list_transactions as m

from ._authz import AclOperation, enabled, transactional_id_allowed
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.LIST_TRANSACTIONS
MIN_VERSION = 0
MAX_VERSION = 2
PATTERN_VERSION = 2


def handle(ctx: RequestContext, request: m.ListTransactionsRequest) -> m.ListTransactionsResponse:
    pattern = request.transactional_id_pattern if ctx.version >= PATTERN_VERSION else None
    try:
        wanted = re.compile(pattern) if pattern else None
    except re.error:
        return m.ListTransactionsResponse(error_code=ErrorCode.INVALID_REGULAR_EXPRESSION)
    response = ctx.txn.list_transactions(request, ctx.version, ctx.now_ms)
    if wanted is not None:
        response = dataclasses.replace(
            response,
            transaction_states=[
                s for s in response.transaction_states if wanted.fullmatch(s.transactional_id)
            ],
        )
    if not enabled(ctx):
        return response
    return dataclasses.replace(
        response,
        transaction_states=[
            s
            for s in response.transaction_states
            if transactional_id_allowed(ctx, AclOperation.DESCRIBE, s.transactional_id)
        ],
    )


def error_response(
    request: m.ListTransactionsRequest | None, version: int, code: ErrorCode
) -> m.ListTransactionsResponse:
    return m.ListTransactionsResponse(error_code=code)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="txn authorizer")
