"""Assignors and consumer-protocol payloads (no sockets)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trafka.sdk.assignors import (
    MemberSubscription,
    assign,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    subscription_user_data,
)
from trafka.sdk.fetcher import TopicPartition as TP


def members(
    *ids: str, topics: tuple[str, ...] = ("t",), owned: dict[str, list[TP]] | None = None
) -> dict[str, MemberSubscription]:
    owned = owned or {}
    return {m: MemberSubscription(m, topics, tuple(owned.get(m, ())), generation=1) for m in ids}


def test_range_like_java() -> None:
    out = assign("range", {"t": 7, "u": 2}, members("a", "b", "c", topics=("t", "u")))
    assert out["a"] == [TP("t", 0), TP("t", 1), TP("t", 2), TP("u", 0)]
    assert out["b"] == [TP("t", 3), TP("t", 4), TP("u", 1)]
    assert out["c"] == [TP("t", 5), TP("t", 6)]


def test_roundrobin_like_java() -> None:
    out = assign("roundrobin", {"t": 3, "u": 2}, members("a", "b", topics=("t", "u")))
    assert out["a"] == [TP("t", 0), TP("t", 2), TP("u", 1)]
    assert out["b"] == [TP("t", 1), TP("u", 0)]


def test_roundrobin_skips_unsubscribed() -> None:
    ms = {"a": MemberSubscription("a", ("t",)), "b": MemberSubscription("b", ("t", "u"))}
    out = assign("roundrobin", {"t": 2, "u": 2}, ms)
    assert out["a"] == [TP("t", 0)]
    assert out["b"] == [TP("t", 1), TP("u", 0), TP("u", 1)]


def test_sticky_keeps_owners_and_balances() -> None:
    owned = {"a": [TP("t", i) for i in range(6)]}
    out = assign("sticky", {"t": 6}, members("a", "b", owned=owned))
    assert len(out["a"]) == 3 and len(out["b"]) == 3
    assert set(out["a"]) <= set(owned["a"])
    # a third member joins: each keeps 2 of its own
    again = assign("sticky", {"t": 6}, members("a", "b", "c", owned=out))
    assert all(len(v) == 2 for v in again.values())
    assert set(again["a"]) <= set(out["a"]) and set(again["b"]) <= set(out["b"])


def test_cooperative_sticky_withholds_moving_partitions() -> None:
    owned = {"a": [TP("t", i) for i in range(4)]}
    first = assign("cooperative-sticky", {"t": 4}, members("a", "b", owned=owned))
    assert len(first["a"]) == 2 and first["b"] == []  # b waits for a to revoke
    second = assign("cooperative-sticky", {"t": 4}, members("a", "b", owned={"a": first["a"]}))
    assert len(second["b"]) == 2 and set(second["a"]) == set(first["a"])


@settings(max_examples=50, deadline=None)
@given(
    st.integers(min_value=1, max_value=5),
    st.integers(min_value=0, max_value=20),
    st.sampled_from(["range", "roundrobin", "sticky", "cooperative-sticky"]),
)
def test_every_partition_assigned_once(n_members: int, n_parts: int, name: str) -> None:
    ms = members(*[f"m{i}" for i in range(n_members)])
    out = assign(name, {"t": n_parts}, ms)
    flat = [tp for tps in out.values() for tp in tps]
    assert len(flat) == len(set(flat))
    assert set(flat) == {TP("t", p) for p in range(n_parts)}  # nobody owned anything before
    sizes = [len(v) for v in out.values()]
    assert max(sizes) - min(sizes) <= 1


def test_subscription_round_trip_and_old_versions() -> None:
    data = encode_subscription(
        ["b", "a"], [TP("a", 1), TP("a", 0)], generation=4, rack="r1", user_data=b"u"
    )
    sub = decode_subscription("m", data, "inst")
    assert sub.topics == ("a", "b") and sub.owned == (TP("a", 0), TP("a", 1))
    assert (
        sub.generation == 4
        and sub.rack == "r1"
        and sub.user_data == b"u"
        and sub.instance_id == "inst"
    )
    # version 0, as old clients send it: topics and user data only
    from trafka.codec.messages import consumer_protocol as cp

    v0 = b"\x00\x00" + cp.CONSUMERPROTOCOLSUBSCRIPTION_SCHEMAS[0].compile().build(
        cp.ConsumerProtocolSubscription(topics=["x"], user_data=None)
    )
    assert decode_subscription("m", v0).topics == ("x",)


def test_assignment_round_trip() -> None:
    tps = {TP("a", 0), TP("b", 3)}
    assert decode_assignment(encode_assignment(tps)) == tps
    assert decode_assignment(b"") == set()
    from trafka.codec import DecodeError

    with pytest.raises(DecodeError):
        decode_assignment(b"\x00")


# -- the sticky assignors ------------------------------------------------------------------
#
# Written from Java's StickyAssignor class javadoc (its balance and stickiness goals
# and its two examples, which KIP-54 "Sticky Partition Assignment Strategy" gives as
# well) and from the claim rules AbstractStickyAssignor states (a partition claimed by
# several members goes to the highest generation). A member's history travels as it
# does on the wire: "sticky" members in their user data, "cooperative-sticky" members
# in their owned partitions and generation, each through encode/decode_subscription.

Plan = dict[str, list[TP]]


def sticky_sub(
    name: str,
    member: str,
    topics: tuple[str, ...],
    held: list[TP] | None = None,
    generation: int = -1,
) -> MemberSubscription:
    """A member's subscription as ``name`` members send it, decoded as the leader does."""
    if name == "sticky":
        data = encode_subscription(
            topics, (), user_data=subscription_user_data("sticky", held, generation)
        )
    else:
        data = encode_subscription(
            topics,
            held or (),
            generation=generation,
            user_data=subscription_user_data(name, held, generation),
        )
    return decode_subscription(member, data)


