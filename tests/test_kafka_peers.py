"""The Apache Kafka fixtures themselves (tests/kafka_peers.py): a cluster serves
what it says, and a killed node comes back at the same address with its data."""

from __future__ import annotations

from collections.abc import Callable

import trio
from kafka_peers import KAFKA_4, KafkaCluster

from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer


async def _describe(bs: str) -> tuple[int, ...]:
    async with open_admin(bootstrap_servers=bs) as admin:
        cluster = await admin.describe_cluster()
    return tuple(sorted(broker.node_id for broker in cluster.brokers))


def test_each_fixture_names_its_brokers(kafka: KafkaCluster) -> None:
    assert trio.run(_describe, kafka.bootstrap_servers) == (1,)


def test_a_killed_node_comes_back_with_its_records(make_kafka: Callable[..., KafkaCluster]) -> None:
    cluster = make_kafka(KAFKA_4)
    address = cluster.bootstrap_servers

    async def write() -> None:
        async with open_admin(bootstrap_servers=address) as admin:
            await admin.create_topics([NewTopic("kept", 1)])
        async with open_producer(bootstrap_servers=address, acks=-1) as producer:
            await (await producer.send("kept", b"before the kill"))

    async def read() -> list[bytes]:
        async with open_consumer(bootstrap_servers=address, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition("kept", 0)])
            with trio.fail_after(30):
                while not (got := await c.getmany(timeout_ms=1000)):
                    pass
        return [r.value for records in got.values() for r in records]

    trio.run(write)
    cluster.node(1).kill()
    assert not cluster.node(1).running
    cluster.start_node(1)
    assert cluster.bootstrap_servers == address
    assert trio.run(read) == [b"before the kill"]
