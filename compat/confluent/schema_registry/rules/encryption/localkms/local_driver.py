"""The KMS driver of ``local-kms://`` key URLs: a :class:`LocalKmsClient` of the
rule's ``secret`` setting, else of the ``LOCAL_SECRET`` environment variable."""

from __future__ import annotations

import os
from typing import Any

from ..kms_driver_registry import KmsDriver, register_kms_driver
from ..tink_base import tink_error
from .local_client import LocalKmsClient

__all__ = ["LocalKmsDriver"]

_PREFIX = "local-kms://"


class LocalKmsDriver(KmsDriver):
    """Makes :class:`LocalKmsClient` s; ``LocalKmsDriver.register()`` adds it."""

    def get_key_url_prefix(self) -> str:
        return _PREFIX

    def new_kms_client(self, conf: dict[str, Any], key_url: str | None) -> Any:
        """The local KMS client of the secret.

        Raises:
            tink.TinkError: no secret set.
        """
        secret = conf.get("secret")
        if secret is None:
            secret = os.getenv("LOCAL_SECRET")
        if secret is None:
            raise tink_error("cannot load secret")
        return LocalKmsClient(secret)

    @classmethod
    def register(cls) -> None:
        """Add this driver to the process-wide list."""
        register_kms_driver(cls())
