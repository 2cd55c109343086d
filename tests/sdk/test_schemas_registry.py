"""trafka's schema serdes against confluent-kafka's own (its
``SchemaRegistryClient``, ``AvroSerializer``/``AvroDeserializer``,
``ProtobufSerializer``/``ProtobufDeserializer``, ``JSONSerializer``/
``JSONDeserializer``), through brokerlite's schema registry.

Each direction is checked: what one writes the other reads, and for the same
schema id and value the framed bytes are the same (Confluent's "Wire format":
magic byte 0, the 4-byte id, Protobuf's message indexes, the payload).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import Producer as CkProducer
from confluent_kafka.schema_registry import SchemaRegistryClient as CkRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer as CkAvroDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as CkAvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer as CkJSONDeserializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer as CkJSONSerializer
from confluent_kafka.schema_registry.protobuf import (
    ProtobufDeserializer as CkProtobufDeserializer,
)
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer as CkProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from schema_relay import Relay
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.sdk import ConfigError, SerializationError, blocking
from trafka.sdk.consumer import TopicPartition, open_consumer
from trafka.sdk.producer import open_producer
from trafka.sdk.schemas import (
    AvroDeserializer,
    AvroSerializer,
    JSONDeserializer,
    JSONSerializer,
    ProtobufDeserializer,
    ProtobufSerializer,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
    SchemaSerializationError,
)

# The consumers' close waits for the fetch the broker holds at the end (0.5 s by
# default); none of these tests is about that wait.
FETCH_WAIT_MS = 50

USER = {
    "type": "record",
    "name": "User",
    "namespace": "example.people",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "email", "type": ["null", "string"], "default": None},
    ],
}
USERS = [{"name": f"user-{i}", "age": i, "email": None if i % 2 else f"u{i}@x"} for i in range(5)]
THING = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Thing",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["id"],
}


def _order_file() -> descriptor_pb2.FileDescriptorProto:
    """shop.proto, built as protoc would describe it (the test's own generated classes)."""
    f = descriptor_pb2.FileDescriptorProto(name="shop_test.proto", package="shop", syntax="proto3")
    f.message_type.add(name="Ping").field.add(name="n", number=1, label=1, type=5, json_name="n")
    order = f.message_type.add(name="Order")
    order.field.add(name="id", number=1, label=1, type=9, json_name="id")
    order.field.add(
        name="lines", number=2, label=3, type=11, type_name=".shop.Order.Line", json_name="lines"
    )
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, label=1, type=9, json_name="sku")
    line.field.add(name="qty", number=2, label=1, type=5, json_name="qty")
    return f


_pool = descriptor_pool.Default()
try:
    _pool.FindFileByName("shop_test.proto")
except KeyError:
    _pool.Add(_order_file())
