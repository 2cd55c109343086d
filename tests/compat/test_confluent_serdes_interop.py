"""The drop-in's schema registry serdes against confluent-kafka 2.16's own:

* bytes the drop-in's Avro, JSON Schema and Protobuf serializers write are
  read by confluent-kafka's deserializers, and the other way round, through
  brokerlite's schema registry (each side with its own registry client), sync
  and async; Avro and JSON payloads are byte for byte the same;
* the schema id in a header (``header_schema_id_serializer``, by GUID) read
  by the other side's ``dual_schema_id_deserializer`` (a registry that gives
  GUIDs: a fake, brokerlite's gives none);
* ``SchemaId``'s bytes, the decimals of ``decimal_to_protobuf`` and the
  wildcards of ``wildcard_match`` are confluent-kafka's;
* the settings checks refuse the same mistakes with the same error and text.
"""

from __future__ import annotations

import asyncio
import io
import json
import types
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import confluent_kafka.schema_registry as theirs
import confluent_kafka.schema_registry.avro as theirs_avro
import confluent_kafka.schema_registry.json_schema as theirs_json
import confluent_kafka.schema_registry.protobuf as theirs_proto
import pytest
from confluent_kafka.schema_registry.serde import SchemaId as TheirSchemaId
from confluent_kafka.schema_registry.wildcard_matcher import wildcard_match as their_match
from confluent_kafka.serialization import MessageField as TheirField
from confluent_kafka.serialization import SerializationContext as TheirContext
from hypothesis import example, given
from hypothesis import strategies as st

import trafka.compat.confluent.schema_registry as ours
import trafka.compat.confluent.schema_registry.avro as ours_avro
import trafka.compat.confluent.schema_registry.json_schema as ours_json
import trafka.compat.confluent.schema_registry.protobuf as ours_proto
from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.compat.confluent.schema_registry.serde import SchemaId
from trafka.compat.confluent.schema_registry.wildcard_matcher import wildcard_match
from trafka.compat.confluent.serialization import MessageField, SerializationContext

USER = {
    "type": "record",
    "name": "User",
    "namespace": "shop",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    ],
}
ORDER = {
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "items": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["id"],
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    data = tmp_path_factory.mktemp("serdes-interop")
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=data, schema_registry_listen="127.0.0.1:0"
    ) as running:
        yield running


@pytest.fixture(scope="module")
def registry_url(broker: RunningBroker) -> str:
    assert broker.schema_registry_address is not None
    host, port = broker.schema_registry_address
    return f"http://{host}:{port}"


@pytest.fixture(scope="module")
def clients(registry_url: str) -> Iterator[tuple[Any, Any]]:
    """(the drop-in's blocking client, confluent-kafka's)."""
    mine = ours.SchemaRegistryClient({"url": registry_url})
    yield mine, theirs.SchemaRegistryClient({"url": registry_url})
    close = getattr(mine, "close", None)
    if close is not None:
        close()


def _ctx(topic: str, key: bool = False) -> tuple[Any, Any]:
    return (
        SerializationContext(topic, MessageField.KEY if key else MessageField.VALUE),
        TheirContext(topic, TheirField.KEY if key else TheirField.VALUE),
    )


