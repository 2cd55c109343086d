"""``trafka produce`` / ``consume`` with Schema Registry formats, and ``trafka
schemas``, against brokerlite's registry, with confluent-kafka's serializers
and deserializers as the peer.

The framing is Confluent's "Wire format" (docs.confluent.io, Schema Registry,
"Formats, Serializers, and Deserializers"): magic byte 0, the schema id as 4
bytes big-endian, Protobuf's message indexes, then the payload. The REST calls
and their error codes (40401 subject not found, 409 incompatible, the soft and
hard delete rules) are those of Confluent's Schema Registry API reference.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import Producer as CkProducer
from confluent_kafka.schema_registry import SchemaRegistryClient as CkRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer as CkAvroDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as CkAvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer as CkJSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer as CkProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from unique_names import names as _names

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.tools.cli import main

pytestmark = pytest.mark.timeout(120)

USER = {
    "type": "record",
    "name": "User",
    "namespace": "cli.people",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "email", "type": ["null", "string"], "default": None},
    ],
}
USERS = [{"name": f"u{i}", "age": 20 + i, "email": None if i % 2 else f"u{i}@x"} for i in range(3)]
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
THINGS = [{"id": 1, "tags": ["a"]}, {"id": 2, "tags": ["é", "b"]}]


def _ticket_class() -> Any:
    """A Protobuf message class as generated code would give it (cli_tickets.proto)."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName("cli_tickets.proto")
    except KeyError:
        f = descriptor_pb2.FileDescriptorProto(
            name="cli_tickets.proto", package="cli", syntax="proto3"
        )
        t = f.message_type.add(name="Ticket")
        t.field.add(name="id", number=1, label=1, type=9, json_name="id")
        t.field.add(name="seats", number=2, label=1, type=5, json_name="seats")
        t.field.add(name="tags", number=3, label=3, type=9, json_name="tags")
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("cli.Ticket"))


Ticket = _ticket_class()
TICKETS = [{"id": "t1", "seats": 2, "tags": ["vip"]}, {"id": "t2", "seats": 5, "tags": []}]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    data = tmp_path_factory.mktemp("cli-schemas")
    # No initial rebalance delay (Kafka's 3 s default): the consumers of these
    # tests join groups of their own, and waited it out at every join.
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=data,
        schema_registry_listen="127.0.0.1:0",
        group_initial_rebalance_delay_ms=0,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def url(broker: RunningBroker) -> str:
    assert broker.schema_registry_address is not None
    host, port = broker.schema_registry_address
    return f"http://{host}:{port}"


@pytest.fixture(scope="module")
def ck_registry(url: str) -> CkRegistry:
    return CkRegistry({"url": url})


def fresh(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def cli(*args: str, input: bytes | None = None, code: int = 0) -> Result:
    result = CliRunner().invoke(main, list(args), input=input)
    assert result.exit_code == code, (result.output, result.exception)
    return result


def ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def ck_write(broker: RunningBroker, topic: str, framed: list[bytes]) -> None:
    producer = CkProducer({"bootstrap.servers": broker.bootstrap_servers})
    for value in framed:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def ck_read(broker: RunningBroker, topic: str, count: int) -> list[bytes]:
    consumer = CkConsumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": fresh("ck"),
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,  # its close waits for the fetch held at the end
        }
    )
    consumer.subscribe([topic])
    out: list[bytes] = []
    try:
        for _ in range(600):
            if len(out) >= count:
                break
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
    finally:
        consumer.close()
    assert len(out) == count
    return out


def consume_json(broker: RunningBroker, topic: str, *fmt: str) -> list[dict[str, Any]]:
    result = cli("consume", topic, "-b", broker.bootstrap_servers, "-e", "-J", "-q", *fmt)
    return [json.loads(line) for line in result.stdout.splitlines()]


# -- confluent-kafka's serializers write, trafka consume reads ------------------------------


