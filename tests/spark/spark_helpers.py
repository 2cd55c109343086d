"""Helpers of the Spark tests: topics, records in and out through trafka's own clients."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from trafka.brokerlite import RunningBroker
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer

if TYPE_CHECKING:  # tests/ is not on the path of the drivers that import this
    from kafka_peers import KafkaCluster


#: The tests' JVMs (drivers, executors, standalone daemons) compile with C1 only
#: and collect with the serial GC: they live seconds to minutes and run small
#: jobs, and on a two-core machine C2's and the parallel GC's threads cost more
#: than they give back. Not for bench/spark.py, which measures.
#: And the flags that map Spark's class-data archive (tests/spark_home.py), which
#: tests/conftest.py gives the drivers itself: here for executors.
TEST_JVM_OPTIONS = (
    f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC {os.environ.get('TRAFKA_SPARK_CDS', '')}"
)


def fresh(prefix: str = "t") -> str:
    """A topic name no other test of this run uses."""
    # Imported here: the drivers that import this module run without tests/ on the path.
    from unique_names import names

    return f"{prefix}-{next(names)}"


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(fn, backend="trio")


def create(broker: RunningBroker, topic: str, partitions: int, **settings: Any) -> None:
    async def go() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers, **settings) as admin:
            await admin.create_topics([NewTopic(topic, partitions)])

    run(go)


def grow(broker: RunningBroker, topic: str, partitions: int) -> None:
    """Give ``topic`` ``partitions`` partitions in all."""

    async def go() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.create_partitions({topic: partitions})

    run(go)


def delete(broker: RunningBroker, topic: str) -> None:
    async def go() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.delete_topics([topic])

    run(go)


def produce(
    broker: RunningBroker,
    topic: str,
    records: list[tuple[bytes | None, bytes, int | None]],
    *,
    headers: list[tuple[str, bytes]] | None = None,
    partition: int | None = None,
    **settings: Any,
) -> list[Any]:
    """Send (key, value, timestamp_ms) records (all to ``partition`` when
    given, else where the partitioner puts them); return their RecordMetadata."""

    async def go() -> list[Any]:
        async with open_producer(
            bootstrap_servers=broker.bootstrap_servers, **settings
        ) as producer:
            futures = [
                await producer.send(
                    topic, v, key=k, timestamp_ms=ts, headers=headers, partition=partition
                )
                for k, v, ts in records
            ]
            await producer.flush()
            return [await f for f in futures]

    result: list[Any] = run(go)
    return result


def consume_all(broker: RunningBroker, topic: str, partitions: int, **settings: Any) -> list[Any]:
    async def go() -> list[Any]:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        out: list[Any] = []
        async with open_consumer(
            bootstrap_servers=broker.bootstrap_servers, **settings
        ) as consumer:
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            with anyio.fail_after(30):
                for tp in tps:
                    while await consumer.position(tp) < ends[tp]:
                        for recs in (await consumer.getmany(tp, timeout_ms=500)).values():
                            out.extend(recs)
        return out

    result: list[Any] = run(go)
    return result


def committed(broker: RunningBroker, topic: str, partitions: int) -> list[bytes]:
    """The topic's values as a read_committed consumer sees them (KIP-98), sorted."""
    records = consume_all(broker, topic, partitions, isolation_level="read_committed")
    return sorted(r.value for r in records)


def everything(broker: RunningBroker, topic: str, partitions: int) -> list[bytes]:
    """Every value written, aborted ones included (read_uncommitted), sorted."""
    records = consume_all(broker, topic, partitions, isolation_level="read_uncommitted")
    return sorted(r.value for r in records)


def stream_of(spark: Any, broker: RunningBroker, **options: str) -> Any:
    """A ``trafka`` stream from ``broker`` with the given data source options."""
    r = spark.readStream.format("trafka").option(
        "kafka.bootstrap.servers", broker.bootstrap_servers
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def run_available_now(df: Any, out: Path, checkpoint: Path) -> Any:
    """Write ``df``'s partition, offset and value (as a string) to parquet files
    in ``out`` with ``Trigger.AvailableNow``; the query, once it ended cleanly."""
    query = (
        df.selectExpr("partition", "offset", "cast(value as string) as value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    return query


def exactly_once_stream(
    spark: Any, fmt: str, servers: str, source: str, sink: str, checkpoint: str, *columns: str
) -> Any:
    """A query (started) from topic ``source`` into ``sink`` through the sink
    ``fmt`` exactly once: ``columns`` of the source, micro-batches of 60
    records, ``Trigger.AvailableNow`` (the drivers of the exactly-once tests),
    one task (and so one transaction) per source partition."""
    return (
        spark.readStream.format("trafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "60")
        .option("mergeOffsetRanges", "false")
        .load()
        .selectExpr(*columns)
        .writeStream.format(fmt)
        .option("kafka.bootstrap.servers", servers)
        .option("topic", sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


#: The line Kafka's active controller logs when a broker's session times out.
FENCING = re.compile(r"Fencing broker (\d+) at epoch \d+ because its session has timed out")


def _length(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class KafkaNodes:
    """What these tests use of :class:`ClusterProcesses`, on Apache Kafka's
    three nodes (tests/kafka_peers.py): a node killed -9, started again; and
    which nodes the controller fenced since."""

    def __init__(self, kafka: KafkaCluster) -> None:
        self.kafka = kafka
        self.bootstrap_servers = kafka.bootstrap_servers
        self.ports = {node.node_id: node.port for node in kafka.nodes}
        # Each node's log length at the last kill (what :meth:`fenced` reads past).
        self._logged: dict[int, int] = {}

    @property
    def procs(self) -> dict[int, Any]:
        return {node.node_id: node.proc for node in self.kafka.nodes}

    def kill(self, node_id: int) -> None:
        self._logged = {node.node_id: _length(node.log_path) for node in self.kafka.nodes}
        self.kafka.node(node_id).kill()

    def fenced(self) -> list[int]:
        """The nodes whose broker session the active controller timed out and
        fenced since the last :meth:`kill` (its log says so: tests/kafka_peers.py),
        sorted: the killed node alone, unless a live one missed its heartbeats."""
        found = []
        for node in self.kafka.nodes:
            with contextlib.suppress(FileNotFoundError), node.log_path.open("rb") as log:
                log.seek(self._logged.get(node.node_id, 0))
                found += FENCING.findall(log.read().decode(errors="replace"))
        return sorted(int(n) for n in found)

    def start_node(self, node_id: int) -> None:
        if not self.kafka.node(node_id).running:
            self.kafka.start_node(node_id)
