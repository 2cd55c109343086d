"""Consumer-group state kept in the replicated ``__consumer_offsets`` topic (cluster mode).

On a single node, groups' committed offsets and metadata live in a journal file
(:class:`~.offsets.OffsetStore`). In a cluster they must outlive the broker that
coordinates them, so :class:`ReplicatedOffsetStore` keeps them where Kafka does:
as records of the group's ``__consumer_offsets`` partition, which the cluster
replicates like any other; the coordinator is that partition's leader. The
state is the journal's (:class:`~.offsets.OffsetState`, changed by the same
entries); :class:`OffsetTopic` is the persistence port that writes each entry
as records and replays records as entries, and :class:`PendingOffsets` holds
what only a cluster has: TxnOffsetCommit's offsets waiting for their marker.

Rules and invariants:

* Records are keyed per thing, so that log compaction keeps exactly the live
  state (last writer wins per key; a null value is a tombstone). Keys and values
  are JSON (brokerlite's layout; Kafka's binary schemas are not in the specs
  this project generates from):

  ==========================================  ===============================================
  key                                         value
  ==========================================  ===============================================
  ``["o", group, topic, partition]``          ``[offset, leader_epoch, metadata, timestamp]``
  ``["g", group]``                            the classic group's metadata
  ``["c", group]``                            a consumer group's (KIP-848) snapshot
  ``["s", group]``                            a share group's (KIP-932) snapshot: its
                                              epochs, members and target assignment
  ``["p", group, producer, topic, partition]``  ``[offset, leader_epoch, metadata, timestamp,
                                              producer_epoch]``: a TxnOffsetCommit's offset,
                                              pending until its transaction's marker
  ==========================================  ===============================================

* A store change is one record batch appended to the group's partition on this
  broker (its leader): all of it or none, like the journal's entries. The change
  reaches memory only after the append succeeded.
* A partition's groups are in memory only while this broker leads it:
  :meth:`ReplicatedOffsetStore.load_partition` replays the partition's log when it
  becomes leader, :meth:`ReplicatedOffsetStore.unload_partition` forgets them
  when it stops. Replaying applies records in offset order, so the state is the
  same as the one the previous leader had for every record it wrote.
* Acknowledging a change only once the partition's followers have it (the high
  watermark passed it) is the broker's job, not this store's.
* What OffsetFetch reads is the offsets as of the partition's high watermark
  (:class:`ReplicatedView`): a commit counts once replicated, as Kafka's
  coordinator puts an offset in its cache only from the callback of its
  ``acks=-1`` append (3.9's ``GroupMetadataManager.storeOffsets``) and a
  transaction's offsets once its marker is replicated (``onTransactionCompleted``
  from ``KafkaApis.handleWriteTxnMarkersRequest``'s append callback). Until then
  the partition answers UNSTABLE_OFFSET_COMMIT to ``require_stable``, as 3.9's
  pending commits do (``GroupMetadata.hasPendingOffsetCommitsForTopicPartition``).
  A write whose answer timed out counts once its record does replicate, as
  Kafka 4's coordinator reads at the high watermark (``GroupCoordinatorService
  .fetchOffsets``), so a successor replaying the log reads the same. The store's
  own decisions (pending epochs, what a marker settles, what expires) see every
  write, replicated or not, as Kafka's do. A partition loaded by a new leader is
  read whole (3.9 loads to the log end).
* Transactional offsets (KIP-447 in a cluster, as Kafka keeps them): the group's
  coordinator holds TxnOffsetCommit's offsets as pending records of the
  producer id until the transaction's marker reaches this partition (it is one
  of the transaction's partitions). :meth:`ReplicatedOffsetStore.settle_transaction`
  then writes, in one batch, the tombstones of the producer's pending offsets
  and, for a COMMIT, the committed offsets of those staged at the
  transaction's epoch: the marker's, or for a marker of transaction version 2
  (WriteTxnMarkers v2 says so, KIP-1228) the one before it, since the
  coordinator bumped the epoch in its decision (lower epochs are a fenced
  instance's and are dropped). A
  producer whose pending offsets carry a newer epoch than a TxnOffsetCommit's
  is refused with INVALID_PRODUCER_EPOCH (the request is a zombie's).
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from trafka.codec.errors import ErrorCode

from ..cluster.view import OFFSETS_TOPIC
from ..errors import OffsetStoreError
from ..storage.internal_topic import InternalTopic, TopicPort
from .offsets import CommittedOffset, GroupStore, OffsetState, offset_rows
from .share_groups import ShareGroupStoreError

__all__ = [
    "OffsetTopic",
    "PendingOffsets",
    "ReplicatedOffsetStore",
    "ReplicatedShareGroups",
    "ReplicatedView",
]

log = logging.getLogger("trafka.brokerlite.groups")

Record = tuple[bytes, bytes | None]
TopicPartition = tuple[str, int]
#: An offsets write not yet replicated: (the log end after it, group, each
#: partition's new offset or None for a deleted one, the partitions it settles).
Unreplicated = tuple[
    int, str, dict[TopicPartition, CommittedOffset | None], frozenset[TopicPartition]
]


def _key(*parts: Any) -> bytes:
    return json.dumps(list(parts), separators=(",", ":")).encode()


def _value(doc: Any) -> bytes | None:
    return None if doc is None else json.dumps(doc, separators=(",", ":")).encode()


class PendingOffsets:
    """TxnOffsetCommit's offsets held until their transaction's marker (see the
    module rules): group -> producer id -> (topic, partition) -> (offset,
    producer epoch)."""

    def __init__(self) -> None:
        self.held: dict[str, dict[int, dict[tuple[str, int], tuple[CommittedOffset, int]]]] = {}

    def partitions(self, group: str) -> set[tuple[str, int]]:
        """Every ``(topic, partition)`` of ``group`` with a pending offset."""
        return {tp for staged in self.held.get(group, {}).values() for tp in staged}

    def of(self, group: str, producer: int) -> dict[tuple[str, int], tuple[CommittedOffset, int]]:
        """The producer's pending offsets in ``group`` (read-only)."""
        return self.held.get(group, {}).get(producer, {})

    def stage(self, entry: Mapping[str, Any]) -> None:
        """Apply a ``txn_stage`` entry."""
        held = self.held.setdefault(entry["group"], {}).setdefault(entry["producer"], {})
        for t, p, o, e, m, ts in entry["offsets"]:
            held[(t, p)] = (CommittedOffset(o, e, m, ts), entry["epoch"])

    def unstage(self, group: str, producer: int, settled: Iterable[Any]) -> None:
        """Drop the producer's pending offsets of the ``settled`` partitions."""
        by_producer = self.held.get(group)
        if by_producer is None:
            return
        held = by_producer.get(producer, {})
        for t, p in settled:
            held.pop((t, p), None)
        if not held:
            by_producer.pop(producer, None)
        if not by_producer:
            del self.held[group]


