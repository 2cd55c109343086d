"""ShareFetch and ShareAcknowledge (keys 78/79) through brokerlite's sans-IO core:
share sessions, acquisition, acknowledgements, locks, waiting and restarts."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

from trafka.brokerlite.outcomes import Parked
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k19_create_topics as create_topics
from trafka.codec.messages import k78_share_fetch as sf
from trafka.codec.messages import k79_share_acknowledge as sa
from trafka.codec.records import decode_batch, iter_batches

GROUP = "queue"
ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0
LOCK_MS = 30_000


def create(core: Any, name: str, partitions: int = 1) -> uuid.UUID:
    body = create_topics.CreateTopicsRequest(
        topics=[
            create_topics.CreateTopicsRequest.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=1
            )
        ]
    )
    response = core.call(19, 7, body)
    assert response.topics[0].error_code == 0
    info = core.broker.logs.topic(name)
    return info.topic_id


def produce_values(
    core: Any, make_batch: Any, topic: str, values: list[bytes], partition: int = 0
) -> None:
    body = produce.ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            produce.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    produce.ProduceRequest.PartitionProduceData(
                        index=partition, records=make_batch(values)
                    )
                ],
            )
        ],
    )
    response = core.call(0, 9, body)
    assert response.responses[0].partition_responses[0].error_code == 0


def fetch_request(
    member: str,
    epoch: int,
    parts: list[tuple[uuid.UUID, int]] = (),  # type: ignore[assignment]
    *,
    acks: dict[tuple[uuid.UUID, int], list[tuple[int, int, list[int]]]] | None = None,
    max_records: int = 500,
    max_wait_ms: int = 0,
    forget: list[tuple[uuid.UUID, int]] = (),  # type: ignore[assignment]
    group: str = GROUP,
) -> sf.ShareFetchRequest:
    acks = acks or {}
    wanted = list(dict.fromkeys([*parts, *acks]))
    topics: dict[uuid.UUID, list[sf.ShareFetchRequest.FetchPartition]] = {}
    for topic_id, index in wanted:
        topics.setdefault(topic_id, []).append(
            sf.ShareFetchRequest.FetchPartition(
                partition_index=index,
                acknowledgement_batches=[
                    sf.ShareFetchRequest.AcknowledgementBatch(
                        first_offset=a, last_offset=b, acknowledge_types=t
                    )
                    for a, b, t in acks.get((topic_id, index), [])
                ],
            )
        )
    return sf.ShareFetchRequest(
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=max_records,
        batch_size=max_records,
        topics=[
            sf.ShareFetchRequest.FetchTopic(topic_id=tid, partitions=ps)
            for tid, ps in topics.items()
        ],
        forgotten_topics_data=[
            sf.ShareFetchRequest.ForgottenTopic(topic_id=tid, partitions=[i]) for tid, i in forget
        ],
    )


def ack_request(
    member: str, epoch: int, acks: dict[tuple[uuid.UUID, int], list[tuple[int, int, list[int]]]]
) -> sa.ShareAcknowledgeRequest:
    topics: dict[uuid.UUID, list[sa.ShareAcknowledgeRequest.AcknowledgePartition]] = {}
    for (topic_id, index), batches in acks.items():
        topics.setdefault(topic_id, []).append(
            sa.ShareAcknowledgeRequest.AcknowledgePartition(
                partition_index=index,
                acknowledgement_batches=[
                    sa.ShareAcknowledgeRequest.AcknowledgementBatch(
                        first_offset=a, last_offset=b, acknowledge_types=t
                    )
                    for a, b, t in batches
                ],
            )
        )
    return sa.ShareAcknowledgeRequest(
        group_id=GROUP,
        member_id=member,
        share_session_epoch=epoch,
        topics=[
            sa.ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=tid, partitions=ps)
            for tid, ps in topics.items()
        ],
    )


def partitions_of(response: Any) -> dict[tuple[uuid.UUID, int], Any]:
    return {(t.topic_id, p.partition_index): p for t in response.responses for p in t.partitions}


def delivered(part: Any) -> list[tuple[int, bytes, int]]:
    """(offset, value, delivery count) of each record inside the acquired ranges."""
    ranges = [(r.first_offset, r.last_offset, r.delivery_count) for r in part.acquired_records]
    out = []
    for _, view in iter_batches(part.records or b""):
        for record in decode_batch(bytes(view)).records:
            for first, last, count in ranges:
                if first <= record.offset <= last:
                    out.append((record.offset, record.value, count))
    return out


class Session:
    """One member's share session, keeping its epoch."""

    def __init__(self, core: Any, member: str, *, conn_id: int = 1) -> None:
        self.core, self.member, self.conn_id, self.epoch = core, member, conn_id, 0

    def fetch(self, parts: list[tuple[uuid.UUID, int]] = (), **kw: Any) -> Any:  # type: ignore[assignment]
        response = self.core.call(
            78, 1, fetch_request(self.member, self.epoch, parts, **kw), conn_id=self.conn_id
        )
        if response.error_code == 0:
            self.epoch += 1
        return response

    def send_fetch(self, parts: list[tuple[uuid.UUID, int]] = (), **kw: Any) -> Any:  # type: ignore[assignment]
        outcome = self.core.send(
            78, 1, fetch_request(self.member, self.epoch, parts, **kw), conn_id=self.conn_id
        )
        self.epoch += 1
        return outcome

    def ack(self, acks: dict[tuple[uuid.UUID, int], list[tuple[int, int, list[int]]]]) -> Any:
        response = self.core.call(
            79, 1, ack_request(self.member, self.epoch, acks), conn_id=self.conn_id
        )
        if response.error_code == 0:
            self.epoch += 1
        return response


