"""The share coordinator and the share-partition leader's persister, without sockets
(KIP-932: share-partition state kept by the share coordinator in
``__share_group_state``, read and written by the share-partition leader with
ReadShareGroupState / WriteShareGroupState)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

import pytest

from trafka.brokerlite.cluster.controller import coordinator_partition
from trafka.brokerlite.shares.coordinator import (
    ShareCoordinator,
    ShareCoordinatorError,
    ShareStateRecord,
    state_key,
)
from trafka.brokerlite.shares.persister import GIVE_UP_AFTER_MS, RETRY_BACKOFF_MS, RemotePersister
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k84_read_share_group_state as read_m
from trafka.codec.records import decode_records

PARTITIONS = 3
TID = str(uuid.UUID(int=7))


class Logs:
    """``__share_group_state``'s partitions as lists of batches."""

    def __init__(self) -> None:
        self.batches: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}

    def append(self, partition: int, batch: bytes) -> None:
        self.batches[partition].append(batch)

    def read(self, partition: int) -> Iterable[bytes]:
        return list(self.batches[partition])

    def records(self) -> list[tuple[Any, Any]]:
        return [
            (json.loads(r.key), None if r.value is None else json.loads(r.value))
            for p in sorted(self.batches)
            for b in self.batches[p]
            for r in decode_records(b)
        ]


def coordinator(logs: Logs, *, loaded: bool = True) -> ShareCoordinator:
    sc = ShareCoordinator(
        partition_for=lambda key: coordinator_partition(key, PARTITIONS),
        append=logs.append,
        read=logs.read,
        now_ms=lambda: 1_000,
    )
    if loaded:
        for p in range(PARTITIONS):
            sc.load_partition(p)
    return sc


def test_a_share_partition_never_written_reads_as_not_initialized() -> None:
    sc = coordinator(Logs())
    assert sc.read("g", TID, 0, leader_epoch=0) == (ErrorCode.NONE, None)


def test_a_write_is_one_keyed_record_of_the_keys_partition_and_survives_a_new_coordinator() -> None:
    logs = Logs()
    sc = coordinator(logs)
    runs = [(5, 9, 2, 1), (10, 12, 0, 3)]
    code = sc.write("g", TID, 1, state_epoch=0, leader_epoch=4, start=5, runs=runs)
    assert code == ErrorCode.NONE
    where = coordinator_partition(state_key("g", TID, 1), PARTITIONS)
    assert len(logs.batches[where]) == 1
    assert logs.records() == [
        (
            ["share", "g", TID, 1],
            {"state_epoch": 0, "leader_epoch": 4, "start": 5, "runs": [list(r) for r in runs]},
        )
    ]
    # The partition's next leader replays the log.
    again = coordinator(logs)
    assert again.read("g", TID, 1, leader_epoch=4) == (
        ErrorCode.NONE,
        ShareStateRecord(0, 4, 5, tuple(runs)),
    )


def test_a_deposed_leader_is_fenced_once_its_successor_has_read() -> None:
    logs = Logs()
    sc = coordinator(logs)
    assert sc.write("g", TID, 0, state_epoch=0, leader_epoch=1, start=0, runs=[]) == ErrorCode.NONE
    code, state = sc.read("g", TID, 0, leader_epoch=2)  # the new leader
    assert code == ErrorCode.NONE and state is not None and state.leader_epoch == 2
    # Recorded: even a coordinator that replays the log fences the old leader.
    for c in (sc, coordinator(logs)):
        assert (
            c.write("g", TID, 0, state_epoch=0, leader_epoch=1, start=3, runs=[])
            == ErrorCode.FENCED_LEADER_EPOCH
        )
        assert c.read("g", TID, 0, leader_epoch=1) == (ErrorCode.FENCED_LEADER_EPOCH, None)
    assert sc.state("g", TID, 0) == ShareStateRecord(0, 2, 0)


def test_state_epochs_fence_writes_and_initialize_starts_afresh() -> None:
    sc = coordinator(Logs())
    assert (
        sc.write("g", TID, 0, state_epoch=0, leader_epoch=0, start=4, runs=[(4, 6, 0, 1)])
        == ErrorCode.NONE
    )
    assert sc.initialize("g", TID, 0, state_epoch=1, start=10) == ErrorCode.NONE
    assert sc.state("g", TID, 0) == ShareStateRecord(1, 0, 10)
    assert (
        sc.write("g", TID, 0, state_epoch=0, leader_epoch=0, start=4, runs=[])
        == ErrorCode.FENCED_STATE_EPOCH
    )
    assert sc.initialize("g", TID, 0, state_epoch=0, start=1) == ErrorCode.FENCED_STATE_EPOCH
    assert (
        sc.write("g", TID, 0, state_epoch=1, leader_epoch=0, start=-1, runs=[])
        == ErrorCode.INVALID_REQUEST
    )


