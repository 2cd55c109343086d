"""Java's client metrics in the SDK (issue #48): the windowed rates of Kafka's
``SampledStat``, the ``consumer-coordinator-metrics`` measured in the membership
state machine with a clock the test moves, and, against an in-process
brokerlite, the Prometheus series (``*_node_metrics{node_id="node-1"}``,
``kafka_consumer_consumer_coordinator_metrics_*``) checked against the events
that really happened: the requests the broker counted, the commits made, the
rebalances a listener saw. No timing threshold: only counts, and latencies the
test's own clock decides.

Java's definitions: ``org.apache.kafka.common.metrics.stats.SampledStat`` and
``Rate`` (``metrics.num.samples`` = 2, ``metrics.sample.window.ms`` = 30000, the
documented defaults), ``AbstractCoordinator.GroupCoordinatorMetrics`` and
``ConsumerCoordinator``'s metrics, ``Selector``'s per-node metrics with
``node-id`` = ``node-<id>`` (``node--1`` for the first bootstrap address).
"""

from __future__ import annotations

import math
import urllib.request
import warnings
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sdk_brokers import fresh
from test_sdk_consumer_membership import TID, R
from test_sdk_consumer_membership import Harness as ConsumerProtocolHarness
from test_sdk_membership import Harness, commit_response

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.codec import ErrorCode
from trafka.codec.messages import k11_join_group as jg
from trafka.codec.messages import k12_heartbeat as hb
from trafka.codec.messages import k14_sync_group as sg
from trafka.sdk import (
    ConfigWarning,
    ConsumerConfig,
    NewTopic,
    TopicPartition,
    open_admin,
    open_consumer,
    open_producer,
)
from trafka.sdk.assignors import encode_assignment
from trafka.sdk.membership import Kind
from trafka.sdk.statistics import (
    WINDOW_S,
    NodeCounters,
    Windowed,
    WindowView,
    coordinator_statistics,
)

# -- Java's windowed statistics, on a clock the test moves ----------------------------------


def test_a_rate_spans_at_least_one_full_window_as_javas_rate() -> None:
    w = Windowed()
    for t in range(6):  # six events in the first 6 s
        w.record(float(t), 10.0)
    view = WindowView([w], 10.0)
    # Rate.windowSize: 10 s elapsed, stretched by one full 30 s window (2 samples - 1).
    assert view.events == 6 and view.span == 40.0
    assert view.rate() == 6 / 40 and view.sum_rate() == 60 / 40
    assert view.rate(3600.0) == 6 / 40 * 3600
    assert (view.avg(), view.max) == (10.0, 10.0)
    assert (w.count, w.sum) == (6, 60.0)


def test_samples_roll_every_30_s_and_leave_after_60_s() -> None:
    w = Windowed()
    for _ in range(3):
        w.record(0.0, 1.0)
    w.record(35.0, 5.0)  # 35 s after the first sample started: a new sample
    w.record(36.0, 3.0)
    at50 = WindowView([w], 50.0)
    # Both samples live; 50 s span is more than one full window: no stretch.
    assert (at50.events, at50.span, at50.max) == (5, 50.0, 5.0)
    assert at50.rate() == 5 / 50 and at50.avg() == 11 / 5
    at65 = WindowView([w], 65.0)  # the first sample is 65 s old: gone
    assert (at65.events, at65.span, at65.max, at65.avg()) == (2, 30.0, 5.0, 4.0)
    w.record(70.0, 1.0)  # a third sample: the first is dropped from memory too
    assert [s[0] for s in w.samples] == [35.0, 70.0]
    empty = WindowView([Windowed()], 100.0)
    assert empty.rate() == 0.0 and math.isnan(empty.avg()) and math.isnan(empty.max)
    assert w.count == 6  # the all-time count never drops


def test_node_counters_feed_the_windows_only_with_a_clock() -> None:
    c = NodeCounters()
    c.sent(3, 100)  # no clock: totals only
    c.sent(3, 300, 1.0)
    c.answered(3, 0.25, 1.25)
    c.received(40, 1.25)
    c.received(10, None)
    assert (c.requests_sent, c.bytes_sent, c.bytes_received) == (2, 400, 50)
    assert (c.window_sent.count, c.window_sent.sum) == (1, 300.0)
    assert (c.window_answered.count, c.window_answered.sum) == (1, 0.25)
    assert (c.window_received.count, c.window_received.sum) == (1, 40.0)


# -- the coordinator metrics, measured in the state machine ------------------------------------


def coordinator(h: Harness) -> Any:
    m = h.m
    latency = m.rebalance_latency
    return coordinator_statistics(
        m.metrics, latency.window, latency.total, latency.ended, len(m.owned), h.now
    )


