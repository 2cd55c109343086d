"""The proxy's schema-validation filter (issue #63, item 6), with
confluent-kafka's own serializers and registry client on brokerlite's registry.

A batch whose record is not framed for the registry, carries a schema id not
registered under the topic's subject, or whose payload does not decode with
its schema, is refused: the partition's answer is INVALID_RECORD with the
record's index and the reason in ``record_errors`` (KIP-467: "the broker
returns ... the batch index of the records that caused the batch to be
dropped" and an error message), and nothing of the batch reaches the log.
The same request's valid partitions, and other clients, are served.
Tombstones pass. confluent-kafka reports the refusal to the application as
Kafka's ``INVALID_RECORD`` error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from proxy_helpers import create, fresh

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.codec.errors import ErrorCode
from trafka.proxy import proxy_in_thread
from trafka.proxy.schema_validation import REGISTRY_SETTINGS, SchemaValidation
from trafka.sdk import ConfigError
from trafka.sdk.blocking import Consumer

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
OTHER = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}
POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer"}},
    "required": ["x"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    data = tmp_path_factory.mktemp("proxy-schemas")
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=data, schema_registry_listen="127.0.0.1:0"
    ) as running:
        yield running


@pytest.fixture(scope="module")
def url(broker: RunningBroker) -> str:
    assert broker.schema_registry_address is not None
    host, port = broker.schema_registry_address
    return f"http://{host}:{port}"


@pytest.fixture(scope="module")
def proxy(broker: RunningBroker, url: str) -> Iterator[tuple[str, SchemaValidation]]:
    check = SchemaValidation({"schema.registry.url": url, "topics": ["orders-.*", "points-.*"]})
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0, filters=(check,)) as px:
        yield px.bootstrap_servers, check


def _send(servers: str, records: list[tuple[str, int, Any]]) -> list[Any]:
    """Each record produced (topic, partition, value bytes), one flush; each one's
    delivery error (None: written)."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": servers, "linger.ms": 50, "retries": 0}
    )
    errors: list[Any] = [None] * len(records)

    def report(i: int) -> Any:
        return lambda err, _msg: errors.__setitem__(i, err)

    for i, (topic, partition, value) in enumerate(records):
        producer.produce(topic, value=value, partition=partition, on_delivery=report(i))
    assert producer.flush(30) == 0
    return errors


def _log(broker: RunningBroker, topic: str, partitions: int) -> dict[int, list[bytes | None]]:
    """Every value in each partition, read from the broker directly."""
    return _log_of(broker.bootstrap_servers, topic, partitions)


def _log_of(servers: str, topic: str, partitions: int) -> dict[int, list[bytes | None]]:
    out: dict[int, list[bytes | None]] = {p: [] for p in range(partitions)}
    with Consumer(bootstrap_servers=servers, enable_auto_commit=False) as consumer:
        from trafka.sdk import TopicPartition

        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for tp, records in consumer.getmany(timeout_ms=500).items():
                out[tp.partition] += [r.value for r in records]
    return out


def test_only_batches_with_their_subjects_schemas_are_written(
    broker: RunningBroker, url: str, proxy: tuple[str, SchemaValidation]
) -> None:
    servers, check = proxy
    topic = fresh("orders")
    create(broker.bootstrap_servers, topic, 3)
    registry = SchemaRegistryClient({"url": url})
    order = AvroSerializer(registry, json.dumps(ORDER))
    other = AvroSerializer(registry, json.dumps(OTHER))
    ctx = SerializationContext(topic, MessageField.VALUE)
    good = order({"id": 1, "item": "pen"}, ctx)
    # registered, but under this topic's name as another topic's subject
    elsewhere = other({"x": 3}, SerializationContext(fresh("unrelated"), MessageField.VALUE))
    undecodable = good[:5] + b"\x01"  # the right id, a payload cut short
    before = check.refused
    errors = _send(
        servers,
        [
            (topic, 0, good),
            (topic, 0, order({"id": 2, "item": "ink"}, ctx)),
            (topic, 1, good),
            (topic, 1, b"plain bytes"),  # refuses partition 1's batch, both records
            (topic, 2, elsewhere),
        ],
    )
    assert [e is None for e in errors] == [True, True, False, False, False], errors
    assert {e.code() for e in errors if e} == {confluent_kafka.KafkaError.INVALID_RECORD}
    assert check.refused - before == 2
    errors = _send(servers, [(topic, 2, undecodable), (topic, 0, None)])
    assert errors[0] is not None and errors[0].code() == confluent_kafka.KafkaError.INVALID_RECORD
    assert errors[1] is None  # a tombstone has no schema to check
    log = _log(broker, topic, 3)
    assert log == {0: [good, order({"id": 2, "item": "ink"}, ctx), None], 1: [], 2: []}