Order = message_factory.GetMessageClass(_pool.FindMessageTypeByName("shop.Order"))
Line = message_factory.GetMessageClass(_pool.FindMessageTypeByName("shop.Order.Line"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(
        tmp_path_factory, "schemas", schema_registry_listen="127.0.0.1:0", num_partitions=1
    )


@pytest.fixture(scope="module")
def url(broker: RunningBroker) -> str:
    assert broker.schema_registry_address is not None
    host, port = broker.schema_registry_address
    return f"http://{host}:{port}"


@pytest.fixture(scope="module")
def registry(url: str) -> Iterator[SchemaRegistryClient]:
    with SchemaRegistryClient({"url": url}) as client:
        yield client


@pytest.fixture(scope="module")
def ck_registry(url: str) -> CkRegistry:
    return CkRegistry({"url": url})


def ctx(topic: str, field: str = MessageField.VALUE, headers: Any = None) -> SerializationContext:
    return SerializationContext(topic, field, headers)


# -- the formats, both ways, byte for byte ---------------------------------------------


@pytest.mark.compat(
    "SDK", "Schema Registry serdes (Avro, Protobuf, JSON Schema) with confluent-kafka's"
)
def test_avro_both_ways_byte_for_byte(
    registry: SchemaRegistryClient, ck_registry: CkRegistry
) -> None:
    topic = fresh("avro")
    schema = json.dumps(USER)
    ours, theirs = AvroSerializer(registry, schema), CkAvroSerializer(ck_registry, schema)
    for user in USERS:
        mine, confluents = ours(user, ctx(topic)), theirs(user, ctx(topic))
        assert mine == confluents
        assert CkAvroDeserializer(ck_registry)(mine, ctx(topic)) == user
        assert AvroDeserializer(registry)(confluents, ctx(topic)) == user
    # the same id for the same schema under the subject, whoever registered it
    assert mine[:5] == confluents[:5]
    assert registry.get_latest_version(f"{topic}-value").schema_id == int.from_bytes(mine[1:5])


def test_avro_writes_as_confluent_kafka_defaults_and_extra_fields(
    registry: SchemaRegistryClient, ck_registry: CkRegistry
) -> None:
    """confluent-kafka's AvroSerializer writes with fastavro's writer, not
    strict: a field the record lacks is written with its default, a field the
    schema lacks is dropped, a missing field without a default is an error.
    ``avro.strict`` refuses the first two as well (issue #82, item 1)."""
    topic = fresh("avro-lenient")
    schema = json.dumps(USER)
    ours, theirs = AvroSerializer(registry, schema), CkAvroSerializer(ck_registry, schema)
    for record in ({"name": "a", "age": 1}, {"name": "b", "age": 2, "email": "e", "extra": 3}):
        mine = ours(record, ctx(topic))
        assert mine == theirs(record, ctx(topic))
        read = AvroDeserializer(registry)(mine, ctx(topic))
        assert read == {"email": None, **{k: v for k, v in record.items() if k != "extra"}}
    for no_default in ({"age": 1}, {"name": "c"}):
        with pytest.raises(SchemaSerializationError):
            ours(no_default, ctx(topic))
        with pytest.raises(Exception):  # noqa: B017 (confluent-kafka's own error type)
            theirs(no_default, ctx(topic))
    strict = AvroSerializer(registry, schema, conf={"avro.strict": True})
    for record in ({"name": "a", "age": 1}, {"name": "b", "age": 2, "email": None, "x": 3}):
        with pytest.raises(SchemaSerializationError):
            strict(record, ctx(topic))
    assert strict(USERS[0], ctx(topic)) == ours(USERS[0], ctx(topic))
    with pytest.raises(ConfigError, match=r"avro\.strict"):
        AvroSerializer(registry, schema, conf={"avro.strict": "yes"})


@pytest.mark.compat(
    "SDK", "Schema Registry serdes (Avro, Protobuf, JSON Schema) with confluent-kafka's"
)
def test_json_schema_both_ways_byte_for_byte(
    registry: SchemaRegistryClient, ck_registry: CkRegistry
) -> None:
    topic = fresh("json")
    schema = json.dumps(THING)
    ours, theirs = JSONSerializer(schema, registry), CkJSONSerializer(schema, ck_registry)
    for value in ({"id": 1}, {"id": 2, "tags": ["a", "é"]}):
        mine, confluents = ours(value, ctx(topic)), theirs(value, ctx(topic))
        assert mine == confluents
        assert (
            CkJSONDeserializer(schema, schema_registry_client=ck_registry)(mine, ctx(topic))
            == value
        )
        assert (
            JSONDeserializer(None, schema_registry_client=registry)(confluents, ctx(topic)) == value
        )
    with pytest.raises(SchemaSerializationError, match="'id' is a required property") as caught:
        ours({"tags": []}, ctx(topic))
    assert caught.value.subject == f"{topic}-value" and caught.value.topic == topic


@pytest.mark.compat(
    "SDK", "Schema Registry serdes (Avro, Protobuf, JSON Schema) with confluent-kafka's"
)
def test_protobuf_both_ways_byte_for_byte(
    registry: SchemaRegistryClient, ck_registry: CkRegistry
) -> None:
    """Nested message (indexes [1, 0]) and a second top-level one ([1]): ours
    registers the .proto text, Confluent's Python serializer the serialized
    descriptor; each reads the other's records, with generated classes and
    (ours) without them."""
    topic = fresh("proto")
    line = Line(sku="abc", qty=3)
    order = Order(id="o-1", lines=[line, Line(sku="d", qty=1)])
    ours_line = ProtobufSerializer(Line, registry)
    mine = ours_line(line, ctx(topic))
    assert mine[5:8] == b"\x04\x02\x00"  # [1, 0]: a count of 2, then 1 and 0 (zig-zag)
    assert mine.endswith(line.SerializeToString())
    ck_line = CkProtobufDeserializer(Line, {"use.deprecated.format": False})
    assert ck_line(mine, ctx(topic)) == line
    dynamic = ProtobufDeserializer(schema_registry_client=registry)(mine, ctx(topic))
    assert dynamic.DESCRIPTOR.full_name == "shop.Order.Line"
    assert (dynamic.sku, dynamic.qty) == ("abc", 3)
    # a second message of the file, under the record strategy
    ours_order = ProtobufSerializer(Order, registry, {"subject.name.strategy": "record"})
    framed = ours_order(order, ctx(topic))
    assert framed[5:6] == b"\x02"  # [1]: a count of 1, index 1 (zig-zag)
    assert (
        CkProtobufDeserializer(Order, {"use.deprecated.format": False})(framed, ctx(topic)) == order
    )
    assert registry.get_latest_version("shop.Order").schema_id == int.from_bytes(framed[1:5])


@pytest.mark.compat(
    "SDK", "Schema Registry serdes (Avro, Protobuf, JSON Schema) with confluent-kafka's"
)
def test_protobuf_confluent_to_ours(
    registry: SchemaRegistryClient, ck_registry: CkRegistry
) -> None:
    """confluent-kafka's Python serializer registers the serialized descriptor
    (base64); ours, on that latest version, writes the same bytes, and reads
    its records with the generated class and, from the registered descriptor,
    without it."""
    topic = fresh("ckproto")
    order = Order(id="o-2", lines=[Line(sku="q", qty=2)])
    theirs = CkProtobufSerializer(Order, ck_registry, {"use.deprecated.format": False})
    confluents = theirs(order, ctx(topic))
    ours = ProtobufSerializer(
        Order, registry, {"auto.register.schemas": False, "use.latest.version": True}
    )
    assert ours(order, ctx(topic)) == confluents
    assert ProtobufDeserializer(Order)(confluents, ctx(topic)) == order
    dynamic = ProtobufDeserializer(schema_registry_client=registry)(confluents, ctx(topic))
    assert dynamic.id == "o-2" and dynamic.lines[0].qty == 2


# -- in the producer and the consumer ----------------------------------------------------


def _ck_consume(bs: str, topic: str, n: int) -> list[Any]:
    consumer = CkConsumer(
        {
            "bootstrap.servers": bs,
            "group.id": fresh("ck"),
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": FETCH_WAIT_MS,
        }
    )
    consumer.subscribe([topic])
    out: list[Any] = []
    try:
        for _ in range(200):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg)
            if len(out) >= n:
                break
    finally:
        consumer.close()
    return out


@pytest.mark.compat(
    "SDK", "Schema Registry serdes (Avro, Protobuf, JSON Schema) with confluent-kafka's"
)
def test_blocking_producer_to_confluent_consumer_prefix_and_header(
    broker: RunningBroker, registry: SchemaRegistryClient, ck_registry: CkRegistry
) -> None:
    """The blocking producer frames keys (JSON Schema) and values (Avro) in the
    payload prefix or, with ``schema.id.framing=header``, in the
    ``__value_schema_id`` header; confluent-kafka's consumer and deserializers
    read both."""
    bs = broker.bootstrap_servers
    topic = fresh("bp")
    key_schema = json.dumps({"type": "object", "properties": {"k": {"type": "integer"}}})
    prefix = AvroSerializer(registry, json.dumps(USER))
    header = AvroSerializer(registry, json.dumps(USER), conf={"schema.id.framing": "header"})
    with blocking.Producer(
        bootstrap_servers=bs,
        key_serializer=JSONSerializer(key_schema, registry),
        value_serializer=prefix,
        linger_ms=1,
    ) as plain:
        for i, user in enumerate(USERS[:2]):
            plain.send(topic, user, key={"k": i})
    with blocking.Producer(
        bootstrap_servers=bs,
        value_serializer=header,
        key_serializer=JSONSerializer(key_schema, registry),
    ) as framed:
        for i, user in enumerate(USERS[2:]):
            framed.send(topic, user, key={"k": i + 2}, headers=[("trace", b"t")])
    msgs = _ck_consume(bs, topic, len(USERS))
    avro = CkAvroDeserializer(ck_registry)
    keys = CkJSONDeserializer(key_schema, schema_registry_client=ck_registry)
    got = []
    for msg in msgs:
        headers = msg.headers() or []
        got.append(
            (
                keys(msg.key(), ctx(topic, MessageField.KEY, headers)),
                avro(msg.value(), ctx(topic, MessageField.VALUE, headers)),
            )
        )
    assert got == [({"k": i}, user) for i, user in enumerate(USERS)]
    framed_headers = [dict(m.headers() or []) for m in msgs[2:]]
    assert all(
        h["trace"] == b"t" and h["__value_schema_id"][:1] in (b"\x00", b"\x01")
        for h in framed_headers
    )
    assert all(m.value()[:1] != b"\x00" or m.headers() is None for m in msgs[2:])


@pytest.mark.compat(
    "SDK", "Schema Registry serdes (Avro, Protobuf, JSON Schema) with confluent-kafka's"
)
def test_confluent_producer_to_async_consumer(
    broker: RunningBroker, ck_registry: CkRegistry, url: str
) -> None:
    """confluent-kafka's producer with its Avro serializer; trafka's async
    consumer (trio) with ours, configured by Confluent's setting names."""
    bs = broker.bootstrap_servers
    topic = fresh("cp")
    ser = CkAvroSerializer(ck_registry, json.dumps(USER))
    producer = CkProducer({"bootstrap.servers": bs})
    for user in USERS:
        producer.produce(topic, value=ser(user, ctx(topic)))
    assert producer.flush(30) == 0

    async def main() -> list[Any]:
        de = AvroDeserializer({"schema.registry.url": url})
        out: list[Any] = []
        with anyio.fail_after(60):
            async with open_consumer(
                bootstrap_servers=bs,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=FETCH_WAIT_MS,
                value_deserializer=de,
            ) as consumer:
                consumer.assign([TopicPartition(topic, 0)])
                while len(out) < len(USERS):
                    for recs in (await consumer.getmany(timeout_ms=1000)).values():
                        out.extend(r.value for r in recs)
        de.registry.close()
        return out

    assert anyio.run(main, backend="trio") == USERS


def _produce_raw(bs: str, topic: str, values: list[bytes]) -> None:
    with blocking.Producer(bootstrap_servers=bs, linger_ms=1) as producer:
        for v in values:
            producer.send(topic, v)


def test_bad_records_stop_the_partition_at_them_or_are_skipped(
    broker: RunningBroker, registry: SchemaRegistryClient
) -> None:
    """A wrong magic byte, an unknown schema id, a truncated payload: with
    ``deserialization.error.handler=stop`` the poll hands out what came before,
    the next raises an error naming topic, partition, offset and what is wrong,
    the position stays at the record (commits stop before it) until the user
    seeks past it; with ``skip`` only the good records come out."""
    bs = broker.bootstrap_servers
    topic = fresh("bad")
    ser = AvroSerializer(registry, json.dumps(USER))
    good = [ser(u, ctx(topic)) for u in USERS[:2]]
    unknown_id = b"\x00\x7f\xff\xff\xf0" + good[0][5:]
    values = [good[0], b"\x05" + good[0][1:], unknown_id, good[1][:-3], good[1]]
    _produce_raw(bs, topic, values)
    tp = TopicPartition(topic, 0)
    reasons = {1: "unknown magic byte 5", 2: "40403", 3: "does not decode"}
    group = fresh("g")
    with blocking.Consumer(
        topic,
        bootstrap_servers=bs,
        group_id=group,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=FETCH_WAIT_MS,
        enable_auto_commit=False,
        value_deserializer=AvroDeserializer(registry),
    ) as consumer:
        first = _poll_until(consumer, 1)
        assert [r.value for r in first] == [USERS[0]]
        for offset in (1, 2, 3):
            with pytest.raises(SchemaSerializationError) as caught:
                _poll_until(consumer, 1)
            error = caught.value
            assert (error.topic, error.partition, error.offset) == (topic, 0, offset)
            assert reasons[offset] in str(error)
            assert consumer.position(tp) == offset
            if offset == 1:
                consumer.commit()
                # nothing past the bad record is committed
                assert consumer.consumed_offsets()[tp] == 1
            consumer.seek(tp, offset + 1)
        assert [r.value for r in _poll_until(consumer, 1)] == [USERS[1]]
    with blocking.Consumer(
        bootstrap_servers=bs,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=FETCH_WAIT_MS,
        value_deserializer=AvroDeserializer(registry),
        deserialization_error_handler="skip",
    ) as skipping:
        skipping.assign([tp])
        assert [r.value for r in _poll_until(skipping, 2)] == USERS[:2]


def _poll_until(consumer: Any, n: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(60):
        for recs in consumer.getmany(timeout_ms=500).values():
            out.extend(recs)
        if len(out) >= n:
            return out
    raise AssertionError(f"only {len(out)} of {n} records")


def test_one_registry_request_per_schema(broker: RunningBroker) -> None:
    """Issue #63's measure: requests to the registry per N records = one per
    schema, counted by the client and on the wire (a relay in front of the registry)."""
    bs = broker.bootstrap_servers
    topic = fresh("cache")
    n = 2000
    assert broker.schema_registry_address is not None
    relay = Relay(broker.schema_registry_address)
    url = f"http://127.0.0.1:{relay.port}"
    with SchemaRegistryClient({"url": url}) as counted:
        value_ser = AvroSerializer(counted, json.dumps(USER))
        key_ser = JSONSerializer(json.dumps(THING), counted)
        with blocking.Producer(
            bootstrap_servers=bs, value_serializer=value_ser, key_serializer=key_ser
        ) as producer:
            for i in range(n):
                producer.send(topic, USERS[i % len(USERS)], key={"id": i})
        assert counted.requests == 2  # one registration per schema
    with SchemaRegistryClient({"url": url}) as reading:
        with blocking.Consumer(
            bootstrap_servers=bs,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=FETCH_WAIT_MS,
            value_deserializer=AvroDeserializer(reading),
            key_deserializer=JSONDeserializer(None, schema_registry_client=reading),
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            got = _poll_until(consumer, n)
        assert got[-1].key == {"id": n - 1} and len(got) == n
        assert reading.requests == 2  # one fetch by id per schema
    assert relay.request_count() == 4
    relay.close()


def test_subject_strategies_references_and_latest(
    registry: SchemaRegistryClient, ck_registry: CkRegistry
) -> None:
    """record and topic_record subjects; an Avro schema naming a type of
    another subject (a schema reference), read by Confluent's deserializer;
    ``use.latest.version`` without registering."""
    topic = fresh("strat")
    address = {"type": "record", "name": "Address", "namespace": "example.geo",
               "fields": [{"name": "city", "type": "string"}]}  # fmt: skip
    addr_subject = fresh("example.geo.Address")
    registry.register_schema(addr_subject, Schema(json.dumps(address)))
    person = {"type": "record", "name": "Person", "namespace": "example.people",
              "fields": [{"name": "home", "type": "example.geo.Address"}]}  # fmt: skip
    with_ref = Schema(
        json.dumps(person), "AVRO", (SchemaReference("example.geo.Address", addr_subject, 1),)
    )
    ser = AvroSerializer(registry, with_ref, conf={"subject.name.strategy": "topic_record"})
    value = {"home": {"city": "Lyon"}}
    framed = ser(value, ctx(topic))
    assert f"{topic}-example.people.Person" in registry.get_subjects()
    assert CkAvroDeserializer(ck_registry)(framed, ctx(topic)) == value
    assert AvroDeserializer(registry)(framed, ctx(topic)) == value
    rec = AvroSerializer(registry, json.dumps(USER), conf={"subject.name.strategy": "record"})
    rec(USERS[0], ctx(topic))
    latest = AvroSerializer(
        registry, None, conf={"use.latest.version": True, "auto.register.schemas": False,
                              "subject.name.strategy": lambda topic, is_key, record: "example.people.User"},
    )  # fmt: skip
    assert latest(USERS[1], ctx(fresh("other"))) == rec(USERS[1], ctx(topic))
    missing = AvroSerializer(registry, json.dumps(USER), conf={"auto.register.schemas": False})
    with pytest.raises(SchemaSerializationError, match=r"40401|40403") as caught:
        missing(USERS[0], ctx(fresh("none")))
    assert caught.value.subject is not None and caught.value.subject.endswith("-value")


def test_confluent_kafka_code_moves_over_by_its_imports(broker: RunningBroker, url: str) -> None:
    """A confluent-kafka service's schema code, its imports changed to
    trafka.compat.confluent: SerializingProducer and DeserializingConsumer with
    the registry client and Avro serdes by their confluent-kafka names."""
    from trafka.compat.confluent import DeserializingConsumer, SerializingProducer
    from trafka.compat.confluent.schema_registry import Schema as CSchema
    from trafka.compat.confluent.schema_registry import SchemaRegistryClient as Client
    from trafka.compat.confluent.schema_registry.avro import AvroDeserializer as De
    from trafka.compat.confluent.schema_registry.avro import AvroSerializer as Ser
    from trafka.compat.confluent.serialization import StringDeserializer, StringSerializer

    topic = fresh("compat")
    client = Client({"url": url})
    try:
        assert isinstance(
            client.register_schema(fresh("compat-subject"), CSchema(json.dumps(USER), "AVRO", [])),
            int,
        )
        producer = SerializingProducer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "key.serializer": StringSerializer("utf_8"),
                "value.serializer": Ser(client, json.dumps(USER)),
            }
        )
        for user in USERS:
            producer.produce(topic, key=user["name"], value=user)
        producer.flush(30)
        consumer = DeserializingConsumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": fresh("g"),
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": FETCH_WAIT_MS,
                "key.deserializer": StringDeserializer("utf_8"),
                "value.deserializer": De(client),
            }
        )
        consumer.subscribe([topic])
        got = []
        try:
            for _ in range(100):
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append((msg.key(), msg.value()))
                if len(got) == len(USERS):
                    break
        finally:
            consumer.close()
        assert got == [(u["name"], u) for u in USERS]
    finally:
        client.close()