def test_join_sync_heartbeat_commit_and_rebalance_are_timed_by_the_drivers_clock() -> None:
    h = Harness(assignors=("range",))
    h.m.set_subscription(["t"], {"t": 4})
    h.find()
    before = coordinator(h)
    assert (before.rebalance_total, before.last_rebalance_seconds_ago) == (0, -1)
    assert before.last_heartbeat_seconds_ago == -1 and math.isnan(before.join_time_avg)

    h.step()
    join = h.take(Kind.JOIN)
    h.m.sending(join, h.now)
    h.now += 0.25
    h.answer(
        join,
        jg.JoinGroupResponse(
            generation_id=1, protocol_name="range", leader="other", member_id="m1"
        ),
    )
    h.step()
    sync = h.take(Kind.SYNC)
    h.m.sending(sync, h.now)
    h.now += 0.125
    h.answer(sync, sg.SyncGroupResponse(assignment=encode_assignment({TopicPartition("t", 1)})))
    rebalanced_at = h.now
    h.step()

    h.step(h.m.config.heartbeat_interval)
    beat = h.take(Kind.HEARTBEAT)
    h.m.sending(beat, h.now)
    beat_sent = h.now
    h.now += 0.0625
    h.answer(beat, hb.HeartbeatResponse())

    offsets = {TopicPartition("t", 1): 5}
    first_commit_answer = None
    for took in (0.5, 1.0, 1.5):
        h.m.commit(offsets, h.now)
        h.step()
        request = h.take(Kind.OFFSET_COMMIT)
        h.m.sending(request, h.now)
        h.now += took
        h.answer(request, commit_response(offsets))
        first_commit_answer = first_commit_answer or h.now
    h.now += 2.0
    c = coordinator(h)
    assert (c.join_total, c.join_time_avg, c.join_time_max) == (1, 250.0, 250.0)
    assert (c.sync_total, c.sync_time_avg, c.sync_time_max) == (1, 125.0, 125.0)
    assert (c.heartbeat_total, c.heartbeat_response_time_max) == (1, 62.5)
    assert (c.commit_total, c.commit_latency_avg, c.commit_latency_max) == (3, 1000.0, 1500.0)
    # All three commits fell in one sample, less than a window ago: Java's Rate
    # divides by the time since that sample started plus one full window.
    assert first_commit_answer is not None
    assert c.commit_rate == pytest.approx(3 / (h.now - first_commit_answer + WINDOW_S))
    # The rebalance: from the JoinGroup's sending to the SyncGroup's answer.
    assert (c.rebalance_total, c.rebalance_latency_avg, c.rebalance_latency_max) == (
        1,
        375.0,
        375.0,
    )
    assert c.rebalance_latency_total == 375.0 and c.failed_rebalance_total == 0
    assert c.assigned_partitions == 1
    # Whole seconds, as Java's: 3 + 0.0625 + 3 + 2 s since the rebalance ended,
    # 0.0625 + 3 + 2 s since the heartbeat went.
    assert h.now - rebalanced_at == 8.0625 and h.now - beat_sent == 5.0625
    assert (c.last_rebalance_seconds_ago, c.last_heartbeat_seconds_ago) == (8, 5)


def test_failed_joins_are_failed_rebalances_member_id_required_too() -> None:
    # Java's AbstractCoordinator records a failed rebalance whenever the join
    # future fails, and it fails on MEMBER_ID_REQUIRED (KIP-394) as on any error.
    h = Harness()
    h.m.set_subscription(["t"], {"t": 4})
    h.find()
    h.step()
    join = h.take(Kind.JOIN)
    h.m.sending(join, h.now)
    h.answer(join, jg.JoinGroupResponse(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id="m1"))
    assert coordinator(h).failed_rebalance_total == 1
    h.step()
    join = h.take(Kind.JOIN)
    h.m.sending(join, h.now)
    h.answer(join, jg.JoinGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID))
    c = coordinator(h)
    assert (c.failed_rebalance_total, c.join_total, c.rebalance_total) == (2, 0, 0)
    assert c.failed_rebalance_rate_per_hour == pytest.approx(2 * 3600 / WINDOW_S)
    assert not h.m.metrics.sent_at  # nothing kept for answered requests


