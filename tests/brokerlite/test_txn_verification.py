"""KIP-890 part 1 in cluster mode, without sockets: the leader's questions to
transaction coordinators (:mod:`trafka.brokerlite.transactions.verification`), and
a parked request that waits on for another waiter under its ticket
(:class:`trafka.brokerlite.outcomes.ParkAgain`, how a verified acks=all Produce
goes on to wait for its replicas).

Kafka's leader asks with AddPartitionsToTxn v4 ``verify_only``, batched per
coordinator; a partition not in the ongoing transaction is INVALID_TXN_STATE,
transient coordinator states become NOT_ENOUGH_REPLICAS for the producer.

The group coordinator verifies a TxnOffsetCommit the same way (KIP-890 part 1
for offsets), and its answer, once verified, still waits until the offsets it
staged are on every in-sync replica of the group's ``__consumer_offsets``
partition, as an answer given at once does (Kafka appends them with
``offsets.commit.required.acks=-1``): a cluster-mode broker core with a cluster
image given by hand shows it.
"""

from __future__ import annotations

import uuid
from typing import Any

from trafka.brokerlite.cluster.view import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, ClusterImage
from trafka.brokerlite.cluster.zk_layout import (
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
)
from trafka.brokerlite.outcomes import ParkAgain, Parked, Reply
from trafka.brokerlite.purgatory import ParkedRequest, Purgatory
from trafka.brokerlite.session import ConnectionSession
from trafka.brokerlite.transactions.producer_state import ProducerEntry
from trafka.brokerlite.transactions.verification import TxnVerification
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as pr
from trafka.codec.messages import k24_add_partitions_to_txn as m
from trafka.codec.messages import k28_txn_offset_commit as toc
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.records import encode_batch

ME = 1
Result = m.AddPartitionsToTxnResponse


class FakeCluster:
    def __init__(self, coordinators: dict[str, int]) -> None:
        self.coordinators = coordinators

    def coordinator(self, key: str, *, transactional: bool = False) -> int:
        assert transactional
        return self.coordinators.get(key, -1)


class FakeState:
    def __init__(self, entries: dict[int, ProducerEntry]) -> None:
        self.entries = entries

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self.entries.get(producer_id)


class FakeProducers:
    def __init__(self) -> None:
        self.states: dict[tuple[str, int], FakeState] = {}

    def state(self, topic: str, partition: int) -> FakeState:
        return self.states.setdefault((topic, partition), FakeState({}))


class FakeTxn:
    def verify_partition(self, tid: str, pid: int, epoch: int, topic: str, p: int) -> ErrorCode:
        return ErrorCode.NONE if (topic, p) == ("t", 0) else ErrorCode.INVALID_TXN_STATE


def make(coordinators: dict[str, int]) -> tuple[TxnVerification, FakeProducers]:
    producers = FakeProducers()
    cluster: Any = FakeCluster(coordinators)
    verification = TxnVerification(
        node_id=ME,
        cluster=cluster,
        producers=producers,  # type: ignore[arg-type]
        txn=FakeTxn(),  # type: ignore[arg-type]
        owns=lambda tid: coordinators.get(tid) == ME,
    )
    return verification, producers


def answer(tid: str, codes: dict[tuple[str, int], ErrorCode]) -> Result:
    by_topic: dict[str, list[Result.AddPartitionsToTxnPartitionResult]] = {}
    for (topic, p), code in codes.items():
        by_topic.setdefault(topic, []).append(
            Result.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code)
        )
    return Result(
        results_by_transaction=[
            Result.AddPartitionsToTxnResult(
                transactional_id=tid,
                topic_results=[
                    Result.AddPartitionsToTxnTopicResult(name=t, results_by_partition=r)
                    for t, r in by_topic.items()
                ],
            )
        ]
    )


