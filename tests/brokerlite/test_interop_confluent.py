"""confluent-kafka (librdkafka): Producer, Consumer and AdminClient against brokerlite."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

pytestmark = pytest.mark.timeout(90)


def produce_all(servers: str, topic: str, values: list[bytes], **config: Any) -> list[Any]:
    delivered: list[Any] = []
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5, **config})

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered.append(msg)

    for i, value in enumerate(values):
        producer.produce(topic, value, key=b"k%d" % i, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    return delivered


def consume(consumer: Consumer, count: int, timeout: float = 30.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
    return got


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_each_codec_and_consume_from_earliest(
    running: Any, topic_name: str, compression: str
) -> None:
    values = [b"value-%d-" % i * 10 for i in range(200)]
    delivered = produce_all(
        running.bootstrap_servers,
        topic_name,
        values,
        **{"compression.type": compression, "enable.idempotence": True},
    )
    assert sorted(m.offset() for m in delivered) == list(range(200))
    consumer = Consumer(
        {
            "bootstrap.servers": running.bootstrap_servers,
            "group.id": f"{topic_name}-g",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic_name])
        got = consume(consumer, 200)
    finally:
        consumer.close()
    assert [m.value() for m in got] == values


def test_latest_and_offsets_for_times(running: Any, topic_name: str) -> None:
    servers = running.bootstrap_servers
    producer = Producer({"bootstrap.servers": servers})
    base = int(time.time() * 1000) - 60_000
    for i in range(10):
        producer.produce(topic_name, b"old%d" % i, timestamp=base + i * 1000)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": f"{topic_name}-g", "enable.auto.commit": False}
    )
    try:
        [found] = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 2500)], 10)
        assert found.offset == 3
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), 10) == (0, 10)
        consumer.assign([TopicPartition(topic_name, 0, -1)])  # OFFSET_END: latest
        deadline = time.monotonic() + 20
        got: list[Any] = []
        while not got and time.monotonic() < deadline:
            producer.produce(topic_name, b"new")
            producer.flush(10)
            got = consume(consumer, 1, timeout=1.0)
        assert got and got[0].value() == b"new" and got[0].offset() >= 10
        consumer.assign([TopicPartition(topic_name, 0, found.offset)])
        assert [m.value() for m in consume(consumer, 3)] == [b"old3", b"old4", b"old5"]
    finally:
        consumer.close()


def test_admin_client(running: Any, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
    for future in admin.create_topics(
        [NewTopic(topic_name, 3, 1, config={"retention.ms": "86400000"})]
    ).values():
        future.result(10)
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR"):
        admin.create_topics([NewTopic(f"{topic_name}-rf", 1, 3)])[f"{topic_name}-rf"].result(10)
    listed = admin.list_topics(timeout=10)
    assert len(listed.topics[topic_name].partitions) == 3
    assert listed.cluster_id == running.broker.cluster_id
    assert [b.id for b in listed.brokers.values()] == [1]
    admin.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(10)
    assert len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 5

    resource = ConfigResource("topic", topic_name)
    entries = admin.describe_configs([resource])[resource].result(10)
    assert entries["retention.ms"].value == "86400000"
    assert not entries["retention.ms"].is_default
    change = ConfigResource(
        "topic",
        topic_name,
        incremental_configs=[
            ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    admin.incremental_alter_configs([change])[change].result(10)
    entries = admin.describe_configs([resource])[resource].result(10)
    assert entries["segment.bytes"].value == "1048576"
    assert entries["retention.ms"].value == "604800000" and entries["retention.ms"].is_default

    broker_resource = ConfigResource("broker", "1")
    broker_entries = admin.describe_configs([broker_resource])[broker_resource].result(10)
    assert broker_entries["log.segment.bytes"].is_read_only

    admin.delete_topics([topic_name])[topic_name].result(10)
    assert topic_name not in admin.list_topics(timeout=10).topics


def test_acks_all_below_min_insync_replicas_fails_with_not_enough_replicas(
    running: Any, topic_name: str
) -> None:
    """Kafka's topic config ``min.insync.replicas``: "When a producer sets acks to
    "all" (or "-1"), min.insync.replicas specifies the minimum number of replicas
    that must acknowledge a write for the write to be considered successful. If
    this minimum cannot be met, then the producer will raise an exception (either
    NotEnoughReplicas or NotEnoughReplicasAfterAppend)". An RF 1 topic with
    ``min.insync.replicas=2``: librdkafka's acks=all delivery fails with
    NOT_ENOUGH_REPLICAS, acks=1 is delivered, and only that record is in the log."""
    from confluent_kafka import KafkaError

    servers = running.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"min.insync.replicas": "2"})])[
        topic_name
    ].result(10)
    errors: list[Any] = []
    strict = Producer(
        {"bootstrap.servers": servers, "acks": "all", "retries": 0, "enable.idempotence": False}
    )
    strict.produce(topic_name, b"refused", on_delivery=lambda err, msg: errors.append(err))
    assert strict.flush(30) == 0
    assert [e.code() for e in errors] == [KafkaError.NOT_ENOUGH_REPLICAS]
    assert not errors[0].fatal()
    delivered = produce_all(servers, topic_name, [b"accepted"], acks=1)
    assert [m.offset() for m in delivered] == [0]  # the refused record took no offset
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"{topic_name}-g",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic_name])
        got = consume(consumer, 1)
    finally:
        consumer.close()
    assert [m.value() for m in got] == [b"accepted"]
    assert running.broker.logs.partition(topic_name, 0).log_end_offset == 1
