"""The transaction coordinator's records and decisions: Kafka's transaction
states, and how a decided transaction becomes a completion for the broker
(sans-IO).

:class:`TxnDecisions` is the part of
:class:`~.coordinator.TransactionCoordinator` that its capabilities share: the
records of the transactional ids this coordinator holds, the store they are
written to, and the timers. The requests that move a transaction
(:mod:`.transitions`), the completions (:mod:`.completion`), the timers
(:mod:`.expiry`) and the admin view (:mod:`.describe`) all read and write that
one table within a call, so they are its subclasses rather than objects of
their own.

Rules and invariants (Kafka's ``TransactionMetadata``; transaction version 2's
epoch bump per decision is :mod:`.transitions`'):

* States: Empty -> Ongoing (AddPartitionsToTxn/AddOffsetsToTxn) -> PrepareCommit or
  PrepareAbort (EndTxn, timeout, fencing) -> CompleteCommit/CompleteAbort (markers
  written) -> Ongoing (next transaction) or Empty (InitProducerId). An id is
  deleted ("Dead") when it stays Empty/Complete* for ``transactional_id_expiration_ms``.
* A record changes only through :meth:`TxnDecisions._write`: the store first, then
  memory; a store failure is COORDINATOR_NOT_AVAILABLE (retriable) and changes
  nothing.
* A decision (PrepareCommit/PrepareAbort) is *issued* as a :class:`TxnCompletion`
  once it is written, and again every ``marker_retry_backoff_ms`` until the broker
  reports its markers written; aborting to fence a producer bumps its epoch, so
  the markers fence the old instance on every partition. The last epoch is kept
  free so that an instance can always be fenced. With ``transaction.version`` 2
  finalized that abort is a TV2 decision whatever the transaction's version
  (:mod:`.tv2`), as Kafka decides it by the finalized level.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from trafka.brokerlite.groups.offsets import CommittedOffset
from trafka.brokerlite.transactions.journal import (
    TransactionState,
    TxnJournalError,
    TxnRecord,
    TxnStore,
    WrittenMarker,
)
from trafka.brokerlite.transactions.tv2 import LAST_USABLE_EPOCH, decided_epochs
from trafka.codec.errors import ErrorCode

__all__ = [
    "COMPLETE",
    "MARKERS",
    "MAX_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "PREPARED",
    "TIMEOUT",
    "GroupValidator",
    "Refused",
    "StageGroupOffsets",
    "TxnCompletion",
    "TxnDecisions",
    "TxnMarker",
    "bumped",
    "is_epoch_exhausted",
]

# The coordinator's logger: its log lines keep the name they had before the split.
log = logging.getLogger("trafka.brokerlite.transactions.coordinator")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767

_S = TransactionState
PREPARED = (_S.PREPARE_COMMIT, _S.PREPARE_ABORT)
COMPLETE = (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT)
# The kinds of timers.
TIMEOUT = "timeout"
MARKERS = "markers"

GroupValidator = Callable[[str, int, str, "str | None"], ErrorCode]
StageGroupOffsets = Callable[[str, int, int, Mapping[tuple[str, int], CommittedOffset]], ErrorCode]


class TxnMarker(NamedTuple):
    """One control batch the broker must append."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


@dataclasses.dataclass(frozen=True, slots=True)
class TxnCompletion:
    """A transaction outcome for the broker to write (see the module docstring).

    Attributes:
        transactional_id: the transaction's id.
        producer_id, producer_epoch: the producer as the markers carry it.
        coordinator_epoch: the coordinator epoch for the markers.
        commit: True to commit, False to abort.
        markers: one per partition in the transaction.
        offsets: when committing, the group offsets to apply:
            ``group -> (topic, partition) -> CommittedOffset``; empty when aborting.
        groups: every group whose pending offsets this outcome settles.
        tv2: a decision of transaction version 2 (its epoch was bumped): in a
            cluster its markers go out as WriteTxnMarkers v2 saying so (KIP-1228).
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    markers: tuple[TxnMarker, ...]
    offsets: Mapping[str, Mapping[tuple[str, int], CommittedOffset]]
    groups: tuple[str, ...]
    tv2: bool = False


class Refused(Exception):
    """A request is answered with an error without changing anything (internal)."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


def bumped(epoch: int) -> int:
    return epoch + 1 if epoch < MAX_EPOCH else epoch


