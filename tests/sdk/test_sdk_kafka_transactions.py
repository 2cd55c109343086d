"""The SDK's idempotent and transactional producer, and read_committed consumers,
against Apache Kafka itself (3.9 on ZooKeeper, 4.x on KRaft) and brokerlite: the
same steps, the same answers on each peer.

What Kafka defines and these tests check (KIP-98, "Exactly Once Delivery and
Transactional Messaging", and Kafka's protocol guide):

* an idempotent producer's records are written once each, in order, with
  sequence numbers the partition leader keeps per producer (DescribeProducers,
  KIP-664, reports the last one);
* a transaction's records and the offsets sent with it (TxnOffsetCommit) become
  visible together at the commit, and never after an abort;
* a read_committed consumer reads up to the last stable offset, skips aborted
  records and the control records (markers) and its position ends past the
  last marker, with no lag left;
* a second producer with the same ``transactional.id`` fences the first
  (InitProducerId bumps the epoch): every later call of the first fails with
  ``ProducerFencedError``.
"""

from __future__ import annotations

import anyio
import pytest
from kafka_fixtures import Peer
from sdk_brokers import fresh

from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer
from trafka.sdk.errors import ProducerFencedError
from trafka.sdk.transactions import TxnState

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def _read(
    bs: str, tps: list[TopicPartition], isolation: str
) -> tuple[list[tuple[int, int, bytes]], dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Every record from the start to the end offsets (the LSO for read_committed),
    as (partition, offset, value); and the positions and lags after."""
    got: list[tuple[int, int, bytes]] = []
    async with open_consumer(
        bootstrap_servers=bs, auto_offset_reset="earliest", isolation_level=isolation
    ) as c:
        c.assign(tps)
        ends = await c.end_offsets(tps)
        while any([await c.position(tp) < ends[tp] for tp in tps]):
            for tp, recs in (await c.getmany(timeout_ms=500)).items():
                got += [(tp.partition, r.offset, r.value) for r in recs]
        positions = {tp: await c.position(tp) for tp in tps}
        lags = {tp: c.lag(tp) for tp in tps}
    return got, positions, lags


@pytest.mark.compat("SDK", "transactions: commit, abort, offsets, read_committed")
async def test_idempotence_transactions_and_read_committed(peer: Peer) -> None:
    bs = peer.bootstrap_servers
    topic, src, group = fresh("txn"), fresh("txn-src"), fresh("txn-g")
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    src_tp = TopicPartition(src, 0)
    tid = fresh("tid")
    with anyio.fail_after(90):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 2), NewTopic(src, 1)])
            await admin.list_offsets({tp: "latest" for tp in [*tps, src_tp]})

            # Idempotent (the default): 20 records, each written once, in order.
            async with open_producer(bootstrap_servers=bs, linger_ms=5) as idem:
                futures = [await idem.send(topic, b"i%d" % i, partition=0) for i in range(20)]
            assert [(await f).offset for f in futures] == list(range(20))
            (state,) = (await admin.describe_producers([tps[0]]))[tps[0]]
            assert state.last_sequence == 19
            assert state.current_transaction_start_offset is None

            async with (
                open_producer(bootstrap_servers=bs, transactional_id=tid, linger_ms=1) as p,
                open_consumer(bootstrap_servers=bs, group_id=group) as c,
            ):
                await p.init_transactions()
                # 1: committed, with the group's offset.
                async with p.transaction():
                    for i in range(3):
                        await p.send(topic, b"c1-%d" % i, partition=i % 2)
                    await p.send_offsets_to_transaction({src_tp: 5}, c.group_metadata())
                assert await c.committed(src_tp) == 5
                # 2: aborted after its records were written: neither they nor
                # the offset are seen.
                p.begin_transaction()
                for i in range(3):
                    await p.send(topic, b"a2-%d" % i, partition=i % 2)
                await p.flush()
                await p.send_offsets_to_transaction({src_tp: 9}, group)
                open_txn = (await admin.describe_transactions([tid]))[tid]
                assert open_txn.state == "Ongoing"
                assert set(tps) <= open_txn.topic_partitions
                await p.abort_transaction()
                assert await c.committed(src_tp) == 5
                # 3: committed.
                async with p.transaction():
                    for i in range(3):
                        await p.send(topic, b"c3-%d" % i, partition=i % 2)
                # Kafka answers EndTxn once PrepareCommit is logged; the markers
                # follow, then CompleteCommit.
                while (done := (await admin.describe_transactions([tid]))[tid]).state != (
                    "CompleteCommit"
                ):
                    assert done.state == "PrepareCommit"
                    await anyio.sleep(0.05)
                listed = await admin.list_transactions(producer_ids=[done.producer_id])
                assert [(t.transactional_id, t.state) for t in listed] == [(tid, "CompleteCommit")]
                # The leader knows the producer, its transaction closed.
                states = await admin.describe_producers(tps)
                assert [s.producer_id for s in states[tps[1]]] == [done.producer_id]
                assert states[tps[1]][0].current_transaction_start_offset is None

        committed, positions, lags = await _read(bs, tps, "read_committed")
        values = [v for _, _, v in committed]
        assert sorted(v for v in values if not v.startswith(b"i")) == sorted(
            [b"c1-%d" % i for i in range(3)] + [b"c3-%d" % i for i in range(3)]
        )
        # Partition 0: 20 records, then c1-0 c1-2 marker, a2-0 a2-2 marker,
        # c3-0 c3-2 marker; partition 1: one record and a marker each time. The
        # positions end past the last markers, with no lag.
        assert [(o, v) for q, o, v in committed if q == 0 and o >= 20] == [
            (20, b"c1-0"),
            (21, b"c1-2"),
            (26, b"c3-0"),
            (27, b"c3-2"),
        ]
        assert positions == {tps[0]: 29, tps[1]: 6}
        assert lags == {tps[0]: 0, tps[1]: 0}
        everything, _, _ = await _read(bs, tps, "read_uncommitted")
        assert sorted(v for _, _, v in everything if v.startswith(b"a2")) == [
            b"a2-0",
            b"a2-1",
            b"a2-2",
        ]


@pytest.mark.compat("SDK", "transactions: a zombie producer is fenced")
async def test_second_producer_fences_the_first(peer: Peer) -> None:
    bs = peer.bootstrap_servers
    topic, tid = fresh("fence"), fresh("tid")
    tp = TopicPartition(topic, 0)
    with anyio.fail_after(60):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
            await admin.list_offsets({tp: "latest"})
        async with open_producer(bootstrap_servers=bs, transactional_id=tid) as old:
            await old.init_transactions()
            old.begin_transaction()
            await old.send_and_wait(topic, b"zombie", partition=0)
            async with open_producer(bootstrap_servers=bs, transactional_id=tid) as new:
                await new.init_transactions()  # bumps the epoch, aborts old's transaction
                async with new.transaction():
                    await new.send(topic, b"fresh", partition=0)
                with pytest.raises(ProducerFencedError):
                    await old.commit_transaction()
                assert old.transaction_state is TxnState.FATAL_ERROR
                with pytest.raises(ProducerFencedError):
                    await old.send(topic, b"after", partition=0)
        got, _, _ = await _read(bs, [tp], "read_committed")
        assert [v for _, _, v in got] == [b"fresh"]
