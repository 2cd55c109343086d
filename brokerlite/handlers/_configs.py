"""Config resources shared by DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

Resource types are Kafka's ConfigResource types: 2 topic, 4 broker, 8 broker
logger, 16 client metrics, 32 group. Topic configs live in the log manager's
registry; group configs (``share.*``) with the share-group coordinator
(:mod:`trafka.brokerlite.share_groups`); the broker's settings are static (they
come from :class:`~trafka.brokerlite.config.BrokerConfig`) and reported read-only.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from trafka.brokerlite.log import ConfigEntry, ConfigSource, ConfigType

if TYPE_CHECKING:
    from trafka.brokerlite.broker import Broker


class ResourceType(enum.IntEnum):
    """Kafka's ConfigResource types (not the ACL resource types, where GROUP is 3)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


# Topic config -> the broker setting that provides its default (Kafka's synonyms).
BROKER_SYNONYMS = {
    "cleanup.policy": "log.cleanup.policy",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
}

_BROKER_TYPES = {
    "listeners": ConfigType.LIST,
    "advertised.listeners": ConfigType.LIST,
    "log.dirs": ConfigType.STRING,
    "node.id": ConfigType.INT,
    "broker.id": ConfigType.INT,
    "num.partitions": ConfigType.INT,
    "auto.create.topics.enable": ConfigType.BOOLEAN,
    "log.segment.bytes": ConfigType.INT,
    "log.roll.ms": ConfigType.LONG,
    "log.retention.ms": ConfigType.LONG,
    "log.retention.bytes": ConfigType.LONG,
    "log.index.interval.bytes": ConfigType.INT,
    "log.message.timestamp.type": ConfigType.STRING,
    "message.max.bytes": ConfigType.INT,
    "log.flush.interval.messages": ConfigType.LONG,
    "log.flush.interval.ms": ConfigType.LONG,
    "log.retention.check.interval.ms": ConfigType.LONG,
    "group.initial.rebalance.delay.ms": ConfigType.INT,
    "group.min.session.timeout.ms": ConfigType.INT,
    "group.max.session.timeout.ms": ConfigType.INT,
    "socket.request.max.bytes": ConfigType.INT,
    **{
        f"group.share.{name}": ConfigType.INT
        for name in (
            "session.timeout.ms",
            "min.session.timeout.ms",
            "max.session.timeout.ms",
            "heartbeat.interval.ms",
            "min.heartbeat.interval.ms",
            "max.heartbeat.interval.ms",
            "max.size",
            "record.lock.duration.ms",
            "min.record.lock.duration.ms",
            "max.record.lock.duration.ms",
            "delivery.count.limit",
            "min.delivery.count.limit",
            "max.delivery.count.limit",
            "partition.max.record.locks",
            "min.partition.max.record.locks",
            "max.partition.max.record.locks",
        )
    },
}


def broker_entries(broker: Broker) -> list[ConfigEntry]:
    """The broker's settings as read-only config entries, sorted by name."""
    out = []
    for name, value, is_default in broker.config.kafka_entries():
        out.append(
            ConfigEntry(
                name=name,
                value=value,
                is_default=is_default,
                read_only=True,
                sensitive=False,
                source=ConfigSource.DEFAULT_CONFIG
                if is_default
                else ConfigSource.STATIC_BROKER_CONFIG,
                config_type=_BROKER_TYPES.get(name, ConfigType.STRING),
            )
        )
    return sorted(out, key=lambda e: e.name)


def is_broker_name(broker: Broker, name: str) -> bool:
    """Whether a broker resource name designates this broker ("" is the cluster default)."""
    return name in ("", str(broker.node_id))
