"""Two proxies behind one bootstrap list, sharing the placement journal kept in
the cluster (``--journal topic``), in front of three broker processes with
real ZooKeeper: librdkafka's idempotent producers route keyed records through
them, the proxy carrying them is killed -9 mid-stream with a batch taken and
unanswered, and the producers fail over to the other proxy, which takes their
retries over from the journal. Read back with read_committed: every record
once, on its murmur2 partition, every delivery report a success."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from test_proxy_durability import (
    PARTITIONS,
    RECORDS,
    TOPIC,
    PacedProducer,
    _free_ports,
    _produce_requests,
    check_exactly_once,
    wait_for,
)

from trafka.brokerlite.dev.local_cluster import ClusterProcesses
from trafka.brokerlite.dev.zookeeper_server import zookeeper_available

TOPICS = (TOPIC, f"{TOPIC}-b")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper not found"),
]


def test_two_proxies_one_killed_the_other_takes_over_exactly_once(tmp_path: Path, zk: str) -> None:
    # The worker's shared ZooKeeper (a chroot of its own): a proxy is killed, not it.
    cluster = ClusterProcesses(tmp_path, 3, zookeeper_connect=zk)
    cluster.start()
    proxies: list[subprocess.Popen[bytes]] = []
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        created = admin.create_topics(
            [
                NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})
                for topic in TOPICS
            ]
        )
        for future in created.values():
            future.result(30)
        ports = _free_ports(4)
        listens = ports[:2]
        metrics = [f"127.0.0.1:{p}" for p in ports[2:]]
        node_bases = [listens[0] + 100, listens[1] + 200]
        logs = [tmp_path / "proxy-0.log", tmp_path / "proxy-1.log"]
        for i in range(2):
            command = [
                sys.executable, "-m", "trafka.tools.cli", "proxy",
                "--upstream", cluster.bootstrap_servers, "--listen", f"127.0.0.1:{listens[i]}",
                "--node-port-base", str(node_bases[i]), "--no-announce",
                "--journal", "topic", "--journal-takeover-grace-ms", "1000",
                "--metrics-listen", metrics[i],
            ]  # fmt: skip
            with logs[i].open("wb") as out:
                proxies.append(subprocess.Popen(command, stderr=out))
        for log in logs:
            wait_for("the proxy to listen", lambda: b"proxy on" in log.read_bytes() or None, 30)  # noqa: B023
        # The journal topic exists and both proxies have read it.
        for log in logs:
            wait_for(
                "the proxy's journal open",
                lambda: b"placement journal" in log.read_bytes() or None,  # noqa: B023
                60,
            )

        bootstrap = ",".join(f"127.0.0.1:{p}" for p in listens)
        # Two producers behind the one bootstrap list; each sticks to the proxy it
        # bootstrapped from until that proxy goes.
        third = RECORDS // 3
        producers = [PacedProducer(bootstrap, 0.03, third, topic) for topic in TOPICS]
        for producer in producers:
            wait_for(
                "a third acknowledged",
                lambda: len(producer.reports) >= third or None,  # noqa: B023
                120,
            )
        # The proxy carrying the most Produce requests is killed, holding a batch.
        carried = [_produce_requests(m) for m in metrics]
        victim = 0 if carried[0] >= carried[1] else 1
        _kill_holding_batches(
            proxies[victim], cluster, producers, partial(_produce_requests, metrics[victim])
        )
        for producer in producers:
            producer.finish()  # every delivery report a success

        survivor = 1 - victim
        assert _produce_requests(metrics[survivor]) > carried[survivor]
        text = logs[survivor].read_bytes()
        assert b"taken over from proxy instance" in text, text[-3000:]
        for producer, topic in zip(producers, TOPICS, strict=True):
            counts = check_exactly_once(
                cluster.bootstrap_servers,
                producer.reports,
                topic,
                isolation_level="read_committed",
            )
            doubled = {v: c for v, c in counts.items() if c > 1}
            assert doubled == {}, f"{len(doubled)} records written twice"
    finally:
        for proxy in proxies:
            if proxy.poll() is None:
                proxy.send_signal(signal.SIGKILL)
            proxy.wait(10)
        cluster.stop()


def _kill_holding_batches(
    proxy: subprocess.Popen[bytes],
    cluster: ClusterProcesses,
    producers: list[PacedProducer],
    taken: Callable[[], int],
) -> None:
    """kill -9 ``proxy`` while it holds a batch the brokers have not answered
    (as test_proxy_durability's, for several producers): each is held until
    all it produced is acknowledged, the brokers are paused (SIGSTOP), the
    producers go on; once the proxy took a Produce request, it is killed, the
    brokers resumed, and the producers run to the end."""
    for producer in producers:
        producer.limit = producer.sent
        wait_for(
            "every record produced so far acknowledged",
            lambda: (producer.held and len(producer.reports) == producer.sent) or None,  # noqa: B023
            120,
        )
    brokers = [p for p in cluster.procs.values() if p.poll() is None]
    for broker in brokers:
        broker.send_signal(signal.SIGSTOP)
    try:
        before = taken()
        for producer in producers:
            producer.limit = None
        wait_for("the proxy to take a Produce request", lambda: taken() > before or None, 60)
        proxy.send_signal(signal.SIGKILL)
        proxy.wait(10)
    finally:
        for broker in brokers:
            broker.send_signal(signal.SIGCONT)
