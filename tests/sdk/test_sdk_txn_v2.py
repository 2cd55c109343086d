"""The transactional producer on transaction version 2 (KIP-890 part 2), sans-IO
and against brokerlite (a single node finalizes ``transaction.version`` 2, as a
new Kafka 4.x cluster does).

What Kafka defines and these tests check (KIP-890, "Transactions Server-Side
Defense", part 2; Kafka's Java client, ``TransactionManager``):

* The client follows version 2 when the finalized ``transaction.version`` (the
  ApiVersions finalized features of the newest epoch any broker reported) is 2
  or more, read once ``initTransactions`` got its producer id and again as each
  commit or abort begins; the ending transaction keeps its own flow.
* Version 2: no AddPartitionsToTxn (the partition's leader adds it on Produce
  v12+), no AddOffsetsToTxn (TxnOffsetCommit v5 to the group coordinator), and
  EndTxn v5, whose answer carries the producer id and the epoch bumped for the
  next transaction (every commit and abort bumps it), so no client-side bump
  after a sequence gap.
* Moving up to version 2 between transactions bumps the epoch once
  (InitProducerId with the current id and epoch) after the EndTxn; moving down
  does not.
* INVALID_PRODUCER_EPOCH and PRODUCER_FENCED from EndTxn are both the fence;
  TRANSACTION_ABORTABLE dooms the transaction only; CONCURRENT_TRANSACTIONS is
  retried.
* A read_committed consumer sees exactly the committed records; a zombie of an
  older epoch is fenced; offsets sent with the transaction are committed with
  it. Below level 2 (UpdateFeatures lowered it) the client keeps the version 1
  flow: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn v4, Produce v11.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from sdk_brokers import fresh, module_broker, set_transaction_version

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k22_init_producer_id as ipid
from trafka.codec.messages import k24_add_partitions_to_txn as apt
from trafka.codec.messages import k25_add_offsets_to_txn as aot
from trafka.codec.messages import k26_end_txn as et
from trafka.codec.messages import k28_txn_offset_commit as toc
from trafka.sdk.admin import NewTopic, open_admin
from trafka.sdk.connection_state import ConnectionState
from trafka.sdk.consumer import TopicPartition, open_consumer
from trafka.sdk.errors import (
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
)
from trafka.sdk.producer import open_producer
from trafka.sdk.transactions import (
    ConsumerGroupMetadata,
    Kind,
    TransactionManager,
    TxnRequest,
    TxnState,
)

S = TxnState
COORD = (7, "127.0.0.1", 9092)
PRODUCE, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 0, 24, 25, 26, 28


# -- sans-IO ----------------------------------------------------------------------------------


class Features:
    """What the driver reports: ``(epoch, {feature: level})``, changed by tests."""

    def __init__(self, epoch: int, level: int | None) -> None:
        self.set(epoch, level)

    def set(self, epoch: int, level: int | None) -> None:
        self.value = (epoch, {} if level is None else {"transaction.version": level})

    def __call__(self) -> tuple[int, dict[str, int]]:
        return self.value


def ready(features: Features, *, pid: int = 42, epoch: int = 3) -> TransactionManager:
    m = TransactionManager("tx", rng=random.Random(0), retry_backoff=0.1, retry_backoff_max=1.0)
    m.version.features = features
    init = m.init()
    answer(m, step(m), find(COORD))
    req = step(m)
    assert req.kind is Kind.INIT_PRODUCER_ID
    answer(m, req, ipid.InitProducerIdResponse(producer_id=pid, producer_epoch=epoch))
    assert init.done and init.error is None and m.state is S.READY
    return m


def find(where: tuple[int, str, int]) -> Any:
    C = fc.FindCoordinatorResponse.Coordinator
    node, host, port = where
    return fc.FindCoordinatorResponse(coordinators=[C(key="k", node_id=node, host=host, port=port)])


def step(m: TransactionManager, now: float = 0.0, *, pending: bool = False) -> TxnRequest:
    req = m.poll(now, batches_pending=pending)
    assert req is not None, f"no request in state {m.state}"
    return req


def answer(m: TransactionManager, req: TxnRequest, body: Any, now: float = 0.0) -> None:
    m.on_response(req, req.max_version, body, now)


def offsets_ok(*tps: tuple[str, int], code: int = 0) -> Any:
    R = toc.TxnOffsetCommitResponse
    by: dict[str, list[Any]] = {}
    for t, p in tps:
        by.setdefault(t, []).append(
            R.TxnOffsetCommitResponsePartition(partition_index=p, error_code=code)
        )
    return R(topics=[R.TxnOffsetCommitResponseTopic(name=t, partitions=ps) for t, ps in by.items()])


def test_version_2_adds_partitions_and_offsets_implicitly_and_takes_endtxns_epoch() -> None:
    m = ready(Features(1, 2))
    assert m.version.tv2 and m.producer_epoch == 3
    m.begin()
    assert m.txn_tv2
    # A partition is in the transaction at once: no AddPartitionsToTxn is wanted.
    assert m.add_partition("t", 0) is False and m.is_send_allowed("t", 0)
    assert m.poll(0.0, batches_pending=True) is None
    sent = m.send_offsets({TopicPartition("src", 0): 7}, ConsumerGroupMetadata("g", 5, "m"))
    req = step(m, pending=True)  # the group's coordinator, then TxnOffsetCommit
    assert (req.kind, req.key_type, req.key) == (Kind.FIND_COORDINATOR, 0, "g")
    answer(m, req, find((8, "h", 1)))
    req = step(m, pending=True)
    assert (req.kind, req.max_version, req.coordinator) == (Kind.TXN_OFFSET_COMMIT, 5, (8, "h", 1))
    body = req.build(5)
    assert (body.producer_id, body.producer_epoch, body.generation_id_or_member_epoch) == (42, 3, 5)
    answer(m, req, offsets_ok(("src", 0), code=ErrorCode.CONCURRENT_TRANSACTIONS))
    assert not sent.done and m.poll(0.0, batches_pending=True) is None  # backing off
    req = step(m, 10.0, pending=True)
    assert req.kind is Kind.TXN_OFFSET_COMMIT
    answer(m, req, offsets_ok(("src", 0)), 10.0)
    assert sent.done and sent.error is None
    commit = m.begin_commit()
    assert m.poll(10.0, batches_pending=True) is None  # EndTxn waits for the batches
    req = step(m, 10.0)
    assert (req.kind, req.max_version, req.build(5).committed) == (Kind.END_TXN, 5, True)
    answer(m, req, et.EndTxnResponse(producer_id=42, producer_epoch=4), 10.0)
    assert commit.done and commit.error is None
    assert (m.state, m.producer_id, m.producer_epoch, m.transactions_committed) == (
        S.READY,
        42,
        4,
        1,
    )
    # An exhausted epoch comes back as a new producer id: taken as it is.
    m.begin()
    m.add_partition("t", 0)
    abort = m.begin_abort()
    answer(m, step(m), et.EndTxnResponse(producer_id=77, producer_epoch=0))
    assert abort.done and (m.state, m.producer_id, m.producer_epoch) == (S.READY, 77, 0)


@pytest.mark.parametrize("level", [None, 0, 1])
def test_below_version_2_the_version_1_flow(level: int | None) -> None:
    m = ready(Features(1, level))
    assert not m.version.tv2
    m.begin()
    assert m.add_partition("t", 0) is True and not m.is_send_allowed("t", 0)
    req = step(m, pending=True)
    assert (req.kind, req.max_version) == (Kind.ADD_PARTITIONS, 3)
    R = apt.AddPartitionsToTxnResponse
    result = R.AddPartitionsToTxnPartitionResult(partition_index=0, partition_error_code=0)
    answer(
        m,
        req,
        R(
            results_by_topic_v3_and_below=[
                R.AddPartitionsToTxnTopicResult(name="t", results_by_partition=[result])
            ]
        ),
    )
    assert m.is_send_allowed("t", 0)
    sent = m.send_offsets({TopicPartition("src", 0): 7}, ConsumerGroupMetadata("g"))
    req = step(m, pending=True)
    assert (req.kind, req.max_version) == (Kind.ADD_OFFSETS, 4)
    answer(m, req, aot.AddOffsetsToTxnResponse())
    answer(m, step(m, pending=True), find((8, "h", 1)))
    req = step(m, pending=True)
    assert (req.kind, req.max_version) == (Kind.TXN_OFFSET_COMMIT, 4)
    answer(m, req, offsets_ok(("src", 0)))
    assert sent.done and sent.error is None
    commit = m.begin_commit()
    req = step(m)
    assert (req.kind, req.max_version) == (Kind.END_TXN, 4)
    answer(m, req, et.EndTxnResponse())  # (v4 has no producer id: -1)
    assert commit.done and m.state is S.READY and m.producer_epoch == 3


def test_an_empty_transaction_sends_nothing() -> None:
    m = ready(Features(1, 2))
    m.begin()
    commit = m.begin_commit()
    assert m.poll(0.0, batches_pending=False) is None
    assert commit.done and m.state is S.READY and m.producer_epoch == 3


def test_a_sequence_gap_needs_no_bump_of_the_clients_own() -> None:
    m = ready(Features(1, 2))
    m.begin()
    m.add_partition("t", 0)
    m.on_batch_failed(KafkaError(ErrorCode.TRANSACTION_ABORTABLE), sequenced=True)
    assert m.state is S.ABORTABLE_ERROR
    assert isinstance(m.last_error, TransactionAbortableError)
    abort = m.begin_abort()
    req = step(m)
    assert (req.kind, req.build(5).committed) == (Kind.END_TXN, False)
    answer(m, req, et.EndTxnResponse(producer_id=42, producer_epoch=4))
    # The abort's EndTxn bumped the epoch: no InitProducerId follows.
    assert abort.done and m.state is S.READY and m.producer_epoch == 4
    assert m.poll(0.0, batches_pending=False) is None


@pytest.mark.parametrize("tv2", [True, False])
def test_a_batch_refused_for_its_epoch(tv2: bool) -> None:
    # Version 2 reads it as Java's client does (abortable, KIP-588); version 1
    # keeps it fatal. PRODUCER_FENCED is fatal in both.
    m = ready(Features(1, 2 if tv2 else 1))
    m.begin()
    m.add_partition("t", 0)
    m.on_batch_failed(KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH), sequenced=True)
    assert m.state is (S.ABORTABLE_ERROR if tv2 else S.FATAL_ERROR)
    m.on_batch_failed(KafkaError(ErrorCode.PRODUCER_FENCED), sequenced=True)
    assert m.state is S.FATAL_ERROR and isinstance(m.fatal_error, ProducerFencedError)


def test_moving_down_switches_the_next_transaction_without_a_bump() -> None:
    features = Features(1, 2)
    m = ready(features)
    m.begin()
    m.add_partition("t", 0)
    features.set(2, 1)
    m.begin_commit()
    req = step(m)
    assert (req.kind, req.max_version) == (Kind.END_TXN, 5)  # the ending one's flow
    answer(m, req, et.EndTxnResponse(producer_id=42, producer_epoch=4))
    assert m.state is S.READY and m.poll(0.0, batches_pending=False) is None
    m.begin()
    assert not m.txn_tv2 and m.add_partition("t", 0) is True
    assert step(m).kind is Kind.ADD_PARTITIONS


def test_a_reading_of_no_newer_epoch_changes_nothing() -> None:
    features = Features(3, 2)
    m = ready(features)
    for epoch, level in [(3, 1), (2, 0)]:
        features.set(epoch, level)
        m.begin()
        m.add_partition("t", 0)
        m.begin_commit()
        answer(m, step(m), et.EndTxnResponse(producer_id=42, producer_epoch=m.producer_epoch + 1))
        assert m.version.tv2 and m.state is S.READY


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH])
def test_endtxn_fenced(code: int) -> None:
    m = ready(Features(1, 2))
    m.begin()
    m.add_partition("t", 0)
    commit = m.begin_commit()
    answer(m, step(m), et.EndTxnResponse(error_code=code))
    assert m.state is S.FATAL_ERROR and isinstance(commit.error, ProducerFencedError)


def test_an_abort_refused_as_invalid_txn_state_is_fatal() -> None:
    # Version 1 reads it as an abort of a transaction the coordinator never saw
    # begin (an AddPartitionsToTxn whose answer was lost); version 2 has no
    # such case (an abort of an empty transaction is accepted), as Java's
    # EndTxnHandler: fatal.
    m = ready(Features(1, 2))
    m.begin()
    m.add_partition("t", 0)
    abort = m.begin_abort()
    answer(m, step(m), et.EndTxnResponse(error_code=ErrorCode.INVALID_TXN_STATE))
    assert m.state is S.FATAL_ERROR and isinstance(abort.error, TransactionFatalError)


def test_a_commit_the_coordinator_had_aborted_is_fatal_and_says_why() -> None:
    """Kafka 4.4 answers a version 2 commit INVALID_TXN_STATE when it aborted the
    transaction already, fenced (KIP-664's fenceProducers) or timed out: the
    abort kept the producer's epoch as the one before its bump, so the commit
    reads as a retry of it with the other outcome (test_differential_kafka4.py).
    Fatal, as Java's EndTxnHandler makes it; the error says what happened."""
    m = ready(Features(1, 2))
    m.begin()
    m.add_partition("t", 0)
    commit = m.begin_commit()
    answer(m, step(m), et.EndTxnResponse(error_code=ErrorCode.INVALID_TXN_STATE))
    assert m.state is S.FATAL_ERROR
    error = commit.error
    assert isinstance(error, TransactionFatalError)
    assert not isinstance(error, ProducerFencedError)
    assert error.code == ErrorCode.INVALID_TXN_STATE
    assert "already aborted" in str(error) and "fenced" in str(error) and "'tx'" in str(error)


def test_endtxn_abortable_and_concurrent_transactions() -> None:
    m = ready(Features(1, 2))
    m.begin()
    m.add_partition("t", 0)
    commit = m.begin_commit()
    answer(m, step(m), et.EndTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS))
    assert not commit.done and m.state is S.COMMITTING_TRANSACTION
    answer(m, step(m, 10.0), et.EndTxnResponse(error_code=ErrorCode.TRANSACTION_ABORTABLE))
    assert m.state is S.ABORTABLE_ERROR and isinstance(commit.error, TransactionAbortableError)


