"""Fixtures that give tests Apache Kafka itself (a plugin loaded by tests/conftest.py).

* ``kafka3``: one Kafka 3.9 broker on the worker's shared ZooKeeper (a chroot of
  its own); ``kafka3_cluster``: three 3.9 brokers on it (a chroot of their own,
  RF 3 for the internal topics); ``kafka4``: one Kafka 4.x node in KRaft mode;
  ``kafka4_cluster``: three 4.x nodes (combined broker and controller, RF 3 for
  the internal topics).
  Each is started the first time a test of the pytest process (xdist worker)
  asks for it and shared by the rest of that process's tests: a test makes
  topics, groups and transactional ids of its own (``tests/sdk/sdk_brokers.fresh``),
  never stops the shared brokers, and uses ``make_kafka`` for faults.
* ``kafka``: parametrized over both (``3.9`` and ``4``), for what must hold on each;
  ``kafka_cluster`` likewise over the three-node clusters (module-scoped, so a
  module's tests run on one version, then on the other).
* ``peer``: parametrized over brokerlite (one in-process broker per pytest
  process, in a thread), Kafka 3.9 and Kafka 4.x: a :class:`Peer`, for the
  differential tests (the same test, the same answers, on each).
* ``make_kafka(version, nodes=1, **options)``: a private cluster for the test,
  killed after it (a test that kills a leader or restarts a node).

Every test using one of them carries the ``kafka`` marker. When a peer is
missing (no Java, the jars not fetched) those tests fail saying how to get it;
``TRAFKA_SKIP_KAFKA=1`` skips them instead, and the run's summary says how many.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import released_peers
from kafka_peers import KAFKA_3, KAFKA_4, SKIP_ENV, KafkaCluster, missing

from trafka.brokerlite.dev.zookeeper_server import ZooKeeperServer

#: The fixtures that start Apache Kafka; a test using any of them is marked ``kafka``.
KAFKA_FIXTURES = frozenset(
    {"kafka", "kafka3", "kafka3_cluster", "kafka4", "kafka4_cluster", "kafka_cluster", "make_kafka"}
)


class Peer(NamedTuple):
    """A broker a differential test runs against."""

    #: ``brokerlite``, ``3.9`` or ``4`` (the ``peer`` fixture's parameter)
    name: str
    bootstrap_servers: str
    #: the Apache Kafka cluster (None for brokerlite)
    kafka: KafkaCluster | None


_skipped: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kafka: runs against Apache Kafka's own brokers")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if (
            KAFKA_FIXTURES.intersection(getattr(item, "fixturenames", ()))
            or params.get("peer", "brokerlite") != "brokerlite"
        ):
            item.add_marker(pytest.mark.kafka)


def _require(version: str) -> None:
    """Skip (with the opt-out set) or fail (without it) when Kafka cannot run here."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: Apache Kafka tests skipped")
    why = missing("kafka", version)
    if why is not None:
        pytest.fail(why, pytrace=False)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and report.when == "setup" and SKIP_ENV in str(report.longrepr):
        _skipped.append(report.nodeid)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if os.environ.get(SKIP_ENV) == "1":
        terminalreporter.write_line(
            f"{SKIP_ENV}=1: the tests against Apache Kafka were skipped "
            f"({len(_skipped) or 'all'} in this process's report)"
        )


def _cluster(
    root: Path, zookeeper: ZooKeeperServer | None, version: str, nodes: int, **options: Any
) -> KafkaCluster:
    _require(version)
    if not version.startswith("3."):
        return KafkaCluster(version, root, nodes=nodes, **options)
    assert zookeeper is not None
    chroot = f"/kafka-{uuid.uuid4().hex[:12]}"
    return KafkaCluster(
        version, root, nodes=nodes, zookeeper=zookeeper.connect_string + chroot, **options
    )


def _shared(
    request: pytest.FixtureRequest, version: str, nodes: int, **options: Any
) -> Iterator[KafkaCluster]:
    """A session fixture's cluster: started, yielded, stopped (3.x on the
    worker's shared ZooKeeper, a chroot of its own)."""
    zookeeper = request.getfixturevalue("zookeeper") if version.startswith("3.") else None
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    root = factory.mktemp(f"kafka{version[0]}x{nodes}")
    with _cluster(root, zookeeper, version, nodes, **options) as cluster:
        if nodes > 1:  # a cluster only CONFINED's files use (tests/conftest.py)
            released_peers.hold(request.fixturename, cluster.stop)
        yield cluster
        released_peers.drop(request.fixturename)


