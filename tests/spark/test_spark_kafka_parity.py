"""trafka's data source on Apache Kafka itself, beside Spark's own Kafka connector.

The same options, through ``format("trafka")`` and ``format("kafka")`` (Spark's
connector, given to the session by conftest.py's ``spark.jars``) in the same
session, on the same topics of Kafka 4.x (KRaft) and, once, 3.9 (ZooKeeper):
the same rows (topic, partition, offset, timestamp, timestampType, key, value,
headers), the same errors at the same moment, and what each writes read back
equal. The options are those of Spark's Structured Streaming + Kafka
Integration Guide; where the two differ on purpose, docs/spark.md's parity
table says so and why, and the test asserts what the table says.

Spark jobs cost seconds on a loaded two-core machine: each batch test reads
all its cases in one job per format (a union of the reads, each case tagged).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from kafka_peers import KafkaCluster
from spark_helpers import exactly_once_stream, run

from trafka.sdk import NewTopic, TopicPartition, open_admin, open_producer

pytestmark = pytest.mark.timeout(900)

FORMATS = ("kafka", "trafka")
#: The records' timestamps: ten minutes ago, to the second. Not a fixed date:
#: Kafka deletes a segment whose newest timestamp is older than retention.ms (7
#: days by default, the active segment included) at its next retention check,
#: so records stamped in 2023 vanish from a shared broker within minutes; nor
#: later than an hour from now (Kafka 4's message.timestamp.after.max.ms).
BASE = (int(time.time()) - 600) * 1000


@pytest.fixture
def connector(spark: Any) -> Any:
    """The session, with Spark's Kafka connector loaded (conftest.py's jars)."""
    jvm = spark._jvm
    try:
        jvm.java.lang.Class.forName(
            "org.apache.spark.sql.kafka010.KafkaSourceProvider",
            True,
            jvm.Thread.currentThread().getContextClassLoader(),
        )
    except Exception as exc:  # py4j's error: the class is not on the session's classpath
        pytest.fail(f"Spark's Kafka connector is not in the session's spark.jars: {exc}")
    return spark


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_topics(servers: str, *topics: NewTopic) -> None:
    """Create ``topics`` and wait until each partition answers a ListOffsets
    (Kafka's CreateTopics answers before every broker serves them)."""

    async def go() -> None:
        with anyio.fail_after(60):
            async with open_admin(bootstrap_servers=servers) as admin:
                await admin.create_topics(list(topics))
                await admin.list_offsets(
                    {
                        TopicPartition(t.name, p): "latest"
                        for t in topics
                        for p in range(t.num_partitions)
                    }
                )

    run(go)


def send(
    servers: str, records: list[tuple[str, int | None, bytes | None, bytes, int | None, Any]]
) -> None:
    """(topic, partition, key, value, timestamp ms, headers) records, in order."""

    async def go() -> None:
        with anyio.fail_after(60):
            async with open_producer(bootstrap_servers=servers, linger_ms=0) as producer:
                sent = [
                    await producer.send(
                        topic, value, key=key, partition=partition, timestamp_ms=ts, headers=headers
                    )
                    for topic, partition, key, value, ts, headers in records
                ]
                for future in sent:
                    await future  # every record acknowledged, or the error

    run(go)


def transactions(servers: str, topic: str) -> None:
    """Three transactions on ``topic``-0: committed, aborted, committed."""

    async def go() -> None:
        with anyio.fail_after(60):
            async with open_producer(
                bootstrap_servers=servers, transactional_id=name("parity-tx")
            ) as producer:
                await producer.init_transactions()
                for n, commit in enumerate((True, False, True)):
                    producer.begin_transaction()
                    for i in range(3):
                        await producer.send(topic, b"%d-%d" % (n, i), partition=0)
                    if commit:
                        await producer.commit_transaction()
                    else:
                        await producer.flush()  # the aborted records reach the log
                        await producer.abort_transaction()

    run(go)


def reader(spark: Any, fmt: str, servers: str, options: dict[str, str]) -> Any:
    r = spark.read.format(fmt).option("kafka.bootstrap.servers", servers)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def rows(df: Any) -> list[tuple[Any, ...]]:
    """Every row as a comparable tuple, in a fixed order (headers as pairs, or None)."""
    out = []
    for r in df.collect():
        d = r.asDict()
        headers = d.get("headers")
        out.append(
            (
                d.get("case", ""),
                r.topic,
                r.partition,
                r.offset,
                r.timestamp,
                r.timestampType,
                r.key,
                r.value,
                None if headers is None else tuple((h.key, h.value) for h in headers),
            )
        )
    return sorted(out, key=repr)


def union_read(spark: Any, fmt: str, servers: str, cases: dict[str, dict[str, str]]) -> Any:
    """The cases' reads as one DataFrame (one Spark job), each row tagged with its case."""
    from pyspark.sql.functions import lit

    frames = [
        reader(spark, fmt, servers, options).load().withColumn("case", lit(case))
        for case, options in cases.items()
    ]
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other, allowMissingColumns=True)
    return df