@pytest.mark.compat("CLI", "consume and produce Avro, Protobuf, JSON Schema (Schema Registry)")
@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json-schema"])
def test_consume_decodes_what_confluent_serializers_wrote(
    broker: RunningBroker, url: str, ck_registry: CkRegistry, fmt: str
) -> None:
    """Each format's records, as confluent-kafka's serializer frames them, print
    as their JSON values with the schema id the frame names and its subject;
    kcat's spelling (``-s value=FMT -r URL``) does the same."""
    topic = fresh(f"ck-{fmt}")
    if fmt == "avro":
        ser: Any = CkAvroSerializer(ck_registry, json.dumps(USER))
        values: list[Any] = USERS
        framed = [ser(v, ctx(topic)) for v in values]
    elif fmt == "json-schema":
        ser = CkJSONSerializer(json.dumps(THING), ck_registry)
        values = THINGS
        framed = [ser(v, ctx(topic)) for v in values]
    else:
        ser = CkProtobufSerializer(Ticket, ck_registry, {"use.deprecated.format": False})
        values = TICKETS
        framed = [ser(Ticket(**v), ctx(topic)) for v in values]
    ck_write(broker, topic, framed)
    schema_id = int.from_bytes(framed[0][1:5], "big")
    for options in (
        ("--value-format", fmt, "--schema-registry", url),
        ("-s", f"value={fmt}", "-r", url),
    ):
        rows = consume_json(broker, topic, *options)
        got = [r["value"] for r in rows]
        if fmt == "protobuf":  # proto3's JSON leaves out an empty repeated field
            got = [{"tags": [], **g} for g in got]
        assert got == values
        assert {(r["value_schema_id"], r["value_subject"]) for r in rows} == {
            (schema_id, f"{topic}-value")
        }


# -- trafka produce writes, confluent-kafka reads, byte for byte ----------------------------


@pytest.mark.compat("CLI", "consume and produce Avro, Protobuf, JSON Schema (Schema Registry)")
@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json-schema"])
def test_produce_encodes_as_confluent_serializers_do(
    broker: RunningBroker, url: str, ck_registry: CkRegistry, fmt: str
) -> None:
    """JSON lines encoded with the subject's latest schema (the one
    confluent-kafka's serializer registered) are, byte for byte, the frames its
    serializer writes for the same values."""
    topic = fresh(f"tp-{fmt}")
    if fmt == "avro":
        ser: Any = CkAvroSerializer(ck_registry, json.dumps(USER))
        values: list[Any] = USERS
        expected = [ser(v, ctx(topic)) for v in values]
    elif fmt == "json-schema":
        ser = CkJSONSerializer(json.dumps(THING), ck_registry)
        values = THINGS
        expected = [ser(v, ctx(topic)) for v in values]
    else:
        ser = CkProtobufSerializer(Ticket, ck_registry, {"use.deprecated.format": False})
        values = TICKETS
        expected = [ser(Ticket(**v), ctx(topic)) for v in values]
    ck_write(broker, topic, expected[:1])  # the topic, and the subject's schema
    lines = "".join(json.dumps(v) + "\n" for v in values).encode()
    cli(
        "produce",
        topic,
        "-b",
        broker.bootstrap_servers,
        "--value-format",
        fmt,
        "-r",
        url,
        input=lines,
    )
    written = ck_read(broker, topic, 1 + len(values))[1:]
    assert written == expected
    if fmt == "avro":
        de = CkAvroDeserializer(ck_registry)
        assert [de(w, ctx(topic)) for w in written] == values


def test_produce_writes_avro_as_confluent_kafka_defaults_and_extra_fields(
    broker: RunningBroker, url: str, ck_registry: CkRegistry
) -> None:
    """Input lines lacking a field with a default, or with a field the schema
    lacks, are written as confluent-kafka's serializer writes them: the
    default, the extra field dropped (issue #82, item 1)."""
    topic = fresh("tp-lenient")
    ser = CkAvroSerializer(ck_registry, json.dumps(USER))
    values = [{"name": "a", "age": 1}, {"name": "b", "age": 2, "email": "e", "extra": True}]
    expected = [ser(v, ctx(topic)) for v in values]
    ck_write(broker, topic, expected[:1])
    lines = "".join(json.dumps(v) + "\n" for v in values).encode()
    cli(
        "produce",
        topic,
        "-b",
        broker.bootstrap_servers,
        "--value-format",
        "avro",
        "-r",
        url,
        input=lines,
    )
    assert ck_read(broker, topic, 3)[1:] == expected


