"""The ``trafka`` data source in a real local Spark against a real brokerlite.

Records go in and come out through trafka's own clients, so each test checks
Spark's view against what the broker acknowledged.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import consume_all, create, fresh, produce, run, run_available_now, stream_of

from trafka.brokerlite import RunningBroker
from trafka.sdk import TopicPartition, open_admin, open_producer
from trafka.sdk.partitioners import murmur2
from trafka.spark import offsets_behind_latest

pytestmark = pytest.mark.timeout(240)


def reader(spark: Any, broker: RunningBroker, **options: str) -> Any:
    r = spark.read.format("trafka").option("kafka.bootstrap.servers", broker.bootstrap_servers)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def utc(ms: int) -> datetime.datetime:
    # The session's time zone is UTC; Spark hands timestamps back naive.
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).replace(tzinfo=None)


@pytest.mark.slow
def test_batch_read_returns_every_record_as_the_broker_acknowledged_it(
    spark: Any, broker: RunningBroker
) -> None:
    topic = fresh()
    create(broker, topic, 3)
    base = 1_700_000_000_000
    sent = [(f"k{i % 11}".encode(), f"v{i}".encode(), base + i) for i in range(600)]
    sent.append((None, b"no key", base))
    metas = produce(broker, topic, sent, headers=[("h", b"1"), ("empty", b"")])
    expected = {
        (m.partition, m.offset): (k, v, utc(ts)) for m, (k, v, ts) in zip(metas, sent, strict=True)
    }
    df = reader(spark, broker, subscribe=topic, includeHeaders="true").load()
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
    ]  # fmt: skip
    rows = df.collect()
    assert len(rows) == len(sent)
    got = {(r.partition, r.offset): (r.key, r.value, r.timestamp) for r in rows}
    assert got == expected
    assert {r.topic for r in rows} == {topic}
    assert {r.timestampType for r in rows} == {0}
    assert all([(h.key, h.value) for h in r.headers] == [("h", b"1"), ("empty", b"")] for r in rows)
    # Without includeHeaders there is no headers column.
    assert "headers" not in reader(spark, broker, subscribe=topic).load().columns
    # Spark's own operations work on the rows: keys per partition match the producer's.
    counts = {
        r.partition: r["count"]
        for r in reader(spark, broker, subscribe=topic)
        .load()
        .groupBy("partition")
        .count()
        .collect()
    }
    assert counts == {p: sum(1 for m in metas if m.partition == p) for p in range(3)}


def test_the_headers_column_carries_the_trace_context(spark: Any, broker: RunningBroker) -> None:
    """Records a traced producer sent (``otel.tracer.provider``): with
    ``includeHeaders``, each row's ``headers`` has the ``traceparent`` (W3C
    Trace Context) its ``send`` span injected, after the application's headers."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer = TracerProvider()
    exporter = InMemorySpanExporter()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    topic = fresh()
    create(broker, topic, 2)
    sent = [(b"k%d" % i, b"v%d" % i, None) for i in range(20)]
    metas = produce(broker, topic, sent, headers=[("h", b"1")], otel_tracer_provider=tracer)
    expected = {}
    for span in exporter.get_finished_spans():
        ctx, attrs = span.context, span.attributes
        where = (int(attrs["messaging.destination.partition.id"]), attrs["messaging.kafka.offset"])
        expected[where] = b"00-%032x-%016x-%02x" % (ctx.trace_id, ctx.span_id, ctx.trace_flags)
    assert sorted(expected) == sorted((m.partition, m.offset) for m in metas)
    rows = reader(spark, broker, subscribe=topic, includeHeaders="true").load().collect()
    got = {(r.partition, r.offset): [(h.key, h.value) for h in r.headers] for r in rows}
    assert got == {where: [("h", b"1"), ("traceparent", tp)] for where, tp in expected.items()}


