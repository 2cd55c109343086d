"""The controller's decisions (:mod:`trafka.brokerlite.cluster.controller`), without ZooKeeper.

Leader election follows Kafka's ZooKeeper-era controller (``PartitionStateMachine``,
``Election.leaderForOffline``/``leaderForPreferredReplica``); replica placement is
``AdminUtils.assignReplicasToBrokersRackUnaware``, checked against the assignment
Kafka's own ``AdminTest.testReplicaAssignment`` expects; coordinator partitions are
``GroupMetadataManager.partitionFor``: ``Utils.abs(groupId.hashCode) % partitions``.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Callable, Collection

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trafka.brokerlite.cluster.controller import (
    AssignmentError,
    StateWrite,
    assign_replicas,
    coordinator_partition,
    plan_leadership,
    plan_preferred,
)
from trafka.brokerlite.cluster.zk_layout import PartitionState, TopicAssignment
from trafka.codec.errors import ErrorCode

CE = 4  # the controller epoch of these tests


def topic(name: str, *replicas: tuple[int, ...]) -> TopicAssignment:
    return TopicAssignment(name, uuid.uuid5(uuid.NAMESPACE_DNS, name), dict(enumerate(replicas)))


def ps(leader: int, epoch: int, isr: tuple[int, ...], version: int = 3) -> PartitionState:
    return PartitionState(leader, epoch, isr, controller_epoch=1, zk_version=version)


def plan(
    topics: list[TopicAssignment],
    states: dict[tuple[str, int], PartitionState],
    live: set[int],
    *,
    unclean: Callable[[str], bool] = lambda _topic: False,
    skip: Collection[str] = (),
) -> list[StateWrite]:
    return plan_leadership(
        {t.name: t for t in topics},
        states,
        live,
        controller_epoch=CE,
        unclean=unclean,
        skip=skip,
    )


def only(writes: list[StateWrite]) -> StateWrite:
    assert len(writes) == 1, writes
    return writes[0]


# -- new partitions ---------------------------------------------------------------------------


def test_new_partition_with_all_replicas_live() -> None:
    w = only(plan([topic("t", (2, 1, 3))], {}, {1, 2, 3}))
    assert (w.topic, w.partition) == ("t", 0)
    assert w.state == PartitionState(2, 0, (2, 1, 3), CE, -1)
    assert w.expected_version == -1  # created, not replaced


def test_new_partition_with_some_replicas_live() -> None:
    # The first live replica of the assignment leads; the ISR keeps assignment order.
    w = only(plan([topic("t", (2, 1, 3))], {}, {3, 1}))
    assert w.state == PartitionState(1, 0, (1, 3), CE, -1)
    assert w.expected_version == -1


def test_new_partition_without_live_replicas_stays_new() -> None:
    assert plan([topic("t", (2, 1))], {}, {3, 4}) == []
    assert plan([topic("t", (2, 1))], {}, set()) == []


def test_new_partitions_of_a_topic_with_existing_ones() -> None:
    states = {("t", 0): ps(1, 5, (1, 2))}
    w = only(plan([topic("t", (1, 2), (2, 1))], states, {1, 2}))
    assert (w.partition, w.state, w.expected_version) == (
        1,
        PartitionState(2, 0, (2, 1), CE, -1),
        -1,
    )


# -- healthy partitions ----------------------------------------------------------------------


def test_nothing_to_do_when_leader_and_isr_are_live() -> None:
    states = {("t", 0): ps(1, 5, (1, 2, 3)), ("t", 1): ps(3, 2, (3,))}
    # 3 in the assignment of partition 1 but out of its ISR: the leader's business.
    assert plan([topic("t", (1, 2, 3), (3, 1))], states, {1, 2, 3}) == []


def test_replicas_outside_the_isr_being_dead_changes_nothing() -> None:
    states = {("t", 0): ps(1, 5, (1, 2))}
    assert plan([topic("t", (1, 2, 3))], states, {1, 2}) == []


# -- leader not live -------------------------------------------------------------------------


def test_dead_leader_replaced_by_first_live_isr_member_in_assignment_order() -> None:
    # ISR order is 4, 3, 2 but assignment order is 1, 2, 3, 4: 2 wins.
    states = {("t", 0): ps(1, 5, (4, 3, 1, 2), version=17)}
    w = only(plan([topic("t", (1, 2, 3, 4))], states, {2, 3, 4}))
    assert w.state.leader == 2
    assert w.state.isr == (4, 3, 2)  # the ISR loses the dead replica, keeps its order
    assert w.state.leader_epoch == 6
    assert w.state.controller_epoch == CE
    assert w.expected_version == 17
    assert "1" in w.reason


def test_dead_leader_skips_live_replicas_outside_the_isr() -> None:
    # 2 is live and first in assignment order but not in the ISR: 3 leads.
    states = {("t", 0): ps(1, 5, (1, 3))}
    w = only(plan([topic("t", (1, 2, 3))], states, {2, 3}))
    assert w.state == PartitionState(3, 6, (3,), CE)
    assert w.expected_version == 3


def test_dead_leader_and_dead_isr_members_leave_the_isr_together() -> None:
    states = {("t", 0): ps(1, 0, (1, 2, 3, 4))}
    w = only(plan([topic("t", (1, 2, 3, 4))], states, {3}))
    assert w.state == PartitionState(3, 1, (3,), CE)


def test_offline_partition_comes_back_when_an_isr_member_returns() -> None:
    states = {("t", 0): ps(-1, 8, (2, 3), version=30)}
    w = only(plan([topic("t", (1, 2, 3))], states, {1, 3}))
    assert w.state == PartitionState(3, 9, (3,), CE)
    assert w.expected_version == 30


def test_no_live_isr_member_goes_offline_keeping_the_isr() -> None:
    states = {("t", 0): ps(1, 5, (1, 2), version=9)}
    w = only(plan([topic("t", (1, 2, 3))], states, {3}))
    assert w.state == PartitionState(-1, 6, (1, 2), CE, -1)
    assert w.expected_version == 9
    assert "offline" in w.reason


def test_no_rewrite_when_already_offline() -> None:
    states = {("t", 0): ps(-1, 6, (1, 2), version=10)}
    assert plan([topic("t", (1, 2, 3))], states, {3}) == []
    assert plan([topic("t", (1, 2, 3))], states, set()) == []


def test_unclean_election_off_by_default() -> None:
    states = {("t", 0): ps(-1, 6, (1,))}
    assert plan([topic("t", (1, 2, 3))], states, {2, 3}) == []


def test_unclean_election_picks_the_first_live_replica_alone_in_the_isr() -> None:
    states = {("t", 0): ps(1, 5, (1,), version=12)}
    w = only(plan([topic("t", (1, 3, 2))], states, {2, 3}, unclean=lambda _t: True))
    assert w.state == PartitionState(3, 6, (3,), CE, -1)
    assert w.expected_version == 12
    assert "unclean" in w.reason


def test_unclean_election_is_per_topic() -> None:
    states = {("a", 0): ps(1, 5, (1,)), ("b", 0): ps(1, 5, (1,))}
    writes = plan(
        [topic("a", (1, 2)), topic("b", (1, 2))],
        states,
        {2},
        unclean=lambda name: name == "b",
    )
    assert [(w.topic, w.state.leader, w.state.isr) for w in writes] == [
        ("a", -1, (1,)),
        ("b", 2, (2,)),
    ]


def test_unclean_election_brings_an_offline_partition_back() -> None:
    states = {("t", 0): ps(-1, 6, (1,), version=4)}
    w = only(plan([topic("t", (1, 2))], states, {2}, unclean=lambda _t: True))
    assert w.state == PartitionState(2, 7, (2,), CE, -1)


def test_unclean_election_prefers_a_live_isr_member() -> None:
    states = {("t", 0): ps(1, 5, (1, 3))}
    w = only(plan([topic("t", (1, 2, 3))], states, {2, 3}, unclean=lambda _t: True))
    assert (w.state.leader, w.state.isr) == (3, (3,))
    assert "unclean" not in w.reason


def test_unclean_with_no_live_replica_goes_offline() -> None:
    states = {("t", 0): ps(1, 5, (1, 2))}
    w = only(plan([topic("t", (1, 2))], states, {7}, unclean=lambda _t: True))
    assert (w.state.leader, w.state.isr) == (-1, (1, 2))


# -- live leader, dead ISR members -----------------------------------------------------------


def test_live_leader_loses_dead_isr_members() -> None:
    states = {("t", 0): ps(2, 5, (1, 2, 3), version=21)}
    w = only(plan([topic("t", (1, 2, 3))], states, {2}))
    assert w.state == PartitionState(2, 6, (2,), CE, -1)
    assert w.expected_version == 21
    assert "[1, 3]" in w.reason


def test_replicas_a_reassignment_removed_leave_the_isr() -> None:
    # KIP-455: a move to [4, 1, 3] completed (the assignment no longer names 2), but
    # the leader let the leaving 2 rejoin the ISR before it read that assignment.
    # Kafka's controller forces removed replicas out of the ISR (its reassignment's
    # step B4), bumping the leader epoch as every ISR change it makes does.
    states = {("t", 0): ps(4, 1, (4, 1, 3, 2), version=9)}
    w = only(plan([topic("t", (4, 1, 3))], states, {1, 2, 3, 4}))
    assert w.state == PartitionState(4, 2, (4, 1, 3), CE, -1)
    assert w.expected_version == 9
    assert "[2]" in w.reason and "no longer" in w.reason
    # While the move is under way, the leaving replicas are replicas: they stay.
    moving = TopicAssignment(
        "t", uuid.uuid5(uuid.NAMESPACE_DNS, "t"), {0: (4, 1, 3, 2)}, {0: (4, 1, 3)}, {0: (2,)}
    )
    assert plan([moving], states, {1, 2, 3, 4}) == []
    # A leader whose replica moved away and a dead broker lose their place together.
    w = only(plan([topic("t", (4, 1, 3))], states, {1, 2, 4}))
    assert w.state.isr == (4, 1)
    # And when the leader is not live, the new ISR has no removed replica either.
    w = only(plan([topic("t", (4, 1, 3))], states, {1, 2, 3}))
    assert w.state == PartitionState(1, 2, (1, 3), CE, -1)


# -- several partitions --------------------------------------------------------------------


def test_writes_in_topic_and_partition_order() -> None:
    topics = [topic("zeta", (1,), (2,)), topic("alpha", (2,), (1,), (1, 2))]
    writes = plan(topics, {}, {1, 2})
    assert [(w.topic, w.partition) for w in writes] == [
        ("alpha", 0),
        ("alpha", 1),
        ("alpha", 2),
        ("zeta", 0),
        ("zeta", 1),
    ]


def test_skipped_topics_are_left_alone() -> None:
    states = {("gone", 0): ps(1, 5, (1, 2)), ("kept", 0): ps(1, 5, (1, 2))}
    writes = plan(
        [topic("gone", (1, 2)), topic("kept", (1, 2)), topic("new", (2,))],
        states,
        {2},
        skip={"gone"},
    )
    assert [(w.topic, w.state.leader) for w in writes] == [("kept", 2), ("new", 2)]


def test_states_of_unknown_topics_are_ignored() -> None:
    assert plan([], {("t", 0): ps(1, 1, (1,))}, set()) == []


def test_broker_failure_across_a_cluster() -> None:
    # Three brokers, broker 1 dies: every partition it led moves, every ISR loses it.
    topics = [topic("t", (1, 2, 3), (2, 3, 1), (3, 1, 2))]
    states = {
        ("t", 0): ps(1, 0, (1, 2, 3), 5),
        ("t", 1): ps(2, 0, (2, 3, 1), 6),
        ("t", 2): ps(3, 0, (3, 1, 2), 7),
    }
    writes = plan(topics, states, {2, 3})
    assert [(w.partition, w.state, w.expected_version) for w in writes] == [
        (0, PartitionState(2, 1, (2, 3), CE, -1), 5),
        (1, PartitionState(2, 1, (2, 3), CE, -1), 6),
        (2, PartitionState(3, 1, (3, 2), CE, -1), 7),
    ]
    # Applying the writes makes the plan settle.
    after = {(w.topic, w.partition): w.state for w in writes}
    assert plan(topics, after, {2, 3}) == []


# -- preferred leaders ----------------------------------------------------------------------


def preferred(
    topics: list[TopicAssignment],
    states: dict[tuple[str, int], PartitionState],
    live: set[int],
    partitions: set[tuple[str, int]] | None = None,
) -> list[StateWrite]:
    return plan_preferred(
        {t.name: t for t in topics},
        states,
        live,
        controller_epoch=CE,
        partitions=partitions,
    )


def test_preferred_leader_takes_over() -> None:
    states = {("t", 0): ps(2, 5, (2, 1, 3), version=40)}
    w = only(preferred([topic("t", (1, 2, 3))], states, {1, 2, 3}))
    assert w.state == PartitionState(1, 6, (2, 1, 3), CE, -1)  # the ISR is unchanged
    assert w.expected_version == 40
    assert (w.topic, w.partition) == ("t", 0)


@pytest.mark.parametrize(
    ("state", "live"),
    [
        (ps(1, 5, (1, 2)), {1, 2}),  # already leads
        (ps(2, 5, (2, 1)), {2}),  # not live
        (ps(2, 5, (2,)), {1, 2}),  # not in the ISR
    ],
    ids=["leads already", "not live", "not in the ISR"],
)
def test_preferred_leader_stays_put(state: PartitionState, live: set[int]) -> None:
    assert preferred([topic("t", (1, 2))], {("t", 0): state}, live) == []


def test_preferred_leader_skips_partitions_without_state() -> None:
    assert preferred([topic("t", (1, 2))], {}, {1, 2}) == []


def test_preferred_leader_for_chosen_partitions_only() -> None:
    topics = [topic("a", (1, 2), (1, 2)), topic("b", (1, 2))]
    states = {
        ("a", 0): ps(2, 1, (1, 2)),
        ("a", 1): ps(2, 1, (1, 2)),
        ("b", 0): ps(2, 1, (1, 2)),
    }
    assert [(w.topic, w.partition) for w in preferred(topics, states, {1, 2})] == [
        ("a", 0),
        ("a", 1),
        ("b", 0),
    ]
    chosen = preferred(topics, states, {1, 2}, partitions={("a", 1), ("b", 0), ("c", 0)})
    assert [(w.topic, w.partition) for w in chosen] == [("a", 1), ("b", 0)]
    assert preferred(topics, states, {1, 2}, partitions=set()) == []


# -- replica placement ------------------------------------------------------------------------


def test_assignment_matches_kafkas_admin_test() -> None:
    # Kafka's AdminTest.testReplicaAssignment: brokers 0..4, 10 partitions, RF 3,
    # fixed start index 0 (Kafka uses it for the start and the shift).
    assert assign_replicas(range(5), 10, 3, start_index=0, shift=0) == {
        0: (0, 1, 2),
        1: (1, 2, 3),
        2: (2, 3, 4),
        3: (3, 4, 0),
        4: (4, 0, 1),
        5: (0, 2, 3),
        6: (1, 3, 4),
        7: (2, 4, 0),
        8: (3, 0, 1),
        9: (4, 1, 2),
    }


def test_assignment_by_hand_with_sparse_unsorted_broker_ids() -> None:
    # n = 3 over the sorted list [10, 20, 30], start 1, shift 2 (3 at partition 3):
    # p0: first idx 1, step 1+(2%2)=1 -> [20, 30]; p3: first idx 1, step 1+(3%2)=2 -> [20, 10].
    assert assign_replicas({30, 10, 20}, 6, 2, start_index=1, shift=2) == {
        0: (20, 30),
        1: (30, 10),
        2: (10, 20),
        3: (20, 10),
        4: (30, 20),
        5: (10, 30),
    }


def test_assignment_from_a_first_partition() -> None:
    # CreatePartitions: Kafka passes startPartitionId = the existing count; the shift
    # moves at partition 5 (a multiple of n) as in a single run of 10.
    whole = assign_replicas(range(5), 10, 3, start_index=2, shift=1)
    first = assign_replicas(range(5), 5, 3, start_index=2, shift=1)
    added = assign_replicas(range(5), 5, 3, first_partition=5, start_index=2, shift=1)
    assert list(added) == [5, 6, 7, 8, 9]
    assert first | added == whole
    # By hand: p7 with start 2, shift 1 + 1: first idx (7+2)%5 = 4, steps 1+(2%4)=3, 1+(3%4)=4.
    assert added[7] == (4, 2, 3)


def test_assignment_of_one_partition_from_a_later_id() -> None:
    # Partition 12 of 4 brokers, start 0, shift 0: 12 % 4 == 0 moves the shift to 1 before
    # it is placed (as Kafka does at startPartitionId); first idx 0, step 1 + (1 % 3) = 2.
    assert assign_replicas([0, 1, 2, 3], 1, 2, first_partition=12, start_index=0, shift=0) == {
        12: (0, 2)
    }


@given(
    n=st.integers(1, 12),
    rounds=st.integers(1, 5),
    rf_seed=st.integers(0, 1000),
    start=st.integers(0, 11),
    shift=st.integers(0, 11),
)
def test_assignment_is_balanced_and_valid(
    n: int, rounds: int, rf_seed: int, start: int, shift: int
) -> None:
    brokers = [b * 7 + 1 for b in range(n)]
    rf = 1 + rf_seed % n
    partitions = n * rounds
    out = assign_replicas(brokers, partitions, rf, start_index=start % n, shift=shift % n)
    assert sorted(out) == list(range(partitions))
    for replicas in out.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf  # no broker twice in a partition
        assert set(replicas) <= set(brokers)
    # Leaders balanced: each broker leads partitions / n partitions.
    leaders = Counter(r[0] for r in out.values())
    assert leaders == dict.fromkeys(brokers, rounds)
    # Replicas balanced too: each broker holds rf * partitions / n replicas.
    held = Counter(b for r in out.values() for b in r)
    assert held == dict.fromkeys(brokers, rf * rounds)


def test_random_start_comes_from_rng() -> None:
    a = assign_replicas(range(6), 12, 3, rng=random.Random(42))
    b = assign_replicas(range(6), 12, 3, rng=random.Random(42))
    assert a == b
    # Different seeds place differently (at least one of these does).
    others = [assign_replicas(range(6), 12, 3, rng=random.Random(s)) for s in range(5)]
    assert any(o != a for o in others)


def test_replication_factor_one_on_one_broker() -> None:
    assert assign_replicas([7], 3, 1) == {0: (7,), 1: (7,), 2: (7,)}


def test_no_partitions() -> None:
    assert assign_replicas([1, 2], 0, 2, start_index=0, shift=0) == {}


@pytest.mark.parametrize(
    ("brokers", "rf"),
    [([1, 2], 3), ([], 1), ([1, 2, 3], 0), ([1], -1)],
)
def test_impossible_replication_factor(brokers: list[int], rf: int) -> None:
    with pytest.raises(AssignmentError):
        assign_replicas(brokers, 3, rf)


def test_assignment_error_names_the_brokers() -> None:
    with pytest.raises(AssignmentError, match=r"3 .*2 available.*\[1, 2\]"):
        assign_replicas({2, 1}, 1, 3)


# -- coordinator partitions ------------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """Java's String.hashCode computed by hand: s[0]*31^(n-1) + ... over UTF-16 code
    units (a supplementary character counts as its two surrogates), in int32."""
    h = 0
    for ch in text:
        cp = ord(ch)
        units = [cp]
        if cp >= 0x10000:
            units = [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)]
        for unit in units:
            h = (h * 31 + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


def kafka_abs(n: int) -> int:
    """Kafka's org.apache.kafka.common.utils.Utils.abs: Math.abs, but 0 for MIN_VALUE."""
    return 0 if n == -(2**31) else abs(n)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("abc", 96354),
        ("hello", 99162322),
        ("Hello World", -862545276),
        ("polygenelubricants", -(2**31)),
        # U+1F600 is the surrogate pair D83D DE00: 31 * 0xD83D + 0xDE00.
        ("\U0001f600", 31 * 0xD83D + 0xDE00),
        ("é", 0xE9),
    ],
)
def test_hand_computed_java_hash_codes(text: str, expected: int) -> None:
    # Known Java values, so that the reference used below is itself checked.
    assert java_string_hash(text) == expected


