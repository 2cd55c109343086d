"""brokerlite's Schema Registry, driven by confluent-kafka's own ``SchemaRegistryClient``.

What each answer must be is taken from Confluent's Schema Registry API reference
(https://docs.confluent.io/platform/current/schema-registry/develop/api.html:
the endpoints, their bodies and the error codes 40401 subject not found, 40402
version not found, 40403 schema not found, 40404-40407 the soft-delete rules,
40408 no subject-level compatibility, 409 incompatible, 42201 invalid schema,
42202 invalid version, 42203 invalid compatibility level, 42204 invalid mode,
42205 operation not permitted, 42206 references exist), and the registry's
"Schema Evolution and Compatibility" page for the levels
(https://docs.confluent.io/platform/current/schema-registry/fundamentals/schema-evolution.html).
Error bodies are also read over raw HTTP. One broker serves the module; every
test uses subjects of its own.
"""

from __future__ import annotations

import base64
import http.client
import itertools
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastavro")
pytest.importorskip("jsonschema")

from confluent_kafka.schema_registry import (
    ConfigCompatibilityLevel,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
    SchemaRegistryError,
    ServerConfig,
)

from trafka.brokerlite.registry.formats import incompatibilities, parse
from trafka.brokerlite.server import RunningBroker, broker_in_thread

_names = itertools.count()


def subject(stem: str) -> str:
    return f"{stem}-{next(_names)}-value"


def record(name: str, *fields: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields), **extra})


@pytest.fixture(scope="module")
def registry_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    data = tmp_path_factory.mktemp("registry")
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=data, schema_registry_listen="127.0.0.1:0"
    ) as running:
        yield running


@pytest.fixture(scope="module")
def url(registry_broker: RunningBroker) -> str:
    assert registry_broker.schema_registry_address is not None
    host, port = registry_broker.schema_registry_address
    return f"http://{host}:{port}"


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[SchemaRegistryClient]:
    with SchemaRegistryClient({"url": url}) as sr:
        yield sr


@pytest.fixture
def fresh(url: str) -> Iterator[SchemaRegistryClient]:
    """A client with empty caches (answers come from the registry, not the cache)."""
    with SchemaRegistryClient({"url": url}) as sr:
        yield sr


