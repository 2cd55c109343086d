"""Share-state writes that fail (KIP-932), on one node (the journal) and in a
cluster (the share coordinators, through the persister), as Kafka 4.4 answers
them.

Kafka 4.4: ``SharePartition.acknowledge`` and ``releaseAcquiredRecords`` (a
closed share session) change records through ``InFlightState``
``startStateTransition``; ``rollbackOrProcessStateUpdates`` writes them and,
when the persister's write fails, puts back every record they changed, and
only those (``completeStateTransition(false)``: state and holder restored, the
acquisition lock timer left running). While the write is on its way such a
record is not acquired, not acknowledged, and the start offset stays before it
(``hasOngoingStateTransition``). ``SharePartitionManager``
``mapAcknowledgementFutures`` answers that partition with
``Errors.forException`` of the failure (UNKNOWN_SERVER_ERROR for a write failed
without a coordinator's code; ``fetchPersisterError`` makes a fenced leader's
NOT_LEADER_OR_FOLLOWER), and ``fencedSharePartitionHandler`` drops the
share-partition only for NOT_LEADER_OR_FOLLOWER, FENCED_STATE_EPOCH,
GROUP_ID_NOT_FOUND and UNKNOWN_TOPIC_OR_PARTITION: after any other error it
keeps it, so what other members hold stays theirs.
``KafkaApis.handleShareFetchRequest`` puts the error in the ShareFetch's
AcknowledgeErrorCode and delivers the fetched records regardless;
ShareAcknowledge answers it in the partition's ErrorCode. Acquiring is never
written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from test_share_fetch import (
    ACCEPT,
    GROUP,
    LOCK_MS,
    REJECT,
    RELEASE,
    Session,
    create,
    delivered,
    fetch_request,
    partitions_of,
    produce_values,
    two_members,
)

from trafka.brokerlite.outcomes import Parked
from trafka.codec.errors import ErrorCode

# -- one node: the journal's write fails -------------------------------------------------


@contextlib.contextmanager
def broken_journal(core: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Within: the core's share-state journal fails every write."""
    from trafka.brokerlite.shares.fetcher import ShareStateError

    def broken(entries: list[Any]) -> None:
        if entries:
            raise ShareStateError("disk gone")

    with monkeypatch.context() as patched:
        patched.setattr(core.broker.shares._store, "write", broken)
        yield


