"""brokerlite's cluster mode, in process: brokers, a real ZooKeeper, trafka's SDK.

Each test runs a cluster (``serve_cluster``) on the worker's shared ZooKeeper in
a chroot of its own, and checks what the cluster does: topics placed and led
across the brokers, replication to every replica, acks=all and
min.insync.replicas, leadership moving with a broker, requests to the wrong
broker, coordinators, topic changes, and the cases that must fail clearly.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from cluster_helpers import raw_request, run, until
from kazoo.client import KazooClient
from terminal_sigint import sigint_as_at_a_terminal

from trafka.brokerlite.cluster.zk_layout import (
    CONTROLLER,
    CONTROLLER_EPOCH,
    TopicAssignment,
    encode_topic,
    partition_state_path,
    topic_path,
)
from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.brokerlite.errors import ClusterSetupError
from trafka.brokerlite.outcomes import Reply
from trafka.brokerlite.server import serve_broker
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce_msg
from trafka.codec.messages import k01_fetch as fetch_msg
from trafka.codec.messages import k19_create_topics as create_msg
from trafka.codec.messages import k20_delete_topics as delete_msg
from trafka.codec.messages import k37_create_partitions as partitions_msg
from trafka.codec.messages import k43_elect_leaders as elect_msg
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response_frame
from trafka.sdk import NewTopic, open_admin, open_consumer, open_producer
from trafka.sdk.errors import KafkaError

pytestmark = pytest.mark.timeout(120)

# For the tests whose consumers join a group: the group forms at once, without
# the 3 s of group.initial.rebalance.delay.ms (Kafka's own test brokers run with
# 0 too), and __consumer_offsets has 3 partitions, not 50, where its partition
# count is not what a test checks (as tests/brokerlite/cluster_helpers.py's).
GROUPS: dict[str, Any] = {"group_initial_rebalance_delay_ms": 0}
OFFSETS: dict[str, Any] = {**GROUPS, "offsets_topic_num_partitions": 3}


def states(cluster: LocalCluster, topic: str) -> dict[int, Any]:
    """The partition states of ``topic`` as the first running node sees them."""
    node = next(n for n in cluster.node_ids if cluster.running(n))
    image = cluster.node(node).broker.cluster.image
    return {p: s for (t, p), s in image.states.items() if t == topic}


def all_in_sync(cluster: LocalCluster, topic: str, replicas: int) -> bool:
    found = states(cluster, topic)
    return bool(found) and all(len(s.isr) == replicas and s.leader >= 0 for s in found.values())


def controller_of(cluster: LocalCluster) -> int:
    """The controller's node id, as the first running node sees it."""
    node = next(n for n in cluster.node_ids if cluster.running(n))
    controller = cluster.node(node).broker.cluster.image.controller_id
    assert controller >= 0
    return int(controller)


def log_bytes(cluster: LocalCluster, node: int, topic: str, partition: int) -> bytes:
    plog = cluster.node(node).broker.logs.partition(topic, partition)
    return plog.read(plog.log_start_offset, 1 << 30, upper_bound=plog.high_watermark).tobytes()


def test_topics_are_spread_and_replicated_to_every_replica(zk: str) -> None:
    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("spread", 6, 3)])
                described = await admin.describe_cluster()
            assert sorted(b.node_id for b in described.brokers) == [1, 2, 3]
            assert described.controller_id in (1, 2, 3)
            await until(lambda: all_in_sync(cluster, "spread", 3), "every ISR is full")
            leaders = [s.leader for s in states(cluster, "spread").values()]
            # Kafka's placement: each broker leads partitions / brokers of them.
            assert sorted(leaders.count(n) for n in (1, 2, 3)) == [2, 2, 2]
            async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                for i in range(300):
                    await producer.send("spread", b"v%d" % i, key=b"k%d" % (i % 17))
            for p in range(6):
                await until(
                    lambda p=p: len({log_bytes(cluster, n, "spread", p) for n in (1, 2, 3)}) == 1,
                    f"the replicas of spread-{p} agree",
                )
            total = sum(
                cluster.node(1).broker.logs.partition("spread", p).high_watermark for p in range(6)
            )
            assert total == 300
            # Every broker answers Metadata for the whole cluster.
            for node in cluster.node_ids:
                image = cluster.node(node).broker.cluster.image
                assert sorted(image.brokers) == [1, 2, 3]

    run(test)


def test_acks_all_waits_for_the_isr_and_min_insync_replicas_refuses(zk: str) -> None:
    """Kafka's topic config ``min.insync.replicas``: "When a producer sets acks to
    "all" (or "-1"), min.insync.replicas specifies the minimum number of replicas
    that must acknowledge a write for the write to be considered successful. If
    this minimum cannot be met, then the producer will raise an exception (either
    NotEnoughReplicas or NotEnoughReplicasAfterAppend)"; acks 0 and 1 are not
    affected. Here with an ISR shrunk by a stopped broker, and with RF 1 (as on
    the single node: tests/brokerlite/test_server_core.py)."""

    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics(
                    [
                        NewTopic("strict", 1, 3, configs={"min.insync.replicas": "3"}),
                        NewTopic("alone", 1, 1, configs={"min.insync.replicas": "2"}),
                    ]
                )
            # retries=0 below: no broker may still answer from before the topic existed.
            await until(
                lambda: all(
                    cluster.node(n).broker.cluster.leader("alone", 0) >= 0 for n in cluster.node_ids
                ),
                "every broker knows alone-0's leader",
            )
            async with open_producer(
                bootstrap_servers=bs, acks="all", retries=0, enable_idempotence=False
            ) as producer:
                with pytest.raises(KafkaError) as alone:
                    await producer.send_and_wait("alone", b"refused")
                assert alone.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
            async with open_producer(bootstrap_servers=bs, acks=1) as producer:
                assert (await producer.send_and_wait("alone", b"one")).offset == 0
            await until(lambda: all_in_sync(cluster, "strict", 3), "the ISR is full")
            leader = states(cluster, "strict")[0].leader
            follower = next(n for n in (1, 2, 3) if n != leader)
            async with open_producer(bootstrap_servers=bs, acks="all", retries=0) as producer:
                meta = await producer.send_and_wait("strict", b"before")
                assert meta.offset == 0
            await cluster.stop_node(follower)
            await until(lambda: len(states(cluster, "strict")[0].isr) == 2, "the ISR shrinks")
            async with open_producer(
                bootstrap_servers=cluster.bootstrap_servers,
                acks="all",
                retries=0,
                enable_idempotence=False,
            ) as producer:
                with pytest.raises(KafkaError) as refused:
                    await producer.send_and_wait("strict", b"refused")
                assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
            # acks=1 needs only the leader.
            async with open_producer(
                bootstrap_servers=cluster.bootstrap_servers, acks=1, enable_idempotence=False
            ) as producer:
                meta = await producer.send_and_wait("strict", b"leader only")
            assert meta.offset == 1  # nothing was written by the refused produce
            await cluster.start_node(follower)
            await until(lambda: len(states(cluster, "strict")[0].isr) == 3, "the ISR is full again")
            await until(
                lambda: len({log_bytes(cluster, n, "strict", 0) for n in (1, 2, 3)}) == 1,
                "the replicas agree (a follower learns the high watermark on its next fetch)",
            )
            assert cluster.node(leader).broker.logs.partition("strict", 0).high_watermark == 2

    run(test)


