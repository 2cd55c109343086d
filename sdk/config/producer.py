"""The producer's settings: :class:`ProducerConfig`.

The rules of every component's settings are the package's (:mod:`trafka.sdk.config`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._validate import INT32_MAX
from ..errors import ConfigError
from ..interceptors import producer_interceptor_classes
from ..partitioners import PARTITIONERS
from .client import ClientConfig
from .values import (
    _COMPRESSION,
    _COMPRESSION_LEVELS,
    _SERDES,
    _acks,
    _bool,
    _callable_or_name,
    _choice,
    _field,
    _int,
    _opt_bool,
    _opt_callable,
    _opt_int,
    _opt_str,
)

__all__ = ["ProducerConfig"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig(ClientConfig):
    """Producer settings (plus the connection settings of :class:`ClientConfig`).

    Attributes:
        acks: ``-1`` (``"all"``), ``0`` or ``1``.
        linger_ms: how long a batch waits for more records before it is sent.
        batch_size: the size in bytes at which a partition's batch is sent
            (default 1,000,000, librdkafka's; Java's is 16 KiB).
        compression_type: ``none``, ``gzip``, ``snappy``, ``lz4`` or ``zstd``.
        compression_level: codec level, ``None`` for the codec's default.
        partitioner: a name from :mod:`trafka.sdk.partitioners` or a callable
            ``(key_bytes, num_partitions, available_partitions) -> int``.
            Default ``murmur2``: the Java client's (null keys sticky).
        retries: how often a failed batch is retried (bounded by delivery_timeout_ms).
        delivery_timeout_ms: upper bound from ``send`` to success or failure.
        max_in_flight_requests_per_connection: unacknowledged requests per broker.
        buffer_memory: bytes of records buffered; ``send`` waits when it is full.
        max_block_ms: how long ``send`` may wait for buffer space or metadata.
        max_request_size: the largest request (and so record) sent.
        enable_idempotence: ``None`` (Kafka's default: on unless another setting
            conflicts), ``True`` or ``False``.
        transactional_id: enables transactions (:meth:`Producer.init_transactions`);
            producers sharing it fence each other, the newest wins.
        transaction_timeout_ms: the coordinator aborts a transaction open longer
            than this (it must not exceed the broker's ``transaction.max.timeout.ms``).
        key_serializer / value_serializer: ``bytes``, ``str``, ``json`` or a callable.
        interceptor_classes: producer interceptors (``on_send``,
            ``on_acknowledgement``, ``close``; :mod:`trafka.sdk.interceptors`):
            import paths (``"pkg.module:Class"``), classes or objects, in order.
        on_delivery: confluent-kafka's delivery callback for every record sent
            without one of its own (``dr_cb``, ``dr_msg_cb`` too):
            ``on_delivery(error, metadata)``, as ``send(..., on_delivery=)``.
        delivery_report_only_error: librdkafka's: ``on_delivery`` hears only
            of the records that failed.
        message_timeout_ms: librdkafka's name of ``delivery.timeout.ms``, with
            librdkafka's rules (CONFIGURATION.md): 0 is no limit (2147483647 ms
            here), and it must be greater than ``linger.ms``; Java's rule
            (``>= linger.ms + request.timeout.ms``) does not apply to it.
        queue_buffering_max_messages: librdkafka's bound of the records
            buffered (0: none, the default here): a record beyond it waits for
            room as one beyond ``buffer.memory`` does (up to ``max.block.ms``).
        queue_buffering_max_kbytes: librdkafka's bound of the buffer in
            KiB: ``buffer.memory`` is 1024 times it.
        batch_num_messages: librdkafka's bound of the records in one batch
            (none by default here: ``batch.size`` bounds batches in bytes).
        sticky_partitioning_linger_ms: librdkafka's: how long a key-less record's
            partition is kept under librdkafka's partitioners
            (``consistent_random``...; :mod:`trafka.sdk.partitioners`), 10 ms
            by default as there; 0: a random partition per record. Java's
            ``murmur2`` keeps its own (KIP-480, per batch) and ignores it.
        topic_metadata_propagation_max_ms: librdkafka's: a record of a topic
            whose metadata is unknown, waiting for it under
            ``delivery.timeout.ms`` (confluent-kafka's drop-in,
            :mod:`trafka.sdk.producer_parking`), fails with
            UNKNOWN_TOPIC_OR_PARTITION once the brokers have said they do not
            know the topic and this long has passed since its topic's first
            such record was sent (30 s, as librdkafka's).
    """

    acks: int = _field(-1, _acks, aliases=("request.required.acks",))
    linger_ms: int = _field(5, _int(0), aliases=("queue.buffering.max.ms",))
    # 16x Java's 16384: our batches are lists that grow with their records (Java
    # preallocates batch.size per partition), so a larger bound costs no memory
    # and saves a request (~250 us of socket and event-loop work) per 16 KiB.
    batch_size: int = _field(1_000_000, _int(0, INT32_MAX, unit="bytes"))
    compression_type: str = _field("none", _choice(*_COMPRESSION), aliases=("compression.codec",))
    compression_level: int | None = _field(
        None,
        _opt_int(
            None,
            note="-1 or the codec's own range: "
            + ", ".join(f"{c} {lo} to {hi}" for c, (lo, hi) in _COMPRESSION_LEVELS.items()),
        ),
    )
    partitioner: Any = _field("murmur2", _callable_or_name(*PARTITIONERS))  # noqa: RUF009
    retries: int = _field(INT32_MAX, _int(0, INT32_MAX), aliases=("message.send.max.retries",))
    delivery_timeout_ms: int = _field(120_000, _int(1, INT32_MAX))
    max_in_flight_requests_per_connection: int = _field(
        5, _int(1, INT32_MAX), aliases=("max.in.flight",)
    )
    buffer_memory: int = _field(32 * 1024 * 1024, _int(1, unit="bytes"))
    max_block_ms: int = _field(60_000, _int(0))
    max_request_size: int = _field(1024 * 1024, _int(1, INT32_MAX, unit="bytes"))
    enable_idempotence: bool | None = _field(None, _opt_bool)
    transactional_id: str | None = _field(None, _opt_str)
    transaction_timeout_ms: int = _field(60_000, _int(1, INT32_MAX))
    key_serializer: Any = _field("bytes", _callable_or_name(*_SERDES))  # noqa: RUF009
    value_serializer: Any = _field("bytes", _callable_or_name(*_SERDES))  # noqa: RUF009
    interceptor_classes: tuple[Any, ...] = _field((), producer_interceptor_classes)
    on_delivery: Any = _field(  # noqa: RUF009
        None, _opt_callable, dotted="on_delivery", aliases=("dr_cb", "dr_msg_cb")
    )
    delivery_report_only_error: bool = _field(False, _bool)
    message_timeout_ms: int | None = _field(None, _opt_int(0, INT32_MAX))
    queue_buffering_max_messages: int = _field(0, _int(0, INT32_MAX))
    queue_buffering_max_kbytes: int | None = _field(None, _opt_int(1, INT32_MAX))
    batch_num_messages: int | None = _field(None, _opt_int(1, 1_000_000))
    sticky_partitioning_linger_ms: int = _field(10, _int(0, 900_000))
    topic_metadata_propagation_max_ms: int = _field(30_000, _int(0, 3_600_000))

    def _check(self) -> None:
        super(ProducerConfig, self)._check()
        self._check_librdkafka()
        level = self.compression_level
        bounds = _COMPRESSION_LEVELS.get(self.compression_type)
        if level is not None and bounds is not None and level != -1:
            low, high = bounds
            if not low <= level <= high:
                # Else every batch would fail to compress, in the sender.
                raise ConfigError(
                    f"compression.level for {self.compression_type} must be -1 (the "
                    f"codec's default) or {low} to {high}, got {level}"
                )
        conflicts = []
        if self.acks != -1:
            conflicts.append("acks must be all")
        if self.retries == 0:
            conflicts.append("retries must be > 0")
        if self.max_in_flight_requests_per_connection > 5:
            conflicts.append("max.in.flight.requests.per.connection must be <= 5")
        if self.enable_idempotence and conflicts:
            raise ConfigError("enable.idempotence=true requires: " + "; ".join(conflicts))
        if self.transactional_id is not None:
            if self.enable_idempotence is False:
                raise ConfigError("transactional.id requires enable.idempotence (not false)")
            if conflicts:
                raise ConfigError("transactional.id requires idempotence: " + "; ".join(conflicts))
        if self.message_timeout_ms is not None:
            pass  # librdkafka's rule, checked in _check_librdkafka
        elif self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise ConfigError(
                f"delivery.timeout.ms ({self.delivery_timeout_ms}) must be >= linger.ms + "
                f"request.timeout.ms ({self.linger_ms + self.request_timeout_ms}), as in "
                "Java's client (librdkafka's message.timeout.ms has librdkafka's rule instead)"
            )

    def _check_librdkafka(self) -> None:
        """librdkafka's settings, by librdkafka's rules (its CONFIGURATION.md)."""
        timeout = self.message_timeout_ms
        if timeout is not None:
            if timeout != 0 and timeout <= self.linger_ms:
                raise ConfigError(
                    f"message.timeout.ms ({timeout}) must be greater than linger.ms "
                    f"({self.linger_ms}), as in librdkafka (or 0: no limit)"
                )
            self._derive("delivery_timeout_ms", timeout or INT32_MAX, "message.timeout.ms")
        if self.queue_buffering_max_kbytes is not None:
            self._derive(
                "buffer_memory",
                self.queue_buffering_max_kbytes * 1024,
                "queue.buffering.max.kbytes",
            )
        if self.message_max_bytes is not None:
            self._derive("max_request_size", self.message_max_bytes, "message.max.bytes")

    @property
    def idempotent(self) -> bool:
        """Whether the producer uses producer ids and sequence numbers.

        Unset ``enable.idempotence`` means on, unless another setting conflicts
        (then the Java client silently turns it off, and so do we).
        A ``transactional.id`` always means on.
        """
        if self.transactional_id is not None:
            return True
        if self.enable_idempotence is not None:
            return self.enable_idempotence
        return (
            self.acks == -1 and self.retries > 0 and self.max_in_flight_requests_per_connection <= 5
        )