def test_async_producer_and_consumer_header_framing_dynamic_protobuf(
    broker: RunningBroker, registry: SchemaRegistryClient
) -> None:
    """The async producer (asyncio) writes Protobuf with the schema in the
    ``__value_schema_id`` header; the async consumer, without the generated
    class, reads dynamic messages built from the registered schema."""
    bs = broker.bootstrap_servers
    topic = fresh("aproto")
    orders = [Order(id=f"o-{i}", lines=[Line(sku="s", qty=i)]) for i in range(3)]

    async def main() -> list[Any]:
        out: list[Any] = []
        ser = ProtobufSerializer(Order, registry, {"schema.id.framing": "header"})
        with anyio.fail_after(60):
            async with open_producer(bootstrap_servers=bs, value_serializer=ser) as producer:
                for order in orders:
                    await producer.send_and_wait(topic, order)
            de = ProtobufDeserializer(schema_registry_client=registry)
            async with open_consumer(
                bootstrap_servers=bs,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=FETCH_WAIT_MS,
                value_deserializer=de,
            ) as consumer:
                consumer.assign([TopicPartition(topic, 0)])
                while len(out) < len(orders):
                    for recs in (await consumer.getmany(timeout_ms=1000)).values():
                        out.extend(recs)
        return out

    records = anyio.run(main, backend="asyncio")
    assert [(r.value.id, r.value.lines[0].qty) for r in records] == [
        ("o-0", 0),
        ("o-1", 1),
        ("o-2", 2),
    ]
    assert all(dict(r.headers)["__value_schema_id"][:1] in (b"\x00", b"\x01") for r in records)
    # the payload is the bare message: no magic byte before it
    assert records[0].value.DESCRIPTOR.full_name == "shop.Order"


