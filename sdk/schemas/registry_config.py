"""The registry client's configuration: Confluent's names (``url``,
``basic.auth.user.info``...), also with the ``schema.registry.`` prefix a
producer's configuration gives them, and the Python spellings (``max_retries``).
An unknown name is a :class:`~trafka.sdk.errors.ConfigError` naming it."""

from __future__ import annotations

import base64
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from ..errors import ConfigError

__all__ = ["SETTINGS", "RegistryConfig"]

_PREFIX = "schema.registry."


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    """Where the registry is and how to talk to it.

    Args:
        urls: the registry's base URLs (``url``, comma-separated); a request
            that fails on one tries the next.
        headers: sent with every request (authentication).
        ssl_context: the TLS settings of ``https`` URLs (``ssl.ca.location``,
            ``ssl.certificate.location``, ``ssl.key.location``,
            ``ssl.key.password``); None: the system's defaults.
        timeout: seconds per request (``timeout``; Confluent's default 10).
        max_retries: more attempts after a connection error, a timeout or a
            retriable status (408, 429, 5xx); ``max.retries``, default 3.
        retries_wait_ms / retries_max_wait_ms: the backoff between attempts,
            doubling from the first to the second (default 1000 / 20000).
        latest_cache_ttl_s: how long a subject's latest version is cached (None:
            until the client is closed; ``latest.cache.ttl.secs``).
        header_provider: called before each request for more headers (a
            bearer token that expires: an OAuth client's); may be async.
        proxy: the HTTP proxy to reach the registry through (``proxy``).
    """

    urls: tuple[str, ...]
    headers: Mapping[str, str] = field(default_factory=dict)
    ssl_context: ssl.SSLContext | None = None
    timeout: float = 10.0
    max_retries: int = 3
    retries_wait_ms: float = 1000.0
    retries_max_wait_ms: float = 20000.0
    latest_cache_ttl_s: float | None = None
    header_provider: Callable[[], Mapping[str, str] | Awaitable[Mapping[str, str]]] | None = None
    proxy: str | None = None

    @classmethod
    def from_dict(cls, conf: Mapping[str, Any]) -> RegistryConfig:
        """Read Confluent's configuration names (see the module doc).

        Raises:
            ConfigError: an unknown name, a missing ``url``, a value of the wrong
                kind, or contradicting credentials.
        """
        c: dict[str, Any] = {}
        for key, value in conf.items():
            name = key.replace("_", ".")
            if name.startswith(_PREFIX):
                name = name[len(_PREFIX) :]
            if name not in SETTINGS:
                raise ConfigError(f"unknown schema registry setting {key!r}")
            c[name] = value
        if not c.get("url"):
            raise ConfigError("the schema registry needs a url ('schema.registry.url')")
        urls, url_user = _urls(str(c.pop("url")))
        headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        provider = _token_provider(c)
        if provider is None:
            headers.update(_auth_headers(c, url_user))
        return cls(
            urls=urls,
            headers=headers,
            ssl_context=_ssl_context(c),
            timeout=_number(c, "timeout", 10.0),
            max_retries=int(_number(c, "max.retries", 3)),
            retries_wait_ms=_number(c, "retries.wait.ms", 1000.0),
            retries_max_wait_ms=_number(c, "retries.max.wait.ms", 20000.0),
            latest_cache_ttl_s=(
                None
                if c.get("latest.cache.ttl.secs") in (None, -1)
                else _number(c, "latest.cache.ttl.secs", 0.0)
            ),
            proxy=None if c.get("proxy") is None else str(c["proxy"]),
            header_provider=provider,
        )


#: The settings RegistryConfig takes (without the ``schema.registry.`` prefix).
SETTINGS = frozenset(
    {
        "url",
        "basic.auth.user.info",
        "basic.auth.credentials.source",
        "bearer.auth.credentials.source",
        "bearer.auth.token",
        "bearer.auth.logical.cluster",
        "bearer.auth.identity.pool.id",
        "bearer.auth.client.id",
        "bearer.auth.client.secret",
        "bearer.auth.scope",
        "bearer.auth.issuer.endpoint.url",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "timeout",
        "max.retries",
        "retries.wait.ms",
        "retries.max.wait.ms",
        "latest.cache.ttl.secs",
        "proxy",
    }
)


def _number(c: Mapping[str, Any], name: str, default: float) -> float:
    value = c.get(name, default)
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"schema registry setting {name!r}: {value!r} is not a number") from None
    if out < 0:
        raise ConfigError(f"schema registry setting {name!r}: {value!r} is negative")
    return out


