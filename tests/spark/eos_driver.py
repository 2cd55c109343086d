"""A Spark driver for tests/spark/test_spark_eos_sink.py: an exactly-once stream
whose task fails once after writing, in a Spark that retries failed tasks
(``local[2,2]``: two cores, a task tried twice; ``local[2]``, the shared test
session's, tries a task once).

The task of partition 0 in micro-batch 1 writes its rows, records its
transaction (``NOTES/zombie.json``) and fails; Spark runs it again, and the new
attempt's InitProducerId on the same transactional id fences the first.

Usage: ``python eos_driver.py SERVERS SOURCE SINK CHECKPOINT NOTES``; exits 0
once the stream read everything.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def main() -> None:
    servers, source_topic, sink, checkpoint, notes = sys.argv[1:6]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
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
        SparkSession.builder.master("local[2,2]")
        .appName("trafka-eos-task-retry")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", TEST_JVM_OPTIONS)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(Flaky)
    query = exactly_once_stream(
        spark, "trafka_flaky", servers, source_topic, sink, checkpoint, "value"
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
