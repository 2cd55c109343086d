"""The drop-in's serdes run a schema's domain rules as confluent-kafka 2.16's do:
a CEL condition on write (with ``use.latest.version``) lets a record through
or fails the serializer; a JSONata transform on read changes the record; a
rule without an executor fails by its ``on_failure`` action; the ``NONE``
action lets a failed rule pass. Each case runs on both sides with the same
registry answers (a fake client: the rule sets ride on the schemas).
Needs the ``rules`` extra (cel-python, jsonata-python)."""

from __future__ import annotations

import json
from typing import Any

import confluent_kafka.schema_registry as theirs
import confluent_kafka.schema_registry.avro as theirs_avro
import pytest
from confluent_kafka.serialization import SerializationContext as TheirContext

import trafka.compat.confluent.schema_registry as ours
import trafka.compat.confluent.schema_registry.avro as ours_avro
from trafka.compat.confluent.schema_registry.rule_registry import RuleRegistry
from trafka.compat.confluent.serialization import SerializationContext

pytest.importorskip("celpy")
pytest.importorskip("jsonata")

from confluent_kafka.schema_registry.rule_registry import RuleRegistry as TheirRuleRegistry
from confluent_kafka.schema_registry.rules.cel.cel_executor import (
    CelExecutor as TheirCel,
)
from confluent_kafka.schema_registry.rules.cel.cel_field_executor import (
    CelFieldExecutor as TheirCelField,
)
from confluent_kafka.schema_registry.rules.jsonata.jsonata_executor import (
    JsonataExecutor as TheirJsonata,
)

from trafka.compat.confluent.schema_registry.rules.cel.cel_executor import CelExecutor
from trafka.compat.confluent.schema_registry.rules.cel.cel_field_executor import CelFieldExecutor
from trafka.compat.confluent.schema_registry.rules.jsonata.jsonata_executor import (
    JsonataExecutor,
)

PERSON = json.dumps(
    {
        "type": "record",
        "name": "Person",
        "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
    }
)


def _rule(kind: str, mode: str, rule_type: str, expr: str, on_failure: str | None = None) -> Any:
    """A rule (confluent-kafka's model: the drop-in's serdes read a rule by its attributes)."""
    return theirs.Rule(
        "r1",
        None,
        theirs.RuleKind(kind),
        theirs.RuleMode(mode),
        rule_type,
        None,
        None,
        expr,
        None,
        on_failure,
        None,
    )


class _Registry:
    """Answers ``get_latest_version`` and ``get_schema`` with a schema carrying ``rules``."""

    def __init__(self, api: Any, rules: list[Any], text: str = PERSON, kind: str = "AVRO") -> None:
        rule_set = theirs.RuleSet(None, rules)
        if api is theirs:
            self.schema = theirs.Schema(text, kind, [], None, rule_set)
        else:
            self.schema = _OurSchema(text, rule_set, kind)
        self.api = api

    def get_latest_version(self, subject: str, fmt: Any = None) -> Any:
        if self.api is theirs:
            return theirs.RegisteredSchema(subject, 1, 9, None, self.schema)
        return ours.RegisteredSchema(
            schema_id=9, guid=None, schema=self.schema, subject=subject, version=1
        )

    def get_schema(self, schema_id: int, subject: Any = None, fmt: Any = None) -> Any:
        return self.schema

    def config(self) -> dict[str, Any]:
        return {}


class _OurSchema:
    """A schema with a rule set, as the drop-in's client returns one."""

    def __init__(self, text: str, rule_set: Any, kind: str = "AVRO") -> None:
        self.schema_str, self.schema_type = text, kind
        self.references: list[Any] = []
        self.rule_set = rule_set


def _both(rules: list[Any], record: dict[str, Any], write: bool, text: str = PERSON) -> list[Any]:
    """What each side gives for ``record`` (written, or written then read)."""
    out = []
    for api in (ours, theirs):
        registry = _Registry(api, rules, text)
        if api is ours:
            rule_registry: Any = RuleRegistry()
            rule_registry.register_executor(CelExecutor())
            rule_registry.register_executor(CelFieldExecutor())
            rule_registry.register_executor(JsonataExecutor())
            module: Any = ours_avro
            ctx: Any = SerializationContext("t", "value")
        else:
            rule_registry = TheirRuleRegistry()
            rule_registry.register_executor(TheirCel())
            rule_registry.register_executor(TheirCelField())
            rule_registry.register_executor(TheirJsonata())
            module, ctx = theirs_avro, TheirContext("t", "value")
        conf = {"auto.register.schemas": False, "use.latest.version": True}
        conf["subject.name.strategy"] = api.topic_subject_name_strategy
        serializer = module.AvroSerializer(registry, text, conf=conf, rule_registry=rule_registry)
        try:
            data = serializer(dict(record), ctx)
            if not write:
                read_conf = {"subject.name.strategy": api.topic_subject_name_strategy}
                data = module.AvroDeserializer(
                    registry, conf=read_conf, rule_registry=rule_registry
                )(data, ctx)
            out.append(data)
        except Exception as exc:
            out.append(type(exc).__name__)
    return out


