"""The stream's planner between triggers, against a real brokerlite (no Spark).

By default a stream's planner asks for the read's partitions at every trigger,
as Spark's connector lists them at every latest-offsets call: a partition added
to a subscribed topic, or a topic that starts matching a pattern, is in the next
trigger's offsets. With ``partitionDiscovery=metadataMaxAge`` it keeps them
between triggers and asks again once ``metadata.max.age.ms`` has passed, as
Kafka's consumer refreshes its metadata (the consumer configuration's
``metadata.max.age.ms``:
https://kafka.apache.org/documentation/#consumerconfigs_metadata.max.age.ms),
or at once after a lookup fails. The clock is injected: no test waits for it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from spark_helpers import create, delete, fresh, grow, produce

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.handlers import HANDLERS
from trafka.spark import _kafka
from trafka.spark.options import parse_read_options

MAX_AGE_MS = 60_000


class Clock:
    def __init__(self) -> None:
        self.now = 5.0  # a machine booted seconds ago: small values are fine

    def __call__(self) -> float:
        return self.now


def _options(broker: RunningBroker, **options: str) -> Any:
    return parse_read_options(
        {
            "kafka.bootstrap.servers": broker.bootstrap_servers,
            "kafka.metadata.max.age.ms": str(MAX_AGE_MS),
            # Bounds every lookup of these tests (no test waits longer for a broker).
            "kafka.default.api.timeout.ms": "10000",
            "kafka.request.timeout.ms": "10000",
            "fetchOffset.numRetries": "0",
            **options,
        },
        streaming=True,
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def planner_for(clock: Clock) -> Iterator[Any]:
    made: list[_kafka.Planner] = []

    def make(opts: Any) -> _kafka.Planner:
        planner = _kafka.Planner(opts, keep=True, clock=clock)
        made.append(planner)
        return planner

    yield make
    for planner in made:
        planner.close()


def test_by_default_every_trigger_lists_the_partitions_and_finds_new_ones_at_once(
    broker: RunningBroker, planner_for: Any, clock: Clock
) -> None:
    topic = fresh("plan-every")
    create(broker, topic, 2)
    opts = _options(broker, subscribe=topic)
    planner = planner_for(opts)
    start = _kafka.starting_offsets(opts, planner)
    assert start == {topic: {"0": 0, "1": 0}}
    assert _kafka.latest_offsets(opts, since=start, planner=planner) == start
    grow(broker, topic, 3)
    # The clock has not moved: the next trigger lists the partitions anyway.
    latest = _kafka.latest_offsets(opts, since=start, planner=planner)
    assert set(latest[topic]) == {"0", "1", "2"}
    begin = _kafka.new_partitions(opts, start, latest, planner)
    assert begin == {topic: {"0": 0, "1": 0, "2": 0}}
    # One partition list per call: the start and the two triggers.
    assert planner.metadata_requests == 3


def test_by_default_a_pattern_finds_a_new_topic_at_the_next_trigger(
    broker: RunningBroker, planner_for: Any, clock: Clock
) -> None:
    prefix = fresh("plan-every-pattern")
    create(broker, f"{prefix}-a", 1)
    opts = _options(broker, subscribePattern=f"{prefix}-.*")
    planner = planner_for(opts)
    start = _kafka.starting_offsets(opts, planner)
    create(broker, f"{prefix}-b", 2)
    create(broker, f"other-{prefix}", 1)  # matches no whole name
    latest = _kafka.latest_offsets(opts, since=start, planner=planner)
    assert latest == {f"{prefix}-a": {"0": 0}, f"{prefix}-b": {"0": 0, "1": 0}}


def test_a_subscription_asks_for_its_own_topics_and_names_every_missing_one(
    broker: RunningBroker, planner_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trigger's Metadata request names the subscribed topics, so that its
    answer does not grow with the cluster's other topics; the topics it lacks
    are all named when the read fails."""
    topic = fresh("plan-named")
    create(broker, topic, 2)
    create(broker, fresh("plan-other"), 3)
    asked: list[list[str] | None] = []
    spec = HANDLERS[3]

    def metadata(ctx: Any, request: Any) -> Any:
        asked.append(None if request.topics is None else sorted(t.name for t in request.topics))
        return spec.handle(ctx, request)

    monkeypatch.setitem(HANDLERS, 3, dataclasses.replace(spec, handle=metadata))
    opts = _options(broker, subscribe=topic)
    planner = planner_for(opts)
    start = _kafka.starting_offsets(opts, planner)  # the clients connect
    asked.clear()
    for _ in range(3):
        assert _kafka.latest_offsets(opts, since=start, planner=planner) == start
    assert planner.metadata_requests == 4
    assert asked and all(names == [topic] for names in asked), asked
    missing = _options(broker, subscribe=f"{topic},plan-missing-b,plan-missing-a")
    with pytest.raises(
        _kafka.PlanningError, match=r"topics do not exist: plan-missing-b, plan-missing-a$"
    ):
        _kafka.latest_offsets(missing, since=start, planner=planner_for(missing))