def fencing_epochs(record: TxnRecord, tv2: bool, allocate: Callable[[], int]) -> dict[str, Any]:
    """The epoch fields of an abort that fences ``record``'s producer: a TV2
    decision when ``tv2`` (the finalized level is 2, see :mod:`.tv2`'s rules),
    else one bump that keeps no epoch before."""
    if tv2 and record.producer_epoch <= LAST_USABLE_EPOCH:
        return decided_epochs(record, True, allocate)
    return {
        "producer_epoch": bumped(record.producer_epoch),
        "last_producer_epoch": NO_PRODUCER_EPOCH,
        "tv2": False,
    }


def _markers(record: TxnRecord, coordinator_epoch: int, commit: bool) -> tuple[TxnMarker, ...]:
    """A decision's marker for each partition of its transaction."""
    pid, epoch = record.producer_id, record.producer_epoch
    return tuple(
        TxnMarker(t, p, pid, epoch, coordinator_epoch, commit) for t, p in record.partitions
    )


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch free so that an instance can always be fenced."""
    return epoch >= MAX_EPOCH - 1


class TxnDecisions:
    """The records, the store, the timers and the issuing of decisions (see the
    module rules). The coordinator sets the attributes below."""

    _journal: TxnStore
    _records: dict[str, TxnRecord]
    _allocate_external: Callable[[], int] | None
    _max_timeout_ms: int
    _expiration_ms: int
    _expiration_check_ms: int
    _retry_ms: int
    _coordinator_epoch: int
    _coordinator_epoch_for: Callable[[str], int] | None
    _group_partition: Callable[[str], tuple[str, int]] | None
    _stage_group_offsets: StageGroupOffsets | None
    _partition_exists: Callable[[str, int], bool]
    _validate_group: GroupValidator
    _metadata_max: int
    _sync_decision_for: Callable[[str, int], bool]
    _log_end_offset: Callable[[str, int], int] | None
    _transaction_version: Callable[[], int]
    _allocate: Callable[[], int]  # (TxnTransitions)
    _next_pid: int
    # transactional id -> when its completion is (re)issued; 0 = at the first tick
    _issue_at: dict[str, int]
    _heap: list[tuple[int, int, str, str]]
    _seq: int
    _next_expiration_ms: int | None

    def _epoch_of(self, transactional_id: str) -> int:
        if self._coordinator_epoch_for is None:
            return self._coordinator_epoch
        return self._coordinator_epoch_for(transactional_id)

    def _write(
        self, record: TxnRecord, *, sync: bool = True, markers: Sequence[WrittenMarker] = ()
    ) -> None:
        try:
            self._journal.put(record, sync=sync, markers=markers)
        except TxnJournalError as exc:
            log.error("transaction %r: journal write failed: %s", record.transactional_id, exc)
            raise Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE) from exc
        self._records[record.transactional_id] = record

    def _issue(self, record: TxnRecord, now_ms: int) -> TxnCompletion:
        commit = record.state is _S.PREPARE_COMMIT
        self._set_issue(record.transactional_id, now_ms + self._retry_ms)
        epoch = self._epoch_of(record.transactional_id)
        return TxnCompletion(
            transactional_id=record.transactional_id,
            producer_id=record.producer_id,
            producer_epoch=record.producer_epoch,
            coordinator_epoch=epoch,
            commit=commit,
            markers=_markers(record, epoch, commit),
            offsets=dict(record.pending_offsets) if commit else {},
            groups=record.groups,
            tv2=record.tv2,
        )

    def _fence_and_abort(self, record: TxnRecord, now_ms: int) -> TxnCompletion:
        tv2 = self._transaction_version() >= 2  # Kafka decides by the finalized level
        aborting = dataclasses.replace(
            record,
            state=_S.PREPARE_ABORT,
            last_update_ms=now_ms,
            decision_ends=self._ends(record.partitions),
            **fencing_epochs(record, tv2, self._allocate),
        )
        self._write(aborting)
        return self._issue(aborting, now_ms)

    def _ends(self, partitions: Iterable[tuple[str, int]]) -> tuple[tuple[str, int, int], ...]:
        if self._log_end_offset is None:
            return ()
        ends = ((t, p, self._log_end_offset(t, p)) for t, p in partitions)
        return tuple(e for e in ends if e[2] >= 0)

    def _set_issue(self, tid: str, at: int) -> None:
        self._issue_at[tid] = at
        self._push(at, tid, MARKERS)

    def _push(self, deadline: int, tid: str, kind: str) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (deadline, self._seq, tid, kind))
