"""Registry-framed keys and values as typed struct columns (issue #63, item 5).

Against brokerlite with its registry (``--schema-registry-listen``) and a real
local Spark: records written by the SDK's serializers read as structs, structs
written by the sink read by the SDK's deserializers, a stream restarted across
a compatible new schema version, and records that do not decode.

The Avro type mapping follows Spark's ``from_avro`` (Spark's Avro data source
guide, "Supported types for Avro -> Spark SQL conversion"); the stream's
evolution Avro's schema resolution (the Avro specification, "Schema
Resolution": a field the reader has and the writer lacks takes its default).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kafka_peers import KafkaCluster
from spark_helpers import consume_all, create, fresh, produce, stream_of
from test_spark_kafka_parity import make_topics

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.sdk import NewTopic
from trafka.sdk.schemas import (
    AvroDeserializer,
    AvroSerializer,
    JSONDeserializer,
    JSONSerializer,
    ProtobufDeserializer,
    ProtobufSerializer,
    Schema,
    SchemaRegistryClient,
)

pytestmark = pytest.mark.slow

USER = {
    "type": "record",
    "name": "User",
    "namespace": "shop",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "email", "type": ["null", "string"], "default": None},
    ],
}
USER_V2 = {
    **USER,
    "fields": [*USER["fields"], {"name": "country", "type": "string", "default": "unknown"}],
}
USER_JSON = {
    "type": "object",
    "title": "User",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "email": {"type": ["string", "null"]},
    },
    "required": ["name", "age"],
}
USER_PROTO = """syntax = "proto3";
package shop;
message User {
  string name = 1;
  int32 age = 2;
  repeated string tags = 3;
  optional string email = 4;
}
"""
USERS = [
    {"name": "ada", "age": 36, "tags": ["math"], "email": "ada@example.org"},
    {"name": "alan", "age": 41, "tags": [], "email": None},
    {"name": "grace", "age": 85, "tags": ["navy", "cobol"], "email": None},
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    data = tmp_path_factory.mktemp("spark-schemas")
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=data,
        group_initial_rebalance_delay_ms=0,
        schema_registry_listen="127.0.0.1:0",
    ) as running:
        yield running


@pytest.fixture(scope="module")
def url(broker: RunningBroker) -> str:
    assert broker.schema_registry_address is not None
    host, port = broker.schema_registry_address
    return f"http://{host}:{port}"


@pytest.fixture(scope="module")
def registry(url: str) -> Iterator[SchemaRegistryClient]:
    with SchemaRegistryClient({"url": url}) as client:
        yield client


def _proto_class() -> Any:
    from google.protobuf import descriptor_pool, message_factory

    from trafka.sdk.schemas.proto_text import parse_proto

    pool = descriptor_pool.DescriptorPool()
    file = pool.Add(parse_proto(USER_PROTO, "shop_user.proto"))
    return message_factory.GetMessageClass(file.message_types_by_name["User"])


def _serdes(fmt: str, registry: SchemaRegistryClient) -> tuple[Any, Any, Any]:
    """(serializer, deserializer, dict -> the serializer's value) of a format."""
    if fmt == "avro":
        return AvroSerializer(registry, json.dumps(USER)), AvroDeserializer(registry), dict
    if fmt == "json-schema":
        clean = lambda u: {k: v for k, v in u.items() if v is not None}  # noqa: E731
        return (
            JSONSerializer(json.dumps(USER_JSON), registry),
            JSONDeserializer(None, schema_registry_client=registry),
            clean,
        )
    cls = _proto_class()
    return (
        ProtobufSerializer(cls, registry),
        ProtobufDeserializer(schema_registry_client=registry),
        (lambda u: cls(**{k: v for k, v in u.items() if v is not None})),
    )


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {**{"email": None, "tags": []}, **value}
    out = {"name": value.name, "age": value.age, "tags": list(value.tags)}
    out["email"] = value.email if value.HasField("email") else None
    return out


def _read(spark: Any, broker: RunningBroker, url: str, topic: str, **options: str) -> Any:
    reader = (
        spark.read.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("subscribe", topic)
        .option("schema.registry.url", url)
    )
    for k, v in options.items():
        reader = reader.option(k.replace("_", "."), v)
    return reader.load()


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json-schema"])
def test_values_read_as_structs_and_written_back(
    spark: Any, broker: RunningBroker, url: str, registry: SchemaRegistryClient, fmt: str
) -> None:
    """Records the SDK's serializer framed read as a struct column of the
    subject's latest schema; the sink encodes that column with the target
    subject's latest schema (by its id, registering nothing), and the SDK's
    deserializer reads the same users back."""
    source, target = fresh("users"), fresh("copy")
    create(broker, source, 1)
    create(broker, target, 1)
    serializer, deserializer, to_value = _serdes(fmt, registry)
    produce(broker, source, [(None, to_value(u), None) for u in USERS], value_serializer=serializer)

    df = _read(spark, broker, url, source, value_format=fmt)
    value_type = df.schema["value"].dataType
    assert value_type.fieldNames() == ["name", "age", "tags", "email"]
    got = [r.value.asDict() for r in df.orderBy("offset").collect()]
    assert got == USERS

    # The target subject holds the same schema; the write must not add a version.
    written = registry.get_latest_version(f"{source}-value")
    registry.register_schema(f"{target}-value", written.schema)
    (
        df.select("value")
        .write.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", target)
        .option("value.format", fmt)
        .option("schema.registry.url", url)
        .mode("append")
        .save()
    )
    assert registry.get_versions(f"{target}-value") == [1]
    back = [
        _as_dict(deserializer.deserialize_record(r.value, target, r.partition, r.offset))
        for r in consume_all(broker, target, 1)
    ]
    assert back == USERS


def test_a_stream_restarted_reads_the_new_schema_version(
    spark: Any, broker: RunningBroker, url: str, registry: SchemaRegistryClient, tmp_path: Any
) -> None:
    """A stream with a checkpoint, stopped; a compatible version (a field added
    with a default) registered, records of both versions written; the stream
    loaded again resumes from its checkpoint with the new column: the old
    version's records read with the default, the new ones with their value."""
    topic = fresh("evolve")
    create(broker, topic, 1)
    checkpoint = str(tmp_path / "checkpoint")
    v1 = AvroSerializer(registry, json.dumps(USER))
    produce(broker, topic, [(None, USERS[0], None)], value_serializer=v1)

    def run_once() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        df = stream_of(
            spark, broker, subscribe=topic, startingOffsets="earliest",
            **{"value.format": "avro", "schema.registry.url": url},
        )  # fmt: skip
        query = (
            df.select("offset", "value")
            .writeStream.foreachBatch(lambda b, _: rows.extend(r.asDict(True) for r in b.collect()))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        assert query.exception() is None
        return sorted(rows, key=lambda r: r["offset"])

    assert run_once() == [{"offset": 0, "value": USERS[0]}]

    produce(broker, topic, [(None, USERS[1], None)], value_serializer=v1)
    registry.register_schema(f"{topic}-value", Schema(json.dumps(USER_V2)))
    v2 = AvroSerializer(registry, json.dumps(USER_V2))
    produce(broker, topic, [(None, {**USERS[2], "country": "US"}, None)], value_serializer=v2)

    assert run_once() == [
        {"offset": 1, "value": {**USERS[1], "country": "unknown"}},
        {"offset": 2, "value": {**USERS[2], "country": "US"}},
    ]


def test_a_record_that_does_not_decode(
    spark: Any, broker: RunningBroker, url: str, registry: SchemaRegistryClient
) -> None:
    """As the SDK's ``deserialization.error.handler``: ``stop`` fails the read
    naming the topic, partition and offset; ``skip`` leaves the record out;
    ``null`` keeps its row with a null value."""
    topic = fresh("bad")
    create(broker, topic, 1)
    serializer = AvroSerializer(registry, json.dumps(USER))
    produce(broker, topic, [(None, USERS[0], None)], value_serializer=serializer)
    produce(broker, topic, [(None, b"not a registry frame", None)])
    produce(broker, topic, [(None, USERS[1], None)], value_serializer=serializer)

    with pytest.raises(Exception) as failed:
        _read(spark, broker, url, topic, value_format="avro").collect()
    assert f"topic {topic!r}" in str(failed.value) or f"topic={topic}" in str(failed.value)
    assert "offset 1" in str(failed.value) or "offset=1" in str(failed.value)

    skipped = _read(spark, broker, url, topic, value_format="avro", **{
        "deserialization_error_handler": "skip"})  # fmt: skip
    assert [(r.offset, r.value.name) for r in skipped.orderBy("offset").collect()] == [
        (0, "ada"),
        (2, "alan"),
    ]
    nulled = _read(spark, broker, url, topic, value_format="avro", **{
        "deserialization_error_handler": "null"})  # fmt: skip
    assert [(r.offset, r.value and r.value.name) for r in nulled.orderBy("offset").collect()] == [
        (0, "ada"),
        (1, None),
        (2, "alan"),
    ]


@pytest.mark.kafka
def test_keys_and_values_read_from_kafka_4(
    spark: Any, kafka4: KafkaCluster, url: str, registry: SchemaRegistryClient
) -> None:
    """The same read against Apache Kafka 4 (the records there, the registry
    brokerlite's): a key of the Avro primitive ``string`` is a string column
    (Spark's ``from_avro`` maps a primitive schema to its own type), the value
    a struct; each from its subject, ``<topic>-key`` and ``<topic>-value``."""
    topic = fresh("k4")
    make_topics(kafka4.bootstrap_servers, NewTopic(topic, 1))
    produce(
        kafka4,  # type: ignore[arg-type]  # (it needs only bootstrap_servers)
        topic,
        [(u["name"], u, None) for u in USERS],
        key_serializer=AvroSerializer(registry, '"string"'),
        value_serializer=AvroSerializer(registry, json.dumps(USER)),
    )
    df = (
        spark.read.format("trafka")
        .option("kafka.bootstrap.servers", kafka4.bootstrap_servers)
        .option("subscribe", topic)
        .option("schema.registry.url", url)
        .option("key.format", "avro")
        .option("value.format", "avro")
        .load()
    )
    assert df.schema["key"].dataType.simpleString() == "string"
    rows = df.orderBy("offset").collect()
    assert [(r.key, r.value.asDict()) for r in rows] == [(u["name"], u) for u in USERS]


def test_from_registry_and_to_registry_on_any_column(
    spark: Any, broker: RunningBroker, url: str, registry: SchemaRegistryClient
) -> None:
    """As Spark's ``from_avro``/``to_avro``: a binary column decoded into the
    subject's struct, and that struct encoded back with the subject's latest
    schema gives the very bytes the SDK's serializer wrote (the same schema id,
    Avro's encoding being deterministic)."""
    from pyspark.sql.functions import col

    from trafka.spark import from_registry, to_registry

    topic = fresh("udf")
    create(broker, topic, 1)
    serializer = AvroSerializer(registry, json.dumps(USER))
    produce(broker, topic, [(None, u, None) for u in USERS], value_serializer=serializer)
    raw = (
        spark.read.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("subscribe", topic)
        .load()
    )
    subject = f"{topic}-value"
    decoded = raw.select(
        "offset", "value", from_registry(col("value"), subject, "avro", url).alias("user")
    )
    again = decoded.select(
        "value", "user", to_registry(col("user"), subject, "avro", url).alias("framed")
    )
    rows = again.orderBy("offset").collect()
    assert [r.user.asDict() for r in rows] == USERS
    assert [bytes(r.framed) for r in rows] == [bytes(r.value) for r in rows]


RICH = {
    "type": "record",
    "name": "Rich",
    "fields": [
        {"name": "born", "type": {"type": "int", "logicalType": "date"}},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "either", "type": ["int", "string"]},
        {"name": "wide", "type": ["int", "long"]},
    ],
}


def test_avro_types_map_as_spark_from_avro_maps_them(
    spark: Any, broker: RunningBroker, url: str, registry: SchemaRegistryClient
) -> None:
    """Spark's Avro guide ("Supported types for Avro -> Spark SQL conversion"):
    date -> date, timestamp-millis -> timestamp, decimal -> decimal(p, s),
    enum -> string, map -> map<string, _>, a union of int and string -> a struct
    of member0 and member1, [int, long] -> long."""
    import datetime
    import decimal

    topic = fresh("rich")
    create(broker, topic, 1)
    when = datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=datetime.UTC)
    values = [
        {"born": datetime.date(1990, 1, 2), "seen": when, "price": decimal.Decimal("12.34"),
         "color": "BLUE", "counts": {"a": 1, "b": 2}, "either": 7, "wide": 5},
        {"born": datetime.date(2000, 3, 4), "seen": when, "price": decimal.Decimal("0.01"),
         "color": "RED", "counts": {}, "either": "seven", "wide": 2**40},
    ]  # fmt: skip
    produce(
        broker, topic, [(None, v, None) for v in values],
        value_serializer=AvroSerializer(registry, json.dumps(RICH)),
    )  # fmt: skip
    df = _read(spark, broker, url, topic, value_format="avro")
    assert df.schema["value"].dataType.simpleString() == (
        "struct<born:date,seen:timestamp,price:decimal(9,2),color:string,"
        "counts:map<string,bigint>,either:struct<member0:int,member1:string>,wide:bigint>"
    )
    rows = [r.value.asDict(True) for r in df.orderBy("offset").collect()]
    naive = when.replace(tzinfo=None)  # the session's time zone is UTC
    assert rows == [
        {**values[0], "seen": naive, "either": {"member0": 7, "member1": None}},
        {**values[1], "seen": naive, "either": {"member0": None, "member1": "seven"}},
    ]
