"""tests/kafka_peers.py for the benchmarks: Apache Kafka's jars and brokers, one
copy (the tests'), loaded on first use so that a run against brokerlite never
imports it.

:func:`kafka_cluster` gives a benchmark its Kafka 4.x brokers: its own, or, when
:data:`RUNNING` names a running cluster of as many nodes, that one (the smoke
test, tests/bench/test_bench_smoke.py, passes its test session's shared
cluster, so a smoke line does not start a cluster of its own: tens of seconds
of CPU). :data:`RUNNING_ZK` does the same for bench/clients.py's Kafka 3.x
cluster on ZooKeeper (``--cluster``), and :data:`RUNNING_ZOOKEEPER` for the
ZooKeeper of brokerlite's clusters (bench/cluster.py, bench/proxy.py's
``--cluster N``, bench/clients.py's ``--cluster``; :func:`zookeeper_chroot`). A
measurement on brokers that other tests share measures nothing reliable: only
the smoke runs, whose figures are not judged, set them.

:func:`script_session` runs Kafka's tools (its perf clients) in one JVM, for a
smoke run: a JVM start each is most of what such a run of them costs.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

#: ``host:port,...`` of a running Kafka 4.x cluster, one address per node.
RUNNING = "TRAFKA_BENCH_KAFKA"
#: The process ids of that cluster's brokers (comma-separated), for their CPU time.
RUNNING_PIDS = "TRAFKA_BENCH_KAFKA_PIDS"
#: The same two for a running Kafka 3.x cluster on ZooKeeper (bench/clients.py --cluster).
RUNNING_ZK = "TRAFKA_BENCH_KAFKA3"
RUNNING_ZK_PIDS = "TRAFKA_BENCH_KAFKA3_PIDS"
#: ``host:port[/chroot]`` of a running ZooKeeper server, for brokerlite's clusters.
RUNNING_ZOOKEEPER = "TRAFKA_BENCH_ZOOKEEPER"
#: That server's log (``zookeeper.log``), where bench/cluster.py reads when it expired a session.
RUNNING_ZOOKEEPER_LOG = "TRAFKA_BENCH_ZOOKEEPER_LOG"
#: The folder of tests/java_harness.py's compiled classes, found by the smoke test in
#: its own temporary folder (a line's is another, where they would be compiled again).
JAVA_HARNESS = "TRAFKA_BENCH_JAVA_HARNESS"


def kafka_peers() -> Any:
    """The ``kafka_peers`` module of tests/."""
    tests = str(Path(__file__).resolve().parent.parent / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import kafka_peers as module

    return module


def script_session() -> Any:
    """One JVM (C1 only) that runs the main classes of Kafka's tools it is given,
    one after the other: tests/java_harness.py's ``ScriptSession``, its classes
    those :data:`JAVA_HARNESS` names, else compiled (or found) as the tests do."""
    kafka_peers()  # tests/ on the path
    import java_harness

    home = os.environ.get(JAVA_HARNESS, "")
    return java_harness.ScriptSession(home=Path(home) if home else None)


def zookeeper_chroot() -> str | None:
    """The connect string of a new, empty chroot on the running ZooKeeper that
    :data:`RUNNING_ZOOKEEPER` names (said on stderr), for one brokerlite
    cluster's brokers; None when it names none: the cluster then starts a
    private server (a JVM, a few seconds of CPU)."""
    running = os.environ.get(RUNNING_ZOOKEEPER, "")
    if not running:
        return None
    from kazoo.client import KazooClient

    path = f"/bench-{uuid.uuid4().hex[:12]}"
    client = KazooClient(hosts=running, timeout=10.0)
    client.start(timeout=30.0)
    try:
        client.create(path)
    finally:
        client.stop()
        client.close()
    print(f"ZooKeeper: the running server at {running} ({RUNNING_ZOOKEEPER})", file=sys.stderr)
    return running + path


def zookeeper_log() -> Path | None:
    """The log of the running ZooKeeper (:data:`RUNNING_ZOOKEEPER_LOG`), if named."""
    log = os.environ.get(RUNNING_ZOOKEEPER_LOG, "")
    return Path(log) if log else None


class Running(NamedTuple):
    bootstrap_servers: str
    pids: list[int]
    version: str


def running_cluster(
    nodes: int, env: str = RUNNING, pids_env: str = RUNNING_PIDS
) -> tuple[str, list[int]] | None:
    """The bootstrap servers and broker pids of the running cluster that ``env``
    names, when it has ``nodes`` nodes (said on stderr); else None."""
    running = os.environ.get(env, "")
    if not running or len(running.split(",")) != nodes:
        return None
    pids = [int(p) for p in os.environ.get(pids_env, "").split(",") if p]
    print(f"Apache Kafka: the running cluster at {running} ({env})", file=sys.stderr)
    return running, pids


@contextmanager
def kafka_cluster(
    root: Path, nodes: int = 1, jit: bool = True, **options: Any
) -> Iterator[Running]:
    """Kafka 4.x on ``nodes`` nodes (KRaft, combined mode): the running cluster
    :data:`RUNNING` names when it has that many nodes, else a new one in
    ``root`` (``jit`` and ``options`` as :class:`kafka_peers.KafkaCluster`'s),
    killed afterwards."""
    peers = kafka_peers()
    found = running_cluster(nodes)
    if found is not None:
        yield Running(*found, peers.KAFKA_4)
        return
    cluster = peers.KafkaCluster(peers.KAFKA_4, root, nodes=nodes, jit=jit, **options)
    try:
        cluster.start()
        pids = [node.proc.pid for node in cluster.nodes if node.proc is not None]
        yield Running(cluster.bootstrap_servers, pids, cluster.version)
    finally:
        cluster.stop()
