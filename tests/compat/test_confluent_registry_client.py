"""The drop-in's schema registry clients against confluent-kafka 2.16's own
(``SchemaRegistryClient`` and ``AsyncSchemaRegistryClient``), on brokerlite's
schema registry: the same calls (register, look up, versions, compatibility,
config, mode, delete) get the same answers and the same errors, and their
caches answer the same calls without asking the registry.

Each client works on subjects of its own; the schema ids it sees are compared
by the order they first appear in (both register the same schemas, in order).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread

APIS = ["confluent_kafka", "trafka.compat.confluent"]
_runs = itertools.count()


def _record(name: str, *extra: dict[str, Any]) -> str:
    fields = [{"name": "id", "type": "long"}, *extra]
    return json.dumps({"type": "record", "name": name, "namespace": "t.reg", "fields": fields})


V1 = _record("User")
V2 = _record("User", {"name": "email", "type": ["null", "string"], "default": None})
BROKEN = _record("User", {"name": "age", "type": "int"})  # no default: not backward
OTHER = _record("Other")


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("registry")
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=data, schema_registry_listen="127.0.0.1:0"
    ) as running:
        broker: RunningBroker = running
        assert broker.schema_registry_address is not None
        host, port = broker.schema_registry_address
        yield f"http://{host}:{port}"


def _module(api: str) -> Any:
    return importlib.import_module(f"{api}.schema_registry")


class Seen:
    """What the calls answered, in plain values: ids by order of appearance."""

    def __init__(self, errors: Any) -> None:
        self.errors = errors
        self.ids: dict[int, int] = {}
        self.out: list[tuple[str, Any]] = []

    def id(self, value: Any) -> Any:
        if not isinstance(value, int) or isinstance(value, bool):
            return value
        return self.ids.setdefault(value, len(self.ids))

    def plain(self, value: Any) -> Any:
        if hasattr(value, "schema_id") and hasattr(value, "schema"):
            schema = self.plain(value.schema)
            return ("registered", value.subject, value.version, self.id(value.schema_id), schema)
        if hasattr(value, "schema_str"):
            refs = [(r.name, r.subject, r.version) for r in value.references or ()]
            return ("schema", json.loads(value.schema_str), value.schema_type, refs)
        if hasattr(value, "compatibility_level"):
            levels = (value.compatibility, value.compatibility_level)
            return ("config", *(None if x is None else str(x) for x in levels))
        if hasattr(value, "subject") and hasattr(value, "version"):
            return ("version", value.subject, value.version)
        if isinstance(value, list):
            return [self.plain(v) for v in value]
        return value

    def call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            value = fn(*args, **kwargs)
        except self.errors as exc:
            self.out.append((what, ("error", exc.http_status_code, exc.error_code)))
            return None
        plain = self.id(value) if fn.__name__ == "register_schema" else self.plain(value)
        self.out.append((what, plain))
        return value


def _steps(
    m: Any, subject: str, prefix: str
) -> list[tuple[str, str, tuple[Any, ...], dict[str, Any]]]:
    """The calls, in order: (label, method, args, kwargs)."""
    v1, v2 = m.Schema(V1, "AVRO"), m.Schema(V2, "AVRO")
    broken, other = m.Schema(BROKEN, "AVRO"), m.Schema(OTHER, "AVRO")
    level = m.ConfigCompatibilityLevel
    return [
        ("types", "get_schema_types", (), {}),
        ("register", "register_schema", (subject, v1), {}),
        ("register again", "register_schema_full_response", (subject, v1), {}),
        ("lookup", "lookup_schema", (subject, v1), {}),
        ("lookup unknown", "lookup_schema", (subject, other), {}),
        ("lookup no subject", "lookup_schema", (prefix + "none", v1), {}),
        ("schema 404", "get_schema", (987654,), {}),
        ("compatible", "test_compatibility", (subject, v2), {}),
        ("incompatible", "test_compatibility", (subject, broken), {}),
        ("compatible with v1", "test_compatibility", (subject, v2), {"version": 1}),
        ("all versions", "test_compatibility_all_versions", (subject, v2), {}),
        ("register v2", "register_schema", (subject, v2), {}),
        ("register broken", "register_schema", (subject, broken), {}),
        ("versions", "get_versions", (subject,), {}),
        ("latest", "get_latest_version", (subject,), {}),
        ("version 1", "get_version", (subject, 1), {}),
        ("version latest", "get_version", (subject,), {}),
        ("version 99", "get_version", (subject, 99), {}),
        ("no subject's version", "get_version", (prefix + "none", 1), {}),
        ("subjects", "get_subjects", (), {"subject_prefix": prefix}),
        ("referenced by", "get_referenced_by", (subject, 1), {}),
        ("set compatibility", "set_compatibility", (subject, "full"), {}),
        ("compatibility", "get_compatibility", (subject,), {}),
        ("config", "get_config", (subject,), {}),
        ("set config", "set_config", (subject, m.ServerConfig(compatibility=level.NONE)), {}),
        ("config after", "get_config", (subject,), {}),
        ("delete config", "delete_config", (subject,), {}),
        ("no subject's config", "get_config", (prefix + "none",), {}),
        ("mode", "get_mode", (subject,), {}),
        ("global mode", "get_global_mode", (), {}),
        ("delete version 2", "delete_version", (subject, 2), {}),
        ("versions after", "get_versions", (subject,), {}),
        ("delete version 9", "delete_version", (subject, 9), {}),
        ("delete", "delete_subject", (subject,), {}),
        ("deleted subjects", "get_subjects", (), {"subject_prefix": prefix, "deleted": True}),
        ("delete permanently", "delete_subject", (subject,), {"permanent": True}),
        ("delete unknown", "delete_subject", (prefix + "none",), {}),
        ("subjects at the end", "get_subjects", (), {"subject_prefix": prefix}),
    ]


def _by_id_steps(
    m: Any, subject: str, first_id: int
) -> list[tuple[str, str, tuple[Any, ...], dict[str, Any]]]:
    return [
        ("schema", "get_schema", (first_id,), {}),
        ("schema with subject", "get_schema", (first_id,), {"subject_name": subject}),
        ("subjects of id", "get_subjects_by_schema_id", (first_id,), {}),
        ("versions of id", "get_schema_versions", (first_id,), {}),
    ]


def _sync_run(api: str, url: str) -> list[tuple[str, Any]]:
    m = _module(api)
    prefix = f"{api.split('.')[0]}-{next(_runs)}-"
    subject = prefix + "value"
    seen = Seen(m.SchemaRegistryError)
    with m.SchemaRegistryClient({"url": url}) as client:
        first = m.Schema(V1, "AVRO")
        steps = _steps(m, subject, prefix)
        for label, method, args, kwargs in steps[:3]:
            seen.call(label, getattr(client, method), *args, **kwargs)
        first_id = client.register_schema(subject, first)
        for label, method, args, kwargs in _by_id_steps(m, subject, first_id) + steps[3:]:
            value = seen.call(label, getattr(client, method), *args, **kwargs)
            if label == "subjects of id" and value is not None:
                seen.out[-1] = (label, sorted(s for s in value if s.startswith(prefix)))
            if label == "versions of id" and value is not None:
                mine = [(v.subject, v.version) for v in value if v.subject.startswith(prefix)]
                seen.out[-1] = (label, sorted(mine))
    return _relabel(seen.out, prefix)


def _relabel(out: list[tuple[str, Any]], prefix: str) -> list[tuple[str, Any]]:
    """The subjects named without the client's own prefix."""
    text = json.dumps(out).replace(prefix, "<p>")
    return [tuple(x) for x in json.loads(text)]  # type: ignore[misc]