def _urls(value: str) -> tuple[tuple[str, ...], str | None]:
    """The base URLs without credentials, and the ``user:password`` the first carried."""
    urls, user = [], None
    for raw in value.split(","):
        raw = raw.strip()
        parts = urlsplit(raw)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"schema registry url {raw!r} is not an http(s) URL")
        if parts.username is not None and user is None:
            user = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        if ":" in parts.hostname:
            host = f"[{parts.hostname}]" + ("" if parts.port is None else f":{parts.port}")
        urls.append(urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", "")))
    return tuple(urls), user


def _token_provider(c: dict[str, Any]) -> Any:
    """The headers of a source whose token is fetched (OAUTHBEARER: OAuth 2 client
    credentials; OAUTHBEARER_AZURE_IMDS: Azure's metadata service), or None."""
    source = str(c.get("bearer.auth.credentials.source", "")).upper()
    if source not in ("OAUTHBEARER", "OAUTHBEARER_AZURE_IMDS"):
        return None
    from .registry_auth import AzureIMDSToken, ClientCredentialsToken, bearer_headers

    cluster = c.get("bearer.auth.logical.cluster")
    if not cluster:
        raise ConfigError(f"schema registry: {source} needs bearer.auth.logical.cluster")
    pool = c.get("bearer.auth.identity.pool.id")
    retries = (
        int(_number(c, "max.retries", 3)),
        _number(c, "retries.wait.ms", 1000.0),
        _number(c, "retries.max.wait.ms", 20000.0),
    )
    endpoint = c.get("bearer.auth.issuer.endpoint.url")
    fields: Any
    if source == "OAUTHBEARER":
        names = ("bearer.auth.client.id", "bearer.auth.client.secret", "bearer.auth.scope")
        missing = [n for n in (*names, "bearer.auth.issuer.endpoint.url") if not c.get(n)]
        if missing:
            raise ConfigError(f"schema registry: OAUTHBEARER needs {', '.join(missing)}")
        client_id, secret, scope = (str(c[n]) for n in names)
        fields = ClientCredentialsToken(
            client_id, secret, scope, str(endpoint), str(cluster), pool, *retries
        )
    else:
        if not endpoint:
            raise ConfigError(
                "schema registry: OAUTHBEARER_AZURE_IMDS needs bearer.auth.issuer.endpoint.url"
                " (the metadata service's token URL with its query)"
            )
        fields = AzureIMDSToken(str(endpoint), str(cluster), pool, *retries)

    async def headers() -> dict[str, str]:
        return bearer_headers(await fields.get_bearer_fields_async())

    return headers


def _auth_headers(c: dict[str, Any], url_user: str | None) -> dict[str, str]:
    source = str(c.get("basic.auth.credentials.source", "")).upper()
    info = c.get("basic.auth.user.info")
    bearer = str(c.get("bearer.auth.credentials.source", "")).upper()
    if bearer and (source or info):
        raise ConfigError("schema registry: basic and bearer authentication both configured")
    headers = {}
    if bearer:
        if bearer != "STATIC_TOKEN":
            raise ConfigError(
                f"schema registry bearer.auth.credentials.source {bearer!r}: only STATIC_TOKEN"
            )
        token = c.get("bearer.auth.token")
        if not token:
            raise ConfigError("schema registry: STATIC_TOKEN needs bearer.auth.token")
        headers["Authorization"] = f"Bearer {token}"
        if c.get("bearer.auth.logical.cluster"):
            headers["target-sr-cluster"] = str(c["bearer.auth.logical.cluster"])
        if c.get("bearer.auth.identity.pool.id"):
            headers["Confluent-Identity-Pool-Id"] = str(c["bearer.auth.identity.pool.id"])
        return headers
    if source in ("", "USER_INFO"):
        user = info
        if source == "" and info is None:
            user = url_user
    elif source == "URL":
        if url_user is None:
            raise ConfigError("schema registry: credentials source URL, but the url has none")
        user = url_user
    else:
        raise ConfigError(
            f"schema registry basic.auth.credentials.source {source!r}: USER_INFO or URL"
        )
    if user is not None:
        if ":" not in str(user):
            raise ConfigError("schema registry basic.auth.user.info must be 'user:password'")
        token = base64.b64encode(str(user).encode("utf-8")).decode("ascii")
        headers["Authorization"] = f"Basic {token}"
    return headers


def _ssl_context(c: Mapping[str, Any]) -> ssl.SSLContext | None:
    ca, cert = c.get("ssl.ca.location"), c.get("ssl.certificate.location")
    key = c.get("ssl.key.location")
    if ca is None and cert is None:
        if key is not None:
            raise ConfigError("schema registry ssl.key.location needs ssl.certificate.location")
        return None
    try:
        ctx = ssl.create_default_context(cafile=ca)
        if cert is not None:
            ctx.load_cert_chain(cert, key, c.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"schema registry TLS settings: {exc}") from None
    return ctx
