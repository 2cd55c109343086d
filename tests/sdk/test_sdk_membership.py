"""The group membership state machine, driven by hand (no sockets, no clock).

The test plays the driver and the coordinator: it calls ``outputs(now)``,
answers the requests with response messages (every request body is encoded
and decoded at the client's newest version on the way, every response too),
and moves time. After every ``outputs`` call the harness checks that nothing
is left due (``next_deadline() > now``), so a driver sleeping until the next
deadline can never spin.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

import pytest

from trafka.codec import ErrorCode, RequestHeader, decode_request, encode_request
from trafka.codec.assignor_data import (
    StickyUserData,
    decode_cooperative_sticky_user_data,
    decode_sticky_user_data,
)
from trafka.codec.messages import k08_offset_commit as oc
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k11_join_group as jg
from trafka.codec.messages import k12_heartbeat as hb
from trafka.codec.messages import k14_sync_group as sg
from trafka.codec.protocol import decode_response, encode_response
from trafka.sdk.assignors import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from trafka.sdk.connection_state import CLIENT_VERSIONS
from trafka.sdk.errors import KafkaConnectionError
from trafka.sdk.fetcher import TopicPartition as TP
from trafka.sdk.group_protocol import CommitFailedError
from trafka.sdk.membership import (
    Assign,
    AutoCommitDue,
    CommitDone,
    Fatal,
    GroupRequest,
    Kind,
    Lose,
    Membership,
    MembershipConfig,
    NeedMetadata,
    Phase,
    Revoke,
)

COORD = (5, "127.0.0.1", 9092)
T4 = frozenset(TP("t", i) for i in range(4))


def version(kind: Kind) -> int:
    return CLIENT_VERSIONS[kind.value][1]


class Harness:
    """One member, its clock, and what it asked for."""

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("group_id", "g")
        kw.setdefault("auto_commit", False)
        kw.setdefault("assignors", ("cooperative-sticky",))
        self.m = Membership(MembershipConfig(**kw), 0.0, rng=random.Random(7))
        self.now = 0.0
        self.events: list[Any] = []
        self.sent: list[GroupRequest] = []

    def step(self, dt: float = 0.0) -> list[Any]:
        self.now += dt
        out = self.m.outputs(self.now)
        deadline = self.m.next_deadline()
        assert deadline is None or deadline > self.now, (self.m.phase, deadline, self.now)
        for o in out:
            if isinstance(o, GroupRequest):
                self.sent.append(o)
            else:
                self.events.append(o)
        return out

    def take(self, kind: Kind) -> GroupRequest:
        for i, r in enumerate(self.sent):
            if r.kind is kind:
                return self.sent.pop(i)
        raise AssertionError(f"no {kind} request among {[r.kind for r in self.sent]}")

    def none_sent(self, kind: Kind) -> bool:
        return all(r.kind is not kind for r in self.sent)

    def body(self, request: GroupRequest) -> Any:
        v = version(request.kind)
        frame = encode_request(
            RequestHeader(request_api_key=request.api_key, request_api_version=v, correlation_id=1),
            request.build(v),
        )
        return decode_request(frame[4:])[1]

    def answer(self, request: GroupRequest, response: Any) -> None:
        v = version(request.kind)
        wire = encode_response(1, request.api_key, v, response)
        _, decoded = decode_response(wire[4:], request.api_key, v)
        self.m.on_response(request, v, decoded, self.now)

    def pop_events(self, *types: type) -> list[Any]:
        out = [e for e in self.events if not types or isinstance(e, types)]
        self.events = [e for e in self.events if e not in out]
        return out

    # -- coordinator scripts --------------------------------------------------------------

    def find(self, coordinator: tuple[int, str, int] = COORD) -> None:
        self.step()
        self.answer_find(self.take(Kind.FIND_COORDINATOR), coordinator)

    def answer_find(self, req: GroupRequest, coordinator: tuple[int, str, int] = COORD) -> None:
        assert req.coordinator is None
        node, host, port = coordinator
        self.answer(
            req,
            fc.FindCoordinatorResponse(
                coordinators=[
                    fc.FindCoordinatorResponse.Coordinator(
                        key="g", node_id=node, host=host, port=port
                    )
                ]
            ),
        )

    def join_as_follower(
        self, generation: int, assignment: Iterable[TP], member: str = "m1"
    ) -> None:
        self.step()
        join = self.take(Kind.JOIN)
        self.answer(
            join,
            jg.JoinGroupResponse(
                generation_id=generation,
                protocol_name=self.m.config.assignors[0],
                leader="someone-else",
                member_id=member,
            ),
        )
        self.step()
        sync = self.take(Kind.SYNC)
        assert self.body(sync).generation_id == generation
        self.answer(sync, sg.SyncGroupResponse(assignment=encode_assignment(assignment)))
        self.step()

    def heartbeat(self, code: int = 0) -> GroupRequest:
        self.step(self.m.config.heartbeat_interval)
        req = self.take(Kind.HEARTBEAT)
        self.answer(req, hb.HeartbeatResponse(error_code=code))
        return req


def stable(h: Harness, owned: frozenset[TP] = T4, generation: int = 1) -> None:
    h.m.set_subscription(["t"], {"t": 4})
    h.find()
    h.join_as_follower(generation, owned)
    assert h.m.phase is Phase.STABLE and h.m.owned == owned
    h.pop_events()


def commit_response(offsets: dict[TP, int], code: int = 0) -> oc.OffsetCommitResponse:
    R = oc.OffsetCommitResponse
    by_topic: dict[str, list[Any]] = {}
    for tp in offsets:
        by_topic.setdefault(tp.topic, []).append(
            R.OffsetCommitResponsePartition(partition_index=tp.partition, error_code=code)
        )
    return R(
        topics=[R.OffsetCommitResponseTopic(name=t, partitions=p) for t, p in by_topic.items()]
    )


# -- joining -------------------------------------------------------------------------------


def test_nothing_happens_without_a_subscription() -> None:
    h = Harness()
    assert h.step() == [] and h.m.next_deadline() is None


def test_first_join_member_id_required_then_follower() -> None:
    h = Harness(assignors=("cooperative-sticky",), rack="r1")
    h.m.set_subscription(["t"], {"t": 4})
    h.find()
    h.step()
    join = h.take(Kind.JOIN)
    assert join.coordinator == COORD
    body = h.body(join)
    assert body.member_id == "" and body.rebalance_timeout_ms == 300_000
    sub = decode_subscription("x", body.protocols[0].metadata)
    assert sub.topics == ("t",) and sub.rack == "r1" and sub.owned == ()
    h.answer(
        join,
        jg.JoinGroupResponse(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id="m1"),
    )
    h.join_as_follower(3, {TP("t", 1)})
    assert h.pop_events() == [Assign(frozenset({TP("t", 1)}))]
    assert (h.m.member_id, h.m.generation, h.m.rebalances) == ("m1", 3, 1)


def test_rebalance_latency_runs_from_the_first_join_to_the_assignment() -> None:
    h = Harness()
    h.m.set_subscription(["t"], {"t": 4})
    h.find()
    h.step(1.0)
    first = h.take(Kind.JOIN)  # the rebalance starts here, at t=1
    h.answer(first, jg.JoinGroupResponse(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id="m1"))
    h.now += 0.5  # a second JoinGroup, then the SyncGroup, at t=1.5: still the same rebalance
    h.join_as_follower(1, {TP("t", 0)})
    latency = h.m.rebalance_latency
    assert (latency.count, latency.total, latency.max) == (1, 0.5, 0.5)
    assert latency.take_peak() == 0.5 and latency.take_peak() == 0.0
    # A second rebalance (the subscription grew) that takes 0.25 s.
    h.m.set_subscription(["t", "u"], {"t": 4, "u": 1})
    h.step()
    join = h.take(Kind.JOIN)
    h.now += 0.25
    h.answer(
        join,
        jg.JoinGroupResponse(
            generation_id=2, protocol_name="cooperative-sticky", leader="x", member_id="m1"
        ),
    )
    h.step()
    h.answer(h.take(Kind.SYNC), sg.SyncGroupResponse(assignment=encode_assignment({TP("t", 0)})))
    assert (latency.count, latency.total, latency.max) == (2, 0.75, 0.5)
    assert latency.take_peak() == 0.25


def test_leader_assigns_with_metadata_from_the_driver() -> None:
    h = Harness(assignors=("range",))
    h.m.set_subscription(["t"], {"t": 4})
    h.find()
    h.step()
    join = h.take(Kind.JOIN)
    meta = h.body(join).protocols[0].metadata
    h.answer(
        join,
        jg.JoinGroupResponse(
            generation_id=1,
            protocol_name="range",
            leader="a",
            member_id="a",
            members=[
                jg.JoinGroupResponse.JoinGroupResponseMember(member_id="a", metadata=meta),
                jg.JoinGroupResponse.JoinGroupResponseMember(member_id="b", metadata=meta),
            ],
        ),
    )
    h.step()
    assert h.pop_events() == [NeedMetadata(frozenset({"t"}))]
    assert h.m.phase is Phase.ASSIGNING and h.none_sent(Kind.SYNC)
    h.m.assignment_metadata({"t": 4}, h.now)
    h.step()
    sync = h.take(Kind.SYNC)
    plan = {a.member_id: decode_assignment(a.assignment) for a in h.body(sync).assignments}
    assert plan == {"a": {TP("t", 0), TP("t", 1)}, "b": {TP("t", 2), TP("t", 3)}}
    h.answer(sync, sg.SyncGroupResponse(assignment=encode_assignment(plan["a"])))
    h.step()
    assert h.pop_events() == [Assign(frozenset(plan["a"]))]


# -- rebalances --------------------------------------------------------------------------------


def test_cooperative_rebalance_revokes_only_moved_partitions() -> None:
    h = Harness(assignors=("cooperative-sticky",))
    stable(h)
    h.heartbeat(ErrorCode.REBALANCE_IN_PROGRESS)
    h.step()
    # Cooperative: no revocation before joining; the owned partitions travel in the metadata.
    assert h.pop_events(Revoke) == []
    join = h.take(Kind.JOIN)
    meta = h.body(join).protocols[0].metadata
    assert set(decode_subscription("m1", meta).owned) == T4
    other = jg.JoinGroupResponse.JoinGroupResponseMember(
        member_id="m2", metadata=encode_subscription(["t"])
    )
    h.answer(
        join,
        jg.JoinGroupResponse(
            generation_id=2,
            protocol_name="cooperative-sticky",
            leader="m1",
            member_id="m1",
            members=[
                jg.JoinGroupResponse.JoinGroupResponseMember(member_id="m1", metadata=meta),
                other,
            ],
        ),
    )
    h.step()
    assert h.pop_events() == [NeedMetadata(frozenset({"t"}))]
    h.m.assignment_metadata({"t": 4}, h.now)
    h.step()
    sync = h.take(Kind.SYNC)
    plan = {a.member_id: decode_assignment(a.assignment) for a in h.body(sync).assignments}
    # The first round keeps m1's half and gives m2 nothing yet: moving partitions are withheld.
    assert len(plan["m1"]) == 2 and plan["m2"] == set()
    h.answer(sync, sg.SyncGroupResponse(assignment=encode_assignment(plan["m1"])))
    h.step()
    moved = T4 - frozenset(plan["m1"])
    assert h.pop_events() == [Revoke(moved)]
    assert h.none_sent(Kind.JOIN)  # not before the revocation is done
    h.heartbeat()  # heartbeats go on while the listener runs
    h.m.revoke_done(h.now)
    h.step()
    assert h.m.owned == frozenset(plan["m1"])
    # Nothing new was added for m1, so no Assign; it rejoins so that m2 can get the rest.
    assert h.pop_events() == []
    join = h.take(Kind.JOIN)
    assert set(decode_subscription("m1", h.body(join).protocols[0].metadata).owned) == set(
        plan["m1"]
    )


def test_eager_rebalance_revokes_everything_before_joining() -> None:
    h = Harness(assignors=("range",), auto_commit=True)
    stable(h)
    h.heartbeat(ErrorCode.REBALANCE_IN_PROGRESS)
    h.step()
    assert h.pop_events() == [Revoke(T4)]
    assert h.none_sent(Kind.JOIN) and h.none_sent(Kind.HEARTBEAT)
    # The driver commits before the listener runs; the commit still uses generation 1.
    h.m.commit({TP("t", 0): 10}, h.now, "before-revoke")
    h.step()
    commit = h.take(Kind.OFFSET_COMMIT)
    assert h.body(commit).generation_id_or_member_epoch == 1
    h.answer(commit, commit_response({TP("t", 0): 10}))
    h.m.revoke_done(h.now)
    h.step()
    assert h.pop_events(CommitDone) == [CommitDone({TP("t", 0): 10}, "before-revoke", None)]
    assert h.m.owned == frozenset()
    assert (
        sorted(decode_subscription("m", h.body(h.take(Kind.JOIN)).protocols[0].metadata).owned)
        == []
    )


def test_sticky_user_data_carries_the_last_assignment_across_revocation_and_loss() -> None:
    """Issue #45 item 5. The eager protocol revokes everything before JoinGroup, so
    the owned partitions are empty; as Java's StickyAssignor does, the "sticky"
    protocol's user data reports the last assignment and its generation instead
    (other protocols get their own metadata without it), and a leader running the
    sticky assignor keeps those partitions with this member. The history outlives a
    lost membership (a stale generation, which loses any conflicting claim)."""
    h = Harness(assignors=("sticky", "range"))
    stable(h, T4, generation=3)
    h.heartbeat(ErrorCode.REBALANCE_IN_PROGRESS)
    h.step()
    assert h.pop_events() == [Revoke(T4)]
    h.m.revoke_done(h.now)
    h.step()
    join = h.take(Kind.JOIN)
    protocols = {p.name: p.metadata for p in h.body(join).protocols}
    assert list(protocols) == ["sticky", "range"]
    sticky = decode_subscription("m1", protocols["sticky"])
    assert sticky.owned == () and sticky.generation == 3
    assert decode_sticky_user_data(sticky.user_data) == StickyUserData(tuple(sorted(T4)), 3)
    assert decode_subscription("m1", protocols["range"]).user_data is None
    # As the leader, with a newcomer: this member keeps two of its own four.
    newcomer = encode_subscription(["t"], user_data=None)
    h.answer(
        join,
        jg.JoinGroupResponse(
            generation_id=4,
            protocol_name="sticky",
            leader="m1",
            member_id="m1",
            members=[
                jg.JoinGroupResponse.JoinGroupResponseMember(
                    member_id="m1", metadata=protocols["sticky"]
                ),
                jg.JoinGroupResponse.JoinGroupResponseMember(member_id="m2", metadata=newcomer),
            ],
        ),
    )
    h.step()
    assert h.pop_events() == [NeedMetadata(frozenset({"t"}))]
    h.m.assignment_metadata({"t": 4}, h.now)
    h.step()
    sync = h.take(Kind.SYNC)
    plan = {a.member_id: decode_assignment(a.assignment) for a in h.body(sync).assignments}
    assert len(plan["m1"]) == 2 and len(plan["m2"]) == 2
    h.answer(sync, sg.SyncGroupResponse(assignment=encode_assignment(plan["m1"])))
    h.step()
    assert h.pop_events() == [Assign(frozenset(plan["m1"]))]
    # The membership is lost: the partitions go, the history stays (generation 4).
    h.heartbeat(ErrorCode.UNKNOWN_MEMBER_ID)
    h.step()
    assert h.pop_events() == [Lose(frozenset(plan["m1"]))]
    body = h.body(h.take(Kind.JOIN))
    sticky = decode_subscription("", body.protocols[0].metadata)
    assert sticky.generation == -1 and sticky.owned == ()
    assert decode_sticky_user_data(sticky.user_data) == StickyUserData(tuple(sorted(plan["m1"])), 4)


def test_cooperative_sticky_user_data_is_the_generation() -> None:
    """CooperativeStickyAssignor's user data is the generation of the last
    assignment (for leaders reading subscriptions older than version 2)."""
    h = Harness(assignors=("cooperative-sticky",))
    h.m.set_subscription(["t"], {"t": 4})
    h.find()
    h.step()
    first = decode_subscription("", h.body(h.take(Kind.JOIN)).protocols[0].metadata)
    assert decode_cooperative_sticky_user_data(first.user_data) == -1
    h.m = Membership(h.m.config, h.now)  # afresh, to join as a follower at generation 6
    stable(h, T4, generation=6)
    h.heartbeat(ErrorCode.REBALANCE_IN_PROGRESS)
    h.step()
    sub = decode_subscription("m1", h.body(h.take(Kind.JOIN)).protocols[0].metadata)
    assert sub.generation == 6 and set(sub.owned) == T4
    assert decode_cooperative_sticky_user_data(sub.user_data) == 6


def test_unknown_member_loses_partitions_and_rejoins_afresh() -> None:
    h = Harness()
    stable(h)
    h.heartbeat(ErrorCode.UNKNOWN_MEMBER_ID)
    h.step()
    assert h.pop_events() == [Lose(T4)]
    assert (h.m.member_id, h.m.generation, h.m.owned) == ("", -1, frozenset())
    assert h.body(h.take(Kind.JOIN)).member_id == ""


def test_static_member_keeps_its_id_and_fencing_is_fatal() -> None:
    h = Harness(instance_id="i-1")
    stable(h)
    h.heartbeat(ErrorCode.ILLEGAL_GENERATION)
    h.step()
    assert h.m.member_id == "m1"  # static members keep their id
    join = h.take(Kind.JOIN)
    assert h.body(join).group_instance_id == "i-1"
    h.m.commit({TP("t", 0): 1}, h.now, "c")
    h.answer(join, jg.JoinGroupResponse(error_code=ErrorCode.FENCED_INSTANCE_ID))
    h.step()
    fatal = h.pop_events(Fatal)
    assert len(fatal) == 1 and fatal[0].error.code == ErrorCode.FENCED_INSTANCE_ID
    # A pending commit ends with the same error; nothing else is sent any more.
    (done,) = h.pop_events(CommitDone)
    assert done.error is fatal[0].error
    assert h.step(100.0) == [] and h.m.next_deadline() is None


@pytest.mark.parametrize(
    ("protocol", "kind"), [("range", "consumer"), ("cooperative-sticky", "connect")]
)
def test_a_protocol_this_member_did_not_offer_is_fatal(protocol: str, kind: str) -> None:
    # The member offered cooperative-sticky only, for protocol type "consumer".
    h = Harness()
    h.m.set_subscription(["t"], {"t": 4})
    h.find()
    h.step()
    join = h.take(Kind.JOIN)
    h.answer(
        join,
        jg.JoinGroupResponse(
            generation_id=1, protocol_type=kind, protocol_name=protocol, leader="m1", member_id="m1"
        ),
    )
    h.step()
    (fatal,) = h.pop_events(Fatal)
    assert fatal.error.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert repr(protocol) in str(fatal.error)
    assert h.pop_events(NeedMetadata) == [] and h.none_sent(Kind.SYNC)


def test_stale_heartbeat_answer_is_ignored() -> None:
    h = Harness()
    stable(h)
    h.step(h.m.config.heartbeat_interval)
    old = h.take(Kind.HEARTBEAT)
    h.m.set_subscription(["t", "u"], {"t": 4, "u": 1})  # subscription change: rejoin
    h.step()
    h.join_as_follower(2, T4)
    h.answer(old, hb.HeartbeatResponse(error_code=ErrorCode.ILLEGAL_GENERATION))
    h.step()
    assert h.m.phase is Phase.STABLE and h.m.owned == T4 and h.pop_events(Lose) == []


def _join_as_leader(h: Harness, counts: dict[str, int], *, skip: bool = False) -> Any:
    """Join as the group's leader, answer its NeedMetadata with ``counts``: the SyncGroup."""
    h.step()
    join = h.take(Kind.JOIN)
    meta = h.body(join).protocols[0].metadata
    member = jg.JoinGroupResponse.JoinGroupResponseMember(member_id="m1", metadata=meta)
    h.answer(
        join,
        jg.JoinGroupResponse(
            generation_id=1,
            protocol_name="range",
            leader="m1",
            member_id="m1",
            skip_assignment=skip,
            members=[member],
        ),
    )
    h.step()
    assert h.pop_events(NeedMetadata) == [NeedMetadata(frozenset({"t"}))]
    assert h.none_sent(Kind.SYNC)
    h.m.assignment_metadata(counts, h.now)
    h.step()
    return h.take(Kind.SYNC)