def test_delete_leaves_a_marker_that_fences_the_old_state() -> None:
    """DeleteShareGroupState (KIP-932): the share-partition reads as not
    initialized afterwards, and a leader still holding the old state (its state
    epoch) cannot write it back: FENCED_STATE_EPOCH, so it reads the state again."""
    logs = Logs()
    sc = coordinator(logs)
    sc.write("g", TID, 2, state_epoch=0, leader_epoch=3, start=1, runs=[])
    assert sc.delete("g", TID, 2) == ErrorCode.NONE
    key, value = logs.records()[-1]
    assert key == ["share", "g", TID, 2]
    assert value == {"state_epoch": 1, "leader_epoch": 3, "start": -1, "runs": []}
    code, marker = coordinator(logs).read("g", TID, 2, leader_epoch=3)
    assert code == ErrorCode.NONE and marker is not None
    assert (marker.start, marker.state_epoch) == (-1, 1)
    stale = sc.write("g", TID, 2, state_epoch=0, leader_epoch=3, start=1, runs=[])
    assert stale == ErrorCode.FENCED_STATE_EPOCH
    fresh = sc.write("g", TID, 2, state_epoch=1, leader_epoch=3, start=0, runs=[])
    assert fresh == ErrorCode.NONE
    # Deleting what is not there (never written, or already deleted) writes nothing.
    sc.delete("g", TID, 1)
    before = len(logs.records())
    assert sc.delete("g", TID, 1) == ErrorCode.NONE
    assert len(logs.records()) == before


def test_the_group_coordinators_read_is_neither_fenced_nor_recorded() -> None:
    """Leader epoch -1: the offsets admin's read (Kafka's ReadShareGroupStateSummary
    is not fenced either); the stored leader epoch stays."""
    logs = Logs()
    sc = coordinator(logs)
    sc.write("g", TID, 0, state_epoch=2, leader_epoch=5, start=4, runs=[(4, 6, 2, 1)])
    count = len(logs.records())
    code, state = sc.read("g", TID, 0, leader_epoch=-1)
    assert code == ErrorCode.NONE and state is not None
    assert (state.start, state.state_epoch, state.leader_epoch) == (4, 2, 5)
    assert len(logs.records()) == count
    assert sc.read("g", TID, 0, leader_epoch=4)[0] == ErrorCode.FENCED_LEADER_EPOCH


def test_keys_of_a_partition_not_led_here_are_not_coordinated() -> None:
    logs = Logs()
    sc = coordinator(logs, loaded=False)
    assert sc.read("g", TID, 0, leader_epoch=0) == (ErrorCode.NOT_COORDINATOR, None)
    where = sc.partition_of("g", TID, 0)
    assert where is not None
    sc.load_partition(where)
    assert sc.read("g", TID, 0, leader_epoch=0) == (ErrorCode.NONE, None)
    sc.write("g", TID, 0, state_epoch=0, leader_epoch=0, start=2, runs=[])
    sc.unload_partition(where)
    assert sc.state("g", TID, 0) is None
    assert (
        sc.write("g", TID, 0, state_epoch=0, leader_epoch=0, start=2, runs=[])
        == ErrorCode.NOT_COORDINATOR
    )
    assert logs.records() and len(logs.records()) == 1  # the refused write appended nothing


def test_an_unreadable_record_leaves_the_partition_unloaded() -> None:
    logs = Logs()
    sc = coordinator(logs)
    sc.write("g", TID, 0, state_epoch=0, leader_epoch=0, start=2, runs=[])
    where = sc.partition_of("g", TID, 0)
    assert where is not None
    from trafka.codec.records import encode_batch

    logs.append(where, encode_batch([(0, b'["share","g"]', b"{}", ())]))
    fresh = coordinator(logs, loaded=False)
    with pytest.raises(ShareCoordinatorError):
        fresh.load_partition(where)
    assert where not in fresh.loaded_partitions()
    assert fresh.read("g", TID, 0, leader_epoch=0)[0] == ErrorCode.NOT_COORDINATOR


# -- the persister ---------------------------------------------------------------------------

KEY = ("g", "t", 0)


def result(start: int, runs: list[tuple[int, int, int, int]]) -> Any:
    R = read_m.ReadShareGroupStateResponse
    return R.PartitionResult(
        partition=0,
        state_epoch=3,
        start_offset=start,
        state_batches=[
            R.StateBatch(first_offset=a, last_offset=b, delivery_state=c, delivery_count=d)
            for a, b, c, d in runs
        ],
    )