def batch_cases(servers: str) -> tuple[dict[str, dict[str, str]], dict[str, int]]:
    """Topics on ``servers`` and the guide's batch options over them: the cases
    and, per case, how many rows it must have (so that no case passes empty)."""
    prefix = name("parity")
    main, lat, pat, txn = (f"{prefix}-{s}" for s in ("main", "lat", "pat", "txn"))
    make_topics(
        servers,
        NewTopic(main, 3),
        NewTopic(lat, 1, configs={"message.timestamp.type": "LogAppendTime"}),
        NewTopic(pat, 1),
        NewTopic(txn, 1),
    )
    records: list[tuple[str, int | None, bytes | None, bytes, int | None, Any]] = []
    for i in range(30):
        # Headers: two (one of them with a null value), one empty-valued, or none at all.
        headers = ([("h", b"%d" % i), ("n", None)], [("e", b"")], None)[i % 3]
        key = None if i % 7 == 3 else b"k%d" % i
        value = b"" if i == 5 else b"v%d" % i
        records.append((main, i % 3, key, value, BASE + i * 10, headers))
    records += [(lat, None, b"a", b"b", BASE, None), (pat, None, None, b"p", BASE + 1, None)]
    send(servers, records)
    transactions(servers, txn)
    every = {p: json.dumps({main: {str(q): p for q in range(3)}}) for p in (-2, -1)}
    cases = {
        "subscribe": {"subscribe": main, "includeHeaders": "true"},
        "pattern": {"subscribePattern": f"{prefix}-(lat|pat)", "includeHeaders": "true"},
        "assign": {
            "assign": json.dumps({main: [0, 2]}),
            "startingOffsets": json.dumps({main: {"0": 3, "2": -2}}),
            "endingOffsets": json.dumps({main: {"0": 7, "2": -1}}),
        },
        "offsets json": {
            "subscribe": main,
            "startingOffsets": every[-2],
            "endingOffsets": json.dumps({main: {"0": 4, "1": -1, "2": 2}}),
        },
        "timestamps": {
            "subscribe": main,
            "startingTimestamp": str(BASE + 55),
            "endingTimestamp": str(BASE + 205),
        },
        "by timestamp": {
            "subscribe": main,
            "startingOffsetsByTimestamp": json.dumps(
                {main: {"0": BASE, "1": BASE + 100, "2": BASE + 250}}
            ),
            "endingOffsetsByTimestamp": json.dumps(
                {main: {"0": BASE + 90, "1": BASE + 10**9, "2": BASE + 280}}
            ),
        },
        "no match: latest": {
            "subscribe": main,
            "startingTimestamp": str(BASE + 10**9),
            "startingOffsetsByTimestampStrategy": "latest",
        },
        "minPartitions": {"subscribe": main, "minPartitions": "7", "endingOffsets": every[-1]},
        "read_committed": {"subscribe": txn, "kafka.isolation.level": "read_committed"},
        "read_uncommitted": {"subscribe": txn},
    }
    expected = {
        "subscribe": 30,
        "pattern": 2,
        "assign": 4 + 10,
        "offsets json": 4 + 10 + 2,
        "timestamps": 15,  # BASE+60 .. BASE+200
        "by timestamp": 3 + 7 + 1,  # 0-3; 3 to the end (no match: latest); 8-9
        "no match: latest": 0,
        "minPartitions": 30,
        "read_committed": 6,
        "read_uncommitted": 9,
    }
    return cases, expected


