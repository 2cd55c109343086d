"""Topic configurations: the settings of a partition log and Kafka's topic-config schema.

:class:`LogConfig` holds what a partition log obeys (segment size, retention,
flushing, compaction...). The topic configs (``retention.ms``...) are Kafka's
names for the same settings, as CreateTopics, AlterConfigs and DescribeConfigs
carry them; the schema below lists every one brokerlite accepts, its type and
the :class:`LogConfig` field it sets, if any.

Rules:

* A topic config is validated (name, type, range) when it is set, and stored
  normalised, so a bad value is refused with INVALID_CONFIG and never reaches a
  log.
* Kafka's topic configs that change nothing on brokerlite (tiered storage...) are
  accepted and reported, not refused: tools set them routinely.
* "Never" for the flush settings is ``None`` in :class:`LogConfig` and Kafka's
  ``Long.MAX_VALUE`` in a topic config.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from ..errors import (
    InvalidConfigError,
)
from .segment import (
    INT32_MAX,
)

__all__ = [
    "ALL_REPLICAS",
    "FOLLOWER_THROTTLED_REPLICAS",
    "LEADER_THROTTLED_REPLICAS",
    "THROTTLED_REPLICAS_CONFIGS",
    "TOPIC_CONFIGS",
    "ConfigDef",
    "ConfigEntry",
    "ConfigSource",
    "ConfigType",
    "LogConfig",
    "effective_config",
    "field_text",
    "normalise_configs",
    "throttled_replicas",
]

_LONG_MAX = 2**63 - 1


# -- configuration ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    """The settings of one partition log (a topic's effective configuration).

    Attributes:
        segment_bytes: roll when an append would make the active segment larger.
        segment_ms: roll when the active segment's first append is older than this.
        retention_ms: delete segments whose newest timestamp is older than this (-1: never).
        retention_bytes: delete the oldest segments while the partition exceeds this (-1: no limit).
        index_interval_bytes: bytes between two offset-index entries.
        flush_interval_messages: fsync after this many records (None: leave it to the OS).
        flush_interval_ms: fsync when the last one is older than this (None: leave it to the OS).
        message_max_bytes: the largest batch accepted, header included.
        message_timestamp_type: ``CreateTime`` (keep the producer's timestamps) or
            ``LogAppendTime`` (the broker stamps each batch on append).
        cleanup_policy: ``delete``, ``compact`` or ``compact,delete``: ``delete``
            enables time/size retention, ``compact`` log compaction (``cleaner.py``).
        delete_retention_ms: how long compaction keeps a tombstone (a null value).
        min_cleanable_dirty_ratio: compact once this share of the cleanable bytes
            has not been compacted yet.
        min_compaction_lag_ms: records younger than this are not compacted.
        max_compaction_lag_ms: compact records older than this whatever the ratio.
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    retention_ms: int = 604800000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    flush_interval_messages: int | None = None
    flush_interval_ms: int | None = None
    message_max_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86_400_000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _LONG_MAX

    def __post_init__(self) -> None:
        if not 14 <= self.segment_bytes <= INT32_MAX:
            raise ValueError(
                f"segment_bytes must be in [14, {INT32_MAX}], got {self.segment_bytes}"
            )
        if self.segment_ms < 1:
            raise ValueError(f"segment_ms must be positive, got {self.segment_ms}")
        if self.retention_ms < -1 or self.retention_bytes < -1:
            raise ValueError("retention_ms and retention_bytes must be >= -1")
        if self.index_interval_bytes < 0 or self.message_max_bytes < 0:
            raise ValueError("index_interval_bytes and message_max_bytes must be >= 0")
        if self.flush_interval_messages is not None and self.flush_interval_messages < 1:
            raise ValueError("flush_interval_messages must be positive or None")
        if self.flush_interval_ms is not None and self.flush_interval_ms < 0:
            raise ValueError("flush_interval_ms must be >= 0 or None")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(
                "message_timestamp_type must be CreateTime or LogAppendTime, "
                f"got {self.message_timestamp_type!r}"
            )
        policies = self.cleanup_policy.split(",")
        if not policies or not set(policies) <= {"delete", "compact"}:
            raise ValueError(
                f"cleanup_policy must be delete and/or compact, got {self.cleanup_policy!r}"
            )
        if self.delete_retention_ms < 0 or self.min_compaction_lag_ms < 0:
            raise ValueError("delete_retention_ms and min_compaction_lag_ms must be >= 0")
        if self.max_compaction_lag_ms < 1:
            raise ValueError("max_compaction_lag_ms must be positive")
        if not 0 <= self.min_cleanable_dirty_ratio <= 1:
            raise ValueError("min_cleanable_dirty_ratio must be in [0, 1]")

    @property
    def compact(self) -> bool:
        """Whether the cleanup policy includes compaction."""
        return "compact" in self.cleanup_policy.split(",")


# -- topic configs --------------------------------------------------------------------------------


class ConfigType(enum.IntEnum):
    """Kafka's config value types, as DescribeConfigs reports them."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """Where a config value comes from, as DescribeConfigs reports it."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One topic config as DescribeConfigs reports it."""

    name: str
    value: str | None
    is_default: bool
    read_only: bool
    sensitive: bool
    source: ConfigSource
    config_type: ConfigType = ConfigType.UNKNOWN


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigDef:
    type: ConfigType
    field: str | None = None  # the LogConfig field it sets; None: stored, no effect here
    default: str | None = None  # Kafka's default, for configs without a field
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()


_I = ConfigType.INT
_L = ConfigType.LONG

#: The replicas whose replication traffic is throttled (KIP-73), on the leader's
#: side and on the follower's: ``partition:broker`` pairs, or ``*`` for all.
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
THROTTLED_REPLICAS_CONFIGS = (LEADER_THROTTLED_REPLICAS, FOLLOWER_THROTTLED_REPLICAS)
#: What :func:`throttled_replicas` returns for ``*``: every replica of the topic.
ALL_REPLICAS = "*"

# Topic configs brokerlite implements (with a LogConfig field) and the other Kafka
# topic configs, which it accepts and reports but which change nothing on a single
# node without replication or tiered storage. Rejecting those would break tools
# (Kafka Streams, Connect, schema registries) that set them routinely.
TOPIC_CONFIGS: dict[str, ConfigDef] = {
    "cleanup.policy": ConfigDef(ConfigType.LIST, "cleanup_policy", choices=("compact", "delete")),
    "flush.messages": ConfigDef(_L, "flush_interval_messages", low=1),
    "flush.ms": ConfigDef(_L, "flush_interval_ms", low=0),
    "index.interval.bytes": ConfigDef(_I, "index_interval_bytes", low=0),
    "max.message.bytes": ConfigDef(_I, "message_max_bytes", low=0),
    "message.timestamp.type": ConfigDef(
        ConfigType.STRING, "message_timestamp_type", choices=("CreateTime", "LogAppendTime")
    ),
    "retention.bytes": ConfigDef(_L, "retention_bytes", low=-1),
    "retention.ms": ConfigDef(_L, "retention_ms", low=-1),
    "segment.bytes": ConfigDef(_I, "segment_bytes", low=14),
    "segment.ms": ConfigDef(_L, "segment_ms", low=1),
    "compression.type": ConfigDef(
        ConfigType.STRING,
        default="producer",
        choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    ),
    "compression.gzip.level": ConfigDef(_I, default="-1", low=-1, high=9),
    "compression.lz4.level": ConfigDef(_I, default="9", low=1, high=17),
    "compression.zstd.level": ConfigDef(_I, default="3", low=-131072, high=22),
    "delete.retention.ms": ConfigDef(_L, "delete_retention_ms", low=0),
    # KIP-1191 (Kafka 4.4): whether share groups may write dead letters here
    # (read by brokerlite.shares.dead_letters).
    "errors.deadletterqueue.group.enable": ConfigDef(ConfigType.BOOLEAN, default="false"),
    "file.delete.delay.ms": ConfigDef(_L, default="60000", low=0),
    FOLLOWER_THROTTLED_REPLICAS: ConfigDef(ConfigType.LIST, default=""),
    LEADER_THROTTLED_REPLICAS: ConfigDef(ConfigType.LIST, default=""),
    "local.retention.bytes": ConfigDef(_L, default="-2", low=-2),
    "local.retention.ms": ConfigDef(_L, default="-2", low=-2),
    "max.compaction.lag.ms": ConfigDef(_L, "max_compaction_lag_ms", low=1),
    "message.timestamp.after.max.ms": ConfigDef(_L, default="3600000", low=0),
    "message.timestamp.before.max.ms": ConfigDef(_L, default=str(_LONG_MAX), low=0),
    "min.cleanable.dirty.ratio": ConfigDef(
        ConfigType.DOUBLE, "min_cleanable_dirty_ratio", low=0, high=1
    ),
    "min.compaction.lag.ms": ConfigDef(_L, "min_compaction_lag_ms", low=0),
    "min.insync.replicas": ConfigDef(_I, default="1", low=1),
    "preallocate": ConfigDef(ConfigType.BOOLEAN, default="false"),
    "remote.log.copy.disable": ConfigDef(ConfigType.BOOLEAN, default="false"),
    "remote.log.delete.on.disable": ConfigDef(ConfigType.BOOLEAN, default="false"),
    "remote.storage.enable": ConfigDef(ConfigType.BOOLEAN, default="false"),
    "segment.index.bytes": ConfigDef(_I, default="10485760", low=4),
    "segment.jitter.ms": ConfigDef(_L, default="0", low=0),
    "unclean.leader.election.enable": ConfigDef(ConfigType.BOOLEAN, default="false"),
}

# LogConfig field names whose dotted spelling is not the topic config's name.
_PYTHON_NAMES = {
    "message_max_bytes": "max.message.bytes",
    "flush_interval_messages": "flush.messages",
    "flush_interval_ms": "flush.ms",
}
# "Never" for the flush settings: Kafka's Long.MAX_VALUE default, None in LogConfig.
_NONE_AS_LONG_MAX = ("flush_interval_messages", "flush_interval_ms")


def _config_name(key: str) -> str:
    if key in TOPIC_CONFIGS:
        return key
    name = _PYTHON_NAMES.get(key, key.replace("_", "."))
    if name not in TOPIC_CONFIGS:
        raise InvalidConfigError(f"unknown topic config {key!r}")
    return name


def _parse_config(name: str, value: str) -> str:
    """Validate one topic config value; returns its normalised string form."""
    spec = TOPIC_CONFIGS[name]
    if not isinstance(value, str):
        raise InvalidConfigError(f"{name}: the value must be a string, got {value!r}")
    text = value.strip()
    kind = spec.type
    number: float
    if kind in (ConfigType.INT, ConfigType.LONG):
        try:
            number = int(text)
        except ValueError:
            raise InvalidConfigError(f"{name}: {value!r} is not an integer") from None
        bits = 31 if kind == ConfigType.INT else 63
        if not -(2**bits) <= number < 2**bits:
            raise InvalidConfigError(f"{name}: {value!r} is out of range")
        text = str(number)
    elif kind == ConfigType.DOUBLE:
        try:
            number = float(text)
        except ValueError:
            raise InvalidConfigError(f"{name}: {value!r} is not a number") from None
    elif kind == ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise InvalidConfigError(f"{name}: {value!r} is not true or false")
        return text.lower()
    elif name in THROTTLED_REPLICAS_CONFIGS:
        replicas = throttled_replicas(name, text)
        if replicas == ALL_REPLICAS:
            return ALL_REPLICAS
        return ",".join(item.strip() for item in text.split(",") if item.strip())
    elif kind == ConfigType.LIST:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if spec.choices:
            bad = [item for item in items if item not in spec.choices]
            if bad or not items:
                raise InvalidConfigError(
                    f"{name}: {value!r} is not a list of {', '.join(spec.choices)}"
                )
        # In the order given, as Kafka stores and describes a list config: an
        # APPEND of ``compact`` to ``delete`` reads back ``delete,compact``.
        return ",".join(items)
    else:
        if spec.choices and text not in spec.choices:
            raise InvalidConfigError(f"{name}: {value!r} is not one of {', '.join(spec.choices)}")
        return text
    if spec.low is not None and number < spec.low:
        raise InvalidConfigError(f"{name}: {value!r} is below the minimum {spec.low:g}")
    if spec.high is not None and number > spec.high:
        raise InvalidConfigError(f"{name}: {value!r} is above the maximum {spec.high:g}")
    return text


def throttled_replicas(name: str, value: str) -> frozenset[tuple[int, int]] | str:
    """The replicas a ``*.replication.throttled.replicas`` value lists, as
    (partition, broker) pairs, or :data:`ALL_REPLICAS` for ``*``.

    Kafka's rule (``ThrottledReplicaListValidator``): the comma-separated items,
    each trimmed, are all ``partition:broker`` (digits; an empty item is allowed),
    or together they are the literal ``*``.

    Raises:
        InvalidConfigError: any other value, or a number that is not an int32.
    """
    items = [item.strip() for item in value.split(",")]
    if "".join(items) == ALL_REPLICAS:
        return ALL_REPLICAS
    pairs: set[tuple[int, int]] = set()
    for item in items:
        if not item:
            continue
        partition, sep, broker = item.partition(":")
        if not (sep and _decimal(partition) and _decimal(broker)):
            raise InvalidConfigError(
                f"{name}: {value!r} must be the literal '*' or a list of replicas in the "
                "form [partitionId]:[brokerId],[partitionId]:[brokerId],..."
            )
        if int(partition) > INT32_MAX or int(broker) > INT32_MAX:
            raise InvalidConfigError(f"{name}: {item!r} names a partition or broker out of range")
        pairs.add((int(partition), int(broker)))
    return frozenset(pairs)


def _decimal(text: str) -> bool:
    return text.isascii() and text.isdigit()


def normalise_configs(configs: Mapping[str, str | None]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key, value in configs.items():
        name = _config_name(key)
        out[name] = None if value is None else _parse_config(name, value)
    return out


def _field_value(field: str, text: str) -> Any:
    if field in _NONE_AS_LONG_MAX:
        number = int(text)
        return None if number == _LONG_MAX else number
    kind = TOPIC_CONFIGS[_PYTHON_NAMES.get(field, field.replace("_", "."))].type
    if kind in (ConfigType.INT, ConfigType.LONG):
        return int(text)
    if kind == ConfigType.DOUBLE:
        return float(text)
    return text


def field_text(field: str, value: Any) -> str:
    return str(_LONG_MAX) if value is None and field in _NONE_AS_LONG_MAX else str(value)


def effective_config(default: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
    changes = {}
    for name, text in overrides.items():
        field = TOPIC_CONFIGS[name].field
        if field is not None:
            changes[field] = _field_value(field, text)
    try:
        return dataclasses.replace(default, **changes) if changes else default
    except ValueError as exc:
        raise InvalidConfigError(str(exc)) from exc
