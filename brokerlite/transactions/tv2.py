"""Transaction version 2 (KIP-890 part 2) over one transactional id's record:
the producer checks, the epoch bump of a decision and the producer id it moves
to (pure functions; the coordinator's transitions apply them).

Kafka decides the version per request (``TransactionVersion.transactionVersionForEndTxn``
and ``transactionVersionForAddPartitionsToTxn``): EndTxn v5+ and the brokers'
AddPartitionsToTxn v4+ (which a partition leader sends for Produce v12+, and a
group coordinator for TxnOffsetCommit v5+) are TV2; the record keeps it
(``TxnRecord.tv2``) as Kafka's ``TransactionMetadata.clientTransactionVersion``.

Rules (Kafka's ``TransactionCoordinator.endTransaction`` and ``TransactionMetadata``):

* A TV2 decision (EndTxn v5+) bumps the epoch: PrepareCommit/PrepareAbort hold
  ``epoch + 1`` (the markers carry it) and ``last_producer_epoch`` the epoch
  before. When the epoch before was the last usable one (32766; 32767 stays free
  for fencing), a new producer id is reserved with the decision
  (``next_producer_id``) and the id moves to it at epoch 0 once the markers are
  written; EndTxn answers with the id and epoch of the next transaction.
* Once a TV2 transaction is decided, EndTxn is valid only as a retry: the epoch
  before the bump, or the old producer id at epoch 32766 after a move; anything
  else, the bumped epoch included, is PRODUCER_FENCED (INVALID_PRODUCER_ID_MAPPING
  for another producer id). Before a decision, and for TV1, the epoch must be
  the current one.
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

__all__ = ["LAST_USABLE_EPOCH", "completed", "decided_epochs", "next_ids", "producer_check"]

_S = TransactionState
_PREPARED = (_S.PREPARE_COMMIT, _S.PREPARE_ABORT)
_COMPLETE = (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT)

#: The last epoch a producer may use (Kafka keeps 32767 free for fencing).
LAST_USABLE_EPOCH = 32766


def producer_check(
    record: TxnRecord | None, producer_id: int, producer_epoch: int, *, ending: bool = False
) -> ErrorCode:
    """Whether a request of ``producer_id``/``producer_epoch`` is the id's
    producer (``ending``: an EndTxn, which may be a retry of a TV2 decision).

    Returns:
        NONE, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED or CONCURRENT_TRANSACTIONS.
    """
    if record is None:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    decided = record.state in _PREPARED or record.state in _COMPLETE
    if ending and record.tv2 and decided:
        retry_on_bump = (
            record.producer_id == producer_id and record.producer_epoch == producer_epoch + 1
        )
        retry_on_move = (
            record.state in _COMPLETE
            and record.last_producer_id == producer_id
            and producer_epoch == LAST_USABLE_EPOCH
            and record.producer_epoch == 0
        )
        if record.producer_id != producer_id and not retry_on_move:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        return ErrorCode.NONE if retry_on_bump or retry_on_move else ErrorCode.PRODUCER_FENCED
    if record.producer_id != producer_id:
        if record.state in _PREPARED and record.next_producer_id == producer_id:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if record.producer_epoch != producer_epoch:
        return ErrorCode.PRODUCER_FENCED
    return ErrorCode.NONE


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
