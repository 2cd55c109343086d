"""Shared set-up of the SDK tests that run against a real in-process brokerlite."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from unique_names import names as _names

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.sdk import NewTopic, open_admin, open_producer
from trafka.sdk.admin import FeatureUpdate, UpgradeType


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


def telemetry_broker(
    tmp_path_factory: pytest.TempPathFactory, name: str, pushes_file: Path, **settings: Any
) -> Iterator[RunningBroker]:
    """:func:`module_broker` with a KIP-714 receiver that writes every push it
    accepts to ``pushes_file`` (see :func:`received_pushes`)."""
    yield from module_broker(
        tmp_path_factory,
        name,
        client_telemetry_enabled=True,
        client_telemetry_file=pushes_file,
        **settings,
    )


def received_pushes(pushes_file: Path, instance: uuid.UUID) -> list[dict[str, Any]]:
    """Every push a :func:`telemetry_broker` accepted from ``instance``, in order."""
    if not pushes_file.exists():
        return []
    lines = pushes_file.read_text().splitlines()
    return [p for line in lines if (p := json.loads(line))["client_instance_id"] == str(instance)]


#: brokerlite settings for share-group tests: heartbeats every 200 ms rather than
#: Kafka's 5 s, so that members join and see their assignments change quickly.
SHARE_HEARTBEATS: dict[str, Any] = {
    "group_share_heartbeat_interval_ms": 200,
    "group_share_min_heartbeat_interval_ms": 100,
}


async def share_queue(
    bootstrap: str, partitions: int = 1, *, earliest: bool = True
) -> tuple[str, str]:
    """A fresh topic and share group, the group reading the topic from the start
    (``share.auto.offset.reset=earliest``) unless ``earliest`` is False."""
    topic, group = fresh("share-q"), fresh("share-g")
    async with open_admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions)])
        if earliest:
            await admin.alter_group_configs({group: {"share.auto.offset.reset": "earliest"}})
    return topic, group


async def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 1) -> None:
    """``values`` to ``topic``, to its ``partitions`` in turn."""
    async with open_producer(bootstrap_servers=bootstrap) as producer:
        for i, value in enumerate(values):
            await producer.send(topic, value, partition=i % partitions)


async def set_transaction_version(bootstrap: str, level: int) -> None:
    """Finalize ``transaction.version`` at ``level`` (UpdateFeatures, KIP-584; a
    lower level as a safe downgrade): 2 is KIP-890 part 2's flow, below 2 the
    AddPartitionsToTxn one, which clients follow from their next connections."""
    async with open_admin(bootstrap_servers=bootstrap) as admin:
        now = (await admin.describe_features()).finalized.get("transaction.version")
        down = now is not None and level < now[1]
        kind = UpgradeType.SAFE_DOWNGRADE if down else UpgradeType.UPGRADE
        await admin.update_features({"transaction.version": FeatureUpdate(level, kind)})
