"""A KMS client of HashiCorp Vault's transit engine (hvac), bound to one key:
``hcvault://<vault host:port>/<transit mount>/keys/<key name>``. Needs the
``rules`` extra (hvac, tink)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import hvac

from ..tink_base import KmsClientBase, tink_error

__all__ = ["VAULT_KEYURI_PREFIX", "HcVaultKmsClient"]

VAULT_KEYURI_PREFIX = "hcvault://"


class HcVaultKmsClient(KmsClientBase):  # type: ignore[misc]
    """A Vault client for one key's AEAD.

    Args:
        key_uri: the key (``hcvault://...``).
        token: the Vault token.
        ns: the Vault namespace.
        role_id, secret_id: AppRole credentials (logged in with when both are given).
        verify: check Vault's certificate (True), or a CA bundle's path to check it with.
        cert: a client certificate: a PEM path (with its key), or ``(cert, key)`` paths.

    Raises:
        tink.TinkError: not an ``hcvault://`` key URI.
    """

    def __init__(
        self,
        key_uri: str,
        token: str | None,
        ns: str | None = None,
        role_id: str | None = None,
        secret_id: str | None = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
    ) -> None:
        if not key_uri.startswith(VAULT_KEYURI_PREFIX):
            raise tink_error("Invalid key_uri.")
        self._key_uri = key_uri
        where = urlparse(key_uri[len(VAULT_KEYURI_PREFIX) :])
        self._client = hvac.Client(
            url=f"{where.scheme}://{where.netloc}",
            token=token,
            namespace=ns,
            verify=verify,
            cert=cert,
        )
        if role_id and secret_id:
            self._client.auth.approle.login(role_id=role_id, secret_id=secret_id)

    def does_support(self, key_uri: str) -> bool:
        """Whether this client serves ``key_uri`` (its own key)."""
        return key_uri == self._key_uri

    def get_aead(self, key_uri: str) -> Any:
        """The AEAD of the key (Vault's transit encrypt and decrypt).

        Raises:
            tink.TinkError: another key than this client's.
        """
        if key_uri != self._key_uri:
            raise tink_error(
                f"This client is bound to {self._key_uri} and cannot use key {key_uri}"
            )
        from tink.integration.hcvault import new_aead

        return new_aead(urlparse(key_uri[len(VAULT_KEYURI_PREFIX) :]).path, self._client)
