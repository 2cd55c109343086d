"""The replica manager (:mod:`trafka.brokerlite.cluster.replica_manager`) over real logs, no sockets.

Each test drives one broker's :class:`ReplicaManager` the way the cluster driver
does: partition states in (as read from ZooKeeper), follower fetches and times
in, ISR writes out. Logs are real :class:`LogManager` logs in ``tmp_path``.
The rules checked are Kafka's ``Partition``/``ReplicaManager`` ones stated in the
module docstring.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trafka.brokerlite.cluster.replica_manager import (
    FollowerFetch,
    IsrWrite,
    Replica,
    ReplicaManager,
    Role,
    check_epoch,
)
from trafka.brokerlite.cluster.zk_layout import PartitionState, TopicAssignment
from trafka.brokerlite.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from trafka.brokerlite.storage.log_manager import LogManager
from trafka.brokerlite.storage.partition import PartitionLog
from trafka.codec.errors import ErrorCode
from trafka.codec.records import decode_batch, encode_batch

T0 = 1_700_000_000_000
LAG = 10_000  # replica.lag.time.max.ms
TOPIC = "t"
TID = uuid.UUID("a56e2155-dd9c-483c-901a-6dd9e31df351")


def batch(count: int, *, base_offset: int = 0, leader_epoch: int = -1) -> bytes:
    return encode_batch(
        [(T0, None, b"v%d" % i, []) for i in range(count)],
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
    )


def assignment(
    *replicas: tuple[int, ...],
    adding: dict[int, tuple[int, ...]] | None = None,
    removing: dict[int, tuple[int, ...]] | None = None,
) -> dict[str, TopicAssignment]:
    return {
        TOPIC: TopicAssignment(TOPIC, TID, dict(enumerate(replicas)), adding or {}, removing or {})
    }


def st(
    leader: int, epoch: int, isr: tuple[int, ...], version: int = 0, ce: int = 1
) -> PartitionState:
    return PartitionState(leader, epoch, isr, ce, version)


@dataclass
class Node:
    """One broker: its logs, its replica manager and what its callbacks saw."""

    logs: LogManager
    rm: ReplicaManager
    hw_moves: list[tuple[str, int]] = field(default_factory=list)
    truncations: list[tuple[str, int]] = field(default_factory=list)
    min_isr: dict[str, int] = field(default_factory=dict)

    def log(self, partition: int = 0) -> PartitionLog:
        return self.logs.partition(TOPIC, partition)

    def replica(self, partition: int = 0) -> Replica:
        r = self.rm.replica(TOPIC, partition)
        assert r is not None
        return r

    def apply(
        self,
        topics: dict[str, TopicAssignment],
        states: dict[int, PartitionState],
        now_ms: int = T0,
    ) -> bool:
        return self.rm.apply(topics, {(TOPIC, p): s for p, s in states.items()}, now_ms)

    def produce(self, count: int, partition: int = 0) -> int:
        """A leader's append of ``count`` records; the log end offset after it."""
        self.log(partition).append(batch(count), now_ms=T0)
        self.rm.appended(TOPIC, partition)
        return self.log(partition).log_end_offset

    def replicate(self, count: int, leader_epoch: int, partition: int = 0) -> int:
        """A follower's append of the leader's batch; the log end offset after it."""
        plog = self.log(partition)
        plog.append_replicated(
            batch(count, base_offset=plog.log_end_offset, leader_epoch=leader_epoch),
            now_ms=T0,
        )
        return plog.log_end_offset

    def fetch(self, replica_id: int, offset: int, now_ms: int = T0, partition: int = 0) -> None:
        self.rm.on_follower_fetch(TOPIC, partition, replica_id, offset, now_ms)


MakeNode = Callable[..., Node]


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[MakeNode]:
    """``make_node(node_id=1, partitions=1, min_isr=1)``: a broker with topic ``t``."""
    opened: list[LogManager] = []

    def make(node_id: int = 1, partitions: int = 1, min_isr: int = 1) -> Node:
        logs = LogManager(tmp_path / f"broker-{node_id}", now_ms=T0)
        opened.append(logs)
        logs.create_topic(TOPIC, partitions, topic_id=TID, now_ms=T0)
        hw_moves: list[tuple[str, int]] = []
        truncations: list[tuple[str, int]] = []
        min_isrs = {TOPIC: min_isr}
        rm = ReplicaManager(
            node_id,
            logs,
            replica_lag_time_max_ms=LAG,
            min_insync_replicas=min_isrs.__getitem__,
            on_high_watermark=lambda t, p: hw_moves.append((t, p)),
            on_truncate=lambda t, p: truncations.append((t, p)),
        )
        return Node(logs, rm, hw_moves, truncations, min_isrs)

    yield make
    for logs in opened:
        logs.close()


# -- roles --------------------------------------------------------------------------------------


