"""ExpireDelegationToken (key 40), versions 0-2 (1-2 with ``protocol_version`` 4.0): bring a token's expiry forward,
or end it now (KIP-48).

Version 0 is left out, as Kafka 4.0 removed it (KIP-896). Answered by
:meth:`DelegationTokens.expire <trafka.brokerlite.security.delegation_tokens.DelegationTokens.expire>`
with Kafka's rules (see :mod:`trafka.brokerlite.security.delegation_tokens`), with the
errors of RenewDelegationToken. A negative period removes the token at once,
answered with that moment as the expiry timestamp (as Kafka 3.9 answers it);
otherwise the expiry becomes now plus the period, capped at the token's maximum
timestamp.
"""

from __future__ import annotations

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k40_expire_delegation_token as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import after_token_change

API_KEY = ApiKey.EXPIRE_DELEGATION_TOKEN
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 2


def handle(
    ctx: RequestContext, request: m.ExpireDelegationTokenRequest
) -> m.ExpireDelegationTokenResponse | Parked:
    if not ctx.token_requests_allowed():
        return error_response(request, ctx.version, ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    code, expiry = ctx.tokens.expire(
        bytes(request.hmac), ctx.principal, request.expiry_time_period_ms, ctx.now_ms
    )
    return after_token_change(
        ctx,
        m.ExpireDelegationTokenResponse(error_code=code, expiry_timestamp_ms=expiry),
        lambda failed: error_response(request, ctx.version, failed),
    )


def error_response(
    request: m.ExpireDelegationTokenRequest | None, version: int, code: ErrorCode
) -> m.ExpireDelegationTokenResponse:
    return m.ExpireDelegationTokenResponse(error_code=code, expiry_timestamp_ms=-1)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="config cluster tokens purgatory",
)