def entry(start: int) -> dict[str, Any]:
    return {
        "kind": "partition",
        "group": "g",
        "topic": "t",
        "topic_id": TID,
        "partition": 0,
        "start": start,
        "runs": [],
    }


def test_the_persister_reads_once_then_hands_the_state_over() -> None:
    epochs = {("t", 0): 5}
    p = RemotePersister(lambda t, i: epochs.get((t, i)))
    loaded: list[Any] = []
    p.on_loaded = loaded.append
    assert p.want(KEY, TID) is None
    assert p.want(KEY, TID) is None  # (one read queued)
    (req,) = p.take(0)
    assert req.api_key == ApiKey.READ_SHARE_GROUP_STATE and req.coordinator_key == state_key(
        "g", TID, 0
    )
    assert req.body.topics[0].partitions[0].leader_epoch == 5
    assert p.take(0) == []
    p.answered(req, ErrorCode.NONE, result(4, [(4, 4, 0, 2)]), 0)
    assert loaded == [KEY]
    got = p.want(KEY, TID)
    assert got is not None and got.snapshot == {"start": 4, "runs": [[4, 4, 0, 2]]}
    # Writes carry the state epoch read and the leader epoch of the snapshot's time,
    # and (v1, KIP-1226) how many in-flight offsets are done: acknowledged (2) or
    # archived (4), not available (0) or acquired (1).
    p.write([{**entry(5), "runs": [[5, 6, 2, 1], [7, 7, 0, 1], [8, 10, 4, 2]]}])
    (w,) = p.take(0)
    data = w.body.topics[0].partitions[0]
    assert (w.api_key, data.state_epoch, data.leader_epoch, data.start_offset) == (
        ApiKey.WRITE_SHARE_GROUP_STATE,
        3,
        5,
        5,
    )
    assert data.delivery_complete_count == 5


def test_not_initialized_reads_as_none_and_retriable_errors_retry_after_the_backoff() -> None:
    p = RemotePersister(lambda t, i: 0)
    p.want(KEY, TID)
    (req,) = p.take(0)
    p.answered(req, ErrorCode.NOT_COORDINATOR, None, 1_000)
    assert p.take(1_000) == [] and p.next_retry() == 1_100
    (again,) = p.take(1_100)
    p.answered(again, ErrorCode.NONE, result(-1, []), 1_100)
    got = p.want(KEY, TID)
    assert got is not None and got.snapshot is None


def test_an_answer_waits_for_its_writes_and_a_newer_snapshot_carries_older_tickets() -> None:
    p = RemotePersister(lambda t, i: 0)
    settled: list[int] = []
    p.on_settled = lambda: settled.append(1)
    mark = p.mark()
    p.write([entry(1)])
    assert p.outcome(mark, p.mark()) is None
    (first,) = p.take(0)
    mark2 = p.mark()
    p.write([entry(2)])  # queued behind the one in flight
    assert p.take(0) == []  # one write of a share-partition at a time
    p.answered(first, ErrorCode.NOT_COORDINATOR, None, 0)  # retried: behind the newer one
    (second,) = p.take(200)
    assert second.body.topics[0].partitions[0].start_offset == 2
    assert sorted(second.write.tickets) == [1, 2]  # type: ignore[union-attr]
    assert p.outcome(mark, p.mark()) is None and p.outcome(mark2, p.mark()) is None
    p.answered(second, ErrorCode.NONE, None, 200)
    assert p.outcome(mark, p.mark()) == ErrorCode.NONE and settled


def test_a_fenced_write_fails_its_waiters_and_is_reported_before_they_wake() -> None:
    # The fetcher hears of each settled write (its tickets, the client's error)
    # before the waiters are woken: it forgets a fenced share-partition (writes.py).
    p = RemotePersister(lambda t, i: 0)
    written: list[Any] = []
    p.on_written = lambda key, tickets, code, _now: written.append((key, list(tickets), code))
    p.on_settled = lambda: written.append("woken")
    mark = p.mark()
    assert p.write([entry(1)]) == {KEY: 1}
    (w,) = p.take(0)
    p.answered(w, ErrorCode.FENCED_LEADER_EPOCH, None, 0)
    assert p.outcome(mark, p.mark()) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert written == [(KEY, [1], ErrorCode.NOT_LEADER_OR_FOLLOWER), "woken"]
    p.write([entry(2)])
    (w,) = p.take(0)
    p.answered(w, ErrorCode.NONE, None, 0)
    assert written[2:] == [(KEY, [2], ErrorCode.NONE), "woken"]


