"""Share groups' dead-letter queues (KIP-1191, ``share.version`` 2) on a brokerlite
cluster: three broker processes and a real ZooKeeper, the DLQ topic's partition
led by another broker than the share-partition leader (the source partition's
leader), so every dead letter is produced from one broker to another.

What KIP-1191 and Kafka 4.4's ``ShareGroupDLQStateManager`` say, checked here:

* a record a consumer REJECTs, and one released at the group's
  ``share.delivery.count.limit``, is copied to the group's
  ``errors.deadletterqueue.topic.name`` with the context headers
  ``__dlq.errors.topic`` / ``partition`` / ``offset`` / ``group`` /
  ``delivery.count`` / ``message`` and, with
  ``errors.deadletterqueue.copy.record.enable``, the record's key and value; a
  record from partition *p* goes to DLQ partition ``p % partitions``;
* the record is then archived: never delivered again, the share-partition's
  start offset moves past it (DescribeShareGroupOffsets);
* a DLQ topic without ``errors.deadletterqueue.group.enable=true`` gets nothing
  written, and the records are archived all the same;
* Kafka's writer produces with ``acks=-1`` and retries NOT_LEADER_OR_FOLLOWER and
  lost connections, and the share-partition archives a record only once its
  dead letter's write is done: so after ``kill -9`` of the DLQ partition's
  leader, every record whose rejection was acknowledged has its dead letter in
  the topic (at least once: a write whose answer the kill lost is written again).

The DLQ topic is read back with librdkafka's plain consumer. Every wait is "until
it happens", failing after a deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import wait_for
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from test_cluster_share_failover import GROUP_RESOURCE, ask

from trafka.brokerlite.dev.local_cluster import ClusterProcesses
from trafka.brokerlite.shares.dead_letters import EXCEEDED_MESSAGE, HEADERS, REJECTED_MESSAGE
from trafka.codec.messages import k32_describe_configs as describe_m
from trafka.sdk import NewTopic
from trafka.sdk.blocking import Admin
from trafka.sdk.blocking_share import ShareConsumer
from trafka.sdk.share_consumer import AcknowledgeType

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SETTINGS = {
    "offsets.topic.num.partitions": 3,
    "share.coordinator.state.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
    "group.share.min.heartbeat.interval.ms": 100,
    "group.share.heartbeat.interval.ms": 200,
    # A record whose acknowledgement a broker's death lost comes back in 5 s.
    "group.share.min.record.lock.duration.ms": 1000,
    "group.share.record.lock.duration.ms": 5000,
    # (test_a_missing_dlq_topic_...: the others' DLQ topics exist)
    "errors.deadletterqueue.auto.create.topics.enable": "true",
    # A killed broker's session ends after 4 s rather than 6 s.
    "zookeeper.session.timeout.ms": 4000,
}
SOURCE_LEADER, DLQ_LEADER = 1, 2
ENABLE = {"errors.deadletterqueue.group.enable": "true"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, module_zk: str) -> Iterator[ClusterProcesses]:
    root: Path = tmp_path_factory.mktemp("dlq-cluster")
    cluster = ClusterProcesses(root, 3, settings=SETTINGS, zookeeper_connect=module_zk)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def topic(admin: Admin, name: str, leader: int, configs: dict[str, str] | None = None) -> None:
    """One partition on the three brokers, led by ``leader``."""
    replicas = [leader, *(n for n in (1, 2, 3) if n != leader)]
    admin.create_topics(
        [
            NewTopic(
                name,
                configs={"min.insync.replicas": "2", **(configs or {})},
                replica_assignments={0: replicas},
            )
        ]
    )


def prepare(
    cluster: ClusterProcesses, suffix: str, dlq_configs: dict[str, str] | None, *, dlq: bool = True
) -> str:
    """Topic ``jobs-<suffix>`` (led by broker 1) with six keyed records, DLQ topic
    ``dlq.<suffix>`` (led by broker 2, ``dlq_configs``), and share group
    ``g-<suffix>`` writing its dead letters there, records copied, a record
    archived at its second delivery. Without ``dlq``, the DLQ topic is not
    created. Returns the group."""
    group = f"g-{suffix}"
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        topic(admin, f"jobs-{suffix}", SOURCE_LEADER)
        if dlq:
            topic(admin, f"dlq.{suffix}", DLQ_LEADER, dlq_configs)
        admin.alter_group_configs(
            {
                group: {
                    "share.auto.offset.reset": "earliest",
                    "share.delivery.count.limit": "2",
                    "errors.deadletterqueue.topic.name": f"dlq.{suffix}",
                    "errors.deadletterqueue.copy.record.enable": "true",
                }
            }
        )
    for node in cluster.ports:
        wait_for(
            f"broker {node} to apply the group's configs",
            lambda n=node: applied(cluster, n, group, f"dlq.{suffix}"),
            30,
        )
    produce(cluster, f"jobs-{suffix}", range(6))
    return group


def applied(cluster: ClusterProcesses, node: int, group: str, dlq: str) -> bool | None:
    """Whether broker ``node`` has the group's DLQ configs (DescribeConfigs to it)."""
    req = describe_m.DescribeConfigsRequest
    resource = req.DescribeConfigsResource(resource_type=GROUP_RESOURCE, resource_name=group)
    (result,) = ask(cluster, node, 32, 4, req(resources=[resource])).results
    values = {c.name: c.value for c in result.configs}
    wanted = {
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.copy.record.enable": "true",
        "share.delivery.count.limit": "2",
    }
    return True if all(values.get(k) == v for k, v in wanted.items()) else None