def two_members(core: Any) -> tuple[tuple[uuid.UUID, int], Session, Session]:
    """Topic "q" (one partition), and members "a" and "b" with a share session on it."""
    tp = (create(core, "q"), 0)
    a, b = Session(core, "a"), Session(core, "b", conn_id=2)
    a.fetch([tp])
    b.fetch([tp])
    return tp, a, b


def test_a_session_opens_acquires_and_acknowledges(core: Any, make_batch: Any) -> None:
    tid = create(core, "q")
    tp = (tid, 0)
    a = Session(core, "member-a")
    opened = a.fetch([tp])
    assert opened.error_code == 0 and opened.acquisition_lock_timeout_ms == LOCK_MS
    assert partitions_of(opened) == {}  # share.auto.offset.reset=latest: nothing yet
    produce_values(core, make_batch, "q", [b"a", b"b", b"c"])
    got = a.fetch()
    part = partitions_of(got)[tp]
    assert delivered(part) == [(0, b"a", 1), (1, b"b", 1), (2, b"c", 1)]
    # Nobody else gets them while they are acquired.
    b = Session(core, "member-b", conn_id=2)
    assert partitions_of(b.fetch([tp])) == {}
    assert partitions_of(b.fetch()) == {}
    acked = a.ack({tp: [(0, 2, [ACCEPT])]})
    assert acked.error_code == 0
    assert acked.responses[0].partitions[0].error_code == 0
    assert core.broker.shares.share_partition(GROUP, "q", 0).start_offset == 3
    # Accepted records never come back, even when their lock would have ended.
    core.poll(LOCK_MS + 1)
    assert partitions_of(b.fetch()) == {}


def test_release_redelivers_with_a_higher_count_and_reject_never(
    core: Any, make_batch: Any
) -> None:
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"0", b"1", b"2", b"3"])
    assert [r[0] for r in delivered(partitions_of(a.fetch())[tp])] == [0, 1, 2, 3]
    # Per-offset types: accept 0, release 1, reject 2, release 3.
    response = a.fetch(acks={tp: [(0, 3, [ACCEPT, RELEASE, REJECT, RELEASE])]})
    part = partitions_of(response)[tp]
    assert part.acknowledge_error_code == 0
    # a's own fetch in the same request may re-acquire what it released.
    again = delivered(part)
    if not again:
        again = delivered(partitions_of(b.fetch())[tp])
    assert [(o, c) for o, _, c in again] == [(1, 2), (3, 2)]


def test_acknowledging_what_one_does_not_hold_changes_nothing(core: Any, make_batch: Any) -> None:
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"0", b"1"])
    a.fetch()
    # b does not hold 0-1: INVALID_RECORD_STATE, and a still holds both.
    response = b.ack({tp: [(0, 1, [ACCEPT])]})
    assert response.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
    # Every partition answer names the leader: the one node, at epoch 0.
    leader = response.responses[0].partitions[0].current_leader
    assert (leader.leader_id, leader.leader_epoch) == (core.broker.node_id, 0)
    # One bad range in a request leaves the good one unapplied too; a range past
    # the last offset handed out is INVALID_REQUEST (Kafka's SharePartition).
    response = a.ack({tp: [(0, 0, [ACCEPT]), (5, 6, [ACCEPT])]})
    assert response.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
    response = a.ack({tp: [(0, 0, [ACCEPT]), (1, 1, [RELEASE]), (2, 2, [ACCEPT])]})
    assert response.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.start_offset == 0 and sp.acquired_count("a") == 2
    # Malformed: a wrong number of types, an unknown type, renew (v2 only).
    for batches in (
        [(0, 1, [ACCEPT, ACCEPT, ACCEPT])],
        [(0, 1, [9])],
        [(0, 1, [4])],
        [(1, 0, [ACCEPT])],
    ):
        response = a.ack({tp: batches})
        assert response.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
    assert sp.acquired_count("a") == 2