def test_the_consumer_protocol_times_its_heartbeats_but_not_its_leave() -> None:
    # KIP-848: ConsumerGroupHeartbeat is the heartbeat (Java's consumer-coordinator
    # heartbeat metrics count its answers); the rebalance is the reconciliation.
    h = ConsumerProtocolHarness()
    h.m.set_subscription(["t"], {"t": 4})
    h.find()
    h.step()
    join = h.take()
    h.m.sending(join, h.now)
    h.now += 0.25
    h.answer(
        join,
        R(
            member_id="m1",
            member_epoch=1,
            heartbeat_interval_ms=1000,
            assignment=R.Assignment(
                topic_partitions=[R.TopicPartitions(topic_id=TID, partitions=[0, 1])]
            ),
        ),
    )
    h.step()
    assert coordinator(h).assigned_partitions == len(h.m.owned) == 2
    h.now += 2.5
    leave = h.m.leave(h.now)
    assert leave is not None
    h.m.sending(leave, h.now)
    h.answer(leave, R(member_id="m1", member_epoch=-1))
    c = coordinator(h)
    assert (c.heartbeat_total, c.heartbeat_response_time_max) == (1, 250.0)
    assert (
        c.last_heartbeat_seconds_ago == 2
    )  # 2.75 s since the join went; the leave is no heartbeat
    assert (c.rebalance_total, c.join_total, c.sync_total) == (1, 0, 0)
    assert c.assigned_partitions == 0  # left


# -- the Prometheus series, against a real broker --------------------------------------------


@pytest.fixture
def broker(tmp_path: Any) -> Iterator[RunningBroker]:
    # A broker of the test's own: its request counts are this test's clients' only.
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path,
        group_initial_rebalance_delay_ms=0,
        metrics_listen="127.0.0.1:0",
    ) as running:
        yield running


def scrape(address: tuple[str, int] | None) -> dict[tuple[str, frozenset[Any]], float]:
    assert address is not None
    with urllib.request.urlopen(f"http://{address[0]}:{address[1]}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def series(scraped: dict[tuple[str, frozenset[Any]], float], name: str) -> dict[str, float]:
    """``name``'s samples by their ``node_id`` (or ``request``) label, else ``""``."""
    out = {}
    for (n, labels), value in scraped.items():
        if n == name:
            tags = dict(labels)
            out[tags.get("node_id", tags.get("request", ""))] = value
    return out


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_node_metrics_count_the_requests_the_broker_handled(
    broker: RunningBroker, backend: str
) -> None:
    topic = fresh("nodes")
    servers = broker.bootstrap_servers
    handled = "kafka_network_requestmetrics_requests_total"

    async def main() -> tuple[dict[Any, float], dict[Any, float], dict[Any, float], Any]:
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(topic, 2)])
        baseline = await anyio.to_thread.run_sync(scrape, broker.metrics_address)
        async with open_producer(
            bootstrap_servers=servers,
            client_id="p-nodes",
            metrics_listen="127.0.0.1:0",
            enable_metrics_push=False,
        ) as producer:
            with anyio.fail_after(30):
                for i in range(20):
                    await producer.send(topic, b"v", key=b"k%d" % i)
                await producer.flush()
            client = await anyio.to_thread.run_sync(scrape, producer.metrics_address)
            server = await anyio.to_thread.run_sync(scrape, broker.metrics_address)
            stats = producer.statistics()
        return baseline, client, server, stats

    baseline, client, server, stats = anyio.run(main, backend=backend)
    nodes = "kafka_producer_producer_node_metrics"
    requests = series(client, f"{nodes}_request_total")
    responses = series(client, f"{nodes}_response_total")
    # Java's node names: node-<id> for the broker, node--1 for the bootstrap address.
    assert set(requests) == {f"node-{n}" for n in stats.brokers}
    assert "node--1" in requests and any(n >= 0 for n in stats.brokers)
    # Every request the producer framed was handled by the broker, and answered.
    before, after = series(baseline, handled), series(server, handled)
    by_broker = sum(after.values()) - sum(before.values())
    assert sum(requests.values()) == by_broker > 0
    assert requests == responses
    per_api: dict[str, int] = {}
    for b in stats.brokers.values():
        for name, a in b.apis.items():
            per_api[name] = per_api.get(name, 0) + a.requests
    assert per_api == {
        name: n - before.get(name, 0) for name, n in after.items() if n - before.get(name, 0)
    }
    # Bytes each way match the snapshot's wire totals; the windows saw them all.
    outgoing = series(client, f"{nodes}_outgoing_byte_total")
    incoming = series(client, f"{nodes}_incoming_byte_total")
    for node, b in stats.brokers.items():
        name = f"node-{node}"
        assert (outgoing[name], incoming[name]) == (b.bytes_sent, b.bytes_received)
        assert b.window is not None
        assert series(client, f"{nodes}_request_size_max")[name] == b.window.request_size_max
    produce_node = next(n for n, b in stats.brokers.items() if "Produce" in b.apis)
    latency = series(client, f"{nodes}_request_latency_max")[f"node-{produce_node}"]
    assert latency >= 0 and not math.isnan(latency)
    assert series(client, f"{nodes}_request_rate")[f"node-{produce_node}"] > 0


