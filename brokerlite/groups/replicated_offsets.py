"""Consumer-group state kept in the replicated ``__consumer_offsets`` topic (cluster mode).

On a single node, groups' committed offsets and metadata live in a journal file
(:class:`~.offsets.OffsetStore`). In a cluster they must outlive the broker that
coordinates them, so :class:`ReplicatedOffsetStore` keeps them where Kafka does:
as records of the group's ``__consumer_offsets`` partition, which the cluster
replicates like any other; the coordinator is that partition's leader.

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
* Transactional offsets (KIP-447 in a cluster, as Kafka keeps them): the group's
  coordinator holds TxnOffsetCommit's offsets as pending records of the
  producer id until the transaction's marker reaches this partition (it is one
  of the transaction's partitions). :meth:`ReplicatedOffsetStore.settle_transaction`
  then writes, in one batch, the tombstones of the producer's pending offsets
  and, for a COMMIT, the committed offsets of those staged at the marker's
  producer epoch (lower epochs are a fenced instance's and are dropped). A
  producer whose pending offsets carry a newer epoch than a TxnOffsetCommit's
  is refused with INVALID_PRODUCER_EPOCH (the request is a zombie's).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from trafka.codec.errors import ErrorCode
from trafka.codec.records import encode_batch

from ..cluster.view import OFFSETS_TOPIC
from ..errors import BrokerError, OffsetStoreError
from ..storage.topic_store import TopicStore
from .offsets import CommittedOffset, OffsetStore, offset_rows

__all__ = ["ReplicatedOffsetStore"]

log = logging.getLogger("trafka.brokerlite.groups")


def _key(*parts: Any) -> bytes:
    return json.dumps(list(parts), separators=(",", ":")).encode()


def _value(doc: Any) -> bytes | None:
    return None if doc is None else json.dumps(doc, separators=(",", ":")).encode()


class ReplicatedOffsetStore(TopicStore, OffsetStore):
    """An :class:`~.offsets.OffsetStore` whose changes are records of ``__consumer_offsets``
    (see the module rules); made as :class:`~..storage.topic_store.TopicStore` says (a
    group's partition for ``partition_for``)."""

    TOPIC = OFFSETS_TOPIC

    def _empty_state(self) -> None:
        self._offsets = {}
        self._groups = {}
        self._consumer_groups = {}
        # group -> producer id -> (topic, partition) -> (offset, producer epoch)
        self._pending: dict[str, dict[int, dict[tuple[str, int], tuple[CommittedOffset, int]]]] = {}

    def close(self) -> None:
        self._loaded.clear()

    # -- partitions ----------------------------------------------------------------------------------

    def load_partition(self, partition: int) -> set[str]:
        """Replay one partition's log into memory (this broker now leads it).

        Returns:
            The ids of the groups it holds.

        Raises:
            OffsetStoreError: a record cannot be read.
        """
        self._forget(partition)
        self._loaded.add(partition)
        groups = {
            self._replay(key, value) for key, value in self._records_of(partition, OffsetStoreError)
        }
        groups.discard("")
        return groups

    def unload_partition(self, partition: int) -> set[str]:
        """Forget one partition's groups (this broker no longer leads it).

        Returns:
            The ids of the groups forgotten.
        """
        self._loaded.discard(partition)
        return self._forget(partition)

    def _forget(self, partition: int) -> set[str]:
        gone = {
            g
            for g in (*self._offsets, *self._groups, *self._consumer_groups, *self._pending)
            if self._partition_for(g) == partition
        }
        for group in gone:
            self._offsets.pop(group, None)
            self._groups.pop(group, None)
            self._consumer_groups.pop(group, None)
            self._pending.pop(group, None)
        return gone

    # -- transactional offsets ------------------------------------------------------------------

    def pending_partitions(self, group: str) -> set[tuple[str, int]]:
        """Every ``(topic, partition)`` of ``group`` with a pending transactional offset."""
        return {tp for staged in self._pending.get(group, {}).values() for tp in staged}

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
        held = self._pending.get(group, {}).get(producer_id, {})
        if any(epoch > producer_epoch for _, epoch in held.values()):
            return ErrorCode.INVALID_PRODUCER_EPOCH
        self._write(
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
        if group in self._pending:
            self._write({"kind": "delete_group", "group": group})
        else:
            super().delete_group(group)

    def settle_transaction(
        self, partition: int, producer_id: int, producer_epoch: int, commit: bool
    ) -> dict[str, dict[tuple[str, int], CommittedOffset]]:
        """Apply a marker that reached ``__consumer_offsets-partition`` to the
        producer's pending offsets there (see the module rules).

        Returns:
            The offsets committed, per group.

        Raises:
            OffsetStoreError: a write failed; the groups not yet settled keep their
                pending offsets (settling again is harmless).
        """
        committed: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        for group in sorted(self._pending):
            held = self._pending[group].get(producer_id)
            if held is None or self._partition_for(group) != partition:
                continue
            settled = {tp: v for tp, v in held.items() if v[1] <= producer_epoch}
            if not settled:
                continue
            kept = {
                tp: o for tp, (o, epoch) in settled.items() if commit and epoch == producer_epoch
            }
            self._write(
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

    def _apply(self, entry: dict[str, Any]) -> None:
        kind = entry["kind"]
        if kind == "txn_stage":
            held = self._pending.setdefault(entry["group"], {}).setdefault(entry["producer"], {})
            for t, p, o, e, m, ts in entry["offsets"]:
                held[(t, p)] = (CommittedOffset(o, e, m, ts), entry["epoch"])
        elif kind == "txn_unstage":
            self._unstage(entry["group"], entry["producer"], entry["settled"])
        elif kind == "txn_settle":
            self._unstage(entry["group"], entry["producer"], entry["settled"])
            super()._apply({"kind": "commit", "group": entry["group"], "offsets": entry["offsets"]})
        else:
            if kind in ("delete_group",):
                self._pending.pop(entry["group"], None)
            super()._apply(entry)

    def _unstage(self, group: str, producer: int, settled: Iterable[Any]) -> None:
        by_producer = self._pending.get(group)
        if by_producer is None:
            return
        held = by_producer.get(producer, {})
        for t, p in settled:
            held.pop((t, p), None)
        if not held:
            by_producer.pop(producer, None)
        if not by_producer:
            del self._pending[group]

    def _replay(self, key: bytes | None, value: bytes | None) -> str:
        """Apply one record; returns its group ("" for a record of no group)."""
        if key is None:
            return ""
        try:
            parts = json.loads(key)
            doc = None if value is None else json.loads(value)
            kind, group = parts[0], parts[1]
            if kind == "o":
                topic, partition = parts[2], parts[3]
                if doc is None:
                    entry: dict[str, Any] = {
                        "kind": "delete_offsets",
                        "group": group,
                        "partitions": [[topic, partition]],
                    }
                else:
                    entry = {
                        "kind": "commit",
                        "group": group,
                        "offsets": [[topic, partition, *doc]],
                    }
            elif kind == "g":
                if doc is None:
                    self._groups.pop(group, None)
                    return str(group)
                entry = {"kind": "group", "group": group, "metadata": doc}
            elif kind == "c":
                entry = {"kind": "consumer_group", "group": group, "snapshot": doc}
            elif kind == "p":
                producer, topic, partition = parts[2], parts[3], parts[4]
                if doc is None:
                    entry = {
                        "kind": "txn_unstage",
                        "group": group,
                        "producer": producer,
                        "settled": [[topic, partition]],
                    }
                else:
                    *offset, epoch = doc
                    entry = {
                        "kind": "txn_stage",
                        "group": group,
                        "producer": producer,
                        "epoch": epoch,
                        "offsets": [[topic, partition, *offset]],
                    }
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            raise OffsetStoreError(f"__consumer_offsets: unreadable record {key!r}: {exc}") from exc
        self._apply(entry)
        return str(group)

    # -- writing: every change one batch of records -------------------------------------------------

    def _write(self, entry: dict[str, Any], *, sync: bool = True) -> None:
        # ``sync`` is the journal's fsync; here durability is the replication's.
        kind = entry["kind"]
        if kind == "delete_topic":
            self._delete_topic(entry["topic"])
            return
        group = entry["group"]
        records = self._records(entry)
        if records:
            self._append_records(group, records)
        self._apply(entry)

    def _records(self, entry: Mapping[str, Any]) -> list[tuple[bytes, bytes | None]]:
        kind, group = entry["kind"], entry["group"]
        if kind == "commit":
            return [
                (_key("o", group, t, p), _value([o, e, m, ts]))
                for t, p, o, e, m, ts in entry["offsets"]
            ]
        if kind == "group":
            return [(_key("g", group), _value(entry["metadata"]))]
        if kind == "consumer_group":
            return [(_key("c", group), _value(entry["snapshot"]))]
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
            settled: list[tuple[bytes, bytes | None]] = [
                (_key("p", group, pid, t, p), None) for t, p in entry["settled"]
            ]
            settled.extend(
                (_key("o", group, t, p), _value([o, e, m, ts]))
                for t, p, o, e, m, ts in entry["offsets"]
            )
            return settled
        if kind == "delete_group":
            out: list[tuple[bytes, bytes | None]] = [
                (_key("o", group, t, p), None) for t, p in self._offsets.get(group, {})
            ]
            if group in self._consumer_groups:
                out.append((_key("c", group), None))
            for pid, held in self._pending.get(group, {}).items():
                out.extend((_key("p", group, pid, t, p), None) for t, p in held)
            out.append((_key("g", group), None))
            return out
        raise OffsetStoreError(f"__consumer_offsets: cannot write a {kind!r} change")

    def _append_records(self, group: str, records: list[tuple[bytes, bytes | None]]) -> None:
        partition = self._partition_for(group)
        if partition is None or partition not in self._loaded:
            raise OffsetStoreError(
                f"group {group!r}: this broker does not hold its __consumer_offsets partition"
            )
        now = self._now_ms()
        batch = encode_batch([(now, k, v, ()) for k, v in records])
        try:
            self._append(partition, batch)
        except BrokerError as exc:
            raise OffsetStoreError(f"__consumer_offsets-{partition}: {exc}") from exc

    def _delete_topic(self, topic: str) -> None:
        by_group: dict[str, list[tuple[bytes, bytes | None]]] = {}
        for group, offsets in self._offsets.items():
            for t, p in offsets:
                if t == topic:
                    by_group.setdefault(group, []).append((_key("o", group, t, p), None))
        for group, records in by_group.items():
            self._append_records(group, records)
            self._apply(
                {
                    "kind": "delete_offsets",
                    "group": group,
                    "partitions": [[topic, json.loads(k)[3]] for k, _ in records],
                }
            )