def test_leader_from_the_partition_state(make_node: MakeNode) -> None:
    node = make_node(1)
    assert node.apply(assignment((1, 2, 3)), {0: st(1, 3, (1, 2, 3), version=5, ce=2)}) is False
    r = node.rm.replica(TOPIC, 0)
    assert r is not None
    assert r.role is Role.LEADER
    assert (r.leader, r.leader_epoch, r.isr, r.replicas) == (1, 3, (1, 2, 3), (1, 2, 3))
    assert (r.zk_version, r.controller_epoch) == (5, 2)
    assert node.log().epoch_entries == [(3, 0)]
    assert node.rm.leader_log(TOPIC, 0) is node.log()
    assert list(node.rm.led()) == [r]
    assert node.rm.follower_fetches() == []


def test_leader_epoch_starts_at_the_log_end_and_stamps_appends(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((2, 1)), {0: st(2, 0, (2, 1))})
    assert node.replicate(3, leader_epoch=0) == 3
    node.rm.truncated(TOPIC, 0, 3)
    # Broker 2 fails; the controller elects this broker at epoch 1.
    assert node.apply(assignment((2, 1)), {0: st(1, 1, (1,), version=1)}) is True
    assert node.log().epoch_entries == [(0, 0), (1, 3)]
    assert node.log().end_offset_for_epoch(0) == (0, 3)
    node.produce(2)
    data = node.log().read(3, 1 << 20).tobytes()
    assert decode_batch(data).header.partition_leader_epoch == 1
    # A new election of this same broker at epoch 4 starts another epoch at its log end.
    node.apply(assignment((2, 1)), {0: st(1, 4, (1,), version=2)})
    assert node.log().epoch_entries == [(0, 0), (1, 3), (4, 5)]
    assert node.replica().leader_epoch == 4


def test_follower_from_the_partition_state(make_node: MakeNode) -> None:
    node = make_node(2)
    assert node.apply(assignment((1, 2, 3)), {0: st(1, 3, (1, 2, 3), version=5)}) is True
    r = node.rm.replica(TOPIC, 0)
    assert r is not None and r.role is Role.FOLLOWER
    assert (r.leader, r.leader_epoch, r.isr) == (1, 3, (1, 2, 3))
    assert node.rm.follower_fetches() == [FollowerFetch(TOPIC, 0, 1, 3, True)]
    assert node.rm.is_current_follower(TOPIC, 0, 1, 3)
    assert not node.rm.is_current_follower(TOPIC, 0, 1, 2)
    assert not node.rm.is_current_follower(TOPIC, 0, 3, 3)
    assert list(node.rm.led()) == []
    with pytest.raises(NotLeaderOrFollowerError, match="leader is 1"):
        node.rm.leader_log(TOPIC, 0)


def test_offline_partition_makes_a_follower_of_no_one(make_node: MakeNode) -> None:
    node = make_node(2)
    node.apply(assignment((1, 2)), {0: st(-1, 3, (1,))})
    r = node.rm.replica(TOPIC, 0)
    assert r is not None and r.role is Role.FOLLOWER and r.leader == -1
    assert r.needs_truncation is False
    assert node.rm.follower_fetches() == []  # nothing to fetch from
    with pytest.raises(NotLeaderOrFollowerError):
        node.rm.leader_log(TOPIC, 0)


def test_partitions_not_assigned_here_get_no_replica(make_node: MakeNode) -> None:
    node = make_node(9, partitions=2)
    changed = node.apply(assignment((1, 2), (9, 1)), {0: st(1, 0, (1, 2)), 1: st(9, 0, (9, 1))})
    assert changed is False
    assert node.rm.replica(TOPIC, 0) is None
    assert node.rm.replica(TOPIC, 1) is not None
    with pytest.raises(NotLeaderOrFollowerError):
        node.rm.leader_log(TOPIC, 0)
    with pytest.raises(UnknownTopicOrPartitionError):
        node.rm.leader_log("no-such-topic", 0)


def test_partition_without_state_gets_no_replica(make_node: MakeNode) -> None:
    node = make_node(1, partitions=2)
    node.apply(assignment((1,), (1,)), {1: st(1, 0, (1,))})
    assert node.rm.replica(TOPIC, 0) is None
    assert [(r.topic, r.partition) for r in node.rm.replicas()] == [(TOPIC, 1)]


def test_adding_replica_of_a_reassignment_follows(make_node: MakeNode) -> None:
    node = make_node(4)
    node.apply(assignment((1, 2, 4), adding={0: (4,)}), {0: st(1, 2, (1, 2))})
    r = node.rm.replica(TOPIC, 0)
    assert r is not None and r.role is Role.FOLLOWER and r.replicas == (1, 2, 4)
    # Only in adding (the full set not rewritten yet): still a replica, listed last.
    other = make_node(5)
    other.apply(assignment((1, 2), adding={0: (5,)}), {0: st(1, 2, (1, 2))})
    r5 = other.rm.replica(TOPIC, 0)
    assert r5 is not None and r5.replicas == (1, 2, 5)


