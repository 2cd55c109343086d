"""The share group membership state machine (:mod:`trafka.sdk.share_membership`),
without I/O: joining at epoch 0 with a client-made member id, heartbeats with
only what changed, the coordinator's assignment applied at once (topic ids
named through metadata), fencing, coordinator errors, leaving with epoch -1
and the poll interval."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from trafka.codec import ApiKey, ErrorCode, UnsupportedVersionError
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k76_share_group_heartbeat as sgh
from trafka.sdk.fetcher import TopicPartition
from trafka.sdk.share_membership import (
    AssignmentChanged,
    Fatal,
    NeedMetadata,
    ShareGroupRequest,
    ShareMembership,
    ShareMembershipConfig,
    kafka_uuid,
)

R = sgh.ShareGroupHeartbeatResponse
T = uuid.UUID(int=7)
CONFIG = ShareMembershipConfig(group_id="g", rack="r1", max_poll_interval=60.0)


def answer(epoch: int = 1, parts: dict[uuid.UUID, list[int]] | None = None, **kw: Any) -> Any:
    assignment = None
    if parts is not None:
        assignment = R.Assignment(
            topic_partitions=[R.TopicPartitions(topic_id=t, partitions=p) for t, p in parts.items()]
        )
    kw.setdefault("heartbeat_interval_ms", 1000)
    return R(member_epoch=epoch, assignment=assignment, **kw)


def requests(outputs: list[Any]) -> list[ShareGroupRequest]:
    return [o for o in outputs if isinstance(o, ShareGroupRequest)]


def body(request: ShareGroupRequest) -> Any:
    return request.build(1)


def joined(now: float = 0.0, parts: dict[uuid.UUID, list[int]] | None = None) -> ShareMembership:
    """A member with a coordinator, joined at epoch 1 (its join answered with ``parts``)."""
    m = ShareMembership(CONFIG, now)
    m.set_topic_names({T: "q"})
    m.set_subscription(["q"], now)
    [find] = requests(m.outputs(now))
    m.on_response(
        find,
        6,
        fc.FindCoordinatorResponse(
            coordinators=[
                fc.FindCoordinatorResponse.Coordinator(key="g", node_id=3, host="h", port=9)
            ]
        ),
        now,
    )
    [join] = requests(m.outputs(now))
    m.on_response(join, 1, answer(1, parts if parts is not None else {T: [0, 1]}), now)
    assert m.outputs(now) == [AssignmentChanged(m.assignment)]
    return m


def test_the_member_names_itself_as_kafka_writes_uuids() -> None:
    m = ShareMembership(CONFIG, 0.0)
    assert len(m.member_id) == 22
    assert len(base64.urlsafe_b64decode(m.member_id + "==")) == 16
    known = uuid.UUID("00000000-0000-0000-0000-000000000001")
    assert kafka_uuid(known) == "AAAAAAAAAAAAAAAAAAAAAQ"


def test_nothing_happens_before_a_subscription() -> None:
    m = ShareMembership(CONFIG, 0.0)
    assert m.outputs(0.0) == [] and m.next_deadline() is None


def test_join_finds_the_coordinator_then_heartbeats_at_epoch_0_with_everything() -> None:
    m = ShareMembership(CONFIG, 0.0)
    m.set_subscription(["q", "p"], 0.0)
    [find] = requests(m.outputs(0.0))
    assert find.api_key == ApiKey.FIND_COORDINATOR and find.coordinator is None
    assert find.build(6).coordinator_keys == ["g"] and find.build(6).key_type == 0
    m.on_response(
        find,
        6,
        fc.FindCoordinatorResponse(
            coordinators=[
                fc.FindCoordinatorResponse.Coordinator(key="g", node_id=3, host="h", port=9)
            ]
        ),
        0.0,
    )
    [join] = requests(m.outputs(0.0))
    assert join.api_key == ApiKey.SHARE_GROUP_HEARTBEAT and join.coordinator == (3, "h", 9)
    b = body(join)
    assert (b.group_id, b.member_id, b.member_epoch) == ("g", m.member_id, 0)
    assert b.subscribed_topic_names == ["p", "q"] and b.rack_id == "r1"


def test_the_assignment_applies_at_once_named_through_metadata() -> None:
    m = ShareMembership(CONFIG, 0.0)
    m.set_subscription(["q"], 0.0)
    [find] = requests(m.outputs(0.0))
    m.on_response(find, 0, fc.FindCoordinatorResponse(node_id=3, host="h", port=9), 0.0)
    [join] = requests(m.outputs(0.0))
    m.on_response(join, 1, answer(5, {T: [0, 2]}), 0.0)
    assert m.epoch == 5
    # The id is unknown: ask for metadata, assign once it names the topic.
    assert NeedMetadata() in m.outputs(0.0)
    m.set_topic_names({T: "q"})
    assert m.outputs(0.0) == [
        AssignmentChanged(frozenset({TopicPartition("q", 0), TopicPartition("q", 2)}))
    ]


def test_later_heartbeats_carry_only_what_changed() -> None:
    m = joined()
    assert m.assignment == {TopicPartition("q", 0), TopicPartition("q", 1)}
    assert requests(m.outputs(0.5)) == []  # the interval is 1 s
    [hb] = requests(m.outputs(1.0))
    b = body(hb)
    assert b.member_epoch == 1 and b.subscribed_topic_names is None and b.rack_id is None
    m.on_response(hb, 1, answer(1, None), 1.0)  # null assignment: unchanged
    assert m.outputs(1.0) == [] and len(m.assignment) == 2
    m.set_subscription(["q", "z"], 1.2)
    [now] = requests(m.outputs(1.2))  # a new subscription goes at once
    assert body(now).subscribed_topic_names == ["q", "z"]


def test_a_new_assignment_replaces_the_old_one() -> None:
    m = joined()
    [hb] = requests(m.outputs(1.0))
    m.on_response(hb, 1, answer(2, {T: [1]}), 1.0)
    assert m.outputs(1.0) == [AssignmentChanged(frozenset({TopicPartition("q", 1)}))]
    assert m.epoch == 2


def test_fenced_or_unknown_members_lose_their_assignment_and_rejoin_as_themselves() -> None:
    for code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
        m = joined()
        member = m.member_id
        [hb] = requests(m.outputs(1.0))
        m.on_response(hb, 1, R(error_code=code), 1.0)
        out = m.outputs(1.0)
        assert AssignmentChanged(frozenset()) in out
        [rejoin] = requests(out)
        b = body(rejoin)
        assert (b.member_id, b.member_epoch, b.subscribed_topic_names) == (member, 0, ["q"])
        assert b.rack_id == "r1"


def test_coordinator_errors_find_it_again_or_back_off() -> None:
    m = joined()
    [hb] = requests(m.outputs(1.0))
    m.on_response(hb, 1, R(error_code=ErrorCode.NOT_COORDINATOR), 1.0)
    [find] = requests(m.outputs(1.0))
    assert find.api_key == ApiKey.FIND_COORDINATOR
    m = joined()
    [hb] = requests(m.outputs(1.0))
    m.on_response(hb, 1, R(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), 1.0)
    assert requests(m.outputs(1.0)) == []
    deadline = m.next_deadline()
    assert deadline is not None and 1.0 < deadline < 2.0
    [again] = requests(m.outputs(deadline))
    assert again.api_key == ApiKey.SHARE_GROUP_HEARTBEAT


def test_a_lost_connection_forgets_the_coordinator_and_resends_everything() -> None:
    m = joined()
    [hb] = requests(m.outputs(1.0))
    m.on_failure(hb, ConnectionError("gone"), 1.0)
    [find] = requests(m.outputs(1.0))
    assert find.api_key == ApiKey.FIND_COORDINATOR
    m.on_response(find, 0, fc.FindCoordinatorResponse(node_id=3, host="h", port=9), 1.0)
    [next_hb] = requests(m.outputs(5.0))
    assert body(next_hb).subscribed_topic_names == ["q"] and body(next_hb).rack_id == "r1"


def test_errors_no_retry_fixes_are_fatal() -> None:
    m = joined()
    [hb] = requests(m.outputs(1.0))
    m.on_response(hb, 1, R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED), 1.0)
    out = m.outputs(1.0)
    fatal = [o for o in out if isinstance(o, Fatal)]
    assert fatal and fatal[0].error.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert m.fatal is fatal[0].error and m.next_deadline() is None


def test_a_coordinator_without_share_groups_is_fatal_and_says_so() -> None:
    m = ShareMembership(CONFIG, 0.0)
    m.set_subscription(["q"], 0.0)
    [find] = requests(m.outputs(0.0))
    m.on_response(find, 0, fc.FindCoordinatorResponse(node_id=3, host="h", port=9), 0.0)
    [join] = requests(m.outputs(0.0))
    m.on_failure(join, UnsupportedVersionError("no ShareGroupHeartbeat"), 0.0)
    [fatal] = [o for o in m.outputs(0.0) if isinstance(o, Fatal)]
    assert "KIP-932" in str(fatal.error)


def test_leaving_sends_epoch_minus_1() -> None:
    m = joined()
    leave = m.leave(1.0)
    assert leave is not None and body(leave).member_epoch == -1
    assert body(leave).member_id == m.member_id
    assert m.outputs(2.0) == [AssignmentChanged(frozenset())] and m.next_deadline() is None


def test_unsubscribing_leaves_and_subscribing_joins_again() -> None:
    m = joined()
    m.set_subscription([], 1.0)
    out = m.outputs(1.0)
    [leave] = requests(out)
    assert body(leave).member_epoch == -1
    assert AssignmentChanged(frozenset()) in out
    m.set_subscription(["q"], 2.0)
    [join] = requests(m.outputs(2.0))
    assert body(join).member_epoch == 0


def test_a_member_that_stops_polling_leaves_and_rejoins_at_its_next_poll() -> None:
    m = joined()
    m.poll_started(0.0)
    m.poll_ended(10.0)
    for t in (11.0, 12.0):  # heartbeats go on while the application works
        for r in requests(m.outputs(t)):
            m.on_response(r, 1, answer(1, None), t)
    assert m.next_deadline() is not None and m.next_deadline() <= 70.0
    out = m.outputs(70.0)
    [leave] = requests(out)
    assert body(leave).member_epoch == -1 and AssignmentChanged(frozenset()) in out
    assert requests(m.outputs(100.0)) == []
    assert m.poll_started(100.0)
    [join] = requests(m.outputs(100.0))
    assert body(join).member_epoch == 0


def test_answers_overtaken_by_a_rejoin_are_ignored() -> None:
    m = joined()
    [hb] = requests(m.outputs(1.0))
    m.set_subscription([], 1.0)
    m.outputs(1.0)
    m.on_response(hb, 1, answer(9, {T: [0]}), 1.0)
    assert m.assignment == frozenset() and m.epoch == 0