def test_session_epochs(core: Any) -> None:
    tid = create(core, "q")
    tp = (tid, 0)
    # No session yet: SHARE_SESSION_NOT_FOUND for fetches and acknowledgements.
    assert (
        core.call(78, 1, fetch_request("a", 1, [tp])).error_code
        == ErrorCode.SHARE_SESSION_NOT_FOUND
    )
    assert core.call(79, 1, ack_request("a", 1, {})).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    # Opening with acknowledgements is refused; ShareAcknowledge cannot open.
    bad = fetch_request("a", 0, acks={tp: [(0, 0, [ACCEPT])]})
    assert core.call(78, 1, bad).error_code == ErrorCode.INVALID_REQUEST
    assert (
        core.call(79, 1, ack_request("a", 0, {})).error_code
        == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    )
    assert core.call(78, 1, fetch_request("a", 0, [tp])).error_code == 0
    assert (
        core.call(78, 1, fetch_request("a", 2, [tp])).error_code
        == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    )
    assert core.call(78, 1, fetch_request("a", 1)).error_code == 0
    assert core.call(79, 1, ack_request("a", 2, {})).error_code == 0
    assert core.call(78, 1, fetch_request("a", 3)).error_code == 0
    # Closing ends the session.
    assert core.call(78, 1, fetch_request("a", -1)).error_code == 0
    assert core.call(78, 1, fetch_request("a", 4)).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    # Empty ids are malformed.
    assert core.call(78, 1, fetch_request("", 0, [tp])).error_code == ErrorCode.INVALID_REQUEST
    assert (
        core.call(78, 1, fetch_request("a", 0, [tp], group="")).error_code
        == ErrorCode.INVALID_REQUEST
    )


def test_the_epoch_after_the_largest_is_one(core: Any) -> None:
    tid = create(core, "q")
    assert core.call(78, 1, fetch_request("a", 0, [(tid, 0)])).error_code == 0
    session = core.broker.shares.session(GROUP, "a")
    session.epoch = 2**31 - 1
    assert core.call(78, 1, fetch_request("a", 2**31 - 1)).error_code == 0
    assert core.call(78, 1, fetch_request("a", 1)).error_code == 0


def test_closing_releases_what_the_member_holds(core: Any, make_batch: Any) -> None:
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"x", b"y"])
    a.fetch()
    # The final fetch accepts x; y is released.
    response = core.call(78, 1, fetch_request("a", -1, acks={tp: [(0, 0, [ACCEPT])]}))
    assert partitions_of(response)[tp].acknowledge_error_code == 0
    assert delivered(partitions_of(b.fetch())[tp]) == [(1, b"y", 2)]


def test_a_closed_connection_releases_its_sessions_records(core: Any, make_batch: Any) -> None:
    tid = create(core, "q")
    tp = (tid, 0)
    a, b = Session(core, "a", conn_id=7), Session(core, "b", conn_id=2)
    a.fetch([tp])
    b.fetch([tp])
    produce_values(core, make_batch, "q", [b"x"])
    assert delivered(partitions_of(a.fetch())[tp]) == [(0, b"x", 1)]
    core.broker.connection_closed(7)
    assert core.broker.shares.session(GROUP, "a") is None
    assert delivered(partitions_of(b.fetch())[tp]) == [(0, b"x", 2)]


def test_a_session_opened_again_keeps_what_the_member_holds(core: Any, make_batch: Any) -> None:
    """A ShareFetch at epoch 0 for a member whose session exists replaces the
    session and releases nothing: Kafka 4.4's SharePartitionManager.newContext
    only removes the old session from the cache (ShareSessionCache.remove, which
    marks its connection's entry stale). The records stay acquired by the
    member, acknowledgeable under the new session, and come back only when
    their locks end; the old connection closing does not release them."""
    tid = create(core, "q")
    tp = (tid, 0)
    a, b = Session(core, "a", conn_id=7), Session(core, "b", conn_id=2)
    a.fetch([tp])
    b.fetch([tp])
    produce_values(core, make_batch, "q", [b"x", b"y"])
    assert [o for o, _, _ in delivered(partitions_of(a.fetch())[tp])] == [0, 1]
    again = Session(core, "a", conn_id=8)  # the member reconnected: epoch 0
    assert partitions_of(again.fetch([tp])) == {}  # nothing released to take again
    core.broker.connection_closed(7)
    assert partitions_of(b.fetch()) == {}  # still the member's
    acked = again.ack({tp: [(0, 0, [ACCEPT])]})
    assert acked.responses[0].partitions[0].error_code == 0
    core.poll(LOCK_MS + 1)
    assert delivered(partitions_of(b.fetch())[tp]) == [(1, b"y", 2)]


