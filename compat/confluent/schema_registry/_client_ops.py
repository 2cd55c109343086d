"""The registry client's operations, written once for the blocking and the
async client: each is a generator that yields the HTTP requests it needs,
``(method, path, body, query)``, is sent each answer's JSON, and returns what
the client returns. :meth:`Operations.run` drives one on the SDK's blocking
client, :meth:`Operations.arun` on its async one (the one HTTP core: retries,
authentication, TLS).

Caching, as confluent-kafka 2.16 caches (tests count the requests):

* A schema is kept by (subject, id) and by GUID; a registered schema by
  (subject, schema) and (subject, version); what ``register_schema`` learns
  answers the next ``register_schema`` of the same schema, what
  ``lookup_schema`` and ``get_version`` learn their next calls.
* ``get_latest_version`` and ``get_latest_with_metadata`` are kept in caches
  of ``cache.capacity`` entries, for ``cache.latest.ttl.sec`` when set.
* A permanent ``delete_subject`` forgets the subject; ``delete_version`` that
  version. ``clear_caches`` forgets everything.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Generator
from typing import Any
from urllib.parse import quote

from trafka.sdk.schemas import SchemaRegistryError as SdkRegistryError
from trafka.sdk.schemas.registry_auth import OAuthTokenError as SdkOAuthTokenError

from .common.schema_registry_client import (
    Association,
    AssociationCreateOrUpdateRequest,
    AssociationResponse,
    RegisteredSchema,
    Schema,
    SchemaVersion,
    ServerConfig,
)
from .error import OAuthTokenError, SchemaRegistryError

__all__ = ["Operations", "Request"]

Request = tuple[str, str, Any, "dict[str, Any] | None"]
Op = Generator[Request, Any, Any]


def _seg(name: Any) -> str:
    return quote(str(name), safe="")


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _translated(exc: SdkRegistryError) -> BaseException:
    """confluent-kafka's error for the SDK's: the registry's refusal as a
    SchemaRegistryError; no answer (after the retries) as httpx's own error."""
    if isinstance(exc, SdkOAuthTokenError):
        return OAuthTokenError(exc.message, exc.status)
    if exc.status is None and exc.__cause__ is not None:
        return exc.__cause__
    status = -1 if exc.status is None else exc.status
    return SchemaRegistryError(status, exc.error_code, exc.message)


class _Latest:
    """A bounded cache (least recently used out first), entries living
    ``ttl`` seconds when it is set."""

    def __init__(self, capacity: int, ttl: float | None) -> None:
        self.capacity, self.ttl = max(capacity, 1), ttl
        self.entries: OrderedDict[Any, tuple[float, Any]] = OrderedDict()

    def get(self, key: Any) -> Any:
        hit = self.entries.get(key)
        if hit is None:
            return None
        if self.ttl is not None and time.monotonic() - hit[0] >= self.ttl:
            del self.entries[key]
            return None
        self.entries.move_to_end(key)
        return hit[1]

    def put(self, key: Any, value: Any) -> None:
        self.entries[key] = (time.monotonic(), value)
        self.entries.move_to_end(key)
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)


