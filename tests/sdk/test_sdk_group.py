"""Group protocol decisions and request builders (no sockets)."""

from __future__ import annotations

import pytest

from trafka.codec import ErrorCode, RequestHeader, decode_request, encode_request, encode_response
from trafka.codec.messages import k09_offset_fetch as of
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.sdk.connection_state import CLIENT_VERSIONS
from trafka.sdk.fetcher import TopicPartition as TP
from trafka.sdk.group import (
    Action,
    classify,
    find_coordinator_request,
    offset_commit_request,
    offset_fetch_request,
    read_find_coordinator,
    read_offset_fetch,
)


@pytest.mark.parametrize(
    ("code", "action"),
    [
        (ErrorCode.NONE, Action.OK),
        (ErrorCode.REBALANCE_IN_PROGRESS, Action.REJOIN),
        (ErrorCode.UNKNOWN_MEMBER_ID, Action.RESET),
        (ErrorCode.ILLEGAL_GENERATION, Action.RESET),
        (ErrorCode.NOT_COORDINATOR, Action.REDISCOVER),
        (ErrorCode.COORDINATOR_NOT_AVAILABLE, Action.REDISCOVER),
        (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, Action.RETRY),
        (ErrorCode.FENCED_INSTANCE_ID, Action.FATAL),
        (ErrorCode.GROUP_AUTHORIZATION_FAILED, Action.FATAL),
        (9999, Action.FATAL),
    ],
)
def test_classify(code: int, action: Action) -> None:
    assert classify(code) is action


def _round_trip(key: int, version: int, body: object) -> object:
    frame = encode_request(
        RequestHeader(request_api_key=key, request_api_version=version, correlation_id=1), body
    )
    return decode_request(frame[4:])[1]


@pytest.mark.parametrize("version", range(CLIENT_VERSIONS[8][0], CLIENT_VERSIONS[8][1] + 1))
def test_offset_commit_every_version(version: int) -> None:
    body = offset_commit_request(
        version, "g", {TP("t", 1): 5, TP("t", 0): 3}, generation=2, member_id="m", instance_id="i"
    )
    back = _round_trip(8, version, body)
    assert [(p.partition_index, p.committed_offset) for p in back.topics[0].partitions] == [
        (0, 3),
        (1, 5),
    ]


@pytest.mark.parametrize("version", range(CLIENT_VERSIONS[9][0], CLIENT_VERSIONS[9][1] + 1))
def test_offset_fetch_every_version(version: int) -> None:
    body = offset_fetch_request(version, "g", [TP("t", 0)])
    _round_trip(9, version, body)
    R = of.OffsetFetchResponse
    if version >= 8:
        resp = R(
            groups=[
                R.OffsetFetchResponseGroup(
                    group_id="g",
                    topics=[
                        R.OffsetFetchResponseTopics(
                            name="t",
                            partitions=[
                                R.OffsetFetchResponsePartitions(
                                    partition_index=0, committed_offset=7
                                )
                            ],
                        )
                    ],
                )
            ]
        )
    else:
        resp = R(
            topics=[
                R.OffsetFetchResponseTopic(
                    name="t",
                    partitions=[
                        R.OffsetFetchResponsePartition(partition_index=0, committed_offset=7)
                    ],
                )
            ]
        )
    encode_response(1, 9, version, resp)
    assert read_offset_fetch(version, resp) == (0, {TP("t", 0): 7})


@pytest.mark.parametrize("version", range(CLIENT_VERSIONS[10][0], CLIENT_VERSIONS[10][1] + 1))
def test_find_coordinator_every_version(version: int) -> None:
    back = _round_trip(10, version, find_coordinator_request(version, "g"))
    if version >= 4:
        assert back.coordinator_keys == ["g"]
        resp = fc.FindCoordinatorResponse(
            coordinators=[
                fc.FindCoordinatorResponse.Coordinator(key="g", node_id=3, host="h", port=9)
            ]
        )
    else:
        assert back.key == "g"
        resp = fc.FindCoordinatorResponse(node_id=3, host="h", port=9)
    assert read_find_coordinator(version, resp) == (0, 3, "h", 9)


@pytest.mark.parametrize("key", [11, 12, 13, 14])
def test_membership_requests_every_version(key: int) -> None:
    from trafka.sdk.group import (
        heartbeat_request,
        join_group_request,
        leave_group_request,
        sync_group_request,
    )

    lo, hi = CLIENT_VERSIONS[key]
    for version in range(lo, hi + 1):
        if key == 11:
            body = join_group_request(
                version,
                "g",
                "m",
                "inst",
                session_timeout_ms=10_000,
                rebalance_timeout_ms=20_000,
                protocols=[("range", b"md")],
            )
            back = _round_trip(key, version, body)
            assert back.protocols[0].name == "range" and back.protocols[0].metadata == b"md"
            assert back.rebalance_timeout_ms == (20_000 if version >= 1 else -1)
            assert back.group_instance_id == ("inst" if version >= 5 else None)
        elif key == 12:
            back = _round_trip(key, version, heartbeat_request(version, "g", 3, "m", None))
            assert (back.generation_id, back.member_id) == (3, "m")
        elif key == 13:
            back = _round_trip(key, version, leave_group_request(version, "g", "m"))
            ids = [m.member_id for m in back.members] if version >= 3 else [back.member_id]
            assert ids == ["m"]
        else:
            back = _round_trip(
                key, version, sync_group_request(version, "g", 3, "m", None, "range", {"m": b"a"})
            )
            assert [(a.member_id, a.assignment) for a in back.assignments] == [("m", b"a")]