def test_same_state_again_changes_nothing(make_node: MakeNode) -> None:
    leader = make_node(1)
    leader.apply(assignment((1, 2)), {0: st(1, 0, (1, 2), version=3)})
    leader.produce(2)
    before = leader.rm.replica(TOPIC, 0)
    assert leader.apply(assignment((1, 2)), {0: st(1, 0, (1, 2), version=3)}) is False
    assert leader.rm.replica(TOPIC, 0) is before
    assert leader.log().epoch_entries == [(0, 0)]

    follower = make_node(2)
    follower.apply(assignment((1, 2)), {0: st(1, 0, (1, 2), version=3)})
    follower.rm.truncated(TOPIC, 0, 0)
    assert follower.apply(assignment((1, 2)), {0: st(1, 0, (1, 2), version=3)}) is False
    assert follower.rm.follower_fetches() == [FollowerFetch(TOPIC, 0, 1, 0, False)]


def test_new_leader_or_epoch_restarts_the_follower(make_node: MakeNode) -> None:
    node = make_node(2)
    node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1, 2, 3))})
    node.rm.truncated(TOPIC, 0, 0)
    assert node.apply(assignment((1, 2, 3)), {0: st(3, 1, (2, 3), version=1)}) is True
    assert node.rm.follower_fetches() == [FollowerFetch(TOPIC, 0, 3, 1, True)]
    node.rm.truncated(TOPIC, 0, 0)
    # Same leader, new epoch (e.g. a preferred election back and forth): truncate again.
    assert node.apply(assignment((1, 2, 3)), {0: st(3, 2, (2, 3), version=2)}) is True
    assert node.rm.follower_fetches() == [FollowerFetch(TOPIC, 0, 3, 2, True)]


def test_follower_isr_change_is_not_a_fetcher_change(make_node: MakeNode) -> None:
    node = make_node(2)
    node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1, 2, 3))})
    assert node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1, 2), version=1)}) is False
    r = node.rm.replica(TOPIC, 0)
    assert r is not None and (r.isr, r.zk_version) == ((1, 2), 1)


def test_leader_becomes_follower(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))})
    node.produce(3)
    assert node.apply(assignment((1, 2)), {0: st(2, 1, (2,), version=1)}) is True
    r = node.rm.replica(TOPIC, 0)
    assert r is not None and r.role is Role.FOLLOWER and r.needs_truncation
    assert node.rm.follower_fetches() == [FollowerFetch(TOPIC, 0, 2, 1, True)]
    with pytest.raises(NotLeaderOrFollowerError):
        node.rm.leader_log(TOPIC, 0)
    with pytest.raises(NotLeaderOrFollowerError):
        node.fetch(2, 3)
    assert node.rm.acks_all_outcome(TOPIC, 0, 3) is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_follower_becomes_leader(make_node: MakeNode) -> None:
    node = make_node(2)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))})
    node.rm.truncated(TOPIC, 0, 0)
    node.replicate(4, leader_epoch=0)
    assert node.apply(assignment((1, 2)), {0: st(2, 1, (2,), version=1)}) is True
    assert node.rm.follower_fetches() == []
    assert node.rm.leader_log(TOPIC, 0, 1) is node.log()
    assert node.log().epoch_entries == [(0, 0), (1, 4)]


def test_replica_no_longer_assigned_is_dropped(make_node: MakeNode) -> None:
    follower = make_node(2, partitions=2)
    follower.apply(assignment((1, 2), (2, 1)), {0: st(1, 0, (1, 2)), 1: st(2, 0, (2, 1))})
    # Reassigned away from partition 0, where it followed: the fetchers must change.
    assert follower.apply(assignment((1, 3), (2, 1)), {0: st(1, 1, (1, 3)), 1: st(2, 0, (2, 1))})
    assert follower.rm.replica(TOPIC, 0) is None
    assert follower.rm.follower_fetches() == []
    # Reassigned away from partition 1, where it led: no fetcher changes.
    assert not follower.apply(assignment((1, 3), (1, 3)), {0: st(1, 1, (1, 3)), 1: st(1, 1, (1,))})
    assert follower.rm.replicas() == []
    with pytest.raises(NotLeaderOrFollowerError):
        follower.rm.leader_log(TOPIC, 1)
    assert follower.rm.acks_all_outcome(TOPIC, 1, 0) is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_deleted_topic_is_dropped(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1,)), {0: st(1, 0, (1,))})
    node.apply({}, {})
    assert node.rm.replicas() == []


# -- leader epochs -------------------------------------------------------------------------------


def test_leader_log_fences_other_epochs(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1,)), {0: st(1, 5, (1,))})
    assert node.rm.leader_log(TOPIC, 0) is node.log()
    assert node.rm.leader_log(TOPIC, 0, -1) is node.log()
    assert node.rm.leader_log(TOPIC, 0, 5) is node.log()
    with pytest.raises(FencedLeaderEpochError):
        node.rm.leader_log(TOPIC, 0, 4)
    with pytest.raises(FencedLeaderEpochError):
        node.rm.leader_log(TOPIC, 0, 0)
    with pytest.raises(UnknownLeaderEpochError):
        node.rm.leader_log(TOPIC, 0, 6)


