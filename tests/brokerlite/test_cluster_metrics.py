"""``/metrics/cluster``: any broker of a cluster serves the whole cluster's group
lag and offline partitions (kafka_exporter's ``kafka_consumergroup_lag``,
``_lag_sum``, ``_current_offset``, ``_members``, and Kafka's
``kafka_controller_kafkacontroller_offlinepartitionscount``), while each
broker's ``/metrics`` keeps serving only its own part.

A real cluster (brokers in process, the worker's ZooKeeper); what the scrape
says is checked against what a client reads back: the partitions' log ends
(ListOffsets latest) and the group's committed offsets (OffsetFetch), and the
leaders the controller's metadata reports.
"""

from __future__ import annotations

import json
import re
import socket
import urllib.request
from typing import Any

import pytest
import trio
from cluster_helpers import CLUSTER_SETTINGS, run, until
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from trafka.brokerlite.cluster.zk_layout import broker_path
from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer

pytestmark = pytest.mark.timeout(150)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
OFFLINE = "kafka_controller_kafkacontroller_offlinepartitionscount"
ANSWERED = "trafka_cluster_broker_answered"


async def scrape(cluster: LocalCluster, node: int, path: str) -> Samples:
    address = cluster.node(node).metrics_address
    assert address is not None

    def get() -> str:
        url = f"http://{address[0]}:{address[1]}{path}"
        with urllib.request.urlopen(url, timeout=20) as answer:
            return str(answer.read().decode())

    text = await trio.to_thread.run_sync(get)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def of_group(found: Samples, name: str, group: str) -> dict[tuple[str, int], float]:
    return {
        (dict(labels)["topic"], int(dict(labels)["partition"])): value
        for (n, labels), value in found.items()
        if n == name and ("consumergroup", group) in labels
    }


async def console_lag(cluster: LocalCluster, node: int, group: str) -> dict[tuple[str, int], int]:
    """The lag table of the group's page, in a console bootstrapped on ``node`` alone."""
    from trafka.console import ConsoleSettings, serve_console

    settings = ConsoleSettings(
        client_config={"bootstrap.servers": cluster.node(node).bootstrap_servers},
        listen="127.0.0.1:0",
    )
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve_console, settings)

        def get() -> str:
            url = f"http://{host}:{port}/groups/{group}"
            with urllib.request.urlopen(url, timeout=20) as answer:
                return str(answer.read().decode())

        page = await trio.to_thread.run_sync(get)
        nursery.cancel_scope.cancel()
    table = page.split('<table id="lag">', 1)[1].split("</table>", 1)[0]
    lags = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1], re.DOTALL):
        cells = [
            re.sub(r"<[^>]+>", "", c).strip()
            for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)
        ]
        if cells[2] != "no commit":  # a partition assigned without a commit has no lag
            lags[cells[0], int(cells[1])] = int(cells[4].replace(",", ""))
    return lags


def serve(zk: str) -> Any:
    return serve_cluster(3, zookeeper_connect=zk, metrics_listen="127.0.0.1:0", **CLUSTER_SETTINGS)