def test_triggers_within_the_max_age_reuse_the_partitions_and_see_new_records(
    broker: RunningBroker, planner_for: Any, clock: Clock
) -> None:
    topic = fresh("plan-cache")
    create(broker, topic, 2)
    opts = _options(broker, subscribe=topic, partitionDiscovery="metadataMaxAge")
    planner = planner_for(opts)
    start = _kafka.starting_offsets(opts, planner)
    assert start == {topic: {"0": 0, "1": 0}}
    produce(broker, topic, [(None, b"a", None)] * 3)
    for step in range(3):
        clock.now += MAX_AGE_MS / 1000 / 4
        latest = _kafka.latest_offsets(opts, since=start, planner=planner)
        assert sum(latest[topic].values()) == 3 + step
        produce(broker, topic, [(None, b"b", None)])
    # One partition list for the start and the three triggers: no Metadata per trigger.
    assert planner.metadata_requests == 1


def test_new_partitions_are_found_once_the_max_age_has_passed(
    broker: RunningBroker, planner_for: Any, clock: Clock
) -> None:
    topic = fresh("plan-grow")
    create(broker, topic, 2)
    opts = _options(broker, subscribe=topic, partitionDiscovery="metadataMaxAge")
    planner = planner_for(opts)
    start = _kafka.starting_offsets(opts, planner)
    grow(broker, topic, 3)
    clock.now += MAX_AGE_MS / 1000 - 1
    assert _kafka.latest_offsets(opts, since=start, planner=planner) == {topic: {"0": 0, "1": 0}}
    clock.now += 1
    latest = _kafka.latest_offsets(opts, since=start, planner=planner)
    assert latest == {topic: {"0": 0, "1": 0, "2": 0}}
    # The new partition is read from its start (the stream's rule for new partitions).
    assert _kafka.new_partitions(opts, start, latest, planner) == latest


def test_a_pattern_finds_a_new_topic_once_the_max_age_has_passed(
    broker: RunningBroker, planner_for: Any, clock: Clock
) -> None:
    prefix = fresh("plan-pattern")
    create(broker, f"{prefix}-a", 1)
    opts = _options(broker, subscribePattern=f"{prefix}-.*", partitionDiscovery="metadataMaxAge")
    planner = planner_for(opts)
    start = _kafka.starting_offsets(opts, planner)
    create(broker, f"{prefix}-b", 1)
    assert _kafka.latest_offsets(opts, since=start, planner=planner) == start
    clock.now += MAX_AGE_MS / 1000
    latest = _kafka.latest_offsets(opts, since=start, planner=planner)
    assert set(latest) == {f"{prefix}-a", f"{prefix}-b"}


def test_a_deleted_topic_is_found_at_the_next_trigger_within_the_max_age(
    broker: RunningBroker, planner_for: Any, clock: Clock
) -> None:
    topic = fresh("plan-deleted")
    create(broker, topic, 2)
    opts = _options(broker, subscribe=topic, partitionDiscovery="metadataMaxAge")
    planner = planner_for(opts)
    start = _kafka.starting_offsets(opts, planner)
    delete(broker, topic)
    # The kept partitions fail their lookup; they are asked for again at once.
    with pytest.raises(_kafka.PlanningError, match=f"topics do not exist: {topic}"):
        _kafka.latest_offsets(opts, since=start, planner=planner)
    assert planner.metadata_requests == 2


def test_a_topic_recreated_with_fewer_partitions_drops_the_missing_ones(
    broker: RunningBroker, planner_for: Any, clock: Clock
) -> None:
    prefix = fresh("plan-recreated")
    topic = f"{prefix}-x"
    create(broker, topic, 3)
    opts = _options(broker, subscribePattern=f"{prefix}-.*", partitionDiscovery="metadataMaxAge")
    planner = planner_for(opts)
    start = _kafka.starting_offsets(opts, planner)
    assert set(start[topic]) == {"0", "1", "2"}
    delete(broker, topic)
    create(broker, topic, 1)
    latest = _kafka.latest_offsets(opts, since=start, planner=planner)
    assert latest == {topic: {"0": 0}}


def _stream_reader(opts: Any) -> Any:
    from trafka.spark.source import SCHEMA, _StreamReader

    return _StreamReader(opts, SCHEMA)


