"""Share groups (KIP-932), sans-IO: joining, leaving, fencing, epochs, the ``simple``
assignor (also with more members than partitions), topic changes, session
timeouts, listeners, group configs and their validation, and restarts."""

from __future__ import annotations

import itertools
import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from trafka.brokerlite.groups.consumer_groups import TopicMeta
from trafka.brokerlite.groups.share_groups import (
    InvalidGroupConfigError,
    InvalidGroupResourceError,
    ShareGroupConfig,
    ShareGroups,
    ShareGroupSettings,
    ShareGroupStore,
    ShareGroupStoreError,
    duration_ms,
    simple_assign,
)
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k76_share_group_heartbeat as hb

Req = hb.ShareGroupHeartbeatRequest
TP = tuple[uuid.UUID, int]


class World:
    """Topics that tests can change."""

    def __init__(self, **sizes: int) -> None:
        self.topics: dict[str, TopicMeta] = {}
        for name, n in sizes.items():
            self.create(name, n)

    def create(self, name: str, partitions: int) -> TopicMeta:
        meta = TopicMeta(name, uuid.uuid4(), partitions)
        self.topics[name] = meta
        return meta

    def __call__(self) -> dict[str, TopicMeta]:
        return dict(self.topics)


class Recorder:
    """A listener that records what it hears."""

    def __init__(self) -> None:
        self.assigned: list[tuple[str, set[tuple[str, int]]]] = []
        self.removed: list[tuple[str, str]] = []
        self.deleted: list[str] = []

    def partitions_assigned(
        self, group_id: str, partitions: set[tuple[str, int]], now_ms: int
    ) -> None:
        self.assigned.append((group_id, partitions))

    def member_removed(self, group_id: str, member_id: str, now_ms: int) -> None:
        self.removed.append((group_id, member_id))

    def group_deleted(self, group_id: str) -> None:
        self.deleted.append(group_id)


def req(member: str, epoch: int, topics: list[str] | None = None, **kw: Any) -> Req:
    return Req(
        group_id=kw.pop("group_id", "g"),
        member_id=member,
        member_epoch=epoch,
        subscribed_topic_names=topics,
        **kw,
    )


def owned(resp: hb.ShareGroupHeartbeatResponse) -> set[TP] | None:
    if resp.assignment is None:
        return None
    return {(t.topic_id, p) for t in resp.assignment.topic_partitions for p in t.partitions}


class Member:
    """A well-behaved member: heartbeats with the epoch it was last given."""

    def __init__(self, groups: ShareGroups, member_id: str, group_id: str = "g") -> None:
        self.groups, self.member_id, self.group_id = groups, member_id, group_id
        self.epoch = 0
        self.owns: set[TP] = set()

    def beat(self, now: int, topics: list[str] | None = None, **kw: Any) -> Any:
        resp = self.groups.heartbeat(
            req(self.member_id, self.epoch, topics, group_id=self.group_id, **kw),
            now,
            client_id="cid",
            client_host="/127.0.0.1",
        )
        if resp.error_code == 0:
            self.epoch = resp.member_epoch
            got = owned(resp)
            if got is not None:
                self.owns = got
        return resp

    def join(self, now: int, topics: list[str], **kw: Any) -> Any:
        self.epoch = 0
        return self.beat(now, topics, **kw)


def tps(meta: TopicMeta, *parts: int) -> set[TP]:
    return {(meta.topic_id, p) for p in parts}


# -- joining, heartbeating, leaving -------------------------------------------------------------


