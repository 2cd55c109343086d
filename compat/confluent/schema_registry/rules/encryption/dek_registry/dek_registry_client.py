"""confluent-kafka's ``dek_registry_client``: the key-encryption keys (KEKs)
and data-encryption keys (DEKs) of field-level encryption, kept by the
Schema Registry's DEK registry (``/dek-registry/v1/keks...``).

:class:`DekRegistryClient` asks the registry over the same HTTP core as the
drop-in's :class:`SchemaRegistryClient` (the SDK's registry client: retries,
authentication, TLS) and keeps what it learns (a registered or fetched KEK or
DEK does not change). ``DekRegistryClient.new_client`` gives, for a
``mock://`` URL (or none), a :class:`MockDekRegistryClient` that keeps the
keys in memory.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import threading
from collections.abc import Generator
from typing import Any
from urllib.parse import quote

from ...._client_conf import read_conf
from ...._client_ops import Operations

__all__ = [
    "CreateDekRequest",
    "CreateKekRequest",
    "Dek",
    "DekAlgorithm",
    "DekId",
    "DekRegistryClient",
    "Kek",
    "KekId",
    "KekKmsProps",
]

_Op = Generator[tuple[str, str, Any, "dict[str, Any] | None"], Any, Any]


def _put(out: dict[str, Any], **fields: Any) -> dict[str, Any]:
    out.update({name: value for name, value in fields.items() if value is not None})
    return out


class KekKmsProps:
    """A KEK's KMS properties (name to value)."""

    def __init__(self) -> None:
        self.properties: dict[str, str] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KekKmsProps) and other.properties == self.properties

    def __repr__(self) -> str:
        return f"KekKmsProps(properties={self.properties!r})"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.properties)

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> KekKmsProps:
        props = cls()
        props.properties = dict(src_dict)
        return props


def _props(value: Any) -> KekKmsProps | None:
    return None if value is None else KekKmsProps.from_dict(value)


@dataclasses.dataclass
class CreateKekRequest:
    """The body of a KEK's registration."""

    name: str | None
    kms_type: str | None
    kms_key_id: str | None
    kms_props: KekKmsProps | None
    doc: str | None
    shared: bool | None

    def to_dict(self) -> dict[str, Any]:
        return _put(
            {},
            name=self.name,
            kmsType=self.kms_type,
            kmsKeyId=self.kms_key_id,
            kmsProps=None if self.kms_props is None else self.kms_props.to_dict(),
            doc=self.doc,
            shared=self.shared,
        )

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> CreateKekRequest:
        d = src_dict
        return cls(
            d.get("name"),
            d.get("kmsType"),
            d.get("kmsKeyId"),
            _props(d.get("kmsProps")),
            d.get("doc"),
            d.get("shared"),
        )


@dataclasses.dataclass
class Kek:
    """A key-encryption key: its name, the KMS (type and key id) holding it,
    whether the registry may use it (``shared``: the registry makes the DEKs)."""

    name: str | None
    kms_type: str | None
    kms_key_id: str | None
    kms_props: KekKmsProps | None
    doc: str | None
    shared: bool | None
    ts: int | None = None
    deleted: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        out = CreateKekRequest(
            self.name, self.kms_type, self.kms_key_id, self.kms_props, self.doc, self.shared
        ).to_dict()
        return _put(out, ts=self.ts, deleted=self.deleted)

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> Kek:
        req = CreateKekRequest.from_dict(src_dict)
        return cls(
            req.name,
            req.kms_type,
            req.kms_key_id,
            req.kms_props,
            req.doc,
            req.shared,
            src_dict.get("ts"),
            src_dict.get("deleted"),
        )


class DekAlgorithm(str, enum.Enum):  # noqa: UP042 (str() as confluent-kafka's)
    """A DEK's cipher: AES-GCM (128 or 256 bits) or AES-SIV (deterministic)."""

    AES128_GCM = "AES128_GCM"
    AES256_GCM = "AES256_GCM"
    AES256_SIV = "AES256_SIV"

    def __str__(self) -> str:
        return str(self.value)


def _algorithm(value: Any) -> DekAlgorithm | None:
    return None if value is None else DekAlgorithm(value)


@dataclasses.dataclass
class CreateDekRequest:
    """The body of a DEK's registration."""

    subject: str | None
    version: int | None
    algorithm: DekAlgorithm | None
    encrypted_key_material: str | None

    def to_dict(self) -> dict[str, Any]:
        return _put(
            {},
            subject=self.subject,
            version=self.version,
            algorithm=None if self.algorithm is None else self.algorithm.value,
            encryptedKeyMaterial=self.encrypted_key_material,
        )

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> CreateDekRequest:
        d = src_dict
        return cls(
            d.get("subject"),
            d.get("version"),
            _algorithm(d.get("algorithm")),
            d.get("encryptedKeyMaterial"),
        )


