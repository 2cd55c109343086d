"""The producer's identity and transactions (Kafka's TransactionManager), without I/O.

The driver (:mod:`.producer`, through the producer core) calls the
user-facing methods (:meth:`~TransactionManager.init`, :meth:`~TransactionManager.begin`, :meth:`~TransactionManager.add_partition`,
:meth:`~TransactionManager.send_offsets`, :meth:`~TransactionManager.begin_commit`,
:meth:`~TransactionManager.begin_abort`), each of which either raises at once or
returns a :class:`TxnResult` that resolves later. It asks :meth:`~TransactionManager.poll`
for the next :class:`TxnRequest` to send, reports back with
:meth:`~TransactionManager.on_response` / :meth:`~TransactionManager.on_failure`,
reports failed batches with :meth:`~TransactionManager.on_batch_failed`, and sleeps
until :meth:`~TransactionManager.next_deadline`. Nothing here blocks, reads a clock
or touches a socket.

The states, their transitions and the user's operations are the state machine
of :mod:`.transaction_state` (:class:`TransactionManager` is that machine with
its requests); this module builds the requests and reads their answers.

Rules and invariants:

* One request is in flight at a time, in this order of priority:
  FindCoordinator when the needed coordinator is unknown; InitProducerId;
  AddPartitionsToTxn for every partition that got a record since the last one
  (their batches are held back until then, see :meth:`TransactionManager.is_send_allowed`);
  AddOffsetsToTxn then TxnOffsetCommit (to the group's coordinator) for each
  :meth:`~TransactionManager.send_offsets`, in call order; and EndTxn, only once
  the driver has no batch left (``batches_pending``). A transaction to which
  nothing was added ends without EndTxn.
* Transaction version 2 (KIP-890 part 2; when, see :mod:`.transaction_state`):
  no AddPartitionsToTxn and no AddOffsetsToTxn; TxnOffsetCommit and EndTxn go
  at v5 (v4 at most in version 1, and Produce at v11, see
  ``producer_batches.produce_version``). EndTxn v5's answer carries the producer
  id and epoch the coordinator bumped to (a new id once the epoch ran out): the
  next transaction uses them, its partitions' sequences restarting at 0 (the
  accumulator moves to a new identity so).
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
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random
from collections.abc import Callable
from typing import Any

from trafka.codec import ApiKey, ErrorCode, KafkaError, UnsupportedVersionError, api
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k22_init_producer_id as ipid
from trafka.codec.messages import k24_add_partitions_to_txn as apt
from trafka.codec.messages import k25_add_offsets_to_txn as aot
from trafka.codec.messages import k26_end_txn as et
from trafka.codec.messages import k28_txn_offset_commit as toc

from .connection_state import CLIENT_VERSIONS
from .consumer_types import TopicPartition
from .errors import AuthenticationError, TransactionFatalError
from .group_protocol import CommitFailedError, read_find_coordinator
from .transaction_state import (
    END_TXN_COMMIT,
    NO_ID,
    ConsumerGroupMetadata,
    OffsetsOp,
    TxnAction,
    TxnResult,
    TxnState,
    TxnStateMachine,
    classify,
)
from .txn_version import TV1_MAX_VERSIONS

__all__ = [
    "MAX_VERSIONS",
    "ConsumerGroupMetadata",
    "Kind",
    "TransactionManager",
    "TxnRequest",
    "TxnResult",
    "TxnState",
]

S = TxnState

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
# CONCURRENT_TRANSACTIONS right after EndTxn: the coordinator is writing markers.
_CONCURRENT_BACKOFF = 0.005
_CONCURRENT_BACKOFF_MAX = 0.02


class Kind(enum.Enum):
    """The requests the manager sends (values are the API keys)."""

    __hash__ = object.__hash__  # as TxnState's

    FIND_COORDINATOR = ApiKey.FIND_COORDINATOR
    INIT_PRODUCER_ID = ApiKey.INIT_PRODUCER_ID
    ADD_PARTITIONS = ApiKey.ADD_PARTITIONS_TO_TXN
    ADD_OFFSETS = ApiKey.ADD_OFFSETS_TO_TXN
    END_TXN = ApiKey.END_TXN
    TXN_OFFSET_COMMIT = ApiKey.TXN_OFFSET_COMMIT


#: The highest version of each API this module speaks, from the client's one
#: version table (connection_state.CLIENT_VERSIONS).
MAX_VERSIONS = {kind.value: CLIENT_VERSIONS[kind.value][1] for kind in Kind}


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
    key_type: int = TRANSACTION_KEY_TYPE
    key: str = ""


# How bad an outcome is, when one response carries several (per partition).
_RANK = {
    TxnAction.OK: 0,
    TxnAction.RETRY: 1,
    TxnAction.REDISCOVER: 2,
    TxnAction.ABORTABLE: 3,
    TxnAction.FATAL: 4,
    TxnAction.FENCED: 5,
}


def _worst(codes: list[int]) -> tuple[TxnAction, int]:
    """The most severe action among ``codes``, and its code."""
    worst, worst_code = TxnAction.OK, 0
    for code in codes:
        action = classify(code)
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


class TransactionManager(TxnStateMachine):
    """Producer id, epoch and transaction state of one producer, with the
    requests that move them: one state, whose rules are :class:`TxnStateMachine`'s.

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
        super().__init__(transactional_id)
        self.transaction_timeout_ms = transaction_timeout_ms
        self.request_timeout = request_timeout
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self._rng = rng or random.Random()
        self._coordinator: tuple[int, str, int] | None = None
        self._group_coordinators: dict[str, tuple[int, str, int]] = {}
        self._in_flight: TxnRequest | None = None
        self._retry_at = -math.inf  # no backoff (any clock reading is after it)
        self._attempts = 0

    @property
    def coordinator(self) -> tuple[int, str, int] | None:
        """The transaction coordinator ``(node_id, host, port)``, if known."""
        return self._coordinator

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
        if self._in_flight is not None or self.state is S.FATAL_ERROR or now < self._retry_at:
            return None
        request = self._next_request(batches_pending)
        self._in_flight = request
        return request

    def _next_request(self, batches_pending: bool) -> TxnRequest | None:
        s = self.state
        if s is S.READY and self._bump_wanted:
            self._bump_wanted = False
            self._transition(S.INITIALIZING)
            s = self.state
        if s is S.INITIALIZING:
            return self._coordinated(self._init_producer_id)
        if s is S.IN_TRANSACTION or s is S.COMMITTING_TRANSACTION:
            if self._new_partitions:
                return self._coordinated(self._add_partitions)
            if self._offsets:
                op = self._offsets[0]
                if not op.added:
                    return self._coordinated(self._add_offsets)
                return self._txn_offset_commit(op)
        if s is S.COMMITTING_TRANSACTION:
            if batches_pending:
                return None
            if not self._maybe_started:
                if self._bump_after_end:  # moving up to transaction version 2
                    self._transition(S.INITIALIZING)
                    return self._coordinated(self._init_producer_id)
                self._complete(None)
                return None
            return self._coordinated(self._end_txn)
        if s is S.ABORTING_TRANSACTION:
            if batches_pending:
                return None
            if self._maybe_started:
                # Even when the epoch must be bumped: InitProducerId during an open
                # transaction would fence this very producer.
                return self._coordinated(self._end_txn)
            if self._bump_on_abort or self._bump_after_end:
                self._transition(S.INITIALIZING)
                return self._coordinated(self._init_producer_id)
            self._complete(None)
            return None
        return None

    def _coordinated(self, make: Callable[[tuple[int, str, int] | None], TxnRequest]) -> TxnRequest:
        if self.transactional_id is None:
            return make(None)
        if self._coordinator is None:
            return self._find_coordinator(TRANSACTION_KEY_TYPE, self.transactional_id)
        return make(self._coordinator)

    def _request(
        self,
        kind: Kind,
        build: Callable[[int], Any],
        coordinator: tuple[int, str, int] | None,
        *,
        tv2: bool = False,
        **extra: Any,
    ) -> TxnRequest:
        api_key = kind.value
        top = MAX_VERSIONS[api_key] if tv2 else TV1_MAX_VERSIONS.get(api_key, MAX_VERSIONS[api_key])
        return TxnRequest(kind, api_key, build, coordinator, top, self.request_timeout, **extra)

    def _find_coordinator(self, key_type: int, key: str) -> TxnRequest:
        def build(version: int) -> Any:
            if version >= 4:
                return fc.FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
            return _fit(
                ApiKey.FIND_COORDINATOR,
                version,
                fc.FindCoordinatorRequest,
                key=key,
                key_type=key_type,
            )

        return self._request(Kind.FIND_COORDINATOR, build, None, key_type=key_type, key=key)

    def _init_producer_id(self, coordinator: tuple[int, str, int] | None) -> TxnRequest:
        tid, timeout = self.transactional_id, self.transaction_timeout_ms
        pid, epoch = self.producer_id, self.producer_epoch

        def build(version: int) -> Any:
            # KIP-360: with the current id and epoch (v3+) the coordinator bumps the
            # epoch of this producer rather than treating it as a new instance.
            return _fit(
                ApiKey.INIT_PRODUCER_ID,
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

    def _txn_offset_commit(self, op: OffsetsOp) -> TxnRequest:
        group = op.group
        coordinator = self._group_coordinators.get(group.group_id)
        if coordinator is None:
            return self._find_coordinator(GROUP_KEY_TYPE, group.group_id)
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
        self._maybe_started |= op.tv2  # v5: the group coordinator adds the offsets partition

        def build(version: int) -> Any:
            return _fit(
                ApiKey.TXN_OFFSET_COMMIT,
                version,
                R,
                transactional_id=tid,
                group_id=group.group_id,
                producer_id=pid,
                producer_epoch=epoch,
                generation_id_or_member_epoch=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                topics=[
                    R.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()
                ],
            )

        return self._request(
            Kind.TXN_OFFSET_COMMIT, build, coordinator, tv2=op.tv2, key=group.group_id
        )

    def _end_txn(self, coordinator: tuple[int, str, int] | None) -> TxnRequest:
        commit = self.state is S.COMMITTING_TRANSACTION
        tid, pid, epoch = self.transactional_id or "", self.producer_id, self.producer_epoch

        def build(version: int) -> Any:
            return et.EndTxnRequest(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
            )

        return self._request(Kind.END_TXN, build, coordinator, tv2=self.txn_tv2)

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
        if self.state is S.FATAL_ERROR:
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

    def _retry(self, action: TxnAction, request: TxnRequest, now: float, code: int = NO_ID) -> None:
        if action is TxnAction.REDISCOVER:
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
        action = classify(code)
        if action is TxnAction.OK and node >= 0:
            self._succeeded()
            where = (node, host, port)
            if request.key_type == TRANSACTION_KEY_TYPE:
                self._coordinator = where
            else:
                self._group_coordinators[request.key] = where
            return
        if action in (TxnAction.OK, TxnAction.RETRY, TxnAction.REDISCOVER):
            self._back_off(now)
            return
        what = f"FindCoordinator for {request.key!r}"
        if action is TxnAction.ABORTABLE and request.key_type == GROUP_KEY_TYPE:
            self._abortable(KafkaError(code, what))
        else:
            self._fatal(self._fatal_error(code, what))

    def _on_init_producer_id(
        self, request: TxnRequest, version: int, body: Any, now: float
    ) -> None:
        code = body.error_code
        action = classify(code)
        if action is TxnAction.OK:
            self._succeeded()
            self.producer_id = body.producer_id
            self.producer_epoch = body.producer_epoch
            self._bump_on_abort = False
            if self._bump_after_end:  # after a transaction that moved up to version 2
                self._bump_after_end = False
                self._complete(None)
                return
            self._transition(S.READY)
            self._clear_transaction()
            if self._init_result is not None:
                self._update_version(on_init=True)
            for result in (self._init_result, self._end_result):
                if result is not None:
                    result.resolve()
            self._init_result = self._end_result = None
            return
        if action in (TxnAction.RETRY, TxnAction.REDISCOVER):
            self._retry(action, request, now)
            return
        self._fatal(self._fatal_error(code, "InitProducerId"))

    def _readd(self) -> None:
        # Partitions whose addition failed are added again, unless the
        # transaction is going away anyway.
        if self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
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
        if worst in (TxnAction.RETRY, TxnAction.REDISCOVER):
            self._readd()
            self._retry(worst, request, now, worst_code)
        elif worst is TxnAction.ABORTABLE:
            self._adding = set()
            self._abortable(KafkaError(worst_code, what))
        else:
            self._adding = set()
            self._fatal(self._fatal_error(worst_code, what))

    def _on_add_offsets(self, request: TxnRequest, version: int, body: Any, now: float) -> None:
        code = body.error_code
        action = classify(code)
        op = self._offsets[0] if self._offsets else None
        if action is TxnAction.OK:
            self._succeeded()
            self._started = True
            if op is not None:
                op.added = True
            return
        if action in (TxnAction.RETRY, TxnAction.REDISCOVER):
            self._retry(action, request, now, code)
        elif action is TxnAction.ABORTABLE:
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
        if worst is TxnAction.OK:
            if op.offsets:  # partitions the coordinator left out of its answer
                self._back_off(now)
                return
            self._succeeded()
            self._offsets.popleft()
            op.result.resolve()
        elif worst in (TxnAction.RETRY, TxnAction.REDISCOVER):
            self._retry(worst, request, now)
        elif worst is TxnAction.ABORTABLE:
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
        action = classify(code)
        aborting = self.state is S.ABORTING_TRANSACTION
        if action is TxnAction.OK or (
            aborting and code == ErrorCode.INVALID_TXN_STATE and not (self._started or self.txn_tv2)
        ):
            # (An abort of a transaction that the coordinator never saw start.)
            self._succeeded()
            if action is TxnAction.OK and getattr(body, "producer_id", NO_ID) >= 0:  # v5: bumped
                self.producer_id, self.producer_epoch = body.producer_id, body.producer_epoch
            if (aborting and self._bump_on_abort) or self._bump_after_end:
                self._started = self._maybe_started = False  # the bump comes next
                return
            self._complete(None)
            return
        if action in (TxnAction.RETRY, TxnAction.REDISCOVER):
            self._retry(action, request, now)
        elif action is TxnAction.ABORTABLE and not aborting:
            self._abortable(KafkaError(code, "EndTxn"))
        else:
            self._fatal(self._fatal_error(code, "EndTxn" if aborting else END_TXN_COMMIT))