def test_a_first_member_joins_with_its_own_id_and_gets_every_partition() -> None:
    world = World(orders=3)
    groups = ShareGroups(world)
    resp = groups.heartbeat(req("m1", 0, ["orders"]), 1000, client_id="c", client_host="/h")
    assert resp.error_code == 0 and resp.error_message is None
    assert (resp.member_id, resp.member_epoch, resp.heartbeat_interval_ms) == ("m1", 1, 5000)
    assert owned(resp) == tps(world.topics["orders"], 0, 1, 2)
    group = groups.groups["g"]
    assert (group.epoch, group.assignment_epoch, group.state) == (1, 1, "Stable")
    assert groups.is_member("g", "m1") and not groups.is_member("g", "m2")
    assert not groups.is_member("other", "m1")
    # Nothing changed: no assignment in the answer, same epoch.
    again = groups.heartbeat(req("m1", 1), 2000)
    assert (again.error_code, again.member_epoch, again.assignment) == (0, 1, None)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (req("", 0, ["t"]), "MemberId"),
        (req("  ", 0, ["t"]), "MemberId"),
        (req("m", 0, ["t"], group_id=""), "GroupId"),
        (req("m", 0, ["t"], rack_id=" "), "RackId"),
        (req("m", 0, None), "SubscribedTopicNames"),
        (req("m", 0, []), "SubscribedTopicNames"),
        (req("m", -2, ["t"]), "MemberEpoch"),
    ],
)
def test_malformed_heartbeats_are_invalid_requests(request_: Req, message: str) -> None:
    groups = ShareGroups(World(t=1))
    resp = groups.heartbeat(request_, 1000)
    assert resp.error_code == ErrorCode.INVALID_REQUEST
    assert resp.error_message is not None and message in resp.error_message
    assert groups.groups == {}


def test_members_move_to_the_new_assignment_epoch_without_revoking() -> None:
    world = World(orders=4)
    groups = ShareGroups(world)
    a, b = Member(groups, "a"), Member(groups, "b")
    a.join(0, ["orders"])
    assert a.epoch == 1 and len(a.owns) == 4
    resp = b.join(10, ["orders"])
    assert resp.member_epoch == 2 and groups.groups["g"].epoch == 2
    assert len(b.owns) == 2
    # a still heartbeats at epoch 1 (its current one) and moves straight to 2.
    resp = a.beat(20)
    assert resp.error_code == 0 and resp.member_epoch == 2
    assert owned(resp) is not None and len(a.owns) == 2
    assert a.owns | b.owns == tps(world.topics["orders"], 0, 1, 2, 3)
    assert not a.owns & b.owns
    assert a.beat(30).assignment is None


def test_unknown_and_fenced_members_are_refused() -> None:
    groups = ShareGroups(World(t=2))
    a = Member(groups, "a")
    a.join(0, ["t"])  # epoch 1
    Member(groups, "b").join(10, ["t"])  # group epoch 2
    a.beat(20)  # a moves to 2, its previous epoch is 1
    assert groups.heartbeat(req("a", 3), 30).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert groups.heartbeat(req("a", 0, ["t"]), 30).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    # Its previous epoch is accepted: the answer that moved it on may have been lost.
    lost = groups.heartbeat(req("a", 1), 30)
    assert (lost.error_code, lost.member_epoch) == (0, 2)
    unknown = groups.heartbeat(req("zz", 2), 30)
    assert unknown.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    missing = groups.heartbeat(req("a", 1, group_id="nope"), 30)
    assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert groups.heartbeat(req("a", -1, group_id="nope"), 30).error_code == (
        ErrorCode.GROUP_ID_NOT_FOUND
    )
    assert groups.heartbeat(req("zz", -1), 30).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_join_repeated_after_a_lost_answer_gets_the_assignment_again() -> None:
    world = World(t=2)
    groups = ShareGroups(world)
    first = groups.heartbeat(req("m", 0, ["t"]), 0)
    again = groups.heartbeat(req("m", 0, ["t"]), 10)
    assert again.error_code == 0 and again.member_epoch == first.member_epoch == 1
    assert owned(again) == owned(first) == tps(world.topics["t"], 0, 1)
    assert groups.groups["g"].epoch == 1