class _Caches:
    """The schema caches (see the module doc); thread-safe."""

    def __init__(self, capacity: int, ttl: float | None) -> None:
        self.lock = threading.Lock()
        self.capacity, self.ttl = capacity, ttl
        self.clear()

    def clear(self) -> None:
        with self.lock:
            self.by_id: defaultdict[Any, dict[Any, tuple[Any, Schema]]] = defaultdict(dict)
            self.by_guid: dict[str, Schema] = {}
            self.ids: defaultdict[Any, dict[Any, int]] = defaultdict(dict)
            self.by_version: defaultdict[Any, dict[Any, RegisteredSchema]] = defaultdict(dict)
            self.by_schema: defaultdict[Any, dict[Any, RegisteredSchema]] = defaultdict(dict)
        self.clear_latest()

    def clear_latest(self) -> None:
        with self.lock:
            self.latest = _Latest(self.capacity, self.ttl)
            self.latest_with_metadata = _Latest(self.capacity, self.ttl)

    def set_schema(self, subject: Any, schema_id: Any, guid: Any, schema: Schema) -> None:
        with self.lock:
            if schema_id is not None:
                self.by_id[subject][schema_id] = (guid, schema)
                self.ids[subject][schema] = schema_id
            if guid is not None:
                self.by_guid[guid] = schema

    def set_registered(self, schema: Schema, registered: RegisteredSchema) -> None:
        subject = registered.subject
        self.set_schema(subject, registered.schema_id, registered.guid, schema)
        with self.lock:
            self.by_version[subject][registered.version] = registered
            self.by_schema[subject][schema] = registered

    def get(self, index: str, subject: Any, key: Any) -> Any:
        with self.lock:
            table: dict[Any, dict[Any, Any]] = getattr(self, index)
            return table[subject].get(key) if subject in table else None

    def forget_subject(self, subject: str) -> None:
        with self.lock:
            for table in (self.by_id, self.ids, self.by_version, self.by_schema):
                table.pop(subject, None)

    def forget_version(self, subject: str, version: int) -> None:
        with self.lock:
            schemas = self.by_schema.get(subject, {})
            for schema in [s for s, r in schemas.items() if r.version == version]:
                del schemas[schema]
            gone = self.by_version.get(subject, {}).pop(version, None)
            if gone is not None:
                self.by_id.get(subject, {}).pop(gone.schema_id, None)
                self.ids.get(subject, {}).pop(gone.schema, None)


class _NoCaches(_Caches):
    """Caches that keep nothing (the mock clients': their registry is in memory)."""

    def set_schema(self, subject: Any, schema_id: Any, guid: Any, schema: Schema) -> None:
        pass

    def set_registered(self, schema: Schema, registered: RegisteredSchema) -> None:
        pass

    def clear_latest(self) -> None:
        with self.lock:
            self.latest = self.latest_with_metadata = _Latest(0, 0.0)


def _config_path(subject_name: str | None, root: str = "/config") -> str:
    return root if subject_name is None else f"{root}/{_seg(subject_name)}"


