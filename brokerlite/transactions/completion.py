"""A decided transaction's completion: its markers written, made durable and,
after a power loss, recovered (sans-IO).

Rules and invariants:

* Completing a transaction is a side effect. The coordinator returns
  :class:`~.decisions.TxnCompletion` objects, each once its decision is
  written; the broker fsyncs the store if needed (:meth:`TxnCompletions.flush_decisions`),
  appends a COMMIT/ABORT control batch to every partition in ``markers``
  (skipping partitions that no longer exist or whose producer state rejects the
  marker as fenced), applies ``offsets`` to the offset store when committing,
  and then calls :meth:`TxnCompletions.markers_written` with where the markers
  went. Until then the transaction stays in PrepareCommit/PrepareAbort and its
  requests get CONCURRENT_TRANSACTIONS; writing a marker twice is harmless
  (while the transaction is prepared nothing new of its producer can reach its
  partitions, and a marker for a producer without an open transaction only
  updates epochs).
* Markers are not fsynced. The CompleteCommit/CompleteAbort record is written
  unsynced, after the markers' positions (see :mod:`.journal`); the broker
  reports with :meth:`TxnCompletions.markers_synced` when it knows them on disk,
  and after a power loss it writes again every recorded marker its logs lost
  (:meth:`TxnCompletions.unsynced_markers`) before serving.
* A power loss can take an unsynced join while keeping the data the producer
  wrote: the broker hands such open transactions to
  :meth:`TxnCompletions.adopt_hanging`, which aborts them and fences their
  producer, so that neither a hanging transaction nor a commit answered for the
  lost join is possible.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence

from trafka.brokerlite.transactions.decisions import (
    NO_PRODUCER_EPOCH,
    PREPARED,
    Refused,
    TxnCompletion,
    TxnDecisions,
    bumped,
)
from trafka.brokerlite.transactions.journal import TransactionState, TxnJournalError, WrittenMarker
from trafka.brokerlite.transactions.tv2 import completed

__all__ = ["TxnCompletions"]

# The coordinator's logger: its log lines keep the name they had before the split.
log = logging.getLogger("trafka.brokerlite.transactions.coordinator")

_S = TransactionState


class TxnCompletions(TxnDecisions):
    """Completions acknowledged, markers made durable, hanging transactions
    adopted (see the module rules)."""

    def flush_decisions(self) -> bool:
        """fsync the journal, so that every decision written so far is durable.

        The broker calls it before it writes a completion's markers or offsets
        (a no-op when nothing written since the last fsync).

        Returns:
            False when the fsync failed (logged): nothing of the completions may
            be written yet; they are issued again after the retry backoff.
        """
        try:
            self._journal.flush()
        except TxnJournalError as exc:
            log.error("cannot make transaction decisions durable: %s", exc)
            return False
        return True

    def markers_written(
        self,
        completion: TxnCompletion,
        now_ms: int,
        written: Sequence[WrittenMarker] = (),
    ) -> bool:
        """Record that the broker wrote a completion's markers (and applied its offsets).

        A completion that no longer matches the transaction (already acknowledged,
        or superseded) is ignored. The CompleteCommit/CompleteAbort record is not
        fsynced: until a later synced write, a power loss brings back the prepared
        state, whose markers are then written again.

        Args:
            completion: what the broker carried out.
            now_ms: the current time.
            written: where each marker went (the markers skipped are left out):
                remembered until :meth:`markers_synced` reports them on disk.

        Returns:
            True when the transaction moved to CompleteCommit/CompleteAbort; False
            when ignored, or when the journal write failed (the completion is then
            issued again later).
        """
        tid = completion.transactional_id
        record = self._records.get(tid)
        expected = _S.PREPARE_COMMIT if completion.commit else _S.PREPARE_ABORT
        if (
            record is None
            or record.state is not expected
            or record.producer_id != completion.producer_id
            or record.producer_epoch != completion.producer_epoch
        ):
            return False
        done = completed(record, completion.commit, now_ms)  # (a TV2 id may move, .tv2)
        try:
            self._write(done, sync=False, markers=written)
        except Refused:
            return False
        self._issue_at.pop(tid, None)
        log.debug("transaction %r: %s complete", tid, done.state.value)
        return True

    def unsynced_markers(self) -> dict[tuple[str, int], list[WrittenMarker]]:
        """Markers written but not known to be on disk, per partition, in offset order."""
        return self._journal.unsynced_markers()

    @property
    def unsynced_marker_count(self) -> int:
        """How many markers :meth:`unsynced_markers` holds."""
        return self._journal.unsynced_marker_count

    def markers_synced(
        self, synced: Mapping[tuple[str, int], int | None], *, sync: bool = False
    ) -> bool:
        """Forget recorded markers the broker has made durable (or dealt with).

        Args:
            synced: per partition, an offset below which its log is on disk (its
                markers below are forgotten), or None to forget all of its markers.
            sync: fsync the journal entry (needed when the markers were just
                written again after a crash and must not be looked at twice).

        Returns:
            False when the journal write failed (the markers stay recorded, which
            only costs a later retry).
        """
        try:
            self._journal.markers_synced(synced, sync=sync)
        except TxnJournalError as exc:
            log.warning("cannot record synced transaction markers: %s", exc)
            return False
        return True

    def adopt_hanging(
        self, hanging: Mapping[int, Mapping[tuple[str, int], int]], now_ms: int
    ) -> tuple[list[TxnCompletion], set[int]]:
        """Take charge of open transactions that partition logs hold and the journal lost.

        The broker calls it when it opens, with every producer id that has an open
        transaction on a partition whose log was not closed cleanly: ``producer id ->
        (topic, partition) -> first offset of that transaction``. A power loss can
        keep such data while taking the unsynced AddPartitionsToTxn entry (and
        everything after it) from the journal. Each transaction found this way is
        aborted with its producer's epoch bumped: the producer is fenced, so it can
        neither commit the transaction nor have an EndTxn taken for a retry of the
        previous outcome.

        A decided transaction (PrepareCommit/PrepareAbort) whose producer has data
        outside it (on another partition, or at or past the log end recorded with
        the decision) is already complete, since the next transaction only starts
        once every marker is written: its completion is issued again without those
        partitions, and at a bumped epoch. Once it is complete, a second call
        aborts the later transaction.

        Returns:
            The completions to carry out, in order, and the producer ids no
            transactional id holds (their data only needs an ABORT marker at the
            epoch it was written with). Data a transaction holds, ongoing or
            decided, is left to its own completion.
        """
        by_pid = {r.producer_id: r for r in self._records.values()}
        completions: list[TxnCompletion] = []
        orphans: set[int] = set()
        for pid, found in sorted(hanging.items()):
            record = by_pid.get(pid)
            if record is None:
                orphans.add(pid)
                continue
            tid = record.transactional_id
            try:
                if record.state in PREPARED:
                    ends = {(t, p): o for t, p, o in record.decision_ends}
                    later = {
                        tp
                        for tp, first in found.items()
                        if tp not in record.partitions or (tp in ends and first >= ends[tp])
                    }
                    if not later:
                        continue  # its own data, waiting for the markers issued at start
                    log.warning(
                        "transaction %r: a later transaction of producer %d is open on %s, "
                        "which the journal lost (power loss); completing this one without "
                        "them",
                        tid,
                        pid,
                        _names(later),
                    )
                    kept = dataclasses.replace(
                        record,
                        producer_epoch=bumped(record.producer_epoch),
                        last_producer_epoch=NO_PRODUCER_EPOCH,
                        partitions=tuple(tp for tp in record.partitions if tp not in later),
                        decision_ends=tuple(e for e in record.decision_ends if e[:2] not in later),
                        last_update_ms=now_ms,
                    )
                    self._write(kept)
                    completions.append(self._issue(kept, now_ms))
                    continue
                # Ongoing: what it holds is its own. Empty and Complete* hold nothing.
                missing = set(found) - set(record.partitions)
                if not missing:
                    continue  # its own data; it ends or times out as usual
                log.warning(
                    "transaction %r: open on %s, which the journal lost (power loss); "
                    "aborting it and fencing producer %d epoch %d",
                    tid,
                    _names(missing),
                    pid,
                    record.producer_epoch,
                )
                widened = dataclasses.replace(
                    record, partitions=tuple(sorted(set(record.partitions) | missing))
                )
                completions.append(self._fence_and_abort(widened, now_ms))
            except Refused:
                log.error("transaction %r: cannot record its recovery; retried at next start", tid)
        return completions, orphans


def _names(partitions: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(partitions))
