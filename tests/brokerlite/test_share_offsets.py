"""Share-group offsets admin (keys 90-92) through brokerlite's sans-IO core:
DescribeShareGroupOffsets (start offsets, KIP-1226 lag), AlterShareGroupOffsets
(only while the group is empty, offsets checked against the log, a fresh
share-partition at the new offset, an unknown group created) and
DeleteShareGroupOffsets (whole topics forgotten, the next member starts by
share.auto.offset.reset); their journal entries across restarts."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from test_share_fetch import (
    ACCEPT,
    GROUP,
    RELEASE,
    Session,
    create,
    delivered,
    partitions_of,
    produce_values,
)

from trafka.brokerlite.shares.fetcher import ShareStateError, ShareStateStore
from trafka.brokerlite.shares.partition import ACQUIRED, ARCHIVED, SharePartition
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k08_offset_commit as oc
from trafka.codec.messages import k11_join_group as jg
from trafka.codec.messages import k21_delete_records as dr
from trafka.codec.messages import k42_delete_groups as dlg
from trafka.codec.messages import k76_share_group_heartbeat as hb
from trafka.codec.messages import k90_describe_share_group_offsets as dso
from trafka.codec.messages import k91_alter_share_group_offsets as aso
from trafka.codec.messages import k92_delete_share_group_offsets as dlo

NULL = uuid.UUID(int=0)


# -- helpers ---------------------------------------------------------------------------------


def earliest(core: Any, group: str = GROUP) -> None:
    core.broker.share_groups.alter_configs(
        group, {"share.auto.offset.reset": "earliest"}, incremental=True
    )


def heartbeat(core: Any, member: str, epoch: int, topics: list[str], group: str = GROUP) -> Any:
    body = hb.ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics
    )
    response = core.call(76, 1, body)
    assert response.error_code == 0, response
    return response


def describe(
    core: Any,
    group: str = GROUP,
    topics: dict[str, list[int]] | None = None,
    *,
    version: int = 1,
) -> Any:
    """The answer for one group: ``{(topic, partition): (start, lag, epoch, error)}`` and the
    group's (error, message, topic ids)."""
    Q = dso.DescribeShareGroupOffsetsRequest
    body = Q(
        groups=[
            Q.DescribeShareGroupOffsetsRequestGroup(
                group_id=group,
                topics=None
                if topics is None
                else [
                    Q.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                    for t, ps in topics.items()
                ],
            )
        ]
    )
    (g,) = core.call(90, version, body).groups
    assert g.group_id == group
    return g


def offsets_of(g: Any) -> dict[tuple[str, int], tuple[int, int]]:
    assert g.error_code == 0, g
    out = {}
    for t in g.topics:
        for p in t.partitions:
            assert p.error_code == 0 and p.leader_epoch == 0, p
            out[(t.topic_name, p.partition_index)] = (p.start_offset, p.lag)
    return out


def alter(core: Any, offsets: dict[str, dict[int, int]], group: str = GROUP) -> Any:
    Q = aso.AlterShareGroupOffsetsRequest
    body = Q(
        group_id=group,
        topics=[
            Q.AlterShareGroupOffsetsRequestTopic(
                topic_name=t,
                partitions=[
                    Q.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o)
                    for p, o in ps.items()
                ],
            )
            for t, ps in offsets.items()
        ],
    )
    return core.call(91, 0, body)


def alter_codes(response: Any) -> dict[tuple[str, int], int]:
    assert response.error_code == 0, response
    return {
        (t.topic_name, p.partition_index): p.error_code
        for t in response.responses
        for p in t.partitions
    }


def delete(core: Any, topics: list[str], group: str = GROUP) -> Any:
    Q = dlo.DeleteShareGroupOffsetsRequest
    body = Q(
        group_id=group, topics=[Q.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics]
    )
    return core.call(92, 0, body)


def ten_records_four_accepted(core: Any, make_batch: Any) -> tuple[uuid.UUID, Session]:
    """Ten records in "q"; member "m" holds them all and has accepted 0-3."""
    tid = create(core, "q")
    earliest(core)
    produce_values(core, make_batch, "q", [b"%d" % i for i in range(10)])
    heartbeat(core, "m", 0, ["q"])
    session = Session(core, "m")
    got = delivered(partitions_of(session.fetch([(tid, 0)]))[(tid, 0)])
    assert [o for o, _, _ in got] == list(range(10))
    assert session.ack({(tid, 0): [(0, 3, [ACCEPT])]}).error_code == 0
    return tid, session