def test_a_leaving_member_is_answered_with_epoch_minus_one_and_its_partitions_move() -> None:
    world = World(t=4)
    groups = ShareGroups(world)
    heard = Recorder()
    groups.listeners.append(heard)
    a, b = Member(groups, "a"), Member(groups, "b")
    a.join(0, ["t"])
    b.join(10, ["t"])
    a.beat(20)
    resp = groups.heartbeat(req("b", b.epoch), 30)
    assert resp.error_code == 0
    resp = groups.heartbeat(req("b", -1), 40)
    assert (resp.error_code, resp.member_id, resp.member_epoch) == (0, "b", -1)
    assert heard.removed == [("g", "b")]
    assert groups.groups["g"].epoch == 3 and not groups.is_member("g", "b")
    resp = a.beat(50)
    assert resp.member_epoch == 3 and a.owns == tps(world.topics["t"], 0, 1, 2, 3)
    # Every new target assignment was announced with all its partitions.
    assert heard.assigned[-1] == ("g", {("t", p) for p in range(4)})


def test_null_fields_keep_their_value_and_a_new_subscription_reassigns() -> None:
    world = World(orders=2, audit=1)
    groups = ShareGroups(world)
    a = Member(groups, "a")
    a.join(0, ["orders"], rack_id="r1")
    a.beat(10)  # nulls: subscription and rack kept
    member = groups.groups["g"].members["a"]
    assert member.subscribed_names == ("orders",) and member.rack_id == "r1"
    assert groups.groups["g"].epoch == 1
    resp = a.beat(20, ["orders", "audit"])
    assert resp.member_epoch == 2
    assert a.owns == tps(world.topics["orders"], 0, 1) | tps(world.topics["audit"], 0)
    resp = a.beat(30, ["audit", "orders"])  # same set: nothing moves
    assert (resp.member_epoch, resp.assignment) == (2, None)


def test_the_group_is_full_at_its_maximum_size() -> None:
    groups = ShareGroups(World(t=1), settings=ShareGroupSettings(max_size=2))
    Member(groups, "a").join(0, ["t"])
    Member(groups, "b").join(0, ["t"])
    resp = Member(groups, "c").join(0, ["t"])
    assert resp.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert groups.heartbeat(req("a", 0, ["t"]), 0).error_code == 0  # a member may rejoin


def test_an_id_of_another_group_type_is_not_a_share_group() -> None:
    groups = ShareGroups(World(t=1))
    groups.other_group_type = lambda gid: "consumer" if gid == "cg" else None
    resp = groups.heartbeat(req("m", 0, ["t"], group_id="cg"), 0)
    assert resp.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert resp.error_message is not None and "not a share group" in resp.error_message
    assert "cg" not in groups.groups


# -- the simple assignor ------------------------------------------------------------------------


def test_more_members_than_partitions_share_the_partitions_evenly() -> None:
    world = World(t=2)
    groups = ShareGroups(world)
    members = [Member(groups, f"m{i}") for i in range(5)]
    for i, m in enumerate(members):
        m.join(i, ["t"])
    for m in members:
        m.beat(100)
    assert all(len(m.owns) == 1 for m in members)
    sharers = [sum(1 for m in members if (world.topics["t"].topic_id, p) in m.owns) for p in (0, 1)]
    assert sorted(sharers) == [2, 3]


def _check_assignment(
    subs: dict[str, list[str]], topics: dict[str, TopicMeta], out: dict[str, frozenset[TP]]
) -> None:
    assert set(out) == set(subs)
    names = {meta.topic_id: name for name, meta in topics.items()}
    for member, assigned in out.items():
        assert all(names[t] in subs[member] for t, _ in assigned), "only subscribed topics"
    for name, meta in topics.items():
        subscribers = [m for m in subs if name in subs[m]]
        if not subscribers or meta.partitions == 0:
            assert not any(t == meta.topic_id for a in out.values() for t, _ in a)
            continue
        holders = {
            p: [m for m in subscribers if (meta.topic_id, p) in out[m]]
            for p in range(meta.partitions)
        }
        assert all(holders[p] for p in holders), "every partition has a member"
        counts = [sum(1 for t, _ in out[m] if t == meta.topic_id) for m in subscribers]
        if len(subscribers) <= meta.partitions:
            assert all(len(h) == 1 for h in holders.values())
            assert max(counts) - min(counts) <= 1
        else:
            assert counts == [1] * len(subscribers)
            sizes = [len(h) for h in holders.values()]
            assert max(sizes) - min(sizes) <= 1