class ReplicatedView:
    """The committed offsets as of each partition's high watermark: what OffsetFetch
    reads (see the module rules). Writes wait in log order, per partition, until
    the high watermark passes them; it is looked at when the view is read.

    Args:
        high_watermark: a ``__consumer_offsets`` partition's high watermark here.
        log_end: its log end offset here.
    """

    def __init__(self, high_watermark: Callable[[int], int], log_end: Callable[[int], int]) -> None:
        self._high_watermark = high_watermark
        self._log_end = log_end
        #: group -> (topic, partition) -> its replicated committed offset
        self.offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self._waiting: dict[int, deque[Unreplicated]] = {}

    def written(
        self,
        partition: int,
        group: str,
        changes: dict[TopicPartition, CommittedOffset | None],
        settles: Iterable[TopicPartition] = (),
    ) -> None:
        """A write just appended to ``partition`` (its log end is after it)."""
        item = (self._log_end(partition), group, changes, frozenset(settles))
        self._waiting.setdefault(partition, deque()).append(item)
        self.catch_up(partition)

    def catch_up(self, partition: int) -> None:
        """Apply the writes of ``partition`` that its high watermark has passed."""
        waiting = self._waiting.get(partition)
        if not waiting:
            return
        replicated = self._high_watermark(partition)
        while waiting and waiting[0][0] <= replicated:
            _, group, changes, _ = waiting.popleft()
            offsets = self.offsets.setdefault(group, {})
            for tp, committed in changes.items():
                if committed is None:
                    offsets.pop(tp, None)
                else:
                    offsets[tp] = committed
            if not offsets:
                del self.offsets[group]

    def unreplicated(self, partition: int, group: str) -> set[TopicPartition]:
        """The partitions of ``group`` a write not yet replicated changes or settles."""
        self.catch_up(partition)
        return {
            tp
            for _, g, changes, settles in self._waiting.get(partition, ())
            if g == group
            for tp in (*changes, *settles)
        }

    def loaded(
        self, partition: int, offsets: Mapping[str, Mapping[TopicPartition, CommittedOffset]]
    ) -> None:
        """``partition`` was replayed: its groups' ``offsets`` are read whole."""
        self._waiting.pop(partition, None)
        self.offsets.update({g: dict(o) for g, o in offsets.items() if o})

    def forget(self, partition: int, groups: Iterable[str]) -> None:
        """``partition`` is no longer led here: its ``groups`` and their writes go."""
        self._waiting.pop(partition, None)
        for group in groups:
            self.offsets.pop(group, None)


