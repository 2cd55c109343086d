"""DescribeDelegationToken (key 41), versions 0-3 (1-3 with ``protocol_version`` 4.0): the tokens a principal may see (KIP-48).

Version 0 is left out, as Kafka 4.0 removed it (KIP-896). As Kafka's broker:
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED first (a token login, PLAINTEXT, SSL
without a client certificate), then DELEGATION_TOKEN_AUTH_DISABLED. A null
owner list asks for every owner's tokens, an empty one for none. A token is
listed when it matches an owner asked for (as owner, requester or renewer)
and the requester is its owner, requester or a renewer, or may DESCRIBE the
token (resource DELEGATION_TOKEN, its id) or DESCRIBE_TOKENS on its owner
(resource USER). Each token comes with its HMAC, timestamps and renewers; the
requester principal (v3) as recorded when it was created. Tokens are listed by
issue time.
"""

from __future__ import annotations

from trafka.brokerlite.security.delegation_tokens import TokenInfo
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k41_describe_delegation_token as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import after_token_change

API_KEY = ApiKey.DESCRIBE_DELEGATION_TOKEN
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 3

_Token = m.DescribeDelegationTokenResponse.DescribedDelegationToken
_Renewer = m.DescribeDelegationTokenResponse.DescribedDelegationTokenRenewer


def handle(
    ctx: RequestContext, request: m.DescribeDelegationTokenRequest
) -> m.DescribeDelegationTokenResponse | Parked:
    if not ctx.token_requests_allowed():
        return error_response(request, ctx.version, ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    tokens = ctx.tokens
    if not tokens.enabled:
        return error_response(request, ctx.version, ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
    owners = (
        None
        if request.owners is None
        else [f"{o.principal_type}:{o.principal_name}" for o in request.owners]
    )

    def may_describe(token: TokenInfo) -> bool:
        return ctx.allowed(
            AclOperation.DESCRIBE, AclResourceType.DELEGATION_TOKEN, token.token_id
        ) or ctx.allowed(AclOperation.DESCRIBE_TOKENS, AclResourceType.USER, token.owner)

    found = tokens.describe(owners, ctx.principal, may_describe, ctx.now_ms)
    answer = m.DescribeDelegationTokenResponse(
        error_code=ErrorCode.NONE,
        tokens=[_described(t, tokens.hmac(t.token_id), ctx.version) for t in found],
    )
    # (The expiry sweep may have removed tokens: written before the answer, which
    # stands whether or not that succeeds.)
    return after_token_change(ctx, answer, lambda _: answer)


def _described(token: TokenInfo, hmac: bytes, version: int) -> _Token:
    owner_type, _, owner_name = token.owner.partition(":")
    requester_type, _, requester_name = token.requester.partition(":")
    if version < 3:  # (the requester is v3's)
        requester_type = requester_name = ""
    return _Token(
        principal_type=owner_type,
        principal_name=owner_name,
        token_requester_principal_type=requester_type,
        token_requester_principal_name=requester_name,
        issue_timestamp=token.issue_ms,
        expiry_timestamp=token.expiry_ms,
        max_timestamp=token.max_ms,
        token_id=token.token_id,
        hmac=hmac,
        renewers=[
            _Renewer(principal_type=kind, principal_name=name)
            for kind, _, name in (r.partition(":") for r in token.renewers)
        ],
    )


def error_response(
    request: m.DescribeDelegationTokenRequest | None, version: int, code: ErrorCode
) -> m.DescribeDelegationTokenResponse:
    return m.DescribeDelegationTokenResponse(error_code=code, tokens=[])


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="config cluster authorizer tokens purgatory",
)
