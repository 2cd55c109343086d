"""confluent-kafka's legacy ``confluent_kafka.avro`` on the drop-in, each
behaviour checked against confluent-kafka 2.16 itself:

* the same public names, and the same errors (types, text) for the same
  inputs: schemas that do not parse, registry client configurations refused,
  ``produce()`` calls refused, frames ``decode_message`` refuses;
* ``MessageSerializer`` writes the same bytes as confluent-kafka's for the
  same records (logical types, unions, maps, nested records) and each reads
  the other's, with a reader schema too (schema evolution);
* ``CachedSchemaRegistryClient`` against brokerlite's schema registry gives
  confluent-kafka's answers, call by call, errors included;
* the registry client over TLS with a client certificate, its key with a
  password too;
* records written by the drop-in's ``AvroProducer`` are read by
  confluent-kafka's ``AvroConsumer``, and the reverse, through brokerlite and
  its registry.
"""

from __future__ import annotations

import datetime
import decimal
import http.server
import importlib
import json
import ssl
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka.avro
import confluent_kafka.avro.serializer.message_serializer
import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from requests.exceptions import SSLError

import trafka.compat.confluent.avro as ours
from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.compat.confluent.avro.serializer.message_serializer import MessageSerializer
from trafka.sdk import blocking

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore:Avro(Producer|Consumer) has been deprecated"),
]

APIS = ["confluent_kafka.avro", "trafka.compat.confluent.avro"]
WAIT_S = 30.0  # the longest wait for records that are there (a busy machine)

USER = {
    "type": "record",
    "name": "User",
    "namespace": "test.legacy",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": ["null", "int"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "scores", "type": {"type": "map", "values": "double"}},
        {
            "name": "joined",
            "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
            "default": None,
        },
        {
            "name": "balance",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {
            "name": "friend",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Friend",
                    "fields": [{"name": "name", "type": "string"}],
                },
            ],
            "default": None,
        },
    ],
}
# USER with a field more (a default): what a reader that evolved reads.
USER_V2 = {**USER, "fields": [*USER["fields"], {"name": "email", "type": "string", "default": ""}]}
# An incompatible change (a field without default added).
USER_BAD = {**USER, "fields": [*USER["fields"], {"name": "extra", "type": "int"}]}
KEY = '{"type": "string"}'


def _user(i: int) -> dict[str, Any]:
    return {
        "name": f"user-{i}",
        "age": None if i % 3 == 0 else i,
        "tags": [f"t{j}" for j in range(i % 4)],
        "scores": {f"s{j}": j / 4 for j in range(i % 3)},
        "joined": datetime.datetime(2024, 1, 1 + i % 28, tzinfo=datetime.UTC),
        "balance": decimal.Decimal(f"{i}.{i % 100:02d}"),
        "kind": "AB"[i % 2],
        "friend": None if i % 2 else {"name": f"friend-{i}"},
    }


class MemoryRegistry:
    """The legacy registry client's calls, in memory (the serializers take any
    object with them, as the tests of confluent-kafka do)."""

    def __init__(self, auto_register: bool = True) -> None:
        self.auto_register_schemas = auto_register
        self.ids: dict[str, int] = {}
        self.schemas: dict[int, Any] = {}
        self.subjects: dict[str, set[int]] = {}

    def register(self, subject: str, schema: Any) -> int:
        schema_id = self.ids.setdefault(str(schema), len(self.ids) + 1)
        self.schemas.setdefault(schema_id, schema)
        self.subjects.setdefault(subject, set()).add(schema_id)
        return schema_id

    def check_registration(self, subject: str, schema: Any) -> int:
        schema_id = self.ids.get(str(schema))
        if schema_id not in self.subjects.get(subject, ()):
            raise LookupError(f"{subject} has no such schema")
        return schema_id

    def get_by_id(self, schema_id: int) -> Any:
        return self.schemas.get(schema_id)


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """What a call did, comparable across the two libraries: its value, or its
    exception's class name and text."""
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as exc:
        return (type(exc).__name__, str(exc))


# -- names and errors, without a registry ---------------------------------------------


