"""The registry's DEK registry (``/dek-registry/v1/keks...``): the
key-encryption keys (KEKs) and data-encryption keys (DEKs) of client-side
field-level encryption, as Confluent's server keeps them for its clients.

The keys are records of the ``_schemas`` topic, as the schemas are:

=============================================================================  ===========================
key                                                                            value (None: a tombstone)
=============================================================================  ===========================
``{"context":C,"keytype":"KEK","magic":0,"name":N,"writer":W}``                the KEK's JSON (with ``ts``)
``{"algorithm":A,"context":C,"kekName":N,"keytype":"DEK","magic":0,``          the DEK's JSON (with ``ts``)
``"subject":S,"version":V,"writer":W}``
=============================================================================  ===========================

The first record of a KEK (a DEK version) holds it; a later one of another
writer is refused (every node refuses the same), and the request that wrote
it is answered 409 as a registration of an existing key is.

The registry keeps the encrypted key material a client sends; it reaches no
KMS, so it does not make the DEKs of a shared KEK (a DEK without key
material is refused with 422).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .errors import ApiError, flag

__all__ = ["KeyState", "routes"]

_ALGORITHMS = ("AES128_GCM", "AES256_GCM", "AES256_SIV")
_KEK_FIELDS = ("name", "kmsType", "kmsKeyId", "kmsProps", "doc", "shared")

Records = list[tuple[bytes, bytes | None]]
Write = Callable[[Callable[[], tuple[Records, Any]]], Awaitable[Any]]


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _now() -> int:
    return int(time.time() * 1000)


class KeyState:
    """The KEKs and DEKs the topic's records give (no I/O)."""

    def __init__(self) -> None:
        # (context, name) -> (holding key, KEK)
        self.keks: dict[tuple[str | None, str], tuple[bytes, dict[str, Any]]] = {}
        # (context, kek, subject, algorithm, version) -> (holding key, DEK)
        self.deks: dict[tuple[Any, ...], tuple[bytes, dict[str, Any]]] = {}

    def apply(self, key: bytes, parsed_key: dict[str, Any], value: Any) -> bool:
        """Apply a KEK or DEK record; False when refused."""
        if parsed_key.get("keytype") == "KEK":
            table: dict[Any, tuple[bytes, dict[str, Any]]] = self.keks
            where: tuple[Any, ...] = (parsed_key.get("context"), str(parsed_key.get("name")))
        else:
            table = self.deks
            where = _dek_where(parsed_key)
        held = table.get(where)
        if held is not None and held[0] != key:
            return False
        if value is None:
            if held is None:
                return False
            del table[where]
        elif isinstance(value, dict):
            table[where] = (key, value)
        else:
            return False
        return True

    def kek(self, context: str | None, name: str, deleted: bool = False) -> dict[str, Any] | None:
        held = self.keks.get((context, name))
        if held is None or (held[1].get("deleted") and not deleted):
            return None
        return held[1]

    def dek_versions(
        self, context: str | None, kek: str, subject: str, algorithm: str, deleted: bool = False
    ) -> dict[int, dict[str, Any]]:
        return {
            where[4]: dek
            for where, (_, dek) in sorted(self.deks.items(), key=lambda item: item[0][4])
            if where[:4] == (context, kek, subject, algorithm)
            and (deleted or not dek.get("deleted"))
        }


def _dek_where(parsed_key: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        parsed_key.get("context"),
        str(parsed_key.get("kekName")),
        str(parsed_key.get("subject")),
        str(parsed_key.get("algorithm")),
        int(parsed_key.get("version", 0)),
    )


def _not_found(what: str) -> ApiError:
    return ApiError(404, 40470, f"Key '{what}' not found")


def _exists(what: str) -> ApiError:
    return ApiError(409, 40972, f"Key '{what}' already exists")


