"""The new consumer group protocol (KIP-848), sans-IO: joining, reconciliation
with revocation before reassignment, leaving, fencing, timeouts, subscriptions
by name and regex, the server assignors, and its place beside classic groups."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from trafka.brokerlite.groups.consumer_groups import (
    ConsumerGroups,
    TopicMeta,
    _range,
    _uniform,
)
from trafka.brokerlite.groups.coordinator import GroupCoordinator
from trafka.brokerlite.groups.offsets import OffsetStore
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k11_join_group as jg
from trafka.codec.messages import k16_list_groups as lg
from trafka.codec.messages import k42_delete_groups as dg
from trafka.codec.messages import k68_consumer_group_heartbeat as hb
from trafka.codec.messages import k69_consumer_group_describe as cd

Req = hb.ConsumerGroupHeartbeatRequest
ORDERS = uuid.UUID(int=1)
AUDIT = uuid.UUID(int=2)


class World:
    """Topics that tests can change, and a clock."""

    def __init__(self, **sizes: int) -> None:
        self.topics = {
            name: TopicMeta(name, uuid.UUID(int=i + 1), n)
            for i, (name, n) in enumerate(sizes.items())
        }
        self.now = 1_000

    def __call__(self) -> dict[str, TopicMeta]:
        return dict(self.topics)


def owned(resp: Any) -> set[tuple[uuid.UUID, int]] | None:
    if resp.assignment is None:
        return None
    return {(t.topic_id, p) for t in resp.assignment.topic_partitions for p in t.partitions}


def parts(tps: set[tuple[uuid.UUID, int]]) -> list[Req.TopicPartitions]:
    by: dict[uuid.UUID, list[int]] = {}
    for t, p in sorted(tps, key=lambda tp: (str(tp[0]), tp[1])):
        by.setdefault(t, []).append(p)
    return [Req.TopicPartitions(topic_id=t, partitions=ps) for t, ps in by.items()]


class Member:
    """A well-behaved client: owns what it is told, revokes at once."""

    def __init__(self, groups: ConsumerGroups, world: World, member_id: str = "") -> None:
        self.groups, self.world = groups, world
        self.member_id, self.epoch = member_id, 0
        self.owns: set[tuple[uuid.UUID, int]] = set()

    def join(self, topics: list[str] | None = None, regex: str | None = None, **kw: Any) -> Any:
        names = topics if topics is not None or regex is not None else ["orders"]
        req = Req(
            group_id="g",
            member_id=self.member_id,
            member_epoch=0,
            rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", 30_000),
            subscribed_topic_names=names,
            subscribed_topic_regex=regex,
            topic_partitions=[],
            **kw,
        )
        return self._apply(self.groups.heartbeat(req, 1, self.world.now))

    def beat(self, **kw: Any) -> Any:
        req = Req(
            group_id="g",
            member_id=self.member_id,
            member_epoch=kw.pop("epoch", self.epoch),
            topic_partitions=parts(self.owns),
            **kw,
        )
        return self._apply(self.groups.heartbeat(req, 1, self.world.now))

    def leave(self, epoch: int = -1, instance_id: str | None = None) -> Any:
        req = Req(
            group_id="g", member_id=self.member_id, member_epoch=epoch, instance_id=instance_id
        )
        return self.groups.heartbeat(req, 1, self.world.now)

    def _apply(self, resp: Any) -> Any:
        if resp.error_code == 0:
            self.member_id, self.epoch = resp.member_id, resp.member_epoch
            if resp.assignment is not None:
                self.owns = owned(resp) or set()
        return resp


def no_double_owners(members: list[Member]) -> None:
    seen: set[tuple[uuid.UUID, int]] = set()
    for m in members:
        assert not (m.owns & seen), "a partition is owned by two members"
        seen |= m.owns


def settle(members: list[Member], rounds: int = 6) -> None:
    for _ in range(rounds):
        for m in members:
            assert m.beat().error_code == 0
            no_double_owners(members)


def test_a_first_member_gets_every_partition_and_an_id() -> None:
    world = World(orders=4)
    groups = ConsumerGroups(world, heartbeat_interval_ms=700)
    a = Member(groups, world)
    resp = a.join()
    assert resp.error_code == 0 and resp.member_id and resp.member_epoch == 1
    assert resp.heartbeat_interval_ms == 700
    assert a.owns == {(ORDERS, p) for p in range(4)}
    # Nothing changed: the next answer carries no assignment.
    assert a.beat().assignment is None and a.epoch == 1
    assert groups.groups["g"].state == "Stable"
    # A member id chosen by the client (KIP-1082) is kept.
    b = Member(groups, world, member_id="client-chosen")
    assert b.join().member_id == "client-chosen"


def test_partitions_move_only_after_their_owner_revoked_them() -> None:
    world = World(orders=6)
    groups = ConsumerGroups(world)
    a, b = Member(groups, world), Member(groups, world)
    a.join()
    resp = b.join()
    # The group moved to epoch 2; b may own nothing yet: a still owns everything.
    assert resp.member_epoch == 2 and b.owns == set()
    assert groups.groups["g"].state == "Reconciling"
    # a is told to give up half, and keeps its epoch until it has.
    resp = a.beat()
    assert resp.member_epoch == 1 and len(a.owns) == 3
    no_double_owners([a, b])
    resp = a.beat()  # reports the smaller set: revoked
    assert resp.member_epoch == 2
    b.beat()
    assert len(b.owns) == 3 and not (a.owns & b.owns)
    assert a.owns | b.owns == {(ORDERS, p) for p in range(6)}
    assert groups.groups["g"].state == "Stable"


def test_a_leaving_member_hands_its_partitions_over() -> None:
    world = World(orders=4)
    groups = ConsumerGroups(world)
    a, b = Member(groups, world), Member(groups, world)
    a.join()
    b.join()
    settle([a, b])
    resp = a.leave()
    assert (resp.error_code, resp.member_epoch) == (0, -1)
    b.beat()
    assert b.owns == {(ORDERS, p) for p in range(4)}
    b.leave()
    assert groups.groups["g"].state == "Empty"


def test_unknown_and_fenced_members_are_refused() -> None:
    world = World(orders=2)
    groups = ConsumerGroups(world)
    a, b = Member(groups, world), Member(groups, world)
    a.join()
    assert a.beat(epoch=7).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    ghost = Member(groups, world, member_id="ghost")
    ghost.epoch = 3
    assert ghost.beat().error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert ghost.leave().error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # The answer that moved a member on was lost: its previous epoch is accepted
    # while what it owns is still its own.
    b.join()
    a.beat()
    a.beat()
    assert a.epoch == 2
    resp = a.beat(epoch=1)
    assert resp.error_code == 0 and resp.member_epoch == 2 and resp.assignment is not None


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"group_id": ""}, ErrorCode.INVALID_REQUEST),
        ({"rebalance_timeout_ms": -1}, ErrorCode.INVALID_REQUEST),
        ({"subscribed_topic_names": None}, ErrorCode.INVALID_REQUEST),
        ({"topic_partitions": [Req.TopicPartitions(topic_id=ORDERS, partitions=[0])]}, ErrorCode.INVALID_REQUEST),
        ({"server_assignor": "sticky"}, ErrorCode.UNSUPPORTED_ASSIGNOR),
        ({"subscribed_topic_regex": "orders(", "subscribed_topic_names": None}, ErrorCode.INVALID_REQUEST),
        ({"member_epoch": -3}, ErrorCode.INVALID_REQUEST),
        ({"member_epoch": 4, "member_id": ""}, ErrorCode.INVALID_REQUEST),
    ],
)  # fmt: skip
def test_malformed_heartbeats_are_refused_with_a_message(change: dict[str, Any], code: int) -> None:
    world = World(orders=2)
    groups = ConsumerGroups(world)
    fields: dict[str, Any] = {
        "group_id": "g",
        "member_id": "",
        "member_epoch": 0,
        "rebalance_timeout_ms": 1000,
        "subscribed_topic_names": ["orders"],
        "topic_partitions": [],
    }
    fields.update(change)
    resp = groups.heartbeat(Req(**fields), 1, world.now)
    assert resp.error_code == code and resp.error_message
    assert "g" not in groups.groups or not groups.groups["g"].members


def test_static_instance_ids_are_unique_and_the_group_size_is_bounded() -> None:
    world = World(orders=2)
    groups = ConsumerGroups(world, max_size=2)
    Member(groups, world).join(instance_id="i-1")
    assert Member(groups, world).join(instance_id="i-1").error_code == (
        ErrorCode.UNRELEASED_INSTANCE_ID
    )
    Member(groups, world).join()
    assert Member(groups, world).join().error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_a_static_member_gone_for_a_while_gets_its_partitions_back_without_a_rebalance() -> None:
    world = World(orders=4)
    groups = ConsumerGroups(world, session_timeout_ms=10_000)
    a, b = Member(groups, world), Member(groups, world)
    a.join(instance_id="a")
    b.join(instance_id="b")
    settle([a, b])
    group = groups.groups["g"]
    mine, epoch = set(a.owns), group.epoch
    assert len(mine) == 2 and not (mine & b.owns)

    resp = a.leave(-2, instance_id="a")
    assert resp.error_code == 0 and resp.member_epoch == -2
    assert group.epoch == epoch and group.members[a.member_id].epoch == -2
    theirs = set(b.owns)
    world.now += 5_000
    settle([b])
    assert b.owns == theirs  # a's partitions wait for a
    # a beating again on its old epoch is fenced: it left.
    assert a.beat().error_code == ErrorCode.FENCED_MEMBER_EPOCH

    back = Member(groups, world)  # a new process: a new member id, the same instance id
    resp = back.join(instance_id="a")
    assert resp.error_code == 0 and back.member_id != a.member_id
    assert back.owns == mine  # at once, in the join's answer
    assert group.epoch == epoch and a.member_id not in group.members
    settle([back, b])
    assert back.owns == mine and b.owns == theirs
    # Its session is its own now: the old one's deadline does not remove it.
    world.now += 6_000
    back.beat()
    groups.tick(world.now)
    assert back.member_id in group.members


def test_a_static_member_that_does_not_come_back_is_removed_after_its_session() -> None:
    world = World(orders=4)
    groups = ConsumerGroups(world, session_timeout_ms=10_000)
    a, b = Member(groups, world), Member(groups, world)
    a.join(instance_id="a")
    b.join()
    settle([a, b])
    a.leave(-2, instance_id="a")
    world.now += 9_000
    b.beat()
    groups.tick(world.now)
    assert a.member_id in groups.groups["g"].members
    world.now += 1_000
    b.beat()
    groups.tick(world.now)
    assert list(groups.groups["g"].members) == [b.member_id]
    settle([b])
    assert b.owns == {(ORDERS, p) for p in range(4)}


def test_static_leaves_name_their_instance_and_come_from_its_holder() -> None:
    world = World(orders=2)
    groups = ConsumerGroups(world)
    a, b = Member(groups, world), Member(groups, world)
    a.join(instance_id="a")
    b.join(instance_id="b")
    settle([a, b])
    assert a.leave(-2).error_code == ErrorCode.INVALID_REQUEST  # -2 needs the instance id
    assert b.leave(-2, instance_id="a").error_code == ErrorCode.FENCED_INSTANCE_ID
    assert a.leave(-2, instance_id="nobody").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert a.member_id in groups.groups["g"].members
    # An active holder keeps its instance id from joiners.
    assert Member(groups, world).join(instance_id="b").error_code == (
        ErrorCode.UNRELEASED_INSTANCE_ID
    )
    # -1 from a static member leaves for good: its partitions move at once.
    epoch = groups.groups["g"].epoch
    assert a.leave(-1, instance_id="a").error_code == 0
    assert groups.groups["g"].epoch == epoch + 1
    settle([b])
    assert b.owns == {(ORDERS, 0), (ORDERS, 1)}


def test_silent_members_and_slow_revokers_are_fenced() -> None:
    world = World(orders=4)
    groups = ConsumerGroups(world, session_timeout_ms=10_000)
    a, b = Member(groups, world), Member(groups, world)
    a.join(rebalance_timeout_ms=3_000)
    b.join()
    assert groups.next_deadline() == world.now + 10_000  # the sessions
    a.beat()  # told to revoke: its rebalance timeout starts
    assert groups.next_deadline() == world.now + 3_000
    world.now += 3_000
    groups.tick(world.now)
    assert list(groups.groups["g"].members) == [b.member_id]
    b.beat()
    assert b.owns == {(ORDERS, p) for p in range(4)}
    world.now += 10_000
    groups.tick(world.now)
    assert groups.groups["g"].state == "Empty" and groups.next_deadline() is None


def test_a_groups_own_timings_are_its_consumer_group_configs() -> None:
    """KIP-848's group configs: a consumer group's ``consumer.heartbeat.interval.ms``
    is the interval its members are told and its ``consumer.session.timeout.ms``
    times them out (Kafka's GroupMetadataManager reads the group's config before
    the broker's group.consumer.* settings), each within the broker's
    group.consumer.min/max.* bounds, the session above the heartbeat interval;
    DescribeConfigs names the broker setting as the synonym."""
    from trafka.brokerlite.groups.group_configs import (
        ConsumerGroupSettings,
        GroupConfigs,
        InvalidGroupConfigError,
        ShareGroupSettings,
    )

    configs = GroupConfigs(ShareGroupSettings(), {}, None, ConsumerGroupSettings())
    world = World(orders=2)
    groups = ConsumerGroups(world, timings=configs.consumer_timings)
    a = Member(groups, world)
    assert a.join().heartbeat_interval_ms == 5_000  # the broker's
    assert groups.next_deadline() == world.now + 45_000
    configs.alter(
        "g",
        {"consumer.heartbeat.interval.ms": "7000", "consumer.session.timeout.ms": "50000"},
        incremental=True,
    )
    configs.alter("other", {"consumer.session.timeout.ms": "60000"}, incremental=True)
    world.now += 1_000
    assert a.beat().heartbeat_interval_ms == 7_000
    assert groups.next_deadline() == world.now + 50_000
    world.now += 49_999
    groups.tick(world.now)
    assert list(groups.groups["g"].members) == [a.member_id]
    world.now += 1
    groups.tick(world.now)
    assert groups.groups["g"].state == "Empty"
    session = next(e for e in configs.describe("g") if e.name == "consumer.session.timeout.ms")
    assert (session.value, session.source) == ("50000", 8)
    assert session.synonyms == (
        ("consumer.session.timeout.ms", "50000", 8),
        ("group.consumer.session.timeout.ms", "45000", 5),
    )
    for bad, why in (
        ({"consumer.session.timeout.ms": "44999"}, "group.consumer.min.session.timeout.ms"),
        ({"consumer.heartbeat.interval.ms": "15001"}, "group.consumer.max.heartbeat.interval.ms"),
        ({"consumer.heartbeat.interval.ms": "soon"}, "not an integer"),
    ):
        with pytest.raises(InvalidGroupConfigError, match=why):
            configs.alter("g", bad, incremental=True)
    narrow = GroupConfigs(
        ShareGroupSettings(),
        {},
        None,
        ConsumerGroupSettings(min_session_timeout_ms=6_000, session_timeout_ms=6_000),
    )
    with pytest.raises(InvalidGroupConfigError, match="must be greater than"):
        narrow.alter(
            "g",
            {"consumer.session.timeout.ms": "6000", "consumer.heartbeat.interval.ms": "6000"},
            incremental=True,
        )


def test_regex_subscriptions_and_topic_changes_reassign() -> None:
    world = World(orders=2, audit=1)
    groups = ConsumerGroups(world)
    a = Member(groups, world)
    a.join(topics=None, regex="orders|payments.*")
    assert a.owns == {(ORDERS, 0), (ORDERS, 1)}
    epoch = a.epoch
    world.topics["payments-eu"] = TopicMeta("payments-eu", uuid.UUID(int=9), 2)
    world.topics["orders"] = TopicMeta("orders", ORDERS, 3)  # grew
    world.topics["__internal"] = TopicMeta("__internal", uuid.UUID(int=10), 1)
    a.beat()
    assert a.epoch == epoch + 1
    assert a.owns == {
        (ORDERS, 0),
        (ORDERS, 1),
        (ORDERS, 2),
        (uuid.UUID(int=9), 0),
        (uuid.UUID(int=9), 1),
    }
    # Switching to names: audit only.
    a.beat(subscribed_topic_names=["audit"], subscribed_topic_regex="")
    a.beat()
    assert a.owns == {(AUDIT, 0)}


def test_the_range_assignor_gives_contiguous_ranges_in_member_order() -> None:
    topics = {"orders": TopicMeta("orders", ORDERS, 7)}
    subs = {m: frozenset({"orders"}) for m in ("b", "a", "c")}
    out = _range(subs, topics, {})
    assert {m: sorted(p for _, p in tps) for m, tps in out.items()} == {
        "a": [0, 1, 2],
        "b": [3, 4],
        "c": [5, 6],
    }


def test_the_uniform_assignor_balances_and_moves_little() -> None:
    topics = {"orders": TopicMeta("orders", ORDERS, 10), "audit": TopicMeta("audit", AUDIT, 2)}
    subs = {m: frozenset({"orders", "audit"}) for m in ("a", "b", "c")}
    first = _uniform(subs, topics, {})
    assert sorted(len(v) for v in first.values()) == [4, 4, 4]
    assert set().union(*first.values()) == {(ORDERS, p) for p in range(10)} | {
        (AUDIT, 0),
        (AUDIT, 1),
    }
    subs["d"] = frozenset({"orders", "audit"})
    second = _uniform(subs, topics, {m: frozenset(v) for m, v in first.items()})
    assert sorted(len(v) for v in second.values()) == [3, 3, 3, 3]
    moved = sum(len(first[m] - second[m]) for m in first)
    assert moved == 3  # exactly what the newcomer needed
    # Different subscriptions: audit's partitions go only to its subscribers.
    mixed = _uniform({"a": frozenset({"orders"}), "b": frozenset({"audit"})}, topics, {})
    assert {tp[0] for tp in mixed["b"]} == {AUDIT} and len(mixed["a"]) == 10


# -- beside classic groups ------------------------------------------------------------------


def coordinator(tmp_path: Path, world: World) -> GroupCoordinator:
    return GroupCoordinator(
        OffsetStore(tmp_path / "groups"),
        initial_rebalance_delay_ms=0,
        consumer_topics=world,
        now_ms=world.now,
    )


def join_request(group: str) -> jg.JoinGroupRequest:
    return jg.JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[jg.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )


def consumer_join(group: str = "g") -> Req:
    """A new member's first ConsumerGroupHeartbeat, subscribing to ``orders``."""
    return Req(
        group_id=group,
        member_id="",
        member_epoch=0,
        rebalance_timeout_ms=1000,
        subscribed_topic_names=["orders"],
        topic_partitions=[],
    )


def test_a_group_id_is_either_classic_or_consumer(tmp_path: Path) -> None:
    world = World(orders=2)
    coord = coordinator(tmp_path, world)
    join = consumer_join()
    resp = coord.consumer_group_heartbeat(join, 1, world.now)
    assert resp.error_code == 0
    (_, classic) = coord.join_group(
        "t", join_request("g"), 9, world.now, client_id="c", client_host="h"
    )[0]
    assert classic.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    coord.join_group("t2", join_request("old"), 4, world.now, client_id="c", client_host="h")
    refused = coord.consumer_group_heartbeat(_with(join, group_id="old"), 1, world.now)
    assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    listed = coord.list_groups(lg.ListGroupsRequest(types_filter=["consumer"]), 5).groups
    assert [(g.group_id, g.group_type, g.group_state) for g in listed] == [
        ("g", "consumer", "Stable")
    ]
    everything = coord.list_groups(lg.ListGroupsRequest(), 5).groups
    assert sorted(g.group_id for g in everything) == ["g", "old"]
    deleted = coord.delete_groups(dg.DeleteGroupsRequest(groups_names=["g"]), 2).results
    assert deleted[0].error_code == ErrorCode.NON_EMPTY_GROUP
    described = coord.consumer_group_describe(
        cd.ConsumerGroupDescribeRequest(group_ids=["g", "old"]), lambda t: "orders"
    ).groups
    assert described[0].group_state == "Stable" and described[0].members[0].assignment
    assert described[1].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    member = described[0].members[0]
    leave = _with(join, member_id=member.member_id, member_epoch=-1)
    assert coord.consumer_group_heartbeat(leave, 1, world.now).error_code == 0
    deleted = coord.delete_groups(dg.DeleteGroupsRequest(groups_names=["g"]), 2).results
    assert deleted[0].error_code == 0 and coord.consumer_group("g") is None


def test_offsets_need_the_member_and_its_epoch(tmp_path: Path) -> None:
    world = World(orders=2)
    groups = ConsumerGroups(world)
    a = Member(groups, world)
    a.join()
    assert groups.validate_commit("g", a.member_id, a.epoch, 9) == ErrorCode.NONE
    assert groups.validate_commit("g", a.member_id, a.epoch - 1, 9) == ErrorCode.STALE_MEMBER_EPOCH
    assert groups.validate_commit("g", a.member_id, 0, 8) == ErrorCode.ILLEGAL_GENERATION
    assert groups.validate_commit("g", "nobody", 1, 9) == ErrorCode.UNKNOWN_MEMBER_ID
    assert groups.validate_commit("g", "", -1, 9) == ErrorCode.UNKNOWN_MEMBER_ID  # not empty
    assert groups.validate_fetch("g", a.member_id, a.epoch) == ErrorCode.NONE
    assert groups.validate_fetch("g", a.member_id, a.epoch + 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert groups.validate_fetch("g", None, -1) == ErrorCode.NONE  # an admin's fetch
    a.leave()
    assert groups.validate_commit("g", "", -1, 9) == ErrorCode.NONE


def _with(req: Req, **changes: Any) -> Req:
    import dataclasses

    return dataclasses.replace(req, **changes)


def test_the_consumer_group_timings_are_checked() -> None:
    """Kafka's GroupCoordinatorConfig: group.consumer.session.timeout.ms and
    group.consumer.heartbeat.interval.ms each lie within their
    group.consumer.min/max.* settings (45000-60000 and 5000-15000 by default),
    every one at least 1, and the heartbeat interval below the session timeout."""
    from trafka.brokerlite.config import BrokerConfig, ConfigError

    config = BrokerConfig.from_mapping(
        {
            "group.consumer.min.session.timeout.ms": "9000",
            "group.consumer.session.timeout.ms": "9000",
            "group.consumer.min.heartbeat.interval.ms": "900",
            "group.consumer.heartbeat.interval.ms": "900",
        }
    )
    assert (
        config.group_consumer_session_timeout_ms,
        config.group_consumer_heartbeat_interval_ms,
    ) == (9000, 900)
    with pytest.raises(ConfigError, match=r"session\.timeout\.ms: 9000 is outside"):
        BrokerConfig(group_consumer_session_timeout_ms=9000)  # below the default minimum
    with pytest.raises(ConfigError, match=r"heartbeat\.interval\.ms: 50000 is outside"):
        BrokerConfig(group_consumer_heartbeat_interval_ms=50_000)
    with pytest.raises(ConfigError, match=r"heartbeat\.interval\.ms must be below"):
        BrokerConfig(
            group_consumer_max_heartbeat_interval_ms=50_000,
            group_consumer_heartbeat_interval_ms=50_000,
        )
    with pytest.raises(ConfigError, match=r"heartbeat\.interval\.ms: must be in \[1, "):
        BrokerConfig(group_consumer_heartbeat_interval_ms=0)


def test_owned_partitions_left_null_mean_as_last_reported() -> None:
    world = World(orders=4)
    groups = ConsumerGroups(world)
    a, b = Member(groups, world, "a"), Member(groups, world, "b")
    a.join()  # a is given every partition but has not taken them yet
    b.join()

    def silent(m: Member) -> Any:  # a heartbeat with TopicPartitions null
        req = Req(group_id="g", member_id=m.member_id, member_epoch=m.epoch)
        return m._apply(groups.heartbeat(req, 1, world.now))

    # a last reported owning nothing: nothing to wait for, it moves on at once.
    assert silent(a).member_epoch == 2
    b.beat()
    assert len(a.owns) == len(b.owns) == 2
    a.beat()
    b.beat()
    # c joins; the uniform assignor keeps a at 2 and takes one from b. b revokes
    # locally but says nothing: as far as the coordinator knows, it still owns it.
    c = Member(groups, world, "c")
    c.join()
    assert b.beat().member_epoch == 2 and len(b.owns) == 1  # told to give one up
    assert silent(b).member_epoch == 2
    c.beat()
    assert c.owns == set()  # its partition is still b's until b says otherwise
    assert b.beat().member_epoch == 3  # reports the smaller set: done
    c.beat()
    assert len(c.owns) == 1
    no_double_owners([a, b, c])


# -- property: one owner per partition, and convergence --------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

OPS = st.lists(
    st.tuples(
        st.sampled_from(["join", "leave", "away", "beat", "apply", "grow", "crash"]),
        st.integers(0, 3),
    ),
    max_size=60,
)


class Client:
    """A client that applies the latest assignment it received, when it gets to it,
    and always reports what it owns."""

    def __init__(self, name: str, instance_id: str | None = None) -> None:
        self.name = name
        self.member_id = name
        self.instance_id = instance_id
        self.away = False  # left with -2: it comes back as a new process
        self.restarts = 0
        self.epoch = -1  # not in the group
        self.owns: set[tuple[uuid.UUID, int]] = set()
        self.pending: set[tuple[uuid.UUID, int]] | None = None

    def heartbeat(self, groups: ConsumerGroups, now: int, **fields: Any) -> None:
        joining = self.epoch < 0
        if joining and self.away:
            self.restarts += 1
            self.member_id, self.away = f"{self.name}-{self.restarts}", False
        req = Req(
            group_id="g",
            member_id=self.member_id,
            instance_id=self.instance_id,
            member_epoch=0 if joining else self.epoch,
            rebalance_timeout_ms=30_000 if joining else -1,
            subscribed_topic_names=["orders", "audit"] if joining else None,
            topic_partitions=parts(set() if joining else self.owns),
            server_assignor="uniform" if joining else None,
        )
        resp = groups.heartbeat(req, 1, now)
        if resp.error_code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            self.epoch, self.owns, self.pending = -1, set(), None  # lost: start over
            return
        assert resp.error_code == 0, resp
        self.epoch = resp.member_epoch
        if resp.assignment is not None:
            self.pending = owned(resp)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_no_partition_ever_has_two_owners_and_groups_converge(ops: list[tuple[str, int]]) -> None:
    world = World(orders=5, audit=2)
    groups = ConsumerGroups(world, session_timeout_ms=60_000)
    # Two static members (they may leave for a while with -2) and two dynamic ones.
    clients = [Client(f"m{i}", f"i{i}" if i < 2 else None) for i in range(4)]
    for op, i in ops:
        c = clients[i]
        if op in ("join", "beat"):
            c.heartbeat(groups, world.now)
        elif op == "apply" and c.pending is not None:
            c.owns, c.pending = c.pending, None
        elif op in ("leave", "away") and c.epoch > 0:
            away = op == "away" and c.instance_id is not None
            req = Req(
                group_id="g",
                member_id=c.member_id,
                member_epoch=-2 if away else -1,
                instance_id=c.instance_id,
            )
            code = groups.heartbeat(req, 1, world.now).error_code
            assert code in (0, ErrorCode.UNKNOWN_MEMBER_ID)  # fenced meanwhile
            c.epoch, c.owns, c.pending, c.away = -1, set(), None, away
        elif op == "grow":
            meta = world.topics["orders"]
            world.topics["orders"] = TopicMeta("orders", meta.topic_id, meta.partitions + 1)
        elif op == "crash" and c.epoch > 0:
            # It stops; the others heartbeat on; the coordinator fences it after
            # its session.
            c.epoch, c.owns, c.pending = -1, set(), None
            world.now += 40_000
            for other in clients:
                if other.epoch > 0:
                    other.heartbeat(groups, world.now)
            world.now += 40_000
            groups.tick(world.now)
            # A member fenced by a timeout (this one, or one too slow to revoke)
            # is a zombie until it next heartbeats: Kafka's clients give up their
            # partitions on their own timers, so it owns nothing the group counts.
            members = groups.groups["g"].members if "g" in groups.groups else {}
            for other in clients:
                if other.epoch > 0 and other.member_id not in members:
                    other.epoch, other.owns, other.pending = -1, set(), None
        live = [x.owns for x in clients]
        for j, a in enumerate(live):
            for b in live[j + 1 :]:
                assert not a & b, "two clients own one partition"
    if any(c.away for c in clients):
        # Static members that never came back are removed after their session.
        for _ in range(2):
            world.now += 40_000
            for c in clients:
                if c.epoch > 0:
                    c.heartbeat(groups, world.now)
            groups.tick(world.now)
        for c in clients:
            if c.epoch > 0 and c.member_id not in groups.groups["g"].members:
                c.epoch, c.owns, c.pending = -1, set(), None
    members = [c for c in clients if c.epoch > 0]
    for _ in range(8):
        for c in members:
            c.heartbeat(groups, world.now)
            if c.pending is not None:
                c.owns, c.pending = c.pending, None
    if members:
        everything = {
            (meta.topic_id, p) for meta in world.topics.values() for p in range(meta.partitions)
        }
        assert set().union(*(c.owns for c in members)) == everything
        assert groups.groups["g"].state == "Stable"


# -- durability ----------------------------------------------------------------------------------


def test_groups_come_back_after_a_restart_without_a_rebalance() -> None:
    """A snapshot after every change; a restart loads them and members carry on
    with their epochs, mid-revocation included, their timers started afresh."""
    world = World(orders=6)
    stored: dict[str, Any] = {}
    groups = ConsumerGroups(world, session_timeout_ms=10_000, persist=stored.__setitem__)
    a, b = Member(groups, world), Member(groups, world)
    a.join()
    b.join()
    a.beat()  # told to give up half: the restart comes mid-revocation
    assert groups.groups["g"].members[a.member_id].state == "unrevoked_partitions"
    a_epoch, b_epoch = a.epoch, b.epoch
    group_epoch = groups.groups["g"].epoch
    assert a_epoch < group_epoch == b_epoch
    assert stored["g"] == ConsumerGroups.snapshot(groups.groups["g"])
    # The broker restarts: a new coordinator loads what was stored.
    world.now += 60_000
    again = ConsumerGroups(world, session_timeout_ms=10_000, persist=stored.__setitem__)
    again.load(dict(stored))
    again.start(world.now)
    for m in (a, b):
        m.groups = again
    assert again.groups["g"].epoch == group_epoch
    # No UNKNOWN_MEMBER_ID, no rejoin: the rebalance in progress simply finishes.
    settle([a, b])
    assert a.owns | b.owns == {(ORDERS, p) for p in range(6)} and len(a.owns) == 3
    assert again.groups["g"].epoch == group_epoch and again.groups["g"].state == "Stable"
    assert (a.epoch, b.epoch) == (group_epoch, group_epoch)
    # A member that does not come back is fenced a session timeout after the start.
    world.now += 5_000
    assert a.beat().error_code == 0
    world.now += 6_000
    again.tick(world.now)
    assert list(again.groups["g"].members) == [a.member_id]
    assert stored["g"]["members"][0]["member_id"] == a.member_id
    # Deleting a group removes its snapshot.
    a.leave()
    again.delete("g")
    assert stored["g"] is None


def test_a_slow_revoker_loaded_after_a_restart_still_has_a_deadline() -> None:
    world = World(orders=4)
    stored: dict[str, Any] = {}
    groups = ConsumerGroups(world, persist=stored.__setitem__)
    a, b = Member(groups, world), Member(groups, world)
    a.join(rebalance_timeout_ms=5_000)
    b.join()
    a.beat()  # told to revoke two; it never reports that it did
    assert groups.groups["g"].members[a.member_id].revoking
    again = ConsumerGroups(world, persist=stored.__setitem__)
    again.load(dict(stored))
    again.start(world.now)
    assert again.groups["g"].members[a.member_id].revoking
    world.now += 5_001
    again.tick(world.now)
    assert a.member_id not in again.groups["g"].members


@pytest.mark.parametrize(
    "broken",
    [
        {"epoch": "x"},
        {"assignor": "nope"},
        {"members": [{"member_id": "m"}]},
    ],
)
def test_a_bad_snapshot_is_an_error(broken: dict[str, Any]) -> None:
    world = World(orders=2)
    stored: dict[str, Any] = {}
    groups = ConsumerGroups(world, persist=stored.__setitem__)
    Member(groups, world).join()
    with pytest.raises(ValueError, match="bad snapshot"):
        ConsumerGroups(world).load({"g": {**stored["g"], **broken}})


def test_the_coordinator_keeps_consumer_groups_in_its_journal(tmp_path: Path) -> None:
    world = World(orders=2)
    coord = coordinator(tmp_path, world)
    join = consumer_join()
    resp = coord.consumer_group_heartbeat(join, 1, world.now)
    assert resp.error_code == 0
    member, epoch = resp.member_id, resp.member_epoch
    coord.store.close()
    coord = coordinator(tmp_path, world)
    group = coord.consumer_group("g")
    assert group is not None and list(group.members) == [member]
    beat = _with(join, member_id=member, member_epoch=epoch, topic_partitions=None)
    again = coord.consumer_group_heartbeat(beat, 1, world.now)
    assert (again.error_code, again.member_epoch) == (0, epoch)
    # Still a consumer group: a classic join is refused.
    (_, classic) = coord.join_group(
        "t", join_request("g"), 9, world.now, client_id="c", client_host="h"
    )[0]
    assert classic.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    leave = _with(join, member_id=member, member_epoch=-1)
    assert coord.consumer_group_heartbeat(leave, 1, world.now).error_code == 0
    deleted = coord.delete_groups(dg.DeleteGroupsRequest(groups_names=["g"]), 2).results
    assert deleted[0].error_code == 0
    coord.store.close()
    coord = coordinator(tmp_path, world)
    assert coord.consumer_group("g") is None
    coord.store.close()
