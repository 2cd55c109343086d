"""A consumer through the proxy in front of Apache Kafka 3.9 (three brokers on
ZooKeeper) when the leader of the partition it reads moves (issue #64: under
the fault schedule ``leader-zk`` the transactional processor's consumer, through
the proxy, read nothing more after the heal).

What Kafka defines: a client caches metadata "until it receives an error
indicating that the metadata is out of date", an error code "indicating that
this broker no longer hosts the partition", and then refreshes it and tries
again (Kafka's protocol guide, "Partitioning and bootstrapping"); a fetch
carrying a leader epoch older than the broker's is refused FENCED_LEADER_EPOCH
(KIP-320), a fetch to a replica that no longer leads NOT_LEADER_OR_FOLLOWER.
Kafka 3.7+ adds the new leader to those refusals (KIP-951), but in Fetch from
v16 only, and the proxy lets clients fetch at v15 at most (it does not read
fetched records), so a client behind it must refresh. ``metadata.max.age.ms``
is set far past the test's deadline: only the refresh those errors call for
can bring the consumer to the new leader in time.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from kafka_peers import KafkaCluster
from proxy_helpers import create, fresh

from trafka.proxy import proxy_in_thread
from trafka.sdk import TopicPartition, open_admin, open_consumer, open_producer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

N = 20
# Far past the deadlines below: no periodic refresh comes to the rescue.
MAX_AGE_MS = 900_000


async def _produce(servers: str, topic: str, values: list[bytes]) -> None:
    async with open_producer(bootstrap_servers=servers, acks="all") as producer:
        for value in values:
            await producer.send(topic, value, partition=0)
        await producer.flush()


async def _read(consumer: Any, wanted: int, seconds: float) -> list[bytes]:
    got: list[bytes] = []
    with anyio.move_on_after(seconds):
        while len(got) < wanted:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                got.extend(r.value for r in records)
    return got


async def _move_leader(servers: str, tp: TopicPartition) -> tuple[int, int]:
    """The partition's leader moved to another of its replicas (that one put first,
    KIP-455, then the preferred replica elected, KIP-460): (old leader, new leader)."""
    async with open_admin(bootstrap_servers=servers) as admin:
        info = (await admin.describe_topics([tp.topic]))[tp.topic].partitions[0]
        old, replicas = info.leader, list(info.replicas)
        first, *rest = [n for n in replicas if n != old]
        target = [first, old, *rest]
        assert await admin.alter_partition_reassignments({tp: target}) == {tp: None}
        while await admin.list_partition_reassignments([tp]):
            await anyio.sleep(0.2)
        while (await admin.describe_topics([tp.topic]))[tp.topic].partitions[0].replicas != tuple(
            target
        ):
            await anyio.sleep(0.2)
        # Elected by the call, or already by the move (the wait below says which leads).
        outcome = (await admin.elect_leaders([tp]))[tp]
        assert outcome is None or outcome.code.name == "ELECTION_NOT_NEEDED", outcome
        while (await admin.describe_topics([tp.topic]))[tp.topic].partitions[0].leader != target[0]:
            await anyio.sleep(0.2)
    return old, target[0]


async def _follow(servers: str, proxied: str, topic: str) -> None:
    tp = TopicPartition(topic, 0)
    before = [b"before-%d" % i for i in range(N)]
    after = [b"after-%d" % i for i in range(N)]
    await _produce(servers, topic, before)
    async with open_consumer(
        bootstrap_servers=proxied, metadata_max_age_ms=MAX_AGE_MS, enable_auto_commit=False
    ) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        # Generous: a loaded machine's first connections through the proxy.
        assert await _read(consumer, N, 60) == before
        with anyio.fail_after(120):
            old, new = await _move_leader(servers, tp)
            await _produce(servers, topic, after)
        got = await _read(consumer, N, 60)
    assert got == after, (
        f"the consumer read {len(got)} of {N} records in 60 s after the leader moved "
        f"from broker {old} to {new} (metadata.max.age.ms {MAX_AGE_MS})"
    )


def test_a_consumer_through_the_proxy_follows_a_moved_leader(kafka3_cluster: KafkaCluster) -> None:
    servers = kafka3_cluster.bootstrap_servers
    topic = fresh("moved")
    create(servers, topic, 1, 3, served=True)
    with proxy_in_thread(upstream=tuple(servers.split(",")), port=0) as px:
        anyio.run(_follow, servers, px.bootstrap_servers, topic, backend="trio")
