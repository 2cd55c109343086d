"""Per-partition state of idempotent and transactional producers, sans-IO.

This is Kafka's ``ProducerStateManager`` for one partition: it deduplicates
retried batches, orders each producer's batches by sequence number, fences old
producer epochs, tracks open transactions (for the last stable offset) and keeps
the index of aborted transactions that ``read_committed`` fetches need. It reads
no file and no clock: the broker passes batch headers, offsets and times in.

Calling protocol (the broker, for one partition):

1. Before appending a Produce request's records: ``check = state.check_append(headers)``.
   ``check.duplicate`` set: acknowledge with the original offsets and write nothing;
   ``check.error`` not NONE: answer that error and write nothing.
2. After the log wrote them: ``state.on_append(headers, result.base_offset,
   append_time_ms=...)``.
3. For a transaction marker: ``state.check_marker(...)`` then, after writing the
   control batch, ``state.on_marker(...)``.
4. Fetch/ListOffsets: :meth:`ProducerStateManager.last_stable_offset` and
   :meth:`ProducerStateManager.aborted_transactions`.
5. When the log start offset moves: :meth:`ProducerStateManager.truncate_head`;
   every so often: :meth:`ProducerStateManager.expire`.

Rules (Kafka's, for batches from clients):

* Only batches with ``producer_id >= 0`` are tracked; others pass unchecked.
  Clients may not write control batches, and an idempotent batch needs a base
  sequence: both are INVALID_RECORD.
* Duplicate: a batch with the producer's current epoch and the same first and last
  sequence as one of its last five appended batches is a retry. The broker
  acknowledges it with the original offsets and writes nothing (DUPLICATE). This
  check comes first, against the state before the request.
* Fencing: a batch whose epoch is below the producer's known epoch is
  INVALID_PRODUCER_EPOCH (Kafka answers Produce with it since 2.7 for every
  version; PRODUCER_FENCED belongs to the transaction APIs).
* Sequence: with the producer's current epoch, the first sequence must follow the
  last one (``last + 1``, or 0 after ``2**31 - 1``); a higher epoch must start at
  sequence 0; otherwise OUT_OF_ORDER_SEQUENCE_NUMBER.
* Unknown producer: a producer id without state (never seen, expired, or whose
  state was lost) is accepted with any sequence. This is what Kafka does since
  KIP-360 (2.5): the broker no longer answers Produce with UNKNOWN_PRODUCER_ID,
  because it cannot tell a lost state from a new producer, and clients recover
  from the rare gap themselves. Producer state is also kept when retention or
  DeleteRecords removes the producer's batches (KAFKA-7190), so that case is
  deduplicated as long as the broker keeps running (or has a snapshot).
* Transactions: the first transactional batch of a producer opens a transaction
  at its base offset; a non-transactional batch while one is open is
  INVALID_TXN_STATE. A COMMIT or ABORT marker closes it; an ABORT of a non-empty
  transaction adds ``(producer_id, first_offset, marker_offset)`` to the aborted
  index. A marker whose producer epoch is below the known one is
  INVALID_PRODUCER_EPOCH and one whose coordinator epoch is below the known one
  is TRANSACTION_COORDINATOR_FENCED; a marker for a producer without an open
  transaction only updates its epochs.

Invariants:

* Each producer entry keeps at most five batches (oldest first), all of one
  epoch; an epoch change drops them.
* ``map_end_offset`` is the offset after the last batch applied: replaying the
  log from there (:meth:`ProducerStateManager.rebuild`) brings the state up to
  date, and batches below it are skipped.
* The last stable offset is the smallest first offset of the open transactions
  (never below the log start offset), else the high watermark.
* Aborted entries are kept in marker-offset order, each with the last stable
  offset at the time it completed, which lets a lookup stop early exactly as
  Kafka's transaction index does.
* :meth:`ProducerStateManager.check_append` never changes the state; only the
  ``on_*`` methods, :meth:`ProducerStateManager.rebuild`,
  :meth:`ProducerStateManager.load_snapshot`, truncation and expiry do.

Durability: the state is derived from the log. :meth:`ProducerStateManager.rebuild`
replays batch headers (control batches' marker types are read from their record),
so a retry after a broker restart is still deduplicated; :func:`replay_log` does it
for a :class:`~trafka.brokerlite.storage.partition.PartitionLog`. :meth:`ProducerStateManager.snapshot`
and :meth:`ProducerStateManager.load_snapshot` save replaying the whole log: load the
latest snapshot, then replay from its ``map_end_offset`` (a snapshot beyond the log
end offset, after a truncating recovery, must be discarded).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from trafka.brokerlite.errors import BrokerError
from trafka.codec.crc import crc32c
from trafka.codec.errors import DecodeError, ErrorCode
from trafka.codec.records import (
    ControlRecordType,
    RecordBatchHeader,
    decode_batch,
    decode_control_record,
    iter_batches,
    read_batch_header,
)

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "NUM_BATCHES_TO_RETAIN",
    "AbortedTxn",
    "AppendCheck",
    "BatchMetadata",
    "CompletedTxn",
    "ProducerEntry",
    "ProducerStateError",
    "ProducerStateManager",
    "headers_of",
    "replay_log",
]

NUM_BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1

_SNAPSHOT_MAGIC = b"TPS1"
_SNAPSHOT_HEAD = struct.Struct(">4sI")


class ProducerStateError(BrokerError):
    """A producer-state snapshot is corrupt or of an unknown version.

    The broker drops the snapshot and rebuilds the state from the log.
    """

    code = ErrorCode.CORRUPT_MESSAGE


class BatchMetadata(NamedTuple):
    """What is remembered of one appended batch (to deduplicate its retries).

    Attributes:
        first_seq, last_seq: the batch's sequence range.
        first_offset, last_offset: the offsets it was written at.
        timestamp: its max timestamp (the log-append time under LogAppendTime).
    """

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class AbortedTxn(NamedTuple):
    """One aborted transaction on this partition (Kafka's transaction index entry).

    Attributes:
        producer_id: the producer.
        first_offset: offset of its first batch on this partition.
        last_offset: offset of the ABORT marker.
        last_stable_offset: the partition's last stable offset once it completed.
    """

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class CompletedTxn(NamedTuple):
    """A transaction closed by a marker (returned by :meth:`ProducerStateManager.on_marker`)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class AppendCheck(NamedTuple):
    """The verdict of :meth:`ProducerStateManager.check_append`.

    Attributes:
        error: NONE to go ahead; otherwise the partition's error code.
        message: why, for the Produce response's ``error_message``.
        duplicate: set when the request retries an appended batch: answer with its
            ``first_offset`` (log-append time -1, as Kafka does) and write nothing.
    """

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    duplicate: BatchMetadata | None = None

    @property
    def ok(self) -> bool:
        """Whether the batches may be written."""
        return self.error is ErrorCode.NONE and self.duplicate is None


_OK = AppendCheck()


@dataclasses.dataclass(slots=True)
class ProducerEntry:
    """The state of one producer id on one partition.

    Attributes:
        producer_id: the producer id.
        epoch: its latest epoch, -1 when unknown.
        coordinator_epoch: the coordinator epoch of its latest marker, -1 when none.
        last_timestamp: timestamp of its latest batch or marker (drives expiry).
        txn_first_offset: first offset of its open transaction, None when none.
        batches: its last batches of ``epoch``, oldest first (at most five).
    """

    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    txn_first_offset: int | None = None
    batches: list[BatchMetadata] = dataclasses.field(default_factory=list)

    @property
    def last_seq(self) -> int:
        """The last sequence appended in the current epoch, -1 when none."""
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def copy(self) -> ProducerEntry:
        """An independent copy (the batch list is copied)."""
        return dataclasses.replace(self, batches=list(self.batches))

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The remembered batch with exactly this epoch and sequence range, if any."""
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch``; the batches of another epoch are forgotten."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        """Remember an appended batch (keeping the last five)."""
        self.set_epoch(epoch)
        if len(self.batches) >= NUM_BATCHES_TO_RETAIN:
            del self.batches[0]
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def headers_of(records: bytes | bytearray | memoryview) -> list[RecordBatchHeader]:
    """The batch headers of a Produce request's records blob (magic 2 only).

    Only the framing is read (no CRC check, nothing decompressed); the log validates
    the batches fully when it appends them.

    Raises:
        DecodeError: a header is truncated or malformed, or a batch is not magic 2.
    """
    view = memoryview(records)
    headers: list[RecordBatchHeader] = []
    pos = 0
    end = len(view)
    while pos < end:
        header = read_batch_header(view, pos)
        if header.size > end - pos:
            raise DecodeError(
                f"batch at byte {pos} needs {header.size} bytes, {end - pos} left",
                message_name="RecordBatch",
            )
        headers.append(header)
        pos += header.size
    return headers


class ProducerStateManager:
    """The producer state of one partition (see the module docstring for the rules).

    Args:
        producer_id_expiration_ms: Kafka's ``producer.id.expiration.ms``: a producer
            without an open transaction is forgotten this long after its latest
            batch's timestamp (:meth:`expire`).
        name: the partition's name, for error messages.
    """

    def __init__(
        self,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        name: str = "",
    ) -> None:
        self._expiration_ms = producer_id_expiration_ms
        self._name = name
        self._producers: dict[int, ProducerEntry] = {}
        # first offset -> producer id, for every open transaction
        self._ongoing: dict[int, int] = {}
        self._aborted: list[AbortedTxn] = []
        self._aborted_last: list[int] = []  # last offsets of _aborted, for bisect
        self._map_end = 0

    # -- introspection --------------------------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        """The offset after the last batch applied (where a log replay resumes)."""
        return self._map_end

    @property
    def producers(self) -> Mapping[int, ProducerEntry]:
        """The tracked producers by id (read-only use)."""
        return self._producers

    def entry(self, producer_id: int) -> ProducerEntry | None:
        """The state of ``producer_id`` (read-only use), or None."""
        return self._producers.get(producer_id)

    def ongoing_transactions(self) -> dict[int, int]:
        """``first_offset -> producer_id`` of the open transactions (a copy)."""
        return dict(self._ongoing)

    def aborted_index(self) -> list[AbortedTxn]:
        """Every aborted transaction still indexed, in marker order (a copy)."""
        return list(self._aborted)

    def __repr__(self) -> str:
        return (
            f"ProducerStateManager({self._name!r}, producers={len(self._producers)}, "
            f"ongoing={len(self._ongoing)}, aborted={len(self._aborted)}, "
            f"map_end_offset={self._map_end})"
        )

    # -- appends --------------------------------------------------------------------------------

    def check_append(self, headers: Sequence[RecordBatchHeader]) -> AppendCheck:
        """Decide whether a Produce request's batches for this partition may be written.

        Changes nothing: call :meth:`on_append` once the log has written them.

        Args:
            headers: the batches' headers, in order, as the producer sent them.

        Returns:
            OK, DUPLICATE (with the original batch) or an error with its reason.
        """
        check, _, _ = self._stage(headers, self._map_end, -1, validate=True)
        return check

    def on_append(
        self,
        headers: Sequence[RecordBatchHeader],
        base_offset: int,
        *,
        append_time_ms: int = -1,
    ) -> None:
        """Record batches the log has just written (data batches only).

        Args:
            headers: the batches' headers, in order (their base offsets are ignored).
            base_offset: the offset the log assigned to the first batch; the others
                follow contiguously.
            append_time_ms: the log-append time when the topic uses LogAppendTime
                (it replaces the batches' timestamps), else -1.

        Raises:
            ValueError: a control batch is among them (markers go to :meth:`on_marker`).
        """
        if any(h.is_control for h in headers):
            raise ValueError("control batches are recorded with on_marker(), not on_append()")
        _, staged, started = self._stage(headers, base_offset, append_time_ms, validate=False)
        self._commit(staged, started)
        end = base_offset + sum(h.last_offset_delta + 1 for h in headers)
        self._map_end = max(self._map_end, end)

    def check_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        transaction_version: int = 0,
    ) -> ErrorCode:
        """Whether a transaction marker may be written (Kafka's checks for markers).

        A marker of ``transaction_version`` 2 (KIP-1228: WriteTxnMarkers v2 says
        it) comes after its coordinator bumped the producer epoch, so its epoch
        must be above the partition's, not only as high; except that the same
        epoch with no transaction open here is that marker again (a coordinator
        that took over a decision sends its markers once more, or an answer was
        lost), which is accepted and written again, as Kafka accepts it
        (KAFKA-19999).

        Returns:
            NONE, INVALID_PRODUCER_EPOCH (older producer epoch) or
            TRANSACTION_COORDINATOR_FENCED (older coordinator epoch).
        """
        entry = self._producers.get(producer_id)
        if entry is None:
            return ErrorCode.NONE
        if producer_epoch < entry.epoch or (
            transaction_version >= 2
            and producer_epoch == entry.epoch
            and entry.txn_first_offset is not None
        ):
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if coordinator_epoch < entry.coordinator_epoch:
            return ErrorCode.TRANSACTION_COORDINATOR_FENCED
        return ErrorCode.NONE

    def on_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        commit: bool,
        offset: int,
        timestamp: int,
    ) -> CompletedTxn | None:
        """Record a COMMIT or ABORT marker the log has just written at ``offset``.

        Returns:
            The transaction it closed, or None when the producer had none open here.
        """
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerEntry(producer_id)
        completed: CompletedTxn | None = None
        first = entry.txn_first_offset
        if first is not None:
            completed = CompletedTxn(producer_id, first, offset, not commit)
            self._ongoing.pop(first, None)
            if not commit:
                # The LSO once this completes: the first other open transaction, if any.
                lso = min(self._ongoing, default=offset + 1)
                self._add_aborted(AbortedTxn(producer_id, first, offset, lso))
        entry.set_epoch(producer_epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.txn_first_offset = None
        entry.last_timestamp = timestamp
        self._map_end = max(self._map_end, offset + 1)
        return completed

    # -- reads ----------------------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, or None."""
        return min(self._ongoing) if self._ongoing else None

    def last_stable_offset(self, high_watermark: int, log_start_offset: int = 0) -> int:
        """The offset up to which ``read_committed`` consumers may read.

        Args:
            high_watermark: the partition's high watermark (its log end offset here).
            log_start_offset: the log start offset; the LSO never goes below it.

        Returns:
            The first offset of the oldest open transaction, clamped to
            ``[log_start_offset, high_watermark]``; the high watermark when none is open.
        """
        first = self.first_unstable_offset()
        if first is None:
            return high_watermark
        return min(max(first, log_start_offset), high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """The aborted transactions a ``read_committed`` fetch of ``[fetch_offset, upper_bound)`` needs.

        Those whose marker is at or after ``fetch_offset`` and whose first batch is
        before ``upper_bound``, as Kafka computes them. ``upper_bound`` should be the
        offset after the last batch returned; any larger bound (such as the last
        stable offset) only adds entries that clients skip.

        Returns:
            ``(producer_id, first_offset)`` pairs, in marker order.
        """
        out: list[tuple[int, int]] = []
        start = bisect.bisect_left(self._aborted_last, fetch_offset)
        for txn in self._aborted[start:]:
            if txn.first_offset < upper_bound:
                out.append((txn.producer_id, txn.first_offset))
            if txn.last_stable_offset >= upper_bound:
                break
        return out

    # -- maintenance ----------------------------------------------------------------------------

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget aborted transactions whose marker is below the new log start offset.

        Producers are kept (see the module docstring): their expiry is time-based.
        """
        cut = bisect.bisect_left(self._aborted_last, log_start_offset)
        if cut:
            del self._aborted[:cut]
            del self._aborted_last[:cut]
        self._map_end = max(self._map_end, log_start_offset)

    def expire(self, now_ms: int) -> int:
        """Forget producers idle for ``producer_id_expiration_ms`` without an open transaction.

        Returns:
            How many producers were forgotten.
        """
        expired = [
            pid
            for pid, e in self._producers.items()
            if e.txn_first_offset is None and now_ms - e.last_timestamp >= self._expiration_ms
        ]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    def clear(self, map_end_offset: int = 0) -> None:
        """Forget everything; a replay will start at ``map_end_offset``."""
        self._producers.clear()
        self._ongoing.clear()
        self._aborted.clear()
        self._aborted_last.clear()
        self._map_end = map_end_offset

    # -- recovery -------------------------------------------------------------------------------

    def rebuild(self, batches: Iterable[tuple[Any, bytes | bytearray | memoryview]]) -> int:
        """Replay batches read back from the log, in offset order.

        Accepts what :func:`trafka.codec.records.iter_batches` yields. Batches are
        applied without the client checks (they passed them when written); those
        ending below :attr:`map_end_offset` are skipped, and legacy (magic 0/1)
        entries are ignored. Can be called repeatedly with consecutive chunks.

        Args:
            batches: ``(header, batch_bytes)`` pairs; ``batch_bytes`` is only decoded
                for control batches (to read the marker type and coordinator epoch).

        Returns:
            How many batches were applied.

        Raises:
            DecodeError: a control batch's record cannot be decoded.
        """
        applied = 0
        for header, data in batches:
            if not isinstance(header, RecordBatchHeader):
                continue
            if header.next_offset <= self._map_end:
                continue
            applied += 1
            if header.producer_id < 0:
                self._map_end = header.next_offset
                continue
            if header.is_control:
                self._replay_control(header, data)
            else:
                _, staged, started = self._stage(
                    [header], header.base_offset, header.max_timestamp, validate=False
                )
                self._commit(staged, started)
            self._map_end = header.next_offset
        return applied

    def _replay_control(
        self, header: RecordBatchHeader, data: bytes | bytearray | memoryview
    ) -> None:
        batch = decode_batch(data, verify=False)
        if not batch.records:
            # An empty control batch holds nothing to replay (Kafka: cleaned away).
            return
        record = batch.records[0]
        control = decode_control_record(record)
        if control.type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            return
        self.on_marker(
            header.producer_id,
            header.producer_epoch,
            control.coordinator_epoch,
            commit=control.type == ControlRecordType.COMMIT,
            offset=header.base_offset,
            timestamp=record.timestamp,
        )

    def snapshot(self) -> bytes:
        """The whole state as bytes (see :meth:`load_snapshot`), at :attr:`map_end_offset`."""
        payload = {
            "version": 1,
            "map_end_offset": self._map_end,
            "producers": [
                [
                    e.producer_id,
                    e.epoch,
                    e.coordinator_epoch,
                    e.last_timestamp,
                    -1 if e.txn_first_offset is None else e.txn_first_offset,
                    [list(b) for b in e.batches],
                ]
                for e in self._producers.values()
            ],
            "aborted": [list(t) for t in self._aborted],
        }
        body = json.dumps(payload, separators=(",", ":")).encode("ascii")
        return _SNAPSHOT_HEAD.pack(_SNAPSHOT_MAGIC, crc32c(body)) + body

    def load_snapshot(self, data: bytes | bytearray | memoryview) -> None:
        """Replace the state with a :meth:`snapshot`'s.

        Raises:
            ProducerStateError: the snapshot is truncated, fails its CRC, or is of an
                unknown version; the state is left unchanged.
        """
        raw = bytes(data)
        if len(raw) < _SNAPSHOT_HEAD.size:
            raise ProducerStateError("producer snapshot is truncated")
        magic, crc = _SNAPSHOT_HEAD.unpack_from(raw)
        body = raw[_SNAPSHOT_HEAD.size :]
        if magic != _SNAPSHOT_MAGIC:
            raise ProducerStateError(f"not a producer snapshot (magic {magic!r})")
        if crc32c(body) != crc:
            raise ProducerStateError("producer snapshot fails its CRC")
        try:
            obj = json.loads(body.decode("ascii"))
            if obj["version"] != 1:
                raise ProducerStateError(f"producer snapshot version {obj['version']!r} is unknown")
            producers: dict[int, ProducerEntry] = {}
            ongoing: dict[int, int] = {}
            for pid, epoch, coord, ts, txn, batches in obj["producers"]:
                entry = ProducerEntry(
                    int(pid),
                    int(epoch),
                    int(coord),
                    int(ts),
                    None if txn < 0 else int(txn),
                    [BatchMetadata(*(int(x) for x in b)) for b in batches],
                )
                producers[entry.producer_id] = entry
                if entry.txn_first_offset is not None:
                    ongoing[entry.txn_first_offset] = entry.producer_id
            aborted = [AbortedTxn(*(int(x) for x in t)) for t in obj["aborted"]]
            map_end = int(obj["map_end_offset"])
        except ProducerStateError:
            raise
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise ProducerStateError(f"producer snapshot is malformed: {exc!r}") from exc
        self._producers = producers
        self._ongoing = ongoing
        self._aborted = aborted
        self._aborted_last = [t.last_offset for t in aborted]
        self._map_end = map_end

    # -- internals ------------------------------------------------------------------------------

    def _stage(
        self,
        headers: Sequence[RecordBatchHeader],
        base_offset: int,
        append_time_ms: int,
        *,
        validate: bool,
    ) -> tuple[AppendCheck, dict[int, ProducerEntry], list[tuple[int, int]]]:
        """Apply ``headers`` to copies of the entries they touch.

        Returns the verdict, the updated copies and the transactions they open
        (``(first_offset, producer_id)``); the caller commits them or not.
        """
        staged: dict[int, ProducerEntry] = {}
        started: list[tuple[int, int]] = []
        offset = base_offset
        for h in headers:
            first_offset = offset
            last_offset = offset + h.last_offset_delta
            offset = last_offset + 1
            pid = h.producer_id
            if validate and h.is_control:
                return self._reject(
                    ErrorCode.INVALID_RECORD, "clients may not write control batches"
                )
            if pid < 0:
                if validate and h.is_transactional:
                    return self._reject(
                        ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id"
                    )
                continue
            epoch = h.producer_epoch
            first_seq = h.base_sequence
            last_seq = h.last_sequence
            committed = self._producers.get(pid)
            if validate:
                if first_seq < 0:
                    return self._reject(
                        ErrorCode.INVALID_RECORD,
                        f"producer {pid} sent a batch without a base sequence",
                    )
                if committed is not None:
                    duplicate = committed.find_duplicate(epoch, first_seq, last_seq)
                    if duplicate is not None:
                        return AppendCheck(duplicate=duplicate), {}, []
            working = staged.get(pid)
            if working is None:
                working = committed.copy() if committed is not None else ProducerEntry(pid)
                staged[pid] = working
            if validate:
                error = self._check_data(committed, working, h)
                if error is not None:
                    return error, {}, []
            timestamp = append_time_ms if append_time_ms >= 0 else h.max_timestamp
            working.add_batch(
                epoch, BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp)
            )
            if h.is_transactional and working.txn_first_offset is None:
                working.txn_first_offset = first_offset
                started.append((first_offset, pid))
        return _OK, staged, started

    def _check_data(
        self, committed: ProducerEntry | None, working: ProducerEntry, h: RecordBatchHeader
    ) -> AppendCheck | None:
        pid = h.producer_id
        epoch = h.producer_epoch
        first_seq = h.base_sequence
        where = f" in {self._name}" if self._name else ""
        if epoch < working.epoch:
            return AppendCheck(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {pid} epoch {epoch} is older than the current epoch {working.epoch}{where}",
            )
        if epoch != working.epoch:
            if first_seq != 0 and working.epoch != NO_PRODUCER_EPOCH:
                return AppendCheck(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {pid} started epoch {epoch} at sequence {first_seq}, not 0{where}",
                )
        elif not (
            committed is None
            or committed.epoch == NO_PRODUCER_EPOCH
            or _in_sequence(working.last_seq, first_seq)
        ):
            return AppendCheck(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {pid} sent sequence {first_seq} after {working.last_seq}{where}",
            )
        if working.txn_first_offset is not None and not h.is_transactional:
            return AppendCheck(
                ErrorCode.INVALID_TXN_STATE,
                f"producer {pid} sent a non-transactional batch inside a transaction{where}",
            )
        return None

    @staticmethod
    def _reject(
        code: ErrorCode, message: str
    ) -> tuple[AppendCheck, dict[int, ProducerEntry], list[tuple[int, int]]]:
        return AppendCheck(code, message), {}, []

    def _commit(self, staged: dict[int, ProducerEntry], started: list[tuple[int, int]]) -> None:
        self._producers.update(staged)
        for first_offset, pid in started:
            self._ongoing[first_offset] = pid

    def _add_aborted(self, txn: AbortedTxn) -> None:
        # Markers arrive in offset order; a replay never adds one twice (it skips
        # batches below map_end_offset), so appending keeps the list sorted.
        if self._aborted_last and txn.last_offset <= self._aborted_last[-1]:
            i = bisect.bisect_left(self._aborted_last, txn.last_offset)
            if i < len(self._aborted_last) and self._aborted_last[i] == txn.last_offset:
                self._aborted[i] = txn
                return
            self._aborted.insert(i, txn)
            self._aborted_last.insert(i, txn.last_offset)
            return
        self._aborted.append(txn)
        self._aborted_last.append(txn.last_offset)


# --- replaying a partition log -------------------------------------------------------------------


class _ReadResult(Protocol):
    def tobytes(self) -> bytes: ...


class _Log(Protocol):
    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def read(self, offset: int, max_bytes: int) -> _ReadResult: ...


def replay_log(state: ProducerStateManager, log: _Log, *, chunk_bytes: int = 1 << 20) -> int:
    """Bring ``state`` up to date with a partition log (after a restart or a snapshot load).

    Replays from ``max(state.map_end_offset, log.log_start_offset)`` to the log end
    offset. A state ahead of the log (a snapshot taken before a recovery truncated
    the log) is cleared and rebuilt from the log start. Finally aborted transactions
    below the log start offset are dropped.

    Args:
        state: the partition's producer state (fresh, or loaded from a snapshot).
        log: a :class:`~trafka.brokerlite.storage.partition.PartitionLog` (or anything with
            ``log_start_offset``, ``log_end_offset`` and ``read(offset, max_bytes)``
            returning whole batches with ``tobytes()``).
        chunk_bytes: how much to read at a time.

    Returns:
        How many batches were applied.

    Raises:
        DecodeError: a batch in the log cannot be read back.
        LogError: the log read failed.
    """
    start = log.log_start_offset
    end = log.log_end_offset
    if state.map_end_offset > end:
        state.clear(start)
    offset = max(state.map_end_offset, start)
    applied = 0
    while offset < end:
        chunk = log.read(offset, chunk_bytes).tobytes()
        if not chunk:
            break
        applied += state.rebuild(iter_batches(chunk))
        if state.map_end_offset <= offset:
            break
        offset = state.map_end_offset
    state.truncate_head(start)
    return applied
