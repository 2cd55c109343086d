"""tests/kafka_peers.py for the benchmarks: Apache Kafka's jars and brokers, one
copy (the tests'), loaded on first use so that a run against brokerlite never
imports it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def kafka_peers() -> Any:
    """The ``kafka_peers`` module of tests/."""
    tests = str(Path(__file__).resolve().parent.parent / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import kafka_peers as module

    return module
