"""Offsets admin of share groups at the share-partitions: DescribeShareGroupOffsets,
AlterShareGroupOffsets and DeleteShareGroupOffsets (KIP-932, KIP-1226), sans-IO
apart from reading the partition logs.

:class:`ShareOffsetsAdmin` is a capability of :class:`~.fetcher.ShareFetcher`:
it reads and replaces the same table of share-partitions that ShareFetch and
ShareAcknowledge work on, within one call, so it is a base class of the
fetcher's rather than an object of its own.

Rules and invariants (whether the group may be changed is the coordinator's to
decide):

* :meth:`ShareOffsetsAdmin.start_offset` reports a share-partition's start
  offset and its lag (KIP-1226, as Kafka computes it): the high watermark minus
  the start offset minus the in-flight offsets already done, never below 0.
* :meth:`ShareOffsetsAdmin.alter_start_offsets` replaces a share-partition's
  whole state with a fresh one at the new start offset (its in-flight records
  and their delivery counts are forgotten); an offset must be 0 or more
  (INVALID_REQUEST) and at most the log end offset (OFFSET_OUT_OF_RANGE; Kafka
  accepts it and resets the share-partition to the log start at its next
  fetch), and one below the log start offset starts at the log start (where
  Kafka's next fetch would move it). Partitions without state get it.
* :meth:`ShareOffsetsAdmin.delete_topics` forgets one group's state of whole
  topics; the next member starts them by ``share.auto.offset.reset``.
* Both are written to the journal in one fsynced write before they take effect
  in memory: a failed write changes nothing (KAFKA_STORAGE_ERROR).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from trafka.brokerlite.errors import BrokerError
from trafka.codec.errors import ErrorCode

from .partition import SharePartition
from .persister import RemotePersister
from .share_config import ShareConfig
from .state_store import SP, ShareStateError, ShareStateStore

if TYPE_CHECKING:
    from trafka.brokerlite.storage.log_manager import LogManager

__all__ = ["EntryResult", "ShareOffsetInfo", "ShareOffsetsAdmin"]

log = logging.getLogger("trafka.brokerlite")


@dataclasses.dataclass(frozen=True, slots=True)
class ShareOffsetInfo:
    """One share-partition as DescribeShareGroupOffsets reports it.

    Attributes:
        start_offset: the share-partition start offset (SPSO).
        lag: records from the start offset up to the high watermark that are not
            yet acknowledged or archived (KIP-1226).
    """

    start_offset: int
    lag: int


EntryResult = tuple[ErrorCode, str | None]

_OK: EntryResult = (ErrorCode.NONE, None)


class ShareOffsetsAdmin:
    """The offsets admin requests over the fetcher's share-partitions (see the
    module rules). The fetcher sets the attributes below."""

    _logs: LogManager
    _store: ShareStateStore | RemotePersister
    _partitions: dict[SP, SharePartition]
    _topic_ids: dict[SP, str]
    _config_for: Callable[[str], ShareConfig]
    _notify: Callable[[str, int], None]
    _deadline_stale: bool

    def start_offset(self, group_id: str, topic: str, partition: int) -> ShareOffsetInfo | None:
        """``group_id``'s start offset and lag of one partition; None when it has
        no share state there (or the topic no longer exists)."""
        key = (group_id, topic, partition)
        sp = self._partitions.get(key)
        info = self._logs.topic(topic)
        if sp is None or info is None or not 0 <= partition < info.num_partitions:
            return None
        if self._topic_ids.get(key) not in ("", str(info.topic_id)):
            return None  # the state of a topic since deleted and created again
        high_watermark = int(self._logs.partition(topic, partition).high_watermark)
        lag = high_watermark - sp.start_offset - sp.delivery_complete_count()
        return ShareOffsetInfo(sp.start_offset, max(lag, 0))

    def start_offsets(self, group_id: str) -> dict[tuple[str, int], ShareOffsetInfo]:
        """Every partition ``group_id`` has share state for, by (topic, partition)."""
        out = {}
        for group, topic, partition in sorted(self._partitions):
            if group == group_id:
                found = self.start_offset(group_id, topic, partition)
                if found is not None:
                    out[(topic, partition)] = found
        return out

    def alter_start_offsets(
        self, group_id: str, offsets: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], EntryResult]:
        """Set ``group_id``'s start offsets: ``{(topic, partition): offset}``.

        Returns:
            Per entry NONE, or UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST (a
            negative offset), OFFSET_OUT_OF_RANGE (past the log end offset) or
            KAFKA_STORAGE_ERROR (the journal write failed: nothing changed),
            with a message.
        """
        results: dict[tuple[str, int], EntryResult] = {}
        fresh: dict[tuple[str, int], SharePartition] = {}
        config = self._config_for(group_id)
        for (topic, partition), offset in offsets.items():
            try:
                plog = self._logs.partition(topic, partition)
            except BrokerError:
                results[(topic, partition)] = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"unknown topic-partition {topic}-{partition}",
                )
                continue
            end = int(plog.log_end_offset)
            if offset < 0:
                results[(topic, partition)] = (
                    ErrorCode.INVALID_REQUEST,
                    f"{topic}-{partition}: start offset {offset} is negative",
                )
            elif offset > end:
                results[(topic, partition)] = (
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"{topic}-{partition}: start offset {offset} is past the log end offset {end}",
                )
            else:
                fresh[(topic, partition)] = SharePartition(
                    max(offset, int(plog.log_start_offset)),
                    delivery_count_limit=config.delivery_count_limit,
                    max_record_locks=config.partition_max_record_locks,
                )
                results[(topic, partition)] = _OK
        if not fresh:
            return results
        entries = []
        topic_ids = {}
        for (topic, partition), sp in fresh.items():
            info = self._logs.topic(topic)
            topic_ids[(topic, partition)] = str(info.topic_id) if info is not None else ""
            entries.append(
                {
                    "kind": "partition",
                    "group": group_id,
                    "topic": topic,
                    "topic_id": topic_ids[(topic, partition)],
                    "partition": partition,
                    **sp.snapshot(),
                }
            )
        try:
            self._store.write(entries)
        except ShareStateError as exc:
            log.error("share group %r: new start offsets not stored: %s", group_id, exc)
            for tp in fresh:
                results[tp] = (ErrorCode.KAFKA_STORAGE_ERROR, f"the share state not stored: {exc}")
            return results
        for (topic, partition), sp in fresh.items():
            key = (group_id, topic, partition)
            self._partitions[key] = sp
            self._topic_ids[key] = topic_ids[(topic, partition)]
            log.info(
                "share group %r: %s-%d starts at offset %d",
                group_id,
                topic,
                partition,
                sp.start_offset,
            )
        self._deadline_stale = True
        for topic, partition in fresh:
            self._notify(topic, partition)
        return results

    def delete_topics(self, group_id: str, topics: Iterable[str]) -> dict[str, EntryResult]:
        """Forget ``group_id``'s share state of whole topics.

        Returns:
            Per distinct topic NONE, or UNKNOWN_TOPIC_OR_PARTITION (no such
            topic, or no state of it) or KAFKA_STORAGE_ERROR (the journal write
            failed: nothing changed), with a message.
        """
        results: dict[str, EntryResult] = {}
        gone: dict[str, list[SP]] = {}
        for topic in dict.fromkeys(topics):
            if self._logs.topic(topic) is None:
                results[topic] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic}")
                continue
            keys = sorted(k for k in self._partitions if k[0] == group_id and k[1] == topic)
            if not keys:
                results[topic] = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"there is no offset information to delete: group {group_id} has no "
                    f"share state of {topic}",
                )
                continue
            gone[topic] = keys
            results[topic] = _OK
        entries = [
            {"kind": "drop_partition", "group": g, "topic": t, "partition": p}
            for keys in gone.values()
            for g, t, p in keys
        ]
        try:
            self._store.write(entries)
        except ShareStateError as exc:
            log.error("share group %r: deleted offsets not stored: %s", group_id, exc)
            for topic in gone:
                results[topic] = (
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    f"the deletion not stored: {exc}",
                )
            return results
        for topic, keys in gone.items():
            for key in keys:
                del self._partitions[key]
                self._topic_ids.pop(key, None)
            log.info("share group %r: share state of %s deleted", group_id, topic)
        self._deadline_stale = True
        return results
