"""The placement journal kept in the cluster (``--journal topic``) on Apache
Kafka 4.x (three KRaft nodes), and test_proxy_ha's claim with Kafka behind:
two proxies behind one bootstrap list sharing that journal, the one carrying
the traffic killed -9 with a batch taken and unanswered, the other taking the
producers' retries over from the journal, every record once.

The journal topic is compacted (Kafka's ``cleanup.policy=compact`` keeps the
last record per key), replicated on three brokers with ``min.insync.replicas``
2, and written with acks=all, so a placement survives one broker.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest
from kafka_peers import KafkaCluster
from proxy_helpers import confluent_reports, create, fresh, misreported, placement
from test_proxy_durability import (
    PARTITIONS,
    RECORDS,
    PacedProducer,
    _free_ports,
    _produce_requests,
    check_exactly_once,
    wait_for,
)
from test_proxy_ha import _kill_holding_batches

from trafka.proxy import proxy_in_thread
from trafka.sdk import open_admin
from trafka.sdk.partitioners import murmur2_partition

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.compat("proxy", "`--journal topic`; two proxies, one killed -9: exactly once"),
]


def test_the_topic_journal_on_kafka(kafka4_cluster: KafkaCluster) -> None:
    """librdkafka's idempotent producer through a proxy journaling in Kafka:
    every record once on its murmur2 partition, every report read back, and
    the journal topic made as the proxy says (compacted, RF 3, min ISR 2),
    holding the producer's claim and placement windows."""
    servers = kafka4_cluster.bootstrap_servers
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


@pytest.mark.slow
def test_two_proxies_on_kafka_one_killed_the_other_takes_over_exactly_once(
    kafka4_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """test_proxy_ha's claim, Kafka behind: the proxy carrying the most Produce
    requests is killed -9 holding a batch the (paused) brokers have not
    answered; the producers fail over to the other proxy, which takes their
    retries over from the journal. Read back with read_committed: every record
    once, on its murmur2 partition, every delivery report a success."""
    servers = kafka4_cluster.bootstrap_servers
    topics = (fresh("ha"), fresh("ha"))
    journal = fresh("journal")
    for topic in topics:
        create(servers, topic, PARTITIONS, 3, served=True)
    proxies: list[subprocess.Popen[bytes]] = []
    try:
        ports = _free_ports(4)
        listens, metrics = ports[:2], [f"127.0.0.1:{p}" for p in ports[2:]]
        logs = [tmp_path / "proxy-0.log", tmp_path / "proxy-1.log"]
        for i in range(2):
            command = [
                sys.executable, "-m", "trafka.tools.cli", "proxy",
                "--upstream", servers, "--listen", f"127.0.0.1:{listens[i]}",
                "--node-port-base", str(listens[i] + 100 * (i + 1)), "--no-announce",
                "--journal", f"topic:{journal}", "--journal-takeover-grace-ms", "1000",
                "--metrics-listen", metrics[i],
            ]  # fmt: skip
            with logs[i].open("wb") as out:
                proxies.append(subprocess.Popen(command, stderr=out))
        for log in logs:
            wait_for(
                "the proxy's journal open",
                lambda: b"placement journal" in log.read_bytes() or None,  # noqa: B023
                60,
            )
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in listens)
        third = RECORDS // 3
        producers = [PacedProducer(bootstrap, 0.03, third, topic) for topic in topics]
        for producer in producers:
            wait_for(
                "a third acknowledged",
                lambda: len(producer.reports) >= third or None,  # noqa: B023
                120,
            )
        carried = [_produce_requests(m) for m in metrics]
        victim = 0 if carried[0] >= carried[1] else 1
        # The brokers are paused (SIGSTOP) only while the proxy takes a request.
        nodes = SimpleNamespace(procs={n.node_id: n.proc for n in kafka4_cluster.nodes})
        _kill_holding_batches(
            proxies[victim], nodes, producers, partial(_produce_requests, metrics[victim])
        )  # type: ignore[arg-type]
        for producer in producers:
            producer.finish()
        survivor = 1 - victim
        assert _produce_requests(metrics[survivor]) > carried[survivor]
        text = logs[survivor].read_bytes()
        assert b"taken over from proxy instance" in text, text[-3000:]
        for producer, topic in zip(producers, topics, strict=True):
            counts = check_exactly_once(
                servers, producer.reports, topic, isolation_level="read_committed"
            )
            doubled = {v: c for v, c in counts.items() if c > 1}
            assert doubled == {}, f"{len(doubled)} records written twice"
    finally:
        for proxy in proxies:
            if proxy.poll() is None:
                proxy.send_signal(signal.SIGKILL)
            proxy.wait(10)
        for node in kafka4_cluster.nodes:
            node.signal(signal.SIGCONT)
        # The shared cluster serves the next test as it found it.
        kafka4_cluster.wait_serving(kafka4_cluster.nodes)