def test_offset_ranges_min_partitions_assign_and_pattern(spark: Any, broker: RunningBroker) -> None:
    topic = fresh("ranges")
    create(broker, topic, 2)
    # One key for each partition.
    key_a = b"a"
    pa = murmur2(key_a) % 2
    key_b = next(k for k in (b"b%d" % i for i in range(100)) if murmur2(k) % 2 != pa)
    produce(broker, topic, [(key_a, f"{i}".encode(), None) for i in range(100)])
    produce(broker, topic, [(key_b, f"{i}".encode(), None) for i in range(100)])
    df = reader(
        spark,
        broker,
        subscribe=topic,
        startingOffsets=json.dumps({topic: {str(pa): 10}}),
        endingOffsets=json.dumps({topic: {str(pa): 35}}),
    ).load()
    rows = df.collect()
    from_a = sorted(r.offset for r in rows if r.partition == pa)
    assert from_a == list(range(10, 35))
    # The other partition: from the earliest to the latest offset.
    assert sorted(r.offset for r in rows if r.partition != pa) == list(range(100))

    split = reader(spark, broker, subscribe=topic, minPartitions="7").load()
    assert split.rdd.getNumPartitions() >= 7
    assert sorted((r.partition, r.offset) for r in split.collect()) == [
        (p, o) for p in range(2) for o in range(100)
    ]

    assigned = reader(spark, broker, assign=json.dumps({topic: [pa]})).load().collect()
    assert {r.partition for r in assigned} == {pa} and len(assigned) == 100

    other = fresh("ranges")
    create(broker, other, 1)
    produce(broker, other, [(None, b"x", None)] * 3)
    pattern = reader(spark, broker, subscribePattern=f"({topic}|{other})").load()
    assert {(r.topic, r.partition) for r in pattern.collect()} == {
        (topic, 0),
        (topic, 1),
        (other, 0),
    }


