"""Transactions and read_committed against an in-process brokerlite (both anyio backends),
and with confluent-kafka (librdkafka) on the other side.

Consumers fetch with ``fetch_max_wait_ms=50`` (:data:`QUICK`): a consumer's close
waits for the fetch the broker holds at the log's end (one request at a time on
a connection, as Kafka answers), 500 ms with the default; no test here is about
that wait.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
from sdk_brokers import fresh, module_broker, set_transaction_version

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.handlers import HANDLERS
from trafka.sdk.admin import NewTopic, open_admin
from trafka.sdk.config import ProducerConfig
from trafka.sdk.consumer import TopicPartition, open_consumer
from trafka.sdk.errors import (
    ApiTimeoutError,
    ConfigError,
    ErrorCode,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from trafka.sdk.group_protocol import CommitFailedError
from trafka.sdk.producer import open_producer
from trafka.sdk.transactions import TxnState

#: Consumer settings: see the module's docstring.
QUICK: dict[str, Any] = {"fetch_max_wait_ms": 50}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "brokerlite-txn", num_partitions=3)


@pytest.fixture(scope="module")
def tv1_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    """A broker whose finalized transaction.version was lowered to 1: producers
    add partitions with AddPartitionsToTxn (version 2 adds them implicitly)."""
    for running in module_broker(tmp_path_factory, "brokerlite-txn-v1"):
        anyio.run(set_transaction_version, running.bootstrap_servers, 1, backend="trio")
        yield running


async def create(bs: str, *topics: tuple[str, int]) -> None:
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(t, n) for t, n in topics])


async def read_all(
    bs: str, topic: str, partitions: int, *, committed: bool
) -> dict[int, list[bytes]]:
    """Every record a consumer hands out from the beginning to the end (LSO / high
    watermark) it finds first; the callers' writers are done. A transaction's
    marker there is never handed out, but the consumer's position passes it: no
    wait for records that will not come."""
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    level = "read_committed" if committed else "read_uncommitted"
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with anyio.fail_after(60):
        async with open_consumer(
            bootstrap_servers=bs, auto_offset_reset="earliest", isolation_level=level, **QUICK
        ) as c:
            c.assign(tps)
            ends = await c.end_offsets(tps)
            while not all([await c.position(tp) >= ends[tp] for tp in tps]):
                got = await c.getmany(timeout_ms=100)
                for tp, recs in got.items():
                    out[tp.partition] += [r.value for r in recs]
    return out


pytestmark = pytest.mark.anyio


def test_config_rules() -> None:
    cfg = ProducerConfig(transactional_id="t")
    assert cfg.idempotent and cfg.transaction_timeout_ms == 60_000
    assert (
        ProducerConfig.from_dict({"transactional.id": "t", "acks": "all"}).transactional_id == "t"
    )
    with pytest.raises(ConfigError, match=r"enable\.idempotence"):
        ProducerConfig(transactional_id="t", enable_idempotence=False)
    with pytest.raises(ConfigError, match="acks"):
        ProducerConfig(transactional_id="t", acks=1)


async def test_commit_and_abort_cycles(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("cycles")
    committed: dict[int, list[bytes]] = {p: [] for p in range(3)}
    everything: dict[int, list[bytes]] = {p: [] for p in range(3)}
    with anyio.fail_after(60):
        await create(bs, (topic, 3))
        async with open_producer(
            bootstrap_servers=bs, transactional_id=fresh("tx"), linger_ms=1
        ) as p:
            assert p.transaction_state is TxnState.UNINITIALIZED
            with pytest.raises(InvalidTxnStateError, match="init_transactions"):
                await p.send(topic, b"too early")
            await p.init_transactions()
            await p.init_transactions()  # once is enough; again is harmless
            for t in range(9):
                values = [(i % 3, b"t%d-%d" % (t, i)) for i in range(30)]
                if t % 3 == 0:  # explicit calls
                    p.begin_transaction()
                    futures = [await p.send(topic, v, partition=q) for q, v in values]
                    await p.commit_transaction()
                    assert all(f.done() and f.exception() is None for f in futures)
                    outcome = "commit"
                elif t % 3 == 1:  # the block, aborted by an error
                    with pytest.raises(ZeroDivisionError):
                        async with p.transaction():
                            for q, v in values:
                                await p.send(topic, v, partition=q)
                            await p.flush()  # written, then aborted
                            _ = 1 / 0
                    outcome = "abort"
                else:  # the block, committed
                    async with p.transaction():
                        for q, v in values:
                            await p.send(topic, v, partition=q)
                    outcome = "commit"
                assert p.transaction_state is TxnState.READY
                for q, v in values:
                    everything[q].append(v)
                    if outcome == "commit":
                        committed[q].append(v)
            # Records not yet sent when the transaction aborts fail, never to be sent.
            p.begin_transaction()
            pending = await p.send(topic, b"never", partition=0)
            await p.abort_transaction()
            with pytest.raises(TransactionAbortedError):
                await pending
            with pytest.raises(InvalidTxnStateError, match="begin_transaction"):
                await p.send(topic, b"outside")
        assert await read_all(bs, topic, 3, committed=True) == committed
        # read_uncommitted sees aborted records too, but never a control record.
        assert await read_all(bs, topic, 3, committed=False) == everything


async def test_read_committed_waits_for_the_open_transaction(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("lso")
    tp = TopicPartition(topic, 0)
    with anyio.fail_after(30):
        await create(bs, (topic, 1))
        async with (
            open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p,
            open_consumer(
                bootstrap_servers=bs,
                auto_offset_reset="earliest",
                isolation_level="read_committed",
                **QUICK,
            ) as c,
        ):
            await p.init_transactions()
            c.assign([tp])
            p.begin_transaction()
            await p.send_and_wait(topic, b"a", partition=0)
            assert await c.getmany(timeout_ms=300) == {}  # open: above the LSO
            assert (await c.end_offsets([tp]))[tp] == 0
            await p.commit_transaction()
            got = await c.getmany(timeout_ms=5000)
            assert [r.value for r in got[tp]] == [b"a"]
            # The position moves past the commit marker once it is fetched.
            p.begin_transaction()
            await p.send_and_wait(topic, b"b", partition=0)
            await p.abort_transaction()
            async with p.transaction():
                await p.send(topic, b"c", partition=0)
            got = await c.getmany(timeout_ms=5000)
            assert [r.value for r in got[tp]] == [b"c"]
            assert [r.offset for r in got[tp]] == [4]  # a, marker, b, marker, c
            while await c.position(tp) < 6:
                assert await c.getmany(timeout_ms=200) == {}


async def test_zombie_is_fenced(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("zombie")
    tid = fresh("tx")
    with anyio.fail_after(30):
        await create(bs, (topic, 1))
        async with open_producer(bootstrap_servers=bs, transactional_id=tid) as old:
            await old.init_transactions()
            old.begin_transaction()
            await old.send_and_wait(topic, b"zombie", partition=0)
            async with open_producer(bootstrap_servers=bs, transactional_id=tid) as new:
                await new.init_transactions()  # fences `old`, aborts its transaction
                async with new.transaction():
                    await new.send(topic, b"fresh", partition=0)
                # Transaction version 2 (a single brokerlite): the zombie's record is
                # refused for its epoch (INVALID_PRODUCER_EPOCH), which dooms the
                # transaction, as Kafka's Java client reads it (KIP-588); ending
                # the transaction is the fence (PRODUCER_FENCED).
                more = await old.send(topic, b"more", partition=0)
                with pytest.raises(KafkaError) as refused:
                    await more
                assert refused.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
                with pytest.raises(TransactionAbortableError):
                    await old.commit_transaction()
                with pytest.raises(ProducerFencedError):
                    await old.abort_transaction()
                assert old.transaction_state is TxnState.FATAL_ERROR
                with pytest.raises(ProducerFencedError):
                    await old.send(topic, b"after", partition=0)
        assert await read_all(bs, topic, 1, committed=True) == {0: [b"fresh"]}


async def test_offsets_commit_with_the_transaction(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    src, group = fresh("src"), fresh("group")
    tp = TopicPartition(src, 0)
    with anyio.fail_after(30):
        await create(bs, (src, 1))
        async with (
            open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p,
            open_consumer(bootstrap_servers=bs, group_id=group) as c,
        ):
            async with p.transaction():
                await p.send_offsets_to_transaction({tp: 5}, c.group_metadata())
                # Held by the transaction: the admin reads the last stable offset
                # (none); a consumer asks for stable offsets (KIP-447, as Java's),
                # and waits until the transaction ends, here past its deadline.
                async with open_admin(bootstrap_servers=bs) as admin:
                    assert await admin.list_consumer_group_offsets(group, [tp]) == {}
                async with open_consumer(
                    bootstrap_servers=bs, group_id=group, default_api_timeout_ms=1000
                ) as waiting:
                    # A partition the transaction holds no offset for answers at once,
                    # and leaves the coordinator's connection open: the held one's
                    # first answer then comes well inside the deadline, on a loaded
                    # machine too (CI: one attempt, cut at 300 ms before any answer).
                    assert await waiting.committed(TopicPartition(fresh("other"), 0)) is None
                    with pytest.raises(ApiTimeoutError) as info:
                        await waiting.committed(tp)
                    assert isinstance(info.value.__cause__, KafkaError)
                    assert info.value.__cause__.code == ErrorCode.UNSTABLE_OFFSET_COMMIT
            assert await c.committed(tp) == 5
            p.begin_transaction()
            await p.send_offsets_to_transaction({tp: 9}, group)  # a bare group id works too
            await p.abort_transaction()
            assert await c.committed(tp) == 5


async def test_stale_generation_cannot_commit_offsets(broker: RunningBroker) -> None:
    """KIP-447: offsets from a consumer generation that a rebalance replaced are refused."""
    bs = broker.bootstrap_servers
    src, group = fresh("src"), fresh("group")
    tp = TopicPartition(src, 0)
    fast: dict[str, Any] = {"heartbeat_interval_ms": 100, **QUICK}  # rebalances noticed quickly
    with anyio.fail_after(60):
        await create(bs, (src, 2))
        async with (
            open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p,
            open_consumer(src, bootstrap_servers=bs, group_id=group, **fast) as first,
        ):
            while not first.assignment():
                await first.getmany(timeout_ms=100)
            stale = first.group_metadata()
            assert stale.generation_id >= 1 and stale.member_id
            async with open_consumer(src, bootstrap_servers=bs, group_id=group, **fast) as second:
                while first.group_metadata().generation_id == stale.generation_id or not (
                    second.assignment()
                ):
                    await first.getmany(timeout_ms=100)
                    await second.getmany(timeout_ms=100)
                with pytest.raises(TransactionAbortableError) as info:
                    async with p.transaction():
                        await p.send_offsets_to_transaction({tp: 1}, stale)
                assert isinstance(info.value.__cause__, CommitFailedError)
                assert p.transaction_state is TxnState.READY  # aborted; the producer goes on
                current = first.group_metadata()
                assert current.generation_id > stale.generation_id
                async with p.transaction():
                    await p.send_offsets_to_transaction({tp: 1}, current)
            assert await first.committed(tp) == 1


async def test_cancelled_transaction_block_aborts(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("cancel")
    with anyio.fail_after(30):
        await create(bs, (topic, 1))
        async with open_producer(
            bootstrap_servers=bs, transactional_id=fresh("tx"), linger_ms=0
        ) as p:
            with anyio.CancelScope() as scope:
                async with p.transaction():
                    await p.send_and_wait(topic, b"cancelled", partition=0)
                    scope.cancel()
                    await anyio.sleep(10)
            assert scope.cancelled_caught
            assert p.transaction_state is TxnState.READY
            async with p.transaction():
                await p.send(topic, b"kept", partition=0)
        assert await read_all(bs, topic, 1, committed=True) == {0: [b"kept"]}


async def test_close_aborts_an_open_transaction(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("close")
    tid = fresh("tx")
    with anyio.fail_after(30):
        await create(bs, (topic, 1))
        async with open_producer(bootstrap_servers=bs, transactional_id=tid) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send_and_wait(topic, b"left open", partition=0)
        async with (
            open_producer(bootstrap_servers=bs, transactional_id=tid) as p,
            p.transaction(),
        ):
            await p.send(topic, b"next", partition=0)
        assert await read_all(bs, topic, 1, committed=True) == {0: [b"next"]}


# -- consume-transform-produce --------------------------------------------------------------


async def _ctp_run(bs: str, src: str, dst: str, group: str, tid: str, n: int) -> bool:
    """One life of the loop; True once every input record's offset is committed."""
    async with open_producer(bootstrap_servers=bs, transactional_id=tid, linger_ms=1) as p:
        await p.init_transactions()  # first: completes whatever the previous life left open
        async with open_consumer(
            src,
            bootstrap_servers=bs,
            group_id=group,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            # Static: each life takes over the previous one's membership at once,
            # rather than waiting out the session of a member cancelled mid-join.
            group_instance_id="ctp-worker",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            **QUICK,
        ) as c:
            while True:
                batch = await c.getmany(timeout_ms=200, max_records=10)
                if not batch:
                    assigned = c.assignment()
                    if assigned:
                        done = [await c.committed(tp) for tp in sorted(assigned)]
                        if sum(off or 0 for off in done) >= n:
                            return True
                    continue
                async with p.transaction():
                    for recs in batch.values():
                        for r in recs:
                            await p.send(dst, b"out-" + r.value, key=r.key)
                    # Written before the offsets: a cancellation from here on leaves
                    # records in the log that must stay invisible (aborted).
                    await p.flush()
                    await p.send_offsets_to_transaction(
                        {tp: recs[-1].offset + 1 for tp, recs in batch.items()},
                        c.group_metadata(),
                    )


