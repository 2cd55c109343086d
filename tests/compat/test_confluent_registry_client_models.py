"""The registry's models on the drop-in (``Schema``, ``RegisteredSchema``,
``ServerConfig``, ``Rule``, ``RuleSet``, ``Metadata``...) read and write the
registry's JSON as confluent-kafka 2.16's do, compare and hash alike, and take
their arguments in the same order."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

APIS = ["confluent_kafka", "trafka.compat.confluent"]
MODELS = "schema_registry.common.schema_registry_client"

RULE = {
    "name": "encrypt",
    "doc": "pii",
    "kind": "TRANSFORM",
    "mode": "WRITEREAD",
    "type": "ENCRYPT",
    "tags": ["PII"],
    "params": {"encrypt.kek.name": "k1"},
    "onFailure": "ERROR,NONE",
    "disabled": False,
}
SCHEMA = {
    "schema": '{"type": "string"}',
    "schemaType": "AVRO",
    "references": [{"name": "a.b.C", "subject": "c-value", "version": 2}],
    "metadata": {
        "tags": {"a.b.C.ssn": ["PII"]},
        "properties": {"owner": "me"},
        "sensitive": ["ssn"],
    },
    "ruleSet": {"domainRules": [RULE], "migrationRules": [], "enableAt": "2026-01-01"},
}
DICTS: dict[str, list[dict[str, Any]]] = {
    "Schema": [SCHEMA, {"schema": "x"}, {"schema": "y", "schemaType": "PROTOBUF"}, {}],
    "RegisteredSchema": [
        {**SCHEMA, "id": 7, "guid": "g-1", "subject": "s", "version": 3},
        {"id": 47},
        {"schema": "z", "subject": "s", "version": 1},
    ],
    "ServerConfig": [
        {"compatibility": "FULL"},
        {"compatibilityLevel": "BACKWARD", "compatibilityGroup": "app.version"},
        {
            "defaultMetadata": SCHEMA["metadata"],
            "overrideRuleSet": SCHEMA["ruleSet"],
            "defaultRuleSet": {"encodingRules": [RULE]},
        },
        {},
    ],
    "Rule": [RULE, {"name": "only"}, {"kind": "CONDITION", "expr": "a > 1", "onSuccess": "NONE"}],
    "RuleSet": [SCHEMA["ruleSet"], {}],
    "Metadata": [SCHEMA["metadata"], {"properties": {}}, {}],
    "SchemaReference": [{"name": "n", "subject": "s", "version": 1}, {}],
    "Association": [
        {
            "subject": "s",
            "guid": "g",
            "resourceName": "orders",
            "resourceNamespace": "lkc-1",
            "resourceId": "r-1",
            "resourceType": "topic",
            "associationType": "value",
            "frozen": True,
        }
    ],
    "AssociationResponse": [
        {
            "resourceName": "orders",
            "resourceId": "r-1",
            "associations": [{"subject": "s", "associationType": "key", "schema": {"schema": "x"}}],
        }
    ],
}


def _models(api: str) -> Any:
    return importlib.import_module(f"{api}.{MODELS}")


@pytest.mark.parametrize("name", sorted(DICTS))
def test_the_models_read_and_write_the_registrys_json_alike(name: str) -> None:
    out = {}
    for api in APIS:
        kind = getattr(_models(api), name)
        made = [kind.from_dict(d) for d in DICTS[name]]
        out[api] = [m.to_dict() for m in made]
        assert [kind.from_dict(d) for d in out[api]] == made
    assert out["trafka.compat.confluent"] == out["confluent_kafka"]


@pytest.mark.parametrize("name", sorted(DICTS))
def test_the_models_take_the_same_arguments(name: str) -> None:
    params = {}
    for api in APIS:
        sig = inspect.signature(getattr(_models(api), name))
        params[api] = [(p.name, p.default is p.empty) for p in sig.parameters.values()]
    assert params["trafka.compat.confluent"] == params["confluent_kafka"]


def test_schemas_compare_and_hash_alike() -> None:
    for api in APIS:
        m = _models(api)
        one, same = m.Schema.from_dict(SCHEMA), m.Schema.from_dict(dict(SCHEMA))
        assert one == same and hash(one) == hash(same)
        assert {one: 1}[same] == 1
        other = m.Schema.from_dict({**SCHEMA, "references": []})
        assert other != one  # the references compare, though they are not hashed
        registered = m.RegisteredSchema.from_dict({**SCHEMA, "id": 1})
        assert hash(registered) == hash(m.RegisteredSchema.from_dict({**SCHEMA, "id": 1}))


def test_the_enums_are_strings_as_confluent_kafkas() -> None:
    out = {}
    for api in APIS:
        m = _models(api)
        out[api] = [
            (str(member), member.value, member == member.value, format(member))
            for kind in (m.RuleKind, m.RuleMode, m.RulePhase, m.ConfigCompatibilityLevel)
            for member in kind
        ]
    assert out["trafka.compat.confluent"] == out["confluent_kafka"]
