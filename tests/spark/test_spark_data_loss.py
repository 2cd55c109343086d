"""Records gone before a read reached them, on Apache Kafka 4, through
``format("trafka")`` and Spark's own connector (``format("kafka")``) side by
side: the same failure at the same moment with ``failOnDataLoss=true`` (the
default), the same rows with ``false``.

What the connector does is its guide's ("failOnDataLoss: whether to fail the
query when it's possible that data is lost (e.g., topics are deleted, or
offsets are out of range)") and its KafkaMicroBatchStream's planning: a
partition new to a stream that does not start at offset 0, a partition that is
gone, and one whose end went back before the stream's position fail the
micro-batch as it is planned, before any task; records deleted from a range
already planned fail the task that reads it. docs/spark.md ("When records are
gone" and the parity table) says the same of trafka.

Each case streams with ``Trigger.AvailableNow`` from a checkpoint: a first run
reads what the topic holds, the records then go (DeleteRecords through the
SDK's admin client, a topic deleted and created again), and a second run from
the same checkpoint meets the loss; the second run of ``failOnDataLoss=false``
starts from a copy of the first run's checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from kafka_peers import KafkaCluster
from spark_helpers import run
from test_spark_kafka_parity import (
    FORMATS,
    Failed,
    connector,  # noqa: F401 (the fixture)
    fails_at,
    make_topics,
    moment,
    name,
    reader,
    rows,
    send,
)

from trafka.sdk import NewTopic, TopicPartition, open_admin

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

Rows = list[tuple[Any, ...]]


class StreamRun:
    """A stream of ``options`` (``Trigger.AvailableNow``) from ``checkpoint``,
    started; :meth:`end` waits for it. The two formats' runs start together:
    the session runs them side by side, each waiting on the broker and on
    Spark's planning while the other computes."""

    def __init__(
        self, spark: Any, fmt: str, servers: str, options: dict[str, str], checkpoint: Path
    ) -> None:
        self.fmt = fmt
        self.got: Rows = []

        def sink(frame: Any, batch_id: int) -> None:
            self.got.extend(rows(frame))

        stream = spark.readStream.format(fmt).option("kafka.bootstrap.servers", servers)
        for key, value in options.items():
            stream = stream.option(key, value)
        self.query = (
            stream.load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    def end(self) -> tuple[Rows, Failed]:
        """The rows the run's micro-batches handed the sink, and where it
        failed (:func:`moment`'s words; ``no error``), once it ended."""
        from pyspark.errors import StreamingQueryException

        with contextlib.suppress(StreamingQueryException):  # query.exception() tells
            self.query.awaitTermination(300)
        assert not self.query.isActive, f"the {self.fmt} stream did not end within 300 s"
        error = self.query.exception()
        failed = Failed("no error" if error is None else moment(str(error)))
        failed.text = "" if error is None else str(error)
        return sorted(self.got, key=repr), failed


def admin_call(servers: str, fn: Callable[[Any], Any]) -> Any:
    async def go() -> Any:
        with anyio.fail_after(120):
            async with open_admin(bootstrap_servers=servers) as admin:
                return await fn(admin)

    return run(go)


def recreate(servers: str, topic: str, partitions: int) -> None:
    """Delete ``topic`` and create it again: Kafka refuses the creation
    (TOPIC_ALREADY_EXISTS) until the deletion is done, and the new topic's
    partitions may not answer yet when CreateTopics does."""
    admin_call(servers, lambda admin: admin.delete_topics([topic]))
    deadline = time.monotonic() + 120
    while True:
        try:
            admin_call(servers, lambda admin: admin.create_topics([NewTopic(topic, partitions)]))
            break
        except Exception as exc:  # the SDK's KafkaError, until the deletion is done
            assert "TOPIC_ALREADY_EXISTS" in str(exc).upper(), exc
            assert time.monotonic() < deadline, f"{topic} was not deleted within 120 s"
            time.sleep(0.5)
    tps = {TopicPartition(topic, p): "latest" for p in range(partitions)}
    while True:
        try:
            admin_call(servers, lambda admin: admin.list_offsets(tps))
            return
        except Exception:  # the SDK's KafkaError, until the new partitions are served
            assert time.monotonic() < deadline, f"{topic} was not served within 120 s"
            time.sleep(0.5)


def values(n: int, topic: str, partition: int, tag: str) -> list[Any]:
    return [(topic, partition, None, b"%s%d" % (tag.encode(), i), None, None) for i in range(n)]


def deleted_from_a_new_partition(servers: str) -> tuple[dict[str, str], Callable[[], None]]:
    """A partition added to a subscribed topic, whose first records are
    deleted before the stream's next trigger."""
    topic = name("loss-grown")
    make_topics(servers, NewTopic(topic, 1))
    send(servers, values(5, topic, 0, "a"))

    def lose() -> None:
        admin_call(servers, lambda admin: admin.create_partitions({topic: 2}))
        send(servers, values(4, topic, 1, "b") + values(2, topic, 0, "c"))
        admin_call(servers, lambda admin: admin.delete_records({TopicPartition(topic, 1): 2}))

    return {"subscribe": topic}, lose


def deleted_past_the_checkpoint(servers: str) -> tuple[dict[str, str], Callable[[], None]]:
    """Records after the stream's position, deleted before its next trigger."""
    topic = name("loss-deleted")
    make_topics(servers, NewTopic(topic, 1))
    send(servers, values(5, topic, 0, "a"))

    def lose() -> None:
        send(servers, values(5, topic, 0, "b"))
        admin_call(servers, lambda admin: admin.delete_records({TopicPartition(topic, 0): 8}))

    return {"subscribe": topic}, lose


def recreated(servers: str) -> tuple[dict[str, str], Callable[[], None]]:
    """The topic deleted and created again, with fewer records than the stream read."""
    topic = name("loss-recreated")
    make_topics(servers, NewTopic(topic, 1))
    send(servers, values(5, topic, 0, "a"))

    def lose() -> None:
        recreate(servers, topic, 1)
        send(servers, values(2, topic, 0, "b"))

    return {"subscribe": topic}, lose


def gone_from_the_pattern(servers: str) -> tuple[dict[str, str], Callable[[], None]]:
    """One of the topics a pattern matched, deleted."""
    prefix = name("loss-pattern")
    make_topics(servers, NewTopic(f"{prefix}-a", 1), NewTopic(f"{prefix}-b", 1))
    send(servers, values(3, f"{prefix}-a", 0, "a") + values(3, f"{prefix}-b", 0, "b"))

    def lose() -> None:
        admin_call(servers, lambda admin: admin.delete_topics([f"{prefix}-b"]))
        send(servers, values(2, f"{prefix}-a", 0, "c"))

    return {"subscribePattern": f"{prefix}-.*"}, lose


CASES = {
    "a new partition starts past 0": (deleted_from_a_new_partition, "plan", 2 + 2),
    "records deleted past the position": (deleted_past_the_checkpoint, "task", 2),
    "a topic deleted and created again": (recreated, "plan", 0),
    "a pattern's topic deleted": (gone_from_the_pattern, "plan", 2),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.compat("Spark", "streams: failOnDataLoss as the connector (records gone)")
def test_a_stream_meets_lost_records_as_the_connector_does(
    connector: Any,  # noqa: F811 (the fixture imported above)
    kafka4: KafkaCluster,
    tmp_path: Path,
    case: str,
) -> None:
    """failOnDataLoss=true: both streams fail in the same place (as the
    micro-batch is planned, or in its task), saying how to go on
    (failOnDataLoss); false: both go on and hand the sink the same rows (a new
    partition from its earliest offset, the records left after the deleted ones,
    nothing of a shrunk partition until it passes the stream's position)."""
    make, where, kept = CASES[case]
    servers = kafka4.bootstrap_servers
    options, lose = make(servers)
    options["startingOffsets"] = "earliest"
    runs = {
        fmt: StreamRun(connector, fmt, servers, options, tmp_path / fmt / "strict")
        for fmt in FORMATS
    }
    first: dict[str, Rows] = {}
    for fmt in FORMATS:
        first[fmt], failed = runs[fmt].end()
        assert failed == "no error", failed.text
        shutil.copytree(tmp_path / fmt / "strict", tmp_path / fmt / "lenient")
    assert first["trafka"] == first["kafka"] and first["kafka"]

    lose()
    second: dict[tuple[str, str], tuple[Rows, Failed]] = {}
    # The two of a format one after the other: a checkpoint's copy carries its
    # query's id, and Spark stops the run of an id when another starts.
    for strict in ("true", "false"):
        at = "strict" if strict == "true" else "lenient"
        runs = {
            fmt: StreamRun(
                connector, fmt, servers, {**options, "failOnDataLoss": strict}, tmp_path / fmt / at
            )
            for fmt in FORMATS
        }
        second |= {(fmt, strict): run.end() for fmt, run in runs.items()}
    for fmt in FORMATS:
        got, failed = second[fmt, "true"]
        assert (fmt, failed) == (fmt, where), failed.text
        assert "failOnDataLoss" in failed.text, failed.text[-3000:]
        assert got == []  # planning failed before the sink saw the micro-batch, or its task
        _, lenient = second[fmt, "false"]
        assert lenient == "no error", lenient.text
    assert second["trafka", "false"][0] == second["kafka", "false"][0]
    assert len(second["kafka", "false"][0]) == kept


@pytest.mark.compat("Spark", "batch reads: startingOffsets past a recreated topic's end")
def test_a_batch_read_past_a_recreated_topics_end(
    connector: Any,  # noqa: F811 (the fixture imported above)
    kafka4: KafkaCluster,
) -> None:
    """A batch read whose startingOffsets are past the partition's end (the
    topic was deleted and created again since the offsets were noted). The
    connector fails the read's task whatever failOnDataLoss says (its
    KafkaSourceRDD.resolveRange: "The resolved start offset 4 is greater than
    the resolved end offset 2"); trafka fails as the read is planned, before
    any task, with failOnDataLoss=true, and with false reads nothing of the
    partition, as a stream does (docs/spark.md's parity table)."""
    servers = kafka4.bootstrap_servers
    topic = name("loss-batch")
    make_topics(servers, NewTopic(topic, 1))
    send(servers, values(5, topic, 0, "a"))
    recreate(servers, topic, 1)
    send(servers, values(2, topic, 0, "b"))
    past = {"subscribe": topic, "startingOffsets": json.dumps({topic: {"0": 4}})}
    lenient = {**past, "failOnDataLoss": "false"}
    spark_strict = fails_at(connector, "kafka", servers, past)
    assert spark_strict == "task" and "greater than the resolved end" in spark_strict.text
    assert fails_at(connector, "kafka", servers, lenient) == "task"
    ours = fails_at(connector, "trafka", servers, past)
    assert ours == "plan" and "failOnDataLoss=false" in ours.text, ours.text
    assert rows(reader(connector, "trafka", servers, lenient).load()) == []
