"""KIP-714's per-partition producer metrics (``org.apache.kafka.producer.partition.*``):
the accumulator's per-partition counters with a fake clock, the samples built from
known counters over successive pushes, a scripted broker that makes one partition
retry and another fail, and brokerlite receiving the counts of a producer that
wrote to two partitions."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from sdk_brokers import received_pushes, telemetry_broker
from sdk_fakebroker import serving
from test_sdk_telemetry import TelemetryBroker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.codec.compression import decompress
from trafka.codec.messages import k00_produce as produce
from trafka.codec.otlp import CUMULATIVE, decode_metrics
from trafka.sdk import NewTopic, open_admin, open_producer
from trafka.sdk.accumulator import BATCH_OVERHEAD, RECORD_OVERHEAD, Accumulator
from trafka.sdk.statistics import Interval, PartitionCounters
from trafka.sdk.telemetry import IntervalAverages, MetricSample, producer_samples

pytestmark = pytest.mark.anyio

P = "org.apache.kafka.producer.partition."


def by_point(samples: list[MetricSample]) -> dict[tuple[str, frozenset[Any]], MetricSample]:
    """The partition samples keyed by name and attributes."""
    out = {}
    for s in samples:
        if s.name.startswith(P):
            key = (s.name, frozenset(s.attributes))
            assert key not in out, key
            out[key] = s
    return out


def tp(topic: str, partition: int, *more: tuple[str, str]) -> frozenset[Any]:
    return frozenset({("topic", topic), ("partition", str(partition)), *more})


# -- the accumulator's counters ------------------------------------------------------------


def test_the_accumulator_counts_each_partition_per_batch_outcome() -> None:
    now = [0.0]
    acc = Accumulator(linger=0.0, retries=1, clock=lambda: now[0])
    for i in range(3):
        acc.append("t", 0, 0, None, b"v%d" % i, ())
    acc.append("t", 1, 0, None, b"w", ())
    queues = {(t, p): (n, size) for t, p, n, size, _ in acc.partition_counters()}
    assert queues == {
        ("t", 0): (3, BATCH_OVERHEAD + 3 * (RECORD_OVERHEAD + 2)),
        ("t", 1): (1, BATCH_OVERHEAD + RECORD_OVERHEAD + 1),
    }

    batches = {b.partition: b for b in acc.drain(0.0, 1, lambda t, p: 1)}
    # In flight: no longer queued.
    assert [(n, size) for _, _, n, size, _ in acc.partition_counters()] == [(0, 0), (0, 0)]

    # t-1 is retried: queued again, with its encoding.
    assert acc.retry_or_fail(batches[1], KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER), 0.1)
    encoded = batches[1].encoded
    assert encoded is not None
    # t-0 is acknowledged 0.25 s after its batch was opened.
    acc.complete(batches[0], 0, now=0.25)
    counters = {(t, p): (n, size, c) for t, p, n, size, c in acc.partition_counters()}
    n1, size1, c1 = counters[("t", 1)]
    assert (n1, size1) == (1, len(encoded))
    assert (c1.batch_retries, c1.records_retried, c1.records_sent) == (1, 1, 0)
    _, _, c0 = counters[("t", 0)]
    assert (c0.records_sent, c0.batches_sent, c0.records_retried) == (3, 1, 0)
    assert (c0.latency.total, c0.latency.count, c0.latency.peak) == (0.25, 1, 0.25)

    # Without `now` the clock gives the acknowledgement time.
    now[0] = 2.0
    [again] = acc.drain(2.0, 1, lambda t, p: 1)
    acc.fail(again, KafkaError(ErrorCode.INVALID_RECORD))
    assert (c1.records_failed, c1.errors) == (1, {"INVALID_RECORD": 1})
    assert c1.latency.count == 0  # a failure is not a latency
    acc.append("t", 1, 0, None, b"x", ())
    [last] = acc.drain(2.0, 1, lambda t, p: 1)
    now[0] = 2.5
    acc.complete(last, 1)
    assert (c1.latency.total, c1.latency.count) == (0.5, 1)

    # The topic's totals are its partitions' sums.
    topic = acc.topic_counters["t"]
    assert (topic.records_sent, topic.records_failed, topic.batch_retries) == (4, 1, 1)
    assert topic.errors == {"INVALID_RECORD": 1}


def test_records_aborted_unsent_fail_on_their_partition() -> None:
    acc = Accumulator(linger=10.0, clock=lambda: 0.0)
    acc.append("t", 2, 0, None, b"a", ())
    acc.append("t", 2, 0, None, b"b", ())
    assert acc.abort_undrained(KafkaError(ErrorCode.INVALID_TXN_STATE)) == 1
    [(_, partition, queued, _, c)] = acc.partition_counters()
    assert (partition, queued, c.records_failed, c.errors) == (
        2,
        0,
        2,
        {"INVALID_TXN_STATE": 2},
    )


# -- the samples ---------------------------------------------------------------------------


def test_partition_samples_from_known_counters() -> None:
    c0 = PartitionCounters()
    c0.records_sent = 10
    c0.records_retried = 2
    c0.latency.add(0.2)
    c0.latency.add(0.4)
    c0.failed(3, KafkaError(ErrorCode.INVALID_RECORD))
    c0.failed(1, ConnectionResetError())
    c1 = PartitionCounters()
    averages = IntervalAverages()
    stats = SimpleNamespace(brokers={})

    def push(now: float) -> dict[tuple[str, frozenset[Any]], MetricSample]:
        partitions = [("t", 0, 5, 700, c0), ("t", 1, 0, 0, c1)]
        samples = producer_samples(
            averages, stats, {}, Interval(), now, partitions=partitions, acks=1
        )
        return by_point(samples)

    got = push(1.0)
    leader = ("acks", "leader")
    expected = {
        (P + "queue.size", tp("t", 0)): ("gauge", "1", 5),
        (P + "queue.bytes", tp("t", 0)): ("gauge", "By", 700),
        (P + "latency.avg", tp("t", 0, leader)): ("gauge", "ms", pytest.approx(300.0)),
        (P + "latency.max", tp("t", 0, leader)): ("gauge", "ms", pytest.approx(400.0)),
        (P + "record.retries", tp("t", 0)): ("sum", "1", 2),
        (P + "record.failures", tp("t", 0, ("reason", "INVALID_RECORD"))): ("sum", "1", 3),
        (P + "record.failures", tp("t", 0, ("reason", "ConnectionResetError"))): ("sum", "1", 1),
        (P + "record.success", tp("t", 0)): ("sum", "1", 10),
        (P + "queue.size", tp("t", 1)): ("gauge", "1", 0),
        (P + "queue.bytes", tp("t", 1)): ("gauge", "By", 0),
        (P + "latency.avg", tp("t", 1, leader)): ("gauge", "ms", 0.0),
        (P + "latency.max", tp("t", 1, leader)): ("gauge", "ms", 0.0),
        (P + "record.retries", tp("t", 1)): ("sum", "1", 0),
        (P + "record.success", tp("t", 1)): ("sum", "1", 0),
    }
    assert {k: (s.kind, s.unit, s.value) for k, s in got.items()} == expected
    assert all(s.description for s in got.values())

    # The next push averages its own interval; sums stay totals.
    c0.latency.add(0.1)
    c0.records_sent += 1
    again = push(2.0)
    assert again[(P + "latency.avg", tp("t", 0, leader))].value == pytest.approx(100.0)
    assert again[(P + "latency.max", tp("t", 0, leader))].value == pytest.approx(100.0)
    assert again[(P + "record.success", tp("t", 0))].value == 11
    quiet = push(3.0)
    assert quiet[(P + "latency.avg", tp("t", 0, leader))].value == 0.0
    assert quiet[(P + "latency.max", tp("t", 0, leader))].value == 0.0


@pytest.mark.parametrize("acks, name", [(-1, "all"), (1, "leader"), (0, "none")])
def test_the_latency_names_the_acks_setting(acks: int, name: str) -> None:
    samples = producer_samples(
        IntervalAverages(),
        SimpleNamespace(brokers={}),
        {},
        Interval(),
        0.0,
        partitions=[("t", 0, 0, 0, PartitionCounters())],
        acks=acks,
    )
    latency = [s for s in samples if s.name == P + "latency.avg"]
    assert [dict(s.attributes)["acks"] for s in latency] == [name]


# -- against a scripted broker -------------------------------------------------------------


class FlakyBroker(TelemetryBroker):
    """Answers the first Produce to t-0 with a retriable error and every Produce to
    t-1 with a fatal one; the rest are written."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.handlers[0] = self.flaky_produce
        self.refused_once = False

    def flaky_produce(self, header: Any, body: Any) -> Any:
        R = produce.ProduceResponse
        answer = self.produce(header, body)
        topics = []
        for t in answer.responses:
            parts = []
            for p in t.partition_responses:
                if p.index == 1:
                    p = R.PartitionProduceResponse(index=1, error_code=ErrorCode.INVALID_RECORD)
                elif p.index == 0 and not self.refused_once:
                    self.refused_once = True
                    p = R.PartitionProduceResponse(index=0, error_code=ErrorCode.REQUEST_TIMED_OUT)
                parts.append(p)
            topics.append(
                R.TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=parts)
            )
        return R(responses=topics)