def test_the_blocking_clients_answer_the_same(url: str) -> None:
    theirs, ours = (_sync_run(api, url) for api in APIS)
    assert ours == theirs
    answered = dict(ours)
    assert answered["versions"] == [1, 2]
    assert answered["register broken"][0] == "error"  # the registry's 409 is no hidden case


async def _async_run(api: str, url: str) -> list[tuple[str, Any]]:
    m = _module(api)
    prefix = f"{api.split('.')[0]}-async-{next(_runs)}-"
    subject = prefix + "value"
    seen = Seen(m.SchemaRegistryError)
    client = m.AsyncSchemaRegistryClient({"url": url})
    for label, method, args, kwargs in _steps(m, subject, prefix):
        fn = getattr(client, method)
        assert inspect.iscoroutinefunction(fn), method
        try:
            value = await fn(*args, **kwargs)
        except m.SchemaRegistryError as exc:
            seen.out.append((label, ("error", exc.http_status_code, exc.error_code)))
            continue
        plain = seen.id(value) if method == "register_schema" else seen.plain(value)
        seen.out.append((label, plain))
    return _relabel(seen.out, prefix)


def test_the_async_clients_answer_the_same(url: str) -> None:
    theirs, ours = (asyncio.run(_async_run(api, url)) for api in APIS)
    assert ours == theirs


