"""A running stream reads the partitions added to its topics, and the topics that
start matching its pattern, in the first micro-batch planned after they appear,
as Spark's Kafka source does (it lists the partitions at every latest-offsets
call), with the default options: from their earliest offset, every record once.

Each change is made inside the ``foreachBatch`` sink of a micro-batch: Spark
plans the next micro-batch only after the sink returns, so that micro-batch is
the first planned after the partitions (and their records) appeared, with no
timing in the test.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import create, fresh, grow, produce, stream_of

from trafka.brokerlite import RunningBroker

pytestmark = pytest.mark.timeout(300)

Row = tuple[str, int, int, str]  # topic, partition, offset, value
Step = tuple[list[Row], Callable[[], None] | None]

READERS = ["partitioned", "simple"]


def _values(prefix: str, n: int) -> list[tuple[None, bytes, None]]:
    return [(None, f"{prefix}{i}".encode(), None) for i in range(n)]


def _rows(topic: str, partition: int, first: int, prefix: str, n: int) -> list[Row]:
    return [(topic, partition, first + i, f"{prefix}{i}") for i in range(n)]


def _stream_in_steps(
    spark: Any,
    broker: RunningBroker,
    checkpoint: Path,
    options: dict[str, str],
    steps: Sequence[Step],
) -> None:
    """Run a stream with ``options`` (from the earliest offsets) into a
    ``foreachBatch`` sink. Its i-th micro-batch with rows must hold exactly the
    rows of ``steps[i]`` (checked as it comes), and its sink then makes the
    step's change; the micro-batches must follow one another."""
    seen: list[tuple[int, list[Row]]] = []

    def sink(frame: Any, batch_id: int) -> None:
        rows = sorted((r.topic, r.partition, r.offset, r.value) for r in frame.collect())
        if rows:
            seen.append((batch_id, rows))
            change = steps[len(seen) - 1][1] if len(seen) <= len(steps) else None
            if change is not None:
                change()

    query = (
        stream_of(spark, broker, startingOffsets="earliest", **options)
        .selectExpr("topic", "partition", "offset", "cast(value as string) as value")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        checked = 0
        while checked < len(steps):
            assert query.exception() is None
            while checked < len(seen):
                batch_id, rows = seen[checked]
                assert rows == sorted(steps[checked][0]), f"micro-batch {batch_id}"
                if checked:
                    # The first micro-batch planned after the change before it.
                    assert batch_id == seen[checked - 1][0] + 1
                checked += 1
            assert time.monotonic() < deadline, f"micro-batches {seen}, expected {steps}"
            time.sleep(0.1)
    finally:
        query.stop()
    assert query.exception() is None
    assert len(seen) == len(steps)


@pytest.mark.parametrize("reader", READERS)
def test_partitions_added_to_a_subscribed_topic_are_read_in_the_next_micro_batch(
    spark: Any, broker: RunningBroker, tmp_path: Path, reader: str
) -> None:
    topic = fresh(f"grown-{reader}")
    create(broker, topic, 1)
    produce(broker, topic, _values("a", 5))

    def add_partitions() -> None:
        grow(broker, topic, 3)
        produce(broker, topic, _values("one", 3), partition=1)
        produce(broker, topic, _values("two", 2), partition=2)
        produce(broker, topic, _values("b", 2), partition=0)

    _stream_in_steps(
        spark,
        broker,
        tmp_path / "checkpoint",
        {"subscribe": topic, "streamReader": reader},
        [
            (_rows(topic, 0, 0, "a", 5), add_partitions),
            # The new partitions from their first offset, and nothing read before...
            (
                _rows(topic, 0, 5, "b", 2)
                + _rows(topic, 1, 0, "one", 3)
                + _rows(topic, 2, 0, "two", 2),
                lambda: produce(broker, topic, _values("last", 1), partition=2),
            ),
            # ...and then only what came after.
            (_rows(topic, 2, 2, "last", 1), None),
        ],
    )


@pytest.mark.parametrize("reader", READERS)
def test_a_topic_that_starts_matching_the_pattern_is_read_in_the_next_micro_batch(
    spark: Any, broker: RunningBroker, tmp_path: Path, reader: str
) -> None:
    prefix = fresh(f"matched-{reader}")
    old, new, other = f"{prefix}-a", f"{prefix}-b", f"x{prefix}-c"
    create(broker, old, 1)
    produce(broker, old, _values("a", 4))

    def add_topics() -> None:
        create(broker, new, 2)
        produce(broker, new, _values("zero", 3), partition=0)
        produce(broker, new, _values("one", 1), partition=1)
        create(broker, other, 1)  # matches no whole name: never read
        produce(broker, other, _values("x", 2))
        produce(broker, old, _values("b", 1))

    _stream_in_steps(
        spark,
        broker,
        tmp_path / "checkpoint",
        {"subscribePattern": f"{prefix}-.*", "streamReader": reader},
        [
            (_rows(old, 0, 0, "a", 4), add_topics),
            (
                _rows(old, 0, 4, "b", 1) + _rows(new, 0, 0, "zero", 3) + _rows(new, 1, 0, "one", 1),
                lambda: produce(broker, new, _values("last", 1), partition=1),
            ),
            (_rows(new, 1, 1, "last", 1), None),
        ],
    )
