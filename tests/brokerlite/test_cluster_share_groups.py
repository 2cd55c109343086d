"""Share groups (KIP-932) in a brokerlite cluster: what is the cluster's, not a broker's.

Three in-process nodes and a real ZooKeeper:

* a share group's configs, altered through any broker, are applied by every
  broker (the share-partition leaders need ``share.auto.offset.reset`` and the
  lock duration) and kept in ZooKeeper, in the layout of the other entities'
  dynamic configs (``/config/groups/<group>`` and a ``/config/changes``
  notification); a broker started again reads them back;
* a share group's membership is its coordinator's records in
  ``__consumer_offsets``, as consumer groups' are: when the coordinator's broker
  stops, the partition's new leader coordinates the group with the same members
  and epochs, and the consumer goes on; a heartbeat to another broker is
  answered NOT_COORDINATOR;
* the share coordinator's requests are answered by the leader of the key's
  ``__share_group_state`` partition only (NOT_COORDINATOR elsewhere);
* ShareFetch and ShareAcknowledge sent to a broker that does not lead the
  partition are answered NOT_LEADER_OR_FOLLOWER with the partition's leader
  and leader epoch, and the leader's endpoint (KIP-932's CurrentLeader and
  NodeEndpoints, as KIP-951 for Produce and Fetch).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import trio
from cluster_helpers import until
from kazoo.client import KazooClient

from trafka.brokerlite.cluster.controller import coordinator_partition
from trafka.brokerlite.cluster.view import OFFSETS_TOPIC, SHARE_STATE_TOPIC
from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.brokerlite.groups.replicated_offsets import ReplicatedOffsetStore
from trafka.brokerlite.shares.coordinator import state_key
from trafka.codec.errors import ErrorCode
from trafka.codec.framing import FrameReader
from trafka.codec.messages import k03_metadata as metadata_m
from trafka.codec.messages import k76_share_group_heartbeat as heartbeat_m
from trafka.codec.messages import k78_share_fetch as fetch_m
from trafka.codec.messages import k79_share_acknowledge as ack_m
from trafka.codec.messages import k85_write_share_group_state as write_m
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response_frame, encode_request
from trafka.sdk import NewTopic, open_admin, open_producer
from trafka.sdk.share_consumer import open_share_consumer

SETTINGS: dict[str, Any] = {
    "offsets_topic_num_partitions": 3,
    "share_coordinator_state_topic_num_partitions": 3,
    "group_initial_rebalance_delay_ms": 0,
    "group_share_heartbeat_interval_ms": 200,
    "group_share_min_heartbeat_interval_ms": 100,
}


def run(test: Any, deadline: float = 120) -> None:
    async def main() -> None:
        with trio.fail_after(deadline):
            await test()

    trio.run(main)


@contextlib.contextmanager
def zk_client(zk: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk, timeout=10.0)
    client.start(timeout=10.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


async def raw(cluster: LocalCluster, node: int, key: int, version: int, body: Any) -> Any:
    """One request to ``node`` on a connection of its own; the decoded answer."""
    (answer,) = await raws(cluster, node, (key, version, body))
    return answer


async def raws(cluster: LocalCluster, node: int, *requests: tuple[int, int, Any]) -> list[Any]:
    """``(key, version, body)`` requests to ``node`` one after the other on one
    connection (a share session lives as long as its connection); the answers."""
    host, port = cluster.node(node).address
    answers = []
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        reader = FrameReader()
        for key, version, body in requests:
            header = RequestHeader(
                request_api_key=key, request_api_version=version, correlation_id=1, client_id="t"
            )
            await stream.send_all(encode_request(header, body))
            while (frame := reader.next_frame()) is None:
                data = await stream.receive_some(1 << 16)
                assert data, f"node {node} closed the connection"
                reader.feed(data)
            answers.append(decode_response_frame(frame, key, version))
    return answers


def leader(cluster: LocalCluster, topic: str, partition: int) -> int:
    running = next(n for n in cluster.node_ids if cluster.running(n))
    view = cluster.node(running).broker.cluster
    assert view is not None
    return view.leader(topic, partition)


def coordinator_of(cluster: LocalCluster, group: str) -> int:
    return leader(cluster, OFFSETS_TOPIC, coordinator_partition(group, 3))


def test_share_group_configs_are_the_clusters_through_zookeeper() -> None:
    async def flow() -> None:
        async with serve_cluster(3, **SETTINGS) as cluster:
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                await admin.alter_group_configs(
                    {
                        "billing": {
                            "share.auto.offset.reset": "earliest",
                            "share.record.lock.duration.ms": "20000",
                        }
                    }
                )

            def everywhere() -> bool:
                return all(
                    cluster.node(n).broker.share_groups.config("billing").auto_offset_reset
                    == "earliest"
                    and cluster.node(n)
                    .broker.share_groups.config("billing")
                    .record_lock_duration_ms
                    == 20000
                    for n in cluster.node_ids
                )

            await until(everywhere, "every broker applies the group's configs")
            with zk_client(cluster.zookeeper_connect) as zk:
                data, _ = zk.get("/config/groups/billing")
                assert json.loads(data) == {
                    "version": 1,
                    "config": {
                        "share.auto.offset.reset": "earliest",
                        "share.record.lock.duration.ms": "20000",
                    },
                }
                changes = [
                    json.loads(zk.get(f"/config/changes/{c}")[0])
                    for c in zk.get_children("/config/changes")
                ]
                assert {"version": 2, "entity_path": "groups/billing"} in changes
            # A broker started again (its journal never had them) reads them back.
            await cluster.stop_node(2)
            await cluster.start_node(2)
            assert cluster.node(2).broker.share_groups.config("billing").auto_offset_reset == (
                "earliest"
            )
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                await admin.alter_group_configs({"billing": {"share.auto.offset.reset": None}})
            await until(
                lambda: all(
                    cluster.node(n).broker.share_groups.config("billing").auto_offset_reset
                    == "latest"
                    for n in cluster.node_ids
                ),
                "every broker drops the override",
            )

    run(flow)


def test_a_share_group_moves_with_its_coordinator_and_keeps_its_members() -> None:
    async def flow() -> None:
        async with serve_cluster(3, **SETTINGS) as cluster:
            bs = cluster.bootstrap_servers
            group = "movers"
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("work", 1, 3)])
                await admin.alter_group_configs({group: {"share.auto.offset.reset": "earliest"}})
            await until(
                lambda: all(
                    cluster.node(n).broker.share_groups.config(group).auto_offset_reset
                    == "earliest"
                    for n in cluster.node_ids
                ),
                "the group's configs everywhere",
            )
            async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                for i in range(10):
                    await producer.send("work", b"a%d" % i)
            got: list[bytes] = []
            async with open_share_consumer("work", bootstrap_servers=bs, group_id=group) as c:
                while len(got) < 10:
                    got += [r.value for r in await c.poll(timeout_ms=200)]
                # Accepted now (implicitly, at the next poll, otherwise): records
                # not acknowledged when a leader moves are delivered again.
                assert set((await c.commit()).values()) == {None}
                old = coordinator_of(cluster, group)
                store = cluster.node(old).broker.groups.store
                assert isinstance(store, ReplicatedOffsetStore)
                # The membership is a record of the group's __consumer_offsets partition.
                (snapshot,) = store.share_group_snapshots({group}).values()
                member = c.member_id
                assert member is not None and member in json.dumps(snapshot)
                before = cluster.node(old).broker.share_groups.groups[group]
                epochs = (before.epoch, before.members[member].epoch)
                others = [n for n in cluster.node_ids if n != old]
                # Another broker refuses the group's heartbeats.
                answer = await raw(
                    cluster,
                    others[0],
                    76,
                    1,
                    heartbeat_m.ShareGroupHeartbeatRequest(
                        group_id=group, member_id=member, member_epoch=epochs[1]
                    ),
                )
                assert answer.error_code == ErrorCode.NOT_COORDINATOR
                await cluster.stop_node(old)
                new = await until(
                    lambda: (n := coordinator_of(cluster, group)) in others and n,
                    "a new coordinator",
                )
                moved = await until(
                    lambda: cluster.node(new).broker.share_groups.groups.get(group),
                    "the group loaded by its new coordinator",
                )
                # Loaded from the log, not joined afresh: same member, same epochs
                # (a member rejoining would start at a new epoch).
                assert member in moved.members
                async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                    for i in range(5):
                        await producer.send("work", b"b%d" % i)
                while len(got) < 15:
                    got += [r.value for r in await c.poll(timeout_ms=200)]
                # (A member the coordinator did not know would have had to join
                # again, at a new group epoch.)
                assert (moved.epoch, moved.members[member].epoch) == epochs
            assert sorted(got) == sorted(
                [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(5)]
            )

    run(flow)


def test_the_share_coordinator_answers_only_for_the_keys_it_leads() -> None:
    async def flow() -> None:
        async with serve_cluster(3, **SETTINGS) as cluster:
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                await admin.create_topics([NewTopic(SHARE_STATE_TOPIC, 3, 3)])
            tid = uuid.UUID(int=42)
            key_partition = coordinator_partition(state_key("g", str(tid), 0), 3)

            def settled() -> int | None:
                # Every broker sees the key's partition led by the same broker,
                # which has loaded it as its share coordinator.
                views = [cluster.node(n).broker.cluster for n in cluster.node_ids]
                leaders = {v.leader(SHARE_STATE_TOPIC, key_partition) for v in views if v}
                if len(leaders) != 1 or (owner := leaders.pop()) <= 0:
                    return None
                share = cluster.node(owner).broker.share_coordinator
                return owner if share and key_partition in share.loaded_partitions() else None

            owner = await until(settled, "the key's share coordinator")
            req = write_m.WriteShareGroupStateRequest

            def write(start: int) -> Any:
                return req(
                    group_id="g",
                    topics=[
                        req.WriteStateData(
                            topic_id=tid,
                            partitions=[
                                req.PartitionData(
                                    partition=0,
                                    state_epoch=0,
                                    leader_epoch=3,
                                    start_offset=start,
                                    state_batches=[
                                        req.StateBatch(
                                            first_offset=start,
                                            last_offset=start + 4,
                                            delivery_state=0,
                                            delivery_count=1,
                                        )
                                    ],
                                )
                            ],
                        )
                    ],
                )

            for node in cluster.node_ids:
                answer = await raw(cluster, node, 85, 0, write(7))
                code = answer.results[0].partitions[0].error_code
                assert code == (ErrorCode.NONE if node == owner else ErrorCode.NOT_COORDINATOR)
            # Answered once replicated: every replica's coordinator would read it.
            plog = cluster.node(owner).broker.logs.partition(SHARE_STATE_TOPIC, key_partition)
            assert plog.high_watermark == plog.log_end_offset > 0
            coordinator = cluster.node(owner).broker.share_coordinator
            assert coordinator is not None
            state = coordinator.state("g", str(tid), 0)
            assert state is not None and (state.start, state.runs) == (7, ((7, 11, 0, 1),))

    run(flow)


def test_share_requests_to_a_broker_not_leading_name_the_leader() -> None:
    """KIP-932: a share-partition lives on its partition's leader. A ShareFetch
    or ShareAcknowledge naming a partition the broker does not lead is answered
    NOT_LEADER_OR_FOLLOWER for that partition, with CurrentLeader set to the
    partition's leader and leader epoch and the leader's endpoint in
    NodeEndpoints ("Endpoints for all current leaders enumerated in PartitionData
    with error NOT_LEADER_OR_FOLLOWER", the ShareFetch/ShareAcknowledge response
    schemas; Kafka's KafkaApis fills both for that error). The leader and epoch
    are those the broker's Metadata answer gives; the leader's own answers name
    it too (brokerlite's choice where Kafka sends the schema's default 0 and 0,
    docs/brokerlite.md), without endpoints."""

    async def flow() -> None:
        async with serve_cluster(3, **SETTINGS) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("led", 1, 3)])
            # Every node knows it (each reads the partition's state from
            # ZooKeeper on its own time; the one asked first below may lag).
            await until(
                lambda: (
                    leader(cluster, "led", 0) > 0
                    and all(
                        cluster.node(n).broker.cluster.leader("led", 0) == leader(cluster, "led", 0)
                        for n in cluster.node_ids
                    )
                ),
                "every node knows led-0's leader",
            )
            lead = leader(cluster, "led", 0)
            other = next(n for n in cluster.node_ids if n != lead)
            topic_id = cluster.node(lead).broker.logs.topic("led").topic_id
            member = "m-" + uuid.uuid4().hex
            fetch = fetch_m.ShareFetchRequest
            ack = ack_m.ShareAcknowledgeRequest
            batch = [ack.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=[1])]

            def share_fetch(epoch: int) -> tuple[int, int, Any]:
                part = fetch.FetchPartition(partition_index=0)
                return (
                    78,
                    1,
                    fetch(
                        group_id="g",
                        member_id=member,
                        share_session_epoch=epoch,
                        max_wait_ms=0,
                        min_bytes=1,
                        max_bytes=1 << 20,
                        max_records=10,
                        batch_size=10,
                        topics=[fetch.FetchTopic(topic_id=topic_id, partitions=[part])],
                    ),
                )

            acknowledge = (
                79,
                1,
                ack(
                    group_id="g",
                    member_id=member,
                    share_session_epoch=1,
                    topics=[
                        ack.AcknowledgeTopic(
                            topic_id=topic_id,
                            partitions=[
                                ack.AcknowledgePartition(
                                    partition_index=0, acknowledgement_batches=batch
                                )
                            ],
                        )
                    ],
                ),
            )
            meta = metadata_m.MetadataRequest(
                topics=[metadata_m.MetadataRequest.MetadataRequestTopic(name="led")]
            )

            async def check(lead: int, other: int) -> int:
                """Ask ``other`` (and then ``lead``); the leader epoch named."""
                known, fetched, acked = await raws(
                    cluster, other, (3, 12, meta), share_fetch(0), acknowledge
                )
                p = known.topics[0].partitions[0]
                assert p.leader_id == lead
                host, port = cluster.node(lead).address
                for answer in (fetched, acked):
                    assert answer.error_code == ErrorCode.NONE
                    part = answer.responses[0].partitions[0]
                    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                    current = part.current_leader
                    assert (current.leader_id, current.leader_epoch) == (lead, p.leader_epoch)
                    assert [(e.node_id, e.host, e.port) for e in answer.node_endpoints] == [
                        (lead, host, port)
                    ]
                # The leader's answer for a partition it cannot acknowledge (nothing
                # handed out) names it too, with no endpoints.
                _, acked = await raws(cluster, lead, share_fetch(0), acknowledge)
                part = acked.responses[0].partitions[0]
                assert part.error_code == ErrorCode.INVALID_RECORD_STATE
                current = part.current_leader
                assert (current.leader_id, current.leader_epoch) == (lead, p.leader_epoch)
                assert acked.node_endpoints == []
                return int(p.leader_epoch)

            first_epoch = await check(lead, other)
            # The leader stops: another leads, at a newer epoch, and says so.
            await cluster.stop_node(lead)
            rest = [n for n in cluster.node_ids if n != lead]
            new = await until(
                lambda: (
                    (n := leader(cluster, "led", 0)) in rest
                    and all(cluster.node(r).broker.cluster.leader("led", 0) == n for r in rest)
                    and n
                ),
                "a new leader for led-0",
            )
            assert await check(new, next(n for n in rest if n != new)) > first_epoch

    run(flow)
