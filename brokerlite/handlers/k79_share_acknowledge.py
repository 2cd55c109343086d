"""ShareAcknowledge (key 79), version 1 (Kafka 4.1's first stable version).

Acknowledges records of a share session without fetching; never parked. The
rules are the share fetcher's (:mod:`trafka.brokerlite.shares`).
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k79_share_acknowledge as m

from ._base import HandlerSpec, RequestContext

API_KEY = 79
MIN_VERSION = 1
MAX_VERSION = 1


def handle(ctx: RequestContext, request: m.ShareAcknowledgeRequest) -> m.ShareAcknowledgeResponse:
    return ctx.broker.shares.acknowledge(request, ctx.now_ms)


def error_response(
    request: m.ShareAcknowledgeRequest | None, version: int, code: ErrorCode
) -> m.ShareAcknowledgeResponse:
    return m.ShareAcknowledgeResponse(error_code=code)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