def close_and_leave(core: Any, session: Session) -> None:
    """The member closes its share session (releasing what it holds) and leaves."""
    response = core.call(
        79, 1, _final_ack(session.member), conn_id=session.conn_id
    )  # ShareAcknowledge at epoch -1
    assert response.error_code == 0
    heartbeat(core, session.member, -1, ["q"])


def classic_group(core: Any, group: str) -> None:
    """A classic group without members: the one an admin's offset commit makes."""
    commit = oc.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            oc.OffsetCommitRequest.OffsetCommitRequestTopic(
                name="q",
                partitions=[
                    oc.OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=0
                    )
                ],
            )
        ],
    )
    assert core.call(8, 9, commit).topics[0].partitions[0].error_code == 0
    assert core.broker.groups.group(group) is not None


def _final_ack(member: str) -> Any:
    from trafka.codec.messages import k79_share_acknowledge as sa

    return sa.ShareAcknowledgeRequest(group_id=GROUP, member_id=member, share_session_epoch=-1)


# -- DescribeShareGroupOffsets ---------------------------------------------------------------


def test_describe_reports_the_start_offset_and_the_lag(core: Any, make_batch: Any) -> None:
    tid, session = ten_records_four_accepted(core, make_batch)
    # 4-9 acquired and not acknowledged: still lag, as in Kafka.
    g = describe(core, topics={"q": [0]})
    assert offsets_of(g) == {("q", 0): (4, 6)}
    assert g.topics[0].topic_id == tid
    # Accepting 6-7 leaves the start offset at 4 and takes them off the lag.
    assert session.ack({(tid, 0): [(6, 7, [ACCEPT])]}).error_code == 0
    assert offsets_of(describe(core)) == {("q", 0): (4, 4)}
    # Version 0 has no lag: the field decodes to its spec default, -1 ("unknown").
    assert offsets_of(describe(core, version=0)) == {("q", 0): (4, -1)}
    # New records are lag as soon as they are in the log.
    produce_values(core, make_batch, "q", [b"10", b"11"])
    assert offsets_of(describe(core)) == {("q", 0): (4, 6)}


def test_describe_every_partition_with_state_or_the_ones_named(core: Any, make_batch: Any) -> None:
    create(core, "a", partitions=2)
    create(core, "b")
    produce_values(core, make_batch, "a", [b"x", b"y"], partition=1)
    heartbeat(core, "m", 0, ["a", "b"])  # latest: every partition starts at its end
    assert offsets_of(describe(core)) == {("a", 0): (0, 0), ("a", 1): (2, 0), ("b", 0): (0, 0)}
    named = describe(core, topics={"b": [0, 5, -1], "nope": [0], "a": [1]})
    assert [t.topic_name for t in named.topics] == ["b", "nope", "a"]  # the order asked
    assert offsets_of(named) == {
        ("b", 0): (0, 0),
        ("b", 5): (-1, -1),  # no such partition: no state, no error (as Kafka)
        ("b", -1): (-1, -1),
        ("nope", 0): (-1, -1),
        ("a", 1): (2, 0),
    }
    assert named.topics[1].topic_id == NULL


def test_describe_groups_without_state(core: Any, make_batch: Any) -> None:
    create(core, "q")
    # A group that does not exist: no error (Kafka does not say GROUP_ID_NOT_FOUND).
    assert offsets_of(describe(core, "ghost")) == {}
    assert offsets_of(describe(core, "ghost", {"q": [0]})) == {("q", 0): (-1, -1)}
    # A classic group holds no share state.
    classic_group(core, "classic")
    assert offsets_of(describe(core, "classic", {"q": [0]})) == {("q", 0): (-1, -1)}
    empty = describe(core, "")
    assert empty.error_code == ErrorCode.INVALID_GROUP_ID and empty.topics == []


def test_several_groups_in_one_request(core: Any, make_batch: Any) -> None:
    create(core, "q")
    heartbeat(core, "m", 0, ["q"])
    Q = dso.DescribeShareGroupOffsetsRequest
    body = Q(
        groups=[
            Q.DescribeShareGroupOffsetsRequestGroup(group_id=GROUP, topics=None),
            Q.DescribeShareGroupOffsetsRequestGroup(group_id="", topics=None),
            Q.DescribeShareGroupOffsetsRequestGroup(group_id="other", topics=None),
        ]
    )
    answer = core.call(90, 1, body)
    assert [(g.group_id, g.error_code, len(g.topics)) for g in answer.groups] == [
        (GROUP, 0, 1),
        ("", ErrorCode.INVALID_GROUP_ID, 0),
        ("other", 0, 0),
    ]