def test_an_acknowledgement_on_a_fetch_whose_journal_write_fails_is_undone_and_reported(
    core: Any, make_batch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tp, a, _b = two_members(core)
    produce_values(core, make_batch, "q", [b"x"])
    assert delivered(partitions_of(a.fetch())[tp]) == [(0, b"x", 1)]
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    (held,) = sp.runs()
    produce_values(core, make_batch, "q", [b"y"])
    with broken_journal(core, monkeypatch):
        answer = a.fetch(acks={tp: [(0, 0, [ACCEPT])]})
    # The request is answered; only the acknowledgement failed, and the fetch
    # delivered y all the same.
    assert answer.error_code == ErrorCode.NONE
    part = partitions_of(answer)[tp]
    assert part.acknowledge_error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert part.error_code == ErrorCode.NONE
    assert delivered(part) == [(1, b"y", 1)]
    # x is a's again, as before the acknowledgement: same count, same lock.
    assert sp.state_of(0) == (1, 1, "a")  # ACQUIRED
    assert sp.start_offset == 0
    assert sp.runs()[0].deadline_ms == held.deadline_ms
    assert sp.dirty  # (to be written with the next write)
    # a may acknowledge it again, and this time it holds.
    accepted = a.fetch(acks={tp: [(0, 1, [ACCEPT])]})
    assert partitions_of(accepted)[tp].acknowledge_error_code == ErrorCode.NONE
    assert sp.start_offset == 2 and not sp.dirty


def test_an_undone_acknowledgement_keeps_its_lock_timer_running(
    core: Any, make_batch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rolled back, the record is held under its first lock (Kafka's timer task is
    # not cancelled): at its end it is released, its delivery count kept.
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"x"])
    a.fetch()
    with broken_journal(core, monkeypatch):
        response = a.ack({tp: [(0, 0, [REJECT])]})
    assert response.error_code == ErrorCode.NONE
    assert response.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert partitions_of(b.fetch()) == {}  # still a's
    core.poll(LOCK_MS)
    assert delivered(partitions_of(b.fetch())[tp]) == [(0, b"x", 2)]


def test_share_acknowledge_reports_a_failed_write_per_partition(
    core: Any, make_batch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each acknowledged partition gets the write's error; a partition whose
    # acknowledgement was refused keeps its own error.
    tid = create(core, "two", partitions=2)
    p0, p1 = (tid, 0), (tid, 1)
    a = Session(core, "a")
    a.fetch([p0, p1])
    produce_values(core, make_batch, "two", [b"0"], partition=0)
    produce_values(core, make_batch, "two", [b"1"], partition=1)
    assert set(partitions_of(a.fetch())) == {p0, p1}
    with broken_journal(core, monkeypatch):
        response = a.ack({p0: [(0, 0, [ACCEPT])], p1: [(5, 5, [ACCEPT])]})
    assert response.error_code == ErrorCode.NONE
    codes = {p.partition_index: p.error_code for p in response.responses[0].partitions}
    assert codes == {0: ErrorCode.UNKNOWN_SERVER_ERROR, 1: ErrorCode.INVALID_REQUEST}
    assert a.epoch == 3  # (the session moved on: the request was answered)
    for partition in (0, 1):
        sp = core.broker.shares.share_partition(GROUP, "two", partition)
        assert sp.state_of(0) == (1, 1, "a")
    retried = a.ack({p0: [(0, 0, [ACCEPT])], p1: [(0, 0, [ACCEPT])]})
    assert [p.error_code for p in retried.responses[0].partitions] == [0, 0]


def test_a_share_partition_never_written_delivers_nothing_while_its_write_fails(
    core: Any, make_batch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kafka serves a share-partition only once its state is initialised on the
    # share coordinator; here its first journal write is that. Until it
    # succeeds the partition is answered with the error and nothing is held.
    from trafka.brokerlite.shares.share_config import DefaultShareConfig

    earliest = DefaultShareConfig(auto_offset_reset="earliest")
    monkeypatch.setattr(core.broker.shares, "_config_for", lambda _group: earliest)
    tid = create(core, "q")
    tp = (tid, 0)
    produce_values(core, make_batch, "q", [b"x"])
    a = Session(core, "a")
    with broken_journal(core, monkeypatch):
        answer = a.fetch([tp])
    assert answer.error_code == ErrorCode.NONE
    part = partitions_of(answer)[tp]
    assert part.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert part.acquired_records == []
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp is None or sp.acquired_count() == 0
    assert delivered(partitions_of(a.fetch())[tp]) == [(0, b"x", 1)]


def test_a_closed_session_whose_journal_write_fails_gives_its_records_back_to_their_locks(
    open_core: Any, make_batch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session's close would archive x (its 2nd delivery, at the limit); that
    # write fails: as Kafka's releaseAcquiredRecords, the release is rolled back
    # and x is a's again until its lock ends. The close is answered (Kafka's
    # releaseSession failure is only logged) and the share-partition stays to be
    # written: the next write, by a request that changes nothing there, carries
    # it, and at a restart x (held, at the limit) is archived.
    core = open_core(group_share_delivery_count_limit=2)
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"x"])
    a.fetch()
    a.ack({tp: [(0, 0, [RELEASE])]})
    assert delivered(partitions_of(a.fetch())[tp]) == [(0, b"x", 2)]
    with broken_journal(core, monkeypatch):
        closed = core.call(78, 1, fetch_request("a", -1, acks={}), conn_id=1)
    assert closed.error_code == ErrorCode.NONE
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.state_of(0) == (1, 2, "a") and sp.dirty  # ACQUIRED by a, as before the close
    assert partitions_of(b.fetch()) == {}  # (held: nothing to acquire)
    core.broker.close()
    core = open_core(group_share_delivery_count_limit=2)
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.start_offset == 1


def test_a_closed_connection_whose_journal_write_fails_releases_at_the_lock_end(
    core: Any, make_batch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"x"])
    a.fetch()
    with broken_journal(core, monkeypatch):
        core.broker.connection_closed(1)
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.state_of(0) == (1, 1, "a")
    assert partitions_of(b.fetch()) == {}
    core.poll(LOCK_MS)
    assert delivered(partitions_of(b.fetch())[tp]) == [(0, b"x", 2)]


def test_a_lock_expiry_whose_write_fails_is_written_with_the_next_write(
    open_core: Any, make_batch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The broker's poll goes on (the failure is logged, as Kafka logs a failed
    # write of a lock's end); the release reaches the journal with the next write.
    core = open_core()
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"x"])
    a.fetch()
    with broken_journal(core, monkeypatch):
        assert core.poll(LOCK_MS) == []
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.state_of(0) == (0, 1, None) and sp.dirty  # AVAILABLE, counted once
    assert delivered(partitions_of(b.fetch())[tp]) == [(0, b"x", 2)]
    core.broker.close()
    core = open_core()
    assert core.broker.shares.share_partition(GROUP, "q", 0).state_of(0) == (0, 2, None)


