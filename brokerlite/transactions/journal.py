"""Durable transaction-coordinator state for brokerlite: a CRC-checked journal.

Kafka keeps this state in the ``__transaction_state`` topic; brokerlite keeps it in
one append-only journal file, replayed into memory when the journal opens (and
in that topic in cluster mode, :mod:`.replicated_journal`). The state is one
:class:`TxnState`, changed by *entries*; the store is a :class:`TxnStore`, the
state and the persistence port the entries go through
(:mod:`..storage.state_port`), and :class:`TxnJournal` is the store over the
journal file. The entry framing and the file's life cycle (replay, torn tails,
atomic rewrite) are :class:`~trafka.brokerlite.storage.journal.CrcJournal`'s,
shared with the offset store.

Journal format:

* Every entry is ``length (u32 big-endian) | crc (u32 big-endian) | payload`` where
  ``payload`` is one UTF-8 JSON object of ``length`` bytes and ``crc`` is the
  CRC-32C of the payload.
* The first entry names the format and its version. An entry whose kind this code
  does not know is an error, never skipped: it was written by a newer brokerlite,
  and dropping it would silently lose state.
* Entry kinds of :class:`TxnJournal`: ``txn`` (the full metadata of one
  transactional id, as Kafka writes a whole ``TransactionMetadata`` per
  transition), ``delete`` (an expired transactional id), ``pids`` (the first
  producer id not yet reserved: ids below it may have been handed out),
  ``markers`` (transaction markers written to partition logs that may not be on
  disk yet: where they are and what they say) and ``markers-synced`` (those
  partitions are on disk below the given offset: forget their markers there).

Rules and invariants:

* State is last-writer-wins per key (transactional id); replaying the journal from
  the start rebuilds it exactly.
* A mutating method returns only after its entry is written (and fsynced when
  ``fsync=True``, unless the caller passes ``sync=False``); the in-memory state
  changes only after that, so a caller that acknowledges a request after the
  method returns never acknowledges something a crash can lose. An entry written
  with ``sync=False`` is in the page cache (it survives a crash of the process)
  and becomes durable with the next synced entry: the file is append-only, so
  the fsync of an entry covers every entry before it, and a power loss keeps a
  prefix of the entries.
* Markers (transaction version 1 completion): the coordinator writes the
  PrepareCommit/PrepareAbort decision synced, the broker appends the markers to
  the partition logs without fsync, and then the coordinator writes one
  ``markers`` entry (where each marker went) and the CompleteCommit/CompleteAbort
  record, both unsynced and in that order. Any later synced entry therefore makes
  the marker positions durable no later than the record that ends the prepared
  state. After a power loss a partition log keeps a prefix of its batches, so a
  recorded marker at offset ``o`` is lost exactly when the log ends at or before
  ``o``, and with it everything its producer wrote there after it; the broker then
  writes the producer's first lost marker again (see ``Broker``). Hence only the
  last of a producer's consecutive markers with the same outcome and epochs in a
  partition needs keeping: the earlier ones would restore the same outcome. A
  ``markers-synced`` entry, written once the broker knows the partitions are on
  disk up to some offset, drops the positions below it.
* A crash mid-write leaves at most one torn entry, at the tail. Replay stops at the
  first entry that is short, fails its CRC or does not parse, and truncates the
  file there. A failed write is rolled back the same way (truncate to the last good
  length), so a torn entry never precedes a later good one.
* Producer ids are reserved in blocks: the ``pids`` entry is written before any id
  of a new block is handed out, so a crash can skip ids but never repeat one.
* Compaction rewrites the live state into a temporary file, fsyncs it, renames it
  over the journal and fsyncs the directory: a crash at any point leaves either the
  complete old journal or the complete new one.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.groups.offsets import CommittedOffset, offset_rows
from trafka.brokerlite.storage.journal import CrcJournal, JournalFile
from trafka.brokerlite.storage.state_port import DurableStore, StatePort
from trafka.codec.errors import ErrorCode

__all__ = [
    "TransactionState",
    "TxnJournal",
    "TxnJournalError",
    "TxnRecord",
    "TxnState",
    "TxnStore",
    "WrittenMarker",
    "record_from_json",
    "record_to_json",
]

FORMAT_NAME = "trafka-transactions"
FORMAT_VERSION = 1


class TxnJournalError(BrokerError):
    """The transaction journal could not be read or written.

    Raised for I/O errors (disk full, permissions), for a journal written by a newer
    format or a different kind of store, and for use after the journal is closed.
    """

    code = ErrorCode.KAFKA_STORAGE_ERROR


class TransactionState(enum.Enum):
    """Kafka's transaction states; the values are Kafka's names (DescribeTransactions)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


