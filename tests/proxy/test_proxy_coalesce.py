"""Coalescing plain producers' routed requests per leader (trafka.proxy.coalesce).

While a Produce to a leader is in flight, the pieces of later requests bound
for it gather, and go together in the next request, one batch per partition
(Kafka takes one batch per partition in a Produce request: the broker refuses
a v3+ request with more, KIP-98). The upstream here is the fake two-broker
cluster of test_proxy_pipelining.py, which holds its Produce answers until the
test releases them, so that what gathers is known. The rules checked:

* the requests that came while one was in flight are one request, their
  records in each partition in the order they came (one connection's first);
* each client is told a true base offset for a batch that stayed whole (the
  shared batch's base plus its place in it), no offset for one whose records
  moved;
* requests of different acks never share a request; acks=0 ones go alone;
* the shared request's timeout is the smallest; an error of its answer goes to
  every client that had records in that partition;
* a request that does not coalesce does not overtake the pieces before it;
* nothing waits forever: an answer that never comes is REQUEST_TIMED_OUT.

Real clients (librdkafka through brokerlite, every delivery report read back)
are in test_coalesced_reports below.

Coalescing needs the codec's C pass (:func:`.plan.place_spans`; the
accumulators build their batches with it): without it (not built, no compiler
at install time, or ``TRAFKA_NO_SPEEDUPS=1``) nothing coalesces, and every
plain request takes the plain plan, upstream at once on its own (pipelined,
test_proxy_pipelining.py). The tests against the fake cluster run both ways
(fixture ``places``) and check, without the C pass, that each request went at
once and was answered as with it.
"""

from __future__ import annotations

import dataclasses
import random
from functools import partial
from typing import Any

import pytest
import trio
from proxy_helpers import (
    answer,
    confluent_reports,
    create,
    fresh,
    misreported,
    placement,
    read_answer,
    records_of,
    request,
)
from test_proxy_pipelining import Client, FakeCluster, all_upstream, produce, with_proxy

