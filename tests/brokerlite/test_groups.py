"""GroupCoordinator: the classic group protocol, driven in memory with a fake clock.

Every response is encoded and decoded by the codec at the request's version, so
the tests also prove each response is valid on the wire for that version.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest

from trafka.brokerlite.groups.coordinator import GroupCoordinator, GroupState
from trafka.brokerlite.groups.offsets import OffsetStore
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k08_offset_commit as oc
from trafka.codec.messages import k09_offset_fetch as of
from trafka.codec.messages import k11_join_group as jg
from trafka.codec.messages import k12_heartbeat as hb
from trafka.codec.messages import k13_leave_group as lg
from trafka.codec.messages import k14_sync_group as sg
from trafka.codec.messages import k15_describe_groups as dg
from trafka.codec.messages import k16_list_groups as lsg
from trafka.codec.messages import k42_delete_groups as dlg
from trafka.codec.protocol import decode_response_body, encode_response_body

JOIN, SYNC = 11, 14
SESSION = 10_000
REBALANCE = 30_000
GROUP = "g"


def wire(key: int, version: int, body: Any) -> Any:
    """What a client of ``version`` receives."""
    return decode_response_body(key, version, encode_response_body(key, version, body))


class Harness:
    """A coordinator, a fake clock and a record of parked and answered requests."""

    def __init__(self, tmp_path: Path, *, delay: int = 0, **kw: Any) -> None:
        self.path = tmp_path / "offsets.journal"
        self.store = OffsetStore(self.path, fsync=False)
        self.now = 1_000_000
        self.co = GroupCoordinator(
            self.store, initial_rebalance_delay_ms=delay, now_ms=self.now, **kw
        )
        self._tokens = itertools.count()
        self.requests: dict[Hashable, tuple[int, int]] = {}
        self.answers: dict[Hashable, Any] = {}

    def collect(self, pairs: list[tuple[Hashable, Any]]) -> None:
        for token, response in pairs:
            assert token in self.requests, f"response for unknown token {token}"
            assert token not in self.answers, f"token {token} answered twice"
            key, version = self.requests[token]
            self.answers[token] = wire(key, version, response)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.collect(self.co.tick(self.now))

    def join(self, c: Consumer) -> Hashable:
        token = ("join", next(self._tokens))
        self.requests[token] = (JOIN, c.version)
        req = jg.JoinGroupRequest(
            group_id=c.group,
            session_timeout_ms=c.session,
            rebalance_timeout_ms=c.rebalance,
            member_id=c.member_id,
            group_instance_id=c.instance,
            protocol_type=c.protocol_type,
            protocols=[
                jg.JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m)
                for n, m in c.protocols
            ],
        )
        self.collect(
            self.co.join_group(
                token, req, c.version, self.now, client_id=c.client_id, client_host="/127.0.0.1"
            )
        )
        return token

    def sync(self, c: Consumer, assignments: dict[str, bytes] | None = None) -> Hashable:
        token = ("sync", next(self._tokens))
        version = min(c.version, 5)
        self.requests[token] = (SYNC, version)
        req = sg.SyncGroupRequest(
            group_id=c.group,
            generation_id=c.generation,
            member_id=c.member_id,
            group_instance_id=c.instance,
            protocol_type=c.protocol_type if version >= 5 else None,
            protocol_name=c.protocol_name if version >= 5 else None,
            assignments=[
                sg.SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
        )
        self.collect(self.co.sync_group(token, req, version, self.now))
        return token

    def heartbeat(self, c: Consumer, *, generation: int | None = None, version: int = 4) -> int:
        req = hb.HeartbeatRequest(
            group_id=c.group,
            generation_id=c.generation if generation is None else generation,
            member_id=c.member_id,
            group_instance_id=c.instance if version >= 3 else None,
        )
        return int(wire(12, version, self.co.heartbeat(req, version, self.now)).error_code)

    def leave(self, *members: Consumer, version: int = 4) -> Any:
        if version >= 3:
            req = lg.LeaveGroupRequest(
                group_id=members[0].group,
                members=[
                    lg.LeaveGroupRequest.MemberIdentity(
                        member_id=c.member_id, group_instance_id=c.instance
                    )
                    for c in members
                ],
            )
        else:
            req = lg.LeaveGroupRequest(group_id=members[0].group, member_id=members[0].member_id)
        response, released = self.co.leave_group(req, version, self.now)
        self.collect(released)
        return wire(13, version, response)

    def commit(
        self,
        group: str,
        offsets: dict[tuple[str, int], int],
        *,
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
        version: int = 8,
        metadata: str | None = "",
        leader_epoch: int = -1,
    ) -> dict[tuple[str, int], int]:
        topics: dict[str, list[oc.OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
        for (t, p), o in offsets.items():
            topics.setdefault(t, []).append(
                oc.OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=p,
                    committed_offset=o,
                    committed_leader_epoch=leader_epoch if version >= 6 else -1,
                    committed_metadata=metadata,
                )
            )
        req = oc.OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=instance,
            topics=[
                oc.OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in topics.items()
            ],
        )
        resp = wire(8, version, self.co.offset_commit(req, version, self.now))
        return {
            (t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions
        }

    def fetch(
        self, group: str, topics: dict[str, list[int]] | None, *, version: int = 7
    ) -> dict[tuple[str, int], tuple[int, int, str | None]]:
        req = of.OffsetFetchRequest(
            group_id=group,
            topics=None
            if topics is None
            else [
                of.OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                for t, ps in topics.items()
            ],
        )
        resp = wire(9, version, self.co.offset_fetch(req, version, self.now))
        assert resp.error_code == 0
        return {
            (t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata)
            for t in resp.topics
            for p in t.partitions
        }

    def describe(self, *groups: str, version: int = 5) -> list[Any]:
        req = dg.DescribeGroupsRequest(
            groups=list(groups), include_authorized_operations=version >= 3
        )
        return list(wire(15, version, self.co.describe_groups(req, version)).groups)

    def state(self, group: str = GROUP) -> str:
        return str(self.describe(group)[0].group_state)


class Consumer:
    """The client side of one member: what it knows and sends."""

    def __init__(
        self,
        client_id: str,
        *,
        group: str = GROUP,
        version: int = 7,
        instance: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        protocol_type: str = "consumer",
        session: int = SESSION,
        rebalance: int = REBALANCE,
    ) -> None:
        self.client_id = client_id
        self.group = group
        self.version = version
        self.instance = instance
        self.protocols = protocols or [("range", b"sub-" + client_id.encode())]
        self.protocol_type = protocol_type
        self.session = session
        self.rebalance = rebalance
        self.member_id = ""
        self.generation = -1
        self.protocol_name: str | None = None
        self.leader = ""
        self.members: list[Any] = []
        self.assignment = b""

    def on_join(self, resp: Any) -> None:
        if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id
        elif resp.error_code == ErrorCode.NONE:
            self.member_id = resp.member_id
            self.generation = resp.generation_id
            self.protocol_name = resp.protocol_name
            self.leader = resp.leader
            self.members = list(resp.members)

    @property
    def is_leader(self) -> bool:
        return self.leader == self.member_id


def joined(h: Harness, c: Consumer, token: Hashable) -> Any:
    resp = h.answers[token]
    c.on_join(resp)
    return resp


def join_all(h: Harness, *consumers: Consumer) -> None:
    """Join every consumer (with the MEMBER_ID_REQUIRED round trip where the
    version needs it) and let the join phase complete."""
    tokens = []
    for c in consumers:
        t = h.join(c)
        if c.version >= 4 and c.instance is None and not c.member_id:
            assert h.answers[t].error_code == ErrorCode.MEMBER_ID_REQUIRED
            joined(h, c, t)
            t = h.join(c)
        tokens.append(t)
    if not all(t in h.answers for t in tokens):
        h.advance(h.co.next_deadline() - h.now)  # type: ignore[operator]
    for c, t in zip(consumers, tokens, strict=True):
        assert joined(h, c, t).error_code == ErrorCode.NONE


def form_group(h: Harness, *consumers: Consumer) -> None:
    """Join every consumer and sync: a Stable group."""
    join_all(h, *consumers)
    sync_all(h, *consumers)


def sync_all(h: Harness, *consumers: Consumer) -> None:
    leader = next(c for c in consumers if c.is_leader)
    followers = [c for c in consumers if c is not leader]
    tokens = {c.member_id: h.sync(c) for c in followers}
    assert not any(t in h.answers for t in tokens.values())
    plan = {c.member_id: b"assign-" + c.client_id.encode() for c in consumers}
    tokens[leader.member_id] = h.sync(leader, plan)
    for c in consumers:
        resp = h.answers[tokens[c.member_id]]
        assert resp.error_code == ErrorCode.NONE
        c.assignment = resp.assignment


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


# --- joining -----------------------------------------------------------------------------------


def test_three_members_join_sync_and_heartbeat(tmp_path: Path) -> None:
    h = Harness(tmp_path, delay=3000)
    a, b, c = Consumer("a"), Consumer("b"), Consumer("c")
    tokens = []
    for consumer in (a, b, c):
        t = h.join(consumer)
        first = h.answers[t]
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert first.member_id.startswith(consumer.client_id + "-")
        assert first.generation_id == -1
        consumer.on_join(first)
        tokens.append(h.join(consumer))
    # Parked until the initial rebalance delay runs out.
    assert not any(t in h.answers for t in tokens)
    assert h.state() == "PreparingRebalance"
    assert h.co.next_deadline() == h.now + 3000
    h.advance(2999)
    assert not any(t in h.answers for t in tokens)
    # b and c arrived during the delay, so it is extended once more.
    h.advance(1)
    assert not any(t in h.answers for t in tokens)
    assert h.co.next_deadline() == h.now + 3000
    h.advance(3000)
    responses = [joined(h, consumer, t) for consumer, t in zip((a, b, c), tokens, strict=True)]
    assert {r.generation_id for r in responses} == {1}
    assert {r.leader for r in responses} == {a.member_id}
    assert {r.protocol_name for r in responses} == {"range"}
    assert {r.protocol_type for r in responses} == {"consumer"}
    assert sorted((m.member_id, m.metadata) for m in responses[0].members) == sorted(
        (x.member_id, x.protocols[0][1]) for x in (a, b, c)
    )
    assert responses[1].members == [] and responses[2].members == []
    assert h.state() == "CompletingRebalance"

    # Followers' SyncGroups wait for the leader's.
    tb, tc = h.sync(b), h.sync(c)
    assert tb not in h.answers and tc not in h.answers
    assert h.heartbeat(b) == ErrorCode.NONE  # allowed while completing the rebalance
    ta = h.sync(a, {a.member_id: b"A", b.member_id: b"B", c.member_id: b"C"})
    assert [h.answers[t].assignment for t in (ta, tb, tc)] == [b"A", b"B", b"C"]
    assert all(h.answers[t].protocol_name == "range" for t in (ta, tb, tc))
    assert h.state() == "Stable"
    # A late SyncGroup in Stable gets the assignment straight away.
    assert h.answers[h.sync(c)].assignment == b"C"
    for consumer in (a, b, c):
        assert h.heartbeat(consumer) == ErrorCode.NONE


def test_initial_rebalance_delay_extends_up_to_the_rebalance_timeout(tmp_path: Path) -> None:
    h = Harness(tmp_path, delay=3000)
    start = h.now
    consumers = [Consumer(f"m{i}", version=3, rebalance=10_000) for i in range(4)]
    tokens = [h.join(consumers[0])]
    # A new member arrives just before each expiry, so the delay keeps extending.
    for i, at in ((1, 2000), (2, 5000), (3, 8000)):
        h.advance(start + at - h.now)
        tokens.append(h.join(consumers[i]))
    h.advance(start + 9999 - h.now)
    assert not any(t in h.answers for t in tokens)
    # 3000 + 3000 + 3000 + 1000: the rebalance timeout caps the total wait.
    assert h.co.next_deadline() == start + 10_000
    h.advance(1)
    assert [h.answers[t].generation_id for t in tokens] == [1, 1, 1, 1]


def test_initial_rebalance_completes_after_one_delay_without_new_members(tmp_path: Path) -> None:
    h = Harness(tmp_path, delay=3000)
    a = Consumer("a", version=3)
    t = h.join(a)
    h.advance(3000)
    assert h.answers[t].error_code == ErrorCode.NONE
    assert h.answers[t].member_id.startswith("a-")


def test_old_versions_join_without_member_id_round_trip(h: Harness) -> None:
    a = Consumer("a", version=0, session=SESSION)
    t = h.join(a)
    # v0 has no rebalance timeout: the session timeout stands in for it.
    assert h.co.group(GROUP).rebalance_timeout_ms() == SESSION  # type: ignore[union-attr]
    h.advance(0)
    resp = joined(h, a, t)
    assert resp.error_code == ErrorCode.NONE and resp.protocol_name == "range"
    assert resp.generation_id == 1 and resp.leader == a.member_id


def test_join_errors(h: Harness) -> None:
    t = h.join(Consumer("a", session=1000))
    assert h.answers[t].error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    t = h.join(Consumer("a", session=1_800_001))
    assert h.answers[t].error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    t = h.join(Consumer("a", group=""))
    assert h.answers[t].error_code == ErrorCode.INVALID_GROUP_ID
    t = h.join(Consumer("a", protocols=[("x", b"")], protocol_type=""))
    assert h.answers[t].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    ghost = Consumer("a", group="other")
    ghost.member_id = "made-up"
    t = h.join(ghost)
    assert h.answers[t].error_code == ErrorCode.UNKNOWN_MEMBER_ID

    a = Consumer("a", protocols=[("range", b"1"), ("roundrobin", b"2")])
    form_group(h, a)
    # No protocol in common with the group, or another protocol type: rejected.
    t = h.join(Consumer("b", protocols=[("sticky", b"")]))
    assert h.answers[t].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    t = h.join(Consumer("b", protocol_type="connect", protocols=[("range", b"")]))
    assert h.answers[t].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.state() == "Stable"


def test_protocol_selection_by_vote(h: Harness) -> None:
    a = Consumer("a", version=3, protocols=[("roundrobin", b"a"), ("range", b"a")])
    b = Consumer("b", version=3, protocols=[("range", b"b"), ("roundrobin", b"b")])
    c = Consumer("c", version=3, protocols=[("range", b"c"), ("sticky", b"c"), ("roundrobin", b"")])
    form_group(h, a, b, c)
    assert a.protocol_name == "range"  # two votes to one
    assert {m.metadata for m in a.members} == {b"a", b"b", b"c"}


def test_follower_rejoin_without_changes_keeps_the_generation(h: Harness) -> None:
    a, b = Consumer("a"), Consumer("b")
    form_group(h, a, b)
    follower = b if a.is_leader else a
    t = h.join(follower)
    resp = h.answers[t]
    assert resp.error_code == ErrorCode.NONE and resp.generation_id == 1 and resp.members == []
    assert h.state() == "Stable"


def test_leader_rejoin_forces_a_rebalance(h: Harness) -> None:
    a, b = Consumer("a"), Consumer("b")
    form_group(h, a, b)
    leader, follower = (a, b) if a.is_leader else (b, a)
    tl = h.join(leader)
    assert tl not in h.answers and h.state() == "PreparingRebalance"
    assert h.heartbeat(follower) == ErrorCode.REBALANCE_IN_PROGRESS
    tf = h.join(follower)
    # Everyone has rejoined: the join phase ends at once, not at the timeout.
    assert joined(h, leader, tl).generation_id == 2
    assert joined(h, follower, tf).generation_id == 2


def test_changed_metadata_rejoin_rebalances(h: Harness) -> None:
    a, b = Consumer("a"), Consumer("b")
    form_group(h, a, b)
    follower = b if a.is_leader else a
    follower.protocols = [("range", b"new subscription")]
    t = h.join(follower)
    assert t not in h.answers and h.state() == "PreparingRebalance"


def test_duplicate_join_displaces_the_older_request(h: Harness) -> None:
    a, b = Consumer("a"), Consumer("b")
    form_group(h, a, b)
    first = h.join(a)
    second = h.join(a)
    assert h.answers[first].error_code == ErrorCode.REBALANCE_IN_PROGRESS
    tb = h.join(b)
    assert h.answers[second].generation_id == 2 and h.answers[tb].generation_id == 2


# --- leaving and failing -------------------------------------------------------------------------


def test_member_leave_triggers_rebalance_without_it(h: Harness) -> None:
    a, b, c = Consumer("a"), Consumer("b"), Consumer("c")
    form_group(h, a, b, c)
    resp = h.leave(c)
    assert resp.error_code == 0
    assert [(m.member_id, m.error_code) for m in resp.members] == [(c.member_id, 0)]
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(a) == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.heartbeat(c) == ErrorCode.UNKNOWN_MEMBER_ID
    ta, tb = h.join(a), h.join(b)
    ra, rb = joined(h, a, ta), joined(h, b, tb)
    assert ra.generation_id == rb.generation_id == 2
    leader = a if a.is_leader else b
    assert sorted(m.member_id for m in leader.members) == sorted([a.member_id, b.member_id])
    sync_all(h, a, b)
    assert h.state() == "Stable"


def test_leave_of_the_last_member_empties_the_group(h: Harness) -> None:
    a = Consumer("a")
    form_group(h, a)
    h.leave(a, version=1)
    assert h.state() == "Empty"
    assert h.co.group(GROUP).generation_id == 2  # type: ignore[union-attr]


def test_leave_versions_and_errors(h: Harness) -> None:
    a, b = Consumer("a"), Consumer("b")
    form_group(h, a, b)
    stranger = Consumer("x")
    stranger.member_id = "x-unknown"
    # v0-2: one member, its error at the top level.
    assert h.leave(stranger, version=0).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    nogroup = Consumer("x", group="nope")
    nogroup.member_id = "x-1"
    resp = h.leave(nogroup, version=3)
    assert resp.error_code == 0 and resp.members[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # Batch: one good, one unknown; the good one leaves.
    resp = h.leave(a, stranger, version=5)
    assert [m.error_code for m in resp.members] == [0, ErrorCode.UNKNOWN_MEMBER_ID]
    assert h.state() == "PreparingRebalance"


def test_crashed_member_is_removed_after_its_session_timeout(h: Harness) -> None:
    a, b, c = Consumer("a"), Consumer("b"), Consumer("c")
    form_group(h, a, b, c)
    for _ in range(3):
        h.advance(3000)
        assert h.heartbeat(a) == h.heartbeat(b) == ErrorCode.NONE
    assert h.state() == "Stable"
    # c never heartbeated: its session (10 s since the sync) lapses now.
    h.advance(SESSION - 9000)
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(c) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat(a) == ErrorCode.REBALANCE_IN_PROGRESS
    ta, tb = h.join(a), h.join(b)
    assert joined(h, a, ta).generation_id == 2
    assert joined(h, b, tb).generation_id == 2
    leader = a if a.is_leader else b
    assert {m.member_id for m in leader.members} == {a.member_id, b.member_id}


def test_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(h: Harness) -> None:
    a, b, c = Consumer("a"), Consumer("b"), Consumer("c")
    form_group(h, a, b, c)
    h.leave(c)
    ta = h.join(a)
    # b keeps heartbeating but never rejoins.
    for _ in range(REBALANCE // 5000 - 1):
        h.advance(5000)
        assert h.heartbeat(b) == ErrorCode.REBALANCE_IN_PROGRESS
    assert ta not in h.answers
    h.advance(5000)
    resp = joined(h, a, ta)
    assert resp.generation_id == 2 and [m.member_id for m in resp.members] == [a.member_id]
    assert h.heartbeat(b) == ErrorCode.UNKNOWN_MEMBER_ID


def test_waiting_for_sync_is_not_a_session_failure(h: Harness) -> None:
    a, b = Consumer("a"), Consumer("b")
    join_all(h, a, b)
    leader, follower = (a, b) if a.is_leader else (b, a)
    tf = h.sync(follower)
    # The leader (heartbeating) takes longer than the follower's session to assign.
    for _ in range(3):
        h.advance(5000)
        assert h.heartbeat(leader) == ErrorCode.NONE
    assert tf not in h.answers and h.state() == "CompletingRebalance"
    h.sync(leader, {leader.member_id: b"L", follower.member_id: b"F"})
    assert h.answers[tf].assignment == b"F"
    # The follower's session restarts when its SyncGroup is answered.
    h.advance(SESSION - 1)
    assert h.heartbeat(follower) == ErrorCode.NONE


def test_members_that_never_sync_are_removed(h: Harness) -> None:
    a, b = Consumer("a"), Consumer("b")
    join_all(h, a, b)
    leader, follower = (a, b) if a.is_leader else (b, a)
    h.sync(leader, {leader.member_id: b"L", follower.member_id: b"F"})
    assert h.state() == "Stable"
    for _ in range(REBALANCE // 5000):
        h.advance(5000)
        h.heartbeat(leader)
        h.heartbeat(follower)
    # The follower heartbeated but never synced: removed at the rebalance timeout.
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(follower) == ErrorCode.UNKNOWN_MEMBER_ID


def test_new_member_joining_completing_group_cancels_parked_syncs(h: Harness) -> None:
    a, b = Consumer("a"), Consumer("b")
    join_all(h, a, b)
    follower = b if a.is_leader else a
    tf = h.sync(follower)
    c = Consumer("c")
    joined(h, c, h.join(c))
    h.join(c)
    assert h.answers[tf].error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.state() == "PreparingRebalance"


def test_unused_member_id_from_member_id_required_expires(h: Harness) -> None:
    a, b = Consumer("a"), Consumer("b")
    form_group(h, a, b)
    c = Consumer("c")
    joined(h, c, h.join(c))  # MEMBER_ID_REQUIRED; c never comes back
    ta, tb = h.join(a), h.join(b)
    # The join phase waits for the outstanding id...
    assert ta not in h.answers and tb not in h.answers
    h.advance(SESSION)
    # ...until it expires with c's session timeout.
    assert joined(h, a, ta).generation_id == 2 and joined(h, b, tb).generation_id == 2


def test_closed_connection_drops_a_parked_join(h: Harness) -> None:
    a, b, c = Consumer("a"), Consumer("b"), Consumer("c")
    form_group(h, a, b, c)
    follower = next(x for x in (a, b, c) if not x.is_leader)
    follower.protocols = [("range", b"changed")]
    tdead = h.join(follower)
    assert tdead not in h.answers and h.state() == "PreparingRebalance"
    # Its connection dies while the JoinGroup is parked.
    assert h.co.connection_closed([tdead, ("unrelated", 0)]) == []
    assert h.co.next_deadline() == 0
    h.advance(0)
    live = [x for x in (a, b, c) if x is not follower]
    tokens = [h.join(x) for x in live]
    # The rebalance completes with the live members only, at once.
    responses = [joined(h, x, t) for x, t in zip(live, tokens, strict=True)]
    assert {r.generation_id for r in responses} == {2}
    leader = next(x for x in live if x.is_leader)
    assert {m.member_id for m in leader.members} == {x.member_id for x in live}
    assert tdead not in h.answers


def test_rejoin_before_the_tick_keeps_a_member_whose_connection_closed(h: Harness) -> None:
    a, b = Consumer("a"), Consumer("b")
    form_group(h, a, b)
    follower = b if a.is_leader else a
    leader = a if a.is_leader else b
    follower.protocols = [("range", b"changed")]
    t1 = h.join(follower)
    h.co.connection_closed([t1])
    t2 = h.join(follower)  # the client reconnected and retried
    h.advance(0)
    tl = h.join(leader)
    assert {joined(h, follower, t2).generation_id, joined(h, leader, tl).generation_id} == {2}
    assert len(leader.members) == 2
    assert t1 not in h.answers


def test_closed_connection_of_a_parked_sync(h: Harness) -> None:
    a, b = Consumer("a"), Consumer("b")
    join_all(h, a, b)
    leader, follower = (a, b) if a.is_leader else (b, a)
    tf = h.sync(follower)
    h.collect(h.co.connection_closed([tf], now_ms=h.now))
    h.sync(leader, {leader.member_id: b"L", follower.member_id: b"F"})
    assert tf not in h.answers
    assert h.state() == "Stable"


# --- static membership -------------------------------------------------------------------------


def static_group(h: Harness, version: int = 7) -> tuple[Consumer, Consumer]:
    a = Consumer("a", instance="inst-a", version=version)
    b = Consumer("b", instance="inst-b", version=version)
    ta, tb = h.join(a), h.join(b)
    # Static members skip MEMBER_ID_REQUIRED.
    assert ta not in h.answers and tb not in h.answers
    h.advance(0)
    joined(h, a, ta), joined(h, b, tb)
    assert a.member_id.startswith("inst-a-")
    sync_all(h, a, b)
    return a, b


def test_static_member_restart_without_rebalance(h: Harness) -> None:
    a, b = static_group(h)
    follower = b if a.is_leader else a
    old_id, old_assignment = follower.member_id, follower.assignment
    restarted = Consumer(
        follower.client_id, instance=follower.instance, protocols=follower.protocols
    )
    t = h.join(restarted)
    resp = joined(h, restarted, t)
    assert resp.error_code == ErrorCode.NONE
    assert resp.generation_id == 1 and restarted.member_id != old_id
    assert h.state() == "Stable"
    assert h.answers[h.sync(restarted)].assignment == old_assignment
    # The old incarnation is fenced; without its instance id it is merely unknown.
    assert h.heartbeat(follower) == ErrorCode.FENCED_INSTANCE_ID
    assert h.heartbeat(follower, version=2) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat(restarted) == ErrorCode.NONE
    codes = h.commit(
        GROUP, {("t", 0): 5}, generation=1, member_id=old_id, instance=follower.instance
    )
    assert codes == {("t", 0): ErrorCode.FENCED_INSTANCE_ID}


@pytest.mark.parametrize("version", [7, 9])
def test_static_leader_restart(h: Harness, version: int) -> None:
    a, b = static_group(h, version=version)
    leader = a if a.is_leader else b
    restarted = Consumer(
        leader.client_id, instance=leader.instance, protocols=leader.protocols, version=version
    )
    resp = joined(h, restarted, h.join(restarted))
    assert resp.error_code == ErrorCode.NONE and h.state() == "Stable"
    if version >= 9:
        # KIP-814: told it leads, given the members, and told not to assign.
        assert resp.leader == restarted.member_id and resp.skip_assignment
        assert len(resp.members) == 2
    else:
        # Older clients are told the old leader id so they behave as followers.
        assert resp.leader == leader.member_id and resp.members == []


def test_static_member_restart_with_new_metadata_rebalances(h: Harness) -> None:
    _, b = static_group(h)
    restarted = Consumer(b.client_id, instance=b.instance, protocols=[("range", b"changed")])
    t = h.join(restarted)
    assert t not in h.answers and h.state() == "PreparingRebalance"


def test_static_member_that_misses_a_rebalance_is_kept(h: Harness) -> None:
    a, b = static_group(h)
    ta = h.join(a)
    assert ta not in h.answers
    for _ in range(REBALANCE // 5000 - 1):
        h.advance(5000)
        assert h.heartbeat(b) == ErrorCode.REBALANCE_IN_PROGRESS
    h.advance(5000)
    resp = joined(h, a, ta)
    # b did not rejoin in time but, being static, stays a member (and must rejoin).
    assert resp.generation_id == 2
    assert {m.member_id for m in resp.members} == {a.member_id, b.member_id}
    assert h.heartbeat(b) == ErrorCode.ILLEGAL_GENERATION
    assert h.co.group(GROUP).static_members.keys() == {"inst-a", "inst-b"}  # type: ignore[union-attr]


def test_admin_removal_by_instance_id(h: Harness) -> None:
    a, b = static_group(h)
    gone = Consumer("admin", instance=b.instance)
    resp = h.leave(gone)
    assert resp.members[0].error_code == 0
    assert h.heartbeat(b) == ErrorCode.UNKNOWN_MEMBER_ID
    impostor = Consumer("x", instance=a.instance)
    impostor.member_id = "x-wrong"
    assert h.leave(impostor).members[0].error_code == ErrorCode.FENCED_INSTANCE_ID


# --- fencing and offsets -------------------------------------------------------------------------


def test_generation_fencing_on_heartbeat_sync_and_commit(h: Harness) -> None:
    a, b = Consumer("a"), Consumer("b")
    form_group(h, a, b)
    assert h.heartbeat(a, generation=0) == ErrorCode.ILLEGAL_GENERATION
    stale = h.sync(a)
    h.answers.pop(stale)
    a.generation = 0
    assert h.answers[h.sync(a)].error_code == ErrorCode.ILLEGAL_GENERATION
    a.generation = 1
    ok = h.commit(GROUP, {("t", 0): 10}, generation=1, member_id=a.member_id)
    assert ok == {("t", 0): 0}
    assert h.commit(GROUP, {("t", 0): 11}, generation=0, member_id=a.member_id) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert h.commit(GROUP, {("t", 0): 11}, generation=1, member_id="nobody") == {
        ("t", 0): ErrorCode.UNKNOWN_MEMBER_ID
    }
    # A standalone commit into a group with members is refused.
    assert h.commit(GROUP, {("t", 0): 11}) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert h.fetch(GROUP, {"t": [0]}) == {("t", 0): (10, -1, "")}

    # During the join phase the old generation may still commit (cooperative clients do).
    ta = h.join(a)
    assert h.commit(GROUP, {("t", 0): 12}, generation=1, member_id=b.member_id) == {("t", 0): 0}
    tb = h.join(b)
    joined(h, a, ta), joined(h, b, tb)
    # Between JoinGroup and the assignment: a valid member must finish syncing first.
    assert h.commit(GROUP, {("t", 0): 13}, generation=2, member_id=a.member_id) == {
        ("t", 0): ErrorCode.REBALANCE_IN_PROGRESS
    }
    assert h.commit(GROUP, {("t", 0): 13}, generation=1, member_id=a.member_id) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert h.fetch(GROUP, {"t": [0]}) == {("t", 0): (12, -1, "")}


def test_commit_to_unknown_group(h: Harness) -> None:
    # Generation -1 and no member: a standalone consumer; the group is created Empty.
    assert h.commit("solo", {("t", 0): 3}, version=2) == {("t", 0): 0}
    assert h.state("solo") == "Empty"
    assert h.fetch("solo", {"t": [0, 1]}, version=1) == {
        ("t", 0): (3, -1, ""),
        ("t", 1): (-1, -1, ""),
    }
    # With a generation the group must exist.
    assert h.commit("ghost", {("t", 0): 3}, generation=4, member_id="m", version=8) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert h.commit("ghost", {("t", 0): 3}, generation=4, member_id="m", version=9) == {
        ("t", 0): ErrorCode.GROUP_ID_NOT_FOUND
    }
    assert h.state("ghost") == "Dead"


def test_commit_unknown_partition_metadata_and_epoch(tmp_path: Path) -> None:
    h = Harness(tmp_path, partition_exists=lambda t, p: t == "t" and p < 2)
    codes = h.commit(
        "g", {("t", 0): 5, ("t", 7): 1, ("nope", 0): 1}, metadata="hello", leader_epoch=4
    )
    assert codes == {
        ("t", 0): 0,
        ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert h.fetch("g", {"t": [0]}) == {("t", 0): (5, 4, "hello")}
    assert h.commit("g", {("t", 1): 5}, metadata="x" * 4097) == {
        ("t", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE
    }
    assert h.commit("g", {("t", 1): 6}, metadata=None) == {("t", 1): 0}
    # topics=null: every committed partition.
    assert h.fetch("g", None) == {("t", 0): (5, 4, "hello"), ("t", 1): (6, -1, "")}
    # Only unknown partitions: no group is created.
    assert h.commit("fresh", {("nope", 0): 1}) == {
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    }
    assert h.state("fresh") == "Dead"


def test_offset_fetch_multi_group_v8(h: Harness) -> None:
    h.commit("g1", {("t", 0): 1, ("u", 2): 2})
    h.commit("g2", {("t", 0): 3})
    req = of.OffsetFetchRequest(
        groups=[
            of.OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g1", topics=None),
            of.OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id="g2",
                topics=[
                    of.OffsetFetchRequest.OffsetFetchRequestTopics(
                        name="t", partition_indexes=[0, 1]
                    )
                ],
            ),
            of.OffsetFetchRequest.OffsetFetchRequestGroup(group_id="none", topics=None),
        ],
        require_stable=True,
    )
    resp = wire(9, 8, h.co.offset_fetch(req, 8, h.now))
    got = {
        g.group_id: {
            (t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions
        }
        for g in resp.groups
    }
    assert got == {"g1": {("t", 0): 1, ("u", 2): 2}, "g2": {("t", 0): 3, ("t", 1): -1}, "none": {}}
    assert all(g.error_code == 0 for g in resp.groups)


def test_commit_keeps_the_session_alive(h: Harness) -> None:
    a = Consumer("a")
    form_group(h, a)
    for _ in range(4):
        h.advance(SESSION // 2)
        assert h.commit(GROUP, {("t", 0): 1}, generation=1, member_id=a.member_id) == {("t", 0): 0}
    assert h.state() == "Stable"


def test_offsets_expire_for_empty_groups(tmp_path: Path) -> None:
    h = Harness(tmp_path, offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    h.commit("solo", {("t", 0): 1})
    h.advance(30_000)
    h.commit("solo", {("t", 1): 2})
    h.advance(30_000)
    # Standalone offsets expire one by one, counted from their own commit.
    assert h.fetch("solo", None) == {("t", 1): (2, -1, "")}
    h.advance(30_000)
    assert h.fetch("solo", None) == {}
    assert h.state("solo") == "Dead"


# --- admin ---------------------------------------------------------------------------------------


def test_describe_and_list(h: Harness) -> None:
    a, b = Consumer("a"), Consumer("b", instance="inst-b")
    form_group(h, a, b)
    h.commit("solo", {("t", 0): 1})
    stable, dead = h.describe(GROUP, "unknown")
    assert (stable.error_code, stable.group_state, stable.protocol_type, stable.protocol_data) == (
        0,
        "Stable",
        "consumer",
        "range",
    )
    by_id = {m.member_id: m for m in stable.members}
    assert by_id[b.member_id].group_instance_id == "inst-b"
    assert by_id[b.member_id].client_id == "b" and by_id[b.member_id].client_host == "/127.0.0.1"
    assert by_id[b.member_id].member_metadata == b"sub-b"
    assert by_id[b.member_id].member_assignment == b"assign-b"
    assert stable.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
    assert (dead.group_state, dead.members) == ("Dead", [])
    old = h.describe(GROUP, version=0)[0]
    assert old.authorized_operations == -(2**31)

    def listed(
        version: int, states: tuple[str, ...] = (), types: tuple[str, ...] = ()
    ) -> list[tuple[str, str, str]]:
        req = lsg.ListGroupsRequest(states_filter=list(states), types_filter=list(types))
        resp = wire(16, version, h.co.list_groups(req, version))
        assert resp.error_code == 0
        return [(g.group_id, g.protocol_type, g.group_state) for g in resp.groups]

    assert listed(5) == [(GROUP, "consumer", "Stable"), ("solo", "", "Empty")]
    assert listed(0) == [(GROUP, "consumer", ""), ("solo", "", "")]
    assert listed(4, ("empty",)) == [("solo", "", "Empty")]
    assert listed(4, ("Stable", "PreparingRebalance")) == [(GROUP, "consumer", "Stable")]
    assert listed(5, types=("Classic",)) == listed(5)
    assert listed(5, types=("consumer",)) == []

    # While rebalancing, members are listed without metadata or assignment.
    h.leave(b)
    (preparing,) = h.describe(GROUP)
    assert preparing.group_state == "PreparingRebalance" and preparing.protocol_data == ""
    assert [(m.member_metadata, m.member_assignment) for m in preparing.members] == [(b"", b"")]


def test_delete_groups(h: Harness) -> None:
    a = Consumer("a")
    form_group(h, a)
    h.commit(GROUP, {("t", 0): 7}, generation=1, member_id=a.member_id)
    h.commit("solo", {("t", 0): 1})

    def delete(*names: str, version: int = 2) -> list[tuple[str, int]]:
        req = dlg.DeleteGroupsRequest(groups_names=list(names))
        resp = wire(42, version, h.co.delete_groups(req, version))
        return [(r.group_id, r.error_code) for r in resp.results]

    assert delete(GROUP, "solo", "missing") == [
        (GROUP, ErrorCode.NON_EMPTY_GROUP),
        ("solo", 0),
        ("missing", ErrorCode.GROUP_ID_NOT_FOUND),
    ]
    assert h.state("solo") == "Dead" and h.fetch("solo", None) == {}
    h.leave(a)
    assert h.state() == "Empty"
    assert delete(GROUP, version=0) == [(GROUP, 0)]
    assert h.fetch(GROUP, {"t": [0]}) == {("t", 0): (-1, -1, "")}
    # Deleted for good: a restarted coordinator does not bring it back.
    h.store.close()
    with OffsetStore(h.path) as store:
        restarted = GroupCoordinator(store, now_ms=h.now)
        assert restarted.group_ids() == []


# --- restart -------------------------------------------------------------------------------------


def test_restart_resumes_the_stable_generation(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    a, b = Consumer("a"), Consumer("b")
    form_group(h, a, b)
    assert h.commit(GROUP, {("t", 0): 42}, generation=1, member_id=a.member_id, metadata="m") == {
        ("t", 0): 0
    }
    # Crash: the old store is never closed.
    h2 = Harness(tmp_path)
    h2.now = h.now + 1000
    assert h2.state() == "Stable"
    assert h2.fetch(GROUP, {"t": [0]}) == {("t", 0): (42, -1, "m")}
    assert h2.heartbeat(a) == ErrorCode.NONE
    assert h2.answers[h2.sync(b)].assignment == b.assignment
    assert h2.commit(GROUP, {("t", 0): 43}, generation=1, member_id=b.member_id) == {("t", 0): 0}
    # Only a heartbeats from now on: b's session (counted from the restart) lapses.
    for _ in range(3):
        h2.advance(SESSION // 2)
        assert h2.heartbeat(a) in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
    assert h2.state() == "PreparingRebalance"
    t = h2.join(a)
    resp = joined(h2, a, t)
    assert resp.generation_id == 2 and [m.member_id for m in resp.members] == [a.member_id]


def test_a_group_loaded_by_a_new_coordinator_expires_its_silent_members(tmp_path: Path) -> None:
    """A classic group whose offsets partition this running coordinator takes over
    (cluster mode: ``load_groups``) gets a heartbeat timer for every member it
    loads, as Kafka's coordinator does when a group is loaded (3.9's
    GroupCoordinator.onGroupLoaded schedules each member's heartbeat expiration;
    4.x's GroupMetadataManager.onLoaded reschedules each classic member's
    heartbeat): a member that died with the old coordinator must not hold its
    partitions for ever."""
    h = Harness(tmp_path)
    a, b = Consumer("a"), Consumer("b")
    form_group(h, a, b)
    h2 = Harness(tmp_path)
    h2.co.unload_groups({GROUP})
    h2.advance(SESSION * 3)  # long before the group moves here
    h2.co.load_groups({GROUP}, h2.now)
    assert h2.state() == "Stable"
    for _ in range(3):  # only a heartbeats: b's session, counted from the load, lapses
        h2.advance(SESSION // 2)
        assert h2.heartbeat(a) in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
    assert h2.state() == "PreparingRebalance"
    resp = joined(h2, a, h2.join(a))
    assert resp.generation_id == 2 and [m.member_id for m in resp.members] == [a.member_id]


def test_restart_without_a_clock_asks_for_a_tick(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    a = Consumer("a")
    form_group(h, a)
    co = GroupCoordinator(OffsetStore(h.path, fsync=False))
    assert co.next_deadline() == 0
    assert co.tick(5_000_000) == []
    assert co.next_deadline() == 5_000_000 + SESSION
    assert co.tick(5_000_000 + SESSION) == []
    assert co.group(GROUP).state is GroupState.EMPTY  # type: ignore[union-attr]


# --- every version -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(10))
def test_group_lifecycle_at_every_join_version(tmp_path: Path, version: int) -> None:
    h = Harness(tmp_path)
    a, b = Consumer("a", version=version), Consumer("b", version=version)
    bad = h.join(Consumer("x", version=version, session=1))
    assert h.answers[bad].error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.answers[bad].protocol_name == ("" if version < 7 else None)
    form_group(h, a, b)
    assert (a.generation, a.protocol_name) == (1, "range")
    assert h.heartbeat(a, version=min(version, 4)) == ErrorCode.NONE
    assert h.commit(GROUP, {("t", 0): 9}, generation=1, member_id=a.member_id, version=version) == {
        ("t", 0): 0 if version >= 1 else ErrorCode.UNKNOWN_MEMBER_ID
    }
    resp = h.leave(b, version=min(version, 5))
    assert resp.error_code == 0
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(a, version=min(version, 4)) == ErrorCode.REBALANCE_IN_PROGRESS


@pytest.mark.parametrize("version", range(10))
def test_offsets_at_every_version(h: Harness, version: int) -> None:
    assert h.commit("solo", {("t", 0): 5, ("t", 1): 6}, version=version, leader_epoch=2) == {
        ("t", 0): 0,
        ("t", 1): 0,
    }
    epoch = 2 if version >= 6 else -1
    if version < 8:
        assert h.fetch("solo", {"t": [0, 2]}, version=version) == {
            ("t", 0): (5, epoch if version >= 5 else -1, ""),
            ("t", 2): (-1, -1, ""),
        }
        if version >= 2:
            assert set(h.fetch("solo", None, version=version)) == {("t", 0), ("t", 1)}


@pytest.mark.parametrize("version", range(6))
def test_admin_apis_at_every_version(h: Harness, version: int) -> None:
    a = Consumer("a")
    form_group(h, a)
    h.commit("solo", {("t", 0): 1})
    (described,) = h.describe(GROUP, version=version)
    assert described.group_state == "Stable" and len(described.members) == 1
    req = lsg.ListGroupsRequest(states_filter=["stable"] if version >= 4 else [])
    listed = wire(16, version, h.co.list_groups(req, version))
    assert [g.group_id for g in listed.groups] == ([GROUP] if version >= 4 else [GROUP, "solo"])
    if version <= 2:
        deleted = wire(
            42, version, h.co.delete_groups(dlg.DeleteGroupsRequest(groups_names=["solo"]), version)
        )
        assert [(r.group_id, r.error_code) for r in deleted.results] == [("solo", 0)]


def test_deleted_topic_offsets_are_dropped(h: Harness) -> None:
    h.commit("g1", {("gone", 0): 1, ("kept", 0): 2})
    h.commit("g2", {("gone", 3): 3})
    assert h.co.delete_topic_offsets("gone") == 2
    assert h.fetch("g1", None) == {("kept", 0): (2, -1, "")}
    assert h.fetch("g2", None) == {}


def test_empty_group_offsets_expire_from_when_it_emptied(tmp_path: Path) -> None:
    h = Harness(tmp_path, offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    a = Consumer("a")
    form_group(h, a)
    h.commit(GROUP, {("t", 0): 5}, generation=1, member_id=a.member_id)
    # A group with members keeps its offsets however old they are.
    for _ in range(20):
        h.advance(5_000)
        assert h.heartbeat(a) == ErrorCode.NONE
    assert h.fetch(GROUP, None) == {("t", 0): (5, -1, "")}
    h.leave(a)
    h.advance(50_000)
    assert h.fetch(GROUP, None) == {("t", 0): (5, -1, "")}
    h.advance(10_000)
    # 60 s after it became Empty: offsets expire and the group goes with them, on disk too.
    assert h.fetch(GROUP, None) == {}
    assert h.state() == "Dead"
    assert h.store.group_metadata(GROUP) is None


# -- OffsetDelete ---------------------------------------------------------------------------------


def _subscription(*topics: str) -> bytes:
    from trafka.codec.messages import consumer_protocol as cp

    body = (
        cp.CONSUMERPROTOCOLSUBSCRIPTION_SCHEMAS[1]
        .compile()
        .build(
            cp.ConsumerProtocolSubscription(
                topics=list(topics), user_data=None, owned_partitions=[]
            )
        )
    )
    return (1).to_bytes(2, "big") + body


def _delete(
    h: Harness, group: str, *tps: tuple[str, int]
) -> tuple[int, dict[tuple[str, int], int]]:
    from trafka.codec.messages import k47_offset_delete as od

    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    req = od.OffsetDeleteRequest(
        group_id=group,
        topics=[
            od.OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name=t,
                partitions=[
                    od.OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=p)
                    for p in ps
                ],
            )
            for t, ps in by_topic.items()
        ],
    )
    resp = wire(47, 0, h.co.delete_offsets(req))
    return resp.error_code, {
        (t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions
    }


def test_offset_delete_spares_the_topics_a_consumer_group_subscribes_to(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.commit(GROUP, {("orders", 0): 5, ("orders", 1): 7, ("audit", 0): 3})
    a = Consumer("a", protocols=[("range", _subscription("orders"))])
    b = Consumer("b", protocols=[("range", _subscription("orders", "payments"))])
    form_group(h, a, b)
    code, parts = _delete(h, GROUP, ("orders", 0), ("audit", 0), ("payments", 2), ("never", 0))
    assert code == ErrorCode.NONE
    assert parts == {
        ("orders", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
        ("audit", 0): ErrorCode.NONE,
        ("payments", 2): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
        ("never", 0): ErrorCode.NONE,  # nothing was committed: nothing to do
    }
    assert set(h.store.group_offsets(GROUP)) == {("orders", 0), ("orders", 1)}
    # Once the members have left, every offset may go.
    h.leave(a, b)
    code, parts = _delete(h, GROUP, ("orders", 0), ("orders", 1))
    assert code == ErrorCode.NONE and set(parts.values()) == {ErrorCode.NONE}
    assert h.store.group_offsets(GROUP) == {}
    # Empty and without offsets, the group is gone at once, as Kafka 3.9's coordinator
    # makes it Dead (cleanupGroupMetadata): kafka-consumer-groups --delete then says
    # GROUP_ID_NOT_FOUND on both (tests/brokerlite/test_kafka_scripts.py).
    (described,) = h.describe(GROUP)
    assert (described.error_code, described.group_state) == (ErrorCode.NONE, "Dead")
    from trafka.codec.messages import k42_delete_groups as dlg

    gone = wire(42, 2, h.co.delete_groups(dlg.DeleteGroupsRequest(groups_names=[GROUP]), 2))
    assert gone.results[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # The deletion is durable: a new store replays it.
    assert OffsetStore(h.path, fsync=False).group_offsets(GROUP) == {}


def test_offset_delete_refuses_unknown_and_non_consumer_groups(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    assert _delete(h, "nobody", ("orders", 0))[0] == ErrorCode.GROUP_ID_NOT_FOUND
    assert _delete(h, "", ("orders", 0))[0] == ErrorCode.INVALID_GROUP_ID
    # A group with only committed offsets (assign() and commit) exists.
    h.commit("offsets-only", {("orders", 0): 1})
    assert _delete(h, "offsets-only", ("orders", 0)) == (
        ErrorCode.NONE,
        {("orders", 0): ErrorCode.NONE},
    )
    # A Connect-style group with members cannot lose offsets.
    worker = Consumer("w", group="connect", protocol_type="connect")
    h.commit("connect", {("orders", 0): 1})
    form_group(h, worker)
    assert _delete(h, "connect", ("orders", 0))[0] == ErrorCode.NON_EMPTY_GROUP
    # A member whose subscription cannot be read is taken as subscribed to everything.
    odd = Consumer("x", group="odd", protocols=[("range", b"\x00")])
    h.commit("odd", {("orders", 0): 1})
    form_group(h, odd)
    assert _delete(h, "odd", ("orders", 0))[1] == {
        ("orders", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    }
