"""A transaction prepared by one producer and ended by another process
(:mod:`trafka.sdk.txn_handoff`), against brokerlite, Kafka 3.9 and Kafka 4.x:
EndTxn is accepted from any connection that names the transactional id,
producer id and epoch, as Kafka's TransactionCoordinator accepts it
(``endTransaction`` checks the id's metadata, not the connection); a repeated
outcome is a retry; a newer producer of the id fences the prepared transaction
(KIP-98). On brokerlite and Kafka 4.x the producer writes with transaction
version 2 (KIP-890 part 2), and the EndTxn v4 that ends its transaction is
accepted all the same."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from kafka_fixtures import Peer
from sdk_brokers import fresh

from trafka.sdk import (
    Admin,
    ClientClosedError,
    InvalidTxnStateError,
    NewTopic,
    ProducerFencedError,
    TopicPartition,
    open_admin,
    open_consumer,
    open_producer,
)
from trafka.sdk.txn_handoff import PreparedTransaction, end_transaction, prepare_transaction

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def values(bs: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value of the topic as a consumer with ``isolation`` sees it."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    out: list[bytes] = []
    async with open_consumer(
        bootstrap_servers=bs, auto_offset_reset="earliest", isolation_level=isolation
    ) as c:
        c.assign(tps)
        ends = await c.end_offsets(tps)
        for tp in tps:
            while await c.position(tp) < ends[tp]:
                for recs in (await c.getmany(tp, timeout_ms=200)).values():
                    out += [r.value for r in recs]
    return sorted(out)


@asynccontextmanager
async def admin_and_topic(bs: str, name: str) -> AsyncIterator[tuple[Admin, str]]:
    """An admin client and a new topic of two partitions."""
    topic = fresh(name)
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(topic, 2)])
        yield admin, topic


async def settled(admin: Admin, tid: str) -> None:
    """Wait for the markers: Kafka answers EndTxn once PrepareCommit (or
    PrepareAbort) is logged and writes the markers after (brokerlite before)."""
    while (await admin.describe_transactions([tid]))[tid].state.startswith("Prepare"):
        await anyio.sleep(0.05)


async def prepared(bs: str, topic: str, tid: str, vals: list[bytes]) -> PreparedTransaction:
    """A transaction of ``vals`` (spread over the topic's partitions), prepared
    and handed over by a producer that is closed afterwards."""
    async with open_producer(bootstrap_servers=bs, transactional_id=tid) as p:
        await p.init_transactions()
        p.begin_transaction()
        for i, v in enumerate(vals):
            await p.send(topic, v, partition=i % 2)
        txn = await prepare_transaction(p)
        with pytest.raises(ClientClosedError):
            await p.send(topic, b"late", partition=0)
    return txn


async def test_a_prepared_transaction_is_committed_from_another_connection(
    peer: Peer,
) -> None:
    bs = peer.bootstrap_servers
    tid = fresh("tx")
    vals = [b"a", b"b", b"c"]
    with anyio.fail_after(30):
        async with admin_and_topic(bs, "handoff") as (admin, topic):
            txn = await prepared(bs, topic, tid, vals)
            assert txn.transactional_id == tid and txn.producer_id >= 0
            assert txn.partitions == ((topic, 0), (topic, 1))
            assert PreparedTransaction.from_json(txn.to_json()) == txn
            # The producer is gone, its transaction open: nothing committed yet.
            assert (await admin.describe_transactions([tid]))[tid].state == "Ongoing"
            assert await values(bs, topic, 2, "read_committed") == []
            assert await values(bs, topic, 2, "read_uncommitted") == vals

            await end_transaction(admin, txn, commit=True)
            await settled(admin, tid)
            assert await values(bs, topic, 2, "read_committed") == vals
            # A repeated commit is a retry to the coordinator; the opposite is refused.
            await end_transaction(admin, txn, commit=True)
            with pytest.raises(InvalidTxnStateError, match="INVALID_TXN_STATE"):
                await end_transaction(admin, txn, commit=False)
        # A new admin client (a new process, as far as the broker knows) too.
        async with open_admin(bootstrap_servers=bs) as admin:
            await end_transaction(admin, txn, commit=True)
    assert await values(bs, topic, 2, "read_committed") == vals


async def test_an_aborted_prepared_transaction_stays_invisible(peer: Peer) -> None:
    bs = peer.bootstrap_servers
    tid = fresh("tx")
    with anyio.fail_after(30):
        async with admin_and_topic(bs, "handoff-abort") as (admin, topic):
            txn = await prepared(bs, topic, tid, [b"x", b"y"])
            await end_transaction(admin, txn, commit=False)
            await end_transaction(admin, txn, commit=False)
            with pytest.raises(InvalidTxnStateError):
                await end_transaction(admin, txn, commit=True)
            assert await values(bs, topic, 2, "read_committed") == []
            assert await values(bs, topic, 2, "read_uncommitted") == [b"x", b"y"]


async def test_a_newer_producer_of_the_id_fences_the_prepared_transaction(
    peer: Peer,
) -> None:
    bs = peer.bootstrap_servers
    tid = fresh("tx")
    with anyio.fail_after(30):
        async with admin_and_topic(bs, "handoff-fence") as (admin, topic):
            zombie = await prepared(bs, topic, tid, [b"zombie"])
            # The retried writer: InitProducerId on the same id aborts the open
            # transaction and bumps the epoch.
            retried = await prepared(bs, topic, tid, [b"retried"])
            assert retried.producer_id == zombie.producer_id
            assert retried.producer_epoch > zombie.producer_epoch
            with pytest.raises(ProducerFencedError, match="fenced"):
                await end_transaction(admin, zombie, commit=True)
            await end_transaction(admin, retried, commit=True)
            assert await values(bs, topic, 2, "read_committed") == [b"retried"]
            assert await values(bs, topic, 2, "read_uncommitted") == [b"retried", b"zombie"]


async def test_an_empty_transaction_has_nothing_to_end(peer: Peer) -> None:
    bs = peer.bootstrap_servers
    tid = fresh("tx")
    with anyio.fail_after(30):
        async with admin_and_topic(bs, "handoff-empty") as (admin, topic):
            txn = await prepared(bs, topic, tid, [])
            assert txn.partitions == ()
            await end_transaction(admin, txn, commit=True)
            await end_transaction(admin, txn, commit=False)


async def test_prepare_needs_an_open_transaction(peer: Peer) -> None:
    bs = peer.bootstrap_servers
    with anyio.fail_after(30):
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p:
            with pytest.raises(InvalidTxnStateError, match="open transaction"):
                await prepare_transaction(p)
            await p.init_transactions()
            with pytest.raises(InvalidTxnStateError, match="ready"):
                await prepare_transaction(p)
        async with open_producer(bootstrap_servers=bs) as p:
            with pytest.raises(InvalidTxnStateError):
                await prepare_transaction(p)
    with pytest.raises(ValueError, match="not a prepared transaction"):
        PreparedTransaction.from_json({"transactional_id": "x"})
