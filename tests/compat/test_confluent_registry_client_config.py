"""The drop-in's schema registry clients check their configuration as
confluent-kafka 2.16's do: the same settings are accepted, and the same
mistakes refused with the same exception type and text (no request is sent:
nothing listens on the URLs)."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import pytest

APIS = ["confluent_kafka", "trafka.compat.confluent"]
URL = "http://127.0.0.1:9"
OAUTH = {
    "bearer.auth.credentials.source": "OAUTHBEARER",
    "bearer.auth.logical.cluster": "lsrc-1",
    "bearer.auth.identity.pool.id": "pool-1",
    "bearer.auth.client.id": "me",
    "bearer.auth.client.secret": "secret",
    "bearer.auth.scope": "sr",
    "bearer.auth.issuer.endpoint.url": "http://127.0.0.1:9/token",
}
IMDS = {
    "bearer.auth.credentials.source": "OAUTHBEARER_AZURE_IMDS",
    "bearer.auth.logical.cluster": "lsrc-1",
    "bearer.auth.identity.pool.id": ["pool-1", "pool-2"],
}


def _custom(config: dict[str, Any]) -> dict[str, Any]:
    return {}


CONFS: list[dict[str, Any]] = [
    {},
    {"url": None},
    {"url": 8081},
    {"url": ["http://a"]},
    {"url": "ftp://a"},
    {"url": "http://a/, https://b:8081/"},
    {"url": "http://a,, http://b"},
    {"url": "http://u:p@a:8081", "basic.auth.user.info": "u:p"},
    {"url": "http://u:p@a:8081"},
    {"url": URL, "basic.auth.user.info": "nocolon"},
    {"url": URL, "basic.auth.user.info": "u:p:with:colons"},
    {"url": URL, "basic.auth.credentials.source": "USER_INFO", "basic.auth.user.info": "u:p"},
    {"url": URL, "ssl.key.location": "/nope/key"},
    {"url": URL, "ssl.key.password": "pw"},
    {"url": URL, "ssl.ca.location": False},
    {"url": URL, "timeout": 5, "proxy": "http://127.0.0.1:9"},
    {"url": URL, "cache.capacity": "10"},
    {"url": URL, "cache.capacity": 10, "cache.latest.ttl.sec": 30},
    {"url": URL, "cache.latest.ttl.sec": "30"},
    {"url": URL, "max.retries": "3"},
    {"url": URL, "retries.wait.ms": None, "retries.max.wait.ms": 5.5},
    {"url": URL, "retries.wait.ms": [1]},
    {"url": URL, "retries.max.wait.ms": "x"},
    {"url": URL, "schema.registry.url": URL},
    {"url": URL, "unknown.one": 1, "unknown.two": 2},
    {"url": URL, "bearer.auth.credentials.source": "NOPE"},
    {"url": URL, "bearer.auth.credentials.source": "STATIC_TOKEN"},
    {
        "url": URL,
        "bearer.auth.credentials.source": "STATIC_TOKEN",
        "bearer.auth.logical.cluster": "lsrc",
    },
    {
        "url": URL,
        "bearer.auth.credentials.source": "STATIC_TOKEN",
        "bearer.auth.logical.cluster": "lsrc",
        "bearer.auth.token": 7,
    },
    {
        "url": URL,
        "bearer.auth.credentials.source": "STATIC_TOKEN",
        "bearer.auth.logical.cluster": "lsrc",
        "bearer.auth.identity.pool.id": ["a", 1],
        "bearer.auth.token": "t",
    },
    {
        "url": URL,
        "bearer.auth.credentials.source": "STATIC_TOKEN",
        "bearer.auth.logical.cluster": "lsrc",
        "bearer.auth.token": "t",
    },
    {"url": URL, **OAUTH},
    {"url": URL, **{k: v for k, v in OAUTH.items() if k != "bearer.auth.scope"}},
    {"url": URL, **OAUTH, "bearer.auth.logical.cluster": 1},
    {"url": URL, **OAUTH, "bearer.auth.identity.pool.id": 1},
    {"url": URL, **OAUTH, "bearer.auth.client.secret": b"x"},
    {"url": URL, **OAUTH, "bearer.auth.issuer.endpoint.url": 1},
    {"url": URL, **IMDS},
    {"url": URL, **IMDS, "bearer.auth.issuer.endpoint.query": "resource=x"},
    {"url": URL, **IMDS, "bearer.auth.issuer.endpoint.url": "http://[bad"},
    {"url": URL, **IMDS, "bearer.auth.issuer.endpoint.url": "http://imds"},
    {"url": URL, **IMDS, "bearer.auth.issuer.endpoint.query": 3},
    {"url": URL, "bearer.auth.credentials.source": "CUSTOM"},
    {
        "url": URL,
        "bearer.auth.credentials.source": "CUSTOM",
        "bearer.auth.custom.provider.function": "not callable",
        "bearer.auth.custom.provider.config": {},
    },
    {
        "url": URL,
        "bearer.auth.credentials.source": "CUSTOM",
        "bearer.auth.custom.provider.function": _custom,
        "bearer.auth.custom.provider.config": [],
    },
    {
        "url": URL,
        "bearer.auth.credentials.source": "CUSTOM",
        "bearer.auth.custom.provider.function": _custom,
        "bearer.auth.custom.provider.config": {"a": 1},
    },
]


def _outcome(make: Any, arg: Any) -> tuple[str, str]:
    try:
        made = make(arg)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    if hasattr(made, "config"):
        assert made.config() == arg
    return "ok", ""


async def _async_outcome(make: Any, conf: dict[str, Any]) -> tuple[str, str]:
    return _outcome(make, dict(conf))


@pytest.mark.parametrize("conf", CONFS, ids=[str(i) for i in range(len(CONFS))])
def test_a_configuration_is_taken_or_refused_as_confluent_kafka_does(conf: dict[str, Any]) -> None:
    seen = {}
    for api in APIS:
        module = importlib.import_module(f"{api}.schema_registry")
        blocking = _outcome(module.SchemaRegistryClient, dict(conf))
        in_async = asyncio.run(_async_outcome(module.AsyncSchemaRegistryClient, conf))
        seen[api] = (blocking, in_async)
    assert seen["trafka.compat.confluent"] == seen["confluent_kafka"]


def test_the_common_helpers_are_confluent_kafkas() -> None:
    ours = importlib.import_module(
        "trafka.compat.confluent.schema_registry.common.schema_registry_client"
    )
    theirs = importlib.import_module(
        "confluent_kafka.schema_registry.common.schema_registry_client"
    )
    for value in (None, "a,b", ["a", "b"], []):
        assert ours.normalize_identity_pool(value) == theirs.normalize_identity_pool(value)
    for bad in (1, ["a", 2], {"a"}):
        assert _outcome(ours.normalize_identity_pool, bad) == _outcome(
            theirs.normalize_identity_pool, bad
        )
    for status in (200, 204, 299, 300, 404, 408, 429, 500, 501, 503):
        assert ours.is_success(status) == theirs.is_success(status)
        assert ours.is_retriable(status) == theirs.is_retriable(status)