def raw(
    url: str,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """One HTTP exchange: the status and the body (JSON when it parses)."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        sent = {"Content-Type": "application/vnd.schemaregistry.v1+json", **(headers or {})}
        connection.request(method, path, body=body, headers=sent)
        answer = connection.getresponse()
        data = answer.read()
    finally:
        connection.close()
    try:
        return answer.status, json.loads(data)
    except ValueError:
        return answer.status, data


def error_of(call: Any) -> tuple[int, int]:
    with pytest.raises(SchemaRegistryError) as caught:
        call()
    return caught.value.http_status_code, caught.value.error_code


A1 = record("User", {"name": "id", "type": "long"})
A2 = record(
    "User", {"name": "id", "type": "long"}, {"name": "email", "type": "string", "default": ""}
)


@pytest.mark.compat("Schema Registry", "REST API through confluent-kafka's SchemaRegistryClient")
def test_register_read_back_and_lookup(
    client: SchemaRegistryClient, fresh: SchemaRegistryClient
) -> None:
    """POST /subjects/{s}/versions gives an id; the same schema again (even with
    other whitespace) gives the same id and no new version; another subject
    with the same schema shares the id; GET by id, versions, latest, lookup."""
    s, other = subject("users"), subject("users-copy")
    first = client.register_schema(s, Schema(A1, "AVRO"))
    spaced = json.dumps(json.loads(A1), indent=4)
    assert fresh.register_schema(s, Schema(spaced, "AVRO")) == first
    wrapped = record("User", {"name": "id", "type": {"type": "long"}})
    assert fresh.register_schema(s, Schema(wrapped, "AVRO")) == first
    assert fresh.get_versions(s) == [1]
    second = client.register_schema(s, Schema(A2, "AVRO"))
    assert second > first
    assert fresh.register_schema(other, Schema(A1, "AVRO")) == first
    assert fresh.get_versions(s) == [1, 2]
    assert {s, other} <= set(fresh.get_subjects())
    got = fresh.get_schema(first)
    assert json.loads(got.schema_str) == json.loads(A1) and got.schema_type == "AVRO"
    latest = fresh.get_latest_version(s)
    assert (latest.schema_id, latest.version, latest.subject) == (second, 2, s)
    v1 = fresh.get_version(s, 1)
    assert (v1.schema_id, v1.version) == (first, 1)
    found = fresh.lookup_schema(s, Schema(A1, "AVRO"))
    assert (found.schema_id, found.version) == (first, 1)
    assert sorted(fresh.get_subjects_by_schema_id(first)) == sorted([s, other])
    pairs = {(p.subject, p.version) for p in fresh.get_schema_versions(first)}
    assert pairs == {(s, 1), (other, 1)}
    assert sorted(fresh.get_schema_types()) == ["AVRO", "JSON", "PROTOBUF"]
    assert fresh.get_contexts() == ["."]
    not_there = Schema(record("User", {"name": "x", "type": "int"}), "AVRO")
    assert error_of(lambda: fresh.lookup_schema(s, not_there)) == (404, 40403)
    assert error_of(lambda: fresh.lookup_schema(subject("none"), not_there)) == (404, 40401)


@pytest.mark.compat("Schema Registry", "REST API through confluent-kafka's SchemaRegistryClient")
def test_raw_endpoints_and_content_types(client: SchemaRegistryClient, url: str) -> None:
    """The ``/schema`` sub-resources give the schema itself; plain JSON requests
    are accepted as the versioned content type is."""
    s = subject("raw")
    schema_id = client.register_schema(s, Schema(A1, "AVRO"))
    assert raw(url, "GET", f"/schemas/ids/{schema_id}/schema") == (200, json.loads(A1))
    assert raw(url, "GET", f"/subjects/{s}/versions/latest/schema") == (200, json.loads(A1))
    body = json.dumps({"schema": A1}).encode()
    status, found = raw(url, "POST", f"/subjects/{s}", body, {"Content-Type": "application/json"})
    assert status == 200 and (found["id"], found["version"], found["subject"]) == (schema_id, 1, s)
    assert raw(url, "GET", "/")[0] == 200


@pytest.mark.compat("Schema Registry", "REST API through confluent-kafka's SchemaRegistryClient")
def test_soft_and_permanent_deletes(
    client: SchemaRegistryClient, fresh: SchemaRegistryClient, url: str
) -> None:
    """A soft-deleted version leaves the listings but shows with ?deleted=true;
    deleting it softly again is 40406, permanently before softly 40407; a soft-
    deleted subject deleted softly again is 40404, permanently while live
    40405; after a permanent delete the subject is gone (40401) and the id is
    never given to another schema."""
    s = subject("deletes")
    # Schemas of this test only (an id registered under another subject stays).
    id1 = client.register_schema(s, Schema(A1.replace("User", "Deleted"), "AVRO"))
    id2 = client.register_schema(s, Schema(A2.replace("User", "Deleted"), "AVRO"))
    assert error_of(lambda: fresh.delete_version(s, 1, permanent=True)) == (404, 40407)
    assert fresh.delete_version(s, 1) == 1
    assert error_of(lambda: fresh.delete_version(s, 1)) == (404, 40406)
    assert fresh.get_versions(s) == [2]
    assert raw(url, "GET", f"/subjects/{s}/versions?deleted=true") == (200, [1, 2])
    assert raw(url, "GET", f"/subjects/{s}/versions/1")[1]["error_code"] == 40402
    assert raw(url, "GET", f"/subjects/{s}/versions/1?deleted=true")[1]["id"] == id1
    assert fresh.delete_version(s, 1, permanent=True) == 1
    assert raw(url, "GET", f"/subjects/{s}/versions?deleted=true") == (200, [2])
    assert error_of(lambda: fresh.delete_subject(s, permanent=True)) == (404, 40405)
    assert fresh.delete_subject(s) == [2]
    assert s not in fresh.get_subjects()
    assert error_of(lambda: fresh.get_latest_version(s)) == (404, 40401)
    assert s in raw(url, "GET", "/subjects?deleted=true")[1]
    assert error_of(lambda: fresh.delete_subject(s)) == (404, 40404)
    fresh.set_compatibility(s, "FULL")
    assert fresh.delete_subject(s, permanent=True) == [2]
    assert raw(url, "GET", f"/config/{s}")[1]["error_code"] == 40408
    assert error_of(lambda: fresh.get_versions(s)) == (404, 40401)
    assert error_of(lambda: fresh.get_schema(id2)) == (404, 40403)
    new = fresh.register_schema(
        subject("after"), Schema(record("Fresh", {"name": "f", "type": "int"}), "AVRO")
    )
    assert new > id2


@pytest.mark.compat("Schema Registry", "REST API through confluent-kafka's SchemaRegistryClient")
def test_compatibility_config_and_mode(
    client: SchemaRegistryClient, fresh: SchemaRegistryClient, url: str
) -> None:
    """PUT/GET/DELETE /config and /config/{s} (defaultToGlobal), invalid levels
    (42203); /mode: READONLY refuses writes (42205), IMPORT takes given ids,
    invalid modes (42204)."""
    s = subject("config")
    client.register_schema(s, Schema(A1, "AVRO"))
    assert fresh.get_compatibility() in (
        "BACKWARD",
        "BACKWARD_TRANSITIVE",
        "FULL",
        "NONE",
        "FORWARD",
    )
    assert raw(url, "GET", f"/config/{s}")[1]["error_code"] == 40408
    status, found = raw(url, "GET", f"/config/{s}?defaultToGlobal=true")
    assert status == 200 and found["compatibilityLevel"] == fresh.get_compatibility()
    assert fresh.set_compatibility(s, "none") == {"compatibility": "NONE"}
    assert fresh.get_compatibility(s) == "NONE"
    # NONE: an incompatible schema registers.
    incompatible = record("User", {"name": "id", "type": "string"})
    client.register_schema(s, Schema(incompatible, "AVRO"))
    assert fresh.delete_config(s).compatibility_level == "NONE"
    fresh.set_config(s, ServerConfig(compatibility=ConfigCompatibilityLevel.FULL_TRANSITIVE))
    assert fresh.get_config(s).compatibility_level == ConfigCompatibilityLevel.FULL_TRANSITIVE
    assert fresh.delete_config(s).compatibility_level == ConfigCompatibilityLevel.FULL_TRANSITIVE
    assert raw(url, "GET", f"/config/{s}")[1]["error_code"] == 40408
    body = json.dumps({"compatibility": "SIDEWAYS"}).encode()
    status, error = raw(url, "PUT", f"/config/{s}", body)
    assert (status, error["error_code"]) == (422, 42203)
    # Modes.
    assert fresh.get_global_mode() == "READWRITE"
    assert fresh.update_mode(s, "READONLY") == "READONLY"
    assert fresh.get_mode(s) == "READONLY"
    assert error_of(lambda: fresh.register_schema(s, Schema(A2, "AVRO"))) == (422, 42205)
    assert fresh.delete_mode(s) == "READONLY"
    status, error = raw(url, "PUT", f"/mode/{s}", json.dumps({"mode": "WRITEONLY"}).encode())
    assert (status, error["error_code"]) == (422, 42204)
    imported = subject("import")
    assert fresh.update_mode(imported, "IMPORT") == "IMPORT"
    body = json.dumps({"schema": A1, "id": 100_000, "version": 3}).encode()
    assert raw(url, "POST", f"/subjects/{imported}/versions", body) == (200, {"id": 100_000})
    assert fresh.get_versions(imported) == [3]
    # An imported id already given to another schema, a version already taken: 42205.
    taken = json.dumps({"schema": A2, "id": 100_000}).encode()
    assert raw(url, "POST", f"/subjects/{imported}/versions", taken)[1]["error_code"] == 42205
    taken = json.dumps({"schema": A2, "id": 100_002, "version": 3}).encode()
    assert raw(url, "POST", f"/subjects/{imported}/versions", taken)[1]["error_code"] == 42205
    assert fresh.get_schema(100_000).schema_str is not None
    body = json.dumps({"schema": A2, "id": 100_001}).encode()
    status, error = raw(url, "POST", f"/subjects/{s}/versions", body)
    assert (status, error["error_code"]) == (422, 42205)


@pytest.mark.compat("Schema Registry", "REST API through confluent-kafka's SchemaRegistryClient")
def test_references_and_referenced_by(
    client: SchemaRegistryClient, fresh: SchemaRegistryClient
) -> None:
    """An Avro schema naming a type of another subject registers with a
    reference; /referencedby lists it; the referenced version cannot be
    deleted (42206); a reference to nothing is an invalid schema (42201)."""
    address_subject, user_subject = subject("address"), subject("user-with-address")
    address = json.dumps({"type": "record", "name": "Address", "namespace": "shop",
                          "fields": [{"name": "city", "type": "string"}]})  # fmt: skip
    address_id = client.register_schema(address_subject, Schema(address, "AVRO"))
    user = json.dumps({"type": "record", "name": "Customer", "namespace": "shop",
                       "fields": [{"name": "home", "type": "shop.Address"}]})  # fmt: skip
    refs = [SchemaReference("shop.Address", address_subject, 1)]
    user_id = client.register_schema(user_subject, Schema(user, "AVRO", refs))
    assert user_id != address_id
    got = fresh.get_schema(user_id)
    assert [(r.name, r.subject, r.version) for r in got.references] == [
        ("shop.Address", address_subject, 1)
    ]
    assert fresh.get_referenced_by(address_subject, 1) == [user_id]
    assert error_of(lambda: fresh.delete_version(address_subject, 1)) == (422, 42206)
    missing = [SchemaReference("shop.Address", subject("nothing"), 1)]
    assert (
        error_of(lambda: fresh.register_schema(subject("dangling"), Schema(user, "AVRO", missing)))[
            1
        ]
        == 42201
    )
    assert (
        error_of(lambda: fresh.register_schema(subject("unresolved"), Schema(user, "AVRO")))[1]
        == 42201
    )


@pytest.mark.compat("Schema Registry", "REST API through confluent-kafka's SchemaRegistryClient")
def test_bad_input_gets_the_documented_errors_and_the_server_keeps_serving(url: str) -> None:
    """Malformed JSON (400), invalid schemas and unknown types (42201), invalid
    versions (42202), unknown subjects, versions and ids (40401, 40402, 40403), a
    body over the cap (413, refused before it is read), a chunked body (411),
    unknown paths (404), wrong methods (405); the registry answers normally
    afterwards."""
    s = subject("bad")
    assert raw(url, "POST", f"/subjects/{s}/versions", b"{not json")[0] == 400
    # A schema given as an object, not a string: 400, as Confluent's server answers
    # (https://github.com/confluentinc/schema-registry/issues/2729).
    as_object = json.dumps({"schema": {"type": "string"}}).encode()
    assert raw(url, "POST", f"/subjects/{s}/versions", as_object)[1]["error_code"] == 400
    cases = [
        ({"schema": '{"type": "recrod"}'}, 42201),
        ({"schema": "not json at all"}, 42201),
        ({"schema": A1, "schemaType": "XML"}, 42201),
        ({"schema": '{"type": 12}', "schemaType": "JSON"}, 42201),
        ({"schema": "message {", "schemaType": "PROTOBUF"}, 42201),
        ({"nothing": 1}, 42201),
    ]
    for body, code in cases:
        status, error = raw(url, "POST", f"/subjects/{s}/versions", json.dumps(body).encode())
        assert (status, error["error_code"]) == (422, code), body
        assert isinstance(error["message"], str) and error["message"]
    assert raw(url, "GET", f"/subjects/{s}/versions")[1]["error_code"] == 40401
    raw(url, "POST", f"/subjects/{s}/versions", json.dumps({"schema": A1}).encode())
    assert raw(url, "GET", f"/subjects/{s}/versions/7")[1]["error_code"] == 40402
    for version in ("abc", "0", "-2"):
        status, error = raw(url, "GET", f"/subjects/{s}/versions/{version}")
        assert (status, error["error_code"]) == (422, 42202)
    assert raw(url, "GET", "/schemas/ids/987654")[1]["error_code"] == 40403
    status, _ = raw(url, "POST", f"/subjects/{s}/versions", None, {"Content-Length": str(1 << 30)})
    assert status == 413
    chunked = {"Transfer-Encoding": "chunked"}
    assert raw(url, "POST", f"/subjects/{s}/versions", b"0\r\n\r\n", chunked)[0] == 411
    assert raw(url, "HEAD", f"/subjects/{s}/versions") == (200, b"")
    assert raw(url, "GET", "/no/such/path")[0] == 404
    assert raw(url, "PATCH", "/subjects")[0] == 405
    assert raw(url, "GET", f"/subjects/{s}/versions") == (200, [1])


# Compatibility rules. Each case: (level, [earlier schemas], new schema, compatible?).

AVRO_BASE = {"name": "id", "type": "int"}
AVRO_CASES = [
    # Avro's schema resolution: a reader field missing from the writer needs a default.
    ("BACKWARD", [record("R", AVRO_BASE)], record("R", AVRO_BASE, {"name": "n", "type": "string"}), False),
    ("BACKWARD", [record("R", AVRO_BASE)], record("R", AVRO_BASE, {"name": "n", "type": "string", "default": "x"}), True),
    # Removing a field: the new reader skips it (backward); old readers need a default (forward).
    ("BACKWARD", [record("R", AVRO_BASE, {"name": "n", "type": "string"})], record("R", AVRO_BASE), True),
    ("FORWARD", [record("R", AVRO_BASE, {"name": "n", "type": "string"})], record("R", AVRO_BASE), False),
    ("FORWARD", [record("R", AVRO_BASE, {"name": "n", "type": "string", "default": ""})], record("R", AVRO_BASE), True),
    ("FORWARD", [record("R", AVRO_BASE)], record("R", AVRO_BASE, {"name": "n", "type": "string"}), True),
    ("FULL", [record("R", AVRO_BASE)], record("R", AVRO_BASE, {"name": "n", "type": "string"}), False),
    ("FULL", [record("R", AVRO_BASE)], record("R", AVRO_BASE, {"name": "n", "type": "string", "default": ""}), True),
    # Promotions int -> long -> float -> double, string <-> bytes; never back.
    ("BACKWARD", [record("R", {"name": "v", "type": "int"})], record("R", {"name": "v", "type": "long"}), True),
    ("BACKWARD", [record("R", {"name": "v", "type": "long"})], record("R", {"name": "v", "type": "double"}), True),
    ("BACKWARD", [record("R", {"name": "v", "type": "float"})], record("R", {"name": "v", "type": "double"}), True),
    ("BACKWARD", [record("R", {"name": "v", "type": "long"})], record("R", {"name": "v", "type": "int"}), False),
    ("BACKWARD", [record("R", {"name": "v", "type": "string"})], record("R", {"name": "v", "type": "bytes"}), True),
    ("BACKWARD", [record("R", {"name": "v", "type": "bytes"})], record("R", {"name": "v", "type": "string"}), True),
    ("BACKWARD", [record("R", {"name": "v", "type": "string"})], record("R", {"name": "v", "type": "int"}), False),
    # Enums: a symbol the writer has and the reader lacks, unless the reader has a default.
    ("BACKWARD", [record("R", {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}})],
     record("R", {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}}), True),
    ("BACKWARD", [record("R", {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}})],
     record("R", {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}}), False),
    ("BACKWARD", [record("R", {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}})],
     record("R", {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"], "default": "A"}}), True),
    # Unions: the reader's union must take every branch written.
    ("BACKWARD", [record("R", {"name": "u", "type": "string"})], record("R", {"name": "u", "type": ["null", "string"]}), True),
    ("BACKWARD", [record("R", {"name": "u", "type": ["null", "string"]})], record("R", {"name": "u", "type": "string"}), False),
    ("BACKWARD", [record("R", {"name": "u", "type": ["int", "string"]})], record("R", {"name": "u", "type": ["long", "string"]}), True),
    # Records match by name or by an alias of the reader's; fields by name or alias.
    ("BACKWARD", [record("Old", AVRO_BASE)], record("New", AVRO_BASE), False),
    ("BACKWARD", [record("Old", AVRO_BASE)], record("New", AVRO_BASE, aliases=["Old"]), True),
    ("BACKWARD", [record("R", {"name": "old_name", "type": "int"})], record("R", {"name": "new_name", "type": "int"}), False),
    ("BACKWARD", [record("R", {"name": "old_name", "type": "int"})],
     record("R", {"name": "new_name", "type": "int", "aliases": ["old_name"]}), True),
    # Fixed sizes; arrays and maps by their items and values.
    ("BACKWARD", [record("R", {"name": "f", "type": {"type": "fixed", "name": "F", "size": 4}})],
     record("R", {"name": "f", "type": {"type": "fixed", "name": "F", "size": 8}}), False),
    ("BACKWARD", [record("R", {"name": "a", "type": {"type": "array", "items": "int"}})],
     record("R", {"name": "a", "type": {"type": "array", "items": "long"}}), True),
    ("BACKWARD", [record("R", {"name": "m", "type": {"type": "map", "values": "long"}})],
     record("R", {"name": "m", "type": {"type": "map", "values": "int"}}), False),
    # Transitive levels check every earlier version, the others only the latest:
    # v2 gave n a default, v3 drops the default; v3 still reads v2's data, not v1's.
    ("BACKWARD", [record("R", AVRO_BASE), record("R", AVRO_BASE, {"name": "n", "type": "string", "default": ""})],
     record("R", AVRO_BASE, {"name": "n", "type": "string"}), True),
    ("BACKWARD_TRANSITIVE", [record("R", AVRO_BASE), record("R", AVRO_BASE, {"name": "n", "type": "string", "default": ""})],
     record("R", AVRO_BASE, {"name": "n", "type": "string"}), False),
    ("FORWARD_TRANSITIVE", [record("R", AVRO_BASE, {"name": "n", "type": "string"}), record("R", AVRO_BASE, {"name": "n", "type": "string", "default": ""})],
     record("R", AVRO_BASE), False),
    ("FORWARD", [record("R", AVRO_BASE, {"name": "n", "type": "string"}), record("R", AVRO_BASE, {"name": "n", "type": "string", "default": ""})],
     record("R", AVRO_BASE), True),
    ("FULL_TRANSITIVE", [record("R", AVRO_BASE), record("R", AVRO_BASE, {"name": "n", "type": "string", "default": ""})],
     record("R", AVRO_BASE, {"name": "n", "type": "string", "default": ""}, {"name": "m", "type": "int", "default": 0}), True),
    ("NONE", [record("R", AVRO_BASE)], record("R", {"name": "id", "type": "string"}), True),
]  # fmt: skip


def obj(properties: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"type": "object", "properties": properties, **extra})


JSON_CASES = [
    # Open content model (additionalProperties absent): a property added may clash
    # with what old documents carried; one removed is fine.
    ("BACKWARD", [obj({"a": {"type": "string"}})], obj({"a": {"type": "string"}, "b": {"type": "integer"}}), False),
    ("BACKWARD", [obj({"a": {"type": "string"}, "b": {"type": "integer"}})], obj({"a": {"type": "string"}}), True),
    # Closed content model: adding an optional property is fine, removing one is not.
    ("BACKWARD", [obj({"a": {"type": "string"}}, additionalProperties=False)],
     obj({"a": {"type": "string"}, "b": {"type": "integer"}}, additionalProperties=False), True),
    ("BACKWARD", [obj({"a": {"type": "string"}, "b": {"type": "integer"}}, additionalProperties=False)],
     obj({"a": {"type": "string"}}, additionalProperties=False), False),
    # A required property added is incompatible.
    ("BACKWARD", [obj({"a": {"type": "string"}}, additionalProperties=False)],
     obj({"a": {"type": "string"}, "b": {"type": "integer"}}, additionalProperties=False, required=["b"]), False),
    # Types: widened integer -> number fine, narrowed or changed not.
    ("BACKWARD", [obj({"a": {"type": "integer"}})], obj({"a": {"type": "number"}}), True),
    ("BACKWARD", [obj({"a": {"type": "number"}})], obj({"a": {"type": "integer"}}), False),
    ("BACKWARD", [obj({"a": {"type": "string"}})], obj({"a": {"type": ["string", "null"]}}), True),
    ("BACKWARD", [obj({"a": {"type": "string"}})], obj({"a": {"type": "boolean"}}), False),
    # Bounds tightened, enums narrowed: incompatible; loosened: fine.
    ("BACKWARD", [obj({"a": {"type": "string", "maxLength": 10}})], obj({"a": {"type": "string", "maxLength": 5}}), False),
    ("BACKWARD", [obj({"a": {"type": "string", "maxLength": 5}})], obj({"a": {"type": "string", "maxLength": 10}}), True),
    ("BACKWARD", [obj({"a": {"enum": ["x", "y"]}})], obj({"a": {"enum": ["x"]}}), False),
    ("BACKWARD", [obj({"a": {"enum": ["x"]}})], obj({"a": {"enum": ["x", "y"]}}), True),
    # Closing an open model: incompatible. FORWARD checks the other way round.
    ("BACKWARD", [obj({"a": {"type": "string"}})], obj({"a": {"type": "string"}}, additionalProperties=False), False),
    ("FORWARD", [obj({"a": {"type": "string"}}, additionalProperties=False)], obj({"a": {"type": "string"}}), False),
    ("FORWARD", [obj({"a": {"type": "integer"}})], obj({"a": {"type": "number"}}), False),
    ("FULL", [obj({"a": {"type": "integer"}})], obj({"a": {"type": "integer"}}, description="same"), True),
]  # fmt: skip


def proto(body: str, package: str = "shop") -> str:
    return f'syntax = "proto3";\npackage {package};\n{body}\n'


P1 = proto("message Order { string id = 1; int32 qty = 2; }")
PROTOBUF_CASES = [
    # Fields added or removed (numbers decide): compatible, both ways.
    ("BACKWARD", [P1], proto("message Order { string id = 1; int32 qty = 2; string note = 3; }"), True),
    ("FULL", [P1], proto("message Order { string id = 1; }"), True),
    # Renaming a field keeps its number: compatible.
    ("BACKWARD", [P1], proto("message Order { string id = 1; int32 quantity = 2; }"), True),
    # Types: within a wire-compatible group fine, across not.
    ("BACKWARD", [P1], proto("message Order { string id = 1; int64 qty = 2; }"), True),
    ("BACKWARD", [P1], proto("message Order { string id = 1; string qty = 2; }"), False),
    ("BACKWARD", [P1], proto("message Order { bytes id = 1; int32 qty = 2; }"), True),
    ("BACKWARD", [P1], proto("message Order { string id = 1; sint32 qty = 2; }"), False),
    # A message removed, the package changed: incompatible; a message added: fine
    # backward, not forward (old readers lack it).
    ("BACKWARD", [P1 + "message Extra { int32 x = 1; }"], P1, False),
    ("BACKWARD", [P1], P1 + "message Extra { int32 x = 1; }", True),
    ("FORWARD", [P1], P1 + "message Extra { int32 x = 1; }", False),
    ("BACKWARD", [P1], proto("message Order { string id = 1; int32 qty = 2; }", package="store"), False),
    # A field's message type changed.
    ("BACKWARD", [proto("message A { int32 x = 1; } message B { int32 y = 1; } message Order { A part = 1; }")],
     proto("message A { int32 x = 1; } message B { int32 y = 1; } message Order { B part = 1; }"), False),
    # An enum field's enum changed; an enum field from int32 (one wire-compatible group).
    ("BACKWARD", [proto("enum A { A0 = 0; } enum B { B0 = 0; } message Order { A kind = 1; }")],
     proto("enum A { A0 = 0; } enum B { B0 = 0; } message Order { B kind = 1; }"), False),
    ("BACKWARD", [proto("message Order { int32 kind = 1; }")],
     proto("enum A { A0 = 0; A1 = 1; } message Order { A kind = 1; }"), True),
    # Enum values added and removed: compatible.
    ("FULL", [proto("enum A { A0 = 0; A1 = 1; } message Order { A kind = 1; }")],
     proto("enum A { A0 = 0; A2 = 2; } message Order { A kind = 1; }"), True),
    # Several fields moved into one oneof.
    ("BACKWARD", [P1], proto("message Order { oneof which { string id = 1; int32 qty = 2; } }"), False),
]  # fmt: skip


def _check_case(
    client: SchemaRegistryClient,
    schema_type: str,
    level: str,
    earlier: list[str],
    new: str,
    ok: bool,
) -> None:
    s = subject(f"compat-{schema_type.lower()}")
    client.set_compatibility(s, "NONE")
    for text in earlier:
        client.register_schema(s, Schema(text, schema_type))
    client.set_compatibility(s, level)
    # Against every version the level names (POST .../versions), as registering does.
    assert client.test_compatibility_all_versions(s, Schema(new, schema_type)) is ok
    if ok:
        assert client.register_schema(s, Schema(new, schema_type)) > 0
    else:
        assert error_of(lambda: client.register_schema(s, Schema(new, schema_type))) == (409, 409)


@pytest.mark.parametrize(("level", "earlier", "new", "ok"), AVRO_CASES)
@pytest.mark.compat("Schema Registry", "compatibility levels: Avro, JSON Schema, Protobuf rules")
def test_avro_compatibility(
    fresh: SchemaRegistryClient, level: str, earlier: list[str], new: str, ok: bool
) -> None:
    """Avro's schema resolution rules (Avro specification, "Schema Resolution";
    the registry's "Schema Evolution and Compatibility", Avro section)."""
    _check_case(fresh, "AVRO", level, earlier, new, ok)


@pytest.mark.parametrize(("level", "earlier", "new", "ok"), JSON_CASES)
@pytest.mark.compat("Schema Registry", "compatibility levels: Avro, JSON Schema, Protobuf rules")
def test_json_schema_compatibility(
    fresh: SchemaRegistryClient, level: str, earlier: list[str], new: str, ok: bool
) -> None:
    """JSON Schema's rules as the registry documents them (open and closed
    content models, types widened and narrowed, required, bounds, enums)."""
    _check_case(fresh, "JSON", level, earlier, new, ok)


@pytest.mark.parametrize(("level", "earlier", "new", "ok"), PROTOBUF_CASES)
@pytest.mark.compat("Schema Registry", "compatibility levels: Avro, JSON Schema, Protobuf rules")
def test_protobuf_compatibility(
    fresh: SchemaRegistryClient, level: str, earlier: list[str], new: str, ok: bool
) -> None:
    """Protobuf's rules as the registry documents them, with protobuf's
    wire-compatible types (language guide, "Updating a message type")."""
    _check_case(fresh, "PROTOBUF", level, earlier, new, ok)


@pytest.mark.compat("Schema Registry", "REST API through confluent-kafka's SchemaRegistryClient")
def test_compatibility_against_a_version_and_verbose_messages(
    client: SchemaRegistryClient, url: str
) -> None:
    """POST /compatibility/subjects/{s}/versions/{v}: against that version only;
    ``verbose=true`` says why; an unknown subject or version is 40401/40402."""
    s = subject("verbose")
    client.register_schema(s, Schema(A1, "AVRO"))
    client.register_schema(s, Schema(A2, "AVRO"))
    needs_email = record(
        "User", {"name": "id", "type": "long"}, {"name": "email", "type": "string"}
    )
    assert client.test_compatibility(s, Schema(needs_email, "AVRO"), version=2) is True
    assert client.test_compatibility(s, Schema(needs_email, "AVRO"), version=1) is False
    body = json.dumps({"schema": needs_email}).encode()
    status, answer = raw(url, "POST", f"/compatibility/subjects/{s}/versions/1?verbose=true", body)
    assert status == 200 and answer["is_compatible"] is False
    assert any("email" in m for m in answer["messages"])
    assert (
        raw(url, "POST", f"/compatibility/subjects/{s}/versions/9", body)[1]["error_code"] == 40402
    )
    assert (
        raw(url, "POST", f"/compatibility/subjects/{subject('x')}/versions/1", body)[1][
            "error_code"
        ]
        == 40401
    )


@pytest.mark.compat("Schema Registry", "REST API through confluent-kafka's SchemaRegistryClient")
def test_normalize_makes_key_order_irrelevant(client: SchemaRegistryClient) -> None:
    """``normalize=true``: schemas that differ only in the order of their keys are one."""
    s = subject("normalize")
    reordered = json.dumps(
        {"fields": [{"type": "long", "name": "id"}], "name": "User", "type": "record"}
    )
    first = client.register_schema(s, Schema(A1, "AVRO"), normalize_schemas=True)
    assert client.register_schema(s, Schema(reordered, "AVRO"), normalize_schemas=True) == first


@pytest.mark.compat("Schema Registry", "REST API through confluent-kafka's SchemaRegistryClient")
def test_json_and_protobuf_schemas_register_and_read_back(fresh: SchemaRegistryClient) -> None:
    """schemaType JSON and PROTOBUF are kept and served with their type."""
    js, ps = subject("json"), subject("proto")
    json_id = fresh.register_schema(js, Schema(obj({"a": {"type": "string"}}), "JSON"))
    proto_id = fresh.register_schema(ps, Schema(P1, "PROTOBUF"))
    with SchemaRegistryClient({"url": fresh.config()["url"]}) as other:
        assert other.get_schema(json_id).schema_type == "JSON"
        got = other.get_schema(proto_id)
        assert got.schema_type == "PROTOBUF" and "message Order" in got.schema_str


@pytest.mark.compat(
    "Schema Registry", "confluent-kafka's Avro, Protobuf, JSON serializers and deserializers"
)
def test_avro_serializer_and_deserializer_through_brokerlite(
    registry_broker: RunningBroker, url: str, tmp_path: Path
) -> None:
    """confluent-kafka's AvroSerializer registers the schema with our registry
    and frames records (magic 0, the id); they go through brokerlite and its
    AvroDeserializer reads them back by the id from our registry."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = f"avro-orders-{next(_names)}"
    schema = record("Order", {"name": "id", "type": "long"}, {"name": "item", "type": "string"})
    with SchemaRegistryClient({"url": url}) as sr:
        serializer = AvroSerializer(sr, schema)
        deserializer = AvroDeserializer(sr)
        producer = Producer({"bootstrap.servers": registry_broker.bootstrap_servers})
        sent = [{"id": i, "item": f"thing-{i}"} for i in range(5)]
        for value in sent:
            ctx = SerializationContext(topic, MessageField.VALUE)
            producer.produce(topic, value=serializer(value, ctx))
        assert producer.flush(60) == 0
        registered = sr.get_latest_version(f"{topic}-value")
        consumer = Consumer({"bootstrap.servers": registry_broker.bootstrap_servers,
                             "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})  # fmt: skip
        consumer.subscribe([topic])
        got: list[Any] = []
        try:
            for _ in range(600):
                if len(got) == len(sent):
                    break
                message = consumer.poll(0.5)
                if message is None or message.error():
                    continue
                framed = message.value()
                assert framed[0] == 0 and int.from_bytes(framed[1:5], "big") == registered.schema_id
                got.append(deserializer(framed, SerializationContext(topic, MessageField.VALUE)))
        finally:
            consumer.close()
    assert got == sent


def _order_class() -> Any:
    """A Protobuf message class built at run time (no generated code, no protoc)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(
        name=f"order_{next(_names)}.proto", package="shop", syntax="proto3"
    )
    message = file.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)  # fmt: skip
    message.field.add(name="item", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


@pytest.mark.compat(
    "Schema Registry", "confluent-kafka's Avro, Protobuf, JSON serializers and deserializers"
)
def test_protobuf_and_json_serializers_round_trip_through_the_registry(url: str) -> None:
    """confluent-kafka's ProtobufSerializer registers its schema (a serialized
    descriptor) and its ProtobufDeserializer reads it back by id; the same for
    JSONSerializer/JSONDeserializer. The framing carries our registry's id."""
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    order = _order_class()
    topic = f"typed-{next(_names)}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    with SchemaRegistryClient({"url": url}) as sr:
        serializer = ProtobufSerializer(order, sr, {"use.deprecated.format": False})
        framed = serializer(order(id=7, item="pen"), ctx)
        schema_id = sr.get_latest_version(f"{topic}-value").schema_id
        assert framed[0] == 0 and int.from_bytes(framed[1:5], "big") == schema_id
        assert ProtobufDeserializer(order, {"use.deprecated.format": False}, sr)(
            framed, ctx
        ) == order(id=7, item="pen")
        assert sr.get_latest_version(f"{topic}-value").version == 1
        json_topic = f"json-{topic}"
        json_ctx = SerializationContext(json_topic, MessageField.VALUE)
        schema = obj({"id": {"type": "integer"}, "item": {"type": "string"}}, required=["id"])
        framed = JSONSerializer(schema, sr)({"id": 3, "item": "cup"}, json_ctx)
        assert (
            int.from_bytes(framed[1:5], "big")
            == sr.get_latest_version(f"{json_topic}-value").schema_id
        )
        assert JSONDeserializer(None, schema_registry_client=sr)(framed, json_ctx) == {
            "id": 3,
            "item": "cup",
        }


ORDER_PROTO = """
syntax = "proto3";
package shop;
// A comment the parser reads past.
message Order {
  string id = 1;
  Status status = 2;
  map<string, int32> counts = 3;
  oneof pay { string card = 4; int64 voucher = 5; }
  Line line = 6;
  message Line { string sku = 1; repeated int32 qty = 2; }
  enum Status { NEW = 0; DONE = 1; }
}
"""


@pytest.mark.compat(
    "Schema Registry", "confluent-kafka's Avro, Protobuf, JSON serializers and deserializers"
)
def test_a_proto_text_schema_is_served_as_a_descriptor_for_the_protobuf_deserializer(
    url: str,
) -> None:
    """A schema registered as .proto text is served with ``format=serialized`` as
    the ``FileDescriptorProto`` protoc would build (nested types, an enum, a map,
    a oneof), which confluent-kafka's ProtobufDeserializer reads the writer's
    schema from; its serializer frames with our id (use.latest.version)."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    topic = f"proto-text-{next(_names)}"
    with SchemaRegistryClient({"url": url}) as sr:
        schema_id = sr.register_schema(f"{topic}-value", Schema(ORDER_PROTO, "PROTOBUF"))
        assert sr.get_schema(schema_id).schema_str == ORDER_PROTO
    with SchemaRegistryClient({"url": url}) as sr:
        served = sr.get_schema(schema_id, fmt="serialized").schema_str
        pool = descriptor_pool.DescriptorPool()
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(served)))
        desc = pool.FindMessageTypeByName("shop.Order")
        assert desc.fields_by_name["status"].enum_type.full_name == "shop.Order.Status"
        assert desc.fields_by_name["counts"].message_type.GetOptions().map_entry
        assert [f.name for f in desc.oneofs_by_name["pay"].fields] == ["card", "voucher"]
        assert desc.fields_by_name["line"].message_type.full_name == "shop.Order.Line"
        order = message_factory.GetMessageClass(desc)
        sent = order(id="o1", status=1, counts={"a": 2}, voucher=9)
        sent.line.sku = "s"
        sent.line.qty.extend([1, 2])
        ctx = SerializationContext(topic, MessageField.VALUE)
        conf = {
            "use.deprecated.format": False,
            "auto.register.schemas": False,
            "use.latest.version": True,
        }
        framed = ProtobufSerializer(order, sr, conf)(sent, ctx)
        assert int.from_bytes(framed[1:5], "big") == schema_id
        assert (
            ProtobufDeserializer(order, {"use.deprecated.format": False}, sr)(framed, ctx) == sent
        )


@pytest.mark.compat(
    "Schema Registry", "confluent-kafka's Avro, Protobuf, JSON serializers and deserializers"
)
def test_protobuf_imports_are_references(url: str) -> None:
    """A .proto importing another registered one names it in ``references``; the
    served descriptor types its fields from the import (a message, an enum),
    and confluent-kafka's ProtobufDeserializer resolves the reference to read
    the record."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    n = next(_names)
    common = f'syntax = "proto3";\npackage shop{n};\nmessage Money {{ int64 cents = 1; }}\nenum Currency {{ EUR = 0; USD = 1; }}\n'
    order = (f'syntax = "proto3";\npackage shop{n};\nimport "common{n}.proto";\n'
             "message Priced { Money price = 1; Currency currency = 2; }\n")  # fmt: skip
    topic = f"priced-{n}"
    with SchemaRegistryClient({"url": url}) as sr:
        sr.register_schema(f"common{n}.proto", Schema(common, "PROTOBUF"))
        refs = [SchemaReference(f"common{n}.proto", f"common{n}.proto", 1)]
        schema_id = sr.register_schema(f"{topic}-value", Schema(order, "PROTOBUF", refs))
        pool = descriptor_pool.DescriptorPool()
        for name, text in ((f"common{n}.proto", sr.get_version(f"common{n}.proto", 1, fmt="serialized").schema.schema_str),
                           ("order.proto", sr.get_schema(schema_id, fmt="serialized").schema_str)):  # fmt: skip
            file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text))
            file.name = name
            pool.Add(file)
        desc = pool.FindMessageTypeByName(f"shop{n}.Priced")
        assert desc.fields_by_name["currency"].enum_type.full_name == f"shop{n}.Currency"
        priced = message_factory.GetMessageClass(desc)
        sent = priced(currency=1)
        sent.price.cents = 250
        ctx = SerializationContext(topic, MessageField.VALUE)
        conf = {
            "use.deprecated.format": False,
            "auto.register.schemas": False,
            "use.latest.version": True,
        }
        framed = ProtobufSerializer(priced, sr, conf)(sent, ctx)
        assert int.from_bytes(framed[1:5], "big") == schema_id
    with SchemaRegistryClient({"url": url}) as sr:
        assert (
            ProtobufDeserializer(priced, {"use.deprecated.format": False}, sr)(framed, ctx) == sent
        )


