"""Kafka's internal topics: their names, and how Kafka creates each on first use.

Kafka keeps its coordinators' state in three topics (``Topic.isInternal``):
``__consumer_offsets`` (groups), ``__transaction_state`` (transactional ids)
and ``__share_group_state`` (share-partitions, KIP-932). It creates each
lazily, the way Kafka 4.4 does (each checked against it):

* ``__consumer_offsets`` on the first FindCoordinator for a group,
  ``__transaction_state`` on the first for a transactional id, with
  ``offsets.topic.num.partitions`` and ``transaction.state.log.num.partitions``
  partitions (50 each). No other group or transaction request creates them
  (OffsetCommit, JoinGroup and InitProducerId are refused until then).
* ``__share_group_state`` when a share group's target assignment first has
  partitions (the share coordinator initializes their state), with
  ``share.coordinator.state.topic.num.partitions`` (50).
* Any of them named in a Metadata request allowed to create topics
  (``auto.create.topics.enable`` and the request's flag), with the same
  settings; a CreateTopics request may also create one, as an ordinary topic
  with the partitions and configs it asks for.

The configs Kafka sets on each are :data:`KAFKA_CONFIGS` (its coordinators'
settings at their defaults). Whether a name is internal is the name alone,
existing or not: Kafka's Metadata and DescribeTopicPartitions say
``is_internal`` even in an error answer.

A single node keeps its coordinators' state in journals (``trafka-groups.journal``
and the like), not in these topics; it lists them all the same once Kafka would
have made them, as topics whose partitions have no log here
(:func:`list_internal_topic`): the registry knows them (their ids, partition
counts and configs survive restarts), and the handlers answer reads of their
partitions as empty (docs/compatibility.md says why). A cluster creates them
as real, replicated topics (:mod:`..cluster.driver`), whose records are
brokerlite's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import BrokerError

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from .log_manager import LogManager
    from .topics import TopicInfo

__all__ = [
    "INTERNAL_TOPICS",
    "KAFKA_CONFIGS",
    "OFFSETS_TOPIC",
    "SHARE_STATE_TOPIC",
    "TRANSACTION_STATE_TOPIC",
    "ShareStateLister",
    "is_internal",
    "list_internal_topic",
    "num_partitions",
]

log = logging.getLogger("trafka.brokerlite")

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
#: The share coordinator's topic (KIP-932): share-partitions' durable state.
SHARE_STATE_TOPIC = "__share_group_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_STATE_TOPIC})

#: Kafka's segment size of each (``offsets.topic.segment.bytes`` and its siblings).
_SEGMENT_BYTES = str(100 * 1024 * 1024)

#: The config overrides Kafka 4.4 gives each internal topic when it creates it
#: (DescribeConfigs shows them as dynamic topic configs). Kafka also sets
#: ``min.insync.replicas`` on ``__transaction_state`` and ``__share_group_state``
#: from ``transaction.state.log.min.isr`` and ``share.coordinator.state.topic.min.isr``
#: (2 by default); brokerlite has neither setting and leaves the broker's.
KAFKA_CONFIGS: Mapping[str, Mapping[str, str]] = {
    OFFSETS_TOPIC: {
        "cleanup.policy": "compact",
        "compression.type": "producer",
        "segment.bytes": _SEGMENT_BYTES,
    },
    TRANSACTION_STATE_TOPIC: {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "segment.bytes": _SEGMENT_BYTES,
        "unclean.leader.election.enable": "false",
    },
    SHARE_STATE_TOPIC: {
        "cleanup.policy": "delete",
        "compression.type": "producer",
        "segment.bytes": _SEGMENT_BYTES,
        "retention.ms": "-1",
    },
}


def is_internal(name: str | None) -> bool:
    """Whether ``name`` is one of Kafka's internal topics (by name alone)."""
    return name in INTERNAL_TOPICS


def num_partitions(config: BrokerConfig, name: str) -> int:
    """The partitions Kafka gives internal topic ``name`` when it creates it."""
    if name == OFFSETS_TOPIC:
        return config.offsets_topic_num_partitions
    if name == TRANSACTION_STATE_TOPIC:
        return config.transaction_state_log_num_partitions
    if name == SHARE_STATE_TOPIC:
        return config.share_coordinator_state_topic_num_partitions
    raise ValueError(f"{name!r} is not an internal topic")


def list_internal_topic(
    logs: LogManager,
    name: str,
    partitions: int,
    configs: Mapping[str, str | None] | None = None,
) -> TopicInfo:
    """Single node: the registry's entry for internal topic ``name``, made now
    (with ``partitions`` and ``configs``) unless it exists; its partitions have
    no log here (see the module's rules).

    Raises:
        BrokerError: the registry refused it (InvalidPartitionsError,
            InvalidConfigError, LogStorageError...).
    """
    info = logs.topic(name)
    if info is not None:
        return info
    info = logs.create_topic(name, partitions, configs, hosted=())
    log.info("listed internal topic %r with %d partition(s)", name, partitions)
    return info


class ShareStateLister:
    """Single node: lists ``__share_group_state`` when a share group's target
    assignment first has partitions, the moment Kafka's share coordinator is
    first asked to initialize share-partitions' state and creates the topic (a
    :class:`~trafka.brokerlite.groups.share_groups.ShareGroupListener`).

    Args:
        logs: the node's topics.
        partitions: ``share.coordinator.state.topic.num.partitions``.
    """

    def __init__(self, logs: LogManager, partitions: int) -> None:
        self._logs = logs
        self._partitions = partitions

    def partitions_assigned(
        self, group_id: str, partitions: set[tuple[str, int]], now_ms: int
    ) -> None:
        if not partitions or self._logs.topic(SHARE_STATE_TOPIC) is not None:
            return
        try:
            list_internal_topic(
                self._logs, SHARE_STATE_TOPIC, self._partitions, KAFKA_CONFIGS[SHARE_STATE_TOPIC]
            )
        except BrokerError as exc:  # (the share-partitions' state is kept all the same)
            log.warning("cannot list internal topic %r: %s", SHARE_STATE_TOPIC, exc)

    def member_removed(self, group_id: str, member_id: str, now_ms: int) -> None:
        """Nothing to do."""

    def group_deleted(self, group_id: str) -> None:
        """Nothing to do."""
