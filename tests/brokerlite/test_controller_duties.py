"""The controller's duties (``brokerlite/cluster/driver/controller_duties.py``) on a
reading, with a stand-in for kazoo's client that records the writes.

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

from trafka.brokerlite.cluster.driver.controller_duties import Controller
from trafka.brokerlite.cluster.view import ClusterImage
from trafka.brokerlite.cluster.zk_layout import (
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    decode_partition_state,
    partition_state_path,
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
