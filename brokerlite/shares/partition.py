"""The state of one share-partition (KIP-932): which records a share group has
handed out, to whom, and which are done. Sans-IO: no log, no clock, no file.

A share group reads a partition as a queue. Every offset from the share-partition
start offset (SPSO, :attr:`SharePartition.start_offset`) up to the end offset
(SPEO, :attr:`SharePartition.end_offset`, the first offset never acquired) is
*in flight* and has a state:

* AVAILABLE: may be acquired by any member (released, or its lock expired);
* ACQUIRED: handed to one member, locked until a deadline (monotonic ms, as
  Kafka's acquisition-lock timer runs on ``Time.hiResClockMs``);
* ACKNOWLEDGED: accepted, processed; never delivered again;
* ARCHIVING: rejected or delivered too often in a share group with a
  dead-letter queue (KIP-1191): never delivered again, archived once its dead
  letter is written (:meth:`SharePartition.dead_letters_due`,
  :meth:`SharePartition.dead_letters_written`);
* ARCHIVED: rejected, gap, control record, aborted, or delivered too often;
  never delivered again.

The numbers are Kafka's (``RecordState``: 0, 1, 2, 3, 4), and are what
:meth:`SharePartition.snapshot` stores.

Rules and invariants:

* The in-flight offsets are kept as *runs*: maximal ranges of offsets with one
  state, delivery count, holder and lock deadline. They cover ``[start_offset,
  end_offset)`` exactly, in order, without gaps or overlaps.
* Acquiring increments an offset's delivery count. Records already in flight
  that are AVAILABLE are acquired first, lowest offsets first
  (:meth:`acquire_available`); then new records past the end offset
  (:meth:`acquire_new`), in whole batches as the log holds them, while the
  in-flight window ``end_offset - start_offset`` is below the record-lock
  limit. Offsets that hold nothing deliverable (offsets compacted away, control
  batches, aborted transactions for read_committed) become ARCHIVED as they
  are reached and are never handed out.
* An acknowledgement (:meth:`acknowledge`) names offset ranges with one type
  per range or one per offset: GAP (0) and REJECT (3) archive, ACCEPT (1)
  acknowledges, RELEASE (2) makes available again, RENEW (4, KIP-1222: only
  in a request marked IsRenewAck) keeps the record acquired and restarts its
  lock, changing nothing durable. Malformed batches (first
  after last, ranges out of order or overlapping by more than one range's last
  offset being the next one's first, a wrong number of types, an unknown type)
  are refused first, for the whole request (INVALID_REQUEST).
  Then each range in order, as Kafka's ``SharePartition.acknowledge`` does:
  a range wholly below the start offset is done already and ignored; with
  nothing in flight a range is INVALID_RECORD_STATE; a range reaching past the
  last offset handed out (``end_offset - 1``) is INVALID_REQUEST; otherwise its
  offsets from the start offset on must be ACQUIRED by the acknowledging member
  (those below the start are skipped), else INVALID_RECORD_STATE; an offset
  the previous range acknowledged is no longer held (INVALID_RECORD_STATE for
  a range starting where the previous one ended). The first
  error is the answer and nothing at all is changed for the partition.
* Acknowledging and releasing a member's records (:meth:`acknowledge`,
  :meth:`release_member`) are *transitions* until their state write settles,
  as Kafka 4.4's ``InFlightState.startStateTransition`` /
  ``completeStateTransition`` are: each changed run keeps its state, holder
  and lock deadline from before (:attr:`Run.undo`), tagged with the write that
  carries it (:meth:`begin_write`; 0 until one does). While it is on its way the
  record is not acquired (even when released: AVAILABLE), not acknowledged
  (it is no longer ACQUIRED: INVALID_RECORD_STATE), and the start offset
  does not move past it (Kafka's ``canMoveStartOffset``). :meth:`settle`
  ends it: written, the new state stays and the start offset moves; not
  written, the record goes back to its state, holder and lock deadline from
  before (``rollbackOrProcessStateUpdates``), and only those records: what
  else changed meanwhile stays. The lock timer runs on: a record whose lock
  ended meanwhile is released at once (AVAILABLE, or ARCHIVED at the
  delivery-count limit), as ``completeStateTransition(false)`` does when its
  timer task has expired (not :attr:`dirty` for that: its durable form, a
  held record written as available, is the same); without a time, at the
  next expiry. Lock expiries, archived
  gaps and a moved log start are not transitions (Kafka's lock timeout
  changes the state at once and keeps it when its write fails).
* A record that is released (by RELEASE, by its lock expiring, or by its
  holder leaving) becomes ARCHIVED instead of AVAILABLE once its delivery count
  has reached the delivery-count limit, so a poison record stops coming back.
  A release keeps the delivery count (Kafka 4.4's ``SharePartition``
  ``releaseAcquiredRecords`` and ``releaseAcquisitionLockOnTimeout`` leave it
  as acquisition set it: ``DeliveryCountOps.NO_OP``).
* An acquisition whose answer never reached its member (the broker refused
  it) is put back (:meth:`unacquire`): its offsets still held under that very
  acquisition (same member, delivery count and lock deadline) become AVAILABLE
  with the delivery count they had before it, and are never archived by it.
  This is the only way a delivery count goes down; Kafka's
  ``DeliveryCountOps.DECREASE`` (``InFlightState``) is the same step, for
  records fetched but not delivered to the client.
* Dead letters (KIP-1191). While :attr:`SharePartition.dead_letters` is set
  (the fetcher sets it from the group's config and ``share.version``), a
  record that REJECT or the delivery-count limit would archive becomes
  ARCHIVING instead, remembering which of the two it was (:attr:`Run.rejected`;
  a GAP still archives). ARCHIVING is not done: the start offset stays below
  it, as Kafka's ``isStateTerminal`` keeps it. Once its transition is written
  (no :attr:`Run.undo`) its run is due (:meth:`SharePartition.dead_letters_due`);
  :meth:`SharePartition.dead_letters_written` archives it. It is stored as
  ARCHIVING (3), so a dead letter whose writing a crash interrupted is written
  after the restart; one written just before the crash is written again then
  (at least once, as Kafka's ``maybeResumeDlqArchiving``).
* The start offset moves past every leading ACKNOWLEDGED or ARCHIVED offset,
  and forward to the log start offset when retention or DeleteRecords removes
  records below it (:meth:`move_start`); offsets below it are forgotten.
* :meth:`snapshot` is what is kept durably: the start offset (as it is once
  the snapshot is written: past leading done offsets in transition) and the runs,
  where ACQUIRED runs are written as AVAILABLE with their delivery counts (a
  lock does not survive a restart; the record is delivered again, unless its
  count has reached the delivery-count limit: then it is archived on load, as
  its release would have archived it). Acquiring
  alone does not make the partition :attr:`dirty`: a restart loses at most
  delivery counts of records never acknowledged, as in Kafka.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from trafka.brokerlite.clock import mono_ms
from trafka.codec.errors import ErrorCode

__all__ = [
    "ACCEPT",
    "ACKNOWLEDGED",
    "ACQUIRED",
    "ARCHIVED",
    "ARCHIVING",
    "AVAILABLE",
    "GAP",
    "REJECT",
    "RELEASE",
    "RENEW",
    "AcquiredRange",
    "BatchSpan",
    "Run",
    "SharePartition",
    "Undo",
]

# Record states (Kafka's RecordState ids).
AVAILABLE = 0
ACQUIRED = 1
ACKNOWLEDGED = 2
ARCHIVING = 3  # KIP-1191: waiting for its dead letter
ARCHIVED = 4

# Acknowledge types (ShareFetch / ShareAcknowledge AcknowledgeTypes).
GAP = 0
ACCEPT = 1
RELEASE = 2
REJECT = 3
RENEW = 4  # KIP-1222 (v2): the record stays acquired, its lock restarts
_ACK_TYPES = frozenset((GAP, ACCEPT, RELEASE, REJECT))
_WITH_RENEW = _ACK_TYPES | {RENEW}

_DONE = frozenset((ACKNOWLEDGED, ARCHIVED))


@dataclasses.dataclass(frozen=True, slots=True)
class Undo:
    """A run's state before a transition whose write has not settled: the write
    carrying it (``ticket``, 0 until one does), and what it goes back to when
    that write fails."""

    ticket: int
    state: int
    member_id: str | None
    deadline_ms: int


@dataclasses.dataclass(slots=True)
class Run:
    """Offsets ``first..last`` (inclusive) sharing one state."""

    first: int
    last: int
    state: int
    delivery_count: int
    member_id: str | None = None
    deadline_ms: int = 0
    #: Set while a transition of these offsets is being written (module rules).
    undo: Undo | None = None
    #: ARCHIVING because the member rejected it (else: delivered too often).
    rejected: bool = False

    def same_kind(self, other: Run) -> bool:
        return (
            self.state == other.state
            and self.rejected == other.rejected
            and self.delivery_count == other.delivery_count
            and self.member_id == other.member_id
            and self.deadline_ms == other.deadline_ms
            and self.undo == other.undo
        )


@dataclasses.dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Offsets ``first..last`` handed to a member, delivered ``delivery_count`` times."""

    first: int
    last: int
    delivery_count: int