def test_leadership_moves_with_a_stopped_broker_and_nothing_acknowledged_is_lost(zk: str) -> None:
    async def test() -> None:
        async with serve_cluster(
            3, zookeeper_connect=zk, min_insync_replicas=2, **OFFSETS
        ) as cluster:
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                await admin.create_topics([NewTopic("moves", 3, 3)])
            await until(lambda: all_in_sync(cluster, "moves", 3), "every ISR is full")
            before = states(cluster, "moves")
            victim = before[0].leader
            acked: list[tuple[int, int, bytes]] = []
            async with open_producer(
                bootstrap_servers=cluster.bootstrap_servers, acks="all"
            ) as producer:
                for i in range(100):
                    meta = await producer.send_and_wait("moves", b"a%d" % i, key=b"%d" % i)
                    acked.append((meta.partition, meta.offset, b"a%d" % i))
                await cluster.stop_node(victim)
                await until(
                    lambda: states(cluster, "moves")[0].leader not in (victim, -1),
                    "a new leader is elected",
                )
                after = states(cluster, "moves")
                assert after[0].leader_epoch > before[0].leader_epoch
                assert victim not in after[0].isr
                for i in range(100, 200):
                    meta = await producer.send_and_wait("moves", b"a%d" % i, key=b"%d" % i)
                    acked.append((meta.partition, meta.offset, b"a%d" % i))
            await cluster.start_node(victim)
            await until(lambda: all_in_sync(cluster, "moves", 3), "the restarted broker rejoins")
            for p in range(3):
                await until(
                    lambda p=p: len({log_bytes(cluster, n, "moves", p) for n in (1, 2, 3)}) == 1,
                    f"the replicas of moves-{p} agree",
                )
            seen: list[tuple[int, int, bytes]] = []
            async with open_consumer(
                "moves",
                bootstrap_servers=cluster.bootstrap_servers,
                group_id="g-moves",
                auto_offset_reset="earliest",
            ) as consumer:
                with trio.move_on_after(30):
                    async for record in consumer:
                        seen.append((record.partition, record.offset, record.value))
                        if len(seen) == len(acked):
                            break
            assert sorted(seen) == sorted(acked)

    run(test)


def test_requests_to_a_broker_that_does_not_lead_get_not_leader(zk: str, make_batch: Any) -> None:
    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk) as cluster:
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                await admin.create_topics([NewTopic("one", 1, 2)])
            await until(lambda: all_in_sync(cluster, "one", 2), "the ISR is full")
            state = states(cluster, "one")[0]

            def leads() -> bool:
                replica = cluster.node(state.leader).broker.cluster.replicas.replica("one", 0)
                return replica is not None and replica.leader_epoch == state.leader_epoch

            await until(leads, "the leader knows it leads")
            outsider = next(n for n in (1, 2, 3) if n != state.leader)
            core = cluster.node(outsider).broker
            # It learns the topic from ZooKeeper on its own time (a loaded
            # machine once had it unknown there still: UNKNOWN_TOPIC_OR_PARTITION).
            await until(lambda: core.logs.topic("one") is not None, "the outsider knows the topic")
            from trafka.brokerlite.errors import NotLeaderOrFollowerError
            from trafka.brokerlite.handlers._util import leader_log

            with pytest.raises(NotLeaderOrFollowerError):
                leader_log(core, "one", 0)
            # A Produce there: NOT_LEADER_OR_FOLLOWER, with the leader (KIP-951).
            header = RequestHeader(
                request_api_key=0, request_api_version=11, correlation_id=1, client_id="t"
            )
            body = produce_msg.ProduceRequest(
                acks=-1,
                timeout_ms=1000,
                topic_data=[
                    produce_msg.ProduceRequest.TopicProduceData(
                        name="one",
                        partition_data=[
                            produce_msg.ProduceRequest.PartitionProduceData(
                                index=0, records=make_batch([b"x"])
                            )
                        ],
                    )
                ],
            )
            reply = core.handle(1, header, body, 0)
            answer = reply.message()
            part = answer.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert part.current_leader.leader_id == state.leader
            assert part.current_leader.leader_epoch == state.leader_epoch
            [endpoint] = answer.node_endpoints
            assert (endpoint.host, endpoint.port) == cluster.node(state.leader).address
            # A Fetch there too: at v16+ with the leader and its endpoint; at v12
            # (which could carry the leader) without, as Kafka (its KafkaApis hints
            # from v16 only). The bytes sent decode, with the codec, to the same.
            for version in (12, 16, 17):
                fetch = fetch_msg.FetchRequest(
                    max_wait_ms=0,
                    topics=[
                        fetch_msg.FetchRequest.FetchTopic(
                            topic="one",
                            topic_id=core.logs.topic("one").topic_id,
                            partitions=[
                                fetch_msg.FetchRequest.FetchPartition(partition=0, fetch_offset=0)
                            ],
                        )
                    ],
                )
                fetch_header = RequestHeader(
                    request_api_key=1, request_api_version=version, correlation_id=2, client_id="t"
                )
                reply = core.handle(1, fetch_header, fetch, 0)
                frame = b"".join(bytes(p) for p in reply.encode())
                sent = decode_response_frame(frame[4:], 1, version)
                [part] = sent.responses[0].partitions
                assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                hinted = (state.leader, state.leader_epoch) if version >= 16 else (-1, -1)
                assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == hinted
                if version >= 16:
                    [endpoint] = sent.node_endpoints
                    assert (endpoint.host, endpoint.port) == cluster.node(state.leader).address
                # The hand-written encoder and the generated codec agree.
                assert part == reply.message().responses[0].partitions[0]
            leader_core = cluster.node(state.leader).broker
            from trafka.brokerlite.errors import FencedLeaderEpochError, UnknownLeaderEpochError

            assert leader_log(leader_core, "one", 0, state.leader_epoch) is not None
            with pytest.raises(UnknownLeaderEpochError):
                leader_log(leader_core, "one", 0, state.leader_epoch + 1)
            if state.leader_epoch > 0:
                with pytest.raises(FencedLeaderEpochError):
                    leader_log(leader_core, "one", 0, state.leader_epoch - 1)

    run(test)


def test_group_coordinator_is_the_leader_of_the_groups_offsets_partition(zk: str) -> None:
    async def test() -> None:
        async with serve_cluster(
            3, zookeeper_connect=zk, offsets_topic_num_partitions=6, **GROUPS
        ) as c:
            bs = c.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("work", 2, 3)])
            async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                for i in range(20):
                    await producer.send("work", b"w%d" % i, key=b"%d" % i)
            values = []
            async with open_consumer(
                "work", bootstrap_servers=bs, group_id="g-coord", auto_offset_reset="earliest"
            ) as consumer:
                async for record in consumer:
                    values.append(record.value)
                    if len(values) == 20:
                        break
                await consumer.commit()
            assert sorted(values) == sorted(b"w%d" % i for i in range(20))
            view = c.node(1).broker.cluster
            assert view.image.topics["__consumer_offsets"].num_partitions == 6
            coordinator = view.coordinator("g-coord")
            assert coordinator in (1, 2, 3)
            # Only the coordinator knows the group's committed offsets.
            committed = c.node(coordinator).broker.groups
            assert committed is not None
            async with open_admin(bootstrap_servers=bs) as admin:
                offsets = await admin.list_consumer_group_offsets("g-coord")
            assert sum(offsets.values()) == 20

    run(test)


