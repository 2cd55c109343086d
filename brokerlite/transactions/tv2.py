"""Transaction version 2 (KIP-890 part 2) over one transactional id's record:
the producer checks, the epoch bump of a decision and the producer id it moves
to (pure functions; the coordinator's transitions apply them).

Kafka decides the version per request (``TransactionVersion.transactionVersionForEndTxn``
and ``transactionVersionForAddPartitionsToTxn``): EndTxn v5+ and the brokers'
AddPartitionsToTxn v4+ (which a partition leader sends for Produce v12+, and a
group coordinator for TxnOffsetCommit v5+) are TV2; the record keeps it
(``TxnRecord.tv2``) as Kafka's ``TransactionMetadata.clientTransactionVersion``.

Rules (Kafka 4.4's ``TransactionCoordinator.endTransaction`` and ``TransactionMetadata``):

* A TV2 decision (EndTxn v5+) bumps the epoch: PrepareCommit/PrepareAbort hold
  ``epoch + 1`` (the markers carry it) and ``last_producer_epoch`` the epoch
  before. When the epoch before was the last usable one (32766; 32767 stays free
  for fencing), a new producer id is reserved with the decision
  (``next_producer_id``) and the id moves to it at epoch 0 once the markers are
  written; EndTxn answers with the id and epoch of the next transaction.
* EndTxn v5+ checks, in order: while a decision's markers are being written,
  CONCURRENT_TRANSACTIONS; another producer id, INVALID_PRODUCER_ID_MAPPING
  (except the old id of a move, retried at 32766); then the epoch: the current
  one while Empty or Ongoing; once decided, a retry (the epoch before the bump,
  or the old id at 32766 after a move) or, once complete, the current one; else
  PRODUCER_FENCED. A retry is answered as the decision was (NONE for the same
  outcome, INVALID_TXN_STATE for the other). With nothing ongoing, a commit is
  INVALID_TXN_STATE and an abort that is no retry is a decision of its own: it
  bumps the epoch with no partition to mark (Kafka lets a TV2 producer fence its
  own late writes so).
* An abort that fences (InitProducerId, a timeout) follows the finalized
  ``transaction.version``, not the transaction's own version (Kafka 4.4's
  coordinator passes its own level to ``endTransaction``). At 2 it is a TV2
  decision: one bump (the fence's own bump is never written), the epoch before
  kept, a new producer id reserved from the last usable epoch. The fenced
  instance's EndTxn v5 with its old epoch is then a retry of that abort
  (commit INVALID_TXN_STATE, abort NONE with the epoch after) until the next
  InitProducerId bumps again, and its KIP-360 InitProducerId with the old
  epoch is a retry of the bump. Below 2 it bumps once and is no TV2 decision
  (``tv2`` false): the old epoch is PRODUCER_FENCED.
* The new producer id used while its decision's markers are still being written
  is CONCURRENT_TRANSACTIONS, not INVALID_PRODUCER_ID_MAPPING (KAFKA-18660: the
  producer must not fence itself).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from trafka.brokerlite.transactions.journal import TransactionState, TxnRecord
from trafka.codec.errors import ErrorCode

__all__ = [
    "LAST_USABLE_EPOCH",
    "completed",
    "decided_epochs",
    "next_ids",
    "producer_check",
    "settled_outcome",
]

_S = TransactionState
_PREPARED = (_S.PREPARE_COMMIT, _S.PREPARE_ABORT)
_COMPLETE = (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT)

#: The last epoch a producer may use (Kafka keeps 32767 free for fencing).
LAST_USABLE_EPOCH = 32766


def producer_check(
    record: TxnRecord | None, producer_id: int, producer_epoch: int, *, ending: bool = False
) -> ErrorCode:
    """Whether a request of ``producer_id``/``producer_epoch`` is the id's
    producer (``ending``: an EndTxn v5+, see the module rules).

    Returns:
        NONE, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED or CONCURRENT_TRANSACTIONS.
    """
    if record is None:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if ending:
        if record.state in _PREPARED:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        retry_on_move = _is_retry(record, producer_id, producer_epoch) and (
            record.producer_id != producer_id
        )
        if record.producer_id != producer_id and not retry_on_move:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        current = record.producer_epoch == producer_epoch
        if record.state in _COMPLETE:
            current = current or _is_retry(record, producer_id, producer_epoch)
        return ErrorCode.NONE if current else ErrorCode.PRODUCER_FENCED
    if record.producer_id != producer_id:
        if record.state in _PREPARED and record.next_producer_id == producer_id:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if record.producer_epoch != producer_epoch:
        return ErrorCode.PRODUCER_FENCED
    return ErrorCode.NONE


def _is_retry(record: TxnRecord, producer_id: int, producer_epoch: int) -> bool:
    """Whether an EndTxn v5+ repeats the TV2 decision ``record`` holds."""
    if not record.tv2:
        return False
    if record.producer_id == producer_id:
        return record.producer_epoch == producer_epoch + 1
    return (
        record.last_producer_id == producer_id
        and producer_epoch == LAST_USABLE_EPOCH
        and record.producer_epoch == 0
    )


def settled_outcome(
    record: TxnRecord, producer_id: int, producer_epoch: int, commit: bool, tv2: bool
) -> ErrorCode | None:
    """EndTxn's answer when no transaction is ongoing (``tv2``: v5+); None for
    TV2's abort with nothing ongoing, which is decided as one (it bumps)."""
    state = record.state
    if state in _PREPARED:
        same = (state is _S.PREPARE_COMMIT) == commit
        return ErrorCode.CONCURRENT_TRANSACTIONS if same else ErrorCode.INVALID_TXN_STATE
    if not tv2:
        # A retry of an EndTxn that already completed is answered the same way.
        if state in _COMPLETE and (state is _S.COMPLETE_COMMIT) == commit:
            return ErrorCode.NONE
        return ErrorCode.INVALID_TXN_STATE
    retry = _is_retry(record, producer_id, producer_epoch)
    if commit:
        return (
            ErrorCode.NONE if retry and state is _S.COMPLETE_COMMIT else ErrorCode.INVALID_TXN_STATE
        )
    if retry:
        return ErrorCode.NONE if state is _S.COMPLETE_ABORT else ErrorCode.INVALID_TXN_STATE
    return None


