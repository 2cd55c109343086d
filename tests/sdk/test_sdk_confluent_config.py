"""A confluent-kafka service's configuration dicts, unchanged, through trafka's SDK.

The dicts below are what a typical confluent-kafka producer and consumer pass
to ``confluent_kafka.Producer(conf)`` / ``Consumer(conf)`` (librdkafka's names,
as its CONFIGURATION.md spells them). They go as they are to
:mod:`trafka.sdk.blocking` against a brokerlite: records are produced (as lz4
batches in the log, as ``compression.codec`` asks), consumed by the group, and
the group's commit is what the consumer read.

``on_commit`` (librdkafka's offset commit callback) hears of every commit of
offsets with its outcome: ``commit()``, ``commit_async()`` and the auto-commit
at close, each with the offsets the coordinator now holds.

``enable.auto.offset.store=false`` with ``store_offsets``: commits without
offsets (``commit()``, at close) commit what was stored, not what was read;
storing needs the setting, and an assigned partition.

``enable.partition.eof=true`` (librdkafka's CONFIGURATION.md: "Emit
RD_KAFKA_RESP_ERR__PARTITION_EOF event whenever the consumer reaches the end of
a partition"): the service reads until every partition reported its end, each
once, after its records, at the offset the group then commits.
"""

from __future__ import annotations

import copy
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.sdk import NewTopic, PartitionEOF, TopicPartition, UsageError
from trafka.sdk.blocking import Admin, Consumer, Producer

pytestmark = pytest.mark.timeout(60)

LZ4 = 3  # the codec id in a record batch's attributes (KIP-98 batch format)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "confluent-config")


def _producer_conf(bs: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bs,
        "client.id": "orders-service",
        "acks": "all",
        "enable.idempotence": True,
        "compression.codec": "lz4",
        "queue.buffering.max.ms": 20,
        "message.timeout.ms": 60_000,
        "retries": 5,
        "retry.backoff.ms": 200,
        "max.in.flight.requests.per.connection": 5,
        "batch.size": 65_536,
        "partitioner": "murmur2_random",
    }


def _consumer_conf(bs: str, group: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bs,
        "client.id": "orders-service",
        "group.id": group,
        "auto.offset.reset": "smallest",
        "enable.auto.commit": False,
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 3_000,
        "max.poll.interval.ms": 300_000,
        "fetch.wait.max.ms": 100,
        "fetch.min.bytes": 1,
        "fetch.message.max.bytes": 1_048_576,
        "isolation.level": "read_committed",
        "partition.assignment.strategy": "cooperative-sticky",
        "enable.partition.eof": True,
    }


def _batch_codecs(log_dir: Path) -> set[int]:
    """The compression codec of every record batch in a partition's log files."""
    codecs = set()
    for segment in sorted(log_dir.glob("*.log")):
        data = segment.read_bytes()
        at = 0
        while at + 23 <= len(data):
            (length,) = struct.unpack_from(">i", data, at + 8)
            (attributes,) = struct.unpack_from(">h", data, at + 21)
            codecs.add(attributes & 0x7)
            at += 12 + length
    return codecs


