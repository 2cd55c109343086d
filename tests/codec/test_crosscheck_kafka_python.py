"""Cross-check against an independent codec: kafka-python 3.x (``kafka/protocol``).

kafka-python generates its message classes from Kafka's JSON specs too (a newer
Kafka than ours), with its own reader, its own field walker and its own
encoders. For every (API, version, request/response) that both implement and
whose wire layout agrees, the same values must give the same bytes from both
sides, and each side must decode the other's bytes to the same values.

A small adapter converts between our dataclasses and kafka-python's objects. It
pairs fields by wire position and tags by number, not by name, so a difference
in naming (``underscore_name`` vs our snake_case) cannot hide or fake a result.
It also translates three representation differences that are not wire
differences: kafka-python reads the all-zero UUID as ``None``, represents
``authorized_operations`` bit fields as a set of bit numbers (``None`` for
Kafka's "not requested" value -2**31), and leaves a tagged struct that was absent
as ``None`` where we use the struct's default (as Kafka's Java code does).

Known differences, skipped explicitly:

* kafka-python implements no message classes for the APIs in ``NOT_IN_KAFKA_PYTHON``.
* kafka-python's encoder drops unknown tagged fields (it only decodes them), so
  the byte comparison uses bodies without unknown tags; a separate test checks
  that kafka-python decodes the unknown tags we write.
* kafka-python reads a tagged field holding a struct with ``tagged=None``, which
  refuses any tagged field inside it; the bodies here carry none there.
* kafka-python decodes an ApiVersions response whose error code is not 0 as v0
  (Kafka's client fallback for UNSUPPORTED_VERSION); those bodies use error 0.
"""

from __future__ import annotations

import dataclasses
import importlib
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import Case, message_strategy, sample_message

from trafka.codec import primitives as p
from trafka.codec import protocol
from trafka.codec.protocol import all_apis

pytest.importorskip("kafka", minversion="3.0")

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.array import ArrayField
from kafka.protocol.schemas.fields.codecs import BitField
from kafka.protocol.schemas.fields.simple import SimpleField
from kafka.protocol.schemas.fields.struct import StructField
from kafka.protocol.schemas.fields.struct_array import StructArrayField

NULL_UUID = uuid.UUID(int=0)
BITFIELD_NONE = -(2**31)  # Kafka's "authorized operations not requested"


def _their_classes() -> dict[tuple[int, bool], type]:
    """kafka-python's message classes by (api key, is response)."""
    with warnings.catch_warnings():
        # kafka-python 3.0 loads its JSON through a deprecated importlib API.
        warnings.simplefilter("ignore", DeprecationWarning)
        for module in ("producer", "consumer", "metadata", "admin", "sasl"):
            importlib.import_module(f"kafka.protocol.{module}")

    def walk(cls: type) -> Iterator[type]:
        for sub in cls.__subclasses__():
            yield sub
            yield from walk(sub)

    found: dict[tuple[int, bool], type] = {}
    for cls in walk(ApiMessage):
        if getattr(cls, "_class_version", None) is None:
            found[(cls.API_KEY, cls.type == "response")] = cls
    return found


THEIRS = _their_classes()

# APIs our codec implements and kafka-python 3.0.12 has no classes for.
NOT_IN_KAFKA_PYTHON = {
    38: "CreateDelegationToken",
    39: "RenewDelegationToken",
    40: "ExpireDelegationToken",
    41: "DescribeDelegationToken",
    64: "UnregisterBroker",
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
    71: "GetTelemetrySubscriptions",
    72: "PushTelemetry",
    76: "ShareGroupHeartbeat",
    77: "ShareGroupDescribe",
    78: "ShareFetch",
    79: "ShareAcknowledge",
    80: "AddRaftVoter",
    81: "RemoveRaftVoter",
    83: "InitializeShareGroupState",
    84: "ReadShareGroupState",
    85: "WriteShareGroupState",
    86: "DeleteShareGroupState",
    87: "ReadShareGroupStateSummary",
    88: "StreamsGroupHeartbeat",
    89: "StreamsGroupDescribe",
    90: "DescribeShareGroupOffsets",
    91: "AlterShareGroupOffsets",
    92: "DeleteShareGroupOffsets",
    93: "StreamsGroupTopologyDescriptionUpdate",
    94: "UnregisterController",
}

