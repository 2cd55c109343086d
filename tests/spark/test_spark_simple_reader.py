"""``streamReader=simple``: the driver reads each micro-batch (PySpark's simple
stream reader), against a real brokerlite and, for the restarts, a real Spark.

What must hold is what the partitioned reader gives: every record once, in the
micro-batches the offsets name, the same admission (``maxOffsetsPerTrigger``),
new partitions found and read from their start, and a micro-batch that a
restarted query runs again from its checkpoint reads the same records.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from spark_helpers import create, fresh, produce, run, run_available_now, stream_of

from trafka.brokerlite import RunningBroker
from trafka.sdk import open_admin, open_producer
from trafka.sdk.errors import ConfigError
from trafka.spark.options import parse_read_options
from trafka.spark.source import SCHEMA, KafkaDataSource, _SimpleStreamReader

pytestmark = pytest.mark.timeout(240)


def simple_reader(broker: RunningBroker, **options: str) -> _SimpleStreamReader:
    given = {"kafka.bootstrap.servers": broker.bootstrap_servers, "streamReader": "simple"}
    return _SimpleStreamReader(parse_read_options({**given, **options}, streaming=True), SCHEMA)


def values(batches: Any) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of Arrow batches, sorted."""
    table = pa.Table.from_batches(list(batches))
    return sorted(
        zip(
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            [v.decode() for v in table.column("value").to_pylist()],
            strict=True,
        )
    )


