"""The fault tests' cluster: one brokerlite cluster in network namespaces per module
(``ns_cluster``), removed at the end however the module ends (a finalizer; a run
killed before it could clean up is cleaned up by the next one, see netlab)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import netlab
import pytest
from nscluster import NsCluster

from trafka.brokerlite.dev.zookeeper_server import zookeeper_available


@pytest.fixture(scope="module")
def ns_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsCluster]:
    why = netlab.available()
    if why is not None:
        pytest.skip(why)
    if not zookeeper_available():
        pytest.skip("ZooKeeper not found (apt-get install zookeeper)")
    with netlab.NetLab() as lab:
        cluster = NsCluster(lab, Path(tmp_path_factory.mktemp("faults")))
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