def produce(cluster: ClusterProcesses, name: str, numbers: range) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in numbers:
        producer.produce(name, key=b"k%d" % i, value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0


def consume(
    cluster: ClusterProcesses, group: str, name: str, decide: dict[int, AcknowledgeType], total: int
) -> dict[int, list[int]]:
    """Acknowledge each delivery of ``name``'s records as ``decide`` says (ACCEPT
    otherwise), committing each poll, until every offset below ``total`` is done
    (accepted, rejected, or released at its second delivery); the delivery
    counts seen per offset."""
    seen: dict[int, list[int]] = {}
    consumer = ShareConsumer(
        name,
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=group,
        share_acknowledgement_mode="explicit",
    )

    def done() -> bool:
        return all(
            len(seen.get(o, [])) >= (2 if decide.get(o) == AcknowledgeType.RELEASE else 1)
            for o in range(total)
        )

    def more() -> bool | None:
        records = consumer.poll(timeout_ms=200)
        for record in records:
            seen.setdefault(record.offset, []).append(record.delivery_count)
            consumer.acknowledge(record, type=decide.get(record.offset, AcknowledgeType.ACCEPT))
        if records:
            assert set(consumer.commit().values()) == {None}
        return True if done() else None

    try:
        wait_for("every record acknowledged", more, 60)
    finally:
        consumer.close()
    return seen


Letter = tuple[Any, Any, dict[str, str]]


def letters(
    cluster: ClusterProcesses, name: str, enough: Callable[[list[Letter]], bool]
) -> list[Letter]:
    """The records of ``name``'s partition 0 from its start until ``enough`` of
    them, read with a plain consumer: (key, value, headers)."""
    reader = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"reader-{name}",
            "enable.auto.commit": False,
        }
    )
    reader.assign([TopicPartition(name, 0, OFFSET_BEGINNING)])
    out: list[Letter] = []

    def more() -> bool | None:
        message = reader.poll(0.2)
        if message is not None and not message.error():
            headers = [(h, v.decode()) for h, v in message.headers() or []]
            assert [h for h, _ in headers] == list(HEADERS)
            out.append((message.key(), message.value(), dict(headers)))
        return True if enough(out) else None

    try:
        wait_for(f"the dead letters in {name}", more, 60)
    finally:
        reader.close()
    return out


def start_offset(admin: Admin, group: str, name: str) -> int | None:
    (info,) = admin.list_share_group_offsets(group, [(name, 0)]).values()
    return None if info is None else info.start_offset


def archived_through(cluster: ClusterProcesses, group: str, name: str, end: int) -> None:
    """Wait until the group's start offset is ``end``: every record before it is
    acknowledged or archived, durably (the share coordinator's state)."""
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        wait_for(
            f"{group}'s start offset {end}",
            lambda: True if start_offset(admin, group, name) == end else None,
            60,
        )


def high_watermark(cluster: ClusterProcesses, name: str) -> int:
    reader = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "hw"})
    try:
        _low, high = reader.get_watermark_offsets(TopicPartition(name, 0), timeout=30)
    finally:
        reader.close()
    return int(high)


