"""Handing a transaction from its writer to another process that ends it (two-phase commit).

A framework that writes in many processes and decides in one (Spark's driver,
Flink's committer) needs what a Kafka producer does not offer by itself: each
writer flushes its transaction and leaves it open, and the decider later
commits or aborts every writer's transaction. Kafka allows it: EndTxn names the
transaction by its ``transactional.id``, producer id and epoch, and the
coordinator checks those, not the connection (Kafka's ``TransactionCoordinator``;
brokerlite alike). The admin's EndTxn goes at v4 at most, which Kafka 4.x and
brokerlite accept for a transaction written with transaction version 2 too
(KIP-890 part 2; tests/sdk/test_sdk_txn_handoff.py runs on both).

* :func:`prepare_transaction` (the writer): flush the open transaction, check
  that every record was acknowledged, and return its
  :class:`PreparedTransaction`; the producer is then closed without ending it.
* :func:`end_transaction` (the decider, any process): commit or abort a
  prepared transaction with EndTxn on its producer id and epoch, through an
  admin client.

Rules:

* Committing a committed transaction again succeeds, as does aborting an
  aborted one (a retry, to the coordinator): a decider that does not know
  whether its EndTxn arrived sends it again. The opposite outcome is refused
  (:class:`~trafka.sdk.errors.InvalidTxnStateError`).
* A newer producer with the same ``transactional.id`` (``init_transactions``,
  which aborts the transaction if it is still open) or the coordinator's
  ``transaction.timeout.ms`` (which aborts it and bumps the epoch) fences the
  prepared transaction: ending it then raises
  :class:`~trafka.sdk.errors.ProducerFencedError`. That is how a retried writer
  fences its zombie; and why the timeout must outlast the time from a
  transaction's first record to its decision.
* A transaction to which nothing was written has nothing to end (the
  coordinator would answer INVALID_TXN_STATE): :func:`end_transaction` does
  nothing for one.
* Transaction version 2 (KIP-890, EndTxn v5) bumps the epoch at every EndTxn,
  so "commit again" would be fenced; trafka's clients speak EndTxn up to v4
  and produce up to v11, so Kafka 4 brokers keep version 1 with them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import ClientClosedError, InvalidTxnStateError

# Types only: a task that prepares needs no admin client, and one that only
# reads a PreparedTransaction (a Spark driver, a worker unpickling the data
# source) loads neither the producer nor its transactions.
if TYPE_CHECKING:
    from .admin import Admin
    from .producer import Producer

__all__ = ["PreparedTransaction", "end_transaction", "prepare_transaction"]


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedTransaction:
    """An open transaction whose records are all written, to be ended elsewhere.

    Attributes:
        transactional_id: the writer's ``transactional.id``.
        producer_id, producer_epoch: the identity the coordinator checks.
        partitions: ``(topic, partition)`` pairs the transaction wrote to; empty
            when it wrote nothing (then there is nothing to end).
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (for a commit log)."""
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "partitions": [list(tp) for tp in self.partitions],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PreparedTransaction:
        """The transaction :meth:`to_json` described.

        Raises:
            ValueError: ``data`` is not such a description.
        """
        try:
            return cls(
                str(data["transactional_id"]),
                int(data["producer_id"]),
                int(data["producer_epoch"]),
                tuple((str(t), int(p)) for t, p in data.get("partitions", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a prepared transaction: {data!r} ({exc})") from None


async def prepare_transaction(producer: Producer) -> PreparedTransaction:
    """Flush the producer's open transaction and hand it over, open.

    Waits for every record sent so far to be acknowledged, then returns the
    transaction's identity and closes the producer without ending the
    transaction (leave its ``async with`` block as usual afterwards; any other
    call raises :class:`~trafka.sdk.errors.ClientClosedError`). The
    transaction then waits for :func:`end_transaction`, or for the
    coordinator's ``transaction.timeout.ms``.

    Raises:
        InvalidTxnStateError: no transaction open (or a commit or abort under way).
        TransactionAbortableError: a record failed; abort the transaction.
        TransactionFatalError: the producer was fenced.
    """
    from .transactions import TxnState

    txn = producer.core.txn
    if not txn.is_transactional or txn.state is not TxnState.IN_TRANSACTION or txn.pipelined:
        if txn.fatal_error is not None:
            raise txn.fatal_error
        if txn.state is TxnState.ABORTABLE_ERROR and txn.last_error is not None:
            raise txn.last_error
        raise InvalidTxnStateError(
            f"prepare_transaction() needs an open transaction, not {txn.state.value}"
        )
    await producer.flush()
    # A failed record dooms the transaction (ABORTABLE_ERROR) or the producer.
    if txn.fatal_error is not None:
        raise txn.fatal_error
    if txn.state is not TxnState.IN_TRANSACTION:
        if txn.last_error is not None:
            raise txn.last_error
        raise InvalidTxnStateError(f"the transaction is {txn.state.value}, not open")
    assert txn.transactional_id is not None
    prepared = PreparedTransaction(
        txn.transactional_id,
        txn.producer_id,
        txn.producer_epoch,
        tuple(sorted(txn.partitions)),
    )
    # Closed as a producer that failed would be: its close then neither
    # flushes nor aborts (the transaction belongs to whoever ends it now).
    producer.core.close(ClientClosedError("the producer handed its transaction over"))
    return prepared


async def end_transaction(
    admin: Admin,
    transaction: PreparedTransaction,
    *,
    commit: bool,
    timeout_ms: int | None = None,
) -> None:
    """Commit or abort a prepared transaction from any process (EndTxn).

    Coordinators that move or load, and a transaction whose markers are still
    being written, are waited out within ``timeout_ms`` (default
    ``default.api.timeout.ms``).

    A transaction without partitions had nothing written and is left alone.
    Otherwise the errors are :meth:`~trafka.sdk.admin.Admin.end_transaction`'s:
    fenced by a newer producer or the coordinator's timeout, ended the other
    way, refused, or not done within ``timeout_ms``.
    """
    if not transaction.partitions:
        return
    await admin.end_transaction(
        transaction.transactional_id,
        transaction.producer_id,
        transaction.producer_epoch,
        commit=commit,
        timeout_ms=timeout_ms,
    )
