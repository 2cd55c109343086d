"""Spark data source benchmark: Spark reading and writing through ``trafka``,
against trafka's own consumer and producer doing the same work in one process.

The workload: ``--records`` records (default 1,000,000) of ``--size`` bytes
(default 100), keyed, in a topic of ``--partitions`` partitions (default 4), on a
brokerlite in its own process. The write side always uses 4 partitions. Spark runs locally with two cores (``local[2]``);
its start-up is not timed.

* **read**: ``spark.read.format("trafka")...load()`` and an aggregate over every
  value (so that every row crosses from the Python workers into Spark), against
  a trafka consumer assigned all partitions reading to the end.
* **write**: a DataFrame of the same number of rows (``key``, ``value``) saved
  with ``write.format("trafka")``, against a trafka producer sending the same
  records and flushing.
* **stream latency**: a stream (``trigger(processingTime="0 seconds")``) into a
  ``foreachBatch`` sink on the driver while a producer sends a record every
  50 ms for ``--latency-seconds`` (default 10) carrying its send time: p50 and
  p99 of produced -> row in the sink. (That an idle stream opens no connection
  per micro-batch is a test: tests/spark/test_spark_connections.py.)

Figures are records per second and Spark's ratio to the single process. Run:
``python bench/spark.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from broker import start_broker  # bench/ is the script's directory

from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer


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
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a check that the benchmark runs, not a measurement: 2,000 records, a 1 s "
        "stream and a JVM that starts sooner (C1 only, serial GC), whatever the other "
        "options say (tests/bench/test_bench_smoke.py)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.records, args.latency_seconds = 2_000, 1.0
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
            )
            if args.smoke:
                # Not a measurement: a JVM that starts sooner (C1 only, the serial GC).
                builder = builder.config(
                    "spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
                )
            spark: Any = builder.getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            # Warm up Spark's Python workers on a small topic.
            anyio.run(sdk_write, servers, "warm", 1000, args.size, backend="trio")
            spark.read.format("trafka").option("kafka.bootstrap.servers", servers).option(
                "subscribe", "warm"
            ).load().count()

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

            df = (
                spark.read.format("trafka")
                .option("kafka.bootstrap.servers", servers)
                .option("subscribe", "bench")
                .load()
            )
            start = time.perf_counter()
            (row,) = df.selectExpr("count(*) as n", "sum(length(value)) as bytes").collect()
            spark_r = row.n / (time.perf_counter() - start)
            assert row.n == args.records, row

            rows = spark.range(args.records).selectExpr(
                "cast(id % 1000 as string) as key", f"repeat('x', {args.size}) as value"
            )
            rows.cache().count()
            start = time.perf_counter()
            rows.write.format("trafka").option("kafka.bootstrap.servers", servers).option(
                "topic", "bench-out"
            ).mode("append").save()
            spark_w = args.records / (time.perf_counter() - start)
            latencies = stream_latency(spark, servers, args.latency_seconds)
            spark.stop()
        finally:
            broker.terminate()
            broker.wait(10)

    print(
        f"spark: {args.records:,} records of {args.size} B, {args.partitions} partitions, local[2]"
    )
    print(f"{'':<8}{'trafka alone':>16}{'Spark':>12}{'ratio':>8}")
    print(f"{'read':<8}{sdk_r:>16,.0f}{spark_r:>12,.0f}{spark_r / sdk_r:>8.2f}")
    print(f"{'write':<8}{sdk_w:>16,.0f}{spark_w:>12,.0f}{spark_w / sdk_w:>8.2f}")
    ordered = sorted(latencies)
    if ordered:
        p50 = ordered[len(ordered) // 2] * 1000
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
        print(
            f"stream latency (trigger 0, produced -> row in a foreachBatch sink): "
            f"p50 {p50:.0f} ms, p99 {p99:.0f} ms over {len(ordered)} records"
        )


def stream_latency(spark: Any, servers: str, seconds: float) -> list[float]:
    """Seconds from each record's send to its row reaching the sink."""
    topic = "latency"

    async def create() -> None:
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(topic, 4, 1)])

    anyio.run(create, backend="trio")
    latencies: list[float] = []

    def sink(batch: Any, _batch_id: int) -> None:
        now = time.time()
        latencies.extend(now - float(row.v) for row in batch.collect())

    query = (
        spark.readStream.format("trafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "latest")
        .load()
        .selectExpr("cast(value as string) as v")
        .writeStream.trigger(processingTime="0 seconds")
        .foreachBatch(sink)
        .start()
    )
    try:
        while query.lastProgress is None:  # its first (empty) micro-batch has run
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
    finally:
        query.stop()
    return latencies


if __name__ == "__main__":
    main()
