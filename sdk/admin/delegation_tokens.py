"""Delegation token requests and answers (CreateDelegationToken,
RenewDelegationToken, ExpireDelegationToken, DescribeDelegationToken; KIP-48),
for the tokens of :mod:`trafka.sdk.delegation_tokens`. No I/O;
:class:`~trafka.sdk.admin.Admin` sends them to any broker.

As with ACLs, the token values stay in :mod:`trafka.sdk.delegation_tokens`
(loaded by ``import trafka.sdk``) and the wire side is here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trafka.codec import ApiKey, UnsupportedVersionError
from trafka.codec.messages import k38_create_delegation_token as cdt
from trafka.codec.messages import k39_renew_delegation_token as rdt
from trafka.codec.messages import k40_expire_delegation_token as edt
from trafka.codec.messages import k41_describe_delegation_token as ddt

from ..calls import TRANSIENT, check
from ..delegation_tokens import DelegationToken, TokenInformation, principal
from ._common import fit

__all__ = [
    "create_delegation_token_request",
    "describe_delegation_token_owners",
    "describe_delegation_token_request",
    "expire_delegation_token_request",
    "read_create_delegation_token",
    "read_describe_delegation_token",
    "read_expiry",
    "renew_delegation_token_request",
    "token_renewers",
]


def _name(kind: str, name: str) -> str:
    return f"{kind}:{name}"


def token_renewers(renewers: Iterable[str]) -> list[Any]:
    """CreateDelegationToken's renewers (principals, or bare user names).

    Raises:
        ValueError: a malformed principal.
    """
    req = cdt.CreateDelegationTokenRequest
    return [
        req.CreatableRenewers(principal_type=kind, principal_name=name)
        for kind, name in (principal(r, f"renewers[{i}]") for i, r in enumerate(renewers))
    ]


def create_delegation_token_request(
    version: int,
    renewers: list[Any],
    owner: tuple[str, str] | None,
    *,
    max_lifetime_ms: int,
) -> Any:
    """CreateDelegationToken at ``version`` (``renewers`` from :func:`token_renewers`,
    ``owner`` a ``(type, name)`` principal or None for the client's own).

    Raises:
        UnsupportedVersionError: an ``owner`` before v3.
    """
    if owner is not None and version < 3:
        raise UnsupportedVersionError(
            f"creating a token for another owner needs CreateDelegationToken v3; "
            f"the broker speaks up to v{version}"
        )
    return fit(
        ApiKey.CREATE_DELEGATION_TOKEN,
        version,
        cdt.CreateDelegationTokenRequest,
        owner_principal_type=None if owner is None else owner[0],
        owner_principal_name=None if owner is None else owner[1],
        renewers=renewers,
        max_lifetime_ms=max_lifetime_ms,
    )


def read_create_delegation_token(resp: Any, renewers: list[Any]) -> DelegationToken:
    """The token a CreateDelegationToken answer carries (the answer does not
    repeat the renewers, so they are the request's).

    Raises:
        Again: a transient error.
        KafkaError: any other error.
    """
    check(resp.error_code, "creating a delegation token", again=TRANSIENT)
    owner = _name(resp.principal_type, resp.principal_name)
    info = TokenInformation(
        token_id=resp.token_id,
        owner=owner,
        token_requester=(
            _name(resp.token_requester_principal_type, resp.token_requester_principal_name)
            if resp.token_requester_principal_name
            else owner
        ),
        renewers=tuple(_name(r.principal_type, r.principal_name) for r in renewers),
        issue_timestamp_ms=resp.issue_timestamp_ms,
        expiry_timestamp_ms=resp.expiry_timestamp_ms,
        max_timestamp_ms=resp.max_timestamp_ms,
    )
    return DelegationToken(info, bytes(resp.hmac))


def renew_delegation_token_request(hmac: bytes, renew_period_ms: int) -> Any:
    """RenewDelegationToken of the token whose HMAC is ``hmac``."""
    return rdt.RenewDelegationTokenRequest(hmac=bytes(hmac), renew_period_ms=renew_period_ms)


def expire_delegation_token_request(hmac: bytes, expiry_period_ms: int) -> Any:
    """ExpireDelegationToken of the token whose HMAC is ``hmac``."""
    return edt.ExpireDelegationTokenRequest(
        hmac=bytes(hmac), expiry_time_period_ms=expiry_period_ms
    )


def read_expiry(resp: Any, what: str) -> int:
    """The expiry timestamp (ms) of a Renew or ExpireDelegationToken answer.

    Raises:
        Again: a transient error.
        KafkaError: any other error (named ``what``).
    """
    check(resp.error_code, what, again=TRANSIENT)
    return int(resp.expiry_timestamp_ms)


def describe_delegation_token_owners(owners: Iterable[str] | None) -> list[Any] | None:
    """DescribeDelegationToken's owners (principals or bare user names; None: all).

    Raises:
        ValueError: a malformed principal.
    """
    req = ddt.DescribeDelegationTokenRequest
    if owners is None:
        return None
    return [
        req.DescribeDelegationTokenOwner(principal_type=kind, principal_name=name)
        for kind, name in (principal(o, f"owners[{i}]") for i, o in enumerate(owners))
    ]


def describe_delegation_token_request(owners: list[Any] | None) -> Any:
    """DescribeDelegationToken (``owners`` from :func:`describe_delegation_token_owners`)."""
    return ddt.DescribeDelegationTokenRequest(owners=owners)


def read_describe_delegation_token(resp: Any) -> list[DelegationToken]:
    """The tokens of a DescribeDelegationToken answer, in its order.

    Raises:
        Again: a transient error.
        KafkaError: any other error.
    """
    check(resp.error_code, "describing delegation tokens", again=TRANSIENT)
    out = []
    for t in resp.tokens:
        owner = _name(t.principal_type, t.principal_name)
        info = TokenInformation(
            token_id=t.token_id,
            owner=owner,
            token_requester=(
                _name(t.token_requester_principal_type, t.token_requester_principal_name)
                if t.token_requester_principal_name
                else owner
            ),
            renewers=tuple(_name(r.principal_type, r.principal_name) for r in t.renewers),
            issue_timestamp_ms=t.issue_timestamp,
            expiry_timestamp_ms=t.expiry_timestamp,
            max_timestamp_ms=t.max_timestamp,
        )
        out.append(DelegationToken(info, bytes(t.hmac)))
    return out