@pytest.mark.compat("Schema Registry", "REST API through confluent-kafka's SchemaRegistryClient")
def test_concurrent_registrations_on_one_node_keep_every_schema(url: str) -> None:
    """Many clients registering different schemas under one subject at once: each
    gets its own id and its own version, and every version reads back as the
    schema registered (none overwritten)."""
    s = subject("concurrent")
    texts = [record(f"C{i}", {"name": "a", "type": "int"}) for i in range(12)]
    with SchemaRegistryClient({"url": url}) as sr:
        sr.set_compatibility(s, "NONE")
    got: dict[int, int] = {}

    def register(i: int) -> None:
        with SchemaRegistryClient({"url": url}) as own:
            got[i] = own.register_schema(s, Schema(texts[i], "AVRO"))

    threads = [threading.Thread(target=register, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(set(got.values())) == len(texts)
    with SchemaRegistryClient({"url": url}) as sr:
        assert sr.get_versions(s) == list(range(1, len(texts) + 1))
        by_id = {
            sr.get_version(s, v).schema_id: sr.get_version(s, v).schema.schema_str
            for v in range(1, 13)
        }
    assert {i: json.loads(by_id[got[i]]) for i in got} == {i: json.loads(texts[i]) for i in got}


AVRO_PEER = Path(__file__).resolve().parent.parent / "interop" / "avro" / "AvroCompat.java"


def _avro_peer_classpath() -> str | None:
    """Apache Avro's Java library as PySpark ships it (avro, jackson, slf4j)."""
    try:
        import pyspark
    except ImportError:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    wanted = ("avro-1", "jackson-core-", "jackson-databind-", "jackson-annotations-", "slf4j-api-")
    found = [p for p in sorted(jars.glob("*.jar")) if p.name.startswith(wanted)]
    return ":".join(map(str, found)) if any(p.name.startswith("avro-1") for p in found) else None


def _pairs(level: str, earlier: list[str], new: str) -> list[tuple[str, str]]:
    """The (reader, writer) pairs a level checks (the registry's documentation:
    BACKWARD the new schema reads the old, FORWARD the reverse, FULL both; the
    transitive forms against every earlier version, the others the latest)."""
    olds = earlier if level.endswith("TRANSITIVE") else earlier[-1:]
    pairs = []
    for old in olds:
        if level.startswith(("BACKWARD", "FULL")):
            pairs.append((new, old))
        if level.startswith(("FORWARD", "FULL")):
            pairs.append((old, new))
    return pairs


@pytest.mark.compat("Schema Registry", "compatibility levels: Avro, JSON Schema, Protobuf rules")
def test_avro_cases_agree_with_apache_avros_own_check(tmp_path: Path) -> None:
    """Apache Avro's Java ``SchemaCompatibility.checkReaderWriterCompatibility``
    (the check Confluent's registry runs for Avro) gives, for every reader/writer
    pair the cases' levels check, the verdict the cases expect and our checker
    gives: the Avro table above is Avro's rules, not ours."""
    classpath = _avro_peer_classpath()
    if classpath is None or shutil.which("java") is None:
        pytest.skip("Apache Avro's jar (PySpark's) or java is missing")
    pairs = [(level, pair) for level, earlier, new, _ in AVRO_CASES if level != "NONE"
             for pair in _pairs(level, earlier, new)]  # fmt: skip
    lines = "".join(
        f"{json.dumps(json.loads(r), separators=(',', ':'))}\t{json.dumps(json.loads(w), separators=(',', ':'))}\n"
        for _, (r, w) in pairs
    )
    done = subprocess.run(["java", "-cp", classpath, str(AVRO_PEER)], input=lines,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    verdicts = done.stdout.split()
    assert len(verdicts) == len(pairs)
    ours = ["COMPATIBLE" if not incompatibilities(parse("AVRO", r), parse("AVRO", w)) else "INCOMPATIBLE"
            for _, (r, w) in pairs]  # fmt: skip
    assert ours == verdicts
    index = 0
    for level, earlier, new, ok in AVRO_CASES:
        if level == "NONE":
            continue
        count = len(_pairs(level, earlier, new))
        assert all(v == "COMPATIBLE" for v in verdicts[index : index + count]) is ok, (level, new)
        index += count