def decided_epochs(record: TxnRecord, bump: bool, allocate: Callable[[], int]) -> dict[str, Any]:
    """The epoch fields of ``record``'s decision: bumped for TV2 (``bump``), with
    a new producer id reserved (``allocate``) when the epochs ran out."""
    if not bump:
        return {"tv2": False}
    epoch = record.producer_epoch
    return {
        "producer_epoch": epoch + 1,
        "last_producer_epoch": epoch,
        "next_producer_id": allocate() if epoch >= LAST_USABLE_EPOCH else -1,
        "tv2": True,
    }


def next_ids(record: TxnRecord) -> tuple[int, int]:
    """The producer id and epoch of the producer's next transaction (EndTxn v5+'s
    answer, as Kafka's after KAFKA-18660)."""
    if record.next_producer_id >= 0:
        return record.next_producer_id, 0
    return record.producer_id, record.producer_epoch


def completed(record: TxnRecord, commit: bool, now_ms: int) -> TxnRecord:
    """``record`` once its decision's markers are written: CompleteCommit or
    CompleteAbort, on the new producer id at epoch 0 after an exhausted bump."""
    done = dataclasses.replace(
        record,
        state=_S.COMPLETE_COMMIT if commit else _S.COMPLETE_ABORT,
        partitions=(),
        groups=(),
        pending_offsets={},
        last_update_ms=now_ms,
        decision_ends=(),
    )
    if record.next_producer_id < 0:
        return done
    return dataclasses.replace(
        done,
        producer_id=record.next_producer_id,
        last_producer_id=record.producer_id,
        producer_epoch=0,
        last_producer_epoch=record.producer_epoch,
        next_producer_id=-1,
    )
