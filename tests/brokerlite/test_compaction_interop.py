"""Compacted topics on a running brokerlite, written and read by real clients.

Producers (trafka's SDK, confluent-kafka, kafka-python) write versions of a set of
keys, tombstones included, to a topic with ``cleanup.policy=compact`` and small
segments; the broker's cleaner compacts it in the background. Every consumer
(trafka's SDK, confluent-kafka, kafka-python, aiokafka, kcat) must then read
exactly what compaction keeps: the latest record of each key below the clean
offset, everything after it, offsets unchanged, across the gaps compaction left
and past an empty batch kept for an idempotent producer's sequence state.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from compaction_helpers import Row, partition_dir, wait_compacted
from compaction_helpers import compacted as kept_by_compaction

from trafka.brokerlite.server import RunningBroker, broker_in_thread
from trafka.codec import ErrorCode, KafkaError
from trafka.codec.records import RecordBatchHeader, iter_batches
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer

pytestmark = pytest.mark.timeout(180)

TOPIC = "table"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    data = tmp_path_factory.mktemp("compaction")
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=data,
        log_cleaner_backoff_ms=50,
        group_initial_rebalance_delay_ms=0,
    ) as running:
        yield running


async def _create(bs: str, topic: str, **configs: str) -> None:
    """A one-partition compacted topic with small segments, compacted eagerly."""
    settings = {
        "cleanup.policy": "compact",
        "segment.bytes": "4096",
        "min.cleanable.dirty.ratio": "0.01",
        **{k.replace("_", "."): v for k, v in configs.items()},
    }
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(topic, 1, configs=settings)])


def produce_versions(bs: str) -> list[Row]:
    """What the three producers wrote, as (offset, key, value)."""
    from confluent_kafka import Producer
    from kafka import KafkaProducer

    rows: list[Row] = []

    async def sdk() -> None:
        await _create(bs, TOPIC, delete_retention_ms="3600000")
        # A producer whose only record is superseded: its batch stays as an empty one.
        async with open_producer(bootstrap_servers=bs) as lone:
            meta = await (await lone.send(TOPIC, b"lone", key=b"shadowed", partition=0))
            rows.append((meta.offset, b"shadowed", b"lone"))
        async with open_producer(bootstrap_servers=bs, linger_ms=1) as producer:
            for i in range(300):
                key, value = b"k%d" % (i % 40), b"sdk-%d" % i
                if i == 0:
                    key = b"shadowed"
                meta = await (await producer.send(TOPIC, value, key=key, partition=0))
                rows.append((meta.offset, key, value))

    anyio.run(sdk)
    confluent = Producer(
        {
            "bootstrap.servers": bs,
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.num.messages": 20,
        }
    )
    delivered: list[Any] = []
    for i in range(150):
        value: bytes | None = b"cf-%d" % i if i < 140 else None  # the last ten: tombstones
        confluent.produce(
            TOPIC,
            value,
            key=b"k%d" % (i % 50),
            partition=0,
            on_delivery=lambda e, m: delivered.append((e, m)),
        )
    assert confluent.flush(30) == 0
    for err, msg in delivered:
        assert err is None, err
        rows.append((msg.offset(), msg.key(), msg.value()))
    kp = KafkaProducer(bootstrap_servers=bs, linger_ms=2, batch_size=1024)
    futures = [
        (kp.send(TOPIC, key=b"k%d" % (i % 30), value=b"kp-%d" % i, partition=0), i)
        for i in range(100)
    ]
    for future, i in futures:
        meta = future.get(timeout=30)
        rows.append((meta.offset, b"k%d" % (i % 30), b"kp-%d" % i))
    kp.close()
    rows.sort()
    return rows


@pytest.fixture(scope="module")
def compacted(broker: RunningBroker) -> tuple[list[Row], list[Row], int]:
    """(everything produced, what compaction must leave, the clean offset)."""
    rows = produce_versions(broker.bootstrap_servers)
    assert [r[0] for r in rows] == list(range(len(rows)))
    clean = wait_compacted(broker, TOPIC)
    return rows, kept_by_compaction(rows, clean), clean


def test_the_log_on_disk_is_compacted(
    broker: RunningBroker, compacted: tuple[list[Row], list[Row], int]
) -> None:
    rows, expected, _ = compacted
    assert len(expected) < len(rows) // 2
    # The lone producer's batch is still there, emptied, for its sequence state.
    d = partition_dir(broker, TOPIC)
    first = (d / f"{0:020d}.log").read_bytes()
    headers = [h for h, _ in iter_batches(first) if isinstance(h, RecordBatchHeader)]
    assert headers[0].base_offset == 0 and headers[0].records_count == 0
    assert headers[0].producer_id >= 0


def read_sdk(bs: str, last: int) -> list[Row]:
    out: list[Row] = []

    async def main() -> None:
        async with open_consumer(bootstrap_servers=bs, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(TOPIC, 0)])
            with anyio.fail_after(30):
                while not out or out[-1][0] < last:
                    batch = await consumer.getmany(timeout_ms=500)
                    for records in batch.values():
                        out.extend((r.offset, r.key, r.value) for r in records)

    anyio.run(main)
    return out


def read_confluent(bs: str, last: int) -> list[Row]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as CfPartition

    consumer = Consumer(
        {"bootstrap.servers": bs, "group.id": "cf-reader", "enable.auto.commit": False}
    )
    out: list[Row] = []
    try:
        consumer.assign([CfPartition(TOPIC, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while (not out or out[-1][0] < last) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def read_kafka_python(bs: str, last: int) -> list[Row]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpPartition

    consumer = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False)
    out: list[Row] = []
    try:
        tp = KpPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 30
        while (not out or out[-1][0] < last) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out.extend((r.offset, r.key, r.value) for r in records)
    finally:
        consumer.close()
    return out


def read_aiokafka(bs: str, last: int) -> list[Row]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioPartition

    out: list[Row] = []

    async def main() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioPartition(TOPIC, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            async with asyncio.timeout(30):
                while not out or out[-1][0] < last:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        out.extend((r.offset, r.key, r.value) for r in records)
        finally:
            await consumer.stop()

    asyncio.run(main())
    return out


@pytest.mark.parametrize(
    "reader", [read_sdk, read_confluent, read_kafka_python, read_aiokafka], ids=lambda f: f.__name__
)
def test_every_client_reads_what_compaction_kept(
    broker: RunningBroker, compacted: tuple[list[Row], list[Row], int], reader: Any
) -> None:
    rows, expected, _ = compacted
    assert reader(broker.bootstrap_servers, rows[-1][0]) == expected


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_reads_what_compaction_kept(
    broker: RunningBroker, compacted: tuple[list[Row], list[Row], int]
) -> None:
    _, expected, _ = compacted
    done = subprocess.run(
        ["kcat", "-b", broker.bootstrap_servers, "-C", "-t", TOPIC, "-o", "beginning", "-e", "-q",
         "-Z", "-f", "%o %k %S\\n"],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines == [f"{o} {k.decode()} {-1 if v is None else len(v)}" for o, k, v in expected]


def test_records_without_a_key_are_refused(
    broker: RunningBroker, compacted: tuple[list[Row], list[Row], int]
) -> None:
    from confluent_kafka import Producer

    bs = broker.bootstrap_servers

    async def sdk() -> None:
        async with open_producer(bootstrap_servers=bs) as producer:
            with pytest.raises(KafkaError) as info:
                await (await producer.send(TOPIC, b"no key", partition=0))
            assert info.value.code == ErrorCode.INVALID_RECORD

    anyio.run(sdk)
    confluent = Producer({"bootstrap.servers": bs})
    errors: list[Any] = []
    confluent.produce(TOPIC, b"no key", partition=0, on_delivery=lambda e, m: errors.append(e))
    confluent.flush(30)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == ErrorCode.INVALID_RECORD


def test_aborted_transactions_are_compacted_away(broker: RunningBroker) -> None:
    """confluent-kafka's transactions on a compacted topic: after compaction no
    aborted record is left, even for read_uncommitted, and each key keeps its
    latest committed value."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
    from confluent_kafka import TopicPartition as CfPartition

    bs, topic = broker.bootstrap_servers, "txn-table"

    anyio.run(_create, bs, topic)
    producer = Producer({"bootstrap.servers": bs, "transactional.id": "compaction-txn"})
    producer.init_transactions(30)
    for round_, keys, commit in (
        ("c1", range(10), True),
        ("ab", range(10), False),
        ("c3", range(5, 10), True),
    ):
        producer.begin_transaction()
        for k in keys:
            producer.produce(topic, b"%s-%d" % (round_.encode(), k), key=b"k%d" % k, partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    # Filler from another producer, so that the transactions' segments close.
    plain = Producer({"bootstrap.servers": bs, "linger.ms": 2, "batch.num.messages": 20})
    for i in range(200):
        plain.produce(topic, b"x" * 50, key=b"filler-%d" % (i % 20), partition=0)
    assert plain.flush(30) == 0
    wait_compacted(broker, topic)
    expected = {b"k%d" % k: b"c1-%d" % k for k in range(5)}
    expected.update({b"k%d" % k: b"c3-%d" % k for k in range(5, 10)})
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": f"txn-reader-{isolation}",
                "isolation.level": isolation,
                "enable.auto.commit": False,
            }
        )
        got: dict[bytes, bytes] = {}
        seen = 0
        try:
            consumer.assign([CfPartition(topic, 0, OFFSET_BEGINNING)])
            deadline = time.monotonic() + 30
            while seen < 20 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                if msg.key().startswith(b"filler"):
                    seen += 1
                    continue
                assert not msg.value().startswith(b"ab-"), (isolation, msg.offset())
                got[msg.key()] = msg.value()
        finally:
            consumer.close()
        assert got == expected, isolation
