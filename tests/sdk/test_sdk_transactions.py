"""TransactionManager (sans-IO): every state transition, request and error class, no sockets."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import anyio
import pytest
from sdk_fakebroker import FakeBroker

from trafka.codec import ErrorCode, KafkaError, api
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k22_init_producer_id as ipid
from trafka.codec.messages import k24_add_partitions_to_txn as apt
from trafka.codec.messages import k25_add_offsets_to_txn as aot
from trafka.codec.messages import k26_end_txn as et
from trafka.codec.messages import k28_txn_offset_commit as toc
from trafka.codec.protocol import encode_request_body
from trafka.codec.records import read_batch_header
from trafka.sdk.errors import (
    DeliveryTimeoutError,
    InvalidTxnStateError,
    KafkaConnectionError,
    ProducerBlockedError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionFatalError,
)
from trafka.sdk.fetcher import TopicPartition
from trafka.sdk.group_protocol import CommitFailedError
from trafka.sdk.producer import open_producer
from trafka.sdk.transaction_state import SOURCES as _SOURCES
from trafka.sdk.transactions import (
    ConsumerGroupMetadata,
    Kind,
    TransactionManager,
    TxnRequest,
    TxnState,
)

S = TxnState
COORD = (7, "127.0.0.1", 9092)
GROUP_COORD = (8, "127.0.0.1", 9093)


class Recorder(TransactionManager):
    """Records every state change it makes."""

    seen: set[tuple[TxnState, TxnState]]

    def _transition(self, target: TxnState) -> None:
        before = self.state
        super()._transition(target)
        self.seen.add((before, target))


def manager(tid: str | None = "tx", seen: set[tuple[TxnState, TxnState]] | None = None) -> Recorder:
    m = Recorder(tid, rng=random.Random(0), retry_backoff=0.1, retry_backoff_max=1.0)
    m.seen = seen if seen is not None else set()
    return m


# -- responses -------------------------------------------------------------------------------


def find_ok(where: tuple[int, str, int] = COORD, code: int = 0) -> Any:
    node, host, port = where
    C = fc.FindCoordinatorResponse.Coordinator
    return fc.FindCoordinatorResponse(
        coordinators=[C(key="k", node_id=node, host=host, port=port, error_code=code)]
    )


def init_resp(code: int = 0, pid: int = 42, epoch: int = 3) -> Any:
    return ipid.InitProducerIdResponse(error_code=code, producer_id=pid, producer_epoch=epoch)


def add_resp(codes: dict[tuple[str, int], int]) -> Any:
    R = apt.AddPartitionsToTxnResponse
    topics: dict[str, list[Any]] = {}
    for (t, p), code in codes.items():
        topics.setdefault(t, []).append(
            R.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code)
        )
    return R(
        results_by_topic_v3_and_below=[
            R.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps)
            for t, ps in topics.items()
        ]
    )


def txn_commit_resp(codes: dict[tuple[str, int], int]) -> Any:
    R = toc.TxnOffsetCommitResponse
    topics: dict[str, list[Any]] = {}
    for (t, p), code in codes.items():
        topics.setdefault(t, []).append(
            R.TxnOffsetCommitResponsePartition(partition_index=p, error_code=code)
        )
    return R(
        topics=[R.TxnOffsetCommitResponseTopic(name=t, partitions=ps) for t, ps in topics.items()]
    )


VERSIONS = {10: 6, 22: 5, 24: 3, 25: 4, 26: 4, 28: 4}


def step(m: TransactionManager, *, pending: bool = False, now: float = 0.0) -> TxnRequest:
    req = m.poll(now, batches_pending=pending)
    assert req is not None, f"no request in state {m.state}"
    return req


def answer(m: TransactionManager, req: TxnRequest, body: Any, now: float = 0.0) -> None:
    m.on_response(req, VERSIONS[req.api_key], body, now)


def body_of(req: TxnRequest, version: int | None = None) -> Any:
    return req.build(VERSIONS[req.api_key] if version is None else version)


def ready(m: TransactionManager) -> None:
    """Take ``m`` from UNINITIALIZED to READY (coordinator lookup included)."""
    result = m.init()
    req = step(m)
    if req.kind is Kind.FIND_COORDINATOR:
        assert req.key_type == 1 and req.key == m.transactional_id
        answer(m, req, find_ok())
        req = step(m)
    assert req.kind is Kind.INIT_PRODUCER_ID
    answer(m, req, init_resp())
    assert result.done and result.error is None
    assert m.state is S.READY


def added(m: TransactionManager, *tps: tuple[str, int]) -> None:
    """Register partitions and answer their AddPartitionsToTxn with success."""
    for t, p in tps:
        m.add_partition(t, p)
    req = step(m)
    assert req.kind is Kind.ADD_PARTITIONS
    answer(m, req, add_resp(dict.fromkeys(tps, 0)))


# -- scenarios (each also feeds the transition coverage test) -----------------------------------


def scenario_init(seen: set[Any]) -> None:
    m = manager(seen=seen)
    assert m.state is S.UNINITIALIZED and not m.has_producer_id
    result = m.init()
    assert m.init() is result  # a second call while initializing waits for the same outcome
    req = step(m)
    assert req.kind is Kind.FIND_COORDINATOR and req.coordinator is None
    answer(m, req, find_ok())
    req = step(m)
    assert req.kind is Kind.INIT_PRODUCER_ID and req.coordinator == COORD
    body = body_of(req)
    assert body.transactional_id == "tx" and body.transaction_timeout_ms == 60_000
    assert body.producer_id == -1 and body.producer_epoch == -1
    assert m.poll(0.0, batches_pending=False) is None  # one request at a time
    answer(m, req, init_resp(pid=42, epoch=3))
    assert result.done and result.error is None
    assert (m.state, m.producer_id, m.producer_epoch) == (S.READY, 42, 3)
    with pytest.raises(InvalidTxnStateError):
        m.init()


def scenario_commit(seen: set[Any]) -> None:
    m = manager(seen=seen)
    ready(m)
    m.begin()
    assert m.state is S.IN_TRANSACTION
    m.add_partition("a", 0)
    m.add_partition("a", 1)
    m.add_partition("a", 0)
    assert not m.is_send_allowed("a", 0)  # held back until the coordinator has it
    req = step(m)
    assert req.kind is Kind.ADD_PARTITIONS and req.coordinator == COORD
    body = body_of(req)
    assert body.v3_and_below_transactional_id == "tx"
    assert (body.v3_and_below_producer_id, body.v3_and_below_producer_epoch) == (42, 3)
    assert [(t.name, t.partitions) for t in body.v3_and_below_topics] == [("a", [0, 1])]
    answer(m, req, add_resp({("a", 0): 0, ("a", 1): 0}))
    assert m.is_send_allowed("a", 0) and m.is_send_allowed("a", 1)
    assert m.partitions == {("a", 0), ("a", 1)}
    result = m.begin_commit()
    assert m.begin_commit() is result
    assert m.state is S.COMMITTING_TRANSACTION
    assert m.is_send_allowed("a", 0)  # the commit's flush still sends
    with pytest.raises(InvalidTxnStateError, match="committing"):
        m.add_partition("a", 2)
    assert m.poll(0.0, batches_pending=True) is None  # EndTxn waits for the batches
    req = step(m)
    assert req.kind is Kind.END_TXN and body_of(req).committed is True
    answer(m, req, et.EndTxnResponse())
    assert result.done and result.error is None
    assert m.state is S.READY and m.partitions == frozenset()


def scenario_abort(seen: set[Any]) -> None:
    m = manager(seen=seen)
    ready(m)
    m.begin()
    added(m, ("a", 0))
    m.add_partition("a", 1)  # never added: its batches are failed by the driver
    offsets = m.send_offsets({TopicPartition("in", 0): 5}, ConsumerGroupMetadata("g"))
    result = m.begin_abort()
    assert m.begin_abort() is result
    assert isinstance(offsets.error, TransactionAbortedError)
    assert m.state is S.ABORTING_TRANSACTION and not m.is_send_allowed("a", 0)
    assert m.poll(0.0, batches_pending=True) is None
    req = step(m)
    assert req.kind is Kind.END_TXN and body_of(req).committed is False
    answer(m, req, et.EndTxnResponse())
    assert result.done and result.error is None and m.state is S.READY


def scenario_empty_transactions(seen: set[Any]) -> None:
    m = manager(seen=seen)
    ready(m)
    m.begin()
    result = m.begin_commit()
    assert m.poll(0.0, batches_pending=False) is None  # nothing was added: no EndTxn
    assert result.done and result.error is None and m.state is S.READY
    m.begin()
    result = m.begin_abort()
    assert m.poll(0.0, batches_pending=False) is None
    assert result.done and m.state is S.READY


def scenario_abortable_then_abort(seen: set[Any]) -> None:
    m = manager(seen=seen)
    ready(m)
    m.begin()
    added(m, ("a", 0))
    cause = KafkaError(ErrorCode.INVALID_RECORD, "bad")
    m.on_batch_failed(cause, sequenced=False)
    assert m.state is S.ABORTABLE_ERROR
    assert isinstance(m.last_error, TransactionAbortableError)
    assert m.last_error.__cause__ is cause and m.last_error.code == ErrorCode.INVALID_RECORD
    m.on_batch_failed(KafkaError(ErrorCode.CORRUPT_MESSAGE), sequenced=False)
    assert m.last_error.__cause__ is cause  # the first error is the one reported
    for call in (
        lambda: m.add_partition("a", 0),
        m.begin_commit,
        lambda: m.send_offsets({TopicPartition("x", 0): 1}, ConsumerGroupMetadata("g")),
    ):
        with pytest.raises(TransactionAbortableError):
            call()
    with pytest.raises(InvalidTxnStateError):
        m.begin()
    result = m.begin_abort()
    req = step(m)
    assert req.kind is Kind.END_TXN and body_of(req).committed is False
    answer(m, req, et.EndTxnResponse())
    assert result.done and m.state is S.READY and m.last_error is None


def scenario_abortable_while_committing(seen: set[Any]) -> None:
    m = manager(seen=seen)
    ready(m)
    m.begin()
    added(m, ("a", 0))
    result = m.begin_commit()
    m.on_batch_failed(KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS), sequenced=False)
    assert m.state is S.ABORTABLE_ERROR
    assert isinstance(result.error, TransactionAbortableError)
    with pytest.raises(TransactionAbortableError):
        result.result()
    abort = m.begin_abort()
    answer(m, step(m), et.EndTxnResponse())
    assert abort.done and m.state is S.READY


def scenario_end_txn_abortable(seen: set[Any]) -> None:
    m = manager(seen=seen)
    ready(m)
    m.begin()
    added(m, ("a", 0))
    result = m.begin_commit()
    answer(m, step(m), et.EndTxnResponse(error_code=ErrorCode.TRANSACTION_ABORTABLE))
    assert m.state is S.ABORTABLE_ERROR
    assert isinstance(result.error, TransactionAbortableError)
    assert result.error.code == ErrorCode.TRANSACTION_ABORTABLE


def scenario_sequence_gap_abort_bumps_epoch(seen: set[Any]) -> None:
    m = manager(seen=seen)
    ready(m)
    m.begin()
    added(m, ("a", 0))
    m.on_batch_failed(KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER), sequenced=True)
    assert m.state is S.ABORTABLE_ERROR
    result = m.begin_abort()
    req = step(m)
    assert req.kind is Kind.END_TXN and body_of(req).committed is False
    answer(m, req, et.EndTxnResponse())
    assert not result.done
    req = step(m)
    # A sequence gap: the abort ends with an epoch bump, so the next transaction starts clean.
    assert req.kind is Kind.INIT_PRODUCER_ID and m.state is S.INITIALIZING
    assert m.begin_abort() is result
    body = body_of(req, 3)
    assert (body.producer_id, body.producer_epoch) == (42, 3)
    assert body_of(req, 2).producer_id == -1  # absent before v3
    answer(m, req, init_resp(code=ErrorCode.CONCURRENT_TRANSACTIONS))
    assert m.state is S.INITIALIZING and not result.done
    req = step(m, now=10.0)
    answer(m, req, init_resp(pid=42, epoch=4))
    assert result.done and result.error is None
    assert (m.state, m.producer_epoch) == (S.READY, 4)
    m.begin()  # the next transaction starts clean
    assert m.state is S.IN_TRANSACTION


def scenario_idempotent(seen: set[Any]) -> None:
    m = manager(None, seen=seen)
    assert not m.is_transactional
    for call in (m.begin, m.begin_commit, m.begin_abort):
        with pytest.raises(InvalidTxnStateError, match=r"transactional\.id"):
            call()
    m.init()
    req = step(m)
    # No coordinator: any broker hands out producer ids.
    assert req.kind is Kind.INIT_PRODUCER_ID and req.coordinator is None
    assert body_of(req).transactional_id is None
    answer(m, req, init_resp(pid=9, epoch=0))
    assert (m.state, m.producer_id) == (S.READY, 9)
    m.on_batch_failed(KafkaError(ErrorCode.INVALID_RECORD), sequenced=True)
    assert m.state is S.READY  # batch errors only concern their records here
    m.request_epoch_bump()
    req = step(m)
    assert req.kind is Kind.INIT_PRODUCER_ID and m.state is S.INITIALIZING
    m.request_epoch_bump()  # already under way
    assert (body_of(req).producer_id, body_of(req).producer_epoch) == (9, 0)
    answer(m, req, init_resp(pid=10, epoch=0))
    assert (m.state, m.producer_id) == (S.READY, 10)
    assert m.poll(0.0, batches_pending=True) is None


def scenario_fatal(seen: set[Any]) -> None:
    for setup in ("ready", "in_txn", "committing", "aborting", "abortable", "initializing"):
        m = manager(seen=seen)
        pending = []
        if setup == "initializing":
            pending.append(m.init())
        else:
            ready(m)
        if setup != "ready" and setup != "initializing":
            m.begin()
            added(m, ("a", 0))
            pending.append(m.send_offsets({TopicPartition("i", 0): 1}, ConsumerGroupMetadata("g")))
        if setup == "committing":
            pending.append(m.begin_commit())
        elif setup == "aborting":
            pending = [m.begin_abort()]
        elif setup == "abortable":
            m.on_batch_failed(KafkaError(ErrorCode.INVALID_RECORD), sequenced=False)
            pending = []
        if setup == "initializing":
            m.fail_fatal(KafkaError(ErrorCode.UNSUPPORTED_VERSION))
        else:
            # A fenced batch means a newer producer took over, in any state.
            m.on_batch_failed(KafkaError(ErrorCode.PRODUCER_FENCED), sequenced=True)
            assert isinstance(m.fatal_error, ProducerFencedError)
        assert m.state is S.FATAL_ERROR, setup
        assert isinstance(m.fatal_error, TransactionFatalError)
        for r in pending:
            assert r.done and r.error is m.fatal_error, setup
        with pytest.raises(TransactionFatalError):
            m.begin()
        assert m.poll(100.0, batches_pending=False) is None


def scenario_moving_up_to_transaction_version_2(seen: set[Any]) -> None:
    # Kafka's client reads transaction.version again as a commit begins; moving
    # up to 2 bumps the epoch after that commit's EndTxn (KIP-890 part 2), so
    # the next transaction (here begun during the bump) starts on a new epoch.
    m = manager(seen=seen)
    features = (1, {"transaction.version": 1})
    m.version.features = lambda: features
    ready(m)
    m.begin()
    added(m, ("a", 0))
    features = (2, {"transaction.version": 2})
    commit = m.begin_commit()
    req = step(m)
    assert (req.kind, req.max_version) == (Kind.END_TXN, 4)  # this transaction's own flow
    answer(m, req, et.EndTxnResponse())
    req = step(m)
    assert req.kind is Kind.INIT_PRODUCER_ID and m.state is S.INITIALIZING
    assert (body_of(req).producer_id, body_of(req).producer_epoch) == (42, 3)
    assert not commit.done and m.committing_result is commit
    m.begin()  # ahead of the commit, which is not done until the bump is
    assert m.add_partition("b", 0) is False and m.pipelined
    answer(m, req, init_resp(pid=42, epoch=4))
    assert commit.done and commit.error is None and m.transactions_committed == 1
    assert (m.state, m.producer_epoch, m.txn_tv2) == (S.IN_TRANSACTION, 4, True)
    assert m.is_send_allowed("b", 0)  # version 2: no AddPartitionsToTxn
    assert m.poll(0.0, batches_pending=True) is None


SCENARIOS = [
    scenario_init,
    scenario_commit,
    scenario_abort,
    scenario_empty_transactions,
    scenario_abortable_then_abort,
    scenario_abortable_while_committing,
    scenario_end_txn_abortable,
    scenario_sequence_gap_abort_bumps_epoch,
    scenario_idempotent,
    scenario_fatal,
    scenario_moving_up_to_transaction_version_2,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_scenario(scenario: Any) -> None:
    scenario(set())


def test_every_allowed_transition_is_exercised() -> None:
    seen: set[tuple[TxnState, TxnState]] = set()
    for scenario in SCENARIOS:
        scenario(seen)
    allowed = {(src, dst) for dst, srcs in _SOURCES.items() for src in srcs}
    fatal_sources = {src for src, dst in seen if dst is S.FATAL_ERROR}
    # Fatal is reachable from anywhere; the scenarios take it from every live state.
    assert fatal_sources == {
        S.READY,
        S.IN_TRANSACTION,
        S.COMMITTING_TRANSACTION,
        S.ABORTING_TRANSACTION,
        S.ABORTABLE_ERROR,
        S.INITIALIZING,
    }
    missing = {t for t in allowed if t[1] is not S.FATAL_ERROR} - seen
    assert not missing, missing
    assert seen <= allowed


@pytest.mark.parametrize(
    ("src", "dst"),
    [(s, d) for d in TxnState for s in TxnState if s not in _SOURCES[d]],
    ids=lambda s: s.name,
)
def test_every_other_transition_is_refused(src: TxnState, dst: TxnState) -> None:
    m = manager()
    m.state = src
    with pytest.raises(InvalidTxnStateError, match=f"{src.name} to {dst.name}"):
        m._transition(dst)
    assert m.state is src


# -- misuse ---------------------------------------------------------------------------------


def test_state_errors_before_init_and_outside_transactions() -> None:
    m = manager()
    with pytest.raises(InvalidTxnStateError, match="init_transactions"):
        m.begin()
    with pytest.raises(InvalidTxnStateError, match="init_transactions"):
        m.check_can_send()
    ready(m)
    with pytest.raises(InvalidTxnStateError, match="begin_transaction"):
        m.add_partition("a", 0)
    for call in (m.begin_commit, m.begin_abort):
        with pytest.raises(InvalidTxnStateError):
            call()
    m.begin()
    with pytest.raises(InvalidTxnStateError, match="already open"):
        m.begin()
    m.check_can_send()
    m.begin_commit()
    with pytest.raises(InvalidTxnStateError, match="committing"):
        m.begin_abort()  # a commit, once asked for, can only complete


def test_empty_offsets_resolve_at_once() -> None:
    m = manager()
    ready(m)
    m.begin()
    result = m.send_offsets({}, ConsumerGroupMetadata("g"))
    assert result.done and m.poll(0.0, batches_pending=False) is None


# -- retries and coordinators ----------------------------------------------------------------


def test_retriable_errors_back_off_then_retry() -> None:
    m = manager()
    m.init()
    answer(m, step(m), find_ok())
    req = step(m)
    answer(m, req, init_resp(code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), now=1.0)
    deadline = m.next_deadline(1.0)
    assert deadline is not None and 1.0 < deadline <= 1.0 + 0.12
    assert m.poll(1.0, batches_pending=False) is None
    req = step(m, now=deadline)
    assert req.kind is Kind.INIT_PRODUCER_ID and req.coordinator == COORD
    answer(m, req, init_resp(code=ErrorCode.CONCURRENT_TRANSACTIONS), now=deadline)
    second = m.next_deadline(deadline)
    assert second is not None and second - deadline > deadline - 1.0  # exponential
    answer(m, step(m, now=second), init_resp())
    assert m.state is S.READY and m.next_deadline(second) is None


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
def test_not_coordinator_finds_it_again(code: ErrorCode) -> None:
    m = manager()
    ready(m)
    m.begin()
    m.add_partition("a", 0)
    req = step(m)
    answer(m, req, add_resp({("a", 0): code}))
    assert m.coordinator is None and not m.is_send_allowed("a", 0)
    req = step(m, now=5.0)
    assert req.kind is Kind.FIND_COORDINATOR
    answer(m, req, find_ok((9, "h2", 1)), now=5.0)
    req = step(m, now=5.0)
    assert req.kind is Kind.ADD_PARTITIONS and req.coordinator == (9, "h2", 1)
    answer(m, req, add_resp({("a", 0): 0}))
    assert m.is_send_allowed("a", 0)


def test_connection_loss_retries_end_txn_after_a_new_lookup() -> None:
    m = manager()
    ready(m)
    m.begin()
    added(m, ("a", 0))
    result = m.begin_commit()
    req = step(m)
    m.on_failure(req, KafkaConnectionError("lost"), 0.0)
    assert not result.done and m.coordinator is None
    req = step(m, now=5.0)
    assert req.kind is Kind.FIND_COORDINATOR
    answer(m, req, find_ok(), now=5.0)
    req = step(m, now=5.0)
    assert req.kind is Kind.END_TXN
    answer(m, req, et.EndTxnResponse())
    assert result.done and result.error is None


def test_add_partitions_failure_is_added_again() -> None:
    m = manager()
    ready(m)
    m.begin()
    m.add_partition("a", 0)
    req = step(m)
    m.add_partition("b", 0)  # arrives while the first request is out
    m.on_failure(req, KafkaConnectionError("lost"), 0.0)
    answer(m, step(m, now=5.0), find_ok())
    req = step(m, now=5.0)
    assert sorted((t.name, p) for t in body_of(req).v3_and_below_topics for p in t.partitions) == [
        ("a", 0),
        ("b", 0),
    ]
    # One partition still loading: only that one is asked again.
    answer(m, req, add_resp({("a", 0): 0, ("b", 0): ErrorCode.CONCURRENT_TRANSACTIONS}))
    assert m.is_send_allowed("a", 0) and not m.is_send_allowed("b", 0)
    req = step(m, now=10.0)
    assert [(t.name, t.partitions) for t in body_of(req).v3_and_below_topics] == [("b", [0])]


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (ErrorCode.PRODUCER_FENCED, ProducerFencedError),
        (ErrorCode.INVALID_PRODUCER_EPOCH, ProducerFencedError),
        (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TransactionFatalError),
        (ErrorCode.INVALID_TXN_STATE, TransactionFatalError),
        (ErrorCode.INVALID_PRODUCER_ID_MAPPING, TransactionFatalError),
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, TransactionAbortableError),
        (ErrorCode.TRANSACTION_ABORTABLE, TransactionAbortableError),
    ],
)
def test_add_partitions_errors(code: ErrorCode, expected: type[Exception]) -> None:
    m = manager()
    ready(m)
    m.begin()
    m.add_partition("a", 0)
    m.add_partition("b", 0)
    req = step(m)
    answer(m, req, add_resp({("a", 0): code, ("b", 0): ErrorCode.OPERATION_NOT_ATTEMPTED}))
    assert not m.is_send_allowed("a", 0) and not m.is_send_allowed("b", 0)
    if issubclass(expected, TransactionFatalError):
        assert m.state is S.FATAL_ERROR and type(m.fatal_error) is expected
        assert m.fatal_error.code == code
    else:
        assert m.state is S.ABORTABLE_ERROR and m.last_error is not None
        assert m.last_error.code == code


@pytest.mark.parametrize(
    ("api_key", "code", "state"),
    [
        (22, ErrorCode.PRODUCER_FENCED, S.FATAL_ERROR),
        (22, ErrorCode.INVALID_TRANSACTION_TIMEOUT, S.FATAL_ERROR),
        (22, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, S.FATAL_ERROR),
        (26, ErrorCode.PRODUCER_FENCED, S.FATAL_ERROR),
        (26, ErrorCode.INVALID_TXN_STATE, S.FATAL_ERROR),
        (26, ErrorCode.CONCURRENT_TRANSACTIONS, S.COMMITTING_TRANSACTION),
        (25, ErrorCode.PRODUCER_FENCED, S.FATAL_ERROR),
        (25, ErrorCode.GROUP_AUTHORIZATION_FAILED, S.ABORTABLE_ERROR),
        (25, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, S.IN_TRANSACTION),
    ],
)
def test_error_classes(api_key: int, code: ErrorCode, state: TxnState) -> None:
    m = manager()
    if api_key == 22:
        result = m.init()
        answer(m, step(m), find_ok())
        answer(m, step(m), init_resp(code=code))
    else:
        ready(m)
        m.begin()
        added(m, ("a", 0))
        if api_key == 26:
            result = m.begin_commit()
            answer(m, step(m), et.EndTxnResponse(error_code=code))
        else:
            result = m.send_offsets({TopicPartition("i", 0): 3}, ConsumerGroupMetadata("g"))
            req = step(m)
            assert req.kind is Kind.ADD_OFFSETS
            answer(m, req, aot.AddOffsetsToTxnResponse(error_code=code))
    assert m.state is state
    if state is S.FATAL_ERROR:
        assert result.error is m.fatal_error and m.fatal_error is not None
        assert m.fatal_error.code == code
        fenced = code == ErrorCode.PRODUCER_FENCED
        assert isinstance(m.fatal_error, ProducerFencedError) is fenced
    elif state is S.ABORTABLE_ERROR:
        assert isinstance(result.error, TransactionAbortableError) and result.error.code == code
    else:
        assert not result.done and m.next_deadline(0.0) is not None


def test_abort_of_a_transaction_the_coordinator_never_saw() -> None:
    m = manager()
    ready(m)
    m.begin()
    m.add_partition("a", 0)
    req = step(m)
    m.on_failure(req, KafkaConnectionError("lost"), 0.0)  # did the add happen? unknown
    result = m.begin_abort()
    answer(m, step(m, now=5.0), find_ok())
    req = step(m, now=5.0)
    assert req.kind is Kind.END_TXN
    answer(m, req, et.EndTxnResponse(error_code=ErrorCode.INVALID_TXN_STATE))
    assert result.done and result.error is None and m.state is S.READY


# -- offsets (KIP-447) -------------------------------------------------------------------------


def test_send_offsets_flow_and_generation() -> None:
    m = manager()
    ready(m)
    m.begin()
    group = ConsumerGroupMetadata("g", generation_id=5, member_id="m-1", group_instance_id="i")
    result = m.send_offsets({TopicPartition("in", 0): 10, ("in", 1): 20}, group)
    req = step(m)
    assert req.kind is Kind.ADD_OFFSETS and req.coordinator == COORD
    body = body_of(req)
    assert (body.transactional_id, body.group_id, body.producer_id) == ("tx", "g", 42)
    answer(m, req, aot.AddOffsetsToTxnResponse())
    req = step(m)
    assert req.kind is Kind.FIND_COORDINATOR and (req.key_type, req.key) == (0, "g")
    answer(m, req, find_ok(GROUP_COORD))
    req = step(m)
    assert req.kind is Kind.TXN_OFFSET_COMMIT and req.coordinator == GROUP_COORD
    body = body_of(req, 3)
    assert (body.generation_id_or_member_epoch, body.member_id, body.group_instance_id) == (
        5,
        "m-1",
        "i",
    )
    assert [
        (t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
        for t in body.topics
    ] == [("in", [(0, 10), (1, 20)])]
    assert body_of(req, 2).generation_id_or_member_epoch == -1  # KIP-447 fields only from v3
    # One partition retried, alone.
    answer(
        m, req, txn_commit_resp({("in", 0): 0, ("in", 1): ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
    )
    assert not result.done
    req = step(m, now=5.0)
    assert [p.partition_index for t in body_of(req).topics for p in t.partitions] == [1]
    answer(m, req, txn_commit_resp({("in", 1): 0}))
    assert result.done and result.error is None
    commit = m.begin_commit()
    answer(m, step(m), et.EndTxnResponse())
    assert commit.done and commit.error is None


@pytest.mark.parametrize(
    ("code", "cause"),
    [
        (ErrorCode.ILLEGAL_GENERATION, CommitFailedError),
        (ErrorCode.UNKNOWN_MEMBER_ID, CommitFailedError),
        (ErrorCode.FENCED_INSTANCE_ID, KafkaError),
    ],
)
def test_stale_generation_is_abortable(code: ErrorCode, cause: type[Exception]) -> None:
    m = manager()
    ready(m)
    m.begin()
    result = m.send_offsets({TopicPartition("in", 0): 1}, ConsumerGroupMetadata("g", 1, "m"))
    answer(m, step(m), aot.AddOffsetsToTxnResponse())
    answer(m, step(m), find_ok(GROUP_COORD))
    answer(m, step(m), txn_commit_resp({("in", 0): code}))
    assert m.state is S.ABORTABLE_ERROR
    assert isinstance(result.error, TransactionAbortableError)
    assert type(result.error.__cause__) is cause and result.error.code == code
    abort = m.begin_abort()
    answer(m, step(m), et.EndTxnResponse())
    assert abort.done and m.state is S.READY


def test_group_coordinator_moved() -> None:
    m = manager()
    ready(m)
    m.begin()
    result = m.send_offsets({TopicPartition("in", 0): 1}, ConsumerGroupMetadata("g"))
    answer(m, step(m), aot.AddOffsetsToTxnResponse())
    answer(m, step(m), find_ok(GROUP_COORD))
    answer(m, step(m), txn_commit_resp({("in", 0): ErrorCode.NOT_COORDINATOR}))
    req = step(m, now=5.0)
    assert req.kind is Kind.FIND_COORDINATOR and req.key == "g"
    assert m.coordinator == COORD  # the transaction coordinator is not forgotten
    answer(m, req, find_ok((3, "x", 1)))
    req = step(m, now=5.0)
    assert req.kind is Kind.TXN_OFFSET_COMMIT and req.coordinator == (3, "x", 1)
    answer(m, req, txn_commit_resp({("in", 0): 0}))
    assert result.done and result.error is None


def test_pending_results_fail_on_close() -> None:
    m = manager()
    ready(m)
    m.begin()
    offsets = m.send_offsets({TopicPartition("in", 0): 1}, ConsumerGroupMetadata("g"))
    commit = m.begin_commit()
    error = RuntimeError("closed")
    m.close(error)
    assert offsets.error is error and commit.error is error


# -- wire format ---------------------------------------------------------------------------------


def test_every_request_encodes_at_every_version() -> None:
    m = manager()
    built: dict[int, Any] = {}
    m.init()
    req = step(m)
    built[10] = req
    answer(m, req, find_ok())
    req = step(m)
    built[22] = req
    answer(m, req, init_resp())
    m.begin()
    m.add_partition("a", 0)
    req = step(m)
    built[24] = req
    answer(m, req, add_resp({("a", 0): 0}))
    m.send_offsets({TopicPartition("in", 0): 1}, ConsumerGroupMetadata("g", 2, "m", "i"))
    req = step(m)
    built[25] = req
    answer(m, req, aot.AddOffsetsToTxnResponse())
    answer(m, step(m), find_ok(GROUP_COORD))
    req = step(m)
    built[28] = req
    answer(m, req, txn_commit_resp({("in", 0): 0}))
    m.begin_commit()
    built[26] = step(m)
    for key, req in built.items():
        lowest = max(api(key).min_version, 1 if key == 10 else 0)  # v0 has no key type
        for version in range(lowest, req.max_version + 1):
            assert encode_request_body(key, version, req.build(version)), (key, version)


# -- the producer driver against the scripted fake broker ------------------------------------------


def _fake_coordinator(fake_broker: FakeBroker, *, available: dict[str, bool]) -> None:
    def find(header: Any, body: Any) -> Any:
        C = fc.FindCoordinatorResponse.Coordinator
        if not available["yes"]:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            return fc.FindCoordinatorResponse(
                coordinators=[
                    C(key=k, node_id=-1, port=-1, error_code=code) for k in body.coordinator_keys
                ]
            )
        return fc.FindCoordinatorResponse(
            coordinators=[
                C(key=k, node_id=0, host=fake_broker.host, port=fake_broker.port)
                for k in body.coordinator_keys
            ]
        )

    fake_broker.handlers[10] = find


@pytest.mark.anyio
async def test_init_transactions_times_out_then_resumes(fake_broker: FakeBroker) -> None:
    available = {"yes": False}
    _fake_coordinator(fake_broker, available=available)
    with anyio.fail_after(10):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap,
            transactional_id="tx",
            max_block_ms=300,
            retry_backoff_ms=10,
            # Capped well below max.block.ms: otherwise the backoff grown during the
            # first wait can outlast the second one, and the test depends on timing.
            retry_backoff_max_ms=50,
        ) as p:
            with pytest.raises(ProducerBlockedError, match="init_transactions"):
                await p.init_transactions()
            assert p.transaction_state is TxnState.INITIALIZING
            available["yes"] = True
            await p.init_transactions()  # the same initialization, now complete
            assert p.transaction_state is TxnState.READY
    inits = [body for key, _, body in fake_broker.requests if key == 22]
    assert [b.transactional_id for b in inits] == ["tx"]


@pytest.mark.anyio
async def test_broker_without_transaction_apis_is_fatal(fake_broker: FakeBroker) -> None:
    # The fake broker advertises no AddPartitionsToTxn: the first transactional
    # send can never be sent.
    _fake_coordinator(fake_broker, available={"yes": True})
    real = fake_broker.api_versions

    def without_24(header: Any, body: Any) -> Any:
        response = real(header, body)
        return dataclasses.replace(
            response, api_keys=[k for k in response.api_keys if k.api_key != 24]
        )

    fake_broker.handlers[18] = without_24
    with anyio.fail_after(10):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, transactional_id="tx"
        ) as p:
            await p.init_transactions()
            p.begin_transaction()
            future = await p.send("one", b"x")
            with pytest.raises(TransactionFatalError) as info:
                await p.commit_transaction()
            assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
            assert isinstance(future.exception(), TransactionFatalError)
            with pytest.raises(TransactionFatalError):
                await p.send("one", b"y")
    assert not any(key == 0 for key, _, _ in fake_broker.requests)


@pytest.mark.anyio
@pytest.mark.parametrize("explicit", [False, True])
async def test_idempotence_without_init_producer_id(
    fake_broker: FakeBroker, explicit: bool
) -> None:
    real = fake_broker.api_versions

    def without_22(header: Any, body: Any) -> Any:
        response = real(header, body)
        return dataclasses.replace(
            response, api_keys=[k for k in response.api_keys if k.api_key != 22]
        )

    fake_broker.handlers[18] = without_22
    settings: dict[str, Any] = {"enable_idempotence": True} if explicit else {}
    with anyio.fail_after(10):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, linger_ms=0, **settings
        ) as p:
            if explicit:
                # Asked for explicitly: refusing is better than quietly not having it.
                with pytest.raises(TransactionFatalError, match="InitProducerId"):
                    await p.send_and_wait("one", b"x")
                return
            md = await p.send_and_wait("one", b"x")
    assert md.offset == 0
    assert read_batch_header(fake_broker.logs[("one", 0)][0]).producer_id == -1


# -- pipelining: a transaction begun while the previous one commits ---------------------------


def committing_with_one_ahead(m: TransactionManager) -> Any:
    """``m`` commits a transaction on a-0 (its EndTxn not sent yet) while the
    next one is begun ahead; returns the commit's result."""
    ready(m)
    m.begin()
    added(m, ("a", 0))
    result = m.begin_commit()
    m.begin()
    assert m.pipelined and m.state is S.COMMITTING_TRANSACTION and m.sendable
    return result