# (api key, version, is response) pairs both implement but lay out differently
# on the wire (kafka-python's specs are from a newer Kafka). Empty today: the
# test below fails if one appears, so that it gets listed here with a reason.
KNOWN_LAYOUT_DIFFERENCES: dict[tuple[int, int, bool], str] = {}


# -- wire layouts, to know that both sides describe the same bytes ------------------------


def our_layout(con: Any, element: bool = False) -> Any:
    if isinstance(con, p.Schema):
        return (
            "struct",
            tuple(our_layout(c) for _, c in con.fields),
            tuple((t.tag, our_layout(t.subcon)) for t in con.tagged),
        )
    if isinstance(con, p.NullableStruct):
        return ("nullable", our_layout(con.subcon))
    if isinstance(con, p.Array):
        return ("array", con.nullable, our_layout(con.subcon, element=True))
    kind = con.kafka_type.removeprefix("compact ")
    if kind == "records":
        kind = "nullable bytes"
    # Element nullability is not part of this comparison: kafka-python (like our
    # generator, see test_conformance) makes elements of a nullable array nullable.
    return kind.removeprefix("nullable ") if element else kind


def _their_struct_layout(struct: StructField, v: int) -> Any:
    return (
        "struct",
        tuple(their_layout(f, v) for f in struct.untagged_fields(v)),
        tuple(sorted((f.tag, their_layout(f, v)) for f in _their_tagged(struct, v).values())),
    )


def their_layout(field: Any, v: int, element: bool = False) -> Any:
    if isinstance(field, StructArrayField):
        return ("array", field.nullable_for_version_q(v), _their_struct_layout(field.array_of, v))
    if isinstance(field, ArrayField):
        return ("array", field.nullable_for_version_q(v), their_layout(field.array_of, v, True))
    if isinstance(field, StructField):
        layout = _their_struct_layout(field, v)
        return ("nullable", layout) if field.nullable_for_version_q(v) else layout
    kind = {"bitfield": "int32", "records": "bytes"}.get(field.type_str, field.type_str)
    if kind in ("string", "bytes") and field.nullable_for_version_q(v) and not element:
        kind = "nullable " + kind
    return kind


def _their_tagged(struct: StructField, v: int) -> dict[int, Any]:
    return {f.tag: f for f in struct.tagged_fields(v)._fields}


# -- the adapter ---------------------------------------------------------------------------


def _is_bitfield(field: Any) -> bool:
    return isinstance(field, SimpleField) and field._type is BitField


def to_theirs(value: Any, con: Any, field: Any, v: int) -> Any:
    """Our value of construct ``con`` as kafka-python's value of ``field``."""
    if value is None:
        return None
    if isinstance(con, p.NullableStruct):
        return to_theirs(value, con.subcon, field, v)
    if isinstance(con, p.Schema):
        return _struct_to_theirs(value, con, field.data_class, field, v)
    if isinstance(con, p.Array):
        elem = field.array_of
        if isinstance(field, StructArrayField):
            return [_struct_to_theirs(x, con.subcon, field.data_class, elem, v) for x in value]
        return [to_theirs(x, con.subcon, elem, v) for x in value]
    if _is_bitfield(field):
        bits = {i for i in range(32) if (value & 0xFFFFFFFF) >> i & 1}
        return None if bits == {31} else bits
    return value


def _struct_to_theirs(obj: Any, schema: p.Schema, cls: Any, struct: StructField, v: int) -> Any:
    kwargs: dict[str, Any] = {}
    for (name, con), field in zip(schema.fields, struct.untagged_fields(v), strict=True):
        kwargs[field.name] = to_theirs(getattr(obj, name), con, field, v)
    tagged = _their_tagged(struct, v)
    for tf in schema.tagged:
        value = getattr(obj, tf.name)
        # Our default means "absent"; kafka-python's absent is its own default.
        if value != tf.default:
            field = tagged[tf.tag]
            kwargs[field.name] = to_theirs(value, tf.subcon, field, v)
    return cls(version=v, **kwargs)