@pytest.mark.parametrize(
    ("age", "expected"),
    [(30, b"\x00\x00\x00\x00\x09\x06Ann<"), (3, "SerializationError")],
)
def test_a_cel_condition_on_write(age: int, expected: Any) -> None:
    rules = [_rule("CONDITION", "WRITE", "CEL", "message.age >= 18")]
    assert _both(rules, {"name": "Ann", "age": age}, write=True) == [expected, expected]


def test_a_failed_condition_with_the_none_action_passes() -> None:
    rules = [_rule("CONDITION", "WRITE", "CEL", "message.age >= 18", on_failure="NONE")]
    mine, their = _both(rules, {"name": "Ann", "age": 3}, write=True)
    assert mine == their == b"\x00\x00\x00\x00\x09\x06Ann\x06"


def test_a_jsonata_transform_on_read() -> None:
    expr = '$merge([$, {"name": $uppercase(name)}])'
    rules = [_rule("TRANSFORM", "READ", "JSONATA", expr)]
    mine, their = _both(rules, {"name": "Ann", "age": 40}, write=False)
    assert mine == their == {"name": "ANN", "age": 40}


TAGGED = json.dumps(
    {
        "type": "record",
        "name": "Card",
        "namespace": "pay",
        "fields": [
            {"name": "holder", "type": "string", "confluent:tags": ["PII"]},
            {"name": "number", "type": ["null", "string"], "confluent:tags": ["PII"]},
            {"name": "limit", "type": "int"},
            {"name": "notes", "type": {"type": "array", "items": "string"}},
        ],
    }
)
CARD = {"holder": "Ann", "number": "4111", "limit": 500, "notes": ["a"]}


@pytest.mark.parametrize(
    ("kind", "tags", "expr", "write"),
    [
        ("TRANSFORM", ["PII"], 'value + "-" + typeName + "-" + fullName', True),
        ("TRANSFORM", None, 'typeName == "STRING" ? "x" : value', False),
        ("CONDITION", ["PII"], "size(value) > 2", True),
        ("CONDITION", None, 'name != "limit" || value < 100', True),
    ],
)
def test_cel_field_rules(kind: str, tags: Any, expr: str, write: bool) -> None:
    rule = theirs.Rule(
        "f1",
        None,
        theirs.RuleKind(kind),
        theirs.RuleMode("WRITE" if write else "READ"),
        "CEL_FIELD",
        tags,
        None,
        expr,
        None,
        None,
        None,
    )
    mine, their = _both([rule], CARD, write=write, text=TAGGED)
    assert mine == their


def test_a_rule_without_an_executor_fails() -> None:
    rules = [_rule("CONDITION", "WRITE", "NO_SUCH", "x")]
    assert _both(rules, {"name": "Ann", "age": 30}, write=True) == ["SerializationError"] * 2


