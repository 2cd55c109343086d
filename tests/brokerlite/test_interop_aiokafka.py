"""aiokafka against brokerlite: admin, idempotent produce with compression, group consume,
and transactions (consume-transform-produce with aborts, zombie fencing)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import ProducerFenced
from aiokafka.structs import TopicPartition

pytestmark = pytest.mark.timeout(90)


async def _round_trip(servers: str, topic: str, compression: str | None) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
        assert topic in await admin.list_topics()
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=servers, compression_type=compression, enable_idempotence=True
    )
    await producer.start()
    try:
        sent: dict[tuple[int, int], bytes] = {}
        for i in range(40):
            meta = await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d" % i, partition=i % 2)
            sent[(meta.partition, meta.offset)] = b"v%d" % i
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=servers,
        group_id=f"{topic}-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        got: dict[tuple[int, int], bytes] = {}
        while len(got) < len(sent):
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
            for records in batches.values():
                for r in records:
                    got[(r.partition, r.offset)] = r.value
        assert got == sent
        await consumer.commit()
        committed = await consumer.committed(TopicPartition(topic, 0))
        assert committed == 20
        times = await consumer.offsets_for_times({TopicPartition(topic, 0): 0})
        assert times[TopicPartition(topic, 0)].offset == 0
    finally:
        await consumer.stop()


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"], ids=str)
def test_produce_and_consume(running: Any, topic_name: str, compression: str | None) -> None:
    async def main() -> None:
        await asyncio.wait_for(_round_trip(running.bootstrap_servers, topic_name, compression), 60)

    asyncio.run(main())


async def _create(servers: str, *topics: tuple[str, int]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(t, num_partitions=n, replication_factor=1) for t, n in topics]
        )
    finally:
        await admin.close()


async def _values(servers: str, topic: str, isolation: str) -> list[bytes]:
    """Every value of ``topic`` up to its end (the last stable offset under read_committed)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=servers, auto_offset_reset="earliest", isolation_level=isolation
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        ends = await consumer.end_offsets(partitions)
        values: list[bytes] = []
        while True:
            positions = {tp: await consumer.position(tp) for tp in ends}
            if all(positions[tp] >= end for tp, end in ends.items()):
                return values
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
            values += [r.value for records in batches.values() for r in records]
    finally:
        await consumer.stop()


async def _transform(servers: str, inputs: int) -> int:
    """aiokafka's consume-transform-produce loop: every other transaction aborts, and the
    consumer rewinds to the group's committed offsets to process those records again."""
    producer = AIOKafkaProducer(bootstrap_servers=servers, transactional_id="aio-ctp")
    consumer = AIOKafkaConsumer(
        "aio-in",
        bootstrap_servers=servers,
        group_id="aio-ctp-group",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    await producer.start()
    await consumer.start()
    try:
        done = 0
        cycle = 0
        while done < inputs:
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500, max_records=7), 30)
            if not batches:
                continue
            commit = cycle % 2 == 0
            cycle += 1
            await producer.begin_transaction()
            offsets = {}
            for tp, records in batches.items():
                for r in records:
                    await producer.send(
                        "aio-out", r.value.replace(b"in", b"out"), partition=tp.partition
                    )
                offsets[tp] = records[-1].offset + 1
            await producer.send_offsets_to_transaction(offsets, "aio-ctp-group")
            if commit:
                await producer.commit_transaction()
                done += sum(len(records) for records in batches.values())
            else:
                await producer.abort_transaction()
                for tp in batches:
                    consumer.seek(tp, await consumer.committed(tp) or 0)
        return cycle
    finally:
        await consumer.stop()
        await producer.stop()


def test_consume_transform_produce_commits_and_aborts(running: Any) -> None:
    servers = running.bootstrap_servers
    inputs = 60

    async def main() -> None:
        await _create(servers, ("aio-in", 2), ("aio-out", 2))
        producer = AIOKafkaProducer(bootstrap_servers=servers)
        await producer.start()
        try:
            for i in range(inputs):
                await producer.send_and_wait("aio-in", b"in-%d" % i, partition=i % 2)
        finally:
            await producer.stop()
        cycles = await asyncio.wait_for(_transform(servers, inputs), 60)
        assert cycles >= 4  # some transactions aborted and their inputs were redone
        expected = sorted(b"out-%d" % i for i in range(inputs))
        assert sorted(await _values(servers, "aio-out", "read_committed")) == expected
        # The aborted transactions' records are in the log, hidden from read_committed.
        uncommitted = await _values(servers, "aio-out", "read_uncommitted")
        assert len(uncommitted) > inputs and set(uncommitted) == set(expected)
        # The group's offsets are the committed transactions' offsets: the whole input.
        checker = AIOKafkaConsumer(bootstrap_servers=servers, group_id="aio-ctp-group")
        await checker.start()
        try:
            for p in (0, 1):
                assert await checker.committed(TopicPartition("aio-in", p)) == inputs // 2
        finally:
            await checker.stop()

    asyncio.run(main())


def test_a_zombie_transactional_producer_is_fenced(running: Any) -> None:
    servers = running.bootstrap_servers

    async def main() -> None:
        await _create(servers, ("aio-fenced", 1))
        zombie = AIOKafkaProducer(bootstrap_servers=servers, transactional_id="aio-shared")
        successor = AIOKafkaProducer(bootstrap_servers=servers, transactional_id="aio-shared")
        await zombie.start()
        try:
            await zombie.begin_transaction()
            await zombie.send_and_wait("aio-fenced", b"zombie")
            await successor.start()  # InitProducerId bumps the epoch: the zombie is fenced
            async with successor.transaction():
                await successor.send_and_wait("aio-fenced", b"successor")
            with pytest.raises(ProducerFenced):
                await zombie.commit_transaction()
        finally:
            await successor.stop()
            await zombie.stop()
        assert await _values(servers, "aio-fenced", "read_committed") == [b"successor"]
        assert sorted(await _values(servers, "aio-fenced", "read_uncommitted")) == [
            b"successor",
            b"zombie",
        ]

    asyncio.run(main())
