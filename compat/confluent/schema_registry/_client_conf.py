"""The registry clients' configuration as confluent-kafka 2.16 reads it: the
same keys, checked in the same order, failing with the same ``ValueError`` or
``TypeError`` text; then handed to the SDK's client as a
:class:`~trafka.sdk.schemas.RegistryConfig` (one HTTP core for both).

Rules (confluent-kafka's):

* ``url``: required, a str, one or more comma-separated URLs starting with
  ``http`` (or ``mock``), a trailing ``/`` dropped; credentials in the first
  are the basic authentication unless ``basic.auth.user.info`` is given too
  (an error).
* The numbers (``cache.capacity``, ``max.retries``...) must be int or float.
* ``bearer.auth.credentials.source``: STATIC_TOKEN, OAUTHBEARER,
  OAUTHBEARER_AZURE_IMDS or CUSTOM, each with its required keys.
* Any key left over is an error naming every one (``basic.auth.credentials.source``
  too: confluent-kafka's registry client does not read it).
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse, urlsplit, urlunparse, urlunsplit

from trafka.sdk.schemas import RegistryConfig
from trafka.sdk.schemas.registry_auth import (
    AzureIMDSToken,
    BearerFields,
    ClientCredentialsToken,
    bearer_headers,
)

from .common.schema_registry_client import normalize_identity_pool

__all__ = ["ClientSettings", "read_conf"]

_AZURE_IMDS = "http://169.254.169.254/metadata/identity/oauth2/token"


@dataclass(frozen=True)
class ClientSettings:
    """What a confluent-kafka registry client's ``conf`` says."""

    registry: RegistryConfig
    base_urls: list[str]
    cache_capacity: int
    cache_latest_ttl_sec: float | None
    bearer_auth_credentials_source: str | None
    bearer_field_provider: BearerFields | None


def read_conf(conf: Mapping[str, Any]) -> ClientSettings:
    """Check ``conf`` as confluent-kafka does (see the module doc).

    Raises:
        ValueError, TypeError: as confluent-kafka's do, with its text.
    """
    c = dict(conf)
    urls = _urls(c.pop("url", None))
    context = _ssl(c)
    auth = _basic_auth(c, urls[0])
    proxy, timeout = c.pop("proxy", None), c.pop("timeout", None)
    capacity = int(_number(c, "cache.capacity", 1000))
    ttl = _number(c, "cache.latest.ttl.sec", None)
    retries = int(_number(c, "max.retries", 3))
    wait_ms = int(_number(c, "retries.wait.ms", 1000))
    max_wait_ms = int(_number(c, "retries.max.wait.ms", 20000))
    source = c.pop("bearer.auth.credentials.source", None)
    provider = None if source is None else _bearer(source, c, retries, wait_ms, max_wait_ms)
    if c:
        raise ValueError(f"Unrecognized properties: {', '.join(c)}")
    headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
        headers["Authorization"] = f"Basic {token}"
    registry = RegistryConfig(
        urls=tuple(_without_userinfo(u) for u in urls),
        headers=headers,
        ssl_context=context,
        timeout=10.0 if timeout is None else float(timeout),
        max_retries=retries,
        retries_wait_ms=float(wait_ms),
        retries_max_wait_ms=float(max_wait_ms),
        header_provider=None if provider is None else _header_provider(provider),
        proxy=proxy,
    )
    return ClientSettings(registry, urls, capacity, ttl, source, provider)


def _urls(value: Any) -> list[str]:
    if value is None:
        raise ValueError("Missing required configuration property url")
    if not isinstance(value, str):
        raise TypeError(f"url must be a str, not {type(value)}")
    urls = []
    for url in value.split(","):
        url = url.strip().rstrip("/")
        if not url.startswith(("http", "mock")):
            raise ValueError(f"Invalid url {url}")
        urls.append(url)
    return urls


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _ssl(c: dict[str, Any]) -> ssl.SSLContext | None:
    ca = c.pop("ssl.ca.location", None)
    key = c.pop("ssl.key.location", None)
    password = c.pop("ssl.key.password", None)
    cert = c.pop("ssl.certificate.location", None)
    context: ssl.SSLContext | None = None
    if ca is False:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif isinstance(ca, str):
        if os.path.isdir(ca):
            context = ssl.create_default_context(capath=ca)
        else:
            context = ssl.create_default_context(cafile=ca)
    if cert is not None:
        context = context or ssl.create_default_context()
        context.load_cert_chain(certfile=cert, keyfile=key, password=password)
    if (key is not None or password is not None) and cert is None:
        raise ValueError(
            "ssl.certificate.location required when configuring ssl.key.location"
            " or ssl.key.password"
        )
    return context


def _basic_auth(c: dict[str, Any], first_url: str) -> tuple[str, str] | None:
    parsed = urlparse(first_url)
    in_url = None
    if parsed.username is not None and parsed.password is not None:
        in_url = (unquote(parsed.username), unquote(parsed.password))
    if "basic.auth.user.info" not in c:
        return in_url
    if in_url is not None:
        raise ValueError(
            "basic.auth.user.info configured with userinfo credentials in the URL."
            " Remove userinfo credentials from the url or remove basic.auth.user.info"
            " from the configuration"
        )
    parts = str(c.pop("basic.auth.user.info") or "").split(":", 1)
    if len(parts) != 2:
        raise ValueError("basic.auth.user.info must be in the form of {username}:{password}")
    return (parts[0], parts[1]) if parts != ["", ""] else None