def from_theirs(value: Any, con: Any, field: Any, v: int) -> Any:
    """kafka-python's value of ``field`` as our value of construct ``con``."""
    if isinstance(con, p.NullableStruct):
        return None if value is None else from_theirs(value, con.subcon, field, v)
    if isinstance(con, p.Schema):
        return _struct_from_theirs(value, con, field, v)
    if isinstance(con, p.Array):
        if value is None:
            return None
        return [from_theirs(x, con.subcon, field.array_of, v) for x in value]
    if _is_bitfield(field):
        if value is None:
            return BITFIELD_NONE
        n = sum(1 << b for b in value)
        return n - 2**32 if n >= 2**31 else n
    if con is p.Uuid and value is None:
        return NULL_UUID
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


def _struct_from_theirs(obj: Any, schema: p.Schema, struct: StructField, v: int) -> Any:
    kwargs: dict[str, Any] = {}
    for (name, con), field in zip(schema.fields, struct.untagged_fields(v), strict=True):
        kwargs[name] = from_theirs(getattr(obj, field.name), con, field, v)
    tagged = _their_tagged(struct, v)
    for tf in schema.tagged:
        field = tagged[tf.tag]
        value = getattr(obj, field.name)
        if obj.tags is None or field.name not in obj.tags:
            kwargs[tf.name] = tf.default
        else:
            kwargs[tf.name] = from_theirs(value, tf.subcon, field, v)
    if schema.flexible:
        unknown = obj.unknown_tags or {}
        kwargs["unknown_tagged_fields"] = sorted(
            (int(k[1:]), bytes(data)) for k, data in unknown.items()
        )
    return schema.cls(**kwargs)


# -- the pairs -------------------------------------------------------------------------------


def crosscheck_cases() -> tuple[list[Case], list[tuple[Case, str]]]:
    """(checked cases, skipped cases with their reason)."""
    checked: list[Case] = []
    skipped: list[tuple[Case, str]] = []
    for info in all_apis():
        for response in (False, True):
            theirs = THEIRS.get((info.key, response))
            for v in range(info.min_version, info.max_version + 1):
                case = Case(info.key, info.name, v, response)
                if theirs is None:
                    assert info.key in NOT_IN_KAFKA_PYTHON, info.name
                    skipped.append((case, "kafka-python has no class for this API"))
                elif v > theirs.max_version:
                    skipped.append((case, f"kafka-python stops at v{theirs.max_version}"))
                elif (info.key, v, response) in KNOWN_LAYOUT_DIFFERENCES:
                    skipped.append((case, KNOWN_LAYOUT_DIFFERENCES[(info.key, v, response)]))
                else:
                    checked.append(case)
    return checked, skipped


CHECKED, SKIPPED = crosscheck_cases()
IDS = [c.id for c in CHECKED]


def their_class(case: Case) -> Any:
    return THEIRS[(case.key, case.response)]


def test_inventory() -> None:
    """The pairs cross-checked, and that every skip is one of the listed reasons."""
    assert len(CHECKED) >= 490
    assert {c.key for c, why in SKIPPED if "no class" in why} == set(NOT_IN_KAFKA_PYTHON)
    # Every API kafka-python has is one we have.
    assert {key for key, _ in THEIRS} <= {a.key for a in all_apis()}


@pytest.mark.parametrize("case", CHECKED, ids=IDS)
def test_same_wire_layout(case: Case) -> None:
    """Both codecs describe the same bytes for this version (else list it above)."""
    struct = their_class(case)._struct
    assert our_layout(case.schema) == _their_struct_layout(struct, case.version)


def crosscheck(case: Case, body: Any) -> None:
    """Same bytes from both encoders; each decodes the other's bytes to ``body``."""
    v = case.version
    if case.key == 18 and case.response:
        # kafka-python reads any ApiVersions response with a non-zero error code
        # as v0 (what a broker sends back for a version it does not know).
        body = dataclasses.replace(body, error_code=0)
    cls = their_class(case)
    struct = cls._struct
    ours = (
        protocol.encode_response_body(case.key, v, body)
        if case.response
        else protocol.encode_request_body(case.key, v, body)
    )
    their_obj = _struct_to_theirs(body, case.schema, cls, struct, v)
    theirs = bytes(their_obj.encode(version=v))
    assert theirs == ours

    decoded_by_them = cls.decode(ours, version=v)
    assert _struct_from_theirs(decoded_by_them, case.schema, struct, v) == body
    decoded_by_us = (
        protocol.decode_response_body(case.key, v, theirs)
        if case.response
        else protocol.decode_request_body(case.key, v, theirs)
    )
    assert decoded_by_us == body