def test_only_the_leader_rejoins_when_partition_counts_change() -> None:
    """As the Java consumer (ConsumerCoordinator: only the leader monitors metadata),
    against the counts the leader assigned with, not those it knew when it joined:
    a leader that joined before its metadata arrived (count 0) does not rebalance
    the group when the metadata it assigned with arrives."""
    follower = Harness()
    stable(follower)
    follower.m.set_subscription(["t"], {"t": 6})
    assert follower.m.phase is Phase.STABLE
    leader = Harness(assignors=("range",))
    leader.m.set_subscription(["t"], {})  # no metadata for "t" yet
    leader.find()
    sync = _join_as_leader(leader, {"t": 4})
    leader.m.set_subscription(["t"], {"t": 4})
    leader.answer(sync, sg.SyncGroupResponse(assignment=encode_assignment(T4)))
    leader.step()
    assert leader.m.phase is Phase.STABLE and leader.none_sent(Kind.JOIN)
    leader.m.set_subscription(["t"], {"t": 6})
    assert leader.m.phase is Phase.PREPARING
    leader.step()
    assert leader.pop_events(Revoke) == [Revoke(T4)]  # eager (range): revoke, then join
    leader.m.revoke_done(leader.now)
    leader.step()
    leader.take(Kind.JOIN)