def test_no_question_for_an_open_transaction_or_a_local_coordinator() -> None:
    verification, producers = make({"remote": 2, "here": ME})
    # The producer's transaction is open on ("t", 5) at epoch 3: its first batch passed.
    producers.state("t", 5).entries[7] = ProducerEntry(7, epoch=3, txn_first_offset=10)
    assert verification.local(("remote", 7, 3, "t", 5)) is ErrorCode.NONE
    # Another epoch, or no open transaction: the coordinator must be asked.
    assert verification.local(("remote", 7, 4, "t", 5)) is None
    assert verification.local(("remote", 7, 3, "t", 6)) is None
    # The coordinator is this broker: asked in memory.
    assert verification.local(("here", 7, 3, "t", 0)) is ErrorCode.NONE
    assert verification.local(("here", 7, 3, "t", 1)) is ErrorCode.INVALID_TXN_STATE


def test_questions_are_batched_per_coordinator_and_answers_wake_their_request() -> None:
    verification, _ = make({"a": 2, "b": 2, "c": 3})
    woken: list[str] = []
    first = verification.ask([("a", 7, 0, "t", 1), ("c", 8, 0, "t", 2)], lambda: woken.append("1"))
    second = verification.ask([("b", 9, 1, "u", 0)], lambda: woken.append("2"))
    batches = {b.node: b for b in verification.batches()}
    assert sorted(batches) == [2, 3]
    body = batches[2].body
    assert {(t.transactional_id, t.producer_id, t.verify_only) for t in body.transactions} == {
        ("a", 7, True),
        ("b", 9, True),
    }
    # One request in flight per coordinator: nothing more until it is answered.
    verification.ask([("a", 7, 0, "t", 3)], lambda: woken.append("3"))
    assert verification.batches() == []
    verification.answered(
        batches[2],
        Result(
            results_by_transaction=[
                *answer("a", {("t", 1): ErrorCode.INVALID_TXN_STATE}).results_by_transaction,
                *answer("b", {("u", 0): ErrorCode.NONE}).results_by_transaction,
            ]
        ),
    )
    assert woken == ["2"]  # the first request still waits for coordinator 3
    assert dict(second) == {("b", 9, 1, "u", 0): ErrorCode.NONE}
    verification.failed(batches[3])
    assert woken == ["2", "1"]
    verify = verification.verifier(first)
    assert verify("a", 7, 0, "t", 1) is ErrorCode.INVALID_TXN_STATE
    # Unreachable coordinator: a retriable refusal.
    assert verify("c", 8, 0, "t", 2) is ErrorCode.NOT_ENOUGH_REPLICAS
    # The third question goes out now that coordinator 2 is free.
    [again] = verification.batches()
    assert again.node == 2 and again.questions == (("a", 7, 0, "t", 3),)


def test_coordinator_level_errors_and_unknown_coordinators() -> None:
    verification, _ = make({"a": 2})
    answers = verification.ask([("a", 7, 0, "t", 1)], lambda: None)
    lost = verification.ask([("gone", 7, 0, "t", 1)], lambda: None)
    [batch] = verification.batches()
    # No coordinator for "gone": answered at once.
    assert dict(lost) == {("gone", 7, 0, "t", 1): ErrorCode.NOT_COORDINATOR}
    verification.answered(batch, Result(error_code=ErrorCode.NOT_COORDINATOR))
    assert verification.verifier(answers)("a", 7, 0, "t", 1) is ErrorCode.NOT_ENOUGH_REPLICAS
    # A fenced producer is told so.
    answers = verification.ask([("a", 7, 0, "t", 1)], lambda: None)
    [batch] = verification.batches()
    verification.answered(batch, answer("a", {("t", 1): ErrorCode.PRODUCER_FENCED}))
    assert verification.verifier(answers)("a", 7, 0, "t", 1) is ErrorCode.PRODUCER_FENCED


def test_a_forgotten_request_is_not_woken() -> None:
    verification, _ = make({"a": 2})
    woken: list[int] = []
    answers = verification.ask([("a", 7, 0, "t", 1)], lambda: woken.append(1))
    verification.forget(answers)
    assert verification.batches() == [] and verification.pending == 0
    assert woken == []


class Step:
    """A waiter that completes with ``result`` once woken."""

    def __init__(self, result: Any, deadline_ms: int = 1_000) -> None:
        self.result = result
        self.deadline_ms = deadline_ms
        self.watches: frozenset[tuple[str, int]] = frozenset({("t", 0)})

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return True

    def complete(self, now_ms: int) -> Any:
        return self.result


