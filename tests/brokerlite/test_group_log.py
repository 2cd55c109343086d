"""Group state in ``__consumer_offsets`` (cluster mode, group_log), without sockets:
commits replayed by a new leader, TxnOffsetCommit's pending offsets settled by
their transaction's marker, and what OffsetFetch reads (the offsets its partition
has replicated)."""

from __future__ import annotations

import pytest

from trafka.brokerlite.cluster.controller import coordinator_partition
from trafka.brokerlite.errors import OffsetStoreError
from trafka.brokerlite.groups.offsets import CommittedOffset
from trafka.brokerlite.groups.replicated_offsets import ReplicatedOffsetStore
from trafka.codec.errors import ErrorCode

PARTITIONS = 3


class Logs:
    """The partitions' logs (batches), each replicated up to its high watermark
    (in batches; None: all of them)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.replicated: dict[int, int | None] = dict.fromkeys(range(PARTITIONS))

    def store(self) -> ReplicatedOffsetStore:
        return ReplicatedOffsetStore(
            partition_for=lambda g: coordinator_partition(g, PARTITIONS),
            append=lambda p, b: self.batches[p].append(b),
            read=lambda p: list(self.batches[p]),
            now_ms=lambda: 5,
            high_watermark=self.high_watermark,
            log_end=lambda p: len(self.batches[p]),
        )

    def high_watermark(self, partition: int) -> int:
        replicated = self.replicated[partition]
        return len(self.batches[partition]) if replicated is None else replicated


GROUP = "g-0"
P = coordinator_partition(GROUP, PARTITIONS)


def offset(n: int) -> CommittedOffset:
    return CommittedOffset(n, -1, "", 5)


def loaded(logs: Logs) -> ReplicatedOffsetStore:
    store = logs.store()
    store.load_partition(P)
    return store


def test_commits_are_replayed_by_the_next_leader() -> None:
    logs = Logs()
    store = loaded(logs)
    store.commit_offsets(GROUP, {("t", 0): offset(3), ("t", 1): offset(4)})
    store.commit_offsets(GROUP, {("t", 0): offset(7)})
    again = logs.store()
    assert again.load_partition(P) == {GROUP}
    assert again.group_offsets(GROUP) == {("t", 0): offset(7), ("t", 1): offset(4)}


def test_a_commit_marker_applies_the_offsets_staged_at_its_epoch() -> None:
    logs = Logs()
    store = loaded(logs)
    assert store.stage_transactional(GROUP, 9, 2, {("t", 0): offset(10)}) is ErrorCode.NONE
    assert store.pending_partitions(GROUP) == {("t", 0)}
    assert store.group_offsets(GROUP) == {}
    # The leader changes before the marker: its successor holds them pending too.
    successor = logs.store()
    successor.load_partition(P)
    assert successor.pending_partitions(GROUP) == {("t", 0)}
    assert successor.settle_transaction(P, 9, 2, commit=True) == {GROUP: {("t", 0): offset(10)}}
    assert successor.group_offsets(GROUP) == {("t", 0): offset(10)}
    assert successor.pending_partitions(GROUP) == set()
    # Settling is one batch: replayed, the offsets are committed and nothing pending.
    third = logs.store()
    third.load_partition(P)
    assert third.group_offsets(GROUP) == {("t", 0): offset(10)}
    assert third.pending_partitions(GROUP) == set()
    # A marker arriving twice changes nothing.
    assert third.settle_transaction(P, 9, 2, commit=True) == {}


def test_an_abort_marker_drops_them_and_other_producers_are_untouched() -> None:
    store = loaded(Logs())
    store.stage_transactional(GROUP, 9, 2, {("t", 0): offset(10)})
    store.stage_transactional(GROUP, 11, 0, {("t", 1): offset(20)})
    assert store.settle_transaction(P, 9, 3, commit=False) == {}
    assert store.pending_partitions(GROUP) == {("t", 1)}
    assert store.group_offsets(GROUP) == {}


def test_a_fenced_instances_offsets_are_dropped_not_committed() -> None:
    store = loaded(Logs())
    store.stage_transactional(GROUP, 9, 1, {("t", 0): offset(10)})  # an old instance
    store.stage_transactional(GROUP, 9, 2, {("t", 1): offset(20)})
    assert store.settle_transaction(P, 9, 2, commit=True) == {GROUP: {("t", 1): offset(20)}}
    assert store.group_offsets(GROUP) == {("t", 1): offset(20)}
    assert store.pending_partitions(GROUP) == set()


def test_a_transaction_version_2_marker_commits_the_offsets_of_the_epoch_before() -> None:
    """KIP-890 part 2: the coordinator bumps the epoch in its decision, so a
    marker of transaction version 2 (WriteTxnMarkers v2, KIP-1228) carries the
    transaction's epoch plus one; it commits the offsets staged at that epoch
    and drops an older instance's."""
    store = loaded(Logs())
    store.stage_transactional(GROUP, 9, 1, {("t", 0): offset(10)})  # an old instance
    store.stage_transactional(GROUP, 9, 2, {("t", 1): offset(20)})
    assert store.settle_transaction(P, 9, 3, commit=True, tv2=True) == {
        GROUP: {("t", 1): offset(20)}
    }
    assert store.group_offsets(GROUP) == {("t", 1): offset(20)}
    assert store.pending_partitions(GROUP) == set()


