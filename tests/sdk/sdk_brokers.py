"""Shared set-up of the SDK tests that run against a real in-process brokerlite."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread

_names = itertools.count()


def fresh(prefix: str = "t") -> str:
    """A name no other test of this run uses (topics, groups, transactional ids)."""
    return f"{prefix}-{next(_names)}"


def module_broker(
    tmp_path_factory: pytest.TempPathFactory, name: str, **settings: Any
) -> Iterator[RunningBroker]:
    """A brokerlite on 127.0.0.1 for a module's fixture (``yield from`` it); groups
    rebalance at once unless ``settings`` say otherwise."""
    settings.setdefault("group_initial_rebalance_delay_ms", 0)
    data = tmp_path_factory.mktemp(name)
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=data, **settings) as running:
        yield running
