"""Spark data source benchmark: Spark reading and writing through ``trafka``,
against trafka's own consumer and producer doing the same work in one process.

The workload: ``--records`` records (default 1,000,000) of ``--size`` bytes
(default 100), keyed, in a topic of ``--partitions`` partitions (default 4), on a
brokerlite in its own process. The write side always uses 4 partitions. Spark runs locally with two cores (``local[2]``);
its start-up is not timed.

* **read**: ``spark.read.format("trafka")...load()`` and an aggregate over every
  value (so that every row crosses from the Python workers into Spark), against
  a trafka consumer assigned all partitions reading to the end.
* **read against the ceiling**: the same query, in ``--rounds`` alternating
  rounds (default 2), over trafka's default plan (small ranges merged into
  about one task per core), over Spark's connector's plan (one task per
  partition's range: ``mergeOffsetRanges=false``), and over the ceiling of any
  Python data source in this Spark: :class:`CeilingSource`, a trivial
  ``pyspark.sql.datasource`` source on the same tasks as trafka's default plan
  (the same rows per task) that yields pre-built pyarrow RecordBatches with
  Kafka's 7-column schema. An untimed round of each comes first (the JVM
  warms up over the first reads); each rate is the best of its rounds; the
  ratios are of rates measured in the same run.
* **Arrow without Spark**: the executor's work on records already fetched, in
  this process: decoding 250,000 records of ``--size`` bytes (runs of 500-record
  batches, in chunks as large as a task reads them) into column buffers, and
  wrapping those as the Arrow batches Spark is handed (``_batch``); CPU
  seconds per 250,000, best of 7.
* **write**: a DataFrame of the same number of rows (``key``, ``value``) saved
  with ``write.format("trafka")``, against a trafka producer sending the same
  records and flushing; and, in ``--rounds`` alternating rounds after an untimed
  one, saved with ``deliveryGuarantee=exactly-once`` (a transaction per task,
  committed by the driver) against the default at-least-once save.
* **stream latency**: a stream (``trigger(processingTime="0 seconds")``) into a
  ``foreachBatch`` sink on the driver while a producer sends a record every
  50 ms for ``--latency-seconds`` (default 10) carrying its send time: p50 and
  p99 of produced -> row in the sink, and where a micro-batch with rows spends
  its time (the medians of Spark's progress ``durationMs``: ``latestOffset`` is
  the driver's offset lookup, ``queryPlanning`` and ``getBatch`` the planning,
  ``addBatch`` the tasks' launch, their reads and the sink, ``walCommit`` and
  ``commitOffsets`` the checkpoint). ``--latency-only`` runs this part alone.
  ``--stream-option KEY=VALUE`` gives the stream's source an option
  (``streamReader=simple``), ``--sink-option KEY=VALUE`` its sink
  (``asyncProgressTrackingEnabled=true``), ``--spark-conf KEY=VALUE`` the session
  a setting; each may be given again.
* **idle triggers** (``--idle-only``, no Spark): an idle stream's driver loop
  as Spark's ``trigger(processingTime="0 seconds")`` runs it (the source's
  ``latestOffset``, then 10 ms, again) for ``--latency-seconds``: the calls
  made, and the CPU seconds of the driver's process and of the broker.
  (That an idle stream opens no connection per micro-batch is a test:
  tests/spark/test_spark_connections.py.)

Figures are records per second and Spark's ratio to the single process. Run:
``python bench/spark.py`` (``--reads-only`` skips the writes and the stream).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from broker import start_broker  # bench/ is the script's directory

from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer

# Rows per batch, at most, as trafka's reads hand them to Spark.
from trafka.spark._kafka import _CHUNK as _CEILING_CHUNK


def ceiling_source() -> type:
    """The trivial Python data source ``ceiling`` (see the module doc).

    Options: ``rows``, a JSON list of each task's row count; ``size``, the
    value size. A task builds one batch of Kafka's columns before it yields
    anything, then yields it (or a slice of it) until its rows are out: what is
    left is Spark's own cost of a Python data source's task and its rows.
    """
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
    from pyspark.sql.pandas.types import to_arrow_schema

    from trafka.spark import SCHEMA

    def prebuilt(rows: int, size: int) -> pa.RecordBatch:
        arrow = to_arrow_schema(SCHEMA, timezone="UTC")
        columns = {
            "key": pa.array([b"k%d" % (i % 1000) for i in range(rows)], pa.binary()),
            "value": pa.array([b"x" * size] * rows, pa.binary()),
            "topic": pa.array(["bench"] * rows, pa.string()),
            "partition": pa.array([0] * rows, pa.int32()),
            "offset": pa.array(range(rows), pa.int64()),
            "timestamp": pa.array([1_700_000_000_000_000] * rows, arrow.field("timestamp").type),
            "timestampType": pa.array([0] * rows, pa.int32()),
        }
        return pa.RecordBatch.from_arrays([columns[f.name] for f in arrow], schema=arrow)

    class CeilingReader(DataSourceReader):
        def __init__(self, rows: list[int], size: int) -> None:
            self.rows = rows
            self.size = size

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(n) for n in self.rows]

        def read(self, partition: Any) -> Any:
            left = partition.value
            batch = prebuilt(min(left, _CEILING_CHUNK), self.size)
            while left > 0:
                yield batch if left >= batch.num_rows else batch.slice(0, left)
                left -= batch.num_rows

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ceiling"

        def schema(self) -> Any:
            return SCHEMA

        def reader(self, schema: Any) -> DataSourceReader:
            return CeilingReader(json.loads(self.options["rows"]), int(self.options["size"]))

    return CeilingSource


def arrow_build(records: int, size: int, repeat: int = 7) -> tuple[float, float]:
    """CPU seconds to decode ``records`` records into column buffers, and to
    wrap them as Arrow batches (see the module doc), each the best of
    ``repeat``: the thread's CPU time, which other work on a shared machine
    disturbs less than the wall clock."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from trafka.codec.columns import decode_batch_run_columns
    from trafka.codec.records import encode_batch
    from trafka.spark import SCHEMA
    from trafka.spark.source import _batch, _Repeated

    arrow = to_arrow_schema(SCHEMA, timezone="UTC")
    value = b"x" * size
    blob = b"".join(
        encode_batch(
            [(1_700_000_000_000 + i, b"k%d" % (i % 1000), value, ()) for i in range(at, at + 500)],
            base_offset=at,
        )
        for at in range(0, records, 500)
    )
    decode, build = [], []
    for _ in range(repeat):
        began = time.thread_time()
        chunks, pos = [], 0
        while pos < len(blob):
            run, pos, _ = decode_batch_run_columns(blob, pos, max_records=_CEILING_CHUNK)
            chunks.append(run)
        decoded = time.thread_time()
        repeated = _Repeated("bench", 0)
        batches = [_batch(chunk, "bench", 0, arrow, repeated) for chunk in chunks]
        decode.append(decoded - began)
        build.append(time.thread_time() - decoded)
        assert sum(b.num_rows for b in batches) == records
    return min(decode), min(build)


