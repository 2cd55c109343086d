"""A consumer through the proxy in front of Apache Kafka when the leader of the
partition it reads moves (issue #64: under the fault schedule ``leader-zk`` the
transactional processor's consumer, through the proxy, read nothing more after
the heal; issue #83: leader hints through the proxy).

What Kafka defines: a client caches metadata "until it receives an error
indicating that the metadata is out of date", an error code "indicating that
this broker no longer hosts the partition", and then refreshes it and tries
again (Kafka's protocol guide, "Partitioning and bootstrapping"); a fetch
carrying a leader epoch older than the broker's is refused FENCED_LEADER_EPOCH
(KIP-320), a fetch to a replica that no longer leads NOT_LEADER_OR_FOLLOWER.
Kafka 3.7+ adds the new leader to those refusals (KIP-951: ``current_leader``
per partition, the leader's address in ``node_endpoints``), in Fetch from v16
and Produce from v10.
The proxy lets clients fetch at v16+ and names its own listener for that
leader, so a client follows the hint without waiting for metadata: the tests on
Kafka 4.4 hold every Metadata request after the move to show it.
``metadata.max.age.ms`` is set far past the tests' deadlines: no periodic
refresh brings the consumer to the new leader in time.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

import anyio
import pytest
from hint_helpers import (
    MAX_AGE_MS,
    MetadataGate,
    N,
    follow_the_hint,
    move_leader,
    produce,
    read,
)
from kafka_peers import KafkaCluster
from produce_hints import ProducerGate, check_acks, followed, produce_across_a_move
from proxy_helpers import create, fresh

from trafka.codec import ApiKey
from trafka.proxy import proxy_in_thread
from trafka.proxy.filters import FilterContext, ProxyServices
from trafka.sdk import TopicPartition, open_consumer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


async def _follow(servers: str, proxied: str, topic: str) -> None:
    tp = TopicPartition(topic, 0)
    before = [b"before-%d" % i for i in range(N)]
    after = [b"after-%d" % i for i in range(N)]
    await produce(servers, topic, before)
    async with open_consumer(
        bootstrap_servers=proxied, metadata_max_age_ms=MAX_AGE_MS, enable_auto_commit=False
    ) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        # Generous: a loaded machine's first connections through the proxy.
        assert await read(consumer, N, 60) == before
        with anyio.fail_after(120):
            old, new = await move_leader(servers, tp)
            await produce(servers, topic, after)
        got = await read(consumer, N, 60)
    assert got == after, (
        f"the consumer read {len(got)} of {N} records in 60 s after the leader moved "
        f"from broker {old} to {new} (metadata.max.age.ms {MAX_AGE_MS})"
    )


def test_a_consumer_through_the_proxy_follows_a_moved_leader(kafka3_cluster: KafkaCluster) -> None:
    servers = kafka3_cluster.bootstrap_servers
    topic = fresh("moved")
    create(servers, topic, 1, 3, served=True)
    with proxy_in_thread(upstream=tuple(servers.split(",")), port=0) as px:
        anyio.run(_follow, servers, px.bootstrap_servers, topic, backend="trio")


def test_a_consumer_through_the_proxy_takes_the_new_leader_from_the_fetch_answer(
    kafka4_cluster: KafkaCluster,
) -> None:
    """KIP-951 through the proxy, against Kafka 4.4: Fetch v16+ answers a
    refused partition with ``current_leader`` and the leader's address in
    ``node_endpoints``; the proxy names its own listener for that broker there,
    and the SDK's consumer fetches from it while every Metadata request it
    makes is held by the proxy, so the hint alone brought it there."""
    servers = kafka4_cluster.bootstrap_servers
    topic = fresh("hinted")
    create(servers, topic, 1, 3, served=True)
    gate = MetadataGate()
    with proxy_in_thread(upstream=tuple(servers.split(",")), port=0, filters=(gate,)) as px:
        new = anyio.run(follow_the_hint, servers, px, gate, topic, backend="trio")
        listeners = dict(px.statistics.nodes)
    assert gate.fetch_versions and min(gate.fetch_versions) >= 16
    assert new in gate.fetched_on, (new, gate.fetched_on)
    assert gate.named, "no Fetch answer named a leader"
    for node, host, port in gate.named:
        assert (host, port) == listeners[node], (node, host, port, listeners)


def test_librdkafka_through_the_proxy_takes_the_new_leader_from_the_fetch_answer(
    kafka4_cluster: KafkaCluster,
) -> None:
    """The same with confluent-kafka's consumer (librdkafka, which follows
    KIP-951's hints from 2.4): every Metadata request it makes after the move is
    held, yet it reads the records the new leader took."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    servers = kafka4_cluster.bootstrap_servers
    topic = fresh("hinted-rdk")
    create(servers, topic, 1, 3, served=True)
    before = [b"before-%d" % i for i in range(N)]
    after = [b"after-%d" % i for i in range(N)]
    anyio.run(produce, servers, topic, before, backend="trio")
    gate = MetadataGate()
    with proxy_in_thread(upstream=tuple(servers.split(",")), port=0, filters=(gate,)) as px:
        consumer = Consumer(
            {
                "bootstrap.servers": px.bootstrap_servers,
                "group.id": fresh("g"),
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": MAX_AGE_MS,
                "metadata.max.age.ms": MAX_AGE_MS,
            }
        )
        try:
            consumer.assign([CTopicPartition(topic, 0, 0)])

            def consume(wanted: int) -> list[bytes]:
                got: list[bytes] = []
                for _ in range(120):  # polls of 0.5 s at most: a deadline of 60 s
                    if len(got) >= wanted:
                        break
                    for m in consumer.consume(wanted - len(got), timeout=0.5):
                        assert m.error() is None, m.error()
                        got.append(m.value())
                return got

            assert consume(N) == before
            gate.shut = True
            try:
                tp = TopicPartition(topic, 0)

                async def move_and_write() -> tuple[int, int]:
                    with anyio.fail_after(120):
                        moved = await move_leader(servers, tp)
                        await produce(servers, topic, after)
                    return moved

                old, new = anyio.run(move_and_write, backend="trio")
                got = consume(N)
            finally:
                gate.open()
        finally:
            consumer.close()
        listeners = dict(px.statistics.nodes)
    assert got == after, f"read {len(got)} of {N} after the leader moved from {old} to {new}"
    assert min(gate.fetch_versions) >= 16 and new in gate.fetched_on
    assert gate.named and all((h, p) == listeners[n] for n, h, p in gate.named), gate.named