def test_timestamps_choose_the_range(spark: Any, broker: RunningBroker) -> None:
    topic = fresh("times")
    create(broker, topic, 1)
    base = 1_600_000_000_000
    produce(broker, topic, [(None, f"{i}".encode(), base + 1000 * i) for i in range(20)])
    rows = reader(
        spark,
        broker,
        subscribe=topic,
        startingTimestamp=str(base + 5_000),
        endingTimestamp=str(base + 12_500),
    ).load()
    assert sorted(int(r.value) for r in rows.collect()) == list(range(5, 13))
    by_partition = reader(
        spark,
        broker,
        subscribe=topic,
        startingOffsetsByTimestamp=json.dumps({topic: {"0": base + 15_000}}),
        endingOffsetsByTimestamp=json.dumps({topic: {"0": base + 17_000}}),
    )
    assert sorted(int(r.value) for r in by_partition.load().collect()) == [15, 16]
    # A timestamp past every record starts at the end; startingTimestamp wins
    # over explicit offsets, as in Spark.
    rows = reader(
        spark,
        broker,
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 0}}),
        startingTimestamp=str(base + 18_000),
    )
    assert sorted(int(r.value) for r in rows.load().collect()) == [18, 19]
    # A starting timestamp no record reaches fails the query (Spark's default
    # strategy) or starts at the end with startingOffsetsByTimestampStrategy=latest.
    late = reader(spark, broker, subscribe=topic, startingTimestamp=str(base + 10**9))
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy=latest"):
        late.load().collect()
    late = reader(
        spark,
        broker,
        subscribe=topic,
        startingTimestamp=str(base + 10**9),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert late.load().collect() == []
    # An ending timestamp no record reaches ends at the partition's end.
    rows = reader(spark, broker, subscribe=topic, endingTimestamp=str(base + 10**9)).load()
    assert len(rows.collect()) == 20


def test_read_committed_hides_aborted_transactions(spark: Any, broker: RunningBroker) -> None:
    topic = fresh("txn")
    create(broker, topic, 2)

    async def go() -> None:
        async with open_producer(
            bootstrap_servers=broker.bootstrap_servers, transactional_id=fresh("tx")
        ) as producer:
            await producer.init_transactions()
            for n in range(6):
                producer.begin_transaction()
                for i in range(10):
                    await producer.send(topic, f"{n}-{i}".encode(), partition=i % 2)
                if n % 2:
                    await producer.flush()  # the aborted records reach the log
                    await producer.abort_transaction()
                else:
                    await producer.commit_transaction()

    run(go)
    committed = reader(
        spark, broker, subscribe=topic, **{"kafka.isolation.level": "read_committed"}
    ).load()
    values = sorted(r.value.decode() for r in committed.collect())
    assert values == sorted(f"{n}-{i}" for n in (0, 2, 4) for i in range(10))
    everything = reader(spark, broker, subscribe=topic).load().collect()
    assert len(everything) == 60  # markers are not records; aborted ones are read uncommitted


def test_batch_write_then_read_back(spark: Any, broker: RunningBroker) -> None:
    topic = fresh("write")
    create(broker, topic, 4)
    other = fresh("write")
    create(broker, other, 1)
    df = spark.createDataFrame(
        [(f"key{i}", f"value{i}", topic, None) for i in range(300)]
        + [(None, "to partition 2", topic, 2), ("k", "elsewhere", other, None)],
        "key string, value string, topic string, partition int",
    )
    # No topic option: each row's topic column says where it goes.
    (
        df.write.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .mode("append")
        .save()
    )
    records = consume_all(broker, topic, 4)
    assert len(records) == 301
    for r in records:
        if r.key is None:
            assert (r.value, r.partition) == (b"to partition 2", 2)
        else:
            # Keyed rows land where Java's default partitioner puts them.
            assert r.partition == murmur2(r.key) % 4
            assert r.value == b"value" + r.key[3:]
    assert [(r.key, r.value) for r in consume_all(broker, other, 1)] == [(b"k", b"elsewhere")]

    with_headers = spark.createDataFrame(
        [(b"\x00\xff", [("trace", b"abc")])],
        "value binary, headers array<struct<key:string,value:binary>>",
    )
    target = fresh("write")
    create(broker, target, 1)
    (
        with_headers.write.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", target)
        .mode("append")
        .save()
    )
    (record,) = consume_all(broker, target, 1)
    assert record.value == b"\x00\xff" and record.headers == (("trace", b"abc"),)


def test_the_topic_option_overrides_the_topic_column(spark: Any, broker: RunningBroker) -> None:
    chosen, named = fresh("override"), fresh("override")
    create(broker, chosen, 1)
    create(broker, named, 1)
    df = spark.createDataFrame(
        [(named, f"v{i}") for i in range(20)] + [(None, "no topic")], "topic string, value string"
    )
    (
        df.write.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", chosen)
        .option("includeHeaders", "true")  # the sink accepts it, as Spark's
        .mode("append")
        .save()
    )
    assert sorted(r.value for r in consume_all(broker, chosen, 1)) == sorted(
        [f"v{i}".encode() for i in range(20)] + [b"no topic"]
    )
    assert consume_all(broker, named, 1) == []
    # Without the option, the column decides.
    (
        df.where("topic is not null")
        .write.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .mode("append")
        .save()
    )
    assert len(consume_all(broker, named, 1)) == 20


def test_partitioner_class_and_java_only_settings(spark: Any, broker: RunningBroker) -> None:
    topic = fresh("roundrobin")
    create(broker, topic, 4)
    df = spark.createDataFrame(
        [("same-key", f"v{i}") for i in range(40)], "key string, value string"
    )
    (
        df.coalesce(1)
        .write.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option(
            "kafka.partitioner.class", "org.apache.kafka.clients.producer.RoundRobinPartitioner"
        )
        .option("kafka.send.buffer.bytes", "131072")
        .option("topic", topic)
        .mode("append")
        .save()
    )
    records = consume_all(broker, topic, 4)
    # One key, yet every partition got a share: the key was not hashed.
    counts = {p: sum(1 for r in records if r.partition == p) for p in range(4)}
    assert sum(counts.values()) == 40 and all(counts.values()), counts
    rows = reader(
        spark,
        broker,
        subscribe=topic,
        **{"kafka.receive.buffer.bytes": "65536", "kafka.client.dns.lookup": "use_all_dns_ips"},
    ).load()
    assert rows.count() == 40


def test_group_id_is_presented_but_never_committed(spark: Any, broker: RunningBroker) -> None:
    topic = fresh("group")
    create(broker, topic, 2)
    produce(broker, topic, [(None, f"{i}".encode(), None) for i in range(50)])
    for options in ({"kafka.group.id": fresh("etl")}, {"groupIdPrefix": "nightly"}):
        assert reader(spark, broker, subscribe=topic, **options).load().count() == 50

    async def groups() -> list[Any]:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            return await admin.list_groups()

    assert not [g for g in run(groups) if g.group_id.startswith(("etl", "nightly"))]


def test_max_records_per_partition_splits_the_read(spark: Any, broker: RunningBroker) -> None:
    topic = fresh("split")
    create(broker, topic, 2)
    produce(broker, topic, [(f"k{i}".encode(), f"{i}".encode(), None) for i in range(300)])
    df = reader(spark, broker, subscribe=topic, maxRecordsPerPartition="40").load()
    counts = df.groupBy("partition").count().collect()
    assert df.rdd.getNumPartitions() == sum(-(-r["count"] // 40) for r in counts)
    assert sorted(int(r.value) for r in df.collect()) == list(range(300))


def test_small_ranges_share_tasks_and_each_is_read_exactly_once(
    spark: Any, broker: RunningBroker
) -> None:
    """16 partitions read by about one task per core (the session's 2), by one
    task per partition with mergeOffsetRanges=false, and by minPartitions' split:
    every read returns each planned offset once, as the producer acknowledged it."""
    topic = fresh("merge")
    create(broker, topic, 16)
    sent = [(f"k{i}".encode(), f"v{i}".encode(), None) for i in range(1600)]
    metas = produce(broker, topic, sent)
    produced = sorted((m.partition, m.offset, v) for m, (_, v, _) in zip(metas, sent, strict=True))
    assert {p for p, _, _ in produced} == set(range(16))

    def read(**options: str) -> tuple[int, list[tuple[int, int, bytes]]]:
        df = reader(spark, broker, subscribe=topic, **options).load()
        rows = sorted((r.partition, r.offset, r.value) for r in df.collect())
        return df.rdd.getNumPartitions(), rows

    assert read() == (2, produced)
    assert read(mergeOffsetRanges="false") == (16, produced)
    assert read(mergedPartitions="5") == (5, produced)
    # minPartitions still splits (merging never leaves fewer tasks than it asks);
    # as in Spark, each partition gets round(minPartitions * its share) pieces,
    # here 2 to 4 each.
    tasks, rows = read(minPartitions="48")
    assert tasks > 16 and rows == produced
    # Ranges that start mid-partition and end early, merged: exactly their offsets.
    starts = {str(p): 3 for p in range(0, 16, 2)}
    ends = {str(p): 5 for p in range(1, 16, 4)}
    tasks, rows = read(
        startingOffsets=json.dumps({topic: starts}), endingOffsets=json.dumps({topic: ends})
    )
    assert tasks == 2
    assert rows == [
        (p, o, v) for p, o, v in produced if starts.get(str(p), 0) <= o < ends.get(str(p), 2**63)
    ]

    # A merged task still checks each of its ranges for lost records.
    async def delete() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.delete_records({TopicPartition(topic, 7): 4})

    run(delete)
    from_zero = json.dumps({topic: {"7": 0}})
    with pytest.raises(Exception, match=r"offsets 0-3 of \S+-7 are no longer in the log"):
        read(startingOffsets=from_zero)
    tasks, rows = read(startingOffsets=from_zero, failOnDataLoss="false")
    assert tasks == 2
    assert rows == [(p, o, v) for p, o, v in produced if p != 7 or o >= 4]


def test_write_errors_are_clear(spark: Any, broker: RunningBroker) -> None:
    df = spark.createDataFrame([("v",)], "value string")
    servers = broker.bootstrap_servers
    with pytest.raises(Exception, match="a row has no topic"):
        df.write.format("trafka").option("kafka.bootstrap.servers", servers).mode("append").save()
    with pytest.raises(Exception, match="append-only"):
        (
            df.write.format("trafka")
            .option("kafka.bootstrap.servers", servers)
            .option("topic", "x")
            .mode("overwrite")
            .save()
        )
    with pytest.raises(Exception, match="'extra' cannot be written"):
        (
            spark.createDataFrame([("v", 1)], "value string, extra int")
            .write.format("trafka")
            .option("kafka.bootstrap.servers", servers)
            .option("topic", "x")
            .mode("append")
            .save()
        )
    with pytest.raises(Exception, match=r"unknown configuration key 'lingr\.ms'"):
        (
            df.write.format("trafka")
            .option("kafka.bootstrap.servers", servers)
            .option("kafka.lingr.ms", "5")
            .option("topic", "x")
            .mode("append")
            .save()
        )


def test_read_errors_are_clear(spark: Any, broker: RunningBroker, tmp_path: Path) -> None:
    # At load(), before any action, for a batch read and a stream alike.
    with pytest.raises(Exception, match="unknown option 'subscrib'"):
        reader(spark, broker, subscrib="x").load()
    with pytest.raises(Exception, match="'maxOffsetsPerTrigger' must be an integer"):
        reader(spark, broker, subscribe="x", maxOffsetsPerTrigger="lots").load()
    with pytest.raises(Exception, match=r"unknown configuration key 'fetch\.max\.wait\.mss'"):
        stream_of(spark, broker, subscribe="x", **{"kafka.fetch.max.wait.mss": "5"})
    with pytest.raises(Exception, match="exactly one of"):
        stream_of(spark, broker)
    with pytest.raises(Exception, match="topics do not exist: no-such-topic"):
        reader(spark, broker, subscribe="no-such-topic").load().collect()
    # What only a stream refuses fails the query as it starts, naming the option.
    topic = fresh("errors")
    create(broker, topic, 1)
    stream = stream_of(spark, broker, subscribe=topic, endingOffsets="latest")
    query = (
        stream.writeStream.format("memory")
        .queryName("bad_stream")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(Exception, match="'endingOffsets' is for batch reads") as failed:
        query.awaitTermination(120)
    assert "UnboundLocalError" not in str(failed.value)


def test_offsets_one_kind_of_read_refuses_fail_before_a_record_is_read(
    spark: Any, broker: RunningBroker
) -> None:
    """Spark's load() asks a Python data source for its schema alone, alike for
    spark.read and spark.readStream, and calls a stream's reader only after
    start() has returned: what both kinds of read refuse fails at load(); what
    only a batch read refuses, as Spark plans the read (its first action), each
    error naming the option (what only a stream refuses: test_read_errors_are_clear)."""
    topic = fresh("kinds")
    create(broker, topic, 1)
    produce(broker, topic, [(None, b"x", None)] * 5)
    earliest_end = json.dumps({topic: {"0": -2}})
    named = r"option 'endingOffsets': -2 \(earliest\) for \S+-0 is not allowed"
    with pytest.raises(Exception, match=named):
        reader(spark, broker, subscribe=topic, endingOffsets=earliest_end).load()
    with pytest.raises(Exception, match=named):
        stream_of(spark, broker, subscribe=topic, endingOffsets=earliest_end)
    for starting, named in (
        ("latest", r"option 'startingOffsets' cannot be 'latest': a batch read"),
        (
            json.dumps({topic: {"0": -1}}),
            r"option 'startingOffsets': -1 \(latest\) for \S+-0 is not allowed: a batch read",
        ),
    ):
        df = reader(spark, broker, subscribe=topic, startingOffsets=starting).load()
        with pytest.raises(Exception, match=named):
            df.collect()


def test_deleted_records_fail_the_read_unless_allowed(spark: Any, broker: RunningBroker) -> None:
    topic = fresh("loss")
    create(broker, topic, 1)
    produce(broker, topic, [(None, f"{i}".encode(), None) for i in range(30)])

    async def delete() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.delete_records({TopicPartition(topic, 0): 12})

    run(delete)
    # earliest is now 12: a default read starts there.
    rows = reader(spark, broker, subscribe=topic).load().collect()
    assert sorted(int(r.value) for r in rows) == list(range(12, 30))
    # A read that asks for the deleted offsets fails, naming them...
    from_zero = json.dumps({topic: {"0": 0}})
    with pytest.raises(
        Exception, match=r"offsets 0-11 of \S+ are no longer in the log \(it now starts at 12\)"
    ):
        reader(spark, broker, subscribe=topic, startingOffsets=from_zero).load().collect()
    # ...or skips them when told to.
    rows = (
        reader(spark, broker, subscribe=topic, startingOffsets=from_zero, failOnDataLoss="false")
        .load()
        .collect()
    )
    assert sorted(int(r.value) for r in rows) == list(range(12, 30))


@pytest.mark.slow
def test_stream_resumes_from_its_checkpoint_and_respects_the_rate_limit(
    spark: Any, broker: RunningBroker, tmp_path: Path
) -> None:
    topic = fresh("stream")
    create(broker, topic, 3)
    produce(broker, topic, [(None, f"a{i}".encode(), None) for i in range(250)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "100"}

    query = run_available_now(stream_of(spark, broker, **options), out, checkpoint)
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    assert [p["numInputRows"] for p in progress] == [100, 100, 50]
    # Spark's offsets-behind-latest metrics, from the latest offsets the source reports.
    behind = [offsets_behind_latest(p) for p in progress]
    assert [sum(_backlog(p).values()) for p in progress] == [150, 50, 0]
    assert behind[-1] == {
        "avgOffsetsBehindLatest": "0.0",
        "maxOffsetsBehindLatest": "0",
        "minOffsetsBehindLatest": "0",
    }
    first_lag = _backlog(progress[0])
    assert behind[0]["maxOffsetsBehindLatest"] == str(max(first_lag.values()))
    assert float(behind[0]["avgOffsetsBehindLatest"]) == 150 / 3
    first = spark.read.parquet(str(out)).collect()
    assert sorted(r.value for r in first) == sorted(f"a{i}" for i in range(250))

    # More records and a new partition: the restarted query reads only those.
    produce(broker, topic, [(None, f"b{i}".encode(), None) for i in range(40)])

    async def grow() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.create_partitions({topic: 4})

    run(grow)
    produce(
        broker,
        topic,
        [(f"k{i}".encode(), f"c{i}".encode(), None) for i in range(40)],
    )
    run_available_now(stream_of(spark, broker, **options), out, checkpoint)
    rows = spark.read.parquet(str(out)).collect()
    values = sorted(r.value for r in rows)
    assert values == sorted(
        [f"a{i}" for i in range(250)] + [f"b{i}" for i in range(40)] + [f"c{i}" for i in range(40)]
    )
    assert len({(r.partition, r.offset) for r in rows}) == len(rows) == 330
    assert any(r.partition == 3 for r in rows)


def _backlog(progress: dict[str, Any]) -> dict[str, int]:
    (source,) = progress["sources"]
    end, latest = source["endOffset"], source["latestOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    latest = json.loads(latest) if isinstance(latest, str) else latest
    return {f"{t}-{p}": o - end[t][p] for t, parts in latest.items() for p, o in parts.items()}


@pytest.mark.slow
def test_min_offsets_per_trigger_holds_small_batches_back(
    spark: Any, broker: RunningBroker, tmp_path: Path
) -> None:
    topic = fresh("minoffsets")
    create(broker, topic, 2)
    produce(broker, topic, [(None, f"a{i}".encode(), None) for i in range(30)])
    stream = stream_of(
        spark,
        broker,
        subscribe=topic,
        startingOffsets="earliest",
        minOffsetsPerTrigger="50",
        maxTriggerDelay="1h",
    )
    # A progress for every trigger, idle ones too (Spark's default: one per 10 s
    # without data), so that the idle triggers can be counted; read as the query starts.
    interval = "spark.sql.streaming.noDataProgressEventInterval"
    spark.conf.set(interval, "0")
    try:
        query = (
            stream.selectExpr("cast(value as string) as value")
            .writeStream.format("memory")
            .queryName("min_offsets")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
    finally:
        spark.conf.unset(interval)
    try:
        rows: dict[int, int] = {}  # batch id -> its rows (Spark keeps the last 100 progresses)

        def batches() -> list[int]:
            for progress in query.recentProgress:
                if progress["numInputRows"]:
                    rows[progress["batchId"]] = progress["numInputRows"]
            return [rows[batch] for batch in sorted(rows)]

        def wait_for(what: str, done: Callable[[], bool]) -> None:
            deadline = time.monotonic() + 60
            while not done():
                assert query.exception() is None
                assert time.monotonic() < deadline, (what, batches())
                time.sleep(0.1)

        def idle_since(mark: str) -> int:
            return sum(
                1 for p in query.recentProgress if not p["numInputRows"] and p["timestamp"] > mark
            )

        # The first trigger is never held back, as in Spark.
        wait_for("a batch", lambda: len(batches()) >= 1)
        produce(broker, topic, [(None, f"b{i}".encode(), None) for i in range(20)])
        # Triggers (every 100 ms) come and go without a batch: 20 is below the minimum.
        mark = query.lastProgress["timestamp"]
        wait_for("10 idle triggers", lambda: idle_since(mark) >= 10)
        assert batches() == [30]
        produce(broker, topic, [(None, f"c{i}".encode(), None) for i in range(40)])
        wait_for("a second batch", lambda: len(batches()) >= 2)
        assert batches() == [30, 60]
    finally:
        query.stop()


def test_the_first_trigger_is_not_held_back_on_a_freshly_booted_machine(
    broker: RunningBroker,
) -> None:
    """minOffsetsPerTrigger's delay runs from the last micro-batch; the first is
    never delayed, whatever the clock reads (a monotonic clock starts near 0 at
    boot, so "the last batch ran at 0" held the first back for maxTriggerDelay)."""
    from trafka.spark.options import parse_read_options
    from trafka.spark.source import SCHEMA, _StreamReader

    topic = fresh("boot")
    create(broker, topic, 1)
    produce(broker, topic, [(None, f"a{i}".encode(), None) for i in range(30)])
    options = {
        "kafka.bootstrap.servers": broker.bootstrap_servers,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "minOffsetsPerTrigger": "50",
        "maxTriggerDelay": "1h",
    }
    clock = [42.0]  # seconds since the machine booted
    stream = _StreamReader(
        parse_read_options(options, streaming=True), SCHEMA, clock=lambda: clock[0]
    )
    try:
        limit = stream.getDefaultReadLimit()
        start = stream.initialOffset()
        assert start == {topic: {"0": 0}}
        first = stream.latestOffset(start, limit)
        assert first == {topic: {"0": 30}}  # 30 < 50, and yet it runs
        produce(broker, topic, [(None, f"b{i}".encode(), None) for i in range(20)])
        clock[0] += 60
        assert stream.latestOffset(first, limit) == first  # 20 < 50 within the delay
        clock[0] += 3600
        assert stream.latestOffset(first, limit) == {topic: {"0": 50}}  # the delay is over
        produce(broker, topic, [(None, f"c{i}".encode(), None) for i in range(10)])
        assert stream.latestOffset({topic: {"0": 50}}, limit) == {topic: {"0": 50}}
    finally:
        stream.stop()


@pytest.mark.slow
def test_stream_from_topic_to_topic(spark: Any, broker: RunningBroker, tmp_path: Path) -> None:
    source, sink = fresh("src"), fresh("dst")
    create(broker, source, 2)
    create(broker, sink, 2)
    produce(broker, source, [(f"{i % 5}".encode(), f"{i}".encode(), None) for i in range(200)])
    stream = stream_of(spark, broker, subscribe=source, startingOffsets="earliest")
    # A transformation on the way. Not upper(): Spark's first case mapping in a
    # JVM sets up ICU's tables, 2.1 s of CPU (2.7 s, and 3 to 8 s of this test on
    # a loaded two-core machine) that no other test of the session needs; and the
    # values are digits.
    query = (
        stream.selectExpr("key", "cast(value as string) || '!' as value")
        .writeStream.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    records = consume_all(broker, sink, 2)
    assert sorted(int(r.value[:-1]) for r in records) == list(range(200))
    assert all(r.value.endswith(b"!") for r in records)
    assert all(r.partition == murmur2(r.key) % 2 for r in records)


def test_a_compacted_topic_reads_as_its_latest_values(spark: Any, tmp_path: Path) -> None:
    """Gaps that compaction leaves, and a producer's emptied last batch, are read
    past: Spark sees each key's latest value below the clean offset, all the rest
    after it, at the offsets the producers were given."""
    from compaction_helpers import compacted, wait_compacted

    from trafka.brokerlite import broker_in_thread
    from trafka.sdk import NewTopic

    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=tmp_path / "data", log_cleaner_backoff_ms=50
    ) as broker:
        topic = fresh("compact")

        async def setup() -> None:
            async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
                configs = {
                    "cleanup.policy": "compact",
                    "segment.bytes": "4096",
                    "min.cleanable.dirty.ratio": "0.01",
                }
                await admin.create_topics([NewTopic(topic, 1, configs=configs)])

        run(setup)
        # A producer whose only record a later one supersedes: its batch stays, empty.
        first = produce(broker, topic, [(b"lone", b"first", None)])
        sent = [(b"lone", b"second", None)]
        sent += [(f"k{i % 15}".encode(), f"v{i}".encode(), None) for i in range(400)]
        metas = first + produce(broker, topic, sent, batch_size=1024)
        rows = [
            (m.offset, k, v)
            for m, (k, v, _) in zip(metas, [(b"lone", b"first", None), *sent], strict=True)
        ]
        expected = compacted(rows, wait_compacted(broker, topic))
        assert (0, b"lone", b"first") not in expected and len(expected) < len(rows) - 100
        got = reader(spark, broker, subscribe=topic).load().orderBy("offset").collect()
        assert [(r.offset, r.key, r.value) for r in got] == expected