PendingOffsets = Mapping[str, Mapping[tuple[str, int], CommittedOffset]]


class WrittenMarker(NamedTuple):
    """A COMMIT/ABORT control batch appended to a partition log, maybe not yet on disk.

    Attributes:
        topic, partition: where.
        offset: the control batch's offset in the log.
        producer_id, producer_epoch, coordinator_epoch: as the marker carries them.
        commit: True for COMMIT, False for ABORT.
    """

    topic: str
    partition: int
    offset: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


@dataclasses.dataclass(frozen=True, slots=True)
class TxnRecord:
    """The persisted metadata of one transactional id (Kafka's ``TransactionMetadata``).

    Records are immutable: the coordinator builds the next record, writes it, and
    only then replaces the old one. Treat the mappings as read-only.

    Attributes:
        transactional_id: the producer's ``transactional.id``.
        producer_id: the producer id currently bound to the transactional id.
        last_producer_id: the producer id before the latest InitProducerId (KIP-360
            retries after a producer id rotation), -1 when none.
        producer_epoch: the current epoch, -1 before the first InitProducerId completes.
        last_producer_epoch: the epoch before the latest bump when the producer asked
            for it (KIP-360 retries), else -1.
        timeout_ms: the producer's ``transaction.timeout.ms``.
        state: where the transaction is.
        partitions: ``(topic, partition)`` pairs in the transaction, sorted.
        groups: consumer groups whose offsets are in the transaction, sorted.
        pending_offsets: offsets committed by TxnOffsetCommit in this transaction:
            ``group -> (topic, partition) -> CommittedOffset``; applied on commit.
        txn_start_ms: when the first partition or group was added, -1 when no
            transaction has started.
        last_update_ms: when the record last changed (drives expiration).
        decision_ends: ``(topic, partition, log end offset)`` of the partitions when
            the PrepareCommit/PrepareAbort decision was written (empty otherwise):
            the transaction's data lies below, so data of its producer at or past
            it belongs to a later transaction (see ``adopt_hanging``).
        tv2: the transaction follows transaction version 2 (KIP-890 part 2):
            set by the requests only a TV2 client sends (Produce v12+'s
            implicit partitions, TxnOffsetCommit v5+'s implicit group, EndTxn
            v5+); its EndTxn bumps the epoch, and a retry of that EndTxn comes
            with the epoch before the bump.
        next_producer_id: while a TV2 decision whose epoch bump exhausted the
            producer id is written: the producer id the transaction moves to
            (epoch 0) once its markers are written; -1 otherwise.
    """

    transactional_id: str
    producer_id: int
    last_producer_id: int = -1
    producer_epoch: int = -1
    last_producer_epoch: int = -1
    timeout_ms: int = 60_000
    state: TransactionState = TransactionState.EMPTY
    partitions: tuple[tuple[str, int], ...] = ()
    groups: tuple[str, ...] = ()
    pending_offsets: PendingOffsets = dataclasses.field(default_factory=dict)
    txn_start_ms: int = -1
    last_update_ms: int = -1
    decision_ends: tuple[tuple[str, int, int], ...] = ()
    tv2: bool = False
    next_producer_id: int = -1


