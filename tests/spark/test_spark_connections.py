"""Connections: a stream keeps its clients between triggers and micro-batches,
as Spark's connector caches its consumers, instead of opening new ones each
time (counted where they arrive: the broker's accepted connections)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import consume_all, create, fresh, stream_of

from trafka.brokerlite import RunningBroker
from trafka.sdk.blocking import Producer

pytestmark = pytest.mark.timeout(240)


def _wait(condition: Callable[[], bool], what: str, query: Any) -> None:
    deadline = time.monotonic() + 90
    while not condition():
        assert query.exception() is None
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.slow
def test_a_stream_reuses_its_connections_across_triggers_and_micro_batches(
    spark: Any, broker: RunningBroker, tmp_path: Path, accepted: Callable[[], int]
) -> None:
    topic = fresh("reuse")
    create(broker, topic, 1)
    stream = stream_of(spark, broker, subscribe=topic, startingOffsets="earliest")
    query = (
        stream.selectExpr("cast(value as string) as value")
        .writeStream.format("memory")
        .queryName("reuse")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="50 milliseconds")
        .start()
    )

    def rows() -> int:
        return int(spark.sql("select count(*) from reuse").collect()[0][0])

    sent = 0

    def send(value: bytes) -> None:
        nonlocal sent
        for _ in range(10):
            producer.send(topic, value)
        producer.flush()
        sent += 10
        _wait(lambda: rows() == sent, f"{sent} rows", query)

    try:
        # One producer all along, so that it connects before the count starts.
        with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
            # Warm up: the driver's planner and a consumer in each of Spark's two
            # Python workers (a micro-batch's one task runs in either).
            for _ in range(6):
                send(b"x")
            before = accepted()
            # Idle: some 60 triggers find nothing new.
            time.sleep(3)
            assert accepted() == before, "an idle stream opened connections"
            # Busy: every micro-batch reads with a consumer kept from before.
            for _ in range(5):
                send(b"y")
            assert accepted() == before, "micro-batches opened connections"
    finally:
        query.stop()


@pytest.mark.slow
def test_a_topic_to_topic_stream_keeps_its_producers_too(
    spark: Any, broker: RunningBroker, tmp_path: Path, accepted: Callable[[], int]
) -> None:
    source, sink = fresh("reuse-in"), fresh("reuse-out")
    create(broker, source, 1)
    create(broker, sink, 1)
    stream = stream_of(spark, broker, subscribe=source, startingOffsets="earliest")
    query = (
        stream.selectExpr("key", "value")
        .writeStream.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="50 milliseconds")
        .start()
    )

    def moved() -> int:
        return sum(p["numInputRows"] for p in query.recentProgress)

    sent = 0

    def send(value: bytes) -> None:
        nonlocal sent
        for _ in range(10):
            producer.send(source, value)
        producer.flush()
        sent += 10
        _wait(lambda: moved() == sent, f"{sent} rows", query)

    try:
        with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
            for _ in range(6):
                send(b"x")
            before = accepted()
            for _ in range(5):
                send(b"y")
            assert accepted() == before, "micro-batches opened connections"
    finally:
        query.stop()
    records = consume_all(broker, sink, 1)
    assert sorted(r.value for r in records) == [b"x"] * 60 + [b"y"] * 50
