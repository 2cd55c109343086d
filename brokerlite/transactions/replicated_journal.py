"""Transaction-coordinator state kept in the replicated ``__transaction_state`` topic
(cluster mode).

On a single node the coordinator's state lives in a journal file
(:class:`~.journal.TxnJournal`). In a cluster it must outlive the broker that
coordinates a transactional id, so :class:`ReplicatedTxnJournal` keeps it where
Kafka does: as records of the id's ``__transaction_state`` partition, replicated
like any other; the coordinator is that partition's leader.

Rules and invariants:

* One record per transition, keyed by the transactional id, so that compaction
  keeps exactly the live state (last writer wins; a null value is the
  tombstone of an expired id). Keys and values are JSON (brokerlite's layout):
  key ``["t", transactional_id]``, value the whole metadata (the fields of
  :class:`~.journal.TxnRecord`).
* A write is one record batch appended to the id's partition on this broker
  (its leader); it reaches memory only after the append succeeded. Whether it
  is on the partition's in-sync replicas (the high watermark passed it) is the
  broker's to wait for before it answers or acts on a decision.
* Only the partitions this broker leads are in memory:
  :meth:`ReplicatedTxnJournal.load_partition` replays one when it becomes leader
  and hands back its records; :meth:`ReplicatedTxnJournal.unload_partition`
  forgets them when it stops.
* What the single-node journal does for power losses (marker positions, producer
  id blocks, fsync) has no place here: markers are acknowledged by their
  partitions' in-sync replicas, producer ids come from ZooKeeper's blocks, and
  durability is the replication's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from trafka.codec.records import encode_batch

from ..cluster.view import TRANSACTION_STATE_TOPIC
from ..errors import BrokerError
from ..storage.topic_store import TopicStore
from .journal import (
    TxnJournal,
    TxnJournalError,
    TxnRecord,
    WrittenMarker,
    record_from_json,
    record_to_json,
)

__all__ = ["ReplicatedTxnJournal"]

log = logging.getLogger("trafka.brokerlite.transactions")


def _key(transactional_id: str) -> bytes:
    return json.dumps(["t", transactional_id], separators=(",", ":")).encode()


class ReplicatedTxnJournal(TopicStore, TxnJournal):
    """A :class:`~.journal.TxnJournal` whose writes are records of
    ``__transaction_state`` (see the module rules); made as
    :class:`~..storage.topic_store.TopicStore` says (a transactional id's partition for
    ``partition_for``)."""

    TOPIC = TRANSACTION_STATE_TOPIC

    def _empty_state(self) -> None:
        self._records: dict[str, TxnRecord] = {}
        self._pid_limit = 0
        self._unsynced = {}
        self._unsynced_count = 0

    # -- what the base class does with a file --------------------------------------------------

    def close(self) -> None:
        self._loaded.clear()
        self._records.clear()

    def markers_synced(
        self, synced: Mapping[tuple[str, int], int | None], *, sync: bool = True
    ) -> None:
        """Markers are never tracked here (their partitions' replicas acknowledge them)."""

    def reserve_producer_ids(self, limit: int) -> None:
        raise TxnJournalError("producer ids come from the cluster's blocks in cluster mode")

    # -- partitions ----------------------------------------------------------------------------

    def load_partition(self, partition: int) -> dict[str, TxnRecord]:
        """Replay one partition's log into memory (this broker now leads it).

        Returns:
            The records of the transactional ids it holds.

        Raises:
            TxnJournalError: a record cannot be read.
        """
        self._forget(partition)
        found: dict[str, TxnRecord] = {}
        for key, value in self._records_of(partition, TxnJournalError):
            self._replay(partition, key, value, found)
        self._loaded.add(partition)
        self._records.update(found)
        return found

    def unload_partition(self, partition: int) -> set[str]:
        """Forget one partition's transactional ids (this broker no longer leads it).

        Returns:
            The ids forgotten.
        """
        self._loaded.discard(partition)
        return self._forget(partition)

    def _forget(self, partition: int) -> set[str]:
        gone = {tid for tid in self._records if self._partition_for(tid) == partition}
        for tid in gone:
            del self._records[tid]
        return gone

    @staticmethod
    def _replay(
        partition: int, key: bytes | None, value: bytes | None, into: dict[str, TxnRecord]
    ) -> None:
        if key is None:
            return
        try:
            kind, tid = json.loads(key)
            if kind != "t":
                raise ValueError(f"unknown record kind {kind!r}")
            if value is None:
                into.pop(str(tid), None)
                return
            into[str(tid)] = record_from_json(json.loads(value))
        except (ValueError, TypeError, KeyError) as exc:
            raise TxnJournalError(
                f"__transaction_state-{partition}: unreadable record {key!r}: {exc}"
            ) from exc

    # -- writing --------------------------------------------------------------------------------

    def put(
        self, record: TxnRecord, *, sync: bool = True, markers: Iterable[WrittenMarker] = ()
    ) -> None:
        """Append ``record`` to its id's partition (``sync`` and ``markers`` are the
        single-node journal's and mean nothing here).

        Raises:
            TxnJournalError: this broker does not hold the partition, or the append failed.
        """
        doc = record_to_json(record)
        del doc["kind"]
        self._append_record(record.transactional_id, json.dumps(doc, separators=(",", ":")))
        self._records[record.transactional_id] = record

    def delete(self, transactional_id: str) -> None:
        """Append the tombstone of an expired id."""
        if transactional_id in self._records:
            self._append_record(transactional_id, None)
            del self._records[transactional_id]

    def _append_record(self, tid: str, value: str | None) -> None:
        partition = self._partition_for(tid)
        if partition is None or partition not in self._loaded:
            raise TxnJournalError(
                f"transactional id {tid!r}: this broker does not hold its "
                "__transaction_state partition"
            )
        encoded = None if value is None else value.encode()
        batch = encode_batch([(self._now_ms(), _key(tid), encoded, ())])
        try:
            self._append(partition, batch)
        except BrokerError as exc:
            raise TxnJournalError(f"__transaction_state-{partition}: {exc}") from exc

    def _apply(self, entry: dict[str, Any]) -> None:
        raise TxnJournalError("__transaction_state has no journal entries to apply")
