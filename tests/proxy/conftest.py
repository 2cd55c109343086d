"""Fixtures of the proxy tests that run against one brokerlite.

* ``broker``: a brokerlite on a free loopback port, in a thread, one per test module.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path_factory.mktemp("proxy-broker"),
        group_initial_rebalance_delay_ms=0,
    ) as running:
        yield running