@dataclasses.dataclass(frozen=True, slots=True)
class BatchSpan:
    """A batch of the log as acquisition sees it: its offsets and whether any
    of them may be delivered (False for control batches and aborted data)."""

    first: int
    last: int
    deliverable: bool = True


class SharePartition:
    """One share group's view of one partition (see the module rules).

    Args:
        start_offset: the SPSO to begin with.
        delivery_count_limit: deliveries after which a released record is archived.
        max_record_locks: the most in-flight offsets (``end - start``) before no
            new records are acquired.
        runs: in-flight runs to begin with, contiguous from ``start_offset`` (as
            :meth:`from_snapshot` checked them); leading done runs move the start.
    """

    def __init__(
        self,
        start_offset: int,
        *,
        delivery_count_limit: int = 5,
        max_record_locks: int = 2000,
        runs: Iterable[Run] = (),
    ) -> None:
        if start_offset < 0:
            raise ValueError(f"start offset {start_offset} is negative")
        self._start = start_offset
        self._runs: list[Run] = []
        self._firsts: list[int] = []  # run.first of each run, for bisect
        self.delivery_count_limit = delivery_count_limit
        self.max_record_locks = max_record_locks
        self.dirty = False
        #: Whether the group has a dead-letter queue: REJECT and the
        #: delivery-count limit make records ARCHIVING (module rules).
        self.dead_letters = False
        self._archiving = False  # (a run may be ARCHIVING: spares the scan when not)
        for run in runs:
            self._append(run)
            self._archiving |= run.state == ARCHIVING
        self._advance()
        self._coalesce()

    # -- reading --------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The SPSO: every offset below it is done."""
        return self._start

    @property
    def end_offset(self) -> int:
        """The SPEO: the first offset never acquired."""
        return self._runs[-1].last + 1 if self._runs else self._start

    def runs(self) -> list[Run]:
        """The in-flight runs, in offset order (copies)."""
        return [dataclasses.replace(r) for r in self._runs]

    def state_of(self, offset: int) -> tuple[int, int, str | None] | None:
        """``(state, delivery_count, member_id)`` of an in-flight offset, else None."""
        i = self._index(offset)
        if i < 0:
            return None
        run = self._runs[i]
        return run.state, run.delivery_count, run.member_id

    def acquired_count(self, member_id: str | None = None) -> int:
        """How many offsets are ACQUIRED (by ``member_id`` when given)."""
        return sum(
            r.last - r.first + 1
            for r in self._runs
            if r.state == ACQUIRED and (member_id is None or r.member_id == member_id)
        )

    def has_available(self) -> bool:
        """Whether an in-flight offset may be acquired (AVAILABLE, no transition)."""
        return any(r.state == AVAILABLE and r.undo is None for r in self._runs)

    def writing(self) -> bool:
        """Whether a transition's write has not settled yet (module rules)."""
        return any(r.undo is not None for r in self._runs)

    def delivery_complete_count(self) -> int:
        """How many in-flight offsets are done (ACKNOWLEDGED or ARCHIVED): what
        Kafka's share coordinator calls the delivery-complete count, which the
        share-partition lag (KIP-1226) leaves out."""
        return sum(r.last - r.first + 1 for r in self._runs if r.state in _DONE)

    def window_full(self) -> bool:
        """Whether the in-flight window is at the record-lock limit."""
        return self.end_offset - self._start >= self.max_record_locks

    def next_deadline(self) -> int | None:
        """The earliest lock deadline of an ACQUIRED run (monotonic ms), or None."""
        deadlines = [r.deadline_ms for r in self._runs if r.state == ACQUIRED]
        return min(deadlines) if deadlines else None

    # -- acquiring ------------------------------------------------------------------------

    def acquire_available(
        self, member_id: str, max_records: int, *, now_ms: int, lock_ms: int
    ) -> list[AcquiredRange]:
        """Acquire AVAILABLE in-flight offsets, lowest first, at most ``max_records``."""
        out: list[AcquiredRange] = []
        left = max_records
        i = 0
        while i < len(self._runs) and left > 0:
            run = self._runs[i]
            if run.state != AVAILABLE or run.undo is not None:
                i += 1
                continue
            if run.last - run.first + 1 > left:
                self._split(run.first + left)
            run = self._runs[i]
            run.state = ACQUIRED
            run.delivery_count += 1
            run.member_id = member_id
            run.deadline_ms = mono_ms(now_ms) + lock_ms
            left -= run.last - run.first + 1
            out.append(AcquiredRange(run.first, run.last, run.delivery_count))
            i += 1
        self._coalesce()
        return _merge(out)

    def acquire_new(
        self,
        member_id: str,
        batches: Iterable[BatchSpan],
        max_records: int,
        *,
        now_ms: int,
        lock_ms: int,
        strict: bool = False,
    ) -> list[AcquiredRange]:
        """Acquire records past the end offset, batch by batch as the log holds them.

        ``batches`` are the log's batches from the one holding the end offset on,
        in order. A batch is taken whole (at least one, even past
        ``max_records``) while the window has room; ``strict`` (KIP-1206's
        record-limit mode) takes at most ``max_records``, the last batch in part.
        Offsets between batches (compacted away) and undeliverable batches
        become ARCHIVED.
        """
        out: list[AcquiredRange] = []
        taken = 0
        for batch in batches:
            end = self.end_offset
            if batch.last < end:
                continue
            self._advance()  # archived offsets at the head do not count against the window
            if taken >= max_records or self.window_full():
                break
            first = max(batch.first, end)
            if first > end:  # nothing in the log between them
                self._append(Run(end, first - 1, ARCHIVED, 0))
                self.dirty = True
            if batch.deliverable:
                last = min(batch.last, first + max_records - taken - 1) if strict else batch.last
                self._append(Run(first, last, ACQUIRED, 1, member_id, mono_ms(now_ms) + lock_ms))
                out.append(AcquiredRange(first, last, 1))
                taken += last - first + 1
            else:
                self._append(Run(first, batch.last, ARCHIVED, 0))
                self.dirty = True
        self._advance()
        self._coalesce()
        return _merge(out)

    def skip_to(self, offset: int) -> None:
        """Archive ``[end_offset, offset)``: offsets the log no longer holds (compacted
        past its end) or that are not deliverable, when no batch marks them."""
        end = self.end_offset
        if offset > end:
            self._append(Run(end, offset - 1, ARCHIVED, 0))
            self.dirty = True
            self._advance()
            self._coalesce()

    # -- acknowledging --------------------------------------------------------------------

    def acknowledge(
        self,
        member_id: str,
        batches: Sequence[tuple[int, int, Sequence[int]]],
        *,
        renew_until_ms: int | None = None,
    ) -> ErrorCode:
        """Apply acknowledgement batches ``(first, last, types)`` of ``member_id``.

        ``renew_until_ms`` (a request with IsRenewAck, KIP-1222): RENEW is a type
        too, and moves the lock deadline of the records it names there (they stay
        ACQUIRED; nothing durable changes). Without it RENEW is INVALID_REQUEST.

        Returns NONE, or the error that left the partition unchanged.
        """
        allowed = _ACK_TYPES if renew_until_ms is None else _WITH_RENEW
        previous_last = -1
        for first, last, types in batches:
            # A range may start at the offset the previous one ended at (Kafka's
            # KafkaApis.validateAcknowledgementBatches), not before it.
            if first > last or first < previous_last or first < 0:
                return ErrorCode.INVALID_REQUEST
            if len(types) != 1 and len(types) != last - first + 1:
                return ErrorCode.INVALID_REQUEST
            if any(t not in allowed for t in types):
                return ErrorCode.INVALID_REQUEST
            previous_last = last
        plan: list[tuple[int, int, int]] = []
        planned_last = -1
        for first, last, types in batches:
            if last < self._start:
                continue  # done already: ignored
            if self.end_offset == self._start:
                return ErrorCode.INVALID_RECORD_STATE  # nothing in flight to find it in
            if last >= self.end_offset:
                return ErrorCode.INVALID_REQUEST  # past the last offset handed out
            low = max(first, self._start)
            # An offset the previous range acknowledged is no longer held by then.
            if low <= planned_last or not self._held_by(member_id, low, last):
                return ErrorCode.INVALID_RECORD_STATE
            planned_last = last
            if len(types) == 1:
                plan.append((low, last, types[0]))
            else:
                plan.extend(_ranges_of(low, types[low - first :]))
        for first, last, ack in plan:
            for run in self._runs_in(first, last):
                if ack == RENEW:
                    run.deadline_ms = renew_until_ms or run.deadline_ms
                    continue
                run.undo = Undo(0, run.state, run.member_id, run.deadline_ms)
                if ack == ACCEPT:
                    self._finish(run, ACKNOWLEDGED)
                elif ack == RELEASE:
                    self._release(run)
                elif ack == REJECT:
                    self._archive(run, rejected=True)
                else:
                    self._finish(run, ARCHIVED)
        if any(ack != RENEW for _, _, ack in plan):
            self.dirty = True
        self._advance()
        self._coalesce()
        return ErrorCode.NONE

    def begin_write(self, ticket: int) -> None:
        """The transitions not yet on a write are carried by write ``ticket``."""
        for run in self._runs:
            if run.undo is not None and run.undo.ticket == 0:
                run.undo = dataclasses.replace(run.undo, ticket=ticket)
        self._coalesce()

    def settle(self, tickets: Collection[int], written: bool, *, now_ms: int | None = None) -> bool:
        """The writes ``tickets`` (0: the transitions on no write yet) settled:
        their transitions stay when ``written``, else their records go back to
        their state from before (module rules); one whose lock ended by
        ``now_ms`` (when given) is released at once. True when any did."""
        changed = False
        for run in self._runs:
            undo = run.undo
            if undo is None or undo.ticket not in tickets:
                continue
            if not written:
                run.state, run.member_id, run.deadline_ms = (
                    undo.state,
                    undo.member_id,
                    undo.deadline_ms,
                )
                run.rejected = False
                ended = now_ms is not None and run.deadline_ms <= mono_ms(now_ms)
                if run.state == ACQUIRED and ended:
                    self._release(run)  # (as its state was written: not dirty)
            run.undo = None
            changed = True
        if changed:
            self._advance()
            self._coalesce()
        return changed

    def unacquire(
        self, member_id: str, first: int, last: int, delivery_count: int, deadline_ms: int
    ) -> bool:
        """Put back ``first..last`` as handed out by one acquisition (``delivery_count``,
        lock ``deadline_ms``) that never reached ``member_id`` (see the module rules).
        Offsets no longer held under that acquisition are left alone. True when any
        offset was put back."""
        changed = False
        for run in self._runs_in(first, last):
            if run.state != ACQUIRED or run.member_id != member_id:
                continue
            if run.delivery_count != delivery_count or run.deadline_ms != deadline_ms:
                continue
            self._finish(run, AVAILABLE)
            run.delivery_count -= 1
            changed = True
        self._coalesce()
        return changed

    def release_member(self, member_id: str) -> bool:
        """Release everything ``member_id`` holds (it left, or closed its session):
        a transition until written (module rules)."""
        return self._release_where(lambda run: run.member_id == member_id, transition=True)

    def expire_locks(self, now_ms: int) -> bool:
        """Release ACQUIRED runs whose lock deadline has passed; True when any did."""
        mono = mono_ms(now_ms)
        return self._release_where(lambda run: run.deadline_ms <= mono, transition=False)

    def _release_where(self, holds: Callable[[Run], bool], *, transition: bool) -> bool:
        """Release the ACQUIRED runs ``holds`` picks; True when there were any."""
        changed = False
        for run in self._runs:
            if run.state == ACQUIRED and holds(run):
                if transition:
                    run.undo = Undo(0, run.state, run.member_id, run.deadline_ms)
                self._release(run)
                changed = True
        if changed:
            self.dirty = True
            self._advance()
            self._coalesce()
        return changed

    def move_start(self, log_start_offset: int) -> bool:
        """Forget offsets below ``log_start_offset`` (the log no longer has them)."""
        if log_start_offset <= self._start:
            return False
        self._split(log_start_offset)
        i = bisect.bisect_left(self._firsts, log_start_offset)
        del self._runs[:i]
        del self._firsts[:i]
        self._start = log_start_offset
        self.dirty = True
        self._advance()
        return True

    # -- dead letters (KIP-1191) ---------------------------------------------------------

    def dead_letters_due(self) -> list[Run]:
        """The ARCHIVING runs whose transition is written: their dead letters are
        due (copies, in offset order)."""
        if not self._archiving:
            return []
        self._archiving = any(r.state == ARCHIVING for r in self._runs)
        return [
            dataclasses.replace(r) for r in self._runs if r.state == ARCHIVING and r.undo is None
        ]

    def dead_letters_written(self, first: int, last: int) -> bool:
        """Archive the ARCHIVING offsets of ``first..last``, their dead letters
        written (or given up); True when any was."""
        changed = False
        for run in self._runs_in(first, last):
            if run.state == ARCHIVING and run.undo is None:
                self._finish(run, ARCHIVED)
                changed = True
        if changed:
            self.dirty = True
            self._advance()
        self._coalesce()
        return changed

    # -- durability -----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The durable form (see the module rules); JSON-ready. The start offset is
        the one after its write: past leading done offsets still in transition."""
        start = self._start
        runs: list[list[int]] = []
        for r in self._runs:
            if not runs and r.state in _DONE:
                start = r.last + 1
                continue
            state = AVAILABLE if r.state == ACQUIRED else r.state
            if runs and runs[-1][2] == state and runs[-1][3] == r.delivery_count:
                runs[-1][1] = r.last
            else:
                runs.append([r.first, r.last, state, r.delivery_count])
        return {"start": start, "runs": runs}

    @classmethod
    def from_snapshot(
        cls, data: Mapping[str, Any], *, delivery_count_limit: int = 5, max_record_locks: int = 2000
    ) -> SharePartition:
        """Rebuild a partition from :meth:`snapshot` (validated: a damaged
        snapshot raises ValueError rather than load inconsistent state)."""
        try:
            start, rows = data["start"], data["runs"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"share-partition snapshot without {exc}") from exc
        if not _is_int(start) or not isinstance(rows, list):
            raise ValueError(f"bad share-partition snapshot {data!r}")
        if start < 0:
            raise ValueError(f"start offset {start} is negative")
        runs: list[Run] = []
        expected = start
        for row in rows:
            if not isinstance(row, list) or len(row) != 4 or not all(_is_int(x) for x in row):
                raise ValueError(f"bad share-partition run {row!r}")
            first, last, state, count = row
            allowed = (AVAILABLE, ARCHIVING, *_DONE)
            if first != expected or last < first or state not in allowed or count < 0:
                raise ValueError(f"bad share-partition run {row!r} (expected first {expected})")
            if state == AVAILABLE and count >= delivery_count_limit:
                # Held when the state was written: its release happens now.
                state = ARCHIVED
            # An ARCHIVING record's cause is not stored: as Kafka's resumption
            # does, one below the delivery-count limit was rejected.
            rejected = state == ARCHIVING and count < delivery_count_limit
            runs.append(Run(first, last, state, count, rejected=rejected))
            expected = last + 1
        return cls(
            start,
            delivery_count_limit=delivery_count_limit,
            max_record_locks=max_record_locks,
            runs=runs,
        )

    # -- internals ------------------------------------------------------------------------

    def _index(self, offset: int) -> int:
        """Index of the run holding ``offset``, or -1."""
        if not self._runs or offset < self._start or offset >= self.end_offset:
            return -1
        return bisect.bisect_right(self._firsts, offset) - 1

    def _runs_in(self, first: int, last: int) -> list[Run]:
        """The runs holding offsets of ``first..last``, split first so that
        none reaches outside it (a list: the caller changes their states)."""
        self._split(first)
        self._split(last + 1)
        i = max(bisect.bisect_right(self._firsts, first) - 1, 0)
        found = []
        while i < len(self._runs) and self._runs[i].first <= last:
            if self._runs[i].last >= first:
                found.append(self._runs[i])
            i += 1
        return found

    def _split(self, offset: int) -> None:
        """Make a run start at ``offset`` when ``offset`` falls inside one."""
        i = self._index(offset)
        if i < 0:
            return
        run = self._runs[i]
        if run.first == offset:
            return
        tail = dataclasses.replace(run, first=offset)
        run.last = offset - 1
        self._runs.insert(i + 1, tail)
        self._firsts.insert(i + 1, offset)

    def _append(self, run: Run) -> None:
        self._runs.append(run)
        self._firsts.append(run.first)

    def _held_by(self, member_id: str, first: int, last: int) -> bool:
        if first < self._start or last >= self.end_offset:
            return False
        i = self._index(first)
        while i < len(self._runs) and self._runs[i].first <= last:
            run = self._runs[i]
            if run.state != ACQUIRED or run.member_id != member_id:
                return False
            i += 1
        return True

    def _release(self, run: Run) -> None:
        if run.delivery_count >= self.delivery_count_limit:
            self._archive(run, rejected=False)
        else:
            run.state = AVAILABLE
            run.member_id = None
            run.deadline_ms = 0

    def _archive(self, run: Run, *, rejected: bool) -> None:
        """Archive a rejected or too-often delivered record: ARCHIVING while the
        group has a dead-letter queue (module rules)."""
        if self.dead_letters:
            self._finish(run, ARCHIVING)
            run.rejected = rejected
            self._archiving = True
        else:
            self._finish(run, ARCHIVED)

    @staticmethod
    def _finish(run: Run, state: int) -> None:
        run.state = state
        run.member_id = None
        run.deadline_ms = 0
        run.rejected = False

    def _advance(self) -> None:
        """Move the start offset past leading finished runs."""
        n = 0
        for run in self._runs:
            if run.state not in _DONE or run.undo is not None:
                break
            self._start = run.last + 1
            n += 1
        if n:
            del self._runs[:n]
            del self._firsts[:n]

    def _coalesce(self) -> None:
        if len(self._runs) < 2:
            return
        merged = [self._runs[0]]
        for run in self._runs[1:]:
            prev = merged[-1]
            if prev.same_kind(run) and prev.last + 1 == run.first:
                prev.last = run.last
            else:
                merged.append(run)
        if len(merged) != len(self._runs):
            self._runs = merged
            self._firsts = [r.first for r in merged]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ranges_of(first: int, types: Sequence[int]) -> list[tuple[int, int, int]]:
    """Per-offset types as ``(first, last, type)`` ranges of equal types."""
    out: list[tuple[int, int, int]] = []
    for i, ack in enumerate(types):
        offset = first + i
        if out and out[-1][2] == ack:
            out[-1] = (out[-1][0], offset, ack)
        else:
            out.append((offset, offset, ack))
    return out


def _merge(ranges: list[AcquiredRange]) -> list[AcquiredRange]:
    """Join adjacent ranges with the same delivery count."""
    out: list[AcquiredRange] = []
    for r in ranges:
        if out and out[-1].last + 1 == r.first and out[-1].delivery_count == r.delivery_count:
            out[-1] = AcquiredRange(out[-1].first, r.last, r.delivery_count)
        else:
            out.append(r)
    return out