def test_locks_expire_and_the_delivery_limit_archives(core: Any, make_batch: Any) -> None:
    tid = create(core, "q")
    tp = (tid, 0)
    a = Session(core, "a")
    a.fetch([tp])
    produce_values(core, make_batch, "q", [b"poison"])
    counts = []
    for _ in range(6):
        part = partitions_of(a.fetch()).get(tp)
        counts.append([c for _, _, c in delivered(part)] if part else [])
        assert core.broker.next_deadline() is not None
        core.poll(LOCK_MS)  # the lock ends exactly at its deadline
    assert counts == [[1], [2], [3], [4], [5], []]
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.start_offset == 1 and sp.end_offset == 1


def test_max_records_takes_whole_batches_and_rotates_partitions(core: Any, make_batch: Any) -> None:
    tid = create(core, "q", 2)
    a = Session(core, "a")
    a.fetch([(tid, 0), (tid, 1)])
    for p in (0, 1):
        produce_values(core, make_batch, "q", [b"1", b"2", b"3"], partition=p)
        produce_values(core, make_batch, "q", [b"4", b"5", b"6"], partition=p)
    first = partitions_of(a.fetch(max_records=2))
    # One whole batch (3 records, past max_records) from one partition only.
    assert [len(delivered(p)) for p in first.values()] == [3]
    second = partitions_of(a.fetch(max_records=2))
    assert set(second) != set(first), "the next fetch starts with the other partition"


def test_a_fetch_waits_for_records(core: Any, make_batch: Any) -> None:
    tid = create(core, "q")
    tp = (tid, 0)
    a = Session(core, "a")
    a.fetch([tp])
    outcome = a.send_fetch(max_wait_ms=5000)
    assert isinstance(outcome, Parked)
    produce_values(core, make_batch, "q", [b"late"])
    done = core.poll()
    assert len(done) == 1
    assert delivered(partitions_of(core.decode(done[0].reply))[tp]) == [(0, b"late", 1)]
    # Nothing arriving: answered empty at the deadline.
    outcome = a.send_fetch(max_wait_ms=5000)
    assert isinstance(outcome, Parked)
    assert core.poll(4999) == []
    done = core.poll(1)
    assert len(done) == 1 and partitions_of(core.decode(done[0].reply)) == {}


def test_a_release_wakes_a_waiting_fetch(core: Any, make_batch: Any) -> None:
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"x"])
    a.fetch()
    assert isinstance(b.send_fetch(max_wait_ms=60_000), Parked)
    assert a.ack({tp: [(0, 0, [RELEASE])]}).error_code == 0
    done = core.poll()
    assert len(done) == 1
    assert delivered(partitions_of(core.decode(done[0].reply))[tp]) == [(0, b"x", 2)]


def test_unknown_topics_and_partitions(core: Any) -> None:
    tid = create(core, "q")
    missing = uuid.uuid4()
    response = core.call(78, 1, fetch_request("a", 0, [(missing, 0), (tid, 5)]))
    parts = partitions_of(response)
    assert parts[(missing, 0)].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert parts[(tid, 5)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # Neither is kept in the session: a session only grows by partitions that exist.
    assert core.broker.shares.session(GROUP, "a").partitions == {}


def test_state_survives_a_restart(open_core: Any, make_batch: Any) -> None:
    core = open_core()
    tid = create(core, "q")
    tp = (tid, 0)
    a = Session(core, "a")
    a.fetch([tp])
    produce_values(core, make_batch, "q", [b"0", b"1", b"2", b"3"])
    a.fetch()
    a.ack({tp: [(0, 3, [ACCEPT, RELEASE, REJECT, RELEASE])]})
    a.fetch()  # re-acquires 1 and 3 (count 2), never acknowledged
    core.broker.close()
    core = open_core()
    b = Session(core, "b")
    got = delivered(partitions_of(b.fetch([tp]))[tp])
    # Accepted 0 and rejected 2 are gone for good; 1 and 3 keep the count their
    # last release recorded and are delivered once more.
    assert [(o, v) for o, v, _ in got] == [(1, b"1"), (3, b"3")]
    assert all(c >= 2 for _, _, c in got)


def test_records_come_straight_from_the_log_batches(core: Any, make_batch: Any) -> None:
    tid = create(core, "q")
    tp = (tid, 0)
    a = Session(core, "a")
    a.fetch([tp])
    produce_values(core, make_batch, "q", [b"a", b"b"])
    part = partitions_of(a.fetch())[tp]
    plog = core.broker.logs.partition("q", 0)
    assert part.records == plog.read(0, 1 << 20).tobytes()
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in part.acquired_records] == [
        (0, 1, 1)
    ]


