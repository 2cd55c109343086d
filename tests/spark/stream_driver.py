"""A Spark driver for tests/spark/test_spark_exactly_once.py: a ``trafka``
stream into a parquet file sink, run until it is killed.

Usage: ``python stream_driver.py SERVERS TOPIC OUT CHECKPOINT``.

The test starts the same stream (:func:`start_stream`) in its own Spark too, to
finish the work after the killed drivers.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def start_stream(
    spark: Any, servers: str, topic: str, out: str, checkpoint: str, batch: int = 40
) -> Any:
    """The stream (started): ``topic`` from its earliest offsets, micro-batches
    of ``batch`` records, into parquet files in ``out``."""
    stream = (
        spark.readStream.format("trafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(batch))
        .load()
    )
    return (
        stream.selectExpr("partition", "offset", "cast(value as string) as value")
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def main() -> None:
    servers, topic, out, checkpoint = sys.argv[1:5]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession
    from spark_helpers import TEST_JVM_OPTIONS

    from trafka.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("trafka-exactly-once")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", TEST_JVM_OPTIONS)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    query = start_stream(spark, servers, topic, out, checkpoint)
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
