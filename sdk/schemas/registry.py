"""An async client of Confluent's Schema Registry REST API (httpx).

Rules:

* Caching, so that serdes make no request per record: a schema by id or GUID
  is fetched once (ids are immutable); a schema registered or looked up under
  a subject is asked once; a subject's versions once; its latest version until
  ``latest.cache.ttl.secs`` passes (default: for the client's life).
  :meth:`clear_caches` forgets them all.
* Retries: a connection error, a timeout, or HTTP 408, 429 or 5xx is tried
  again, on the next URL of ``url`` if there are several, after a doubling
  backoff, at most ``max.retries`` more times; any other answer is final.
* Errors: every failure is a :class:`~.types.SchemaRegistryError` with the
  registry's ``error_code`` and message (or why there was none: unreachable,
  a timeout, an answer that is not JSON), and what was asked; when no answer
  came, httpx's error of the last attempt is its ``__cause__``.
* :attr:`requests` counts the HTTP requests sent (each attempt counts).
"""

from __future__ import annotations

import inspect
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import anyio

from .._backoff import backoff_delay
from .registry_config import RegistryConfig
from .types import MissingExtraError, RegisteredSchema, Schema, SchemaRegistryError

__all__ = ["AsyncSchemaRegistryClient", "open_schema_registry"]

_RETRIABLE = {408, 429, 500, 502, 503, 504}
_CONTENT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise MissingExtraError(
            "the schema registry client needs httpx: pip install 'trafka[schemas]'"
        ) from None
    return httpx


def _seg(name: str) -> str:
    return quote(name, safe="")