#: ``kafka4_cluster``'s KRaft broker leases (Kafka's broker configs
#: ``broker.session.timeout.ms``, 9 s by default, and
#: ``broker.heartbeat.interval.ms``, 2 s): the active controller fences a node
#: whose heartbeats stopped, and moves its partitions' leadership, after 4 s of
#: silence instead of 9 s. The tests that kill a node (tests/spark's kill tests,
#: tests/proxy/test_proxy_kafka_faults.py) waited out those 9 s each; the
#: length is not what they test. Not shorter: a live node must miss eight
#: heartbeats in a row to be fenced by mistake, as brokerlite's clusters' live
#: brokers must stay silent for their 4 s ZooKeeper sessions on the same loaded
#: machines. The controller logs each fencing (tests/kafka_peers.py's log
#: settings), so a run can show whom it fenced.
KAFKA4_CLUSTER_LEASES = {"broker.session.timeout.ms": 4000, "broker.heartbeat.interval.ms": 500}


@pytest.fixture(scope="session")
def kafka3(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """One Kafka 3.9 broker (ZooKeeper mode), shared by this process's tests."""
    yield from _shared(request, KAFKA_3, 1)


@pytest.fixture(scope="session")
def kafka3_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """Three Kafka 3.9 brokers (ZooKeeper mode), shared by this process's tests."""
    yield from _shared(request, KAFKA_3, 3)


@pytest.fixture(scope="session")
def kafka4(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """One Kafka 4.x node (KRaft, combined mode), shared by this process's tests."""
    yield from _shared(request, KAFKA_4, 1)


@pytest.fixture(scope="session")
def kafka4_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """Three Kafka 4.x nodes (KRaft, combined mode), shared by this process's
    tests, with the broker leases of :data:`KAFKA4_CLUSTER_LEASES`."""
    yield from _shared(request, KAFKA_4, 3, config=KAFKA4_CLUSTER_LEASES)


@pytest.fixture(params=["3.9", "4"])
def kafka(request: pytest.FixtureRequest) -> KafkaCluster:
    """Kafka 3.9 (ZooKeeper) and Kafka 4.x (KRaft), one node each, in turn."""
    name = "kafka3" if request.param == "3.9" else "kafka4"
    cluster: KafkaCluster = request.getfixturevalue(name)
    return cluster


@pytest.fixture(scope="module", params=["3.9", "4"])
def kafka_cluster(request: pytest.FixtureRequest) -> KafkaCluster:
    """Three Kafka 3.9 brokers (ZooKeeper) and three Kafka 4.x nodes (KRaft), in turn."""
    name = "kafka3_cluster" if request.param == "3.9" else "kafka4_cluster"
    cluster: KafkaCluster = request.getfixturevalue(name)
    return cluster


#: The Kafka peers' internal topic sizes (KafkaCluster._defaults), for a
#: brokerlite compared with them: Metadata lists its internal topics too.
INTERNAL_TOPIC_SIZES = {
    "offsets_topic_num_partitions": 5,
    "transaction_state_log_num_partitions": 5,
    "share_coordinator_state_topic_num_partitions": 3,
}


@pytest.fixture(scope="session")
def brokerlite_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One brokerlite per pytest process, in a thread: its bootstrap servers."""
    from trafka.brokerlite.server import broker_in_thread

    data = tmp_path_factory.mktemp("brokerlite-peer")
    # The Kafka peers' settings where they show in answers (KafkaCluster._defaults).
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=data,
        group_initial_rebalance_delay_ms=0,
        log_segment_bytes=16 << 20,
        **INTERNAL_TOPIC_SIZES,
    ) as running:
        yield running.bootstrap_servers


@pytest.fixture(params=["brokerlite", "3.9", "4"])
def peer(request: pytest.FixtureRequest) -> Peer:
    """brokerlite, Kafka 3.9 and Kafka 4.x (one node each), in turn."""
    if request.param == "brokerlite":
        return Peer("brokerlite", request.getfixturevalue("brokerlite_peer"), None)
    cluster: KafkaCluster = request.getfixturevalue(
        "kafka3" if request.param == "3.9" else "kafka4"
    )
    return Peer(request.param, cluster.bootstrap_servers, cluster)


@pytest.fixture
def make_kafka(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., KafkaCluster]]:
    """``make_kafka(version=KAFKA_4, nodes=1, start=True, **options)``: a private
    cluster (see :class:`kafka_peers.KafkaCluster`), killed after the test."""
    made: list[KafkaCluster] = []

    def make(
        version: str = KAFKA_4, nodes: int = 1, start: bool = True, **options: Any
    ) -> KafkaCluster:
        zookeeper = request.getfixturevalue("zookeeper") if version.startswith("3.") else None
        cluster = _cluster(tmp_path / f"kafka-{len(made)}", zookeeper, version, nodes, **options)
        made.append(cluster)
        if start:
            cluster.start()
        return cluster

    yield make
    for cluster in made:
        cluster.stop()