def test_the_simple_assignor_covers_and_balances_every_topic() -> None:
    rng = random.Random(932)
    for members, parts_a, parts_b in itertools.product(range(1, 8), range(1, 8), (0, 1, 5)):
        topics = {
            "a": TopicMeta("a", uuid.UUID(int=1), parts_a),
            "b": TopicMeta("b", uuid.UUID(int=2), parts_b),
        }
        subs = {f"m{i}": rng.choice([["a"], ["b"], ["a", "b"]]) for i in range(members)}
        current: dict[str, frozenset[TP]] = {}
        out = simple_assign(subs, topics, current)
        _check_assignment(subs, topics, out)
        # And again from there, with a member more and one less.
        subs[f"m{members}"] = ["a", "b"]
        subs.pop("m0")
        _check_assignment(subs, topics, simple_assign(subs, topics, out))


def test_the_simple_assignor_moves_little_when_a_member_joins() -> None:
    t = TopicMeta("t", uuid.UUID(int=7), 6)
    three = simple_assign({m: ["t"] for m in "abc"}, {"t": t}, {})
    four = simple_assign({m: ["t"] for m in "abcd"}, {"t": t}, three)
    moved = sum(len(three[m] - four[m]) for m in "abc")
    assert moved == 1  # only what the newcomer needs
    assert sum(len(four[m]) for m in "abcd") == 6


def test_the_simple_assignor_keeps_sharers_where_they_are() -> None:
    t = TopicMeta("t", uuid.UUID(int=7), 2)
    before = simple_assign({m: ["t"] for m in "abcd"}, {"t": t}, {})
    after = simple_assign({m: ["t"] for m in "abcde"}, {"t": t}, before)
    assert all(after[m] == before[m] for m in "abcd")
    assert len(after["e"]) == 1


# -- topic changes ------------------------------------------------------------------------------


def test_subscribed_topics_appearing_growing_vanishing_and_recreated_bump_the_epoch() -> None:
    world = World()
    groups = ShareGroups(world)
    heard = Recorder()
    groups.listeners.append(heard)
    a = Member(groups, "a")
    resp = a.join(0, ["later"])
    assert resp.member_epoch == 1 and a.owns == set()
    assert heard.assigned == [("g", set())]
    meta = world.create("later", 2)
    resp = a.beat(10)
    assert resp.member_epoch == 2 and a.owns == tps(meta, 0, 1)
    world.topics["later"] = TopicMeta("later", meta.topic_id, 3)
    resp = a.beat(20)
    assert resp.member_epoch == 3 and a.owns == tps(meta, 0, 1, 2)
    assert heard.assigned[-1] == ("g", {("later", p) for p in range(3)})
    del world.topics["later"]
    resp = a.beat(30)
    assert resp.member_epoch == 4 and owned(resp) == set()
    again = world.create("later", 1)
    resp = a.beat(40)
    assert resp.member_epoch == 5 and a.owns == tps(again, 0)
    assert a.beat(50).member_epoch == 5  # nothing changed


# -- liveness -----------------------------------------------------------------------------------


def test_a_silent_member_is_fenced_at_its_session_timeout_and_the_group_stays() -> None:
    world = World(t=2)
    groups = ShareGroups(world)
    heard = Recorder()
    groups.listeners.append(heard)
    a, b = Member(groups, "a"), Member(groups, "b")
    a.join(0, ["t"])
    b.join(0, ["t"])
    assert groups.next_deadline() == 45_000
    a.beat(30_000)
    groups.tick(44_999)
    assert groups.is_member("g", "b")
    groups.tick(45_000)
    assert not groups.is_member("g", "b") and heard.removed == [("g", "b")]
    assert groups.groups["g"].epoch == 3
    resp = b.beat(45_001)
    assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    resp = a.beat(46_000)
    assert resp.member_epoch == 3 and a.owns == tps(world.topics["t"], 0, 1)
    groups.tick(46_000 + 45_000)
    assert groups.groups["g"].state == "Empty" and groups.listed() == [("g", "Empty")]
    assert groups.next_deadline() is None


