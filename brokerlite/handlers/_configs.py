"""Config resources shared by DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

Resource types are Kafka's ConfigResource types: 2 topic, 4 broker, 8 broker
logger, 16 client metrics, 32 group. Topic configs live in the log manager's
registry; group configs (``share.*``) with the share-group coordinator
(:mod:`trafka.brokerlite.groups.share_groups`); client-metrics resources (KIP-714
subscriptions) with :mod:`trafka.brokerlite.telemetry`; the broker's settings
are static (they come from :class:`~trafka.brokerlite.config.BrokerConfig`) and
reported read-only, except, in cluster mode, the replication throttles' rates
(:mod:`trafka.brokerlite.cluster.replication_quotas`), dynamic configs kept in
ZooKeeper.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING

from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.storage.topic_configs import ConfigEntry, ConfigSource, ConfigType
from trafka.brokerlite.telemetry import CONFIG_DEFAULTS, CONFIG_TYPES, INTERVAL_MS, split_list
from trafka.codec.errors import ErrorCode

if TYPE_CHECKING:
    from trafka.brokerlite.config import BrokerConfig
    from trafka.brokerlite.telemetry import ClientTelemetry


class BrokerConfigRefused(BrokerError):
    """A broker config change brokerlite refuses as Kafka's ZooKeeper-mode brokers
    do (INVALID_REQUEST): another broker's, or of a config that is not dynamic."""

    code = ErrorCode.INVALID_REQUEST


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
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

#: Broker settings whose Kafka default is null, the default being another
#: setting's in a coarser unit (``log.retention.hours``, ``log.roll.hours``) or
#: "never" (``log.flush.interval.ms``). Kafka's DescribeConfigs (ConfigHelper's
#: synonyms, which start at the first synonym that has a value) then lists no
#: broker synonym for the topic config they back, unless the broker sets them.
KAFKA_NULL_DEFAULTS = frozenset({"log.retention.ms", "log.roll.ms", "log.flush.interval.ms"})

_BROKER_TYPES = {
    "listeners": ConfigType.LIST,
    "advertised.listeners": ConfigType.LIST,
    "log.dirs": ConfigType.STRING,
    "node.id": ConfigType.INT,
    "min.insync.replicas": ConfigType.INT,
    "unclean.leader.election.enable": ConfigType.BOOLEAN,
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
    "telemetry.max.bytes": ConfigType.INT,
    "delegation.token.max.lifetime.ms": ConfigType.LONG,
    "delegation.token.expiry.time.ms": ConfigType.LONG,
    "delegation.token.expiry.check.interval.ms": ConfigType.LONG,
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


def _broker_entry(
    name: str, value: str | None, source: ConfigSource, config_type: ConfigType
) -> ConfigEntry:
    """A broker setting: static ones read-only, dynamic ones writable."""
    return ConfigEntry(
        name=name,
        value=value,
        is_default=source == ConfigSource.DEFAULT_CONFIG,
        read_only=source in (ConfigSource.DEFAULT_CONFIG, ConfigSource.STATIC_BROKER_CONFIG),
        sensitive=False,
        source=source,
        config_type=config_type,
    )


def broker_entries(config: BrokerConfig) -> list[ConfigEntry]:
    """The broker's settings as read-only config entries, sorted by name."""
    out = [
        _broker_entry(
            name,
            value,
            ConfigSource.DEFAULT_CONFIG if is_default else ConfigSource.STATIC_BROKER_CONFIG,
            _BROKER_TYPES.get(name, ConfigType.STRING),
        )
        for name, value, is_default in config.kafka_entries()
    ]
    return sorted(out, key=lambda e: e.name)


def dynamic_broker_entries(
    own: Mapping[str, str], default: Mapping[str, str], *, default_only: bool
) -> list[ConfigEntry]:
    """The dynamic broker configs (the replication throttles' rates) a broker has:
    its own value, else the ``<default>`` broker's; only the default's for the
    default resource (``""``). Unset ones are not listed."""
    out = []
    for name in sorted(set(default) | (set() if default_only else set(own))):
        if not default_only and name in own:
            out.append(
                _broker_entry(name, own[name], ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigType.LONG)
            )
        else:
            out.append(
                _broker_entry(
                    name,
                    default[name],
                    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                    ConfigType.LONG,
                )
            )
    return out


def is_broker_name(node_id: int, name: str) -> bool:
    """Whether a broker resource name designates this broker ("" is the cluster default)."""
    return name in ("", str(node_id))


#: DescribeConfigs' source of a client-metrics resource's own setting (Kafka's
#: ConfigSource.CLIENT_METRICS_CONFIG).
CLIENT_METRICS_CONFIG_SOURCE = 7
_APPEND, _SUBTRACT = 2, 3


@dataclasses.dataclass(frozen=True, slots=True)
class ClientMetricsEntry:
    """One client-metrics setting as DescribeConfigs reports it."""

    name: str
    value: str
    source: int
    config_type: int
    is_default: bool


def _printed(name: str, value: str) -> str:
    """A client-metrics value as Kafka prints it once parsed (lists joined by
    commas, integers without leading zeros or signs)."""
    if name == INTERVAL_MS:
        text = value.strip()
        return str(int(text)) if text.lstrip("+-").isdigit() else value
    return ",".join(split_list(value))


def client_metrics_entries(telemetry: ClientTelemetry, name: str) -> list[ClientMetricsEntry]:
    """Every client-metrics setting of resource ``name``, sorted: its own value or
    Kafka's default."""
    configs = telemetry.configs(name)
    return [
        ClientMetricsEntry(
            name=key,
            value=_printed(key, configs.get(key, default)),
            source=CLIENT_METRICS_CONFIG_SOURCE
            if key in configs
            else int(ConfigSource.DEFAULT_CONFIG),
            config_type=CONFIG_TYPES[key],
            is_default=key not in configs,
        )
        for key, default in sorted(CONFIG_DEFAULTS.items())
    ]


def client_metrics_changes(
    current: Mapping[str, str], ops: list[tuple[str, int, str | None]]
) -> dict[str, str | None] | str:
    """The settings a resource has after IncrementalAlterConfigs ``ops`` (name,
    operation, value), as Kafka's controller computes them (SET, DELETE, and
    APPEND/SUBTRACT on list settings, starting from the default); or the
    INVALID_CONFIG message for APPEND/SUBTRACT on a setting that is not a list."""
    after: dict[str, str | None] = dict(current)
    for key, op, value in ops:
        if op in (_APPEND, _SUBTRACT):
            if CONFIG_TYPES.get(key) != ConfigType.LIST:
                verb = "APPEND" if op == _APPEND else "SUBTRACT"
                return f"Can't {verb} to key {key} because its type is not LIST."
            items = split_list(after.get(key) or CONFIG_DEFAULTS.get(key, ""))
            given = split_list(value or "")
            if op == _APPEND:
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            after[key] = ",".join(items)
        elif op == 1:
            after.pop(key, None)
        else:
            after[key] = value
    return after