def test_check_epoch() -> None:
    check_epoch(-1, 3)
    check_epoch(3, 3)
    with pytest.raises(FencedLeaderEpochError, match="older"):
        check_epoch(2, 3)
    with pytest.raises(UnknownLeaderEpochError, match="newer"):
        check_epoch(4, 3)


# -- high watermark -----------------------------------------------------------------------------


def test_high_watermark_is_the_smallest_isr_log_end(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1, 2, 3))})
    assert node.log().high_watermark == 0
    assert node.produce(5) == 5
    assert node.log().high_watermark == 0  # the followers have not fetched
    node.fetch(2, 5, T0 + 1)
    assert node.log().high_watermark == 0  # 3 has not fetched either
    assert node.hw_moves == []
    node.fetch(3, 2, T0 + 2)
    assert node.log().high_watermark == 2
    assert node.hw_moves == [(TOPIC, 0)]
    node.fetch(3, 5, T0 + 3)
    assert node.log().high_watermark == 5
    assert node.hw_moves == [(TOPIC, 0)] * 2
    # Fetching again at the same place moves nothing.
    node.fetch(2, 5, T0 + 4)
    assert node.hw_moves == [(TOPIC, 0)] * 2


def test_high_watermark_never_goes_back(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))})
    node.produce(5)
    node.fetch(2, 5)
    assert node.log().high_watermark == 5
    node.fetch(2, 3)  # the follower lost records (e.g. it restarted and truncated)
    assert node.log().high_watermark == 5
    node.produce(2)
    assert node.log().high_watermark == 5
    node.fetch(2, 6)
    assert node.log().high_watermark == 6


def test_followers_outside_the_isr_do_not_hold_back_the_high_watermark(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1, 2))})
    node.produce(4)
    node.fetch(2, 4)
    assert node.log().high_watermark == 4  # 3 never fetched and does not count


def test_leader_alone_in_the_isr_moves_the_high_watermark_on_append(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1,))})
    node.produce(3)
    assert node.log().high_watermark == 3
    assert node.hw_moves == [(TOPIC, 0)]
    node.rm.appended(TOPIC, 0)  # nothing new
    assert node.hw_moves == [(TOPIC, 0)]


def test_new_leader_keeps_its_high_watermark_until_followers_fetch(make_node: MakeNode) -> None:
    node = make_node(2)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))})
    node.rm.truncated(TOPIC, 0, 0)
    node.replicate(6, leader_epoch=0)
    node.rm.follower_high_watermark(TOPIC, 0, 4)
    node.apply(assignment((1, 2)), {0: st(2, 1, (2, 1), version=1)})
    assert node.log().high_watermark == 4
    node.fetch(1, 6)
    assert node.log().high_watermark == 6


def test_isr_shrink_read_from_zookeeper_moves_the_high_watermark(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1, 2, 3), version=1)})
    node.produce(5)
    node.fetch(2, 5)
    assert node.log().high_watermark == 0  # held back by 3
    node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1, 2), version=2)})
    assert node.log().high_watermark == 5
    assert node.hw_moves == [(TOPIC, 0)]


def test_on_follower_fetch_errors(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))})
    with pytest.raises(NotLeaderOrFollowerError, match="7 is not a replica"):
        node.fetch(7, 0)
    with pytest.raises(NotLeaderOrFollowerError):
        node.rm.on_follower_fetch(TOPIC, 1, 2, 0, T0)
    assert node.rm.on_follower_fetch(TOPIC, 0, 2, 0, T0) is node.log()


# -- ISR expansion ------------------------------------------------------------------------------


def test_follower_reaching_the_high_watermark_asks_to_join_the_isr(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2, 3)), {0: st(1, 2, (1, 2), version=7, ce=3)})
    node.produce(4)
    node.fetch(2, 4)
    assert node.log().high_watermark == 4
    node.fetch(3, 2)
    assert node.rm.isr_writes == []  # below the high watermark
    node.fetch(3, 4)
    (write,) = node.rm.isr_writes
    assert write == IsrWrite(TOPIC, 0, PartitionState(1, 2, (1, 2, 3), 3), 7, write.reason)
    assert "3" in write.reason
    assert node.rm.isr_expands == 0  # asked for, not made yet
    # One pending write per partition.
    node.fetch(3, 4, T0 + 1)
    assert len(node.rm.isr_writes) == 1
    assert node.rm.take_isr_writes() == [write]
    assert node.rm.isr_writes == []
    node.fetch(3, 4, T0 + 2)
    assert node.rm.take_isr_writes() == []
    # The write lands: ZooKeeper shows the new ISR at the next version.
    node.apply(assignment((1, 2, 3)), {0: st(1, 2, (1, 2, 3), version=8, ce=3)})
    assert node.replica().isr == (1, 2, 3)
    assert node.replica().isr_write_pending is False
    assert node.rm.isr_expands == 1 and node.rm.isr_shrinks == 0
    node.produce(1)
    node.fetch(2, 5)
    assert node.log().high_watermark == 4  # 3 is in the ISR now and holds it back
    node.fetch(3, 5)
    assert node.log().high_watermark == 5


