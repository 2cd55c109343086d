"""InitProducerId (key 22), versions 0-5: producer ids for idempotent and transactional producers.

Handed to the transaction coordinator (:mod:`trafka.brokerlite.transactions.coordinator`):

* Without a transactional id the producer gets a fresh id from the broker's
  durable counter (never reused, even across restarts) with epoch 0, as Kafka
  does for idempotent producers, also when it asks for an epoch bump (v3+).
* With one, the id is bound durably to a producer id and each call bumps its
  epoch, fencing older instances (INVALID_PRODUCER_EPOCH / PRODUCER_FENCED for
  them from then on). An ongoing transaction of the previous instance is
  aborted first: the answer is then CONCURRENT_TRANSACTIONS and the client
  retries (the abort markers are written right after the answer, so the retry
  finds the transaction complete). KIP-360 epoch bumps (v3+, with the current producer id and epoch)
  and an exhausted epoch (a new producer id) follow Kafka.
* An empty transactional id is INVALID_REQUEST; a transaction timeout above
  ``transaction.max.timeout.ms`` is INVALID_TRANSACTION_TIMEOUT.

Authorization: WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without one, IDEMPOTENT_WRITE on the
cluster or WRITE on some topic (else CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k22_init_producer_id as m

from ._authz import CLUSTER_NAME, AclOperation, AclResourceType, transactional_id_allowed
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.INIT_PRODUCER_ID
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: RequestContext, request: m.InitProducerIdRequest) -> m.InitProducerIdResponse:
    tid = request.transactional_id
    if tid is not None:
        if not transactional_id_allowed(ctx, AclOperation.WRITE, tid):
            return error_response(
                request, ctx.version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            )
    elif not ctx.allowed(
        AclOperation.IDEMPOTENT_WRITE, AclResourceType.CLUSTER, CLUSTER_NAME
    ) and not ctx.allowed_on_some(AclOperation.WRITE, AclResourceType.TOPIC):
        return error_response(request, ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    response, completions = ctx.txn.init_producer_id(request, ctx.version, ctx.now_ms)
    ctx.markers.defer(completions, ctx.now_ms)
    return response


def error_response(
    request: m.InitProducerIdRequest | None, version: int, code: ErrorCode
) -> m.InitProducerIdResponse:
    return m.InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="txn authorizer markers"
)