def test_topic_changes_reach_every_broker(zk: str) -> None:
    """CreatePartitions' ``timeout_ms`` is "The time in ms to wait for the
    partitions to be created" (CreatePartitionsRequest.json): the controller
    answers once its metadata has the new partitions with their leaders, so the
    admin's next ``list_topics``/``describe_topics`` (asked of the controller)
    shows the new count; the other brokers learn of it from ZooKeeper too."""

    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("grow", 2, 2)])
                with pytest.raises(KafkaError) as too_many:
                    await admin.create_topics([NewTopic("wide", 1, 4)])
                assert too_many.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
                with pytest.raises(KafkaError) as exists:
                    await admin.create_topics([NewTopic("grow", 2, 2)])
                assert exists.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
                await admin.create_partitions({"grow": 5})
                assert (await admin.list_topics())["grow"] == 5
                described = (await admin.describe_topics(["grow"]))["grow"]
                assert [p.partition for p in described.partitions] == [0, 1, 2, 3, 4]
                assert all(p.leader >= 0 for p in described.partitions)
                controller = controller_of(cluster)
                image = cluster.node(controller).broker.cluster.image
                assert image.topics["grow"].num_partitions == 5
                # validate_only changes nothing (and is answered without waiting for it).
                await admin.create_partitions({"grow": 7}, validate_only=True)
                assert (await admin.list_topics())["grow"] == 5
                await until(lambda: len(states(cluster, "grow")) == 5, "5 partitions have states")
                for node in cluster.node_ids:
                    info = cluster.node(node).broker.logs.topic("grow")
                    assert info is not None and info.num_partitions == 5
                await admin.delete_topics(["grow"])
            for node in cluster.node_ids:
                await until(
                    lambda node=node: cluster.node(node).broker.logs.topic("grow") is None,
                    f"node {node} deleted its logs",
                )
                data_dir = Path(cluster.node(node).config.data_dir)
                assert not list(data_dir.glob("grow-*"))

    run(test)


def test_a_data_dir_of_another_cluster_is_refused(zk: str, tmp_path: Path) -> None:
    async def test() -> None:
        async with serve_cluster(1, zookeeper_connect=zk):
            pass
        other_dir = tmp_path / "other"
        async with serve_broker(port=0, data_dir=other_dir, node_id=7):
            pass  # a single-node broker: its data directory gets a cluster id of its own
        with pytest.raises(ClusterSetupError, match="belongs to cluster"):
            async with serve_broker(port=0, data_dir=other_dir, node_id=7, zookeeper_connect=zk):
                pass

    run(test)


def test_a_node_id_already_registered_is_refused(zk: str, tmp_path: Path) -> None:
    async def test() -> None:
        async with serve_cluster(1, zookeeper_connect=zk):
            with pytest.raises(ClusterSetupError, match="already registered"):
                async with serve_broker(
                    port=0,
                    data_dir=tmp_path / "twin",
                    node_id=1,
                    zookeeper_connect=zk,
                    # How long it waits for a previous session's registration to go.
                    zookeeper_session_timeout_ms=1000,
                ):
                    pass

    run(test)


def test_a_controller_whose_epoch_was_superseded_stops_writing(zk: str) -> None:
    async def test() -> None:
        async with serve_cluster(2, zookeeper_connect=zk) as cluster:
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                await admin.create_topics([NewTopic("fenced", 1, 2)])
            await until(lambda: all_in_sync(cluster, "fenced", 2), "the ISR is full")
            zkc = KazooClient(hosts=zk)
            await trio.to_thread.run_sync(zkc.start)
            try:

                def state() -> dict[str, Any]:
                    return dict(json.loads(zkc.get(partition_state_path("fenced", 0))[0]))

                controller = json.loads(zkc.get(CONTROLLER)[0])["brokerid"]
                epoch = int(zkc.get(CONTROLLER_EPOCH)[0])
                # A newer controller came and went: the epoch moved on without it.
                zkc.set(CONTROLLER_EPOCH, str(epoch + 5).encode())
                other = next(n for n in (1, 2) if n != controller)
                if state()["leader"] == controller:
                    await cluster.stop_node(other)  # the ISR shrinks: the controller writes
                else:
                    await cluster.stop_node(other)  # the leader dies: the controller elects
                await until(
                    lambda: state()["controller_epoch"] > epoch + 5 and other not in state()["isr"],
                    "the partition is changed under a new controller epoch",
                )
                # The stale epoch's write was refused; the controller stood down,
                # won the office again and wrote under the next epoch.
                assert int(zkc.get(CONTROLLER_EPOCH)[0]) > epoch + 5
                assert state()["leader"] == controller
            finally:
                zkc.stop()
                zkc.close()

    run(test)


def test_preferred_leader_election_hands_leadership_back(zk: str) -> None:
    async def test() -> None:
        async with serve_cluster(
            3, zookeeper_connect=zk, auto_leader_rebalance_enable=False
        ) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("prefer", 3, 3)])
                await until(lambda: all_in_sync(cluster, "prefer", 3), "every ISR is full")
                view = cluster.node(1).broker.cluster
                preferred = view.replicas_of("prefer", 0)[0]
                assert states(cluster, "prefer")[0].leader == preferred
                await cluster.stop_node(preferred)
                await until(
                    lambda: states(cluster, "prefer")[0].leader not in (preferred, -1),
                    "another replica leads",
                )
                await cluster.start_node(preferred)
                await until(lambda: all_in_sync(cluster, "prefer", 3), "the ISR is full again")
                assert states(cluster, "prefer")[0].leader != preferred
                epoch = states(cluster, "prefer")[0].leader_epoch
                # With timeout_ms 0 the controller still elects, but the answer comes
                # before the new leader can be seen: Kafka's DelayedElectLeader then
                # answers REQUEST_TIMED_OUT (not PREFERRED_LEADER_NOT_AVAILABLE, which
                # is for a preferred replica that is not live or in sync). A fast
                # enough broker may already see it: NONE.
                request = elect_msg.ElectLeadersRequest(
                    election_type=0,
                    topic_partitions=[
                        elect_msg.ElectLeadersRequest.TopicPartitions(
                            topic="prefer", partitions=[0]
                        )
                    ],
                    timeout_ms=0,
                )
                answer = await raw_request(cluster, preferred, 43, 2, request)
                [[result]] = [t.partition_result for t in answer.replica_election_results]
                assert result.error_code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NONE), result
                await until(
                    lambda: states(cluster, "prefer")[0].leader == preferred,
                    "the preferred replica leads",
                )
                assert states(cluster, "prefer")[0].leader_epoch == epoch + 1
                # (The SDK's answer for an election seen done, None, is compared with
                # Kafka's in test_cluster_zk_parity.py.)
                again = await admin.elect_leaders([("prefer", 0)])
                [error] = again.values()
                assert error is not None and error.code == ErrorCode.ELECTION_NOT_NEEDED
                unknown = await admin.elect_leaders([("prefer", 9)])
                [error] = unknown.values()
                assert error is not None and error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                await answers_at_the_requests_timeout(cluster, preferred)
                await grows_a_topic_zookeeper_has(cluster, preferred, zk)

    run(test)