@pytest.mark.parametrize("ack_type", [GAP, REJECT])
def test_gap_and_reject_archive(core: Any, make_batch: Any, ack_type: int) -> None:
    tid = create(core, "q")
    tp = (tid, 0)
    a = Session(core, "a")
    a.fetch([tp])
    produce_values(core, make_batch, "q", [b"a"])
    a.fetch()
    assert a.ack({tp: [(0, 0, [ack_type])]}).responses[0].partitions[0].error_code == 0
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.start_offset == 1
    assert sp.state_of(0) is None


def test_a_member_leaving_the_group_keeps_its_session_until_it_closes(
    core: Any, make_batch: Any
) -> None:
    """librdkafka sends its leave heartbeat and its last acknowledgements at
    once: the acknowledgements must still land after the leave."""
    tid = create(core, "q")
    tp = (tid, 0)
    a = Session(core, "a")
    a.fetch([tp])
    produce_values(core, make_batch, "q", [b"x", b"y"])
    a.fetch()
    core.broker.shares.member_removed(GROUP, "a", core.now)
    assert a.ack({tp: [(0, 1, [ACCEPT])]}).responses[0].partitions[0].error_code == 0
    assert core.broker.shares.share_partition(GROUP, "q", 0).start_offset == 2


def test_a_member_removed_without_a_session_has_its_records_released(
    core: Any, make_batch: Any
) -> None:
    tid = create(core, "q")
    tp = (tid, 0)
    a = Session(core, "a")
    a.fetch([tp])
    produce_values(core, make_batch, "q", [b"x"])
    a.fetch()
    core.broker.shares._sessions.clear()  # as if its session had ended without release
    core.broker.shares.member_removed(GROUP, "a", core.now)
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.acquired_count() == 0 and sp.has_available()


