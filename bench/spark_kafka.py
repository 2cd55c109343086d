"""trafka's Spark source against Spark's own Kafka connector (issue #60).

The same topic of Apache Kafka 4.x (one KRaft node, its own process, the full
JIT), read in the same local Spark session (``local[2]``) through
``format("trafka")`` and ``format("kafka")`` (Spark's connector, its jars in
``spark.jars``: tests/kafka_peers.py fetches them), in alternating rounds:

* **count**: ``df.count()``;
* **agg**: a count and a sum over every value's length (every row's value
  crosses into Spark).

``--records`` records (default 1,000,000) of ``--size`` bytes (default 100),
keyed, in topics of 4 and 16 partitions (``--partitions``). Each figure is
records per second, the best of ``--rounds`` rounds (default 2) after an
untimed one of each; the ratio is trafka's rate over the connector's, in the
same run. ``--smoke`` runs tiny sizes, one round, the first partition count only, to
check the code works.

What limits the ratio: both sources share the machine's cores with the broker;
the connector reads in the executor's JVM threads, trafka in Spark's Python
workers, whose rows Spark then takes as Arrow batches (see docs/spark.md, "What
it costs"), and trafka plans about one task per core where the connector plans
one per partition.
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
from _kafka import kafka_cluster, kafka_peers  # bench/ is the script's directory

from trafka.sdk import NewTopic, TopicPartition, open_admin, open_producer

FORMATS = ("kafka", "trafka")
CONNECTOR = (
    "spark-sql-kafka-0-10_",
    "spark-token-provider-kafka-0-10_",
    "kafka-clients-",
    "commons-pool2-",
)
QUERIES = {
    "count": lambda df: df.count(),
    "agg": lambda df: df.selectExpr("count(*) as n", "sum(length(value))").collect()[0].n,
}


async def fill(servers: str, topic: str, partitions: int, records: int, size: int) -> None:
    """``records`` keyed records of ``size`` bytes in a new ``topic``, acknowledged."""
    async with open_admin(bootstrap_servers=servers) as admin:
        await admin.create_topics([NewTopic(topic, partitions)])
        # Kafka answers CreateTopics before the partitions are served.
        await admin.list_offsets({TopicPartition(topic, p): "latest" for p in range(partitions)})
    value = b"x" * size
    async with open_producer(bootstrap_servers=servers, linger_ms=20) as producer:
        for i in range(records):
            await producer.send(topic, value, key=b"k%d" % (i % 1000))
        await producer.flush()


def rate(spark: Any, fmt: str, servers: str, topic: str, query: str, records: int) -> float:
    df = (
        spark.read.format(fmt)
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .load()
    )
    start = time.perf_counter()
    n = QUERIES[query](df)
    elapsed = time.perf_counter() - start
    if n != records:
        raise SystemExit(f"{fmt} {query} of {topic} read {n} records, not {records}")
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", default="4,16", help="comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round")
    args = parser.parse_args()
    if args.smoke:
        args.records, args.rounds = 2_000, 1
    counts = [int(p) for p in args.partitions.split(",")]
    if args.smoke:
        counts = counts[:1]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from trafka.spark import register

    peers = kafka_peers()
    jars = peers.jars("spark-kafka", peers.SPARK_KAFKA)
    connector = [str(j) for j in jars if j.name.startswith(CONNECTOR)]
    with (
        tempfile.TemporaryDirectory() as data,
        kafka_cluster(Path(data) / "kafka", jit=not args.smoke) as kafka,
    ):
        servers = kafka.bootstrap_servers
        for p in counts:
            anyio.run(fill, servers, f"bench-{p}", p, args.records, args.size, backend="trio")
        builder = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.jars", ",".join(connector))
        )
        if args.smoke:
            builder = builder.config(
                "spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
            )
        spark: Any = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        best: dict[tuple[int, str, str], float] = {}
        try:
            for p in counts:
                topic = f"bench-{p}"
                for r in range(args.rounds + (0 if args.smoke else 1)):
                    for query in QUERIES:
                        for fmt in FORMATS if r % 2 == 0 else FORMATS[::-1]:
                            got = rate(spark, fmt, servers, topic, query, args.records)
                            if args.smoke or r > 0:  # the first round warms up
                                key = (p, query, fmt)
                                best[key] = max(best.get(key, 0.0), got)
        finally:
            spark.stop()
    print(
        f"Spark local[2], {args.records:,} records of {args.size} B on Apache Kafka {kafka_peers().KAFKA_4}; "
        f"records/s, best of {args.rounds}"
    )
    print(f"{'query':<6} {'partitions':>10} {'kafka':>12} {'trafka':>12}  trafka / kafka")
    for p in counts:
        for query in QUERIES:
            k, t = best[(p, query, "kafka")], best[(p, query, "trafka")]
            print(f"{query:<6} {p:>10} {k:>12,.0f} {t:>12,.0f}  {t / k:.2f}")


if __name__ == "__main__":
    main()