class Assignments:
    """A rebalance listener counting what the group really did."""

    def __init__(self) -> None:
        self.assigned = 0

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned += 1


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_coordinator_metrics_follow_commits_and_rebalances(
    broker: RunningBroker, backend: str
) -> None:
    topic, group = fresh("coord"), fresh("g")
    servers = broker.bootstrap_servers
    coord = "kafka_consumer_consumer_coordinator_metrics"
    cid = ("client_id", "c-coord")
    commits = 4

    def metric(scraped: dict[Any, float], name: str) -> float:
        return scraped[(f"{coord}_{name}", frozenset({cid}))]

    async def main() -> dict[str, Any]:
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(topic, 3)])
        async with open_producer(bootstrap_servers=servers) as producer:
            for p in range(3):
                await producer.send(topic, b"v", partition=p)
            await producer.flush()
        settings: dict[str, Any] = {
            "bootstrap_servers": servers,
            "group_id": group,
            "auto_offset_reset": "earliest",
            "enable_auto_commit": False,
            "partition_assignment_strategy": ("range",),  # eager: one rebalance per change
            "heartbeat_interval_ms": 100,
            "enable_metrics_push": False,
        }
        seen = Assignments()
        out: dict[str, Any] = {}
        start = await anyio.to_thread.run_sync(scrape, broker.metrics_address)
        async with open_consumer(
            client_id="c-coord", metrics_listen="127.0.0.1:0", **settings
        ) as c1:
            c1.subscribe([topic], listener=seen)
            with anyio.fail_after(30):
                got = 0
                while got < 3:
                    got += sum(len(r) for r in (await c1.getmany(timeout_ms=200)).values())
                before = await anyio.to_thread.run_sync(scrape, broker.metrics_address)
                for _ in range(commits):
                    await c1.commit()
                out["alone"] = await anyio.to_thread.run_sync(scrape, c1.metrics_address)
                after = await anyio.to_thread.run_sync(scrape, broker.metrics_address)
                out["alone_assignment"] = c1.assignment()
                out["alone_listener"] = seen.assigned
                handled = "kafka_network_requestmetrics_requests_total"
                out["broker_joins"] = series(after, handled)["JoinGroup"] - series(
                    start, handled
                ).get("JoinGroup", 0)
                out["broker_commits"] = series(after, handled)["OffsetCommit"] - series(
                    before, handled
                ).get("OffsetCommit", 0)
                async with open_consumer(client_id="c-second", **settings) as c2:
                    c2.subscribe([topic])
                    while not (c2.assignment() and len(c1.assignment()) < 3):
                        await c1.getmany(timeout_ms=100)
                        await c2.getmany(timeout_ms=100)
                    out["shared"] = await anyio.to_thread.run_sync(scrape, c1.metrics_address)
                    out["shared_assignment"] = (c1.assignment(), c2.assignment())
                    out["shared_listener"] = seen.assigned
        return out

    out = anyio.run(main, backend=backend)
    alone = out["alone"]
    assert metric(alone, "commit_total") == commits == out["broker_commits"]
    assert metric(alone, "commit_latency_max") >= metric(alone, "commit_latency_avg") >= 0
    assert metric(alone, "rebalance_total") == out["alone_listener"] == 1
    assert metric(alone, "assigned_partitions") == len(out["alone_assignment"]) == 3
    assert metric(alone, "join_total") == metric(alone, "sync_total") == 1
    # brokerlite answers a new member's first JoinGroup with MEMBER_ID_REQUIRED
    # (KIP-394): one failed step, as Java counts it, then the join that worked.
    assert metric(alone, "failed_rebalance_total") == 1
    joins = metric(alone, "join_total") + metric(alone, "failed_rebalance_total")
    assert joins == out["broker_joins"] == 2
    assert metric(alone, "last_rebalance_seconds_ago") >= 0
    shared = out["shared"]
    mine, theirs = out["shared_assignment"]
    assert mine and theirs and not mine & theirs and len(mine | theirs) == 3
    assert metric(shared, "rebalance_total") == out["shared_listener"] == 2
    assert metric(shared, "assigned_partitions") == len(mine)
    assert metric(shared, "commit_total") == commits  # no commit since


@pytest.mark.parametrize(
    "key, value, advice",
    [
        ("metrics.num.samples", 3, "2 samples of 30 s"),
        ("metrics.sample.window.ms", 10_000, "2 samples of 30 s"),
        ("metric.reporters", "com.example.Reporter", "metrics.listen"),
    ],
)
def test_javas_metrics_settings_are_taken_with_a_warning_where_they_differ(
    key: str, value: object, advice: str
) -> None:
    """Java's windowed-metrics settings are taken (issue #62); trafka's windows
    are always Java's default (2 samples of 30 s, CommonClientConfigs), so
    another value warns, saying so, and Java's default does not."""
    with pytest.warns(ConfigWarning, match=advice):
        ConsumerConfig.from_dict({key: value})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ConsumerConfig.from_dict({"metrics.num.samples": 2, "metrics.recording.level": "DEBUG"})