def test_a_partition_answered_without_records_carries_empty_records_not_null(
    core: Any, make_batch: Any
) -> None:
    """librdkafka drops a whole ShareFetch answer with a null records field
    ("invalid MessageSetSize -1"): Kafka sends empty records instead."""
    tid = create(core, "q")
    tp = (tid, 0)
    a = Session(core, "a")
    a.fetch([tp, (tid, 3)])
    produce_values(core, make_batch, "q", [b"x"])
    a.fetch()
    parts = partitions_of(a.fetch(acks={tp: [(0, 0, [ACCEPT])]}))
    assert parts[tp].acknowledge_error_code == 0 and parts[tp].acquired_records == []
    assert parts[tp].records == b""
    opened = partitions_of(core.call(78, 1, fetch_request("b", 0, [(tid, 3)])))
    assert opened[(tid, 3)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert opened[(tid, 3)].records == b""


def test_the_group_s_assignment_starts_its_partitions_and_deleting_it_forgets_them(
    core: Any, make_batch: Any
) -> None:
    """A share-partition starts when the group's assignment first covers it (not
    at the first fetch), and DeleteGroups forgets the group's share state."""
    from trafka.codec.messages import k42_delete_groups as dlg
    from trafka.codec.messages import k76_share_group_heartbeat as hb

    tid = create(core, "q")
    tp = (tid, 0)
    produce_values(core, make_batch, "q", [b"before"])

    def heartbeat(epoch: int) -> Any:
        body = hb.ShareGroupHeartbeatRequest(
            group_id=GROUP, member_id="m-1", member_epoch=epoch, subscribed_topic_names=["q"]
        )
        return core.call(76, 1, body)

    joined = heartbeat(0)
    assert joined.error_code == 0
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp is not None and sp.start_offset == 1  # latest, when assigned
    produce_values(core, make_batch, "q", [b"after-join"])
    a = Session(core, "m-1")
    assert delivered(partitions_of(a.fetch([tp]))[tp]) == [(1, b"after-join", 1)]
    a.ack({tp: [(1, 1, [ACCEPT])]})
    assert heartbeat(-1).member_epoch == -1
    deleted = core.call(42, 2, dlg.DeleteGroupsRequest(groups_names=[GROUP]))
    assert deleted.results[0].error_code == 0
    assert core.broker.shares.group_partitions(GROUP) == {}
    assert core.broker.shares.session(GROUP, "m-1") is None


def test_a_durable_answer_woken_before_its_write_settled_waits_on() -> None:
    # A waiter woken while a share-state write is still on its way (woken twice,
    # or a newer write queued since its wake) waits on until its deadline, and
    # is REQUEST_TIMED_OUT only then: an early refusal lost the records the
    # fetch had acquired until their locks ran out.
    from trafka.brokerlite.handlers._share_durable import WritesSettled
    from trafka.brokerlite.outcomes import ParkAgain

    class Writes:
        outcome: ErrorCode | None = None

        def writes_outcome(self, after: int) -> ErrorCode | None:
            return self.outcome

        def writes_failed(self, after: int) -> dict[Any, ErrorCode]:
            return {"key": ErrorCode.NOT_LEADER_OR_FOLLOWER}

    writes = Writes()
    waiter = WritesSettled(
        writes,  # type: ignore[arg-type]
        "answer",
        0,
        lambda code: code,
        lambda failed: failed,
        30_000,
    )
    assert waiter.complete(1_000) == ParkAgain(waiter)
    assert waiter.complete(30_000) == ErrorCode.REQUEST_TIMED_OUT
    writes.outcome = ErrorCode.NONE
    assert waiter.complete(2_000) == "answer"
    # A failure is settled per share-partition, not refused.
    writes.outcome = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert waiter.complete(2_000) == {"key": ErrorCode.NOT_LEADER_OR_FOLLOWER}


# -- answers refused after acquiring ---------------------------------------------------
# In a cluster a ShareFetch is answered once its share-state writes are on the
# coordinators' in-sync replicas; a partition whose write failed is answered
# with the error, and the whole answer is refused when they do not settle in
# time (k78_share_fetch, _share_durable). What a refused answer or partition
# acquired never reaches its member: it is available to the next fetch at once,
# with the delivery counts it had before (Kafka never refuses a ShareFetch for
# a share-state write: its member sees every acquisition, and the next one
# counts one more). More in test_share_write_failures.py.


class StateWrites:
    """Stands in for the cluster's share-state writes an answer waits on
    (``ShareFetcher.writes_mark``, ``writes_outcome`` and ``writes_failed``):
    the writes of each request from now on end as ``outcome`` said when it came
    (None: on their way for ever), those of the share-partitions in ``failing``
    failed."""

    def __init__(self) -> None:
        self.outcome: ErrorCode | None = ErrorCode.NONE
        self.failing: dict[tuple[str, str, int], ErrorCode] = {}
        self._outcomes: list[tuple[ErrorCode | None, dict[Any, ErrorCode]]] = []

    def writes_mark(self) -> int:
        self._outcomes.append((self.outcome, dict(self.failing)))
        return len(self._outcomes) - 1

    def writes_outcome(self, after: int) -> ErrorCode | None:
        return self._outcomes[after][0]

    def writes_failed(self, after: int) -> dict[Any, ErrorCode]:
        return self._outcomes[after][1]


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``writes(core) -> StateWrites`` put in the place of the core's share-state writes."""

    def put_in(core: Any) -> StateWrites:
        stand_in = StateWrites()
        monkeypatch.setattr(core.broker.shares, "writes_mark", stand_in.writes_mark)
        monkeypatch.setattr(core.broker.shares, "writes_outcome", stand_in.writes_outcome)
        monkeypatch.setattr(core.broker.shares, "writes_failed", stand_in.writes_failed)
        return stand_in

    return put_in


def test_a_partition_whose_write_failed_puts_back_what_it_acquired(
    core: Any, make_batch: Any, writes: Any
) -> None:
    # A failed write fails its share-partition's part of the answer only (Kafka
    # answers per partition): the records acquired there never reach the member.
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"x"])
    assert delivered(partitions_of(a.fetch())[tp]) == [(0, b"x", 1)]
    assert a.ack({tp: [(0, 0, [RELEASE])]}).error_code == 0
    produce_values(core, make_batch, "q", [b"y"])
    stand_in = writes(core)
    stand_in.outcome = ErrorCode.NOT_LEADER_OR_FOLLOWER
    stand_in.failing = {(GROUP, "q", 0): ErrorCode.NOT_LEADER_OR_FOLLOWER}
    answer = a.fetch()  # acquires x (its 2nd delivery) and y (1st), then fails there
    assert answer.error_code == ErrorCode.NONE
    part = partitions_of(answer)[tp]
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert part.acknowledge_error_code == ErrorCode.NONE  # (it acknowledged nothing)
    assert part.acquired_records == [] and delivered(part) == []
    stand_in.failing = {}
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.state_of(0) == (0, 1, None) and sp.state_of(1) == (0, 0, None)  # AVAILABLE
    assert sp.acquired_count() == 0
    stand_in.outcome = ErrorCode.NONE
    # Available to the next fetch at once, counted as the members saw them.
    assert delivered(partitions_of(b.fetch())[tp]) == [(0, b"x", 2), (1, b"y", 1)]
    # A successful answer is unchanged: its records stay with b.
    assert sp.acquired_count("b") == 2
    assert partitions_of(a.fetch()) == {}


