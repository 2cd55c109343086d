"""The consumer's settings: :class:`ConsumerConfig`.

The rules of every client's settings are the package's (:mod:`trafka.sdk.config`), where
``trafka.sdk.config.ConsumerConfig`` loads this module when first named: a
program that only produces does not make this dataclass (issue #48).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from .._validate import INT32_MAX
from ..errors import ConfigError, ConfigWarning
from ..interceptors import consumer_interceptor_classes
from .client import ClientConfig
from .values import (
    _SERDES,
    _assignors,
    _bool,
    _callable_or_name,
    _choice,
    _field,
    _int,
    _offset_reset,
    _opt_callable,
    _opt_int,
    _opt_str,
)

__all__ = ["ConsumerConfig"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConfig(ClientConfig):
    """Consumer settings (plus the connection settings of :class:`ClientConfig`).

    Attributes:
        group_id: the consumer group; ``None`` for a consumer that only uses ``assign``.
        group_instance_id: a static member id (KIP-345), or ``None``.
        auto_offset_reset: ``latest``, ``earliest`` or ``none`` (raise).
        enable_auto_commit: commit consumed positions every ``auto_commit_interval_ms``
            (without a ``group_id`` nothing is committed, whatever it says).
        auto_commit_interval_ms: how often positions are committed with
            ``enable_auto_commit``.
        enable_auto_offset_store: librdkafka's: true (the default) commits the
            positions after the records handed out; false commits only what the
            application stored with ``Consumer.store_offsets`` (at auto-commit,
            ``commit()`` without offsets, before a revocation and at close).
        enable_partition_eof: librdkafka's: hand out a ``PartitionEOF`` in the
            record stream each time the consumer reaches the end of a partition
            (the high watermark; the last stable offset under read_committed).
            Off by default, as in librdkafka.
        session_timeout_ms: the group coordinator removes a member it has not
            heard from for this long (classic protocol).
        heartbeat_interval_ms: how often the member heartbeats to the
            coordinator; must be lower than ``session_timeout_ms``.
        max_poll_interval_ms: a member that does not poll for this long leaves
            the group (its partitions go to the others).
        max_poll_records: records handed out per ``getmany``.
        fetch_min_bytes: a fetch waits until brokers have this much data (or
            ``fetch_max_wait_ms`` passed).
        fetch_max_wait_ms: how long a broker may hold a fetch waiting for
            ``fetch_min_bytes``.
        fetch_max_bytes: the most data a fetch response may carry (a larger
            first batch is still returned, as in Kafka).
        max_partition_fetch_bytes: the most data per partition in a fetch
            response (a larger first batch is still returned, as in Kafka).
        fetch_prefetch: fetch answers a partition buffers beyond the one being
            taken (1, the default, as Java's consumer): each is at most
            ``max.partition.fetch.bytes``. More keeps a reader that takes
            records faster than one fetch's round trip supplied.
        isolation_level: ``read_uncommitted`` or ``read_committed``.
        partition_assignment_strategy: assignor names in preference order (classic
            protocol only).
        group_protocol: ``classic`` (JoinGroup/SyncGroup, the default, as in Java) or
            ``consumer`` (KIP-848: the coordinator assigns, through
            ConsumerGroupHeartbeat).
        group_remote_assignor: with ``group.protocol=consumer``, the coordinator's
            assignor to use (``uniform``, ``range``, ...); ``None`` for its default.
        check_crcs: verify record batch CRCs.
        enable_incremental_fetch_sessions: ask brokers for incremental fetch
            sessions (KIP-227, as Java's consumer always does): fetches then name
            only partitions whose fetch offset changed. False sends full,
            sessionless fetches (kafka-python's switch of the same name).
        default_api_timeout_ms: bound for blocking calls without their own timeout.
        exclude_internal_topics: pattern subscriptions skip ``__consumer_offsets`` etc.
        allow_auto_create_topics: metadata requests may create subscribed topics.
        key_deserializer / value_deserializer: ``bytes``, ``str``, ``json`` or a callable.
        deserialization_error_handler: what a poll does with a record whose key
            or value does not deserialize: ``stop`` (the default: the poll
            hands out the partition's records before it, the next poll raises
            the SerializationError naming its topic, partition and offset, and
            the partition's position stays at it, so that nothing past it is
            committed; seek past it to go on), ``skip`` (logged, then passed
            over as consumed), or a callable ``handler(error) -> "stop" | "skip"``.
        on_commit: ``None``, or called as ``on_commit(error_or_None, offsets)`` after each
            commit of offsets, whoever started it (auto-commit, ``commit()``,
            ``commit_async()``, the commit before a revocation or at close), as
            librdkafka's ``on_commit`` / offset commit callback; ``offsets``
            maps each TopicPartition to the offset committed (confluent-kafka
            passes a list of TopicPartition carrying ``.offset``). It runs in
            the client's event loop and must not block; what it raises is logged.
        interceptor_classes: consumer interceptors (``on_consume``,
            ``on_commit``, ``close``; :mod:`trafka.sdk.interceptors`): import
            paths (``"pkg.module:Class"``), classes or objects, in order.
        queued_max_messages_kbytes: librdkafka's bound of the data fetched
            ahead, in KiB: ``fetch.max.bytes`` is at most 1024 times it (a
            fetch answer is what trafka holds ahead).
        fetch_queue_backoff_ms: librdkafka's wait before fetching again once
            its local queue is over ``queued.min.messages``; trafka holds no
            such queue, so there is never anything to wait for: taken as it is.
        queued_min_messages: librdkafka's threshold for fetching ahead; trafka
            fetches as it hands out records (``fetch.prefetch`` answers ahead),
            so it is taken with a :class:`~trafka.sdk.errors.ConfigWarning`.
    """

    group_id: str | None = _field(None, _opt_str)
    group_instance_id: str | None = _field(None, _opt_str)
    auto_offset_reset: str = _field("latest", _offset_reset)
    enable_auto_commit: bool = _field(True, _bool)
    enable_auto_offset_store: bool = _field(True, _bool)
    enable_partition_eof: bool = _field(False, _bool)
    auto_commit_interval_ms: int = _field(5_000, _int(1, INT32_MAX))
    session_timeout_ms: int = _field(45_000, _int(1, INT32_MAX))
    heartbeat_interval_ms: int = _field(3_000, _int(1, INT32_MAX))
    max_poll_interval_ms: int = _field(300_000, _int(1, INT32_MAX))
    max_poll_records: int = _field(500, _int(1, INT32_MAX))
    fetch_min_bytes: int = _field(1, _int(0, INT32_MAX))
    fetch_max_wait_ms: int = _field(500, _int(0, INT32_MAX), aliases=("fetch.wait.max.ms",))
    fetch_max_bytes: int = _field(52_428_800, _int(0, INT32_MAX))
    max_partition_fetch_bytes: int = _field(
        1_048_576, _int(0, INT32_MAX), aliases=("fetch.message.max.bytes",)
    )
    fetch_prefetch: int = _field(1, _int(1, 64))
    isolation_level: str = _field("read_uncommitted", _choice("read_uncommitted", "read_committed"))
    partition_assignment_strategy: tuple[str, ...] = _field(
        ("range", "cooperative-sticky"), _assignors
    )
    group_protocol: str = _field("classic", _choice("classic", "consumer"))
    group_remote_assignor: str | None = _field(None, _opt_str)
    check_crcs: bool = _field(True, _bool)
    enable_incremental_fetch_sessions: bool = _field(True, _bool)
    default_api_timeout_ms: int = _field(60_000, _int(0, INT32_MAX))
    exclude_internal_topics: bool = _field(True, _bool)
    allow_auto_create_topics: bool = _field(True, _bool)
    key_deserializer: Any = _field("bytes", _callable_or_name(*_SERDES))  # noqa: RUF009
    value_deserializer: Any = _field("bytes", _callable_or_name(*_SERDES))  # noqa: RUF009
    deserialization_error_handler: Any = _field("stop", _callable_or_name("stop", "skip"))  # noqa: RUF009
    on_commit: Any = _field(None, _opt_callable, dotted="on_commit")  # noqa: RUF009
    interceptor_classes: tuple[Any, ...] = _field((), consumer_interceptor_classes)
    queued_max_messages_kbytes: int | None = _field(None, _opt_int(1, 2_097_151))
    queued_min_messages: int | None = _field(None, _opt_int(1, 10_000_000))
    fetch_queue_backoff_ms: int | None = _field(None, _opt_int(0, 300_000))

    def _check(self) -> None:
        super(ConsumerConfig, self)._check()
        kbytes = self.queued_max_messages_kbytes
        if kbytes is not None and kbytes * 1024 < self.fetch_max_bytes:
            object.__setattr__(self, "fetch_max_bytes", kbytes * 1024)
        if self.queued_min_messages is not None:
            warnings.warn(
                "queued.min.messages: trafka has no prefetch threshold in records; it "
                "fetches fetch.prefetch answers ahead (1 by default), each bounded by "
                "max.partition.fetch.bytes",
                ConfigWarning,
                stacklevel=4,
            )
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(
                f"heartbeat.interval.ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session.timeout.ms ({self.session_timeout_ms})"
            )
        if self.group_instance_id is not None and self.group_id is None:
            raise ConfigError("group.instance.id requires group.id")
        if self.group_protocol == "consumer":
            # As the Java client: these belong to the coordinator under KIP-848.
            defaults = {f.name: f.default for f in dataclasses.fields(ConsumerConfig)}
            moved = {
                "session_timeout_ms": "group.consumer.session.timeout.ms",
                "heartbeat_interval_ms": "group.consumer.heartbeat.interval.ms",
                "partition_assignment_strategy": "group.remote.assignor (client side)",
            }
            for name, instead in moved.items():
                if getattr(self, name) != defaults[name]:
                    raise ConfigError(
                        f"{name.replace('_', '.')} cannot be set with group.protocol=consumer: "
                        f"the group coordinator owns it (use {instead})"
                    )
        elif self.group_remote_assignor is not None:
            raise ConfigError("group.remote.assignor needs group.protocol=consumer")

    @property
    def auto_commit(self) -> bool:
        """Whether positions are committed automatically.

        Without a group there is nothing to commit, so the default ``True`` of
        ``enable.auto.commit`` means off then.
        """
        return self.enable_auto_commit and self.group_id is not None

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"