def _finish(entry: ParkedRequest, now_ms: int) -> Reply | ParkAgain:
    """The Purgatory's finish for a :class:`Step`: its reply, or parked again."""
    body = entry.waiter.complete(now_ms)
    return body if isinstance(body, ParkAgain) else Reply(1, 0, 9, body)


def test_a_request_parked_again_keeps_its_ticket_until_its_last_waiter_completes() -> None:
    purgatory = Purgatory(_finish)
    session = ConnectionSession(5)
    header = RequestHeader(request_api_key=0, request_api_version=9, correlation_id=1)
    parked = purgatory.park(session, header, Step(ParkAgain(Step("done"))))
    purgatory.wake(parked.ticket)
    assert purgatory.take_ready(0) == []
    assert session.parked_ticket == parked.ticket and purgatory.waiting == 1
    purgatory.notify_append("t", 0, 1)
    [completion] = purgatory.take_ready(0)
    assert (completion.conn_id, completion.ticket, completion.reply.body) == (
        5,
        parked.ticket,
        "done",
    )
    assert session.parked_ticket is None and purgatory.waiting == 0


def test_a_request_woken_twice_at_once_completes_once_and_waits_on_when_parked_again() -> None:
    # A ShareFetch long poll woken by its share-partition's state arriving and by
    # its MaxWaitMs in the same round acquired records, then parked again for
    # its share-state write; the second wake completed the new waiter at once
    # (REQUEST_TIMED_OUT), and the records stayed locked for the lock duration.
    purgatory = Purgatory(_finish)
    session = ConnectionSession(5)
    header = RequestHeader(request_api_key=78, request_api_version=1, correlation_id=1)
    second = Step("durable", deadline_ms=31_000)
    second.watches = frozenset({("writes", -1)})
    parked = purgatory.park(session, header, Step(ParkAgain(second), deadline_ms=500))
    purgatory.notify_append("t", 0, 1)  # woken once by an append...
    assert purgatory.take_ready(500) == []  # ...and again by its deadline, in one round
    assert session.parked_ticket == parked.ticket and purgatory.waiting == 1
    assert purgatory.take_ready(1_000) == []  # the second waiter waits for its own wake
    purgatory.notify_append("writes", -1, 0)
    [completion] = purgatory.take_ready(1_000)
    assert (completion.ticket, completion.reply.body) == (parked.ticket, "durable")
    assert purgatory.waiting == 0


def group_coordinator(open_core: Any) -> Any:
    """A cluster-mode broker core, node 1: it leads the group's ``__consumer_offsets``
    partition (its ISR: 1 and 2); node 2 leads the transactions'
    ``__transaction_state`` partition and the input topic ``in``."""
    core = open_core(node_id=ME, zookeeper_connect="127.0.0.1:1")
    brokers = {n: BrokerRegistration(n, "127.0.0.1", 9090 + n, "PLAINTEXT", None) for n in (1, 2)}
    led = {OFFSETS_TOPIC: (1, 2), TRANSACTION_STATE_TOPIC: (2, 1), "in": (2, 1)}
    topics = {t: TopicAssignment(t, uuid.uuid4(), {0: r}) for t, r in led.items()}
    states = {(t, 0): PartitionState(r[0], 1, r, 1, 0) for t, r in led.items()}
    core.broker.cluster.apply(ClusterImage(brokers, 2, 1, topics, states, {}), core.now)
    return core


def commit_verified(core: Any, offset: int) -> Parked:
    """A TxnOffsetCommit of ``offset`` for ``in-0``, which the transaction
    coordinator (node 2) then confirms; the request, still parked."""
    T = toc.TxnOffsetCommitRequest
    request = T(
        transactional_id="tx",
        group_id="g",
        producer_id=7,
        producer_epoch=0,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            T.TxnOffsetCommitRequestTopic(
                name="in",
                partitions=[
                    T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset)
                ],
            )
        ],
    )
    parked = core.send(ApiKey.TXN_OFFSET_COMMIT, 3, request)
    assert isinstance(parked, Parked), parked
    verification = core.broker.txn_verification
    [batch] = verification.batches()
    assert batch.node == 2 and batch.questions == (("tx", 7, 0, OFFSETS_TOPIC, 0),)
    verification.answered(batch, answer("tx", {(OFFSETS_TOPIC, 0): ErrorCode.NONE}))
    return parked


