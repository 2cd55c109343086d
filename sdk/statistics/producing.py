"""A producer's statistics snapshot (:meth:`Producer.statistics`): per topic and
per partition written to, and the totals; with how they are built from the
accumulator's counters.

The rules of the snapshots are :mod:`trafka.sdk.statistics`'s; the counting is
:mod:`.counters`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .counters import PartitionCounters, TopicCounters

if TYPE_CHECKING:
    from .brokers import BrokerStatistics, TelemetryStatistics

__all__ = [
    "ProducerPartitionStatistics",
    "ProducerStatistics",
    "TopicStatistics",
    "producer_partition_statistics",
    "topic_statistics",
]


@dataclasses.dataclass(frozen=True, slots=True)
class TopicStatistics:
    """A producer's records for one topic.

    Attributes:
        records_sent, bytes_sent, batches_sent: acknowledged by the broker (with
            ``acks=0``: written to the socket); bytes are record batch bytes.
        records_failed: records whose delivery failed for good.
        batch_retries: batches sent again after a retriable error.
        errors: failed records per error name (``"MESSAGE_TOO_LARGE"``, or an
            exception's class name such as ``"DeliveryTimeoutError"``).
    """

    records_sent: int
    bytes_sent: int
    batches_sent: int
    records_failed: int
    batch_retries: int
    errors: Mapping[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerPartitionStatistics(TopicStatistics):
    """A producer's records for one partition it wrote to: :class:`TopicStatistics`'s
    counts, for this partition, and more.

    Attributes:
        records_retried: records of the batches sent again.
        records_queued, bytes_queued: waiting in the producer to be sent now
            (batches in flight not included; bytes: a batch's encoding once
            it has one, else its estimated size).
        latency_avg_ms, latency_max_ms: from an acknowledged batch's first
            append to its acknowledgement (each batch counts once, with its
            oldest record's time); None before the first.
    """

    records_retried: int
    records_queued: int
    bytes_queued: int
    latency_avg_ms: float | None
    latency_max_ms: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerStatistics:
    """A snapshot of a producer (:meth:`Producer.statistics`).

    Attributes:
        records_sent, bytes_sent, batches_sent, records_failed, batch_retries:
            totals over ``topics``.
        records_buffered: records waiting to be sent or for their acknowledgement now.
        buffer_memory_used, buffer_memory: what the buffered records hold of
            ``buffer.memory``, and the limit.
        requests_in_flight: Produce requests waiting for their response now.
        producer_id, producer_epoch: the idempotent identity (-1 without one).
        transactions_committed, transactions_aborted: transactions ended.
        topics: per topic.
        brokers: per node id.
        telemetry: the metrics push (None with ``enable.metrics.push`` off).
        partitions: per :class:`~trafka.sdk.fetcher.TopicPartition` written to.
    """

    records_sent: int
    bytes_sent: int
    batches_sent: int
    records_failed: int
    batch_retries: int
    records_buffered: int
    buffer_memory_used: int
    buffer_memory: int
    requests_in_flight: int
    producer_id: int
    producer_epoch: int
    transactions_committed: int
    transactions_aborted: int
    topics: Mapping[str, TopicStatistics]
    brokers: Mapping[int, BrokerStatistics]
    telemetry: TelemetryStatistics | None = None
    partitions: Mapping[Any, ProducerPartitionStatistics] = dataclasses.field(default_factory=dict)


# -- building snapshots --------------------------------------------------------------------------


def _topic_fields(counters: TopicCounters) -> dict[str, Any]:
    return {
        "records_sent": counters.records_sent,
        "bytes_sent": counters.bytes_sent,
        "batches_sent": counters.batches_sent,
        "records_failed": counters.records_failed,
        "batch_retries": counters.batch_retries,
        "errors": dict(counters.errors),
    }


def topic_statistics(counters: TopicCounters) -> TopicStatistics:
    return TopicStatistics(**_topic_fields(counters))


def producer_partition_statistics(
    counters: PartitionCounters, records_queued: int, bytes_queued: int
) -> ProducerPartitionStatistics:
    latency = counters.latency
    return ProducerPartitionStatistics(
        **_topic_fields(counters),
        records_retried=counters.records_retried,
        records_queued=records_queued,
        bytes_queued=bytes_queued,
        latency_avg_ms=latency.total / latency.count * 1000 if latency.count else None,
        latency_max_ms=latency.max * 1000 if latency.count else None,
    )