def test_a_transaction_begun_ahead_waits_for_the_commit_then_goes_on() -> None:
    m = manager()
    result = committing_with_one_ahead(m)
    committing, ahead = m.sending_number, m.open_number
    assert ahead == committing + 1
    assert m.add_partition("a", 0) is False  # no request now: the commit comes first
    assert m.add_partition("b", 1) is False
    offsets = m.send_offsets({TopicPartition("in", 0): 5}, ConsumerGroupMetadata("g"))
    # The committing transaction's batches leave, the next one's wait.
    assert m.is_send_allowed("a", 0, committing) and not m.is_send_allowed("a", 0, ahead)
    with pytest.raises(InvalidTxnStateError, match="already open"):
        m.begin()
    with pytest.raises(InvalidTxnStateError, match="still committing"):
        m.begin_commit()
    assert m.poll(0.0, batches_pending=True) is None  # EndTxn waits for its own batches
    req = step(m)
    assert req.kind is Kind.END_TXN and body_of(req).committed is True
    answer(m, req, et.EndTxnResponse())
    assert result.done and result.error is None and m.transactions_committed == 1
    # The transaction begun ahead is now the open one: its partitions, then its offsets.
    assert m.state is S.IN_TRANSACTION and not m.pipelined and m.sending_number == ahead
    assert not m.is_send_allowed("a", 0, ahead)  # not added to this transaction yet
    req = step(m)
    assert req.kind is Kind.ADD_PARTITIONS
    assert sorted((t.name, p) for t in body_of(req).v3_and_below_topics for p in t.partitions) == [
        ("a", 0),
        ("b", 1),
    ]
    answer(m, req, add_resp({("a", 0): 0, ("b", 1): 0}))
    assert m.is_send_allowed("a", 0, ahead) and m.is_send_allowed("b", 1, ahead)
    assert step(m).kind is Kind.ADD_OFFSETS and not offsets.done