def test_only_a_registered_follower_joins_the_isr(make_node: MakeNode) -> None:
    # Kafka's leader adds a follower to the ISR only when its metadata has the
    # follower's broker alive (Partition.isReplicaIsrEligible, ZooKeeper mode:
    # metadataCache.hasAliveBroker); a follower whose registration is gone, fetching
    # still, stays out.
    node = make_node(1)
    states = {0: st(1, 2, (1, 2), version=7, ce=3)}
    node.rm.apply(assignment((1, 2, 3)), {(TOPIC, p): s for p, s in states.items()}, T0, {1, 2})
    node.produce(4)
    node.fetch(2, 4)
    node.fetch(3, 4)
    assert node.rm.isr_writes == []
    # Registered again: its next fetch at the high watermark asks to join.
    node.rm.apply(assignment((1, 2, 3)), {(TOPIC, 0): states[0]}, T0, {1, 2, 3})
    node.fetch(3, 4, T0 + 1)
    (write,) = node.rm.isr_writes
    assert write.state.isr == (1, 2, 3)


def test_failed_isr_write_is_asked_again(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1,), version=4)})
    node.fetch(2, 0)
    assert len(node.rm.take_isr_writes()) == 1
    node.fetch(2, 0)
    assert node.rm.take_isr_writes() == []
    node.rm.isr_write_failed(TOPIC, 0)
    node.rm.isr_write_failed("other", 0)  # unknown partitions are ignored
    node.fetch(2, 0)
    (again,) = node.rm.take_isr_writes()
    assert again.state.isr == (1, 2) and again.expected_version == 4


def test_isr_expansion_waits_for_the_start_of_the_leaders_epoch(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((2, 1, 3)), {0: st(2, 0, (2, 1))})
    node.rm.truncated(TOPIC, 0, 0)
    node.replicate(5, leader_epoch=0)
    node.rm.follower_high_watermark(TOPIC, 0, 2)
    # Elected with an ISR whose other member has not fetched: the HW stays at 2 while
    # the epoch starts at 5.
    node.apply(assignment((2, 1, 3)), {0: st(1, 1, (1, 2), version=1)})
    assert node.log().high_watermark == 2
    node.fetch(3, 3)  # at or past the high watermark, before the epoch's start
    assert node.rm.isr_writes == []
    node.fetch(3, 5)
    (write,) = node.rm.take_isr_writes()
    assert write.state.isr == (1, 2, 3)


def test_isr_member_fetching_asks_for_nothing(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))})
    node.produce(3)
    node.fetch(2, 3)
    assert node.rm.isr_writes == []
    assert node.rm.isr_expands == 0


# -- ISR shrink ----------------------------------------------------------------------------------


def test_follower_not_caught_up_for_the_lag_time_is_shrunk(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1, 2, 3), version=6)}, now_ms=T0)
    node.produce(5)
    node.fetch(2, 5, T0 + 1000)  # caught up
    node.fetch(3, 2, T0 + 1000)  # behind; last caught up when the leadership began
    node.rm.tick(T0 + LAG)
    assert node.rm.isr_writes == []  # exactly the lag time: still in sync
    node.rm.tick(T0 + LAG + 1)
    (write,) = node.rm.isr_writes
    assert write.state == PartitionState(1, 0, (1, 2), 1)
    assert write.expected_version == 6
    assert "[3]" in write.reason
    node.rm.tick(T0 + 5 * LAG)  # pending: nothing more
    assert len(node.rm.isr_writes) == 1
    # Counted when the write is made, not when asked for (it may fail).
    assert node.rm.isr_shrinks == 0
    node.rm.isr_write_failed(TOPIC, 0)
    assert node.rm.isr_shrinks == 0


def test_follower_at_the_log_end_is_not_shrunk_however_long_idle(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))}, now_ms=T0)
    node.produce(5)
    node.fetch(2, 5, T0 + 1000)
    node.rm.tick(T0 + 100 * LAG)
    assert node.rm.isr_writes == []
    # Once the leader appends, the follower is behind and its last catch-up is old.
    node.produce(1)
    node.rm.tick(T0 + 100 * LAG)
    (write,) = node.rm.isr_writes
    assert write.state.isr == (1,)


def test_follower_that_never_fetches_is_shrunk(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))}, now_ms=T0)
    node.rm.tick(T0 + LAG)
    assert node.rm.isr_writes == []
    node.rm.tick(T0 + LAG + 1)
    (write,) = node.rm.isr_writes
    assert write.state.isr == (1,)