def test_every_producer_takes_the_new_leader_from_the_produce_answer(
    kafka4_cluster: KafkaCluster,
) -> None:
    """KIP-951 on Produce (v10+), against Kafka 4.4: a partition whose leader
    moved is refused NOT_LEADER_OR_FOLLOWER with the new leader and its address;
    a forwarding proxy (route_keys none) names its own listener there, and
    trafka's SDK, confluent-kafka and Kafka's Java producers, each plain,
    idempotent and transactional, write the rest to it while every Metadata
    request they make is held. The same producers through a routing proxy
    (which follows the leader itself, docs/proxy.md "Leaders") cross the same
    move. Every acknowledged record is read back once, where its report says,
    in the order it was sent (tests/proxy/produce_hints.py)."""
    servers = kafka4_cluster.bootstrap_servers
    topic = fresh("hinted-producers")
    create(servers, topic, 1, 3, served=True)
    gate = ProducerGate()
    upstream = tuple(servers.split(","))
    with (
        proxy_in_thread(upstream=upstream, port=0, route_keys="none", filters=(gate,)) as px,
        proxy_in_thread(upstream=upstream, port=0) as routed,
    ):
        ways = {"fwd": px.bootstrap_servers, "routed": routed.bootstrap_servers}
        moved = anyio.run(produce_across_a_move, servers, ways, gate, topic, backend="trio")
        listeners = dict(px.statistics.nodes)
        assert routed.statistics.routing.requests_idempotent > 0
    followed(gate, moved, "fwd", listeners)
    check_acks(servers, topic, moved, tuple(ways))


class ShutOnRecords(MetadataGate):
    """A :class:`MetadataGate` that shuts itself once a Fetch answer carrying
    records passed to the client (the records written before the move)."""

    def attach(self, services: ProxyServices) -> None:
        super().attach(services)
        self.read_before = threading.Event()

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        records = ctx.api_key == ApiKey.FETCH and any(
            p.records for t in body.responses for p in t.partitions
        )
        if records and not self.shut:
            self.shut = True
            self.read_before.set()
        return super().on_response(ctx, body)


def test_kafkas_java_consumer_through_the_proxy_takes_the_new_leader_from_the_fetch_answer(
    kafka4_cluster: KafkaCluster,
) -> None:
    """The same with Kafka 4.4's own Java consumer (tests/interop/java's
    ``read_topic``: assigned, metadata.max.age.ms 15 minutes): once it has
    read the records written before the move, every Metadata request it makes
    is held, yet it reads those the new leader took."""
    import java_harness

    servers = kafka4_cluster.bootstrap_servers
    topic = fresh("hinted-java")
    create(servers, topic, 1, 3, served=True)
    anyio.run(produce, servers, topic, [b"before-%d" % i for i in range(N)], backend="trio")
    gate = ShutOnRecords()
    with (
        proxy_in_thread(upstream=tuple(servers.split(",")), port=0, filters=(gate,)) as px,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        reading = pool.submit(
            java_harness.run,
            px.bootstrap_servers,
            ["read_topic"],
            timeout=150,
            properties={"harness.topic": topic, "harness.count": str(2 * N)},
        )
        try:
            assert gate.read_before.wait(120), "the Java consumer read nothing"

            async def move_and_write() -> tuple[int, int]:
                with anyio.fail_after(120):
                    moved = await move_leader(servers, TopicPartition(topic, 0))
                    await produce(servers, topic, [b"after-%d" % i for i in range(N)])
                return moved

            old, new = anyio.run(move_and_write, backend="trio")
            outcomes, stderr = reading.result()
        finally:
            gate.open()
        listeners = dict(px.statistics.nodes)
    outcome = outcomes["read_topic"]
    assert outcome["ok"], (outcome, stderr[-3000:])
    wanted = [f"before-{i}" for i in range(N)] + [f"after-{i}" for i in range(N)]
    assert outcome["details"]["values"] == wanted
    assert min(gate.fetch_versions) >= 16 and new in gate.fetched_on, (old, new, gate.fetched_on)
    assert gate.named and all((h, p) == listeners[n] for n, h, p in gate.named), gate.named
