"""confluent-kafka's names and serdes behaviour on the drop-in (issue #82,
items 2 and 3), each checked against confluent-kafka 2.16 itself:

* ``confluent_kafka.error`` and ``confluent_kafka.serialization`` offer the
  same public names, and the error classes the same hierarchy (a
  ``KeySerializationError`` is a ``ProduceError``, a ``SerializationError``
  and a ``KafkaException``), with the same codes;
* the serdes (string, integer, double) write the same bytes and fail with a
  ``SerializationError`` where confluent-kafka's do; custom serdes subclass
  ``Serializer`` / ``Deserializer``;
* ``SerializingProducer.produce`` raises ``KeySerializationError`` /
  ``ValueSerializationError`` (the serde's error in ``exception``), and
  ``DeserializingConsumer.poll`` ``ValueDeserializationError`` with the
  message as fetched in ``kafka_message`` (the drop-in's text names its
  topic, partition and offset); the schema registry's serdes raise
  confluent-kafka's ``SerializationError``;
* the model types' values, the key partitioners' partitions and ``Uuid``'s
  text are confluent-kafka's.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import uuid
from typing import Any

import confluent_kafka
import confluent_kafka.error
import confluent_kafka.serialization
import pytest
from hypothesis import given
from hypothesis import strategies as st

import trafka.compat.confluent as ours
from trafka.sdk import blocking

APIS = ["confluent_kafka", "trafka.compat.confluent"]


def _public(module: Any) -> set[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")]
    return {n for n in names if not inspect.ismodule(getattr(module, n, None))}


@pytest.mark.parametrize("module", ["error", "serialization"])
def test_the_modules_offer_confluent_kafkas_public_names(module: str) -> None:
    theirs = importlib.import_module(f"confluent_kafka.{module}")
    mine = importlib.import_module(f"trafka.compat.confluent.{module}")
    # typing helpers confluent-kafka's modules happen to import are no API.
    wanted = {n for n in _public(theirs) if n not in {"Optional", "Any", "Callable", "Dict"}}
    assert wanted - set(dir(mine)) == set()


def test_the_top_level_names_a_service_imports() -> None:
    for name in (
        "libversion",
        "version",
        "ThrottleEvent",
        "Node",
        "ConsumerGroupState",
        "ConsumerGroupType",
        "IsolationLevel",
        "ElectionType",
        "AcknowledgeType",
        "TopicCollection",
        "TopicPartitionInfo",
        "ConsumerGroupTopicPartitions",
        "Messages",
        "Uuid",
        "murmur2",
        "consistent",
        "fnv1a",
    ):
        assert hasattr(confluent_kafka, name), name  # (the list is confluent-kafka's)
        assert hasattr(ours, name), name
    assert ours.version() == confluent_kafka.version()
    assert ours.libversion() == confluent_kafka.libversion()
    assert str(ours.ThrottleEvent("b", 1, 0.25)) == str(confluent_kafka.ThrottleEvent("b", 1, 0.25))


def test_the_error_classes_have_confluent_kafkas_hierarchy_and_codes() -> None:
    names = [
        "ConsumeError",
        "ProduceError",
        "KeySerializationError",
        "ValueSerializationError",
        "KeyDeserializationError",
        "ValueDeserializationError",
        "KafkaException",
        "SerializationError",
    ]

    def cls(api_module: Any, name: str) -> Any:
        if name == "SerializationError":
            return api_module.serialization.SerializationError
        return getattr(api_module.error, name)

    for a in names:
        for b in names:
            theirs = issubclass(cls(confluent_kafka, a), cls(confluent_kafka, b))
            assert issubclass(cls(ours, a), cls(ours, b)) == theirs, (a, b)
    cause = ValueError("bad")
    for name in names[2:4]:
        mine, theirs = cls(ours, name)(cause), cls(confluent_kafka, name)(cause)
        assert (mine.code, mine.name, mine.exception) == (theirs.code, theirs.name, cause)
        assert mine.args[0].code() == theirs.args[0].code()
    for name in names[4:6]:
        mine, theirs = cls(ours, name)(cause, None), cls(confluent_kafka, name)(cause, None)
        assert (mine.code, mine.name, mine.kafka_message) == (theirs.code, theirs.name, None)


@pytest.mark.parametrize("api", APIS)
def test_custom_serdes_subclass_the_base_classes(api: str) -> None:
    ser = importlib.import_module(f"{api}.serialization")

    class Upper(ser.Serializer):  # type: ignore[misc,name-defined]
        def __call__(self, obj: Any, ctx: Any = None) -> bytes:
            return str(obj).upper().encode()

    assert Upper()("a", None) == b"A"
    Upper().set_cluster_id_resolver(lambda: "id")
    Upper().close()
    with pytest.raises(NotImplementedError):
        ser.Deserializer()(b"x", None)
    assert str(ser.MessageField.VALUE) == "value" and ser.MessageField.KEY == "key"


serdes = st.sampled_from(
    [
        ("IntegerSerializer", "IntegerDeserializer", st.integers(-(2**31), 2**31 - 1)),
        ("DoubleSerializer", "DoubleDeserializer", st.floats(allow_nan=False)),
        ("StringSerializer", "StringDeserializer", st.text()),
    ]
)


@given(serdes.flatmap(lambda s: st.tuples(st.just(s[:2]), s[2])))
def test_the_serdes_write_confluent_kafkas_bytes(case: tuple[tuple[str, str], Any]) -> None:
    (ser, de), value = case
    mine = getattr(ours.serialization, ser)()(value, None)
    assert mine == getattr(confluent_kafka.serialization, ser)()(value, None)
    back = getattr(ours.serialization, de)()(mine, None)
    assert back == value or (isinstance(value, float) and math.isclose(back, value))
    assert getattr(ours.serialization, ser)()(None, None) is None


@pytest.mark.parametrize("api", APIS)
def test_a_serde_that_fails_raises_serialization_error(api: str) -> None:
    ser = importlib.import_module(f"{api}.serialization")
    failures = [
        lambda: ser.IntegerSerializer()(2**40, None),
        lambda: ser.IntegerDeserializer()(b"\x00\x01", None),
        lambda: ser.DoubleDeserializer()(b"\x00", None),
        lambda: ser.StringDeserializer()(b"\xff\xfe", None),
        lambda: ser.StringSerializer("ascii")("\u00e9", None),
    ]
    kafka_exception = importlib.import_module(api).KafkaException
    for fail in failures:
        with pytest.raises(ser.SerializationError) as caught:
            fail()
        assert isinstance(caught.value, kafka_exception)


@given(st.binary(max_size=40), st.integers(1, 500))
def test_the_key_partitioners_are_confluent_kafkas(key: bytes, count: int) -> None:
    for name in ("murmur2", "consistent", "fnv1a"):
        assert getattr(ours, name)(key, count) == getattr(confluent_kafka, name)(key, count)


def test_the_partitioners_refuse_what_confluent_kafka_refuses() -> None:
    for api in (ours, confluent_kafka):
        with pytest.raises(ValueError):
            api.murmur2(b"k", 0)
        with pytest.raises(TypeError):
            api.murmur2("k", 3)


def test_the_model_types_are_confluent_kafkas() -> None:
    for enum_name in (
        "ConsumerGroupState",
        "ConsumerGroupType",
        "IsolationLevel",
        "ElectionType",
        "AcknowledgeType",
    ):
        theirs = {m.name: m.value for m in getattr(confluent_kafka, enum_name)}
        assert {m.name: m.value for m in getattr(ours, enum_name)} == theirs, enum_name
    assert ours.ConsumerGroupState.UNKOWN is ours.ConsumerGroupState.UNKNOWN
    assert sorted([ours.ConsumerGroupState.EMPTY, ours.ConsumerGroupState.STABLE])[0].name == (
        "STABLE"
    )
    for bits in ((1, 2), (2**63 - 1, -1), (0, 0)):
        assert str(ours.Uuid(*bits)) == str(confluent_kafka.Uuid(*bits))
    node = ours.Node(3, "h", 9092, "r1")
    assert str(node) == str(confluent_kafka.Node(3, "h", 9092, "r1")) and node.id_string == "3"
    messages = ours.Messages([1, 2, 3])
    assert (len(messages), messages.count(), list(messages[1:]), messages.is_empty()) == (
        3,
        3,
        [2, 3],
        False,
    )


# -- the serializing clients --------------------------------------------------------------


class Refuse:
    def __call__(self, obj: Any, ctx: Any = None) -> bytes:
        raise ValueError(f"refused {obj!r}")


@pytest.mark.parametrize("api", APIS)
def test_serializing_producer_raises_the_field_s_serialization_error(api: str) -> None:
    ck = importlib.import_module(api)
    errors = importlib.import_module(f"{api}.error")
    ser = importlib.import_module(f"{api}.serialization")
    producer = ck.SerializingProducer(
        {
            "bootstrap.servers": "127.0.0.1:9",
            "key.serializer": Refuse(),
            "value.serializer": ser.StringSerializer(),
        }
    )
    try:
        with pytest.raises(errors.KeySerializationError) as caught:
            producer.produce("t", key="k", value="v")
        assert isinstance(caught.value, ser.SerializationError)
        assert isinstance(caught.value, ck.KafkaException)
        assert isinstance(caught.value.exception, ValueError)
        assert caught.value.code == ck.KafkaError._KEY_SERIALIZATION
        producer2 = ck.SerializingProducer(
            {"bootstrap.servers": "127.0.0.1:9", "value.serializer": Refuse()}
        )
        with pytest.raises(errors.ValueSerializationError):
            producer2.produce("t", value="v")
        producer2.flush(0)
    finally:
        producer.flush(0)


def _bad_values(bs: str, topic: str) -> None:
    with blocking.Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([topic], num_partitions=1, replication_factor=1)
    with blocking.Producer(bootstrap_servers=bs) as producer:
        producer.send(topic, b"\x00\x00\x00\x07", b"ok", partition=0)
        producer.send(topic, b"too long for an int", b"bad", partition=0)
        producer.flush()


@pytest.mark.timeout(120)
def test_deserializing_consumer_raises_value_deserialization_error(brokerlite_peer: str) -> None:
    topic = f"compat-deser-{uuid.uuid4().hex[:8]}"
    _bad_values(brokerlite_peer, topic)
    seen: dict[str, Any] = {}
    for api in APIS:
        ck = importlib.import_module(api)
        errors = importlib.import_module(f"{api}.error")
        ser = importlib.import_module(f"{api}.serialization")
        consumer = ck.DeserializingConsumer(
            {
                "bootstrap.servers": brokerlite_peer,
                "group.id": f"g-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "key.deserializer": ser.StringDeserializer(),
                "value.deserializer": ser.IntegerDeserializer(),
            }
        )
        try:
            consumer.subscribe([topic])
            first = None
            for _ in range(60):
                first = consumer.poll(1.0)
                if first is not None:
                    break
            assert first is not None
            with pytest.raises(errors.ValueDeserializationError) as caught:
                for _ in range(30):
                    consumer.poll(1.0)
            with pytest.raises(NotImplementedError):
                consumer.consume(1, 0.1)
        finally:
            consumer.close()
        err = caught.value
        assert isinstance(err, ser.SerializationError) and isinstance(err, ck.KafkaException)
        assert isinstance(err, errors.ConsumeError)
        raw = err.kafka_message
        seen[api] = (first.key(), first.value(), err.code, raw.key(), raw.value(), raw.offset())
        if api == "trafka.compat.confluent":
            assert f"topic {topic}, partition 0, offset 1" in str(err.args[0])
    assert seen["trafka.compat.confluent"] == seen["confluent_kafka"]
    assert seen["confluent_kafka"] == ("ok", 7, -159, b"bad", b"too long for an int", 1)


def test_the_registry_serdes_raise_confluent_kafkas_serialization_error() -> None:
    """A record the Avro schema refuses: confluent-kafka's serializer raises
    fastavro's TypeError; the drop-in's error is that and a SerializationError
    (a KafkaException), so code catching either works."""
    from trafka.compat.confluent.schema_registry import RegisteredSchema, Schema
    from trafka.compat.confluent.schema_registry.avro import AvroSerializer

    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]}

    class Registry:  # what use.schema.id asks of a client
        def get_schema(self, schema_id: int, subject: Any = None, fmt: Any = None) -> Any:
            return Schema(json.dumps(schema), "AVRO")

        def lookup_schema(self, subject: str, schema: Any, *args: Any) -> Any:
            return RegisteredSchema(
                schema_id=1, guid=None, schema=schema, subject=subject, version=1
            )

    serializer = AvroSerializer(
        Registry(), json.dumps(schema), conf={"use.schema.id": 1, "auto.register.schemas": False}
    )
    with pytest.raises(ours.serialization.SerializationError) as caught:
        serializer({"n": "not an int"}, ours.serialization.SerializationContext("t", "value"))
    assert isinstance(caught.value, ours.KafkaException)
    assert isinstance(caught.value, TypeError)  # (fastavro's, as confluent-kafka raises it)
    assert isinstance(serializer, ours.serialization.Serializer)


def test_an_unknown_error_code_is_named_as_librdkafkas() -> None:
    for code in (12345, 999, 7):
        mine, theirs = ours.KafkaError(code), confluent_kafka.KafkaError(code)
        assert (mine.code(), mine.name()) == (theirs.code(), theirs.name())
        if code != 7:  # (a known code's text is librdkafka's own wording)
            assert (str(mine), repr(mine)) == (str(theirs), repr(theirs))