def _number(c: dict[str, Any], name: str, default: Any) -> Any:
    value = c.pop(name, None)
    if value is None:
        return default
    if not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value)}")
    return value


def _str(c: dict[str, Any], name: str, what: str | None = None) -> str:
    value = c.pop(name)
    if not isinstance(value, str):
        raise TypeError(f"{what or name} must be a str, not {type(value)}")
    return value


def _cluster_and_pool(c: dict[str, Any]) -> tuple[str, str | None]:
    if "bearer.auth.logical.cluster" not in c:
        raise ValueError(
            "Missing required bearer configuration properties: bearer.auth.logical.cluster"
        )
    cluster = _str(c, "bearer.auth.logical.cluster", "logical cluster")
    return cluster, normalize_identity_pool(c.pop("bearer.auth.identity.pool.id", None))


def _missing(c: dict[str, Any], names: tuple[str, ...], what: str) -> None:
    missing = [n for n in names if n not in c]
    if missing:
        raise ValueError(f"Missing required {what} configuration properties: {', '.join(missing)}")


_OIDC = (
    "bearer.auth.client.id",
    "bearer.auth.client.secret",
    "bearer.auth.scope",
    "bearer.auth.issuer.endpoint.url",
)


def _bearer(source: Any, c: dict[str, Any], retries: int, wait: int, max_wait: int) -> Any:
    if source == "CUSTOM":
        names = ("bearer.auth.custom.provider.function", "bearer.auth.custom.provider.config")
        _missing(c, names, "custom OAuth")
        function, config = c.pop(names[0]), c.pop(names[1])
        if not callable(function):
            raise TypeError(f"{names[0]} must be a callable, not {type(function)}")
        if not isinstance(config, dict):
            raise TypeError(f"{names[1]} must be a dict, not {type(config)}")
        return CustomFields(function, config)
    if source not in ("STATIC_TOKEN", "OAUTHBEARER", "OAUTHBEARER_AZURE_IMDS"):
        raise ValueError("Unrecognized bearer.auth.credentials.source")
    cluster, pool = _cluster_and_pool(c)
    backoff = (retries, wait, max_wait)
    if source == "STATIC_TOKEN":
        if "bearer.auth.token" not in c:
            raise ValueError("Missing bearer.auth.token")
        return StaticFields(_str(c, "bearer.auth.token"), cluster, pool)
    if source == "OAUTHBEARER":
        _missing(c, _OIDC, "OAuth")
        client_id, secret, scope, endpoint = (_str(c, n) for n in _OIDC)
        return ClientCredentialsToken(client_id, secret, scope, endpoint, cluster, pool, *backoff)
    overridden = "bearer.auth.issuer.endpoint.url" in c
    endpoint = c.pop("bearer.auth.issuer.endpoint.url", _AZURE_IMDS)
    if not isinstance(endpoint, str):
        raise TypeError(f"bearer.auth.issuer.endpoint.url must be a str, not {type(endpoint)}")
    try:
        parsed = urlparse(endpoint)
    except ValueError as exc:
        raise ValueError(f"Failed to parse token endpoint URL: {exc}") from None
    query = c.pop("bearer.auth.issuer.endpoint.query", None)
    if query:
        if not isinstance(query, str):
            raise TypeError(f"bearer.auth.issuer.endpoint.query must be a str, not {type(query)}")
        endpoint = urlunparse(parsed._replace(query=query, fragment=""))
    elif not overridden:
        raise ValueError(
            "bearer.auth.issuer.endpoint.query must be provided when"
            " bearer.auth.issuer.endpoint.url isn't overridden"
        )
    return AzureIMDSToken(endpoint, cluster, pool, *backoff)


class StaticFields(BearerFields):
    """A fixed token (STATIC_TOKEN)."""

    def __init__(self, token: str, logical_cluster: str, identity_pool: str | None) -> None:
        self.token = token
        self.logical_cluster = logical_cluster
        self.identity_pool = identity_pool

    async def get_bearer_fields_async(self) -> dict[str, Any]:
        return self.get_bearer_fields()

    def get_bearer_fields(self) -> dict[str, Any]:
        fields = {
            "bearer.auth.token": self.token,
            "bearer.auth.logical.cluster": self.logical_cluster,
        }
        if self.identity_pool is not None:
            fields["bearer.auth.identity.pool.id"] = self.identity_pool
        return fields


class CustomFields(BearerFields):
    """The user's function's fields (CUSTOM): called with its config per request."""

    def __init__(
        self, custom_function: Callable[[dict[str, Any]], Any], custom_config: dict[str, Any]
    ):
        self.custom_function = custom_function
        self.custom_config = custom_config

    async def get_bearer_fields_async(self) -> dict[str, Any]:
        return self.get_bearer_fields()

    def get_bearer_fields(self) -> dict[str, Any]:
        return dict(self.custom_function(self.custom_config))


def _header_provider(provider: BearerFields) -> Callable[[], Any]:
    async def headers() -> dict[str, str]:
        return bearer_headers(await provider.get_bearer_fields_async())

    return headers