# -- AlterShareGroupOffsets ------------------------------------------------------------------


def test_alter_only_while_the_group_is_empty(core: Any, make_batch: Any) -> None:
    _, session = ten_records_four_accepted(core, make_batch)
    refused = alter(core, {"q": {0: 8}})
    assert refused.error_code == ErrorCode.NON_EMPTY_GROUP and refused.responses == []
    assert "member" in refused.error_message
    assert offsets_of(describe(core)) == {("q", 0): (4, 6)}  # unchanged
    close_and_leave(core, session)
    assert alter_codes(alter(core, {"q": {0: 8}})) == {("q", 0): 0}


def test_alter_starts_the_share_partition_afresh(core: Any, make_batch: Any) -> None:
    tid, session = ten_records_four_accepted(core, make_batch)
    close_and_leave(core, session)  # 4-9 released, delivered once
    assert alter_codes(alter(core, {"q": {0: 8}})) == {("q", 0): 0}
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert (sp.start_offset, sp.end_offset, sp.runs()) == (8, 8, [])
    assert offsets_of(describe(core)) == {("q", 0): (8, 2)}
    # The next member gets only 8 and 9, delivered for the first time.
    heartbeat(core, "n", 0, ["q"])
    n = Session(core, "n", conn_id=2)
    got = delivered(partitions_of(n.fetch([(tid, 0)]))[(tid, 0)])
    assert got == [(8, b"8", 1), (9, b"9", 1)]
    assert n.ack({(tid, 0): [(8, 9, [ACCEPT])]}).error_code == 0
    close_and_leave(core, n)
    # Back to 2: the accepted records are delivered again, as new.
    assert alter_codes(alter(core, {"q": {0: 2}})) == {("q", 0): 0}
    assert offsets_of(describe(core)) == {("q", 0): (2, 8)}
    heartbeat(core, "o", 0, ["q"])
    o = Session(core, "o", conn_id=3)
    got = delivered(partitions_of(o.fetch([(tid, 0)]))[(tid, 0)])
    assert [(off, count) for off, _, count in got] == [(i, 1) for i in range(2, 10)]


