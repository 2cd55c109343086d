"""The producer's transaction state machine (Kafka's TransactionManager states),
without I/O.

:class:`TxnStateMachine` holds the state, the producer's identity, the current
transaction's partitions and offsets, the transaction begun ahead, and the
results the user's calls wait on; its public methods are the user-facing
operations. What it sends and what the answers mean are the
:class:`~trafka.sdk.transactions.TransactionManager`'s, which is this machine
with its requests.

Rules and invariants:

* States and transitions are Kafka's (:data:`SOURCES` below is the whole table):
  ``UNINITIALIZED -> INITIALIZING -> READY``; a transaction goes
  ``READY -> IN_TRANSACTION -> COMMITTING_TRANSACTION | ABORTING_TRANSACTION -> READY``;
  an error that only dooms the current transaction moves ``IN_TRANSACTION`` or
  ``COMMITTING_TRANSACTION`` to ``ABORTABLE_ERROR``, from which only an abort
  leaves; ``FATAL_ERROR`` (fenced, unauthorized, a broken protocol invariant) is
  final. Any other transition is a bug and raises.
* The same machine manages an idempotent producer's identity (no
  ``transactional.id``): ``INITIALIZING`` gets a producer id from any broker, and
  ``READY -> INITIALIZING -> READY`` bumps it (KIP-360: InitProducerId with the
  current id and epoch) when the accumulator needs its sequence numbers reset.
* Pipelining: a transaction may begin while the previous one commits
  (:meth:`~TxnStateMachine.begin` in ``COMMITTING_TRANSACTION``). The state
  stays the committing transaction's until its EndTxn is answered; the next one
  collects its partitions and offsets meanwhile, and its batches, numbered
  :attr:`~TxnStateMachine.open_number`, are held back (only batches numbered
  :attr:`~TxnStateMachine.sending_number` may leave). When the commit
  succeeds the next transaction takes over (``READY -> IN_TRANSACTION``) and its
  requests go out. When it fails, the next transaction depends on a commit that
  did not happen, so it shares the failure: its offsets fail, and an abortable
  failure leaves one ``ABORTABLE_ERROR`` whose abort ends both. Aborting the
  next transaction while the previous one commits is local (nothing of it was
  sent). At most one transaction is begun ahead.
* Every :class:`TxnResult` resolves exactly once. A result that the caller
  stopped waiting for stays pending; asking for the same operation again
  returns it (a commit that timed out can only be retried, not aborted).
* Errors are classified once (:func:`classify`): retried, sent to find the
  coordinator again, abortable (only this transaction is doomed) or fatal
  (fenced, unauthorized, a broken protocol invariant).
* Transaction version 2 or 1 (KIP-890 part 2): decided as :mod:`.txn_version`
  says; a transaction keeps the flow it began with (:attr:`~TxnStateMachine.txn_tv2`).
  Moving up to version 2 bumps the epoch after the ending transaction's EndTxn
  (``COMMITTING_TRANSACTION | ABORTING_TRANSACTION -> INITIALIZING -> READY``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from trafka.codec import ErrorCode, KafkaError, UnsupportedVersionError

from .consumer_types import OffsetAndMetadata, TopicPartition
from .errors import (
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionFatalError,
)
from .txn_version import TxnVersion

__all__ = [
    "END_TXN_COMMIT",
    "ConsumerGroupMetadata",
    "OffsetsOp",
    "SOURCES",
    "TxnAction",
    "TxnResult",
    "TxnState",
    "TxnStateMachine",
    "classify",
]

NO_ID = -1
#: What a commit's EndTxn is called in errors (an INVALID_TXN_STATE answer to it
#: says why, see :func:`fatal_error`).
END_TXN_COMMIT = "EndTxn (commit)"


class TxnState(enum.Enum):
    """Kafka's TransactionManager states."""

    # Members are singletons: hash them by identity (C), not by name (a Python
    # call for every lookup in the transition table).
    __hash__ = object.__hash__

    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING_TRANSACTION = "committing_transaction"
    ABORTING_TRANSACTION = "aborting_transaction"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"


