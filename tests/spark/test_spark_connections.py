"""Connections: a stream keeps its clients between triggers and micro-batches,
as Spark's connector caches its consumers and producers, instead of opening
new ones each time (counted where they arrive: the broker's accepted
connections)."""

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
def test_a_stream_keeps_its_connections_across_triggers_and_micro_batches(
    spark: Any, broker: RunningBroker, tmp_path: Path, accepted: Callable[[], int]
) -> None:
    """A stream from topic to topic, trafka's source and sink: once warm, idle
    triggers and busy micro-batches open no connection (the driver's planner,
    and the readers and producers of Spark's two Python workers, all kept). (A
    stream into a memory sink, whose count proved the source's half alone,
    was a test of its own.)"""
    source, sink = fresh("reuse-in"), fresh("reuse-out")
    create(broker, source, 1)
    create(broker, sink, 1)
    stream = stream_of(spark, broker, subscribe=source, startingOffsets="earliest")
    # A progress for every trigger, idle ones too (Spark's default: one per 10 s
    # without data), so that the idle triggers can be counted; read as the query starts.
    interval = "spark.sql.streaming.noDataProgressEventInterval"
    spark.conf.set(interval, "0")
    try:
        query = (
            stream.selectExpr("key", "value")
            .writeStream.format("trafka")
            .option("kafka.bootstrap.servers", broker.bootstrap_servers)
            .option("topic", sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="50 milliseconds")
            .start()
        )
    finally:
        spark.conf.unset(interval)

    rows: dict[int, int] = {}  # batch id -> its rows (Spark keeps the last 100 progresses)

    def moved() -> int:
        for progress in query.recentProgress:
            if progress["numInputRows"]:
                rows[progress["batchId"]] = progress["numInputRows"]
        return sum(rows.values())

    def idle_since(mark: str) -> int:
        return sum(
            1 for p in query.recentProgress if not p["numInputRows"] and p["timestamp"] > mark
        )

    sent = 0

    def send(value: bytes) -> None:
        nonlocal sent
        for _ in range(10):
            producer.send(source, value)
        producer.flush()
        sent += 10
        _wait(lambda: moved() == sent, f"{sent} rows", query)

    try:
        # One producer all along, so that it connects before the count starts.
        with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
            # Warm up: the driver's planner, and a reader and a producer in each
            # of Spark's two Python workers (a micro-batch's one task runs in either).
            for _ in range(6):
                send(b"x")
            before = accepted()
            # Idle: triggers that find nothing new.
            mark = query.lastProgress["timestamp"]
            _wait(lambda: idle_since(mark) >= 30, "30 idle triggers", query)
            assert accepted() == before, "an idle stream opened connections"
            # Busy: every micro-batch reads and writes with clients kept from before.
            for _ in range(5):
                send(b"y")
            assert accepted() == before, "micro-batches opened connections"
    finally:
        query.stop()
    records = consume_all(broker, sink, 1)
    assert sorted(r.value for r in records) == [b"x"] * 60 + [b"y"] * 50