class AsyncSchemaRegistryClient:
    """A Schema Registry client for trio or asyncio (through anyio).

    Open it with :func:`open_schema_registry` (or ``async with``), or create it
    and ``await aclose()`` it.

    Args:
        conf: Confluent's settings (``url``, ``basic.auth.user.info``, ...; see
            :class:`~.registry_config.RegistryConfig`), or a RegistryConfig.
        clock: seconds, monotonic; for the latest version's cache (tests inject one).
    """

    def __init__(
        self,
        conf: Mapping[str, Any] | RegistryConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = conf if isinstance(conf, RegistryConfig) else RegistryConfig.from_dict(conf)
        httpx = _httpx()
        verify: Any = self.config.ssl_context if self.config.ssl_context is not None else True
        self._http = httpx.AsyncClient(
            headers=dict(self.config.headers),
            verify=verify,
            timeout=self.config.timeout,
            proxy=self.config.proxy,
        )
        self._clock = clock
        self.requests = 0
        self._by_id: dict[tuple[int, str | None], Schema] = {}
        self._by_guid: dict[uuid.UUID, Schema] = {}
        self._registered: dict[tuple[str, Schema, bool], RegisteredSchema] = {}
        self._looked_up: dict[tuple[str, Schema, bool], RegisteredSchema] = {}
        self._versions: dict[tuple[str, int], RegisteredSchema] = {}
        self._latest: dict[str, tuple[float, RegisteredSchema]] = {}

    async def __aenter__(self) -> AsyncSchemaRegistryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._http.aclose()

    def clear_caches(self) -> None:
        """Forget every cached answer."""
        for cache in (self._by_id, self._by_guid, self._registered, self._looked_up):
            cache.clear()
        self._versions.clear()
        self._latest.clear()

    # -- HTTP ---------------------------------------------------------------------------

    async def request(
        self, method: str, path: str, body: Any = None, params: Mapping[str, Any] | None = None
    ) -> Any:
        """Send ``method path`` (retrying as the module doc says); the answer's JSON
        (None for an answer without a body, e.g. 204).

        Raises:
            SchemaRegistryError: the registry's error, or none reachable.
        """
        httpx = _httpx()
        what = f"{method} {path}"
        content = None if body is None else json.dumps(body).encode("utf-8")
        cfg = self.config
        headers = dict(_CONTENT) if body is not None else {}
        if cfg.header_provider is not None:
            extra = cfg.header_provider()
            if inspect.isawaitable(extra):
                extra = await extra
            headers.update(extra)
        failures = 0
        while True:
            base = cfg.urls[failures % len(cfg.urls)]
            self.requests += 1
            try:
                answer = await self._http.request(
                    method, base + path, content=content, params=params, headers=headers or None
                )
            except httpx.TimeoutException as exc:
                why = f"no answer from {base}: timeout ({_why(exc)})"
                error = SchemaRegistryError(None, -1, why, what)
                error.__cause__ = exc
            except httpx.TransportError as exc:
                error = SchemaRegistryError(None, -1, f"{base} unreachable: {_why(exc)}", what)
                error.__cause__ = exc
            else:
                if answer.status_code < 300:
                    return _json(answer, what)
                error = _error(answer, what)
                if answer.status_code not in _RETRIABLE:
                    raise error
            failures += 1
            if failures > cfg.max_retries:
                raise error
            delay = backoff_delay(
                cfg.retries_wait_ms / 1000, cfg.retries_max_wait_ms / 1000, failures
            )
            await anyio.sleep(delay)

    # -- schemas --------------------------------------------------------------------------

    async def register_schema(
        self, subject: str, schema: Schema, normalize: bool = False
    ) -> RegisteredSchema:
        """Register ``schema`` under ``subject`` (or find it registered); its id."""
        key = (subject, schema, normalize)
        hit = self._registered.get(key)
        if hit is None:
            body = await self.request(
                "POST",
                f"/subjects/{_seg(subject)}/versions",
                schema.to_json(),
                {"normalize": "true"} if normalize else None,
            )
            hit = RegisteredSchema.from_json({**body, "subject": subject}, schema)
            self._registered[key] = hit
            self._by_id.setdefault((hit.schema_id, None), schema)
        return hit

    async def get_schema(
        self, schema_id: int, subject: str | None = None, fmt: str | None = None
    ) -> Schema:
        """The schema with id ``schema_id`` (``fmt``: ``serialized`` asks for
        Protobuf's descriptor in base64)."""
        key = (schema_id, fmt)
        hit = self._by_id.get(key)
        if hit is None:
            params = {k: v for k, v in (("subject", subject), ("format", fmt)) if v}
            body = await self.request("GET", f"/schemas/ids/{schema_id}", None, params or None)
            hit = self._by_id[key] = Schema.from_json(body)
        return hit

    async def get_schema_by_guid(self, guid: uuid.UUID, fmt: str | None = None) -> Schema:
        """The schema with this GUID (registries that give GUIDs)."""
        hit = self._by_guid.get(guid)
        if hit is None:
            params = {"format": fmt} if fmt else None
            body = await self.request("GET", f"/schemas/guids/{guid}", None, params)
            hit = self._by_guid[guid] = Schema.from_json(body)
        return hit

    async def lookup_schema(
        self, subject: str, schema: Schema, normalize: bool = False, deleted: bool = False
    ) -> RegisteredSchema:
        """The version of ``subject`` holding ``schema`` (40403 when none does)."""
        key = (subject, schema, normalize)
        hit = self._looked_up.get(key)
        if hit is None:
            params = {"normalize": str(normalize).lower(), "deleted": str(deleted).lower()}
            body = await self.request(
                "POST", f"/subjects/{_seg(subject)}", schema.to_json(), params
            )
            hit = self._looked_up[key] = RegisteredSchema.from_json(body)
        return hit

    async def get_latest_version(self, subject: str) -> RegisteredSchema:
        """The subject's latest version (cached for ``latest.cache.ttl.secs``)."""
        now = self._clock()
        hit = self._latest.get(subject)
        ttl = self.config.latest_cache_ttl_s
        if hit is not None and (ttl is None or now - hit[0] < ttl):
            return hit[1]
        body = await self.request("GET", f"/subjects/{_seg(subject)}/versions/latest")
        registered = RegisteredSchema.from_json(body)
        self._latest[subject] = (now, registered)
        return registered

    async def get_version(self, subject: str, version: int) -> RegisteredSchema:
        """Version ``version`` of ``subject``."""
        hit = self._versions.get((subject, version))
        if hit is None:
            body = await self.request("GET", f"/subjects/{_seg(subject)}/versions/{version}")
            hit = self._versions[(subject, version)] = RegisteredSchema.from_json(body)
        return hit

    async def get_subjects(self, deleted: bool = False) -> list[str]:
        """Every subject (with the soft-deleted ones when ``deleted``)."""
        params = {"deleted": "true"} if deleted else None
        return [str(s) for s in await self.request("GET", "/subjects", None, params)]

    async def get_versions(self, subject: str) -> list[int]:
        """The subject's version numbers."""
        return [int(v) for v in await self.request("GET", f"/subjects/{_seg(subject)}/versions")]

    async def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """Delete a subject (soft; then ``permanent``); the versions deleted."""
        params = {"permanent": "true"} if permanent else None
        out = await self.request("DELETE", f"/subjects/{_seg(subject)}", None, params)
        self._forget(subject)
        return [int(v) for v in out]

    async def delete_version(self, subject: str, version: int, permanent: bool = False) -> int:
        """Delete one version of a subject; its number."""
        params = {"permanent": "true"} if permanent else None
        out = await self.request(
            "DELETE", f"/subjects/{_seg(subject)}/versions/{version}", None, params
        )
        self._forget(subject)
        return int(out)

    def _forget(self, subject: str) -> None:
        for cache in (self._registered, self._looked_up):
            for key in [k for k in cache if k[0] == subject]:
                del cache[key]
        for vkey in [k for k in self._versions if k[0] == subject]:
            del self._versions[vkey]
        self._latest.pop(subject, None)

    # -- compatibility and config -----------------------------------------------------

    async def test_compatibility(
        self, subject: str, schema: Schema, version: int | str = "latest"
    ) -> bool:
        """Whether ``schema`` may follow ``version`` of ``subject`` under its rule."""
        body = await self.request(
            "POST", f"/compatibility/subjects/{_seg(subject)}/versions/{version}", schema.to_json()
        )
        return bool(body["is_compatible"])

    async def get_compatibility(self, subject: str | None = None) -> str:
        """The compatibility level of ``subject`` (None: the global one)."""
        return str((await self.get_config(subject))["compatibilityLevel"])

    async def set_compatibility(self, level: str, subject: str | None = None) -> str:
        """Set the compatibility level of ``subject`` (None: the global one)."""
        out = await self.set_config({"compatibility": level}, subject)
        return str(out["compatibility"])

    async def get_config(self, subject: str | None = None) -> dict[str, Any]:
        """The configuration of ``subject`` (None: the global one)."""
        path = "/config" if subject is None else f"/config/{_seg(subject)}"
        return dict(await self.request("GET", path))

    async def set_config(
        self, config: Mapping[str, Any], subject: str | None = None
    ) -> dict[str, Any]:
        """Update the configuration of ``subject`` (None: the global one)."""
        path = "/config" if subject is None else f"/config/{_seg(subject)}"
        return dict(await self.request("PUT", path, dict(config)))


def _why(exc: BaseException) -> str:
    """What went wrong, from the innermost error that says (httpx's own
    message is empty under trio: the TLS or socket error is its cause)."""
    reasons: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(reasons) < 5:
        if str(seen):
            reasons.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return reasons[-1] if reasons else type(exc).__name__


def _json(answer: Any, what: str) -> Any:
    if answer.status_code == 204 or not answer.content:
        return None
    try:
        return answer.json()
    except ValueError:
        text = answer.text[:200]
        raise SchemaRegistryError(
            answer.status_code, -1, f"the registry's answer is not JSON: {text!r}", what
        ) from None


def _error(answer: Any, what: str) -> SchemaRegistryError:
    status = answer.status_code
    try:
        body = answer.json()
        code, message = int(body["error_code"]), str(body["message"])
    except (ValueError, KeyError, TypeError):
        return SchemaRegistryError(status, status, f"HTTP {status}: {answer.text[:200]!r}", what)
    return SchemaRegistryError(status, code, message, what)


@asynccontextmanager
async def open_schema_registry(
    conf: Mapping[str, Any] | RegistryConfig, **kwargs: Any
) -> AsyncIterator[AsyncSchemaRegistryClient]:
    """An :class:`AsyncSchemaRegistryClient`, closed when the block is left."""
    client = AsyncSchemaRegistryClient(conf, **kwargs)
    try:
        yield client
    finally:
        await client.aclose()