async def answers_at_the_requests_timeout(cluster: LocalCluster, node: int) -> None:
    """CreateTopics, CreatePartitions and DeleteTopics whose change is not seen done
    by ``timeout_ms`` answer REQUEST_TIMED_OUT and the change goes on; with
    ``timeout_ms`` 0 at once, once written (as Kafka 3.9: test_kafka_topic_timeouts.py).
    An empty assignment list is not a null one."""

    def create(name: str, timeout_ms: int) -> Any:
        topic = create_msg.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=2, replication_factor=3, assignments=[], configs=[]
        )
        return create_msg.CreateTopicsRequest(topics=[topic], timeout_ms=timeout_ms)

    def has_leaders(name: str, count: int) -> bool:
        found = states(cluster, name)
        return len(found) == count and all(s.leader >= 0 for s in found.values())

    answer = await raw_request(cluster, node, 19, 7, create("slow", 0))
    assert [t.error_code for t in answer.topics] == [ErrorCode.REQUEST_TIMED_OUT]
    await until(lambda: has_leaders("slow", 2), "the creation went on")
    # An empty assignment list is not a null one: it names no new partition.
    empty = partitions_msg.CreatePartitionsRequest(
        topics=[
            partitions_msg.CreatePartitionsRequest.CreatePartitionsTopic(
                name="slow", count=3, assignments=[]
            )
        ],
        timeout_ms=0,
    )
    answer = await raw_request(cluster, node, 37, 3, empty)
    assert [r.error_code for r in answer.results] == [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
    grow = partitions_msg.CreatePartitionsRequest(
        topics=[
            partitions_msg.CreatePartitionsRequest.CreatePartitionsTopic(
                name="slow", count=3, assignments=None
            )
        ],
        timeout_ms=0,
    )
    answer = await raw_request(cluster, node, 37, 3, grow)
    assert [r.error_code for r in answer.results] == [ErrorCode.REQUEST_TIMED_OUT]
    await until(lambda: has_leaders("slow", 3), "the partition was added")
    delete = delete_msg.DeleteTopicsRequest(topic_names=["slow"], timeout_ms=0)
    answer = await raw_request(cluster, node, 20, 5, delete)
    assert [r.error_code for r in answer.responses] == [ErrorCode.REQUEST_TIMED_OUT]
    await until(lambda: not states(cluster, "slow"), "the deletion went on")


async def grows_a_topic_zookeeper_has(cluster: LocalCluster, node: int, zk: str) -> None:
    """CreatePartitions reads the topic from ZooKeeper, as Kafka 3.9's
    ZkAdminManager.createPartitions does: a topic written there a moment ago is
    known even to a node whose view has not caught up (brokerlite answered
    UNKNOWN_TOPIC_OR_PARTITION from its lagging logs). A topic ZooKeeper does
    not have is unknown; a count that does not grow is INVALID_PARTITIONS."""

    def grow(name: str, count: int, assignments: list[list[int]] | None) -> Any:
        asked = None
        if assignments is not None:
            asked = [
                partitions_msg.CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=a)
                for a in assignments
            ]
        topic = partitions_msg.CreatePartitionsRequest.CreatePartitionsTopic(
            name=name, count=count, assignments=asked
        )
        return partitions_msg.CreatePartitionsRequest(topics=[topic], timeout_ms=0)

    async def codes(request: Any) -> list[int]:
        answer = await raw_request(cluster, node, 37, 3, request)
        return [r.error_code for r in answer.results]

    zkc = KazooClient(hosts=zk)
    await trio.to_thread.run_sync(zkc.start)
    try:
        written = TopicAssignment("fresh", uuid.uuid4(), {0: (1, 2, 3), 1: (2, 3, 1)})
        zkc.create(topic_path("fresh"), encode_topic(written))
        # At once: before this node's watch has brought the topic in.
        assert await codes(grow("fresh", 3, [])) == [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
        assert await codes(grow("fresh", 2, None)) == [ErrorCode.INVALID_PARTITIONS]
        assert await codes(grow("fresh", 3, [[3, 1, 2]])) == [ErrorCode.REQUEST_TIMED_OUT]
        await until(lambda: len(states(cluster, "fresh")) == 3, "the partition was added")
        assert await codes(grow("never-written", 3, None)) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    finally:
        zkc.stop()
        zkc.close()


def test_zookeeper_down_leaders_keep_serving_and_changes_wait(make_zookeeper: Any) -> None:
    zookeeper = make_zookeeper()

    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zookeeper.connect_string) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("calm", 3, 3)])
            await until(lambda: all_in_sync(cluster, "calm", 3), "every ISR is full")
            async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                for i in range(10):
                    await producer.send_and_wait("calm", b"before %d" % i, key=b"%d" % i)
                await trio.to_thread.run_sync(zookeeper.kill)
                # Leaders and followers need no ZooKeeper to replicate and acknowledge.
                for i in range(10):
                    await producer.send_and_wait("calm", b"during %d" % i, key=b"%d" % i)
                async with open_admin(bootstrap_servers=bs) as admin:
                    with pytest.raises(KafkaError) as refused:
                        await admin.create_topics([NewTopic("later", 1, 3)], timeout_ms=3000)
                    assert refused.value.code == ErrorCode.REQUEST_TIMED_OUT
                    assert "ZooKeeper" in str(refused.value)
                await trio.to_thread.run_sync(zookeeper.start)
                async with open_admin(bootstrap_servers=bs) as admin:
                    with trio.fail_after(30):
                        while True:
                            try:
                                await admin.create_topics([NewTopic("later", 1, 3)])
                                break
                            except KafkaError as exc:
                                assert exc.retriable, exc
                                await trio.sleep(0.2)
                for i in range(10):
                    await producer.send_and_wait("calm", b"after %d" % i, key=b"%d" % i)
            total = sum(
                cluster.node(states(cluster, "calm")[p].leader)
                .broker.logs.partition("calm", p)
                .high_watermark
                for p in range(3)
            )
            assert total == 30

    run(test)