class OffsetTopic(TopicPort):
    """The persistence port of :class:`ReplicatedOffsetStore`: the store's entries
    as records of ``__consumer_offsets`` (see the module rules), written to the
    group's partition, then applied to the state.

    Args:
        topic: the topic's partitions here.
        state: the store's state.
        pending: the store's pending transactional offsets.
        view: the offsets as replicated, which each write goes to as well.
    """

    def __init__(
        self,
        topic: InternalTopic,
        state: OffsetState,
        pending: PendingOffsets,
        view: ReplicatedView,
    ) -> None:
        super().__init__(topic)
        self._state = state
        self._pending = pending
        self.view = view
        #: Share groups' snapshots (their coordinator's, :mod:`.share_groups`).
        self.share_groups: dict[str, dict[str, Any]] = {}

    # -- partitions ----------------------------------------------------------------------------------

    def load_partition(self, partition: int) -> set[str]:
        """Replay one partition's log into the state (this broker now leads it).

        Returns:
            The ids of the groups it holds.

        Raises:
            OffsetStoreError: a record cannot be read.
        """
        self.forget(partition)
        try:
            groups = {
                self._replay(key, value)
                for key, value in self.topic.records_of(partition, OffsetStoreError)
            }
        except OffsetStoreError:
            # Half a log's offsets would be answered as if they were all of them:
            # the partition stays unloaded (its groups answer NOT_COORDINATOR).
            self.forget(partition)
            raise
        self.topic.loaded(partition)
        groups.discard("")
        self.view.loaded(partition, {g: self._state.offsets.get(g, {}) for g in groups})
        return groups

    def forget(self, partition: int) -> set[str]:
        """Drop one partition's groups from memory; returns their ids."""
        state, pending = self._state, self._pending
        gone = {
            g
            for g in (
                *state.offsets,
                *state.groups,
                *state.consumer_groups,
                *pending.held,
                *self.share_groups,
                *self.view.offsets,
            )
            if self.topic.partition_for(g) == partition
        }
        for group in gone:
            state.forget(group)
            pending.held.pop(group, None)
            self.share_groups.pop(group, None)
        self.view.forget(partition, gone)
        return gone

    def _replay(self, key: bytes | None, value: bytes | None) -> str:
        """Apply one record; returns its group ("" for a record of no group)."""
        if key is None:
            return ""
        try:
            parts = json.loads(key)
            doc = None if value is None else json.loads(value)
            group = parts[1]
            entry = self._entry_of(parts, doc)
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            raise OffsetStoreError(f"__consumer_offsets: unreadable record {key!r}: {exc}") from exc
        if entry is None:
            # A classic group's metadata tombstone: its offsets have their own.
            self._state.groups.pop(group, None)
        else:
            self._apply(entry)
        return str(group)

    @staticmethod
    def _entry_of(parts: list[Any], doc: Any) -> dict[str, Any] | None:
        """The entry a record stands for (None: a group metadata tombstone)."""
        kind, group = parts[0], parts[1]
        if kind == "o":
            topic, partition = parts[2], parts[3]
            if doc is None:
                return {
                    "kind": "delete_offsets",
                    "group": group,
                    "partitions": [[topic, partition]],
                }
            return {"kind": "commit", "group": group, "offsets": [[topic, partition, *doc]]}
        if kind == "g":
            return None if doc is None else {"kind": "group", "group": group, "metadata": doc}
        if kind == "c":
            return {"kind": "consumer_group", "group": group, "snapshot": doc}
        if kind == "s":
            return {"kind": "share_group", "group": group, "snapshot": doc}
        if kind == "p":
            producer, topic, partition = parts[2], parts[3], parts[4]
            if doc is None:
                return {
                    "kind": "txn_unstage",
                    "group": group,
                    "producer": producer,
                    "settled": [[topic, partition]],
                }
            *offset, epoch = doc
            return {
                "kind": "txn_stage",
                "group": group,
                "producer": producer,
                "epoch": epoch,
                "offsets": [[topic, partition, *offset]],
            }
        raise ValueError(f"unknown record kind {kind!r}")

    # -- writing: every change one batch of records -------------------------------------------------

    def write(self, *entries: dict[str, Any], sync: bool = True) -> None:
        # ``sync`` is the journal's fsync; here durability is the replication's.
        for entry in entries:
            if entry["kind"] == "delete_topic":
                self._delete_topic(entry["topic"])
                continue
            group = entry["group"]
            records = self._records(entry)
            changes = self._offset_changes(entry)
            if records:
                self.topic.append(group, records, OffsetStoreError, f"group {group!r}")
            self._apply(entry)
            partition = self.topic.partition_for(group)
            settles = entry["settled"] if entry["kind"] == "txn_settle" else ()
            if records and partition is not None and (changes or settles):
                self.view.written(partition, group, changes, (tuple(tp) for tp in settles))

    def _offset_changes(self, entry: Mapping[str, Any]) -> dict[TopicPartition, Any]:
        """What ``entry`` makes of its group's committed offsets (None: deleted)."""
        kind, group = entry["kind"], entry["group"]
        if kind in ("commit", "txn_settle"):
            return {(t, p): CommittedOffset(o, e, m, ts) for t, p, o, e, m, ts in entry["offsets"]}
        if kind == "delete_offsets":
            return {(t, p): None for t, p in entry["partitions"]}
        if kind == "delete_group":
            return dict.fromkeys(
                {*self._state.offsets.get(group, {}), *self.view.offsets.get(group, {})}
            )
        return {}

    def _apply(self, entry: dict[str, Any]) -> None:
        kind = entry["kind"]
        if kind == "share_group":
            if entry["snapshot"] is None:
                self.share_groups.pop(entry["group"], None)
            else:
                self.share_groups[entry["group"]] = dict(entry["snapshot"])
        elif kind == "txn_stage":
            self._pending.stage(entry)
        elif kind == "txn_unstage":
            self._pending.unstage(entry["group"], entry["producer"], entry["settled"])
        elif kind == "txn_settle":
            self._pending.unstage(entry["group"], entry["producer"], entry["settled"])
            self._state.apply(
                {"kind": "commit", "group": entry["group"], "offsets": entry["offsets"]}
            )
        else:
            if kind == "delete_group":
                self._pending.held.pop(entry["group"], None)
            self._state.apply(entry)

    def _records(self, entry: Mapping[str, Any]) -> list[Record]:
        kind, group = entry["kind"], entry["group"]
        if kind == "commit":
            return [
                (_key("o", group, t, p), _value([o, e, m, ts]))
                for t, p, o, e, m, ts in entry["offsets"]
            ]
        if kind == "group":
            return [(_key("g", group), _value(entry["metadata"]))]
        if kind in ("consumer_group", "share_group"):
            return [(_key(kind[0], group), _value(entry["snapshot"]))]
        if kind == "delete_offsets":
            return [(_key("o", group, t, p), None) for t, p in entry["partitions"]]
        if kind == "txn_stage":
            pid, epoch = entry["producer"], entry["epoch"]
            return [
                (_key("p", group, pid, t, p), _value([o, e, m, ts, epoch]))
                for t, p, o, e, m, ts in entry["offsets"]
            ]
        if kind == "txn_settle":
            pid = entry["producer"]
            settled: list[Record] = [
                (_key("p", group, pid, t, p), None) for t, p in entry["settled"]
            ]
            settled.extend(
                (_key("o", group, t, p), _value([o, e, m, ts]))
                for t, p, o, e, m, ts in entry["offsets"]
            )
            return settled
        if kind == "delete_group":
            return self._group_tombstones(group)
        raise OffsetStoreError(f"__consumer_offsets: cannot write a {kind!r} change")

    def _group_tombstones(self, group: str) -> list[Record]:
        """The tombstones of every record of ``group``, its metadata's last."""
        out: list[Record] = [
            (_key("o", group, t, p), None) for t, p in self._state.offsets.get(group, {})
        ]
        if group in self._state.consumer_groups:
            out.append((_key("c", group), None))
        for pid, held in self._pending.held.get(group, {}).items():
            out.extend((_key("p", group, pid, t, p), None) for t, p in held)
        out.append((_key("g", group), None))
        return out

    def _delete_topic(self, topic: str) -> None:
        # One batch per group (each to its own partition), applied as it is written.
        by_group: dict[str, list[Record]] = {}
        for group, offsets in self._state.offsets.items():
            for t, p in offsets:
                if t == topic:
                    by_group.setdefault(group, []).append((_key("o", group, t, p), None))
        for group, records in by_group.items():
            self.topic.append(group, records, OffsetStoreError, f"group {group!r}")
            partitions = [(topic, json.loads(k)[3]) for k, _ in records]
            self._state.apply({"kind": "delete_offsets", "group": group, "partitions": partitions})
            partition = self.topic.partition_for(group)
            if partition is not None:
                self.view.written(partition, group, dict.fromkeys(partitions))


