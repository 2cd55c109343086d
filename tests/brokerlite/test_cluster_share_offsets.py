"""The share-group offsets admin in a brokerlite cluster (KIP-932), and DeleteGroups
of a share group.

Three in-process nodes and a real ZooKeeper. KIP-932: DescribeShareGroupOffsets,
AlterShareGroupOffsets and DeleteShareGroupOffsets are answered by the group's
coordinator, which reads and changes the share-partitions' state at their share
coordinators (``__share_group_state``); Alter and Delete need the group empty.
A share group deleted (DeleteGroups) loses its share-partitions' state too, so a
new group of the same name starts by ``share.auto.offset.reset``.

The share coordinator's broker is stopped in the middle: its
``__share_group_state`` partition's new leader answers instead.

confluent-kafka (2.16) has no share-group offsets admin in its AdminClient, so
trafka's admin is the client here; librdkafka's ShareConsumer reads the result.
"""

from __future__ import annotations

from typing import Any

import trio
from cluster_helpers import until
from test_cluster_share_groups import coordinator_of, leader, raw

from trafka.brokerlite.cluster.controller import coordinator_partition
from trafka.brokerlite.cluster.view import SHARE_STATE_TOPIC
from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.brokerlite.shares.coordinator import state_key
from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k90_describe_share_group_offsets as describe_m
from trafka.sdk import (
    NewTopic,
    SharePartitionOffsetInfo,
    TopicPartition,
    open_admin,
    open_producer,
)
from trafka.sdk.share_consumer import AcknowledgeType, open_share_consumer

SETTINGS: dict[str, Any] = {
    "offsets_topic_num_partitions": 3,
    "share_coordinator_state_topic_num_partitions": 3,
    "group_initial_rebalance_delay_ms": 0,
    "group_share_heartbeat_interval_ms": 200,
    "group_share_min_heartbeat_interval_ms": 100,
}
TOPIC = "work"
GROUP = "admins"


def run(test: Any, deadline: float = 180) -> None:
    async def main() -> None:
        with trio.fail_after(deadline):
            await test()

    trio.run(main)


def running(cluster: LocalCluster) -> list[int]:
    return [n for n in cluster.node_ids if cluster.running(n)]


def state_leader(cluster: LocalCluster, group: str, partition: int) -> int | None:
    """The share coordinator of ``group``'s share-partition, once every running
    broker agrees on it and it has loaded the key's partition."""
    views = [cluster.node(n).broker.cluster for n in running(cluster)]
    if not all(v is not None and SHARE_STATE_TOPIC in v.image.topics for v in views):
        return None
    topic_id = str(views[0].image.topics[TOPIC].topic_id)  # type: ignore[union-attr]
    where = coordinator_partition(state_key(group, topic_id, partition), 3)
    leaders = {v.leader(SHARE_STATE_TOPIC, where) for v in views if v is not None}
    if len(leaders) != 1 or (owner := leaders.pop()) <= 0 or owner not in running(cluster):
        return None
    share = cluster.node(owner).broker.share_coordinator
    return owner if share is not None and where in share.loaded_partitions() else None


async def take(
    bs: str, group: str, count: int, accept: int | None = None, topic: str = TOPIC
) -> list[Any]:
    """A share consumer's first ``count`` records (the first ``accept`` of them
    accepted and committed, the rest released by the close)."""
    got: list[Any] = []
    async with open_share_consumer(
        topic, bootstrap_servers=bs, group_id=group, share_acknowledgement_mode="explicit"
    ) as consumer:
        while len(got) < count:
            got += await consumer.poll(timeout_ms=200)
        for record in got[: count if accept is None else accept]:
            consumer.acknowledge(record, AcknowledgeType.ACCEPT)
        assert set((await consumer.commit()).values()) == {None}
    return got


async def prepare(cluster: LocalCluster, group: str) -> str:
    bs = cluster.bootstrap_servers
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(TOPIC, 1, 3)])
        await admin.alter_group_configs({group: {"share.auto.offset.reset": "earliest"}})
    await until(
        lambda: all(
            cluster.node(n).broker.share_groups.config(group).auto_offset_reset == "earliest"
            for n in cluster.node_ids
        ),
        "the group's configs everywhere",
    )
    async with open_producer(bootstrap_servers=bs, acks="all") as producer:
        for i in range(10):
            await producer.send(TOPIC, b"%d" % i)
    return bs