class Operations:
    """Every operation of confluent-kafka's registry clients (see the module doc)."""

    def __init__(
        self, cache_capacity: int, cache_latest_ttl_sec: float | None, cached: bool = True
    ) -> None:
        kind = _Caches if cached else _NoCaches
        self.cache = kind(cache_capacity, cache_latest_ttl_sec)

    # -- drivers ------------------------------------------------------------------------

    @staticmethod
    def run(op: Op, client: Any) -> Any:
        """Drive ``op`` on the SDK's blocking client."""
        try:
            request = next(op)
            while True:
                try:
                    answer = client.request(*request)
                except SdkRegistryError as exc:
                    raise _translated(exc) from None
                request = op.send(answer)
        except StopIteration as stop:
            return stop.value

    @staticmethod
    async def arun(op: Op, client: Any) -> Any:
        """Drive ``op`` on the SDK's async client."""
        try:
            request = next(op)
            while True:
                try:
                    answer = await client.request(*request)
                except SdkRegistryError as exc:
                    raise _translated(exc) from None
                request = op.send(answer)
        except StopIteration as stop:
            return stop.value

    # -- schemas ------------------------------------------------------------------------

    def register_schema_full_response(
        self, subject_name: str, schema: Schema, normalize_schemas: bool = False
    ) -> Op:
        schema_id = self.cache.get("ids", subject_name, schema)
        if schema_id is not None:
            hit = self.cache.get("by_id", subject_name, schema_id)
            if hit is not None:
                return RegisteredSchema(subject_name, None, schema_id, hit[0], hit[1])
        body = schema.to_dict()
        query = {"normalize": _flag(normalize_schemas)}
        answer = yield ("POST", f"/subjects/{_seg(subject_name)}/versions", body, query)
        got = RegisteredSchema.from_dict(answer)
        registered = RegisteredSchema(
            got.subject or subject_name, got.version, got.schema_id, got.guid, got.schema
        )
        kept = registered.schema if registered.schema.schema_str is not None else schema
        self.cache.set_schema(subject_name, registered.schema_id, registered.guid, kept)
        return registered

    def get_schema(
        self,
        schema_id: int,
        subject_name: str | None = None,
        fmt: str | None = None,
        reference_format: str | None = None,
    ) -> Op:
        hit = self.cache.get("by_id", subject_name, schema_id)
        if hit is not None:
            return hit[1]
        query = {
            k: v
            for k, v in (
                ("subject", subject_name),
                ("format", fmt),
                ("reference_format", reference_format),
            )
            if v is not None
        }
        answer = yield ("GET", f"/schemas/ids/{schema_id}", None, query)
        registered = RegisteredSchema.from_dict(answer)
        self.cache.set_schema(subject_name, schema_id, registered.guid, registered.schema)
        if subject_name is not None:
            self.cache.set_registered(registered.schema, registered)
        return registered.schema

    def get_schema_by_guid(self, guid: str, fmt: str | None = None) -> Op:
        with self.cache.lock:
            hit = self.cache.by_guid.get(guid)
        if hit is not None:
            return hit
        query = {"format": fmt} if fmt is not None else {}
        answer = yield ("GET", f"/schemas/guids/{_seg(guid)}", None, query)
        registered = RegisteredSchema.from_dict(answer)
        self.cache.set_schema(None, registered.schema_id, registered.guid, registered.schema)
        return registered.schema

    def get_schema_types(self) -> Op:
        return (yield ("GET", "/schemas/types", None, None))

    @staticmethod
    def _listing(
        subject_name: str | None, deleted: bool, offset: int, limit: int
    ) -> dict[str, Any]:
        query: dict[str, Any] = {"offset": offset, "limit": limit}
        if subject_name is not None:
            query["subject"] = subject_name
        if deleted:
            query["deleted"] = "true"
        return query

    def get_subjects_by_schema_id(
        self,
        schema_id: int,
        subject_name: str | None = None,
        deleted: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> Op:
        query = self._listing(subject_name, deleted, offset, limit)
        return (yield ("GET", f"/schemas/ids/{schema_id}/subjects", None, query))

    def get_schema_versions(
        self,
        schema_id: int,
        subject_name: str | None = None,
        deleted: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> Op:
        query = self._listing(subject_name, deleted, offset, limit)
        answer = yield ("GET", f"/schemas/ids/{schema_id}/versions", None, query)
        return [SchemaVersion.from_dict(item) for item in answer]

    def lookup_schema(
        self,
        subject_name: str,
        schema: Schema,
        normalize_schemas: bool = False,
        fmt: str | None = None,
        deleted: bool = False,
    ) -> Op:
        hit = self.cache.get("by_schema", subject_name, schema)
        if hit is not None:
            return hit
        body = schema.to_dict()
        query = {"normalize": _flag(normalize_schemas), "deleted": _flag(deleted)}
        if fmt is not None:
            query["format"] = fmt
        answer = yield ("POST", f"/subjects/{_seg(subject_name)}", body, query)
        got = RegisteredSchema.from_dict(answer)
        registered = RegisteredSchema(got.subject, got.version, got.schema_id, got.guid, schema)
        self.cache.set_registered(schema, registered)
        return registered

    # -- subjects and versions -----------------------------------------------------------

    def get_subjects(
        self,
        subject_prefix: str | None = None,
        deleted: bool = False,
        deleted_only: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> Op:
        query: dict[str, Any] = {
            "deleted": _flag(deleted),
            "deleted_only": _flag(deleted_only),
            "offset": offset,
            "limit": limit,
        }
        if subject_prefix is not None:
            query["subjectPrefix"] = subject_prefix
        return (yield ("GET", "/subjects", None, query))

    def delete_subject(self, subject_name: str, permanent: bool = False) -> Op:
        query = {"permanent": "true"} if permanent else None
        versions = yield ("DELETE", f"/subjects/{_seg(subject_name)}", None, query)
        if permanent:
            self.cache.forget_subject(subject_name)
        return versions

    def get_latest_version(self, subject_name: str, fmt: str | None = None) -> Op:
        with self.cache.lock:
            hit = self.cache.latest.get(subject_name)
        if hit is not None:
            return hit
        query = {"format": fmt} if fmt is not None else None
        answer = yield ("GET", f"/subjects/{_seg(subject_name)}/versions/latest", None, query)
        registered = RegisteredSchema.from_dict(answer)
        with self.cache.lock:
            self.cache.latest.put(subject_name, registered)
        return registered

    def get_latest_with_metadata(
        self,
        subject_name: str,
        metadata: dict[str, str],
        deleted: bool = False,
        fmt: str | None = None,
    ) -> Op:
        key = (subject_name, frozenset(metadata.items()), deleted)
        with self.cache.lock:
            hit = self.cache.latest_with_metadata.get(key)
        if hit is not None:
            return hit
        query: dict[str, Any] = {"deleted": _flag(deleted)}
        if fmt is not None:
            query["format"] = fmt
        if metadata:
            query["key"] = list(metadata)
            query["value"] = list(metadata.values())
        answer = yield ("GET", f"/subjects/{_seg(subject_name)}/metadata", None, query)
        registered = RegisteredSchema.from_dict(answer)
        with self.cache.lock:
            self.cache.latest_with_metadata.put(key, registered)
        return registered

    def get_version(
        self,
        subject_name: str,
        version: int | str = "latest",
        deleted: bool = False,
        fmt: str | None = None,
    ) -> Op:
        if version != "latest":
            hit = self.cache.get("by_version", subject_name, version)
            if hit is not None:
                return hit
        query: dict[str, Any] = {"deleted": _flag(deleted)}
        if fmt is not None:
            query["format"] = fmt
        path = f"/subjects/{_seg(subject_name)}/versions/{_seg(version)}"
        registered = RegisteredSchema.from_dict((yield ("GET", path, None, query)))
        self.cache.set_registered(registered.schema, registered)
        return registered

    def get_referenced_by(
        self, subject_name: str, version: int | str = "latest", offset: int = 0, limit: int = -1
    ) -> Op:
        path = f"/subjects/{_seg(subject_name)}/versions/{_seg(version)}/referencedby"
        return (yield ("GET", path, None, {"offset": offset, "limit": limit}))

    def get_versions(
        self,
        subject_name: str,
        deleted: bool = False,
        deleted_only: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> Op:
        query: dict[str, Any] = {
            "deleted": _flag(deleted),
            "deleted_only": _flag(deleted_only),
            "offset": offset,
            "limit": limit,
        }
        return (yield ("GET", f"/subjects/{_seg(subject_name)}/versions", None, query))

    def delete_version(self, subject_name: str, version: int, permanent: bool = False) -> Op:
        query = {"permanent": "true"} if permanent else None
        path = f"/subjects/{_seg(subject_name)}/versions/{_seg(version)}"
        answer = yield ("DELETE", path, None, query)
        self.cache.forget_version(subject_name, version)
        return answer

    # -- compatibility, config and mode --------------------------------------------------

    def set_compatibility(self, subject_name: str | None = None, level: str | None = None) -> Op:
        if level is None:
            raise ValueError("level must be set")
        body = {"compatibility": str(level).upper()}
        return (yield ("PUT", _config_path(subject_name), body, None))

    def get_compatibility(self, subject_name: str | None = None) -> Op:
        answer = yield ("GET", _config_path(subject_name), None, None)
        return answer["compatibilityLevel"]

    def test_compatibility(
        self,
        subject_name: str,
        schema: Schema,
        version: int | str = "latest",
        normalize: bool = False,
        verbose: bool = False,
    ) -> Op:
        path = f"/compatibility/subjects/{_seg(subject_name)}/versions/{_seg(version)}"
        query = {"normalize": _flag(normalize), "verbose": _flag(verbose)}
        answer = yield ("POST", path, schema.to_dict(), query)
        return answer["is_compatible"]

    def test_compatibility_all_versions(
        self, subject_name: str, schema: Schema, normalize: bool = False, verbose: bool = False
    ) -> Op:
        path = f"/compatibility/subjects/{_seg(subject_name)}/versions"
        query = {"normalize": _flag(normalize), "verbose": _flag(verbose)}
        answer = yield ("POST", path, schema.to_dict(), query)
        return answer["is_compatible"]

    def set_config(self, subject_name: str | None = None, config: ServerConfig | None = None) -> Op:
        if config is None:
            raise ValueError("config must be set")
        return (yield ("PUT", _config_path(subject_name), config.to_dict(), None))

    def delete_config(self, subject_name: str | None = None) -> Op:
        answer = yield ("DELETE", _config_path(subject_name), None, None)
        return None if answer is None else ServerConfig.from_dict(answer)

    def get_config(self, subject_name: str | None = None) -> Op:
        answer = yield ("GET", _config_path(subject_name), None, None)
        return None if answer is None else ServerConfig.from_dict(answer)

    def get_mode(self, subject_name: str) -> Op:
        return (yield ("GET", _config_path(subject_name, "/mode"), None, None))["mode"]

    def update_mode(self, subject_name: str, mode: str, force: bool = False) -> Op:
        path, query = _config_path(subject_name, "/mode"), {"force": _flag(force)}
        return (yield ("PUT", path, {"mode": mode}, query))["mode"]

    def delete_mode(self, subject_name: str) -> Op:
        return (yield ("DELETE", _config_path(subject_name, "/mode"), None, None))["mode"]

    def get_global_mode(self) -> Op:
        return (yield ("GET", "/mode", None, None))["mode"]

    def update_global_mode(self, mode: str, force: bool = False) -> Op:
        return (yield ("PUT", "/mode", {"mode": mode}, {"force": _flag(force)}))["mode"]

    def get_contexts(self, offset: int = 0, limit: int = -1) -> Op:
        return (yield ("GET", "/contexts", None, {"offset": offset, "limit": limit}))

    # -- associations ---------------------------------------------------------------------

    def get_associations_by_resource_name(
        self,
        resource_name: str,
        resource_namespace: str,
        resource_type: str | None = None,
        association_types: list[str] | None = None,
        offset: int = 0,
        limit: int = -1,
    ) -> Op:
        query: dict[str, Any] = {}
        if resource_type is not None:
            query["resourceType"] = resource_type
        if association_types is not None:
            query["associationType"] = association_types
        if offset > 0:
            query["offset"] = offset
        if limit >= 1:
            query["limit"] = limit
        path = f"/associations/resources/{_seg(resource_namespace)}/{_seg(resource_name)}"
        return [Association.from_dict(a) for a in (yield ("GET", path, None, query))]

    def create_association(self, request: AssociationCreateOrUpdateRequest) -> Op:
        answer = yield ("POST", "/associations", request.to_dict(), None)
        return AssociationResponse.from_dict(answer)

    def delete_associations(
        self,
        resource_id: str,
        resource_type: str | None = None,
        association_types: list[str] | None = None,
        cascade_lifecycle: bool = False,
    ) -> Op:
        query: dict[str, Any] = {"cascadeLifecycle": _flag(cascade_lifecycle)}
        if resource_type is not None:
            query["resourceType"] = resource_type
        if association_types is not None:
            query["associationType"] = association_types
        yield ("DELETE", f"/associations/resources/{_seg(resource_id)}", None, query)
