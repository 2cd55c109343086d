"""Brokerlite's client quotas against real peers over real sockets.

* kafka-python 3's own AlterClientQuotas and DescribeClientQuotas classes (an
  encoder and decoder of keys 48 and 49 generated from Kafka's specs, not ours),
  sent at v0 and v1 through its admin client's connection: set, describe with
  every kind of filter, validate_only, remove, and the refusals (INVALID_REQUEST
  per entry, a bad filter for the whole request) agree with brokerlite.
* ``producer_byte_rate``: confluent-kafka's producer (librdkafka) reports the
  broker's throttle times through ``throttle_cb``, kafka-python's producer
  (KIP-219) logs and measures them; every record arrives once, in order. Over
  raw sockets, a fresh client's first Produce gets Kafka's exact throttle time
  (request header and body measured over one window), and the connection is not
  read for that time, also after an acks=0 Produce.
* ``consumer_byte_rate``: both consumers are throttled (a throttled Fetch is
  answered empty and its bytes taken back) and still get every record once.
* ``controller_mutation_rate`` (KIP-599): kafka-python's admin speaks
  CreateTopics v7 and DeleteTopics v6 (strict: THROTTLING_QUOTA_EXCEEDED once
  the token bucket is below zero), librdkafka CreateTopics v4 (permissive: all
  created, the answer throttled and the connection muted). The test reads the
  version each peer used and expects what Kafka specifies for it.
* ``connection_creation_rate`` (KIP-612) on 127.0.0.1: connections over the
  rate are never answered and are closed by the broker, while connections
  within it, and other client IPs (127.0.0.2 and up, where the system lets a
  client bind to them), are served; a default IP quota counts each IP on its
  own, a specific one wins over it; an IPv6 address matches however it is spelled.

Every test has its own broker with short quota windows (``quota_window_num=2``,
``quota_window_size_seconds=1``: a rate is measured over at least one second, so
a fresh client may burst one second's worth) and sizes its data so throttling
must happen. No test asserts an upper bound on time.
"""

from __future__ import annotations

import logging
import re
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k18_api_versions as av
from trafka.codec.messages import k19_create_topics as ct
from trafka.codec.messages import k49_alter_client_quotas as acq
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response, encode_request

pytestmark = pytest.mark.timeout(120)

log = logging.getLogger(__name__)

TIMEOUT = 30.0
WINDOW_NUM = 2
WINDOW_S = 1
RATE = 10_000  # bytes per second for the byte-rate tests
RECORD = 1_000  # bytes of each record's value
COUNT = 30  # records: three times what the rate allows in a second


def _peer(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} (a test peer) is not installed")


@pytest.fixture
def quota_broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0,
        data_dir=tmp_path / "data",
        group_initial_rebalance_delay_ms=0,
        quota_window_num=WINDOW_NUM,
        quota_window_size_seconds=WINDOW_S,
    ) as running:
        yield running


