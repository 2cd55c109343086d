"""InitProducerId (key 22), versions 0-5: producer ids for idempotent producers.

* Without a transactional id the producer gets a fresh id from the broker's
  durable counter (never reused, even across restarts) with epoch 0, as
  Kafka does for idempotent producers; a ``producer_id``/``producer_epoch``
  in the request (v3+, epoch bumps) does not matter here either.
* brokerlite does not deduplicate or order by sequence number yet: batches
  are appended as received.
* An empty transactional id is INVALID_REQUEST (as in Kafka); any other is
  refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED because there is no
  transaction coordinator yet (see the FindCoordinator handler).
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k22_init_producer_id as m

from ._base import HandlerSpec, RequestContext

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: RequestContext, request: m.InitProducerIdRequest) -> m.InitProducerIdResponse:
    if request.transactional_id is not None:
        code = (
            ErrorCode.INVALID_REQUEST
            if request.transactional_id == ""
            else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
        return error_response(request, ctx.version, code)
    return m.InitProducerIdResponse(
        error_code=ErrorCode.NONE,
        producer_id=ctx.broker.allocate_producer_id(),
        producer_epoch=0,
    )


def error_response(
    request: m.InitProducerIdRequest | None, version: int, code: ErrorCode
) -> m.InitProducerIdResponse:
    return m.InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
