"""The consumer group protocol's membership machine (KIP-848), driven by hand.

The test plays the driver and the coordinator, as tests/sdk/test_sdk_membership.py
does for the classic machine: every request body is encoded and decoded at the
version under test on the way, every response too, and after every ``outputs``
call nothing may be left due (a driver sleeping until ``next_deadline`` never
spins).
"""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from trafka.codec import (
    ErrorCode,
    RequestHeader,
    UnsupportedVersionError,
    decode_request,
    encode_request,
)
from trafka.codec.messages import k08_offset_commit as oc
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k68_consumer_group_heartbeat as cgh
from trafka.codec.protocol import decode_response, encode_response
from trafka.sdk.connection_state import CLIENT_VERSIONS
from trafka.sdk.consumer_membership import ConsumerMembership
from trafka.sdk.fetcher import TopicPartition as TP
from trafka.sdk.group_protocol import CommitFailedError
from trafka.sdk.membership import (
    Assign,
    CommitDone,
    Fatal,
    GroupRequest,
    Kind,
    Lose,
    MembershipConfig,
    NeedMetadata,
    Phase,
    Revoke,
)

COORD = (5, "127.0.0.1", 9092)
TID = uuid.UUID(int=0xA1)
UID = uuid.UUID(int=0xB2)
R = cgh.ConsumerGroupHeartbeatResponse


def tps(*partitions: int, topic: str = "t") -> frozenset[TP]:
    return frozenset(TP(topic, p) for p in partitions)


class Harness:
    def __init__(self, hb_version: int = 1, **kw: Any) -> None:
        kw.setdefault("group_id", "g")
        kw.setdefault("auto_commit", False)
        self.hb_version = hb_version
        self.m = ConsumerMembership(
            MembershipConfig(**kw), 0.0, rng=random.Random(3), remote_assignor="uniform"
        )
        self.m.set_topic_ids({"t": TID})
        self.now = 0.0
        self.events: list[Any] = []
        self.sent: list[GroupRequest] = []

    def version(self, kind: Kind) -> int:
        return (
            self.hb_version if kind is Kind.CONSUMER_HEARTBEAT else CLIENT_VERSIONS[kind.value][1]
        )

    def step(self, dt: float = 0.0) -> None:
        self.now += dt
        for o in self.m.outputs(self.now):
            (self.sent if isinstance(o, GroupRequest) else self.events).append(o)
        deadline = self.m.next_deadline()
        assert deadline is None or deadline > self.now, (self.m.phase, deadline, self.now)

    def take(self, kind: Kind = Kind.CONSUMER_HEARTBEAT) -> GroupRequest:
        for i, r in enumerate(self.sent):
            if r.kind is kind:
                return self.sent.pop(i)
        raise AssertionError(f"no {kind} among {[r.kind for r in self.sent]}")

    def body(self, request: GroupRequest) -> Any:
        v = self.version(request.kind)
        frame = encode_request(
            RequestHeader(request_api_key=request.api_key, request_api_version=v, correlation_id=1),
            request.build(v),
        )
        return decode_request(frame[4:])[1]

    def answer(self, request: GroupRequest, response: Any) -> None:
        v = self.version(request.kind)
        wire = encode_response(1, request.api_key, v, response)
        _, decoded = decode_response(wire[4:], request.api_key, v)
        self.m.on_response(request, v, decoded, self.now)

    def pop(self, *types: type) -> list[Any]:
        out = [e for e in self.events if not types or isinstance(e, types)]
        self.events = [e for e in self.events if e not in out]
        return out

    def find(self) -> None:
        self.step()
        req = self.take(Kind.FIND_COORDINATOR)
        node, host, port = COORD
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

    def beat(
        self,
        epoch: int,
        assigned: dict[uuid.UUID, list[int]] | None = None,
        *,
        code: int = 0,
        dt: float = 0.0,
        member: str = "",
    ) -> Any:
        """Let the member send its next heartbeat, answer it; the request's body."""
        self.step(dt)
        req = self.take()
        body = self.body(req)
        self.answer(
            req,
            R(
                error_code=code,
                member_id=member or body.member_id or "server-given",
                member_epoch=epoch,
                heartbeat_interval_ms=1000,
                assignment=None
                if assigned is None
                else R.Assignment(
                    topic_partitions=[
                        R.TopicPartitions(topic_id=t, partitions=ps) for t, ps in assigned.items()
                    ]
                ),
            ),
        )
        return body