def rebalance(
    name: str,
    partitions: dict[str, int],
    subscriptions: dict[str, tuple[str, ...]],
    before: Plan | None = None,
    generation: int = 1,
) -> Plan:
    """The assignment after a rebalance where every member reports what it held in
    ``before`` (at ``generation``)."""
    before = before or {}
    members = {
        m: sticky_sub(name, m, topics, before.get(m), generation if m in before else -1)
        for m, topics in subscriptions.items()
    }
    return assign(name, partitions, members)


def check_valid(plan: Plan, partitions: dict[str, int], subs: dict[str, tuple[str, ...]]) -> None:
    """Each partition of a subscribed topic goes to exactly one of its subscribers."""
    flat = [tp for tps in plan.values() for tp in tps]
    assert len(flat) == len(set(flat))
    wanted = {t for ts in subs.values() for t in ts}
    assert set(flat) == {TP(t, p) for t in wanted for p in range(partitions.get(t, 0))}
    for m, tps in plan.items():
        assert {tp.topic for tp in tps} <= set(subs[m])


def check_balanced(plan: Plan, subs: dict[str, tuple[str, ...]]) -> None:
    """The javadoc's balance: counts differ by at most one, or a member with two or
    more fewer partitions than another could not take any of that member's."""
    for a, tps in plan.items():
        for b, theirs in plan.items():
            if len(tps) >= len(theirs) + 2:
                assert not {tp.topic for tp in tps} & set(subs[b]), (a, b, plan)


def tps(spec: str) -> list[TP]:
    """``"t0p0 t1p1"`` -> TopicPartitions, in the javadoc's notation."""
    out = []
    for item in spec.split():
        topic, partition = item.split("p")
        out.append(TP(topic, int(partition)))
    return out


def test_sticky_javadoc_example_1_fresh_then_a_member_leaves() -> None:
    """StickyAssignor javadoc, Example 1 (also KIP-54): C0, C1, C2 subscribe to t0-t3,
    two partitions each. Fresh, sticky gives what round robin gives; when C1 is
    removed, the sticky assignor "preserv[es] all the previous assignments" and splits
    C1's three partitions (the javadoc lists one such split; any balanced one is it)."""
    parts = {t: 2 for t in ("t0", "t1", "t2", "t3")}
    subs = {c: tuple(parts) for c in ("C0", "C1", "C2")}
    first = rebalance("sticky", parts, subs)
    assert first == {
        "C0": tps("t0p0 t1p1 t3p0"),
        "C1": tps("t0p1 t2p0 t3p1"),
        "C2": tps("t1p0 t2p1"),
    }
    assert first == assign("roundrobin", parts, members("C0", "C1", "C2", topics=tuple(parts)))
    del subs["C1"]
    second = rebalance("sticky", parts, subs, {m: first[m] for m in subs}, generation=1)
    check_valid(second, parts, subs)
    assert [len(v) for v in second.values()] == [4, 4]
    assert set(second["C0"]) >= set(first["C0"]) and set(second["C2"]) >= set(first["C2"])