def test_a_static_leader_that_skips_the_assignment_reads_the_counts_first() -> None:
    """KIP-345: a static leader rejoining a Stable group is told to skip the
    assignment (JoinGroup v9+, skip_assignment) and syncs with none; it watches the
    partition counts it read then, so metadata arriving later is no reason to rejoin."""
    h = Harness(assignors=("range",), instance_id="i1")
    h.m.set_subscription(["t"], {})
    h.find()
    sync = _join_as_leader(h, {"t": 4}, skip=True)
    assert h.body(sync).assignments == []
    h.m.set_subscription(["t"], {"t": 4})
    h.answer(sync, sg.SyncGroupResponse(assignment=encode_assignment(T4)))
    h.step()
    assert h.m.phase is Phase.STABLE and h.m.owned == T4 and h.none_sent(Kind.JOIN)


# -- liveness ----------------------------------------------------------------------------------


def test_poll_timeout_leaves_then_rejoins_at_next_poll() -> None:
    h = Harness(max_poll_interval=10.0, heartbeat_interval=3.0, session_timeout=30.0)
    stable(h)
    for _ in range(3):
        h.heartbeat()
    h.m.poll_started(h.now)  # polling: the clock does not run while inside a poll
    h.heartbeat()
    h.heartbeat()
    h.m.poll_ended(h.now)
    t_end = h.now
    h.heartbeat()
    h.heartbeat()
    h.heartbeat()
    h.step(t_end + 10.0 - h.now)
    leave = h.take(Kind.LEAVE)
    members = h.body(leave).members
    assert [(m.member_id, m.reason) for m in members] == [
        ("m1", "consumer poll timeout has expired")
    ]
    assert h.pop_events() == [Lose(T4)]
    assert h.m.member_id == "" and h.m.phase is Phase.PREPARING
    h.step(60.0)
    assert h.none_sent(Kind.JOIN) and h.none_sent(Kind.HEARTBEAT)
    assert h.m.poll_started(h.now) is True
    h.step()
    assert h.body(h.take(Kind.JOIN)).member_id == ""


