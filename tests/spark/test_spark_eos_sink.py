"""The exactly-once sink (``deliveryGuarantee=exactly-once``) in a local Spark
against an in-process brokerlite, read back by ``read_committed`` consumers
(KIP-98): a batch write, a failed one, a stream whose micro-batch fails and is
run again, and a driver that dies in the middle of a commit, before it and
after it. Faults are injected by subclasses of the sink's writers, registered
as data sources of their own. A failed task that Spark retries, its zombie
fenced by the retry, needs a Spark that retries tasks, which ``local[2]``
never does: tests/spark/test_spark_standalone.py runs it on a standalone
cluster."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pyspark import cloudpickle
from pyspark.errors import StreamingQueryException
from pyspark.sql.datasource import DataSourceStreamWriter
from spark_helpers import committed, create, everything, fresh, produce, run, stream_of
from unique_names import names as _names

from trafka.brokerlite import RunningBroker
from trafka.sdk import TopicPartition, open_admin
from trafka.spark import _eos, source
from trafka.spark.options import parse_write_options
from trafka.spark.source import KafkaDataSource

pytestmark = pytest.mark.timeout(300)

# The faulty writers below run in Spark's Python workers, which cannot import
# this module: pickle its classes and functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def open_transactions(broker: RunningBroker, prefix: str) -> list[str]:
    """The transactional ids of ``prefix`` with a transaction open."""

    async def go() -> list[str]:
        with anyio.fail_after(30):
            async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
                listed = await admin.list_transactions(states=["Ongoing"])
        return sorted(t.transactional_id for t in listed if t.transactional_id.startswith(prefix))

    result: list[str] = run(go)
    return result


def faulty(spark: Any, writer: type, **attributes: Any) -> str:
    """Register the sink with ``writer`` (a subclass of one of its writers, with
    ``attributes``) in place of its own; returns the format name."""
    name = f"trafka_faulty_{next(_names)}"

    def swap(made: Any) -> Any:
        broken = writer.__new__(writer)
        broken.__dict__.update(made.__dict__, **attributes)
        return broken

    def batch(self: Any, schema: Any, overwrite: bool) -> Any:
        return swap(KafkaDataSource.writer(self, schema, overwrite))

    def stream(self: Any, schema: Any, overwrite: bool) -> Any:
        notes = attributes.get("notes")
        if notes is not None and Path(notes, "dead").exists():
            return Dead()  # Spark's abort after the "death": nothing of the sink runs
        return swap(KafkaDataSource.streamWriter(self, schema, overwrite))

    cls = type(
        "FaultyKafka",
        (KafkaDataSource,),
        {"short_name": name, "writer": batch, "streamWriter": stream},
    )
    spark.dataSource.register(cls)
    return name


def _task() -> tuple[int, int, int]:
    """(batch id or -1, partition, attempt) of the running Spark task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return int(batch) if batch is not None else -1, ctx.partitionId(), ctx.attemptNumber()


class DiesAfterWriting(source._ExactlyOnceWriter):
    """A batch write whose task of partition 1 fails once its rows are written
    (its transaction prepared), and once partition 0's task has written its own
    (so that its message reaches the driver's abort)."""

    notes = ""

    def write(self, iterator: Iterator[Any]) -> Any:
        message = super().write(iterator)
        partition = _task()[1]
        Path(self.notes, f"written-{partition}").touch()
        if partition == 1:
            deadline = time.monotonic() + 60
            while not Path(self.notes, "written-0").exists():
                assert time.monotonic() < deadline, "partition 0's task never wrote"
                time.sleep(0.05)
            raise RuntimeError("injected: the task fails after writing its rows")
        return message


class StreamTaskDiesAfterWriting(source._ExactlyOnceStreamWriter):
    """Micro-batch ``batch``'s task of partition 0 fails once its rows are written."""

    batch = 1

    def write(self, iterator: Iterator[Any]) -> Any:
        message = super().write(iterator)
        if _task()[:2] == (self.batch, 0):
            raise RuntimeError("injected: the task fails after writing its rows")
        return message


class Dead(DataSourceStreamWriter):
    """The sink of a driver that died: Spark's abort that follows does nothing."""

    def write(self, iterator: Iterator[Any]) -> Any:
        raise AssertionError("no task runs after the driver died")

    def commit(self, messages: list[Any], batchId: int) -> None:
        raise AssertionError("no commit runs after the driver died")

    def abort(self, messages: list[Any], batchId: int) -> None:
        pass