def test_produce_registers_the_schema_file(
    broker: RunningBroker, url: str, ck_registry: CkRegistry, tmp_path: Path
) -> None:
    """``--value-schema FILE`` registers the schema under ``<topic>-value`` (the
    topic-name strategy) and encodes with it; confluent-kafka's deserializer reads
    the records, and the key stays text (``--key-format string``, ``-K``)."""
    topic = fresh("file")
    cli("topics", "create", topic, "-b", broker.bootstrap_servers)
    avsc = tmp_path / "user.avsc"
    avsc.write_text(json.dumps(USER))
    lines = "".join(f"{u['name']}\t{json.dumps(u)}\n" for u in USERS).encode()
    cli(
        "produce",
        topic,
        "-b",
        broker.bootstrap_servers,
        "-K",
        "\\t",
        "--key-format",
        "string",
        "--value-format",
        "avro",
        "--value-schema",
        str(avsc),
        "-r",
        url,
        input=lines,
    )
    latest = ck_registry.get_latest_version(f"{topic}-value")
    assert json.loads(latest.schema.schema_str)["name"] == "User"
    de = CkAvroDeserializer(ck_registry)
    assert [de(w, ctx(topic)) for w in ck_read(broker, topic, len(USERS))] == USERS
    rows = consume_json(broker, topic, "--key-format", "string", "-s", "value=avro", "-r", url)
    assert [(r["key"], r["value"]) for r in rows] == [(u["name"], u) for u in USERS]
    assert rows[0]["value_schema_id"] == latest.schema_id


