"""A Spark driver for tests/spark/test_spark_standalone.py: against a standalone
master, reads a topic through ``trafka`` and writes it to another, then prints
what it saw as JSON.

Usage: ``python standalone_driver.py MASTER SERVERS SOURCE SINK``.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    master, servers, source, sink = sys.argv[1:5]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from spark_helpers import TEST_JVM_OPTIONS

    from trafka.spark import register

    spark = (
        SparkSession.builder.master(master)
        .appName("trafka-standalone")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.executor.memory", "512m")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", TEST_JVM_OPTIONS)
        .config("spark.executor.extraJavaOptions", TEST_JVM_OPTIONS)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    df = (
        spark.read.format("trafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", source)
        .load()
    )
    rows = df.selectExpr("partition", "offset", "cast(value as string) as value").collect()
    (
        df.selectExpr("key", "value")
        .write.format("trafka")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", sink)
        .mode("append")
        .save()
    )
    # The block managers Spark knows: the driver's and one per executor.
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print(
        json.dumps(
            {"rows": [[r.partition, r.offset, r.value] for r in rows], "executors": executors}
        ),
        flush=True,
    )
    spark.stop()


if __name__ == "__main__":
    main()
