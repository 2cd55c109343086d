"""KIP-714 client metrics from the share consumer (KIP-932): the poll bookkeeping
with a fake clock, then the share consumer against brokerlite with a
client-metrics subscription: the broker keeps its metrics with its client id,
group id and member id, the sums add up to what it did, the last push is the
terminating one; with ``enable.metrics.push`` off nothing is sent; the blocking
share consumer forwards ``client_instance_id``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from sdk_brokers import (
    SHARE_HEARTBEATS,
    fresh,
    produce,
    received_pushes,
    share_queue,
    telemetry_broker,
)

from trafka.brokerlite import RunningBroker
from trafka.codec.messages import k03_metadata as md
from trafka.codec.messages import k78_share_fetch as sf
from trafka.codec.records import encode_batch
from trafka.sdk import open_admin
from trafka.sdk.blocking import ShareConsumer as BlockingShareConsumer
from trafka.sdk.errors import UsageError
from trafka.sdk.fetcher import TopicPartition
from trafka.sdk.metadata import MetadataCache
from trafka.sdk.share_consumer import ShareConsumer, open_share_consumer
from trafka.sdk.share_fetcher import ShareFetcher
from trafka.sdk.statistics import Interval
from trafka.sdk.telemetry import IntervalAverages, PollTimes, share_consumer_samples

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

SHARE = "org.apache.kafka.consumer.share."
FETCH = SHARE + "fetch.manager."


# -- the polls, as Java's KafkaShareConsumerMetrics ------------------------------------------


def test_poll_times_as_java() -> None:
    polls = PollTimes()
    polls.started(10.0)  # the first poll: 0 since the last one
    polls.ended(11.0)  # 1 s in poll, 0 between: idle ratio 1
    polls.started(14.0)  # 4 s since the last start
    polls.ended(15.0)  # 1 s in poll over 1 + 4
    assert (polls.between.total, polls.between.count, polls.between.peak) == (4.0, 2, 4.0)
    assert (polls.idle.total, polls.idle.count) == (1.0 + 1 / 5, 2)
    assert polls.last_start == 14.0


# -- fetch sizes: bytes and records per ShareFetch answer ------------------------------------

TOPIC_ID = uuid.UUID(int=7)


def share_fetcher() -> ShareFetcher:
    """A fetcher assigned t-0 and t-1, both led by node 0."""
    R = md.MetadataResponse
    cache = MetadataCache()
    cache.update(
        R(
            brokers=[R.MetadataResponseBroker(node_id=0, host="h", port=1)],
            topics=[
                R.MetadataResponseTopic(
                    name="t",
                    topic_id=TOPIC_ID,
                    partitions=[
                        R.MetadataResponsePartition(partition_index=i, leader_id=0) for i in (0, 1)
                    ],
                )
            ],
        ),
        0.0,
    )
    f = ShareFetcher(cache, group_id="g", member_id="m")
    f.set_assignment({TopicPartition("t", 0), TopicPartition("t", 1)})
    return f


def answer(parts: dict[int, list[bytes]]) -> Any:
    """A ShareFetch answer acquiring ``values`` from offset 0 of each partition."""
    R = sf.ShareFetchResponse
    partitions = [
        R.PartitionData(
            partition_index=i,
            records=encode_batch([(1000, None, v, ()) for v in values]),
            acquired_records=[
                R.AcquiredRecords(first_offset=0, last_offset=len(values) - 1, delivery_count=1)
            ],
        )
        for i, values in parts.items()
    ]
    return R(
        acquisition_lock_timeout_ms=30_000,
        responses=[R.ShareFetchableTopicResponse(topic_id=TOPIC_ID, partitions=partitions)],
    )


def test_the_fetcher_counts_bytes_and_records_per_share_fetch_answer() -> None:
    f = share_fetcher()
    first = answer({0: [b"a", b"b"], 1: [b"c"]})
    size = sum(len(p.records) for t in first.responses for p in t.partitions)
    f.want_records()
    [request] = f.requests(0.0)
    f.on_response(request, first, 0.0)
    assert (f.fetch_bytes.total, f.fetch_bytes.count, f.fetch_bytes.peak) == (size, 1, size)
    assert (f.fetch_records.total, f.fetch_records.count) == (3, 1)
    # An empty answer is a fetch of 0 bytes and 0 records.
    f.take(10)
    f.want_records()
    [request] = f.requests(0.0)
    f.on_response(request, answer({}), 0.0)
    assert (f.fetch_bytes.total, f.fetch_bytes.count) == (size, 2)
    assert (f.fetch_records.total, f.fetch_records.count, f.fetch_records.peak) == (3, 2, 3)


def test_fetch_size_and_bytes_consumed_samples_from_known_fetches() -> None:
    averages = IntervalAverages()
    stats = SimpleNamespace(
        brokers={}, records_delivered=0, acknowledged={}, acknowledgements_failed={}
    )
    sizes, records = Interval(), Interval()

    def push(now: float) -> dict[str, Any]:
        samples = share_consumer_samples(
            averages,
            stats,
            {},
            PollTimes(),
            None,
            now,
            fetch_bytes=sizes,
            fetch_records=records,
        )
        return {s.name: (s.kind, s.unit, s.value) for s in samples if s.name.startswith(FETCH)}

    for size, n in ((100, 2), (300, 4)):
        sizes.add(size)
        records.add(n)
    got = push(10.0)
    assert got[FETCH + "fetch.size.avg"] == ("gauge", "By", 200.0)
    assert got[FETCH + "fetch.size.max"] == ("gauge", "By", 300.0)
    assert got[FETCH + "bytes.consumed.total"] == ("sum", "By", 400)
    assert got[FETCH + "bytes.consumed.rate"] == ("gauge", "By", 0.0)  # no earlier push
    assert got[FETCH + "records.per.request.avg"] == ("gauge", "1", 3.0)
    assert got[FETCH + "records.per.request.max"] == ("gauge", "1", 4.0)
    # The next push: its own interval's averages and peaks, the rate since the last.
    sizes.add(50)
    records.add(1)
    again = push(12.0)
    assert again[FETCH + "fetch.size.avg"][2] == 50.0
    assert again[FETCH + "fetch.size.max"][2] == 50.0
    assert again[FETCH + "bytes.consumed.total"][2] == 450
    assert again[FETCH + "bytes.consumed.rate"][2] == 25.0
    assert again[FETCH + "records.per.request.max"][2] == 1.0
    quiet = push(13.0)
    assert quiet[FETCH + "fetch.size.avg"][2] == 0.0
    assert quiet[FETCH + "fetch.size.max"][2] == 0.0


# -- against brokerlite ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pushes_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("telemetry-share-pushes") / "pushes.jsonl"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pushes_file: Path) -> Iterator[RunningBroker]:
    yield from telemetry_broker(
        tmp_path_factory, "telemetry-share", pushes_file, **SHARE_HEARTBEATS
    )


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def subscribe_metrics(bootstrap: str, client_id: str) -> None:
    """A client-metrics resource asking ``client_id`` for every consumer metric
    (the share consumer's included) every 100 ms."""
    async with open_admin(bootstrap_servers=bootstrap) as admin:
        await admin.alter_client_metrics_configs(
            client_id,
            {
                "metrics": "org.apache.kafka.consumer.",
                "interval.ms": "100",
                "match": f"client_id={client_id}",
            },
        )


def total(pushes: list[dict[str, Any]], name: str) -> float:
    """A sum over every push: the broker asks for delta temporality, so each push
    carries the change since the previous one."""
    return sum(
        point["value"]
        for push in pushes
        for metric in push["metrics"]
        if metric["name"] == name
        for point in metric["points"]
    )


def responses(stats: Any, api_name: str) -> int:
    """The answers of one API the consumer received, over every broker."""
    return sum(a.responses for b in stats.brokers.values() if (a := b.apis.get(api_name)))


async def poll_until(consumer: ShareConsumer, n: int) -> list[Any]:
    got: list[Any] = []
    while len(got) < n:
        got += await consumer.poll(timeout_ms=200)
    return got


async def test_brokerlite_receives_the_share_consumers_metrics(
    broker: RunningBroker, pushes_file: Path
) -> None:
    bs = broker.bootstrap_servers
    client_id = fresh("share-telemetry")
    values = [b"m%d" % i for i in range(5)]
    with anyio.fail_after(60):
        topic, group = await share_queue(bs)
        await subscribe_metrics(bs, client_id)
        await produce(bs, topic, values)
        async with open_share_consumer(
            topic, bootstrap_servers=bs, group_id=group, client_id=client_id
        ) as consumer:
            instance = await consumer.client_instance_id(timeout_ms=10_000)
            assert instance is not None, consumer.statistics().telemetry
            got = await poll_until(consumer, len(values))
            # one push at least while open, the terminating one comes on close
            while broker.broker.telemetry.latest(instance) is None:
                await anyio.sleep(0.02)
            member_id = consumer.member_id
        stats = consumer.statistics()
    assert sorted(r.value for r in got) == values
    assert stats.acknowledged == {"ACCEPT": len(values)}  # implicit mode: accepted on close
    telemetry = stats.telemetry
    assert telemetry is not None and telemetry.client_instance_id == instance
    assert telemetry.state == "terminated", telemetry

    last = broker.broker.telemetry.latest(instance)
    assert last is not None and last.terminating
    assert last.client_id == client_id and last.client_software_name == "trafka"
    names = {m.name for m in last.metrics}
    for name in (
        "org.apache.kafka.consumer.connection.creation.total",
        "org.apache.kafka.consumer.node.request.latency.avg",
        SHARE + "poll.idle.ratio.avg",
        SHARE + "time.between.poll.avg",
        SHARE + "last.poll.seconds.ago",
        FETCH + "fetch.total",
        FETCH + "fetch.latency.max",
        FETCH + "records.consumed.total",
        FETCH + "fetch.size.avg",
        FETCH + "fetch.size.max",
        FETCH + "bytes.consumed.total",
        FETCH + "bytes.consumed.rate",
        FETCH + "records.per.request.avg",
        FETCH + "records.per.request.max",
        FETCH + "acknowledgements.send.total",
        FETCH + "acknowledgements.error.total",
        SHARE + "coordinator.heartbeat.total",
        SHARE + "coordinator.last.heartbeat.seconds.ago",
    ):
        assert name in names, name
    assert not any(n.startswith("org.apache.kafka.producer.") for n in names)
    # Java's resource attributes (the broker adds the client id itself).
    assert {"group_id": group, "group_member_id": member_id}.items() <= dict(
        last.metrics[0].resource
    ).items()

    pushes = received_pushes(pushes_file, instance)
    assert pushes and pushes[-1]["terminating"]
    assert not any(p["terminating"] for p in pushes[:-1])
    # What it did: the deltas of every push add up to the consumer's own counts.
    assert total(pushes, FETCH + "records.consumed.total") == len(values), telemetry
    assert total(pushes, FETCH + "acknowledgements.send.total") == len(values), telemetry
    assert total(pushes, FETCH + "acknowledgements.error.total") == 0
    assert total(pushes, FETCH + "fetch.total") == responses(stats, "ShareFetch")
    # The record bytes fetched: at least the values', all counted in the pushes.
    assert stats.bytes_fetched >= sum(map(len, values))
    assert total(pushes, FETCH + "bytes.consumed.total") == stats.bytes_fetched
    heartbeats = responses(stats, "ShareGroupHeartbeat")
    assert total(pushes, SHARE + "coordinator.heartbeat.total") == heartbeats


async def test_enable_metrics_push_false_sends_nothing(
    broker: RunningBroker, pushes_file: Path
) -> None:
    bs = broker.bootstrap_servers
    client_id = fresh("share-no-telemetry")
    with anyio.fail_after(60):
        topic, group = await share_queue(bs)
        await subscribe_metrics(bs, client_id)  # the cluster would take its metrics
        await produce(bs, topic, [b"x"])
        async with open_share_consumer(
            topic,
            bootstrap_servers=bs,
            group_id=group,
            client_id=client_id,
            enable_metrics_push=False,
        ) as consumer:
            await poll_until(consumer, 1)
            with pytest.raises(UsageError):
                await consumer.client_instance_id(timeout_ms=0)
        stats = consumer.statistics()
    assert stats.telemetry is None
    sent = {name for b in stats.brokers.values() for name in b.apis}
    assert not sent & {"GetTelemetrySubscriptions", "PushTelemetry"}, sent
    assert not [p for p in broker.broker.telemetry.pushes() if p.client_id == client_id]


def test_the_blocking_share_consumer_forwards_client_instance_id(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    client_id = fresh("share-telemetry-blocking")
    topic, group = anyio.run(share_queue, bs, backend="trio")
    anyio.run(subscribe_metrics, bs, client_id, backend="trio")
    consumer = BlockingShareConsumer(
        topic, bootstrap_servers=bs, group_id=group, client_id=client_id
    )
    try:
        instance = consumer.client_instance_id(timeout_ms=10_000)
        assert isinstance(instance, uuid.UUID)
        telemetry = consumer.statistics().telemetry
        assert telemetry is not None and telemetry.client_instance_id == instance
    finally:
        consumer.close()
