"""Targeted readings of partition state znodes: the ordering and epoch rules by
which a broker takes a newer partition state into its last image, and that an
election written to ZooKeeper reaches the brokers that way.

The rules are Kafka's for a LeaderAndIsr request (``ReplicaManager.becomeLeaderOrFollower``
in Kafka's ZooKeeper mode): a state from an older controller epoch is refused
(STALE_CONTROLLER_EPOCH), and so is one with an older leader epoch; here, where the
state comes from its znode, a znode version not newer than the one held is refused
too (a reading that raced a newer one). ZooKeeper stays the source of truth: a
complete reading replaces the image whole.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import pytest
import trio
from cluster_helpers import run, until
from kazoo.client import KazooClient

from trafka.brokerlite.cluster.view import ClusterImage
from trafka.brokerlite.cluster.zk_layout import (
    PartitionState,
    TopicAssignment,
    encode_partition_state,
    parse_partition_state_path,
    partition_state_path,
)
from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.sdk import NewTopic, open_admin

KEY = ("t", 0)


def image(state: PartitionState | None) -> ClusterImage:
    topics = {"t": TopicAssignment("t", uuid.UUID(int=1), {0: (1, 2, 3), 1: (2, 3, 1)})}
    states = {} if state is None else {KEY: state}
    return ClusterImage({}, 1, 4, topics, states, {})


HELD = PartitionState(leader=1, leader_epoch=5, isr=(1, 2, 3), controller_epoch=4, zk_version=7)


def test_an_election_with_a_newer_znode_version_is_taken() -> None:
    elected = PartitionState(2, 6, (2, 3), 4, zk_version=8)
    patched, taken = image(HELD).with_states({KEY: elected})
    assert taken == [KEY]
    assert patched.states[KEY] == elected


def test_a_leaders_isr_change_keeps_the_leader_epoch_and_is_taken() -> None:
    # A leader's own ISR change does not bump the leader epoch (KIP-497's AlterPartition
    # and the ZooKeeper-era ISR update alike); only the znode version moves.
    shrunk = PartitionState(1, 5, (1, 2), 4, zk_version=8)
    patched, taken = image(HELD).with_states({KEY: shrunk})
    assert taken == [KEY]
    assert patched.states[KEY].isr == (1, 2)


@pytest.mark.parametrize(
    "stale",
    [
        PartitionState(2, 6, (2, 3), 4, zk_version=7),  # the znode version held
        PartitionState(2, 6, (2, 3), 4, zk_version=6),  # an older version
        PartitionState(2, 6, (2, 3), 3, zk_version=9),  # STALE_CONTROLLER_EPOCH
        PartitionState(2, 4, (2, 3), 4, zk_version=9),  # an older leader epoch
    ],
    ids=["same-version", "older-version", "older-controller-epoch", "older-leader-epoch"],
)
def test_a_stale_state_is_refused_and_the_image_kept(stale: PartitionState) -> None:
    before = image(HELD)
    patched, taken = before.with_states({KEY: stale})
    assert taken == []
    assert patched is before
    assert patched.states[KEY] == HELD


def test_the_first_state_of_a_known_partition_is_taken() -> None:
    new = PartitionState(1, 0, (1, 2, 3), 4, zk_version=0)
    patched, taken = image(None).with_states({KEY: new})
    assert taken == [KEY]
    assert patched.states[KEY] == new


def test_a_state_of_an_unknown_topic_or_partition_waits_for_a_complete_reading() -> None:
    before = image(HELD)
    unknown = PartitionState(1, 0, (1,), 4, zk_version=0)
    patched, taken = before.with_states({("other", 0): unknown, ("t", 9): unknown})
    assert taken == []
    assert patched is before


def test_each_partition_of_a_reading_is_judged_on_its_own() -> None:
    before = image(HELD)
    other = PartitionState(2, 0, (2, 3, 1), 4, zk_version=0)
    stale = PartitionState(2, 6, (2, 3), 3, zk_version=9)
    patched, taken = before.with_states({KEY: stale, ("t", 1): other})
    assert taken == [("t", 1)]
    assert patched.states[KEY] == HELD
    assert patched.states[("t", 1)] == other


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/brokers/topics/t/partitions/0/state", ("t", 0)),
        ("/brokers/topics/a.b-c_d/partitions/12/state", ("a.b-c_d", 12)),
        ("/brokers/topics/t/partitions/0", None),
        ("/brokers/topics/t", None),
        ("/brokers/ids/1", None),
        ("/brokers/topics/t/partitions/x/state", None),
        ("/brokers/topics/t/partitions/-1/state", None),
        ("/x/brokers/topics/t/partitions/0/state", None),
    ],
)
def test_partition_state_paths_are_parsed(path: str, expected: tuple[str, int] | None) -> None:
    assert parse_partition_state_path(path) == expected
    if expected is not None:
        assert partition_state_path(*expected) == path


def leaders(cluster: LocalCluster, topic: str) -> dict[int, tuple[int, int]]:
    """Each running broker's (leader, leader epoch) of ``topic``-0."""
    out = {}
    for node in cluster.node_ids:
        if cluster.running(node):
            state = cluster.node(node).broker.cluster.state(topic, 0)
            if state is not None:
                out[node] = (state.leader, state.leader_epoch)
    return out


def test_an_election_written_to_zookeeper_reaches_the_brokers_by_a_targeted_reading(
    zk: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An election written to the partition's state znode (as a controller does) is
    learned by both replicas from that znode alone, and the new leader serves."""
    caplog.set_level(logging.DEBUG, logger="trafka.brokerlite.cluster")

    async def test() -> None:
        async with serve_cluster(2, zookeeper_connect=zk) as cluster:
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                await admin.create_topics([NewTopic("targeted", 1, 2)])
            await until(
                lambda: (
                    len(leaders(cluster, "targeted")) == 2
                    and all(s.leader >= 0 and len(s.isr) == 2 for s in states(cluster))
                ),
                "both brokers know the partition with a full ISR",
            )
            zkc = KazooClient(hosts=zk)
            await trio.to_thread.run_sync(zkc.start)
            try:
                path = partition_state_path("targeted", 0)
                data, stat = await trio.to_thread.run_sync(zkc.get, path)
                held: dict[str, Any] = json.loads(data)
                other = next(r for r in held["isr"] if r != held["leader"])
                moved = PartitionState(
                    other, held["leader_epoch"] + 1, tuple(held["isr"]), held["controller_epoch"]
                )
                caplog.clear()
                await trio.to_thread.run_sync(
                    lambda: zkc.set(path, encode_partition_state(moved), version=stat.version)
                )
                want = (other, moved.leader_epoch)
                await until(
                    lambda: set(leaders(cluster, "targeted").values()) == {want},
                    "both brokers learn the new leader",
                )
                # The new leader serves at the new epoch (it raises otherwise).
                cluster.node(other).broker.cluster.replicas.leader_log(
                    "targeted", 0, moved.leader_epoch
                )
            finally:
                zkc.stop()
                zkc.close()
        targeted = [r for r in caplog.records if "a targeted (1 znode(s)) reading" in r.message]
        assert targeted, [r.message for r in caplog.records]

    def states(cluster: LocalCluster) -> list[PartitionState]:
        out = []
        for node in cluster.node_ids:
            state = cluster.node(node).broker.cluster.state("targeted", 0)
            if state is not None:
                out.append(state)
        return out

    run(test)