class DriverDiesInCommit(source._ExactlyOnceStreamWriter):
    """The driver of micro-batch ``batch`` "dies" in its commit: after recording
    the decision and committing ``committed`` of the transactions, or (with
    ``committed`` None) before deciding anything. Nothing of the sink runs after
    that (:class:`Dead`, once the file ``dead`` is in ``notes``), as after a
    driver killed with SIGKILL."""

    batch = 1
    committed: int | None = 1
    notes = ""

    def commit(self, messages: list[Any], batchId: int) -> None:
        if batchId != self.batch:
            super().commit(messages, batchId)
            return
        txns = source._transactions(messages)
        if self.committed is not None:
            self._log().write(_eos.Decision(batchId, False, "dying run", tuple(txns)))
            _eos._commit_all(self.opts, txns[: self.committed], "part of the batch")
        Path(self.notes, "dead").touch()
        raise RuntimeError("injected: the driver dies in the commit")


def test_a_batch_write_commits_every_row_once(spark: Any, broker: RunningBroker) -> None:
    topic = fresh("eos-batch")
    create(broker, topic, 3)
    rows = [(f"k{i}", f"v{i}") for i in range(300)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(4)
    (
        df.write.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", topic)
        .option("deliveryGuarantee", "exactly-once")
        .option("transactionalIdPrefix", prefix := fresh("batch-txn"))
        .mode("append")
        .save()
    )
    assert committed(broker, topic, 3) == sorted(v.encode() for _, v in rows)
    assert everything(broker, topic, 3) == committed(broker, topic, 3)
    assert open_transactions(broker, prefix) == []

    async def ends() -> int:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            found = await admin.list_offsets({TopicPartition(topic, p): "latest" for p in range(3)})
        return sum(o[0] for o in found.values() if o is not None)

    # Each (task, partition) transaction ended with a commit marker, which takes an offset.
    assert run(ends) > 300


def test_a_failed_batch_write_commits_nothing(
    spark: Any, broker: RunningBroker, tmp_path: Path
) -> None:
    topic = fresh("eos-batch-fails")
    create(broker, topic, 2)
    rows = [(f"v{i}",) for i in range(100)]
    name = faulty(spark, DiesAfterWriting, notes=str(tmp_path))
    prefix = fresh("failing-txn")
    with pytest.raises(Exception, match="injected: the task fails after writing"):
        (
            spark.createDataFrame(rows, "value string")
            .repartition(2)
            .write.format(name)
            .option("kafka.bootstrap.servers", broker.bootstrap_servers)
            .option("topic", topic)
            .option("deliveryGuarantee", "exactly-once")
            .option("transactionalIdPrefix", prefix)
            .mode("append")
            .save()
        )
    # The rows were written (read_uncommitted sees them) and none was committed:
    # the driver aborted the transaction of the task that reported, and the one
    # the failed task left open.
    assert everything(broker, topic, 2) == sorted(v.encode() for (v,) in rows)
    assert committed(broker, topic, 2) == []
    assert open_transactions(broker, prefix) == []


def _stream(broker: RunningBroker, tmp_path: Path) -> tuple[str, list[bytes], str, Path]:
    """A source topic of 200 keyed records (over 2 partitions), their values
    sorted, an empty sink topic of 2 partitions and a checkpoint location."""
    topic = fresh("eos-src")
    create(broker, topic, 2)
    values = [f"v{i}".encode() for i in range(200)]
    produce(broker, topic, [(b"k%d" % i, v, None) for i, v in enumerate(values)])
    sink = fresh("eos-sink")
    create(broker, sink, 2)
    return topic, sorted(values), sink, tmp_path / "checkpoint"


def _sink_query(
    spark: Any,
    broker: RunningBroker,
    source_topic: str,
    sink: str,
    checkpoint: Path,
    fmt: str = "trafka",
    partitions: int | None = None,
) -> Any:
    """A stream from ``source_topic`` into ``sink`` through ``fmt`` (in micro-batches
    of 60 records, ``Trigger.AvailableNow``, one task and so one transaction per
    source partition), run to its end or its failure."""
    stream = stream_of(
        spark,
        broker,
        subscribe=source_topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="60",
        mergeOffsetRanges="false",
    ).selectExpr("value")
    if partitions is not None:
        stream = stream.repartition(partitions)
    query = (
        stream.writeStream.format(fmt)
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(StreamingQueryException):  # query.exception() tells
        query.awaitTermination(180)
    assert not query.isActive, "the stream did not end within 180 s"
    return query


@pytest.mark.slow
def test_a_stream_whose_micro_batch_fails_and_runs_again_writes_nothing_twice(
    spark: Any, broker: RunningBroker, tmp_path: Path
) -> None:
    source_topic, values, sink, checkpoint = _stream(broker, tmp_path)

    broken = faulty(spark, StreamTaskDiesAfterWriting)
    first = _sink_query(spark, broker, source_topic, sink, checkpoint, broken)
    assert "injected: the task fails after writing" in str(first.exception())
    # Batch 0 committed; batch 1 written (by the failed task at least: the other
    # may be cancelled first), none of it committed.
    assert len(committed(broker, sink, 2)) == 60
    first_try = len(everything(broker, sink, 2)) - 60
    assert first_try > 0

    again = _sink_query(spark, broker, source_topic, sink, checkpoint)
    assert again.exception() is None
    assert committed(broker, sink, 2) == values
    assert len(everything(broker, sink, 2)) == 200 + first_try  # the first try stays aborted
    assert open_transactions(broker, _eos.default_prefix(str(checkpoint))) == []


@pytest.mark.slow
def test_a_driver_that_dies_mid_commit_is_finished_on_restart(
    spark: Any, broker: RunningBroker, tmp_path: Path
) -> None:
    source_topic, values, sink, checkpoint = _stream(broker, tmp_path)
    commit_log = _eos.CommitLog(str(checkpoint))

    broken = faulty(spark, DriverDiesInCommit, committed=1, notes=str(tmp_path))
    first = _sink_query(spark, broker, source_topic, sink, checkpoint, broken)
    assert "injected: the driver dies in the commit" in str(first.exception())
    decided = commit_log.read(1)
    assert decided is not None and not decided.committed
    (_kept, left) = decided.transactions
    # One task's transaction of batch 1 is committed, the other still open.
    assert open_transactions(broker, _eos.default_prefix(str(checkpoint))) == [
        left.transactional_id
    ]

    # The restart finishes batch 1 before its tasks run again, and drops what
    # they write again: batch 1 is in Kafka once.
    again = _sink_query(spark, broker, source_topic, sink, checkpoint)
    assert again.exception() is None
    assert committed(broker, sink, 2) == values
    assert len(everything(broker, sink, 2)) == 260
    finished = commit_log.read(1)
    assert finished is not None and finished.committed
    assert finished.transactions == decided.transactions
    assert open_transactions(broker, _eos.default_prefix(str(checkpoint))) == []
    # The commit log keeps the last decisions, each recorded committed.
    latest = commit_log.latest()
    assert latest is not None and latest.batch_id == 3 and latest.committed
    assert json.loads((commit_log.directory / "3.json").read_text())["state"] == "committed"


@pytest.mark.slow
def test_a_driver_that_dies_before_deciding_leaves_nothing_open(
    spark: Any, broker: RunningBroker, tmp_path: Path
) -> None:
    source_topic, values, sink, checkpoint = _stream(broker, tmp_path)
    prefix = _eos.default_prefix(str(checkpoint))

    # Four write tasks, whose driver dies before its commit decides (and aborts nothing).
    broken = faulty(spark, DriverDiesInCommit, committed=None, notes=str(tmp_path))
    first = _sink_query(spark, broker, source_topic, sink, checkpoint, broken, partitions=4)
    assert "injected: the driver dies in the commit" in str(first.exception())
    assert _eos.CommitLog(str(checkpoint)).read(1) is None
    assert open_transactions(broker, prefix) == [f"{prefix}-{p}" for p in range(4)]

    # Run again with two tasks: they fence ids 0 and 1 themselves; the first
    # commit of the run aborts what ids 2 and 3 left open.
    again = _sink_query(spark, broker, source_topic, sink, checkpoint, partitions=2)
    assert again.exception() is None
    assert open_transactions(broker, prefix) == []
    assert committed(broker, sink, 2) == values
    assert len(everything(broker, sink, 2)) == 260


def test_a_batch_whose_transaction_kafka_ended_is_not_decided(
    broker: RunningBroker, tmp_path: Path
) -> None:
    """The driver's commit, without Spark: a transaction that Kafka no longer
    holds open (here fenced by a newer producer of its id, as the coordinator's
    transaction.timeout.ms does) stops the micro-batch before any decision, so
    nothing of it is committed and Spark can run it again."""
    topic = fresh("eos-undecided")
    create(broker, topic, 2)
    opts = parse_write_options(
        {
            "kafka.bootstrap.servers": broker.bootstrap_servers,
            "topic": topic,
            "deliveryGuarantee": "exactly-once",
        }
    )
    prefix = fresh("undecided")
    rows = [{"value": [b"a", b"b"]}]
    fine, _ = _eos.write_transaction(opts, _eos.transactional_id(prefix, 0), rows)
    stale, _ = _eos.write_transaction(opts, _eos.transactional_id(prefix, 1), rows)
    again, _ = _eos.write_transaction(opts, _eos.transactional_id(prefix, 1), [{"value": [b"c"]}])
    assert again.producer_epoch > stale.producer_epoch
    commit_log = _eos.CommitLog(str(tmp_path / "checkpoint"))
    with pytest.raises(_eos.SinkCommitError, match=f"{prefix}-1.*runs again"):
        _eos.commit_stream(opts, commit_log, prefix, 0, [fine, stale], "run")
    assert commit_log.read(0) is None
    assert committed(broker, topic, 2) == []
    assert open_transactions(broker, prefix) == []
    assert everything(broker, topic, 2) == [b"a", b"a", b"b", b"b", b"c"]