def test_deleting_needs_an_empty_group_and_tells_the_listeners() -> None:
    groups = ShareGroups(World(t=1))
    heard = Recorder()
    groups.listeners.append(heard)
    Member(groups, "a").join(0, ["t"])
    assert groups.delete("g") == ErrorCode.NON_EMPTY_GROUP
    assert groups.delete("nope") == ErrorCode.GROUP_ID_NOT_FOUND
    groups.heartbeat(req("a", -1), 10)
    assert groups.delete("g") == ErrorCode.NONE
    assert heard.deleted == ["g"] and groups.listed() == []


def test_a_failing_listener_does_not_stop_the_others() -> None:
    class Broken(Recorder):
        def partitions_assigned(
            self, group_id: str, partitions: set[tuple[str, int]], now_ms: int
        ) -> None:
            raise RuntimeError("boom")

    groups = ShareGroups(World(t=1))
    heard = Recorder()
    groups.listeners += [Broken(), heard]
    assert Member(groups, "a").join(0, ["t"]).error_code == 0
    assert heard.assigned == [("g", {("t", 0)})]


# -- configs ------------------------------------------------------------------------------------


def test_configs_default_to_the_broker_settings() -> None:
    groups = ShareGroups(World(), settings=ShareGroupSettings(delivery_count_limit=7))
    assert groups.config("any") == ShareGroupConfig(
        auto_offset_reset="latest",
        record_lock_duration_ms=30_000,
        delivery_count_limit=7,
        isolation_level="read_uncommitted",
        partition_max_record_locks=2000,
    )
    entries = {e.name: e for e in groups.describe_configs("any")}
    # consumer.*, share.* and KIP-1191's errors.deadletterqueue.*
    assert list(entries) == sorted(entries) and len(entries) == 12
    limit = entries["share.delivery.count.limit"]
    assert (limit.value, limit.source, limit.config_type) == ("7", 4, 3)
    assert limit.synonyms == (
        ("group.share.delivery.count.limit", "7", 4),
        ("group.share.delivery.count.limit", "5", 5),
    )
    reset = entries["share.auto.offset.reset"]
    assert (reset.value, reset.source, reset.config_type) == ("latest", 5, 2)
    assert reset.synonyms == (("share.auto.offset.reset", "latest", 5),)
    with pytest.raises(InvalidGroupResourceError):
        groups.describe_configs("")


