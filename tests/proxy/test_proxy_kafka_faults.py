"""kill -9 of an Apache Kafka 4.x node (KRaft, combined broker and controller)
under routed idempotent traffic: test_proxy_durability's claim with Kafka
behind the proxy. librdkafka's idempotent producer (acks=all) writes keyed
records through the proxy to a topic of RF 3 and ``min.insync.replicas`` 2;
one node, leading some of its partitions, is killed and started again
meanwhile. Every acknowledged record is read back from Kafka exactly once,
on its murmur2 partition, in its key's order.

The shared three-node cluster is used: the node killed is started again, and
serving, before the test ends.
"""

from __future__ import annotations

import anyio
import pytest
from kafka_peers import KafkaCluster
from proxy_helpers import create, fresh
from test_proxy_durability import PARTITIONS, RECORDS, PacedProducer, check_exactly_once, wait_for

from trafka.proxy import proxy_in_thread
from trafka.sdk import open_admin

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.compat(
        "proxy", "kill -9 of a leader under routed idempotent traffic: exactly once"
    ),
]


def _leaders(servers: str, topic: str) -> dict[int, int]:
    async def go() -> dict[int, int]:
        with anyio.fail_after(30):
            async with open_admin(bootstrap_servers=servers) as admin:
                (info,) = (await admin.describe_topics([topic])).values()
        return {p.partition: p.leader for p in info.partitions}

    result: dict[int, int] = anyio.run(go, backend="trio")
    return result


def test_idempotent_routing_is_exactly_once_across_kill_9_of_a_kafka_leader(
    kafka4_cluster: KafkaCluster,
) -> None:
    servers = kafka4_cluster.bootstrap_servers
    topic = fresh("leader-killed")

    create(servers, topic, PARTITIONS, 3, {"min.insync.replicas": "2"}, served=True)
    victim = _leaders(servers, topic)[0]
    try:
        with proxy_in_thread(upstream=tuple(servers.split(",")), port=0) as px:
            producer = PacedProducer(px.bootstrap_servers, 0.03, topic=topic)
            wait_for("a third sent", lambda: producer.sent > RECORDS // 3 or None, 60)
            kafka4_cluster.node(victim).kill()
            wait_for("two thirds sent", lambda: producer.sent > 2 * RECORDS // 3 or None, 120)
            kafka4_cluster.start_node(victim)
            producer.finish()
            assert px.statistics.routing.records_moved > 0
    finally:
        if not kafka4_cluster.node(victim).running:
            kafka4_cluster.start_node(victim)
    # Partition 0's leader was the node killed: its leadership moved.
    counts = check_exactly_once(servers, producer.reports, topic)
    doubled = [v for v, c in counts.items() if c > 1]
    assert doubled == [], f"{len(doubled)} records written twice"