def test_reassignment_moves_a_partition_to_new_brokers_under_load(zk: str) -> None:
    async def test() -> None:
        async with serve_cluster(4, zookeeper_connect=zk, **OFFSETS) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("mv", 1, 1)])
                await until(lambda: all_in_sync(cluster, "mv", 1), "the partition has a leader")
                view = cluster.node(1).broker.cluster
                [original] = view.replicas_of("mv", 0)
                target = [4, *[n for n in (1, 2, 3) if n != original][:2]]
                if original == 4:
                    target = [1, 2, 3]
                acked: list[tuple[int, bytes]] = []
                stop = trio.Event()

                async def produce() -> None:
                    async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                        i = 0
                        while not stop.is_set() or i < 200:
                            meta = await producer.send_and_wait("mv", b"r%d" % i)
                            acked.append((meta.offset, b"r%d" % i))
                            i += 1

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(produce)
                    await until(lambda: len(acked) >= 50, "records flow")
                    outcome = await admin.alter_partition_reassignments({("mv", 0): target})
                    assert list(outcome.values()) == [None]
                    await until(
                        lambda: (
                            list(view.replicas_of("mv", 0)) == target
                            and not view.image.topics["mv"].adding
                        ),
                        "the reassignment completes",
                        timeout=30,
                    )
                    assert await admin.list_partition_reassignments() == {}
                    # The ISR is the target: a leaving replica that rejoined it
                    # at the last moment is taken out again.
                    await until(
                        lambda: (
                            all_in_sync(cluster, "mv", 3)
                            and set(states(cluster, "mv")[0].isr) == set(target)
                        ),
                        "the new ISR is full",
                    )
                    assert states(cluster, "mv")[0].leader in target
                    done_at = len(acked)
                    await until(lambda: len(acked) >= done_at + 50, "records flow after the move")
                    stop.set()
                await until(
                    lambda: len({log_bytes(cluster, n, "mv", 0) for n in target}) == 1,
                    "the new replicas agree",
                )
                leader = states(cluster, "mv")[0].leader
                stored = log_bytes(cluster, leader, "mv", 0)
                plog = cluster.node(leader).broker.logs.partition("mv", 0)
                assert plog.high_watermark == len(acked)
                assert stored  # every record acknowledged is in the new replicas' logs
                if original not in target:
                    # Its log there is deleted (Kafka's StopReplica with delete=true).
                    await until(
                        lambda: not cluster.node(original).broker.logs.hosts("mv", 0),
                        "the old replica's log is deleted",
                    )
                    data_dir = cluster.node(original).broker.logs.data_dir
                    assert not (data_dir / "mv-0").exists()
                # Cancelling when nothing moves is refused, as Kafka does.
                cancel = await admin.alter_partition_reassignments({("mv", 0): None})
                [error] = cancel.values()
                assert error is not None and error.code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
                bad = await admin.alter_partition_reassignments({("mv", 0): [1, 9]})
                [error] = bad.values()
                assert error is not None and error.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
            seen = []
            async with open_consumer(
                "mv", bootstrap_servers=bs, group_id="g-mv", auto_offset_reset="earliest"
            ) as consumer:
                with trio.move_on_after(30):
                    async for record in consumer:
                        seen.append((record.offset, record.value))
                        if len(seen) == len(acked):
                            break
            assert seen == acked

    run(test)


def hosting(cluster: LocalCluster, topic: str, partitions: int) -> dict[int, set[int]]:
    """partition -> the nodes that keep a log for it (a directory in their data dir)."""
    out: dict[int, set[int]] = {p: set() for p in range(partitions)}
    for n in cluster.node_ids:
        logs = cluster.node(n).broker.logs
        for p in range(partitions):
            if (logs.data_dir / f"{topic}-{p}").is_dir():
                assert logs.hosts(topic, p), (n, p)
                out[p].add(n)
            else:
                assert not logs.hosts(topic, p), (n, p)
    return out


def test_a_broker_keeps_logs_only_for_the_partitions_it_replicates(zk: str) -> None:
    """As Kafka's brokers: a partition's log exists on its replicas only (every
    broker still knows the whole topic and answers Metadata for it); a
    reassignment that adds a replica creates its log there, one that removes it
    deletes it (StopReplica with delete=true); DescribeLogDirs lists the local
    replicas only."""

    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("rf1", 3, 1), NewTopic("rf2", 3, 2)])
                await until(
                    lambda: all_in_sync(cluster, "rf1", 1) and all_in_sync(cluster, "rf2", 2),
                    "the partitions are online",
                )
                for topic, rf in (("rf1", 1), ("rf2", 2)):
                    want = {p: set(s.isr) for p, s in states(cluster, topic).items()}
                    assert all(len(r) == rf for r in want.values())
                    await until(lambda t=topic, w=want: hosting(cluster, t, 3) == w, "logs placed")
                    for n in cluster.node_ids:
                        info = cluster.node(n).broker.logs.topic(topic)
                        assert info is not None and info.num_partitions == 3
                # Every broker describes every partition (from the cluster's view).
                for n in cluster.node_ids:
                    host, port = cluster.node(n).address
                    async with open_admin(bootstrap_servers=f"{host}:{port}") as one:
                        [described] = (await one.describe_topics(["rf1"])).values()
                        assert len(described.partitions) == 3
                # DescribeLogDirs: each broker lists the replicas it keeps, no others.
                listed = {
                    (d.node_id, tp.partition)
                    for d in await admin.describe_log_dirs()
                    for tp in d.partitions
                    if tp.topic == "rf2"
                }
                assert listed == {
                    (n, p) for p, ns in hosting(cluster, "rf2", 3).items() for n in ns
                }
                # Records produced land on the replicas only, readable as ever.
                async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                    for i in range(30):
                        await producer.send("rf1", b"v%d" % i, partition=i % 3)
                placed = hosting(cluster, "rf1", 3)
                [owner] = placed[0]
                [other] = [n for n in cluster.node_ids if n != owner][:1]
                # Add a replica: its log is created there, and it catches up.
                outcome = await admin.alter_partition_reassignments({("rf1", 0): [owner, other]})
                assert list(outcome.values()) == [None]
                await until(
                    lambda: (
                        hosting(cluster, "rf1", 3)[0] == {owner, other}
                        and set(states(cluster, "rf1")[0].isr) == {owner, other}
                    ),
                    "the added replica has its log and is in sync",
                )
                # Remove the first: its log is deleted there.
                outcome = await admin.alter_partition_reassignments({("rf1", 0): [other]})
                assert list(outcome.values()) == [None]
                await until(
                    lambda: hosting(cluster, "rf1", 3)[0] == {other},
                    "the removed replica's log is deleted",
                )
                plog = cluster.node(other).broker.logs.partition("rf1", 0)
                await until(lambda: plog.high_watermark == 10, "every record is on the new one")

    run(test)


def current_of(assignment: dict[str, Any]) -> dict[int, list[int]]:
    """partition -> replicas, of a reassignment JSON document."""
    return {p["partition"]: p["replicas"] for p in assignment["partitions"]}