def test_any_broker_serves_the_lag_of_a_group_another_coordinates(zk: str) -> None:
    async def test() -> None:
        async with serve(zk) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("lagged", 3, 2)])
                await admin.list_consumer_group_offsets("warm-up")  # the offsets topic
            view = cluster.node(1).broker.cluster
            await until(
                lambda: all(view.coordinator(f"g{i}") >= 0 for i in range(30)),
                "every group has a coordinator",
            )
            group = next(f"g{i}" for i in range(30) if view.coordinator(f"g{i}") == 2)
            async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                for i in range(60):
                    await producer.send("lagged", b"v%d" % i, partition=i % 3)
            async with open_consumer(
                "lagged", bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest"
            ) as consumer:
                async for _record in consumer:
                    break  # a member with its assignment
                await consumer.commit(
                    {TopicPartition("lagged", 0): 3, TopicPartition("lagged", 1): 20}
                )
                # Read back with a client: the log ends and the committed offsets.
                async with open_admin(bootstrap_servers=bs) as admin:
                    ends = await admin.list_offsets(
                        {TopicPartition("lagged", p): "latest" for p in range(3)}
                    )
                    committed = await admin.list_consumer_group_offsets(group)
                expected = {
                    (tp.topic, tp.partition): ends[tp][0] - offset  # type: ignore[index]
                    for tp, offset in committed.items()
                }
                assert set(expected) == {("lagged", 0), ("lagged", 1)}
                assert expected[("lagged", 0)] == 17
                for node in (1, 3):
                    whole = await scrape(cluster, node, "/metrics/cluster")
                    assert of_group(whole, "kafka_consumergroup_lag", group) == expected
                    assert of_group(whole, "kafka_consumergroup_current_offset", group) == {
                        (tp.topic, tp.partition): offset for tp, offset in committed.items()
                    }
                    assert whole["kafka_consumergroup_lag_sum", (
                        ("consumergroup", group), ("topic", "lagged"),
                    )] == sum(expected.values())  # fmt: skip
                    assert whole["kafka_consumergroup_members", (("consumergroup", group),)] == 1
                    assert {k: v for k, v in whole.items() if k[0] == ANSWERED} == {
                        (ANSWERED, (("node", str(n)),)): 1 for n in (1, 2, 3)
                    }
                    # The node's own /metrics still serves only its own groups.
                    own = await scrape(cluster, node, "/metrics")
                    assert of_group(own, "kafka_consumergroup_current_offset", group) == {}
                own = await scrape(cluster, 2, "/metrics")
                assert of_group(own, "kafka_consumergroup_current_offset", group)
                # The console shows the same lag whichever broker it starts from.
                for node in (1, 3):
                    assert await console_lag(cluster, node, group) == expected

                # A broker registered but unreachable: its part is explicitly
                # unknown, the rest is still served.
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", 0))
                    closed_port = probe.getsockname()[1]
                registration = {
                    "version": 5,
                    "host": "127.0.0.1",
                    "port": closed_port,
                    "jmx_port": -1,
                    "timestamp": "0",
                    "endpoints": [f"PLAINTEXT://127.0.0.1:{closed_port}"],
                    "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
                    "features": {},
                }
                zk_client = KazooClient(hosts=zk)
                await trio.to_thread.run_sync(zk_client.start)
                try:
                    await trio.to_thread.run_sync(
                        lambda: zk_client.create(
                            broker_path(9), json.dumps(registration).encode(), ephemeral=True
                        )
                    )
                    await until(
                        lambda: 9 in cluster.node(3).broker.cluster.image.brokers,
                        "node 3 sees broker 9",
                    )
                    whole = await scrape(cluster, 3, "/metrics/cluster")
                    assert whole[ANSWERED, (("node", "9"),)] == 0
                    assert whole[ANSWERED, (("node", "2"),)] == 1
                    assert of_group(whole, "kafka_consumergroup_lag", group) == expected
                finally:
                    await trio.to_thread.run_sync(zk_client.stop)

    run(test, 120)


def test_an_offline_partition_is_counted_from_a_broker_that_is_not_the_controller(
    zk: str,
) -> None:
    async def test() -> None:
        async with serve(zk) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("solo", 3, 1)])
                described = (await admin.describe_topics(["solo"]))["solo"]
            controller = cluster.node(1).broker.cluster.image.controller_id
            # One replica per partition, one partition per broker (Kafka's placement).
            leaders = {p.partition: p.leader for p in described.partitions}
            assert sorted(leaders.values()) == [1, 2, 3]
            dead = next(n for n in (1, 2, 3) if n != controller)
            here = next(n for n in (1, 2, 3) if n not in (controller, dead))
            assert (await scrape(cluster, here, "/metrics/cluster"))[OFFLINE, ()] == 0
            await cluster.stop_node(dead)
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:

                async def leaderless() -> set[tuple[str, int]]:
                    info = await admin.describe_topics(
                        await admin.list_topics(include_internal=True)
                    )
                    return {
                        (name, p.partition)
                        for name, topic in info.items()
                        for p in topic.partitions
                        if p.leader < 0
                    }

                with trio.fail_after(30):
                    while not (offline := await leaderless()):
                        await trio.sleep(0.05)
            lost = next(p for p, leader in leaders.items() if leader == dead)
            assert ("solo", lost) in offline
            await until(
                lambda: cluster.node(here).broker.cluster.image.states["solo", lost].leader < 0,
                "the non-controller's metadata has the partition offline",
            )
            whole = await scrape(cluster, here, "/metrics/cluster")
            assert whole[OFFLINE, ()] == len(offline)
            # Its own /metrics leaves the count to the controller, as Kafka's brokers do.
            assert (await scrape(cluster, here, "/metrics"))[OFFLINE, ()] == 0
            assert (await scrape(cluster, controller, "/metrics"))[OFFLINE, ()] == len(offline)

    run(test, 120)
