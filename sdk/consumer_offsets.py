"""The consumer's offset lookups: a topic's partitions, the first and last
offsets of partitions, the offsets for times (ListOffsets to each partition's
leader), and the group's committed offsets (OffsetFetch to its coordinator).

:class:`OffsetLookups` is an object the async
:class:`~trafka.sdk.consumer.Consumer` owns: its lookup methods are thin
calls of it, and its :class:`~trafka.sdk.consumer_fetching.FetchDriver` asks it
for the positions it starts from (resets, committed offsets). It needs only
the consumer's configuration and its cluster (connections and metadata); it
touches no position.

Rules:

* Every lookup is bounded by ``default.api.timeout.ms`` as a whole (then
  :class:`~trafka.sdk.errors.ApiTimeoutError`); a partition whose leader
  moved is asked again after a metadata refresh (:meth:`Calls.per_leader
  <trafka.sdk.calls.Calls.per_leader>`).
* An empty partition has no first or last record: its first and end offsets
  are 0. A timestamp after every record of a partition finds None.
* ListOffsets asks with the consumer's isolation level: under read_committed
  the end is the last stable offset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from trafka.codec import ApiKey, KafkaError

from ._validate import (
    check_offsets,
    check_timestamp_ms,
    check_topic,
    check_topic_partition,
    check_topic_partitions,
)
from .calls import Calls
from .connection import request_all
from .errors import ApiTimeoutError, UsageError
from .fetcher import EARLIEST, LATEST, TopicPartition, build_list_offsets, parse_list_offsets
from .group import fetch_committed
from .transport import BrokerConnection, Cluster

if TYPE_CHECKING:
    from .config.consumer import ConsumerConfig

__all__ = ["OffsetLookups"]


class OffsetLookups:
    """A consumer's offset lookups (see the module doc).

    Args:
        config: the consumer's configuration (``read_committed``, ``group.id``,
            ``default.api.timeout.ms`` and the retry backoffs).
        cluster: its connections and metadata.
    """

    def __init__(self, config: ConsumerConfig, cluster: Cluster) -> None:
        self._config = config
        self._calls = Calls(
            cluster,
            config.retry_backoff_ms,
            config.retry_backoff_max_ms,
            config.default_api_timeout_ms,
        )

    async def partitions_for(self, topic: str) -> list[int]:
        check_topic("topic", topic)
        wait = self._config.default_api_timeout_ms / 1000
        return list(range(await self._calls.cluster.partitions_for(topic, wait)))

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        tps = check_topic_partitions("partitions", partitions)
        found = await self.list_offsets("beginning_offsets", dict.fromkeys(tps, EARLIEST))
        return _offsets(found)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        tps = check_topic_partitions("partitions", partitions)
        return _offsets(await self.list_offsets("end_offsets", dict.fromkeys(tps, LATEST)))

    async def offset_bounds(
        self, earliest: Iterable[TopicPartition], latest: Iterable[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        first = check_topic_partitions("earliest", earliest)
        last = check_topic_partitions("latest", latest)
        starts, ends = await self.list_offsets_together(
            "offset_bounds", [dict.fromkeys(first, EARLIEST), dict.fromkeys(last, LATEST)]
        )
        return _offsets(starts), _offsets(ends)

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: float | None = None
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        targets = check_offsets("timestamps", timestamps, check_value=check_timestamp_ms)
        found: dict[TopicPartition, tuple[int, int] | None] = await _within(
            timeout_ms, "offsets_for_times()", self.list_offsets("offsets_for_times", targets)
        )
        return found

    async def committed(
        self, partition: TopicPartition, timeout_ms: float | None = None
    ) -> int | None:
        tp = check_topic_partition("partition", partition)
        if self._config.group_id is None:
            raise UsageError("committed() needs a group.id")
        found = await _within(timeout_ms, f"committed({tp})", self.committed_offsets([tp]))
        offset: int | None = found.get(tp)
        return offset

    async def committed_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``tps`` (those without one left
        out): :func:`~trafka.sdk.group.fetch_committed`."""
        return await fetch_committed(self._calls, self._config, tps)

    async def list_offsets(
        self, what: str, targets: dict[TopicPartition, int], *, partial: bool = False
    ) -> dict[TopicPartition, Any]:
        """Look ``targets`` (timestamps, or EARLIEST / LATEST) up with each
        partition's leader (ListOffsets), retried as :meth:`Calls.per_leader
        <trafka.sdk.calls.Calls.per_leader>` does (``partial`` too).

        Returns:
            Per partition ``(offset, timestamp)``, None (no such record), or
            its error.
        """
        read_committed = self._config.read_committed

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            request = build_list_offsets(
                {tp: targets[tp] for tp in tps},
                conn.version_for(ApiKey.LIST_OFFSETS),
                read_committed=read_committed,
            )
            answers = parse_list_offsets(await conn.request(ApiKey.LIST_OFFSETS, request))
            return {tp: _found(res) for tp, res in answers.items()}

        return await self._calls.per_leader(what, targets, ask, None, partial=partial)

    async def list_offsets_together(
        self, what: str, target_sets: Sequence[dict[TopicPartition, int]]
    ) -> list[dict[TopicPartition, Any]]:
        """:meth:`list_offsets` of several target sets at once: each leader gets
        one ListOffsets per set (a request names a partition once), written
        back to back in the sets' order and answered in that order, so the
        sets cost one round trip per leader, not one each, and each set is
        answered after the one before it (a log's start then its end, say)."""
        read_committed = self._config.read_committed
        everything = [tp for targets in target_sets for tp in targets]

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            mine = set(tps)
            parts = [{tp: o for tp, o in targets.items() if tp in mine} for targets in target_sets]
            asked = [part for part in parts if part]
            version = conn.version_for(ApiKey.LIST_OFFSETS)
            requests = [
                build_list_offsets(p, version, read_committed=read_committed) for p in asked
            ]
            answers = await request_all(conn, [(ApiKey.LIST_OFFSETS, r) for r in requests])
            found: dict[TopicPartition, list[Any]] = {tp: [] for tp in tps}
            for part, answer in zip(asked, answers, strict=True):
                for tp, res in parse_list_offsets(answer).items():
                    if tp in part and tp in found:
                        found[tp].append(_found(res))
            out: dict[TopicPartition, Any] = {}
            for tp, results in found.items():
                error = next((r for r in results if isinstance(r, KafkaError)), None)
                if error is not None:
                    out[tp] = error
                elif len(results) == sum(tp in part for part in asked):
                    out[tp] = results  # (a partition an answer left out stays open)
            return out

        # Per partition, its results in the order of the sets that name it.
        results = await self._calls.per_leader(what, everything, ask, None)
        out: list[dict[TopicPartition, Any]] = [{} for _ in target_sets]
        seen: dict[TopicPartition, int] = {}
        for i, targets in enumerate(target_sets):
            for tp in targets:
                n = seen.get(tp, 0)
                out[i][tp] = results[tp][n]
                seen[tp] = n + 1
        return out


def _found(res: Any) -> Any:
    """A partition's ListOffsets result: its error, ``(offset, timestamp)``,
    or None where the broker found no record (offset -1)."""
    return res if isinstance(res, KafkaError) or res[0] >= 0 else None


def _offsets(found: dict[TopicPartition, Any]) -> dict[TopicPartition, int]:
    """First or end offsets from :meth:`OffsetLookups.list_offsets`' results:
    an empty partition's are 0."""
    return {tp: (r[0] if r else 0) for tp, r in found.items()}


async def _within(timeout_ms: float | None, what: str, call: Any) -> Any:
    """Await ``call``, within ``timeout_ms`` when given (its own bound otherwise).

    Raises:
        ApiTimeoutError: ``timeout_ms`` passed first.
    """
    if timeout_ms is None:
        return await call
    with anyio.move_on_after(timeout_ms / 1000):
        return await call
    raise ApiTimeoutError(f"{what} did not complete within {timeout_ms:g} ms")
