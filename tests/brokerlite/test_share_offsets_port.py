"""The cluster side of the share-group offsets admin's port, without sockets
(KIP-932: the group coordinator reaches share state through the share
coordinators: ReadShareGroupState, then InitializeShareGroupState or
DeleteShareGroupState), and the persister's read-after-write rule."""

from __future__ import annotations

import uuid
from typing import Any

from trafka.brokerlite.shares.offsets_admin import ShareOffsetInfo
from trafka.brokerlite.shares.offsets_port import ClusterShareOffsets
from trafka.brokerlite.shares.persister import RETRY_BACKOFF_MS, RemotePersister, StateRequest
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import ApiKey
from trafka.codec.messages import k02_list_offsets as list_m
from trafka.codec.messages import k84_read_share_group_state as read_m

TID = str(uuid.UUID(int=9))
R = read_m.ReadShareGroupStateResponse
L = list_m.ListOffsetsResponse


def port(
    initialized: set[tuple[str, int]] | None = None, bounds: tuple[int, int, int] = (0, 10, 10)
) -> tuple[ClusterShareOffsets, list[int]]:
    done: list[int] = []
    p = ClusterShareOffsets(
        topic_info=lambda t: (TID, 2) if t == "t" else None,
        bounds=lambda t, i: bounds,
        initialized=lambda g: set(initialized or ()),
    )
    p.on_done = lambda: done.append(1)
    return p, done


def read_answer(start: int, epoch: int = 0, runs: Any = ()) -> Any:
    return R.PartitionResult(
        partition=0,
        state_epoch=epoch,
        start_offset=start,
        state_batches=[
            R.StateBatch(first_offset=a, last_offset=b, delivery_state=c, delivery_count=d)
            for a, b, c, d in runs
        ],
    )


def only(requests: list[StateRequest]) -> StateRequest:
    (request,) = requests
    return request


def test_alter_reads_the_state_epoch_then_initialises_at_the_next() -> None:
    p, done = port()
    job = p.alter("g", {("t", 0): 4, ("t", 5): 1, ("nope", 0): 1, ("t", 1): 11})
    read = only(p.take(0))
    assert read.api_key == 84
    assert read.body.topics[0].partitions[0].leader_epoch == -1  # (the admin's read)
    p.answered(read, ErrorCode.NONE, read_answer(7, epoch=3), 0)
    init = only(p.take(0))
    assert init.api_key == 83
    data = init.body.topics[0].partitions[0]
    assert (data.state_epoch, data.start_offset) == (4, 4)
    assert not job.done
    p.answered(init, ErrorCode.NONE, None, 0)
    assert job.done and done == [1]
    assert job.value[("t", 0)] == (ErrorCode.NONE, None)
    assert job.value[("t", 5)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert job.value[("nope", 0)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert job.value[("t", 1)][0] == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_coordinator_not_there_is_asked_again_after_the_backoff() -> None:
    p, _ = port()
    job = p.describe("g", [("t", 0)])
    read = only(p.take(0))
    p.answered(read, ErrorCode.NOT_COORDINATOR, None, 1000)
    assert p.take(1000) == []
    assert p.next_retry() == 1000 + RETRY_BACKOFF_MS
    again = only(p.take(1000 + RETRY_BACKOFF_MS))
    p.answered(again, ErrorCode.NONE, read_answer(2, runs=[(2, 3, 0, 1), (4, 5, 2, 1)]), 0)
    end = only(p.take(0))
    assert (end.api_key, end.leader_of) == (ApiKey.LIST_OFFSETS, ("t", 0))
    p.answered(end, ErrorCode.NONE, L.ListOffsetsPartitionResponse(offset=10), 0)
    # Lag (KIP-1226): high watermark 10 - start 2 - acknowledged 4-5.
    assert job.value == {("t", 0): ShareOffsetInfo(2, 6)}


def test_the_lag_is_the_leaders_high_watermark_or_unknown() -> None:
    """KIP-1226's lag counts up to the partition's high watermark, which Kafka's
    group coordinator asks of the partition's leader (ListOffsets, latest,
    read_uncommitted): not this broker's copy (here a follower's, stale at 3).
    A leader that moved is asked again; no leader leaves the lag unknown (-1)."""
    p, _ = port(bounds=(0, 10, 3))
    job = p.describe("g", [("t", 0), ("t", 1)])
    for read in p.take(0):
        p.answered(read, ErrorCode.NONE, read_answer(2), 0)
    first, second = p.take(0)
    latest = first.body.topics[0].partitions[0]
    assert (first.body.isolation_level, latest.timestamp) == (0, -1)
    p.answered(first, ErrorCode.NOT_LEADER_OR_FOLLOWER, None, 0)
    p.answered(second, ErrorCode.LEADER_NOT_AVAILABLE, None, 0)
    assert not job.done
    again = only(p.take(RETRY_BACKOFF_MS))
    p.answered(again, ErrorCode.NONE, L.ListOffsetsPartitionResponse(offset=9), 0)
    assert job.value == {("t", 0): ShareOffsetInfo(2, 7), ("t", 1): ShareOffsetInfo(2, -1)}


def test_delete_touches_only_share_partitions_with_state() -> None:
    p, _ = port()
    job = p.delete_topics("g", ["t", "nope"])
    reads = p.take(0)
    assert sorted(r.key[2] for r in reads) == [0, 1]
    for r in reads:
        p.answered(r, ErrorCode.NONE, read_answer(5 if r.key[2] == 0 else -1), 0)
    delete = only(p.take(0))
    assert (delete.api_key, delete.key) == (86, ("g", "t", 0))
    p.answered(delete, ErrorCode.NONE, None, 0)
    assert job.value == {
        "t": (ErrorCode.NONE, None),
        "nope": (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown topic nope"),
    }
    # Nothing with state: Kafka's "no offset information to delete".
    job = p.delete_topics("g", ["t"])
    for r in p.take(0):
        p.answered(r, ErrorCode.NONE, read_answer(-1), 0)
    assert job.value["t"][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_group_without_state_is_done_at_once_and_an_abandoned_job_sends_nothing() -> None:
    p, _ = port()
    job = p.delete_groups({"g": set()})
    assert job.done and job.value == {"g": ErrorCode.NONE}
    job = p.delete_groups({"g": {("t", 0)}})
    p.abandon(job)
    assert p.take(0) == []
    assert not job.done


def test_the_persister_reads_a_key_only_after_its_writes_settled() -> None:
    persister = RemotePersister(lambda topic, partition: 1)
    key = ("g", "t", 0)
    persister.write(
        [
            {
                "kind": "partition",
                "group": "g",
                "topic": "t",
                "topic_id": TID,
                "partition": 0,
                "start": 3,
                "runs": [],
            }
        ]
    )
    assert persister.want(key, TID) is None  # (queued)
    write = only(persister.take(0))
    assert write.api_key == 85
    assert persister.take(0) == []  # the read waits for the write
    persister.answered(write, ErrorCode.NONE, None, 0)
    assert only(persister.take(0)).api_key == 84