class ReplicatedOffsetStore(GroupStore):
    """The group coordinator's store in ``__consumer_offsets`` (see the module
    rules): an :class:`~.offsets.OffsetState` written through an
    :class:`OffsetTopic`, plus the pending transactional offsets.

    Args:
        partition_for: a group's ``__consumer_offsets`` partition, or None while
            the topic does not exist.
        append: appends a record batch to one of its partitions on this broker.
        read: ``read(partition) -> chunks``: the partition's whole log here.
        now_ms: the clock, for record timestamps.
        high_watermark: a partition's high watermark here.
        log_end: a partition's log end offset here.
    """

    def __init__(
        self,
        *,
        partition_for: Callable[[str], int | None],
        append: Callable[[int, bytes], None],
        read: Callable[[int], Iterable[bytes]],
        now_ms: Callable[[], int],
        high_watermark: Callable[[int], int],
        log_end: Callable[[int], int],
    ) -> None:
        topic = InternalTopic(
            OFFSETS_TOPIC, partition_for=partition_for, append=append, read=read, now_ms=now_ms
        )
        state = OffsetState(f"offset journal {OFFSETS_TOPIC}")
        self._pending = PendingOffsets()
        self._view = ReplicatedView(high_watermark, log_end)
        self._topic = OffsetTopic(topic, state, self._pending, self._view)
        super().__init__(state, self._topic)

    # -- partitions ----------------------------------------------------------------------------------

    def loaded_partitions(self) -> set[int]:
        """The partitions whose groups are in memory (this broker leads them)."""
        return self._topic.topic.loaded_partitions()

    def load_partition(self, partition: int) -> set[str]:
        """Replay one partition's log into memory (this broker now leads it).

        Returns:
            The ids of the groups it holds.

        Raises:
            OffsetStoreError: a record cannot be read.
        """
        return self._topic.load_partition(partition)

    def unload_partition(self, partition: int) -> set[str]:
        """Forget one partition's groups (this broker no longer leads it).

        Returns:
            The ids of the groups forgotten.
        """
        self._topic.topic.unloaded(partition)
        return self._topic.forget(partition)

    # -- transactional offsets ------------------------------------------------------------------

    def readable_offsets(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        """The committed offsets of ``group`` its partition has replicated (what
        OffsetFetch answers, see the module rules)."""
        partition = self._topic.topic.partition_for(group)
        if partition is not None:
            self._view.catch_up(partition)
        return dict(self._view.offsets.get(group, {}))

    def pending_partitions(self, group: str) -> set[tuple[str, int]]:
        """Every ``(topic, partition)`` of ``group`` whose offset is not yet stable: a
        transaction's pending offset, or a write not yet replicated (see the module rules)."""
        partition = self._topic.topic.partition_for(group)
        unreplicated = set() if partition is None else self._view.unreplicated(partition, group)
        return self._pending.partitions(group) | unreplicated

    def stage_transactional(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        offsets: Mapping[tuple[str, int], CommittedOffset],
    ) -> ErrorCode:
        """Hold a TxnOffsetCommit's offsets until the transaction's marker.

        Returns:
            NONE, or INVALID_PRODUCER_EPOCH when the producer holds offsets here
            at a newer epoch (nothing is held).

        Raises:
            OffsetStoreError: the write failed; nothing was held.
        """
        held = self._pending.of(group, producer_id)
        if any(epoch > producer_epoch for _, epoch in held.values()):
            return ErrorCode.INVALID_PRODUCER_EPOCH
        self._port.write(
            {
                "kind": "txn_stage",
                "group": group,
                "producer": producer_id,
                "epoch": producer_epoch,
                "offsets": offset_rows(offsets),
            }
        )
        return ErrorCode.NONE

    def delete_group(self, group: str) -> None:
        """As the base store's, with the group's pending transactional offsets too."""
        if group in self._pending.held:
            self._port.write({"kind": "delete_group", "group": group})
        else:
            super().delete_group(group)

    def settle_transaction(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        tv2: bool = False,
    ) -> dict[str, dict[tuple[str, int], CommittedOffset]]:
        """Apply a marker that reached ``__consumer_offsets-partition`` to the
        producer's pending offsets there (see the module rules); ``tv2``: a
        marker of transaction version 2, whose epoch is one above the transaction's.

        Returns:
            The offsets committed, per group.

        Raises:
            OffsetStoreError: a write failed; the groups not yet settled keep their
                pending offsets (settling again is harmless).
        """
        committed: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        txn_epoch = producer_epoch - 1 if tv2 else producer_epoch
        for group in sorted(self._pending.held):
            held = self._pending.held[group].get(producer_id)
            if held is None or self._topic.topic.partition_for(group) != partition:
                continue
            settled = {tp: v for tp, v in held.items() if v[1] <= producer_epoch}
            if not settled:
                continue
            kept = {tp: o for tp, (o, epoch) in settled.items() if commit and epoch == txn_epoch}
            self._port.write(
                {
                    "kind": "txn_settle",
                    "group": group,
                    "producer": producer_id,
                    "settled": sorted(settled),
                    "offsets": offset_rows(kept),
                }
            )
            if kept:
                committed[group] = kept
        return committed

    # -- share groups -------------------------------------------------------------------------

    def share_group_snapshots(self, group_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The stored snapshots of those of ``group_ids`` that are share groups."""
        stored = self._topic.share_groups
        return {g: dict(stored[g]) for g in group_ids if g in stored}

    def store_share_group(self, group_id: str, snapshot: Mapping[str, Any] | None) -> None:
        """Write a share group's snapshot (None: a tombstone) to its partition.

        Raises:
            OffsetStoreError: the partition is not led here, or the append failed.
        """
        if snapshot is None and group_id not in self._topic.share_groups:
            return
        self._port.write(
            {
                "kind": "share_group",
                "group": group_id,
                "snapshot": None if snapshot is None else dict(snapshot),
            }
        )


class ReplicatedShareGroups:
    """The share groups' port in a cluster (a
    :class:`~.share_groups.ShareGroupsPort`): their snapshots are records of
    ``__consumer_offsets`` (``["s", group]``, see the module rules), loaded when
    their partition comes to be led here; their configs are ZooKeeper's
    (:mod:`trafka.brokerlite.cluster.driver.group_config_sync`), not this port's.

    Args:
        offsets: the group coordinator's store.
    """

    def __init__(self, offsets: ReplicatedOffsetStore) -> None:
        self._offsets = offsets

    @property
    def path(self) -> Path:
        return Path(OFFSETS_TOPIC)

    def share_groups(self) -> dict[str, dict[str, Any]]:
        """Nothing at start: a group is loaded with its partition."""
        return {}

    def group_configs(self) -> dict[str, dict[str, str]]:
        """Nothing at start: ZooKeeper's configs come with the cluster driver."""
        return {}

    def store_group(self, group_id: str, snapshot: Mapping[str, Any] | None) -> None:
        try:
            self._offsets.store_share_group(group_id, snapshot)
        except OffsetStoreError as exc:
            raise ShareGroupStoreError(str(exc)) from exc

    def store_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Never called in a cluster: a config change is a ZooKeeper write there."""
        raise ShareGroupStoreError(f"group {group_id!r}: configs are ZooKeeper's in a cluster")

    def close(self) -> None:
        """The offsets store closes itself."""