def test_group_overrides_take_effect_and_are_reported() -> None:
    world = World(t=1)
    groups = ShareGroups(world)
    groups.alter_configs(
        "g",
        {
            "share.auto.offset.reset": "by_duration:P1DT2H",
            "share.isolation.level": "read_committed",
            "share.record.lock.duration.ms": "15000",
            "share.delivery.count.limit": "10",
            "share.partition.max.record.locks": "4000",
            "share.heartbeat.interval.ms": "15000",
            "share.session.timeout.ms": "60000",
        },
        incremental=True,
    )
    assert groups.config("g") == ShareGroupConfig(
        "by_duration:P1DT2H", 15_000, 10, "read_committed", 4000
    )
    session = next(e for e in groups.describe_configs("g") if e.name == "share.session.timeout.ms")
    assert session.source == 8 and session.synonyms[0] == ("share.session.timeout.ms", "60000", 8)
    resp = groups.heartbeat(req("m", 0, ["t"]), 1000)
    assert resp.heartbeat_interval_ms == 15_000
    assert groups.groups["g"].members["m"].session_deadline_ms == 61_000
    # Incremental: a deletion brings one config back to its default only.
    groups.alter_configs("g", {"share.isolation.level": None}, incremental=True)
    assert groups.config("g").isolation_level == "read_uncommitted"
    assert groups.config("g").delivery_count_limit == 10
    # Non-incremental: the configs given are the whole set.
    groups.alter_configs("g", {"share.delivery.count.limit": "3"}, incremental=False)
    assert groups.overrides("g") == {"share.delivery.count.limit": "3"}
    assert groups.config("g").auto_offset_reset == "latest"


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"share.unknown": "1"}, "unknown group config"),
        ({"streams.session.timeout.ms": "45000"}, "unknown group config"),
        ({"consumer.session.timeout.ms": "44999"}, "group.consumer.min.session.timeout.ms"),
        ({"share.delivery.count.limit": "x"}, "not an integer"),
        ({"share.delivery.count.limit": "1"}, "below 2"),
        ({"share.delivery.count.limit": "11"}, "group.share.max.delivery.count.limit"),
        ({"share.record.lock.duration.ms": "999"}, "below 1000"),
        ({"share.record.lock.duration.ms": "14999"}, "group.share.min.record.lock.duration.ms"),
        ({"share.record.lock.duration.ms": "60001"}, "group.share.max.record.lock.duration.ms"),
        ({"share.session.timeout.ms": "44999"}, "group.share.min.session.timeout.ms"),
        ({"share.session.timeout.ms": "60001"}, "group.share.max.session.timeout.ms"),
        ({"share.heartbeat.interval.ms": "4999"}, "group.share.min.heartbeat.interval.ms"),
        ({"share.heartbeat.interval.ms": "15001"}, "group.share.max.heartbeat.interval.ms"),
        ({"share.partition.max.record.locks": "99"}, "below 100"),
        ({"share.partition.max.record.locks": "4001"}, "max.partition.max.record.locks"),
        ({"share.auto.offset.reset": "LATEST"}, "share.auto.offset.reset"),
        ({"share.auto.offset.reset": "none"}, "share.auto.offset.reset"),
        ({"share.auto.offset.reset": "by_duration"}, "share.auto.offset.reset"),
        ({"share.auto.offset.reset": "by_duration:"}, "ISO-8601"),
        ({"share.auto.offset.reset": "by_duration:P1Y"}, "ISO-8601"),
        ({"share.auto.offset.reset": "by_duration:-PT1H"}, "negative"),
        ({"share.isolation.level": "READ_COMMITTED"}, "share.isolation.level"),
        ({"share.renew.acknowledge.enable": "yes"}, "must be true or false"),
    ],
)
def test_invalid_group_configs_are_refused_and_change_nothing(
    changes: dict[str, str], needle: str
) -> None:
    groups = ShareGroups(World())
    groups.alter_configs("g", {"share.delivery.count.limit": "4"}, incremental=True)
    with pytest.raises(InvalidGroupConfigError, match=needle.replace(".", r"\.")) as caught:
        groups.alter_configs("g", changes, incremental=True)
    assert caught.value.code == ErrorCode.INVALID_CONFIG
    assert groups.overrides("g") == {"share.delivery.count.limit": "4"}


def test_the_session_timeout_must_exceed_the_heartbeat_interval() -> None:
    settings = ShareGroupSettings(
        min_session_timeout_ms=1000,
        min_heartbeat_interval_ms=100,
        max_heartbeat_interval_ms=50_000,
    )
    groups = ShareGroups(World(), settings=settings)
    with pytest.raises(InvalidGroupConfigError, match="must be greater than"):
        groups.alter_configs("g", {"share.session.timeout.ms": "5000"}, incremental=True)
    with pytest.raises(InvalidGroupConfigError, match="must be greater than"):
        groups.alter_configs("g", {"share.heartbeat.interval.ms": "45000"}, incremental=True)
    groups.alter_configs(
        "g",
        {"share.session.timeout.ms": "5000", "share.heartbeat.interval.ms": "1000"},
        incremental=True,
    )
    with pytest.raises(InvalidGroupResourceError):
        groups.alter_configs("", {}, incremental=True)