def test_catching_up_to_the_previous_fetch_counts_from_that_fetch(make_node: MakeNode) -> None:
    # Kafka's lastCaughtUpTimeMs: a fetch at or past the leader's log end offset of the
    # previous fetch proves the follower was caught up at the previous fetch's time.
    node = make_node(1)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))}, now_ms=T0)
    node.produce(5)
    node.fetch(2, 3, T0 + 4000)  # the leader's log end is 5 at this fetch
    node.produce(3)
    node.fetch(2, 5, T0 + 8000)  # reached 5: caught up as of T0 + 4000
    node.rm.tick(T0 + 4000 + LAG)
    assert node.rm.isr_writes == []
    node.rm.tick(T0 + 4000 + LAG + 1)
    assert [w.state.isr for w in node.rm.isr_writes] == [(1,)]


def test_fetch_at_the_log_end_resets_the_lag(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))}, now_ms=T0)
    node.produce(5)
    node.fetch(2, 5, T0 + 9000)
    node.produce(1)
    node.rm.tick(T0 + 9000 + LAG)
    assert node.rm.isr_writes == []
    node.rm.tick(T0 + 9000 + LAG + 1)
    assert len(node.rm.isr_writes) == 1


def test_only_leaders_shrink(make_node: MakeNode) -> None:
    node = make_node(2)
    node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1, 2, 3))}, now_ms=T0)
    node.rm.tick(T0 + 100 * LAG)
    assert node.rm.isr_writes == []


def test_shrink_lands_and_a_later_shrink_uses_the_new_version(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1, 2, 3), version=1)}, now_ms=T0)
    node.fetch(2, 0, T0 + 5000)
    node.rm.tick(T0 + LAG + 1)
    (first,) = node.rm.take_isr_writes()
    assert first.state.isr == (1, 2)
    node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1, 2), version=2)}, now_ms=T0 + LAG + 2)
    node.produce(1)
    node.rm.tick(T0 + 5000 + LAG + 1)
    (second,) = node.rm.take_isr_writes()
    assert second.state.isr == (1,)
    assert second.expected_version == 2
    assert node.rm.isr_shrinks == 1  # the second is not made yet
    node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1,), version=3)}, now_ms=T0 + 5000 + LAG + 2)
    assert node.rm.isr_shrinks == 2 and node.rm.isr_expands == 0


def test_isr_changes_the_controller_makes_count_on_the_leader(make_node: MakeNode) -> None:
    """Kafka's ops.html, IsrShrinksPerSec: "If a broker goes down, ISR for some of
    the partitions will shrink. When that broker is up again, ISR will be
    expanded once the replicas are fully caught up" (IsrExpandsPerSec). The
    controller removes a stopped broker from the ISR with a new leader epoch;
    the leader counts the shrink. A follower does not count, nor does a broker
    that becomes leader with the new state."""
    leader, follower = make_node(1), make_node(2)
    for node in (leader, follower):
        node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1, 2, 3), version=1)})
    # The controller: broker 3 stopped.
    for node in (leader, follower):
        node.apply(assignment((1, 2, 3)), {0: st(1, 1, (1, 2), version=2)})
    assert (leader.rm.isr_shrinks, leader.rm.isr_expands) == (1, 0)
    assert (follower.rm.isr_shrinks, follower.rm.isr_expands) == (0, 0)
    # Broker 1 stops too: 2 is elected from the ISR, which loses 1.
    follower.apply(assignment((1, 2, 3)), {0: st(2, 2, (2,), version=3)})
    assert (follower.rm.isr_shrinks, follower.rm.isr_expands) == (0, 0)
    # Broker 3 is back and caught up: the new leader's expand is made and counted.
    follower.rm.truncated(TOPIC, 0, 0)
    follower.fetch(3, 0)
    (write,) = follower.rm.take_isr_writes()
    assert write.state.isr == (2, 3)
    follower.apply(assignment((1, 2, 3)), {0: st(2, 2, (2, 3), version=4)})
    assert (follower.rm.isr_shrinks, follower.rm.isr_expands) == (0, 1)


def test_under_replicated(make_node: MakeNode) -> None:
    node = make_node(1, partitions=2)
    node.apply(assignment((1, 2), (1, 2)), {0: st(1, 0, (1, 2)), 1: st(1, 0, (1,))})
    assert node.rm.under_replicated() == [(TOPIC, 1)]


# -- acks=all ------------------------------------------------------------------------------------


def test_min_insync_replicas_before_the_append(make_node: MakeNode) -> None:
    node = make_node(1, partitions=2, min_isr=2)
    node.apply(assignment((1, 2, 3), (1, 2, 3)), {0: st(1, 0, (1, 2)), 1: st(1, 0, (1,))})
    assert node.rm.check_min_isr(TOPIC, 0) is ErrorCode.NONE
    assert node.rm.check_min_isr(TOPIC, 1) is ErrorCode.NOT_ENOUGH_REPLICAS
    node.min_isr[TOPIC] = 3
    assert node.rm.check_min_isr(TOPIC, 0) is ErrorCode.NOT_ENOUGH_REPLICAS