def test_any_deserializer_that_fails_stops_at_its_record(broker: RunningBroker) -> None:
    """Not only schema serdes: a ``json`` value deserializer meeting bad JSON
    stops at that offset (before, the records of the fetch it came in were
    lost: the position had moved past them)."""
    bs = broker.bootstrap_servers
    topic = fresh("badjson")
    _produce_raw(bs, topic, [b'{"a": 1}', b"{not json", b'{"a": 3}'])
    tp = TopicPartition(topic, 0)
    with blocking.Consumer(
        bootstrap_servers=bs,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=FETCH_WAIT_MS,
        value_deserializer="json",
    ) as consumer:
        consumer.assign([tp])
        assert [r.value for r in _poll_until(consumer, 1)] == [{"a": 1}]
        with pytest.raises(SerializationError, match="partition 0, offset 1") as caught:
            _poll_until(consumer, 1)
        assert "cannot deserialize JSON" in str(caught.value)
        assert consumer.position(tp) == 1
        consumer.seek(tp, 2)
        assert [r.value for r in _poll_until(consumer, 1)] == [{"a": 3}]
    decided: list[int] = []

    def handler(error: Any) -> str:
        decided.append(1)
        return "skip"

    with blocking.Consumer(
        bootstrap_servers=bs,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=FETCH_WAIT_MS,
        value_deserializer="json",
        deserialization_error_handler=handler,
    ) as skipping:
        skipping.assign([tp])
        assert [r.value for r in _poll_until(skipping, 2)] == [{"a": 1}, {"a": 3}]
    assert decided == [1]