@dataclasses.dataclass
class Dek:
    """A data-encryption key of a KEK, subject and version: its key material
    encrypted by the KEK (base64), and in clear once known (base64)."""

    kek_name: str | None
    subject: str | None
    version: int | None
    algorithm: DekAlgorithm | None
    encrypted_key_material: str | None
    encrypted_key_material_bytes: bytes | None = dataclasses.field(
        default=None, init=False, compare=False, repr=False
    )
    key_material: str | None = None
    key_material_bytes: bytes | None = dataclasses.field(
        default=None, init=False, compare=False, repr=False
    )
    ts: int | None = None
    deleted: bool | None = None
    _lock: Any = dataclasses.field(
        default_factory=threading.Lock, init=False, compare=False, repr=False
    )

    def get_encrypted_key_material_bytes(self) -> bytes | None:
        """The encrypted key material, decoded."""
        if self.encrypted_key_material is None:
            return None
        with self._lock:
            if self.encrypted_key_material_bytes is None:
                self.encrypted_key_material_bytes = base64.b64decode(self.encrypted_key_material)
            return self.encrypted_key_material_bytes

    def get_key_material_bytes(self) -> bytes | None:
        """The key material in clear, decoded (None until known)."""
        if self.key_material is None:
            return None
        with self._lock:
            if self.key_material_bytes is None:
                self.key_material_bytes = base64.b64decode(self.key_material)
            return self.key_material_bytes

    def set_key_material(self, key_material_bytes: bytes | None) -> None:
        """Keep the key material in clear (None: forget it)."""
        with self._lock:
            self.key_material_bytes = None
            self.key_material = (
                None
                if key_material_bytes is None
                else base64.b64encode(key_material_bytes).decode("utf-8")
            )

    def to_dict(self) -> dict[str, Any]:
        out = CreateDekRequest(
            self.subject, self.version, self.algorithm, self.encrypted_key_material
        ).to_dict()
        out = _put({}, kekName=self.kek_name, **out)
        return _put(out, keyMaterial=self.key_material, ts=self.ts, deleted=self.deleted)

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> Dek:
        d = src_dict
        return cls(
            d.get("kekName"),
            d.get("subject"),
            d.get("version"),
            _algorithm(d.get("algorithm")),
            d.get("encryptedKeyMaterial"),
            key_material=d.get("keyMaterial"),
            ts=d.get("ts"),
            deleted=d.get("deleted"),
        )


@dataclasses.dataclass(frozen=True)
class KekId:
    """A KEK's cache key."""

    name: str
    deleted: bool
    context: str | None = None


@dataclasses.dataclass(frozen=True)
class DekId:
    """A DEK's cache key (version -1: the latest)."""

    kek_name: str
    subject: str
    version: int
    algorithm: DekAlgorithm
    deleted: bool