def test_cli_reassign_generate_execute_verify_and_elect_leaders(zk: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from trafka.tools.cli import main as cli

    def trafka(*args: str) -> Any:
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)

    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk) as cluster:
            bs = cluster.bootstrap_servers
            created = await trio.to_thread.run_sync(
                trafka, "topics", "create", "-b", bs, "-p", "2", "-r", "1", "cli-moves"
            )
            assert created.exit_code == 0, created.output
            topics_file = tmp_path / "topics.json"
            topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": "cli-moves"}]}))
            generated = await trio.to_thread.run_sync(
                trafka,
                "reassign",
                "generate",
                "-b",
                bs,
                "--topics-to-move-json-file",
                str(topics_file),
                "--broker-list",
                "1,2,3",
            )
            assert generated.exit_code == 0, generated.output
            lines = generated.output.splitlines()
            current = json.loads(lines[lines.index("Current partition replica assignment") + 1])
            assert {p["partition"] for p in current["partitions"]} == {0, 1}
            # Raise the replication factor to 3: every broker holds each partition.
            plan = {
                "version": 1,
                "partitions": [
                    {
                        "topic": "cli-moves",
                        "partition": p,
                        "replicas": [1 + (p + i) % 3 for i in range(3)],
                    }
                    for p in (0, 1)
                ],
            }
            plan_file = tmp_path / "plan.json"
            plan_file.write_text(json.dumps(plan))
            executed = await trio.to_thread.run_sync(
                trafka,
                "reassign",
                "execute",
                "-b",
                bs,
                "--reassignment-json-file",
                str(plan_file),
                "--throttle",
                "50000000",
            )
            assert executed.exit_code == 0, executed.output
            assert "Successfully started partition reassignments for cli-moves-0,cli-moves-1" in (
                executed.output
            )
            # --throttle set the topic's lists (from the one replica each partition
            # had, to the two it gains) and the rates of the brokers of the moves.
            assert "The inter-broker throttle limit was set to 50000000 B/s" in executed.output
            configs = cluster.node(1).broker.cluster.image.configs["cli-moves"]
            owners = {p: r[0] for p, r in current_of(current).items()}
            assert configs["leader.replication.throttled.replicas"] == ",".join(
                f"{p}:{owners[p]}" for p in (0, 1)
            )
            assert configs["follower.replication.throttled.replicas"] == ",".join(
                sorted(f"{p}:{b}" for p in (0, 1) for b in (1, 2, 3) if b != owners[p])
            )
            for n in cluster.node_ids:
                quotas = cluster.node(n).broker.cluster.replication_quotas
                assert quotas.leader.bound == quotas.follower.bound == 50_000_000
            await until(lambda: all_in_sync(cluster, "cli-moves", 3), "the new replicas join")

            async def verified() -> bool:
                out = await trio.to_thread.run_sync(
                    trafka,
                    "reassign",
                    "verify",
                    "-b",
                    bs,
                    "--reassignment-json-file",
                    str(plan_file),
                )
                done = bool(out.exit_code == 0) and "cli-moves-1 is completed." in out.output
                if done:
                    assert "Clearing broker-level throttles on brokers 1,2,3" in out.output
                    assert "Clearing topic-level throttles on topic cli-moves" in out.output
                return done

            with trio.fail_after(30):
                while not await verified():
                    await trio.sleep(0.2)
            # --verify lifted the throttle everywhere.
            await until(
                lambda: all(
                    cluster.node(n).broker.cluster.replication_quotas.leader.bound is None
                    and "leader.replication.throttled.replicas"
                    not in cluster.node(n).broker.cluster.image.configs["cli-moves"]
                    for n in cluster.node_ids
                ),
                "the throttle lifted on every broker",
            )
            elected = await trio.to_thread.run_sync(
                trafka, "elect-leaders", "-b", bs, "--all-topic-partitions"
            )
            assert elected.exit_code == 0, elected.output
            for p in (0, 1):
                assert states(cluster, "cli-moves")[p].leader == 1 + p  # the preferred replica

    run(test)


def test_committed_offsets_survive_the_coordinators_broker(zk: str) -> None:
    async def test() -> None:
        async with serve_cluster(
            3, zookeeper_connect=zk, min_insync_replicas=2, **OFFSETS
        ) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("kept", 3, 3)])
            async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                for i in range(60):
                    await producer.send("kept", b"k%d" % i, key=b"%d" % i)
            first: list[bytes] = []
            async with open_consumer(
                "kept", bootstrap_servers=bs, group_id="g-kept", auto_offset_reset="earliest"
            ) as consumer:
                async for record in consumer:
                    first.append(record.value)
                    if len(first) == 30:
                        break
                await consumer.commit()
            view = cluster.node(1).broker.cluster
            coordinator = view.coordinator("g-kept")
            async with open_admin(bootstrap_servers=bs) as admin:
                before = await admin.list_consumer_group_offsets("g-kept")
            assert sum(before.values()) >= 30
            await cluster.stop_node(coordinator)
            survivor = next(n for n in cluster.node_ids if cluster.running(n))
            view = cluster.node(survivor).broker.cluster
            await until(
                lambda: view.coordinator("g-kept") not in (coordinator, -1),
                "another broker coordinates the group",
            )
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                after = await admin.list_consumer_group_offsets("g-kept")
            assert after == before  # nothing committed was lost with its coordinator
            rest: list[bytes] = []
            async with open_consumer(
                "kept",
                bootstrap_servers=cluster.bootstrap_servers,
                group_id="g-kept",
                auto_offset_reset="earliest",
            ) as consumer:
                with trio.move_on_after(20):
                    async for record in consumer:
                        rest.append(record.value)
                        if len(rest) == 60 - sum(before.values()):
                            break
            # The group resumes where it committed: nothing before it is read again.
            assert len(rest) == 60 - sum(before.values())
            assert sorted(set(first) | set(rest)) == sorted(b"k%d" % i for i in range(60))

    run(test)


def test_controlled_shutdown_hands_leadership_over_before_stopping(
    zk: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk) as cluster:
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                await admin.create_topics([NewTopic("handover", 3, 3)])
            await until(lambda: all_in_sync(cluster, "handover", 3), "every ISR is full")
            leader = states(cluster, "handover")[0].leader
            core = cluster.node(leader).broker
            await until(
                lambda: any(r.role.value == "leader" for r in core.cluster.replicas.led()),
                "the leader knows it leads",
            )
            led = {r.partition for r in core.cluster.replicas.led() if r.topic == "handover"}
            with caplog.at_level("INFO", logger="trafka.brokerlite.cluster"):
                await cluster.stop_node(leader)
            [line] = [
                r.getMessage() for r in caplog.records if "controlled shutdown" in r.getMessage()
            ]
            assert line.startswith(f"controlled shutdown of broker {leader}: leadership moved")
            assert "still leading" not in line
            # Every partition it led has another leader (its own view said so first).
            for partition in led:
                await until(
                    lambda p=partition: states(cluster, "handover")[p].leader not in (leader, -1),
                    f"handover-{partition} has a new leader",
                )

    run(test)


def test_topic_config_changes_reach_every_broker(zk: str) -> None:
    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk) as cluster:
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                await admin.create_topics([NewTopic("tuned", 1, 3)])
                await admin.alter_topic_configs({"tuned": {"retention.ms": "123456"}})
                for node in cluster.node_ids:
                    await until(
                        lambda node=node: (
                            cluster.node(node).broker.logs.config("tuned").retention_ms == 123456
                        ),
                        f"node {node} applies the change",
                    )
                # A config nobody knows is refused before anything is written.
                with pytest.raises(KafkaError) as refused:
                    await admin.alter_topic_configs({"tuned": {"no.such.config": "1"}})
                assert refused.value.code == ErrorCode.INVALID_CONFIG
            await trio.sleep(0.5)  # a later reading of ZooKeeper keeps the change
            for node in cluster.node_ids:
                assert cluster.node(node).broker.logs.config("tuned").retention_ms == 123456

    run(test)


