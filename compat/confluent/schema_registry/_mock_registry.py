"""The in-memory registry behind ``new_client()`` with a ``mock://`` URL, as
confluent-kafka's mock client behaves (for tests of serdes without a registry).

It answers the REST requests the clients' operations make (:mod:`._client_ops`),
so the clients' code is the same with it as with a real registry.

Rules (confluent-kafka's mock's):

* Each client has a registry of its own. A schema registered under a subject
  that does not hold it gets a new id (ids count from 1 for every
  registration, across subjects), a random GUID and the subject's next
  version; registering it again answers the same.
* A missing schema, version or subject is HTTP 404 with error code 40400
  ("Schema Not Found"). Deleting a subject forgets it and its ids; deleting a
  version answers the schema's id. ``get_config``/``set_config`` answer None.
* What the mock does not model (compatibility, modes, contexts,
  associations...) is refused with HTTP 404, error code 40400.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from trafka.sdk.schemas import SchemaRegistryError as SdkRegistryError

__all__ = ["AsyncMemoryRegistry", "MemoryRegistry"]


def _not_found(what: str = "Schema Not Found") -> SdkRegistryError:
    return SdkRegistryError(404, 40400, what)


class MemoryRegistry:
    """A registry in memory, answering :meth:`request` as the HTTP client does."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.max_id = 0
        # Per subject, the registered schemas (dicts as the registry answers them).
        self.subjects: dict[str, list[dict[str, Any]]] = {}
        self.by_id: dict[int, dict[str, Any]] = {}
        self.by_guid: dict[str, dict[str, Any]] = {}

    def close(self) -> None:
        """Nothing to close."""

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """The answer to ``method path`` (see the module doc)."""
        parts = [unquote(p) for p in path.strip("/").split("/")]
        query = dict(params or {})
        with self.lock:
            return self._answer(method, parts, body, query)

    def _answer(self, method: str, parts: list[str], body: Any, query: dict[str, Any]) -> Any:
        route = (method, parts[0], len(parts))
        if route == ("GET", "schemas", 3):
            index: Mapping[Any, dict[str, Any]] = self.by_guid
            key: Any = parts[2]
            if parts[1] == "ids":
                index, key = self.by_id, int(parts[2])
            if key not in index:
                raise _not_found()
            return index[key]
        if route == ("GET", "subjects", 1):
            return self._listed(list(self.subjects), query, query.get("subjectPrefix"))
        if parts[0] == "subjects" and len(parts) >= 2:
            return self._subject(method, parts[1], parts[2:], body, query)
        if route in (("GET", "config", 1), ("GET", "config", 2)):
            return None
        if route in (("PUT", "config", 1), ("PUT", "config", 2)):
            return None
        raise _not_found(f"the mock registry does not answer {method} /{'/'.join(parts)}")

    @staticmethod
    def _listed(items: list[Any], query: Mapping[str, Any], prefix: Any = None) -> list[Any]:
        if prefix is not None:
            items = [s for s in items if str(s).startswith(prefix)]
        offset, limit = int(query.get("offset", 0)), int(query.get("limit", -1))
        if offset > 0:
            items = items[offset:]
        return items[:limit] if limit >= 0 else items

    def _subject(
        self, method: str, subject: str, rest: list[str], body: Any, query: dict[str, Any]
    ) -> Any:
        held = self.subjects.get(subject, [])
        if method == "POST" and rest == ["versions"]:
            return self._register(subject, body)
        if method == "POST" and not rest:
            found = self._holding(held, body)
            if found is None:
                raise _not_found()
            return found
        if method == "DELETE" and not rest:
            for rs in self.subjects.pop(subject, []):
                self.by_id.pop(rs["id"], None)
            return [rs["version"] for rs in held]
        if method == "GET" and rest == ["versions"]:
            return self._listed([rs["version"] for rs in held], query)
        if method == "GET" and rest == ["metadata"]:
            return self._with_metadata(held, query)
        if len(rest) == 2 and rest[0] == "versions" and method in ("GET", "DELETE"):
            found = self._version(held, rest[1])
            if found is None:
                raise _not_found()
            if method == "DELETE":
                held.remove(found)
                return found["id"]
            return found
        raise _not_found(f"the mock registry does not answer {method} on a subject's {rest}")

    @staticmethod
    def _same(rs: dict[str, Any], schema: Mapping[str, Any]) -> bool:
        return all(rs.get(k) == v for k, v in schema.items())

    def _holding(
        self, held: list[dict[str, Any]], schema: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        return next((rs for rs in held if self._same(rs, schema)), None)

    @staticmethod
    def _version(held: list[dict[str, Any]], version: str) -> Any:
        if version == "latest":
            return max(held, key=lambda rs: rs["version"], default=None)
        return next((rs for rs in held if str(rs["version"]) == version), None)

    def _register(self, subject: str, schema: dict[str, Any]) -> dict[str, Any]:
        held = self.subjects.setdefault(subject, [])
        found = self._holding(held, schema)
        if found is not None:
            return found
        latest = self._version(held, "latest")
        self.max_id += 1
        rs = {
            **schema,
            "id": self.max_id,
            "guid": str(uuid.uuid4()),
            "subject": subject,
            "version": 1 if latest is None else latest["version"] + 1,
        }
        held.append(rs)
        self.by_id[rs["id"]] = self.by_guid[rs["guid"]] = rs
        return rs

    @staticmethod
    def _with_metadata(held: list[dict[str, Any]], query: Mapping[str, Any]) -> Any:
        wanted = dict(zip(query.get("key") or [], query.get("value") or [], strict=False))
        for rs in held:
            props = (rs.get("metadata") or {}).get("properties") or {}
            if wanted.items() <= props.items():
                return rs
        raise _not_found()


class AsyncMemoryRegistry(MemoryRegistry):
    """:class:`MemoryRegistry` for the async client (its requests awaited)."""

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        return MemoryRegistry.request(self, method, path, body, params)

    async def aclose(self) -> None:
        """Nothing to close."""