def planned_rows(spark: Any, options: dict[str, str]) -> list[int]:
    """The rows of each task of trafka's plan for a read with ``options``, as
    the registered source plans it (the session's default parallelism)."""
    from trafka.spark import SCHEMA, KafkaDataSource

    source = KafkaDataSource(options)
    source.parallelism = spark.sparkContext.defaultParallelism
    return [sum(r.end - r.start for r in p.ranges) for p in source.reader(SCHEMA).partitions()]


def timed_read(df: Any, records: int) -> float:
    """Records per second of a count and an aggregate over every value of ``df``."""
    start = time.perf_counter()
    (row,) = df.selectExpr("count(*) as n", "sum(length(value)) as bytes").collect()
    rate = row.n / (time.perf_counter() - start)
    assert row.n == records, row
    return rate


async def sdk_write(
    servers: str, topic: str, records: int, size: int, partitions: int = 4
) -> float:
    value = b"x" * size
    async with open_admin(bootstrap_servers=servers) as admin:
        await admin.create_topics([NewTopic(topic, partitions)])
    start = time.perf_counter()
    async with open_producer(bootstrap_servers=servers) as producer:
        for i in range(records):
            await producer.send(topic, value, key=b"k%d" % (i % 1000))
        await producer.flush()
    return records / (time.perf_counter() - start)


