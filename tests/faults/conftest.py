"""The fault tests' clusters: one brokerlite cluster in network namespaces per module
(``ns_cluster``, on a ZooKeeper ensemble of three, each broker's log dir on a slowfs) and one of Apache Kafka 3.9 (``kafka_ns_cluster``, the control),
removed at the end however the module ends (a finalizer; a run killed before it
could clean up is cleaned up by the next one, see netlab).

Both run with the shorter timeouts of :data:`SHORT` (``make faults``, run.py, keeps
nscluster's): each schedule holds its fault past the timeout it is about, so the
same faults act in less time. And with a first group join that does not wait for
more members (``group.initial.rebalance.delay.ms``, 3 s by default) and internal
topics of a few partitions (made on first use, 50 by default), which cost the
first transactional run some 10 s."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import netlab
import pytest
import slowfs
from kafka_fixtures import _require
from kafka_peers import KAFKA_3
from nscluster import KafkaNsCluster, NsCluster

from trafka.brokerlite.dev.zookeeper_server import zookeeper_available

#: The fault tests' timeouts: ZooKeeper's session and the replica lag 4 s (6 s in
#: ``make faults``), trafka's clients' request timeout 5 s (10 s).
SHORT: dict[str, object] = {
    "zookeeper.session.timeout.ms": 4000,
    "replica.lag.time.max.ms": 4000,
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 6,
    "transaction.state.log.num.partitions": 6,
}
SHORT_CLIENT_TIMEOUT_MS = 5000
#: The workload's pace: each producer sends a record every 50 ms (every 10 ms in
#: ``make faults``). At one record every 10 ms each record was a request of its own
#: (``linger.ms`` 5), and the clients, the brokers' appends and their replication
#: were most of the module's CPU; 20 records a second per producer still keep every
#: partition written throughout each fault (the checker's unavailability figures,
#: and the cut schedules' effect, read the acknowledgements' times).
SHORT_CLIENT_PACE_S = 0.05


def _cluster(
    kind: type[NsCluster], root: Path, zookeepers: int = 1, disks: bool = False
) -> Iterator[NsCluster]:
    why = netlab.available() or (slowfs.available() if disks else None)
    if why is not None:
        pytest.skip(why)
    if not zookeeper_available():
        pytest.skip("ZooKeeper not found (apt-get install zookeeper)")
    with netlab.NetLab() as lab:
        cluster = kind(lab, root, settings=SHORT, zookeepers=zookeepers, disks=disks,
                       client_timeout_ms=SHORT_CLIENT_TIMEOUT_MS,
                       client_pace_s=SHORT_CLIENT_PACE_S)  # fmt: skip
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()


@pytest.fixture(scope="module")
def ns_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsCluster]:
    yield from _cluster(
        NsCluster, Path(tmp_path_factory.mktemp("faults")), zookeepers=3, disks=True
    )


@pytest.fixture(scope="module")
def kafka_ns_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsCluster]:
    _require(KAFKA_3)
    yield from _cluster(KafkaNsCluster, Path(tmp_path_factory.mktemp("faults-kafka")))
