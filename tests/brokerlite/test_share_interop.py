"""Share groups (KIP-932) end to end with a real client: librdkafka's share
consumer (confluent-kafka's ``ShareConsumer``) against brokerlite, with records
produced by confluent-kafka's producer (plain and transactional)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from trafka.brokerlite.server import RunningBroker, broker_in_thread

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_in_thread(port=0, data_dir=tmp_path / "data") as running:
        yield running


def setup(bootstrap: str, topic: str, group: str, partitions: int, **group_configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in {"share.auto.offset.reset": "earliest", **group_configs}.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def produce(bootstrap: str, topic: str, values: list[bytes], **config: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for i, value in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=value)
    assert producer.flush(30) == 0


def share_consumer(bootstrap: str, group: str, topic: str, **config: Any) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **config})
    consumer.subscribe([topic])
    return consumer


def poll_once(consumer: ShareConsumer, timeout: float = 0.5) -> list[Any]:
    out = []
    for message in consumer.poll(timeout):
        assert message.error() is None, message.error()
        out.append(message)
    return out


def poll_until(
    consumers: list[ShareConsumer], want: int, *, within: float = 60.0
) -> list[list[Any]]:
    """Poll every consumer in turn until ``want`` records arrived in all."""
    got: list[list[Any]] = [[] for _ in consumers]
    deadline = time.monotonic() + within
    while sum(map(len, got)) < want and time.monotonic() < deadline:
        for i, consumer in enumerate(consumers):
            got[i].extend(poll_once(consumer, 0.2))
    return got


def test_every_record_goes_to_exactly_one_of_two_share_consumers(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic, group = f"jobs-{uuid.uuid4().hex[:6]}", "workers"
    setup(bootstrap, topic, group, partitions=1)  # one partition, shared by both
    a = share_consumer(bootstrap, group, topic, **{"max.poll.records": 20})
    b = share_consumer(bootstrap, group, topic, **{"max.poll.records": 20})
    got: list[list[Any]] = [[], []]
    values: list[bytes] = []
    try:
        # Both members wait for work; it arrives in small rounds, 400 records or
        # more: which member acquires a round is the machine's pace (a member
        # late to join gets none), so the rounds go on until each got some.
        deadline = time.monotonic() + 60
        while len(values) < 400 or not (got[0] and got[1]):
            assert time.monotonic() < deadline, "a member of the group never got work"
            values += [f"job-{len(values) + i}".encode() for i in range(20)]
            produce(bootstrap, topic, values[-20:])
            for i, consumer in enumerate((a, b)):
                got[i].extend(poll_once(consumer, 0.2))
        for i, more in enumerate(poll_until([a, b], len(values) - sum(map(len, got)))):
            got[i].extend(more)
        seen = Counter(m.value() for batch in got for m in batch)
        assert sorted(seen) == sorted(values)
        assert set(seen.values()) == {1}, "a record went to two consumers"
        assert all(m.delivery_count() == 1 for batch in got for m in batch)
        # Implicit mode accepts a poll's records at the next poll or commit;
        # librdkafka 2.16's close() alone releases them instead.
        a.commit_sync(30)
        b.commit_sync(30)
    finally:
        a.close()
        b.close()
    # Everything was accepted (implicit mode): a new member finds nothing left.
    c = share_consumer(bootstrap, group, topic)
    try:
        left = poll_until([c], 1, within=3.0)[0]
        assert [(m.value(), m.delivery_count()) for m in left] == []
    finally:
        c.close()


def test_release_redelivers_and_reject_discards(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic, group = f"jobs-{uuid.uuid4().hex[:6]}", "explicit"
    setup(bootstrap, topic, group, partitions=1)
    produce(bootstrap, topic, [b"keep", b"retry", b"poison"])
    consumer = share_consumer(bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
    try:
        (first,) = poll_until([consumer], 3)
        assert sorted(m.value() for m in first) == [b"keep", b"poison", b"retry"]
        kinds = {
            b"keep": AcknowledgeType.ACCEPT,
            b"retry": AcknowledgeType.RELEASE,
            b"poison": AcknowledgeType.REJECT,
        }
        for message in first:
            consumer.acknowledge(message, kinds[message.value()])
        consumer.commit_sync(30)
        (again,) = poll_until([consumer], 1)
        assert [(m.value(), m.delivery_count()) for m in again] == [(b"retry", 2)]
        consumer.acknowledge(again[0], AcknowledgeType.ACCEPT)
        consumer.commit_sync(30)
        (nothing,) = poll_until([consumer], 1, within=3.0)
        assert nothing == []
    finally:
        consumer.close()


def test_the_delivery_count_limit_archives_a_poison_record(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic, group = f"jobs-{uuid.uuid4().hex[:6]}", "limited"
    setup(bootstrap, topic, group, partitions=1, **{"share.delivery.count.limit": "2"})
    produce(bootstrap, topic, [b"poison", b"fine"])
    consumer = share_consumer(bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
    deliveries: list[tuple[bytes, int]] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(deliveries) < 4:
            for message in poll_once(consumer):
                deliveries.append((message.value(), message.delivery_count()))
                release = message.value() == b"poison" or message.delivery_count() < 2
                kind = AcknowledgeType.RELEASE if release else AcknowledgeType.ACCEPT
                consumer.acknowledge(message, kind)
            consumer.commit_sync(30)
        (tail,) = poll_until([consumer], 1, within=3.0)
        deliveries.extend((m.value(), m.delivery_count()) for m in tail)
    finally:
        consumer.close()
    # Released twice, each record reaches the limit of 2 and is never seen again.
    assert sorted(deliveries) == [(b"fine", 1), (b"fine", 2), (b"poison", 1), (b"poison", 2)]


def test_read_committed_share_group_skips_aborted_transactions(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic, group = f"txn-{uuid.uuid4().hex[:6]}", "committed-only"
    setup(bootstrap, topic, group, partitions=1, **{"share.isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    for value, commit in [(b"c1", True), (b"a1", False), (b"c2", True), (b"a2", False)]:
        producer.begin_transaction()
        producer.produce(topic, value=value)
        producer.produce(topic, value=value + b"-bis")
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    consumer = share_consumer(bootstrap, group, topic)
    try:
        (got,) = poll_until([consumer], 4)
        (more,) = poll_until([consumer], 1, within=3.0)
    finally:
        consumer.close()
    assert sorted(m.value() for m in got + more) == [b"c1", b"c1-bis", b"c2", b"c2-bis"]


def test_acknowledged_records_stay_acknowledged_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    topic, group = "durable-jobs", "durable"
    with broker_in_thread(port=0, data_dir=data) as running:
        bootstrap = running.bootstrap_servers
        setup(bootstrap, topic, group, partitions=1)
        produce(bootstrap, topic, [f"r{i}".encode() for i in range(20)])
        first = share_consumer(
            bootstrap,
            group,
            topic,
            **{"share.acknowledgement.mode": "explicit", "socket.timeout.ms": 2000},
        )
        (got,) = poll_until([first], 20)
        assert len(got) == 20
        accepted = sorted(got, key=lambda m: m.offset())[:10]
        for message in accepted:
            first.acknowledge(message, AcknowledgeType.ACCEPT)
        first.commit_sync(30)
        # The broker stops with the other ten still acquired by `first`.
    try:
        with broker_in_thread(port=0, data_dir=data) as running:
            second = share_consumer(running.bootstrap_servers, group, topic)
            try:
                (again,) = poll_until([second], 10)
                (more,) = poll_until([second], 1, within=3.0)
            finally:
                second.close()
    finally:
        first.close()
    assert sorted(m.offset() for m in again + more) == list(range(10, 20))
    assert {m.delivery_count() for m in again} == {2}


_KILLED_WORKER = """
import os, sys
from confluent_kafka import ShareConsumer
consumer = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2]})
consumer.subscribe([sys.argv[3]])
got = 0
while got < int(sys.argv[4]):
    got += len(consumer.poll(1.0))
print(got, flush=True)
os._exit(0)  # a crash: no acknowledgement, no leave, the connection just drops
"""


def test_a_crashed_consumers_records_come_back_at_once(broker: RunningBroker) -> None:
    """Its connection closing ends its share session and releases its records:
    the survivor gets them within 20 s although their locks last 60 s."""
    bootstrap = broker.bootstrap_servers
    topic, group = f"jobs-{uuid.uuid4().hex[:6]}", "crashy"
    setup(bootstrap, topic, group, partitions=1, **{"share.record.lock.duration.ms": "60000"})
    produce(bootstrap, topic, [f"r{i}".encode() for i in range(10)])
    worker = subprocess.run(
        [sys.executable, "-c", _KILLED_WORKER, bootstrap, group, topic, "10"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert worker.stdout.split()[-1] == "10"
    survivor = share_consumer(bootstrap, group, topic)
    try:
        (got,) = poll_until([survivor], 10, within=20.0)
    finally:
        survivor.close()
    assert sorted(m.value() for m in got) == sorted(f"r{i}".encode() for i in range(10))
    assert {m.delivery_count() for m in got} == {2}