def _invoice_class() -> Any:
    """invoice_test.proto importing money_test.proto (both the test's own)."""
    pool = descriptor_pool.Default()
    try:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName("billing.Invoice"))
    except KeyError:
        pass
    money = descriptor_pb2.FileDescriptorProto(
        name="money_test.proto", package="common", syntax="proto3"
    )
    m = money.message_type.add(name="Money")
    m.field.add(name="cents", number=1, label=1, type=3, json_name="cents")
    m.field.add(name="currency", number=2, label=1, type=9, json_name="currency")
    invoice = descriptor_pb2.FileDescriptorProto(
        name="invoice_test.proto",
        package="billing",
        syntax="proto3",
        dependency=["money_test.proto"],
    )
    i = invoice.message_type.add(name="Invoice")
    i.field.add(
        name="total", number=1, label=1, type=11, type_name=".common.Money", json_name="total"
    )
    pool.Add(money)
    pool.Add(invoice)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("billing.Invoice"))


def test_protobuf_imports_are_registered_as_references(
    registry: SchemaRegistryClient, ck_registry: CkRegistry
) -> None:
    """The imported file is registered under its own subject (its file name)
    and referenced by version; readers with and without generated classes
    resolve it, Confluent's too."""
    Invoice = _invoice_class()
    topic = fresh("invoice")
    value = Invoice()
    value.total.cents, value.total.currency = 1250, "EUR"
    framed = ProtobufSerializer(Invoice, registry)(value, ctx(topic))
    latest = registry.get_latest_version(f"{topic}-value")
    assert [(r.name, r.subject) for r in latest.schema.references] == [
        ("money_test.proto", "money_test.proto")
    ]
    assert 'import "money_test.proto";' in latest.schema.schema_str
    assert (
        CkProtobufDeserializer(Invoice, {"use.deprecated.format": False})(framed, ctx(topic))
        == value
    )
    dynamic = ProtobufDeserializer(schema_registry_client=registry)(framed, ctx(topic))
    assert (dynamic.total.cents, dynamic.total.currency) == (1250, "EUR")


def test_json_schema_references_resolve_on_both_sides(
    registry: SchemaRegistryClient, ck_registry: CkRegistry
) -> None:
    """A ``$ref`` to another subject's schema, named by the reference: our
    serializer validates through it (and refuses what it refuses); Confluent's
    deserializer reads the record."""
    address = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    addr_subject = fresh("address")
    registry.register_schema(addr_subject, Schema(json.dumps(address), "JSON"))
    person = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "home": {"$ref": "address.json"}},
    }
    schema = Schema(json.dumps(person), "JSON", (SchemaReference("address.json", addr_subject, 1),))
    topic = fresh("jref")
    ser = JSONSerializer(schema, registry)
    value = {"name": "n", "home": {"city": "Oslo"}}
    framed = ser(value, ctx(topic))
    assert CkJSONDeserializer(None, schema_registry_client=ck_registry)(framed, ctx(topic)) == value
    assert JSONDeserializer(None, schema_registry_client=registry)(framed, ctx(topic)) == value
    with pytest.raises(SchemaSerializationError, match="'city' is a required property"):
        ser({"name": "n", "home": {}}, ctx(topic))