def test_sticky_javadoc_example_2_uneven_subscriptions() -> None:
    """StickyAssignor javadoc, Example 2 (also KIP-54): t0, t1, t2 with 1, 2 and 3
    partitions; C0 subscribes to t0, C1 to t0 and t1, C2 to all three. Sticky gives
    C0 [t0p0], C1 [t1p0, t1p1], C2 [t2p0, t2p1, t2p2] (round robin leaves C2 with four);
    when C0 is removed, sticky keeps the other five where they were and t0p0 goes to
    C1: C1 [t1p0, t1p1, t0p0], C2 unchanged."""
    parts = {"t0": 1, "t1": 2, "t2": 3}
    subs = {"C0": ("t0",), "C1": ("t0", "t1"), "C2": ("t0", "t1", "t2")}
    first = rebalance("sticky", parts, subs)
    assert first == {"C0": tps("t0p0"), "C1": tps("t1p0 t1p1"), "C2": tps("t2p0 t2p1 t2p2")}
    ms = {m: MemberSubscription(m, ts) for m, ts in subs.items()}
    assert sorted(len(v) for v in assign("roundrobin", parts, ms).values()) == [1, 1, 4]
    del subs["C0"]
    second = rebalance("sticky", parts, subs, {m: first[m] for m in subs})
    assert second == {"C1": tps("t0p0 t1p0 t1p1"), "C2": tps("t2p0 t2p1 t2p2")}


def test_sticky_issue_45_survivors_keep_their_partitions() -> None:
    """Issue #45 item 5: three members share six partitions and one leaves; the two
    left had {2, 5} and {0, 3} and must keep them (Java's StickyAssignor keeps every
    partition a surviving member owned, as far as balance allows)."""
    parts = {"t": 6}
    subs = {m: ("t",) for m in ("m0", "m1")}
    before = {"m0": [TP("t", 2), TP("t", 5)], "m1": [TP("t", 0), TP("t", 3)]}
    after = rebalance("sticky", parts, subs, before, generation=4)
    check_valid(after, parts, subs)
    assert [len(v) for v in after.values()] == [3, 3]
    assert set(after["m0"]) >= set(before["m0"]) and set(after["m1"]) >= set(before["m1"])


def _min_moves(before: Plan, members_after: list[str], total: int) -> int:
    """The fewest partitions that must leave their owner (equal subscriptions): the
    larger quotas go to the members that held the most."""
    floor, extra = divmod(total, len(members_after))
    held = sorted((len(before.get(m, [])) for m in members_after), reverse=True)
    kept = 0
    for n in held:
        cap = floor
        if extra and n > floor:
            cap, extra = floor + 1, extra - 1
        kept += min(n, cap)
    return sum(len(before.get(m, [])) for m in members_after) - kept


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=6),
    joiners=st.integers(min_value=0, max_value=4),
    leavers=st.integers(min_value=0, max_value=5),
    parts=st.integers(min_value=0, max_value=25),
    grow=st.integers(min_value=0, max_value=5),
    name=st.sampled_from(["sticky", "cooperative-sticky"]),
)
def test_sticky_equal_subscriptions_move_the_fewest_partitions(
    n: int, joiners: int, leavers: int, parts: int, grow: int, name: str
) -> None:
    """StickyAssignor javadoc: the assignment is as balanced as possible (with equal
    subscriptions counts differ by at most one) and, balance first, "topic partitions
    stay with their previously assigned consumers as much as possible". From a
    balanced assignment, members join, members leave (survivors keep everything:
    Example 1) and the topic may grow (the new partitions are spread): exactly the
    unavoidable partitions move."""
    old = [f"m{i}" for i in range(n)]
    first = rebalance("sticky", {"t": parts}, {m: ("t",) for m in old})
    gone = set(old[: min(leavers, n - 1)])
    now = [m for m in old if m not in gone] + [f"new{i}" for i in range(joiners)]
    subs = {m: ("t",) for m in now}
    total = parts + grow
    before = {m: first[m] for m in old if m not in gone}
    after = rebalance("sticky", {"t": total}, subs, before, generation=5)
    check_valid(after, {"t": total}, subs)
    sizes = [len(v) for v in after.values()]
    assert max(sizes) - min(sizes) <= 1
    moved = sum(len(set(held) - set(after[m])) for m, held in before.items())
    assert moved == _min_moves(before, now, total)
    if not joiners:
        assert all(set(after[m]) >= set(held) for m, held in before.items())