@pytest.mark.parametrize(
    "module",
    [
        "",
        ".error",
        ".load",
        ".serializer",
        ".serializer.message_serializer",
        ".cached_schema_registry_client",
    ],
)
def test_the_modules_offer_confluent_kafkas_public_names(module: str) -> None:
    theirs = importlib.import_module(f"confluent_kafka.avro{module}")
    mine = importlib.import_module(f"trafka.compat.confluent.avro{module}")
    # What confluent-kafka's modules import for themselves is no API of theirs.
    borrowed = {
        "warnings", "json", "logging", "io", "struct", "sys", "traceback", "avro", "schema",
        "urllib3", "Session", "utils", "defaultdict", "string_type", "log", "SchemaParseException",
        "HAS_FAST", "schemaless_reader", "schemaless_writer", "parse_schema", "ContextStringIO",
        "Consumer", "Producer", "VALID_LEVELS", "VALID_METHODS", "VALID_AUTH_PROVIDERS",
    }  # fmt: skip
    wanted = {n for n in dir(theirs) if not n.startswith("_") and n not in borrowed}
    wanted -= {n for n in wanted if type(getattr(theirs, n)).__name__ == "module"}
    assert wanted - set(dir(mine)) == set()
    for name in wanted:
        if isinstance(getattr(theirs, name), type):
            assert isinstance(getattr(mine, name), type), name


def test_the_errors_read_as_confluent_kafkas() -> None:
    for api in APIS:
        avro = importlib.import_module(api)
        assert issubclass(avro.KeySerializerError, avro.SerializerError)
        assert issubclass(avro.ValueSerializerError, avro.SerializerError)
    pairs = [
        (confluent_kafka.avro.ClientError("no"), ours.ClientError("no")),
        (confluent_kafka.avro.SerializerError("bad"), ours.SerializerError("bad")),
        (confluent_kafka.avro.KeySerializerError("k"), ours.KeySerializerError("k")),
        (confluent_kafka.avro.ValueSerializerError("v"), ours.ValueSerializerError("v")),
    ]
    for theirs, mine in pairs:
        assert (str(mine), repr(mine), mine.args, mine.message) == (
            str(theirs),
            repr(theirs),
            theirs.args,
            theirs.message,
        )


@pytest.mark.parametrize(
    "text",
    [
        KEY,
        json.dumps(USER),
        '{"type": "record", "name": "R", "fields": [{"name": "a"}]}',
        "{",
        "nope",
    ],
)
def test_loads_parses_or_refuses_as_confluent_kafka(text: str) -> None:
    theirs = _outcome(confluent_kafka.avro.loads, text)
    mine = _outcome(ours.loads, text)
    assert mine[0] == theirs[0]
    if mine[0] == "ok":
        assert mine[1] == theirs[1] and type(mine[1]) is type(theirs[1])
    else:
        assert mine[1].startswith("Schema parse failed:") and mine[1] == theirs[1]


REGISTRY_CONFS: list[Any] = [
    {"url": "http://127.0.0.1:65534/"},
    {"url": "https://u:p@127.0.0.1:65534#frag"},
    {"url": ""},
    {"url": 1},
    {"url": "example.com:65534"},
    {"url": "https://127.0.0.1:1", "ssl.certificate.location": "/c"},
    {"url": "https://127.0.0.1:1", "ssl.key.location": "/k"},
    {"url": "https://127.0.0.1:1", "ssl.certificate.location": "/c", "ssl.key.location": "/k"},
    {"url": "http://127.0.0.1:1", "basic.auth.credentials.source": "VAULT"},
    {
        "url": "http://127.0.0.1:1",
        "basic.auth.credentials.source": "sasl_inherit",
        "sasl.mechanism": "gssapi",
    },
    {
        "url": "http://127.0.0.1:1",
        "basic.auth.credentials.source": "USER_INFO",
        "basic.auth.user.info": "a:b",
    },
    {"url": "http://127.0.0.1:1", "auto.register.schemas": False},
    {"url": "http://127.0.0.1:1", "bootstrap.servers": "x"},
]