def commit_code(core: Any, completion: Any) -> ErrorCode:
    [[part]] = [t.partitions for t in core.decode(completion.reply).topics]
    return ErrorCode(part.error_code)


def test_a_verified_txn_offset_commit_waits_for_its_offsets_to_replicate(open_core: Any) -> None:
    """Found by tests/faults' leader-zk under txn (seed 64: inputs processed four
    times): the group coordinator cut from ZooKeeper, its successor elected,
    answered a verified TxnOffsetCommit at once; the successor never got those
    offsets, the transaction committed without them (a replay's logs show it),
    and a processor that resumes from the group's offsets redoes its inputs."""
    core = group_coordinator(open_core)
    plog = core.broker.logs.partition(OFFSETS_TOPIC, 0)
    parked = commit_verified(core, 10)
    assert core.poll() == []
    # Staged here (OffsetFetch with require_stable sees it pending), not yet on node 2.
    assert core.broker.pending_offset_partitions("g") == {("in", 0)}
    assert plog.high_watermark < plog.log_end_offset
    # Node 2 fetches up to the log end: the high watermark passes the offsets.
    core.broker.cluster.replicas.on_follower_fetch(
        OFFSETS_TOPIC, 0, 2, plog.log_end_offset, core.now, current_leader_epoch=1
    )
    [done] = core.poll()
    assert done.ticket == parked.ticket and commit_code(core, done) is ErrorCode.NONE


def test_a_verified_txn_offset_commit_never_replicated_times_out(open_core: Any) -> None:
    """The follower never fetches (it follows another leader now): the commit is
    answered REQUEST_TIMED_OUT (retriable: the producer looks its group
    coordinator up again), not NONE."""
    core = group_coordinator(open_core)
    parked = commit_verified(core, 10)
    assert core.poll() == []
    [done] = core.poll(6_000)  # past the 5 s wait (Kafka's offsets.commit.timeout.ms)
    assert done.ticket == parked.ticket and commit_code(core, done) is ErrorCode.REQUEST_TIMED_OUT


# -- KAFKA-18654: a Produce v12+ that the coordinator cannot add yet ------------------------------
#
# Kafka 4.0+'s leader (ReplicaManager.appendRecordsWithTransactionVerification, for
# TransactionSupportedOperation.ADD_PARTITION, i.e. transaction version 2) asks the
# coordinator again when it answers CONCURRENT_TRANSACTIONS (the producer's last
# transaction is still writing its markers), every add.partitions.to.txn.retry.backoff.ms
# (default 20) until add.partitions.to.txn.retry.backoff.max.ms (default 100) from the
# first question; then the partition's answer is NOT_ENOUGH_REPLICAS, as before. A
# verification (v11, part 1) is not asked again.


def partition_leader(open_core: Any, **settings: Any) -> Any:
    """A cluster-mode broker core, node 1, leading ``in-0`` (ISR 1 alone); node 2
    leads ``__transaction_state`` (the coordinator of every transactional id)."""
    core = open_core(node_id=ME, zookeeper_connect="127.0.0.1:1", **settings)
    brokers = {n: BrokerRegistration(n, "127.0.0.1", 9090 + n, "PLAINTEXT", None) for n in (1, 2)}
    led = {TRANSACTION_STATE_TOPIC: (2, 1), "in": (1, 2)}
    topics = {t: TopicAssignment(t, uuid.uuid4(), {0: r}) for t, r in led.items()}
    states = {(t, 0): PartitionState(r[0], 1, r[:1], 1, 0) for t, r in led.items()}
    core.broker.cluster.apply(ClusterImage(brokers, 2, 1, topics, states, {}), core.now)
    return core