def record_to_json(record: TxnRecord) -> dict[str, Any]:
    """``record`` as its journal entry (a JSON object; also the value of its
    ``__transaction_state`` record in cluster mode, without ``kind``)."""
    return {
        "kind": "txn",
        "id": record.transactional_id,
        "pid": record.producer_id,
        "last_pid": record.last_producer_id,
        "epoch": record.producer_epoch,
        "last_epoch": record.last_producer_epoch,
        "timeout_ms": record.timeout_ms,
        "state": record.state.value,
        "partitions": [[t, p] for t, p in record.partitions],
        "groups": list(record.groups),
        "offsets": {
            group: offset_rows(offsets) for group, offsets in record.pending_offsets.items()
        },
        "start_ms": record.txn_start_ms,
        "update_ms": record.last_update_ms,
        **({"ends": [list(e) for e in record.decision_ends]} if record.decision_ends else {}),
        # Written only when set, so that a journal of TV1 transactions reads as before.
        **({"tv": 2} if record.tv2 else {}),
        **({"next_pid": record.next_producer_id} if record.next_producer_id >= 0 else {}),
    }


def _marker_to_json(m: WrittenMarker) -> list[Any]:
    return [
        m.topic,
        m.partition,
        m.offset,
        m.producer_id,
        m.producer_epoch,
        m.coordinator_epoch,
        1 if m.commit else 0,
    ]


def _marker_from_json(row: list[Any]) -> WrittenMarker:
    topic, partition, offset, pid, epoch, coordinator_epoch, commit = row
    return WrittenMarker(
        str(topic),
        int(partition),
        int(offset),
        int(pid),
        int(epoch),
        int(coordinator_epoch),
        bool(commit),
    )


def record_from_json(obj: dict[str, Any]) -> TxnRecord:
    """The record :func:`record_to_json` wrote (``kind`` is not needed)."""
    offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
    for group, rows in obj["offsets"].items():
        offsets[str(group)] = {
            (str(t), int(p)): CommittedOffset(int(o), int(le), md, int(ts))
            for t, p, o, le, md, ts in rows
        }
    return TxnRecord(
        transactional_id=str(obj["id"]),
        producer_id=int(obj["pid"]),
        last_producer_id=int(obj["last_pid"]),
        producer_epoch=int(obj["epoch"]),
        last_producer_epoch=int(obj["last_epoch"]),
        timeout_ms=int(obj["timeout_ms"]),
        state=TransactionState(obj["state"]),
        partitions=tuple((str(t), int(p)) for t, p in obj["partitions"]),
        groups=tuple(str(g) for g in obj["groups"]),
        pending_offsets=offsets,
        txn_start_ms=int(obj["start_ms"]),
        last_update_ms=int(obj["update_ms"]),
        decision_ends=tuple((str(t), int(p), int(o)) for t, p, o in obj.get("ends", ())),
        tv2=int(obj.get("tv", 0)) >= 2,
        next_producer_id=int(obj.get("next_pid", -1)),
    )


# --- the transaction store ---------------------------------------------------------------------