@pytest.mark.parametrize("conf", REGISTRY_CONFS, ids=range(len(REGISTRY_CONFS)))
def test_the_registry_clients_configuration_as_confluent_kafkas(conf: dict[str, Any]) -> None:
    def make(cls: Any) -> tuple[str, Any]:
        done = _outcome(cls, dict(conf))
        if done[0] == "ok":
            client = done[1]
            client.close()
            return ("ok", (client.url, client.auto_register_schemas))
        return done

    theirs = make(confluent_kafka.avro.CachedSchemaRegistryClient)
    assert make(ours.CachedSchemaRegistryClient) == theirs


def test_a_url_string_is_deprecated_but_taken() -> None:
    for cls in (confluent_kafka.avro.CachedSchemaRegistryClient, ours.CachedSchemaRegistryClient):
        with pytest.warns(DeprecationWarning):
            client = cls("http://127.0.0.1:65534/")
        assert client.url == "http://127.0.0.1:65534"
        client.close()


@pytest.mark.parametrize(
    "call",
    [
        {"value": {"name": "x"}},
        {"topic": "t", "value": {"name": "x"}},
        {"topic": "t", "key": "k", "value_schema": KEY},
        {"topic": "t", "value": "", "key": "k"},
        {"topic": "t", "value": "v", "value_schema": KEY, "key": "k"},
        {"topic": "t", "value": 5, "value_schema": KEY},
    ],
)
def test_produce_refuses_as_confluent_kafka(call: dict[str, Any]) -> None:
    """Schemas as text (confluent-kafka writes with their JSON), so both
    libraries' producers get the same objects."""
    outcomes = []
    for api in APIS:
        avro = importlib.import_module(api)
        producer = avro.AvroProducer({}, schema_registry=MemoryRegistry())
        outcomes.append(_outcome(producer.produce, **call))
        producer.flush(0)
    assert outcomes[0][0] == outcomes[1][0] != "ok"
    if outcomes[0][0].endswith("SerializerError") or outcomes[0][0] == "ClientError":
        assert outcomes[0] == outcomes[1]


def test_a_registry_given_and_a_url_is_a_value_error() -> None:
    for api in APIS:
        avro = importlib.import_module(api)
        with pytest.raises(ValueError):
            avro.AvroProducer(
                {"schema.registry.url": "http://127.0.0.1:1"}, schema_registry=MemoryRegistry()
            )
        with pytest.raises(ValueError):
            avro.AvroConsumer(
                {"schema.registry.url": "http://127.0.0.1:1", "group.id": "g"},
                schema_registry=MemoryRegistry(),
            )


# -- the serializer: the same bytes, each reading the other's --------------------------


def _serializers(registry: Any, **readers: Any) -> list[Any]:
    return [
        confluent_kafka.avro.serializer.message_serializer.MessageSerializer(registry, **readers),
        MessageSerializer(registry, **readers),
    ]


def test_the_serializers_write_the_same_bytes_and_read_each_others() -> None:
    registry = MemoryRegistry()
    schema = ours.loads(json.dumps(USER))
    theirs, mine = _serializers(registry)
    for i in range(12):
        record = _user(i)
        written = mine.encode_record_with_schema("users", schema, record)
        assert written == theirs.encode_record_with_schema("users", schema, record)
        assert written[:1] == b"\x00" and written[1:5] == (1).to_bytes(4, "big")
        assert mine.decode_message(written) == theirs.decode_message(written) == record
        key = mine.encode_record_with_schema("users", ours.loads(KEY), f"k{i}", is_key=True)
        assert key == theirs.encode_record_with_schema("users", ours.loads(KEY), f"k{i}", True)
        assert mine.decode_message(key, is_key=True) == f"k{i}"
    assert registry.subjects == {"users-value": {1}, "users-key": {2}}
    by_id = mine.encode_record_with_schema_id(1, _user(3))
    assert by_id == theirs.encode_record_with_schema_id(1, _user(3))


def test_a_reader_schema_reads_older_records_as_confluent_kafka() -> None:
    registry = MemoryRegistry()
    writer = ours.loads(json.dumps(USER))
    written = MessageSerializer(registry).encode_record_with_schema("t", writer, _user(4))
    reader = ours.loads(json.dumps(USER_V2))
    theirs, mine = _serializers(registry, reader_value_schema=reader, reader_key_schema=None)
    got = mine.decode_message(written)
    assert got == theirs.decode_message(written) == {**_user(4), "email": ""}
    # The reader of values is not the reader of keys.
    assert mine.decode_message(written, is_key=True) == _user(4)


