"""A Spark driver for tests/spark/test_spark_standalone.py, against a standalone
master. Two jobs at once, in one driver (a driver's start, and its executors',
is most of what such a test costs):

* a batch read of SOURCE through ``trafka``, written to SINK; what it read is
  printed as JSON (with how many executors the driver had);
* an exactly-once stream from EOS_SOURCE into EOS_SINK whose task fails once
  after writing: a standalone cluster retries a failed task
  (``spark.task.maxFailures``, 4), which the tests' ``local[2]`` session never
  does. The task of partition 0 in micro-batch 1 writes its rows, records its
  transaction (``NOTES/zombie.json``) and fails; Spark runs it again, and the
  new attempt's InitProducerId on the same transactional id fences the first.

Usage: ``python standalone_driver.py MASTER SERVERS SOURCE SINK EOS_SOURCE
EOS_SINK CHECKPOINT NOTES``; exits 0 once both are done, the stream having
read everything.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def main() -> None:
    master, servers, source_topic, sink, eos_source, eos_sink, checkpoint, notes = sys.argv[1:9]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark import TaskContext
    from pyspark.sql import SparkSession
    from spark_helpers import TEST_JVM_OPTIONS, exactly_once_stream

    from trafka.spark import register, source
    from trafka.spark.source import KafkaDataSource

    class FailsOnceAfterWriting(source._ExactlyOnceStreamWriter):
        def write(self, iterator: Iterator[Any]) -> Any:
            message = super().write(iterator)
            ctx = TaskContext.get()
            assert ctx is not None
            batch = ctx.getLocalProperty("streaming.sql.batchId")
            if (batch, ctx.partitionId(), ctx.attemptNumber()) == ("1", 0, 0):
                zombie = {"transaction": message.transaction.to_json(), "records": message.records}
                Path(notes, "zombie.json").write_text(json.dumps(zombie))
                raise RuntimeError("injected: the task fails after writing its rows")
            return message

    class Flaky(KafkaDataSource):
        short_name = "trafka_flaky"

        def streamWriter(self, schema: Any, overwrite: bool) -> Any:
            made = super().streamWriter(schema, overwrite)
            flaky = FailsOnceAfterWriting.__new__(FailsOnceAfterWriting)
            flaky.__dict__.update(made.__dict__)
            return flaky

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
    spark.dataSource.register(Flaky)
    query = exactly_once_stream(
        spark, "trafka_flaky", servers, eos_source, eos_sink, checkpoint, "value"
    )
    df = (
        spark.read.format("trafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", source_topic)
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
    query.awaitTermination()  # raises the stream's error, if it failed
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