def test_a_failed_commit_dooms_the_transaction_begun_ahead() -> None:
    m = manager()
    result = committing_with_one_ahead(m)
    m.add_partition("b", 0)
    offsets = m.send_offsets({TopicPartition("in", 0): 5}, ConsumerGroupMetadata("g"))
    # A batch of the committing transaction fails for good.
    m.on_batch_failed(
        KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "x"), sequenced=True, number=m.sending_number
    )
    assert isinstance(result.error, TransactionAbortableError)
    assert isinstance(offsets.error, TransactionAbortableError)  # it depended on that commit
    assert m.state is S.ABORTABLE_ERROR and not m.pipelined and not m.sendable
    with pytest.raises(TransactionAbortableError):
        m.check_can_send()
    with pytest.raises(TransactionAbortableError):
        m.begin_commit()
    # One abort ends both: EndTxn(abort) for what was sent, then the epoch bump.
    aborted = m.begin_abort()
    req = step(m)
    assert req.kind is Kind.END_TXN and body_of(req).committed is False
    answer(m, req, et.EndTxnResponse())
    assert step(m).kind is Kind.INIT_PRODUCER_ID and not aborted.done


def test_a_failed_batch_of_the_transaction_begun_ahead_dooms_only_it() -> None:
    m = manager()
    result = committing_with_one_ahead(m)
    m.add_partition("b", 0)
    m.on_batch_failed(DeliveryTimeoutError("expired"), sequenced=False, number=m.open_number)
    assert not m.sendable and m.state is S.COMMITTING_TRANSACTION
    with pytest.raises(TransactionAbortableError, match="expired"):
        m.check_can_send()
    with pytest.raises(TransactionAbortableError):
        m.begin_commit()
    req = step(m)  # the commit goes on
    assert req.kind is Kind.END_TXN
    answer(m, req, et.EndTxnResponse())
    assert result.done and result.error is None
    assert m.state is S.ABORTABLE_ERROR
    aborted = m.begin_abort()  # nothing of it reached the coordinator: ends locally
    assert m.poll(0.0, batches_pending=False) is None
    assert aborted.done and aborted.error is None and m.state is S.READY