@pytest.mark.slow
@pytest.mark.compat("Spark", "batch reads: the guide's options, rows as Spark's connector's")
def test_batch_reads_return_the_connectors_rows(connector: Any, kafka: KafkaCluster) -> None:
    """Each option of the guide's batch reads (subscribe, subscribePattern,
    assign, startingOffsets/endingOffsets as JSON with -2/-1,
    startingTimestamp/endingTimestamp, starting/endingOffsetsByTimestamp,
    startingOffsetsByTimestampStrategy, minPartitions, includeHeaders,
    kafka.isolation.level) gives the rows Spark's connector gives: the same
    offsets (read_committed skips aborted records and markers, leaving gaps),
    timestamps (create time, and log-append time with timestampType 1), null
    keys, empty values and headers (null for a record without any, as the
    connector's KafkaRecordToRowConverter makes them)."""
    servers = kafka.bootstrap_servers
    cases, expected = batch_cases(servers)
    got = {fmt: rows(union_read(connector, fmt, servers, cases)) for fmt in FORMATS}
    counts = {case: sum(1 for r in got["kafka"] if r[0] == case) for case in cases}
    assert counts == expected
    assert got["trafka"] == got["kafka"]
    by_case = {r[0]: r for r in got["kafka"]}
    assert by_case["pattern"][5] in (0, 1)
    assert {r[5] for r in got["kafka"] if r[1].endswith("-lat")} == {1}  # log-append time
    committed = sorted(r[3] for r in got["kafka"] if r[0] == "read_committed")
    assert committed == [0, 1, 2, 8, 9, 10]  # 3-6: aborted; 3 and 7: markers

    # minPartitions splits the ranges as the connector does (its
    # KafkaOffsetRangeCalculator: each partition in max(1, round(share * 7))
    # pieces, here 3 x 2 = 6, "approximately" minPartitions): one task per
    # range with trafka's merging off, and the same tasks with it (merging
    # aims at 7 tasks, and has 6 ranges).
    options = cases["minPartitions"]
    tasks = {
        fmt: reader(connector, fmt, servers, options).load().rdd.getNumPartitions()
        for fmt in FORMATS
    }
    unmerged = reader(connector, "trafka", servers, {**options, "mergeOffsetRanges": "false"})
    assert unmerged.load().rdd.getNumPartitions() == tasks["kafka"] == tasks["trafka"] == 6


class Failed(str):
    """Where a read failed (the string), and the error's text (``.text``)."""

    text: str


def fails_at(spark: Any, fmt: str, servers: str, options: dict[str, str]) -> Failed:
    """Where a read with ``options`` fails: ``load``, ``plan`` (its first action,
    before any task) or ``task``; ``no error`` when it does not."""
    moment_, text = "no error", ""
    try:
        df = reader(spark, fmt, servers, options).load()
    except Exception as exc:
        moment_, text = "load", str(exc)
    else:
        try:
            df.collect()
        except Exception as exc:
            text = str(exc)
            moment_ = moment(text)
    failed = Failed(moment_)
    failed.text = text[:2000]
    return failed


def moment(error: str) -> str:
    """Where an action failed, from its error's text: ``task`` or ``plan``.

    Spark's error of a failed task, the executor's stack, or the Python
    worker's traceback say a task (planning errors say PYTHON_DATA_SOURCE_ERROR)."""
    marks = ("stage failure", "Executor$TaskRunner", "thrown from the Python worker")
    return "task" if any(mark in error for mark in marks) else "plan"


