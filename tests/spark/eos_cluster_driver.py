"""A Spark driver for tests/spark/test_spark_eos_cluster.py: exactly-once
streams (``Trigger.AvailableNow``, 60 records a micro-batch), each from a
SOURCE to a SINK, which can stop at a gate the test controls, so that the test
kills something (an executor, this driver, a broker) at a known point of
micro-batch 1. One driver runs several streams at once, each with a gate of
its own: a driver's start (its JVM, and in ``local-cluster`` mode its
executors') is most of what such a test costs.

GATE is one of:

* ``none``: no gate;
* ``task``: the first attempt of micro-batch 1's task of partition 0 stops once
  it has sent its rows in its transaction (open), before it flushes;
* ``commit``: the driver's commit of micro-batch 1 stops before it starts
  (every task of the batch has written and reported);
* ``midcommit``: the driver's commit of micro-batch 1 stops after its first
  EndTxn(commit) has been answered, before any other goes out (the decision
  is recorded ``committing`` in the sink's commit log).

At the gate the process that reached it writes ``NOTES/gate.json`` (its pid,
its parent's, the transactional ids it is about) and waits for the file
``NOTES/open``. Usage: ``python eos_cluster_driver.py MASTER SERVERS STREAM...``,
each STREAM ``SOURCE,SINK,CHECKPOINT,NOTES,GATE``; a stream that ends writes
``NOTES/ended.json`` (its error, or null), and the driver exits 0 once every
stream read everything. The tests that need no driver of their own start the
same stream in their Spark (:func:`start_stream`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

# How long a gate waits for the test before it fails the task or the commit
# (the test may first wait for the driver's other streams to reach theirs).
GATE_S = 480


def wait_at_gate(notes: str, **what: Any) -> None:
    """Stop here until the test opens the gate (once: a later arrival passes)."""
    try:
        os.close(os.open(Path(notes, "gated"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    Path(notes, "gate.tmp").write_text(
        json.dumps({"pid": os.getpid(), "ppid": os.getppid(), **what})
    )
    os.replace(Path(notes, "gate.tmp"), Path(notes, "gate.json"))
    deadline = time.monotonic() + GATE_S
    while not Path(notes, "open").exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the test never opened the gate")
        time.sleep(0.05)


def stop_after_first_end(notes: str, tids: list[str]) -> Any:
    """Make the sink's EndTxn(commit)s (run concurrently) stop at the gate once
    the first is answered, the others held back until then; returns what undoes it."""
    from trafka.spark import _eos

    real = _eos.end_transaction
    first: list[str] = []

    async def end_transaction(admin: Any, txn: Any, *, commit: bool) -> None:
        if not commit:
            await real(admin, txn, commit=commit)
            return
        if first:
            # Held until the gate opens (which a test that kills this process never does).
            while not Path(notes, "open").exists():
                await anyio.sleep(0.05)
            await real(admin, txn, commit=commit)
            return
        first.append(txn.transactional_id)
        await real(admin, txn, commit=commit)
        # Blocks this process's loop: no other EndTxn goes out from here on.
        wait_at_gate(notes, transactional_ids=tids, committed=txn.transactional_id)

    _eos.end_transaction = end_transaction

    def undo() -> None:
        _eos.end_transaction = real

    return undo


def gated_source(gate: str, notes: str) -> Any:
    """The sink's data source with ``gate`` (see the module's docstring), under
    a short name of its own (its ``short_name``)."""
    from pyspark import TaskContext

    from trafka.spark import source
    from trafka.spark.source import KafkaDataSource

    def stage() -> tuple[str | None, int, int]:
        ctx = TaskContext.get()
        assert ctx is not None
        return ctx.getLocalProperty("streaming.sql.batchId"), ctx.partitionId(), ctx.attemptNumber()

    class Gated(source._ExactlyOnceStreamWriter):
        def write(self, iterator: Iterator[Any]) -> Any:
            if gate == "task" and stage() == ("1", 0, 0):
                iterator = self._gated(iterator)
            return super().write(iterator)

        def _gated(self, iterator: Iterator[Any]) -> Iterator[Any]:
            # The rows are sent (not flushed) when the writer asks for more.
            yield from iterator
            wait_at_gate(notes, transactional_id=f"{self.prefix}-0")

        def commit(self, messages: list[Any], batchId: int) -> None:
            tids = sorted(t.transactional_id for t in source._transactions(messages))
            if gate == "commit" and batchId == 1:
                wait_at_gate(notes, transactional_ids=tids)
            if gate == "midcommit" and batchId == 1:
                undo = stop_after_first_end(notes, tids)
                try:
                    super().commit(messages, batchId)
                finally:
                    undo()
                return
            super().commit(messages, batchId)

    class GatedKafka(KafkaDataSource):
        short_name = f"trafka_gated_{uuid.uuid4().hex[:8]}"

        def streamWriter(self, schema: Any, overwrite: bool) -> Any:
            made = super().streamWriter(schema, overwrite)
            gated = Gated.__new__(Gated)
            gated.__dict__.update(made.__dict__)
            return gated

    return GatedKafka


def start_stream(
    spark: Any, servers: str, source_topic: str, sink: str, checkpoint: str, notes: str, gate: str
) -> Any:
    """The stream (started) from ``source_topic`` into ``sink``, with ``gate``."""
    from spark_helpers import exactly_once_stream

    gated = gated_source(gate, notes)
    spark.dataSource.register(gated)
    return exactly_once_stream(
        spark, gated.short_name, servers, source_topic, sink, checkpoint, "key", "value"
    )


def main() -> None:
    started = time.monotonic()
    master, servers, *streams = sys.argv[1:]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    # PySpark's worker daemon of an executor that dies sends SIGHUP to its
    # whole process group, which in local-cluster mode is this driver's (and
    # the JVMs'): ignored here, and so in every JVM started from here. Python
    # workers restore SIGHUP's default for themselves.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import SparkSession
    from spark_helpers import TEST_JVM_OPTIONS

    from trafka.spark import register

    spark = (
        SparkSession.builder.master(master)
        .appName("trafka-eos-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", TEST_JVM_OPTIONS)
        .config("spark.executor.extraJavaOptions", TEST_JVM_OPTIONS)
        .config("spark.executor.memory", "512m")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(f"Spark started in {time.monotonic() - started:.1f} s", flush=True)
    register(spark)
    specs = [spec.split(",") for spec in streams]
    queries = [start_stream(spark, servers, *spec) for spec in specs]
    failed = False
    for (_, _, _, notes, gate), query in zip(specs, queries, strict=True):
        with contextlib.suppress(StreamingQueryException):  # query.exception() tells
            query.awaitTermination()
        error = query.exception()
        failed = failed or error is not None
        Path(notes, "ended.tmp").write_text(json.dumps(None if error is None else str(error)))
        os.replace(Path(notes, "ended.tmp"), Path(notes, "ended.json"))
        # For whoever reads the test's log: where each micro-batch's time went.
        for progress in query.recentProgress:
            print(json.dumps({"gate": gate, "batch": progress.batchId, "ms": progress.durationMs}))
    spark.stop()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
