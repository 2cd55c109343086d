"""Clients started in one hook and stopped in another (start_* and stop()/aclose()),
on asyncio and on trio, against brokerlite: what they do between is what an
``async with`` client does; stop flushes and commits; errors come out of the
call that caused them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import trio
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.sdk import (
    ConfigError,
    NewTopic,
    TopicPartition,
    open_admin,
    open_producer,
    start_admin,
    start_consumer,
    start_producer,
)
from trafka.sdk.errors import UsageError


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "hosting")


class App:
    """A framework's app: a startup hook and a shutdown hook, the clients kept on it."""

    def __init__(self, servers: str, topic: str) -> None:
        self.servers, self.topic = servers, topic

    async def startup(self) -> None:
        self.admin = await start_admin(bootstrap_servers=self.servers)
        await self.admin.create_topics([NewTopic(self.topic, 2)])
        self.producer = await start_producer(bootstrap_servers=self.servers, linger_ms=1000)
        self.consumer = await start_consumer(
            self.topic,
            bootstrap_servers=self.servers,
            group_id=f"g-{self.topic}",
            auto_offset_reset="earliest",
        )

    async def handle(self, n: int) -> None:
        for i in range(n):
            await self.producer.send(self.topic, b"v%d" % i, key=b"k%d" % i)

    async def shutdown(self) -> None:
        await self.producer.stop()  # flushes what linger held back
        await self.consumer.aclose()
        await self.admin.stop()


async def scenario(servers: str, topic: str) -> dict[int, int | None]:
    app = App(servers, topic)
    await app.startup()
    await app.handle(30)
    got = 0
    while got < 30:
        batch = await app.consumer.getmany(timeout_ms=5000)
        got += sum(len(records) for records in batch.values())
    await app.consumer.commit()
    await app.handle(10)  # held back by linger.ms when shutdown comes
    await app.shutdown()
    await app.producer.stop()  # again: nothing more to do
    async with open_admin(bootstrap_servers=servers) as admin:
        ends = await admin.list_offsets({TopicPartition(topic, p): "latest" for p in range(2)})
    return {tp.partition: info[0] if info else None for tp, info in ends.items()}


def test_hooks_on_asyncio(broker: RunningBroker) -> None:
    topic = fresh("hosted-asyncio")
    ends = asyncio.run(asyncio.wait_for(scenario(broker.bootstrap_servers, topic), 60))
    assert sum(v or 0 for v in ends.values()) == 40  # stop() flushed the last 10


def test_hooks_on_trio(broker: RunningBroker) -> None:
    topic = fresh("hosted-trio")

    async def main() -> dict[int, int | None]:
        with trio.fail_after(60):
            return await scenario(broker.bootstrap_servers, topic)

    assert sum(v or 0 for v in trio.run(main).values()) == 40


def test_start_raises_what_opening_raises_and_stop_is_for_started_clients(
    broker: RunningBroker,
) -> None:
    async def main() -> None:
        with pytest.raises(ConfigError, match="lingr_ms"):
            await start_producer(bootstrap_servers=broker.bootstrap_servers, lingr_ms=5)
        async with open_producer(bootstrap_servers=broker.bootstrap_servers) as producer:
            with pytest.raises(UsageError, match="async with block"):
                await producer.stop()

    trio.run(main)


def test_a_client_never_stopped_ends_with_its_loop(broker: RunningBroker) -> None:
    """Nothing hangs and nothing leaks an error when the loop ends first."""

    async def main() -> None:
        await start_producer(bootstrap_servers=broker.bootstrap_servers)

    trio.run(main)
    asyncio.run(main())