def test_the_answer_names_the_record_and_the_reason(
    broker: RunningBroker, url: str, proxy: tuple[str, SchemaValidation]
) -> None:
    """KIP-467's record errors, read with trafka's codec from the raw answer."""
    import socket

    from trafka.codec import protocol
    from trafka.codec.messages import k00_produce as pm
    from trafka.codec.messages.headers import RequestHeader
    from trafka.codec.records import encode_batch

    servers, _ = proxy
    topic = fresh("points")
    create(broker.bootstrap_servers, topic, 2)
    registry = SchemaRegistryClient({"url": url})
    point = JSONSerializer(json.dumps(POINT), registry)
    ctx = SerializationContext(topic, MessageField.VALUE)
    good = point({"x": 1}, ctx)
    wrong = good[:5] + b'{"x": "one"}'  # framed with the subject's id, not valid for it
    blob = {
        0: encode_batch([(0, None, good, ())]),
        1: encode_batch([(0, None, good, ()), (0, None, wrong, ())]),
    }
    body = pm.ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            pm.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    pm.ProduceRequest.PartitionProduceData(index=p, records=b)
                    for p, b in blob.items()
                ],
            )
        ],
    )
    host, port = servers.rsplit(":", 1)
    header = RequestHeader(
        request_api_key=0, request_api_version=9, correlation_id=7, client_id="t"
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(protocol.encode_request(header, body))
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = sock.recv(65536)
            assert chunk, "the proxy closed the connection"
            data += chunk
    _, answer = protocol.decode_response(data[4:], 0, 9)
    (t,) = answer.responses
    parts = {p.index: p for p in t.partition_responses}
    assert parts[0].error_code == 0 and parts[0].base_offset == 0
    refused = parts[1]
    assert refused.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in refused.record_errors] == [1]
    assert "record 1 value" in refused.record_errors[0].batch_index_error_message
    assert refused.error_message and "schema validation refused" in refused.error_message
    assert _log(broker, topic, 2) == {0: [good], 1: []}


def _order_class() -> Any:
    """A Protobuf message class built at run time (no generated code)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FileDescriptorProto(
        name="proxy_shop.proto", package="pshop", syntax="proto3"
    )
    order = f.message_type.add(name="Order")
    order.field.add(name="id", number=1, label=1, type=9, json_name="id")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("pshop.Order"))


def test_header_framed_protobuf_from_trafkas_producer(
    broker: RunningBroker, url: str, proxy: tuple[str, SchemaValidation]
) -> None:
    """The schema in the ``__value_schema_id`` header (the newer framing) is
    checked as the prefix is; the SDK's producer gets Kafka's INVALID_RECORD with
    the reason, and the record after it (a batch of its own) is written."""
    import anyio

    from trafka.codec.errors import KafkaError
    from trafka.sdk import open_producer
    from trafka.sdk.schemas import ProtobufSerializer, SchemaRegistryClient

    servers, _ = proxy
    topic = fresh("orders")
    create(broker.bootstrap_servers, topic, 1)
    Order = _order_class()
    registry = SchemaRegistryClient({"url": url})
    ser = ProtobufSerializer(Order, registry, {"schema.id.framing": "header"})
    caught: list[KafkaError] = []

    async def main() -> list[tuple[bytes, list[Any]]]:
        with anyio.fail_after(60):
            return await produce()

    async def produce() -> list[tuple[bytes, list[Any]]]:
        async with open_producer(bootstrap_servers=servers, value_serializer=ser) as producer:
            await producer.send_and_wait(topic, Order(id="a"))
        async with open_producer(bootstrap_servers=servers, retries=0) as raw:
            written = await _read_back(broker, topic)
            frame = dict(written[0][1])["__value_schema_id"]
            try:  # field 1, 255 bytes long, cut short: not an Order
                await raw.send_and_wait(topic, b"\x0a\xff", headers=[("__value_schema_id", frame)])
            except KafkaError as exc:
                caught.append(exc)
            await raw.send_and_wait(
                topic, Order(id="b").SerializeToString(), headers=[("__value_schema_id", frame)]
            )
        return await _read_back(broker, topic)

    try:
        log = anyio.run(main, backend="trio")
    finally:
        registry.close()
    (refused,) = caught
    assert refused.code == ErrorCode.INVALID_RECORD
    assert "record 0 value" in str(refused)
    assert [Order.FromString(v).id for v, _ in log] == ["a", "b"]


async def _read_back(broker: RunningBroker, topic: str) -> list[tuple[bytes, list[Any]]]:
    """Partition 0's values and headers, read from the broker directly."""
    from trafka.sdk import TopicPartition, open_consumer

    tp = TopicPartition(topic, 0)
    async with open_consumer(
        bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False
    ) as consumer:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out: list[tuple[bytes, list[Any]]] = []
        while len(out) < end:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                out += [(r.value, list(r.headers)) for r in records]
    return out