@pytest.mark.slow
@pytest.mark.compat("Spark", "batch reads: the connector's errors, at the same moment")
def test_the_same_mistakes_fail_at_the_same_moment(connector: Any, kafka4: KafkaCluster) -> None:
    """Spark's connector refuses these options at load() (KafkaSourceProvider's
    validateBatchOptions and validateGeneralOptions), fails a read of a topic
    that does not exist or of a timestamp no record reaches as it is planned,
    and fails a task that finds its records deleted (failOnDataLoss=true) or
    starts at the log's start (false): trafka alike, but for startingOffsets
    latest on a batch read, which a Python source can refuse only as it is
    planned (docs/spark.md's parity table, "errors at definition")."""
    servers = kafka4.bootstrap_servers
    topic = name("parity-err")
    make_topics(servers, NewTopic(topic, 1))
    send(servers, [(topic, 0, None, b"%d" % i, None, None) for i in range(10)])

    async def delete() -> None:
        with anyio.fail_after(60):
            async with open_admin(bootstrap_servers=servers) as admin:
                await admin.delete_records({TopicPartition(topic, 0): 4})

    run(delete)
    at_zero = json.dumps({topic: {"0": 0}})
    mistakes: dict[str, tuple[dict[str, str], str]] = {
        "no topics": ({}, "load"),
        "two ways": ({"subscribe": topic, "assign": json.dumps({topic: [0]})}, "load"),
        "bad json": ({"subscribe": topic, "startingOffsets": "{bad"}, "load"),
        "owned setting": ({"subscribe": topic, "kafka.auto.offset.reset": "earliest"}, "load"),
        "end at earliest": ({"subscribe": topic, "endingOffsets": "earliest"}, "load"),
        "missing topic": ({"subscribe": name("parity-none")}, "plan"),
        "no timestamp match": ({"subscribe": topic, "startingTimestamp": str(BASE * 2)}, "plan"),
        "data loss": ({"subscribe": topic, "startingOffsets": at_zero}, "task"),
    }
    for case, (options, moment) in mistakes.items():
        for fmt in FORMATS:
            failed = fails_at(connector, fmt, servers, options)
            assert (case, fmt, failed) == (case, fmt, moment), failed.text
    latest = {"subscribe": topic, "startingOffsets": "latest"}
    assert fails_at(connector, "kafka", servers, latest) == "load"
    assert fails_at(connector, "trafka", servers, latest) == "plan"
    # failOnDataLoss=false: both start at the log's start.
    lenient = {"subscribe": topic, "startingOffsets": at_zero, "failOnDataLoss": "false"}
    read = {fmt: rows(reader(connector, fmt, servers, lenient).load()) for fmt in FORMATS}
    assert read["trafka"] == read["kafka"]
    assert [r[3] for r in read["kafka"]] == list(range(4, 10))


@pytest.mark.slow
@pytest.mark.compat("Spark", "streams: maxOffsetsPerTrigger, AvailableNow, the same rows")
def test_streams_read_the_connectors_rows(connector: Any, kafka4: KafkaCluster) -> None:
    """A stream from the earliest offsets with maxOffsetsPerTrigger under
    Trigger.AvailableNow: both read every record once, in micro-batches of at
    most the limit, and stop at the same offsets. (The connector floors each
    partition's share of the limit, so its micro-batches can run short of it;
    trafka's take exactly the limit: docs/spark.md's parity table.)"""
    servers = kafka4.bootstrap_servers
    topic = name("parity-stream")
    make_topics(servers, NewTopic(topic, 3))
    send(
        servers,
        [(topic, i % 3, b"k%d" % i, b"v%d" % i, BASE + i, None) for i in range(40)]
        + [(topic, 1, b"x%d" % i, b"w%d" % i, BASE + i, None) for i in range(20)],
    )
    read: dict[str, list[tuple[Any, ...]]] = {}
    batches: dict[str, list[int]] = {}
    ends: dict[str, Any] = {}
    tables = {fmt: f"parity_{fmt}_{uuid.uuid4().hex[:8]}" for fmt in FORMATS}
    # Both streams at once: each waits on the broker and on Spark while the other computes.
    queries = {
        fmt: connector.readStream.format(fmt)
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "20")
        .load()
        .writeStream.format("memory")
        .queryName(tables[fmt])
        .trigger(availableNow=True)
        .start()
        for fmt in FORMATS
    }
    try:
        for fmt, query in queries.items():
            assert query.awaitTermination(300), f"the {fmt} stream did not end"
            assert query.exception() is None
            progress = [p for p in query.recentProgress if p["numInputRows"]]
            read[fmt] = rows(connector.table(tables[fmt]))
            batches[fmt] = [p["numInputRows"] for p in progress]
            ends[fmt] = json.loads(progress[-1]["sources"][0]["endOffset"])
    finally:
        for query in queries.values():
            query.stop()
    assert len(read["kafka"]) == 60
    assert read["trafka"] == read["kafka"]
    assert ends["trafka"] == ends["kafka"] == {topic: {"0": 14, "1": 33, "2": 13}}
    assert all(0 < n <= 20 for n in batches["kafka"] + batches["trafka"])
    assert batches["trafka"] == [20, 20, 20]


