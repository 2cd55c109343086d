"""Test helpers for compacted topics on a running brokerlite: waiting for the
cleaner, and the model of what a compacted log keeps.

Shared by brokerlite's and the Spark source's tests (``tests/conftest.py`` puts
this folder on the path).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from trafka.brokerlite import RunningBroker

Row = tuple[int, Any, Any]  # offset, key, value


def partition_dir(broker: RunningBroker, topic: str, partition: int = 0) -> Path:
    return Path(broker.config.data_dir) / f"{topic}-{partition}"


def compacted_through(broker: RunningBroker, topic: str, partition: int = 0) -> int:
    """The clean offset once every closed segment is compacted and swapped in, else -1.

    Read from the partition's files (the broker belongs to its own thread): the
    checkpoint's clean offset must have reached the active segment, and no
    compaction file may be left half-way.
    """
    d = partition_dir(broker, topic, partition)
    try:
        clean = json.loads((d / "trafka.checkpoint").read_text()).get("clean_offset", 0)
        names = [p.name for p in d.iterdir()]
    except (OSError, ValueError):
        return -1
    if any(n.endswith((".cleaned", ".swap")) for n in names):
        return -1
    active = max(int(n[:20]) for n in names if n.endswith(".log"))
    return int(clean) if clean == active and clean > 0 else -1


def wait_compacted(broker: RunningBroker, topic: str, partition: int = 0) -> int:
    """Wait (60 s at most) until :func:`compacted_through` says done; its clean offset."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        clean = compacted_through(broker, topic, partition)
        if clean > 0:
            return clean
        time.sleep(0.05)
    raise AssertionError("the cleaner did not compact the topic in time")


def compacted(rows: list[Row], clean_offset: int) -> list[Row]:
    """What compaction keeps of ``rows`` (no tombstone old enough to go): below the
    clean offset the latest record of each key, and everything from it on."""
    latest = {key: off for off, key, _ in rows if off < clean_offset}
    return [r for r in rows if r[0] >= clean_offset or latest[r[1]] == r[0]]