def produce_txn(core: Any, version: int) -> Parked:
    """A transactional Produce (acks=1) of one record to ``in-0``, parked while node 2
    is asked (to add the partition from v12 on, to verify it before)."""
    batch = encode_batch(
        [(core.now, b"k", b"v", [])],
        producer_id=7,
        producer_epoch=3,
        base_sequence=0,
        is_transactional=True,
    )
    P = pr.ProduceRequest
    request = P(
        transactional_id="tx",
        acks=1,
        timeout_ms=30_000,
        topic_data=[
            P.TopicProduceData(
                name="in", partition_data=[P.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    parked = core.send(ApiKey.PRODUCE, version, request)
    assert isinstance(parked, Parked), parked
    return parked


def answer_next(core: Any, code: ErrorCode) -> Any:
    """Answer the leader's one question to node 2 with ``code``; the question's batch."""
    verification = core.broker.txn_verification
    [batch] = verification.batches()
    assert batch.node == 2 and batch.questions == (("tx", 7, 3, "in", 0),)
    verification.answered(batch, answer("tx", {("in", 0): code}))
    return batch


def produce_code(core: Any, completion: Any) -> ErrorCode:
    [[part]] = [t.partition_responses for t in core.decode(completion.reply).responses]
    return ErrorCode(part.error_code)


def test_a_produce_v12_is_added_again_once_the_coordinator_has_written_its_markers(
    open_core: Any,
) -> None:
    core = partition_leader(open_core)
    parked = produce_txn(core, 12)
    assert answer_next(core, ErrorCode.CONCURRENT_TRANSACTIONS).version == 5  # adds
    assert core.poll() == [] and core.poll(19) == []
    assert core.broker.txn_verification.batches() == []  # within the 20 ms backoff
    assert core.poll(1) == []  # the backoff is over: asked again
    answer_next(core, ErrorCode.NONE)
    [done] = core.poll()
    assert done.ticket == parked.ticket and produce_code(core, done) is ErrorCode.NONE
    assert core.broker.logs.partition("in", 0).log_end_offset == 1


def test_a_produce_v12_gives_up_after_the_retry_maximum(open_core: Any) -> None:
    core = partition_leader(open_core)
    began = core.now
    parked = produce_txn(core, 12)
    answer_next(core, ErrorCode.CONCURRENT_TRANSACTIONS)
    asked = 1
    while not (done := core.poll()):
        assert core.poll(19) == [] and core.broker.txn_verification.batches() == []
        assert core.poll(1) == []  # asked again
        answer_next(core, ErrorCode.CONCURRENT_TRANSACTIONS)
        asked += 1
    # Asked at 0, 20, 40, 60, 80 and 100 ms: the answer at 100 ms is past the maximum.
    assert (asked, core.now - began) == (6, 100)
    [completion] = done
    assert completion.ticket == parked.ticket
    assert produce_code(core, completion) is ErrorCode.NOT_ENOUGH_REPLICAS
    assert core.broker.logs.partition("in", 0).log_end_offset == 0


def test_a_verification_is_not_asked_again(open_core: Any) -> None:
    """A Produce v11 (transaction version 1: the client added the partition itself)
    whose coordinator is busy is refused at once, as Kafka's leader refuses it."""
    core = partition_leader(open_core)
    parked = produce_txn(core, 11)
    assert answer_next(core, ErrorCode.CONCURRENT_TRANSACTIONS).version == 4  # verify_only
    [done] = core.poll()
    assert done.ticket == parked.ticket
    assert produce_code(core, done) is ErrorCode.NOT_ENOUGH_REPLICAS
    assert core.broker.txn_verification.batches() == []


def test_the_retry_follows_the_broker_settings(open_core: Any) -> None:
    """``add.partitions.to.txn.retry.backoff.max.ms`` 0: never asked again."""
    core = partition_leader(open_core, add_partitions_to_txn_retry_backoff_max_ms=0)
    parked = produce_txn(core, 12)
    answer_next(core, ErrorCode.CONCURRENT_TRANSACTIONS)
    [done] = core.poll()
    assert done.ticket == parked.ticket
    assert produce_code(core, done) is ErrorCode.NOT_ENOUGH_REPLICAS