def test_acks_all_waits_for_the_high_watermark(make_node: MakeNode) -> None:
    node = make_node(1, min_isr=2)
    node.apply(assignment((1, 2, 3)), {0: st(1, 0, (1, 2, 3))})
    end = node.produce(4)
    assert node.rm.acks_all_outcome(TOPIC, 0, end) is None
    node.fetch(2, 4)
    assert node.rm.acks_all_outcome(TOPIC, 0, end) is None
    node.fetch(3, 3)
    assert node.rm.acks_all_outcome(TOPIC, 0, 3) is ErrorCode.NONE
    assert node.rm.acks_all_outcome(TOPIC, 0, end) is None
    node.fetch(3, 4)
    assert node.rm.acks_all_outcome(TOPIC, 0, end) is ErrorCode.NONE


def test_acks_all_after_the_isr_shrank_below_min_insync(make_node: MakeNode) -> None:
    node = make_node(1, min_isr=2)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2), version=1)})
    end = node.produce(3)
    assert node.rm.acks_all_outcome(TOPIC, 0, end) is None
    # The ISR shrinks to the leader alone while the produce waits: the high watermark
    # passes it, but fewer than min.insync.replicas have it.
    node.apply(assignment((1, 2)), {0: st(1, 0, (1,), version=2)})
    assert node.log().high_watermark == end
    assert node.rm.acks_all_outcome(TOPIC, 0, end) is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_acks_all_after_losing_leadership(make_node: MakeNode) -> None:
    node = make_node(1, min_isr=2)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))})
    end = node.produce(3)
    node.apply(assignment((1, 2)), {0: st(2, 1, (2,), version=1)})
    assert node.rm.acks_all_outcome(TOPIC, 0, end) is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_isr_member_a_reassignment_removed_holds_nothing_back(make_node: MakeNode) -> None:
    """KIP-455: a move of t-0 from broker 2 to [4, 1, 3] completes. The controller
    writes the new leadership (4, epoch 1, ISR cut to the target) and then the
    assignment without 2, and brokers may read the first write without the second.
    Kafka's new leader is told the target is the whole replica set with its
    leadership (the ZooKeeper-era controller's reassignment steps B2-B4); here the
    leader reads it later. Meanwhile the leaving replica 2 still follows 4, but
    the leader knows it is leaving and does not add it back to the ISR (an ISR
    change and a controller's epoch bump Kafka would not make; seen in
    test_cluster_zk_parity.py). Should an ISR with 2 be written all the same, that
    member must not hold back the high watermark, the acks=all produces waiting
    on it (CI: the SDK producer's acks=all send waited until its request timed
    out, again and again), nor count for min.insync.replicas."""
    node = make_node(4, min_isr=2)
    moving = assignment((4, 1, 3, 2), adding={0: (4, 1, 3)}, removing={0: (2,)})
    node.apply(moving, {0: st(2, 0, (2, 4, 1, 3), version=3)})
    node.rm.truncated(TOPIC, 0, 0)
    end = node.replicate(5, leader_epoch=0)
    # The reassignment's leadership, read before the assignment that drops 2.
    node.apply(moving, {0: st(4, 1, (4, 1, 3), version=4)})
    node.fetch(1, end)
    node.fetch(3, end)
    node.fetch(2, end)  # 2's last fetch: a replica still, one the move removes
    assert node.rm.take_isr_writes() == []
    # The assignment without 2 (2 stops fetching), then an ISR with 2 all the same.
    done = assignment((4, 1, 3))
    node.apply(done, {0: st(4, 1, (4, 1, 3), version=4)})
    node.apply(done, {0: st(4, 1, (4, 1, 3, 2), version=5)})
    assert node.replica().isr == (4, 1, 3, 2)
    assert node.log().high_watermark == end
    new_end = node.produce(3)
    assert node.rm.acks_all_outcome(TOPIC, 0, new_end) is None
    node.fetch(1, new_end, T0 + 1)
    node.fetch(3, new_end, T0 + 1)
    assert node.log().high_watermark == new_end
    assert node.rm.acks_all_outcome(TOPIC, 0, new_end) is ErrorCode.NONE
    # Three assigned replicas are in sync, not four.
    assert node.rm.check_min_isr(TOPIC, 0) is ErrorCode.NONE
    node.min_isr[TOPIC] = 4
    assert node.rm.check_min_isr(TOPIC, 0) is ErrorCode.NOT_ENOUGH_REPLICAS
    assert node.rm.acks_all_outcome(TOPIC, 0, new_end) is (
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    )


# -- follower side ---------------------------------------------------------------------------------