S = TxnState
#: target state -> the states it may be entered from
SOURCES: dict[TxnState, frozenset[TxnState]] = {
    S.UNINITIALIZED: frozenset(),
    S.INITIALIZING: frozenset(
        {S.UNINITIALIZED, S.READY, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}
    ),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(TxnState),
}


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """A consumer's group membership, for :meth:`Producer.send_offsets_to_transaction`.

    The coordinator refuses offsets from a generation that has moved on
    (KIP-447), so a producer whose consumer lost its partitions in a rebalance
    cannot commit their offsets.

    Attributes:
        group_id: the group.
        generation_id: the generation the member joined (-1: no generation check).
        member_id: the member id ("" with no generation).
        group_instance_id: the static member id, or None.
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class TxnResult:
    """The outcome of a transaction operation; resolved exactly once.

    Attributes:
        operation: the method that started it (for messages).
        done: resolved.
        error: the failure, or None.
        waker: set by the driver to something with ``set()`` (an event) while it waits.
    """

    __slots__ = ("done", "error", "operation", "waker")

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self.done = False
        self.error: BaseException | None = None
        self.waker: Any = None

    def resolve(self, error: BaseException | None = None) -> None:
        """Done, or failed with ``error`` (the transaction manager's; once only)."""
        if self.done:
            return
        self.done = True
        self.error = error
        if self.waker is not None:
            self.waker.set()

    def result(self) -> None:
        """Raise the failure, if any.

        Raises:
            InvalidTxnStateError: not resolved yet.
        """
        if not self.done:
            raise InvalidTxnStateError(f"{self.operation} has not completed")
        if self.error is not None:
            raise self.error

    def __repr__(self) -> str:
        state = "pending" if not self.done else ("failed" if self.error else "done")
        return f"<TxnResult {self.operation} {state}>"


@dataclasses.dataclass(slots=True, eq=False)
class OffsetsOp:
    """Offsets of a ``send_offsets``, on their way to the group coordinator."""

    offsets: dict[TopicPartition, int]
    group: ConsumerGroupMetadata
    result: TxnResult
    added: bool = False  # AddOffsetsToTxn succeeded (or not needed: transaction version 2)
    tv2: bool = False  # sent in a transaction of transaction version 2 (TxnOffsetCommit v5)


class TxnAction(enum.Enum):
    """What an error code means for the transaction."""

    OK = "ok"
    RETRY = "retry"
    REDISCOVER = "rediscover"
    FENCED = "fenced"
    ABORTABLE = "abortable"
    FATAL = "fatal"


E = ErrorCode
ACTIONS = {
    E.NONE: TxnAction.OK,
    E.NOT_COORDINATOR: TxnAction.REDISCOVER,
    E.COORDINATOR_NOT_AVAILABLE: TxnAction.REDISCOVER,
    E.COORDINATOR_LOAD_IN_PROGRESS: TxnAction.RETRY,
    E.CONCURRENT_TRANSACTIONS: TxnAction.RETRY,
    E.UNKNOWN_TOPIC_OR_PARTITION: TxnAction.RETRY,
    E.OPERATION_NOT_ATTEMPTED: TxnAction.RETRY,
    E.PRODUCER_FENCED: TxnAction.FENCED,
    E.INVALID_PRODUCER_EPOCH: TxnAction.FENCED,
    E.TRANSACTION_ABORTABLE: TxnAction.ABORTABLE,
    E.GROUP_AUTHORIZATION_FAILED: TxnAction.ABORTABLE,
    E.TOPIC_AUTHORIZATION_FAILED: TxnAction.ABORTABLE,
    E.UNKNOWN_MEMBER_ID: TxnAction.ABORTABLE,
    E.ILLEGAL_GENERATION: TxnAction.ABORTABLE,
    E.FENCED_INSTANCE_ID: TxnAction.ABORTABLE,
    E.REBALANCE_IN_PROGRESS: TxnAction.ABORTABLE,
    E.UNKNOWN_PRODUCER_ID: TxnAction.ABORTABLE,
    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: TxnAction.FATAL,
    E.CLUSTER_AUTHORIZATION_FAILED: TxnAction.FATAL,
    E.INVALID_TXN_STATE: TxnAction.FATAL,
    E.INVALID_PRODUCER_ID_MAPPING: TxnAction.FATAL,
    E.INVALID_TRANSACTION_TIMEOUT: TxnAction.FATAL,
    E.UNSUPPORTED_VERSION: TxnAction.FATAL,
    E.UNSUPPORTED_FOR_MESSAGE_FORMAT: TxnAction.FATAL,
    E.INVALID_REQUEST: TxnAction.FATAL,
}

#: Batch errors that end the producer (anything else only dooms the transaction).
FATAL_BATCH_CODES = frozenset(
    {
        E.PRODUCER_FENCED,
        E.INVALID_PRODUCER_EPOCH,
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        E.CLUSTER_AUTHORIZATION_FAILED,
    }
)
#: The same per transaction version (True: 2). In version 2 a batch refused with
#: INVALID_PRODUCER_EPOCH (the coordinator bumped the epoch: the transaction timed
#: out, or a newer instance took over) only dooms the transaction, as Kafka's
#: Java client reads it (an abortable InvalidProducerEpochException, KIP-588);
#: ending it then tells which. Version 1 keeps it fatal, as before.
FATAL_BATCH = {False: FATAL_BATCH_CODES, True: FATAL_BATCH_CODES - {E.INVALID_PRODUCER_EPOCH}}


def classify(code: int) -> TxnAction:
    """The action for ``code``: the table's, else retry what is retriable."""
    ec = ErrorCode.of(code)
    action = ACTIONS.get(ec)
    if action is not None:
        return action
    return TxnAction.RETRY if ec.retriable else TxnAction.FATAL


_HINTS = {
    S.UNINITIALIZED: "call init_transactions() first",
    S.INITIALIZING: "init_transactions() has not completed",
    S.READY: "call begin_transaction() first",
    S.IN_TRANSACTION: "a transaction is already open",
    S.ABORTING_TRANSACTION: "the transaction is aborting",
    S.ABORTABLE_ERROR: "the transaction must be aborted",
}


def state_message(m: TxnStateMachine, what: str) -> str:
    """Why ``what`` is refused in ``m``'s state, with what to do instead."""
    if m.state is S.COMMITTING_TRANSACTION:
        hint = (
            "a transaction is already open, begun while the previous one commits"
            if m.pipelined
            else "the transaction is committing"
        )
    else:
        hint = _HINTS.get(m.state, "")
    return f"{what} is not allowed in state {m.state.name}" + (f": {hint}" if hint else "")


def fatal_error(
    transactional_id: str | None, code: int, what: str, cause: BaseException | None = None
) -> TransactionFatalError:
    """The error that ends a producer with ``transactional_id`` after ``code``."""
    if code == E.INVALID_TXN_STATE and what == END_TXN_COMMIT:
        # The coordinator (Kafka 4.x, brokerlite) had aborted the transaction:
        # it timed out or its producer was fenced. In version 2 that abort keeps
        # the epoch sent as the one before its bump, and reads the commit as its
        # retry with the other outcome. Fatal, as in Java's EndTxnHandler.
        return TransactionFatalError(
            code,
            f"{what}: the coordinator had already aborted this transaction: it timed "
            "out (transaction.timeout.ms) or this producer was fenced (a new producer "
            f"or an admin's fence_producers with transactional.id {transactional_id!r}); "
            "close this producer",
        )
    if classify(code) is TxnAction.FENCED:
        if transactional_id is None:
            return ProducerFencedError(code, f"{what}: the producer epoch is stale")
        return ProducerFencedError(
            code,
            f"{what}: another producer with transactional.id {transactional_id!r} "
            "has taken over (or the transaction timed out)",
        )
    return TransactionFatalError(
        code, f"{what} failed{_authorization_hint(transactional_id, code)}", cause
    )


def _authorization_hint(transactional_id: str | None, code: int) -> str:
    """What an ACL refusal asks for, in the error's message (empty for other codes)."""
    if code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return (
            f": the client's principal needs WRITE on transactional id "
            f"{transactional_id!r} (an ACL on the broker)"
        )
    if code == E.CLUSTER_AUTHORIZATION_FAILED and transactional_id is None:
        return (
            ": an idempotent producer's principal needs WRITE on some topic or "
            "IDEMPOTENT_WRITE on the cluster (an ACL on the broker), or set "
            "enable_idempotence=False"
        )
    return ""


class TxnStateMachine:
    """The state of one producer's identity and transactions (see the module doc).

    Args:
        transactional_id: ``transactional.id``; None for an idempotent producer.
    """

    def __init__(self, transactional_id: str | None = None) -> None:
        self.transactional_id = transactional_id
        self.state = TxnState.UNINITIALIZED
        self.producer_id = NO_ID
        self.producer_epoch = NO_ID
        #: The fatal error, once in FATAL_ERROR.
        self.fatal_error: TransactionFatalError | None = None
        #: The error that made the transaction abortable, in ABORTABLE_ERROR.
        self.last_error: TransactionAbortableError | None = None
        self._init_result: TxnResult | None = None
        self._end_result: TxnResult | None = None
        #: Transactions ended, for statistics.
        self.transactions_committed = 0
        self.transactions_aborted = 0
        self._bump_wanted = False  # idempotent: the accumulator needs a new identity
        self._bump_on_abort = False  # transactional: a sequence gap; bump the epoch after the abort
        #: The transaction version of the next transaction; ``txn_tv2``: of the one sent.
        self.version = TxnVersion()
        self.txn_tv2 = False
        self._bump_after_end = False  # moved up to version 2: bump the epoch after EndTxn
        # The current transaction's partitions: added, waiting to be added, being added.
        self._partitions: set[tuple[str, int]] = set()
        self._new_partitions: set[tuple[str, int]] = set()
        self._adding: set[tuple[str, int]] = set()
        self._offsets: deque[OffsetsOp] = deque()
        self._started = False  # the coordinator confirmed an addition
        self._maybe_started = False  # an addition was sent (its outcome may be unknown)
        #: The open transaction's number: the accumulator stamps it on new batches.
        self.open_number = 0
        #: The number of the transaction whose batches may be sent.
        self.sending_number = 0
        # A transaction begun while the previous one commits: its partitions,
        # offsets, and the failure of one of its batches.
        self._next_begun = False
        self._next_partitions: set[tuple[str, int]] = set()
        self._next_offsets: deque[OffsetsOp] = deque()
        self._next_error: TransactionAbortableError | None = None
        #: Whether records may be sent now (a transaction open and not doomed),
        #: an attribute for the producer's hot path.
        self.sendable = False
        #: Called (with no argument) each time :attr:`sendable` turns False: the
        #: driver stops appending to the batches it keeps at hand without asking.
        self.on_unsendable: Callable[[], None] | None = None

    # -- state ------------------------------------------------------------------------

    @property
    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (begun and not yet completed)."""
        return self.state in (
            S.IN_TRANSACTION,
            S.COMMITTING_TRANSACTION,
            S.ABORTING_TRANSACTION,
            S.ABORTABLE_ERROR,
        )

    @property
    def pipelined(self) -> bool:
        """Whether a transaction was begun while the previous one commits."""
        return self._next_begun

    @property
    def committing_result(self) -> TxnResult | None:
        """The result of the commit under way, if any."""
        return self._end_result if self._committing else None

    @property
    def _committing(self) -> bool:  # its EndTxn, or the epoch bump after it
        r, s = self._end_result, self.state
        return s is S.COMMITTING_TRANSACTION or (
            s is S.INITIALIZING and r is not None and r.operation == "commit_transaction"
        )

    @property
    def partitions(self) -> frozenset[tuple[str, int]]:
        """The partitions added to the current transaction so far."""
        return frozenset(self._partitions)

    def _transition(self, target: TxnState) -> None:
        if self.state not in SOURCES[target]:
            raise InvalidTxnStateError(
                f"invalid transaction state change from {self.state.name} to {target.name}"
            )
        self.state = target
        self._update_sendable()

    def _update_sendable(self) -> None:
        was = self.sendable
        self.sendable = sendable = self.state is S.IN_TRANSACTION or (
            self._next_begun and self._next_error is None
        )
        if was and not sendable and self.on_unsendable is not None:
            self.on_unsendable()

    def _check_not_fatal(self) -> None:
        if self.fatal_error is not None:
            raise self.fatal_error

    def _require_transactional(self, what: str) -> None:
        if self.transactional_id is None:
            raise InvalidTxnStateError(f"{what} needs a transactional.id")

    # -- user operations ----------------------------------------------------------------

    def init(self) -> TxnResult:
        """Get a producer id (and, with a transactional id, fence older instances).

        Returns:
            The result; an init already under way returns its result.

        Raises:
            TransactionFatalError: the producer is in FATAL_ERROR.
            InvalidTxnStateError: already initialized.
        """
        self._check_not_fatal()
        if self.state is S.INITIALIZING and self._init_result is not None:
            return self._init_result
        if self.state is not S.UNINITIALIZED:
            raise InvalidTxnStateError(f"init_transactions() in state {self.state.name}")
        self._transition(S.INITIALIZING)
        self._init_result = TxnResult("init_transactions")
        return self._init_result

    def begin(self) -> None:
        """Start a transaction (local only: nothing is sent until records or offsets are).

        While the previous transaction commits, this one begins ahead of it
        (see pipelining, above).

        Raises:
            TransactionFatalError, InvalidTxnStateError: not READY (or
            committing with no transaction begun ahead).
        """
        self._require_transactional("begin_transaction()")
        self._check_not_fatal()
        if self._committing and not self._next_begun:
            self._next_begun = True
            self._next_partitions = set()
            self._next_offsets = deque()
            self._next_error = None
            self.open_number += 1
            self._update_sendable()
            return
        if self.state is not S.READY:
            raise InvalidTxnStateError(state_message(self, "begin_transaction()"))
        self._transition(S.IN_TRANSACTION)
        self._clear_transaction()
        self.txn_tv2 = self.version.tv2
        self.open_number += 1
        self.sending_number = self.open_number

    def add_partition(self, topic: str, partition: int) -> bool:
        """A record for ``topic``/``partition`` is about to be appended; include it.

        Returns:
            True when the partition is new to the transaction: an AddPartitionsToTxn
            is now wanted, and the driver should :meth:`poll` at once rather than
            when the batch is ready, so that the request overlaps with filling it.

        Raises:
            TransactionFatalError: FATAL_ERROR.
            TransactionAbortableError: the transaction must be aborted.
            InvalidTxnStateError: no transaction open.
        """
        if self.state is not S.IN_TRANSACTION:
            if self.sendable:  # begun ahead: added once the previous commit is done
                self._next_partitions.add((topic, partition))
                return False
            self._refuse("send()")
        key = (topic, partition)
        if key in self._partitions or key in self._new_partitions or key in self._adding:
            return False
        if self.txn_tv2:  # its leader adds it with the first Produce (v12+)
            self._partitions.add(key)
            self._maybe_started = True
            return False
        self._new_partitions.add(key)
        return True

    def check_can_send(self) -> None:
        """Raise what :meth:`add_partition` would, without a partition.

        Raises:
            TransactionFatalError, TransactionAbortableError, InvalidTxnStateError.
        """
        if not self.sendable:
            self._refuse("send()")

    def _refuse(self, what: str) -> None:
        self._check_not_fatal()
        if self._next_begun and self._next_error is not None:
            raise TransactionAbortableError(
                self._next_error.__cause__, f"{what}: {self._next_error}"
            ) from self._next_error.__cause__
        if self.state is S.ABORTABLE_ERROR and self.last_error is not None:
            raise TransactionAbortableError(
                self.last_error.__cause__, f"{what}: {self.last_error}"
            ) from self.last_error.__cause__
        raise InvalidTxnStateError(state_message(self, what))

    def is_send_allowed(self, topic: str, partition: int, number: int | None = None) -> bool:
        """The accumulator's gate: batches of partitions not yet in the transaction
        wait, and so do those of a transaction begun ahead (``number``, the
        batch's :attr:`open_number`, is not :attr:`sending_number`)."""
        return (
            (number is None or number == self.sending_number)
            and (topic, partition) in self._partitions
            and (self.state is S.IN_TRANSACTION or self.state is S.COMMITTING_TRANSACTION)
        )

    def send_offsets(
        self,
        offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
        group: ConsumerGroupMetadata,
    ) -> TxnResult:
        """Make consumer offsets part of the transaction (AddOffsetsToTxn + TxnOffsetCommit).

        Args:
            offsets: the next offset to consume, per partition (an
                :class:`OffsetAndMetadata` commits its metadata too).
            group: the consumer's :class:`ConsumerGroupMetadata`.

        Returns:
            The result, resolved when the group coordinator holds the offsets.

        Raises:
            TransactionFatalError, TransactionAbortableError, InvalidTxnStateError.
        """
        self._require_transactional("send_offsets_to_transaction()")
        if not self.sendable:
            self._refuse("send_offsets_to_transaction()")
        result = TxnResult("send_offsets_to_transaction")
        # An OffsetAndMetadata stays one: TxnOffsetCommit carries its metadata.
        clean = {
            TopicPartition(*tp): off if isinstance(off, OffsetAndMetadata) else int(off)
            for tp, off in offsets.items()
        }
        if not clean:
            result.resolve()
            return result
        now = self.state is S.IN_TRANSACTION  # else begun ahead
        tv2 = self.txn_tv2 if now else self.version.tv2  # version 2: no AddOffsetsToTxn
        ops = self._offsets if now else self._next_offsets
        ops.append(OffsetsOp(clean, group, result, tv2, tv2))
        return result

    def begin_commit(self) -> TxnResult:
        """Commit the transaction once its batches are all sent.

        Returns:
            The result; a commit already under way returns its result.

        Raises:
            TransactionFatalError: FATAL_ERROR.
            TransactionAbortableError: the transaction must be aborted instead.
            InvalidTxnStateError: no transaction open, or one begun ahead while
                the previous one still commits (wait for that commit first:
                :attr:`committing_result`).
        """
        self._require_transactional("commit_transaction()")
        self._check_not_fatal()
        if self._next_begun:
            if self._next_error is not None:
                self._refuse("commit_transaction()")
            raise InvalidTxnStateError(
                "commit_transaction(): the previous transaction is still committing"
            )
        if self._committing and self._end_result is not None:
            return self._end_result
        if self.state is not S.IN_TRANSACTION:
            self._refuse("commit_transaction()")
        self._transition(S.COMMITTING_TRANSACTION)
        self._end_result = result = TxnResult("commit_transaction")
        self._update_version()
        return result

    def begin_abort(self) -> TxnResult:
        """Abort the transaction: queued offsets are dropped; the driver fails unsent batches.

        Returns:
            The result; an abort already under way returns its result.

        Raises:
            TransactionFatalError: FATAL_ERROR.
            InvalidTxnStateError: no transaction open, or it is committing.
        """
        self._require_transactional("abort_transaction()")
        self._check_not_fatal()
        if self._next_begun:
            # Begun ahead of a commit under way: nothing of it was sent.
            self._drop_next(TransactionAbortedError("the transaction was aborted"))
            self.transactions_aborted += 1
            result = TxnResult("abort_transaction")
            result.resolve()
            return result
        if self.state is S.ABORTING_TRANSACTION and self._end_result is not None:
            return self._end_result
        if self.state is S.INITIALIZING and self._end_result is not None and not self._committing:
            return self._end_result  # the abort became an epoch bump
        if self.state not in (S.IN_TRANSACTION, S.ABORTABLE_ERROR):
            raise InvalidTxnStateError(state_message(self, "abort_transaction()"))
        self._transition(S.ABORTING_TRANSACTION)
        self._end_result = result = TxnResult("abort_transaction")
        self._update_version()
        self._new_partitions.clear()
        aborted = TransactionAbortedError("the transaction was aborted")
        # The head may be in flight; its answer no longer matters, but it must come back.
        while self._offsets:
            self._offsets.pop().result.resolve(aborted)
        return result

    def _drop_next(self, error: BaseException) -> None:
        """Forget the transaction begun ahead, failing its offsets with ``error``."""
        self._next_begun = False
        self._next_partitions = set()
        self._next_error = None
        while self._next_offsets:
            self._next_offsets.popleft().result.resolve(error)
        self._update_sendable()

    def _start_next(self) -> None:
        """The commit is done: the transaction begun ahead is now the open one."""
        error = self._next_error
        self._next_begun = False
        self._next_error = None
        self._transition(S.IN_TRANSACTION)
        self.txn_tv2 = self.version.tv2
        if self.txn_tv2:
            self._partitions, self._next_partitions = self._next_partitions, set()
            self._maybe_started = bool(self._partitions)
        else:
            self._new_partitions, self._next_partitions = self._next_partitions, set()
        self._offsets, self._next_offsets = self._next_offsets, deque()
        self.sending_number = self.open_number
        if error is not None:
            self._abortable(error)

    def _update_version(self, on_init: bool = False) -> None:
        self._bump_after_end |= self.is_transactional and self.version.update(on_init=on_init)

    def request_epoch_bump(self) -> None:
        """Idempotent producer: the accumulator needs a new identity (KIP-360).

        A bump already under way (INITIALIZING) covers it.
        """
        if self.transactional_id is not None or self.state is S.FATAL_ERROR:
            return
        if self.state is not S.INITIALIZING:
            self._bump_wanted = True

    def on_batch_failed(
        self, error: BaseException, *, sequenced: bool, number: int | None = None
    ) -> None:
        """A batch of the transaction failed for good.

        Args:
            error: why.
            sequenced: it had sequence numbers (it leaves a gap unless it was written).
            number: the batch's transaction number; a batch of the transaction
                begun ahead dooms that one only (it was never sent).
        """
        if self.transactional_id is None or self.state is S.FATAL_ERROR:
            return
        if self._next_begun and number == self.open_number:
            if self._next_error is None and not isinstance(
                error, TransactionAbortedError | TransactionAbortableError
            ):
                self._next_error = TransactionAbortableError(error)
                self._update_sendable()
            return
        code = error.code if isinstance(error, KafkaError) else None
        if code in FATAL_BATCH[self.txn_tv2]:
            self._fatal(self._fatal_error(int(code or 0), "a batch failed", error))
            return
        if isinstance(error, UnsupportedVersionError):
            self._fatal(TransactionFatalError(ErrorCode.UNSUPPORTED_VERSION, str(error), error))
            return
        if sequenced and not self.txn_tv2:  # version 2: the abort's EndTxn bumps the epoch
            self._bump_on_abort = True
        if not isinstance(error, TransactionAbortedError | TransactionAbortableError):
            self._abortable(error)

    def close(self, error: BaseException) -> None:
        """The producer is closing: fail every pending result with ``error``."""
        for result in self._pending_results():
            result.resolve(error)
        self._offsets.clear()
        self._next_offsets.clear()

    def _pending_results(self) -> list[TxnResult]:
        out = [op.result for op in (*self._offsets, *self._next_offsets)]
        for r in (self._init_result, self._end_result):
            if r is not None and not r.done:
                out.append(r)
        return out

    # -- outcomes -----------------------------------------------------------------------

    def _clear_transaction(self) -> None:
        self._partitions = set()
        self._new_partitions = set()
        self._adding = set()
        self._offsets.clear()
        self._started = self._maybe_started = False
        self.last_error = None

    def _complete(self, error: BaseException | None) -> None:
        """The transaction ended (committed or aborted): back to READY, or on
        to the transaction begun ahead."""
        result, self._end_result = self._end_result, None
        self._transition(S.READY)
        self._clear_transaction()
        if self._next_begun:
            self._start_next()
        if result is not None:
            if error is None and result.operation == "commit_transaction":
                self.transactions_committed += 1
            elif error is None and result.operation == "abort_transaction":
                self.transactions_aborted += 1
            result.resolve(error)

    def _abortable(self, cause: BaseException) -> None:
        if self.state not in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR):
            return  # aborting already (or no transaction): nothing more to doom
        error = (
            cause
            if isinstance(cause, TransactionAbortableError)
            else TransactionAbortableError(cause)
        )
        if self.last_error is None:
            self.last_error = error
        if self._next_begun:
            # It depended on this commit: one abort now ends both.
            self._drop_next(self.last_error)
        self._transition(S.ABORTABLE_ERROR)
        self._new_partitions.clear()
        while self._offsets:
            self._offsets.popleft().result.resolve(self.last_error)
        result, self._end_result = self._end_result, None
        if result is not None:
            result.resolve(self.last_error)

    def _fatal_error(self, code: int, what: str, cause: Any = None) -> TransactionFatalError:
        return fatal_error(self.transactional_id, code, what, cause)

    def _fatal(self, error: TransactionFatalError) -> None:
        if self.state is S.FATAL_ERROR:
            return
        self.fatal_error = error
        self._next_begun = False
        self._transition(S.FATAL_ERROR)
        for result in self._pending_results():
            result.resolve(error)
        self._offsets.clear()
        self._next_offsets.clear()
        self._init_result = self._end_result = None

    def fail_fatal(self, error: BaseException) -> None:
        """The driver hit an error that ends the producer (e.g. no InitProducerId)."""
        if isinstance(error, TransactionFatalError):
            self._fatal(error)
        else:
            code = (
                error.raw_code if isinstance(error, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
            )
            self._fatal(TransactionFatalError(code, str(error), error))