@pytest.mark.parametrize(
    "frame",
    [None, b"", b"\x00\x00\x00\x00\x01", b"\x01\x00\x00\x00\x01\x02", b"\x00\x00\x00\x00\x63\x02"],
)
def test_decode_message_refuses_as_confluent_kafka(frame: bytes | None) -> None:
    registry = MemoryRegistry()
    registry.register("t-value", ours.loads(KEY))
    theirs, mine = _serializers(registry)
    assert _outcome(mine.decode_message, frame) == _outcome(theirs.decode_message, frame)


def test_without_auto_register_the_schema_must_be_there() -> None:
    registry = MemoryRegistry(auto_register=False)
    schema = ours.loads(KEY)
    outcomes = [
        _outcome(s.encode_record_with_schema, "t", schema, "x") for s in _serializers(registry)
    ]
    assert outcomes[0] == outcomes[1] == ("LookupError", "t-value has no such schema")
    registry.register("t-value", schema)
    theirs, mine = _serializers(registry)
    assert mine.encode_record_with_schema("t", schema, "x") == theirs.encode_record_with_schema(
        "t", schema, "x"
    )


# -- against brokerlite and its schema registry ---------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    data = tmp_path_factory.mktemp("legacy-avro")
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=data,
        schema_registry_listen="127.0.0.1:0",
        group_initial_rebalance_delay_ms=0,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def registry_url(broker: RunningBroker) -> str:
    assert broker.schema_registry_address is not None
    host, port = broker.schema_registry_address
    return f"http://{host}:{port}"


def _registry_calls(api: str, url: str, subject: str) -> list[Any]:
    """Every call of the legacy client on a fresh subject, what each answered."""
    avro = importlib.import_module(api)
    v1, v2, bad = (avro.loads(json.dumps(s)) for s in (USER, USER_V2, USER_BAD))
    out: list[Any] = []
    with avro.CachedSchemaRegistryClient({"url": url}) as client:
        out.append(client.get_version(subject, v1))
        out.append(client.get_latest_schema(subject))
        out.append(_outcome(client.check_registration, subject, v1))
        first = client.register(subject, v1)
        out.append(client.check_registration(subject, v1) == first)
        out.append(client.get_by_id(first) == v1)
        out.append(client.test_compatibility(subject, v2))
        out.append(client.test_compatibility(subject, bad))
        out.append(client.test_compatibility(subject + "-none", v2))
        second = client.register(subject, v2)
        out.append(second != first)
        out.append(client.get_version(subject, v2))
        latest = client.get_latest_schema(subject)
        out.append((latest[0] == second, latest[1] == v2, latest[2]))
        by_version = client.get_by_version(subject, 1)
        out.append((by_version[0] == first, by_version[1] == v1, by_version[2]))
        out.append(client.get_by_version(subject, 9))
        out.append(_outcome(client.register, subject, bad)[0])
        out.append(client.update_compatibility("FORWARD", subject))
        out.append(client.get_compatibility(subject))
        out.append(_outcome(client.update_compatibility, "SOMETIMES", subject))
        out.append(client.delete_subject(subject))
        out.append(_outcome(client.delete_subject, subject)[0])
        out.append(client.get_by_id(2_000_000_000))
    return out


def test_the_registry_client_answers_as_confluent_kafkas(registry_url: str) -> None:
    """The same calls on two fresh subjects of brokerlite's registry: the
    same answers (ids compared by what they name, not their numbers)."""
    theirs = _registry_calls(APIS[0], registry_url, f"legacy-{uuid.uuid4().hex[:8]}")
    mine = _registry_calls(APIS[1], registry_url, f"legacy-{uuid.uuid4().hex[:8]}")
    assert mine == theirs
    assert theirs[:3] == [
        None,
        (None, None, None),
        ("ClientError", "Schema or subject not found:404"),
    ]
    assert theirs[5:8] == [True, False, False] and theirs[-3:] == [[1, 2], "ClientError", None]


