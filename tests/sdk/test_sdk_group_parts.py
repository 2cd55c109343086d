"""The parts the group state machines hold, on their own (no sockets, no clock):
the coordinator lookup, the ``max.poll.interval.ms`` timer, the commit queue and
the leader's step of a classic rebalance.

Requests are encoded and answers encoded and decoded at the client's newest
version on the way, as a coordinator would see and send them.
"""

from __future__ import annotations

import random
from typing import Any

from test_sdk_membership import commit_response

from trafka.codec import ErrorCode, RequestHeader, decode_request, encode_request
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k11_join_group as jg
from trafka.codec.protocol import decode_response, encode_response
from trafka.sdk.assignors import LeaderAssignment, decode_assignment, encode_subscription
from trafka.sdk.connection_state import CLIENT_VERSIONS
from trafka.sdk.coordinator_lookup import CoordinatorLookup
from trafka.sdk.fetcher import TopicPartition as TP
from trafka.sdk.group_commits import CommitQueue
from trafka.sdk.group_protocol import Action, CommitFailedError
from trafka.sdk.membership_types import CommitDone, GroupRequest, MembershipConfig, Output
from trafka.sdk.poll_timer import PollTimer

COORD = (5, "127.0.0.1", 9092)
FIND = 10
COMMIT = 8


def newest(api_key: int) -> int:
    return CLIENT_VERSIONS[api_key][1]


def on_the_wire(api_key: int, build: Any) -> Any:
    """The request ``build`` makes at the newest version, as the broker decodes it."""
    v = newest(api_key)
    header = RequestHeader(request_api_key=api_key, request_api_version=v, correlation_id=1)
    return decode_request(encode_request(header, build(v))[4:])[1]


def answered(api_key: int, response: Any) -> Any:
    v = newest(api_key)
    return decode_response(encode_response(1, api_key, v, response)[4:], api_key, v)[1]


def find_answer(code: int = 0, coordinator: tuple[int, str, int] = COORD) -> Any:
    node, host, port = coordinator
    found = fc.FindCoordinatorResponse.Coordinator(
        key="g", node_id=node, host=host, port=port, error_code=code
    )
    return answered(FIND, fc.FindCoordinatorResponse(coordinators=[found]))


def lookup(now: float = 0.0) -> CoordinatorLookup:
    settings = MembershipConfig(group_id="g", retry_backoff=0.1, retry_backoff_max=1.0)
    return CoordinatorLookup(settings, now, random.Random(3))


# -- the coordinator lookup ---------------------------------------------------------------------


def test_one_lookup_at_a_time_for_the_group() -> None:
    look = lookup()
    build = look.start(0.0)
    assert build is not None and look.finding and look.deadline() is None
    assert look.start(0.0) is None  # one out already
    body = on_the_wire(FIND, build)
    assert (body.key_type, body.coordinator_keys) == (0, ["g"])
    assert look.on_answer(newest(FIND), find_answer(), 0.5) == 0
    assert look.coordinator == COORD and not look.finding
    assert look.start(0.5) is None and look.deadline() is None  # known: nothing to find


def test_a_retriable_error_backs_off_and_a_fatal_one_is_given_back() -> None:
    look = lookup()
    assert look.start(0.0) is not None
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert look.on_answer(newest(FIND), find_answer(code), 0.0) == 0
    retry_at = look.deadline()
    assert look.coordinator is None and retry_at is not None and retry_at > 0.0
    assert look.start(retry_at - 0.01) is None  # still backing off
    assert look.start(retry_at) is not None
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert look.on_answer(newest(FIND), find_answer(code), retry_at) == code


def test_the_lookup_says_why_no_coordinator_is_known_until_one_is() -> None:
    look = lookup()
    assert look.problem is None
    assert look.start(0.0) is not None
    look.on_answer(newest(FIND), find_answer(ErrorCode.COORDINATOR_NOT_AVAILABLE), 0.0)
    assert str(look.problem) == "[COORDINATOR_NOT_AVAILABLE (15)] FindCoordinator for group 'g'"
    retry_at = look.deadline()
    assert retry_at is not None and look.start(retry_at) is not None
    look.on_failure(retry_at, TimeoutError("no answer"))
    assert str(look.problem) == "no answer"
    retry_at = look.deadline()
    assert retry_at is not None and look.start(retry_at) is not None
    look.on_answer(newest(FIND), find_answer(), retry_at)
    assert look.coordinator == COORD and look.problem is None


def test_only_the_coordinator_known_now_is_forgotten() -> None:
    look = lookup()
    look.start(0.0)
    look.on_answer(newest(FIND), find_answer(), 0.0)
    old = COORD
    look.lost(old, 1.0)
    assert look.coordinator is None and look.deadline() == 1.0  # look again at once
    newer = (6, "127.0.0.1", 9093)
    look.start(1.0)
    look.on_answer(newest(FIND), find_answer(coordinator=newer), 1.0)
    look.lost(old, 2.0)  # a late failure of a request to the old coordinator
    assert look.coordinator == newer
    look.lost(None, 2.0)  # a request to any broker has no coordinator to forget
    assert look.coordinator == newer


