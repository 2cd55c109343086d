"""Fixtures of the command-line tests: a brokerlite on its own thread per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trafka.brokerlite import RunningBroker, broker_in_thread


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    """A brokerlite on 127.0.0.1 for the module's commands; groups rebalance at once."""
    data = tmp_path_factory.mktemp("cli-broker")
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=data, group_initial_rebalance_delay_ms=0
    ) as running:
        yield running