def joined(h: Harness, partitions: list[int]) -> Any:
    h.m.set_subscription(["t"], {"t": 4})
    h.find()
    body = h.beat(1, {TID: partitions})
    h.step()
    return body


def test_join_sends_the_full_state_then_only_changes() -> None:
    h = Harness(rack="r1", max_poll_interval=120.0)
    body = joined(h, [0, 1])
    assert body.member_epoch == 0 and body.member_id == h.m.own_id  # v1: names itself
    assert body.subscribed_topic_names == ["t"] and body.topic_partitions == []
    assert body.rebalance_timeout_ms == 120_000 and body.rack_id == "r1"
    assert body.server_assignor == "uniform"
    assert h.m.phase is Phase.STABLE and h.m.generation == 1
    assert h.pop() == [Assign(tps(0, 1))]
    # The assignment is taken: the member reports what it owns at once ...
    ack = h.beat(1)
    assert ack.member_epoch == 1 and ack.subscribed_topic_names is None
    assert [(t.topic_id, t.partitions) for t in ack.topic_partitions] == [(TID, [0, 1])]
    assert ack.rebalance_timeout_ms == -1 and ack.server_assignor is None
    # ... and then heartbeats every interval, carrying nothing that did not change.
    h.step(0.5)
    assert not h.sent
    quiet = h.beat(1, dt=0.5)
    assert quiet.topic_partitions is None and quiet.subscribed_topic_names is None


def test_v0_takes_the_member_id_the_coordinator_gives() -> None:
    h = Harness(hb_version=0)
    body = joined(h, [0])
    assert body.member_id == ""
    assert h.m.member_id == "server-given"
    assert h.beat(1).member_id == "server-given"


def test_revocation_comes_before_the_new_partitions_and_is_reported() -> None:
    h = Harness()
    joined(h, [0, 1, 2])
    h.beat(1)
    h.pop()
    # The coordinator moves 2 away and gives 3 (which it would only give once free).
    h.beat(2, {TID: [0, 1, 3]}, dt=1.0)
    h.step()
    assert h.pop() == [Revoke(tps(2))]
    # While the listener runs, the member still owns 0-2 and not yet 3: its
    # heartbeat has nothing new to report.
    h.step(1.0)
    assert h.body(h.take()).topic_partitions is None
    assert h.m.owned == tps(0, 1, 2)
    h.m.revoke_done(h.now)
    h.step()
    assert h.pop() == [Assign(tps(3))]
    assert h.m.owned == tps(0, 1, 3) and h.m.rebalances == 2
    # Two rebalances timed: the first assignment (at once) and this one, from the
    # new target to its reconciliation after the revocation (1 s).
    latency = h.m.rebalance_latency
    assert (latency.count, latency.total, latency.max) == (2, 1.0, 1.0)


def test_reporting_after_revoke_waits_for_the_heartbeat_in_flight() -> None:
    h = Harness()
    joined(h, [0, 1])
    h.beat(1)
    h.pop()
    h.beat(2, {TID: [0]}, dt=1.0)
    h.step()
    assert h.pop() == [Revoke(tps(1))]
    h.m.revoke_done(h.now)
    report = h.beat(2)
    assert [(t.topic_id, t.partitions) for t in report.topic_partitions] == [(TID, [0])]


