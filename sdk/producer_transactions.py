"""The async producer's transaction calls: what they wait for, and how long.

:class:`TransactionCalls` is the part of the :class:`~trafka.sdk.producer.Producer`
driver behind ``init_transactions``, ``send_offsets_to_transaction``,
``commit_transaction``, ``abort_transaction`` and the ``transaction()`` block.
The decisions are the :class:`~trafka.sdk.producer_core.ProducerCore`'s (and
its transaction manager's); this module starts them, has the sender carry them
on, and waits for their :class:`~trafka.sdk.transactions.TxnResult`.

Rules:

* A call waits at most ``max.block.ms`` (:class:`~trafka.sdk.errors.ProducerBlockedError`);
  the operation goes on, and calling it again waits for the same outcome.
* A commit of a transaction begun while the previous one commits first waits
  for that commit: its failure is this transaction's too.
* The aborts and commits that cleanup needs (a ``transaction()`` block left by
  an exception or cancellation, a close with a transaction open) run shielded
  from cancellation, bounded by ``max.block.ms``; their own errors are logged,
  never raised over the block's.
* Once the producer's tasks are gone (closed, or a cancelled scope around it),
  calls fail at once with :class:`~trafka.sdk.errors.ClientClosedError`,
  after the cancellation when there is one.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import anyio.lowlevel

from trafka.codec import TrafkaError

from ._validate import check_committed_offset, check_offsets, check_str, describe
from .config import ProducerConfig
from .consumer_types import TopicPartition
from .errors import (
    ArgumentTypeError,
    ClientClosedError,
    InvalidTxnStateError,
    ProducerBlockedError,
    TransactionAbortableError,
)
from .producer_core import ProducerCore
from .producer_sender import Sender
from .transactions import ConsumerGroupMetadata, TxnResult, TxnState

__all__ = ["PendingCommit", "TransactionCalls", "transaction_offsets"]

log = logging.getLogger("trafka.sdk.producer")


def transaction_offsets(
    offsets: Any, group_metadata: Any
) -> tuple[dict[TopicPartition, int], ConsumerGroupMetadata]:
    """``send_offsets_to_transaction``'s arguments, checked (pure: the blocking
    producer checks them in the caller's thread too)."""
    clean = check_offsets("offsets", offsets, check_value=check_committed_offset)
    if isinstance(group_metadata, ConsumerGroupMetadata):
        return clean, group_metadata
    if not isinstance(group_metadata, str):
        raise ArgumentTypeError(
            "group_metadata must be a ConsumerGroupMetadata (consumer.group_metadata()) "
            f"or a group id, got {describe(group_metadata)}"
        )
    return clean, ConsumerGroupMetadata(check_str("group_metadata", group_metadata))


class PendingCommit:
    """A commit started with ``commit_transaction(wait=False)``.

    Its failure also dooms the transaction begun after it: that transaction's
    records and offsets fail, and it must be aborted.
    """

    __slots__ = ("_calls", "_result")

    def __init__(self, calls: TransactionCalls, result: TxnResult) -> None:
        self._calls = calls
        self._result = result

    def done(self) -> bool:
        """Whether the commit has completed (or failed)."""
        return self._result.done

    def result(self) -> None:
        """Raise the commit's failure, if it failed.

        Raises:
            InvalidTxnStateError: not completed yet.
            TransactionAbortableError, ProducerFencedError, TransactionFatalError.
        """
        self._result.result()

    async def wait(self) -> None:
        """Wait for the commit (up to ``max.block.ms``), then :meth:`result`.

        Raises:
            ProducerBlockedError: not done within ``max.block.ms``; it goes on.
        """
        await self._calls.wait_result(self._result)

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self._result.error else "done")
        return f"<PendingCommit {state}>"


