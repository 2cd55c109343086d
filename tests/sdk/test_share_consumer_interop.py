"""trafka's share consumer and librdkafka's (confluent-kafka's ShareConsumer) in
the same share group on brokerlite: records produced once are each delivered
once across both members, and what one member gives back (RELEASE, or closing
without acknowledging) the other receives with delivery_count 2."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest
from confluent_kafka import AcknowledgeType as CkAcknowledgeType
from confluent_kafka import ShareConsumer as CkShareConsumer
from sdk_brokers import SHARE_HEARTBEATS, module_broker, produce, share_queue

from trafka.brokerlite import RunningBroker
from trafka.sdk.share_consumer import AcknowledgeType, open_share_consumer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "share-interop", **SHARE_HEARTBEATS)


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def queue(bs: str, values: list[bytes], partitions: int = 1) -> tuple[str, str]:
    """A fresh topic holding ``values`` and a share group reading it from the start."""
    topic, group = await share_queue(bs, partitions)
    await produce(bs, topic, values, partitions)
    return topic, group


def librdkafka(bs: str, group: str, **extra: Any) -> CkShareConsumer:
    return CkShareConsumer({"bootstrap.servers": bs, "group.id": group, **extra})


async def test_a_mixed_group_delivers_every_record_once(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    values = [b"m%d" % i for i in range(90)]
    topic, group = await queue(bs, values, partitions=3)
    theirs: list[bytes] = []
    stop = threading.Event()

    def run_librdkafka() -> None:
        consumer = librdkafka(bs, group)
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                for message in consumer.poll(0.1) or []:
                    assert message.error() is None, message.error()
                    theirs.append(message.value())
        finally:
            consumer.close()

    ours: list[bytes] = []
    async with open_share_consumer(
        topic, bootstrap_servers=bs, group_id=group, max_poll_records=5
    ) as consumer:
        with anyio.fail_after(60):
            # trafka takes a first batch and holds it (locked to it, nothing more
            # is fetched meanwhile) while librdkafka joins and takes records of its own.
            while not ours:
                ours += [r.value for r in await consumer.poll(timeout_ms=100)]
            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, run_librdkafka)
                try:
                    while not theirs:
                        await anyio.sleep(0.05)
                    while len(ours) + len(theirs) < len(values):
                        ours += [r.value for r in await consumer.poll(timeout_ms=100)]
                finally:
                    stop.set()
    assert ours and theirs
    assert sorted(ours + theirs) == sorted(values)  # each once, whoever got it


async def test_what_trafka_releases_librdkafka_receives_again(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, group = await queue(bs, [b"x", b"y"])
    async with open_share_consumer(
        topic, bootstrap_servers=bs, group_id=group, share_acknowledgement_mode="explicit"
    ) as consumer:
        taken: list[Any] = []
        with anyio.fail_after(30):
            while len(taken) < 2:
                taken += await consumer.poll(timeout_ms=200)
        for record in taken:
            consumer.acknowledge(record, type=AcknowledgeType.RELEASE)
        assert set((await consumer.commit()).values()) == {None}

    def receive() -> list[tuple[bytes, int]]:
        ck = librdkafka(bs, group)
        ck.subscribe([topic])
        got: list[tuple[bytes, int]] = []
        try:
            for _ in range(300):
                got += [
                    (m.value(), m.delivery_count()) for m in ck.poll(0.1) or [] if not m.error()
                ]
                if len(got) >= 2:
                    break
        finally:
            ck.close()
        return got

    assert sorted(await anyio.to_thread.run_sync(receive)) == [(b"x", 2), (b"y", 2)]


async def test_what_librdkafka_leaves_unacknowledged_trafka_receives_again(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    topic, group = await queue(bs, [b"p", b"q"])

    def take_and_leave() -> list[bytes]:
        ck = librdkafka(bs, group, **{"share.acknowledgement.mode": "explicit"})
        ck.subscribe([topic])
        got: list[Any] = []
        try:
            for _ in range(300):
                got += [m for m in ck.poll(0.1) or [] if not m.error()]
                if len(got) >= 2:
                    break
            ck.acknowledge(got[0], CkAcknowledgeType.RELEASE)
            ck.commit_sync()
        finally:
            ck.close()  # the second one was never acknowledged
        return [m.value() for m in got]

    assert sorted(await anyio.to_thread.run_sync(take_and_leave)) == [b"p", b"q"]
    async with open_share_consumer(topic, bootstrap_servers=bs, group_id=group) as consumer:
        again: list[Any] = []
        with anyio.fail_after(30):
            while len(again) < 2:
                again += await consumer.poll(timeout_ms=200)
    assert sorted((r.value, r.delivery_count) for r in again) == [(b"p", 2), (b"q", 2)]