class TxnState:
    """The transaction coordinator's state in memory: what :meth:`apply` made of
    the entries (see the module rules).

    Args:
        where: what errors call the store (``transaction journal <path>``).
    """

    def __init__(self, where: str) -> None:
        self.where = where
        #: transactional id -> its record
        self.records: dict[str, TxnRecord] = {}
        #: the first producer id not reserved yet
        self.pid_limit = 0
        #: (topic, partition) -> markers not known to be on disk, in offset order
        self.unsynced: dict[tuple[str, int], list[WrittenMarker]] = {}
        self.unsynced_count = 0

    def apply(self, entry: dict[str, Any]) -> None:
        """Apply one entry.

        Raises:
            TxnJournalError: the entry's kind is unknown (a newer brokerlite wrote
                it) or it is malformed.
        """
        kind = entry.get("kind")
        try:
            if kind == "txn":
                record = record_from_json(entry)
                self.records[record.transactional_id] = record
            elif kind == "delete":
                self.records.pop(str(entry["id"]), None)
            elif kind == "pids":
                self.pid_limit = max(self.pid_limit, int(entry["limit"]))
            elif kind == "markers":
                for row in entry["written"]:
                    self._add_marker(_marker_from_json(row))
            elif kind == "markers-synced":
                for t, p, upto in entry["partitions"]:
                    self._forget_markers((str(t), int(p)), None if upto is None else int(upto))
            else:
                raise TxnJournalError(
                    f"{self.where}: unknown entry kind {kind!r} (written by a newer brokerlite?)"
                )
        except (KeyError, TypeError, ValueError) as exc:
            # The CRC matched, so this is not a torn write but a malformed entry.
            raise TxnJournalError(f"{self.where}: malformed {kind!r} entry: {exc!r}") from exc

    def _add_marker(self, m: WrittenMarker) -> None:
        markers = self.unsynced.setdefault((m.topic, m.partition), [])
        # The producer's previous marker here says the same thing: drop it. Should a
        # power loss take it, its transaction's surviving records get this one's
        # outcome, which is theirs too (everything after a lost marker is lost).
        for i in range(len(markers) - 1, -1, -1):
            prev = markers[i]
            if prev.producer_id == m.producer_id:
                if (prev.producer_epoch, prev.coordinator_epoch, prev.commit) == (
                    m.producer_epoch,
                    m.coordinator_epoch,
                    m.commit,
                ):
                    del markers[i]
                    self.unsynced_count -= 1
                break
        markers.append(m)
        self.unsynced_count += 1

    def _forget_markers(self, tp: tuple[str, int], upto: int | None) -> None:
        markers = self.unsynced.get(tp)
        if markers is None:
            return
        kept = [] if upto is None else [m for m in markers if m.offset >= upto]
        self.unsynced_count -= len(markers) - len(kept)
        if kept:
            self.unsynced[tp] = kept
        else:
            del self.unsynced[tp]

    def live_entries(self) -> list[dict[str, Any]]:
        """The entries that rebuild the state as it is (a journal's compaction)."""
        entries: list[dict[str, Any]] = []
        if self.pid_limit:
            entries.append({"kind": "pids", "limit": self.pid_limit})
        if self.unsynced:
            # Before the records, as when they were first written.
            rows = [_marker_to_json(m) for ms in self.unsynced.values() for m in ms]
            entries.append({"kind": "markers", "written": rows})
        entries.extend(record_to_json(r) for r in self.records.values())
        return entries