def test_an_older_epoch_than_the_pending_one_is_refused() -> None:
    store = loaded(Logs())
    store.stage_transactional(GROUP, 9, 3, {("t", 0): offset(10)})
    assert store.stage_transactional(GROUP, 9, 2, {("t", 1): offset(1)}) is (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )
    assert store.pending_partitions(GROUP) == {("t", 0)}


def test_deleting_a_group_drops_its_pending_offsets_for_good() -> None:
    logs = Logs()
    store = loaded(logs)
    store.stage_transactional(GROUP, 9, 0, {("t", 0): offset(10)})
    store.delete_group(GROUP)
    assert store.pending_partitions(GROUP) == set()
    again = logs.store()
    again.load_partition(P)
    assert again.pending_partitions(GROUP) == set()


def test_a_group_of_a_partition_not_led_here_cannot_be_written() -> None:
    store = Logs().store()
    with pytest.raises(OffsetStoreError, match="does not hold"):
        store.stage_transactional(GROUP, 9, 0, {("t", 0): offset(1)})


def test_a_log_that_cannot_be_read_loads_nothing() -> None:
    """A partition whose replay fails part-way is neither loaded nor half in memory:
    Kafka's coordinator serves a group only once its partition is fully loaded."""
    logs = Logs()
    store = loaded(logs)
    store.commit_offsets(GROUP, {("t", 0): offset(3)})
    logs.batches[P].append(b"\x00" * 70)  # a batch that does not decode
    again = logs.store()
    with pytest.raises(OffsetStoreError):
        again.load_partition(P)
    assert P not in again.loaded_partitions()
    assert again.group_offsets(GROUP) == {}


def test_offsets_are_read_once_their_partition_replicated_them() -> None:
    """Kafka puts a commit in its cache from the acks=-1 append's callback
    (``GroupMetadataManager.storeOffsets``); until then OffsetFetch reads the
    offset before it, and ``require_stable`` sees the partition pending."""
    logs = Logs()
    store = loaded(logs)
    logs.replicated[P] = 0
    store.commit_offsets(GROUP, {("t", 0): offset(3), ("t", 1): offset(4)})
    assert store.group_offsets(GROUP) == {("t", 0): offset(3), ("t", 1): offset(4)}
    assert store.readable_offsets(GROUP) == {}
    assert store.pending_partitions(GROUP) == {("t", 0), ("t", 1)}
    store.commit_offsets(GROUP, {("t", 0): offset(7)})
    logs.replicated[P] = 1  # the first batch only
    assert store.readable_offsets(GROUP) == {("t", 0): offset(3), ("t", 1): offset(4)}
    assert store.pending_partitions(GROUP) == {("t", 0)}
    store.delete_group(GROUP)
    logs.replicated[P] = 2
    assert store.readable_offsets(GROUP) == {("t", 0): offset(7), ("t", 1): offset(4)}
    logs.replicated[P] = None
    assert store.readable_offsets(GROUP) == {}
    assert store.pending_partitions(GROUP) == set()


def test_a_transactions_offsets_are_read_once_its_marker_replicated() -> None:
    """The offsets a marker commits count once the marker is replicated (Kafka:
    ``onTransactionCompleted`` from the marker append's callback); an abort's
    partitions are pending until then too."""
    logs = Logs()
    store = loaded(logs)
    store.stage_transactional(GROUP, 9, 0, {("t", 0): offset(10)})
    store.stage_transactional(GROUP, 11, 0, {("t", 1): offset(20)})
    logs.replicated[P] = len(logs.batches[P])
    store.settle_transaction(P, 9, 0, commit=True)
    store.settle_transaction(P, 11, 0, commit=False)
    assert store.group_offsets(GROUP) == {("t", 0): offset(10)}
    assert store.readable_offsets(GROUP) == {}
    assert store.pending_partitions(GROUP) == {("t", 0), ("t", 1)}
    logs.replicated[P] = None
    assert store.readable_offsets(GROUP) == {("t", 0): offset(10)}
    assert store.pending_partitions(GROUP) == set()


def test_a_new_leader_reads_its_whole_log_and_forgets_the_old_waits() -> None:
    logs = Logs()
    store = loaded(logs)
    store.commit_offsets(GROUP, {("t", 0): offset(3)})
    logs.replicated[P] = 1
    store.commit_offsets(GROUP, {("t", 0): offset(7)})
    assert store.readable_offsets(GROUP) == {("t", 0): offset(3)}
    # Leadership lost, the unreplicated batch truncated away, leadership back.
    assert store.unload_partition(P) == {GROUP}
    assert store.readable_offsets(GROUP) == {}
    logs.batches[P].pop()
    assert store.load_partition(P) == {GROUP}
    assert store.readable_offsets(GROUP) == {("t", 0): offset(3)}
    # A batch at the offset the forgotten one had waits for its own replication.
    store.commit_offsets(GROUP, {("t", 0): offset(9)})
    assert store.readable_offsets(GROUP) == {("t", 0): offset(3)}
    logs.replicated[P] = 2
    assert store.readable_offsets(GROUP) == {("t", 0): offset(9)}