def test_static_member_poll_timeout_sends_no_leave() -> None:
    h = Harness(max_poll_interval=10.0, instance_id="i")
    stable(h)
    h.step(10.0)
    assert h.none_sent(Kind.LEAVE)
    assert h.pop_events(Lose) == [Lose(T4)]


def test_session_expiry_finds_the_coordinator_again() -> None:
    h = Harness(heartbeat_interval=1.0, session_timeout=5.0)
    stable(h)
    h.step(1.0)
    h.take(Kind.HEARTBEAT)  # never answered: it stays in flight, so no other goes out
    for _ in range(3):
        h.step(1.0)
        assert h.m.coordinator == COORD and h.none_sent(Kind.HEARTBEAT)
    h.step(1.0)  # five seconds without a successful heartbeat
    assert h.m.coordinator is None
    h.take(Kind.FIND_COORDINATOR)


def test_auto_commit_due_only_when_stable() -> None:
    h = Harness(auto_commit=True, auto_commit_interval=5.0, heartbeat_interval=1.0)
    h.m.set_subscription(["t"], {"t": 4})
    h.find()
    h.step(6.0)
    assert h.pop_events(AutoCommitDue) == []
    h.join_as_follower(1, T4)
    h.pop_events()
    for _ in range(5):
        h.heartbeat()
    assert len(h.pop_events(AutoCommitDue)) == 1


