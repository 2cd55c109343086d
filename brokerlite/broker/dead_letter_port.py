"""The broker's side of share groups' dead letters (KIP-1191): the
``share.version`` they need, the broker's DLQ settings, creating a DLQ topic
and appending a batch of dead letters to the local log
(:mod:`trafka.brokerlite.shares.dead_letters` says what is written and when).

In a cluster a dead letter's partition may be led by another node: the dead
letters are produced to its leader (:mod:`trafka.brokerlite.shares.dead_letter_outbox`,
sent by :mod:`trafka.brokerlite.cluster.driver.dead_letters`), and a DLQ
topic to create automatically is asked of ZooKeeper, as CreateTopics does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config import BrokerConfig
from ..features import SHARE_VERSION, SHARE_VERSION_DLQ, FeatureStore
from ..metrics import BrokerMetrics
from ..shares.dead_letters import AUTO_CREATED_CONFIGS, DeadLetterPort, DeadLetters
from ..storage.log_manager import LogManager

if TYPE_CHECKING:
    from ..cluster.view import ClusterView

__all__ = ["cluster_dead_letters", "local_dead_letters"]

#: How long the creation of a DLQ topic may take before it is reported failed
#: (the dead letters waiting for it are given up after their own time).
_CREATE_WAIT_MS = 10_000


def local_dead_letters(
    logs: LogManager,
    config: BrokerConfig,
    *,
    features: Callable[[], FeatureStore],
    metrics: Callable[[], BrokerMetrics],
    notify_append: Callable[[str, int, int], None],
    now_ms: Callable[[], int],
) -> DeadLetters:
    """The dead-letter writer of a single-node broker.

    Args:
        logs: the partition logs.
        config: the broker's settings (``errors.deadletterqueue.*``, ``num.partitions``).
        features: the feature levels (called when needed: they open after the
            share-partitions).
        metrics: the broker's metrics (called when needed), which count the
            dead letters as produced messages and bytes.
        notify_append: wakes the requests waiting on a partition.
        now_ms: the broker's current time.
    """

    def create(name: str) -> None:
        logs.create_topic(name, config.num_partitions, AUTO_CREATED_CONFIGS, now_ms=now_ms())

    def append(topic: str, partition: int, batch: bytes) -> None:
        plog = logs.partition(topic, partition)
        result = plog.append(batch, now_ms=now_ms())
        notify_append(topic, partition, len(batch))
        metrics().produced(topic, result.last_offset - result.base_offset + 1, len(batch))

    return _writer(logs, config, features, now_ms, create, append)


def cluster_dead_letters(
    logs: LogManager,
    config: BrokerConfig,
    *,
    features: Callable[[], FeatureStore],
    cluster: Callable[[], ClusterView | None],
    now_ms: Callable[[], int],
) -> DeadLetters:
    """The dead-letter writer of a cluster member (its :attr:`DeadLetters.outbox`
    holds the writes for the driver).

    Args:
        logs: the partition logs (every topic of the cluster, its configs).
        config: the broker's settings (``errors.deadletterqueue.*``, ``num.partitions``).
        features: the feature levels (called when needed).
        cluster: the cluster view (called when needed: it opens after the
            share-partitions).
        now_ms: the broker's current time.
    """

    def create(name: str) -> None:
        view = cluster()
        assert view is not None
        view.submit(
            "create_topic",
            name=name,
            num_partitions=config.num_partitions,
            replication_factor=-1,
            configs=dict(AUTO_CREATED_CONFIGS),
            quiet=True,
            if_missing=True,
            timeout_ms=_CREATE_WAIT_MS,
        )

    def leader(topic: str, partition: int) -> int | None:
        view = cluster()
        node = None if view is None else view.leader(topic, partition)
        return node if node is not None and node >= 0 else None

    def append(topic: str, partition: int, batch: bytes) -> None:
        raise AssertionError("a cluster produces its dead letters (the outbox)")

    return _writer(logs, config, features, now_ms, create, append, leader)


def _writer(
    logs: LogManager,
    config: BrokerConfig,
    features: Callable[[], FeatureStore],
    now_ms: Callable[[], int],
    create: Callable[[str], None],
    append: Callable[[str, int, bytes], None],
    leader: Callable[[str, int], int | None] | None = None,
) -> DeadLetters:
    """The writer over a port of ``create``, ``append`` (and a cluster's ``leader``),
    on at ``share.version`` 2 with the broker's ``errors.deadletterqueue.*``."""

    def enabled() -> bool:
        return features().level(SHARE_VERSION) >= SHARE_VERSION_DLQ

    port = DeadLetterPort(
        enabled=enabled,
        prefix=config.errors_deadletterqueue_topic_name_prefix,
        auto_create=config.errors_deadletterqueue_auto_create_topics_enable,
        create=create,
        append=append,
        now_ms=now_ms,
        leader=leader,
    )
    return DeadLetters(logs, port)