def _proto_class() -> Any:
    """A message class (shop.Item, nested shop.Item.Part) without generated code."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="shop/item.proto", package="shop", syntax="proto3"
    )
    item = fdp.message_type.add(name="Item")
    item.field.add(name="sku", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    item.field.add(name="count", number=2, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    part = item.nested_type.add(name="Part")
    part.field.add(name="label", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Item.Part"))


def test_avro_both_ways_byte_for_byte(clients: tuple[Any, Any]) -> None:
    mine_client, their_client = clients
    schema = json.dumps(USER)
    topic = f"avro-{uuid.uuid4().hex[:8]}"
    mine_ctx, their_ctx = _ctx(topic)
    user = {"name": "Ann", "age": 41, "tags": ["a", "b"]}
    written = ours_avro.AvroSerializer(mine_client, schema)(user, mine_ctx)
    assert theirs_avro.AvroDeserializer(their_client)(written, their_ctx) == user
    theirs_written = theirs_avro.AvroSerializer(their_client, schema)(user, their_ctx)
    assert theirs_written == written
    assert ours_avro.AvroDeserializer(mine_client)(theirs_written, mine_ctx) == user
    # a reader schema without ``tags``, a primitive key, None
    reader = json.dumps({**USER, "fields": USER["fields"][:2]})
    assert ours_avro.AvroDeserializer(mine_client, reader)(written, mine_ctx) == {
        "name": "Ann",
        "age": 41,
    }
    mine_key, their_key = _ctx(topic, key=True)
    key = ours_avro.AvroSerializer(mine_client, '"string"')("k1", mine_key)
    assert theirs_avro.AvroDeserializer(their_client)(key, their_key) == "k1"
    assert ours_avro.AvroSerializer(mine_client, schema)(None, mine_ctx) is None


def test_json_both_ways_byte_for_byte(clients: tuple[Any, Any]) -> None:
    mine_client, their_client = clients
    schema = json.dumps(ORDER)
    topic = f"json-{uuid.uuid4().hex[:8]}"
    mine_ctx, their_ctx = _ctx(topic)
    order = {"id": 7, "items": ["x", "é"]}
    written = ours_json.JSONSerializer(schema, mine_client)(order, mine_ctx)
    assert (
        theirs_json.JSONDeserializer(None, schema_registry_client=their_client)(written, their_ctx)
        == order
    )
    theirs_written = theirs_json.JSONSerializer(schema, their_client)(order, their_ctx)
    assert theirs_written == written
    assert (
        ours_json.JSONDeserializer(None, schema_registry_client=mine_client)(
            theirs_written, mine_ctx
        )
        == order
    )
    # both refuse what the schema refuses, before the registry is asked
    with pytest.raises(ours.SerializationError):
        ours_json.JSONSerializer(schema, mine_client)({"items": []}, mine_ctx)
    with pytest.raises(theirs.SerializationError):
        theirs_json.JSONSerializer(schema, their_client)({"items": []}, their_ctx)


def test_protobuf_both_ways(clients: tuple[Any, Any]) -> None:
    mine_client, their_client = clients
    part_class = _proto_class()
    topic = f"proto-{uuid.uuid4().hex[:8]}"
    mine_ctx, their_ctx = _ctx(topic)
    part = part_class(label="bolt")
    written = ours_proto.ProtobufSerializer(part_class, mine_client)(part, mine_ctx)
    their_reader = theirs_proto.ProtobufDeserializer(part_class, {"use.deprecated.format": False})
    assert their_reader(written, their_ctx) == part
    theirs_written = theirs_proto.ProtobufSerializer(part_class, their_client)(part, their_ctx)
    # the same message indexes ([0, 0]) and payload after each side's schema id
    assert theirs_written[5:] == written[5:]
    assert ours_proto.ProtobufDeserializer(part_class)(theirs_written, mine_ctx) == part
    # without the class: a dynamic message of the writer's registered schema
    dynamic = ours_proto.ProtobufDeserializer(None, schema_registry_client=mine_client)(
        written, mine_ctx
    )
    assert dynamic.label == "bolt"


def test_the_async_serdes_both_ways(registry_url: str) -> None:
    if not hasattr(ours, "AsyncSchemaRegistryClient"):
        pytest.skip("the drop-in's AsyncSchemaRegistryClient is not here yet")

    async def main() -> None:
        mine_client = ours.AsyncSchemaRegistryClient({"url": registry_url})
        their_client = theirs.AsyncSchemaRegistryClient({"url": registry_url})
        topic = f"async-{uuid.uuid4().hex[:8]}"
        mine_ctx, their_ctx = _ctx(topic)
        user = {"name": "Bo", "age": 3, "tags": []}
        serializer = await ours_avro.AsyncAvroSerializer(mine_client, json.dumps(USER))
        written = await serializer(user, mine_ctx)
        reader = await theirs_avro.AsyncAvroDeserializer(their_client)
        assert await reader(written, their_ctx) == user
        their_serializer = await theirs_avro.AsyncAvroSerializer(their_client, json.dumps(USER))
        theirs_written = await their_serializer(user, their_ctx)
        assert theirs_written == written
        mine_reader = await ours_avro.AsyncAvroDeserializer(mine_client)
        assert await mine_reader(theirs_written, mine_ctx) == user
        json_ser = await ours_json.AsyncJSONSerializer(json.dumps(ORDER), mine_client)
        json_ctx, their_json_ctx = _ctx(f"{topic}-json")
        json_written = await json_ser({"id": 1}, json_ctx)
        json_reader = await theirs_json.AsyncJSONDeserializer(
            None, schema_registry_client=their_client
        )
        assert await json_reader(json_written, their_json_ctx) == {"id": 1}
        part_class = _proto_class()
        proto_ctx, their_proto_ctx = _ctx(f"{topic}-proto")
        proto_ser = await ours_proto.AsyncProtobufSerializer(part_class, mine_client)
        proto_written = await proto_ser(part_class(label="nut"), proto_ctx)
        proto_reader = await theirs_proto.AsyncProtobufDeserializer(
            part_class, {"use.deprecated.format": False}
        )
        assert (await proto_reader(proto_written, their_proto_ctx)).label == "nut"
        mine_proto_reader = await ours_proto.AsyncProtobufDeserializer(
            None, schema_registry_client=mine_client
        )
        assert (await mine_proto_reader(proto_written, proto_ctx)).label == "nut"

    asyncio.run(main())


class _GuidRegistry:
    """A registry giving each schema a GUID (as Confluent Cloud's does), for
    either side's serdes (``schema_class``: that side's Schema)."""

    def __init__(self, schema_class: Any, registered_class: Any) -> None:
        self.schema_class = schema_class
        self.registered_class = registered_class
        self.guid = uuid.UUID("89791762-2336-4186-9674-299b90a802e2")
        self.text: str | None = None

    def register_schema_full_response(
        self, subject: str, schema: Any, normalize_schemas: bool = False
    ) -> Any:
        self.text = schema.schema_str
        return self.registered_class(
            schema_id=5, guid=str(self.guid), schema=schema, subject=subject, version=1
        )

    def get_schema_by_guid(self, guid: str, fmt: Any = None) -> Any:
        assert uuid.UUID(str(guid)) == self.guid
        return self.schema_class(self.text, "AVRO")

    def config(self) -> dict[str, Any]:
        return {}


def test_the_schema_guid_in_a_header_both_ways() -> None:
    schema = json.dumps(USER)
    user = {"name": "Cyrano", "age": 9, "tags": []}  # (over 5 bytes: both check that)
    mine_registry = _GuidRegistry(ours.Schema, ours.RegisteredSchema)
    their_registry = _GuidRegistry(theirs.Schema, theirs.RegisteredSchema)
    mine_ctx = SerializationContext("t", MessageField.VALUE, [])
    their_ctx = TheirContext("t", TheirField.VALUE, [])
    strategy = {"subject.name.strategy": ours.topic_subject_name_strategy}
    mine = ours_avro.AvroSerializer(
        mine_registry,
        schema,
        conf={**strategy, "schema.id.serializer": ours.header_schema_id_serializer},
    )
    payload = mine(user, mine_ctx)
    their_strategy = {"subject.name.strategy": theirs.topic_subject_name_strategy}
    their = theirs_avro.AvroSerializer(
        their_registry,
        schema,
        conf={**their_strategy, "schema.id.serializer": theirs.header_schema_id_serializer},
    )
    their_payload = their(user, their_ctx)
    assert (payload, mine_ctx.headers) == (their_payload, their_ctx.headers)
    their_registry.text = mine_registry.text = schema
    their_reader = theirs_avro.AvroDeserializer(their_registry, conf=their_strategy)
    assert their_reader(payload, TheirContext("t", TheirField.VALUE, mine_ctx.headers)) == user
    mine_reader = ours_avro.AvroDeserializer(mine_registry, conf=strategy)
    assert (
        mine_reader(their_payload, SerializationContext("t", MessageField.VALUE, their_ctx.headers))
        == user
    )


@given(
    st.sampled_from(["AVRO", "JSON", "PROTOBUF"]),
    st.integers(0, 2**32 - 1),
    st.uuids(),
    st.lists(st.integers(0, 2**31), min_size=1, max_size=5),
)
def test_schema_ids_are_confluent_kafkas_bytes(
    kind: str, schema_id: int, guid: uuid.UUID, indexes: list[int]
) -> None:
    idx = indexes if kind == "PROTOBUF" else None
    mine, their = (
        SchemaId(kind, schema_id, str(guid), idx),
        TheirSchemaId(kind, schema_id, str(guid), idx),
    )
    assert mine.id_to_bytes() == their.id_to_bytes()
    assert mine.guid_to_bytes() == their.guid_to_bytes()
    for framed in (their.id_to_bytes() + b"rest", their.guid_to_bytes() + b"rest"):
        a, b = SchemaId(kind), TheirSchemaId(kind)
        assert a.from_bytes(io.BytesIO(framed)).read() == b.from_bytes(io.BytesIO(framed)).read()
        assert (a.id, a.guid, a.message_indexes) == (b.id, b.guid, b.message_indexes)


@given(st.decimals(allow_nan=False, allow_infinity=False, places=4), st.integers(4, 8))
def test_decimals_are_confluent_kafkas(value: Decimal, scale: int) -> None:
    mine, their = (
        ours_proto.decimal_to_protobuf(value, scale),
        theirs_proto.decimal_to_protobuf(value, scale),
    )
    assert (mine.value, mine.precision, mine.scale) == (their.value, their.precision, their.scale)
    assert ours_proto.protobuf_to_decimal(mine) == theirs_proto.protobuf_to_decimal(their) == value


@given(st.text("ab.*?", max_size=6), st.text("ab.", max_size=6))
@example("**.*", "")  # confluent-kafka reads **.* as ** (found by CI)
@example("a**.*", "a.b")
def test_wildcards_are_confluent_kafkas(pattern: str, text: str) -> None:
    assert wildcard_match(text, pattern) == their_match(text, pattern)


BAD_SERIALIZER_SETTINGS = [
    {"auto.register.schemas": "yes"},
    {"normalize.schemas": 1},
    {"use.schema.id": "7"},
    {"use.latest.version": True},  # with auto.register.schemas (True)
    {"use.latest.with.metadata": ["x"]},
    {"subject.name.strategy": "topic"},
    {"subject.name.strategy.type": "BAD"},
    {"subject.name.strategy.type": "NONE"},
    {"schema.id.serializer": 1},
    {"validate.strict": "no"},
    {"no.such.setting": 1},
]


def _refusal(make: Any) -> tuple[type, str]:
    try:
        make()
    except Exception as exc:
        return type(exc), str(exc)
    return type(None), ""


@pytest.mark.parametrize("conf", BAD_SERIALIZER_SETTINGS, ids=lambda c: next(iter(c)))
def test_the_avro_serializer_refuses_what_confluent_kafka_refuses(conf: dict[str, Any]) -> None:
    registry = _GuidRegistry(None, None)
    mine = _refusal(lambda: ours_avro.AvroSerializer(registry, '"string"', conf=conf))
    their = _refusal(lambda: theirs_avro.AvroSerializer(registry, '"string"', conf=conf))
    assert mine == their
    assert mine[0] is ValueError


@pytest.mark.parametrize(
    "make",
    [
        lambda m, r: m.AvroDeserializer(r, 1),
        lambda m, r: m.AvroDeserializer(r, conf={"use.latest.version": 1}),
        lambda m, r: m.AvroDeserializer(r, conf={"schema.id.deserializer": None}),
        lambda m, r: m.AvroDeserializer(r, return_record_name=1),
        lambda m, r: m.AvroDeserializer(r, from_dict=1),
        lambda m, r: m.AvroDeserializer(r, conf={"auto.register.schemas": True}),
        lambda m, r: m.AvroSerializer(r, '"string"', to_dict=1),
    ],
)
def test_the_avro_serdes_refuse_what_confluent_kafkas_refuse(make: Any) -> None:
    registry = _GuidRegistry(None, None)
    mine = _refusal(lambda: make(ours_avro, registry))
    their = _refusal(lambda: make(theirs_avro, registry))
    assert mine == their
    assert mine[0] in (TypeError, ValueError)


@pytest.mark.parametrize(
    "make",
    [
        lambda m, r, s: m.JSONDeserializer(1),
        lambda m, r, s: m.JSONDeserializer(None),
        lambda m, r, s: m.JSONDeserializer(s, conf={"validate": "x"}),
        lambda m, r, s: m.JSONSerializer(s, r, conf={"validate": 1}),
        lambda m, r, s: m.ProtobufSerializer(
            _proto_class(), r, conf={"use.deprecated.format": True}
        ),
        lambda m, r, s: m.ProtobufSerializer(_proto_class(), r, conf={"skip.known.types": 0}),
        lambda m, r, s: m.ProtobufSerializer(
            _proto_class(), r, conf={"reference.subject.name.strategy": 0}
        ),
        lambda m, r, s: m.ProtobufDeserializer(_proto_class(), {"use.deprecated.format": True}),
    ],
)
def test_the_json_and_protobuf_serdes_refuse_what_confluent_kafkas_refuse(make: Any) -> None:
    registry = _GuidRegistry(None, None)
    schema = json.dumps(ORDER)
    modules = [(ours_json, ours_proto), (theirs_json, theirs_proto)]
    seen = []
    for json_module, proto_module in modules:
        module: Any = types.SimpleNamespace(**{**vars(json_module), **vars(proto_module)})
        seen.append(_refusal(lambda m=module: make(m, registry, schema)))
    assert seen[0] == seen[1]
    assert seen[0][0] in (TypeError, ValueError)


def test_the_builders_build_what_confluent_kafkas_build() -> None:
    """A builder's serde writes what confluent-kafka's builder's serde writes;
    the setters chain; a client and a configuration together are refused."""
    out = []
    for module, api in ((ours_avro, ours), (theirs_avro, theirs)):
        registry = _GuidRegistry(api.Schema, api.RegisteredSchema)
        builder = module.AvroSerializerBuilder().set_schema_registry_client(registry)
        builder = builder.set_schema(json.dumps(USER)).set_serializer_config(
            {"subject.name.strategy.type": "TOPIC"}
        )
        serializer, conf = builder.build({"linger.ms": 5}, False)
        assert conf == {"linger.ms": 5}
        ctx = (TheirContext if api is theirs else SerializationContext)("t", "value")
        out.append(serializer({"name": "Di", "age": 1, "tags": []}, ctx))
        both = module.AvroSerializerBuilder(
            schema_registry_client=registry, schema_registry_config={}
        )
        out.append(_refusal(lambda b=both: b.build({}, False)))
    assert out[0] == out[2]
    assert out[1] == out[3]
    assert out[1][0] is ValueError


def _first(consumer: Any, topic: str) -> Any:
    """The first message of ``topic`` (polled until it comes; pytest-timeout bounds it)."""
    consumer.subscribe([topic])
    try:
        while True:
            msg = consumer.poll(1.0)
            if msg is not None:
                assert msg.error() is None, msg.error()
                return msg
    finally:
        consumer.close()


def test_through_kafka_both_ways(broker: RunningBroker, clients: tuple[Any, Any]) -> None:
    """The drop-in's SerializingProducer with its Avro serializer, read by
    confluent-kafka's DeserializingConsumer with its Avro deserializer, and
    the other way round."""
    import confluent_kafka

    import trafka.compat.confluent as dropin

    mine_client, their_client = clients
    user = {"name": "Eve", "age": 52, "tags": ["x"]}
    for writer, reader in (("ours", "theirs"), ("theirs", "ours")):
        topic = f"through-{writer}-{uuid.uuid4().hex[:6]}"
        producer_api: Any = dropin if writer == "ours" else confluent_kafka
        serializer = (ours_avro if writer == "ours" else theirs_avro).AvroSerializer(
            mine_client if writer == "ours" else their_client, json.dumps(USER)
        )
        producer = producer_api.SerializingProducer(
            {"bootstrap.servers": broker.bootstrap_servers, "value.serializer": serializer}
        )
        producer.produce(topic, value=user)
        assert producer.flush(30) == 0
        consumer_api: Any = dropin if reader == "ours" else confluent_kafka
        deserializer = (ours_avro if reader == "ours" else theirs_avro).AvroDeserializer(
            mine_client if reader == "ours" else their_client
        )
        consumer = consumer_api.DeserializingConsumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": topic,
                "auto.offset.reset": "earliest",
                "value.deserializer": deserializer,
            }
        )
        assert _first(consumer, topic).value() == user
        del producer, consumer  # (confluent-kafka's, before the broker stops)


def test_a_union_of_referenced_records_both_ways(clients: tuple[Any, Any]) -> None:
    """A top-level union whose records live in other subjects (references):
    the same bytes on both sides, each read by the other."""
    mine_client, their_client = clients
    tag = uuid.uuid4().hex[:6]
    part = {
        "type": "record",
        "name": "Part",
        "namespace": "shop",
        "fields": [{"name": "sku", "type": "string"}],
    }
    box = {
        "type": "record",
        "name": "Box",
        "namespace": "shop",
        "fields": [{"name": "first", "type": "Part"}, {"name": "second", "type": "Part"}],
    }
    their_client.register_schema(f"part-{tag}", theirs.Schema(json.dumps(part)))
    refs = [theirs.SchemaReference("shop.Part", f"part-{tag}", 1)]
    their_client.register_schema(f"box-{tag}", theirs.Schema(json.dumps(box), "AVRO", refs))
    union = ["null", "shop.Box"]
    topic = f"union-{tag}"
    # (brokerlite's registry resolves direct references only: both named)
    union_refs = [refs[0], theirs.SchemaReference("shop.Box", f"box-{tag}", 1)]
    their_client.register_schema(
        f"{topic}-value", theirs.Schema(json.dumps(union), "AVRO", union_refs)
    )
    value = {"first": {"sku": "a"}, "second": {"sku": "b"}}
    conf = {"auto.register.schemas": False, "use.latest.version": True}
    mine_ctx, their_ctx = _ctx(topic)
    written = ours_avro.AvroSerializer(mine_client, None, conf=conf)(value, mine_ctx)
    theirs_written = theirs_avro.AvroSerializer(their_client, None, conf=conf)(value, their_ctx)
    assert written == theirs_written
    assert theirs_avro.AvroDeserializer(their_client)(written, their_ctx) == value
    assert ours_avro.AvroDeserializer(mine_client)(theirs_written, mine_ctx) == value