def test_alter_checks_offsets_against_the_log(core: Any, make_batch: Any) -> None:
    tid = create(core, "q", partitions=2)
    produce_values(core, make_batch, "q", [b"%d" % i for i in range(10)])
    deleted = core.call(
        21,
        2,
        dr.DeleteRecordsRequest(
            topics=[
                dr.DeleteRecordsRequest.DeleteRecordsTopic(
                    name="q",
                    partitions=[
                        dr.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=3)
                    ],
                )
            ],
            timeout_ms=1000,
        ),
    )
    assert deleted.topics[0].partitions[0].error_code == 0
    answer = alter(core, {"q": {0: 1, 1: 0, 2: 0, -1: 0}, "nope": {0: 0}})
    assert alter_codes(answer) == {
        ("q", 0): 0,
        ("q", 1): 0,
        ("q", 2): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("q", -1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert [(t.topic_name, t.topic_id) for t in answer.responses] == [("q", tid), ("nope", NULL)]
    # Below the log start: it starts at the log start, where a fetch would move it.
    assert offsets_of(describe(core, topics={"q": [0, 1]})) == {("q", 0): (3, 7), ("q", 1): (0, 0)}
    bad = alter(core, {"q": {0: -1, 1: 1}})
    assert alter_codes(bad) == {
        ("q", 0): ErrorCode.INVALID_REQUEST,
        ("q", 1): ErrorCode.OFFSET_OUT_OF_RANGE,  # partition 1 holds nothing
    }
    messages = {p.partition_index: p.error_message for p in bad.responses[0].partitions}
    assert "negative" in messages[0] and "past the log end offset 0" in messages[1]
    assert alter_codes(alter(core, {"q": {0: 10}})) == {("q", 0): 0}  # the log end is fine
    assert offsets_of(describe(core, topics={"q": [0]})) == {("q", 0): (10, 0)}
    # The failed entries changed nothing.
    assert offsets_of(describe(core, topics={"q": [1]})) == {("q", 1): (0, 0)}


def test_alter_refusals_of_the_whole_group(core: Any) -> None:
    create(core, "q")
    classic_group(core, "classic")
    other = alter(core, {"q": {0: 0}}, group="classic")
    assert other.error_code == ErrorCode.GROUP_ID_NOT_FOUND and other.responses == []
    assert "not a share group" in other.error_message
    assert not core.broker.share_groups.is_share_group("classic")
    empty = alter(core, {"q": {0: 0}}, group="")
    assert empty.error_code == ErrorCode.INVALID_GROUP_ID


def test_alter_creates_an_empty_share_group(open_core: Any, make_batch: Any) -> None:
    core = open_core()
    create(core, "q")
    produce_values(core, make_batch, "q", [b"a", b"b", b"c"])
    assert alter_codes(alter(core, {"q": {0: 1}}, group="new")) == {("q", 0): 0}
    groups = core.broker.share_groups
    assert groups.is_share_group("new") and groups.groups["new"].state == "Empty"
    # The id is a share group's now: the classic protocol is refused on it.
    join = jg.JoinGroupRequest(
        group_id="new",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[jg.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    assert core.call(11, 5, join).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # Group and offset are durable.
    core.broker.close()
    core = open_core()
    assert core.broker.share_groups.is_share_group("new")
    assert offsets_of(describe(core, "new")) == {("q", 0): (1, 2)}
    # A member of the new group starts where the offset says, not at the log end.
    tid = core.broker.logs.topic("q").topic_id
    heartbeat(core, "m", 0, ["q"], group="new")
    got = partitions_of(core.call(78, 1, _fetch("new", "m", tid)))[(tid, 0)]
    assert [o for o, _, _ in delivered(got)] == [1, 2]


def _fetch(group: str, member: str, tid: uuid.UUID) -> Any:
    from test_share_fetch import fetch_request

    return fetch_request(member, 0, [(tid, 0)], group=group)


def test_a_storage_failure_changes_nothing(core: Any, make_batch: Any, monkeypatch: Any) -> None:
    _, session = ten_records_four_accepted(core, make_batch)
    close_and_leave(core, session)
    store = core.broker.shares._store

    def broken(entries: list[dict[str, Any]]) -> None:
        raise ShareStateError("disk on fire")

    monkeypatch.setattr(store, "write", broken)
    answer = alter(core, {"q": {0: 8}})
    assert alter_codes(answer) == {("q", 0): ErrorCode.KAFKA_STORAGE_ERROR}
    assert "disk on fire" in answer.responses[0].partitions[0].error_message
    gone = delete(core, ["q"])
    assert [(t.topic_name, t.error_code) for t in gone.responses] == [
        ("q", ErrorCode.KAFKA_STORAGE_ERROR)
    ]
    monkeypatch.undo()
    assert offsets_of(describe(core)) == {("q", 0): (4, 6)}


# -- DeleteShareGroupOffsets -----------------------------------------------------------------


def test_delete_forgets_whole_topics(core: Any, make_batch: Any) -> None:
    create(core, "q", partitions=2)
    b_id = create(core, "b")
    create(core, "untouched")
    produce_values(core, make_batch, "q", [b"0", b"1", b"2"])
    heartbeat(core, "m", 0, ["q", "b"])
    heartbeat(core, "m", -1, ["q", "b"])
    assert set(offsets_of(describe(core))) == {("q", 0), ("q", 1), ("b", 0)}
    answer = delete(core, ["q", "nope", "untouched", "q"])
    assert answer.error_code == 0
    assert [(t.topic_name, t.error_code) for t in answer.responses] == [
        ("q", 0),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("untouched", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),  # no state to delete
    ]
    assert answer.responses[0].topic_id == core.broker.logs.topic("q").topic_id
    assert answer.responses[1].topic_id == NULL and answer.responses[2].topic_id == NULL
    assert "no offset information" in answer.responses[2].error_message
    assert offsets_of(describe(core)) == {("b", 0): (0, 0)}
    assert offsets_of(describe(core, topics={"q": [0]})) == {("q", 0): (-1, -1)}
    assert core.broker.shares.share_partition(GROUP, "b", 0) is not None
    assert b_id == core.broker.logs.topic("b").topic_id
    # The next member starts the partitions afresh by share.auto.offset.reset.
    earliest(core)
    heartbeat(core, "n", 0, ["q"])
    assert offsets_of(describe(core, topics={"q": [0]})) == {("q", 0): (0, 3)}


def test_delete_refusals_of_the_whole_group(core: Any, make_batch: Any) -> None:
    create(core, "q")
    refused = delete(core, ["q"], group="ghost")
    assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND and refused.responses == []
    assert not core.broker.share_groups.is_share_group("ghost")  # a delete creates nothing
    heartbeat(core, "m", 0, ["q"])
    busy = delete(core, ["q"])
    assert busy.error_code == ErrorCode.NON_EMPTY_GROUP
    assert core.broker.shares.share_partition(GROUP, "q", 0) is not None
    assert delete(core, ["q"], group="").error_code == ErrorCode.INVALID_GROUP_ID


def test_offsets_changes_survive_a_restart(open_core: Any, make_batch: Any) -> None:
    core = open_core()
    create(core, "q", partitions=2)
    produce_values(core, make_batch, "q", [b"0", b"1", b"2"])
    produce_values(core, make_batch, "q", [b"x"], partition=1)
    assert alter_codes(alter(core, {"q": {0: 2, 1: 0}})) == {("q", 0): 0, ("q", 1): 0}
    assert alter_codes(alter(core, {"q": {0: 1}}, group="other")) == {("q", 0): 0}
    core.broker.close()
    core = open_core()
    assert offsets_of(describe(core)) == {("q", 0): (2, 1), ("q", 1): (0, 1)}
    assert [t.error_code for t in delete(core, ["q"]).responses] == [0]
    core.broker.close()
    core = open_core()
    assert offsets_of(describe(core)) == {}
    assert offsets_of(describe(core, "other")) == {("q", 0): (1, 2)}  # another group's state stays
    # DeleteGroups still forgets what is left.
    assert (
        core.call(42, 2, dlg.DeleteGroupsRequest(groups_names=["other"])).results[0].error_code == 0
    )
    assert offsets_of(describe(core, "other")) == {}


# -- the pieces ------------------------------------------------------------------------------


def test_the_journal_replays_dropped_partitions(tmp_path: Path) -> None:
    path = tmp_path / "share.journal"
    entry = {"kind": "partition", "topic_id": "", "start": 5, "runs": []}
    with ShareStateStore(path) as store:
        store.write(
            [
                {**entry, "group": "g", "topic": "t", "partition": 0},
                {**entry, "group": "g", "topic": "t", "partition": 1},
                {**entry, "group": "h", "topic": "t", "partition": 0},
            ]
        )
        store.write([{"kind": "drop_partition", "group": "g", "topic": "t", "partition": 0}])
        assert set(store.partitions()) == {("g", "t", 1), ("h", "t", 0)}
    with ShareStateStore(path) as store:
        assert set(store.partitions()) == {("g", "t", 1), ("h", "t", 0)}
        store.compact()
    with ShareStateStore(path) as store:
        assert set(store.partitions()) == {("g", "t", 1), ("h", "t", 0)}


def test_delivery_complete_count() -> None:
    sp = SharePartition(0)
    from trafka.brokerlite.shares.partition import BatchSpan

    sp.acquire_new("m", [BatchSpan(0, 9)], 10, now_ms=0, lock_ms=1000)
    assert sp.delivery_complete_count() == 0
    assert sp.acknowledge("m", [(2, 3, [ACCEPT]), (5, 5, [3]), (7, 7, [RELEASE])]) == 0
    assert sp.settle((0,), written=True)  # (its write landed)
    assert sp.delivery_complete_count() == 3
    assert sp.state_of(5) is not None and sp.state_of(5)[0] == ARCHIVED
    assert sp.state_of(8) is not None and sp.state_of(8)[0] == ACQUIRED
    # The start offset moves past done records: they leave the count with it.
    assert sp.acknowledge("m", [(0, 1, [ACCEPT])]) == 0
    assert sp.settle((0,), written=True)
    assert (sp.start_offset, sp.delivery_complete_count()) == (4, 1)


@pytest.mark.parametrize("key", [90, 91, 92])
def test_advertised(core: Any, key: int) -> None:
    from trafka.codec.messages import k18_api_versions as av

    response = core.call(18, 3, av.ApiVersionsRequest())
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[key] == {90: (0, 1), 91: (0, 0), 92: (0, 0)}[key]
