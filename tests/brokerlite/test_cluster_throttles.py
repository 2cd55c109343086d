"""Replication throttles in a 3-node cluster (real ZooKeeper), set as
``kafka-reassign-partitions --execute --throttle`` sets them and removed as its
``--verify`` removes them, through confluent-kafka's AdminClient (librdkafka).

Kafka's behaviour, from its ops documentation ("Limiting Bandwidth Usage during
Data Migration") and KIP-73 ("Replication Quotas"), ZooKeeper mode:

* the tool sets the brokers' dynamic configs ``leader.replication.throttled.rate``
  and ``follower.replication.throttled.rate`` (``/config/brokers/<id>``) on every
  broker of the move, and the topic's ``leader.replication.throttled.replicas``
  (the replicas the partition moves from, as ``partition:broker``) and
  ``follower.replication.throttled.replicas`` (those it moves to), each change
  announced by a ``/config/changes/config_change_N`` notification;
* the leader then sends the throttled, out-of-sync replica no more than the rate
  allows, and the follower fetches no more;
* ``--verify``, once the move is done, deletes the four configs (IncrementalAlterConfigs
  DELETE), which lifts the throttle.

The brokers' replication quotas run on an injected clock that the test moves,
so what is measured is bytes per window of that clock, not time.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from brokerlite_wire import broker_config_request
from cluster_helpers import change_notifications, run, until
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.codec.errors import ErrorCode
from trafka.sdk import NewTopic, open_admin, open_producer

pytestmark = pytest.mark.timeout(150)

TOPIC = "throttled"
RATE = 20_000  # bytes per second of the injected clock
FETCH_BYTES = 4_096  # replica.fetch.max.bytes: what one fetch may carry past the bound
RECORDS = 200
VALUE = b"v" * 1_000
T0 = 1_700_000_000_000

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


class Clock:
    """The replication quotas' milliseconds, moved by the test only."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def _alter(admin: AdminClient, resources: list[ConfigResource]) -> dict[str, int]:
    """IncrementalAlterConfigs, one call per resource (librdkafka takes one broker
    resource a call, and sends it to that broker); each one's error code (0: done)."""
    out: dict[str, int] = {}
    for resource in resources:
        [future] = admin.incremental_alter_configs([resource]).values()
        key = f"{resource.restype.name}:{resource.name}"
        try:
            future.result(timeout=30)
            out[key] = 0
        except KafkaException as exc:
            out[key] = exc.args[0].code()
    return out


def _ops(op: AlterConfigOpType, configs: dict[str, str | None]) -> list[ConfigEntry]:
    return [ConfigEntry(k, v, incremental_operation=op) for k, v in configs.items()]


def _described(admin: AdminClient, resource: ConfigResource) -> dict[str, tuple[str, Any]]:
    """DescribeConfigs: name -> (value, source) of the resource's configs."""
    [future] = admin.describe_configs([resource]).values()
    entries = future.result(timeout=30)
    return {name: (e.value, e.source) for name, e in entries.items()}


def _znodes(zk: str, paths: list[str]) -> tuple[dict[str, Any], list[Any]]:
    """Documents at ``paths`` (None where absent) and every change notification."""
    client = KazooClient(hosts=zk, timeout=10.0)
    client.start(timeout=10.0)
    try:
        docs = {p: json.loads(client.get(p)[0]) if client.exists(p) else None for p in paths}
        return docs, change_notifications(client)
    finally:
        client.stop()
        client.close()


def _copied(cluster: LocalCluster, node: int) -> int:
    """Bytes of the partition's log on ``node`` (the moving replica)."""
    plog = cluster.node(node).broker.logs.partition(TOPIC, 0)
    return plog.read(plog.log_start_offset, 1 << 30, upper_bound=plog.log_end_offset).size