# -- against brokerlite -----------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "brokerlite-tv2")


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(api_key, api_version) of every request header the clients frame."""
    sent: list[tuple[int, int]] = []
    framed = ConnectionState.send_request_parts

    def spy(self: ConnectionState, api_key: int, body: Any, **kwargs: Any) -> Any:
        corr, parts = framed(self, api_key, body, **kwargs)
        sent.append(struct.unpack(">hh", b"".join(parts)[4:8]))
        return corr, parts

    monkeypatch.setattr(ConnectionState, "send_request_parts", spy)
    return sent


def versions(sent: list[tuple[int, int]], key: int) -> set[int]:
    return {v for k, v in sent if k == key}


async def read_committed(bs: str, tps: list[TopicPartition]) -> list[bytes]:
    got: list[bytes] = []
    async with open_consumer(
        bootstrap_servers=bs, auto_offset_reset="earliest", isolation_level="read_committed"
    ) as c:
        c.assign(tps)
        ends = await c.end_offsets(tps)
        while any([await c.position(tp) < ends[tp] for tp in tps]):
            for recs in (await c.getmany(timeout_ms=200)).values():
                got += [r.value for r in recs]
    return sorted(got)


async def cycles(bs: str, topic: str, src: str, group: str) -> list[tuple[int, int]]:
    """Commit (with offsets), abort (with offsets), commit; the producer's id and
    epoch after init and after each end."""
    src_tp = TopicPartition(src, 0)
    async with (
        open_producer(bootstrap_servers=bs, transactional_id=fresh("tid"), linger_ms=1) as p,
        open_consumer(bootstrap_servers=bs, group_id=group) as c,
        open_admin(bootstrap_servers=bs) as admin,
    ):
        await p.init_transactions()
        ids = [(p._txn.producer_id, p._txn.producer_epoch)]
        async with p.transaction():
            for i in range(4):
                await p.send(topic, b"c1-%d" % i, partition=i % 2)
            await p.send_offsets_to_transaction({src_tp: 5}, c.group_metadata())
        ids.append((p._txn.producer_id, p._txn.producer_epoch))
        assert await c.committed(src_tp) == 5
        p.begin_transaction()
        for i in range(4):
            await p.send(topic, b"a2-%d" % i, partition=i % 2)
        await p.flush()
        await p.send_offsets_to_transaction({src_tp: 9}, c.group_metadata())
        await p.abort_transaction()
        ids.append((p._txn.producer_id, p._txn.producer_epoch))
        assert await c.committed(src_tp) == 5
        async with p.transaction():
            await p.send(topic, b"c3", partition=1)
        ids.append((p._txn.producer_id, p._txn.producer_epoch))
        # The partition's leader knows the producer at the epoch of its last
        # write: the commit's marker, with the epoch the EndTxn bumped to.
        (state,) = (await admin.describe_producers([TopicPartition(topic, 1)]))[
            TopicPartition(topic, 1)
        ]
        assert (state.producer_id, state.producer_epoch) == ids[3]
    return ids


@pytest.mark.anyio
async def test_version_2_commits_aborts_and_offsets(
    broker: RunningBroker, wire: list[tuple[int, int]]
) -> None:
    bs, topic, src = broker.bootstrap_servers, fresh("tv2"), fresh("tv2-src")
    with anyio.fail_after(60):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 2), NewTopic(src, 1)])
            features = await admin.describe_features()
        assert features.finalized["transaction.version"][1] == 2
        ids = await cycles(bs, topic, src, fresh("g"))
        # Every EndTxn bumped the epoch; the id stayed.
        pid, epoch = ids[0]
        assert ids == [(pid, epoch + n) for n in range(4)]
        got = await read_committed(bs, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    assert got == sorted([b"c1-%d" % i for i in range(4)] + [b"c3"])
    assert versions(wire, ADD_PARTITIONS) == versions(wire, ADD_OFFSETS) == set()
    assert versions(wire, END_TXN) == versions(wire, TXN_OFFSET_COMMIT) == {5}
    # v13 names topics by id (KIP-516) and adds partitions as v12 does.
    assert versions(wire, PRODUCE) == {13}


@pytest.mark.anyio
async def test_version_2_zombie_is_fenced(broker: RunningBroker) -> None:
    bs, topic, tid = broker.bootstrap_servers, fresh("tv2-fence"), fresh("tid")
    tp = TopicPartition(topic, 0)
    with anyio.fail_after(60):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
        async with open_producer(bootstrap_servers=bs, transactional_id=tid) as old:
            await old.init_transactions()
            async with old.transaction():  # the epoch moves on with each transaction
                await old.send(topic, b"first", partition=0)
            old.begin_transaction()
            await old.send_and_wait(topic, b"zombie", partition=0)
            async with open_producer(bootstrap_servers=bs, transactional_id=tid) as new:
                await new.init_transactions()  # fences old, aborting its transaction
                assert new._txn.producer_epoch > old._txn.producer_epoch
                async with new.transaction():
                    await new.send(topic, b"fresh", partition=0)
                with pytest.raises(ProducerFencedError):
                    await old.commit_transaction()
                assert old.transaction_state is S.FATAL_ERROR
        assert await read_committed(bs, [tp]) == [b"first", b"fresh"]


@pytest.mark.anyio
async def test_version_2_commit_after_an_admin_fence(broker: RunningBroker) -> None:
    """An admin fences the producer mid-transaction (fence_producers, KIP-664,
    which retries until the id has its next epoch, as Kafka's Admin): the
    producer's commit is PRODUCER_FENCED, and so would its abort be. Nothing of
    the transaction is read committed."""
    bs, topic, tid = broker.bootstrap_servers, fresh("tv2-admin-fence"), fresh("tid")
    tp = TopicPartition(topic, 0)
    with anyio.fail_after(60):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
            async with open_producer(bootstrap_servers=bs, transactional_id=tid) as p:
                await p.init_transactions()
                p.begin_transaction()
                await p.send_and_wait(topic, b"fenced", partition=0)
                await admin.fence_producers([tid])
                with pytest.raises(ProducerFencedError):
                    await p.commit_transaction()
                assert p.transaction_state is S.FATAL_ERROR
        assert await read_committed(bs, [tp]) == []


@pytest.mark.anyio
async def test_version_2_commit_after_a_timeout(broker: RunningBroker) -> None:
    """The coordinator aborts a transaction open past ``transaction.timeout.ms``
    (1 s here; the test waits until DescribeTransactions says CompleteAbort):
    the producer's commit is then INVALID_TXN_STATE, as Kafka 4.4 answers (the
    abort kept the producer's epoch as the one before its bump): fatal, with an
    error that says the transaction timed out or was fenced."""
    bs, topic, tid = broker.bootstrap_servers, fresh("tv2-timeout"), fresh("tid")
    tp = TopicPartition(topic, 0)
    with anyio.fail_after(60):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
            async with open_producer(
                bootstrap_servers=bs, transactional_id=tid, transaction_timeout_ms=1000
            ) as p:
                await p.init_transactions()
                p.begin_transaction()
                await p.send_and_wait(topic, b"timed out", partition=0)
                while (await admin.describe_transactions([tid]))[tid].state != "CompleteAbort":
                    await anyio.sleep(0.1)
                with pytest.raises(TransactionFatalError) as raised:
                    await p.commit_transaction()
                assert raised.value.code == ErrorCode.INVALID_TXN_STATE
                assert "timed out" in str(raised.value)
                assert p.transaction_state is S.FATAL_ERROR
        assert await read_committed(bs, [tp]) == []


@pytest.mark.anyio
async def test_version_2_abort_after_a_timeout_carries_on(broker: RunningBroker) -> None:
    """After the coordinator aborted a timed-out transaction, the producer's own
    abort repeats that abort (NONE, with the epoch after it, as Kafka 4.4
    answers): the producer carries on, and its next transaction commits (within
    the 3 s timeout)."""
    bs, topic, tid = broker.bootstrap_servers, fresh("tv2-timeout-abort"), fresh("tid")
    tp = TopicPartition(topic, 0)
    with anyio.fail_after(60):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
            async with open_producer(
                bootstrap_servers=bs, transactional_id=tid, transaction_timeout_ms=3000
            ) as p:
                await p.init_transactions()
                epoch = p._txn.producer_epoch
                p.begin_transaction()
                await p.send_and_wait(topic, b"timed out", partition=0)
                while (await admin.describe_transactions([tid]))[tid].state != "CompleteAbort":
                    await anyio.sleep(0.1)
                await p.abort_transaction()
                assert p._txn.producer_epoch == epoch + 1
                async with p.transaction():
                    await p.send(topic, b"next", partition=0)
        assert await read_committed(bs, [tp]) == [b"next"]


@pytest.fixture
def tv1_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    """A broker whose finalized transaction.version was lowered to 1."""
    for running in module_broker(tmp_path_factory, "brokerlite-tv1"):
        anyio.run(set_transaction_version, running.bootstrap_servers, 1, backend="trio")
        yield running


@pytest.mark.anyio
async def test_below_version_2_the_version_1_flow_on_the_wire(
    tv1_broker: RunningBroker, wire: list[tuple[int, int]]
) -> None:
    bs, topic, src = tv1_broker.bootstrap_servers, fresh("tv1"), fresh("tv1-src")
    with anyio.fail_after(60):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 2), NewTopic(src, 1)])
        del wire[:]
        ids = await cycles(bs, topic, src, fresh("g"))
        got = await read_committed(bs, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    assert ids == [ids[0]] * 4  # version 1: the epoch stays
    assert got == sorted([b"c1-%d" % i for i in range(4)] + [b"c3"])
    assert versions(wire, ADD_PARTITIONS) == {3} and versions(wire, ADD_OFFSETS) == {4}
    assert versions(wire, END_TXN) == versions(wire, TXN_OFFSET_COMMIT) == {4}
    assert versions(wire, PRODUCE) == {11}
    # Raised back to 2, a new producer follows version 2 again.
    with anyio.fail_after(60):
        await set_transaction_version(bs, 2)
        del wire[:]
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("t")) as p:
            await p.init_transactions()
            async with p.transaction():
                await p.send(topic, b"v2", partition=0)
    assert versions(wire, END_TXN) == {5} and versions(wire, ADD_PARTITIONS) == set()
