"""Client statistics: what the counters count, sans-IO and against a real brokerlite.

* The connection state counts requests, bytes on the wire, responses and their
  latency on the clock it is given, and the requests a failing connection
  abandons.
* The accumulator counts per topic: records, batches and bytes acknowledged,
  failures by error name, retries.
* Against brokerlite (trio and asyncio): a producer's counts agree with what a
  consumer fetched of the same records; a refused record, a cut connection (a
  retry, a disconnect, and no record counted twice), transactions, a consumer's
  group, positions, lag, pause and records buffered by ``getone()``; an
  unreachable broker; snapshots never change once taken.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k26_end_txn as end_txn
from trafka.codec.protocol import encode_response
from trafka.sdk import (
    NewTopic,
    ProducerStatistics,
    TopicPartition,
    open_admin,
    open_consumer,
    open_producer,
)
from trafka.sdk.accumulator import Accumulator
from trafka.sdk.connection_state import ConnectionState
from trafka.sdk.statistics import NodeCounters, broker_statistics

_BROKER_TESTS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "brokerlite")
if _BROKER_TESTS not in sys.path:
    sys.path.insert(0, _BROKER_TESTS)

# -- sans-IO: the connection state ----------------------------------------------------------------


def _answer(corr: int, key: int, version: int, body: object) -> bytes:
    return encode_response(corr, key, version, body)


def _handshaken(stats: NodeCounters) -> ConnectionState:
    state = ConnectionState("c", stats=stats)
    state.handshake(now=10.0, timeout=30.0)
    versions = api_versions.ApiVersionsResponse(
        error_code=0,
        api_keys=[
            api_versions.ApiVersionsResponse.ApiVersion(api_key=k, min_version=0, max_version=4)
            for k in (18, 26)
        ],
        throttle_time_ms=0,
    )
    state.receive_data(_answer(0, 18, 3, versions), now=10.004)
    assert state.ready
    return state


def test_connection_state_counts_requests_bytes_and_latency_per_api() -> None:
    stats = NodeCounters()
    state = _handshaken(stats)
    handshake = stats.apis[18]
    assert handshake[:2] == [1, 1]
    assert handshake[2] == pytest.approx(0.004)

    body = end_txn.EndTxnRequest(
        transactional_id="t", producer_id=1, producer_epoch=0, committed=True
    )
    sent_before = stats.bytes_sent
    _, frame1 = state.send_request(26, body, now=20.0, timeout=30.0, version=3)
    _, frame2 = state.send_request(26, body, now=20.5, timeout=30.0, version=3)
    assert stats.requests_sent == 3
    assert stats.bytes_sent - sent_before == len(frame1) + len(frame2)
    assert stats.apis[26][:2] == [2, 0]

    answer = end_txn.EndTxnResponse(throttle_time_ms=0, error_code=0)
    received_before = stats.bytes_received
    data = _answer(1, 26, 3, answer) + _answer(2, 26, 3, answer)
    # Fed one byte at a time: bytes count as they arrive, responses once whole.
    out = []
    for i in range(len(data)):
        out += state.receive_data(data[i : i + 1], now=21.0)
    assert len(out) == 2
    assert stats.bytes_received - received_before == len(data)
    requests, responses, total, most = stats.apis[26]
    assert (requests, responses) == (2, 2)
    assert total == pytest.approx(1.0 + 0.5)
    assert most == pytest.approx(1.0)
    assert stats.responses_received == 3

    snapshot = broker_statistics(1, [stats], connected=True, in_flight=0)
    assert snapshot.apis["EndTxn"].latency_avg_ms == pytest.approx(750.0)
    assert snapshot.apis["EndTxn"].latency_max_ms == pytest.approx(1000.0)
    assert snapshot.apis["ApiVersions"].responses == 1


def test_connection_state_counts_requests_a_failing_connection_abandons() -> None:
    stats = NodeCounters()
    state = _handshaken(stats)
    body = end_txn.EndTxnRequest(
        transactional_id="t", producer_id=1, producer_epoch=0, committed=False
    )
    for i in range(3):
        state.send_request(26, body, now=30.0 + i, timeout=1.0, version=3)
    # No response without its request framed: acks=0 produce is counted as sent only.
    assert stats.requests_sent == 4
    assert len(state.fail_all()) == 3
    assert stats.requests_failed == 3
    assert stats.apis[26][:2] == [3, 0]
    snapshot = broker_statistics(1, [stats], connected=False, in_flight=0)
    assert snapshot.apis["EndTxn"].latency_avg_ms is None


def test_broker_statistics_adds_up_connection_ids_of_one_node() -> None:
    a, b = NodeCounters(), NodeCounters()
    a.sent(0, 100)
    a.answered(0, 0.002)
    a.connects = 2
    b.sent(0, 50)
    b.answered(0, 0.004)
    b.sent(10, 20)
    b.disconnects = 1
    snap = broker_statistics(3, [a, b], connected=True, in_flight=1)
    assert (snap.node_id, snap.connects, snap.disconnects) == (3, 2, 1)
    assert (snap.requests_sent, snap.responses_received, snap.bytes_sent) == (3, 2, 170)
    assert snap.apis["Produce"].requests == 2
    assert snap.apis["Produce"].latency_avg_ms == pytest.approx(3.0)
    assert snap.apis["Produce"].latency_max_ms == pytest.approx(4.0)
    assert snap.apis["FindCoordinator"].responses == 0


# -- sans-IO: the accumulator --------------------------------------------------------------------


def test_accumulator_counts_acknowledged_failed_and_retried_batches_per_topic() -> None:
    acc = Accumulator(linger=0.0, retries=1, clock=lambda: 0.0)
    for i in range(3):
        acc.append("a", 0, 0, None, b"v%d" % i, ())
    acc.append("b", 0, 0, None, b"w", ())
    by_topic = {b.topic: b for b in acc.drain(0.0, 1, lambda t, p: 1)}
    a, b = by_topic["a"], by_topic["b"]
    assert a.encoded is not None

    # A retriable error requeues a: one retry; then it is acknowledged.
    assert acc.retry_or_fail(a, KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER), 0.0)
    [again] = acc.drain(1.0, 1, lambda t, p: 1)
    acc.complete(again, 42)
    # b fails for good.
    acc.fail(b, KafkaError(ErrorCode.MESSAGE_TOO_LARGE))
    counters = acc.topic_counters
    assert counters["a"].records_sent == 3
    assert counters["a"].batches_sent == 1
    assert counters["a"].bytes_sent == len(a.encoded)
    assert counters["a"].batch_retries == 1
    assert counters["a"].records_failed == 0
    assert counters["b"].records_sent == 0
    assert counters["b"].records_failed == 1
    assert counters["b"].errors == {"MESSAGE_TOO_LARGE": 1}
    # Completing an already completed batch again counts nothing.
    acc.complete(again, 42)
    assert counters["a"].records_sent == 3


# -- against brokerlite ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "statistics")


async def _create(bs: str, *topics: NewTopic) -> None:
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics(list(topics))
        stats = admin.statistics()
        assert any(b.apis.get("CreateTopics") for b in stats.brokers.values())


@pytest.mark.anyio
async def test_producer_counts_agree_with_what_a_consumer_fetched(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    one, two = fresh("stats-a"), fresh("stats-b")
    with anyio.fail_after(30):
        await _create(bs, NewTopic(one, 3), NewTopic(two, 1))
        async with open_producer(bootstrap_servers=bs, linger_ms=0) as producer:
            before = producer.statistics()
            for i in range(500):
                await producer.send(one, b"value-%d" % i, key=b"k%d" % (i % 17))
            for _ in range(200):
                await producer.send(two, b"x" * 50)
            await producer.flush()
            stats = producer.statistics()
        assert isinstance(stats, ProducerStatistics)
        # A snapshot does not change afterwards.
        assert before.records_sent == 0 and before.topics == {}
        assert stats.topics[one].records_sent == 500
        assert stats.topics[two].records_sent == 200
        assert stats.records_sent == 700
        assert stats.records_failed == 0 and stats.batch_retries == 0
        assert stats.records_buffered == 0 and stats.requests_in_flight == 0
        assert stats.buffer_memory_used == 0
        assert stats.producer_id >= 0  # idempotent by default
        assert stats.batches_sent >= 2
        produce = sum(
            b.apis["Produce"].responses for b in stats.brokers.values() if "Produce" in b.apis
        )
        assert produce >= 1
        node = stats.brokers[1]
        assert node.connected and node.connects >= 1 and node.disconnects == 0
        closed = producer.statistics().brokers[1]
        assert not closed.connected and closed.disconnects == closed.connects
        assert node.bytes_sent > stats.bytes_sent  # batches plus request framing
        assert node.apis["Produce"].latency_avg_ms is not None

        async with open_consumer(
            one, two, bootstrap_servers=bs, group_id=fresh("g"), auto_offset_reset="earliest"
        ) as consumer:
            got = 0
            while got < 700:
                batch = await consumer.getmany(timeout_ms=1000)
                got += sum(len(v) for v in batch.values())
            await consumer.commit()
            cstats = consumer.statistics()
        assert got == 700
        assert cstats.records_consumed == 700
        # The same batches went both ways (no compression, nothing else written).
        assert cstats.bytes_fetched == stats.bytes_sent
        assert {tp.topic for tp in cstats.partitions} == {one, two}
        for p in cstats.partitions.values():
            assert p.lag == 0 and p.position == p.high_watermark
        assert sum(p.records_consumed for p in cstats.partitions.values()) == 700
        # Per partition, what the producer acknowledged is what the consumer read.
        assert set(stats.partitions) == set(cstats.partitions)
        for tp, p in stats.partitions.items():
            assert p.records_sent == cstats.partitions[tp].records_consumed > 0
            assert p.records_queued == p.bytes_queued == 0
            assert p.records_failed == p.records_retried == p.batch_retries == 0
            assert p.latency_avg_ms is not None and p.latency_max_ms is not None
            assert 0 <= p.latency_avg_ms <= p.latency_max_ms
        assert sum(p.bytes_sent for p in stats.partitions.values()) == stats.bytes_sent
        group = cstats.group
        assert group is not None
        assert group.protocol == "classic" and group.member_id and group.generation >= 1
        assert group.rebalances >= 1
        # Each rebalance timed, from its JoinGroup to its SyncGroup's answer.
        assert 0 < group.rebalance_latency_max_ms <= group.rebalance_latency_total_ms
        assert group.rebalance_latency_avg_ms <= group.rebalance_latency_max_ms
        assert group.commits >= 1 and group.commit_failures == 0
        fetches = sum(
            b.apis["Fetch"].responses for b in cstats.brokers.values() if "Fetch" in b.apis
        )
        assert fetches >= 1


@pytest.mark.anyio
async def test_records_waiting_in_the_producer_are_counted_per_partition(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("stats-queued")
    tp = TopicPartition(topic, 1)
    with anyio.fail_after(30):
        await _create(bs, NewTopic(topic, 2))
        async with open_producer(bootstrap_servers=bs, linger_ms=60_000) as producer:
            for i in range(3):
                await producer.send(topic, b"waiting %d" % i, partition=1)
            waiting = producer.statistics().partitions[tp]
            await producer.flush()
            sent = producer.statistics().partitions[tp]
    assert (waiting.records_queued, waiting.records_sent) == (3, 0)
    assert waiting.bytes_queued > 3 * len(b"waiting 0")
    assert waiting.latency_avg_ms is None and waiting.latency_max_ms is None
    assert (sent.records_queued, sent.bytes_queued, sent.records_sent) == (0, 0, 3)
    assert sent.latency_max_ms is not None and sent.latency_max_ms >= 0


@pytest.mark.anyio
async def test_a_refused_record_is_counted_by_its_error(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("stats-small")
    with anyio.fail_after(30):
        await _create(bs, NewTopic(topic, 1, configs={"max.message.bytes": "2000"}))
        async with open_producer(bootstrap_servers=bs) as producer:
            await producer.send_and_wait(topic, b"fits")
            with pytest.raises(KafkaError) as caught:
                await producer.send_and_wait(topic, b"x" * 5000)
            assert caught.value.code == ErrorCode.MESSAGE_TOO_LARGE
            stats = producer.statistics()
    counted = stats.topics[topic]
    assert counted.records_sent == 1
    assert counted.records_failed == 1
    assert counted.errors == {"MESSAGE_TOO_LARGE": 1}
    assert stats.records_failed == 1


def test_a_cut_connection_counts_a_retry_and_a_disconnect_but_no_record_twice(
    tmp_path: Path,
) -> None:
    """The first Produce answer never reaches the producer: the connection is
    cut after the broker wrote the batch. The retry is answered as a duplicate;
    every record is counted once."""
    from brokerlite_faultproxy import Action, FaultPlan, FaultProxy

    from trafka.brokerlite.server import broker_in_thread

    plan = FaultPlan(api_keys=frozenset({0}), cut_every=1, max_cuts=1)
    with FaultProxy(plan) as proxy:
        advertised = f"127.0.0.1:{proxy.address[1]}"
        with broker_in_thread(
            port=0, data_dir=tmp_path / "data", advertised_listener=advertised
        ) as running:
            proxy.upstream = running.address

            async def main() -> ProducerStatistics:
                with anyio.fail_after(30):
                    async with open_producer(
                        bootstrap_servers=advertised, retry_backoff_ms=10
                    ) as producer:
                        futures = [await producer.send("cut", b"r%d" % i) for i in range(50)]
                        await producer.flush()
                        offsets = sorted([(await f).offset for f in futures])
                        assert offsets == list(range(50))  # written once
                        return producer.statistics()

            stats = anyio.run(main)
    assert plan.counts[Action.CUT] == 1
    assert stats.records_sent == 50
    assert stats.records_failed == 0
    assert stats.batch_retries >= 1
    partition = stats.partitions[TopicPartition("cut", 0)]
    assert partition.batch_retries == stats.batch_retries
    assert partition.records_retried >= 1 and partition.records_sent == 50
    node = stats.brokers[1]
    assert node.disconnects >= 1
    assert node.connects >= 2
    assert node.requests_failed >= 1


@pytest.mark.anyio
async def test_transactions_committed_and_aborted_are_counted(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("stats-txn")
    with anyio.fail_after(30):
        await _create(bs, NewTopic(topic, 1))
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tid")) as producer:
            await producer.init_transactions()
            for outcome in ("commit", "abort", "commit"):
                producer.begin_transaction()
                await producer.send(topic, outcome.encode())
                if outcome == "commit":
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
            stats = producer.statistics()
    assert stats.transactions_committed == 2
    assert stats.transactions_aborted == 1
    assert stats.producer_id >= 0 and stats.producer_epoch >= 0
    # The aborted transaction's record never left: the abort failed it.
    counted = stats.topics[topic]
    assert counted.records_sent == 2
    assert counted.records_failed == 1
    assert counted.errors == {"TransactionAbortedError": 1}
    coordinator = stats.brokers[1].apis
    assert coordinator["EndTxn"].responses == 3
    assert coordinator["InitProducerId"].responses >= 1


@pytest.mark.anyio
async def test_consumer_counts_only_records_handed_out_and_reports_pause_and_lag(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("stats-one")
    with anyio.fail_after(30):
        await _create(bs, NewTopic(topic, 2))
        async with open_producer(bootstrap_servers=bs) as producer:
            for i in range(100):
                await producer.send(topic, b"%d" % i, partition=i % 2)
        async with open_consumer(bootstrap_servers=bs, auto_offset_reset="earliest") as consumer:
            tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
            consumer.assign([tp0, tp1])
            records = [await consumer.getone() for _ in range(10)]
            stats = consumer.statistics()
            # getone() took a whole poll's worth from the fetcher; ten were handed out.
            assert stats.records_consumed == 10
            by_tp = {tp: 0 for tp in (tp0, tp1)}
            for r in records:
                by_tp[TopicPartition(r.topic, r.partition)] += 1
            for tp, n in by_tp.items():
                assert stats.partitions[tp].records_consumed == n
            assert stats.group is None
            consumer.pause(tp1)
            paused = consumer.statistics()
            assert paused.partitions[tp1].paused and not paused.partitions[tp0].paused
            assert stats.partitions[tp1].paused is False  # the earlier snapshot is unchanged
            # Lag: what is left of each partition past its position.
            for p in paused.partitions.values():
                if p.position is not None and p.high_watermark >= 0:
                    assert p.lag == p.high_watermark - p.position
            marks = [p.high_watermark for p in paused.partitions.values()]
            assert 50 in marks and set(marks) <= {-1, 50}  # -1: not fetched yet


@pytest.mark.anyio
async def test_an_unreachable_broker_counts_connect_failures() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()  # nobody listens there now
    async with open_admin(bootstrap_servers=f"127.0.0.1:{port}", reconnect_backoff_ms=10) as admin:
        with pytest.raises(Exception):  # noqa: B017 - the call's own error is tested elsewhere
            await admin.list_topics(timeout_ms=300)
        stats = admin.statistics()
    bootstrap = stats.brokers[-1]
    assert bootstrap.connect_failures >= 1
    assert bootstrap.connects == 0 and bootstrap.connected is False
    assert bootstrap.requests_sent == 0