async def test_retries_and_failures_are_pushed_per_partition() -> None:
    with anyio.fail_after(20):
        async with serving(FlakyBroker(topics={"t": 2})) as broker:
            async with open_producer(
                bootstrap_servers=broker.bootstrap,
                linger_ms=0,
                acks=1,
                retry_backoff_ms=1,
                enable_idempotence=False,
            ) as producer:
                await producer.client_instance_id(timeout_ms=5000)
                for i in range(2):
                    await producer.send_and_wait("t", b"ok%d" % i, partition=0)
                with pytest.raises(KafkaError):
                    await producer.send_and_wait("t", b"bad", partition=1)
            last = broker.pushes[-1]  # the terminating push: the final counts
    assert last.terminating
    # One metric per point: several carry the same name.
    metrics = decode_metrics(decompress(last.compression_type, last.metrics))

    def points(name: str) -> dict[frozenset[Any], Any]:
        found = [
            (frozenset(p.attributes.items()), p.value)
            for m in metrics
            if m.name == P + name
            for p in m.points
        ]
        assert len(dict(found)) == len(found), found
        return dict(found)

    assert points("record.success") == {tp("t", 0): 2, tp("t", 1): 0}
    assert points("record.retries") == {tp("t", 0): 1, tp("t", 1): 0}
    assert points("record.failures") == {tp("t", 1, ("reason", "INVALID_RECORD")): 1}
    assert points("queue.size") == {tp("t", 0): 0, tp("t", 1): 0}
    assert set(points("latency.max")) == {
        tp("t", 0, ("acks", "leader")),
        tp("t", 1, ("acks", "leader")),
    }
    counts = [m for m in metrics if m.name == P + "record.success"]
    assert all(m.kind == "sum" and m.temporality == CUMULATIVE and m.monotonic for m in counts)


