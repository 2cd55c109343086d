"""The placement journal kept in the cluster (``--journal topic``) on Apache
Kafka: three Kafka 3.9 brokers (the topic made by its ZooKeeper controller)
and three Kafka 4.x nodes (KRaft). test_proxy_ha runs its two proxies, one
killed -9, on both too.

The journal topic is compacted (Kafka's ``cleanup.policy=compact`` keeps the
last record per key), replicated on three brokers with ``min.insync.replicas``
2, and written with acks=all, so a placement survives one broker.
"""

from __future__ import annotations

import anyio
import pytest
from kafka_peers import KafkaCluster
from proxy_helpers import confluent_reports, create, fresh, misreported, placement
from test_proxy_durability import PARTITIONS

from trafka.proxy import proxy_in_thread
from trafka.sdk import open_admin
from trafka.sdk.partitioners import murmur2_partition

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.compat("proxy", "`--journal topic`; two proxies, one killed -9: exactly once"),
]


def test_the_topic_journal_on_kafka(kafka_cluster: KafkaCluster) -> None:
    """librdkafka's idempotent producer through a proxy journaling in Kafka:
    every record once on its murmur2 partition, every report read back, and
    the journal topic made as the proxy says (compacted, RF 3, min ISR 2),
    holding the producer's claim and placement windows."""
    servers = kafka_cluster.bootstrap_servers
    topic, journal = fresh("kj"), fresh("journal")
    create(servers, topic, PARTITIONS, 3, served=True)
    with proxy_in_thread(upstream=tuple(servers.split(",")), port=0, journal_topic=journal) as px:
        sends = [(b"j-%d" % i, b"key-%d" % (i % 31)) for i in range(600)]
        reports = confluent_reports(px, topic, sends, **{"enable.idempotence": True})
        assert px.statistics.routing.records_moved > 0
    records = placement(servers, topic, PARTITIONS)
    assert sorted(r.value for r in records) == sorted(v for v, _ in sends)
    assert all(r.partition == murmur2_partition(r.key, PARTITIONS) for r in records)
    problem = misreported(records, reports)
    assert problem is None, problem

    async def describe() -> tuple[dict[str, str], set[int]]:
        with anyio.fail_after(30):
            async with open_admin(bootstrap_servers=servers) as admin:
                configs = await admin.describe_configs(topics=[journal])
                info = await admin.describe_topics([journal])
        (partitions,) = (t.partitions for t in info.values())
        return configs[journal], {len(p.replicas) for p in partitions}

    configs, replicas = anyio.run(describe, backend="trio")
    assert (configs["cleanup.policy"], configs["min.insync.replicas"]) == ("compact", "2")
    assert replicas == {3}
    count = len(anyio.run(_partitions, servers, journal, backend="trio"))
    kinds = {r.key[:2] for r in placement(servers, journal, count)}
    assert kinds == {b"c:", b"p:"}


async def _partitions(servers: str, topic: str) -> list[int]:
    async with open_admin(bootstrap_servers=servers) as admin:
        (info,) = (await admin.describe_topics([topic])).values()
    return [p.partition for p in info.partitions]