@pytest.mark.slow
@pytest.mark.compat("Spark", "batch writes: the rows the connector writes")
def test_writes_land_as_the_connectors_do(connector: Any, kafka4: KafkaCluster) -> None:
    """The same DataFrame (key, value, headers, partition, topic columns; null
    keys, null headers, explicit and keyed partitions) written by both sinks:
    the same records in the same partitions, in the same order (keyed records
    where Java's default partitioner puts them, murmur2 of the key)."""
    from pyspark.sql.functions import col, concat, lit

    servers = kafka4.bootstrap_servers
    prefix = name("parity-w")
    targets = {fmt: [f"{prefix}-{fmt}-{n}" for n in (1, 2)] for fmt in FORMATS}
    make_topics(servers, *(NewTopic(t, 3) for ts in targets.values() for t in ts))
    data = []
    for i in range(40):
        headers = ([("h", b"%d" % i), ("n", None)], [], None)[i % 3]
        keyed = i % 5 != 0
        data.append(
            (
                f"k{i}" if keyed else None,
                b"v%d" % i,
                headers,
                None if keyed else i % 3,
                str(1 + i % 2),
            )
        )
    schema = (
        "key string, value binary, headers array<struct<key: string, value: binary>>,"
        " partition int, n string"
    )
    df = connector.createDataFrame(data, schema).coalesce(1)
    for fmt in FORMATS:
        (
            df.withColumn("topic", concat(lit(f"{prefix}-{fmt}-"), col("n")))
            .drop("n")
            .write.format(fmt)
            .option("kafka.bootstrap.servers", servers)
            .mode("append")
            .save()
        )
    back = rows(
        reader(
            connector,
            "trafka",
            servers,
            {
                "subscribe": ",".join(t for ts in targets.values() for t in ts),
                "includeHeaders": "true",
            },
        ).load()
    )
    landed = {
        fmt: sorted(
            (r[1].rsplit("-", 1)[1], r[2], r[3], r[6], r[7], r[8])
            for r in back
            if r[1].startswith(f"{prefix}-{fmt}-")
        )
        for fmt in FORMATS
    }
    assert len(landed["kafka"]) == 40
    assert landed["trafka"] == landed["kafka"]


@pytest.mark.slow
@pytest.mark.compat("Spark", "exactly-once sink: transactions on Kafka")
def test_exactly_once_stream_on_kafka(connector: Any, kafka4: KafkaCluster, tmp_path: Path) -> None:
    """trafka's exactly-once sink on Kafka 4 (its tasks' transactions committed
    by the driver, docs/spark.md "Writing exactly once"): read_committed
    readers, trafka's and Spark's connector, see every source record once and
    the same rows at the same offsets (the transaction markers leave gaps)."""
    servers = kafka4.bootstrap_servers
    source, sink = name("parity-eos-in"), name("parity-eos-out")
    make_topics(servers, NewTopic(source, 2), NewTopic(sink, 2))
    send(servers, [(source, i % 2, b"k%d" % i, b"v%d" % i, None, None) for i in range(100)])
    query = exactly_once_stream(
        connector,
        "trafka",
        servers,
        source,
        sink,
        str(tmp_path / "checkpoint"),
        "key",
        "value",
        "partition",
    )
    try:
        assert query.awaitTermination(300), "the exactly-once stream did not end"
        assert query.exception() is None
    finally:
        query.stop()
    committed = {"subscribe": sink, "kafka.isolation.level": "read_committed"}
    read = {fmt: rows(reader(connector, fmt, servers, committed).load()) for fmt in FORMATS}
    assert read["trafka"] == read["kafka"]
    assert sorted(r[7] for r in read["kafka"]) == sorted(b"v%d" % i for i in range(100))
    # Each record went to its source partition: the partition column was written.
    assert all(int(r[6][1:]) % 2 == r[2] for r in read["kafka"])
