"""EndTxn (key 26), versions 0-5: commit or abort the ongoing transaction.

Handed to the transaction coordinator, which makes the outcome durable
(PrepareCommit/PrepareAbort, one fsync) and answers, as Kafka does. Just after
the answer (``TransactionMarkers.defer``: at the next poll, or before the next
request is handled) the broker writes a COMMIT or ABORT marker to every
partition of the transaction and applies (commit) or drops (abort) its group
offsets, and the transaction completes. A request of the same transactional id
that still finds it prepared (only when writing the markers failed and waits for
its retry) gets CONCURRENT_TRANSACTIONS and retries. A crash between the answer
and the markers is finished when the broker starts again.

* Repeating the outcome of a completed transaction succeeds (a retry); the
  opposite outcome, or EndTxn without a transaction, is INVALID_TXN_STATE.
* Old epochs: PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2).
* v5 is transaction version 2 (KIP-890 part 2; Kafka decides it by the request
  version alone): the decision bumps the producer epoch, the markers carry the
  bumped epoch, and the answer carries the producer id and epoch the producer
  uses for its next transaction (a new producer id at epoch 0 when the bump
  reached the last usable epoch). A retry (the epoch before the bump) gets the
  same answer again; with nothing ongoing, a commit is INVALID_TXN_STATE and an
  abort bumps the epoch all the same, as Kafka 4.4 answers (the rules:
  :mod:`trafka.brokerlite.transactions.tv2`).
  v0-4 (transaction version 1) keep the epoch: the answer has no id or epoch.

Authorization: WRITE on the transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and the transaction is left as it is.
"""

from __future__ import annotations

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k26_end_txn as m

from ._authz import AclOperation, transactional_id_allowed
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.END_TXN
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: RequestContext, request: m.EndTxnRequest) -> m.EndTxnResponse:
    if not transactional_id_allowed(ctx, AclOperation.WRITE, request.transactional_id):
        return m.EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    response, completions = ctx.txn.end_txn(request, ctx.version, ctx.now_ms)
    ctx.markers.defer(completions, ctx.now_ms)
    return response


def error_response(
    request: m.EndTxnRequest | None, version: int, code: ErrorCode
) -> m.EndTxnResponse:
    return m.EndTxnResponse(error_code=code)


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="txn authorizer markers"
)
