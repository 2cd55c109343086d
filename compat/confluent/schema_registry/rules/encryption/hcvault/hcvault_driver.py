"""The KMS driver of ``hcvault://`` key URLs: HashiCorp Vault clients made
from the rule's settings, else Vault's own environment variables.

Settings (and the environment variable each falls back to): ``token.id``
(VAULT_TOKEN), ``namespace`` (VAULT_NAMESPACE), ``approle.role.id`` /
``approle.secret.id`` (VAULT_APPROLE_ROLE_ID / VAULT_APPROLE_SECRET_ID),
``ssl.ca.location`` (VAULT_CACERT), ``ssl.certificate.location`` /
``ssl.key.location`` (VAULT_CLIENT_CERT / VAULT_CLIENT_KEY).

TLS is always verified: an empty CA location means the system's CAs, never
"do not verify" (which an empty string would mean to requests).
"""

from __future__ import annotations

import os
from typing import Any

from ..kms_driver_registry import KmsDriver, register_kms_driver
from .hcvault_client import HcVaultKmsClient

__all__ = ["HcVaultKmsDriver"]

_PREFIX = "hcvault://"


def _setting(conf: dict[str, Any], name: str, env: str) -> Any:
    value = conf.get(name)
    return os.getenv(env) if value is None else value


class HcVaultKmsDriver(KmsDriver):
    """Makes :class:`HcVaultKmsClient` s; ``HcVaultKmsDriver.register()`` adds it."""

    def get_key_url_prefix(self) -> str:
        return _PREFIX

    def new_kms_client(self, conf: dict[str, Any], key_url: str | None) -> Any:
        """A Vault client of ``key_url`` with ``conf``'s credentials and TLS settings.

        Raises:
            ValueError: a client key without a client certificate.
        """
        return HcVaultKmsClient(
            key_url if key_url is not None else _PREFIX,
            _setting(conf, "token.id", "VAULT_TOKEN"),
            _setting(conf, "namespace", "VAULT_NAMESPACE"),
            _setting(conf, "approle.role.id", "VAULT_APPROLE_ROLE_ID"),
            _setting(conf, "approle.secret.id", "VAULT_APPROLE_SECRET_ID"),
            self._get_verify(conf),
            self._get_cert(conf),
        )

    @staticmethod
    def _get_verify(conf: dict[str, Any]) -> bool | str:
        # An empty path is "not set" (see the module doc).
        return conf.get("ssl.ca.location") or os.getenv("VAULT_CACERT") or True

    @staticmethod
    def _get_cert(conf: dict[str, Any]) -> str | tuple[str, str] | None:
        cert = _setting(conf, "ssl.certificate.location", "VAULT_CLIENT_CERT")
        key = _setting(conf, "ssl.key.location", "VAULT_CLIENT_KEY")
        if key is not None and cert is None:
            raise ValueError("ssl.certificate.location required when configuring ssl.key.location")
        if cert is not None and key is not None:
            return (cert, key)
        return cert  # type: ignore[no-any-return]

    @classmethod
    def register(cls) -> None:
        """Add this driver to the process-wide list."""
        register_kms_driver(cls())
