"""Clients older than Kafka 4 against brokerlite's default protocol (issue #37).

kafka-python pinned to old broker versions (``api_version=(0, 10, 2)``: Produce
v2 with magic 1 message sets, Fetch v3, JoinGroup v1, ListOffsets v1;
``(2, 0)``), and kcat without ApiVersions, falling back to 0.10.2's versions.
Each writes, reads back exactly what it wrote (as a group member that commits),
and reads what a modern client wrote; modern clients read what it wrote.
sarama 1.22 is in ``test_interop_sarama_old.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

pytestmark = pytest.mark.timeout(120)

OLD_API_VERSIONS = [(0, 10, 2), (2, 0)]


def consume(consumer: KafkaConsumer, count: int, timeout: float = 30.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(records)
    return got


def produce(servers: str, topic: str, values: list[bytes], **settings: Any) -> list[int]:
    producer = KafkaProducer(bootstrap_servers=servers, **settings)
    try:
        futures = [producer.send(topic, key=b"k" + v, value=v) for v in values]
        producer.flush(timeout=30)
        return [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(timeout=10)


@pytest.mark.parametrize("api_version", OLD_API_VERSIONS, ids=lambda v: ".".join(map(str, v)))
@pytest.mark.parametrize("compression", [None, "gzip"], ids=lambda c: c or "none")
def test_kafka_python_old_protocol_produces_consumes_as_a_group_and_commits(
    running: Any, topic_name: str, api_version: tuple[int, ...], compression: str | None
) -> None:
    servers = running.bootstrap_servers
    old = {"api_version": api_version}
    values = [b"old-%d" % i for i in range(30)]
    # Idempotence needs Kafka 0.11's InitProducerId: the old producer goes without.
    offsets = produce(
        servers,
        topic_name,
        values,
        enable_idempotence=False,
        compression_type=compression,
        **old,
    )
    assert offsets == list(range(30))

    group = f"{topic_name}-group"
    consumer = KafkaConsumer(
        topic_name,
        bootstrap_servers=servers,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **old,
    )
    try:
        got = consume(consumer, 30)
        consumer.commit()
        tp = TopicPartition(topic_name, 0)
        assert consumer.committed(tp) == 30
    finally:
        consumer.close()
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, b"k" + v, v) for i, v in enumerate(values)
    ]

    # A modern client writes more; the old group member resumes at its commit
    # and reads exactly that.
    modern_values = [b"new-%d" % i for i in range(5)]
    assert produce(servers, topic_name, modern_values) == list(range(30, 35))
    consumer = KafkaConsumer(
        topic_name,
        bootstrap_servers=servers,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **old,
    )
    try:
        resumed = consume(consumer, 5)
    finally:
        consumer.close()
    assert [(r.offset, r.value) for r in resumed] == [
        (30 + i, v) for i, v in enumerate(modern_values)
    ]

    # A modern consumer reads the old producer's records as any others.
    modern = KafkaConsumer(
        topic_name,
        bootstrap_servers=servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        everything = consume(modern, 35)
    finally:
        modern.close()
    assert [r.value for r in everything] == values + modern_values


KCAT = shutil.which("kcat")
KCAT_OLD = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.10.2"]


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make system-deps installs it)")
def test_kcat_without_api_versions_produces_and_consumes_as_a_group(
    running: Any, topic_name: str
) -> None:
    assert KCAT is not None
    servers = running.bootstrap_servers
    lines = [f"key{i}:value {i}" for i in range(20)]
    subprocess.run(
        [KCAT, "-b", servers, *KCAT_OLD, "-P", "-t", topic_name, "-K:", "-z", "gzip"],
        input="\n".join(lines) + "\n",
        text=True,
        check=True,
        timeout=60,
    )
    # Read back by a kcat balanced consumer (JoinGroup v1 at 0.10.2), committing.
    group = f"{topic_name}-kcat"
    out = subprocess.run(
        [
            KCAT,
            "-b",
            servers,
            *KCAT_OLD,
            "-G",
            group,
            "-X",
            "auto.offset.reset=earliest",
            "-c",
            "20",
            "-e",
            "-f",
            "%o %k=%s\\n",
            "-q",
            topic_name,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.splitlines() == [f"{i} key{i}=value {i}" for i in range(20)]

    # What it wrote, a modern client reads; what a modern client writes, it reads.
    modern = KafkaConsumer(
        topic_name,
        bootstrap_servers=servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        got = consume(modern, 20)
    finally:
        modern.close()
    assert [(r.key, r.value) for r in got] == [(b"key%d" % i, b"value %d" % i) for i in range(20)]
    assert produce(servers, topic_name, [b"modern"]) == [20]
    out = subprocess.run(
        [
            KCAT,
            "-b",
            servers,
            *KCAT_OLD,
            "-C",
            "-t",
            topic_name,
            "-o",
            "20",
            "-c",
            "1",
            "-e",
            "-f",
            "%o %k=%s\\n",
            "-q",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.splitlines() == ["20 kmodern=modern"]


def test_protocol_4_0_turns_the_old_client_away(tmp_path: Any) -> None:
    """``protocol_version`` 4.0 is Kafka 4.0's answer to the same producer."""
    from kafka.errors import UnsupportedVersionError

    from trafka.brokerlite.server import broker_in_thread

    with (
        broker_in_thread(port=0, data_dir=tmp_path / "data", protocol_version="4.0") as strict,
        pytest.raises(UnsupportedVersionError),
    ):
        produce(
            strict.bootstrap_servers,
            "t",
            [b"x"],
            api_version=(0, 10, 2),
            enable_idempotence=False,
            retries=0,
        )