def test_an_unknown_topic_id_asks_for_metadata_and_the_rest_goes_on() -> None:
    h = Harness()
    h.m.set_subscription(["t", "u"], {"t": 4, "u": 2})
    h.find()
    h.beat(1, {TID: [0], UID: [0, 1]})
    h.step()
    assert h.pop() == [NeedMetadata(frozenset({"t", "u"})), Assign(tps(0))]
    # Not asked again before the metadata answer and a backoff.
    h.step(0.05)
    assert not h.pop()
    h.m.set_topic_ids({"t": TID, "u": UID})
    h.m.assignment_metadata({"t": 4, "u": 2}, h.now)
    h.step()
    assert h.pop() == [Assign(tps(0, 1, topic="u"))]
    assert h.m.owned == tps(0) | tps(0, 1, topic="u")


def test_fenced_member_loses_everything_and_joins_again_as_itself() -> None:
    h = Harness()
    joined(h, [0, 1])
    h.beat(1)
    h.pop()
    h.beat(1, code=ErrorCode.FENCED_MEMBER_EPOCH, dt=1.0)
    h.step()
    assert h.pop() == [Lose(tps(0, 1))]
    assert h.m.owned == frozenset() and h.m.phase is Phase.JOINING
    again = h.beat(3, {TID: [1]})
    assert again.member_epoch == 0 and again.member_id == h.m.own_id
    assert again.topic_partitions == [] and again.subscribed_topic_names == ["t"]
    h.step()
    assert h.pop() == [Assign(tps(1))]


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.UNRELEASED_INSTANCE_ID,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.GROUP_ID_NOT_FOUND,
        ErrorCode.INVALID_REQUEST,
    ],
)
def test_refusals_no_retry_can_fix_are_fatal(code: int) -> None:
    h = Harness()
    h.m.set_subscription(["t"], {"t": 4})
    h.find()
    h.beat(0, code=code)
    h.step()
    (fatal,) = h.pop(Fatal)
    assert fatal.error.code == code and h.m.fatal is fatal.error


def test_a_coordinator_without_the_api_is_fatal_and_says_so() -> None:
    h = Harness()
    h.m.set_subscription(["t"], {"t": 4})
    h.find()
    h.step()
    h.m.on_failure(h.take(), UnsupportedVersionError("no common version"), h.now)
    h.step()
    (fatal,) = h.pop(Fatal)
    assert "group.protocol=classic" in str(fatal.error)


def test_moved_coordinator_and_retriable_errors() -> None:
    h = Harness()
    joined(h, [0])
    h.beat(1)
    h.beat(1, code=ErrorCode.NOT_COORDINATOR, dt=1.0)
    assert h.m.coordinator is None
    h.find()
    full = h.beat(1)  # after a failure: the whole state again
    assert full.subscribed_topic_names == ["t"] and full.rebalance_timeout_ms > 0
    assert [(t.topic_id, t.partitions) for t in full.topic_partitions] == [(TID, [0])]
    h.beat(1, code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, dt=1.0)
    h.step(0.01)
    assert not h.sent  # backs off
    h.beat(1, dt=0.2)
    assert h.m.phase is Phase.STABLE and h.m.owned == tps(0)


def test_subscription_change_is_sent_at_once() -> None:
    h = Harness()
    joined(h, [0])
    h.beat(1)
    h.m.set_subscription(["t", "u"], {"t": 4, "u": 2})
    changed = h.beat(1)
    assert changed.subscribed_topic_names == ["t", "u"]


def test_poll_timeout_leaves_with_minus_one_and_rejoins_at_the_next_poll() -> None:
    h = Harness(max_poll_interval=10.0, instance_id="static-1")
    joined(h, [0])
    h.beat(1)
    h.pop()
    for _ in range(11):
        h.step(1.0)
        for r in list(h.sent):
            h.sent.remove(r)
            if h.body(r).member_epoch == 1:
                h.answer(r, R(member_id=h.m.own_id, member_epoch=1, heartbeat_interval_ms=1000))
            else:
                leave = r
    assert h.body(leave).member_epoch == -1  # a poll timeout: even a static member
    assert h.pop() == [Lose(tps(0))]
    h.step(5.0)
    assert not h.sent
    assert h.m.poll_started(h.now)
    h.step()
    assert h.body(h.take()).member_epoch == 0