# -- commits -------------------------------------------------------------------------------------


def test_async_commits_stay_ordered_under_injected_errors() -> None:
    h = Harness(managed=False, retry_backoff=0.1, retry_backoff_max=1.0, commit_timeout=60.0)
    tp = TP("t", 0)
    for i in range(1, 6):
        h.m.commit({tp: i}, h.now, i)
    h.find()
    faults = iter(
        [
            ("code", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
            ("fail", None),
            ("ok", None),
            ("code", ErrorCode.NOT_COORDINATOR),
            ("code", ErrorCode.REQUEST_TIMED_OUT),
            ("ok", None),
            ("fail", None),
            ("ok", None),
            ("ok", None),
            ("ok", None),
        ]
    )
    sent_offsets = []
    for _ in range(200):
        h.step(0.05)
        if not h.none_sent(Kind.FIND_COORDINATOR):
            h.answer_find(h.take(Kind.FIND_COORDINATOR))
            continue
        commits = [r for r in h.sent if r.kind is Kind.OFFSET_COMMIT]
        assert len(commits) <= 1  # one at a time
        if not commits:
            if not h.m.commits.queued:
                break
            continue
        req = h.take(Kind.OFFSET_COMMIT)
        body = h.body(req)
        assert (body.generation_id_or_member_epoch, body.member_id) == (-1, "")
        offset = body.topics[0].partitions[0].committed_offset
        sent_offsets.append(offset)
        what, code = next(faults, ("ok", None))
        if what == "fail":
            h.m.on_failure(req, KafkaConnectionError("lost"), h.now)
        else:
            h.answer(req, commit_response({tp: offset}, code or 0))
    done = h.pop_events(CommitDone)
    assert [(d.cookie, d.error) for d in done] == [(i, None) for i in range(1, 6)]
    # Each commit was sent until it landed, and never before the one ahead of it.
    assert sent_offsets == sorted(sent_offsets) and set(sent_offsets) == {1, 2, 3, 4, 5}


def test_commit_during_rebalance_fails_and_rejoins() -> None:
    h = Harness()
    stable(h)
    h.m.commit({TP("t", 0): 3}, h.now, "x")
    h.step()
    req = h.take(Kind.OFFSET_COMMIT)
    assert h.body(req).generation_id_or_member_epoch == 1
    h.answer(req, commit_response({TP("t", 0): 3}, ErrorCode.REBALANCE_IN_PROGRESS))
    h.step()
    (done,) = h.pop_events(CommitDone)
    assert isinstance(done.error, CommitFailedError)
    assert h.m.phase is Phase.JOINING  # rejoined at once


def test_commit_without_coordinator_times_out() -> None:
    h = Harness(managed=False, commit_timeout=2.0, retry_backoff=0.5, retry_backoff_max=0.5)
    h.m.commit({TP("t", 0): 1}, h.now, "c")
    for _ in range(10):
        h.step(0.5)
        for r in list(h.sent):
            h.sent.remove(r)
            h.m.on_failure(r, KafkaConnectionError("no broker"), h.now)
    (done,) = h.pop_events(CommitDone)
    assert done.error is not None and done.error.code == ErrorCode.REQUEST_TIMED_OUT


def test_leave_and_empty_commit() -> None:
    h = Harness()
    stable(h)
    h.m.commit({}, h.now, "empty")
    leave = h.m.leave(h.now)
    assert leave is not None and h.body(leave).members[0].member_id == "m1"
    assert h.m.phase is Phase.CLOSED and h.m.owned == frozenset()
    h.step(100.0)
    assert h.pop_events() == [CommitDone({}, "empty", None)]
    assert h.sent == []


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
def test_heartbeat_not_coordinator_rediscovers(code: int) -> None:
    h = Harness()
    stable(h)
    h.heartbeat(code)
    assert h.m.coordinator is None
    h.find((6, "127.0.0.1", 9093))
    h.step()
    assert h.take(Kind.HEARTBEAT).coordinator == (6, "127.0.0.1", 9093)
    assert h.m.phase is Phase.STABLE and h.m.owned == T4