def test_a_rollback_retakes_the_snapshot_still_queued() -> None:
    # A failed write's rollback changes the share-partition; its newer snapshot,
    # queued behind, carried what was rolled back and is taken again.
    p = RemotePersister(lambda t, i: 0)
    p.write([entry(1)])
    (w,) = p.take(0)
    p.write([entry(2)])
    p.retake(KEY, {"start": 1, "runs": [[1, 1, 0, 1]]})
    p.answered(w, ErrorCode.INVALID_REQUEST, None, 0)
    (again,) = p.take(0)
    data = again.body.topics[0].partitions[0]
    assert data.start_offset == 1 and len(data.state_batches) == 1
    p.retake(KEY, {"start": 9, "runs": []})  # (nothing queued: nothing to retake)
    assert p.take(0) == []


def test_failed_writes_are_named_per_share_partition_with_the_clients_error() -> None:
    # As Kafka 4.4's SharePartition.fetchPersisterError maps the coordinator's
    # error: a fenced leader's NOT_LEADER_OR_FOLLOWER, GROUP_ID_NOT_FOUND and
    # UNKNOWN_TOPIC_OR_PARTITION as they are, any other UNKNOWN_SERVER_ERROR.
    p = RemotePersister(lambda t, i: 0)
    before = p.mark()
    p.write([{**entry(1), "partition": i} for i in range(5)])
    refused = [
        ErrorCode.FENCED_STATE_EPOCH,
        ErrorCode.GROUP_ID_NOT_FOUND,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.NONE,
    ]
    for request in p.take(0):
        p.answered(request, refused[request.key[2]], None, 0)
    assert p.failures(before, p.mark()) == {
        ("g", "t", 0): ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ("g", "t", 1): ErrorCode.GROUP_ID_NOT_FOUND,
        ("g", "t", 2): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("g", "t", 3): ErrorCode.UNKNOWN_SERVER_ERROR,
    }
    assert p.outcome(before, p.mark()) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # Writes after the mark only: a later request does not see these.
    later = p.mark()
    p.write([entry(2)])
    (request,) = p.take(0)
    p.answered(request, ErrorCode.NONE, None, 0)
    assert p.failures(later, p.mark()) == {}


def test_a_write_failing_for_kafkas_retry_time_is_given_up_with_coordinator_not_available() -> None:
    # Kafka 4.4's persister (PersisterStateManager.WriteStateHandler) retries a
    # write answered NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE /
    # COORDINATOR_LOAD_IN_PROGRESS five times, 1 s apart doubling, then fails it;
    # SharePartition.fetchPersisterError tells the client COORDINATOR_NOT_AVAILABLE.
    p = RemotePersister(lambda t, i: 0)
    written: list[Any] = []
    p.on_written = lambda key, tickets, code, _now: written.append((key, sorted(tickets), code))
    mark = p.mark()
    p.write([entry(1)])
    now = 1_000
    (w,) = p.take(now)
    p.answered(w, ErrorCode.NOT_COORDINATOR, None, now)  # the first failure
    # A newer snapshot queued meanwhile carries the older ticket and its clock.
    p.write([entry(2)])
    while now < 1_000 + GIVE_UP_AFTER_MS - RETRY_BACKOFF_MS:
        now = p.next_retry() or now
        (w,) = p.take(now)
        p.answered(w, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None, now)
        assert p.outcome(mark, p.mark()) is None and written == []
    now = p.next_retry() or now
    (w,) = p.take(now)
    assert sorted(w.write.tickets) == [1, 2]  # type: ignore[union-attr]
    p.answered(w, ErrorCode.COORDINATOR_NOT_AVAILABLE, None, now)
    assert now - 1_000 >= GIVE_UP_AFTER_MS
    assert p.outcome(mark, p.mark()) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert p.failures(mark, p.mark()) == {KEY: ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert written == [(KEY, [1, 2], ErrorCode.COORDINATOR_NOT_AVAILABLE)]
    assert p.take(now + 10 * RETRY_BACKOFF_MS) == []
    # A write that fails once and then lands starts afresh: no clock carried.
    later = p.mark()
    p.write([entry(3)])
    (w,) = p.take(now)
    p.answered(w, ErrorCode.NOT_COORDINATOR, None, now)
    (w,) = p.take(now + RETRY_BACKOFF_MS)
    p.answered(w, ErrorCode.NONE, None, now + RETRY_BACKOFF_MS)
    assert p.outcome(later, p.mark()) == ErrorCode.NONE


def test_a_partition_no_longer_led_here_is_neither_read_nor_written() -> None:
    leading = {("t", 0): 1}
    p = RemotePersister(lambda t, i: leading.get((t, i)))
    p.want(KEY, TID)
    del leading[("t", 0)]
    assert p.take(0) == []
    mark = p.mark()
    p.write([entry(3)])
    assert p.take(0) == [] and p.outcome(mark, p.mark()) == ErrorCode.NONE