def test_the_registry_client_shares_ids_with_confluent_kafkas(registry_url: str) -> None:
    subject = f"shared-{uuid.uuid4().hex[:8]}"
    schema = ours.loads(json.dumps(USER))
    with ours.CachedSchemaRegistryClient({"url": registry_url}) as mine:
        schema_id = mine.register(subject, schema)
    theirs = confluent_kafka.avro.CachedSchemaRegistryClient({"url": registry_url})
    assert theirs.register(subject, schema) == schema_id
    assert theirs.get_version(subject, schema) == 1
    theirs.close()


def _topic(bs: str) -> str:
    topic = f"legacy-avro-{uuid.uuid4().hex[:8]}"
    with blocking.Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([topic], num_partitions=1, replication_factor=1)
    return topic


def _produce(api: str, bs: str, url: str, topic: str, n: int) -> None:
    avro = importlib.import_module(api)
    producer = avro.AvroProducer(
        {"bootstrap.servers": bs, "schema.registry.url": url},
        default_key_schema=avro.loads(KEY),
        default_value_schema=avro.loads(json.dumps(USER)),
    )
    reports: list[Any] = []
    for i in range(n):
        producer.produce(
            topic=topic, key=f"k{i}", value=_user(i), on_delivery=lambda e, m: reports.append(e)
        )
    producer.produce(topic=topic, value=None, key=None)  # a record with neither: no schema needed
    assert producer.flush(WAIT_S) == 0
    assert reports == [None] * n


def _consume(api: str, bs: str, url: str, topic: str, n: int, **readers: Any) -> list[Any]:
    avro = importlib.import_module(api)
    consumer = avro.AvroConsumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"g-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "schema.registry.url": url,
        },
        **{k: avro.loads(v) for k, v in readers.items()},
    )
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append((msg.key(), msg.value()))
    consumer.close()
    return got


@pytest.mark.parametrize(
    ("writer", "reader"),
    [(APIS[1], APIS[0]), (APIS[0], APIS[1])],
    ids=["ours-to-theirs", "theirs-to-ours"],
)
def test_records_cross_between_the_libraries(
    broker: RunningBroker, registry_url: str, writer: str, reader: str
) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs)
    _produce(writer, bs, registry_url, topic, 5)
    got = _consume(reader, bs, registry_url, topic, 6)
    assert got == [(f"k{i}", _user(i)) for i in range(5)] + [(None, None)]


def test_the_consumer_reads_with_a_reader_schema(broker: RunningBroker, registry_url: str) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs)
    _produce(APIS[0], bs, registry_url, topic, 2)
    wanted = [(f"k{i}", {**_user(i), "email": ""}) for i in range(2)]
    for api in APIS:
        got = _consume(api, bs, registry_url, topic, 2, reader_value_schema=json.dumps(USER_V2))
        assert got == wanted


def test_a_record_that_does_not_decode_names_where_it_is(
    broker: RunningBroker, registry_url: str
) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs)
    with blocking.Producer(bootstrap_servers=bs) as producer:
        producer.send(topic, b"\x07 not avro", None)
        producer.flush()
    texts = []
    for api in APIS:
        avro = importlib.import_module(api)
        consumer = avro.AvroConsumer(
            {
                "bootstrap.servers": bs,
                "group.id": f"g-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "schema.registry.url": registry_url,
            }
        )
        consumer.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        with pytest.raises(avro.SerializerError) as caught:
            while time.monotonic() < deadline:
                consumer.poll(1.0)
        consumer.close()
        texts.append(str(caught.value))
    assert texts[0] == texts[1]
    assert texts[1] == (
        f"Message deserialization failed for message at {topic} [0] offset 0: "
        "message does not start with magic byte"
    )


def test_the_deprecation_is_warned() -> None:
    for api in APIS:
        avro = importlib.import_module(api)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            avro.AvroProducer({}, schema_registry=MemoryRegistry()).flush(0)
        assert [str(w.message) for w in seen if w.category is DeprecationWarning] == [
            "AvroProducer has been deprecated. Use AvroSerializer instead."
        ]


# -- TLS with a client certificate --------------------------------------------------


