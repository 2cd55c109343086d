"""The controller's duties (``brokerlite/cluster/driver/controller_duties.py``) on a
reading, with a stand-in for kazoo's client that records the writes (and, for a
reassignment's steps, against a real ZooKeeper).

A topic's ``unclean.leader.election.enable`` turned on while one of its partitions
is offline (no ISR member live, another replica live): Kafka 3.9's ZooKeeper
controller elects that replica on the change itself (``TopicConfigHandler``
hands the change to ``KafkaController.enableTopicUncleanLeaderElection``,
which runs the offline partitions' election at once). brokerlite's controller
learns of the change from the reading the topic config znode's watch causes, and
plans on what that reading says (it once planned on the broker's previous
image, and so elected only on the next periodic reading, then 5 s later).
"""

from __future__ import annotations

import uuid
from typing import Any

from kazoo.client import KazooClient

from trafka.brokerlite.cluster.driver.controller_duties import Controller
from trafka.brokerlite.cluster.driver.reading import ClusterReader
from trafka.brokerlite.cluster.view import ClusterImage
from trafka.brokerlite.cluster.zk_layout import (
    PERSISTENT_PATHS,
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    broker_path,
    decode_partition_state,
    decode_topic,
    encode_broker,
    encode_partition_state,
    encode_topic,
    partition_state_path,
    topic_path,
)
from trafka.brokerlite.config import BrokerConfig


class _Txn:
    def __init__(self, zk: _RecordingZk) -> None:
        self.zk = zk
        self.ops: list[tuple[str, str, bytes | None]] = []

    def check(self, path: str, version: int) -> None:
        self.ops.append(("check", path, None))

    def create(self, path: str, data: bytes) -> None:
        self.ops.append(("create", path, data))

    def set_data(self, path: str, data: bytes, version: int) -> None:
        self.ops.append(("set", path, data))

    def commit(self) -> list[Any]:
        self.zk.written += [(path, data) for kind, path, data in self.ops if kind != "check"]
        return [True] * len(self.ops)


class _RecordingZk:
    """What a controller's planning writes: partition states, in transactions."""

    def __init__(self) -> None:
        self.written: list[tuple[str, bytes | None]] = []

    def transaction(self) -> _Txn:
        return _Txn(self)

    def ensure_path(self, path: str) -> None:
        pass


def _image(configs: dict[str, dict[str, str]]) -> ClusterImage:
    topic = TopicAssignment("forced", uuid.uuid4(), {0: (1, 2)})
    return ClusterImage(
        brokers={2: BrokerRegistration(2, "127.0.0.1", 9092)},  # broker 1 is down
        controller_id=2,
        controller_epoch=3,
        topics={"forced": topic},
        # Offline: its only ISR member (1) is down; replica 2 is live, out of the ISR.
        states={("forced", 0): PartitionState(-1, 5, (1,), controller_epoch=3, zk_version=7)},
        configs=configs,
    )


def _controller(held: ClusterImage) -> tuple[Controller, _RecordingZk]:
    """A controller in office whose last reading was ``held``."""
    zk = _RecordingZk()
    controller = Controller(zk, BrokerConfig(node_id=2), read=lambda: held)
    controller.epoch, controller._epoch_version = 3, 2  # as if elected
    return controller, zk


def test_a_topic_allowing_unclean_election_is_elected_on_the_reading_that_shows_it() -> None:
    before = _image({})
    after = _image({"forced": {"unclean.leader.election.enable": "true"}})
    controller, zk = _controller(held=before)

    assert controller.control(after)

    [(path, data)] = zk.written
    assert path == partition_state_path("forced", 0)
    assert data is not None
    state = decode_partition_state("forced", 0, data, 0)
    # The live replica out of the ISR leads alone, in a new leader epoch.
    assert (state.leader, state.leader_epoch, state.isr) == (2, 6, (2,))


def test_a_topic_whose_reading_turns_unclean_election_off_is_left_offline() -> None:
    before = _image({"forced": {"unclean.leader.election.enable": "true"}})
    after = _image({"forced": {"unclean.leader.election.enable": "false"}})
    controller, zk = _controller(held=before)

    controller.control(after)

    assert zk.written == []


def test_a_reassignment_that_can_complete_at_once_is_completed_on_one_reading(zk: str) -> None:
    """Against a real ZooKeeper: a move that only removes a replica (its target,
    broker 2, already in sync) needs two steps, its start's leader epoch bump and
    its completion; the controller takes both on one reading, as Kafka's completes
    it within the event that started it. The watches of its own writes bring
    nothing newer than the reading after them, so it plans again itself
    (``settle``) instead of waiting for a periodic reading."""
    zkc = KazooClient(hosts=zk)
    zkc.start(timeout=15)
    try:
        for path in PERSISTENT_PATHS:
            zkc.ensure_path(path)
        for node in (1, 2):
            zkc.create(broker_path(node), encode_broker(BrokerRegistration(node, "h", node), 0))
        moving = TopicAssignment("t", uuid.uuid4(), {0: (2, 1)}, removing={0: (1,)})
        zkc.create(topic_path("t"), encode_topic(moving))
        state = PartitionState(1, 4, (1, 2), controller_epoch=1)
        zkc.create(partition_state_path("t", 0), encode_partition_state(state), makepath=True)
        reader = ClusterReader(zkc, lambda: None, lambda _path: None)
        controller = Controller(zkc, BrokerConfig(node_id=2), read=reader.read)
        assert controller.elect()

        image, settled = controller.settle(reader.read())

        assert settled
        done = decode_topic("t", zkc.get(topic_path("t"))[0])
        assert (done.replicas, done.removing) == ({0: (2,)}, {})
        final = image.states[("t", 0)]
        # The start's bump (5), then the completion's (6): broker 2 leads alone.
        assert (final.leader, final.leader_epoch, final.isr) == (2, 6, (2,))
        assert image.topics["t"].replicas == {0: (2,)}
    finally:
        zkc.stop()
        zkc.close()
