"""The broker's side of share groups' dead letters (KIP-1191, one node): the
``share.version`` they need, the broker's DLQ settings, creating a DLQ topic
and appending a batch of dead letters to the local log
(:mod:`trafka.brokerlite.shares.dead_letters` says what is written and when).

A cluster writes no dead letters (its ``share.version`` stops at 1,
:mod:`trafka.brokerlite.features`): a dead letter's partition may be led by
another node, which this single-node append cannot reach.
"""

from __future__ import annotations

from collections.abc import Callable

from ..config import BrokerConfig
from ..features import SHARE_VERSION, SHARE_VERSION_DLQ, FeatureStore
from ..metrics import BrokerMetrics
from ..shares.dead_letters import AUTO_CREATED_CONFIGS, DeadLetterPort, DeadLetters
from ..storage.log_manager import LogManager

__all__ = ["local_dead_letters"]


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

    def enabled() -> bool:
        return features().level(SHARE_VERSION) >= SHARE_VERSION_DLQ

    def create(name: str) -> None:
        logs.create_topic(name, config.num_partitions, AUTO_CREATED_CONFIGS, now_ms=now_ms())

    def append(topic: str, partition: int, batch: bytes) -> None:
        plog = logs.partition(topic, partition)
        result = plog.append(batch, now_ms=now_ms())
        notify_append(topic, partition, len(batch))
        metrics().produced(topic, result.last_offset - result.base_offset + 1, len(batch))

    port = DeadLetterPort(
        enabled=enabled,
        prefix=config.errors_deadletterqueue_topic_name_prefix,
        auto_create=config.errors_deadletterqueue_auto_create_topics_enable,
        create=create,
        append=append,
        now_ms=now_ms,
    )
    return DeadLetters(logs, port)