class _SchemaById(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"schema": KEY}).encode()
        self.send_response(200 if self.path == "/schemas/ids/7" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def tls_registry(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], bytes]]:
    """A registry stand-in over TLS that wants a client certificate: its URL,
    the client's TLS settings, and the client's key (PEM) unencrypted."""
    ca = trustme.CA()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SchemaById)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca.configure_trust(context)
    context.verify_mode = ssl.CERT_REQUIRED
    server.socket = context.wrap_socket(server.socket, server_side=True)
    client = ca.issue_cert("client")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "client.pem"))
    client.private_key_pem.write_to_path(str(tmp_path / "client.key"))
    conf = {
        "url": f"https://127.0.0.1:{server.server_address[1]}",
        "ssl.ca.location": str(tmp_path / "ca.pem"),
        "ssl.certificate.location": str(tmp_path / "client.pem"),
        "ssl.key.location": str(tmp_path / "client.key"),
    }
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield conf["url"], conf, client.private_key_pem.bytes()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_tls_with_a_client_certificate(
    tls_registry: tuple[str, dict[str, str], bytes], tmp_path: Path
) -> None:
    """The CA, the certificate and its key as confluent-kafka takes them; and
    a key with a password (``ssl.key.password``), which ``requests`` alone
    cannot read."""
    _, conf, key_pem = tls_registry
    for cls in (confluent_kafka.avro.CachedSchemaRegistryClient, ours.CachedSchemaRegistryClient):
        with cls(dict(conf)) as client:
            assert (client.get_by_id(7), client.get_by_id(8)) == (ours.loads(KEY), None)
    key = serialization.load_pem_private_key(key_pem, password=None)
    locked = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret"),
    )
    (tmp_path / "locked.key").write_bytes(locked)
    with_password = {
        **conf,
        "ssl.key.location": str(tmp_path / "locked.key"),
        "ssl.key.password": "s3cret",
    }
    with ours.CachedSchemaRegistryClient(with_password) as client:
        assert client.get_by_id(7) == ours.loads(KEY)
    # Without the CA the registry's certificate is not trusted.
    untrusted = {k: v for k, v in conf.items() if k != "ssl.ca.location"}
    with ours.CachedSchemaRegistryClient(untrusted) as client, pytest.raises(SSLError):
        client.get_by_id(7)


# -- what goes on the wire: credentials and headers -----------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every registration with id 1, and keeps each request's headers."""

    seen: list[dict[str, str]]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        wanted = ("Authorization", "Accept", "Content-Type")
        self.server.seen.append({h: self.headers.get(h) for h in wanted})  # type: ignore[attr-defined]
        body = b'{"id": 1}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[int, list[dict[str, str]]]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    seen: list[dict[str, str]] = []
    server.seen = seen  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize(
    "conf",
    [
        {"schema.registry.url": "http://alice:pw@127.0.0.1:{port}"},
        {
            "schema.registry.url": "http://127.0.0.1:{port}",
            "schema.registry.basic.auth.credentials.source": "USER_INFO",
            "schema.registry.basic.auth.user.info": "bob:secret",
        },
        {
            "schema.registry.url": "http://127.0.0.1:{port}",
            "schema.registry.basic.auth.credentials.source": "SASL_INHERIT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "carol",
            "sasl.password": "pw2",
        },
    ],
    ids=["url", "user-info", "sasl-inherit"],
)
def test_the_registrys_credentials_as_confluent_kafka_sends_them(
    recorder: tuple[int, list[dict[str, str]]], conf: dict[str, str]
) -> None:
    """The producer's ``schema.registry.*`` settings (and with SASL_INHERIT its
    SASL ones) make the same registration request with the same headers."""
    port, seen = recorder
    config = {k: v.format(port=port) for k, v in conf.items()}
    for api in APIS:
        avro = importlib.import_module(api)
        producer = avro.AvroProducer({**config, "bootstrap.servers": "127.0.0.1:1"})
        producer.produce(topic="t", value="v", value_schema=avro.loads(KEY))
    assert len(seen) == 2 and seen[0] == seen[1]
    assert seen[0]["Authorization"].startswith("Basic ")
    assert seen[0]["Content-Type"] == "application/vnd.schemaregistry.v1+json"