def test_aborting_the_transaction_begun_ahead_is_local() -> None:
    m = manager()
    result = committing_with_one_ahead(m)
    m.add_partition("b", 0)
    offsets = m.send_offsets({TopicPartition("in", 0): 5}, ConsumerGroupMetadata("g"))
    aborted = m.begin_abort()
    assert aborted.done and aborted.error is None and m.transactions_aborted == 1
    assert isinstance(offsets.error, TransactionAbortedError)
    assert not m.pipelined and not m.sendable and m.state is S.COMMITTING_TRANSACTION
    m.begin()  # and another may begin ahead
    assert m.pipelined
    req = step(m)
    assert req.kind is Kind.END_TXN
    answer(m, req, et.EndTxnResponse())
    assert result.done and result.error is None
    assert m.state is S.IN_TRANSACTION
    assert m.poll(0.0, batches_pending=False) is None  # b-0 went with the aborted one


def test_a_fenced_commit_fails_the_transaction_begun_ahead() -> None:
    m = manager()
    result = committing_with_one_ahead(m)
    offsets = m.send_offsets({TopicPartition("in", 0): 5}, ConsumerGroupMetadata("g"))
    req = step(m)
    answer(m, req, et.EndTxnResponse(error_code=ErrorCode.PRODUCER_FENCED))
    assert isinstance(result.error, ProducerFencedError)
    assert isinstance(offsets.error, ProducerFencedError)
    assert m.state is S.FATAL_ERROR and not m.pipelined and not m.sendable
    with pytest.raises(ProducerFencedError):
        m.check_can_send()
