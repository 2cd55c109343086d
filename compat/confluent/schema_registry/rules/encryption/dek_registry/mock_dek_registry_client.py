"""confluent-kafka's ``MockDekRegistryClient``: a DEK registry client keeping
its KEKs and DEKs in memory (its own: two clients share nothing), for tests."""

from __future__ import annotations

import time
from typing import Any

from ....error import SchemaRegistryError
from .dek_registry_client import (
    Dek,
    DekAlgorithm,
    DekId,
    DekRegistryClient,
    Kek,
    KekId,
    KekKmsProps,
)

__all__ = ["MockDekRegistryClient"]


def _not_found() -> SchemaRegistryError:
    return SchemaRegistryError(404, 40470, "Key Not Found")


class MockDekRegistryClient(DekRegistryClient):
    """An in-memory DEK registry (a ``mock://`` URL)."""

    def _open(self, conf: dict[str, Any]) -> Any:
        return None

    def register_kek(
        self,
        name: str,
        kms_type: str,
        kms_key_id: str,
        shared: bool = False,
        kms_props: dict[str, str] | None = None,
        doc: str | None = None,
        context: str | None = None,
    ) -> Kek:
        key = KekId(name, False, context)
        kek = self._kek_cache.get(key)
        if kek is None:
            props = None if kms_props is None else KekKmsProps.from_dict(kms_props)
            kek = Kek(name, kms_type, kms_key_id, props, doc, shared)
            self._kek_cache.set(key, kek)
        return kek  # type: ignore[no-any-return]

    def get_kek(self, name: str, deleted: bool = False, context: str | None = None) -> Kek:
        kek = self._kek_cache.get(KekId(name, deleted, context))
        if kek is None:
            raise _not_found()
        return kek  # type: ignore[no-any-return]

    def register_dek(
        self,
        kek_name: str,
        subject: str,
        encrypted_key_material: str | None,
        algorithm: DekAlgorithm = DekAlgorithm.AES256_GCM,
        version: int = 1,
    ) -> Dek:
        key = DekId(kek_name, subject, version, algorithm, False)
        dek = self._dek_cache.get(key)
        if dek is None:
            now = round(time.time() * 1000)
            dek = Dek(kek_name, subject, version, algorithm, encrypted_key_material, ts=now)
            self._dek_cache.set(key, dek)
        return dek  # type: ignore[no-any-return]

    def get_dek(
        self,
        kek_name: str,
        subject: str,
        algorithm: DekAlgorithm = DekAlgorithm.AES256_GCM,
        version: int = 1,
        deleted: bool = False,
    ) -> Dek:
        if version == -1:
            versions = [
                k.version
                for k in self._dek_cache.ids()
                if (k.kek_name, k.subject, k.algorithm) == (kek_name, subject, algorithm)
            ]
            if not versions:
                raise _not_found()
            version = max(versions)
        dek = self._dek_cache.get(DekId(kek_name, subject, version, algorithm, False))
        if dek is None:
            raise _not_found()
        return dek  # type: ignore[no-any-return]
