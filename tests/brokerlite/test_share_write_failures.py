"""Share-state writes that fail (KIP-932), on one node (the journal) and in a
cluster (the share coordinators, through the persister), as Kafka 4.4 answers
them.

Kafka 4.4: ``SharePartition.acknowledge`` -> ``rollbackOrProcessStateUpdates``
puts every record the acknowledgement changed back as it was when the
persister's write fails (``InFlightState.completeStateTransition(false)``:
state and holder restored, the acquisition lock timer left running), and
``SharePartitionManager.mapAcknowledgementFutures`` answers that partition
with ``Errors.forException`` of the failure (UNKNOWN_SERVER_ERROR for a write
failed without a coordinator's code; ``fetchPersisterError`` makes a fenced
leader's NOT_LEADER_OR_FOLLOWER). ``KafkaApis.handleShareFetchRequest`` puts
it in the ShareFetch's AcknowledgeErrorCode and delivers the fetched records
regardless; ShareAcknowledge answers it in the partition's ErrorCode.
Acquiring is never written.
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


def test_a_failed_journal_write_leaves_the_state_to_the_next_write(
    open_core: Any, make_batch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session's close archives x (its 2nd delivery, at the limit); that write
    # fails, the close is answered (Kafka's releaseSession failure is only
    # logged) and the share-partition stays to be written: the next write, by a
    # request that changes nothing there, carries it, and the archive survives
    # a restart.
    core = open_core(group_share_delivery_count_limit=2)
    tp, a, b = two_members(core)
    produce_values(core, make_batch, "q", [b"x"])
    a.fetch()
    a.ack({tp: [(0, 0, [RELEASE])]})
    assert delivered(partitions_of(a.fetch())[tp]) == [(0, b"x", 2)]
    with broken_journal(core, monkeypatch):
        closed = core.call(78, 1, fetch_request("a", -1, acks={}), conn_id=1)
    assert closed.error_code == ErrorCode.NONE
    assert core.broker.shares.share_partition(GROUP, "q", 0).dirty
    assert partitions_of(b.fetch()) == {}  # (archived: nothing to acquire)
    core.broker.close()
    core = open_core(group_share_delivery_count_limit=2)
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.start_offset == 1


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
        self.shares = broker.shares

    def serve(self, refuse: dict[int, ErrorCode] | None = None) -> None:
        """Answer every request queued: reads with start offset 0 and nothing in
        flight, writes of the partitions in ``refuse`` with its error, others NONE."""
        from trafka.codec.messages import k84_read_share_group_state as read_m

        result = read_m.ReadShareGroupStateResponse.PartitionResult(
            partition=0, state_epoch=1, start_offset=0, state_batches=[]
        )
        for request in self.persister.take(0):
            if request.write is None:
                self.persister.answered(request, ErrorCode.NONE, result, 0)
            else:
                code = (refuse or {}).get(request.key[2], ErrorCode.NONE)
                self.persister.answered(request, code, None, 0)


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
    # UNKNOWN_SERVER_ERROR for its partition; the other partition's holds.
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
    assert coordinators.shares.share_partition(GROUP, "two", 1) is None


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