# -- a cluster: the share coordinators refuse a write ------------------------------------


class Coordinators:
    """The share coordinators as the core's share fetcher sees them: its store is a
    :class:`RemotePersister` whose requests the test answers (``serve``)."""

    def __init__(self, core: Any) -> None:
        from trafka.brokerlite.shares.fetcher import ShareFetcher
        from trafka.brokerlite.shares.persister import SETTLED_WATCH, RemotePersister

        broker = core.broker
        self.persister = RemotePersister(lambda _topic, _partition: 0)
        self.persister.on_settled = lambda: broker.purgatory.notify_append(*SETTLED_WATCH, 0)
        broker.shares = ShareFetcher(
            broker.logs, broker.producers, self.persister, notify=broker._notify_available
        )
        broker.periodic._shares = broker.shares  # (its locks end at the broker's poll)
        self.shares = broker.shares

    def serve(
        self, refuse: dict[int, ErrorCode] | None = None, now_ms: int = 0, start: int = 0
    ) -> None:
        """Answer every request queued (at the persister's ``now_ms``): reads with
        start offset ``start`` (-1: not initialised) and nothing in flight, writes
        of the partitions in ``refuse`` with its error, others NONE."""
        from trafka.codec.messages import k84_read_share_group_state as read_m

        result = read_m.ReadShareGroupStateResponse.PartitionResult(
            partition=0, state_epoch=1, start_offset=start, state_batches=[]
        )
        for request in self.persister.take(now_ms):
            if request.write is None:
                self.persister.answered(request, ErrorCode.NONE, result, now_ms)
            else:
                code = (refuse or {}).get(request.key[2], ErrorCode.NONE)
                self.persister.answered(request, code, None, now_ms)


def cluster_members(core: Any, make_batch: Any) -> tuple[Any, Coordinators, Session]:
    """Topic "two" (two partitions), x0 and x1 in them held by member "a"."""
    tid = create(core, "two", partitions=2)
    coordinators = Coordinators(core)
    a = Session(core, "a")
    parts = [(tid, 0), (tid, 1)]
    assert partitions_of(a.fetch(parts)) == {}  # (their state is being read)
    coordinators.serve()
    for partition in (0, 1):
        produce_values(core, make_batch, "two", [b"x%d" % partition], partition=partition)
    assert set(partitions_of(a.fetch())) == set(parts)
    return tid, coordinators, a


