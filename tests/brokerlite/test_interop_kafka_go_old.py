"""segmentio/kafka-go 0.2.1 (Debian's) against brokerlite's default protocol (issue #37).

kafka-go 0.2.1 never asks ApiVersions and speaks fixed versions from Kafka
0.10: Produce v2 and Fetch v2 with magic 1 message sets, ListOffsets v1,
Metadata v1, JoinGroup v1, OffsetCommit v2, OffsetFetch v1. The client is
``tests/interop/kafka_go_old/main.go``, built in GOPATH mode against Debian's
``golang-github-segmentio-kafka-go-dev``; without it (or Go) the test is skipped.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def kafka_go_old(build_go_client: Any) -> Path:
    return build_go_client(  # type: ignore[no-any-return]
        "kafka_go_old",
        "github.com/segmentio/kafka-go",
        "golang-github-segmentio-kafka-go-dev",
    )


def run(binary: Path, servers: str, *args: str) -> list[str]:
    done = subprocess.run(
        [str(binary), "-broker", servers, "-timeout", "40s", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.slow
def test_kafka_go_0_2_produces_consumes_as_a_group_and_commits(
    kafka_go_old: Path, running: Any, topic_name: str
) -> None:
    servers = running.bootstrap_servers
    producer = KafkaProducer(bootstrap_servers=servers)
    try:
        producer.send(topic_name, key=b"m", value=b"modern").get(timeout=30)
    finally:
        producer.close(timeout=10)
    run(kafka_go_old, servers, "-mode", "produce", "-topic", topic_name, "-n", "4", "-prefix", "a")
    run(
        kafka_go_old,
        servers,
        *("-mode", "produce", "-topic", topic_name, "-n", "3", "-prefix", "b"),
        *("-compression", "gzip"),
    )
    written = ["m=modern", *(f"k{i}=a-{i}" for i in range(4)), *(f"k{i}=b-{i}" for i in range(3))]
    group = f"{topic_name}-kafka-go"
    got = run(
        kafka_go_old, servers, "-mode", "consume", "-topic", topic_name, "-group", group, "-n", "8"
    )
    assert got == [f"{o} {w}" for o, w in enumerate(written)]

    # The group committed: after two more messages it reads exactly those.
    run(kafka_go_old, servers, "-mode", "produce", "-topic", topic_name, "-n", "2", "-prefix", "c")
    got = run(
        kafka_go_old, servers, "-mode", "consume", "-topic", topic_name, "-group", group, "-n", "2"
    )
    assert got == ["8 k0=c-0", "9 k1=c-1"]

    consumer = KafkaConsumer(
        topic_name,
        bootstrap_servers=servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        records: list[Any] = []
        deadline = time.monotonic() + 30
        while len(records) < 10 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
    finally:
        consumer.close()
    assert [f"{r.key.decode()}={r.value.decode()}" for r in records] == [
        *written,
        "k0=c-0",
        "k1=c-1",
    ]
