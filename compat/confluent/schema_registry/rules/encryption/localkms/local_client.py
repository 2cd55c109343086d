"""A tink KMS client of ``local-kms://`` key URLs: every key is one AES-128-GCM
key derived from a secret (HKDF-SHA256, no salt, no info), as
confluent-kafka's local KMS derives it (so the two read each other's DEKs)."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from ..tink_base import KmsClientBase

__all__ = ["LocalKmsClient"]

_PREFIX = "local-kms://"


def derive_key(secret: str, length: int = 16) -> bytes:
    """HKDF-SHA256 (RFC 5869) of ``secret``: an all-zero salt, empty info."""
    prk = hmac.new(
        bytes(hashlib.sha256().digest_size), secret.encode("utf-8"), hashlib.sha256
    ).digest()
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


class LocalKmsClient(KmsClientBase):  # type: ignore[misc]
    """The local KMS client of ``secret``.

    Raises:
        TypeError: no secret.
    """

    def __init__(self, secret: str | None = None) -> None:
        if secret is None:
            raise TypeError("secret cannot be None")
        self._aead = self._primitive(derive_key(secret))

    @staticmethod
    def _primitive(key: bytes) -> Any:
        from tink import aead
        from tink.core import Registry
        from tink.proto import aes_gcm_pb2, tink_pb2

        aead.register()
        key_data = tink_pb2.KeyData(
            type_url=aead.aead_key_templates.AES128_GCM_RAW.type_url,
            value=aes_gcm_pb2.AesGcmKey(version=0, key_value=key).SerializeToString(),
            key_material_type=tink_pb2.KeyData.SYMMETRIC,
        )
        return Registry().primitive(key_data, aead.Aead)

    def does_support(self, key_uri: str) -> bool:
        """Whether ``key_uri`` is a local KMS key."""
        return key_uri.startswith(_PREFIX)

    def get_aead(self, key_uri: str) -> Any:
        """The AEAD of the secret's key (whatever the key's name)."""
        return self._aead