def test_a_fenced_acknowledgement_on_a_fetch_fails_its_partition_alone(
    core: Any, make_batch: Any
) -> None:
    # The coordinator fences the write of partition 0 (a newer leader wrote it):
    # its acknowledgement is answered NOT_LEADER_OR_FOLLOWER and the records the
    # fetch acquired there are not delivered; partition 1's are.
    tid, coordinators, a = cluster_members(core, make_batch)
    p0, p1 = (tid, 0), (tid, 1)
    for partition in (0, 1):
        produce_values(core, make_batch, "two", [b"y%d" % partition], partition=partition)
    parked = a.send_fetch(acks={p0: [(0, 0, [ACCEPT])], p1: [(0, 0, [ACCEPT])]})
    assert isinstance(parked, Parked)  # (its writes are on their way)
    coordinators.serve(refuse={0: ErrorCode.FENCED_LEADER_EPOCH})
    (done,) = core.poll()
    answer = core.decode(done.reply)
    assert answer.error_code == ErrorCode.NONE
    parts = partitions_of(answer)
    assert parts[p0].acknowledge_error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert parts[p0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert delivered(parts[p0]) == []
    assert parts[p1].acknowledge_error_code == ErrorCode.NONE
    assert delivered(parts[p1]) == [(1, b"y1", 1)]
    # The fenced share-partition is forgotten (read again when next fetched).
    assert coordinators.shares.share_partition(GROUP, "two", 0) is None
    assert coordinators.shares.share_partition(GROUP, "two", 1).start_offset == 1


def test_share_acknowledge_answers_a_refused_write_per_partition(
    core: Any, make_batch: Any
) -> None:
    # A write refused with an error Kafka's fetchPersisterError does not name is
    # UNKNOWN_SERVER_ERROR for its partition; the other partition's holds. The
    # refused one is not fenced: its share-partition is kept, x1 rolled back to a.
    tid, coordinators, a = cluster_members(core, make_batch)
    p0, p1 = (tid, 0), (tid, 1)
    parked = core.send(79, 1, _ack(a, {p0: [(0, 0, [REJECT])], p1: [(0, 0, [ACCEPT])]}))
    assert isinstance(parked, Parked)
    coordinators.serve(refuse={1: ErrorCode.INVALID_REQUEST})
    (done,) = core.poll()
    response = core.decode(done.reply)
    assert response.error_code == ErrorCode.NONE
    codes = {p.partition_index: p.error_code for p in response.responses[0].partitions}
    assert codes == {0: ErrorCode.NONE, 1: ErrorCode.UNKNOWN_SERVER_ERROR}
    assert coordinators.shares.share_partition(GROUP, "two", 0).start_offset == 1
    sp1 = coordinators.shares.share_partition(GROUP, "two", 1)
    assert sp1.state_of(0) == (1, 1, "a") and sp1.start_offset == 0


def cluster_pair(core: Any, make_batch: Any) -> tuple[Any, Coordinators, Session, Session]:
    """Topic "two": in partition 0, x0 held by member "a" and x1 by member "b"."""
    tid = create(core, "two", partitions=2)
    coordinators = Coordinators(core)
    p0 = (tid, 0)
    a, b = Session(core, "a"), Session(core, "b", conn_id=2)
    assert partitions_of(a.fetch([p0])) == {}  # (its state is being read)
    coordinators.serve()
    b.fetch([p0])
    produce_values(core, make_batch, "two", [b"x0"])
    assert delivered(partitions_of(a.fetch())[p0]) == [(0, b"x0", 1)]
    produce_values(core, make_batch, "two", [b"x1"])
    assert delivered(partitions_of(b.fetch())[p0]) == [(1, b"x1", 1)]
    return p0, coordinators, a, b


@pytest.mark.parametrize(
    ("refusal", "told"),
    [
        (ErrorCode.INVALID_REQUEST, ErrorCode.UNKNOWN_SERVER_ERROR),
        # (retried, then given up: Kafka's PersisterStateManager after its attempts)
        (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    ],
)
def test_a_refused_write_rolls_back_its_records_and_keeps_what_others_hold(
    core: Any, make_batch: Any, refusal: ErrorCode, told: ErrorCode
) -> None:
    # Kafka keeps the share-partition after a write that failed without being
    # fenced and rolls back the records it changed: x0 is a's again, x1 still b's,
    # so a third member gets neither (were the share-partition read again, both
    # would be available).
    from trafka.brokerlite.shares.persister import GIVE_UP_AFTER_MS

    p0, coordinators, a, _b = cluster_pair(core, make_batch)
    sp = coordinators.shares.share_partition(GROUP, "two", 0)
    parked = core.send(79, 1, _ack(a, {p0: [(0, 0, [ACCEPT])]}))
    assert isinstance(parked, Parked)
    coordinators.serve(refuse={0: refusal})
    coordinators.serve(refuse={0: refusal}, now_ms=GIVE_UP_AFTER_MS)
    (done,) = core.poll()
    response = core.decode(done.reply)
    assert response.responses[0].partitions[0].error_code == told
    assert coordinators.shares.share_partition(GROUP, "two", 0) is sp
    assert sp.state_of(0) == (1, 1, "a") and sp.state_of(1) == (1, 1, "b")
    assert sp.start_offset == 0
    c = Session(core, "c", conn_id=3)
    assert partitions_of(c.fetch([p0])) == {}
    # a acknowledges again, and this time it holds.
    parked = core.send(79, 1, _ack(a, {p0: [(0, 0, [ACCEPT])]}))
    coordinators.serve()
    (done,) = core.poll()
    assert core.decode(done.reply).responses[0].partitions[0].error_code == ErrorCode.NONE
    assert sp.start_offset == 1 and sp.state_of(1) == (1, 1, "b")


@pytest.mark.parametrize(
    ("refusal", "told"),
    [
        (ErrorCode.FENCED_STATE_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.GROUP_ID_NOT_FOUND),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ],
)
def test_a_fenced_write_forgets_the_share_partition(
    core: Any, make_batch: Any, refusal: ErrorCode, told: ErrorCode
) -> None:
    # Kafka's fencedSharePartitionHandler: these errors drop the share-partition
    # (SharePartitionManager.removeSharePartitionFromCache); it is read again.
    p0, coordinators, a, _b = cluster_pair(core, make_batch)
    core.send(79, 1, _ack(a, {p0: [(0, 0, [ACCEPT])]}))
    coordinators.serve(refuse={0: refusal})
    (done,) = core.poll()
    assert core.decode(done.reply).responses[0].partitions[0].error_code == told
    assert coordinators.shares.share_partition(GROUP, "two", 0) is None


def test_a_release_on_its_way_is_not_acquired_until_written(core: Any, make_batch: Any) -> None:
    # Kafka skips a record with an ongoing state transition when acquiring: a
    # released record is another member's only once the release is written.
    p0, coordinators, a, _b = cluster_pair(core, make_batch)
    parked = core.send(79, 1, _ack(a, {p0: [(0, 0, [RELEASE])]}))
    assert isinstance(parked, Parked)
    c = Session(core, "c", conn_id=3)
    assert partitions_of(c.fetch([p0])) == {}
    # a cannot acknowledge it meanwhile either (it is not a's any more).
    again = core.send(79, 1, _ack(a, {p0: [(0, 0, [ACCEPT])]}))
    coordinators.serve()
    replies = {core.decode(d.reply).responses[0].partitions[0].error_code for d in core.poll()}
    if not isinstance(again, Parked):
        replies.add(core.decode(again).responses[0].partitions[0].error_code)
    assert replies == {ErrorCode.NONE, ErrorCode.INVALID_RECORD_STATE}
    assert delivered(partitions_of(c.fetch())[p0]) == [(0, b"x0", 2)]


def test_a_refused_release_gives_the_record_back_to_its_lock(core: Any, make_batch: Any) -> None:
    p0, coordinators, a, _b = cluster_pair(core, make_batch)
    core.send(79, 1, _ack(a, {p0: [(0, 0, [RELEASE])]}))
    coordinators.serve(refuse={0: ErrorCode.INVALID_REQUEST})
    core.poll()
    sp = coordinators.shares.share_partition(GROUP, "two", 0)
    assert sp.state_of(0) == (1, 1, "a")
    c = Session(core, "c", conn_id=3)
    assert partitions_of(c.fetch([p0])) == {}
    core.poll(LOCK_MS)  # (b's lock ends too)
    assert delivered(partitions_of(c.fetch())[p0]) == [(0, b"x0", 2), (1, b"x1", 2)]


def test_a_refused_write_releases_a_record_whose_lock_ended_meanwhile(
    core: Any, make_batch: Any
) -> None:
    # The lock timeout leaves a record in transition alone (Kafka's
    # InFlightState.tryUpdateState refuses it); when the write then fails,
    # completeStateTransition(false) finds the lock's timer expired and releases
    # the record at once rather than hand it back to its holder.
    p0, coordinators, a, _b = cluster_pair(core, make_batch)
    core.send(79, 1, _ack(a, {p0: [(0, 0, [ACCEPT])]}))
    core.poll(LOCK_MS)  # (the locks end; the acknowledgement is still on its way)
    sp = coordinators.shares.share_partition(GROUP, "two", 0)
    assert sp.state_of(0) == (2, 1, None) and sp.state_of(1) == (0, 1, None)
    coordinators.serve(refuse={0: ErrorCode.INVALID_REQUEST}, now_ms=core.now)
    assert sp.state_of(0) == (0, 1, None)  # AVAILABLE, not a's again
    c = Session(core, "c", conn_id=3)
    assert delivered(partitions_of(c.fetch([p0]))[p0]) == [(0, b"x0", 2), (1, b"x1", 2)]


def test_a_closed_connection_whose_release_is_refused_keeps_the_others_records(
    core: Any, make_batch: Any
) -> None:
    # A connection's close releases its session's records (Kafka:
    # SharePartitionManager.releaseSession -> SharePartition.releaseAcquiredRecords);
    # refused, the release is rolled back: x0 waits for its lock, x1 stays b's.
    p0, coordinators, _a, _b = cluster_pair(core, make_batch)
    c = Session(core, "c", conn_id=3)
    assert partitions_of(c.fetch([p0])) == {}
    core.broker.connection_closed(1)
    sp = coordinators.shares.share_partition(GROUP, "two", 0)
    assert partitions_of(c.fetch()) == {}  # (the release is on its way)
    coordinators.serve(refuse={0: ErrorCode.INVALID_REQUEST})
    assert coordinators.shares.share_partition(GROUP, "two", 0) is sp
    assert sp.state_of(0) == (1, 1, "a") and sp.state_of(1) == (1, 1, "b")
    assert partitions_of(c.fetch()) == {}
    core.poll(LOCK_MS)
    got = delivered(partitions_of(c.fetch())[p0])
    assert (0, b"x0", 2) in got


def test_a_closing_fetch_answers_a_refused_acknowledgement(core: Any, make_batch: Any) -> None:
    # The final ShareFetch (epoch -1) acquires nothing; its acknowledgement's
    # failure is its partition's AcknowledgeErrorCode all the same.
    tid, coordinators, _a = cluster_members(core, make_batch)
    p0 = (tid, 0)
    request = fetch_request("a", -1, acks={p0: [(0, 0, [ACCEPT])]})
    parked = core.send(78, 1, request)
    assert isinstance(parked, Parked)
    coordinators.serve(refuse={0: ErrorCode.FENCED_STATE_EPOCH})
    (done,) = core.poll()
    answer = core.decode(done.reply)
    assert answer.error_code == ErrorCode.NONE
    part = partitions_of(answer)[p0]
    assert part.acknowledge_error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert delivered(part) == []


def _ack(session: Session, acks: dict[Any, list[tuple[int, int, list[int]]]]) -> Any:
    from test_share_fetch import ack_request

    request = ack_request(session.member, session.epoch, acks)
    session.epoch += 1
    return request


def test_a_share_partition_initialised_here_whose_first_write_is_refused_is_forgotten(
    core: Any, make_batch: Any
) -> None:
    # Kafka serves a share-partition only once its state is initialised on its
    # coordinator: one this leader initialised is kept only once written.
    tid = create(core, "q")
    coordinators = Coordinators(core)
    tp = (tid, 0)
    a = Session(core, "a")
    assert partitions_of(a.fetch([tp])) == {}
    coordinators.serve(start=-1)  # (not initialised: this leader does it)
    parked = a.send_fetch()
    assert isinstance(parked, Parked)  # (its first write on its way)
    assert coordinators.shares.share_partition(GROUP, "q", 0) is not None
    coordinators.serve(refuse={0: ErrorCode.INVALID_REQUEST})
    core.poll()
    assert coordinators.shares.share_partition(GROUP, "q", 0) is None