from trafka.brokerlite import RunningBroker
from trafka.codec import _accel, batch_split, protocol
from trafka.codec.compression import Compression
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as pm
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.produce_response import ProduceAnswer
from trafka.codec.records import encode_batch
from trafka.proxy import proxy_in_thread
from trafka.proxy.keyrouting.coalesce import Coalescer
from trafka.proxy.keyrouting.coalesce import answer as coalesced_answer
from trafka.proxy.keyrouting.plan import place_spans
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.topics import Topics
from trafka.sdk.partitioners import crc32_partition, murmur2_partition

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["c_pass", "python"])
def places(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether the codec's C pass places the records, so that requests coalesce:
    ``c_pass`` (skipped when the accelerator is not built or is turned off) or
    ``python``, the accelerator switched off (a user who installed trafka
    without a compiler): nothing coalesces then."""
    if request.param == "python":
        monkeypatch.setattr(_accel, "speedups", None)
    elif not batch_split.placing("murmur2"):
        pytest.skip("the C accelerator is not built or is off (the 'python' case runs)")
    return bool(batch_split.placing("murmur2"))


async def placed(cluster: FakeCluster, n: int) -> None:
    """Wait until the proxy has taken ``n`` Produce requests in hand (placed)."""
    while cluster.proxy.statistics.routing.requests_pooled < n:
        await trio.sleep(0.01)


def values(body: Any, partition: int) -> list[bytes]:
    return [r.value for r in records_of(body).get(partition, [])]


def told(answer: Any) -> dict[int, tuple[int, int]]:
    """Partition -> (error, base offset) of a Produce answer."""
    return {
        p.index: (p.error_code, p.base_offset)
        for t in answer.responses
        for p in t.partition_responses
    }


def test_requests_to_a_busy_leader_go_together_in_the_next_request(places: bool) -> None:
    """Request 1 is in flight to broker 1; requests 2-5 of the same connection
    (5's records all moved from partition 1, led by broker 2, to partition 0)
    and request 6 of another connection come meanwhile: broker 1 gets them as
    one request, partition 0's records in the order they came; requests 2-4
    and 6 are told their true offsets, 5 none (its records moved). Without
    the C pass each goes at once, in a request of its own, and is told the
    same."""

    async def test(cluster: FakeCluster, client: Client) -> None:
        first = await client.send(0, 9, produce(0, 0, 0, 3))
        await all_upstream(cluster, 1)
        shapes = [(0, 0, 10), (0, 0, 20), (0, 0, 30), (1, 0, 40)]
        later = [await client.send(0, 9, produce(p, to, v, 3)) for p, to, v in shapes]
        await (placed(cluster, 5) if places else all_upstream(cluster, 5))
        other = Client(await trio.open_tcp_stream(*cluster.proxy.address))
        last = await other.send(0, 9, produce(0, 0, 50, 3))
        await (placed(cluster, 6) if places else all_upstream(cluster, 6))
        # With the C pass the others wait for request 1's answer.
        assert cluster.received() == (1 if places else 6)
        for release in cluster.release.values():
            release.set()
        got = dict([await client.answer() for _ in range(5)])
        got.update([await other.answer()])
        node = cluster.nodes[1]
        assert node.received == (2 if places else 6) and cluster.nodes[2].received == 0
        assert [v for body in node.bodies[1:] for v in values(body, 0)] == [
            b"v%d" % i for v in (10, 20, 30, 40, 50) for i in (v, v + 1, v + 2)
        ]
        assert told(got[first]) == {0: (0, 0)}
        assert [told(got[c]) for c in later] == [
            {0: (0, 3)},
            {0: (0, 6)},
            {0: (0, 9)},
            {1: (0, -3)},
        ]
        assert told(got[last]) == {0: (0, 15)}
        routing = cluster.proxy.statistics.routing
        assert (routing.requests_coalesced, routing.upstream_coalesced) == (
            (6, 2) if places else (0, 0)
        )
        await other.stream.aclose()

    trio.run(with_proxy, test)


def test_requests_of_different_acks_never_share_a_request(places: bool) -> None:
    """acks=-1 in flight: an acks=1 request goes at once in a request of its
    own, an acks=0 one too (never answered), and the next acks=-1 one waits
    (without the C pass, it goes at once too)."""

    async def test(cluster: FakeCluster, client: Client) -> None:
        first = await client.send(0, 9, produce(0, 0, 0, 3))
        await all_upstream(cluster, 1)
        one = await client.send(0, 9, dataclasses.replace(produce(0, 0, 10, 3), acks=1))
        await all_upstream(cluster, 2)
        await client.send(0, 9, dataclasses.replace(produce(0, 0, 20, 3), acks=0))
        await all_upstream(cluster, 3)
        last = await client.send(0, 9, produce(0, 0, 30, 3))
        await (placed(cluster, 4) if places else all_upstream(cluster, 4))
        assert cluster.received() == (3 if places else 4)
        cluster.release[1].set()
        answers = [await client.answer() for _ in range(3)]  # acks=0: none
        assert [corr for corr, _ in answers] == [first, one, last]
        bodies = cluster.nodes[1].bodies
        assert [b.acks for b in bodies] == [-1, 1, 0, -1]
        assert [values(b, 0)[0] for b in bodies] == [b"v0", b"v10", b"v20", b"v30"]

    trio.run(with_proxy, test)


def test_a_shared_request_takes_the_smallest_timeout_and_its_errors_reach_every_client(
    places: bool,
) -> None:
    """Requests 2 and 3 (timeouts 10 s and 5 s) go in one request of timeout
    5 s (without the C pass, each in its own, of its own timeout); broker 1
    refuses partition 0 with KAFKA_STORAGE_ERROR: both hear it, and request
    4, whose partition 1 broker 2 took, does not."""

    async def test(cluster: FakeCluster, client: Client) -> None:
        await client.send(0, 9, produce(1, 1, 0, 3))  # broker 2 busy
        await client.send(0, 9, produce(0, 0, 0, 3))  # broker 1 busy
        await all_upstream(cluster, 2)
        second = await client.send(0, 9, produce(0, 0, 10, 3))
        third = await client.send(0, 9, dataclasses.replace(produce(0, 0, 20, 3), timeout_ms=5000))
        fourth = await client.send(0, 9, produce(1, 1, 30, 3))
        await (placed(cluster, 5) if places else all_upstream(cluster, 5))
        cluster.errors[0] = ErrorCode.KAFKA_STORAGE_ERROR
        for release in cluster.release.values():
            release.set()
        got = dict([await client.answer() for _ in range(5)])
        timeouts = [b.timeout_ms for b in cluster.nodes[1].bodies[1:]]
        assert timeouts == ([5000] if places else [10_000, 5000])
        assert [b.timeout_ms for b in cluster.nodes[2].bodies[1:]] == [10_000]
        for corr in (second, third):
            assert told(got[corr]) == {0: (ErrorCode.KAFKA_STORAGE_ERROR, -1)}
        assert told(got[fourth]) == {1: (0, 3)}

    trio.run(with_proxy, test)


def test_a_request_that_does_not_coalesce_does_not_overtake_the_pieces_before_it(
    places: bool,
) -> None:
    """A request naming an empty partition takes the plain plan: it waits until
    the pieces of the connection's request before it are written. (Without
    the C pass no request waits: each goes at once, in the client's order.)"""

    async def test(cluster: FakeCluster, client: Client) -> None:
        await client.send(0, 9, produce(0, 0, 0, 3))
        await all_upstream(cluster, 1)
        await client.send(0, 9, produce(0, 0, 10, 3))
        body = produce(0, 0, 20, 3)
        empty = pm.ProduceRequest.PartitionProduceData(index=1, records=None)
        (topic,) = body.topic_data
        body = dataclasses.replace(
            body,
            topic_data=[dataclasses.replace(topic, partition_data=[*topic.partition_data, empty])],
        )
        await client.send(0, 9, body)
        if places:
            with trio.move_on_after(0.3):  # the third would have gone by now (it does not)
                await all_upstream(cluster, 2)
            assert cluster.received() == 1
        else:  # the third's empty partition 1 goes to its leader, broker 2
            await all_upstream(cluster, 4)
            assert (cluster.nodes[1].received, cluster.nodes[2].received) == (3, 1)
        for release in cluster.release.values():
            release.set()
        for _ in range(3):
            _, answer = await client.answer()
            assert all(e == 0 for e, _ in told(answer).values())
        assert [values(b, 0)[0] for b in cluster.nodes[1].bodies] == [b"v0", b"v10", b"v20"]

    trio.run(with_proxy, test)


def test_an_answer_that_never_comes_is_a_timeout_for_every_client_waiting_on_it() -> None:
    """Broker 1 never answers: the request in flight and the one gathered
    behind it are each answered REQUEST_TIMED_OUT by their own deadlines."""

    async def test(cluster: FakeCluster, client: Client) -> None:
        quick = partial(dataclasses.replace, timeout_ms=100)
        await client.send(0, 9, quick(produce(0, 0, 0, 3)))
        await all_upstream(cluster, 1)
        await client.send(0, 9, quick(produce(0, 0, 10, 3)))
        for _ in range(2):
            _, answer = await client.answer()
            assert told(answer) == {0: (ErrorCode.REQUEST_TIMED_OUT, -1)}

    trio.run(partial(with_proxy, test, connect_timeout=0.1))


def test_what_gathers_is_bounded_by_the_request_budget() -> None:
    """queued_max_request_bytes holds two requests: while request 1 is in
    flight, the proxy takes one more in hand and reads no further (the
    client's later requests wait unread, backpressure); once answered, the
    rest follow and every request is answered in order."""
    body = produce(0, 0, 0, 3)
    size = len(protocol.encode_request(_header(), body))

    async def test(cluster: FakeCluster, client: Client) -> None:
        sent = [await client.send(0, 9, produce(0, 0, 0, 3))]
        await all_upstream(cluster, 1)
        sent += [await client.send(0, 9, produce(0, 0, 10 * i, 3)) for i in range(1, 6)]
        await placed(cluster, 2)
        with trio.move_on_after(0.3):  # a third would be placed by now (it is not)
            await placed(cluster, 3)
        assert cluster.proxy.statistics.routing.requests_pooled == 2
        cluster.release[1].set()
        got = [await client.answer() for _ in sent]
        assert [corr for corr, _ in got] == sent
        assert [told(answer)[0] for _, answer in got] == [(0, 3 * i) for i in range(6)]

    trio.run(partial(with_proxy, test, queued_max_request_bytes=2 * size + size // 2))


def _header() -> RequestHeader:
    return RequestHeader(
        request_api_key=0, request_api_version=9, correlation_id=1, client_id="pipe"
    )


# -- librdkafka through brokerlite -----------------------------------------------------


@pytest.mark.parametrize(
    ("compression", "partitioner"), [("none", "consistent_random"), ("lz4", "murmur2_random")]
)
def test_coalesced_reports(broker: RunningBroker, compression: str, partitioner: str) -> None:
    """A plain librdkafka producer through a coalescing proxy: every delivery
    report names its record's true place or none, read back from the broker.
    With librdkafka's CRC32 partitioner most batches are split (no offset);
    with its murmur2 one none is, and every report names its true offset,
    the shared batch's base plus the client batch's place in it. (Under
    TRAFKA_NO_SPEEDUPS=1 nothing coalesces, and the reports are as true.)"""
    topic, partitions, n = fresh("coalesce"), 6, 3000
    create(broker.bootstrap_servers, topic, partitions)
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0) as proxy:
        settings = {
            "linger.ms": 1,
            "batch.num.messages": 50,
            "partitioner": partitioner,
            "compression.type": compression,
        }
        sends = [(b"c-%d" % i, b"k-%d" % (i % 41)) for i in range(n)]
        reports = confluent_reports(proxy, topic, sends, **settings)
        routing = proxy.statistics.routing
        if batch_split.placing("murmur2"):
            assert routing.requests_coalesced > 0
            assert routing.upstream_coalesced <= routing.requests_coalesced
        else:  # coalescing needs the C pass
            assert (routing.requests_coalesced, routing.upstream_coalesced) == (0, 0)
    records = placement(broker.bootstrap_servers, topic, partitions)
    assert sorted(r.value for r in records) == sorted(v for v, _, _ in reports)
    assert all(r.partition == murmur2_partition(r.key, partitions) for r in records)
    problem = misreported(records, reports)
    assert problem is None, problem
    if partitioner == "murmur2_random":
        assert all(o is not None and o >= 0 for _, _, o in reports)


# -- the accumulators alone ------------------------------------------------------------


def test_queued_requests_go_in_order_within_the_size_rule_and_leave_no_accumulator(
    places: bool,
) -> None:
    """Forty requests of 12 lz4 batches (librdkafka's CRC32 placement, so their
    records scatter over 12 partitions) join one leader's accumulators at once,
    under 7 client ids: every record goes upstream exactly once, a client's
    records in each partition in the order of its requests; no built batch holds more
    than the cap (the largest client batch) plus one piece's estimate; and
    once all are answered no accumulator is left (client ids are the
    clients' to choose: they must not pile up). Without the C pass none is
    placed for the accumulators: each takes the plain plan."""
    partitions = 12
    topics = Topics(partitions={"t": partitions}, leaders={("t", p): 1 for p in range(partitions)})
    rng = random.Random(7)

    def placed_by_librdkafka(i: int) -> Any:
        parts: dict[int, list[Any]] = {p: [] for p in range(partitions)}
        for j in range(60 * partitions):
            key = b"key-%d" % rng.randrange(1000)
            value = b"r%d-%d" % (i, j)
            parts[crc32_partition(key, partitions)].append((1000, key, value, []))
        batches = {p: [encode_batch(r, compression=Compression.LZ4)] for p, r in parts.items() if r}
        return request(batches, acks=1, topic="t")

    bodies = [placed_by_librdkafka(i) for i in range(40)]
    if not places:
        assert all(place_spans(b, topics, "murmur2", 1 << 24) is None for b in bodies)
        return
    sent: list[Any] = []

    class Pool:
        async def send(self, *args: Any, **kwargs: Any) -> None:
            sent.append(args[4])

    async def settle(*args: Any) -> ProduceAnswer:
        return read_answer(answer(args[4]), 9)

    async def main() -> None:
        stats = RouteStats()
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                coalescer = Coalescer(nursery, settle, stats)
                pool: Any = Pool()
                shares = []
                for i, body in enumerate(bodies):
                    placed = place_spans(body, topics, "murmur2", 1 << 24)
                    assert placed is not None
                    deadline = trio.current_time() + 30
                    client_id = f"c{i % 7}"
                    shares.append(
                        coalescer.add(
                            pool, topics.leader, client_id, 9, 1, 30_000, deadline, placed
                        )
                    )
                for share in shares:
                    await share.done.wait()
                assert coalescer._leaders == {}
        assert stats.upstream_coalesced == len(sent) < len(bodies)

    trio.run(main)
    largest = max(len(p.records) for b in bodies for t in b.topic_data for p in t.partition_data)
    cap = max(largest, 16 * 1024)  # routing's _cap
    written: dict[int, list[bytes]] = {}
    for body in sent:
        for p, records in records_of(body).items():
            written.setdefault(p, []).extend(r.value for r in records)
        for t in body.topic_data:
            for p in t.partition_data:
                assert len(p.records) <= 2 * cap  # about the cap: sizes are estimates
    expected: dict[int, list[bytes]] = {}
    for body in bodies:
        for records in records_of(body).values():
            for r in records:
                expected.setdefault(murmur2_partition(r.key, partitions), []).append(r.value)
    assert {p: sorted(v) for p, v in written.items()} == {p: sorted(v) for p, v in expected.items()}
    for values in written.values():  # a partition's records of one client in its requests' order
        order = [int(v.split(b"-")[0][1:]) for v in values]
        for client in range(7):
            mine = [i for i in order if i % 7 == client]
            assert mine == sorted(mine)


def test_a_request_too_large_for_one_batch_is_answered_from_both_of_its_requests(
    places: bool,
) -> None:
    """A request's records for one partition that do not fit one batch (the
    cap: here 16 KiB) go in two upstream requests, one after the other: the
    batch that stayed whole first, told its own base offset from the first
    answer; the records moved in from the other partition next, told the
    error the second answer gives that partition. The client's answer waits
    for both. (Without the C pass the request is not placed for the
    accumulators: it takes the plain plan.)"""
    topics = Topics(partitions={"t": 2}, leaders={("t", 0): 1, ("t", 1): 1})
    keys = [k for k in (b"key-%d" % i for i in range(400)) if murmur2_partition(k, 2) == 1]
    rng = random.Random(3)

    def batch() -> bytes:
        return encode_batch([(1000, k, rng.randbytes(100), []) for k in keys[:100]])

    body = request({0: [batch()], 1: [batch()]}, acks=1, topic="t")
    if not places:
        assert place_spans(body, topics, "murmur2", 1 << 24) is None
        return
    sent: list[Any] = []

    class Pool:
        async def send(self, *args: Any, **kwargs: Any) -> None:
            sent.append(args[4])

    async def settle(*args: Any) -> ProduceAnswer:
        # The first request is written at 100, the second refused.
        errors = {1: ErrorCode.NOT_ENOUGH_REPLICAS} if len(sent) == 2 else {}
        return read_answer(answer(args[4], errors), 9)

    async def main() -> bytes:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                coalescer = Coalescer(nursery, settle, RouteStats())
                placed = place_spans(body, topics, "murmur2", 1 << 24)
                assert placed is not None
                deadline = trio.current_time() + 10
                pool: Any = Pool()
                share = coalescer.add(pool, topics.leader, "c", 9, 1, 1000, deadline, placed)
                return await coalesced_answer(share, body, 9, "librdkafka", None)

    told = protocol.decode_response_body(0, 9, trio.run(main))
    assert len(sent) == 2
    first, second = (records_of(b)[1] for b in sent)
    assert [r.value for r in first] == [r.value for r in records_of(body)[1]]
    assert [r.value for r in second] == [r.value for r in records_of(body)[0]]
    got = {p.index: p for t in told.responses for p in t.partition_responses}
    assert (got[1].error_code, got[1].base_offset) == (0, 100)
    assert (got[0].error_code, got[0].base_offset) == (ErrorCode.NOT_ENOUGH_REPLICAS, -1)
