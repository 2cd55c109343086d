"""The transaction coordinator's timers: transaction timeouts, completions issued
again, transactional-id expiry, and the ids a cluster hands it (sans-IO).

Rules and invariants:

* A transaction times out ``timeout_ms`` after its first partition or group was
  added: it is aborted with the epoch bumped, fencing the producer. A store that
  refuses the abort is tried again ``marker_retry_backoff_ms`` later.
* A completion not acknowledged within ``marker_retry_backoff_ms`` is issued
  again by :meth:`TxnExpiry.tick`.
* Every ``expiration_check_interval_ms``, an id that stayed Empty or Complete*
  for ``transactional_id_expiration_ms`` is deleted.
* After a restart (or when a cluster hands this coordinator a partition's ids)
  every Prepare* transaction is completed again (its markers re-issued by the
  first tick) and Ongoing ones time out as usual.
* A timer is a heap entry; a stale one (its transaction moved on) is skipped
  when it surfaces. Timers fire only in :meth:`TxnExpiry.tick`.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Mapping

from trafka.brokerlite.transactions.decisions import (
    COMPLETE,
    MARKERS,
    PREPARED,
    TIMEOUT,
    Refused,
    TxnCompletion,
    TxnDecisions,
)
from trafka.brokerlite.transactions.journal import TransactionState, TxnJournalError, TxnRecord

__all__ = ["TxnExpiry"]

# The coordinator's logger: its log lines keep the name they had before the split.
log = logging.getLogger("trafka.brokerlite.transactions.coordinator")

_S = TransactionState


class TxnExpiry(TxnDecisions):
    """Timeouts, re-issued completions and expiry (see the module rules)."""

    def load(self, records: Mapping[str, TxnRecord]) -> None:
        """Take charge of transactional ids (this broker now leads their
        ``__transaction_state`` partition): decided transactions are completed
        again by the next :meth:`tick`, ongoing ones time out as usual."""
        self._records.update(records)
        self._resume(records)

    def unload(self, transactional_ids: Iterable[str]) -> None:
        """Forget transactional ids (another broker coordinates them now); their
        timers lapse."""
        for tid in transactional_ids:
            self._records.pop(tid, None)
            self._issue_at.pop(tid, None)

    def _resume(self, records: Mapping[str, TxnRecord]) -> None:
        # Decided transactions are completed again at the first tick; ongoing ones
        # time out as usual.
        for tid, record in records.items():
            if record.state in PREPARED:
                self._set_issue(tid, 0)
            elif record.state is _S.ONGOING:
                self._push(record.txn_start_ms + record.timeout_ms, tid, TIMEOUT)

    def tick(self, now_ms: int) -> list[TxnCompletion]:
        """Fire every timer due at ``now_ms``: transaction timeouts (abort, fencing the
        producer), completions to issue again (and those pending since a restart),
        and transactional-id expiry.

        Returns:
            The completions for the broker to carry out.
        """
        out: list[TxnCompletion] = []
        if self._next_expiration_ms is None:
            self._next_expiration_ms = now_ms + self._expiration_check_ms
        while self._heap and self._heap[0][0] <= now_ms:
            deadline, _, tid, kind = heapq.heappop(self._heap)
            if not self._timer_valid(deadline, tid, kind):
                continue
            if kind == TIMEOUT:
                self._abort_timed_out(tid, now_ms, out)
            elif kind == MARKERS:
                record = self._records[tid]
                log.info("transaction %r: issuing %s markers again", tid, record.state.value)
                out.append(self._issue(record, now_ms))
        if now_ms >= self._next_expiration_ms:
            self._expire(now_ms)
            self._next_expiration_ms = now_ms + self._expiration_check_ms
        return out

    def next_deadline(self) -> int | None:
        """When :meth:`tick` must next be called (ms); 0 means at once."""
        while self._heap:
            deadline, _, tid, kind = self._heap[0]
            if self._timer_valid(deadline, tid, kind):
                break
            heapq.heappop(self._heap)
        deadlines = [self._heap[0][0]] if self._heap else []
        deadlines.append(0 if self._next_expiration_ms is None else self._next_expiration_ms)
        return min(deadlines)

    def _abort_timed_out(self, tid: str, now_ms: int, out: list[TxnCompletion]) -> None:
        record = self._records[tid]
        log.info(
            "transaction %r: timed out after %d ms, aborting (producer id %d epoch %d fenced)",
            tid,
            record.timeout_ms,
            record.producer_id,
            record.producer_epoch,
        )
        try:
            out.append(self._fence_and_abort(record, now_ms))
        except Refused:
            # The journal refused the write: try again shortly.
            self._push(now_ms + self._retry_ms, tid, TIMEOUT)

    def _expire(self, now_ms: int) -> None:
        for tid, record in list(self._records.items()):
            if record.state in (_S.EMPTY, *COMPLETE) and (
                record.last_update_ms + self._expiration_ms <= now_ms
            ):
                try:
                    self._journal.delete(tid)
                except TxnJournalError as exc:
                    log.warning("transaction %r: expiry not written: %s", tid, exc)
                    return
                del self._records[tid]
                self._issue_at.pop(tid, None)
                log.info("transactional id %r expired", tid)

    def _timer_valid(self, deadline: int, tid: str, kind: str) -> bool:
        record = self._records.get(tid)
        if record is None:
            return False
        if kind == TIMEOUT:
            # Stale timers of earlier transactions fall before this one's deadline; a
            # retry after a failed abort falls after it.
            return (
                record.state is _S.ONGOING and deadline >= record.txn_start_ms + record.timeout_ms
            )
        if kind == MARKERS:
            return record.state in PREPARED and self._issue_at.get(tid) == deadline
        return False