def test_an_answer_whose_writes_do_not_settle_in_time_puts_back_what_it_acquired(
    open_core: Any, make_batch: Any, writes: Any
) -> None:
    from trafka.brokerlite.handlers._share_durable import DURABLE_WAIT_MS

    # Locks longer than the wait: without the put-back, the records would come
    # back only when their locks end, 60 s after the acquisition.
    core = open_core(group_share_record_lock_duration_ms=60_000)
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"x", b"y"])
    stand_in = writes(core)
    stand_in.outcome = None  # on their way, for ever
    assert isinstance(a.send_fetch(), Parked)
    stand_in.outcome = ErrorCode.NONE
    assert core.poll(DURABLE_WAIT_MS - 1) == []
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.acquired_count("a") == 2  # (held by a's answer while it waits)
    assert partitions_of(b.fetch()) == {}
    done = core.poll(1)
    assert len(done) == 1
    assert core.decode(done[0].reply).error_code == ErrorCode.REQUEST_TIMED_OUT
    assert delivered(partitions_of(b.fetch())[tp]) == [(0, b"x", 1), (1, b"y", 1)]


def test_a_refusal_after_a_wait_puts_back_and_wakes_a_waiting_fetch(
    open_core: Any, make_batch: Any, writes: Any
) -> None:
    from trafka.brokerlite.handlers._share_durable import DURABLE_WAIT_MS

    core = open_core(group_share_record_lock_duration_ms=60_000)
    tp, a, b = two_members(core)
    stand_in = writes(core)
    stand_in.outcome = None
    assert isinstance(a.send_fetch(max_wait_ms=5000), Parked)
    stand_in.outcome = ErrorCode.NONE
    produce_values(core, make_batch, "q", [b"late"])
    assert core.poll() == []  # a's fetch acquired "late"; its answer waits for its writes
    assert isinstance(b.send_fetch(max_wait_ms=50_000), Parked)  # nothing left for b
    done = core.poll(DURABLE_WAIT_MS) + core.poll()
    answers = {d.conn_id: core.decode(d.reply) for d in done}
    assert answers[1].error_code == ErrorCode.REQUEST_TIMED_OUT
    # b is woken by the put-back, long before its MaxWaitMs or the lock's end.
    assert delivered(partitions_of(answers[2])[tp]) == [(0, b"late", 1)]


def test_a_connection_closed_before_its_answer_releases_keeping_the_counts(
    core: Any, make_batch: Any, writes: Any
) -> None:
    # As Kafka 4.4: a closed connection ends its share session and releases the
    # member's records (SharePartitionManager.releaseSession), their delivery
    # counts kept (KAFKA-19972: a consumer that crashes on a record must not get
    # it for ever), whether or not an answer was on its way.
    tid = create(core, "q")
    tp = (tid, 0)
    a, b = Session(core, "a", conn_id=7), Session(core, "b", conn_id=2)
    a.fetch([tp])
    b.fetch([tp])
    produce_values(core, make_batch, "q", [b"x"])
    stand_in = writes(core)
    stand_in.outcome = None
    assert isinstance(a.send_fetch(), Parked)
    stand_in.outcome = ErrorCode.NONE
    core.broker.connection_closed(7)
    assert delivered(partitions_of(b.fetch())[tp]) == [(0, b"x", 2)]


def test_a_refusal_leaves_alone_what_its_fetch_no_longer_holds(
    open_core: Any, make_batch: Any, writes: Any
) -> None:
    from trafka.brokerlite.handlers._share_durable import DURABLE_WAIT_MS

    # The lock (20 s) ends while a's answer waits for its writes (30 s): b gets
    # the record meanwhile, and a's refusal must not take it from b.
    core = open_core(group_share_record_lock_duration_ms=20_000)
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"x"])
    stand_in = writes(core)
    stand_in.outcome = None
    assert isinstance(a.send_fetch(), Parked)
    stand_in.outcome = ErrorCode.NONE
    assert core.poll(20_000) == []  # a's lock ends
    assert delivered(partitions_of(b.fetch())[tp]) == [(0, b"x", 2)]
    done = core.poll(DURABLE_WAIT_MS - 20_000)
    assert [core.decode(d.reply).error_code for d in done] == [ErrorCode.REQUEST_TIMED_OUT]
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.state_of(0) == (1, 2, "b")  # ACQUIRED by b, its count untouched
    assert b.ack({tp: [(0, 0, [ACCEPT])]}).responses[0].partitions[0].error_code == 0