def test_truncation_before_fetching(make_node: MakeNode) -> None:
    node = make_node(2)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))})
    node.rm.truncated(TOPIC, 0, 0)
    node.replicate(2, leader_epoch=0)
    node.replicate(3, leader_epoch=0)
    node.rm.follower_high_watermark(TOPIC, 0, 2)
    # A new leader whose log diverges from offset 2 on.
    node.apply(assignment((1, 2)), {0: st(1, 1, (1, 2), version=1)})
    assert node.rm.follower_fetches() == [FollowerFetch(TOPIC, 0, 1, 1, True)]
    node.rm.truncated(TOPIC, 0, 2)
    assert node.log().log_end_offset == 2
    assert node.truncations == [(TOPIC, 0)]
    assert node.rm.follower_fetches() == [FollowerFetch(TOPIC, 0, 1, 1, False)]


def test_truncation_at_or_past_the_log_end_changes_nothing(make_node: MakeNode) -> None:
    node = make_node(2)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))})
    node.replicate(3, leader_epoch=0)
    node.rm.truncated(TOPIC, 0, 3)
    node.rm.truncated(TOPIC, 0, 10)
    assert node.log().log_end_offset == 3
    assert node.truncations == []
    assert node.rm.follower_fetches()[0].needs_truncation is False


def test_follower_high_watermark_is_bounded_by_its_log_end(make_node: MakeNode) -> None:
    node = make_node(2)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2))})
    node.rm.truncated(TOPIC, 0, 0)
    assert node.log().tracks_high_watermark
    node.replicate(5, leader_epoch=0)
    assert node.log().high_watermark == 0  # a follower's HW is the leader's, not its log end
    node.rm.follower_high_watermark(TOPIC, 0, 3)
    assert node.log().high_watermark == 3
    node.rm.follower_high_watermark(TOPIC, 0, 10)
    assert node.log().high_watermark == 5
    node.rm.follower_high_watermark(TOPIC, 0, 1)  # stale: never backwards
    assert node.log().high_watermark == 5
    assert node.hw_moves == []  # consumers of a follower are not woken by this


def test_two_brokers_replicate_end_to_end(make_node: MakeNode) -> None:
    """A leader and a follower joined by hand, the follower copying the leader's bytes."""
    leader, follower = make_node(1), make_node(2)
    topics = assignment((1, 2))
    state = {0: st(1, 0, (1,), version=1)}
    leader.apply(topics, state)
    follower.apply(topics, state)
    (ff,) = follower.rm.follower_fetches()
    assert (ff.leader, ff.leader_epoch, ff.needs_truncation) == (1, 0, True)
    # OffsetForLeaderEpoch: where the leader's epoch 0 ends (its log end: empty).
    follower.rm.truncated(TOPIC, 0, leader.log().end_offset_for_epoch(0)[1])
    leader.produce(3)
    assert leader.log().high_watermark == 3  # alone in the ISR

    def fetch_round(now: int) -> None:
        offset = follower.log().log_end_offset
        plog = leader.rm.on_follower_fetch(TOPIC, 0, 2, offset, now)
        data = plog.read(offset, 1 << 20).tobytes()
        if data:
            follower.log().append_replicated(data, now_ms=now)
        follower.rm.follower_high_watermark(TOPIC, 0, plog.high_watermark)

    fetch_round(T0 + 1)  # fetches at 0, below the high watermark
    assert leader.rm.take_isr_writes() == []
    assert follower.log().log_end_offset == 3
    fetch_round(T0 + 2)  # fetches at 3, the high watermark: asks to join
    (write,) = leader.rm.take_isr_writes()
    assert write.state == PartitionState(1, 0, (1, 2), 1)
    assert write.expected_version == 1
    landed = {0: st(1, 0, (1, 2), version=2)}
    assert leader.apply(topics, landed) is False
    assert follower.apply(topics, landed) is False
    end = leader.produce(2)
    assert leader.log().high_watermark == 3  # now held back by the follower
    fetch_round(T0 + 3)  # copies 3..4; the leader saw a fetch at 3
    assert leader.log().high_watermark == 3
    fetch_round(T0 + 4)  # the fetch at 5 proves the follower has them
    assert follower.log().log_end_offset == end
    assert leader.log().high_watermark == end
    assert follower.log().high_watermark == end
    assert follower.log().read(0, 1 << 20).tobytes() == leader.log().read(0, 1 << 20).tobytes()
    assert follower.log().epoch_entries == leader.log().epoch_entries == [(0, 0)]


# -- safety (bugs) ---------------------------------------------------------------------------------


def test_high_watermark_waits_for_a_follower_whose_isr_join_is_pending(make_node: MakeNode) -> None:
    node = make_node(1)
    node.apply(assignment((1, 2)), {0: st(1, 0, (1,), version=1)})
    node.produce(2)
    node.fetch(2, 2)  # at the HW: asks to join
    (write,) = node.rm.take_isr_writes()
    assert write.state.isr == (1, 2)
    node.produce(3)  # acknowledged while the write is under way
    node.apply(assignment((1, 2)), {0: st(1, 0, (1, 2), version=2)})
    # Invariant: every ISR member holds every record below the high watermark.
    assert node.log().high_watermark <= 2
