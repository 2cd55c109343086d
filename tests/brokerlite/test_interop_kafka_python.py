"""kafka-python 3.x, with its defaults (idempotent producer, acks=all), against brokerlite."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic

pytestmark = pytest.mark.timeout(90)

COMPRESSIONS = [None, "gzip", "snappy", "lz4", "zstd"]


def consume(consumer: KafkaConsumer, count: int, timeout: float = 30.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(records)
    return got


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: c or "none")
def test_default_producer_then_consume_from_earliest(
    running: Any, topic_name: str, compression: str | None
) -> None:
    producer = KafkaProducer(
        bootstrap_servers=running.bootstrap_servers, compression_type=compression
    )
    try:
        futures = [producer.send(topic_name, key=b"k%d" % i, value=b"v%d" % i) for i in range(50)]
        producer.flush(timeout=30)
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(50))
    consumer = KafkaConsumer(
        topic_name,
        bootstrap_servers=running.bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        got = consume(consumer, 50)
    finally:
        consumer.close()
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, b"k%d" % i, b"v%d" % i) for i in range(50)
    ]


def test_consume_from_latest_and_by_timestamp(running: Any, topic_name: str) -> None:
    servers = running.bootstrap_servers
    producer = KafkaProducer(bootstrap_servers=servers)
    base = int(time.time() * 1000) - 60_000
    try:
        for i in range(10):
            producer.send(topic_name, value=b"old%d" % i, timestamp_ms=base + i * 1000)
        producer.flush(timeout=30)
        consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
        tp = TopicPartition(topic_name, 0)
        try:
            found = consumer.offsets_for_times({tp: base + 4500})
            assert (found[tp].offset, found[tp].timestamp) == (5, base + 5000)
            assert consumer.offsets_for_times({tp: base + 999_999})[tp] is None
            assert consumer.beginning_offsets([tp]) == {tp: 0}
            assert consumer.end_offsets([tp]) == {tp: 10}
            consumer.assign([tp])
            consumer.seek_to_end(tp)
            assert consumer.position(tp) == 10
            producer.send(topic_name, value=b"new").get(timeout=30)
            got = consume(consumer, 1)
            assert [r.value for r in got] == [b"new"]
            consumer.seek(tp, found[tp].offset)
            assert [r.value for r in consume(consumer, 6)] == [
                b"old%d" % i for i in range(5, 10)
            ] + [b"new"]
        finally:
            consumer.close()
    finally:
        producer.close(timeout=10)


def test_admin_topics_partitions_and_configs(running: Any, topic_name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap_servers)
    try:
        admin.create_topics(
            [
                NewTopic(
                    topic_name,
                    num_partitions=2,
                    replication_factor=1,
                    topic_configs={"retention.ms": "3600000"},
                )
            ]
        )
        assert topic_name in admin.list_topics()
        admin.create_partitions({topic_name: NewPartitions(total_count=4)})
        consumer = KafkaConsumer(bootstrap_servers=running.bootstrap_servers)
        try:
            deadline = time.monotonic() + 10
            while consumer.partitions_for_topic(topic_name) != {0, 1, 2, 3}:
                assert time.monotonic() < deadline, consumer.partitions_for_topic(topic_name)
                time.sleep(0.1)
                consumer.topics()  # refresh metadata
        finally:
            consumer.close()
        resource = ConfigResource(ConfigResourceType.TOPIC, topic_name)
        described = admin.describe_configs([resource])
        text = repr(described)
        assert "retention.ms" in text and "3600000" in text
        admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC, topic_name, configs={"retention.ms": "7200000"}
                )
            ]
        )
        assert "7200000" in repr(admin.describe_configs([resource]))
        admin.delete_topics([topic_name])
        assert topic_name not in admin.list_topics()
    finally:
        admin.close()


def test_admin_describe_features(running: Any) -> None:
    """ApiVersions v3+ lists the feature levels brokerlite implements (KIP-584):
    KIP-848 consumer groups, KIP-932 share groups (with KIP-1191's dead-letter
    queues: share.version 2) and transaction version 2
    (KIP-890 part 2), each finalized at its highest level on a fresh broker."""
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap_servers)
    try:
        features = admin.describe_features()
    finally:
        admin.close()
    assert {name: f.get("finalized") for name, f in features.items()} == {
        "group.version": (1, 1),
        "share.version": (2, 2),
        "transaction.version": (2, 2),
    }
    assert {name: f.get("supported") for name, f in features.items()} == {
        "group.version": (0, 1),
        "share.version": (0, 2),
        "transaction.version": (0, 2),
    }
    assert {f.get("finalized_epoch") for f in features.values()} == {1}
