"""The Apache Kafka fixtures themselves (tests/kafka_peers.py): a cluster serves
what it says, a killed node comes back at the same address with its data, and
the JVMs map the class-data archives ``fetch`` wrote."""

from __future__ import annotations

from collections.abc import Callable

import kafka_peers
import pytest
import trio
from kafka_peers import KAFKA_3, KAFKA_4, KafkaCluster

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


@pytest.mark.parametrize("version", [KAFKA_3, KAFKA_4])
def test_the_class_data_archives_written_are_mapped(version: str) -> None:
    """A JVM refuses an archive written with other jars, another JDK, or the same
    jars at another path (a worktree since removed), and then loads every class
    from the jars again, silently: a Kafka 4 node's start took twice the CPU, a
    perf tool's JVM 1.8 s instead of 0.9 s. ``fetch`` writes them again then."""
    if kafka_peers.missing("kafka", version) is not None:
        pytest.skip(f"Apache Kafka {version} is not fetched")
    written = [r for r in ("broker", "scripts") if kafka_peers._archive(version, r).is_file()]
    refused = [r for r in written if not kafka_peers._usable(version, r)]
    assert refused == [], (
        f"{version}: archives refused: {refused} (python tests/kafka_peers.py fetch)"
    )
