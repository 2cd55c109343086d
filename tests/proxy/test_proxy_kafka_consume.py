"""The consume path through the proxy in front of Apache Kafka: three Kafka
3.9 brokers (ZooKeeper mode, whose group coordinator serves the classic
protocol only: KIP-848's needs KRaft's new coordinator) and three Kafka 4.x nodes (KRaft), each
module's tests on one, then on the other. Group consumers of the classic
protocol (kafka-python) and, on 4.x, of KIP-848's (librdkafka's and trafka's
``group.protocol=consumer``, whose ConsumerGroupHeartbeat goes to the
coordinator FindCoordinator named) read every record through the proxy; and
Kafka's answers that name brokers (Metadata, FindCoordinator, DescribeCluster,
at the newest versions the proxy lets clients use) name only the proxy's
listeners when they reach the client.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import anyio
import confluent_kafka
import kafka
import pytest
from kafka_peers import KafkaCluster
from proxy_helpers import call, confluent_produce, create, fresh, placement

from trafka.codec import protocol
from trafka.codec.messages import k03_metadata as mm
from trafka.codec.messages import k10_find_coordinator as fm
from trafka.codec.messages import k18_api_versions as av
from trafka.codec.messages import k60_describe_cluster as dm
from trafka.proxy import RunningProxy, proxy_in_thread
from trafka.sdk import open_consumer

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.compat(
        "proxy", "group consumers (classic; KIP-848 on 4.x) and broker addresses rewritten"
    ),
]

PARTITIONS = 6
N = 300


@pytest.fixture(scope="module")
def proxy(kafka_cluster: KafkaCluster) -> Iterator[RunningProxy]:
    upstream = tuple(kafka_cluster.bootstrap_servers.split(","))
    with proxy_in_thread(upstream=upstream, port=0) as running:
        yield running


def _proxy_ports(proxy: RunningProxy) -> set[int]:
    return {port for _, port in proxy.statistics.nodes.values()}


def _kafka_ports(cluster: KafkaCluster) -> set[int]:
    return {port for node in cluster.nodes for port in node.ports.values()}


def test_group_consumers_read_everything_through_the_proxy(
    kafka_cluster: KafkaCluster, proxy: RunningProxy
) -> None:
    topic = fresh("kc")
    create(kafka_cluster.bootstrap_servers, topic, PARTITIONS, 3, served=True)
    confluent_produce(proxy.bootstrap_servers, topic, N)
    wanted = sorted(r.value for r in placement(kafka_cluster.bootstrap_servers, topic, PARTITIONS))
    assert len(wanted) == N

    # The classic protocol (JoinGroup, SyncGroup), kafka-python.
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=proxy.bootstrap_servers,
        group_id=fresh("classic"),
        auto_offset_reset="earliest",
    )
    try:
        # A generous deadline: the first group of a fresh cluster waits for
        # Kafka to make __consumer_offsets (50 partitions, RF 3).
        got: list[bytes] = []
        deadline = time.monotonic() + 180
        while len(got) < N and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        ports = {b.port for b in consumer._client.cluster.brokers()}
        coordinator = int(str(consumer._coordinator.coordinator_id).rsplit("-", 1)[-1])
    finally:
        consumer.close()
    assert sorted(got) == wanted
    assert ports == _proxy_ports(proxy) and len(ports) == 3
    assert coordinator in proxy.statistics.nodes
    if kafka_cluster.version.startswith("3."):
        return  # a ZooKeeper-mode broker serves no ConsumerGroupHeartbeat

    # KIP-848's protocol (ConsumerGroupHeartbeat), librdkafka.
    rd = confluent_kafka.Consumer(
        {
            "bootstrap.servers": proxy.bootstrap_servers,
            "group.id": fresh("kip848"),
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    values: list[bytes] = []
    try:
        rd.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(values) < N:
            assert time.monotonic() < deadline, f"only {len(values)} of {N} consumed"
            message = rd.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                values.append(message.value())
        assert rd.commit(asynchronous=False)
    finally:
        rd.close()
    assert sorted(values) == wanted

    # KIP-848's protocol, trafka's SDK.
    async def sdk() -> list[bytes]:
        out: list[bytes] = []
        with anyio.fail_after(60):
            async with open_consumer(
                topic,
                bootstrap_servers=proxy.bootstrap_servers,
                group_id=fresh("sdk848"),
                group_protocol="consumer",
                auto_offset_reset="earliest",
            ) as consumer:
                while len(out) < N:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        out.extend(r.value for r in records)
        return out

    assert sorted(anyio.run(sdk, backend="trio")) == wanted


def _answer(sock: socket.socket, key: int, body: Any, versions: dict[int, int]) -> Any:
    return call(sock, key, versions[key], body)


def test_kafkas_answers_name_only_the_proxy(
    kafka_cluster: KafkaCluster, proxy: RunningProxy
) -> None:
    """Metadata, FindCoordinator (a group's and a transaction's, batched) and
    DescribeCluster, asked through the proxy at the newest version its
    ApiVersions answer allows: every broker address in them is one of the
    proxy's listeners, one per Kafka node, none of Kafka's own ports."""
    topic = fresh("kc-addr")
    create(kafka_cluster.bootstrap_servers, topic, PARTITIONS, 3, served=True)
    with socket.create_connection(proxy.address, timeout=30) as sock:
        sock.settimeout(30)
        offered = call(
            sock,
            18,
            3,
            av.ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
        versions = {k.api_key: k.max_version for k in offered.api_keys}
        for key in (1, 3, 10, 60):
            assert versions[key] <= protocol.api(key).max_version
        # Fetch keeps Kafka's versions: its KIP-951 node_endpoints are rewritten
        # (test_proxy_kafka_leader_moves.py shows them naming the proxy).
        assert versions[1] >= 16
        metadata = _answer(
            sock,
            3,
            mm.MetadataRequest(topics=[mm.MetadataRequest.MetadataRequestTopic(name=topic)]),
            versions,
        )
        # Kafka makes a coordinator's topic at the first FindCoordinator that needs
        # it (COORDINATOR_NOT_AVAILABLE meanwhile): asked again, as clients do.
        for _ in range(100):
            found = [
                _answer(
                    sock,
                    10,
                    fm.FindCoordinatorRequest(key_type=kind, coordinator_keys=[key]),
                    versions,
                )
                for kind, key in ((0, fresh("g")), (1, fresh("t")))
            ]
            coordinators = [c for answer in found for c in answer.coordinators]
            if all(c.error_code == 0 for c in coordinators):
                break
            time.sleep(0.2)
        cluster = _answer(sock, 60, dm.DescribeClusterRequest(), versions)
    served = {(h, p) for h, p in proxy.statistics.nodes.values()}
    named = {(b.host, b.port) for b in metadata.brokers}
    named |= {(c.host, c.port) for c in coordinators}
    named |= {(b.host, b.port) for b in cluster.brokers}
    assert named == served and len(served) == 3
    assert not {p for _, p in named} & _kafka_ports(kafka_cluster)
    assert {b.node_id for b in metadata.brokers} == {b.broker_id for b in cluster.brokers}
    (described,) = metadata.topics
    assert len(described.partitions) == PARTITIONS
    assert all(len(p.replica_nodes) == 3 for p in described.partitions)
    assert [c.error_code for c in coordinators] == [0, 0]