def test_close_leaves_with_minus_one_or_minus_two_when_static() -> None:
    h = Harness()
    joined(h, [0])
    h.beat(1)
    req = h.m.leave(h.now)
    assert req is not None and h.body(req).member_epoch == -1
    assert h.m.phase is Phase.CLOSED
    s = Harness(instance_id="static-1")
    joined(s, [0])
    s.beat(1)
    req = s.m.leave(s.now)
    assert req is not None
    body = s.body(req)
    assert body.member_epoch == -2 and body.instance_id == "static-1"
    # Its answer changes nothing.
    s.answer(req, R(member_id=s.m.own_id, member_epoch=-2))
    assert s.m.phase is Phase.CLOSED


def commit_answer(offsets: dict[TP, int], code: int) -> Any:
    C = oc.OffsetCommitResponse
    return C(
        topics=[
            C.OffsetCommitResponseTopic(
                name="t",
                partitions=[
                    C.OffsetCommitResponsePartition(partition_index=tp.partition, error_code=code)
                    for tp in offsets
                ],
            )
        ]
    )


def test_commits_carry_the_member_epoch_and_follow_a_newer_one() -> None:
    h = Harness()
    joined(h, [0])
    h.beat(1)
    h.m.commit({TP("t", 0): 5}, h.now, "c1")
    h.step()
    first = h.take(Kind.OFFSET_COMMIT)
    body = h.body(first)
    assert body.generation_id_or_member_epoch == 1 and body.member_id == h.m.own_id
    # The epoch moved on meanwhile (a heartbeat answered in between).
    h.beat(2, {TID: [0]}, dt=1.0)
    h.answer(first, commit_answer({TP("t", 0): 5}, ErrorCode.STALE_MEMBER_EPOCH))
    h.step()
    second = h.take(Kind.OFFSET_COMMIT)
    assert h.body(second).generation_id_or_member_epoch == 2
    h.answer(second, commit_answer({TP("t", 0): 5}, 0))
    h.step()
    assert h.pop(CommitDone) == [CommitDone({TP("t", 0): 5}, "c1", None)]
    # Stale with the current epoch: it fails, and a heartbeat goes at once.
    h.m.commit({TP("t", 0): 6}, h.now, "c2")
    h.step()
    h.answer(h.take(Kind.OFFSET_COMMIT), commit_answer({TP("t", 0): 6}, 113))
    h.step()
    (done,) = h.pop(CommitDone)
    assert isinstance(done.error, CommitFailedError)
    assert h.take().kind is Kind.CONSUMER_HEARTBEAT


def test_nothing_waits_for_the_clock_to_pass_zero() -> None:
    """A monotonic clock reads from any origin, below zero too: metadata asked
    for with no backoff, a heartbeat due at once (a subscription change, a
    rejoin asked for) go at any reading."""
    h = Harness()
    h.now = -1e6
    h.m = ConsumerMembership(
        MembershipConfig(group_id="g", auto_commit=False),
        h.now,
        rng=random.Random(3),
        remote_assignor="uniform",
    )
    h.m.set_topic_ids({"t": TID})
    h.m.set_subscription(["t", "u"], {"t": 4, "u": 2})
    h.find()
    h.beat(1, {TID: [0], UID: [0, 1]})
    h.step()
    assert h.pop() == [NeedMetadata(frozenset({"t", "u"})), Assign(tps(0))]
    h.beat(1)
    h.m.set_subscription(["t"], {"t": 4})
    assert h.beat(1).subscribed_topic_names == ["t"]
    h.m.request_rejoin()
    assert h.beat(1).member_epoch == 1