POSITIVE_HASH_KEYS = [
    "",
    "a",
    "hello",
    "console-consumer-12345",
    "group-é",
    "\U0001f600",
    "\U0001f389party",
]
NEGATIVE_HASH_KEYS = ["Hello World", "my-group", "日本語グループ"]


@pytest.mark.parametrize("key", POSITIVE_HASH_KEYS)
@pytest.mark.parametrize("partitions", [1, 3, 50, 7919])
def test_coordinator_partition_of_keys_with_positive_hashes(key: str, partitions: int) -> None:
    assert java_string_hash(key) >= 0
    assert coordinator_partition(key, partitions) == java_string_hash(key) % partitions


@pytest.mark.parametrize("key", ["polygenelubricants", "GydZG_", "DESIGNING WORKHOUSES"])
def test_coordinator_partition_of_min_value_hash_is_zero(key: str) -> None:
    # Utils.abs(Integer.MIN_VALUE) == 0, where Math.abs would stay negative.
    assert java_string_hash(key) == -(2**31)
    assert coordinator_partition(key, 50) == 0
    assert coordinator_partition(key, 7) == 0


@pytest.mark.parametrize(
    ("key", "partition"),
    [
        # Kafka: Utils.abs(-862545276) % 50 == 26 (the mask gives 1284938372 % 50 == 22).
        ("Hello World", 26),
        ("my-group", 12),
        ("日本語グループ", 31),
    ],
)
def test_coordinator_partition_of_keys_with_negative_hashes(key: str, partition: int) -> None:
    assert java_string_hash(key) < 0
    assert kafka_abs(java_string_hash(key)) % 50 == partition
    assert coordinator_partition(key, 50) == partition


