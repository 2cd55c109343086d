"""trafka against the reference clients (kafka-python, confluent-kafka/librdkafka) on brokerlite."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.sdk.admin import NewTopic, open_admin
from trafka.sdk.consumer import TopicPartition, open_consumer
from trafka.sdk.partitioners import Partitioner
from trafka.sdk.producer import open_producer

KEYS = [f"key-{i}".encode() for i in range(40)] + [b"", b"\x00\xff", "ключ".encode()]
PARTITIONS = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "brokerlite-interop")


def create_topic(bs: str, topic: str, partitions: int = PARTITIONS) -> None:
    async def main() -> None:
        with anyio.fail_after(20):
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic(topic, partitions)])

    anyio.run(main)


def trafka_produce(
    bs: str, topic: str, partitioner: str = "murmur2", **kw: Any
) -> dict[bytes, int]:
    async def main() -> dict[bytes, int]:
        with anyio.fail_after(20):
            async with open_producer(
                bootstrap_servers=bs, partitioner=partitioner, linger_ms=1, **kw
            ) as p:
                futures = {
                    k: await p.send(topic, b"v:" + k, key=k, headers=[("h", b"1")]) for k in KEYS
                }
            return {k: (await f).partition for k, f in futures.items()}

    return anyio.run(main)


def trafka_consume(bs: str, topic: str, n: int) -> list[Any]:
    async def main() -> list[Any]:
        out: list[Any] = []
        with anyio.fail_after(20):
            async with open_consumer(bootstrap_servers=bs, auto_offset_reset="earliest") as c:
                c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
                while len(out) < n:
                    for recs in (await c.getmany(timeout_ms=1000)).values():
                        out.extend(recs)
        return out

    return anyio.run(main)


@pytest.mark.timeout(60)
def test_trafka_to_kafka_python(broker: RunningBroker) -> None:
    from kafka import KafkaConsumer

    bs = broker.bootstrap_servers
    topic = fresh("tk")
    create_topic(bs, topic)
    parts = trafka_produce(bs, topic, compression_type="gzip")
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bs, auto_offset_reset="earliest", consumer_timeout_ms=5000
    )
    try:
        got = {}
        deadline = time.monotonic() + 20
        while len(got) < len(KEYS) and time.monotonic() < deadline:
            for msg in consumer:
                got[msg.key] = (msg.partition, msg.value, msg.headers)
                if len(got) == len(KEYS):
                    break
    finally:
        consumer.close()
    assert set(got) == set(KEYS)
    for k in KEYS:
        assert got[k][0] == parts[k]
        assert got[k][1] == b"v:" + k
        assert list(got[k][2]) == [("h", b"1")]


@pytest.mark.timeout(60)
def test_kafka_python_to_trafka_same_partitions(broker: RunningBroker) -> None:
    from kafka import KafkaProducer

    bs = broker.bootstrap_servers
    topic = fresh("kt")
    create_topic(bs, topic)
    producer = KafkaProducer(bootstrap_servers=bs, compression_type="lz4")
    try:
        theirs = {
            k: producer.send(topic, key=k, value=b"v:" + k).get(timeout=10).partition for k in KEYS
        }
    finally:
        producer.close()
    ours = Partitioner("murmur2")
    assert theirs == {k: ours.partition(topic, k, PARTITIONS, range(PARTITIONS)) for k in KEYS}
    records = trafka_consume(bs, topic, len(KEYS))
    assert {r.key: (r.partition, r.value) for r in records} == {
        k: (theirs[k], b"v:" + k) for k in KEYS
    }


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["murmur2_random", "consistent_random", "consistent", "fnv1a"])
def test_librdkafka_partitioners_agree(broker: RunningBroker, name: str) -> None:
    from confluent_kafka import Producer

    bs = broker.bootstrap_servers
    topic = fresh(f"rd-{name}")
    create_topic(bs, topic)
    producer = Producer({"bootstrap.servers": bs, "partitioner": name, "linger.ms": 1})
    theirs: dict[bytes, int] = {}

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        theirs[msg.key()] = msg.partition()

    keyed = [k for k in KEYS if k or name != "consistent_random"]  # empty keys are random there
    for k in keyed:
        producer.produce(topic, key=k, value=b"v", on_delivery=report)
    assert producer.flush(20) == 0
    ours = Partitioner(name)
    assert theirs == {k: ours.partition(topic, k, PARTITIONS, range(PARTITIONS)) for k in keyed}
    # and trafka configured the same way sends each key where librdkafka did
    trafka_parts = trafka_produce(bs, topic, partitioner=name)
    assert {k: trafka_parts[k] for k in keyed} == theirs


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_confluent_to_trafka(broker: RunningBroker, codec: str) -> None:
    from confluent_kafka import Producer

    bs = broker.bootstrap_servers
    topic = fresh(f"ct-{codec}")
    create_topic(bs, topic)
    producer = Producer({"bootstrap.servers": bs, "compression.type": codec, "linger.ms": 5})
    for k in KEYS:
        producer.produce(
            topic, key=k, value=b"v:" + k * 20, headers=[("h", b"x")], timestamp=1_600_000_000_000
        )
    assert producer.flush(20) == 0
    records = trafka_consume(bs, topic, len(KEYS))
    assert sorted(r.key for r in records) == sorted(KEYS)
    assert all(r.value == b"v:" + r.key * 20 and r.headers == (("h", b"x"),) for r in records)
    assert all(r.timestamp == 1_600_000_000_000 for r in records)


@pytest.mark.timeout(60)
def test_trafka_to_confluent_consumer_group(broker: RunningBroker) -> None:
    from confluent_kafka import Consumer

    bs = broker.bootstrap_servers
    topic = fresh("tc")
    create_topic(bs, topic)
    parts = trafka_produce(bs, topic, compression_type="zstd")
    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": fresh("cg"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: dict[bytes, int] = {}
    try:
        deadline = time.monotonic() + 30
        while len(got) < len(KEYS) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            got[msg.key()] = msg.partition()
    finally:
        consumer.close()
    assert got == parts
