"""The consumer's offset lookups: a topic's partitions, the first and last
offsets of partitions, the offsets for times, and the group's committed offsets.

:class:`OffsetLookups` is the part of the async
:class:`~trafka.sdk.consumer.Consumer` that asks the cluster about offsets
without touching positions: ListOffsets through the fetch driver's lookup
(:meth:`FetchDriver.list_offsets <trafka.sdk.consumer_fetching.FetchDriver.list_offsets>`),
OffsetFetch through the group's (:func:`~trafka.sdk.group.fetch_committed`),
metadata through the cluster.

Rules:

* Every lookup is bounded by ``default.api.timeout.ms`` as a whole (then
  :class:`~trafka.sdk.errors.ApiTimeoutError`); a partition whose leader
  moved is asked again after a metadata refresh.
* An empty partition has no first or last record: its first and end offsets
  are 0. A timestamp after every record of a partition finds None.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ._validate import (
    check_offsets,
    check_timestamp_ms,
    check_topic,
    check_topic_partition,
    check_topic_partitions,
)
from .calls import Calls
from .consumer_fetching import FetchDriver
from .errors import UsageError
from .fetcher import EARLIEST, LATEST, TopicPartition
from .group import fetch_committed
from .transport import Cluster

if TYPE_CHECKING:
    from .config.consumer import ConsumerConfig

__all__ = ["OffsetLookups"]


class OffsetLookups:
    """A consumer's offset lookups (see the module doc); the async consumer is one.

    Args:
        config: the consumer's configuration.
        cluster: its connections and metadata.
        calls: its retried calls (OffsetFetch).
        fetches: its fetch driver (ListOffsets).
    """

    def __init__(
        self, config: ConsumerConfig, cluster: Cluster, calls: Calls, fetches: FetchDriver
    ) -> None:
        self.config = config
        self._lookup_cluster = cluster
        self._lookup_calls = calls
        self._lookup_fetches = fetches

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition numbers, waiting for metadata up to ``default.api.timeout.ms``.

        Raises:
            KafkaError: the topic does not exist (UNKNOWN_TOPIC_OR_PARTITION).
        """
        check_topic("topic", topic)
        n = await self._lookup_cluster.partitions_for(
            topic, self.config.default_api_timeout_ms / 1000
        )
        return list(range(n))

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The first offset of each partition.

        Like :meth:`end_offsets` and :meth:`offsets_for_times`: bounded by
        ``default.api.timeout.ms`` as a whole (then ApiTimeoutError); a partition
        whose leader moved is asked again after a metadata refresh.

        Raises:
            KafkaError: the topic or partition does not exist, or another final error.
            ApiTimeoutError: no answer within ``default.api.timeout.ms``.
        """
        tps = check_topic_partitions("partitions", partitions)
        res = await self._lookup_fetches.list_offsets(
            "beginning_offsets", dict.fromkeys(tps, EARLIEST)
        )
        return {tp: (r[0] if r else 0) for tp, r in res.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset after the last record of each partition (the LSO under read_committed)."""
        tps = check_topic_partitions("partitions", partitions)
        res = await self._lookup_fetches.list_offsets("end_offsets", dict.fromkeys(tps, LATEST))
        return {tp: (r[0] if r else 0) for tp, r in res.items()}

    async def offset_bounds(
        self, earliest: Iterable[TopicPartition], latest: Iterable[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """:meth:`beginning_offsets` of ``earliest`` and :meth:`end_offsets` of
        ``latest``, asked of each leader in one round trip: two ListOffsets
        (a request names a partition once) written back to back, the first
        offsets' first. A leader answers a connection's requests in order, so
        a partition in both never has its first offset looked up after its end.
        """
        first = check_topic_partitions("earliest", earliest)
        last = check_topic_partitions("latest", latest)
        starts, ends = await self._lookup_fetches.list_offsets_together(
            "offset_bounds", [dict.fromkeys(first, EARLIEST), dict.fromkeys(last, LATEST)]
        )
        return (
            {tp: (r[0] if r else 0) for tp, r in starts.items()},
            {tp: (r[0] if r else 0) for tp, r in ends.items()},
        )

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """For each partition, the first ``(offset, timestamp)`` at or after the timestamp, or None."""
        targets = check_offsets("timestamps", timestamps, check_value=check_timestamp_ms)
        return await self._lookup_fetches.list_offsets("offsets_for_times", targets)

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset for ``partition`` (None if none).

        Raises:
            UsageError: no group.id.
            ApiTimeoutError: no answer within ``default.api.timeout.ms`` (a
                coordinator loading or moving meanwhile is waited out).
        """
        tp = check_topic_partition("partition", partition)
        if self.config.group_id is None:
            raise UsageError("committed() needs a group.id")
        got = await fetch_committed(self._lookup_calls, self.config, [tp])
        return got.get(tp)
