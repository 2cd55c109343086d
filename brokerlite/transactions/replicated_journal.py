"""Transaction-coordinator state kept in the replicated ``__transaction_state`` topic
(cluster mode).

On a single node the coordinator's state lives in a journal file
(:class:`~.journal.TxnJournal`). In a cluster it must outlive the broker that
coordinates a transactional id, so :class:`ReplicatedTxnJournal` keeps it where
Kafka does: as records of the id's ``__transaction_state`` partition, replicated
like any other; the coordinator is that partition's leader. The state is the
journal's (:class:`~.journal.TxnState`, changed by the same entries);
:class:`TxnTopic` is the persistence port that writes them as records.

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
from collections.abc import Callable, Iterable
from typing import Any

from ..cluster.view import TRANSACTION_STATE_TOPIC
from ..storage.internal_topic import InternalTopic, TopicPort
from .journal import TxnJournalError, TxnRecord, TxnState, TxnStore, record_from_json

__all__ = ["ReplicatedTxnJournal", "TxnTopic"]

log = logging.getLogger("trafka.brokerlite.transactions")


def _key(transactional_id: str) -> bytes:
    return json.dumps(["t", transactional_id], separators=(",", ":")).encode()


class TxnTopic(TopicPort):
    """The persistence port of :class:`ReplicatedTxnJournal`: the store's entries
    as records of ``__transaction_state`` (see the module rules), written to the
    id's partition, then applied to the state.

    Args:
        topic: the topic's partitions here.
        state: the store's state.
    """

    def __init__(self, topic: InternalTopic, state: TxnState) -> None:
        super().__init__(topic)
        self._state = state

    def close(self) -> None:
        super().close()
        self._state.records.clear()

    # -- partitions ----------------------------------------------------------------------------

    def load_partition(self, partition: int) -> dict[str, TxnRecord]:
        """Replay one partition's log into the state (this broker now leads it).

        Returns:
            The records of the transactional ids it holds.

        Raises:
            TxnJournalError: a record cannot be read.
        """
        self.forget(partition)
        found: dict[str, TxnRecord] = {}
        for key, value in self.topic.records_of(partition, TxnJournalError):
            self._replay(partition, key, value, found)
        self.topic.loaded(partition)
        self._state.records.update(found)
        return found

    def forget(self, partition: int) -> set[str]:
        """Drop one partition's transactional ids from memory; returns them."""
        records = self._state.records
        gone = {tid for tid in records if self.topic.partition_for(tid) == partition}
        for tid in gone:
            del records[tid]
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

    def write(self, *entries: dict[str, Any], sync: bool = True) -> None:
        # ``sync`` is the journal's fsync; here durability is the replication's.
        for entry in entries:
            kind = entry["kind"]
            if kind in ("markers", "markers-synced"):
                continue  # markers are acknowledged by their partitions' replicas
            if kind == "pids":
                raise TxnJournalError("producer ids come from the cluster's blocks in cluster mode")
            if kind == "txn":
                tid = entry["id"]
                doc = {k: v for k, v in entry.items() if k != "kind"}
                value: bytes | None = json.dumps(doc, separators=(",", ":")).encode()
            elif kind == "delete":
                tid, value = entry["id"], None
            else:
                raise TxnJournalError(f"__transaction_state: cannot write a {kind!r} change")
            self.topic.append(
                tid, [(_key(tid), value)], TxnJournalError, f"transactional id {tid!r}"
            )
            self._state.apply(entry)


class ReplicatedTxnJournal(TxnStore):
    """The transaction coordinator's durable state in ``__transaction_state`` (see
    the module rules): a :class:`~.journal.TxnState` written through a
    :class:`TxnTopic`.

    Args:
        partition_for: a transactional id's ``__transaction_state`` partition, or
            None while the topic does not exist.
        append: appends a record batch to one of its partitions on this broker.
        read: ``read(partition) -> chunks``: the partition's whole log here.
        now_ms: the clock, for record timestamps.
    """

    def __init__(
        self,
        *,
        partition_for: Callable[[str], int | None],
        append: Callable[[int, bytes], None],
        read: Callable[[int], Iterable[bytes]],
        now_ms: Callable[[], int],
    ) -> None:
        topic = InternalTopic(
            TRANSACTION_STATE_TOPIC,
            partition_for=partition_for,
            append=append,
            read=read,
            now_ms=now_ms,
        )
        state = TxnState(f"transaction journal {TRANSACTION_STATE_TOPIC}")
        self._topic = TxnTopic(topic, state)
        super().__init__(state, self._topic)

    def loaded_partitions(self) -> set[int]:
        """The partitions whose ids are in memory (this broker leads them)."""
        return self._topic.topic.loaded_partitions()

    def load_partition(self, partition: int) -> dict[str, TxnRecord]:
        """Replay one partition's log into memory (this broker now leads it).

        Returns:
            The records of the transactional ids it holds.

        Raises:
            TxnJournalError: a record cannot be read.
        """
        return self._topic.load_partition(partition)

    def unload_partition(self, partition: int) -> set[str]:
        """Forget one partition's transactional ids (this broker no longer leads it).

        Returns:
            The ids forgotten.
        """
        self._topic.topic.unloaded(partition)
        return self._topic.forget(partition)