class TransactionCalls:
    """The transaction calls of one async producer (see the module doc).

    Args:
        core: the producer's core.
        sender: its sender task's driver (wakes it, or sends at once).
        config: the producer's configuration (``max.block.ms``).
    """

    def __init__(self, core: ProducerCore, sender: Sender, config: ProducerConfig) -> None:
        self.core = core
        self.sender = sender
        self.max_block = config.max_block_ms / 1000
        self._max_block_ms = config.max_block_ms

    def check(self, what: str) -> None:
        """Raise unless transactions can be called now.

        Raises:
            InvalidTxnStateError: no ``transactional.id``.
            ClientClosedError: the producer is closed.
        """
        if not self.core.transactional:
            raise InvalidTxnStateError(f"{what} needs a transactional.id")
        if self.core.closed or self.sender.done:
            raise ClientClosedError("the producer is closed")

    async def check_async(self, what: str) -> None:
        """:meth:`check`, for an async call: a cancellation comes first."""
        try:
            self.check(what)
        except ClientClosedError:
            # The producer's tasks end when a scope around it is cancelled; a
            # caller inside that scope must see the cancellation, not this.
            await anyio.lowlevel.checkpoint_if_cancelled()
            raise

    async def init(self, timeout: float | None = None) -> None:
        """``init_transactions()``, waiting up to ``timeout`` s (``max.block.ms``
        when None)."""
        await self.check_async("init_transactions()")
        txn = self.core.txn
        if txn.state not in (TxnState.UNINITIALIZED, TxnState.INITIALIZING):
            if txn.fatal_error is not None:
                raise txn.fatal_error
            return
        result = txn.init()
        self.sender.wake()
        await self.wait_result(result, timeout)

    async def send_offsets(self, offsets: Any, group_metadata: Any) -> None:
        """``send_offsets_to_transaction()``."""
        clean, group = transaction_offsets(offsets, group_metadata)
        await self.check_async("send_offsets_to_transaction()")
        result = self.core.txn.send_offsets(clean, group)
        self.sender.wake()
        await self.wait_result(result)

    async def commit(self, wait: bool) -> PendingCommit:
        """``commit_transaction(wait=wait)``."""
        await self.check_async("commit_transaction()")
        txn = self.core.txn
        sender = self.sender
        previous = txn.committing_result if txn.pipelined else None
        if previous is not None:
            if not previous.done and not sender.done:
                # Its last answer has often arrived already: take it here rather
                # than wait for the connection's reader to run.
                sender.send_if_idle()
            # Its failure is this transaction's too: begin_commit raises it.
            await self.wait_resolved(previous)
        result = txn.begin_commit()
        acc = self.core.acc
        if wait:
            acc.flushing += 1
        else:
            acc.seal()  # every batch of the transaction is ready to leave now
        try:
            sender.wake()
            if not sender.done:
                # The answer to AddPartitionsToTxn has usually arrived while the
                # records were sent: take it now, so that the last batches leave
                # at once rather than once the connection's reader gets to run.
                sender.receive_txn_answer()
                sender.send_now()
            if wait:
                await self.wait_result(result)
        finally:
            if wait:
                acc.flushing -= 1
        return PendingCommit(self, result)

    async def abort(self) -> None:
        """``abort_transaction()``."""
        await self.check_async("abort_transaction()")
        result = self.core.begin_abort()
        self.sender.wake()
        await self.wait_result(result)

    async def abort_shielded(self) -> None:
        """Abort the open transaction (and let a commit under way finish),
        shielded from cancellation and bounded by ``max.block.ms``; errors are
        logged."""
        txn = self.core.txn
        if txn.pipelined:
            # Begun ahead of a commit under way: abort it (locally), then let
            # that commit finish below.
            with anyio.CancelScope(shield=True):
                try:
                    await self.abort()
                except TrafkaError as exc:
                    log.warning("aborting the transaction failed: %s", exc)
        if not txn.in_transaction or txn.state is TxnState.COMMITTING_TRANSACTION:
            if txn.state is TxnState.COMMITTING_TRANSACTION:
                await self.finish_commit_shielded()
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.max_block):
            try:
                await self.abort()
            except TrafkaError as exc:
                log.warning("aborting the transaction failed: %s", exc)

    async def finish_commit_shielded(self) -> None:
        """Complete a commit that was interrupted (it cannot be aborted any
        more), shielded and bounded as :meth:`abort_shielded`."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.max_block):
            try:
                await self.commit(True)
            except TransactionAbortableError:
                await self.abort_shielded()
            except TrafkaError as exc:
                log.warning("completing the transaction failed: %s", exc)

    async def wait_result(self, result: TxnResult, timeout: float | None = None) -> None:
        """Wait for ``result`` up to ``max.block.ms`` (or ``timeout`` s), then
        raise its failure, if any.

        Raises:
            ProducerBlockedError: not done in time; it goes on.
        """
        await self.wait_resolved(result, timeout)
        result.result()

    async def wait_resolved(self, result: TxnResult, timeout: float | None = None) -> None:
        """Wait for ``result`` up to ``max.block.ms`` (or ``timeout`` s),
        without raising its failure."""
        if not result.done:
            if result.waker is None:
                result.waker = anyio.Event()
            with anyio.move_on_after(self.max_block if timeout is None else timeout):
                await result.waker.wait()
            if not result.done:
                bound = (
                    f"max.block.ms ({self._max_block_ms} ms)"
                    if timeout is None
                    else f"its timeout ({timeout * 1000:g} ms)"
                )
                raise ProducerBlockedError(
                    f"{result.operation} did not complete within {bound}; "
                    "call it again to keep waiting"
                )
