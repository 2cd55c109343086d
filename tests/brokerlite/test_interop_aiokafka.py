"""aiokafka against brokerlite: admin, idempotent produce with compression, group consume."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
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