def test_an_idle_trigger_waits_at_the_broker_and_returns_with_the_record_that_came(
    broker: RunningBroker,
) -> None:
    topic = fresh("plan-wait")
    create(broker, topic, 2)
    # A wait far longer than the test: the record's arrival must end it.
    opts = _options(broker, subscribe=topic, latestOffsetWaitMs="60000")
    reader = _stream_reader(opts)
    try:
        start = reader.initialOffset()
        assert start == {topic: {"0": 0, "1": 0}}
        # Sent while the trigger waits (or, on a slow machine, before it asks:
        # then the trigger finds it at once).
        later = threading.Timer(0.5, produce, (broker, topic, [(None, b"late", None)]))
        later.start()
        try:
            latest = reader.latestOffset(start, ReadAllAvailable())
        finally:
            later.join(30)
        assert sorted(latest[topic].values()) == [0, 1]
    finally:
        reader.stop()


def test_a_trigger_with_new_records_does_not_wait(broker: RunningBroker) -> None:
    topic = fresh("plan-nowait")
    create(broker, topic, 1)
    opts = _options(broker, subscribe=topic, latestOffsetWaitMs="60000")
    reader = _stream_reader(opts)
    try:
        start = reader.initialOffset()
        produce(broker, topic, [(None, b"a", None)] * 2)
        # With the records already there, nothing waits (the test's own deadline,
        # pytest's, is far below the 60 s wait).
        assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 2}}
        assert reader.planner._watcher is None  # no wait was started
    finally:
        reader.stop()


def test_the_wait_can_be_turned_off(broker: RunningBroker) -> None:
    topic = fresh("plan-nowatch")
    create(broker, topic, 1)
    reader = _stream_reader(_options(broker, subscribe=topic, latestOffsetWaitMs="0"))
    try:
        start = reader.initialOffset()
        assert reader.latestOffset(start, ReadAllAvailable()) == start
        assert reader.planner._watcher is None
    finally:
        reader.stop()


def test_a_wait_says_whether_the_offsets_are_worth_asking_for_again(
    broker: RunningBroker, planner_for: Any
) -> None:
    topic = fresh("plan-news")
    create(broker, topic, 2)
    produce(broker, topic, [(None, b"a", None)] * 4)
    opts = _options(broker, subscribe=topic, latestOffsetWaitMs="200")
    planner = planner_for(opts)
    latest = _kafka.latest_offsets(opts, since={}, planner=planner)
    # At the end of every partition, nothing comes: the brokers wait the time out.
    assert planner.wait(latest) is False
    # Behind the end of one partition: its leader answers at once that there is more.
    behind = {topic: {p: max(0, o - 1) for p, o in latest[topic].items()}}
    assert planner.wait(behind) is True


def test_a_micro_batch_plan_reports_records_gone_as_spark_does(
    broker: RunningBroker, planner_for: Any
) -> None:
    """As Spark's connector plans a micro-batch (its getOffsetRangesFromResolvedOffsets,
    docs/spark.md "When records are gone"): a new partition that does not start
    at offset 0, and a partition that is gone, fail it with failOnDataLoss=true;
    with false the plan goes on from the new partition's earliest offset."""
    import anyio

    from trafka.sdk import TopicPartition, open_admin
    from trafka.spark import _loss

    prefix = fresh("plan-lost")
    grown, gone = f"{prefix}-a", f"{prefix}-b"
    create(broker, grown, 1)
    create(broker, gone, 1)
    strict = _options(broker, subscribePattern=f"{prefix}-.*")
    lenient = dataclasses.replace(strict, fail_on_data_loss=False)
    planner = planner_for(strict)
    start = _kafka.starting_offsets(strict, planner)
    grow(broker, grown, 2)
    produce(broker, grown, [(None, b"v%d" % i, None) for i in range(3)], partition=1)

    async def lose() -> None:
        with anyio.fail_after(30):
            async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
                await admin.delete_records({TopicPartition(grown, 1): 2})

    anyio.run(lose, backend="trio")
    end = _kafka.latest_offsets(strict, since=start, planner=planner)
    with pytest.raises(_kafka.DataLossError, match=rf"{grown}-1, new .* starts at offset 2"):
        _loss.stream_start(strict, start, end, planner)
    assert _loss.stream_start(lenient, start, end, planner) == {
        grown: {"0": 0, "1": 2},
        gone: {"0": 0},
    }
    delete(broker, gone)
    end = _kafka.latest_offsets(strict, since=start, planner=planner)
    assert gone not in end
    moved = {**start, grown: {"0": 0, "1": 2}}
    with pytest.raises(_kafka.DataLossError, match=rf"{gone}-0 no longer exist"):
        _loss.stream_start(strict, moved, end, planner)
    assert _loss.stream_start(lenient, moved, end, planner) == moved
