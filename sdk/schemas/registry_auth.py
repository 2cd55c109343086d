"""Bearer tokens for the registry client that expire and are fetched again:
OAuth 2 client credentials (``bearer.auth.credentials.source`` OAUTHBEARER) and
Azure's instance metadata service (OAUTHBEARER_AZURE_IMDS), as Confluent's
clients take them.

Rules:

* A token is fetched on the first request and again once 80% of its life
  (``expires_in``) has passed; requests in between reuse it.
* A fetch that fails is tried again ``max_retries`` times after a doubling
  backoff, then fails the request with :class:`OAuthTokenError`.
* Each request carries ``Authorization: Bearer <token>``, ``target-sr-cluster``
  (the logical cluster) and, when given, ``Confluent-Identity-Pool-Id``.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Mapping
from typing import Any

import anyio

from .._backoff import backoff_delay
from .types import SchemaRegistryError

__all__ = [
    "AzureIMDSToken",
    "BearerFields",
    "ClientCredentialsToken",
    "OAuthTokenError",
    "bearer_headers",
]

_REQUIRED = ("bearer.auth.token", "bearer.auth.logical.cluster")


class OAuthTokenError(SchemaRegistryError):
    """No token could be had from the token endpoint."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(status, -1, message, "fetching an OAuth token")


def bearer_headers(fields: Mapping[str, Any]) -> dict[str, str]:
    """The headers of a request from the bearer fields (token, logical cluster,
    identity pool).

    Raises:
        ValueError: the token or the logical cluster is missing.
    """
    missing = [name for name in _REQUIRED if name not in fields]
    if missing:
        raise ValueError(
            "Missing required bearer auth fields, needs to be set in config or custom "
            f"function: {', '.join(missing)}"
        )
    headers = {
        "Authorization": f"Bearer {fields['bearer.auth.token']}",
        "target-sr-cluster": str(fields["bearer.auth.logical.cluster"]),
    }
    if "bearer.auth.identity.pool.id" in fields:
        headers["Confluent-Identity-Pool-Id"] = str(fields["bearer.auth.identity.pool.id"])
    return headers


class BearerFields(abc.ABC):
    """Gives the bearer fields of each request (``bearer.auth.token``,
    ``bearer.auth.logical.cluster``, ``bearer.auth.identity.pool.id``)."""

    @abc.abstractmethod
    async def get_bearer_fields_async(self) -> dict[str, Any]:
        """The fields for the next request (fetching a token if needed)."""


class _FetchedToken(BearerFields):
    """A token fetched from an endpoint, kept until 80% of its life is gone."""

    def __init__(
        self,
        logical_cluster: str,
        identity_pool: str | None,
        max_retries: int,
        retries_wait_ms: float,
        retries_max_wait_ms: float,
    ) -> None:
        self.logical_cluster = logical_cluster
        self.identity_pool = identity_pool
        self.max_retries = max_retries
        self.retries_wait_ms = retries_wait_ms
        self.retries_max_wait_ms = retries_max_wait_ms
        self.token = ""
        self.renew_at = 0.0

    @abc.abstractmethod
    async def fetch(self, http: Any) -> tuple[str, float]:
        """A new token and its life in seconds."""

    async def get_bearer_fields_async(self) -> dict[str, Any]:
        if not self.token or time.time() >= self.renew_at:
            await self._renew()
        fields = {
            "bearer.auth.token": self.token,
            "bearer.auth.logical.cluster": self.logical_cluster,
        }
        if self.identity_pool is not None:
            fields["bearer.auth.identity.pool.id"] = self.identity_pool
        return fields

    async def _renew(self) -> None:
        import httpx

        failures = 0
        async with httpx.AsyncClient() as http:
            while True:
                try:
                    token, life = await self.fetch(http)
                except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                    failures += 1
                    if failures > self.max_retries:
                        raise OAuthTokenError(
                            f"Failed to retrieve token after {self.max_retries} attempts "
                            f"due to error: {exc}"
                        ) from exc
                    wait = backoff_delay(
                        self.retries_wait_ms / 1000, self.retries_max_wait_ms / 1000, failures
                    )
                    await anyio.sleep(wait)
                    continue
                self.token, self.renew_at = token, time.time() + 0.8 * life
                return


class ClientCredentialsToken(_FetchedToken):
    """OAuth 2 client credentials (``bearer.auth.client.id``, ``.client.secret``,
    ``.scope``, ``.issuer.endpoint.url``), the client authenticated with HTTP
    basic authentication as RFC 6749 recommends."""

    def __init__(
        self,
        client_id: str,
        client_secret: str,
        scope: str,
        token_endpoint: str,
        logical_cluster: str,
        identity_pool: str | None = None,
        max_retries: int = 3,
        retries_wait_ms: float = 1000,
        retries_max_wait_ms: float = 20000,
    ) -> None:
        super().__init__(
            logical_cluster, identity_pool, max_retries, retries_wait_ms, retries_max_wait_ms
        )
        self.client_id = client_id
        self.client_secret = client_secret
        self.scope = scope
        self.token_endpoint = token_endpoint

    async def fetch(self, http: Any) -> tuple[str, float]:
        form = {"grant_type": "client_credentials", "scope": self.scope}
        answer = await http.post(
            self.token_endpoint, data=form, auth=(self.client_id, self.client_secret)
        )
        answer.raise_for_status()
        body = answer.json()
        return str(body["access_token"]), float(body.get("expires_in", 3600))


class AzureIMDSToken(_FetchedToken):
    """A managed identity's token from Azure's instance metadata service
    (``bearer.auth.issuer.endpoint.url`` with its query)."""

    def __init__(
        self,
        token_endpoint: str,
        logical_cluster: str,
        identity_pool: str | None = None,
        max_retries: int = 3,
        retries_wait_ms: float = 1000,
        retries_max_wait_ms: float = 20000,
    ) -> None:
        super().__init__(
            logical_cluster, identity_pool, max_retries, retries_wait_ms, retries_max_wait_ms
        )
        self.token_endpoint = token_endpoint

    async def fetch(self, http: Any) -> tuple[str, float]:
        answer = await http.get(self.token_endpoint, headers={"Metadata": "true"})
        answer.raise_for_status()
        body = answer.json()
        return str(body["access_token"]), float(body.get("expires_in", 3600))
