"""The proxy in front of a 3-broker brokerlite cluster (ZooKeeper mode), real clients.

Producers that do not hash keys like Java (confluent-kafka with librdkafka's
partitioners, trafka's SDK with librdkafka's CRC32 one) write keyed records through the
proxy; every partition's leader is on one of three brokers, so most requests
are split across brokers. What lands where is read straight from the cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import confluent_kafka
import pytest
import trio
from proxy_helpers import create, fresh, placement

from trafka.brokerlite.local_cluster import LocalCluster, serve_cluster
from trafka.proxy import RunningProxy, serve_proxy
from trafka.sdk import open_producer
from trafka.sdk.partitioners import murmur2_partition

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 6
KEYS = 31


def run(test: Callable[[LocalCluster, RunningProxy], Any], zk: str) -> None:
    async def main() -> None:
        with trio.fail_after(180):
            async with (
                serve_cluster(3, zookeeper_connect=zk) as cluster,
                serve_proxy(upstream=tuple(cluster.bootstrap_servers.split(",")), port=0) as proxy,
            ):
                await test(cluster, proxy)

    trio.run(main)


def confluent_send(servers: str, topic: str, n: int, prefix: bytes, **settings: Any) -> None:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": servers,
            "linger.ms": 50,  # batches of many keys: most hold records of several brokers
            "enable.idempotence": False,
            "partitioner": "consistent_random",  # CRC32, not murmur2
            **settings,
        }
    )
    failures: list[Any] = []
    for i in range(n):
        producer.produce(
            topic,
            value=b"%s-%d" % (prefix, i),
            key=b"key-%d" % (i % KEYS),
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )
    assert producer.flush(60) == 0
    assert failures == []


def check(records: list[Any], n: int, prefix: bytes, *, ordered: bool = True) -> None:
    """Every keyed record on its murmur2 partition, none lost or doubled, per-key
    order kept (``ordered``: the producer sent each key to one partition, so on
    one connection; one that scatters a key has no order to keep)."""
    mine = [r for r in records if r.value.startswith(prefix + b"-")]
    assert Counter(r.value for r in mine) == Counter(b"%s-%d" % (prefix, i) for i in range(n))
    misplaced = [r for r in mine if r.partition != murmur2_partition(r.key, PARTITIONS)]
    assert misplaced == []
    for key in {r.key for r in mine} if ordered else ():
        sequence = [
            int(r.value.split(b"-")[1])
            for r in sorted(mine, key=lambda r: r.offset)
            if r.key == key
        ]
        assert sequence == sorted(sequence), key


async def read_all(cluster: LocalCluster, topic: str) -> list[Any]:
    return await trio.to_thread.run_sync(placement, cluster.bootstrap_servers, topic, PARTITIONS)


def leaders_spread(proxy: RunningProxy) -> bool:
    return len(proxy.statistics.nodes) == 3


def test_keyed_records_land_on_their_murmur2_partition_across_brokers(zk: str) -> None:
    async def test(cluster: LocalCluster, proxy: RunningProxy) -> None:
        topic = fresh("cluster")
        await trio.to_thread.run_sync(create, proxy.bootstrap_servers, topic, PARTITIONS)

        await trio.to_thread.run_sync(confluent_send, proxy.bootstrap_servers, topic, 1500, b"c")
        # trafka's SDK, placing keys as librdkafka's default does (CRC32).
        async with open_producer(
            bootstrap_servers=proxy.bootstrap_servers,
            partitioner="consistent_random",
            enable_idempotence=False,
            acks=1,
            linger_ms=50,
        ) as producer:
            futures = [
                await producer.send(topic, b"s-%d" % i, key=b"key-%d" % (i % KEYS))
                for i in range(1500)
            ]
            await producer.flush()
            for future in futures:
                await future

        records = await read_all(cluster, topic)
        assert len(records) == 3000
        check(records, 1500, b"c")
        check(records, 1500, b"s")
        routing = proxy.statistics.routing
        # The cluster's three brokers all lead partitions, and requests were split.
        assert leaders_spread(proxy)
        assert routing.requests_split > 0 and routing.records_moved > 0
        assert routing.batches_untouched_other_leader == 0
        assert routing.parts_failed == 0

    run(test, zk)


def test_acks_0_records_are_routed_across_brokers(zk: str) -> None:
    async def test(cluster: LocalCluster, proxy: RunningProxy) -> None:
        topic = fresh("cluster-acks0")
        await trio.to_thread.run_sync(create, proxy.bootstrap_servers, topic, PARTITIONS)
        await trio.to_thread.run_sync(
            lambda: confluent_send(
                proxy.bootstrap_servers, topic, 600, b"z", acks=0, partitioner="random"
            )
        )
        # Nothing is answered: wait until every record is in the cluster.
        with trio.fail_after(30):
            while len(records := await read_all(cluster, topic)) < 600:
                await trio.sleep(0.2)
        check(records, 600, b"z", ordered=False)
        assert proxy.statistics.routing.requests_split > 0

    run(test, zk)