def alter_quotas(
    raw_client: Any,
    running: RunningBroker,
    entity: list[tuple[str, str | None]],
    **values: float,
) -> Any:
    """Set quotas of ``entity`` with trafka's own codec (a raw AlterClientQuotas v1);
    returns the client (its connection stays open until the test ends)."""
    client = raw_client(running.address)
    req = acq.AlterClientQuotasRequest
    body = req(
        entries=[
            req.EntryData(
                entity=[req.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                ops=[req.OpData(key=k, value=float(v)) for k, v in values.items()],
            )
        ]
    )
    response = client.request(49, 1, body)
    assert [e.error_code for e in response.entries] == [ErrorCode.NONE], response
    return client


def record_value(i: int) -> bytes:
    return b"%05d-" % i + b"x" * (RECORD - 6)


def check_all_once_in_order(got: list[tuple[int, bytes]]) -> None:
    """``got`` (offset, value) pairs must be exactly the COUNT records, once each, in order."""
    assert len(got) == COUNT, f"{len(got)} of {COUNT} records, offsets {[o for o, _ in got]}"
    assert [o for o, _ in got] == list(range(COUNT))
    assert [v for _, v in got] == [record_value(i) for i in range(COUNT)]


# -- 1. kafka-python's own encoder and decoder of DescribeClientQuotas and AlterClientQuotas ----


def kp_send(admin: Any, request: Any) -> Any:
    """Send a kafka-python protocol object through ``admin``'s connection manager
    (kafka-python 3 has no admin call for client quotas)."""

    async def call() -> Any:
        return await admin._manager.send(request)

    return admin._manager.run(call)


Pairs = tuple[tuple[str, str | None], ...]


def kp_entity(entity: list[Any]) -> Pairs:
    return tuple(sorted((e.entity_type, e.entity_name) for e in entity))


@pytest.mark.parametrize("version", [0, 1])
def test_kafka_python_protocol_classes_alter_and_describe(
    quota_broker: RunningBroker, version: int
) -> None:
    kafka = _peer("kafka")
    from kafka.protocol.admin.client_quotas import (
        AlterClientQuotasRequest,
        DescribeClientQuotasRequest,
    )

    Entry = AlterClientQuotasRequest.EntryData
    EntityData, OpData = Entry.EntityData, Entry.OpData
    Component = DescribeClientQuotasRequest.ComponentData

    admin = kafka.KafkaAdminClient(
        bootstrap_servers=quota_broker.bootstrap_servers,
        client_id="kp-quota-admin",
        request_timeout_ms=10_000,
    )

    def alter(entries: list[tuple[Pairs, dict[str, float | None]]], validate_only: bool = False):
        request = AlterClientQuotasRequest(
            entries=[
                Entry(
                    entity=[EntityData(entity_type=t, entity_name=n) for t, n in entity],
                    ops=[
                        OpData(key=k, value=0.0 if v is None else v, remove=v is None)
                        for k, v in ops.items()
                    ],
                )
                for entity, ops in entries
            ],
            validate_only=validate_only,
            version=version,
        )
        response = kp_send(admin, request)
        assert version == response.API_VERSION
        # One answer per entry, in order, each echoing its entity.
        assert [kp_entity(e.entity) for e in response.entries] == [
            tuple(sorted(entity)) for entity, _ in entries
        ]
        return [(e.error_code, e.error_message) for e in response.entries]

    def describe(components: list[tuple[str, int, str | None]], strict: bool = False) -> Any:
        request = DescribeClientQuotasRequest(
            components=[Component(entity_type=t, match_type=m, match=n) for t, m, n in components],
            strict=strict,
            version=version,
        )
        response = kp_send(admin, request)
        assert version == response.API_VERSION
        return response

    def found(components: list[tuple[str, int, str | None]], strict: bool = False) -> dict:
        response = describe(components, strict)
        assert (response.error_code, response.error_message) == (0, None), response
        out = {kp_entity(e.entity): {v.key: v.value for v in e.values} for e in response.entries}
        assert len(out) == len(response.entries), "an entity was described twice"
        return out

    app: Pairs = (("client-id", "kp-app"),)
    alice_default: Pairs = (("client-id", None), ("user", "alice"))
    default_client: Pairs = (("client-id", None),)
    default_user: Pairs = (("user", None),)
    an_ip: Pairs = (("ip", "10.1.2.3"),)
    try:
        results = alter(
            [
                (app, {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}),
                (alice_default, {"request_percentage": 12.5}),
                (default_client, {"controller_mutation_rate": 0.5}),
                (an_ip, {"connection_creation_rate": 7.0}),
                # Refused, each on its own: a key the entity does not take, a
                # byte rate that is not a whole number, ip with a user.
                ((("ip", "10.1.2.4"),), {"producer_byte_rate": 100.0}),
                ((("client-id", "bad"),), {"producer_byte_rate": 1.5}),
                ((("ip", "10.1.2.5"), ("user", "bob")), {"connection_creation_rate": 1.0}),
                (default_user, {"producer_byte_rate": 4096.0}),
                # A negative whole number is refused too (Kafka's truncation), 0 is not.
                ((("client-id", "neg"),), {"consumer_byte_rate": -5.0}),
                ((("client-id", "zero"),), {"consumer_byte_rate": 0.0}),
                ((), {"producer_byte_rate": 1.0}),  # no entity
                ((("client-id", ""),), {"producer_byte_rate": 1.0}),  # "" is not the default
                ((("tenant", "t"),), {"producer_byte_rate": 1.0}),
                ((("ip", "not-an-address"),), {"connection_creation_rate": 1.0}),
                ((("client-id", "c"),), {"no_such_quota": 1.0}),
            ]
        )
        assert [code for code, _ in results] == [0, 0, 0, 0, 42, 42, 42, 0, 42, 0] + [42] * 5
        for code, message in results:
            assert (message is None) == (code == 0), results

        everything = {
            app: {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
            alice_default: {"request_percentage": 12.5},
            default_client: {"controller_mutation_rate": 0.5},
            an_ip: {"connection_creation_rate": 7.0},
            default_user: {"producer_byte_rate": 4096.0},
            (("client-id", "zero"),): {"consumer_byte_rate": 0.0},
        }
        EXACT, DEFAULT, ANY = 0, 1, 2
        assert found([]) == everything
        assert found([], strict=True) == {}
        assert found([("client-id", EXACT, "kp-app")]) == {app: everything[app]}
        assert found([("client-id", DEFAULT, None)]) == {
            k: everything[k] for k in (alice_default, default_client)
        }
        assert found([("client-id", DEFAULT, None)], strict=True) == {
            default_client: everything[default_client]
        }
        # "Any" includes the default entity.
        zero: Pairs = (("client-id", "zero"),)
        assert found([("client-id", ANY, None)]) == {
            k: everything[k] for k in (app, alice_default, default_client, zero)
        }
        assert found([("client-id", ANY, None)], strict=True) == {
            k: everything[k] for k in (app, default_client, zero)
        }
        assert found([("user", EXACT, "alice"), ("client-id", DEFAULT, None)], strict=True) == {
            alice_default: everything[alice_default]
        }
        assert found([("user", DEFAULT, None)]) == {default_user: everything[default_user]}
        assert found([("ip", ANY, None)]) == {an_ip: everything[an_ip]}
        assert found([("user", EXACT, "nobody")]) == {}

        # Bad filters fail the whole request, entries null.
        for components, code in [
            ([("ip", ANY, None), ("user", ANY, None)], 42),
            ([("client-id", EXACT, None)], 42),
            ([("client-id", DEFAULT, "kp-app")], 42),
            ([("user", ANY, None), ("user", DEFAULT, None)], 42),
            ([("client-id", 7, None)], 42),
            ([("", ANY, None)], 42),
            ([("tenant", ANY, None)], 35),
        ]:
            response = describe(components)
            assert response.error_code == code, (components, response)
            assert response.error_message, (components, response)
            assert response.entries is None, (components, response)

        # validate_only: the same answers, nothing changed.
        assert alter([(app, {"producer_byte_rate": 9999.0})], validate_only=True) == [(0, None)]
        code, message = alter([(app, {"producer_byte_rate": -1.0})], validate_only=True)[0]
        assert code == 42 and message
        assert found([]) == everything

        # Remove: the entity goes with its last key; removing a key never set is no error.
        assert alter([(app, {"producer_byte_rate": None})]) == [(0, None)]
        assert found([("client-id", EXACT, "kp-app")]) == {app: {"consumer_byte_rate": 2048.0}}
        assert alter([(app, {"consumer_byte_rate": None}), (an_ip, {"nonsense": None})]) == [
            (0, None),
            (0, None),
        ]
        del everything[app]
        assert found([]) == everything
        assert found([("client-id", EXACT, "kp-app")]) == {}
    finally:
        admin.close()


# -- 2. producer_byte_rate ------------------------------------------------------------------


def ck_read_back(
    servers: str, topic: str, *, client_id: str = "reader", **settings: Any
) -> list[tuple[int, bytes]]:
    """Read ``topic``'s partition 0 from the start with confluent-kafka, as client
    ``client_id`` (group of the same name) with extra ``settings``; checks that
    nothing follows the COUNT records."""
    ck = _peer("confluent_kafka")
    consumer = ck.Consumer(
        {
            "bootstrap.servers": servers,
            "client.id": client_id,
            "group.id": client_id,
            "enable.auto.commit": False,
            **settings,
        }
    )
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < COUNT and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append((msg.offset(), msg.value()))
        # Anything more would be a duplicate.
        extra = consumer.poll(1.0)
        assert extra is None, (extra.offset(), extra.value(), extra.error())
    finally:
        consumer.close()
    return got


def ck_throttles(events: list[Any], running: RunningBroker) -> list[float]:
    """The throttle times (s) librdkafka reported for the broker, checking each names it."""
    node = running.config.node_id
    port = str(running.address[1])
    throttled = [e for e in events if e.throttle_time > 0]
    for e in throttled:
        assert e.broker_id == node and port in e.broker_name, (e.broker_id, e.broker_name)
    return [e.throttle_time for e in throttled]


def test_confluent_producer_throttled_by_producer_byte_rate(
    quota_broker: RunningBroker, raw_client: Any
) -> None:
    ck = _peer("confluent_kafka")
    alter_quotas(raw_client, quota_broker, [("client-id", "ck-producer")], producer_byte_rate=RATE)
    events: list[Any] = []
    delivered: list[tuple[int, bytes]] = []
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.offset(), msg.value()))

    producer = ck.Producer(
        {
            "bootstrap.servers": quota_broker.bootstrap_servers,
            "client.id": "ck-producer",
            # Small batches: many Produce requests, so throttling shows up between them.
            "batch.size": 2 * RECORD + 200,
            "linger.ms": 1,
            "throttle_cb": events.append,
        }
    )
    for i in range(COUNT):
        producer.produce("ck-quota", record_value(i), on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    producer.poll(0)
    assert errors == []
    throttles = ck_throttles(events, quota_broker)
    log.info("librdkafka produce throttle times (s): %s", throttles)
    assert throttles, "librdkafka reported no throttling"
    assert sorted(delivered) == delivered, "delivered out of order"
    check_all_once_in_order(delivered)
    check_all_once_in_order(ck_read_back(quota_broker.bootstrap_servers, "ck-quota"))


THROTTLED_LOG = re.compile(r"(\w+Response) throttled by broker \((\d+) ms\)")


def kp_throttles(caplog: pytest.LogCaptureFixture, response: str) -> list[int]:
    """The throttle times kafka-python logged for ``response`` answers."""
    out = []
    for rec in caplog.records:
        m = THROTTLED_LOG.search(rec.getMessage())
        if m and m.group(1) == response:
            out.append(int(m.group(2)))
    return out


def kp_max_throttle(client: Any, group: str) -> float:
    """kafka-python's ``throttle-time-max`` metric of ``group`` (0 when absent)."""
    return float(client.metrics().get(group, {}).get("throttle-time-max") or 0.0)


def test_kafka_python_producer_throttled_by_producer_byte_rate(
    quota_broker: RunningBroker, raw_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    kafka = _peer("kafka")
    caplog.set_level(logging.WARNING, logger="kafka")
    alter_quotas(raw_client, quota_broker, [("client-id", "kp-producer")], producer_byte_rate=RATE)
    producer = kafka.KafkaProducer(
        bootstrap_servers=quota_broker.bootstrap_servers,
        client_id="kp-producer",
        batch_size=2 * RECORD + 200,
        linger_ms=1,
    )
    try:
        futures = [producer.send("kp-quota", record_value(i)) for i in range(COUNT)]
        producer.flush(timeout=TIMEOUT)
        offsets = [f.get(timeout=TIMEOUT).offset for f in futures]
        node_max = kp_max_throttle(
            producer, f"producer-node-metrics.node-{quota_broker.config.node_id}"
        )
    finally:
        producer.close(timeout=10)
    throttles = kp_throttles(caplog, "ProduceResponse")
    log.info("kafka-python produce throttle times (ms): %s", throttles)
    assert throttles and all(t > 0 for t in throttles), throttles
    assert node_max == max(throttles)
    assert offsets == list(range(COUNT))
    check_all_once_in_order(ck_read_back(quota_broker.bootstrap_servers, "kp-quota"))


def test_raw_produce_throttle_time_is_kafkas_and_the_connection_is_muted(
    quota_broker: RunningBroker, raw_client: Any, make_batch: Any
) -> None:
    """Over raw sockets, Kafka's exact numbers: a fresh client's first Produce is
    measured over one window, so its throttle time is ``(size - rate) / rate``
    seconds, size being the request's header and body (Kafka's
    ``request.sizeInBytes``); the connection is not read meanwhile, also after an
    acks=0 Produce, which has no answer to carry the throttle time but is appended."""
    setter = raw_client(quota_broker.address)
    for client_id in ("raw-acks1", "raw-acks0"):
        alter_quotas(raw_client, quota_broker, [("client-id", client_id)], producer_byte_rate=RATE)
    topic = ct.CreateTopicsRequest.CreatableTopic
    created = setter.request(
        19,
        7,
        ct.CreateTopicsRequest(
            topics=[topic(name="raw-quota", num_partitions=1, replication_factor=1)],
            timeout_ms=10_000,
        ),
    )
    assert created.topics[0].error_code == ErrorCode.NONE
    batch = make_batch([record_value(i) for i in range(15)])  # 1.5 seconds' worth

    def produce_frame(acks: int, client_id: str) -> bytes:
        req = produce.ProduceRequest
        body = req(
            acks=acks,
            timeout_ms=10_000,
            topic_data=[
                req.TopicProduceData(
                    name="raw-quota",
                    partition_data=[req.PartitionProduceData(index=0, records=batch)],
                )
            ],
        )
        header = RequestHeader(
            request_api_key=0, request_api_version=9, correlation_id=1, client_id=client_id
        )
        return encode_request(header, body)

    for acks, client_id in ((1, "raw-acks1"), (0, "raw-acks0")):
        frame = produce_frame(acks, client_id)
        expected = int((len(frame) - 4 - RATE) / RATE * 1000 + 0.5)  # Java's Math.round
        assert expected > 0
        client = raw_client(quota_broker.address)
        started = time.monotonic()
        client.send_raw(frame)
        if acks:
            _, answer = decode_response(client.read_frame(), 0, 9)
            assert answer.throttle_time_ms == expected, (answer.throttle_time_ms, expected)
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        client.sock.sendall(_api_versions_frame(7))
        assert _answer(client.sock, 7)
        assert time.monotonic() - started >= expected / 1000
    # Both batches were appended: the next offset is 30.
    check = raw_client(quota_broker.address)
    check.send_raw(produce_frame(1, "raw-unlimited"))
    _, answer = decode_response(check.read_frame(), 0, 9)
    assert answer.throttle_time_ms == 0
    assert answer.responses[0].partition_responses[0].base_offset == 30


# -- 3. consumer_byte_rate ------------------------------------------------------------------


def fill(running: RunningBroker, topic: str) -> None:
    """COUNT records in small batches (each well under what one throttled Fetch may carry)."""
    ck = _peer("confluent_kafka")
    producer = ck.Producer(
        {
            "bootstrap.servers": running.bootstrap_servers,
            "client.id": "filler",
            "batch.size": 2 * RECORD + 200,
            "linger.ms": 1,
        }
    )
    for i in range(COUNT):
        producer.produce(topic, record_value(i))
    assert producer.flush(TIMEOUT) == 0


def test_confluent_consumer_throttled_by_consumer_byte_rate(
    quota_broker: RunningBroker, raw_client: Any
) -> None:
    _peer("confluent_kafka")  # skips without confluent-kafka
    fill(quota_broker, "ck-fetch")
    alter_quotas(raw_client, quota_broker, [("client-id", "ck-consumer")], consumer_byte_rate=RATE)
    events: list[Any] = []
    got = ck_read_back(
        quota_broker.bootstrap_servers,
        "ck-fetch",
        client_id="ck-consumer",
        throttle_cb=events.append,
    )
    throttles = ck_throttles(events, quota_broker)
    log.info("librdkafka fetch throttle times (s): %s", throttles)
    assert throttles, "librdkafka reported no throttling"
    check_all_once_in_order(got)


def test_kafka_python_consumer_throttled_by_consumer_byte_rate(
    quota_broker: RunningBroker, raw_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    kafka = _peer("kafka")
    caplog.set_level(logging.WARNING, logger="kafka")
    fill(quota_broker, "kp-fetch")
    alter_quotas(raw_client, quota_broker, [("client-id", "kp-consumer")], consumer_byte_rate=RATE)
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=quota_broker.bootstrap_servers,
        client_id="kp-consumer",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([kafka.TopicPartition("kp-fetch", 0)])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < COUNT and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend((r.offset, r.value) for r in records)
        extra = consumer.poll(timeout_ms=1000)
        assert not extra, extra
        node_max = kp_max_throttle(
            consumer, f"consumer-node-metrics.node-{quota_broker.config.node_id}"
        )
    finally:
        consumer.close()
    throttles = kp_throttles(caplog, "FetchResponse")
    log.info("kafka-python fetch throttle times (ms): %s", throttles)
    assert throttles and all(t > 0 for t in throttles), throttles
    assert node_max == max(throttles)
    check_all_once_in_order(got)


# -- 4. controller_mutation_rate (KIP-599) --------------------------------------------------

MUTATION_RATE = 2.0  # partitions per second; the bucket holds WINDOW_NUM * WINDOW_S seconds' worth
PARTITIONS = [1, 2, 2, 1, 1]


def expected_mutations(partitions: list[int], strict: bool) -> tuple[list[bool], int]:
    """What Kafka answers one request asking for ``partitions`` mutations on a full
    bucket: which are admitted, and the throttle time in ms."""
    tokens = MUTATION_RATE * WINDOW_NUM * WINDOW_S
    admitted = []
    for count in partitions:
        if strict and tokens < 0:
            admitted.append(False)
            continue
        tokens -= count
        admitted.append(True)
    throttle = 0 if tokens >= 0 else int(-tokens / MUTATION_RATE * 1000 + 0.5)
    return admitted, throttle


def test_kafka_python_admin_controller_mutation_rate(
    quota_broker: RunningBroker, raw_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    kafka = _peer("kafka")
    from kafka.protocol.admin import CreateTopicsRequest, DeleteTopicsRequest

    caplog.set_level(logging.WARNING, logger="kafka")
    for client_id in ("kp-creator", "kp-deleter"):
        alter_quotas(
            raw_client,
            quota_broker,
            [("client-id", client_id)],
            controller_mutation_rate=MUTATION_RATE,
        )
    names = [f"kp-m{i}" for i in range(len(PARTITIONS))]
    creator = kafka.KafkaAdminClient(
        bootstrap_servers=quota_broker.bootstrap_servers, client_id="kp-creator"
    )
    deleter = kafka.KafkaAdminClient(
        bootstrap_servers=quota_broker.bootstrap_servers, client_id="kp-deleter"
    )
    # Without a quota, so never throttled (kafka-python sends nothing to a broker
    # that throttled it until the throttle time has passed).
    observer = kafka.KafkaAdminClient(
        bootstrap_servers=quota_broker.bootstrap_servers, client_id="kp-observer"
    )
    try:
        versions = creator._manager.broker_version_data
        create_v = versions.api_version(CreateTopicsRequest)
        delete_v = versions.api_version(DeleteTopicsRequest)
        log.info("kafka-python: CreateTopics v%d, DeleteTopics v%d", create_v, delete_v)

        result = creator.create_topics(
            {n: {"num_partitions": p} for n, p in zip(names, PARTITIONS, strict=True)},
            raise_errors=False,
        )
        codes = {t["name"]: t["error_code"] for t in result["topics"]}
        admitted, throttle = expected_mutations(PARTITIONS, strict=create_v >= 6)
        assert codes == {n: 0 if ok else 89 for n, ok in zip(names, admitted, strict=True)}
        assert throttle > 0
        assert kp_throttles(caplog, "CreateTopicsResponse") == [throttle]
        refused = [n for n, ok in zip(names, admitted, strict=True) if not ok]
        if create_v >= 6:
            assert refused, "a strict CreateTopics refused nothing"
            for t in result["topics"]:
                if t["error_code"] == 89:
                    assert t["error_message"], t
        # Refused topics were not created.
        topics = set(observer.list_topics())
        assert topics >= set(names) - set(refused)
        assert not topics & set(refused)

        # kafka-python holds every request to the broker for the throttle time
        # (KIP-219: it has no node to send to meanwhile); then the bucket has
        # refilled to zero or more and the next topic is admitted.
        time.sleep(throttle / 1000 + 0.2)
        if refused:
            again = creator.create_topics(
                {n: {"num_partitions": 1} for n in refused}, raise_errors=False
            )
            codes = [t["error_code"] for t in again["topics"]]
            assert codes[0] == 0, again
            assert set(codes[1:]) <= {0, 89}, again

        # DeleteTopics counts the partitions of each topic deleted (its own client id,
        # so its own full bucket).
        order = ["kp-m1", "kp-m2", "kp-m3", "kp-m0"]
        result = deleter.delete_topics(order, raise_errors=False)
        codes = {t["name"]: t["error_code"] for t in result["topics"]}
        admitted, throttle = expected_mutations([2, 2, 1, 1], strict=delete_v >= 5)
        assert codes == {n: 0 if ok else 89 for n, ok in zip(order, admitted, strict=True)}
        assert kp_throttles(caplog, "DeleteTopicsResponse") == ([throttle] if throttle else [])
        left = set(observer.list_topics())
        for name, ok in zip(order, admitted, strict=True):
            assert (name in left) != ok, (name, left)
    finally:
        creator.close()
        deleter.close()
        observer.close()


SENT = re.compile(r"(\S+): Sent (\w+)Request \(v(\d+),")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_confluent_admin_controller_mutation_rate(
    quota_broker: RunningBroker, raw_client: Any
) -> None:
    ck = _peer("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    alter_quotas(
        raw_client,
        quota_broker,
        [("client-id", "ck-creator")],
        controller_mutation_rate=MUTATION_RATE,
    )
    rdlog = logging.getLogger(f"{__name__}.librdkafka")
    lines = _Lines()
    rdlog.addHandler(lines)
    rdlog.setLevel(logging.DEBUG)
    rdlog.propagate = False
    events: list[Any] = []
    admin = AdminClient(
        {
            "bootstrap.servers": quota_broker.bootstrap_servers,
            "client.id": "ck-creator",
            "debug": "protocol",  # to learn the CreateTopics version librdkafka uses
            "logger": rdlog,
            "throttle_cb": events.append,
        }
    )
    names = [f"ck-m{i}" for i in range(len(PARTITIONS))]
    try:
        started = time.monotonic()
        futures = admin.create_topics(
            [NewTopic(n, p, 1) for n, p in zip(names, PARTITIONS, strict=True)],
            request_timeout=TIMEOUT,
        )
        outcome: dict[str, int] = {}
        for name, future in futures.items():
            try:
                future.result(TIMEOUT)
                outcome[name] = 0
            except ck.KafkaException as exc:
                outcome[name] = exc.args[0].code()
        admin.poll(0.5)  # serves throttle_cb and the log
        # A second request on the same connection: the broker reads it only after the mute.
        late = admin.create_topics([NewTopic("ck-late", 1, 1)], request_timeout=TIMEOUT)
        late["ck-late"].result(TIMEOUT)
        waited = time.monotonic() - started
        admin.poll(0.5)
    finally:
        rdlog.removeHandler(lines)
    sent = [m.groups() for m in map(SENT.search, lines.lines) if m and m.group(2) == "CreateTopics"]
    assert len(sent) == 2, lines.lines
    version = int(sent[0][2])
    log.info("librdkafka %s: CreateTopics v%d", ck.libversion()[0], version)
    assert sent[0][0] == sent[1][0], "the two CreateTopics went over different connections"

    admitted, throttle = expected_mutations(PARTITIONS, strict=version >= 6)
    assert outcome == {n: 0 if ok else 89 for n, ok in zip(names, admitted, strict=True)}
    throttles = ck_throttles(events, quota_broker)
    assert throttles and throttles[0] == throttle / 1000, throttles
    # librdkafka does not wait by itself (no KIP-219): the broker's mute did.
    assert waited >= throttle / 1000
    metadata = admin.list_topics(timeout=TIMEOUT)
    created = {n for n, ok in zip(names, admitted, strict=True) if ok} | {"ck-late"}
    assert created <= set(metadata.topics)
    assert not (set(names) - created) & set(metadata.topics)


# -- 5. connection_creation_rate (KIP-612) --------------------------------------------------


def _api_versions_frame(correlation_id: int) -> bytes:
    header = RequestHeader(
        request_api_key=18,
        request_api_version=3,
        correlation_id=correlation_id,
        client_id="burst",
    )
    body = av.ApiVersionsRequest(client_software_name="burst", client_software_version="1")
    return encode_request(header, body)


def _answer(sock: socket.socket, correlation_id: int) -> bool:
    """True when ``sock`` gets its ApiVersions answer; False when the broker closes
    it having sent nothing (a reset counts as a close)."""
    sock.settimeout(TIMEOUT)
    data = b""
    try:
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    if not data:
        return False
    (size,) = struct.unpack_from(">i", data)
    header, body = decode_response(data[4 : 4 + size], 18, 3)
    assert header.correlation_id == correlation_id
    assert body.error_code == ErrorCode.NONE
    return True


def burst(address: tuple[str, int], n: int, source: str | None = None) -> tuple[int, int, float]:
    """Open ``n`` connections from ``source`` as fast as possible, ask each for its
    ApiVersions; returns (answered, closed unanswered, seconds the opening took)."""
    socks = []
    try:
        started = time.monotonic()
        for _ in range(n):
            socks.append(
                socket.create_connection(
                    address, timeout=TIMEOUT, source_address=(source, 0) if source else None
                )
            )
        took = time.monotonic() - started
        for i, s in enumerate(socks):
            s.sendall(_api_versions_frame(i))
        answered = sum(_answer(s, i) for i, s in enumerate(socks))
    finally:
        for s in socks:
            s.close()
    return answered, n - answered, took


def check_burst(result: tuple[int, int, float], bound: int) -> None:
    """``bound`` connections answered and the rest closed, when the burst was opened
    well within the time in which the bound would have let another one in (the rate is
    measured over at least one window: the (bound+1)th connection is over it when it
    comes within 1/bound s of the first)."""
    answered, _, took = result
    if took < 0.5 / bound:
        assert answered == bound, result
    else:  # a very slow machine: only what holds whatever the timing
        assert answered >= bound, result


def _can_bind(address: str, family: socket.AddressFamily = socket.AF_INET) -> bool:
    try:
        with socket.socket(family) as s:
            s.bind((address, 0))
    except OSError:
        return False
    return True


def test_connection_creation_rate_closes_connections_over_it(
    quota_broker: RunningBroker, raw_client: Any
) -> None:
    address = quota_broker.address
    # Set over a connection opened before the quota exists: it is not counted.
    setter = alter_quotas(
        raw_client, quota_broker, [("ip", "127.0.0.1")], connection_creation_rate=2
    )
    result = burst(address, 6)
    log.info("127.0.0.1 burst of 6 at connection_creation_rate=2: %s", result)
    check_burst(result, 2)
    assert result[1] > 0, result
    # Connections already open are not affected.
    assert setter.request(18, 3, av.ApiVersionsRequest()).error_code == ErrorCode.NONE
    if _can_bind("127.0.0.2"):
        # Another IP has no quota: all served, right after 127.0.0.1 was refused.
        assert burst(address, 6, "127.0.0.2")[:2] == (6, 0)
    # Once the rate's samples have expired (two windows without a connection),
    # 127.0.0.1 is served again, within its rate.
    time.sleep(WINDOW_NUM * WINDOW_S + 0.3)
    check_burst(burst(address, 3), 2)


def test_connection_creation_rate_default_ip_applies_to_each_ip(
    quota_broker: RunningBroker, raw_client: Any
) -> None:
    if not all(_can_bind(f"127.0.0.{i}") for i in (2, 3, 4)):
        pytest.skip("cannot bind client sockets to 127.0.0.2-4")
    address = quota_broker.address
    alter_quotas(raw_client, quota_broker, [("ip", None)], connection_creation_rate=2)
    alter_quotas(raw_client, quota_broker, [("ip", "127.0.0.2")], connection_creation_rate=1)
    # The default: each IP counted on its own.
    check_burst(burst(address, 5, "127.0.0.3"), 2)
    check_burst(burst(address, 5, "127.0.0.4"), 2)
    # The specific IP's own quota wins over the default.
    check_burst(burst(address, 4, "127.0.0.2"), 1)


def test_connection_creation_rate_on_ipv6_loopback(tmp_path: Path, raw_client: Any) -> None:
    """An IPv6 client's quota applies however the address is spelled (here in
    full, as Java writes it, while the peer is ``::1``)."""
    if not _can_bind("::1", socket.AF_INET6):
        pytest.skip("no IPv6 loopback")
    with broker_in_thread(
        port=0,
        host="::1",
        data_dir=tmp_path / "data",
        quota_window_num=WINDOW_NUM,
        quota_window_size_seconds=WINDOW_S,
    ) as running:
        alter_quotas(raw_client, running, [("ip", "0:0:0:0:0:0:0:1")], connection_creation_rate=1)
        result = burst(running.address, 4)
        check_burst(result, 1)
        assert result[1] > 0, result