def test_describe_alter_delete_share_group_offsets_on_a_cluster() -> None:
    """KIP-932's offsets admin, answered by the group coordinator through the
    share coordinators; the share-partition leader (another broker's, in
    general) serves what was set."""
    tp = TopicPartition(TOPIC, 0)

    async def flow() -> None:
        async with serve_cluster(3, **SETTINGS) as cluster:
            bs = await prepare(cluster, GROUP)
            async with open_admin(bootstrap_servers=bs) as admin:
                assert await admin.list_share_group_offsets(GROUP, [tp]) == {tp: None}
                got = await take(bs, GROUP, 10, accept=4)
                assert [r.offset for r in got] == list(range(10))
                # (Closed: 4-9 released, the group empty.)
                assert await admin.list_share_group_offsets(GROUP) == {
                    tp: SharePartitionOffsetInfo(start_offset=4, leader_epoch=0, lag=6)
                }
                await admin.alter_share_group_offsets(GROUP, {tp: 8})
                assert await admin.list_share_group_offsets(GROUP, [tp]) == {
                    tp: SharePartitionOffsetInfo(8, 0, 2)
                }
                # The share-partition leader forgot its copy: 8 and 9, first delivery.
                got = await take(bs, GROUP, 2)
                assert [(r.offset, r.delivery_count) for r in got] == [(8, 1), (9, 1)]
                assert await admin.list_share_group_offsets(GROUP) == {
                    tp: SharePartitionOffsetInfo(10, 0, 0)
                }
                # Past the log end offset: refused, as on one node.
                try:
                    await admin.alter_share_group_offsets(GROUP, {tp: 11})
                except KafkaError as exc:
                    assert exc.code == ErrorCode.OFFSET_OUT_OF_RANGE
                else:
                    raise AssertionError("an offset past the log end was accepted")

                # The share coordinator's broker stops: its partition's new leader answers.
                owner = await until(lambda: state_leader(cluster, GROUP, 0), "the coordinator")
                await cluster.stop_node(owner)
                await until(lambda: state_leader(cluster, GROUP, 0), "a new share coordinator")
                await admin.alter_share_group_offsets(GROUP, {tp: 6})
                assert await admin.list_share_group_offsets(GROUP, [tp]) == {
                    tp: SharePartitionOffsetInfo(6, 0, 4)
                }
                await cluster.start_node(owner)

                await admin.delete_share_group_offsets(GROUP, [TOPIC])
                assert await admin.list_share_group_offsets(GROUP) == {}
                assert await admin.list_share_group_offsets(GROUP, [tp]) == {tp: None}
                # Nothing left to delete: Kafka's "no offset information".
                try:
                    await admin.delete_share_group_offsets(GROUP, [TOPIC])
                except KafkaError as exc:
                    assert exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    raise AssertionError("a second delete found state")
                # The next member starts by share.auto.offset.reset (earliest).
                got = await take(bs, GROUP, 10)
                assert [(r.offset, r.delivery_count) for r in got] == [(i, 1) for i in range(10)]

    run(flow)