async def sdk_read(servers: str, topic: str, partitions: int) -> float:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    async with open_consumer(bootstrap_servers=servers, max_poll_records=10_000) as consumer:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        total = sum(ends.values())
        seen = 0
        start = time.perf_counter()
        while seen < total:
            for recs in (await consumer.getmany(timeout_ms=1000)).values():
                seen += len(recs)
        return total / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2, help="alternating read rounds")
    parser.add_argument(
        "--reads-only", action="store_true", help="skip the writes and the stream latency"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a check that the benchmark runs, not a measurement: 2,000 records, one round, "
        "no warm-ups, a 1 s stream and a JVM that starts sooner (C1 only, serial GC), "
        "whatever the other options say (tests/bench/test_bench_smoke.py)",
    )
    parser.add_argument("--latency-only", action="store_true", help="only the stream latency part")
    for flag, what in (
        ("--stream-option", "an option of the latency stream's source"),
        ("--sink-option", "an option of the latency stream's foreachBatch sink"),
        ("--spark-conf", "a setting of the Spark session"),
    ):
        parser.add_argument(
            flag, action="append", default=[], metavar="KEY=VALUE", type=_pair, help=what
        )
    parser.add_argument(
        "--idle-only", action="store_true", help="only an idle stream's triggers, without Spark"
    )
    args = parser.parse_args()
    if args.idle_only:
        idle_triggers(args.latency_seconds)
        return
    if args.smoke:
        args.records, args.latency_seconds, args.rounds = 2_000, 1.0, 1
    per = 2_000 if args.smoke else 250_000
    # A smoke run warms nothing up: the warm-ups run the code the measured rounds
    # run, and it measures nothing.
    warm = not args.smoke
    decode_s, arrow_s = arrow_build(per, args.size)
    print(
        f"Arrow without Spark, {per:,} records of {args.size} B: decode {decode_s:.4f} s, "
        f"build Arrow {arrow_s:.4f} s (CPU, best of 7)"
    )
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from trafka.spark import register

    with tempfile.TemporaryDirectory() as data:
        broker, servers = start_broker(Path(data))
        try:
            builder = (
                SparkSession.builder.master("local[2]")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "2")
                # Every micro-batch's progress, for the latency's breakdown.
                .config("spark.sql.streaming.numRecentProgressUpdates", "10000")
            )
            for key, value in args.spark_conf:
                builder = builder.config(key, value)
            if args.smoke:
                # Not a measurement: a JVM that starts sooner (C1 only, the serial GC).
                builder = builder.config(
                    "spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
                )
            spark: Any = builder.getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            spark.dataSource.register(ceiling_source())
            # Warm up Spark's Python workers on a small topic.
            if warm:
                anyio.run(sdk_write, servers, "warm", 1000, args.size, backend="trio")
                spark.read.format("trafka").option("kafka.bootstrap.servers", servers).option(
                    "subscribe", "warm"
                ).load().count()
            if args.latency_only:
                latencies, phases = stream_latency(
                    spark, servers, args.latency_seconds, args.stream_option, args.sink_option
                )
                spark.stop()
                print_latency(latencies, phases)
                return

            sdk_w = anyio.run(
                sdk_write,
                servers,
                "bench",
                args.records,
                args.size,
                args.partitions,
                backend="trio",
            )
            sdk_r = anyio.run(sdk_read, servers, "bench", args.partitions, backend="trio")

            options = {"kafka.bootstrap.servers": servers, "subscribe": "bench"}
            rows_per_task = planned_rows(spark, options)
            # Each read is built anew for every query, as a job would.
            reads: dict[str, Callable[[], Any]] = {
                "merged": lambda: spark.read.format("trafka").options(**options).load(),
                "per range": lambda: (
                    spark.read.format("trafka").options(**options, mergeOffsetRanges="false").load()
                ),
                "ceiling": lambda: (
                    spark.read.format("ceiling")
                    .option("rows", json.dumps(rows_per_task))
                    .option("size", str(args.size))
                    .load()
                ),
            }
            rates: dict[str, float] = dict.fromkeys(reads, 0.0)
            # An untimed round first: the JVM's code for each source gets warm
            # (a first read of this size ran at a fraction of the later ones).
            for frame in reads.values():
                if warm:
                    timed_read(frame(), args.records)
            for _ in range(args.rounds):
                for name, frame in reads.items():
                    rates[name] = max(rates[name], timed_read(frame(), args.records))
            spark_r = rates["merged"]
            if args.reads_only:
                spark.stop()
                print_reads(args, sdk_r, spark_r, rates, rows_per_task)
                return

            rows = spark.range(args.records).selectExpr(
                "cast(id % 1000 as string) as key", f"repeat('x', {args.size}) as value"
            )
            rows.cache().count()

            def timed_write(frame: Any, guarantee: str, topic: str) -> float:
                began = time.perf_counter()
                frame.write.format("trafka").option("kafka.bootstrap.servers", servers).option(
                    "topic", topic
                ).option("deliveryGuarantee", guarantee).mode("append").save()
                return args.records / (time.perf_counter() - began)

            # Untimed first writes of each kind (the JVM and the workers warm up),
            # then alternating rounds; each rate is the best of its rounds.
            writes = {"at-least-once": 0.0, "exactly-once": 0.0}
            for guarantee in writes:
                if warm:
                    timed_write(rows.limit(1000), guarantee, "bench-warm")
            for _ in range(args.rounds):
                for guarantee in writes:
                    topic = f"bench-{guarantee}"
                    writes[guarantee] = max(writes[guarantee], timed_write(rows, guarantee, topic))
            spark_w, eos_w = writes["at-least-once"], writes["exactly-once"]
            latencies, phases = stream_latency(
                spark, servers, args.latency_seconds, args.stream_option, args.sink_option
            )
            spark.stop()
        finally:
            broker.terminate()
            broker.wait(10)

    print_reads(args, sdk_r, spark_r, rates, rows_per_task)
    print(f"{'write':<8}{sdk_w:>16,.0f}{spark_w:>12,.0f}{spark_w / sdk_w:>8.2f}")
    print(
        f"write through Spark, best of {args.rounds} alternating rounds, records/s: "
        f"exactly-once {eos_w:,.0f}, at-least-once {spark_w:,.0f}"
    )
    print(f"  exactly-once / at-least-once write {eos_w / spark_w:.2f}")
    print_latency(latencies, phases)


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_triggers(seconds: float) -> None:
    """An idle stream's driver loop (see the module doc), on an idle topic of 4 partitions."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from trafka.spark import SCHEMA
    from trafka.spark.options import parse_read_options
    from trafka.spark.source import _StreamReader

    with tempfile.TemporaryDirectory() as data:
        broker, servers = start_broker(Path(data))
        try:

            async def create() -> None:
                async with open_admin(bootstrap_servers=servers) as admin:
                    await admin.create_topics([NewTopic("idle", 4, 1)])

            anyio.run(create, backend="trio")
            options = {"kafka.bootstrap.servers": servers, "subscribe": "idle"}
            reader = _StreamReader(parse_read_options(options, streaming=True), SCHEMA)
            start = reader.initialOffset()
            reader.latestOffset(start, ReadAllAvailable())  # connected, warm
            cpu, broker_cpu = time.process_time(), _cpu_seconds(broker.pid)
            began, calls = time.monotonic(), 0
            while time.monotonic() - began < seconds:
                reader.latestOffset(start, ReadAllAvailable())
                calls += 1
                time.sleep(0.01)  # spark.sql.streaming.pollingDelay
            cpu, broker_cpu = time.process_time() - cpu, _cpu_seconds(broker.pid) - broker_cpu
            reader.stop()
        finally:
            broker.terminate()
            broker.wait(10)
    print(
        f"idle stream, trigger 0, {seconds:.0f} s: {calls} latestOffset calls, "
        f"driver CPU {cpu:.2f} s, broker CPU {broker_cpu:.2f} s"
    )


def print_latency(latencies: list[float], phases: dict[str, list[int]]) -> None:
    ordered = sorted(latencies)
    if ordered:
        p50 = ordered[len(ordered) // 2] * 1000
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
        print(
            f"stream latency (trigger 0, produced -> row in a foreachBatch sink): "
            f"p50 {p50:.0f} ms, p99 {p99:.0f} ms over {len(ordered)} records"
        )
    if phases.get("triggerExecution"):
        batches = len(phases["triggerExecution"])
        medians = ", ".join(
            f"{name} {sorted(ms)[len(ms) // 2]}" for name, ms in phases.items() if ms
        )
        print(f"  a micro-batch with rows, median ms over {batches}: {medians}")


def print_reads(
    args: Any, sdk_r: float, spark_r: float, rates: dict[str, float], rows_per_task: list[int]
) -> None:
    """The read figures: Spark against trafka alone, and against the ceiling."""
    print(
        f"spark: {args.records:,} records of {args.size} B, {args.partitions} partitions, local[2]"
    )
    print(f"{'':<8}{'trafka alone':>16}{'Spark':>12}{'ratio':>8}")
    print(f"{'read':<8}{sdk_r:>16,.0f}{spark_r:>12,.0f}{spark_r / sdk_r:>8.2f}")
    print(
        f"read, best of {args.rounds} alternating rounds, records/s: trafka {rates['merged']:,.0f} "
        f"in {len(rows_per_task)} tasks (ranges merged), {rates['per range']:,.0f} in "
        f"{args.partitions} (one per partition, mergeOffsetRanges=false); ceiling "
        f"(trivial Python source, same tasks) {rates['ceiling']:,.0f}"
    )
    print(f"  trafka / ceiling {rates['merged'] / rates['ceiling']:.2f}")
    print(f"  merged / one task per partition {rates['merged'] / rates['per range']:.2f}")


_PHASES = (
    "triggerExecution",
    "latestOffset",
    "queryPlanning",
    "getBatch",
    "addBatch",
    "walCommit",
    "commitOffsets",
)


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def stream_latency(
    spark: Any,
    servers: str,
    seconds: float,
    source_options: Sequence[tuple[str, str]] = (),
    sink_options: Sequence[tuple[str, str]] = (),
) -> tuple[list[float], dict[str, list[int]]]:
    """Seconds from each record's send to its row reaching the sink, and the
    milliseconds of each phase (Spark's ``durationMs``) of the micro-batches
    that had rows."""
    topic = "latency"

    async def create() -> None:
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(topic, 4, 1)])

    anyio.run(create, backend="trio")
    latencies: list[float] = []

    def sink(batch: Any, _batch_id: int) -> None:
        now = time.time()
        latencies.extend(now - float(row.v) for row in batch.collect())

    reader = (
        spark.readStream.format("trafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "latest")
    )
    for key, value in source_options:
        reader = reader.option(key, value)
    writer = (
        reader.load()
        .selectExpr("cast(value as string) as v")
        .writeStream.trigger(processingTime="0 seconds")
        .foreachBatch(sink)
    )
    for key, value in sink_options:
        writer = writer.option(key, value)
    query = writer.start()
    try:
        while query.lastProgress is None:  # its first (empty) micro-batch has run
            # A stream that died before it waits forever here otherwise (seen once, at
            # a load average of 20: the smoke run slept for an hour).
            if not query.isActive:
                raise RuntimeError(f"the latency stream stopped: {query.exception()}")
            time.sleep(0.1)

        async def produce() -> int:
            sent = 0
            async with open_producer(bootstrap_servers=servers, linger_ms=0) as producer:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    await producer.send_and_wait(topic, b"%.6f" % time.time())
                    sent += 1
                    await anyio.sleep(0.05)
            return sent

        # Counted, not estimated from the interval: the producer also waits for
        # each answer, so fewer go than seconds / 0.05, and waiting for that many
        # rows always ran into the deadline.
        sent = anyio.run(produce, backend="trio")
        deadline = time.monotonic() + 30
        while len(latencies) < sent and time.monotonic() < deadline:
            time.sleep(0.1)
        phases: dict[str, list[int]] = {name: [] for name in _PHASES}
        for progress in query.recentProgress:
            if progress.numInputRows:
                for name in _PHASES:
                    phases[name].append(progress.durationMs.get(name, 0))
    finally:
        query.stop()
    return latencies, phases


if __name__ == "__main__":
    main()