@given(st.text())
def test_coordinator_partition_is_in_range(key: str) -> None:
    for n in (1, 50):
        assert 0 <= coordinator_partition(key, n) < n


# -- reassignments (KIP-455) --------------------------------------------------------------


def _moving_topic() -> TopicAssignment:
    return TopicAssignment("mv", uuid.UUID(int=7), {0: (1,), 1: (2, 3)})


def test_plan_moves_starts_and_cancels_a_reassignment() -> None:
    from trafka.brokerlite.cluster.controller import plan_moves

    moved, outcomes = plan_moves(_moving_topic(), {0: [2, 3, 4], 9: [1]})
    assert moved.replicas[0] == (2, 3, 4, 1)  # the target first, then those leaving
    assert moved.adding == {0: (2, 3, 4)} and moved.removing == {0: (1,)}
    assert moved.replicas[1] == (2, 3)
    assert outcomes[0] == (ErrorCode.NONE, None)
    assert outcomes[9][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    cancelled, outcomes = plan_moves(moved, {0: None})
    assert cancelled.replicas[0] == (1,) and not cancelled.adding and not cancelled.removing
    _, outcomes = plan_moves(cancelled, {0: None})
    assert outcomes[0][0] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    # A new target while moving starts from the replicas the move started from.
    again, _ = plan_moves(moved, {0: [3]})
    assert again.replicas[0] == (3, 1) and again.adding == {0: (3,)}


def test_plan_reassignments_completes_once_the_target_is_in_sync() -> None:
    from trafka.brokerlite.cluster.controller import plan_moves, plan_reassignments

    moved, _ = plan_moves(_moving_topic(), {0: [2, 3]})
    topics = {"mv": moved}
    catching_up = {("mv", 0): PartitionState(1, 4, (1, 2), 9, zk_version=3)}
    assert plan_reassignments(topics, catching_up, {1, 2, 3}, controller_epoch=9) == []
    in_sync = {("mv", 0): PartitionState(1, 4, (1, 2, 3), 9, zk_version=5)}
    [done] = plan_reassignments(topics, in_sync, {1, 2, 3}, controller_epoch=9)
    assert done.target == (2, 3)
    # The leader leaves: the first live target replica in the ISR leads, epoch bumped.
    assert done.write.state == PartitionState(2, 5, (2, 3), 9)
    assert done.write.expected_version == 5
