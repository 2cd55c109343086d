"""Share groups (KIP-932) in a brokerlite cluster survive ``kill -9`` of their brokers.

Three broker processes and a real ZooKeeper. KIP-932 keeps a share-partition's
state (start offset, in-flight records, delivery counts) with the share
coordinator, in ``__share_group_state``; the share-partition leader (the data
partition's leader) reads and writes it there. So:

* records a consumer acknowledged (ACCEPT, answered) are never delivered again,
  whichever of the two brokers dies;
* records acquired and never acknowledged come back after the acquisition lock
  times out (``group.share.record.lock.duration.ms``, 1 s here), with their
  delivery count one higher, as KIP-932 says ("Delivery count").

Killed: the leader of the share-partition's ``__share_group_state`` partition (its
share coordinator), and, in the other test, the data partition's leader. The
test picks the share group and data partition so that these are two different
brokers. Consumers: trafka's blocking ShareConsumer, and librdkafka's
(confluent-kafka's) ShareConsumer after the data leader's death.

No timing thresholds: every wait is "until it happens", failing after a deadline.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import wait_for
from confluent_kafka import AcknowledgeType as CkAcknowledgeType
from confluent_kafka import Producer
from confluent_kafka import ShareConsumer as CkShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from trafka.brokerlite.cluster.controller import coordinator_partition
from trafka.brokerlite.dev.local_cluster import ClusterProcesses
from trafka.brokerlite.shares.coordinator import state_key
from trafka.codec.framing import FrameReader
from trafka.codec.messages import k03_metadata as metadata_m
from trafka.codec.messages import k32_describe_configs as describe_m
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response_frame, encode_request
from trafka.sdk.blocking import Admin
from trafka.sdk.blocking_share import ShareConsumer
from trafka.sdk.share_consumer import AcknowledgeType

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TOPIC = "jobs"
# One partition, which every member of the group shares (the simple assignor
# gives a partition to one member while there are fewer members than partitions).
DATA_PARTITIONS = 1
STATE_PARTITIONS = 3
RECORDS = 40
GROUP_RESOURCE = 32  # DescribeConfigs resource type GROUP
SETTINGS = {
    "offsets.topic.num.partitions": 3,
    "share.coordinator.state.topic.num.partitions": STATE_PARTITIONS,
    "group.initial.rebalance.delay.ms": 0,
    "group.share.min.record.lock.duration.ms": 1000,
    "group.share.record.lock.duration.ms": 1000,
    "group.share.min.heartbeat.interval.ms": 100,
    "group.share.heartbeat.interval.ms": 200,
    # A killed broker's session ends after 4 s rather than 6 s.
    "zookeeper.session.timeout.ms": 4000,
}


# -- the cluster, by raw requests ---------------------------------------------------------


def ask(cluster: ClusterProcesses, node: int, key: int, version: int, body: Any) -> Any:
    """One request to ``node`` on a connection of its own; the decoded answer."""
    header = RequestHeader(
        request_api_key=key, request_api_version=version, correlation_id=1, client_id="test"
    )
    with socket.create_connection((cluster.host, cluster.ports[node]), timeout=10) as sock:
        sock.sendall(encode_request(header, body))
        reader = FrameReader()
        while (frame := reader.next_frame()) is None:
            data = sock.recv(1 << 16)
            if not data:
                raise OSError(f"node {node} closed the connection")
            reader.feed(data)
    return decode_response_frame(frame, key, version)


def leaders(cluster: ClusterProcesses, node: int, topic: str) -> tuple[str, dict[int, int]]:
    """``topic``'s id and each partition's leader, as ``node`` sees them."""
    req = metadata_m.MetadataRequest
    answer = ask(
        cluster,
        node,
        3,
        12,
        req(topics=[req.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False),
    )
    (found,) = answer.topics
    return str(found.topic_id), {p.partition_index: p.leader_id for p in found.partitions}


def group_config_seen(cluster: ClusterProcesses, node: int, group: str) -> bool:
    """Whether ``node`` applies ``share.auto.offset.reset=earliest`` to ``group``."""
    req = describe_m.DescribeConfigsRequest
    answer = ask(
        cluster,
        node,
        32,
        4,
        req(
            resources=[
                req.DescribeConfigsResource(
                    resource_type=GROUP_RESOURCE,
                    resource_name=group,
                    configuration_keys=["share.auto.offset.reset"],
                )
            ]
        ),
    )
    (result,) = answer.results
    return any(c.value == "earliest" for c in result.configs)


# -- consumers ------------------------------------------------------------------------------

Taken = list[tuple[bytes, int]]  # (value, delivery count)


class Ours:
    """trafka's blocking share consumer, acknowledging explicitly."""

    def __init__(self, bootstrap: str, group: str, max_records: int = 500) -> None:
        self.consumer = ShareConsumer(
            TOPIC,
            bootstrap_servers=bootstrap,
            group_id=group,
            share_acknowledgement_mode="explicit",
            max_poll_records=max_records,
        )

    def take(self) -> tuple[Taken, Callable[[], None]]:
        """One non-empty poll, and what accepts it (acknowledged, committed)."""
        records = wait_for("records", lambda: self.consumer.poll(timeout_ms=200) or None, 60)

        def accept() -> None:
            for record in records:
                self.consumer.acknowledge(record, type=AcknowledgeType.ACCEPT)
            assert set(self.consumer.commit().values()) == {None}

        return [(r.value, r.delivery_count) for r in records], accept

    def close(self) -> None:
        self.consumer.close()