def test_the_option_chooses_pysparks_simple_reader() -> None:
    source = KafkaDataSource(
        {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", "streamReader": "simple"}
    )
    from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper, _streamReader

    # PySpark's own choice (the same call its stream runner and tasks make).
    wrapped = _streamReader(source, SCHEMA)
    assert isinstance(wrapped, _SimpleStreamReaderWrapper)
    assert isinstance(wrapped.simple_reader, _SimpleStreamReader)
    partitioned = KafkaDataSource({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"})
    assert not isinstance(_streamReader(partitioned, SCHEMA), _SimpleStreamReaderWrapper)
    with pytest.raises(ConfigError, match="streamReader"):
        parse_read_options(
            {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", "streamReader": "driver"},
            streaming=True,
        )


def test_read_returns_the_records_and_the_end_then_replays_them(broker: RunningBroker) -> None:
    topic = fresh("simple")
    create(broker, topic, 2)
    produce(broker, topic, [(f"k{i}".encode(), f"a{i}".encode(), None) for i in range(30)])
    reader = simple_reader(
        broker,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="20",
        latestOffsetWaitMs="0",
    )
    start = reader.initialOffset()
    assert start == {topic: {"0": 0, "1": 0}}

    rows, end = reader.read(start)
    kept = copy.copy(rows)  # PySpark keeps a copy of what it hands Spark
    first = values(rows)
    assert len(first) == 20  # maxOffsetsPerTrigger, as the partitioned reader admits
    assert values(kept) == first
    assert sum(end[topic].values()) == 20
    assert {(p, o) for p, o, _ in first} == {
        (int(p), o) for p, stop in end[topic].items() for o in range(stop)
    }

    rows, after = reader.read(end)
    second = values(rows)
    assert len(second) == 10
    assert sorted(v for *_, v in first + second) == sorted(f"a{i}" for i in range(30))

    # Nothing new: the start itself (PySpark runs no micro-batch), no rows.
    rows, same = reader.read(after)
    assert same == after and list(rows) == []

    # A restarted query's micro-batch, read again from its offsets alone.
    again = simple_reader(broker, subscribe=topic, startingOffsets="earliest")
    assert values(again.readBetweenOffsets(start, end)) == first
    assert values(again.readBetweenOffsets(end, after)) == second


def test_a_new_partition_is_read_from_its_start(broker: RunningBroker) -> None:
    topic = fresh("grow")
    create(broker, topic, 1)
    produce(broker, topic, [(None, f"a{i}".encode(), None) for i in range(5)])
    reader = simple_reader(
        broker,
        subscribe=topic,
        startingOffsets="earliest",
        latestOffsetWaitMs="0",
    )
    start = reader.initialOffset()
    rows, end = reader.read(start)
    assert [v for *_, v in values(rows)] == [f"a{i}" for i in range(5)]

    async def grow() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.create_partitions({topic: 2})

    async def to_the_new_partition() -> None:
        async with open_producer(bootstrap_servers=broker.bootstrap_servers) as producer:
            for i in range(3):
                await producer.send_and_wait(topic, f"b{i}".encode(), partition=1)

    run(grow)
    run(to_the_new_partition)
    rows, after = reader.read(end)
    assert values(rows) == [(1, i, f"b{i}") for i in range(3)]
    assert after == {topic: {"0": 5, "1": 3}}
    assert values(reader.readBetweenOffsets(end, after)) == [(1, i, f"b{i}") for i in range(3)]


def test_admission_holds_back_and_available_now_stops_at_its_start(broker: RunningBroker) -> None:
    """The partitioned reader's admission, on the driver's reads: a trigger below
    ``minOffsetsPerTrigger`` within ``maxTriggerDelay`` returns its start (no
    micro-batch), and ``Trigger.AvailableNow`` reads no record that came after it began."""
    topic = fresh("simplemin")
    create(broker, topic, 1)
    produce(broker, topic, [(None, f"a{i}".encode(), None) for i in range(30)])
    clock = [42.0]
    options = {
        "kafka.bootstrap.servers": broker.bootstrap_servers,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "minOffsetsPerTrigger": "50",
        "maxTriggerDelay": "1h",
        "latestOffsetWaitMs": "0",
    }
    reader = _SimpleStreamReader(
        parse_read_options(options, streaming=True), SCHEMA, clock=lambda: clock[0]
    )
    start = reader.initialOffset()
    rows, end = reader.read(start)  # the first trigger is never held back
    assert len(values(rows)) == 30 and end == {topic: {"0": 30}}
    produce(broker, topic, [(None, f"b{i}".encode(), None) for i in range(20)])
    clock[0] += 60
    rows, same = reader.read(end)
    assert same == end and list(rows) == []  # 20 < 50, within the delay
    clock[0] += 3600
    rows, after = reader.read(end)
    assert [v for *_, v in values(rows)] == [f"b{i}" for i in range(20)]
    assert after == {topic: {"0": 50}}  # the delay is over

    now = simple_reader(broker, subscribe=topic, startingOffsets="earliest", latestOffsetWaitMs="0")
    now.prepareForTriggerAvailableNow()
    produce(broker, topic, [(None, b"late", None)])
    rows, first = now.read(now.initialOffset())
    assert len(values(rows)) == 50 and first == {topic: {"0": 50}}
    rows, last = now.read(first)
    assert last == first and list(rows) == []


def _drop_last_commit(checkpoint: Path) -> int:
    """Forget that the last micro-batch finished (as a driver that died between
    its sink and its commit would): the restarted query runs it again."""
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


@pytest.mark.slow
def test_a_restarted_query_loses_and_doubles_nothing_in_a_file_sink(
    spark: Any, broker: RunningBroker, tmp_path: Path
) -> None:
    topic = fresh("simplefile")
    create(broker, topic, 2)
    produce(broker, topic, [(f"k{i}".encode(), f"a{i}".encode(), None) for i in range(50)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = {
        "subscribe": topic,
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "20",
        "streamReader": "simple",
    }

    def run_once() -> Any:
        return run_available_now(stream_of(spark, broker, **options), out, checkpoint)

    query = run_once()
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [20, 20, 10]
    _drop_last_commit(checkpoint)
    produce(broker, topic, [(f"k{i}".encode(), f"b{i}".encode(), None) for i in range(30)])
    run_once()
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r.value for r in rows) == sorted(
        [f"a{i}" for i in range(50)] + [f"b{i}" for i in range(30)]
    )
    assert len({(r.partition, r.offset) for r in rows}) == len(rows) == 80


@pytest.mark.slow
def test_a_micro_batch_run_again_after_a_restart_has_the_same_rows(
    spark: Any, broker: RunningBroker, tmp_path: Path
) -> None:
    topic = fresh("simplereplay")
    create(broker, topic, 2)
    produce(broker, topic, [(f"k{i}".encode(), f"a{i}".encode(), None) for i in range(50)])
    checkpoint = tmp_path / "checkpoint"
    seen: list[tuple[int, list[tuple[int, int, str]]]] = []

    def sink(frame: Any, batch_id: int) -> None:
        rows = frame.collect()
        seen.append((batch_id, sorted((r.partition, r.offset, r.value) for r in rows)))

    def run_once() -> None:
        query = (
            stream_of(
                spark,
                broker,
                subscribe=topic,
                startingOffsets="earliest",
                maxOffsetsPerTrigger="20",
                streamReader="simple",
            )
            .selectExpr("partition", "offset", "cast(value as string) as value")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run_once()
    first = [(b, rows) for b, rows in seen if rows]
    assert [len(rows) for _, rows in first] == [20, 20, 10]
    last = _drop_last_commit(checkpoint)
    seen.clear()
    run_once()
    # Read again in a task from the checkpoint's offsets: the same records.
    assert seen[0] == first[-1] and seen[0][0] == last
    rows = [row for _, batch in first for row in batch]
    assert len(set(rows)) == 50
