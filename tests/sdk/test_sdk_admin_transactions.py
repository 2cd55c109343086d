"""The admin client's transaction calls (KIP-664, KIP-618) against an in-process
brokerlite: producers and transactions described and listed, producers fenced,
and a hanging transaction found and aborted, through the admin and through
``trafka transactions`` (whose other subcommands are tested in tests/tools)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner, Result
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.brokerlite.broker import TRANSACTIONS_JOURNAL
from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k22_init_producer_id as ipid
from trafka.codec.messages import k24_add_partitions_to_txn as apt
from trafka.codec.records import encode_batch
from trafka.sdk import (
    Admin,
    NewTopic,
    Producer,
    ProducerFencedError,
    TopicPartition,
    open_admin,
    open_consumer,
    open_producer,
)
from trafka.tools.cli import main

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "brokerlite-admin-txn", num_partitions=2)


async def committed_values(bs: str, topic: str) -> list[bytes]:
    """Partition 0 as a read_committed consumer sees it, up to its last stable offset."""
    tp = TopicPartition(topic, 0)
    out: list[bytes] = []
    async with open_consumer(
        bootstrap_servers=bs, auto_offset_reset="earliest", isolation_level="read_committed"
    ) as c:
        c.assign([tp])
        end = (await c.end_offsets([tp]))[tp]
        while await c.position(tp) < end:
            for recs in (await c.getmany(timeout_ms=200)).values():
                out += [r.value for r in recs]
    return out


@asynccontextmanager
async def open_transaction(
    admin: Admin, topic: str, partitions: int, tid: str
) -> AsyncIterator[Producer]:
    """A new topic, and a producer with a transaction open on its partition 0."""
    await admin.create_topics([NewTopic(topic, partitions)])
    bs = admin.config.bootstrap_servers
    async with open_producer(bootstrap_servers=bs, transactional_id=tid) as p:
        await p.init_transactions()
        p.begin_transaction()
        await p.send(topic, b"open", partition=0)
        await p.flush()
        yield p


async def test_an_open_transaction_described_from_both_sides(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, tid = fresh("desc"), fresh("tx")
    with anyio.fail_after(30):
        async with (
            open_admin(bootstrap_servers=bs) as admin,
            open_transaction(admin, topic, 2, tid) as p,
        ):
            began = int(time.time() * 1000)
            states = await admin.describe_producers([(topic, 0), TopicPartition(topic, 1)])
            assert states[TopicPartition(topic, 1)] == []
            (state,) = states[TopicPartition(topic, 0)]
            assert state.current_transaction_start_offset == 0
            assert state.last_sequence == 0 and state.producer_epoch == 0
            assert abs(state.last_timestamp - began) < 10_000

            desc = (await admin.describe_transactions([tid]))[tid]
            assert desc.state == "Ongoing"
            assert desc.producer_id == state.producer_id
            assert desc.topic_partitions == {TopicPartition(topic, 0)}
            assert desc.coordinator_id in admin.cluster.metadata.brokers
            assert desc.transaction_timeout_ms == p.config.transaction_timeout_ms
            assert desc.transaction_start_time_ms is not None

            ongoing = await admin.list_transactions(states=["Ongoing"])
            assert tid in {t.transactional_id for t in ongoing}
            assert {t.state for t in ongoing} == {"Ongoing"}
            (mine,) = await admin.list_transactions(producer_ids=[state.producer_id])
            assert (mine.transactional_id, mine.state) == (tid, "Ongoing")
            assert not await admin.list_transactions(
                producer_ids=[state.producer_id], min_duration_ms=3_600_000
            )
            assert await admin.list_transactions(
                producer_ids=[state.producer_id], min_duration_ms=0
            ) == [mine]
            await p.commit_transaction()

            (state,) = (await admin.describe_producers([(topic, 0)]))[TopicPartition(topic, 0)]
            assert state.current_transaction_start_offset is None
            assert state.coordinator_epoch is not None  # its marker is written
            desc = (await admin.describe_transactions([tid]))[tid]
            assert (desc.state, desc.topic_partitions) == ("CompleteCommit", frozenset())


async def test_what_cannot_be_described_is_an_error(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs) as admin:
            with pytest.raises(KafkaError) as err:
                await admin.describe_transactions([fresh("never-used")])
            assert err.value.code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            with pytest.raises(ValueError, match="Bogus"):
                await admin.list_transactions(states=["Ongoing", "Bogus"])
            with pytest.raises(KafkaError) as err:
                await admin.describe_producers([("no-such-topic", 0)])
            assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_fencing_aborts_the_open_transaction(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, tid = fresh("fence"), fresh("tx")
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs) as admin:
            async with open_transaction(admin, topic, 1, tid) as p:
                before = (await admin.describe_transactions([tid]))[tid]
                await admin.fence_producers([tid])
                # As Kafka's Admin, the fence retries CONCURRENT_TRANSACTIONS
                # (the abort) until the id has its next epoch: one bump for the
                # abort, one for the fence (Kafka 4.4's answers in
                # tests/brokerlite/test_differential_kafka4.py).
                after = (await admin.describe_transactions([tid]))[tid]
                assert after.producer_epoch == before.producer_epoch + 2
                assert after.state == "Empty"
                with pytest.raises(ProducerFencedError):
                    await p.commit_transaction()
            assert await committed_values(bs, topic) == []
            # An id no producer used yet: fencing registers it, and a producer
            # that starts afterwards is not affected.
            unused = fresh("tx")
            await admin.fence_producers([unused])
            async with open_producer(bootstrap_servers=bs, transactional_id=unused) as p:
                await p.init_transactions()
                p.begin_transaction()
                await p.send(topic, b"later", partition=0)
                await p.commit_transaction()
            assert await committed_values(bs, topic) == [b"later"]


async def leave_open(bs: str, topic: str, tid: str) -> None:
    """Leave a transaction of ``tid`` open on partition 0 of a new ``topic``: the
    requests of a transactional producer up to its first batch, and nothing
    after (a producer of ours would abort it on the way out)."""
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(topic, 1)])
        conn = await admin.cluster.any_connection()
        init = await conn.request(
            22,
            ipid.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000),
            version=2,
        )
        pid, epoch = init.producer_id, init.producer_epoch
        add = apt.AddPartitionsToTxnRequest
        joined = await conn.request(
            24,
            add(
                v3_and_below_transactional_id=tid,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[add.AddPartitionsToTxnTopic(name=topic, partitions=[0])],
            ),
            version=3,
        )
        (result,) = joined.results_by_topic_v3_and_below[0].results_by_partition
        assert result.partition_error_code == 0
        records = encode_batch(
            [(int(time.time() * 1000), None, b"never decided", ())],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            is_transactional=True,
        )
        request = produce.ProduceRequest
        data = request.PartitionProduceData(index=0, records=records)
        written = await conn.request(
            0,
            request(
                transactional_id=tid,
                acks=-1,
                timeout_ms=30_000,
                topic_data=[request.TopicProduceData(name=topic, partition_data=[data])],
            ),
            version=9,
        )
        assert written.responses[0].partition_responses[0].error_code == 0


async def commit_after(bs: str, topic: str) -> None:
    async with open_producer(bootstrap_servers=bs, transactional_id="later") as p:
        await p.init_transactions()
        p.begin_transaction()
        await p.send(topic, b"committed after it", partition=0)
        await p.commit_transaction()


async def check_hanging(bs: str, topic: str) -> None:
    """What the admin calls show of the hanging transaction; a stale abort is refused."""
    tp = TopicPartition(topic, 0)
    async with open_admin(bootstrap_servers=bs) as admin:
        (state,) = [
            s
            for s in (await admin.describe_producers([tp]))[tp]
            if s.current_transaction_start_offset is not None
        ]
        assert state.current_transaction_start_offset == 0
        # No coordinator knows its producer any more.
        assert not await admin.list_transactions(producer_ids=[state.producer_id])
        # The open one of "busy" has its coordinator: it is not hanging.
        found = await admin.find_hanging_transactions(max_transaction_timeout_ms=0)
        assert found == [(tp, state)]
        assert await admin.find_hanging_transactions(["busy"], max_transaction_timeout_ms=0) == []
        # Open for less than the 15 minutes default.
        assert await admin.find_hanging_transactions() == []
        with pytest.raises(KafkaError) as err:
            await admin.abort_transaction(tp, state.producer_id, state.producer_epoch - 1)
        assert err.value.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_hanging_transaction_is_found_and_aborted(tmp_path: Path, anyio_backend: str) -> None:
    """A transaction left open whose coordinator state is lost (the broker stopped
    cleanly, its transaction journal deleted) hangs: nothing ends it, and
    read_committed consumers stop at it. ``trafka transactions find-hanging``
    reports it (and not a live open transaction), ``abort`` ends it, and the
    abort survives a restart."""

    def run(fn: Any, *args: str) -> Any:
        return anyio.run(fn, *args, backend=anyio_backend)

    def cli(bs: str, *args: str) -> Result:
        return CliRunner().invoke(main, ["transactions", *args, "-b", bs])

    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path) as running:
        run(leave_open, running.bootstrap_servers, "stuck", "hanging")
    (tmp_path / TRANSACTIONS_JOURNAL).unlink()
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path) as running:
        bs = running.bootstrap_servers
        run(commit_after, bs, "stuck")
        assert run(committed_values, bs, "stuck") == []  # stuck behind the open one
        run(leave_open, bs, "busy", "live")  # open too, but its coordinator has it
        run(check_hanging, bs, "stuck")

        found = cli(bs, "find-hanging", "--max-transaction-timeout", "0", "--json")
        assert found.exit_code == 0, found.output
        rows = json.loads(found.stdout)
        assert [
            (r["topic"], r["partition"], r["current_transaction_start_offset"]) for r in rows
        ] == [("stuck", 0, 0)]
        recent = cli(bs, "find-hanging")  # open for less than the 15 minutes default
        assert recent.exit_code == 0 and "no hanging transactions" in recent.stderr

        wrong = cli(bs, "abort", "-t", "stuck", "-p", "0", "--start-offset", "1")
        assert wrong.exit_code == 1 and "no open transaction starts at offset 1" in wrong.output
        aborted = cli(bs, "abort", "-t", "stuck", "-p", "0", "--start-offset", "0")
        assert aborted.exit_code == 0, aborted.output
        assert f"producer {rows[0]['producer_id']}" in aborted.stderr
        again = cli(bs, "find-hanging", "--max-transaction-timeout", "0", "--json")
        assert json.loads(again.stdout) == []
        assert run(committed_values, bs, "stuck") == [b"committed after it"]
    # The marker was on disk before the answer: it survives a restart.
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path) as running:
        assert run(committed_values, running.bootstrap_servers, "stuck") == [b"committed after it"]
