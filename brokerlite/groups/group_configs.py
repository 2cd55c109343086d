"""Group configs (Kafka's ConfigResource type GROUP), sans-IO: the per-group
``consumer.*`` (KIP-848 consumer groups) and ``share.*`` (KIP-932 share groups)
overrides of the broker's ``group.consumer.*`` and ``group.share.*`` settings,
and a share group's dead-letter queue (KIP-1191, Kafka 4.4):
``errors.deadletterqueue.topic.name`` (blank, the default: none) and
``errors.deadletterqueue.copy.record.enable`` (false).

Rules and invariants:

* Group configs are overrides of the broker's ``group.consumer.*`` and
  ``group.share.*`` defaults, validated as Kafka's GroupConfig validates them
  (names, types, fixed lower bounds, the broker's min/max settings, each
  group type's session timeout above its heartbeat interval), against the
  overrides the group would have after the change merged over the broker
  defaults; a change is all of it or nothing.
* A string config is stored trimmed, as Kafka's ConfigDef parses one (a DLQ
  topic name of blanks is no DLQ topic); a DLQ topic name starting with
  ``__`` (an internal topic's) is refused, whatever the broker's
  ``errors.deadletterqueue.topic.name.prefix``, which is checked only when a
  dead letter is written (:mod:`trafka.brokerlite.shares.dead_letters`), as
  Kafka 4.4 does.
* They exist independently of the group (they may be set before it exists and
  outlive its deletion, as in Kafka).
* :meth:`GroupConfigs.effective` gives the effective values, int values clamped
  into the broker's current bounds (they may have changed since a value was
  set, as Kafka clamps).
* A change is written (``store``) before it is applied; a failed write fails
  the request and changes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ClassVar

from trafka.brokerlite.errors import BrokerError
from trafka.codec.errors import ErrorCode

if TYPE_CHECKING:
    from trafka.brokerlite.config import BrokerConfig

__all__ = [
    "ConsumerGroupSettings",
    "GROUP_CONFIGS",
    "GROUP_CONFIG_SOURCE",
    "GroupConfigEntry",
    "GroupConfigs",
    "InvalidGroupConfigError",
    "InvalidGroupResourceError",
    "ShareGroupConfig",
    "ShareGroupSettings",
    "duration_ms",
]

log = logging.getLogger("trafka.brokerlite")

#: What DescribeConfigs calls a value set on the group (Kafka's ConfigSource GROUP_CONFIG).
GROUP_CONFIG_SOURCE = 8
_DEFAULT_CONFIG_SOURCE = 5
_STATIC_BROKER_CONFIG_SOURCE = 4
_BOOLEAN_TYPE, _STRING_TYPE, _INT_TYPE = 1, 2, 3  # Kafka's ConfigType codes


@dataclasses.dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """A share group's effective settings: its overrides over the broker's defaults."""

    auto_offset_reset: str  # "latest" | "earliest" | "by_duration:PT..." as configured
    record_lock_duration_ms: int
    delivery_count_limit: int
    isolation_level: str  # "read_uncommitted" | "read_committed"
    partition_max_record_locks: int
    renew_acknowledge_enable: bool = True  # KIP-1222: RENEW acknowledgements allowed
    dlq_topic: str = ""  # KIP-1191: the dead-letter queue topic ("": none)
    dlq_copy_record: bool = False  # KIP-1191: dead letters carry the record's key and value


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupSettings:
    """The broker's share-group settings (Kafka's ``group.share.*``; defaults are Kafka's).

    Each group config's default is the matching setting here, and its accepted
    range the matching ``min_``/``max_`` pair.

    Raises:
        ValueError: a default is outside its min/max, a min exceeds its max, or the
            heartbeat interval is not below the session timeout.
    """

    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    min_heartbeat_interval_ms: int = 5_000
    max_heartbeat_interval_ms: int = 15_000
    max_size: int = 200
    record_lock_duration_ms: int = 30_000
    min_record_lock_duration_ms: int = 15_000
    max_record_lock_duration_ms: int = 60_000
    delivery_count_limit: int = 5
    min_delivery_count_limit: int = 2
    max_delivery_count_limit: int = 10
    partition_max_record_locks: int = 2000
    min_partition_max_record_locks: int = 100
    max_partition_max_record_locks: int = 4000

    def __post_init__(self) -> None:
        for name in (
            "session_timeout_ms",
            "heartbeat_interval_ms",
            "record_lock_duration_ms",
            "delivery_count_limit",
            "partition_max_record_locks",
        ):
            value, low, high = (
                getattr(self, name),
                getattr(self, "min_" + name),
                getattr(self, "max_" + name),
            )
            if not 0 < low <= value <= high:
                raise ValueError(f"share groups: need 0 < min_{name} <= {name} <= max_{name}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("share groups: heartbeat_interval_ms must be below session_timeout_ms")
        if self.max_size < 1:
            raise ValueError("share groups: max_size must be >= 1")

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> ShareGroupSettings:
        """The ``group_share_*`` settings of a :class:`~trafka.brokerlite.config.BrokerConfig`."""
        return cls(
            **{f.name: getattr(config, "group_share_" + f.name) for f in dataclasses.fields(cls)}
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupSettings:
    """The broker's consumer-group settings of the new protocol (KIP-848; Kafka's
    ``group.consumer.*``, its defaults): each group config's default and bounds,
    as :class:`ShareGroupSettings` for share groups. The broker's config checks
    their order (:mod:`trafka.brokerlite.config`)."""

    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    min_heartbeat_interval_ms: int = 5_000
    max_heartbeat_interval_ms: int = 15_000

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> ConsumerGroupSettings:
        """The ``group_consumer_*`` settings of a :class:`~trafka.brokerlite.config.BrokerConfig`."""
        return cls(
            **{f.name: getattr(config, "group_consumer_" + f.name) for f in dataclasses.fields(cls)}
        )


# -- group configs ---------------------------------------------------------------------------


class InvalidGroupConfigError(BrokerError):
    """A group config change Kafka would refuse (unknown name, bad value, out of bounds)."""

    code: ClassVar[ErrorCode] = ErrorCode.INVALID_CONFIG


class InvalidGroupResourceError(BrokerError):
    """A GROUP config resource without a name."""

    code: ClassVar[ErrorCode] = ErrorCode.INVALID_REQUEST


# ISO-8601 durations as Java's Duration reads them: days, hours, minutes and
# (fractional) seconds, each optionally signed, letters in either case.
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def duration_ms(text: str) -> int | None:
    """An ISO-8601 duration (``PnDTnHnMn.nS``, Java's ``Duration`` format) in ms, or None."""
    match = _DURATION.fullmatch(text)
    if match is None:
        return None
    sign, days, time_part, hours, minutes, seconds, fraction = match.groups()
    if days is None and time_part is None:
        return None  # "P" alone
    if time_part is not None and hours is None and minutes is None and seconds is None:
        return None  # "PT" alone
    total_ns = (
        int(days or 0) * 86_400 + int(hours or 0) * 3_600 + int(minutes or 0) * 60
    ) * 10**9 + int(seconds or 0) * 10**9
    if fraction:
        frac_ns = int(fraction.ljust(9, "0"))
        total_ns += -frac_ns if (seconds or "").startswith("-") else frac_ns
    if sign == "-":
        total_ns = -total_ns
    return total_ns // 1_000_000


def _check_auto_offset_reset(value: str) -> str | None:
    """Why ``value`` is not a share.auto.offset.reset strategy, or None."""
    if value in ("earliest", "latest"):
        return None
    if value.startswith("by_duration:"):
        ms = duration_ms(value[len("by_duration:") :])
        if ms is None:
            return "the duration after 'by_duration:' is not an ISO-8601 duration (PnDTnHnMn.nS)"
        if ms < 0:
            return "a negative duration is not allowed"
        return None
    return "must be 'earliest', 'latest' or 'by_duration:<ISO-8601 duration>'"


def _check_isolation_level(value: str) -> str | None:
    if value in ("read_committed", "read_uncommitted"):
        return None
    return "must be read_committed or read_uncommitted"


def _check_dlq_topic(value: str) -> str | None:
    """Why ``value`` (trimmed) cannot name a share group's DLQ topic, or None
    (Kafka 4.4's GroupConfig.validate)."""
    if value.startswith("__"):
        return "DLQ topic name must not start with '__'"
    return None


def _check_boolean(value: str) -> str | None:
    """Why ``value`` is not a boolean as Kafka's ConfigDef reads one (any case), or None."""
    return None if value.strip().lower() in ("true", "false") else "must be true or false"


@dataclasses.dataclass(frozen=True, slots=True)
class _GroupConfigDef:
    """One group config: its type, lower bound, and where its default and bounds come from."""

    name: str
    is_int: bool
    at_least: int = 0
    setting: str | None = None  # the group type's settings field giving the default
    fixed_default: str | None = None  # the default of a config without a broker setting
    check: Callable[[str], str | None] | None = None  # a string config's validator
    config_type: int = _STRING_TYPE  # (of a config that is not is_int)
    trimmed: bool = False  # stored trimmed (a Kafka STRING config)

    @property
    def kind(self) -> str:
        """The group type whose settings it overrides: ``consumer`` or ``share``."""
        return self.name.split(".", 1)[0]

    @property
    def broker_name(self) -> str | None:
        """The broker setting this config overrides (its DescribeConfigs synonym)."""
        if self.setting is None:
            return None
        return f"group.{self.kind}." + self.setting.replace("_", ".")

    def bound_name(self, which: str) -> str:
        """The broker setting of its ``min`` or ``max`` bound."""
        assert self.setting is not None
        return f"group.{self.kind}.{which}." + self.setting.replace("_", ".")


GROUP_CONFIGS: dict[str, _GroupConfigDef] = {
    d.name: d
    for d in (
        _GroupConfigDef(
            "consumer.heartbeat.interval.ms",
            is_int=True,
            at_least=1,
            setting="heartbeat_interval_ms",
        ),
        _GroupConfigDef(
            "consumer.session.timeout.ms", is_int=True, at_least=1, setting="session_timeout_ms"
        ),
        _GroupConfigDef(
            "share.auto.offset.reset",
            is_int=False,
            fixed_default="latest",
            check=_check_auto_offset_reset,
        ),
        _GroupConfigDef(
            "share.delivery.count.limit", is_int=True, at_least=2, setting="delivery_count_limit"
        ),
        _GroupConfigDef(
            "share.heartbeat.interval.ms", is_int=True, at_least=1, setting="heartbeat_interval_ms"
        ),
        _GroupConfigDef(
            "share.isolation.level",
            is_int=False,
            fixed_default="read_uncommitted",
            check=_check_isolation_level,
        ),
        _GroupConfigDef(
            "share.partition.max.record.locks",
            is_int=True,
            at_least=100,
            setting="partition_max_record_locks",
        ),
        _GroupConfigDef(
            "share.record.lock.duration.ms",
            is_int=True,
            at_least=1000,
            setting="record_lock_duration_ms",
        ),
        _GroupConfigDef(
            "share.renew.acknowledge.enable",
            is_int=False,
            fixed_default="true",
            check=_check_boolean,
            config_type=_BOOLEAN_TYPE,
        ),
        _GroupConfigDef(
            "share.session.timeout.ms", is_int=True, at_least=1, setting="session_timeout_ms"
        ),
        _GroupConfigDef(
            "errors.deadletterqueue.topic.name",
            is_int=False,
            fixed_default="",
            check=_check_dlq_topic,
            trimmed=True,
        ),
        _GroupConfigDef(
            "errors.deadletterqueue.copy.record.enable",
            is_int=False,
            fixed_default="false",
            check=_check_boolean,
            config_type=_BOOLEAN_TYPE,
        ),
    )
}


@dataclasses.dataclass(frozen=True, slots=True)
class GroupConfigEntry:
    """One group config as DescribeConfigs reports it.

    Attributes:
        synonyms: ``(name, value, source)`` from the most to the least specific:
            the group's override, then the broker setting it overrides (or the
            config's own default when no broker setting exists).
    """

    name: str
    value: str
    source: int
    config_type: int
    synonyms: tuple[tuple[str, str, int], ...]


def _parse_int(name: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise InvalidGroupConfigError(f"{name}: {text!r} is not an integer") from None


class GroupConfigs:
    """Every group's config overrides over the broker's settings (see the module rules).

    Args:
        settings: the broker's ``group.share.*`` settings.
        overrides: the stored overrides, per group.
        store: ``(group_id, overrides) -> None`` writes a group's whole set of
            overrides durably (raises the store's error); None keeps them in memory.
        consumer: the broker's ``group.consumer.*`` settings (None: Kafka's defaults).
    """

    def __init__(
        self,
        settings: ShareGroupSettings,
        overrides: Mapping[str, Mapping[str, str]],
        store: Callable[[str, Mapping[str, str]], None] | None,
        consumer: ConsumerGroupSettings | None = None,
    ) -> None:
        self._kinds: dict[str, ShareGroupSettings | ConsumerGroupSettings] = {
            "share": settings,
            "consumer": consumer or ConsumerGroupSettings(),
        }
        self._overrides = {g: dict(c) for g, c in overrides.items()}
        self._store = store

    def proposed(
        self, group_id: str, changes: Mapping[str, str | None], *, incremental: bool
    ) -> dict[str, str]:
        """``group_id``'s whole set of overrides after ``changes`` (see :meth:`alter`),
        validated; nothing changes.

        Raises:
            InvalidGroupResourceError, InvalidGroupConfigError: as :meth:`alter`.
        """
        if not group_id:
            raise InvalidGroupResourceError("a GROUP config resource needs a group name")
        new = dict(self._overrides.get(group_id, {})) if incremental else {}
        for name, value in changes.items():
            d = GROUP_CONFIGS.get(name)
            if value is None:
                new.pop(name, None)
            else:
                new[name] = value.strip() if d is not None and d.trimmed else value
        self._validate(new)
        return new

    def use_cluster(self, overrides: Mapping[str, Mapping[str, str]]) -> None:
        """Cluster mode: every group's overrides are the cluster's (ZooKeeper's),
        replacing what this broker held."""
        self._overrides = {g: dict(c) for g, c in overrides.items() if c}

    def effective(self, group_id: str) -> ShareGroupConfig:
        """``group_id``'s effective settings: its overrides over the broker defaults,
        clamped into the broker's current bounds."""
        return ShareGroupConfig(
            auto_offset_reset=self.value("share.auto.offset.reset", group_id),
            record_lock_duration_ms=self.int_value("share.record.lock.duration.ms", group_id),
            delivery_count_limit=self.int_value("share.delivery.count.limit", group_id),
            isolation_level=self.value("share.isolation.level", group_id),
            partition_max_record_locks=self.int_value("share.partition.max.record.locks", group_id),
            renew_acknowledge_enable=(
                self.value("share.renew.acknowledge.enable", group_id).strip().lower() == "true"
            ),
            dlq_topic=self.value("errors.deadletterqueue.topic.name", group_id),
            dlq_copy_record=(
                self.value("errors.deadletterqueue.copy.record.enable", group_id).strip().lower()
                == "true"
            ),
        )

    def consumer_timings(self, group_id: str) -> tuple[int, int]:
        """Consumer group ``group_id``'s session timeout and heartbeat interval (ms),
        its overrides over the broker's, clamped into the broker's current bounds
        (Kafka's GroupMetadataManager asks the group's config first)."""
        return (
            self.int_value("consumer.session.timeout.ms", group_id),
            self.int_value("consumer.heartbeat.interval.ms", group_id),
        )

    def overrides(self, group_id: str) -> dict[str, str]:
        """The configs set on ``group_id`` (a copy)."""
        return dict(self._overrides.get(group_id, {}))

    def configured(self) -> list[str]:
        """The groups with at least one config set, by name."""
        return sorted(g for g, c in self._overrides.items() if c)

    def describe(self, group_id: str) -> list[GroupConfigEntry]:
        """Every group config of ``group_id`` with its value, source and synonyms, by name.

        Raises:
            InvalidGroupResourceError: ``group_id`` is empty.
        """
        if not group_id:
            raise InvalidGroupResourceError("a GROUP config resource needs a group name")
        overrides = self._overrides.get(group_id, {})
        out = []
        for name, d in sorted(GROUP_CONFIGS.items()):
            synonyms: list[tuple[str, str, int]] = []
            if name in overrides:
                synonyms.append((name, overrides[name], GROUP_CONFIG_SOURCE))
            default = self._default(d)
            if d.broker_name is not None and d.setting is not None:
                kafka_default = str(getattr(type(self._kinds[d.kind])(), d.setting))
                if default != kafka_default:
                    synonyms.append((d.broker_name, default, _STATIC_BROKER_CONFIG_SOURCE))
                synonyms.append((d.broker_name, kafka_default, _DEFAULT_CONFIG_SOURCE))
            else:
                synonyms.append((name, default, _DEFAULT_CONFIG_SOURCE))
            out.append(
                GroupConfigEntry(
                    name=name,
                    value=overrides.get(name, default),
                    source=synonyms[0][2],
                    config_type=_INT_TYPE if d.is_int else d.config_type,
                    synonyms=tuple(synonyms),
                )
            )
        return out

    def alter(
        self,
        group_id: str,
        changes: Mapping[str, str | None],
        *,
        incremental: bool,
        validate_only: bool = False,
    ) -> None:
        """Change ``group_id``'s config overrides, all of them or none.

        Args:
            changes: config name -> new value, or None to remove the override.
            incremental: True changes only the configs named (IncrementalAlterConfigs);
                False makes ``changes`` the group's whole set of overrides (AlterConfigs).
            validate_only: check, change nothing.

        Raises:
            InvalidGroupResourceError: ``group_id`` is empty.
            InvalidGroupConfigError: a name is unknown, a value is invalid or out of
                the broker's bounds, or the session timeout would not exceed the
                heartbeat interval.
            The store's error: the change cannot be written (nothing changed).
        """
        new = self.proposed(group_id, changes, incremental=incremental)
        if validate_only or new == self._overrides.get(group_id, {}):
            return
        if self._store is not None:
            self._store(group_id, new)
        if new:
            self._overrides[group_id] = new
        else:
            self._overrides.pop(group_id, None)
        log.info("group %r: configs now %s", group_id, new)

    def _validate(self, overrides: Mapping[str, str]) -> None:
        unknown = sorted(n for n in overrides if n not in GROUP_CONFIGS)
        if unknown:
            raise InvalidGroupConfigError(
                f"unknown group config {unknown[0]!r} (brokerlite serves "
                f"{', '.join(sorted(GROUP_CONFIGS))})"
            )
        ints: dict[str, int] = {}
        for name, d in GROUP_CONFIGS.items():
            if name not in overrides:
                if d.is_int:
                    ints[name] = int(self._default(d))
                continue
            text = overrides[name]
            if not d.is_int:
                assert d.check is not None
                why = d.check(text)
                if why is not None:
                    raise InvalidGroupConfigError(f"{name}: {text!r}: {why}")
                continue
            value = _parse_int(name, text)
            if value < d.at_least:
                raise InvalidGroupConfigError(f"{name}: {value} is below {d.at_least}")
            assert d.setting is not None and d.broker_name is not None
            low, high = self._bounds(d)
            if value < low:
                raise InvalidGroupConfigError(
                    f"{name}: {value} is below the broker's {d.bound_name('min')} ({low})"
                )
            if value > high:
                raise InvalidGroupConfigError(
                    f"{name}: {value} is above the broker's {d.bound_name('max')} ({high})"
                )
            ints[name] = value
        for kind in self._kinds:
            session, heartbeat = f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms"
            if ints[session] <= ints[heartbeat]:
                raise InvalidGroupConfigError(
                    f"{session} must be greater than {heartbeat} "
                    f"({ints[session]} <= {ints[heartbeat]})"
                )

    def _bounds(self, d: _GroupConfigDef) -> tuple[int, int]:
        assert d.setting is not None
        settings = self._kinds[d.kind]
        return (
            int(getattr(settings, "min_" + d.setting)),
            int(getattr(settings, "max_" + d.setting)),
        )

    def _default(self, d: _GroupConfigDef) -> str:
        if d.setting is not None:
            return str(getattr(self._kinds[d.kind], d.setting))
        assert d.fixed_default is not None
        return d.fixed_default

    def value(self, name: str, group_id: str) -> str:
        value = self._overrides.get(group_id, {}).get(name)
        return self._default(GROUP_CONFIGS[name]) if value is None else value

    def int_value(self, name: str, group_id: str) -> int:
        """An int config's effective value, clamped into the broker's current bounds
        (they may have changed since it was set, as Kafka clamps)."""
        d = GROUP_CONFIGS[name]
        value = int(self.value(name, group_id))
        low, high = self._bounds(d)
        return min(max(value, low), high)