class TxnStore(DurableStore):
    """The transaction coordinator's durable state: a :class:`TxnState` and the
    :class:`~..storage.state_port.StatePort` its changes are written through.

    Made as :class:`TxnJournal` (a journal file) or
    :class:`~.replicated_journal.ReplicatedTxnJournal` (``__transaction_state``).

    Args:
        state: the in-memory state, which ``port`` applies the changes to.
        port: where the changes are written.
    """

    def __init__(self, state: TxnState, port: StatePort) -> None:
        super().__init__(port)
        self._state = state

    # -- reading ------------------------------------------------------------------------------

    @property
    def producer_id_limit(self) -> int:
        """The first producer id not reserved yet (every id below may have been used)."""
        return self._state.pid_limit

    def records(self) -> dict[str, TxnRecord]:
        """Every transactional id's record (a copy of the mapping)."""
        return dict(self._state.records)

    def record(self, transactional_id: str) -> TxnRecord | None:
        """The record of ``transactional_id``, or None."""
        return self._state.records.get(transactional_id)

    def unsynced_markers(self) -> dict[tuple[str, int], list[WrittenMarker]]:
        """The markers not known to be on disk, per partition, in offset order (a copy)."""
        return {tp: list(ms) for tp, ms in self._state.unsynced.items()}

    @property
    def unsynced_marker_count(self) -> int:
        """How many markers :meth:`unsynced_markers` holds."""
        return self._state.unsynced_count

    # -- writing ------------------------------------------------------------------------------

    def put(
        self, record: TxnRecord, *, sync: bool = True, markers: Iterable[WrittenMarker] = ()
    ) -> None:
        """Store ``record``, replacing the transactional id's previous one.

        Args:
            record: the new record.
            sync: fsync before returning (when the journal fsyncs at all). Without
                it the record is in the page cache and becomes durable with the next
                synced write.
            markers: markers the broker wrote for this transition; their positions
                are written first, in the same write (see the module docstring).
                A topic keeps no marker positions (their partitions' replicas
                acknowledge them).

        Raises:
            TxnJournalError: the write failed; the previous record and the unsynced
                markers stay as they were.
        """
        rows = [_marker_to_json(m) for m in markers]
        entries: list[dict[str, Any]] = []
        if rows:
            entries.append({"kind": "markers", "written": rows})
        entries.append(record_to_json(record))
        self._port.write(*entries, sync=sync)

    def markers_synced(
        self, synced: Mapping[tuple[str, int], int | None], *, sync: bool = True
    ) -> None:
        """Forget markers now known to be on disk (or no longer needed).

        Args:
            synced: per partition, the offset below which its markers are on disk,
                or None to forget all of the partition's markers (it is gone, or was
                dealt with).
            sync: fsync the entry. Losing it is harmless when the partitions really
                were fsynced: the positions then only point below the log end.

        Raises:
            TxnJournalError: the write failed; nothing was forgotten.
        """
        unsynced = self._state.unsynced
        rows = [[t, p, upto] for (t, p), upto in synced.items() if (t, p) in unsynced]
        if rows:
            self._port.write({"kind": "markers-synced", "partitions": rows}, sync=sync)

    def delete(self, transactional_id: str) -> None:
        """Durably forget ``transactional_id`` (it expired).

        Raises:
            TxnJournalError: the write failed; the record stays.
        """
        if transactional_id in self._state.records:
            self._port.write({"kind": "delete", "id": transactional_id})

    def reserve_producer_ids(self, limit: int) -> None:
        """Durably mark every producer id below ``limit`` as possibly handed out.

        Raises:
            TxnJournalError: the write failed, or producer ids come from the
                cluster (a topic); nothing was reserved.
            ValueError: ``limit`` is lower than the current limit.
        """
        if limit < self._state.pid_limit:
            raise ValueError(
                f"producer id limit cannot go down ({self._state.pid_limit} -> {limit})"
            )
        self._port.write({"kind": "pids", "limit": limit})


class TxnJournal(TxnStore):
    """The transaction coordinator's durable state in a journal file (one node).

    Opening replays the journal (truncating a torn tail) and compacts it when it has
    grown well past its live state.

    Args:
        path: the journal file; its directory is created if missing.
        fsync: fsync after every write (survives power loss, not only a crash of
            the process). Turn off only where durability does not matter.
        compact_min_bytes: never compact a journal smaller than this.

    Raises:
        TxnJournalError: the journal cannot be read or written, or was written by a
            newer format.
    """

    def __init__(self, path: Path, *, fsync: bool = True, compact_min_bytes: int = 1 << 20) -> None:
        journal = CrcJournal(
            path,
            format_name=FORMAT_NAME,
            version=FORMAT_VERSION,
            fsync=fsync,
            error=TxnJournalError,
        )
        state = TxnState(f"transaction journal {journal.path}")
        port = JournalFile.over(
            journal, state, compact_min_bytes=compact_min_bytes, name="transaction journal"
        )
        super().__init__(state, port)
        port.open()
