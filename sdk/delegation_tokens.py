"""Delegation tokens (KIP-48) as the admin client hands them out.

A delegation token lets a process with no password of its own act as the
token's owner: the driver of a Spark job, say, creates one with
:meth:`Admin.create_delegation_token <trafka.sdk.admin.Admin.create_delegation_token>`
and gives it to its executors, which log in with SCRAM using it
(:meth:`DelegationToken.client_settings`). The owner renews it before it
expires and expires it when the job ends.

Rules:

* Principals are Kafka's ``Type:name`` strings (``User:alice``); where a
  principal is given, a bare name means a ``User``.
* The HMAC is the token's secret: it is the SCRAM password (in base64) and
  what renew and expire name the token by. It never appears in ``repr``.
* Token logins need a broker with ``delegation.token.secret.key`` set, a SASL
  listener with a SCRAM mechanism, and the extension ``tokenauth=true`` in
  the SCRAM exchange, which ``sasl.scram.tokenauth`` (or Java's
  ``tokenauth="true"`` in ``sasl.jaas.config``) turns on. A connection that
  logged in with a token may not create, renew, expire or describe tokens
  (Kafka answers DELEGATION_TOKEN_REQUEST_NOT_ALLOWED), nor may one on a
  PLAINTEXT listener.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from .errors import ArgumentValueError

__all__ = ["DelegationToken", "TokenInformation", "principal"]


@dataclasses.dataclass(frozen=True, slots=True)
class TokenInformation:
    """What the broker says about a token (Java's ``TokenInformation``).

    Timestamps are milliseconds since the epoch: ``expiry_timestamp_ms`` is when
    it ends unless renewed, ``max_timestamp_ms`` the end no renewal goes past.
    """

    token_id: str
    owner: str
    token_requester: str
    renewers: tuple[str, ...]
    issue_timestamp_ms: int
    expiry_timestamp_ms: int
    max_timestamp_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class DelegationToken:
    """A token and its HMAC (the secret part)."""

    token_info: TokenInformation
    hmac: bytes = dataclasses.field(repr=False)

    @property
    def hmac_base64(self) -> str:
        """The HMAC in base64: the SCRAM password of a token login."""
        return base64.b64encode(self.hmac).decode()

    def client_settings(self, mechanism: str = "SCRAM-SHA-256") -> dict[str, Any]:
        """The settings that make a client log in with this token, to merge into
        its configuration (which keeps its own ``security_protocol`` and TLS
        settings): the SCRAM ``mechanism``, the token id as the user name, the
        HMAC in base64 as the password, and ``sasl_scram_tokenauth``."""
        return {
            "sasl_mechanism": mechanism,
            "sasl_username": self.token_info.token_id,
            "sasl_password": self.hmac_base64,
            "sasl_scram_tokenauth": True,
        }


def principal(name: str, argument: str = "principal") -> tuple[str, str]:
    """``(type, name)`` of a principal string: ``User:alice`` or a bare user name.

    Args:
        argument: what an error calls it (the caller's argument, ``renewers[0]``).

    Raises:
        ValueError: an empty type or name.
    """
    kind, sep, rest = name.partition(":")
    if not sep:
        kind, rest = "User", name
    if not kind or not rest:
        raise ArgumentValueError(
            f"{argument}: principal {name!r} must be Type:name (User:alice) or a user name"
        )
    return kind, rest
