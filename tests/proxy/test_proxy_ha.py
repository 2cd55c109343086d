"""Two proxies behind one bootstrap list, sharing the placement journal kept in
the cluster (``--journal topic``), in front of three brokers with RF 3: three
brokerlite processes on real ZooKeeper, three Kafka 3.9 brokers (ZooKeeper) and
three Kafka 4.x nodes (KRaft). librdkafka's idempotent producers route keyed
records through them, the proxy carrying the most Produce requests is killed -9
holding a batch the (paused) brokers have not answered, and the producers fail
over to the other proxy, which takes their retries over from the journal. Read
back with read_committed: every record once, on its murmur2 partition, every
delivery report a success."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kafka_peers import KafkaCluster
from proxy_helpers import create, fresh
from test_proxy_durability import (
    PARTITIONS,
    PacedProducer,
    _free_ports,
    _kill_holding_batches,
    _produce_requests,
    check_exactly_once,
    wait_for,
)

from trafka.brokerlite.dev.local_cluster import ClusterProcesses
from trafka.brokerlite.dev.zookeeper_server import zookeeper_available

needs_zookeeper = pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper not found")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# Records per producer: a third acknowledged before the kill (each producer is
# then held until the victim has taken a batch the paused brokers cannot have
# answered, so the kill lands mid-traffic whatever the count), the rest
# through the survivor. test_proxy_durability's 12,000 cost twice the traffic
# and read-back for nothing more proven here.
RECORDS = 6_000


@contextmanager
def three_brokers(peer: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """(bootstrap servers, the broker processes, the ``--journal`` argument).

    brokerlite: a cluster of the test's own on the worker's shared ZooKeeper (a
    chroot of its own), the journal topic's default name. Kafka: the worker's
    shared cluster, resumed and serving again after the test, as it was found."""
    if peer == "brokerlite":
        cluster = ClusterProcesses(
            tmp_path / "cluster", 3, zookeeper_connect=request.getfixturevalue("zk")
        )
        try:
            cluster.start(timeout=180)  # a loaded machine starts processes slowly
            yield cluster.bootstrap_servers, list(cluster.procs.values()), "topic"
        finally:
            for node in list(cluster.procs):  # the data is thrown away: no clean stops
                cluster.kill(node)
            cluster.stop()
        return
    kafka: KafkaCluster = request.getfixturevalue(f"kafka{peer[0]}_cluster")
    try:
        yield kafka.bootstrap_servers, [n.proc for n in kafka.nodes], f"topic:{fresh('journal')}"
    finally:
        for node in kafka.nodes:
            node.signal(signal.SIGCONT)
        kafka.wait_serving(kafka.nodes)


def start_proxies(
    servers: str, journal: str, tmp_path: Path
) -> tuple[list[Any], list[str], list[Path], str]:
    """Two ``trafka proxy`` processes sharing the journal, both with it open:
    the processes, their metrics addresses, their logs, the bootstrap list."""
    ports = _free_ports(4)
    listens, metrics = ports[:2], [f"127.0.0.1:{p}" for p in ports[2:]]
    logs = [tmp_path / "proxy-0.log", tmp_path / "proxy-1.log"]
    proxies: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(2):
            command = [
                sys.executable, "-m", "trafka.tools.cli", "proxy",
                "--upstream", servers, "--listen", f"127.0.0.1:{listens[i]}",
                "--node-port-base", str(listens[i] + 100 * (i + 1)), "--no-announce",
                "--journal", journal, "--journal-takeover-grace-ms", "1000",
                "--metrics-listen", metrics[i],
            ]  # fmt: skip
            with logs[i].open("wb") as out:
                proxies.append(subprocess.Popen(command, stderr=out))
        for log in logs:
            wait_for("the proxy to listen", lambda: b"proxy on" in log.read_bytes() or None, 120)  # noqa: B023
            # The journal topic exists and the proxy has read it.
            wait_for(
                "the proxy's journal open",
                lambda: b"placement journal" in log.read_bytes() or None,  # noqa: B023
                60,
            )
    except BaseException:
        stop(proxies)
        raise
    return proxies, metrics, logs, ",".join(f"127.0.0.1:{p}" for p in listens)


def stop(proxies: list[subprocess.Popen[bytes]]) -> None:
    for proxy in proxies:
        if proxy.poll() is None:
            proxy.send_signal(signal.SIGKILL)
        proxy.wait(10)


@pytest.mark.compat("proxy", "`--journal topic`; two proxies, one killed -9: exactly once")
@pytest.mark.parametrize(
    "peer",
    [
        pytest.param("brokerlite", marks=needs_zookeeper),
        pytest.param("3.9", marks=needs_zookeeper),
        "4",
    ],
)
def test_two_proxies_one_killed_the_other_takes_over_exactly_once(
    peer: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    topics = (fresh("ha"), fresh("ha"))
    with three_brokers(peer, request, tmp_path) as (servers, brokers, journal):
        for topic in topics:
            create(servers, topic, PARTITIONS, 3, {"min.insync.replicas": "2"}, served=True)
        proxies, metrics, logs, bootstrap = start_proxies(servers, journal, tmp_path)
        try:
            # Two producers behind the one bootstrap list; each sticks to the
            # proxy it bootstrapped from until that proxy goes.
            third = RECORDS // 3
            producers = [PacedProducer(bootstrap, 0.03, third, topic, RECORDS) for topic in topics]
            for producer in producers:
                wait_for(
                    "a third acknowledged",
                    lambda: len(producer.reports) >= third or None,  # noqa: B023
                    120,
                )
            # The proxy carrying the most Produce requests is killed, holding a batch.
            carried = [_produce_requests(m) for m in metrics]
            victim = 0 if carried[0] >= carried[1] else 1
            taken = partial(_produce_requests, metrics[victim])
            _kill_holding_batches(proxies[victim], brokers, producers, taken)
            for producer in producers:
                producer.limit = None
            for producer in producers:
                producer.finish()  # every delivery report a success
            survivor = 1 - victim
            assert _produce_requests(metrics[survivor]) > carried[survivor]
            text = logs[survivor].read_bytes()
            assert b"taken over from proxy instance" in text, text[-3000:]
        finally:
            stop(proxies)
        for producer, topic in zip(producers, topics, strict=True):
            counts = check_exactly_once(
                servers, producer.reports, topic, RECORDS, isolation_level="read_committed"
            )
            doubled = {v: c for v, c in counts.items() if c > 1}
            assert doubled == {}, f"{len(doubled)} records written twice"
