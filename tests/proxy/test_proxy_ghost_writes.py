"""A restarted proxy and the dead one's last write, still in the network (#46).

The exactly-once driver against one brokerlite, twice: the first driver (the
proxy before its restart) sees an idempotent producer born and writes a client
batch routed to partition TARGET, but the write stays in the network (held
by the test) and the driver dies. The second driver (the restarted proxy) gets
another client batch of the producer, of the same record count, also routed
to TARGET: it asks the leader for the producer's last sequence (none yet) and
numbers the batch from 0, the very numbers of the dead proxy's write.

Kafka's idempotent producer rules (KIP-98; ``ProducerStateManager`` keeps a
producer's last five batches per partition): a batch whose first and last
sequence equal one already written is a retry, answered with the written
one's base offset and no error, and nothing is written. So if the dead
proxy's write lands after the restarted proxy asked the leader, and before
its own write, the restarted proxy's batch is answered as that write's
duplicate: the client is told records are written that are in no log.

The restarted proxy asks no leader about a producer it did not see born until
its restart grace (``--journal-takeover-grace-ms``, from its start) has passed,
which lets the dead proxy's write land first; a client request whose own
timeout ends before the grace is answered REQUEST_TIMED_OUT, nothing asked
nor written, and retried. The test drives trio's clock (a ``MockClock`` the
test jumps past the grace) and the held write, so the order of events is the
test's, not timing luck's.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import trio
import trio.testing
from proxy_helpers import create, fresh, placement, request

from trafka.brokerlite import RunningBroker
from trafka.codec import protocol
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k22_init_producer_id as ip
from trafka.codec.records import encode_batch
from trafka.proxy.filters import FilterContext
from trafka.proxy.keyrouting.exactly_once import ExactlyOnce
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.keyrouting.sync_grace import GraceOutlasts, SyncGrace
from trafka.proxy.pool import UpstreamPool
from trafka.proxy.topics import Topics
from trafka.sdk.partitioners import murmur2_partition

PARTITIONS = 3
TARGET = 2  # every record's key hashes here (murmur2)
KEYS = [k for k in (b"k-%d" % i for i in range(200)) if murmur2_partition(k, PARTITIONS) == TARGET]
N = 10  # records a client batch
# Far past the test's real run time (trio's MockClock at rate 1 moves with it):
# it passes only when the test jumps the clock.
GRACE = 1000.0


def _is_produce(data: bytes | bytearray | memoryview) -> bool:
    return bytes(data[4:6]) == b"\x00\x00"  # a request frame's api key, after its size


class InTheNetwork(trio.abc.Stream):
    """The dead proxy's pooled connection: once armed, the next Produce written
    to it stays in the network (held here; the writer's call returns) until
    :meth:`land`, which sends it on and returns once the broker answered."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.armed = False
        self.held: bytes | None = None
        self.released = False
        self.answered = trio.Event()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.armed and _is_produce(data):
            self.armed, self.held = False, bytes(data)
            return
        await self.inner.send_all(data)

    async def land(self) -> None:
        if not self.released:
            self.released = True
            assert self.held is not None
            await self.inner.send_all(self.held)
        await self.answered.wait()

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        got = await self.inner.receive_some(max_bytes)
        if self.released and got:
            self.answered.set()  # the broker wrote it before it answered (one broker, acks=all)
        return got

    async def aclose(self) -> None:
        await self.inner.aclose()


class BeforeFirstProduce(trio.abc.Stream):
    """The restarted proxy's pooled connection: its first Produce reaches the
    broker only after ``before()`` (the latest the dead proxy's write can land
    for the restarted proxy to be written over it)."""

    def __init__(self, inner: trio.abc.Stream, before: Any) -> None:
        self.inner = inner
        self.before = before

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.before is not None and _is_produce(data):
            before, self.before = self.before, None
            await before()
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


def client_batch(pid: int, epoch: int, name: bytes) -> bytes:
    """``N`` records valued ``name-i``, all keyed to TARGET, at sequence 0."""
    records = [(1_000 + i, KEYS[i], b"%s-%d" % (name, i), []) for i in range(N)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=0)


@pytest.mark.parametrize(
    "grace",
    [
        pytest.param(
            0.0,
            marks=pytest.mark.xfail(
                strict=True,
                raises=AssertionError,
                reason="without the grace the dead proxy's write takes the new batch's numbers",
            ),
            id="no grace (the hole)",
        ),
        pytest.param(GRACE, id="grace"),
    ],
)
def test_a_dead_proxys_late_write_never_makes_a_new_batch_said_written(
    broker: RunningBroker, grace: float
) -> None:
    topic = fresh("ghost")
    create(broker.bootstrap_servers, topic, PARTITIONS)
    host, port = broker.address
    node = broker.config.node_id
    topics = Topics({topic: PARTITIONS}, {(topic, p): node for p in range(PARTITIONS)})
    ghosts: list[InTheNetwork] = []
    answers: list[tuple[int, int]] = []  # the restarted proxy's (error, base offset)
    clock = trio.testing.MockClock(rate=1)

    async def dead_connection(node_id: int) -> trio.abc.Stream:
        ghosts.append(InTheNetwork(await trio.open_tcp_stream(host, port)))
        return ghosts[-1]

    async def ghost_lands() -> None:
        await ghosts[0].land()

    async def new_connection(node_id: int) -> trio.abc.Stream:
        return BeforeFirstProduce(await trio.open_tcp_stream(host, port), ghost_lands)

    async def main() -> None:
        with trio.fail_after(60) as timeout:
            async with trio.open_nursery() as nursery:
                ctx = FilterContext(0, 9, 1, "ghost", None, node)
                # The proxy before its restart: the producer is born through it.
                pool = UpstreamPool(nursery, dead_connection, 1 << 24)
                dead = ExactlyOnce(
                    pool, topics, RouteStats(), lambda _: None, lambda: [node], 1 << 24,
                    restart_grace=grace,
                )  # fmt: skip
                init = ip.InitProducerIdRequest(
                    transactional_id=None,
                    transaction_timeout_ms=60_000,
                    producer_id=-1,
                    producer_epoch=-1,
                )
                waiter = await pool.send(node, "ghost", 22, 4, init)
                frame = await pool.wait(waiter, trio.current_time() + 10)
                born = protocol.decode_response(frame, 22, 4)[1]
                assert born.error_code == 0
                dead.init_answered(born)
                producer = (born.producer_id, born.producer_epoch)
                (ghost,) = ghosts
                ghost.armed = True
                # Client partition 0's batch: written (a producer seen born is
                # not held by the grace), but still in the network when the proxy dies.
                first = request({0: [client_batch(*producer, b"a")]}, topic=topic)
                planned = await dead.plan(
                    ctx, first, producer, "murmur2", clock.current_time() + 30
                )
                assert isinstance(planned, tuple) and ghost.held is not None

                # The restarted proxy, and client partition 1's batch (as many records).
                stats = RouteStats()
                restarted = ExactlyOnce(
                    UpstreamPool(nursery, new_connection, 1 << 24),
                    topics, stats, lambda _: None, lambda: [node], 1 << 24,
                    restart_grace=grace,
                )  # fmt: skip
                second = request({1: [client_batch(*producer, b"b")]}, topic=topic)

                async def send(timeout_s: float) -> tuple[int, int]:
                    deadline = trio.current_time() + timeout_s
                    result = await restarted.plan(ctx, second, producer, "murmur2", deadline)
                    if not isinstance(result, tuple):  # answered by the proxy itself
                        read = protocol.encode_response_body(0, 9, result)
                    else:
                        read = await restarted.settle(ctx, second, *result, deadline)
                    body = protocol.decode_response_body(0, 9, read)
                    ((error, offset),) = [
                        (p.error_code, p.base_offset)
                        for t in body.responses
                        for p in t.partition_responses
                    ]
                    return error, offset

                if grace:
                    # A request whose timeout ends within the grace: answered
                    # REQUEST_TIMED_OUT, no leader asked, nothing written.
                    async with trio.open_nursery() as inner:
                        inner.start_soon(lambda: _append(answers, send(5)))
                        await trio.testing.wait_all_tasks_blocked()
                        clock.jump(5)
                    assert answers.pop() == (ErrorCode.REQUEST_TIMED_OUT, -1)
                    assert stats.sequence_lookups == 0
                    # The dead proxy's write lands within the grace; the client
                    # sends its batch again, which waits out the grace.
                    async with trio.open_nursery() as inner:
                        inner.start_soon(lambda: _append(answers, send(GRACE + 30)))
                        await trio.testing.wait_all_tasks_blocked()
                        await ghost.land()
                        clock.jump(GRACE)
                        timeout.deadline += GRACE
                else:
                    answers.append(await send(30))
                nursery.cancel_scope.cancel()

    trio.run(main, clock=clock)
    values = Counter(r.value for r in placement(broker.bootstrap_servers, topic, PARTITIONS))
    # The dead proxy's write landed, once.
    assert all(values[b"a-%d" % i] == 1 for i in range(N)), values
    ((error, offset),) = answers
    assert error == ErrorCode.NONE
    # Said written: every record of the batch is in the log, once. (Its
    # records moved, so the answer names none, see routing.unknown_base_offset.)
    assert all(values[b"b-%d" % i] == 1 for i in range(N)), values
    assert offset < 0


async def _append(out: list[Any], answer: Any) -> None:
    out.append(await answer)


def test_a_producer_another_proxy_routed_waits_the_grace_from_its_first_sync_only() -> None:
    """With a directory journal, a producer this proxy did not see born whose
    placements the journal holds (a former instance's, or a killed worker's
    read from its directory) waits the grace from its first sync, even long
    after the proxy's start: the proxy that routed it may have left writes in
    the network. One without placements then is not held, then or later."""

    async def main() -> None:
        grace = SyncGrace(10.0)
        assert trio.current_time() == 0
        with pytest.raises(GraceOutlasts):  # the restart grace outlasts the request
            await grace.before_sync(1, 0, False, 4.0)
        assert trio.current_time() == 0  # refused at once: waiting cannot help
        await trio.sleep(104)  # long after the start
        await grace.before_sync(1, 0, False, 200.0)  # no placements: at once
        assert trio.current_time() == 104.0
        with pytest.raises(GraceOutlasts):
            await grace.before_sync(2, 0, True, 105.0)
        assert trio.current_time() == 104.0
        await grace.before_sync(2, 0, True, 200.0)  # from its first sync, at 104
        assert trio.current_time() == 114.0
        await grace.before_sync(2, 0, True, 200.0)  # once waited, not again
        await grace.before_sync(1, 0, True, 200.0)  # decided at its first sync
        await grace.before_sync(2, 1, True, 200.0)  # a new epoch: its own first sync
        assert trio.current_time() == 124.0

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