def test_batched_offset_fetch_answers_each_group_where_it_is_coordinated(zk: str) -> None:
    from trafka.codec.messages import k09_offset_fetch as offset_fetch

    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk, offsets_topic_num_partitions=3) as c:
            async with open_admin(bootstrap_servers=c.bootstrap_servers) as admin:
                await admin.list_consumer_group_offsets("g-warm-up")  # creates the topic
            view = c.node(1).broker.cluster
            await until(
                lambda: all(view.coordinator(f"g{i}") >= 0 for i in range(12)),
                "every group has a coordinator",
            )
            by_node: dict[int, str] = {}
            for i in range(12):
                by_node.setdefault(view.coordinator(f"g{i}"), f"g{i}")
            assert len(by_node) >= 2, by_node
            [(here, mine), (_, other), *_] = sorted(by_node.items())
            core = c.node(here).broker
            await until(
                lambda: (
                    core.cluster.coordinator(mine) == here and core.groups.store.loaded_partitions()
                ),
                "the coordinator has loaded its partitions",
            )
            header = RequestHeader(
                request_api_key=9, request_api_version=9, correlation_id=1, client_id="t"
            )
            body = offset_fetch.OffsetFetchRequest(
                groups=[
                    offset_fetch.OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g, topics=None)
                    for g in (mine, other)
                ]
            )
            answer = core.handle(1, header, body, 0).message()
            codes = {g.group_id: g.error_code for g in answer.groups}
            assert codes == {mine: ErrorCode.NONE, other: ErrorCode.NOT_COORDINATOR}

    run(test)


def test_trafka_cluster_command_serves_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    from trafka.brokerlite.dev.local_cluster import cluster_metadata
    from trafka.brokerlite.dev.zookeeper_server import zookeeper_available

    if not zookeeper_available():
        pytest.skip("ZooKeeper is not installed")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trafka.tools.cli",
            "cluster",
            "--nodes",
            "2",
            "--data-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        # `trafka cluster` keeps an ignored SIGINT ignored (a background job's).
        preexec_fn=sigint_as_at_a_terminal,
    )
    try:
        deadline = time.monotonic() + 60
        bootstrap = ""
        assert proc.stdout is not None
        while time.monotonic() < deadline and not bootstrap:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("bootstrap servers: "):
                bootstrap = line.split(": ", 1)[1].strip()
        assert bootstrap, "no bootstrap servers printed"
        for address in bootstrap.split(","):
            host, _, port = address.rpartition(":")
            brokers, controller = cluster_metadata(host, int(port))
            assert brokers == {1, 2} and controller in brokers
        proc.send_signal(signal.SIGINT)
        # 128 + SIGINT, as the other long-running commands exit.
        assert proc.wait(timeout=60) == 130
        assert (tmp_path / "node-1").is_dir() and (tmp_path / "zookeeper").is_dir()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_delete_records_is_answered_once_every_replicas_log_start_moved(zk: str) -> None:
    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("trimmed", 1, 3)])
                async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                    for i in range(20):
                        await producer.send("trimmed", b"t%d" % i)
                low = await admin.delete_records({("trimmed", 0): 12})
                assert list(low.values()) == [12]
                # As Kafka: answered once every in-sync replica's log starts there.
                starts = {
                    node: cluster.node(node).broker.logs.partition("trimmed", 0).log_start_offset
                    for node in cluster.node_ids
                }
                assert set(starts.values()) == {12}, starts
                with pytest.raises(KafkaError) as beyond:
                    await admin.delete_records({("trimmed", 0): 21})
                assert beyond.value.code == ErrorCode.OFFSET_OUT_OF_RANGE

    run(test)


def test_share_groups_and_their_offsets_admin_are_group_coordinator_requests(zk: str) -> None:
    """Share groups are cluster-aware (docs/cluster.md, "Share groups survive their
    brokers"), their offsets admin too: both are answered by the group's
    coordinator only (tests/brokerlite/test_cluster_share_offsets.py serves them)."""
    from trafka.codec.messages import k76_share_group_heartbeat as heartbeat
    from trafka.codec.messages import k90_describe_share_group_offsets as describe

    async def test() -> None:
        async with serve_cluster(1, zookeeper_connect=zk) as cluster:
            core = cluster.node(1).broker

            def ask(key: int, version: int, body: Any) -> Any:
                header = RequestHeader(
                    request_api_key=key,
                    request_api_version=version,
                    correlation_id=1,
                    client_id="t",
                )
                outcome = core.handle(1, header, body, 0)
                assert isinstance(outcome, Reply)
                return outcome.message()

            body = heartbeat.ShareGroupHeartbeatRequest(
                group_id="workers", member_id="m", member_epoch=0, subscribed_topic_names=["t"]
            )
            # (No __consumer_offsets yet: the group has no coordinator.)
            assert ask(76, 1, body).error_code == ErrorCode.NOT_COORDINATOR
            req = describe.DescribeShareGroupOffsetsRequest
            answer = ask(
                90, 0, req(groups=[req.DescribeShareGroupOffsetsRequestGroup(group_id="g")])
            )
            assert [g.error_code for g in answer.groups] == [ErrorCode.NOT_COORDINATOR]

    run(test)


