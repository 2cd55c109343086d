"""The producer's identity and transactions (Kafka's TransactionManager), without I/O.

The driver (:mod:`.producer`) calls the user-facing methods (:meth:`~TransactionManager.init`,
:meth:`~TransactionManager.begin`, :meth:`~TransactionManager.add_partition`,
:meth:`~TransactionManager.send_offsets`, :meth:`~TransactionManager.begin_commit`,
:meth:`~TransactionManager.begin_abort`), each of which either raises at once or
returns a :class:`TxnResult` that resolves later. It asks :meth:`~TransactionManager.poll`
for the next :class:`TxnRequest` to send, reports back with
:meth:`~TransactionManager.on_response` / :meth:`~TransactionManager.on_failure`,
reports failed batches with :meth:`~TransactionManager.on_batch_failed`, and sleeps
until :meth:`~TransactionManager.next_deadline`. Nothing here blocks, reads a clock
or touches a socket.

Rules and invariants:

* States and transitions are Kafka's (``_SOURCES`` below is the whole table):
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
* One request is in flight at a time, in this order of priority:
  FindCoordinator when the needed coordinator is unknown; InitProducerId;
  AddPartitionsToTxn for every partition that got a record since the last one
  (their batches are held back until then, see :meth:`TransactionManager.is_send_allowed`);
  AddOffsetsToTxn then TxnOffsetCommit (to the group's coordinator) for each
  :meth:`~TransactionManager.send_offsets`, in call order; and EndTxn, only once
  the driver has no batch left (``batches_pending``). A transaction to which
  nothing was added ends without EndTxn.
* Retriable errors and lost connections retry with exponential backoff
  (``retry.backoff.ms`` to ``retry.backoff.max.ms``), except
  CONCURRENT_TRANSACTIONS for the first addition of a transaction: that is the
  coordinator still writing the previous transaction's markers, a matter of
  milliseconds, so it retries after about 5 ms, doubling up to about 20 ms (the
  usual jitter included, and never above the configured backoffs; Java waits a
  fixed 20 ms there). NOT_COORDINATOR and
  COORDINATOR_NOT_AVAILABLE (and any failure of a coordinator request) forget the
  coordinator first. PRODUCER_FENCED / INVALID_PRODUCER_EPOCH are fatal
  (:class:`~trafka.sdk.errors.ProducerFencedError`); errors that only concern
  this transaction (a failed batch, a consumer that lost its generation,
  TRANSACTION_ABORTABLE, authorization of a topic or group) are abortable
  (:class:`~trafka.sdk.errors.TransactionAbortableError`).
* A batch that failed after getting sequence numbers leaves a gap the broker
  will not accept past (OUT_OF_ORDER_SEQUENCE_NUMBER for the next one). The
  abort of such a transaction is therefore followed by an epoch bump
  (InitProducerId with the current id and epoch, ``ABORTING_TRANSACTION ->
  INITIALIZING -> READY``), so the next transaction starts clean. The EndTxn
  comes first: InitProducerId while the transaction is open would make the
  coordinator fence this producer.
* Pipelining: a transaction may begin while the previous one commits
  (:meth:`~TransactionManager.begin` in ``COMMITTING_TRANSACTION``). The state
  stays the committing transaction's until its EndTxn is answered; the next one
  collects its partitions and offsets meanwhile, and its batches, numbered
  :attr:`~TransactionManager.open_number`, are held back (only batches numbered
  :attr:`~TransactionManager.sending_number` may leave). When the commit
  succeeds the next transaction takes over (``READY -> IN_TRANSACTION``) and its
  requests go out. When it fails, the next transaction depends on a commit that
  did not happen, so it shares the failure: its offsets fail, and an abortable
  failure leaves one ``ABORTABLE_ERROR`` whose abort ends both. Aborting the
  next transaction while the previous one commits is local (nothing of it was
  sent). At most one transaction is begun ahead.
* Every :class:`TxnResult` resolves exactly once. A result that the caller
  stopped waiting for stays pending; asking for the same operation again
  returns it (a commit that timed out can only be retried, not aborted).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from trafka.codec import ErrorCode, KafkaError, UnsupportedVersionError, api
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k22_init_producer_id as ipid
from trafka.codec.messages import k24_add_partitions_to_txn as apt
from trafka.codec.messages import k25_add_offsets_to_txn as aot
from trafka.codec.messages import k26_end_txn as et
from trafka.codec.messages import k28_txn_offset_commit as toc

from .connection_state import CLIENT_VERSIONS
from .errors import (
    AuthenticationError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionFatalError,
)
from .fetcher import OffsetAndMetadata, TopicPartition
from .group_protocol import CommitFailedError, read_find_coordinator

__all__ = [
    "MAX_VERSIONS",
    "ConsumerGroupMetadata",
    "Kind",
    "TransactionManager",
    "TxnRequest",
    "TxnResult",
    "TxnState",
]

#: The highest version of each API this module speaks, from the client's one
#: version table (connection_state.CLIENT_VERSIONS).
MAX_VERSIONS = {key: CLIENT_VERSIONS[key][1] for key in (10, 22, 24, 25, 26, 28)}

_NO_ID = -1
GROUP_KEY = 0
TRANSACTION_KEY = 1
# CONCURRENT_TRANSACTIONS right after EndTxn: the coordinator is writing markers.
_CONCURRENT_BACKOFF = 0.005
_CONCURRENT_BACKOFF_MAX = 0.02


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


_S = TxnState
# target state -> the states it may be entered from
_SOURCES: dict[TxnState, frozenset[TxnState]] = {
    _S.UNINITIALIZED: frozenset(),
    _S.INITIALIZING: frozenset({_S.UNINITIALIZED, _S.READY, _S.ABORTING_TRANSACTION}),
    _S.READY: frozenset({_S.INITIALIZING, _S.COMMITTING_TRANSACTION, _S.ABORTING_TRANSACTION}),
    _S.IN_TRANSACTION: frozenset({_S.READY}),
    _S.COMMITTING_TRANSACTION: frozenset({_S.IN_TRANSACTION}),
    _S.ABORTING_TRANSACTION: frozenset({_S.IN_TRANSACTION, _S.ABORTABLE_ERROR}),
    _S.ABORTABLE_ERROR: frozenset(
        {_S.IN_TRANSACTION, _S.COMMITTING_TRANSACTION, _S.ABORTABLE_ERROR}
    ),
    _S.FATAL_ERROR: frozenset(TxnState),
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


class Kind(enum.Enum):
    """The requests the manager sends (values are the API keys)."""

    __hash__ = object.__hash__  # as TxnState's

    FIND_COORDINATOR = 10
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS = 24
    ADD_OFFSETS = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class TxnRequest:
    """A request for the driver to send.

    Attributes:
        kind: which API.
        api_key: its API key (``kind.value``, kept as a plain int).
        build: ``build(version) -> request body``.
        coordinator: ``(node_id, host, port)`` to send it to; None means any broker.
        max_version: send at most this version (the connection may negotiate less).
        timeout: seconds to wait for the response.
        key_type: FindCoordinator only: 0 for a group, 1 for a transactional id.
        key: FindCoordinator only: the group or transactional id.
    """

    kind: Kind
    api_key: int
    build: Callable[[int], Any]
    coordinator: tuple[int, str, int] | None
    max_version: int
    timeout: float
    key_type: int = TRANSACTION_KEY
    key: str = ""


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
class _OffsetsOp:
    offsets: dict[TopicPartition, int]
    group: ConsumerGroupMetadata
    result: TxnResult
    added: bool = False  # AddOffsetsToTxn succeeded


class _Action(enum.Enum):
    OK = "ok"
    RETRY = "retry"
    REDISCOVER = "rediscover"
    FENCED = "fenced"
    ABORTABLE = "abortable"
    FATAL = "fatal"


_E = ErrorCode
_ACTIONS = {
    _E.NONE: _Action.OK,
    _E.NOT_COORDINATOR: _Action.REDISCOVER,
    _E.COORDINATOR_NOT_AVAILABLE: _Action.REDISCOVER,
    _E.COORDINATOR_LOAD_IN_PROGRESS: _Action.RETRY,
    _E.CONCURRENT_TRANSACTIONS: _Action.RETRY,
    _E.UNKNOWN_TOPIC_OR_PARTITION: _Action.RETRY,
    _E.OPERATION_NOT_ATTEMPTED: _Action.RETRY,
    _E.PRODUCER_FENCED: _Action.FENCED,
    _E.INVALID_PRODUCER_EPOCH: _Action.FENCED,
    _E.TRANSACTION_ABORTABLE: _Action.ABORTABLE,
    _E.GROUP_AUTHORIZATION_FAILED: _Action.ABORTABLE,
    _E.TOPIC_AUTHORIZATION_FAILED: _Action.ABORTABLE,
    _E.UNKNOWN_MEMBER_ID: _Action.ABORTABLE,
    _E.ILLEGAL_GENERATION: _Action.ABORTABLE,
    _E.FENCED_INSTANCE_ID: _Action.ABORTABLE,
    _E.REBALANCE_IN_PROGRESS: _Action.ABORTABLE,
    _E.UNKNOWN_PRODUCER_ID: _Action.ABORTABLE,
    _E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: _Action.FATAL,
    _E.CLUSTER_AUTHORIZATION_FAILED: _Action.FATAL,
    _E.INVALID_TXN_STATE: _Action.FATAL,
    _E.INVALID_PRODUCER_ID_MAPPING: _Action.FATAL,
    _E.INVALID_TRANSACTION_TIMEOUT: _Action.FATAL,
    _E.UNSUPPORTED_VERSION: _Action.FATAL,
    _E.UNSUPPORTED_FOR_MESSAGE_FORMAT: _Action.FATAL,
    _E.INVALID_REQUEST: _Action.FATAL,
}

#: Batch errors that end the producer (anything else only dooms the transaction).
_FATAL_BATCH_CODES = frozenset(
    {
        _E.PRODUCER_FENCED,
        _E.INVALID_PRODUCER_EPOCH,
        _E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        _E.CLUSTER_AUTHORIZATION_FAILED,
    }
)


def _classify(code: int) -> _Action:
    ec = ErrorCode.of(code)
    action = _ACTIONS.get(ec)
    if action is not None:
        return action
    return _Action.RETRY if ec.retriable else _Action.FATAL


# How bad an outcome is, when one response carries several (per partition).
_RANK = {
    _Action.OK: 0,
    _Action.RETRY: 1,
    _Action.REDISCOVER: 2,
    _Action.ABORTABLE: 3,
    _Action.FATAL: 4,
    _Action.FENCED: 5,
}


def _worst(codes: list[int]) -> tuple[_Action, int]:
    """The most severe action among ``codes``, and its code."""
    worst, worst_code = _Action.OK, 0
    for code in codes:
        action = _classify(code)
        if _RANK[action] > _RANK[worst]:
            worst, worst_code = action, code
    return worst, worst_code


def _fit(api_key: int, version: int, cls: type, **fields: Any) -> Any:
    """Build a request, leaving out the fields ``version`` does not have."""
    schema = api(api_key).module.REQUEST_SCHEMAS[version]
    absent = {name for name, _ in schema.absent}
    return cls(**{k: v for k, v in fields.items() if k not in absent})


def _backoff(base: float, maximum: float, attempts: int, rng: random.Random) -> float:
    delay = min(base * 2 ** min(max(attempts - 1, 0), 30), maximum)
    return float(delay * (0.8 + 0.4 * rng.random()))


class TransactionManager:
    """Producer id, epoch and transaction state of one producer.

    Args:
        transactional_id: ``transactional.id``; None for an idempotent producer.
        transaction_timeout_ms: sent with InitProducerId.
        request_timeout: seconds each request may take.
        retry_backoff, retry_backoff_max: seconds; the backoff doubles per failed attempt.
        rng: for backoff jitter (tests pass a seeded one).
    """

    def __init__(
        self,
        transactional_id: str | None = None,
        *,
        transaction_timeout_ms: int = 60_000,
        request_timeout: float = 30.0,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.request_timeout = request_timeout
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self._rng = rng or random.Random()
        self.state = TxnState.UNINITIALIZED
        self.producer_id = _NO_ID
        self.producer_epoch = _NO_ID
        #: The fatal error, once in FATAL_ERROR.
        self.fatal_error: TransactionFatalError | None = None
        #: The error that made the transaction abortable, in ABORTABLE_ERROR.
        self.last_error: TransactionAbortableError | None = None
        self._coordinator: tuple[int, str, int] | None = None
        self._group_coordinators: dict[str, tuple[int, str, int]] = {}
        self._in_flight: TxnRequest | None = None
        self._retry_at = -math.inf  # no backoff (any clock reading is after it)
        self._attempts = 0
        self._init_result: TxnResult | None = None
        self._end_result: TxnResult | None = None
        #: Transactions ended, for statistics.
        self.transactions_committed = 0
        self.transactions_aborted = 0
        self._bump_wanted = False  # idempotent: the accumulator needs a new identity
        self._bump_on_abort = False  # transactional: a sequence gap; bump the epoch after the abort
        # The current transaction's partitions: added, waiting to be added, being added.
        self._partitions: set[tuple[str, int]] = set()
        self._new_partitions: set[tuple[str, int]] = set()
        self._adding: set[tuple[str, int]] = set()
        self._offsets: deque[_OffsetsOp] = deque()
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
        self._next_offsets: deque[_OffsetsOp] = deque()
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
            _S.IN_TRANSACTION,
            _S.COMMITTING_TRANSACTION,
            _S.ABORTING_TRANSACTION,
            _S.ABORTABLE_ERROR,
        )

    @property
    def pipelined(self) -> bool:
        """Whether a transaction was begun while the previous one commits."""
        return self._next_begun

    @property
    def committing_result(self) -> TxnResult | None:
        """The result of the commit under way, if any."""
        if self.state is _S.COMMITTING_TRANSACTION:
            return self._end_result
        return None

    @property
    def coordinator(self) -> tuple[int, str, int] | None:
        """The transaction coordinator ``(node_id, host, port)``, if known."""
        return self._coordinator

    @property
    def partitions(self) -> frozenset[tuple[str, int]]:
        """The partitions added to the current transaction so far."""
        return frozenset(self._partitions)

    def _transition(self, target: TxnState) -> None:
        if self.state not in _SOURCES[target]:
            raise InvalidTxnStateError(
                f"invalid transaction state change from {self.state.name} to {target.name}"
            )
        self.state = target
        self._update_sendable()

    def _update_sendable(self) -> None:
        was = self.sendable
        self.sendable = sendable = self.state is _S.IN_TRANSACTION or (
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
        if self.state is _S.INITIALIZING and self._init_result is not None:
            return self._init_result
        if self.state is not _S.UNINITIALIZED:
            raise InvalidTxnStateError(f"init_transactions() in state {self.state.name}")
        self._transition(_S.INITIALIZING)
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
        if self.state is _S.COMMITTING_TRANSACTION and not self._next_begun:
            self._next_begun = True
            self._next_partitions = set()
            self._next_offsets = deque()
            self._next_error = None
            self.open_number += 1
            self._update_sendable()
            return
        if self.state is not _S.READY:
            raise InvalidTxnStateError(self._state_message("begin_transaction()"))
        self._transition(_S.IN_TRANSACTION)
        self._clear_transaction()
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
        if self.state is not _S.IN_TRANSACTION:
            if self.sendable:  # begun ahead: added once the previous commit is done
                self._next_partitions.add((topic, partition))
                return False
            self._refuse("send()")
        key = (topic, partition)
        if key in self._partitions or key in self._new_partitions or key in self._adding:
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
        if self.state is _S.ABORTABLE_ERROR and self.last_error is not None:
            raise TransactionAbortableError(
                self.last_error.__cause__, f"{what}: {self.last_error}"
            ) from self.last_error.__cause__
        raise InvalidTxnStateError(self._state_message(what))

    def _state_message(self, what: str) -> str:
        hint = {
            _S.UNINITIALIZED: "call init_transactions() first",
            _S.INITIALIZING: "init_transactions() has not completed",
            _S.READY: "call begin_transaction() first",
            _S.IN_TRANSACTION: "a transaction is already open",
            _S.COMMITTING_TRANSACTION: (
                "a transaction is already open, begun while the previous one commits"
                if self._next_begun
                else "the transaction is committing"
            ),
            _S.ABORTING_TRANSACTION: "the transaction is aborting",
            _S.ABORTABLE_ERROR: "the transaction must be aborted",
        }.get(self.state, "")
        return f"{what} is not allowed in state {self.state.name}" + (f": {hint}" if hint else "")

    def is_send_allowed(self, topic: str, partition: int, number: int | None = None) -> bool:
        """The accumulator's gate: batches of partitions not yet in the transaction
        wait, and so do those of a transaction begun ahead (``number``, the
        batch's :attr:`open_number`, is not :attr:`sending_number`)."""
        return (
            (number is None or number == self.sending_number)
            and (topic, partition) in self._partitions
            and (self.state is _S.IN_TRANSACTION or self.state is _S.COMMITTING_TRANSACTION)
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
        ops = self._offsets if self.state is _S.IN_TRANSACTION else self._next_offsets
        ops.append(_OffsetsOp(clean, group, result))
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
        if self.state is _S.COMMITTING_TRANSACTION and self._end_result is not None:
            return self._end_result
        if self.state is not _S.IN_TRANSACTION:
            self._refuse("commit_transaction()")
        self._transition(_S.COMMITTING_TRANSACTION)
        self._end_result = result = TxnResult("commit_transaction")
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
        if self.state is _S.ABORTING_TRANSACTION and self._end_result is not None:
            return self._end_result
        if self.state is _S.INITIALIZING and self._end_result is not None:
            return self._end_result  # the abort became an epoch bump
        if self.state not in (_S.IN_TRANSACTION, _S.ABORTABLE_ERROR):
            raise InvalidTxnStateError(self._state_message("abort_transaction()"))
        self._transition(_S.ABORTING_TRANSACTION)
        self._end_result = result = TxnResult("abort_transaction")
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
        self._transition(_S.IN_TRANSACTION)
        self._new_partitions, self._next_partitions = self._next_partitions, set()
        self._offsets, self._next_offsets = self._next_offsets, deque()
        self.sending_number = self.open_number
        if error is not None:
            self._abortable(error)

    def request_epoch_bump(self) -> None:
        """Idempotent producer: the accumulator needs a new identity (KIP-360).

        A bump already under way (INITIALIZING) covers it.
        """
        if self.transactional_id is not None or self.state is _S.FATAL_ERROR:
            return
        if self.state is not _S.INITIALIZING:
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
        if self.transactional_id is None or self.state is _S.FATAL_ERROR:
            return
        if self._next_begun and number == self.open_number:
            if self._next_error is None and not isinstance(
                error, TransactionAbortedError | TransactionAbortableError
            ):
                self._next_error = TransactionAbortableError(error)
                self._update_sendable()
            return
        code = error.code if isinstance(error, KafkaError) else None
        if code in _FATAL_BATCH_CODES:
            self._fatal(self._fatal_error(int(code or 0), "a batch failed", error))
            return
        if isinstance(error, UnsupportedVersionError):
            self._fatal(TransactionFatalError(ErrorCode.UNSUPPORTED_VERSION, str(error), error))
            return
        if sequenced:
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

    # -- requests -----------------------------------------------------------------------

    def next_deadline(self, now: float) -> float | None:
        """When :meth:`poll` may have something after a backoff (None: on input only)."""
        if self._in_flight is None and self._retry_at > now:
            return self._retry_at
        return None

    def poll(self, now: float, *, batches_pending: bool) -> TxnRequest | None:
        """The next request to send, if any (and it counts as in flight from now).

        Args:
            now: the driver's clock.
            batches_pending: the accumulator still has batches (EndTxn waits for them).
        """
        if self._in_flight is not None or self.state is _S.FATAL_ERROR or now < self._retry_at:
            return None
        request = self._next_request(batches_pending)
        self._in_flight = request
        return request

    def _next_request(self, batches_pending: bool) -> TxnRequest | None:
        s = self.state
        if s is _S.READY and self._bump_wanted:
            self._bump_wanted = False
            self._transition(_S.INITIALIZING)
            s = self.state
        if s is _S.INITIALIZING:
            return self._coordinated(self._init_producer_id)
        if s is _S.IN_TRANSACTION or s is _S.COMMITTING_TRANSACTION:
            if self._new_partitions:
                return self._coordinated(self._add_partitions)
            if self._offsets:
                op = self._offsets[0]
                if not op.added:
                    return self._coordinated(self._add_offsets)
                return self._txn_offset_commit(op)
        if s is _S.COMMITTING_TRANSACTION:
            if batches_pending:
                return None
            if not self._maybe_started:
                self._complete(None)
                return None
            return self._coordinated(self._end_txn)
        if s is _S.ABORTING_TRANSACTION:
            if batches_pending:
                return None
            if self._maybe_started:
                # Even when the epoch must be bumped: InitProducerId during an open
                # transaction would fence this very producer.
                return self._coordinated(self._end_txn)
            if self._bump_on_abort:
                self._transition(_S.INITIALIZING)
                return self._coordinated(self._init_producer_id)
            self._complete(None)
            return None
        return None

    def _coordinated(self, make: Callable[[tuple[int, str, int] | None], TxnRequest]) -> TxnRequest:
        if self.transactional_id is None:
            return make(None)
        if self._coordinator is None:
            return self._find_coordinator(TRANSACTION_KEY, self.transactional_id)
        return make(self._coordinator)

    def _request(
        self,
        kind: Kind,
        build: Callable[[int], Any],
        coordinator: tuple[int, str, int] | None,
        **extra: Any,
    ) -> TxnRequest:
        api_key = kind.value
        return TxnRequest(
            kind, api_key, build, coordinator, MAX_VERSIONS[api_key], self.request_timeout, **extra
        )

    def _find_coordinator(self, key_type: int, key: str) -> TxnRequest:
        def build(version: int) -> Any:
            if version >= 4:
                return fc.FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
            return _fit(10, version, fc.FindCoordinatorRequest, key=key, key_type=key_type)

        return self._request(Kind.FIND_COORDINATOR, build, None, key_type=key_type, key=key)

    def _init_producer_id(self, coordinator: tuple[int, str, int] | None) -> TxnRequest:
        tid, timeout = self.transactional_id, self.transaction_timeout_ms
        pid, epoch = self.producer_id, self.producer_epoch

        def build(version: int) -> Any:
            # KIP-360: with the current id and epoch (v3+) the coordinator bumps the
            # epoch of this producer rather than treating it as a new instance.
            return _fit(
                22,
                version,
                ipid.InitProducerIdRequest,
                transactional_id=tid,
                transaction_timeout_ms=timeout,
                producer_id=pid,
                producer_epoch=epoch,
            )

        return self._request(Kind.INIT_PRODUCER_ID, build, coordinator)

    def _add_partitions(self, coordinator: tuple[int, str, int] | None) -> TxnRequest:
        self._adding = self._new_partitions
        self._new_partitions = set()
        self._maybe_started = True
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self._adding):
            by_topic.setdefault(topic, []).append(partition)
        tid, pid, epoch = self.transactional_id or "", self.producer_id, self.producer_epoch
        R = apt.AddPartitionsToTxnRequest

        def build(version: int) -> Any:
            return R(
                v3_and_below_transactional_id=tid,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[
                    R.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()
                ],
            )

        return self._request(Kind.ADD_PARTITIONS, build, coordinator)

    def _add_offsets(self, coordinator: tuple[int, str, int] | None) -> TxnRequest:
        self._maybe_started = True
        group = self._offsets[0].group.group_id
        tid, pid, epoch = self.transactional_id or "", self.producer_id, self.producer_epoch

        def build(version: int) -> Any:
            return aot.AddOffsetsToTxnRequest(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
            )

        return self._request(Kind.ADD_OFFSETS, build, coordinator)

    def _txn_offset_commit(self, op: _OffsetsOp) -> TxnRequest:
        group = op.group
        coordinator = self._group_coordinators.get(group.group_id)
        if coordinator is None:
            return self._find_coordinator(GROUP_KEY, group.group_id)
        by_topic: dict[str, list[Any]] = {}
        R = toc.TxnOffsetCommitRequest
        for tp, offset in sorted(op.offsets.items()):
            by_topic.setdefault(tp.topic, []).append(
                R.TxnOffsetCommitRequestPartition(
                    partition_index=tp.partition,
                    committed_offset=offset,
                    committed_metadata=getattr(offset, "metadata", ""),
                )
            )
        tid, pid, epoch = self.transactional_id or "", self.producer_id, self.producer_epoch

        def build(version: int) -> Any:
            return _fit(
                28,
                version,
                R,
                transactional_id=tid,
                group_id=group.group_id,
                producer_id=pid,
                producer_epoch=epoch,
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                topics=[
                    R.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()
                ],
            )

        return self._request(Kind.TXN_OFFSET_COMMIT, build, coordinator, key=group.group_id)

    def _end_txn(self, coordinator: tuple[int, str, int] | None) -> TxnRequest:
        commit = self.state is _S.COMMITTING_TRANSACTION
        tid, pid, epoch = self.transactional_id or "", self.producer_id, self.producer_epoch

        def build(version: int) -> Any:
            return et.EndTxnRequest(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
            )

        return self._request(Kind.END_TXN, build, coordinator)

    # -- responses ----------------------------------------------------------------------

    def on_failure(self, request: TxnRequest, error: BaseException, now: float) -> None:
        """The request failed without a response (connection lost, timeout, no version)."""
        if self._in_flight is request:
            self._in_flight = None
        if isinstance(error, UnsupportedVersionError):
            self._fatal(
                TransactionFatalError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"the broker does not support {request.kind.name}: {error}",
                    error,
                )
            )
            return
        if isinstance(error, AuthenticationError):
            # As Java's: the transactional requests cannot go on without credentials.
            self._fatal(
                TransactionFatalError(
                    error.code or ErrorCode.SASL_AUTHENTICATION_FAILED,
                    f"{request.kind.name} failed: {error}",
                    error,
                )
            )
            return
        if request.kind is Kind.ADD_PARTITIONS:
            self._readd()
        if request.kind is Kind.TXN_OFFSET_COMMIT:
            self._group_coordinators.pop(request.key, None)
        elif request.coordinator is not None:
            self._coordinator = None
        self._back_off(now)

    def on_response(self, request: TxnRequest, version: int, body: Any, now: float) -> None:
        """A response to ``request`` arrived (decoded at ``version``)."""
        if self._in_flight is request:
            self._in_flight = None
        if self.state is _S.FATAL_ERROR:
            return
        handler = {
            Kind.FIND_COORDINATOR: self._on_find_coordinator,
            Kind.INIT_PRODUCER_ID: self._on_init_producer_id,
            Kind.ADD_PARTITIONS: self._on_add_partitions,
            Kind.ADD_OFFSETS: self._on_add_offsets,
            Kind.TXN_OFFSET_COMMIT: self._on_txn_offset_commit,
            Kind.END_TXN: self._on_end_txn,
        }[request.kind]
        handler(request, version, body, now)

    def _back_off(self, now: float) -> None:
        self._attempts += 1
        self._retry_at = now + _backoff(
            self.retry_backoff, self.retry_backoff_max, self._attempts, self._rng
        )

    def _succeeded(self) -> None:
        self._attempts = 0
        self._retry_at = -math.inf

    def _retry(self, action: _Action, request: TxnRequest, now: float, code: int = _NO_ID) -> None:
        if action is _Action.REDISCOVER:
            if request.kind is Kind.TXN_OFFSET_COMMIT:
                self._group_coordinators.pop(request.key, None)
            else:
                self._coordinator = None
        if (
            code == ErrorCode.CONCURRENT_TRANSACTIONS
            and request.kind in (Kind.ADD_PARTITIONS, Kind.ADD_OFFSETS)
            and not self._started
        ):
            self._attempts += 1
            self._retry_at = now + _backoff(
                min(self.retry_backoff, _CONCURRENT_BACKOFF),
                min(self.retry_backoff_max, _CONCURRENT_BACKOFF_MAX),
                self._attempts,
                self._rng,
            )
            return
        self._back_off(now)

    def _on_find_coordinator(
        self, request: TxnRequest, version: int, body: Any, now: float
    ) -> None:
        code, node, host, port = read_find_coordinator(version, body)
        action = _classify(code)
        if action is _Action.OK and node >= 0:
            self._succeeded()
            where = (node, host, port)
            if request.key_type == TRANSACTION_KEY:
                self._coordinator = where
            else:
                self._group_coordinators[request.key] = where
            return
        if action in (_Action.OK, _Action.RETRY, _Action.REDISCOVER):
            self._back_off(now)
            return
        what = f"FindCoordinator for {request.key!r}"
        if action is _Action.ABORTABLE and request.key_type == GROUP_KEY:
            self._abortable(KafkaError(code, what))
        else:
            self._fatal(self._fatal_error(code, what))

    def _on_init_producer_id(
        self, request: TxnRequest, version: int, body: Any, now: float
    ) -> None:
        code = body.error_code
        action = _classify(code)
        if action is _Action.OK:
            self._succeeded()
            self.producer_id = body.producer_id
            self.producer_epoch = body.producer_epoch
            self._bump_on_abort = False
            self._transition(_S.READY)
            self._clear_transaction()
            for result in (self._init_result, self._end_result):
                if result is not None:
                    result.resolve()
            self._init_result = self._end_result = None
            return
        if action in (_Action.RETRY, _Action.REDISCOVER):
            self._retry(action, request, now)
            return
        self._fatal(self._fatal_error(code, "InitProducerId"))

    def _readd(self) -> None:
        # Partitions whose addition failed are added again, unless the
        # transaction is going away anyway.
        if self.state in (_S.IN_TRANSACTION, _S.COMMITTING_TRANSACTION):
            self._new_partitions |= self._adding
        self._adding = set()

    def _on_add_partitions(self, request: TxnRequest, version: int, body: Any, now: float) -> None:
        codes: dict[tuple[str, int], int] = {}
        for t in body.results_by_topic_v3_and_below:
            for p in t.results_by_partition:
                codes[(t.name, p.partition_index)] = p.partition_error_code
        added = {tp for tp in self._adding if codes.get(tp, -1) == 0}
        if added:
            self._started = True
            self._partitions |= added
        self._adding -= added
        if not self._adding:
            self._succeeded()
            return
        # A partition the answer leaves out counts as an unknown server error.
        worst, worst_code = _worst(
            [codes.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in self._adding]
        )
        what = f"AddPartitionsToTxn {sorted(self._adding)}"
        if worst in (_Action.RETRY, _Action.REDISCOVER):
            self._readd()
            self._retry(worst, request, now, worst_code)
        elif worst is _Action.ABORTABLE:
            self._adding = set()
            self._abortable(KafkaError(worst_code, what))
        else:
            self._adding = set()
            self._fatal(self._fatal_error(worst_code, what))

    def _on_add_offsets(self, request: TxnRequest, version: int, body: Any, now: float) -> None:
        code = body.error_code
        action = _classify(code)
        op = self._offsets[0] if self._offsets else None
        if action is _Action.OK:
            self._succeeded()
            self._started = True
            if op is not None:
                op.added = True
            return
        if action in (_Action.RETRY, _Action.REDISCOVER):
            self._retry(action, request, now, code)
        elif action is _Action.ABORTABLE:
            self._abortable(KafkaError(code, "AddOffsetsToTxn"))
        else:
            self._fatal(self._fatal_error(code, "AddOffsetsToTxn"))

    def _on_txn_offset_commit(
        self, request: TxnRequest, version: int, body: Any, now: float
    ) -> None:
        op = self._offsets[0] if self._offsets else None
        if op is None:
            return  # aborted while in flight
        codes = []
        for t in body.topics:
            for p in t.partitions:
                if p.error_code == 0:
                    op.offsets.pop(TopicPartition(t.name, p.partition_index), None)
                else:
                    codes.append(p.error_code)
        worst, worst_code = _worst(codes)
        what = f"TxnOffsetCommit for group {op.group.group_id!r}"
        if worst is _Action.OK:
            if op.offsets:  # partitions the coordinator left out of its answer
                self._back_off(now)
                return
            self._succeeded()
            self._offsets.popleft()
            op.result.resolve()
        elif worst in (_Action.RETRY, _Action.REDISCOVER):
            self._retry(worst, request, now)
        elif worst is _Action.ABORTABLE:
            cause: KafkaError = KafkaError(worst_code, what)
            if worst_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                cause = CommitFailedError(
                    worst_code, f"{what}: the consumer's group generation has moved on"
                )
            self._abortable(cause)
        else:
            self._fatal(self._fatal_error(worst_code, what))

    def _on_end_txn(self, request: TxnRequest, version: int, body: Any, now: float) -> None:
        code = body.error_code
        action = _classify(code)
        aborting = self.state is _S.ABORTING_TRANSACTION
        if action is _Action.OK or (
            aborting and code == ErrorCode.INVALID_TXN_STATE and not self._started
        ):
            # (An abort of a transaction that the coordinator never saw start.)
            self._succeeded()
            if aborting and self._bump_on_abort:
                self._started = self._maybe_started = False  # the bump comes next
                return
            self._complete(None)
            return
        if action in (_Action.RETRY, _Action.REDISCOVER):
            self._retry(action, request, now)
        elif action is _Action.ABORTABLE and not aborting:
            self._abortable(KafkaError(code, "EndTxn"))
        else:
            self._fatal(self._fatal_error(code, "EndTxn"))

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
        self._transition(_S.READY)
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
        if self.state not in (_S.IN_TRANSACTION, _S.COMMITTING_TRANSACTION, _S.ABORTABLE_ERROR):
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
        self._transition(_S.ABORTABLE_ERROR)
        self._new_partitions.clear()
        while self._offsets:
            self._offsets.popleft().result.resolve(self.last_error)
        result, self._end_result = self._end_result, None
        if result is not None:
            result.resolve(self.last_error)

    def _fatal_error(
        self, code: int, what: str, cause: BaseException | None = None
    ) -> TransactionFatalError:
        if _classify(code) is _Action.FENCED:
            if self.transactional_id is None:
                return ProducerFencedError(code, f"{what}: the producer epoch is stale")
            return ProducerFencedError(
                code,
                f"{what}: another producer with transactional.id {self.transactional_id!r} "
                "has taken over (or the transaction timed out)",
            )
        return TransactionFatalError(code, f"{what} failed{self._authorization_hint(code)}", cause)

    def _authorization_hint(self, code: int) -> str:
        """What an ACL refusal asks for, in the error's message (empty for other codes)."""
        if code == _E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            return (
                f": the client's principal needs WRITE on transactional id "
                f"{self.transactional_id!r} (an ACL on the broker)"
            )
        if code == _E.CLUSTER_AUTHORIZATION_FAILED and self.transactional_id is None:
            return (
                ": an idempotent producer's principal needs WRITE on some topic or "
                "IDEMPOTENT_WRITE on the cluster (an ACL on the broker), or set "
                "enable_idempotence=False"
            )
        return ""

    def _fatal(self, error: TransactionFatalError) -> None:
        if self.state is _S.FATAL_ERROR:
            return
        self.fatal_error = error
        self._next_begun = False
        self._transition(_S.FATAL_ERROR)
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