def test_an_unreachable_registry_refuses_rather_than_lets_through(
    broker: RunningBroker,
) -> None:
    """Nothing unchecked is written: the batch is refused, naming the registry."""
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    check = SchemaValidation(
        {"schema.registry.url": f"http://127.0.0.1:{port}", "schema.registry.max.retries": 0}
    )
    topic = fresh("orders")
    create(broker.bootstrap_servers, topic, 1)
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0, filters=(check,)) as px:
        (error,) = _send(px.bootstrap_servers, [(topic, 0, b"\x00\x00\x00\x00\x01payload")])
    assert error is not None and error.code() == confluent_kafka.KafkaError.INVALID_RECORD
    assert _log(broker, topic, 1) == {0: []}


def test_settings_are_checked_when_the_proxy_starts() -> None:
    """As ``trafka proxy``'s file hands them (``[[filter]]`` with ``settings``)."""
    from trafka.proxy.reload import configured_filters
    from trafka.proxy.settings import FilterSpec

    use = "trafka.proxy:SchemaValidation"
    with pytest.raises(ValueError, match=r"missing setting 'schema\.registry\.url'"):
        configured_filters([FilterSpec(use)])
    with pytest.raises(ValueError, match="topics: 'x' is not a list of regular expressions"):
        configured_filters([FilterSpec(use, {"schema.registry.url": "http://r", "topics": "x"})])
    with pytest.raises(ValueError, match=r"unknown setting 'schema\.registry\.colour'"):
        configured_filters(
            [FilterSpec(use, {"schema.registry.url": "http://r", "schema.registry.colour": 1})]
        )
    # What the registry client refuses of the values, once the names are right.
    with pytest.raises(ValueError, match=r"schema registry url 'ftp://r' is not an http"):
        configured_filters([FilterSpec(use, {"schema.registry.url": "ftp://r"})])
    (made,) = configured_filters(
        [FilterSpec(use, {"schema.registry.url": "http://r", "topics": ["a-.*"]})]
    )
    assert isinstance(made, SchemaValidation)
    assert (made.validates("a-1"), made.validates("b-1"), made.validates("xa-1")) == (
        True,
        False,
        False,
    )
    # the default: every topic but internal ones
    (made,) = configured_filters([FilterSpec(use, {"schema.registry.url": "http://r"})])
    assert (made.validates("orders"), made.validates("_schemas")) == (True, False)


def test_every_problem_of_the_settings_at_once() -> None:
    """A misspelt name is unknown (with the nearest known one), not a required
    one missing; every problem is in the ConfigError's ``problems``."""
    with pytest.raises(ConfigError) as caught:
        SchemaValidation(
            {
                "schema.registry.ur": "http://r",
                "schema_registry_basic_auth_user_inf": "u:p",
                "topics": ["a", "(("],
                "validate.keys": "yes",
                "validate_values": 1,
            }
        )
    problems = caught.value.problems
    assert problems[:3] == [
        "unknown setting 'schema.registry.ur' (did you mean schema.registry.url?)",
        "unknown setting 'schema_registry_basic_auth_user_inf' "
        "(did you mean schema.registry.basic.auth.user.info?)",
        "missing setting 'schema.registry.url' (the registry's URL)",
    ]
    assert problems[3].startswith("topics: '((' is not a regular expression")
    assert problems[4:] == [
        "validate.keys: 'yes' is not true or false",
        "validate.values: 1 is not true or false",
    ]
    assert str(caught.value).startswith("SchemaValidation: unknown setting 'schema.registry.ur'")
    # Python's spelling and the unprefixed registry names are taken.
    made = SchemaValidation({"url": "http://r", "validate_keys": True, "max_retries": 1})
    assert made.validates("orders")