def test_metrics_describe_leaders_the_controller_and_under_replication(zk: str) -> None:
    """Also the ISR counters, Kafka's ops.html: IsrShrinksPerSec, "If a broker goes
    down, ISR for some of the partitions will shrink. When that broker is up
    again, ISR will be expanded once the replicas are fully caught up"
    (IsrExpandsPerSec). The controller removes the stopped broker from the ISRs;
    each partition's leader counts the shrink (a partition the stopped broker
    led gets a new leader, which counts nothing), and the expand when it is back."""
    from prometheus_client.parser import text_string_to_metric_families

    def gauges(cluster: LocalCluster, node: int) -> dict[str, float]:
        text = cluster.node(node).broker.metrics.exposition().decode()
        return {
            s.name: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if not s.labels
        }

    def labelled_samples(
        cluster: LocalCluster, node: int
    ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = cluster.node(node).broker.metrics.exposition().decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics(
                    [NewTopic("metered", 6, 3, configs={"min.insync.replicas": "3"})]
                )
            await until(lambda: all_in_sync(cluster, "metered", 3), "the ISRs fill")
            # all_in_sync reads one node's view of the leaders; each leader's own
            # gauge follows when that node has taken up the role.
            await until(
                lambda: (
                    sum(
                        gauges(cluster, n)["kafka_server_replicamanager_leadercount"]
                        for n in cluster.node_ids
                    )
                    == 6
                ),
                "every partition's leader counts it",
            )
            # Cluster-wide series come from the controller alone and each
            # partition's from its leader, so adding the nodes' scrapes up
            # counts nothing twice (as one kafka_exporter would see the cluster).
            labelled = [labelled_samples(cluster, n) for n in cluster.node_ids]
            assert sum(s.get(("kafka_brokers", ()), 0) for s in labelled) == 3
            async with open_admin(bootstrap_servers=bs) as admin:
                every = await admin.list_topics(include_internal=True)
            total = "kafka_controller_kafkacontroller_globalpartitioncount"
            assert sum(s.get((total, ()), 0) for s in labelled) == sum(every.values())
            offsets = [
                labels
                for s in labelled
                for (name, labels) in s
                if name == "kafka_topic_partition_current_offset" and ("topic", "metered") in labels
            ]
            assert sorted(offsets) == sorted(
                (("partition", str(p)), ("topic", "metered")) for p in range(6)
            )

            # Each partition's two followers report their fetcher lag, 0 once
            # they have caught up (Kafka's FetcherLagMetrics and MaxLag).
            def lags() -> dict[tuple[int, str], float]:
                return {
                    (n, dict(labels)["partition"]): v
                    for n in cluster.node_ids
                    for (name, labels), v in labelled_samples(cluster, n).items()
                    if name == "kafka_server_fetcherlagmetrics_consumerlag"
                    and ("topic", "metered") in labels
                }

            await until(
                lambda: len(lags()) == 12 and not any(lags().values()),
                "every follower reports its lag, caught up",
            )
            followed = {(n, p) for (n, p) in lags()}
            led = {
                (n, dict(labels)["partition"])
                for n, s in zip(cluster.node_ids, labelled, strict=True)
                for (name, labels) in s
                if name == "kafka_topic_partition_current_offset" and ("topic", "metered") in labels
            }
            assert not followed & led  # a leader follows nothing of its own
            seen = {n: gauges(cluster, n) for n in cluster.node_ids}
            controllers = [
                n
                for n, g in seen.items()
                if g["kafka_controller_kafkacontroller_activecontrollercount"]
            ]
            assert len(controllers) == 1
            assert all(
                g["kafka_server_replicamanager_underreplicatedpartitions"] == 0
                for g in seen.values()
            )
            shrinks = "kafka_server_replicamanager_isrshrinks_total"
            expands = "kafka_server_replicamanager_isrexpands_total"
            assert all(g[shrinks] == 0 and g[expands] == 0 for g in seen.values())
            kept = sum(1 for s in states(cluster, "metered").values() if s.leader != 3)
            await cluster.stop_node(3)
            live = [n for n in cluster.node_ids if n != 3]
            await until(
                lambda: (
                    sum(
                        gauges(cluster, n)["kafka_server_replicamanager_underreplicatedpartitions"]
                        for n in live
                    )
                    == 6
                ),
                "every partition is under-replicated without node 3",
            )
            under_min = "kafka_server_replicamanager_underminisrpartitioncount"
            assert sum(gauges(cluster, n)[under_min] for n in live) == 6
            assert kept > 0
            assert sum(gauges(cluster, n)[shrinks] for n in live) == kept
            assert sum(gauges(cluster, n)[expands] for n in live) == 0
            await cluster.start_node(3)
            await until(lambda: all_in_sync(cluster, "metered", 3), "node 3 is back in the ISRs")
            # Every partition is led by 1 or 2 now, and each counted node 3's return.
            await until(
                lambda: sum(gauges(cluster, n)[expands] for n in live) == 6,
                "each leader counts its ISR's expand",
            )
            assert sum(gauges(cluster, n)[shrinks] for n in live) == kept

    run(test)


def _ask(address: tuple[str, int], api_key: int, version: int, body: Any) -> Any:
    """One request on a connection of its own, and its decoded answer (blocking)."""
    import socket

    from trafka.codec.framing import FrameReader
    from trafka.codec.protocol import decode_response, encode_request

    header = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=7)
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(encode_request(header, body))
        frames = FrameReader()
        while (frame := frames.next_frame()) is None:
            data = sock.recv(65536)
            assert data, "the broker closed the connection"
            frames.feed(data)
    return decode_response(frame, api_key, version)[1]


def test_describe_topic_partitions_describes_the_cluster_as_metadata_does(zk: str) -> None:
    """Kafka 4's admin client describes topics with DescribeTopicPartitions (KIP-966):
    in a cluster each partition's leader, epoch, replicas, ISR and offline replicas
    are the cluster's, as Metadata gives them, not the answering node alone.
    DescribeCluster v2 asked to include fenced brokers (KIP-1073) lists the
    survivors, none fenced: on ZooKeeper a broker that lost its session is gone,
    as Kafka 3.9 lists only the live brokers' registrations."""
    from trafka.codec.messages import k03_metadata as metadata
    from trafka.codec.messages import k60_describe_cluster as dc
    from trafka.codec.messages import k75_describe_topic_partitions as dtp

    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk) as cluster:
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                await admin.create_topics([NewTopic("described", 3, 3)])
            await until(lambda: all_in_sync(cluster, "described", 3), "every ISR is full")
            victim = states(cluster, "described")[0].leader
            await cluster.stop_node(victim)
            await until(
                lambda: all(
                    s.leader not in (victim, -1) and victim not in s.isr
                    for s in states(cluster, "described").values()
                ),
                "leaders and ISRs without the stopped broker",
            )
            survivor = next(n for n in cluster.node_ids if cluster.running(n))
            address = cluster.node(survivor).address
            with_fenced = dc.DescribeClusterRequest(include_fenced_brokers=True)
            with trio.fail_after(120):
                while True:
                    answer = await trio.to_thread.run_sync(_ask, address, 60, 2, with_fenced)
                    listed = {b.broker_id: b.is_fenced for b in answer.brokers}
                    if victim not in listed:
                        break
                    await trio.sleep(0.1)
            assert listed == {n: False for n in cluster.node_ids if n != victim}
            request = dtp.DescribeTopicPartitionsRequest(
                topics=[dtp.DescribeTopicPartitionsRequest.TopicRequest(name="described")],
                response_partition_limit=100,
            )
            described = await trio.to_thread.run_sync(_ask, address, 75, 0, request)
            meta = await trio.to_thread.run_sync(
                _ask,
                address,
                3,
                12,
                metadata.MetadataRequest(
                    topics=[metadata.MetadataRequest.MetadataRequestTopic(name="described")]
                ),
            )
            (topic,) = described.topics
            (expected,) = meta.topics
            assert topic.error_code == 0 and topic.topic_id == expected.topic_id
            got = [
                (
                    p.partition_index,
                    p.error_code,
                    p.leader_id,
                    p.leader_epoch,
                    p.replica_nodes,
                    p.isr_nodes,
                    p.offline_replicas,
                )
                for p in topic.partitions
            ]
            want = [
                (
                    p.partition_index,
                    p.error_code,
                    p.leader_id,
                    p.leader_epoch,
                    p.replica_nodes,
                    p.isr_nodes,
                    p.offline_replicas,
                )
                for p in expected.partitions
            ]
            assert got == want
            for p in topic.partitions:
                assert sorted(p.replica_nodes) == [1, 2, 3]
                assert p.offline_replicas == [victim]
                assert p.leader_id != victim and p.leader_epoch > 0
                assert (p.eligible_leader_replicas, p.last_known_elr) == ([], [])

    run(test)


def test_create_topics_validate_only_answers_without_waiting_for_leaders(zk: str) -> None:
    """A validate_only CreateTopics writes nothing, so no leader will be elected:
    the answer comes once validated, not at the request's timeout (Kafka's
    admin client gives up at its own 30 s default first, as kafka-topics did)."""

    async def test() -> None:
        async with (
            serve_cluster(3, zookeeper_connect=zk) as cluster,
            open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin,
        ):
            # a request timeout past the test's deadline: waiting for it fails the test
            await admin.create_topics(
                [NewTopic("checked", 3, 3)], validate_only=True, timeout_ms=600_000
            )
            assert "checked" not in await admin.list_topics()
            await admin.create_topics([NewTopic("made", 3, 3)], timeout_ms=600_000)
            assert "made" in await admin.list_topics()

    run(test, deadline=60)