@pytest.mark.parametrize(
    ("conf", "env"),
    [
        ({}, {}),
        (
            {
                "ssl.ca.location": "/ca.pem",
                "ssl.certificate.location": "c.pem",
                "ssl.key.location": "c.key",
            },
            {},
        ),
        ({"ssl.ca.location": "", "token.id": "t", "namespace": "ns"}, {"VAULT_CACERT": ""}),
        ({}, {"VAULT_CACERT": "/env.pem", "VAULT_CLIENT_CERT": "e.pem", "VAULT_TOKEN": "tok"}),
    ],
)
def test_the_vault_kms_driver_makes_confluent_kafkas_client(
    conf: dict[str, str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hvac client each side's driver makes: the same URL, token,
    namespace, TLS verification (never off for an empty CA path) and client certificate."""
    pytest.importorskip("hvac")
    pytest.importorskip("tink")
    import hvac
    from confluent_kafka.schema_registry.rules.encryption.hcvault.hcvault_driver import (
        HcVaultKmsDriver as TheirDriver,
    )

    from trafka.compat.confluent.schema_registry.rules.encryption.hcvault.hcvault_driver import (
        HcVaultKmsDriver,
    )

    for name in (
        "VAULT_CACERT",
        "VAULT_CLIENT_CERT",
        "VAULT_CLIENT_KEY",
        "VAULT_TOKEN",
        "VAULT_NAMESPACE",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(hvac, "Client", lambda **kwargs: made.append(kwargs))
    url = "hcvault://vault.example:8200/transit/keys/k1"
    for driver in (HcVaultKmsDriver(), TheirDriver()):
        client = driver.new_kms_client(conf, url)
        assert client.does_support(url)
        assert not client.does_support("hcvault://vault.example:8200/transit/keys/other")
    assert made[0] == made[1]
    assert made[0]["verify"] is True or made[0]["verify"].endswith(".pem")


ACCOUNT = json.dumps(
    {
        "title": "Account",
        "type": "object",
        "properties": {
            "owner": {"type": "string", "confluent:tags": ["PII"]},
            "address": {"$ref": "#/definitions/Address"},
            "balance": {"type": "number"},
            "aliases": {"type": "array", "items": {"type": "string", "confluent:tags": ["PII"]}},
            "note": {"oneOf": [{"type": "null"}, {"type": "string", "confluent:tags": ["PII"]}]},
        },
        "definitions": {
            "Address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "confluent:tags": ["PII"]},
                    "zip": {"type": "integer"},
                },
            }
        },
    }
)
ACCOUNT_VALUE = {
    "owner": "Ann",
    "address": {"city": "Oslo", "zip": 150},
    "balance": 2.5,
    "aliases": ["a1"],
    "note": "hi",
}


@pytest.mark.parametrize(
    ("kind", "tags", "expr"),
    [
        ("TRANSFORM", ["PII"], 'value + "|" + fullName + "|" + typeName'),
        ("TRANSFORM", None, 'typeName == "INT" ? value + 1 : value'),
        ("CONDITION", ["PII"], "size(value) < 10"),
        ("CONDITION", ["PII"], 'value != "Oslo"'),
    ],
)
def test_cel_field_rules_over_json(kind: str, tags: Any, expr: str) -> None:
    import confluent_kafka.schema_registry.json_schema as theirs_json

    import trafka.compat.confluent.schema_registry.json_schema as ours_json

    rule = theirs.Rule(
        "j1",
        None,
        theirs.RuleKind(kind),
        theirs.RuleMode("WRITE"),
        "CEL_FIELD",
        tags,
        None,
        expr,
        None,
        None,
        None,
    )
    out = []
    for api, module in ((ours, ours_json), (theirs, theirs_json)):
        registry = _Registry(api, [rule], ACCOUNT, "JSON")
        if api is theirs:
            rule_registry: Any = TheirRuleRegistry()
            rule_registry.register_executor(TheirCelField())
            ctx: Any = TheirContext("t", "value")
        else:
            rule_registry = RuleRegistry()
            rule_registry.register_executor(CelFieldExecutor())
            ctx = SerializationContext("t", "value")
        conf = {"auto.register.schemas": False, "use.latest.version": True}
        conf["subject.name.strategy"] = api.topic_subject_name_strategy
        serializer = module.JSONSerializer(
            ACCOUNT, registry, conf=conf, rule_registry=rule_registry
        )
        try:
            out.append(json.loads(serializer(json.loads(json.dumps(ACCOUNT_VALUE)), ctx)[5:]))
        except Exception as exc:
            out.append(type(exc).__name__)
    assert out[0] == out[1]


V1 = PERSON
V2 = json.dumps(
    {
        "type": "record",
        "name": "Person",
        "fields": [{"name": "fullName", "type": "string"}, {"name": "age", "type": "int"}],
    }
)
UP = "$merge([$sift($, function($v, $k) {$k != 'name'}), {'fullName': $.'name'}])"
DOWN = "$merge([$sift($, function($v, $k) {$k != 'fullName'}), {'name': $.'fullName'}])"


class _Versions:
    """A subject with versions 1 (``name``) and 2 (``fullName``, with migration
    rules both ways), ids 1 and 2, for either side's serdes."""

    def __init__(self, api: Any, latest: int) -> None:
        rules = [
            theirs.Rule(
                "up",
                None,
                theirs.RuleKind.TRANSFORM,
                theirs.RuleMode.UPGRADE,
                "JSONATA",
                None,
                None,
                UP,
                None,
                None,
                None,
            ),
            theirs.Rule(
                "down",
                None,
                theirs.RuleKind.TRANSFORM,
                theirs.RuleMode.DOWNGRADE,
                "JSONATA",
                None,
                None,
                DOWN,
                None,
                None,
                None,
            ),
        ]
        self.api, self.latest = api, latest
        if api is theirs:
            self.schemas = {
                1: theirs.Schema(V1, "AVRO"),
                2: theirs.Schema(V2, "AVRO", [], None, theirs.RuleSet(rules, None)),
            }
        else:
            self.schemas = {1: _OurSchema(V1, None), 2: _OurSchema(V2, theirs.RuleSet(rules, None))}

    def _registered(self, subject: str, version: int) -> Any:
        schema = self.schemas[version]
        if self.api is theirs:
            return theirs.RegisteredSchema(subject, version, version, None, schema)
        return ours.RegisteredSchema(
            schema_id=version, guid=None, schema=schema, subject=subject, version=version
        )

    def get_schema(self, schema_id: int, subject: Any = None, fmt: Any = None) -> Any:
        return self.schemas[schema_id]

    def lookup_schema(self, subject: str, schema: Any, *args: Any, **kwargs: Any) -> Any:
        version = next(v for v, s in self.schemas.items() if s.schema_str == schema.schema_str)
        return self._registered(subject, version)

    def get_latest_version(self, subject: str, fmt: Any = None) -> Any:
        return self._registered(subject, self.latest)

    def get_version(self, subject: str, version: int, *args: Any, **kwargs: Any) -> Any:
        return self._registered(subject, version)

    def config(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize(("written", "read_at"), [(1, 2), (2, 1)], ids=["upgrade", "downgrade"])
def test_migration_rules_between_versions(written: int, read_at: int) -> None:
    """A record written with one version, read with ``use.latest.version`` at
    the other: the JSONata migration rules of the newer one move it across."""
    record = {"name": "Ann", "age": 7} if written == 1 else {"fullName": "Ann", "age": 7}
    out = []
    for api, module in ((ours, ours_avro), (theirs, theirs_avro)):
        registry = _Versions(api, read_at)
        if api is theirs:
            rule_registry: Any = TheirRuleRegistry()
            rule_registry.register_executor(TheirJsonata())
            ctx: Any = TheirContext("t", "value")
        else:
            rule_registry = RuleRegistry()
            rule_registry.register_executor(JsonataExecutor())
            ctx = SerializationContext("t", "value")
        strategy = {"subject.name.strategy": api.topic_subject_name_strategy}
        writer = module.AvroSerializer(
            registry, [V1, V2][written - 1], conf={**strategy, "auto.register.schemas": False}
        )
        data = writer(dict(record), ctx)
        reader = module.AvroDeserializer(
            registry, conf={**strategy, "use.latest.version": True}, rule_registry=rule_registry
        )
        out.append(reader(data, ctx))
    assert out[0] == out[1]
    assert out[0] == ({"fullName": "Ann", "age": 7} if read_at == 2 else {"name": "Ann", "age": 7})


def _order_class() -> Any:
    """shop.Order (id int64, customer string, lines repeated Line{sku string, qty int32})."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="shop/order.proto", package="shop", syntax="proto3"
    )
    order = fdp.message_type.add(name="Order")
    order.field.add(name="id", number=1, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    order.field.add(name="customer", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    order.field.add(
        name="lines",
        number=3,
        type=f.TYPE_MESSAGE,
        label=f.LABEL_REPEATED,
        type_name=".shop.Order.Line",
    )
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    line.field.add(name="qty", number=2, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def _order_schema_text() -> str:
    """The registered schema of shop.Order: its serialized descriptor in base64
    (as confluent-kafka's serializer registers it; the drop-in reads either)."""
    import base64

    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto()
    _order_class().DESCRIPTOR.file.CopyToProto(fdp)
    return base64.b64encode(fdp.SerializeToString()).decode()


@pytest.mark.parametrize(
    ("rule_type", "kind", "expr"),
    [
        ("CEL", "CONDITION", "message.id > 5 && size(message.lines) == 2"),
        ("CEL", "CONDITION", "message.id > 500"),
        ("CEL_FIELD", "TRANSFORM", 'typeName == "STRING" ? value + "!" : value'),
        ("CEL_FIELD", "TRANSFORM", 'name == "qty" ? value * 10 : value'),
        ("CEL_FIELD", "CONDITION", 'name != "qty" || value < 3'),
    ],
)
def test_rules_over_protobuf(rule_type: str, kind: str, expr: str) -> None:
    import confluent_kafka.schema_registry.protobuf as theirs_proto

    import trafka.compat.confluent.schema_registry.protobuf as ours_proto

    order_class = _order_class()
    rule = theirs.Rule(
        "p1",
        None,
        theirs.RuleKind(kind),
        theirs.RuleMode.WRITE,
        rule_type,
        None,
        None,
        expr,
        None,
        None,
        None,
    )
    out = []
    for api, module in ((ours, ours_proto), (theirs, theirs_proto)):
        registry = _Registry(api, [rule], _order_schema_text(), "PROTOBUF")
        if api is theirs:
            rule_registry: Any = TheirRuleRegistry()
            rule_registry.register_executor(TheirCel())
            rule_registry.register_executor(TheirCelField())
            ctx: Any = TheirContext("t", "value")
        else:
            rule_registry = RuleRegistry()
            rule_registry.register_executor(CelExecutor())
            rule_registry.register_executor(CelFieldExecutor())
            ctx = SerializationContext("t", "value")
        conf = {"auto.register.schemas": False, "use.latest.version": True}
        conf["subject.name.strategy"] = api.topic_subject_name_strategy
        serializer = module.ProtobufSerializer(
            order_class, registry, conf=conf, rule_registry=rule_registry
        )
        order = order_class(id=42, customer="Ann")
        order.lines.add(sku="a", qty=1)
        order.lines.add(sku="b", qty=2)
        try:
            written = serializer(order, ctx)
            out.append(order_class.FromString(written[6:]))  # (id, then index [0]: one byte)
        except Exception as exc:
            out.append(type(exc).__name__)
    assert out[0] == out[1], out


@pytest.mark.parametrize(
    ("rule_type", "kind", "expr"),
    [
        ("CEL_FIELD", "TRANSFORM", "name == 'holder' ; value + '-x'"),
        ("CEL_FIELD", "CONDITION", "name == 'limit' ; value > 1000"),
        ("CEL_FIELD", "CONDITION", "name == 'nope' ; false"),
        ("CEL", "CONDITION", "message.limit > 1000 ; false"),
        ("CEL", "CONDITION", "message.limit < 1000 ; false"),
    ],
)
def test_cel_guards(rule_type: str, kind: str, expr: str) -> None:
    """``guard ; expr``: the expression runs only where the guard holds."""
    rule = theirs.Rule(
        "g",
        None,
        theirs.RuleKind(kind),
        theirs.RuleMode.WRITE,
        rule_type,
        None,
        None,
        expr,
        None,
        None,
        None,
    )
    mine, their = _both([rule], CARD, write=True, text=TAGGED)
    assert mine == their


def test_cel_field_rules_over_json_any_of() -> None:
    """``anyOf``: every subschema the value is valid against is walked."""
    import confluent_kafka.schema_registry.json_schema as theirs_json

    import trafka.compat.confluent.schema_registry.json_schema as ours_json

    pins = {"properties": {"pin": {"confluent:tags": ["PII"], "type": "string"}}}
    npins = {"properties": {"npin": {"confluent:tags": ["PII"], "type": "string"}}}
    schema = json.dumps(
        {
            "type": "object",
            "properties": {
                "any": {"type": "object", "anyOf": [pins, npins]},
            },
        }
    )
    rule = theirs.Rule(
        "a",
        None,
        theirs.RuleKind.TRANSFORM,
        theirs.RuleMode.WRITE,
        "CEL_FIELD",
        ["PII"],
        None,
        "value + '!'",
        None,
        None,
        None,
    )
    value = {"any": {"pin": "p", "npin": "n"}}
    out = []
    for api, module in ((ours, ours_json), (theirs, theirs_json)):
        registry = _Registry(api, [rule], schema, "JSON")
        rule_registry: Any = TheirRuleRegistry() if api is theirs else RuleRegistry()
        rule_registry.register_executor(TheirCelField() if api is theirs else CelFieldExecutor())
        ctx: Any = (TheirContext if api is theirs else SerializationContext)("t", "value")
        conf = {"auto.register.schemas": False, "use.latest.version": True}
        conf["subject.name.strategy"] = api.topic_subject_name_strategy
        serializer = module.JSONSerializer(schema, registry, conf=conf, rule_registry=rule_registry)
        out.append(json.loads(serializer(json.loads(json.dumps(value)), ctx)[5:]))
    assert out[0] == out[1]
    assert out[0]["any"] == {"pin": "p!", "npin": "n!"}