def test_the_caches_answer_what_the_registry_no_longer_holds(url: str) -> None:
    """What a client learnt is kept as confluent-kafka keeps it: a version
    read and a schema registered survive their soft deletion; the latest
    version is kept too, until ``clear_latest_caches``."""
    out = {}
    for api in APIS:
        m = _module(api)
        subject = f"{api.split('.')[0]}-cache-{next(_runs)}"
        seen = Seen(m.SchemaRegistryError)
        with (
            m.SchemaRegistryClient({"url": url}) as client,
            m.SchemaRegistryClient({"url": url}) as other,
        ):
            schema = m.Schema(V1, "AVRO")
            client.register_schema(subject, schema)
            seen.call("version", client.get_version, subject, 1)
            seen.call("latest", client.get_latest_version, subject)
            other.delete_subject(subject)
            seen.call("cached version", client.get_version, subject, 1)
            seen.call("cached latest", client.get_latest_version, subject)
            seen.call("cached id", client.register_schema, subject, schema)
            seen.call("lookup", client.lookup_schema, subject, schema)
            client.clear_latest_caches()
            seen.call("latest after clear", client.get_latest_version, subject)
            client.clear_caches()
            seen.call("version after clear", client.get_version, subject, 1)
        out[api] = _relabel(seen.out, subject)
    assert out["trafka.compat.confluent"] == out["confluent_kafka"]
    assert dict(out["confluent_kafka"])["latest after clear"][0] == "error"


def test_an_unreachable_registry_fails_with_httpx_error_as_confluent_kafkas() -> None:
    """No answer at all (after the retries) is httpx's error, not a SchemaRegistryError."""
    seen = {}
    for api in APIS:
        m = _module(api)
        conf = {"url": "http://127.0.0.1:9", "max.retries": 1, "retries.wait.ms": 1}
        with m.SchemaRegistryClient(conf) as client, pytest.raises(Exception) as caught:
            client.get_subjects()
        # (confluent-kafka 2.16 uses httpx2 where it is installed: the same names)
        seen[api] = [k.__name__ for k in type(caught.value).__mro__ if k is not object]
        assert not isinstance(caught.value, m.SchemaRegistryError)
    assert seen["trafka.compat.confluent"] == seen["confluent_kafka"]
    assert "TransportError" in seen["confluent_kafka"]


def _mock_steps(m: Any) -> list[tuple[str, str, tuple[Any, ...], dict[str, Any]]]:
    v1, v2 = m.Schema(V1, "AVRO"), m.Schema(V2, "AVRO")
    return [
        ("register", "register_schema", ("a", v1), {}),
        ("register again", "register_schema_full_response", ("a", v1), {}),
        ("register elsewhere", "register_schema", ("b", v1), {}),
        ("register v2", "register_schema", ("a", v2), {}),
        ("schema", "get_schema", (1,), {}),
        ("schema 99", "get_schema", (99,), {}),
        ("lookup", "lookup_schema", ("a", v2), {}),
        ("lookup unknown", "lookup_schema", ("b", v2), {}),
        ("latest", "get_latest_version", ("a",), {}),
        ("version 1", "get_version", ("a", 1), {}),
        ("version 3", "get_version", ("a", 3), {}),
        ("versions", "get_versions", ("a",), {}),
        ("subjects", "get_subjects", (), {}),
        ("subjects b", "get_subjects", (), {"subject_prefix": "b"}),
        ("config", "get_config", (), {}),
        ("delete version", "delete_version", ("a", 2), {}),
        ("versions after", "get_versions", ("a",), {}),
        ("delete", "delete_subject", ("b",), {}),
        ("id of the deleted", "get_schema", (2,), {}),
        ("subjects after", "get_subjects", (), {}),
    ]


def _guid_check(client: Any, m: Any) -> bool:
    registered = client.register_schema_full_response("a", m.Schema(V1, "AVRO"))
    return client.get_schema_by_guid(registered.guid) == registered.schema


def test_a_mock_url_gives_confluent_kafkas_in_memory_registry() -> None:
    seen = {}
    for api in APIS:
        m = _module(api)
        client = m.SchemaRegistryClient.new_client({"url": "mock://"})
        assert isinstance(client, m.SchemaRegistryClient)
        out = Seen(m.SchemaRegistryError)
        for label, method, args, kwargs in _mock_steps(m):
            out.call(label, getattr(client, method), *args, **kwargs)
        assert _guid_check(client, m)
        seen[api] = out.out

        async def in_async(m: Any = m) -> list[tuple[str, Any]]:
            client = m.AsyncSchemaRegistryClient.new_client({"url": "mock://"})
            out = Seen(m.SchemaRegistryError)
            for label, method, args, kwargs in _mock_steps(m):
                try:
                    value = await getattr(client, method)(*args, **kwargs)
                except m.SchemaRegistryError as exc:
                    value = ("error", exc.http_status_code, exc.error_code)
                out.out.append((label, out.plain(value)))
            return out.out

        seen[api + " async"] = asyncio.run(in_async())
    # (confluent-kafka's mock keeps a subject's versions in a set: in no order)
    for key, out in seen.items():
        seen[key] = [(k, sorted(v) if k.startswith("versions") else v) for k, v in out]
    assert seen["trafka.compat.confluent"] == seen["confluent_kafka"]
    assert seen["trafka.compat.confluent async"] == seen["confluent_kafka async"]
