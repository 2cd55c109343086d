"""The SDK on the newest versions each peer serves (issue #60): what goes on the
wire (the API key and version of every request header the client frames) and
what is read back from where the data is.

What Kafka defines and these tests check:

* Produce v13 names topics by id instead of by name (KIP-516; Kafka 4.4's
  ProduceRequest spec, "Version 13 replaces topic names with topic IDs"): on
  Kafka 4.4 a producer sends v13 and its delivery reports carry the offsets a
  consumer reads the records at; on brokerlite too. Kafka 3.9 serves up to v11.
* Produce v12+ inside a transaction adds the partitions to it implicitly
  (KIP-890 part 2, transaction version 2); a client that does not follow
  transaction version 2 "can't use produce request version higher than 11 within
  a transaction" (the same spec). Kafka 4.x finalizes ``transaction.version`` 2
  on a new cluster and so does a single brokerlite; Kafka 3.9 has no such
  level. As Kafka's Java client, the producer follows version 2 where the level
  is 2 (no AddPartitionsToTxn or AddOffsetsToTxn; Produce v12+, TxnOffsetCommit
  v5 and EndTxn v5, each EndTxn bumping the epoch) and version 1 elsewhere
  (AddPartitionsToTxn v3, AddOffsetsToTxn, TxnOffsetCommit and EndTxn v4,
  Produce v11, one epoch for every transaction).
* Fetch v18 only adds a follower's high watermark (KIP-1166): a consumer
  fetches at v18 from Kafka 4.4 and brokerlite, at v17 from 3.9.
* ListOffsets v11 (KIP-1023) is v10 with one more special timestamp; the
  admin's ``latest`` is the log end offset.
* ShareFetch and ShareAcknowledge v2 (KIP-1206, KIP-1222) in their default mode
  (batch-optimised acquisition, no RENEW) deliver and acknowledge as v1 did; a
  v2 ShareAcknowledge answer carries the acquisition lock timeout.
* Java's admin retries ListOffsets while the metadata or the leader does not
  know a partition yet (ListOffsetsHandler / PartitionLeaderStrategy: a
  partition missing from the metadata, LEADER_NOT_AVAILABLE, and the leader's
  retriable UNKNOWN_TOPIC_OR_PARTITION are retried within the call's timeout):
  ours answers right after create_topics on a three-node cluster.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from kafka_fixtures import Peer
from kafka_peers import KAFKA_4, KafkaCluster
from sdk_brokers import fresh, produce, set_transaction_version, share_queue

from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer
from trafka.sdk.connection_state import ConnectionState
from trafka.sdk.share_consumer import AcknowledgeType, open_share_consumer

pytestmark = [pytest.mark.anyio, pytest.mark.kafka]

PRODUCE, FETCH, LIST_OFFSETS, SHARE_FETCH, SHARE_ACK = 0, 1, 2, 78, 79
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
# (Produce, Fetch, ListOffsets) versions each peer serves at most (its ApiVersions).
NEWEST = {"brokerlite": (13, 18, 11), "3.9": (11, 17, 9), "4": (13, 18, 11)}


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int]]]:
    """(api_key, api_version) of every request header the client frames."""
    sent: list[tuple[int, int]] = []
    framed = ConnectionState.send_request_parts

    def spy(self: ConnectionState, api_key: int, body: Any, **kwargs: Any) -> Any:
        corr, parts = framed(self, api_key, body, **kwargs)
        head = b"".join(parts)[:8]
        sent.append(struct.unpack(">hh", head[4:8]))
        return corr, parts

    monkeypatch.setattr(ConnectionState, "send_request_parts", spy)
    yield sent


def versions(sent: list[tuple[int, int]], key: int) -> set[int]:
    return {v for k, v in sent if k == key}


async def test_produce_fetch_list_offsets_newest(peer: Peer, wire: list[tuple[int, int]]) -> None:
    bs, topic = peer.bootstrap_servers, fresh("vers")
    tp = TopicPartition(topic, 0)
    produce_v, fetch_v, list_v = NEWEST[peer.name]
    with anyio.fail_after(120):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
            async with open_producer(bootstrap_servers=bs, linger_ms=5) as producer:
                reports = [await producer.send(topic, b"v%d" % i, key=b"k%d" % i) for i in range(3)]
                offsets = [(await report).offset for report in reports]
            end = (await admin.list_offsets({tp: "latest"}))[tp]
        async with open_consumer(bootstrap_servers=bs, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp])
            got: list[Any] = []
            while len(got) < 3:
                got += [r for rs in (await consumer.getmany(timeout_ms=500)).values() for r in rs]
    assert offsets == [0, 1, 2]
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, b"k%d" % i, b"v%d" % i) for i in range(3)
    ]
    assert end[0] == 3
    assert versions(wire, PRODUCE) == {produce_v}
    assert versions(wire, FETCH) == {fetch_v}
    assert versions(wire, LIST_OFFSETS) == {list_v}


#: Per peer: transaction version 2, and the (Produce, AddPartitionsToTxn,
#: AddOffsetsToTxn, TxnOffsetCommit, EndTxn) versions its transactions go at.
TXN = {
    "brokerlite": (True, {13}, set(), set(), {5}, {5}),
    "3.9": (False, {11}, {3}, {4}, {4}, {4}),
    "4": (True, {13}, set(), set(), {5}, {5}),
}


async def test_transactions_follow_the_finalized_transaction_version(
    peer: Peer, wire: list[tuple[int, int]]
) -> None:
    bs, topic, src, group = peer.bootstrap_servers, fresh("vers-txn"), fresh("src"), fresh("g")
    tv2, *expected = TXN[peer.name]
    src_tp = TopicPartition(src, 0)
    with anyio.fail_after(120):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1), NewTopic(src, 1)])
            level = (await admin.describe_features()).finalized.get("transaction.version")
            assert (level is not None and level[1] >= 2) is tv2, level
        tid = fresh("tx")
        async with (
            open_producer(bootstrap_servers=bs, transactional_id=tid) as producer,
            open_consumer(bootstrap_servers=bs, group_id=group) as consumer,
            open_admin(bootstrap_servers=bs) as admin,
        ):
            await producer.init_transactions()
            epochs = [producer._txn.producer_epoch]
            producer.begin_transaction()
            report = await producer.send(topic, b"in-txn")
            await producer.send_offsets_to_transaction({src_tp: 3}, consumer.group_metadata())
            await producer.commit_transaction()
            offset = (await report).offset
            epochs.append(producer._txn.producer_epoch)
            async with producer.transaction():
                await producer.send(topic, b"second")
            epochs.append(producer._txn.producer_epoch)
            assert await consumer.committed(src_tp) == 3
            described = (await admin.describe_transactions([tid]))[tid]
            assert described.producer_epoch == epochs[-1]
        async with open_consumer(
            bootstrap_servers=bs, auto_offset_reset="earliest", isolation_level="read_committed"
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            got: list[Any] = []
            while len(got) < 2:
                got += [r for rs in (await consumer.getmany(timeout_ms=500)).values() for r in rs]
    assert (offset, [r.value for r in got]) == (0, [b"in-txn", b"second"])
    # Version 2: EndTxn bumps the epoch of every transaction.
    assert epochs == [epochs[0] + n if tv2 else epochs[0] for n in range(3)]
    keys = (PRODUCE, ADD_PARTITIONS, ADD_OFFSETS, TXN_OFFSET_COMMIT, END_TXN)
    assert [versions(wire, k) for k in keys] == expected


def test_kafka4_lowered_to_transaction_version_1(
    make_kafka: Callable[..., KafkaCluster], wire: list[tuple[int, int]]
) -> None:
    # A private node: its level is lowered (UpdateFeatures, a safe downgrade),
    # which a shared one's other tests must not see.
    bs = make_kafka(KAFKA_4).bootstrap_servers

    async def main() -> list[int]:
        with anyio.fail_after(120):
            return await steps()

    async def steps() -> list[int]:
        topic = fresh("vers-tv1")
        await set_transaction_version(bs, 1)
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
            level = (await admin.describe_features()).finalized["transaction.version"]
            assert level[1] == 1
        del wire[:]
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as p:
            await p.init_transactions()
            epochs = [p._txn.producer_epoch]
            for value in (b"one", b"two"):
                async with p.transaction():
                    await p.send(topic, value)
                epochs.append(p._txn.producer_epoch)
        return epochs

    epochs = anyio.run(main, backend="trio")
    assert epochs == [epochs[0]] * 3  # version 1: one epoch for every transaction
    assert versions(wire, ADD_PARTITIONS) == {3} and versions(wire, END_TXN) == {4}
    assert versions(wire, PRODUCE) == {11}


async def test_share_fetch_and_acknowledge_v2(
    kafka4: KafkaCluster, wire: list[tuple[int, int]]
) -> None:
    bs = kafka4.bootstrap_servers
    with anyio.fail_after(120):
        topic, group = await share_queue(bs)
        await produce(bs, topic, [b"a", b"b"])
        async with open_share_consumer(
            topic, bootstrap_servers=bs, group_id=group, share_acknowledgement_mode="explicit"
        ) as consumer:
            got: list[Any] = []
            while len(got) < 2:
                got += await consumer.poll(timeout_ms=500)
            for record in got:
                consumer.acknowledge(record, AcknowledgeType.ACCEPT)
            assert await consumer.commit() == {TopicPartition(topic, 0): None}
            lock_ms = consumer.acquisition_lock_timeout_ms
    assert [(r.offset, r.value, r.delivery_count) for r in got] == [(0, b"a", 1), (1, b"b", 1)]
    assert lock_ms is not None and lock_ms > 0
    assert versions(wire, SHARE_FETCH) == {2}
    assert versions(wire, SHARE_ACK) == {2}


async def test_list_offsets_right_after_create_topics(kafka4_cluster: KafkaCluster) -> None:
    bs, topic = kafka4_cluster.bootstrap_servers, fresh("vers-new")
    tps = [TopicPartition(topic, p) for p in range(6)]
    with anyio.fail_after(120):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 6, replication_factor=2)])
            latest = await admin.list_offsets({tp: "latest" for tp in tps})
            await admin.create_partitions({topic: 8})
            more = [TopicPartition(topic, p) for p in range(8)]
            grown = await admin.list_offsets({tp: "earliest" for tp in more})
    assert {tp: o for tp, (o, _) in latest.items()} == {tp: 0 for tp in tps}
    assert {tp: o for tp, (o, _) in grown.items()} == {tp: 0 for tp in more}