def test_validate_only_changes_nothing() -> None:
    groups = ShareGroups(World())
    groups.alter_configs(
        "g", {"share.isolation.level": "read_committed"}, incremental=True, validate_only=True
    )
    assert groups.overrides("g") == {}


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT1H", 3_600_000),
        ("pt1h", 3_600_000),
        ("P2D", 172_800_000),
        ("P1DT2H3M4.5S", 93_784_500),
        ("PT-0.5S", -500),
        ("-PT1M", -60_000),
        ("PT0S", 0),
        ("P", None),
        ("PT", None),
        ("P1DT", None),
        ("P1Y", None),
        ("1H", None),
        ("", None),
    ],
)
def test_iso_8601_durations_read_as_java_reads_them(text: str, ms: int | None) -> None:
    assert duration_ms(text) == ms


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="session_timeout_ms"):
        ShareGroupSettings(session_timeout_ms=1000)
    with pytest.raises(ValueError, match="heartbeat_interval_ms must be below"):
        ShareGroupSettings(
            min_session_timeout_ms=1000,
            session_timeout_ms=5000,
            max_heartbeat_interval_ms=5000,
        )


# -- durability ---------------------------------------------------------------------------------


def test_groups_members_and_configs_survive_a_restart(tmp_path: Path) -> None:
    world = World(t=4)
    path = tmp_path / "share.journal"
    groups = ShareGroups(world, store=ShareGroupStore(path), now_ms=0)
    a, b = Member(groups, "a"), Member(groups, "b")
    a.join(0, ["t"], rack_id="r")
    b.join(10, ["t"])
    a.beat(20)
    groups.alter_configs("g", {"share.auto.offset.reset": "earliest"}, incremental=True)
    groups.alter_configs("never-joined", {"share.delivery.count.limit": "3"}, incremental=True)
    Member(groups, "x", group_id="gone").join(0, ["t"])
    groups.heartbeat(req("x", -1, group_id="gone"), 30)
    assert groups.delete("gone") == ErrorCode.NONE
    before = {m.member_id: (m.epoch, m.assigned) for m in groups.groups["g"].members.values()}
    groups.close()

    again = ShareGroups(world, store=ShareGroupStore(path), now_ms=100_000)
    heard = Recorder()
    again.listeners.append(heard)
    assert set(again.groups) == {"g"}
    group = again.groups["g"]
    assert (group.epoch, group.assignment_epoch) == (2, 2)
    after = {m.member_id: (m.epoch, m.assigned) for m in group.members.values()}
    assert after == before and group.members["a"].rack_id == "r"
    assert again.config("g").auto_offset_reset == "earliest"
    assert again.config("never-joined").delivery_count_limit == 3
    # Session timers start afresh at the restart.
    assert again.next_deadline() == 145_000
    # Members carry on with their epochs: no rebalance, no assignment resent.
    a.groups = again
    resp = a.beat(100_010)
    assert (resp.error_code, resp.member_epoch, resp.assignment) == (0, 2, None)
    assert group.epoch == 2
    # The listeners hear of the group's assignment once, at its first heartbeat.
    assert heard.assigned == [("g", {("t", p) for p in range(4)})]
    b.groups = again
    b.beat(100_020)
    assert len(heard.assigned) == 1
    again.close()


def test_a_journal_entry_of_an_unknown_kind_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "share.journal"
    store = ShareGroupStore(path)
    store.store_configs("g", {"share.isolation.level": "read_committed"})
    store._journal.append({"kind": "from_the_future", "group": "g"})
    store.close()
    with pytest.raises(ShareGroupStoreError, match="unknown entry kind"):
        ShareGroupStore(path)


def test_a_bad_snapshot_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "share.journal"
    store = ShareGroupStore(path)
    store.store_group("g", {"epoch": 1})
    with pytest.raises(ShareGroupStoreError, match="bad snapshot"):
        ShareGroups(World(), store=store)
    store.close()
