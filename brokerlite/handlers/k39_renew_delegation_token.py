"""RenewDelegationToken (key 39), versions 0-2 (1-2 with ``protocol_version`` 4.0): push a token's expiry further (KIP-48).

Version 0 is left out, as Kafka 4.0 removed it (KIP-896). Answered by
:meth:`DelegationTokens.renew <trafka.brokerlite.security.delegation_tokens.DelegationTokens.renew>`
with Kafka's rules (see :mod:`trafka.brokerlite.security.delegation_tokens`):
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (a token login, PLAINTEXT, SSL without a
client certificate), DELEGATION_TOKEN_AUTH_DISABLED, DELEGATION_TOKEN_NOT_FOUND
(no token has this HMAC), DELEGATION_TOKEN_EXPIRED, or
DELEGATION_TOKEN_OWNER_MISMATCH (neither the owner nor a renewer). The new
expiry is now plus the default expiry time, or the request's period when
positive and smaller, capped at the token's maximum timestamp; -1 on error.
"""

from __future__ import annotations

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k39_renew_delegation_token as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import after_token_change

API_KEY = ApiKey.RENEW_DELEGATION_TOKEN
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 2


def handle(
    ctx: RequestContext, request: m.RenewDelegationTokenRequest
) -> m.RenewDelegationTokenResponse | Parked:
    if not ctx.token_requests_allowed():
        return error_response(request, ctx.version, ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    code, expiry = ctx.tokens.renew(
        bytes(request.hmac), ctx.principal, request.renew_period_ms, ctx.now_ms
    )
    return after_token_change(
        ctx,
        m.RenewDelegationTokenResponse(error_code=code, expiry_timestamp_ms=expiry),
        lambda failed: error_response(request, ctx.version, failed),
    )


def error_response(
    request: m.RenewDelegationTokenRequest | None, version: int, code: ErrorCode
) -> m.RenewDelegationTokenResponse:
    return m.RenewDelegationTokenResponse(error_code=code, expiry_timestamp_ms=-1)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="config cluster tokens purgatory",
)