def test_sticky_member_joins_takes_only_what_balance_needs() -> None:
    """A member joins a balanced group (javadoc: stickiness second to balance): each
    old member gives up only its excess, which all goes to the new member."""
    subs = {m: ("t", "u") for m in ("a", "b")}
    parts = {"t": 5, "u": 4}
    first = rebalance("sticky", parts, subs)
    subs["c"] = ("t", "u")
    second = rebalance("sticky", parts, subs, first, generation=2)
    check_valid(second, parts, subs)
    assert sorted(len(v) for v in second.values()) == [3, 3, 3]
    assert set(second["a"]) <= set(first["a"]) and set(second["b"]) <= set(first["b"])


def test_sticky_partitions_added_and_topic_deleted() -> None:
    """Topic changes: partitions added go to whoever balance favours while the old
    ones stay; a deleted topic's claims are dropped and the rest stay put."""
    subs = {m: ("t", "u") for m in ("a", "b")}
    first = {"a": tps("tp1 tp2 up1"), "b": tps("tp0 tp3 up0")}  # not what a fresh run gives
    grown = rebalance("sticky", {"t": 6, "u": 2}, subs, first, generation=2)
    check_valid(grown, {"t": 6, "u": 2}, subs)
    assert [len(v) for v in grown.values()] == [4, 4]
    assert all(set(grown[m]) >= set(first[m]) for m in subs)
    # u is deleted: it has no partitions any more (the leader's metadata lacks it).
    gone = rebalance("sticky", {"t": 6}, subs, grown, generation=3)
    check_valid(gone, {"t": 6}, subs)
    assert [len(v) for v in gone.values()] == [3, 3]
    for m in subs:
        kept = [tp for tp in grown[m] if tp.topic == "t"]
        # each kept all its t partitions that balance allowed (at most 3)
        assert len(set(gone[m]) & set(kept)) == min(len(kept), 3)


def test_sticky_unsubscribed_topic_claims_dropped() -> None:
    """A member that no longer subscribes to a topic cannot keep its partitions:
    they go to a subscriber, the member keeps its other partitions."""
    subs = {m: ("t", "u") for m in ("a", "b")}
    parts = {"t": 4, "u": 2}
    first = {"a": tps("tp1 tp3 up0"), "b": tps("tp0 tp2 up1")}
    subs["a"] = ("t",)
    second = rebalance("sticky", parts, subs, first, generation=2)
    check_valid(second, parts, subs)
    check_balanced(second, subs)
    assert [len(v) for v in second.values()] == [3, 3]
    assert set(second["a"]) >= set(tps("tp1 tp3"))  # u0 went to b, the only subscriber
    assert set(second["b"]) >= set(tps("up0 up1"))


@settings(max_examples=60, deadline=None)
@given(
    parts=st.dictionaries(
        st.sampled_from(["t0", "t1", "t2", "t3"]), st.integers(min_value=1, max_value=8)
    ),
    subs=st.lists(
        st.sets(st.sampled_from(["t0", "t1", "t2", "t3"]), min_size=1), min_size=1, max_size=5
    ),
    leaver=st.integers(min_value=0, max_value=4),
)
def test_sticky_uneven_subscriptions_valid_and_balanced(
    parts: dict[str, int], subs: list[set[str]], leaver: int
) -> None:
    """KIP-54's uneven case: members subscribe to different topics. Every assignment,
    fresh and after a member leaves, is valid and balanced as the javadoc defines it,
    and a survivor loses a partition only if it held more than a member that could
    take it... (checked as: balance would otherwise be violated)."""
    sub = {f"c{i}": tuple(sorted(s)) for i, s in enumerate(subs)}
    first = rebalance("sticky", parts, sub)
    check_valid(first, parts, sub)
    check_balanced(first, sub)
    gone = f"c{leaver}"
    if gone in sub and len(sub) > 1:
        del sub[gone]
        second = rebalance("sticky", parts, sub, {m: first[m] for m in sub}, generation=2)
        check_valid(second, parts, sub)
        check_balanced(second, sub)


