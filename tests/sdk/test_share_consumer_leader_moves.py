"""A share consumer (KIP-932) whose partition's leader moves to a broker it has
not seen: the share consumer's side of issue #64 (the consumer's fix: a Fetch
answer whose partition error asks for fresh metadata wakes the refresher).

What Kafka defines: a client caches metadata "until it receives an error
indicating that the metadata is out of date" and then refreshes it (Kafka's
protocol guide, "Partitioning and bootstrapping"). KIP-932 places a
share-partition on its partition's leader; a ShareFetch naming a partition the
broker does not lead is answered NOT_LEADER_OR_FOLLOWER for it, with its
CurrentLeader (the ShareFetch response schema, v1). Here the new leader is a
broker that was down the last time the consumer read metadata, so the hint
names a node the consumer has no address for (it does not read the answer's
NodeEndpoints): only the refresh that error calls for brings it there.
``metadata.max.age.ms`` is set far past the test's deadline, so no periodic
refresh comes to the rescue.

A brokerlite cluster in this process (a private ZooKeeper, three brokers): a
broker stopped and started again, and leadership handed to it, without a JVM
per broker.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from sdk_brokers import fresh, produce

from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.sdk import NewTopic, TopicPartition, open_admin
from trafka.sdk.share_consumer import ShareConsumer, open_share_consumer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

N = 10
# Far past the deadlines below.
MAX_AGE_MS = 900_000
SETTINGS: dict[str, Any] = {
    "offsets_topic_num_partitions": 3,
    "share_coordinator_state_topic_num_partitions": 3,
    "group_initial_rebalance_delay_ms": 0,
    "group_share_heartbeat_interval_ms": 200,
    "group_share_min_heartbeat_interval_ms": 100,
    # Leadership moves when the test says so, not at a rebalance check.
    "auto_leader_rebalance_enable": False,
}


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def _until(what: str, admin: Any, topic: str, check: Any, seconds: float = 60) -> int:
    """Polls the partition's (leader, in-sync replicas) until ``check`` of them
    holds; the leader then."""
    with anyio.move_on_after(seconds):
        while True:
            info = (await admin.describe_topics([topic]))[topic].partitions[0]
            if check(info.leader, info.isr):
                return int(info.leader)
            await anyio.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {what}")


async def _read(consumer: ShareConsumer, wanted: set[bytes], seconds: float) -> set[bytes]:
    """The values polled until all of ``wanted`` came, or ``seconds`` passed."""
    got: set[bytes] = set()
    with anyio.move_on_after(seconds):
        while not wanted <= got:
            got |= {r.value for r in await consumer.poll(timeout_ms=500)}
    return got


async def _flow(cluster: LocalCluster, admin: Any, topic: str) -> None:
    bs = ",".join(f"{host}:{port}" for host, port in (cluster.node(n).address for n in (1, 2)))
    group = fresh("moved-share-g")
    tp = TopicPartition(topic, 0)
    await admin.alter_group_configs({group: {"share.auto.offset.reset": "earliest"}})
    old = await _until(
        "a leader other than broker 3",
        admin,
        topic,
        lambda led, isr: led in (1, 2) and 3 not in isr,
    )
    before = [b"before-%d" % i for i in range(N)]
    after = [b"after-%d" % i for i in range(N)]
    await produce(bs, topic, before)
    async with open_share_consumer(
        topic, bootstrap_servers=bs, group_id=group, metadata_max_age_ms=MAX_AGE_MS
    ) as consumer:
        # Generous: a loaded machine's first join and fetch.
        assert await _read(consumer, set(before), 60) == set(before)
        await consumer.commit()  # accepted: the new leader starts after them
        await cluster.start_node(3)
        await _until("broker 3 back in sync", admin, topic, lambda led, isr: 3 in isr)
        assert (await admin.elect_leaders([tp]))[tp] is None
        await _until("broker 3 leading", admin, topic, lambda led, isr: led == 3)
        await produce(bs, topic, after)
        got = await _read(consumer, set(after), 60)
    assert got >= set(after), (
        f"the share consumer read {len(got & set(after))} of {N} records in 60 s after "
        f"the leader moved from broker {old} to broker 3, which it had not seen "
        f"(metadata.max.age.ms {MAX_AGE_MS})"
    )


async def test_a_share_consumer_follows_its_leader_to_a_broker_it_had_not_seen() -> None:
    topic = fresh("moved-share")
    async with serve_cluster(3, **SETTINGS) as cluster:
        async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            # Broker 3 the preferred leader: it leads again once elected.
            await admin.create_topics([NewTopic(topic, replica_assignments={0: [3, 1, 2]})])
        await cluster.stop_node(3)
        bs = ",".join(f"{h}:{p}" for h, p in (cluster.node(n).address for n in (1, 2)))
        async with open_admin(bootstrap_servers=bs) as admin:
            await _flow(cluster, admin, topic)