def test_a_throttled_reassignment_moves_at_the_rate_and_completes_once_lifted(
    zk: str, raw_client: Any
) -> None:
    async def test() -> None:
        clock = Clock()
        async with serve_cluster(
            3, zookeeper_connect=zk, replica_fetch_max_bytes=FETCH_BYTES
        ) as cluster:
            for n in cluster.node_ids:
                cluster.node(n).broker.cluster.replication_quotas.set_clock(clock)
            bs = cluster.bootstrap_servers
            view = cluster.node(1).broker.cluster
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic(TOPIC, 1, 1)])
                await until(lambda: view.leader(TOPIC, 0) >= 0, "the partition has a leader")
                [source] = view.replicas_of(TOPIC, 0)
                dest = next(n for n in cluster.node_ids if n != source)
                async with open_producer(bootstrap_servers=bs, acks="all", linger_ms=0) as p:
                    for _ in range(RECORDS):
                        await p.send_and_wait(TOPIC, VALUE)
                total = _copied(cluster, source)
                assert total > 10 * RATE

                # --execute --throttle RATE: what Kafka's tool sends.
                confluent = AdminClient({"bootstrap.servers": bs})
                topic = ConfigResource(
                    ResourceType.TOPIC,
                    TOPIC,
                    incremental_configs=_ops(
                        AlterConfigOpType.SET,
                        {LEADER_REPLICAS: f"0:{source}", FOLLOWER_REPLICAS: f"0:{dest}"},
                    ),
                )
                brokers = [
                    ConfigResource(
                        ResourceType.BROKER,
                        str(b),
                        incremental_configs=_ops(
                            AlterConfigOpType.SET,
                            {LEADER_RATE: str(RATE), FOLLOWER_RATE: str(RATE)},
                        ),
                    )
                    for b in (source, dest)
                ]
                done = await trio.to_thread.run_sync(_alter, confluent, [topic, *brokers])
                assert set(done.values()) == {0}, done

                # Bad values are refused with a clear error and change nothing.
                bad = await trio.to_thread.run_sync(
                    _alter,
                    confluent,
                    [
                        ConfigResource(
                            ResourceType.TOPIC,
                            TOPIC,
                            incremental_configs=_ops(AlterConfigOpType.SET, {LEADER_REPLICAS: "0"}),
                        ),
                        ConfigResource(
                            ResourceType.BROKER,
                            str(source),
                            incremental_configs=_ops(AlterConfigOpType.SET, {LEADER_RATE: "-1"}),
                        ),
                    ],
                )
                assert set(bad.values()) == {ErrorCode.INVALID_CONFIG}, bad
                static = await trio.to_thread.run_sync(
                    _alter,
                    confluent,
                    [
                        ConfigResource(
                            ResourceType.BROKER,
                            str(dest),
                            incremental_configs=_ops(
                                AlterConfigOpType.SET, {"log.retention.ms": "1"}
                            ),
                        )
                    ],
                )
                assert set(static.values()) == {ErrorCode.INVALID_REQUEST}, static

                # DescribeConfigs shows them (each broker its own), and ZooKeeper has
                # them in Kafka's layout, each change announced.
                described = await trio.to_thread.run_sync(
                    _described, confluent, ConfigResource(ResourceType.BROKER, str(source))
                )
                assert described[LEADER_RATE] == (
                    str(RATE),
                    ConfigSource.DYNAMIC_BROKER_CONFIG.value,
                )
                assert described[FOLLOWER_RATE][0] == str(RATE)
                described = await trio.to_thread.run_sync(
                    _described, confluent, ConfigResource(ResourceType.TOPIC, TOPIC)
                )
                assert described[LEADER_REPLICAS][0] == f"0:{source}"
                assert described[FOLLOWER_REPLICAS][0] == f"0:{dest}"
                paths = [f"/config/brokers/{b}" for b in (source, dest)] + [
                    f"/config/topics/{TOPIC}"
                ]
                docs, notes = await trio.to_thread.run_sync(_znodes, zk, paths)
                for b in (source, dest):
                    assert docs[f"/config/brokers/{b}"] == {
                        "version": 1,
                        "config": {LEADER_RATE: str(RATE), FOLLOWER_RATE: str(RATE)},
                    }
                    assert {"version": 2, "entity_path": f"brokers/{b}"} in notes
                topic_doc = docs[f"/config/topics/{TOPIC}"]
                assert topic_doc["config"][LEADER_REPLICAS] == f"0:{source}"
                assert topic_doc["config"][FOLLOWER_REPLICAS] == f"0:{dest}"
                assert {"version": 2, "entity_path": f"topics/{TOPIC}"} in notes

                leader_q = cluster.node(source).broker.cluster.replication_quotas.leader
                follower_q = cluster.node(dest).broker.cluster.replication_quotas.follower
                await until(
                    lambda: (
                        leader_q.bound == RATE
                        and follower_q.bound == RATE
                        and leader_q.is_throttled(TOPIC, 0)
                        and follower_q.is_throttled(TOPIC, 0)
                    ),
                    "both brokers apply the throttle",
                )

                # The move, under the throttle: the clock stands still, so one window's
                # worth (and at most one fetch more) crosses, then nothing.
                moved = await admin.alter_partition_reassignments({(TOPIC, 0): [source, dest]})
                assert list(moved.values()) == [None]
                await until(lambda: leader_q.exceeded(), "the leader's quota is used up")
                await until(lambda: follower_q.exceeded(), "the follower's quota is used up")
                await trio.sleep(1.0)  # rounds of fetches, for a broken throttle to show
                first = _copied(cluster, dest)
                assert 0 < first <= RATE + FETCH_BYTES, first
                # The measured rates are in the brokers' metrics (Kafka's
                # LeaderReplication and FollowerReplication byte-rate).
                assert _gauge(cluster, source, "kafka_server_leaderreplication_byte_rate") == (
                    leader_q.rate()
                )
                assert leader_q.rate() > RATE
                assert _gauge(cluster, dest, "kafka_server_followerreplication_byte_rate") > RATE
                assert await admin.list_partition_reassignments() != {}

                # Two windows on: SimpleRate measures since the first sample, so about
                # one more window's worth crosses.
                clock.now += 2_000
                await until(
                    lambda: _copied(cluster, dest) > first, "more bytes after the clock moved"
                )
                await until(lambda: leader_q.exceeded() or follower_q.exceeded(), "used up again")
                await trio.sleep(1.0)
                second = _copied(cluster, dest)
                assert second <= 2 * RATE + FETCH_BYTES, second
                assert second < total

                # --verify: the four configs deleted, the move completes.
                lifted = await trio.to_thread.run_sync(
                    _alter,
                    confluent,
                    [
                        ConfigResource(
                            ResourceType.TOPIC,
                            TOPIC,
                            incremental_configs=_ops(
                                AlterConfigOpType.DELETE,
                                {LEADER_REPLICAS: None, FOLLOWER_REPLICAS: None},
                            ),
                        ),
                        *[
                            ConfigResource(
                                ResourceType.BROKER,
                                str(b),
                                incremental_configs=_ops(
                                    AlterConfigOpType.DELETE,
                                    {LEADER_RATE: None, FOLLOWER_RATE: None},
                                ),
                            )
                            for b in (source, dest)
                        ],
                    ],
                )
                assert set(lifted.values()) == {0}, lifted
                await until(
                    lambda: (
                        list(view.replicas_of(TOPIC, 0)) == [source, dest]
                        and not view.image.topics[TOPIC].adding
                    ),
                    "the reassignment completes",
                )
                assert await admin.list_partition_reassignments() == {}
                await until(lambda: _copied(cluster, dest) == total, "every byte moved")
                assert clock.now == T0 + 2_000  # the throttle was lifted, not outrun
                described = await trio.to_thread.run_sync(
                    _described, confluent, ConfigResource(ResourceType.BROKER, str(source))
                )
                assert LEADER_RATE not in described and FOLLOWER_RATE not in described
                docs, _ = await trio.to_thread.run_sync(_znodes, zk, paths)
                assert docs[f"/config/brokers/{source}"] == {"version": 1, "config": {}}
                assert LEADER_REPLICAS not in docs[f"/config/topics/{TOPIC}"]["config"]
                assert not leader_q.is_throttled(TOPIC, 0) and leader_q.bound is None

                # As Kafka's ZooKeeper-mode brokers: a broker changes only its own
                # configs, or the cluster's default (resource name "", <default>).
                other = await trio.to_thread.run_sync(
                    _raw_alter, raw_client, cluster, source, str(dest), "123"
                )
                assert other.error_code == ErrorCode.INVALID_REQUEST
                assert "Unexpected broker id" in other.error_message
                default = await trio.to_thread.run_sync(
                    _raw_alter, raw_client, cluster, source, "", "123"
                )
                assert default.error_code == ErrorCode.NONE
                await until(lambda: follower_q.bound == 123, "the default reaches every broker")
                described = await trio.to_thread.run_sync(
                    _described, confluent, ConfigResource(ResourceType.BROKER, str(dest))
                )
                assert described[FOLLOWER_RATE] == (
                    "123",
                    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
                )
                docs, notes = await trio.to_thread.run_sync(
                    _znodes, zk, ["/config/brokers/<default>"]
                )
                assert docs["/config/brokers/<default>"] == {
                    "version": 1,
                    "config": {FOLLOWER_RATE: "123"},
                }
                assert {"version": 2, "entity_path": "brokers/<default>"} in notes

    run(test, deadline=140)