@pytest.mark.timeout(180)
async def test_consume_transform_produce_exactly_once_across_cancellations(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    src, dst, group, tid = fresh("in"), fresh("out"), fresh("ctp"), fresh("ctp-tx")
    n = 1000
    rng = random.Random(447)
    with anyio.fail_after(150):
        await create(bs, (src, 3), (dst, 3))
        async with open_producer(bootstrap_servers=bs, linger_ms=2) as feed:
            for i in range(n):
                await feed.send(src, b"%d" % i, key=b"%d" % (i % 17))
        lives = 0
        done = False
        while not done:
            lives += 1
            # The first lives are cut short at a random moment; the last one finishes.
            limit = rng.uniform(0.02, 0.25) if lives <= 8 else 60.0
            with anyio.move_on_after(limit):
                try:
                    done = await _ctp_run(bs, src, dst, group, tid, n)
                except TransactionAbortableError:
                    pass  # e.g. a rebalance fenced the offsets: the next life redoes it
        out = await read_all(bs, dst, 3, committed=True)
        written = await read_all(bs, dst, 3, committed=False)
    values = collections.Counter(v for recs in out.values() for v in recs)
    assert values == collections.Counter(b"out-%d" % i for i in range(n))
    # The cancellations did cut transactions short after their records were written
    # (usually some tens of records): read_uncommitted sees at least everything.
    assert sum(map(len, written.values())) >= n


# -- confluent-kafka on the other side ------------------------------------------------------


def _confluent_read_committed(bs: str, topic: str, partitions: int, count: int) -> list[bytes]:
    import confluent_kafka as ck

    c = ck.Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": fresh("ck"),
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        quiet_until = None
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                if len(out) >= count:
                    quiet_until = quiet_until or time.monotonic() + 1.0
                    if time.monotonic() > quiet_until:
                        break
                continue
            if msg.error():
                continue
            value = msg.value()
            assert value is not None
            out.append(value)
        return out
    finally:
        c.close()


@pytest.mark.timeout(90)
async def test_confluent_read_committed_sees_trafka_commits(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("to-ck")
    committed: list[bytes] = []
    with anyio.fail_after(60):
        await create(bs, (topic, 2))
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p:
            await p.init_transactions()
            for t in range(6):
                values = [b"%d-%d" % (t, i) for i in range(20)]
                p.begin_transaction()
                for i, v in enumerate(values):
                    await p.send(topic, v, partition=i % 2)
                if t % 2:
                    await p.flush()
                    await p.abort_transaction()
                else:
                    await p.commit_transaction()
                    committed += values
        got = await anyio.to_thread.run_sync(
            _confluent_read_committed, bs, topic, 2, len(committed)
        )
    assert sorted(got) == sorted(committed)


def _confluent_transactions(bs: str, topic: str) -> list[bytes]:
    import confluent_kafka as ck

    p = ck.Producer({"bootstrap.servers": bs, "transactional.id": fresh("ck-tx"), "linger.ms": 1})
    p.init_transactions(30)
    committed: list[bytes] = []
    for t in range(6):
        p.begin_transaction()
        values = [b"ck%d-%d" % (t, i) for i in range(25)]
        for i, v in enumerate(values):
            p.produce(topic, v, partition=i % 2)
        if t % 2:
            p.flush(30)
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            committed += values
    return committed


@pytest.mark.timeout(90)
async def test_trafka_read_committed_on_confluent_transactions(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("from-ck")
    with anyio.fail_after(60):
        await create(bs, (topic, 2))
        committed = await anyio.to_thread.run_sync(_confluent_transactions, bs, topic)
        got = await read_all(bs, topic, 2, committed=True)
        everything = await read_all(bs, topic, 2, committed=False)
    # Each value's partition is its index within its transaction, modulo 2.
    assert got == {q: [v for v in committed if int(v.split(b"-")[1]) % 2 == q] for q in range(2)}
    assert sum(map(len, everything.values())) == 6 * 25


async def test_keyless_records_in_commit_and_abort_cycles(broker: RunningBroker) -> None:
    """Key-less bytes records take send()'s hot path (the sticky batch); it must
    honour the transaction state exactly like the general path."""
    bs = broker.bootstrap_servers
    topic = fresh("hot")
    committed: list[bytes] = []
    with anyio.fail_after(60):
        await create(bs, (topic, 1))
        async with open_producer(
            bootstrap_servers=bs, transactional_id=fresh("tx"), linger_ms=50
        ) as p:
            await p.init_transactions()
            for t in range(6):
                p.begin_transaction()
                values = [b"t%d-%d" % (t, i) for i in range(200)]
                for v in values:
                    await p.send(topic, v)
                assert p.core._sticky_batches, "key-less records must use the hot path"
                if t % 2:
                    await p.abort_transaction()
                else:
                    await p.commit_transaction()
                    committed += values
                # The sticky batch may still be cached: no state but an open
                # transaction may append to it.
                with pytest.raises(InvalidTxnStateError, match="begin_transaction"):
                    await p.send(topic, b"outside")
    assert (await read_all(bs, topic, 1, committed=True))[0] == committed


async def test_a_full_batch_of_a_transaction_leaves_when_the_next_one_opens(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tight loop of sends must not keep a transaction's full batches back until
    commit: opening a new batch takes the coordinator's answer and writes the
    batches that are ready, without waiting for the reader and sender tasks to run."""
    bs = broker.bootstrap_servers
    topic = fresh("early")
    with anyio.fail_after(60):
        await create(bs, (topic, 1))
        async with open_producer(
            bootstrap_servers=bs, transactional_id=fresh("tx"), batch_size=2048, linger_ms=60_000
        ) as p:
            await p.init_transactions()
            p.begin_transaction()  # one transaction first: the leader's connection is up
            await p.send(topic, b"warm-up", partition=0)
            await p.commit_transaction()
            p.begin_transaction()
            first = await p.send(topic, b"x" * 100, partition=0)  # (v1: AddPartitionsToTxn goes)
            # Its answer (if any: on transaction version 2 nothing is asked) arrives
            # while no task of ours runs, however long that takes.
            for conn in [c for c in p._cluster._conns.values() if c.in_flight]:
                select.select([conn.fileno], [], [], 30)

            async def no_yield() -> None:
                return None

            # No other task gets to run from here on: whatever leaves, send() sent.
            monkeypatch.setattr(anyio.lowlevel, "cancel_shielded_checkpoint", no_yield)
            while True:
                record = await p.send(topic, b"x" * 100, partition=0)
                if record.batch is not first.batch:
                    break
            assert first.batch.in_flight or first.batch.done
            assert not record.batch.in_flight  # the new one waits for linger.ms
            monkeypatch.undo()
            await p.commit_transaction()
    assert len((await read_all(bs, topic, 1, committed=True))[0]) > 2


@pytest.mark.parametrize(
    "call", ["init_transactions", "commit_transaction", "abort_transaction", "send_offsets"]
)
async def test_cancelled_scope_shows_as_cancellation_not_closed(
    broker: RunningBroker, call: str
) -> None:
    """A scope cancelled around the producer ends its tasks; a transaction call made
    in that scope before any checkpoint must leave as the cancellation."""
    bs = broker.bootstrap_servers
    topic = fresh("cancel")
    with anyio.fail_after(30):
        await create(bs, (topic, 1))
        with anyio.CancelScope() as outer:
            async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p:
                await p.init_transactions()
                p.begin_transaction()
                outer.cancel()
                with anyio.CancelScope(shield=True):
                    for _ in range(100):  # let the producer's tasks take the cancellation
                        if p._sender.done:
                            break
                        await anyio.sleep(0.01)
                assert p._sender.done
                if call == "send_offsets":
                    await p.send_offsets_to_transaction({}, "g")
                else:
                    await getattr(p, call)()
                raise AssertionError("the call did not raise")
        assert outer.cancelled_caught


# -- pipelined commits (commit_transaction(wait=False)) ---------------------------------------


async def test_pipelined_commits_deliver_every_transaction(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("pipelined")
    expected: dict[int, list[bytes]] = {p: [] for p in range(3)}
    begun_ahead = 0
    with anyio.fail_after(60):
        await create(bs, (topic, 3))
        async with open_producer(
            bootstrap_servers=bs, transactional_id=fresh("tx"), linger_ms=1
        ) as p:
            await p.init_transactions()
            commits, futures = [], []
            for t in range(20):
                p.begin_transaction()
                begun_ahead += p.transaction_state is TxnState.COMMITTING_TRANSACTION
                for i in range(30):
                    value = b"t%d-%d" % (t, i)
                    futures.append(await p.send(topic, value, partition=i % 3))
                    expected[i % 3].append(value)
                commits.append(await p.commit_transaction(wait=False))
            await commits[-1].wait()
            assert p.transaction_state is TxnState.READY
            for c in commits:
                assert c.done()
                c.result()
            # Each partition's offsets grow in send order (control records between).
            for q in range(3):
                offsets = [f.result().offset for f in futures[q::3]]
                assert offsets == sorted(offsets)
        # Begun while the previous commit was still under way, at least sometimes
        # (it takes two round trips to the broker, 30 appends do not).
        assert begun_ahead > 0
        assert await read_all(bs, topic, 3, committed=True) == expected


async def test_abort_of_a_transaction_begun_ahead(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("pipelined-abort")
    with anyio.fail_after(30):
        await create(bs, (topic, 1))
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send(topic, b"kept", partition=0)
            commit = await p.commit_transaction(wait=False)
            p.begin_transaction()
            assert p.transaction_state is TxnState.COMMITTING_TRANSACTION  # begun ahead
            doomed = [await p.send(topic, b"dropped-%d" % i, partition=0) for i in range(5)]
            await p.abort_transaction()
            for f in doomed:
                with pytest.raises(TransactionAbortedError):
                    await f
            await commit.wait()
            async with p.transaction():
                await p.send(topic, b"after", partition=0)
        assert await read_all(bs, topic, 1, committed=True) == {0: [b"kept", b"after"]}
        # The aborted records never reached the broker.
        assert await read_all(bs, topic, 1, committed=False) == {0: [b"kept", b"after"]}


async def test_a_fenced_commit_fails_the_transaction_begun_ahead(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, tid = fresh("pipelined-fenced"), fresh("tx")
    with anyio.fail_after(30):
        await create(bs, (topic, 1))
        async with open_producer(bootstrap_servers=bs, transactional_id=tid) as old:
            await old.init_transactions()
            old.begin_transaction()
            await old.send_and_wait(topic, b"zombie", partition=0)
            async with open_producer(bootstrap_servers=bs, transactional_id=tid) as new:
                await new.init_transactions()  # fences old, aborting its transaction
                commit = await old.commit_transaction(wait=False)
                old.begin_transaction()
                ahead = await old.send(topic, b"zombie-ahead", partition=0)
                with pytest.raises(ProducerFencedError):
                    await commit.wait()
                with pytest.raises(ProducerFencedError):
                    await ahead
                with pytest.raises(ProducerFencedError):
                    await old.commit_transaction()
                async with new.transaction():
                    await new.send(topic, b"new", partition=0)
        assert await read_all(bs, topic, 1, committed=True) == {0: [b"new"]}


async def test_pipelined_commits_with_the_blocking_producer(broker: RunningBroker) -> None:
    from trafka.sdk.blocking import Producer as BlockingProducer

    bs = broker.bootstrap_servers
    topic = fresh("pipelined-blocking")
    expected = [b"t%d-%d" % (t, i) for t in range(10) for i in range(50)]

    def run() -> None:
        with BlockingProducer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p:
            p.init_transactions()
            commits = []
            values = iter(expected)
            for _ in range(10):
                p.begin_transaction()
                for _ in range(50):
                    p.send(topic, next(values), partition=0)
                commits.append(p.commit_transaction(wait=False))
            commits[-1].wait()
            for c in commits:
                assert c.done()
                c.result()

    with anyio.fail_after(60):
        await create(bs, (topic, 1))
        await anyio.to_thread.run_sync(run)
        assert await read_all(bs, topic, 1, committed=True) == {0: expected}


async def test_a_transaction_begun_ahead_is_aborted_by_its_block_and_by_close(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("pipelined-close")
    with anyio.fail_after(30):
        await create(bs, (topic, 1))
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send(topic, b"first", partition=0)
            await p.commit_transaction(wait=False)
            with pytest.raises(ZeroDivisionError):
                async with p.transaction():  # begun ahead of that commit
                    await p.send(topic, b"block", partition=0)
                    _ = 1 / 0
            assert p.transaction_state is TxnState.READY  # first committed, block aborted
            p.begin_transaction()
            await p.send(topic, b"second", partition=0)
            await p.commit_transaction(wait=False)
            p.begin_transaction()
            await p.send(topic, b"left open", partition=0)
        # Closing aborts the transaction left open and completes the commit before it.
        assert await read_all(bs, topic, 1, committed=True) == {0: [b"first", b"second"]}


async def test_a_batch_begun_ahead_opens_without_a_yield_but_not_for_long(
    broker: RunningBroker,
) -> None:
    """send() yields when it opens a batch (the sender gets to run), except for a
    batch of a transaction begun ahead of a commit, which cannot leave before the
    commit ends; even then it yields again once 10 ms have gone by."""
    bs = broker.bootstrap_servers
    topic = fresh("pipelined-yield")
    expected = [b"t%d-%d" % (t, i) for t in range(300) for i in range(100)]
    with anyio.fail_after(60):
        await create(bs, (topic, 1))
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p:
            await p.init_transactions()
            yielded = skipped = 0
            batch_opened, poll = p._sender.batch_opened, p._window_poll

            def counting_batch_opened() -> None:
                nonlocal yielded
                yielded += 1
                batch_opened()

            def counting_poll() -> None:
                nonlocal skipped
                # A poll at a batch's first record: its opening skipped the yield.
                skipped += len(p.core._sticky_batches[topic].records) == 1
                poll()

            p._sender.batch_opened = counting_batch_opened  # type: ignore[method-assign]
            p._window_poll = counting_poll  # type: ignore[method-assign]
            values = iter(expected)
            commits = []
            opened = 0  # batches, counted from the futures: a batch's first record is 0
            for _ in range(300):
                p.begin_transaction()
                for _ in range(100):
                    opened += (await p.send(topic, next(values))).index == 0
                commits.append(await p.commit_transaction(wait=False))
            await commits[-1].wait()
            for c in commits:
                c.result()
        assert skipped > 0
        # Each opening either yielded or skipped the yield. A transaction fills one
        # batch, or two when its commit ahead ends meanwhile and the poll sends the
        # first (which depends on the machine's pace).
        assert yielded + skipped == opened
        assert 300 <= opened < 600
        # Without the bound, only the first batch (and one opened after its commit
        # had ended) would yield; 300 commits take two round trips each, well
        # over 30 ms.
        assert yielded >= 3
        assert await read_all(bs, topic, 1, committed=True) == {0: expected}


async def test_pipelined_commits_on_the_fast_paths(broker: RunningBroker) -> None:
    # Key-less bytes records: send()'s inline path and try_send(), which append
    # to the batch a transaction begun ahead is filling while the commit runs.
    bs = broker.bootstrap_servers
    topic = fresh("pipelined-fast")
    expected = [b"t%d-%d" % (t, i) for t in range(12) for i in range(400)]
    with anyio.fail_after(60):
        await create(bs, (topic, 1))
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p:
            await p.init_transactions()
            polls = 0
            poll = p._window_poll

            def counting_poll() -> None:
                nonlocal polls
                polls += 1
                poll()

            p._window_poll = counting_poll  # type: ignore[method-assign]
            values = iter(expected)
            commits = []
            for t in range(12):
                p.begin_transaction()
                for _ in range(400):
                    value = next(values)
                    if t % 2:
                        p.try_send(topic, value) or await p.send(topic, value)
                    else:
                        await p.send(topic, value)
                commits.append(await p.commit_transaction(wait=False))
            await commits[-1].wait()
            for c in commits:
                c.result()
            # A commit takes round trips: records were appended while one ran
            # (every 16th of a batch begun ahead polls for the commit's answers).
            assert polls > 0
        assert await read_all(bs, topic, 1, committed=True) == {0: expected}


async def test_a_commits_batches_leave_when_a_reader_takes_the_join_answer(
    tv1_broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Transaction version 1 (on version 2 no AddPartitionsToTxn is sent).
    # commit_transaction(wait=False) returns before AddPartitionsToTxn is
    # answered; the sealed batch waits for that answer. Whoever takes it (here
    # the connection itself, as its reader task does while the caller yields
    # once to open a batch of the transaction begun ahead) must send the batch
    # at once: the sender loop would only run at the caller's next yield,
    # often the next commit, a whole transaction later.
    bs = tv1_broker.bootstrap_servers
    topic = fresh("join-answer")
    arrived, release = threading.Event(), threading.Event()
    spec = HANDLERS[24]

    def held(ctx: Any, body: Any) -> Any:  # on the broker's thread
        arrived.set()
        release.wait(30)
        return spec.handle(ctx, body)

    with anyio.fail_after(60):
        await create(bs, (topic, 1))
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p:
            await p.init_transactions()
            p.begin_transaction()  # the connections in place
            await p.send(topic, b"first")
            await p.commit_transaction()
            monkeypatch.setitem(HANDLERS, 24, dataclasses.replace(spec, handle=held))
            try:
                p.begin_transaction()
                await p.send(topic, b"joined late")
                while not arrived.is_set():  # AddPartitionsToTxn is at the broker
                    await anyio.sleep(0.001)
                commit = await p.commit_transaction(wait=False)
                assert not commit.done() and not any(p._sender._node_in_flight.values())
                node = p._txn.coordinator
                assert node is not None
                conn = p._cluster.ready_coordinator_connection(node[0])
                assert conn is not None
                release.set()
                # No yield from here on: no sender loop, no reader task.
                select.select([conn.fileno], [], [], 30)
                assert conn.receive_ready()
                assert sum(p._sender._node_in_flight.values()) == 1  # the Produce went out
            finally:
                release.set()
            await commit.wait()
            commit.result()
        assert await read_all(bs, topic, 1, committed=True) == {0: [b"first", b"joined late"]}


async def test_answers_are_polled_on_the_watched_sockets_across_a_reconnect(
    broker: RunningBroker,
) -> None:
    # The producer checks the sockets its requests went out on with one poll()
    # (not a failing recv each). A closed connection's descriptor leaves that
    # watch (the number may be another socket's by then); its successor joins.
    bs = broker.bootstrap_servers
    topic = fresh("watched")
    expected = [b"t%d-%d" % (t, i) for t in range(16) for i in range(300)]
    with anyio.fail_after(60):
        await create(bs, (topic, 1))
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p:
            await p.init_transactions()
            assert p._sender._poller is not None
            values = iter(expected)
            commits = []
            closed = None
            for t in range(16):
                p.begin_transaction()
                for _ in range(300):
                    await p.send(topic, next(values))
                commits.append(await p.commit_transaction(wait=False))
                if t == 7:  # drop the coordinator's connection, mid-commit
                    node = p._txn.coordinator
                    assert node is not None
                    closed = p._cluster.ready_coordinator_connection(node[0])
                    assert closed is not None and closed in p._sender._watched.values()
                    await closed.aclose()
                    # Another socket, readable, most likely under the number the
                    # closed one had: the next connection gets a new one.
                    squatter, peer = socket.socketpair()
                    peer.send(b"not Kafka")
            await commits[-1].wait()
            for c in commits:
                c.result()
            p._sender.take_answers()  # a poll: the squatter's readiness, nothing read from it
            assert squatter.recv(100) == b"not Kafka"
            squatter.close()
            peer.close()
            watched = list(p._sender._watched.values())
            assert closed not in watched
            assert all(conn.alive and conn.fileno >= 0 for conn in watched)
            coordinator = p._cluster.ready_coordinator_connection(node[0])
            assert coordinator is not None and coordinator is not closed
            assert coordinator in watched
        assert await read_all(bs, topic, 1, committed=True) == {0: expected}


async def test_a_doomed_transaction_refuses_records_on_the_fast_paths(
    broker: RunningBroker,
) -> None:
    # send()'s inline path and try_send() append to the batch they keep at hand
    # without asking the transaction; the moment it takes no more records they
    # must forget that batch, so the record is refused, not added to a doomed one.
    bs = broker.bootstrap_servers
    topic = fresh("doomed-fast")
    with anyio.fail_after(60):
        await create(bs, (topic, 1))
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send(topic, b"first")  # opens the batch the fast paths fill
            assert p.try_send(topic, b"second") is not None
            p._txn._abortable(RuntimeError("injected"))
            assert p.try_send(topic, b"third") is None
            with pytest.raises(TransactionAbortableError):
                await p.send(topic, b"third")
            await p.abort_transaction()
            p.begin_transaction()
            await p.send(topic, b"kept")
            assert p.try_send(topic, b"kept too") is not None
            await p.commit_transaction()
        assert await read_all(bs, topic, 1, committed=True) == {0: [b"kept", b"kept too"]}