@pytest.mark.parametrize("case", CHECKED, ids=IDS)
def test_sample_with_every_field_set(case: Case) -> None:
    crosscheck(case, sample_message(case.schema, salt=case.version))


@pytest.mark.parametrize("case", CHECKED, ids=IDS)
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_generated_bodies(case: Case, data: st.DataObject) -> None:
    body = data.draw(message_strategy(case.schema, unknown_tags=False), label="body")
    crosscheck(case, body)


FLEXIBLE = [c for c in CHECKED if c.schema.flexible]


@pytest.mark.parametrize("case", FLEXIBLE[::5], ids=[c.id for c in FLEXIBLE[::5]])
def test_kafka_python_reads_our_unknown_tags(case: Case) -> None:
    body = dataclasses.replace(case.schema.cls(), unknown_tagged_fields=[(99, b"xyz"), (1000, b"")])
    data = (
        protocol.encode_response_body(case.key, case.version, body)
        if case.response
        else protocol.encode_request_body(case.key, case.version, body)
    )
    decoded = their_class(case).decode(data, version=case.version)
    assert {k: bytes(v) for k, v in decoded.unknown_tags.items()} == {"_99": b"xyz", "_1000": b""}


def _consumer_protocol_pairs() -> list[tuple[str, int, Any, Any]]:
    from kafka.protocol.consumer import metadata as theirs

    from trafka.codec.messages import consumer_protocol as ours

    pairs = []
    for name, table in (
        ("ConsumerProtocolSubscription", ours.CONSUMERPROTOCOLSUBSCRIPTION_SCHEMAS),
        ("ConsumerProtocolAssignment", ours.CONSUMERPROTOCOLASSIGNMENT_SCHEMAS),
    ):
        cls = getattr(theirs, name)
        for v, schema in table.items():
            if v <= cls.max_version:
                pairs.append((f"{name}-v{v}", v, schema, cls))
    return pairs


CONSUMER_PROTOCOL = _consumer_protocol_pairs()


@pytest.mark.parametrize(
    ("name", "v", "schema", "cls"), CONSUMER_PROTOCOL, ids=[c[0] for c in CONSUMER_PROTOCOL]
)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_consumer_protocol_payloads(
    name: str, v: int, schema: Any, cls: Any, data: st.DataObject
) -> None:
    """The JoinGroup/SyncGroup payloads (kafka-python's ``ApiData`` classes)."""
    assert our_layout(schema) == _their_struct_layout(cls._struct, v)
    for body in (
        sample_message(schema, salt=v),
        data.draw(message_strategy(schema, unknown_tags=False), label="body"),
    ):
        ours = schema.compile().build(body)
        assert ours == schema.build(body)
        their_obj = _struct_to_theirs(body, schema, cls, cls._struct, v)
        theirs = bytes(their_obj.encode(version=v, header=False))
        assert theirs == ours
        back = cls.decode(ours, version=v, header=False)
        assert _struct_from_theirs(back, schema, cls._struct, v) == body
        assert schema.parse(theirs) == body


def test_the_versions_kafka_4_0_removed_are_cross_checked() -> None:
    """Issue #37: the KIP-896 versions (served to old clients) are among the pairs
    checked, requests and responses, wherever kafka-python has the API."""
    checked = {(c.key, c.version, c.response) for c in CHECKED}
    removed = {0: 2, 1: 3, 2: 0, 8: 1, 9: 0, 11: 1, 19: 1, 20: 0, 23: 1, 29: 0, 32: 0, 35: 0}
    for key, highest in removed.items():
        for version in range(highest + 1):
            for response in (False, True):
                assert (key, version, response) in checked, (key, version, response)