# -- version 2 (Kafka 4.2+): KIP-1206's acquire modes, KIP-1222's renew ---------------------

RENEW = 4


def renew_fetch(member: str, epoch: int, acks: Any) -> sf.ShareFetchRequest:
    """A ShareFetch v2 carrying renewals: IsRenewAck, asking for no records."""
    return dataclasses.replace(
        fetch_request(member, epoch, acks=acks, max_records=0),
        min_bytes=0,
        max_bytes=0,
        is_renew_ack=True,
    )


def test_renew_restarts_the_lock_and_changes_nothing_else(core: Any, make_batch: Any) -> None:
    """KIP-1222: RENEW keeps the record acquired by its member and starts its
    acquisition lock again; the lock then ends a whole lock duration after the
    renewal, not after the acquisition."""
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"slow"])
    assert delivered(partitions_of(a.fetch())[tp]) == [(0, b"slow", 1)]
    core.poll(LOCK_MS - 1)
    renewed = core.call(78, 2, renew_fetch("a", a.epoch, {tp: [(0, 0, [RENEW])]}))
    assert renewed.error_code == 0
    a.epoch += 1
    (part,) = renewed.responses[0].partitions
    assert (part.acknowledge_error_code, part.acquired_records, part.records) == (0, [], b"")
    core.poll(1)  # the first lock's end: still held
    assert core.broker.shares.share_partition(GROUP, "q", 0).state_of(0) == (1, 1, "a")
    assert partitions_of(b.fetch()).get(tp) is None
    renew_ack = dataclasses.replace(
        ack_request("a", a.epoch, {tp: [(0, 0, [RENEW])]}), is_renew_ack=True
    )
    core.poll(LOCK_MS - 2)
    acked = core.call(79, 2, renew_ack)
    a.epoch += 1
    assert acked.responses[0].partitions[0].error_code == 0
    assert acked.acquisition_lock_timeout_ms == LOCK_MS
    core.poll(LOCK_MS - 1)
    assert core.broker.shares.share_partition(GROUP, "q", 0).state_of(0) == (1, 1, "a")
    core.poll(1)
    assert delivered(partitions_of(b.fetch())[tp]) == [(0, b"slow", 2)]


def test_renew_is_refused_without_is_renew_ack(core: Any, make_batch: Any) -> None:
    tp, a, _ = two_members(core)
    produce_values(core, make_batch, "q", [b"x"])
    a.fetch()
    refused = a.ack({tp: [(0, 0, [RENEW])]})
    assert refused.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
    assert core.broker.shares.share_partition(GROUP, "q", 0).state_of(0) == (1, 1, "a")


def test_record_limit_splits_a_batch_and_batch_optimized_takes_it_whole(
    core: Any, make_batch: Any
) -> None:
    """KIP-1206: RECORD_LIMIT (ShareAcquireMode 1) acquires at most MaxRecords,
    splitting the log's batch; the next fetch goes on inside it. BATCH_OPTIMIZED
    (0) takes whole batches, past MaxRecords."""
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"0", b"1", b"2", b"3", b"4"])
    strict = dataclasses.replace(fetch_request("a", a.epoch, max_records=2), share_acquire_mode=1)
    got = partitions_of(core.call(78, 2, strict))[tp]
    a.epoch += 1
    assert [(r.first_offset, r.last_offset) for r in got.acquired_records] == [(0, 1)]
    assert [o for o, _, _ in delivered(got)] == [0, 1]
    strict = dataclasses.replace(fetch_request("b", b.epoch, max_records=2), share_acquire_mode=1)
    got = partitions_of(core.call(78, 2, strict))[tp]
    b.epoch += 1
    assert [(r.first_offset, r.last_offset) for r in got.acquired_records] == [(2, 3)]
    whole = partitions_of(a.fetch(max_records=1))  # (a v1 fetch: batch-optimized)
    assert [(r.first_offset, r.last_offset) for r in whole[tp].acquired_records] == [(4, 4)]


def test_an_unknown_acquire_mode_is_an_invalid_request(core: Any) -> None:
    """brokerlite answers INVALID_REQUEST and leaves the session as it was; Kafka
    4.4 fails such a request with UNKNOWN_SERVER_ERROR after moving the session's
    epoch on (docs/compatibility.md)."""
    _, a, _ = two_members(core)
    odd = dataclasses.replace(fetch_request("a", a.epoch), share_acquire_mode=7)
    assert core.call(78, 2, odd).error_code == ErrorCode.INVALID_REQUEST
    assert a.fetch().error_code == 0
