"""The cluster driver's complete reading of ZooKeeper (``ClusterReader.read``)
against an in-memory stand-in for kazoo's client, where the cluster changes
while a reading goes on: a broker that comes back and joins an ISR meanwhile is
never in an ISR the reading shows while missing from its brokers (the brokers
are read after the partition states), so the controller does not take it out
of the ISR as dead. And, against a real ZooKeeper, that every znode a reading
reads is watched, a missing one included: the driver has no periodic reading
to catch a change a watch would miss."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from trafka.brokerlite.cluster.controller import plan_leadership
from trafka.brokerlite.cluster.driver.reading import ClusterReader
from trafka.brokerlite.cluster.zk_layout import (
    BROKER_IDS,
    BROKER_TOPICS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    PERSISTENT_PATHS,
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    broker_path,
    encode_broker,
    encode_controller,
    encode_partition_state,
    encode_topic,
    encode_topic_config,
    partition_state_path,
    topic_config_path,
    topic_path,
)


@dataclasses.dataclass
class _Stat:
    version: int


class _Answer:
    """An asynchronous call's answer, taken when the call was made."""

    def __init__(self, read: Callable[[], Any]) -> None:
        try:
            self._value, self._error = read(), None
        except NoNodeError as exc:
            self._value, self._error = None, exc

    def get(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


class _FakeZk:
    """The kazoo calls a reading makes, on znodes in a dict. ``before_read(path)``
    runs before each read: what the rest of the cluster does meanwhile."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.before_read: Callable[[str], None] = lambda _path: None

    def set(self, path: str, data: bytes) -> None:
        old = self.nodes.get(path)
        self.nodes[path] = (data, 0 if old is None else old[1] + 1)

    def delete(self, path: str) -> None:
        del self.nodes[path]

    def _get(self, path: str) -> tuple[bytes, _Stat]:
        self.before_read(path)
        if path not in self.nodes:
            raise NoNodeError(path)
        data, version = self.nodes[path]
        return data, _Stat(version)

    def _children(self, path: str) -> list[str]:
        self.before_read(path)
        prefix = path + "/"
        return sorted({p[len(prefix) :].split("/")[0] for p in self.nodes if p.startswith(prefix)})

    def get(self, path: str, watch: Any = None) -> tuple[bytes, _Stat]:
        return self._get(path)

    def get_async(self, path: str, watch: Any = None) -> _Answer:
        return _Answer(lambda: self._get(path))

    def exists(self, path: str, watch: Any = None) -> _Stat | None:
        self.before_read(path)
        got = self.nodes.get(path)
        return None if got is None else _Stat(got[1])

    def exists_async(self, path: str, watch: Any = None) -> _Answer:
        def exists() -> _Stat | None:
            self.before_read(path)
            got = self.nodes.get(path)
            return None if got is None else _Stat(got[1])

        return _Answer(exists)

    def get_children(self, path: str, watch: Any = None) -> list[str]:
        return self._children(path)

    def get_children_async(self, path: str, watch: Any = None) -> _Answer:
        return _Answer(lambda: self._children(path))


def _broker(node: int) -> bytes:
    return encode_broker(BrokerRegistration(node, "127.0.0.1", 9090 + node), 0)


def _cluster() -> _FakeZk:
    """Brokers 2 and 3 (3 the controller); topic t's partition 0 on replicas 1 and
    2, led by 2 alone in its ISR: broker 1 is down."""
    zk = _FakeZk()
    for node in (2, 3):
        zk.set(broker_path(node), _broker(node))
    zk.set(CONTROLLER, encode_controller(3, 0))
    zk.set(CONTROLLER_EPOCH, b"1")
    zk.set(BROKER_TOPICS, b"")
    zk.set(topic_path("t"), encode_topic(TopicAssignment("t", uuid.uuid4(), {0: (1, 2)})))
    zk.set(partition_state_path("t", 0), encode_partition_state(PartitionState(2, 3, (2,), 1)))
    zk.set(BROKER_IDS, b"")
    return zk


def _read(zk: _FakeZk) -> Any:
    return ClusterReader(zk, lambda: None, lambda _path: None).read()


def test_a_broker_that_joins_an_isr_during_a_reading_is_read_as_live() -> None:
    zk = _cluster()
    came_back = False

    def meanwhile(path: str) -> None:
        # While the reading is under way (when it reads the topic): broker 1
        # registers, fetches, and its leader adds it to the ISR.
        nonlocal came_back
        if path == topic_path("t") and not came_back:
            came_back = True
            zk.set(broker_path(1), _broker(1))
            state = PartitionState(2, 3, (2, 1), 1)
            zk.set(partition_state_path("t", 0), encode_partition_state(state))

    zk.before_read = meanwhile
    image = _read(zk)
    assert came_back
    assert image.states[("t", 0)].isr == (2, 1)
    assert sorted(image.brokers) == [1, 2, 3]
    # So the controller leaves the ISR as it is (no new leader epoch).
    assert (
        plan_leadership(image.topics, image.states, image.brokers.keys(), controller_epoch=1) == []
    )


def test_a_broker_that_stops_during_a_reading_is_read_as_gone() -> None:
    """The other way: an ISR member whose registration went during the reading is
    missing from the brokers, and the controller takes it out of the ISR."""
    zk = _cluster()
    zk.set(broker_path(1), _broker(1))
    zk.set(partition_state_path("t", 0), encode_partition_state(PartitionState(2, 3, (2, 1), 1)))

    def meanwhile(path: str) -> None:
        if path == topic_path("t") and broker_path(1) in zk.nodes:
            zk.delete(broker_path(1))

    zk.before_read = meanwhile
    image = _read(zk)
    assert sorted(image.brokers) == [2, 3]
    (write,) = plan_leadership(image.topics, image.states, image.brokers.keys(), controller_epoch=1)
    assert (write.state.leader, write.state.leader_epoch, write.state.isr) == (2, 4, (2,))


#: How long a watch may take to fire before the test fails (not a measurement).
_WATCH_WAIT_S = 30.0


def _seed(zkc: KazooClient) -> None:
    """Broker 2 registered and the controller; topic t (partition 0 led by 2) whose
    config znode was never written."""
    for path in PERSISTENT_PATHS:  # as the driver makes them when it joins
        zkc.ensure_path(path)
    zkc.create(broker_path(2), _broker(2), makepath=True)
    zkc.create(CONTROLLER, encode_controller(2, 0))
    zkc.create(CONTROLLER_EPOCH, b"1")
    zkc.create(
        topic_path("t"), encode_topic(TopicAssignment("t", uuid.uuid4(), {0: (2,)})), makepath=True
    )
    zkc.create(
        partition_state_path("t", 0),
        encode_partition_state(PartitionState(2, 0, (2,), 1)),
        makepath=True,
    )


_CHANGES: dict[str, Callable[[KazooClient], Any]] = {
    # A read of a missing znode leaves no watch: its creation is seen through exists.
    "a missing topic config created": lambda zkc: zkc.create(
        topic_config_path("t"), encode_topic_config({"retention.ms": "1000"}), makepath=True
    ),
    "the controller epoch bumped": lambda zkc: zkc.set(CONTROLLER_EPOCH, b"2"),
    "the topic's assignment changed": lambda zkc: zkc.set(
        topic_path("t"), encode_topic(TopicAssignment("t", uuid.uuid4(), {0: (2, 3)}))
    ),
    "a broker registered": lambda zkc: zkc.create(broker_path(3), _broker(3)),
    "a topic created": lambda zkc: zkc.create(
        topic_path("u"), encode_topic(TopicAssignment("u", uuid.uuid4(), {0: (2,)}))
    ),
    "the controller gone": lambda zkc: zkc.delete(CONTROLLER),
}


@pytest.mark.parametrize("change", sorted(_CHANGES))
def test_a_change_after_a_reading_fires_its_watch(zk: str, change: str) -> None:
    zkc = KazooClient(hosts=zk)
    zkc.start(timeout=15)
    try:
        _seed(zkc)
        fired = threading.Event()
        reader = ClusterReader(zkc, fired.set, lambda _path: None)
        before = reader.read()
        assert before.configs["t"] == {} and before.controller_id == 2
        assert not fired.is_set()
        _CHANGES[change](zkc)
        assert fired.wait(_WATCH_WAIT_S), f"no watch fired for {change}"
        after = reader.read()
        if change == "a missing topic config created":
            assert after.configs["t"] == {"retention.ms": "1000"}
    finally:
        zkc.stop()
        zkc.close()


def test_a_partition_state_change_after_a_reading_is_noted_for_a_targeted_reading(
    zk: str,
) -> None:
    zkc = KazooClient(hosts=zk)
    zkc.start(timeout=15)
    try:
        _seed(zkc)
        noted: list[str] = []
        fired = threading.Event()

        def note(path: str) -> None:
            noted.append(path)
            fired.set()

        ClusterReader(zkc, lambda: None, note).read()
        path = partition_state_path("t", 0)
        zkc.set(path, encode_partition_state(PartitionState(2, 1, (2,), 1)))
        assert fired.wait(_WATCH_WAIT_S)
        assert noted == [path]
    finally:
        zkc.stop()
        zkc.close()


class _Counting:
    """A real kazoo client whose reads of each znode are counted (what a reading
    asks ZooKeeper for; everything else passes through)."""

    def __init__(self, zkc: KazooClient) -> None:
        self.zkc = zkc
        self.handler = zkc.handler
        self.reads: dict[str, int] = {}

    def _count(self, path: str) -> None:
        self.reads[path] = self.reads.get(path, 0) + 1

    def get_async(self, path: str, watch: Any = None) -> Any:
        self._count(path)
        return self.zkc.get_async(path, watch=watch)

    def get(self, path: str, watch: Any = None) -> Any:
        self._count(path)
        return self.zkc.get(path, watch=watch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.zkc, name)


def test_a_reading_reads_again_only_the_znodes_that_changed(zk: str) -> None:
    """What a reading remembers (reading.py): a znode whose watch has not fired is
    not read again; one that changed is, and the reading shows its new content,
    also right after a write of the reader's own session (ZooKeeper sends the
    write's notification before its answer; the reading waits for kazoo to run it)."""
    zkc = KazooClient(hosts=zk)
    zkc.start(timeout=15)
    try:
        _seed(zkc)
        counting = _Counting(zkc)
        reader = ClusterReader(counting, lambda: None, lambda _path: None)
        first = reader.read()
        assert first.states[("t", 0)].leader_epoch == 0
        state, topic = partition_state_path("t", 0), topic_path("t")
        assert counting.reads[state] == 1 and counting.reads[topic] == 1
        again = reader.read()
        assert again.states == first.states and again.topics == first.topics
        assert counting.reads[state] == 1 and counting.reads[topic] == 1

        # Changed by this session, read at once: the new content, read once more.
        zkc.set(state, encode_partition_state(PartitionState(2, 1, (2,), 1)))
        assert reader.read().states[("t", 0)].leader_epoch == 1
        assert counting.reads[state] == 2 and counting.reads[topic] == 1
        moved = TopicAssignment("t", first.topics["t"].topic_id, {0: (2,), 1: (2,)})
        zkc.set(topic, encode_topic(moved))
        zkc.create(
            topic_config_path("t"), encode_topic_config({"retention.ms": "5"}), makepath=True
        )
        after = reader.read()
        assert after.topics["t"].replicas == {0: (2,), 1: (2,)}
        assert after.configs["t"] == {"retention.ms": "5"}
        assert ("t", 1) not in after.states  # not written yet: watched through exists
        zkc.create(
            partition_state_path("t", 1),
            encode_partition_state(PartitionState(2, 0, (2,), 1)),
            makepath=True,
        )
        assert reader.read().states[("t", 1)].leader == 2
        assert counting.reads[topic] == 2

        # A topic deleted and made again under the same name is read anew.
        zkc.delete(topic_path("t"), recursive=True)
        assert "t" not in reader.read().topics
        zkc.create(topic, encode_topic(TopicAssignment("t", uuid.uuid4(), {0: (2,)})))
        zkc.create(state, encode_partition_state(PartitionState(2, 7, (2,), 1)), makepath=True)
        assert reader.read().states[("t", 0)].leader_epoch == 7

        # Forgetting (a lost session, the safety net) reads every znode again.
        reads = counting.reads[state]
        reader.forget()
        assert reader.read().states[("t", 0)].leader_epoch == 7
        assert counting.reads[state] == reads + 1
    finally:
        zkc.stop()
        zkc.close()