# -- max.poll.interval.ms -----------------------------------------------------------------------


def test_the_poll_interval_runs_only_outside_every_poll() -> None:
    timer = PollTimer(0.2, 0.1)
    assert timer.deadline() == 0.1 + 0.2
    # Expired at the very deadline the driver sleeps until (0.1 + 0.2 is not 0.3 in binary).
    assert timer.expired(timer.deadline() or 0.0) and not timer.expired(0.29)
    assert timer.started(1.0) is False
    assert timer.started(1.5) is False  # a second, overlapping poll
    timer.ended(2.0)
    assert timer.deadline() is None and not timer.expired(100.0)  # one poll is still on
    timer.ended(3.0)
    assert timer.deadline() == 3.0 + 0.2


def test_the_next_poll_ends_the_wait_of_a_member_that_left() -> None:
    timer = PollTimer(5.0, 0.0)
    timer.awaiting_poll = True
    assert timer.started(7.0) is True and not timer.awaiting_poll
    timer.ended(7.5)
    assert timer.started(8.0) is False


# -- the commit queue ---------------------------------------------------------------------------


class Queue:
    def __init__(self, **kw: Any) -> None:
        self.out: list[Output] = []
        config = MembershipConfig(group_id="g", commit_timeout=10.0, **kw)
        self.q = CommitQueue(config, random.Random(5), self.out.append)

    def sent(self) -> list[GroupRequest]:
        return [o for o in self.out if isinstance(o, GroupRequest)]

    def done(self) -> list[CommitDone]:
        return [o for o in self.out if isinstance(o, CommitDone)]


def commit_answer(request: GroupRequest, code: int) -> Any:
    assert request.commit is not None
    return answered(COMMIT, commit_response(request.commit.offsets, code))


def test_commits_leave_one_at_a_time_in_call_order_with_the_generation() -> None:
    h = Queue(instance_id="static-1")
    h.q.add({TP("t", 0): 5}, "first", 0.0)
    h.q.add({TP("t", 0): 9}, "second", 0.0)
    h.q.send_due(0.0, None, 3, "m1")
    assert h.sent() == []  # no coordinator
    h.q.send_due(0.0, COORD, 3, "m1")
    h.q.send_due(0.0, COORD, 3, "m1")
    (first,) = h.sent()
    body = on_the_wire(COMMIT, first.build)
    assert (body.generation_id_or_member_epoch, body.member_id) == (3, "m1")
    assert body.group_instance_id == "static-1"
    assert [p.committed_offset for t in body.topics for p in t.partitions] == [5]
    assert h.q.on_answer(first, commit_answer(first, 0), 0.1) is None
    h.q.send_due(0.1, COORD, 3, "m1")
    second = h.sent()[1]
    assert h.q.on_answer(second, commit_answer(second, 0), 0.2) is None
    assert [(d.cookie, d.error) for d in h.done()] == [("first", None), ("second", None)]
    assert not h.q.queued and h.q.deadline(True) is None


def test_a_commit_the_rebalance_refuses_fails_and_says_why() -> None:
    h = Queue()
    h.q.add({TP("t", 1): 2}, "c", 0.0)
    h.q.send_due(0.0, COORD, 4, "m1")
    (request,) = h.sent()
    code = ErrorCode.REBALANCE_IN_PROGRESS
    assert h.q.on_answer(request, commit_answer(request, code), 0.1) is Action.REJOIN
    (done,) = h.done()
    assert isinstance(done.error, CommitFailedError) and done.error.code == code


def test_a_retried_commit_ends_at_its_deadline() -> None:
    h = Queue()
    h.q.add({TP("t", 0): 1}, "c", 0.0)
    now = 0.0
    while not h.done():
        assert now < 30.0
        h.q.send_due(now, COORD, -1, "")
        if h.q.in_flight is not None:
            request = h.sent()[-1]
            code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            assert h.q.on_answer(request, commit_answer(request, code), now) is Action.RETRY
        at = h.q.deadline(True)
        now = max(now, at) if at is not None else now
    (done,) = h.done()
    assert done.error is not None and done.error.code == ErrorCode.REQUEST_TIMED_OUT
    assert now >= 10.0 and len(h.sent()) > 1 and not h.q.queued


# -- the leader's step --------------------------------------------------------------------------


def test_the_leader_assigns_a_member_it_cannot_read_nothing() -> None:
    member = jg.JoinGroupResponse.JoinGroupResponseMember
    members = [
        member(member_id="a", metadata=encode_subscription(["t"])),
        member(member_id="b", metadata=b"\x00\x03\xff"),  # cut short
        member(member_id="c", metadata=encode_subscription(["t", "u"])),
    ]
    leading = LeaderAssignment.from_join(members)
    assert leading.topics == {"t", "u"}
    plan = {m: decode_assignment(a) for m, a in leading.assignments("range", {"t": 4}).items()}
    assert plan["b"] == set()
    assert plan["a"] | plan["c"] == {TP("t", i) for i in range(4)}
    assert plan["a"] and plan["c"] and not plan["a"] & plan["c"]
