"""EndTxn (key 26), versions 0-5: commit or abort the ongoing transaction.

Handed to the transaction coordinator, which makes the outcome durable
(PrepareCommit/PrepareAbort) before answering; the broker then writes a COMMIT or
ABORT marker to every partition of the transaction and applies (commit) or drops
(abort) its group offsets before the transaction completes
(``Broker.complete_transactions``). Until then the producer's next transaction
gets CONCURRENT_TRANSACTIONS and retries.

* Repeating the outcome of a completed transaction succeeds (a retry); the
  opposite outcome, or EndTxn without a transaction, is INVALID_TXN_STATE.
* Old epochs: PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2).
* v5 answers carry the producer id and epoch; brokerlite follows transaction
  version 1 (the epoch is bumped per producer session, not per transaction), so
  they are the unchanged ones.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k26_end_txn as m

from ._base import HandlerSpec, RequestContext

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: RequestContext, request: m.EndTxnRequest) -> m.EndTxnResponse:
    response, completions = ctx.broker.txn.end_txn(request, ctx.version, ctx.now_ms)
    ctx.broker.complete_transactions(completions, ctx.now_ms)
    return response


def error_response(
    request: m.EndTxnRequest | None, version: int, code: ErrorCode
) -> m.EndTxnResponse:
    return m.EndTxnResponse(error_code=code)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
