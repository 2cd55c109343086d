"""sarama 1.22 (Debian's Go client) against brokerlite's default protocol (issue #37).

sarama speaks the version it is configured with and never asks ApiVersions
first: by default 0.8.2 (Produce v0, magic 0 message sets); 0.10.2 is Produce
v2 with magic 1, Fetch v3, JoinGroup v1 and OffsetCommit v2; 1.0.0 is Produce
v3 with batches, Fetch v4-6 and still JoinGroup v1. The client is
``tests/interop/sarama_old/main.go``, built here in GOPATH mode against
Debian's ``golang-github-shopify-sarama-dev`` (``make system-deps`` installs it
and ``golang-go``); without them the tests are skipped.
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
def sarama_old(build_go_client: Any) -> Path:
    return build_go_client(  # type: ignore[no-any-return]
        "sarama_old", "github.com/Shopify/sarama", "golang-github-shopify-sarama-dev"
    )


def run(binary: Path, servers: str, *args: str) -> list[str]:
    done = subprocess.run(
        [str(binary), "-brokers", servers, "-timeout", "40s", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def produce(binary: Path, servers: str, topic: str, n: int, prefix: str, *extra: str) -> list[int]:
    lines = run(
        binary,
        servers,
        "-mode",
        "produce",
        "-topic",
        topic,
        "-n",
        str(n),
        "-prefix",
        prefix,
        *extra,
    )
    return [int(line) for line in lines]


def consume(binary: Path, servers: str, topic: str, group: str, n: int, *extra: str) -> list[str]:
    return run(
        binary, servers, "-mode", "consume", "-topic", topic, "-group", group, "-n", str(n), *extra
    )


def test_sarama_1_22_produces_consumes_as_a_group_and_commits(
    sarama_old: Path, running: Any, topic_name: str
) -> None:
    servers = running.bootstrap_servers
    # sarama's default (0.8.2: Produce v0, magic 0), 0.10.2 (v2, magic 1,
    # compressed), 1.0.0 (v3, batches).
    assert produce(sarama_old, servers, topic_name, 4, "a") == [0, 1, 2, 3]
    assert produce(
        sarama_old, servers, topic_name, 4, "b", "-version", "0.10.2.0", "-compression", "gzip"
    ) == [4, 5, 6, 7]
    assert produce(
        sarama_old, servers, topic_name, 4, "c", "-version", "1.0.0", "-compression", "snappy"
    ) == [8, 9, 10, 11]
    written = [f"k{i}={p}-{i}" for p in "abc" for i in range(4)]

    group = f"{topic_name}-sarama"
    # The failure: JoinGroup v1 from a 0.10.2 consumer group.
    got = consume(sarama_old, servers, topic_name, group, 12, "-version", "0.10.2.0")
    assert got == [f"{o} {w}" for o, w in enumerate(written)]

    # A modern client writes two more; the group resumes at its commit and reads
    # exactly those (Fetch v4+ at 1.0.0, the same committed offsets).
    producer = KafkaProducer(bootstrap_servers=servers)
    try:
        for i in range(2):
            producer.send(topic_name, key=b"m%d" % i, value=b"modern-%d" % i).get(timeout=30)
    finally:
        producer.close(timeout=10)
    got = consume(sarama_old, servers, topic_name, group, 2, "-version", "1.0.0")
    assert got == ["12 m0=modern-0", "13 m1=modern-1"]

    # And a modern consumer reads what sarama wrote, at every version.
    consumer = KafkaConsumer(
        topic_name,
        bootstrap_servers=servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        records: list[Any] = []
        deadline = time.monotonic() + 30
        while len(records) < 14 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
    finally:
        consumer.close()
    assert [f"{r.key.decode()}={r.value.decode()}" for r in records] == [
        *written,
        "m0=modern-0",
        "m1=modern-1",
    ]
    # Magic 0 carries no timestamp; magic 1 and 2 do.
    assert [r.timestamp for r in records[:4]] == [-1] * 4
    assert all(r.timestamp > 0 for r in records[4:])
