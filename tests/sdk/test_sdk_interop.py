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
            async with open_consumer(
                # (its close waits for the fetch the broker holds at the end)
                bootstrap_servers=bs,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=50,
            ) as c:
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


@pytest.mark.timeout(120)
def test_sticky_group_with_a_kafka_python_member(broker: RunningBroker) -> None:
    """Issue #45 item 5, with a kafka-python member in an eager "sticky" group led by
    trafka: kafka-python's StickyPartitionAssignor reports its previous assignment in
    its subscription's user data (Java's struct behind a version number), and the
    trafka leader reads it, so when another member joins the kafka-python member keeps
    two of its three partitions (the javadoc: "topic partitions stay with their
    previously assigned consumers as much as possible").
    """
    import threading

    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    bs = broker.bootstrap_servers
    topic = fresh("stk")
    group = fresh("stkg")
    create_topic(bs, topic)
    everything = {TopicPartition(topic, p) for p in range(PARTITIONS)}
    theirs: list[set[TopicPartition]] = [set()]
    stop = threading.Event()
    join = threading.Event()

    def kafka_python_member() -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=bs,
            group_id=group,
            partition_assignment_strategy=[StickyPartitionAssignor],
            heartbeat_interval_ms=100,
            session_timeout_ms=6000,
            enable_auto_commit=False,
        )
        try:
            join.wait()
            consumer.subscribe([topic])
            while not stop.is_set():
                consumer.poll(timeout_ms=50)
                theirs[0] = {TopicPartition(tp.topic, tp.partition) for tp in consumer.assignment()}
        finally:
            consumer.close()

    async def main() -> tuple[set[TopicPartition], ...]:
        common: dict[str, Any] = dict(
            bootstrap_servers=bs,
            group_id=group,
            partition_assignment_strategy=["sticky"],
            heartbeat_interval_ms=100,
            session_timeout_ms=6000,
        )

        async def settle(ours: list[Any], sizes: list[int]) -> None:
            while True:
                got = [c.assignment() for c in ours] + [theirs[0]]
                if [len(g) for g in got] == sizes and set().union(*got) == everything:
                    return
                for c in ours:
                    await c.getmany(timeout_ms=20)

        with anyio.fail_after(90):
            async with open_consumer(topic, **common) as a:  # the first member: the leader
                await settle([a], [6, 0])
                join.set()
                await settle([a], [3, 3])
                a_before, k_before = a.assignment(), set(theirs[0])
                async with open_consumer(topic, **common) as b:
                    await settle([a, b], [2, 2, 2])
                    return a_before, k_before, a.assignment(), set(theirs[0])

    worker = threading.Thread(target=kafka_python_member)
    worker.start()
    try:
        a_before, k_before, a_after, k_after = anyio.run(main)
    finally:
        join.set()
        stop.set()
        worker.join(30)
    assert a_after <= a_before
    assert k_after <= k_before
