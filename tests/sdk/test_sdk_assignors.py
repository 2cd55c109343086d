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