class Theirs:
    """librdkafka's share consumer, acknowledging explicitly."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.consumer = CkShareConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "share.acknowledgement.mode": "explicit",
            }
        )
        self.consumer.subscribe([TOPIC])

    def take(self) -> tuple[Taken, Callable[[], None]]:
        records = wait_for(
            "records",
            lambda: [m for m in self.consumer.poll(0.2) or [] if not m.error()] or None,
            60,
        )

        def accept() -> None:
            for message in records:
                self.consumer.acknowledge(message, CkAcknowledgeType.ACCEPT)
            self.consumer.commit_sync()

        return [(m.value(), m.delivery_count()) for m in records], accept

    def close(self) -> None:
        self.consumer.close()


def accept_until(consumer: Ours | Theirs, done: Callable[[Taken], bool]) -> Taken:
    """Take and accept records until ``done(all taken)``; what was taken."""
    taken: Taken = []

    def more() -> bool | None:
        got, accept = consumer.take()
        accept()
        taken.extend(got)
        return True if done(taken) else None

    wait_for("the records expected", more, 120)
    return taken


# -- the scenario --------------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path: Path, zk: str) -> Iterator[ClusterProcesses]:
    # The worker's shared ZooKeeper (a chroot of its own): the brokers are killed, not it.
    cluster = ClusterProcesses(tmp_path, 3, settings=SETTINGS, zookeeper_connect=zk)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def prepare(cluster: ClusterProcesses) -> tuple[str, int, int, int]:
    """The topic, the share-state topic, and a share group whose state for the data
    partition is coordinated by another broker than the partition's leader,
    reading from the start; the partition holds RECORDS records.

    Returns:
        ``(group, partition, data_leader, state_leader)``.
    """
    bs = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    assignment = [[1 + (p + i) % 3 for i in range(3)] for p in range(DATA_PARTITIONS)]
    created = admin.create_topics(
        [
            NewTopic(
                TOPIC,
                num_partitions=DATA_PARTITIONS,
                replica_assignment=assignment,
                config={"min.insync.replicas": "2"},
            )
        ]
    )
    created[TOPIC].result(30)
    # A first share fetch makes the share-partition leader ask its coordinator,
    # which has __share_group_state created.
    warmup = Ours(bs, "warm-up")
    try:
        warmup.consumer.poll(timeout_ms=200)
        state = wait_for(
            "__share_group_state's leaders",
            lambda: _all_led(cluster, "__share_group_state"),
            60,
        )
    finally:
        warmup.close()
    topic_id, data = leaders(cluster, 1, TOPIC)
    group, partition = next(
        (g, p)
        for g in (f"workers-{i}" for i in range(100))
        for p in range(DATA_PARTITIONS)
        if state[coordinator_partition(state_key(g, topic_id, p), STATE_PARTITIONS)] != data[p]
    )
    state_leader = state[coordinator_partition(state_key(group, topic_id, partition), 3)]
    with Admin(bootstrap_servers=bs) as trafka_admin:
        trafka_admin.alter_group_configs({group: {"share.auto.offset.reset": "earliest"}})
    for node in (1, 2, 3):
        wait_for(
            f"node {node} to apply the group's configs",
            lambda n=node: group_config_seen(cluster, n, group) or None,
            30,
        )
    producer = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce(TOPIC, b"r%d" % i, partition=partition)
    assert producer.flush(30) == 0
    return group, partition, data[partition], state_leader


def _all_led(cluster: ClusterProcesses, topic: str) -> dict[int, int] | None:
    try:
        _, led = leaders(cluster, 1, topic)
    except (OSError, ValueError):
        return None
    return led if led and all(n > 0 for n in led.values()) else None


def values(taken: Taken) -> list[bytes]:
    return [v for v, _ in taken]


def survive(cluster: ClusterProcesses, kill: str, *, librdkafka_after: bool) -> None:
    """The scenario: accept some, hold some, ``kill -9`` a broker, read the rest."""
    group, partition, data_leader, state_leader = prepare(cluster)
    assert data_leader != state_leader
    bs = cluster.bootstrap_servers
    everything = {b"r%d" % i for i in range(RECORDS)}
    first = Ours(bs, group, max_records=5)
    try:
        accepted, accept = first.take()
        accept()  # answered: durable with the share coordinator
        held, _ = first.take()  # acquired, never acknowledged
        assert all(count == 1 for _, count in accepted + held)
        cluster.kill(state_leader if kill == "state" else data_leader)
        second: Ours | Theirs = Theirs(bs, group) if librdkafka_after else Ours(bs, group)
        try:
            rest = accept_until(
                second, lambda t: everything - set(values(accepted)) <= set(values(t))
            )
        finally:
            second.close()
    finally:
        first.close()
    # Acknowledged records are never delivered again; nothing is delivered twice to
    # the consumer that accepted it; and what was held came back.
    assert not set(values(accepted)) & set(values(rest))
    assert len(values(rest)) == len(set(values(rest)))
    again = dict(rest)
    assert set(values(held)) <= set(again)
    if kill == "state":
        # The share-partition leader lived: it released the records at the lock
        # timeout and counts the delivery (its write waited for the new coordinator).
        assert {again[v] for v in values(held)} == {2}
    # After the failover, a record acquired and not acknowledged comes back once
    # its lock times out, delivery count + 1.
    producer = Producer({"bootstrap.servers": bs, "acks": "all"})
    for i in range(5):
        producer.produce(TOPIC, b"late%d" % i, partition=partition)
    assert producer.flush(30) == 0
    lock_timeout_redelivers(bs, group)


def lock_timeout_redelivers(bs: str, group: str) -> None:
    holder = Ours(bs, group, max_records=2)
    try:
        held, _ = holder.take()
        assert {count for _, count in held} == {1}
        taker = Ours(bs, group)
        try:
            back = accept_until(taker, lambda t: set(values(held)) <= set(values(t)))
        finally:
            taker.close()
    finally:
        holder.close()
    assert {count for v, count in back if v in set(values(held))} == {2}


def test_kill_9_of_the_share_coordinator_loses_no_acknowledgement(
    cluster: ClusterProcesses,
) -> None:
    survive(cluster, "state", librdkafka_after=False)


def test_kill_9_of_the_data_partition_leader_loses_no_acknowledgement(
    cluster: ClusterProcesses,
) -> None:
    survive(cluster, "data", librdkafka_after=True)
