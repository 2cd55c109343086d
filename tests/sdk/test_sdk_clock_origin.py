"""The clients under event-loop clocks of any origin, against a real brokerlite.

A monotonic clock's zero means nothing: after a boot it reads seconds, trio
adds a random offset to its own, and nothing forbids a clock that reads below
zero. So no "never" and no "not before" may be a number such as 0 compared
with it. The clients run here on trio clocks (trio takes any
:class:`trio.abc.Clock`) that read about 0 when the run starts (a machine booted
moments ago) and far below 0, and must do what they do on any other clock.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest
import trio
from sdk_brokers import SHARE_HEARTBEATS, fresh, module_broker, produce, share_queue

from trafka.brokerlite import RunningBroker
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer
from trafka.sdk.share_consumer import open_share_consumer

pytestmark = pytest.mark.timeout(120)


class OriginClock(trio.abc.Clock):
    """Real time, read from ``origin`` at the start of the run."""

    def __init__(self, origin: float) -> None:
        self.origin = origin
        self._zero = time.perf_counter()

    def start_clock(self) -> None:
        self._zero = time.perf_counter()

    def current_time(self) -> float:
        return self.origin + (time.perf_counter() - self._zero)

    def deadline_to_sleep_time(self, deadline: float) -> float:
        return deadline - self.current_time()


ORIGINS = [pytest.param(0.0, id="just-booted"), pytest.param(-1e6, id="below-zero")]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "clock-origin", **SHARE_HEARTBEATS)


def run_at(origin: float, fn: Callable[[], Awaitable[Any]]) -> Any:
    async def bounded() -> Any:
        assert anyio.current_time() < origin + 60  # the clients read this clock
        with anyio.fail_after(30):
            return await fn()

    return anyio.run(bounded, backend="trio", backend_options={"clock": OriginClock(origin)})


async def _topic(bootstrap: str, partitions: int = 1) -> str:
    topic = fresh("clock")
    async with open_admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions)])
    return topic


async def _read(consumer: Any, n: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < n:
        for records in (await consumer.getmany(timeout_ms=200)).values():
            got += [r.value for r in records]
    return got


@pytest.mark.parametrize("origin", ORIGINS)
def test_produce_and_read(broker: RunningBroker, origin: float) -> None:
    bs = broker.bootstrap_servers

    async def go() -> list[bytes]:
        topic = await _topic(bs)
        async with open_producer(bootstrap_servers=bs, linger_ms=5) as producer:
            futures = [await producer.send(topic, b"%d" % i) for i in range(50)]
            await producer.flush()
            assert [(await f).offset for f in futures] == list(range(50))
        async with open_consumer(bootstrap_servers=bs) as consumer:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            return await _read(consumer, 50)

    assert run_at(origin, go) == [b"%d" % i for i in range(50)]


@pytest.mark.parametrize("origin", ORIGINS)
def test_transactions(broker: RunningBroker, origin: float) -> None:
    bs = broker.bootstrap_servers

    async def go() -> list[bytes]:
        topic = await _topic(bs)
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as producer:
            await producer.init_transactions()
            for n in range(3):
                producer.begin_transaction()
                await producer.send(topic, b"%d" % n)
                await producer.commit_transaction()
        async with open_consumer(
            bootstrap_servers=bs, isolation_level="read_committed"
        ) as consumer:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            return await _read(consumer, 3)

    assert run_at(origin, go) == [b"0", b"1", b"2"]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("origin", ORIGINS)
def test_a_group_member_reads_and_commits(
    broker: RunningBroker, origin: float, protocol: str
) -> None:
    bs = broker.bootstrap_servers

    async def go() -> tuple[list[bytes], int | None]:
        topic = await _topic(bs, 2)
        await produce(bs, topic, [b"%d" % i for i in range(20)], partitions=2)
        group = fresh("clock-group")
        settings: dict[str, Any] = {"group_protocol": protocol}
        if protocol == "classic":
            settings["session_timeout_ms"] = 6000
        async with open_consumer(
            bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest", **settings
        ) as consumer:
            consumer.subscribe([topic])
            got = await _read(consumer, 20)
            await consumer.commit()
            committed = await consumer.committed(TopicPartition(topic, 0))
        return sorted(got), committed

    got, committed = run_at(origin, go)
    assert got == sorted(b"%d" % i for i in range(20))
    assert committed == 10


@pytest.mark.parametrize("origin", ORIGINS)
def test_a_share_consumer_reads_and_acknowledges(broker: RunningBroker, origin: float) -> None:
    bs = broker.bootstrap_servers

    async def go() -> list[bytes]:
        topic, group = await share_queue(bs)
        await produce(bs, topic, [b"%d" % i for i in range(10)])
        got: list[bytes] = []
        async with open_share_consumer(topic, bootstrap_servers=bs, group_id=group) as consumer:
            while len(got) < 10:
                got += [r.value for r in await consumer.poll(timeout_ms=200)]
            await consumer.commit()
        return got

    assert sorted(run_at(origin, go)) == sorted(b"%d" % i for i in range(10))


class _Yields(trio.abc.Instrument):
    """How many times a task gives the scheduler a turn."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.count = 0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.count += 1


@pytest.mark.parametrize("origin", ORIGINS)
def test_a_transaction_begun_ahead_of_a_commit_lets_other_tasks_run(
    broker: RunningBroker, origin: float
) -> None:
    """In a transaction begun while the previous one commits, send() skips its
    yield for a new batch within 10 ms of the last one it made; a producer that
    has made none yet (its first transaction only committed offsets) yields at
    its first new batch, whatever the clock reads."""
    bs = broker.bootstrap_servers

    async def go() -> int:
        topic = await _topic(bs, 8)
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as producer:
            await producer.init_transactions()
            await producer.partitions_for(topic)  # no send waits for metadata
            producer.begin_transaction()
            await producer.send_offsets_to_transaction({TopicPartition(topic, 0): 0}, fresh("g"))
            committed = await producer.commit_transaction(wait=False)
            producer.begin_transaction()  # ahead of the commit
            assert producer._window  # what this test is about
            yields = _Yields(trio.lowlevel.current_task())
            trio.lowlevel.add_instrument(yields)
            for partition in range(8):  # a new batch each
                await producer.send(topic, b"ahead", partition=partition)
            trio.lowlevel.remove_instrument(yields)
            await committed.wait()
            await producer.commit_transaction()
        return yields.count

    assert run_at(origin, go) >= 1
