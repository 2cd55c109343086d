"""CreateDelegationToken (key 38), versions 0-3 (1-3 with ``protocol_version`` 4.0): issue a delegation token (KIP-48).

Version 0 is left out, as Kafka 4.0 removed it (KIP-896). Answered by
:meth:`DelegationTokens.create <trafka.brokerlite.security.delegation_tokens.DelegationTokens.create>`
with Kafka's rules (see :mod:`trafka.brokerlite.security.delegation_tokens`); in order:

* DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on a connection that logged in with a
  token, on a PLAINTEXT listener, or over SSL without a client certificate;
* DELEGATION_TOKEN_AUTHORIZATION_FAILED for a token of another owner (v3's
  owner principal) unless the requester may CREATE_TOKENS on that user;
* DELEGATION_TOKEN_AUTH_DISABLED without ``delegation_token_secret_key``;
* INVALID_PRINCIPAL_TYPE for an owner or renewer that is not a ``User``.

The answer names the owner and (v3) the requester, with the token's id, HMAC
and timestamps; an error answer has -1 timestamps, an empty id and HMAC.
"""

from __future__ import annotations

from typing import Any

from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k38_create_delegation_token as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import after_token_change

API_KEY = ApiKey.CREATE_DELEGATION_TOKEN
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 3


def handle(
    ctx: RequestContext, request: m.CreateDelegationTokenRequest
) -> m.CreateDelegationTokenResponse | Parked:
    requester = ctx.principal
    owner = requester
    if request.owner_principal_name:
        owner = f"{request.owner_principal_type}:{request.owner_principal_name}"
    version = ctx.version
    if not ctx.token_requests_allowed():
        return _refused(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, owner, requester, version)
    if owner != requester and not ctx.allowed(
        AclOperation.CREATE_TOKENS, AclResourceType.USER, owner
    ):
        return _refused(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED, owner, requester, version)
    renewers = [f"{r.principal_type}:{r.principal_name}" for r in request.renewers]
    code, token = ctx.tokens.create(owner, requester, renewers, request.max_lifetime_ms, ctx.now_ms)
    if token is None:
        return _refused(code, owner, requester, version)
    answer = _answer(
        ErrorCode.NONE,
        token.owner,
        token.requester,
        version,
        issue_timestamp_ms=token.issue_ms,
        expiry_timestamp_ms=token.expiry_ms,
        max_timestamp_ms=token.max_ms,
        token_id=token.token_id,
        hmac=ctx.tokens.hmac(token.token_id),
    )
    # Cluster mode: answered once ZooKeeper holds the token.
    return after_token_change(
        ctx, answer, lambda failed: _refused(failed, owner, requester, version)
    )


def _answer(
    code: ErrorCode, owner: str, requester: str, version: int, **token: Any
) -> m.CreateDelegationTokenResponse:
    owner_type, _, owner_name = owner.partition(":")
    requester_type, _, requester_name = requester.partition(":")
    if version < 3:  # (the requester is v3's)
        requester_type = requester_name = ""
    return m.CreateDelegationTokenResponse(
        error_code=code,
        principal_type=owner_type,
        principal_name=owner_name,
        token_requester_principal_type=requester_type,
        token_requester_principal_name=requester_name,
        **token,
    )


def _refused(
    code: ErrorCode, owner: str, requester: str, version: int
) -> m.CreateDelegationTokenResponse:
    return _answer(
        code,
        owner,
        requester,
        version,
        issue_timestamp_ms=-1,
        expiry_timestamp_ms=-1,
        max_timestamp_ms=-1,
        token_id="",
        hmac=b"",
    )


def error_response(
    request: m.CreateDelegationTokenRequest | None, version: int, code: ErrorCode
) -> m.CreateDelegationTokenResponse:
    return _refused(code, ":", ":", version)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="config cluster authorizer tokens purgatory",
)