def test_a_confluent_kafka_service_config_works_unchanged(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("orders")
    group = fresh("orders-svc")
    with Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([NewTopic(topic, 2)])
    producer_conf = _producer_conf(bs)
    consumer_conf = _consumer_conf(bs, group)
    given = copy.deepcopy((producer_conf, consumer_conf))

    sent = {(b"k%d" % (i % 5), b"order-%d" % i) for i in range(200)}
    with Producer(producer_conf) as producer:
        assert producer.config.delivery_timeout_ms == 60_000
        assert producer.config.linger_ms == 20
        assert producer.config.idempotent and producer.config.compression_type == "lz4"
        for key, value in sorted(sent):
            producer.send(topic, value, key=key)
        producer.flush()

    data_dir = Path(broker.config.data_dir)
    codecs: set[int] = set()
    for p in range(2):
        codecs |= _batch_codecs(data_dir / f"{topic}-{p}")
    assert codecs == {LZ4}

    received = set()
    eofs: list[PartitionEOF] = []
    with Consumer(topic, config=consumer_conf, consumer_timeout_ms=3_000) as consumer:
        assert consumer.config.enable_partition_eof
        for record in consumer:
            if isinstance(record, PartitionEOF):
                eofs.append(record)
                if len(eofs) == 2:  # the service has read both partitions to their ends
                    break
                continue
            assert not any(e.partition == record.partition for e in eofs)  # records first
            received.add((record.key, record.value))
        consumer.commit()
        ends = consumer.consumed_offsets()
    assert received == sent
    assert {TopicPartition(e.topic, e.partition): e.offset for e in eofs} == ends
    assert (producer_conf, consumer_conf) == given  # the dicts were only read
    with Admin(bootstrap_servers=bs) as admin:
        committed = admin.list_consumer_group_offsets(group)
    assert committed == ends
    assert sum(committed.values()) == len(sent)
    assert set(committed) == {TopicPartition(topic, 0), TopicPartition(topic, 1)}


def _ten_records(bs: str, name: str) -> tuple[str, str]:
    """A fresh one-partition topic holding ten records, and a fresh group id."""
    topic = fresh(name)
    with Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    with Producer({"bootstrap.servers": bs}) as producer:
        for i in range(10):
            producer.send(topic, b"%d" % i)
    return topic, fresh(f"{name}-g")


def test_on_commit_hears_of_every_commit(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, group = _ten_records(bs, "oc")
    heard: list[tuple[BaseException | None, dict[TopicPartition, int]]] = []
    tp = TopicPartition(topic, 0)
    conf = {
        "bootstrap.servers": bs,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 3_600_000,  # only the commit at close
        "on_commit": lambda error, offsets: heard.append((error, offsets)),
    }
    with Consumer(topic, config=conf, consumer_timeout_ms=3_000) as consumer:
        for taken, _ in enumerate(consumer, 1):
            if taken == 10:
                break
        consumer.commit({tp: 3})
        assert heard == [(None, {tp: 3})]
        consumer.commit_async({tp: 5}).result()
        assert heard[-1] == (None, {tp: 5})
    # Leaving commits what was consumed (auto-commit), and says so.
    assert heard[-1] == (None, {tp: 10})
    with Admin(bootstrap_servers=bs) as admin:
        assert admin.list_consumer_group_offsets(group) == {tp: 10}


def test_commits_without_offsets_commit_the_stored_offsets(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, group = _ten_records(bs, "store")
    heard: list[tuple[BaseException | None, dict[TopicPartition, int]]] = []
    tp = TopicPartition(topic, 0)
    conf = {
        "bootstrap.servers": bs,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        "enable.auto.offset.store": False,
        "auto.commit.interval.ms": 3_600_000,  # only the commit at close
        "on_commit": lambda error, offsets: heard.append((error, offsets)),
    }
    with Consumer(topic, config=conf, consumer_timeout_ms=3_000) as consumer:
        with pytest.raises(UsageError, match="not assigned"):
            consumer.store_offsets({TopicPartition(topic + "-other", 0): 1})
        for n, record in enumerate(consumer, 1):
            if record.offset < 4:
                consumer.store_offsets(message=record)
            if n == 10:
                break
        consumer.commit()
        assert heard == [(None, {tp: 4})]
        consumer.store_offsets({tp: 6})
    assert heard[-1] == (None, {tp: 6})  # the commit at close: stored, not read (10)
    with Admin(bootstrap_servers=bs) as admin:
        assert admin.list_consumer_group_offsets(group) == {tp: 6}


def test_storing_needs_the_offset_store_off(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("store-on")
    with Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    conf = {"bootstrap.servers": bs, "group.id": fresh("g")}
    with Consumer(config=conf) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        with pytest.raises(UsageError, match=r"enable\.auto\.offset\.store=false"):
            consumer.store_offsets({TopicPartition(topic, 0): 1})