def test_generation_decides_conflicting_claims() -> None:
    """AbstractStickyAssignor: a partition claimed by two members goes to the one
    with the higher generation; a member with a stale generation keeps its other
    claims only as balance allows."""
    for name in ("sticky", "cooperative-sticky"):
        topics = ("t", "u")
        current = tps("tp1 tp2 up0")
        ms = {
            "a": sticky_sub(name, "a", topics, current, 10),
            "b": sticky_sub(name, "b", topics, current, 9),
        }
        out = assign(name, {"t": 3, "u": 3}, ms)
        assert out["a"] == sorted(current)
        assert out["b"] == tps("tp0 up1 up2")


def test_generation_decides_with_uneven_subscriptions() -> None:
    """The same rule in the general (uneven subscriptions) case."""
    ms = {
        "a": sticky_sub("sticky", "a", ("t",), tps("tp2 tp3"), 3),
        "b": sticky_sub("sticky", "b", ("t", "u"), tps("tp2 tp3 up0"), 2),
    }
    out = assign("sticky", {"t": 4, "u": 1}, ms)
    check_valid(out, {"t": 4, "u": 1}, {"a": ("t",), "b": ("t", "u")})
    assert set(out["a"]) >= set(tps("tp2 tp3")) and TP("u", 0) in out["b"]


def test_same_generation_double_claim_is_given_afresh() -> None:
    """AbstractStickyAssignor: two members of the same generation claiming one
    partition is invalid input; neither keeps it on that claim. a claims t0 and t1,
    b claims t0 and t2, c nothing: t0 goes to c for balance. cooperative-sticky holds
    it back until both claimants have revoked it (KIP-429)."""
    for name in ("sticky", "cooperative-sticky"):
        ms = {
            "a": sticky_sub(name, "a", ("t",), tps("tp0 tp1"), 5),
            "b": sticky_sub(name, "b", ("t",), tps("tp0 tp2"), 5),
            "c": sticky_sub(name, "c", ("t",), [], 5),
        }
        out = assign(name, {"t": 3}, ms)
        assert out["a"] == tps("tp1") and out["b"] == tps("tp2")
        assert out["c"] == (tps("tp0") if name == "sticky" else [])


def test_cooperative_sticky_reads_the_generation_from_user_data() -> None:
    """CooperativeStickyAssignor: a subscription below version 2 has no generation
    field; the generation then comes from the assignor's user data."""
    newer = encode_subscription(("t",), tps("tp0"), generation=6)
    old = encode_subscription(
        ("t",), tps("tp0"), user_data=subscription_user_data("cooperative-sticky", None, 7)
    )
    ms = {"a": decode_subscription("a", newer), "b": decode_subscription("b", old)}
    assert ms["b"].generation == -1
    out = assign("cooperative-sticky", {"t": 2}, ms)
    assert out == {"a": tps("tp1"), "b": tps("tp0")}


def test_sticky_user_data_wins_over_owned_partitions() -> None:
    """StickyAssignor always reads the previous assignment from its user data (an
    eager member's owned partitions are empty); the subscription's owned partitions
    and generation only stand in when there is no user data."""
    with_data = encode_subscription(
        ("t",),
        tps("tp0"),
        generation=9,
        user_data=subscription_user_data("sticky", tps("tp1"), 9),
    )
    without = encode_subscription(("t",), tps("tp2"), generation=9)
    ms = {"a": decode_subscription("a", with_data), "b": decode_subscription("b", without)}
    out = assign("sticky", {"t": 4}, ms)
    assert TP("t", 1) in out["a"] and TP("t", 2) in out["b"]