class _Api:
    """The DEK registry's requests over one node's state and writes."""

    def __init__(self, keys: KeyState, write: Write, writer: int) -> None:
        self.keys, self.write, self.writer = keys, write, writer

    # KEKs

    def list_keks(self, query: Mapping[str, str], body: Any) -> Any:
        context, deleted = query.get("context"), flag(query, "deleted")
        return sorted(
            name
            for (ctx, name) in self.keys.keks
            if ctx == context and self.keys.kek(ctx, name, deleted) is not None
        )

    def get_kek(self, name: str, query: Mapping[str, str]) -> Any:
        kek = self.keys.kek(query.get("context"), name, flag(query, "deleted"))
        if kek is None:
            raise _not_found(name)
        return kek

    async def create_kek(self, query: Mapping[str, str], body: Any) -> Any:
        if not isinstance(body, dict) or not body.get("name"):
            raise ApiError(422, 42271, "Invalid key: a name is required")
        if not body.get("kmsType") or not body.get("kmsKeyId"):
            raise ApiError(422, 42271, "Invalid key: kmsType and kmsKeyId are required")
        context, name = query.get("context"), str(body["name"])
        kek = {field: body[field] for field in _KEK_FIELDS if body.get(field) is not None}
        kek["shared"] = bool(body.get("shared", False))
        kek["ts"], kek["deleted"] = _now(), False
        key = _dumps(
            {
                "keytype": "KEK",
                "magic": 0,
                "name": name,
                "context": context,
                "writer": self.writer,
            }
        )

        def decide() -> tuple[Records, Any]:
            if self.keys.kek(context, name, deleted=True) is not None:
                raise _exists(name)
            return [(key, _dumps(kek))], None

        await self.write(decide)
        held = self.keys.keks.get((context, name))
        if held is None or held[0] != key:  # another node's came first
            raise _exists(name)
        return held[1]

    # DEKs

    def list_deks(self, kek_name: str, query: Mapping[str, str]) -> Any:
        context = query.get("context")
        deleted = flag(query, "deleted")
        if self.keys.kek(context, kek_name, deleted=True) is None:
            raise _not_found(kek_name)
        return sorted(
            {
                where[2]
                for where, (_, dek) in self.keys.deks.items()
                if where[:2] == (context, kek_name) and (deleted or not dek.get("deleted"))
            }
        )

    def dek_versions(self, kek_name: str, subject: str, query: Mapping[str, str]) -> Any:
        context = query.get("context")
        algorithm = query.get("algorithm") or "AES256_GCM"
        found = self.keys.dek_versions(
            context, kek_name, subject, algorithm, flag(query, "deleted")
        )
        if not found:
            raise _not_found(f"{kek_name}/{subject}")
        return sorted(found)

    def get_dek(self, kek_name: str, subject: str, version: str, query: Mapping[str, str]) -> Any:
        context = query.get("context")
        algorithm = query.get("algorithm") or "AES256_GCM"
        found = self.keys.dek_versions(
            context, kek_name, subject, algorithm, flag(query, "deleted")
        )
        try:
            number = -1 if version == "latest" else int(version)
        except ValueError:
            raise ApiError(422, 42202, f"Invalid version {version}") from None
        if number == -1 and found:
            number = max(found)
        if number not in found:
            raise _not_found(f"{kek_name}/{subject}/{version}")
        return found[number]

    async def create_dek(self, kek_name: str, subject: str | None, query: Any, body: Any) -> Any:
        context = query.get("context")
        if not isinstance(body, dict):
            raise ApiError(422, 42271, "Invalid key: the body is not an object")
        subject = subject or body.get("subject")
        algorithm = str(body.get("algorithm") or "AES256_GCM")
        version = int(body.get("version") or 1)
        if not subject:
            raise ApiError(422, 42271, "Invalid key: a subject is required")
        if algorithm not in _ALGORITHMS:
            raise ApiError(422, 42271, f"Invalid key: unknown algorithm {algorithm}")
        if not body.get("encryptedKeyMaterial"):
            raise ApiError(
                422, 42271, "Invalid key: this registry reaches no KMS, send encryptedKeyMaterial"
            )
        where = {
            "keytype": "DEK",
            "magic": 0,
            "kekName": kek_name,
            "subject": subject,
            "algorithm": algorithm,
            "version": version,
            "context": context,
        }
        key = _dumps({**where, "writer": self.writer})
        dek = {
            "kekName": kek_name,
            "subject": subject,
            "version": version,
            "algorithm": algorithm,
            "encryptedKeyMaterial": body["encryptedKeyMaterial"],
            "ts": _now(),
            "deleted": False,
        }
        what = f"{kek_name}/{subject}/{version}"

        def decide() -> tuple[Records, Any]:
            if self.keys.kek(context, kek_name) is None:
                raise _not_found(kek_name)
            if version in self.keys.dek_versions(context, kek_name, subject, algorithm, True):
                raise _exists(what)
            return [(key, _dumps(dek))], None

        await self.write(decide)
        held = self.keys.deks.get(_dek_where(where))
        if held is None or held[0] != key:
            raise _exists(what)
        return held[1]


def routes(
    keys: KeyState, write: Write, writer: int, seg: list[str]
) -> dict[tuple[str, ...], Callable[..., Any]]:
    """The routes of ``/dek-registry/v1/<seg...>`` (empty: none)."""
    api, n = _Api(keys, write, writer), len(seg)
    if n == 0 or seg[0] != "keks":
        return {}
    if n == 1:
        return {("GET",): api.list_keks, ("POST",): api.create_kek}
    name = seg[1]
    if n == 2:
        return {("GET",): lambda q, b: api.get_kek(name, q)}
    if seg[2] != "deks":
        return {}
    if n == 3:
        return {
            ("GET",): lambda q, b: api.list_deks(name, q),
            ("POST",): lambda q, b: api.create_dek(name, None, q, b),
        }
    subject = seg[3]
    if n == 4:
        return {
            ("GET",): lambda q, b: api.get_dek(name, subject, "latest", q),
            ("POST",): lambda q, b: api.create_dek(name, subject, q, b),
        }
    if seg[4] != "versions":
        return {}
    if n == 5:
        return {("GET",): lambda q, b: api.dek_versions(name, subject, q)}
    if n == 6:
        return {("GET",): lambda q, b: api.get_dek(name, subject, seg[5], q)}
    return {}
