"""The exactly-once driver against one brokerlite, its pooled connection cut at an
exact moment: right after a Produce was handed to it, before the broker read it
(what ``ss -K`` does to a socket whose bytes are still in flight: they are lost,
and the proxy's reader sees the connection broken).

Kafka's idempotence (KIP-98) makes a broker refuse a producer's batch whose first
sequence does not follow the last one it wrote for that partition, so a batch
written after a lost one is refused too, and the proxy knows to write both again.
Except (KIP-360) when the broker has no state for the producer at that
partition: then it takes any sequence. A later batch written on a new connection
while an earlier one was lost on the cut one is then written, the earlier never
is, and the broker's answers (the later batch acknowledged; the earlier, sent
again, out of order with a last sequence past it) say both were. These tests
cut the connection exactly there.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest
import trio
import trio.testing
from proxy_helpers import create, fresh, placement

from trafka.brokerlite import RunningBroker
from trafka.codec import protocol
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as pm
from trafka.codec.messages import k22_init_producer_id as ip
from trafka.codec.records import encode_batch
from trafka.proxy.filters import FilterContext
from trafka.proxy.keyrouting.exactly_once import ExactlyOnce
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.pool import UpstreamPool
from trafka.proxy.topics import Topics
from trafka.sdk import NewTopic, open_admin
from trafka.sdk.partitioners import murmur2_partition

PARTITIONS = 3
TARGET = 2  # every record's key hashes here (murmur2)
KEYS = [k for k in (b"k-%d" % i for i in range(200)) if murmur2_partition(k, PARTITIONS) == TARGET]


class CutOnce(trio.abc.Stream):
    """A pooled connection that, once armed, loses the next Produce written to it
    and breaks, before the caller's write returns."""

    def __init__(self, inner: trio.abc.Stream, armed: list[bool]) -> None:
        self.inner = inner
        self.armed = armed

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.armed[0] and bytes(data[4:6]) == b"\x00\x00":  # a Produce's api key
            self.armed[0] = False
            await self.inner.aclose()
            # The pool's reader sees the connection broken before the write returns.
            await trio.testing.wait_all_tasks_blocked()
            return
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


def client_batch(pid: int, epoch: int, first: int, n: int) -> bytes:
    """``n`` records (values ``v-first``...), each about 120 bytes, all keyed to TARGET."""
    records = [
        (1_000 + i, KEYS[i % len(KEYS)], b"v-%d-" % i + b"x" * 100, [])
        for i in range(first, first + n)
    ]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=0)


def produce_request(topic: str, batches: dict[int, bytes]) -> Any:
    return pm.ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            pm.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    pm.ProduceRequest.PartitionProduceData(index=p, records=data)
                    for p, data in batches.items()
                ],
            )
        ],
    )


async def _driver(
    nursery: trio.Nursery, connect: Any, topic: str, node: int
) -> tuple[ExactlyOnce, RouteStats, tuple[int, int]]:
    """The exactly-once driver on a pool of ``connect``'s connections to one
    broker, and a new idempotent producer it saw born."""
    pool = UpstreamPool(nursery, connect, 1 << 24)
    topics = Topics({topic: PARTITIONS}, {(topic, p): node for p in range(PARTITIONS)})
    stats = RouteStats()
    eos = ExactlyOnce(pool, topics, stats, lambda _: None, lambda: [node], 1 << 24)
    init = ip.InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
    )
    waiter = await pool.send(node, "cut", 22, 4, init)
    answer = protocol.decode_response(await pool.wait(waiter, trio.current_time() + 10), 22, 4)[1]
    assert answer.error_code == 0
    eos.init_answered(answer)
    return eos, stats, (answer.producer_id, answer.producer_epoch)