def _gauge(cluster: LocalCluster, node: int, name: str) -> float:
    text = cluster.node(node).broker.metrics.exposition().decode()
    [value] = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]
    return float(value)


def _raw_alter(raw_client: Any, cluster: LocalCluster, node: int, broker: str, rate: str) -> Any:
    """IncrementalAlterConfigs v1 of broker resource ``broker``, sent to ``node``: the
    resource's result."""
    body = broker_config_request(broker, FOLLOWER_RATE, 0, rate)
    [result] = raw_client(cluster.node(node).address).request(44, 1, body).responses
    return result


def test_each_brokers_configs_are_asked_of_that_broker(zk: str) -> None:
    """trafka's admin asks DescribeConfigs of a BROKER resource of that broker, as
    Java's KafkaAdminClient routes it: a ZooKeeper-mode broker describes only
    itself and answers another broker's id with INVALID_REQUEST ("Unexpected
    broker id"). Broker 2's own rate is seen on broker 2 only, whichever broker
    the admin would otherwise have asked."""

    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.alter_broker_configs({2: {FOLLOWER_RATE: "12345"}})
                got = await admin.describe_configs(brokers=cluster.node_ids)
        assert sorted(got) == ["1", "2", "3"], got
        assert got["2"][FOLLOWER_RATE] == "12345"
        for other in ("1", "3"):
            assert got[other].get(FOLLOWER_RATE) in (None, ""), got[other]

    run(test)