def test_a_deleted_share_group_leaves_no_share_state() -> None:
    """DeleteGroups of an empty share group deletes its share-partitions' state
    (KIP-932: through the persister, DeleteShareGroupState): a new group of the
    same name reads from share.auto.offset.reset, not where the old one was."""
    tp = TopicPartition(TOPIC, 0)

    async def flow() -> None:
        async with serve_cluster(3, **SETTINGS) as cluster:
            bs = await prepare(cluster, GROUP)
            got = await take(bs, GROUP, 10)
            assert [r.offset for r in got] == list(range(10))
            # Several groups in one request (as OffsetFetch v8): those coordinated
            # elsewhere are NOT_COORDINATOR, the others answered once their share
            # coordinators have.
            here = coordinator_of(cluster, GROUP)
            other = next(
                g for g in (f"g{i}" for i in range(100)) if coordinator_of(cluster, g) != here
            )
            req = describe_m.DescribeShareGroupOffsetsRequest
            answer = await raw(
                cluster,
                here,
                90,
                1,
                req(
                    groups=[
                        req.DescribeShareGroupOffsetsRequestGroup(group_id=GROUP, topics=None),
                        req.DescribeShareGroupOffsetsRequestGroup(group_id=other, topics=None),
                    ]
                ),
            )
            assert [(g.group_id, g.error_code) for g in answer.groups] == [
                (GROUP, ErrorCode.NONE),
                (other, ErrorCode.NOT_COORDINATOR),
            ]
            (topic,) = answer.groups[0].topics
            assert [(p.start_offset, p.lag) for p in topic.partitions] == [(10, 0)]
            async with open_admin(bootstrap_servers=bs) as admin:
                assert await admin.list_share_group_offsets(GROUP, [tp]) == {
                    tp: SharePartitionOffsetInfo(10, 0, 0)
                }
                await admin.delete_groups([GROUP])
                owner = await until(lambda: state_leader(cluster, GROUP, 0), "the coordinator")
                coordinator = cluster.node(owner).broker.share_coordinator
                assert coordinator is not None
                view = cluster.node(owner).broker.cluster
                assert view is not None
                topic_id = str(view.image.topics[TOPIC].topic_id)
                state = coordinator.state(GROUP, topic_id, 0)
                assert state is not None and state.start == -1  # (the deletion marker)
                assert await admin.list_share_group_offsets(GROUP, [tp]) == {tp: None}
                await admin.alter_group_configs({GROUP: {"share.auto.offset.reset": "earliest"}})
            await until(
                lambda: all(
                    cluster.node(n).broker.share_groups.config(GROUP).auto_offset_reset
                    == "earliest"
                    for n in cluster.node_ids
                ),
                "the group's configs everywhere",
            )
            again = await take(bs, GROUP, 10)
            assert [(r.offset, r.delivery_count) for r in again] == [(i, 1) for i in range(10)]

    run(flow)


def test_the_lag_comes_from_the_partitions_leader() -> None:
    """KIP-1226: a share-partition's lag counts the records from its start offset
    up to the partition's high watermark that have not completed delivery. Only
    the partition's leader knows that high watermark for sure, and Kafka's group
    coordinator asks it (ListOffsets for the latest offset, read_uncommitted);
    with no leader the lag is unknown (-1: the admin's None). Here the group's
    coordinator holds no replica of the partition (one replica, on another
    broker), so a lag from its own log could only be a guess."""

    async def flow() -> None:
        async with serve_cluster(3, **SETTINGS) as cluster:
            bs, solo = cluster.bootstrap_servers, "solo"
            here = coordinator_of(cluster, GROUP)
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic(solo, 3, 1)])
                await admin.alter_group_configs({GROUP: {"share.auto.offset.reset": "earliest"}})
                await until(lambda: all(leader(cluster, solo, p) > 0 for p in range(3)), "leaders")
                elsewhere = next(p for p in range(3) if leader(cluster, solo, p) != here)
                tp = TopicPartition(solo, elsewhere)
                async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                    for i in range(5):
                        await producer.send(solo, b"%d" % i, partition=elsewhere)
                await until(
                    lambda: all(
                        cluster.node(n).broker.share_groups.config(GROUP).auto_offset_reset
                        == "earliest"
                        for n in cluster.node_ids
                    ),
                    "the group's configs everywhere",
                )
                got = await take(bs, GROUP, 5, accept=2, topic=solo)
                assert [r.offset for r in got] == list(range(5))
                assert await admin.list_share_group_offsets(GROUP, [tp]) == {
                    tp: SharePartitionOffsetInfo(start_offset=2, leader_epoch=0, lag=3)
                }
                # Its only replica stops: no leader, the lag unknown.
                await cluster.stop_node(leader(cluster, solo, elsewhere))
                await until(lambda: leader(cluster, solo, elsewhere) < 0, "no leader")
                assert await admin.list_share_group_offsets(GROUP, [tp]) == {
                    tp: SharePartitionOffsetInfo(start_offset=2, leader_epoch=0, lag=None)
                }

    run(flow)