def test_its_registry_names_are_the_registry_clients() -> None:
    """The filter knows which names are the registry client's (to call the
    others unknown at once): the same as RegistryConfig takes."""
    from trafka.sdk.schemas import registry_config

    assert REGISTRY_SETTINGS == registry_config.SETTINGS


def test_acks_0_refused_closes_the_connection(
    broker: RunningBroker, proxy: tuple[str, SchemaValidation]
) -> None:
    """An acks=0 request has no answer to carry the error: Kafka's broker closes
    the socket instead, so that the producer learns something went wrong and
    refreshes its metadata (KafkaApis.handleProduceRequest, acks == 0 with an
    error), and so does the filter; nothing is written."""
    import socket

    from trafka.codec import protocol
    from trafka.codec.messages import k00_produce as pm
    from trafka.codec.messages.headers import RequestHeader
    from trafka.codec.records import encode_batch

    servers, _ = proxy
    topic = fresh("orders")
    create(broker.bootstrap_servers, topic, 1)
    part = pm.ProduceRequest.PartitionProduceData(
        index=0, records=encode_batch([(0, None, b"not framed", ())])
    )
    body = pm.ProduceRequest(
        acks=0,
        timeout_ms=5000,
        topic_data=[pm.ProduceRequest.TopicProduceData(name=topic, partition_data=[part])],
    )
    host, port = servers.rsplit(":", 1)
    header = RequestHeader(
        request_api_key=0, request_api_version=9, correlation_id=1, client_id="t"
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(protocol.encode_request(header, body))
        assert sock.recv(100) == b""
    assert _log(broker, topic, 1) == {0: []}


@pytest.mark.kafka
def test_on_kafka_with_key_routing(url: str, kafka4: Any) -> None:
    """Apache Kafka 4 behind the proxy, key routing on (after the filter): the
    valid records reach Kafka on their keys' partitions, a refused batch is
    nowhere, and confluent-kafka is told INVALID_RECORD."""
    from trafka.proxy.filters import Filter
    from trafka.proxy.keyrouting.filter import KeyRouting
    from trafka.sdk.partitioners import murmur2_partition

    servers = kafka4.bootstrap_servers
    topic = fresh("orders")
    create(servers, topic, 3, served=True)
    registry = SchemaRegistryClient({"url": url})
    order = AvroSerializer(registry, json.dumps(ORDER))
    ctx = SerializationContext(topic, MessageField.VALUE)
    values = [order({"id": i, "item": f"i{i}"}, ctx) for i in range(6)]
    check = SchemaValidation({"schema.registry.url": url})
    chain: tuple[Filter, ...] = (check, KeyRouting())
    with proxy_in_thread(upstream=tuple(servers.split(",")), port=0, filters=chain) as px:
        producer = confluent_kafka.Producer({"bootstrap.servers": px.bootstrap_servers})
        errors: list[Any] = []
        for i, value in enumerate(values):
            producer.produce(topic, value=value, key=b"k%d" % i, partition=0)
        producer.flush(30)
        producer.produce(
            topic, value=b"raw", key=b"k0", partition=1, on_delivery=lambda e, _m: errors.append(e)
        )
        assert producer.flush(30) == 0
    assert [e.code() for e in errors] == [confluent_kafka.KafkaError.INVALID_RECORD]
    placed: dict[int, list[bytes | None]] = {p: [] for p in range(3)}
    for i, value in enumerate(values):
        placed[murmur2_partition(b"k%d" % i, 3)].append(value)
    log = _log_of(servers, topic, 3)
    assert {p: sorted(v or b"" for v in vs) for p, vs in log.items()} == {
        p: sorted(v or b"" for v in vs) for p, vs in placed.items()
    }