@pytest.mark.parametrize("requests", ["one request, two rounds", "two requests"])
def test_a_batch_lost_on_a_cut_connection_is_never_taken_as_written(
    broker: RunningBroker, requests: str
) -> None:
    """Two client batches of a new idempotent producer (partitions 0 and 1), every
    record moved to partition 2 in two upstream batches of consecutive sequences;
    the connection is cut as the first is written. Written in one request (two
    rounds) or in two (the second planned before the first's loss is settled),
    the client, retrying what it is answered with an error as librdkafka does,
    ends with every record in partition 2 exactly once, in its order."""
    topic = fresh("cut-moment")
    create(broker.bootstrap_servers, topic, PARTITIONS)
    host, port = broker.address
    node = broker.config.node_id
    armed = [False]
    n = 100  # ~12 KiB a client batch: two make more than one upstream batch holds

    async def connect(node_id: int) -> trio.abc.Stream:
        assert node_id == node
        return CutOnce(await trio.open_tcp_stream(host, port), armed)

    async def main() -> None:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                eos, stats, producer = await _driver(nursery, connect, topic, node)
                batches = {
                    0: client_batch(*producer, 0, n),
                    1: client_batch(*producer, n, n),
                }
                ctx = FilterContext(0, 9, 1, "cut", None, node)
                deadline = trio.current_time() + 20
                if requests == "two requests":
                    bodies = [produce_request(topic, {p: data}) for p, data in batches.items()]
                else:
                    bodies = [produce_request(topic, batches)]

                async def plan(body: Any) -> Any:
                    result = await eos.plan(ctx, body, producer, "murmur2", deadline)
                    assert isinstance(result, tuple)
                    return result

                async def settle(body: Any, planned: Any) -> list[int]:
                    answer = await eos.settle(ctx, body, *planned, deadline)
                    read = protocol.decode_response_body(0, ctx.api_version, answer)
                    return [p.error_code for t in read.responses for p in t.partition_responses]

                armed[0] = True
                # Every request planned (and its batches written) before any is settled.
                planned = [await plan(body) for body in bodies]
                assert not armed[0]  # the cut happened
                errors = [await settle(body, p) for body, p in zip(bodies, planned, strict=True)]
                assert any(any(e) for e in errors)  # the lost write is not said written
                assert stats.batches_held == 1  # the later batch waited for it
                # The client sends again, with the same sequences, what was answered
                # with an error (the proxy says REQUEST_TIMED_OUT for a lost write).
                for _ in range(5):
                    again = [b for b, e in zip(bodies, errors, strict=True) if any(e)]
                    if not again:
                        break
                    assert {c for e in errors for c in e} <= {0, ErrorCode.REQUEST_TIMED_OUT}
                    bodies = again
                    errors = [await settle(body, await plan(body)) for body in bodies]
                assert all(not any(e) for e in errors)
                nursery.cancel_scope.cancel()

    trio.run(main)
    records = placement(broker.bootstrap_servers, topic, PARTITIONS)
    values = [r.value.split(b"-")[1] for r in sorted(records, key=lambda r: r.offset)]
    assert {r.partition for r in records} == {TARGET}
    assert Counter(values) == Counter(b"%d" % i for i in range(2 * n))
    # Each client batch's records in its order (the two batches' order is the proxy's).
    for first in (0, n):
        mine = [int(v) for v in values if first <= int(v) < first + n]
        assert mine == sorted(mine)


def test_a_new_producers_first_batch_refused_for_good_leaves_no_false_report(
    broker: RunningBroker,
) -> None:
    """KIP-360: a broker with no state for a producer takes its first batch at
    any sequence. A new producer's first batch for a partition is refused for
    good (MESSAGE_TOO_LARGE, under the topic's ``max.message.bytes``) while its
    second was already planned: the second must not reach the broker before
    the first's answer (the broker would take it over the gap, the proxy
    would give the dead batch's numbers to the third, and the broker's
    out-of-order answer to the third, checked against its last sequence,
    would say the third was written when it was not). Every record the client
    is told is written is in the partition, once; the refused ones are not."""
    topic = fresh("dead-first")

    async def setup() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.create_topics(
                [NewTopic(topic, PARTITIONS, configs={"max.message.bytes": "6000"})]
            )

    anyio.run(setup, backend="trio")
    host, port = broker.address
    node = broker.config.node_id

    async def connect(node_id: int) -> trio.abc.Stream:
        return await trio.open_tcp_stream(host, port)

    told_written: list[int] = []

    async def main() -> None:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                eos, _, producer = await _driver(nursery, connect, topic, node)
                ctx = FilterContext(0, 9, 1, "dead", None, node)
                deadline = trio.current_time() + 20
                # ~12 KiB (too large), then two of ~1.2 KiB, from client
                # partitions 0, 1 and 2 (each at sequence 0); every key hashes to TARGET.
                counts = {0: 100, 100: 10, 110: 10}
                bodies = {
                    first: produce_request(topic, {p: client_batch(*producer, first, n)})
                    for p, (first, n) in enumerate(counts.items())
                }
                planned = {}
                for first in (0, 100):  # the second planned before the first is answered
                    result = await eos.plan(ctx, bodies[first], producer, "murmur2", deadline)
                    assert isinstance(result, tuple)
                    planned[first] = result
                for first in (0, 100, 110):
                    for _ in range(5):  # the client retries what it is told to retry
                        result = planned.pop(first, None) or await eos.plan(
                            ctx, bodies[first], producer, "murmur2", deadline
                        )
                        assert isinstance(result, tuple)
                        answer = await eos.settle(ctx, bodies[first], *result, deadline)
                        read = protocol.decode_response_body(0, ctx.api_version, answer)
                        (code,) = [
                            p.error_code for t in read.responses for p in t.partition_responses
                        ]
                        if code != ErrorCode.REQUEST_TIMED_OUT:
                            break
                    if code == 0:
                        told_written.extend(range(first, first + counts[first]))
                    else:
                        assert first == 0 and code == ErrorCode.MESSAGE_TOO_LARGE, code
                nursery.cancel_scope.cancel()

    trio.run(main)
    assert told_written == list(range(100, 120))
    records = placement(broker.bootstrap_servers, topic, PARTITIONS)
    values = sorted(int(r.value.split(b"-")[1]) for r in records)
    assert values == told_written