def test_kcat_reads_what_trafka_produce_wrote(broker: RunningBroker, url: str) -> None:
    """kcat's ``-s value=avro -r URL`` (its man page) decodes trafka's frames.
    Debian's kcat is built without Avro (libserdes): there the test says so."""
    topic = fresh("kcat")
    cli("topics", "create", topic, "-b", broker.bootstrap_servers)
    schema = Path(__file__).with_name("user.avsc")
    lines = "".join(json.dumps(u) + "\n" for u in USERS).encode()
    args = ["produce", topic, "-b", broker.bootstrap_servers, "--value-format", "avro", "-r", url]
    cli(*args, "--value-schema", str(schema), input=lines)
    kcat = ["kcat", "-C", "-b", broker.bootstrap_servers, "-t", topic, "-e", "-J"]
    done = subprocess.run(
        [*kcat, "-s", "value=avro", "-r", url], capture_output=True, text=True, timeout=60
    )
    if "lacks Avro" in done.stderr:
        pytest.skip(f"this kcat cannot decode Avro: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    # kcat prints unions in Avro's JSON encoding ({"string": ...})
    assert [r["payload"]["name"] for r in rows] == [u["name"] for u in USERS]


# -- bad input ------------------------------------------------------------------------------


def test_consume_stops_at_a_record_that_does_not_decode(
    broker: RunningBroker, url: str, ck_registry: CkRegistry
) -> None:
    """A wrong magic byte, and a schema id the registry does not know: the records
    before print, then one line names the field, topic, partition, offset and
    what is wrong, exit 1; ``deserialization.error.handler=skip`` passes them over."""
    topic = fresh("bad")
    good = CkAvroSerializer(ck_registry, json.dumps(USER))(USERS[0], ctx(topic))
    unknown = b"\x00" + (987654).to_bytes(4, "big") + good[5:]
    ck_write(broker, topic, [good, b"\x07not a frame", unknown, good])
    base = ["consume", topic, "-b", broker.bootstrap_servers, "-e", "-J", "-q"]
    stopped = cli(*base, "--value-format", "avro", "-r", url, code=1)
    assert [json.loads(x)["value"] for x in stopped.stdout.splitlines()] == [USERS[0]]
    error = stopped.stderr.strip()
    assert len(error.splitlines()) == 1, error
    assert f"value of topic '{topic}', partition 0, offset 1" in error
    assert "magic byte 7" in error
    # from offset 2: the unknown id
    stopped = cli(*base, "-o", "2", "-s", "value=avro", "-r", url, code=1)
    error = stopped.stderr.strip()
    assert "partition 0, offset 2" in error and "987654" in error and "40403" in error, error
    # in a group: what it commits on leaving stops before the bad record
    group = fresh("g")
    cli(*base, "-G", group, "-o", "beginning", "-s", "value=avro", "-r", url, code=1)
    after = cli(*base, "-G", group, "-c", "1")
    assert [json.loads(x)["offset"] for x in after.stdout.splitlines()] == [1]
    skipped = cli(*base, "-s", "value=avro", "-r", url, "-X", "deserialization.error.handler=skip")
    assert [json.loads(x)["value"] for x in skipped.stdout.splitlines()] == [USERS[0], USERS[0]]
    assert "offset 1" in skipped.stderr and "offset 2" in skipped.stderr


def test_produce_stops_at_input_that_does_not_encode(
    broker: RunningBroker, url: str, ck_registry: CkRegistry
) -> None:
    """Input that is not JSON, or does not match the subject's schema, ends the
    input with one line naming its line; what came before is delivered (exit 1).
    A subject without a schema, a registry format without a registry, and an
    unreachable registry fail before anything is sent."""
    topic = fresh("badin")
    CkAvroSerializer(ck_registry, json.dumps(USER))(USERS[0], ctx(topic))  # registers it
    cli("topics", "create", topic, "-b", broker.bootstrap_servers)
    base = ["produce", topic, "-b", broker.bootstrap_servers, "--value-format", "avro", "-r", url]
    first = json.dumps(USERS[0]).encode()
    out = cli(*base, input=first + b"\n{not json\n" + first + b"\n", code=1)
    assert "input line 2: the value is not JSON" in out.stderr
    assert "1 of 1 messages delivered" in out.stderr
    out = cli(*base, input=first + b"\n" + b'{"name": "x", "age": "old"}\n', code=1)
    assert "input line 2:" in out.stderr and f"subject '{topic}-value'" in out.stderr
    assert len(ck_read(broker, topic, 2)) == 2
    other = fresh("nosubject")
    cli("topics", "create", other, "-b", broker.bootstrap_servers)
    out = cli("produce", other, *base[2:], input=first, code=1)
    assert f"subject '{other}-value' not found" in out.stderr
    out = cli("produce", topic, "-b", broker.bootstrap_servers, "-s", "value=avro", code=2)
    assert "needs a schema registry" in out.stderr
    out = cli(*base[:-1], "http://127.0.0.1:1", input=first, code=1)
    assert out.stderr.startswith("Error: schema registry:") and "unreachable" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


# -- trafka schemas ---------------------------------------------------------------------------


def test_schemas_commands(url: str, tmp_path: Path) -> None:
    """Register, list, versions, show, check, config and delete, as the
    registry's API defines them (the global level BACKWARD by default; a new
    field without a default breaks BACKWARD; soft delete before hard delete)."""
    subject = fresh("subj")
    v1 = tmp_path / "v1.avsc"
    v1.write_text(json.dumps(USER))
    added = {**USER, "fields": [*USER["fields"], {"name": "nick", "type": "string", "default": ""}]}
    v2 = tmp_path / "v2.avsc"
    v2.write_text(json.dumps(added))
    breaking = {**USER, "fields": [*USER["fields"], {"name": "must", "type": "string"}]}
    v3 = tmp_path / "v3.avsc"
    v3.write_text(json.dumps(breaking))
    r = ["-r", url]
    first = int(cli("schemas", "register", subject, str(v1), *r).stdout)
    assert int(cli("schemas", "register", subject, str(v1), *r).stdout) == first
    assert subject in cli("schemas", "list", *r).stdout.splitlines()
    assert cli("schemas", "check", subject, str(v2), *r).stdout.strip() == "compatible"
    second = int(cli("schemas", "register", subject, str(v2), *r).stdout)
    table = cli("schemas", "versions", subject, *r).stdout.splitlines()
    assert [row.split() for row in table[1:]] == [
        ["1", str(first), "AVRO"],
        ["2", str(second), "AVRO"],
    ]
    shown = cli("schemas", "show", subject, "1", *r)
    assert json.loads(shown.stdout) == json.loads(json.dumps(USER))
    assert f"{subject} version 1, id {first}, AVRO" in shown.stderr
    by_id = cli("schemas", "show", "--id", str(second), *r)
    assert json.loads(by_id.stdout)["fields"][-1]["name"] == "nick"
    assert f"{subject} version 2" in by_id.stderr
    refused = cli("schemas", "check", subject, str(v3), *r, code=1)
    assert refused.stdout.strip() == "incompatible" and "must" in refused.stderr
    refused = cli("schemas", "register", subject, str(v3), *r, code=1)
    assert "error_code 409" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert cli("schemas", "config", *r).stdout.strip() == "BACKWARD (global)"
    assert cli("schemas", "config", subject, *r).stdout.strip() == "BACKWARD (global)"
    out = cli("schemas", "config", subject, "--compatibility", "none", *r).stdout
    assert out.strip() == "NONE (own)"
    cli("schemas", "register", subject, str(v3), *r)
    assert cli("schemas", "delete", subject, "--version", "1", *r).stdout.split() == ["1"]
    assert cli("schemas", "delete", subject, *r).stdout.split() == ["2", "3"]
    assert subject not in cli("schemas", "list", *r).stdout.splitlines()
    assert subject in cli("schemas", "list", "--deleted", *r).stdout.splitlines()
    assert cli("schemas", "delete", subject, "--permanent", *r).stdout.split() == ["1", "2", "3"]
    assert subject not in cli("schemas", "list", "--deleted", *r).stdout.splitlines()
    missing = cli("schemas", "versions", subject, *r, code=1)
    assert missing.stderr.strip() == (
        f"Error: schema registry: Subject '{subject}' not found. (error_code 40401)"
    )
    down = cli("schemas", "list", "-r", "http://127.0.0.1:1", code=1)
    assert down.stderr.startswith("Error: schema registry: http://127.0.0.1:1 unreachable")
    assert len(down.stderr.strip().splitlines()) == 1


def test_produce_registers_a_proto_file(
    broker: RunningBroker, url: str, ck_registry: CkRegistry, tmp_path: Path
) -> None:
    """A ``.proto`` file registered as the subject's schema (its text), JSON
    input in Protobuf's JSON mapping encoded without generated classes: the
    frame names the first message (index byte 0) and confluent-kafka's
    deserializer, with its generated class, reads the values."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

    topic = fresh("protofile")
    cli("topics", "create", topic, "-b", broker.bootstrap_servers)
    proto = tmp_path / "tickets.proto"
    proto.write_text(
        'syntax = "proto3";\npackage cli;\n'
        "message Ticket {\n  string id = 1;\n  int32 seats = 2;\n  repeated string tags = 3;\n}\n"
    )
    lines = "".join(json.dumps(t) + "\n" for t in TICKETS).encode()
    cli(
        *("produce", topic, "-b", broker.bootstrap_servers, "--value-format", "protobuf"),
        *("--value-schema", str(proto), "-r", url),
        input=lines,
    )
    latest = ck_registry.get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "PROTOBUF" and "message Ticket" in latest.schema.schema_str
    written = ck_read(broker, topic, len(TICKETS))
    assert {w[5] for w in written} == {0}
    de = ProtobufDeserializer(Ticket, {"use.deprecated.format": False})
    assert [de(w, ctx(topic)) for w in written] == [Ticket(**t) for t in TICKETS]


def test_schemas_register_with_a_reference(url: str, tmp_path: Path) -> None:
    """An Avro schema naming a type of another subject registers with a schema
    reference (name, subject, version), which ``show`` names; without the
    reference the registry refuses it as invalid (42201)."""
    address = tmp_path / "address.avsc"
    address.write_text(
        json.dumps(
            {
                "type": "record",
                "name": "Address",
                "namespace": "cli.refs",
                "fields": [{"name": "city", "type": "string"}],
            }
        )
    )
    person = tmp_path / "person.avsc"
    person.write_text(
        json.dumps(
            {
                "type": "record",
                "name": "Person",
                "namespace": "cli.refs",
                "fields": [{"name": "home", "type": "cli.refs.Address"}],
            }
        )
    )
    addr, who = fresh("addr"), fresh("person")
    cli("schemas", "register", addr, str(address), "-r", url)
    refused = cli("schemas", "register", who, str(person), "-r", url, code=1)
    assert "error_code 42201" in refused.stderr
    ref = f"cli.refs.Address={addr}:1"
    cli("schemas", "register", who, str(person), "--reference", ref, "-r", url)
    shown = cli("schemas", "show", who, "-r", url)
    assert f"references cli.refs.Address = {addr} version 1" in shown.stderr
    bad = cli("schemas", "register", who, str(person), "--reference", "nope", "-r", url, code=2)
    assert "NAME=SUBJECT:VERSION" in bad.stderr
