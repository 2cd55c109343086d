"""ListTransactions (key 66), versions 0-1: the transactional ids the coordinator knows.

Handed to the transaction coordinator, with Kafka's filters: states (unknown
state names are echoed in ``unknown_state_filters``), producer ids and, from v1,
transactions running longer than ``duration_filter`` ms.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k66_list_transactions as m

from ._base import HandlerSpec, RequestContext

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1


def handle(ctx: RequestContext, request: m.ListTransactionsRequest) -> m.ListTransactionsResponse:
    return ctx.broker.txn.list_transactions(request, ctx.version, ctx.now_ms)


def error_response(
    request: m.ListTransactionsRequest | None, version: int, code: ErrorCode
) -> m.ListTransactionsResponse:
    return m.ListTransactionsResponse(error_code=code)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