def test_rejected_and_exhausted_records_are_produced_to_another_broker_s_partition(
    cluster: ClusterProcesses,
) -> None:
    group = prepare(cluster, "a", ENABLE)
    reject, release = AcknowledgeType.REJECT, AcknowledgeType.RELEASE
    decide = {0: reject, 1: reject, 3: release, 4: release}
    seen = consume(cluster, group, "jobs-a", decide, 6)
    assert seen[3] == seen[4] == [1, 2]
    got = letters(cluster, "dlq.a", lambda got: len(got) >= 4)
    by_offset = {int(h["__dlq.errors.offset"]): (k, v, h) for k, v, h in got}
    assert sorted(by_offset) == [0, 1, 3, 4]
    for offset, (key, value, headers) in by_offset.items():
        assert (key, value) == (b"k%d" % offset, b"v%d" % offset)  # copy.record.enable
        rejected = offset in (0, 1)
        assert headers == {
            "__dlq.errors.topic": "jobs-a",
            "__dlq.errors.partition": "0",
            "__dlq.errors.offset": str(offset),
            "__dlq.errors.group": group,
            "__dlq.errors.delivery.count": "1" if rejected else "2",
            "__dlq.errors.message": REJECTED_MESSAGE if rejected else EXCEEDED_MESSAGE,
        }
    # Archived once written: the share-partition's start offset passes them all,
    # so none is delivered again.
    archived_through(cluster, group, "jobs-a", 6)
    assert high_watermark(cluster, "dlq.a") == 4


def test_a_dlq_topic_the_rules_refuse_gets_nothing_and_the_records_are_archived(
    cluster: ClusterProcesses,
) -> None:
    """``dlq.b`` lacks ``errors.deadletterqueue.group.enable=true``."""
    group = prepare(cluster, "b", None)
    reject = AcknowledgeType.REJECT
    consume(cluster, group, "jobs-b", {0: reject, 1: reject, 2: reject}, 6)
    archived_through(cluster, group, "jobs-b", 6)
    assert high_watermark(cluster, "dlq.b") == 0


def test_a_missing_dlq_topic_is_created_when_the_brokers_allow_it(
    cluster: ClusterProcesses,
) -> None:
    """``errors.deadletterqueue.auto.create.topics.enable`` (on every broker here):
    the share-partition leader has the cluster create the topic (``num.partitions``,
    ``errors.deadletterqueue.group.enable=true``), then writes to it."""
    group = prepare(cluster, "d", None, dlq=False)
    consume(cluster, group, "jobs-d", {0: AcknowledgeType.REJECT}, 6)
    ((key, value, headers),) = letters(cluster, "dlq.d", lambda got: len(got) >= 1)
    assert (key, value, headers["__dlq.errors.offset"]) == (b"k0", b"v0", "0")
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        configs = admin.describe_configs(topics=["dlq.d"])["dlq.d"]
    assert configs["errors.deadletterqueue.group.enable"] == "true"
    archived_through(cluster, group, "jobs-d", 6)


def test_kill_9_of_the_dlq_partition_s_leader_loses_no_dead_letter(
    cluster: ClusterProcesses,
) -> None:
    """Every record whose rejection was answered is in the DLQ topic after its
    leader's ``kill -9``, and so is every other (a rejection the kill lost comes
    back and is rejected again, or is archived at the delivery-count limit,
    dead letter and all). Runs last in the module: broker 2 stays down."""
    group = prepare(cluster, "c", ENABLE)
    produce(cluster, "jobs-c", range(6, 20))
    consumer = ShareConsumer(
        "jobs-c",
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=group,
        share_acknowledgement_mode="explicit",
        max_poll_records=5,
    )
    admin = Admin(bootstrap_servers=cluster.bootstrap_servers)
    rejected: set[int] = set()
    killed = False

    def more() -> bool | None:
        nonlocal killed
        records = consumer.poll(timeout_ms=200)
        for record in records:
            consumer.acknowledge(record, type=AcknowledgeType.REJECT)
        if records:
            if set(consumer.commit().values()) == {None}:  # (answered: durable)
                rejected.update(r.offset for r in records)
            if not killed:
                cluster.kill(DLQ_LEADER)  # (the first dead letters are on their way)
                killed = True
        return True if len(rejected) == 20 or start_offset(admin, group, "jobs-c") == 20 else None

    try:
        wait_for("every record rejected or archived", more, 90)
    finally:
        consumer.close()
        admin.close()
    assert killed and rejected

    def offsets(got: list[Letter]) -> set[int]:
        return {int(h["__dlq.errors.offset"]) for _, _, h in got}

    got = letters(cluster, "dlq.c", lambda got: offsets(got) == set(range(20)))
    assert {(k, v) for k, v, _ in got} == {(b"k%d" % i, b"v%d" % i) for i in range(20)}
    archived_through(cluster, group, "jobs-c", 20)