class _Cache:
    """What the client learnt (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        with self._lock:
            return self._entries.get(key)

    def set(self, key: Any, value: Any) -> None:
        with self._lock:
            self._entries[key] = value

    def remove(self, key: Any) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def ids(self) -> list[Any]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _seg(name: Any) -> str:
    return quote(str(name), safe="")


def _flag(value: bool) -> str:
    return "true" if value else "false"


class DekRegistryClient:
    """A client of the Schema Registry's DEK registry.

    Args:
        conf: the Schema Registry client's settings (``url``, authentication, TLS...).
    """

    def __init__(self, conf: dict[str, Any]) -> None:
        self._conf = conf
        self._kek_cache = _Cache()
        self._dek_cache = _Cache()
        self._rest: Any = self._open(conf)

    def _open(self, conf: dict[str, Any]) -> Any:
        from trafka.sdk.schemas import SchemaRegistryClient as SdkClient

        return SdkClient(read_conf(conf).registry)

    def __enter__(self) -> DekRegistryClient:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP connections."""
        if self._rest is not None:
            self._rest.close()

    def config(self) -> dict[str, Any]:
        """The settings the client was made with."""
        return self._conf

    def _call(self, op: _Op) -> Any:
        return Operations.run(op, self._rest)

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
        """Register the KEK ``name`` (in the registry context ``context``).

        Raises:
            SchemaRegistryError: the registry refused (409: another KEK of that name).
        """
        key = KekId(name, False, context)
        kek = self._kek_cache.get(key)
        if kek is None:
            kek = self._call(
                self._register_kek(name, kms_type, kms_key_id, shared, kms_props, doc, context)
            )
            self._kek_cache.set(key, kek)
        return kek  # type: ignore[no-any-return]

    @staticmethod
    def _register_kek(
        name: str,
        kms_type: str,
        kms_key_id: str,
        shared: bool,
        kms_props: dict[str, str] | None,
        doc: str | None,
        context: str | None,
    ) -> _Op:
        body = CreateKekRequest(
            name, kms_type, kms_key_id, _props(kms_props), doc, shared
        ).to_dict()
        query = None if context is None else {"context": context}
        answer = yield ("POST", "/dek-registry/v1/keks", body, query)
        return Kek.from_dict(answer)

    def get_kek(self, name: str, deleted: bool = False, context: str | None = None) -> Kek:
        """The KEK ``name``.

        Raises:
            SchemaRegistryError: none (404).
        """
        key = KekId(name, deleted, context)
        kek = self._kek_cache.get(key)
        if kek is None:
            kek = self._call(self._get_kek(name, deleted, context))
            self._kek_cache.set(key, kek)
        return kek  # type: ignore[no-any-return]

    @staticmethod
    def _get_kek(name: str, deleted: bool, context: str | None) -> _Op:
        query = {"deleted": _flag(deleted)}
        if context is not None:
            query["context"] = context
        answer = yield ("GET", f"/dek-registry/v1/keks/{_seg(name)}", None, query)
        return Kek.from_dict(answer)

    def register_dek(
        self,
        kek_name: str,
        subject: str,
        encrypted_key_material: str | None,
        algorithm: DekAlgorithm = DekAlgorithm.AES256_GCM,
        version: int = 1,
    ) -> Dek:
        """Register the DEK of ``kek_name``, ``subject`` and ``version``
        (without key material: a shared KEK's, which the registry makes).

        Raises:
            SchemaRegistryError: the registry refused (409: that version exists).
        """
        key = DekId(kek_name, subject, version, algorithm, False)
        dek = self._dek_cache.get(key)
        if dek is not None:
            return dek  # type: ignore[no-any-return]
        request = CreateDekRequest(subject, version, algorithm, encrypted_key_material)
        dek = self._create_dek(kek_name, request)
        self._dek_cache.set(key, dek)
        # the latest version changed (or another producer's won): ask again
        for deleted in (False, True):
            self._dek_cache.remove(DekId(kek_name, subject, -1, algorithm, deleted))
        return dek

    def _create_dek(self, kek_name: str, request: CreateDekRequest) -> Dek:
        from ....error import SchemaRegistryError

        if request.subject is None:
            raise TypeError("Subject cannot be None")
        base = f"/dek-registry/v1/keks/{_seg(kek_name)}/deks"
        try:
            return self._call(self._post(f"{base}/{_seg(request.subject)}", request.to_dict()))  # type: ignore[no-any-return]
        except SchemaRegistryError as exc:
            if exc.http_status_code != 405:
                raise
        # a registry without the subject in the path
        return self._call(self._post(base, request.to_dict()))  # type: ignore[no-any-return]

    @staticmethod
    def _post(path: str, body: dict[str, Any]) -> _Op:
        answer = yield ("POST", path, body, None)
        return Dek.from_dict(answer)

    def get_dek(
        self,
        kek_name: str,
        subject: str,
        algorithm: DekAlgorithm = DekAlgorithm.AES256_GCM,
        version: int = 1,
        deleted: bool = False,
    ) -> Dek:
        """The DEK of ``kek_name``, ``subject`` and ``version`` (-1: the latest).

        Raises:
            SchemaRegistryError: none (404).
        """
        key = DekId(kek_name, subject, version, algorithm, deleted)
        dek = self._dek_cache.get(key)
        if dek is None:
            path = f"/dek-registry/v1/keks/{_seg(kek_name)}/deks/{_seg(subject)}/versions/{version}"
            query = {"algorithm": str(algorithm), "deleted": _flag(deleted)}
            dek = self._call(self._get(path, query, Dek.from_dict))
            self._dek_cache.set(key, dek)
        return dek  # type: ignore[no-any-return]

    @staticmethod
    def _get(path: str, query: dict[str, Any], parse: Any) -> _Op:
        answer = yield ("GET", path, None, query)
        return parse(answer)

    @staticmethod
    def new_client(conf: dict[str, Any]) -> DekRegistryClient:
        """A client for ``conf``: an in-memory one for a ``mock://`` URL or none."""
        from .mock_dek_registry_client import MockDekRegistryClient

        url = conf.get("url")
        if url is None:
            return MockDekRegistryClient({"url": "mock://"})
        if isinstance(url, str) and url.startswith("mock://"):
            return MockDekRegistryClient(conf)
        return DekRegistryClient(conf)