# -- against brokerlite --------------------------------------------------------------------


@pytest.fixture(scope="module")
def pushes_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("telemetry-partition-pushes") / "pushes.jsonl"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pushes_file: Path) -> Iterator[RunningBroker]:
    yield from telemetry_broker(tmp_path_factory, "telemetry-partitions", pushes_file)


def per_point(pushes: list[dict[str, Any]], name: str) -> dict[frozenset[Any], list[Any]]:
    """Each point's values over the pushes, by its attributes."""
    out: dict[frozenset[Any], list[Any]] = {}
    for push in pushes:
        for metric in push["metrics"]:
            if metric["name"] == name:
                for point in metric["points"]:
                    key = frozenset(point["attributes"].items())
                    out.setdefault(key, []).append(point["value"])
    return out


async def test_brokerlite_receives_each_partitions_counts(
    broker: RunningBroker, pushes_file: Path
) -> None:
    bs = broker.bootstrap_servers
    client_id = f"partition-telemetry-{uuid.uuid4().hex[:8]}"
    topic = client_id
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 2)])
            await admin.alter_client_metrics_configs(
                client_id,
                {
                    "metrics": "org.apache.kafka.producer.partition.",
                    "interval.ms": "100",
                    "match": f"client_id={client_id}",
                },
            )
        async with open_producer(bootstrap_servers=bs, client_id=client_id) as producer:
            instance = await producer.client_instance_id(timeout_ms=10_000)
            assert instance is not None, producer.statistics().telemetry
            futures = [await producer.send(topic, b"a%d" % i, partition=0) for i in range(3)]
            futures += [await producer.send(topic, b"b%d" % i, partition=1) for i in range(2)]
            for f in futures:
                await f
            while broker.broker.telemetry.latest(instance) is None:
                await anyio.sleep(0.02)
    pushes = received_pushes(pushes_file, instance)
    assert pushes and pushes[-1]["terminating"]
    names = {m["name"] for p in pushes for m in p["metrics"]}
    assert names == {
        P + n
        for n in (
            "queue.size",
            "queue.bytes",
            "latency.avg",
            "latency.max",
            "record.retries",
            "record.success",
        )
    }
    # brokerlite asks for deltas: the sums of every push add up to the totals.
    counts = per_point(pushes, P + "record.success")
    assert {k: sum(v) for k, v in counts.items()} == {tp(topic, 0): 3, tp(topic, 1): 2}
    retries = per_point(pushes, P + "record.retries")
    assert {k: sum(v) for k, v in retries.items()} == {tp(topic, 0): 0, tp(topic, 1): 0}
    # Nothing is left queued at the end; the latency carries the acks setting (all).
    assert [v[-1] for v in per_point(pushes, P + "queue.size").values()] == [0, 0]
    assert set(per_point(pushes, P + "latency.max")) == {
        tp(topic, 0, ("acks", "all")),
        tp(topic, 1, ("acks", "all")),
    }
