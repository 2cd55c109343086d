"""Cluster-mode transaction state in ``__transaction_state`` (txn_log) and the
coordinator's loading and unloading of it, without sockets: the partition logs
are lists of record batches."""

from __future__ import annotations

import pytest

from trafka.brokerlite.cluster.controller import coordinator_partition
from trafka.brokerlite.transactions.coordinator import TransactionCoordinator
from trafka.brokerlite.transactions.journal import TransactionState, TxnJournalError, TxnRecord
from trafka.brokerlite.transactions.replicated_journal import ReplicatedTxnJournal
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k22_init_producer_id as ipi
from trafka.codec.messages import k24_add_partitions_to_txn as apt
from trafka.codec.messages import k25_add_offsets_to_txn as aot
from trafka.codec.messages import k26_end_txn as et
from trafka.codec.messages import k28_txn_offset_commit as toc
from trafka.codec.records import decode_records

PARTITIONS = 3


class Logs:
    """``__transaction_state``'s partitions as lists of batches (what a leader holds)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}

    def append(self, partition: int, batch: bytes) -> None:
        self.batches[partition].append(batch)

    def read(self, partition: int) -> list[bytes]:
        return list(self.batches[partition])

    def journal(self) -> ReplicatedTxnJournal:
        return ReplicatedTxnJournal(
            partition_for=lambda tid: coordinator_partition(tid, PARTITIONS),
            append=self.append,
            read=self.read,
            now_ms=lambda: 1000,
        )


def ids_in(partition: int, count: int) -> list[str]:
    out = []
    i = 0
    while len(out) < count:
        tid = f"tx-{i}"
        if coordinator_partition(tid, PARTITIONS) == partition:
            out.append(tid)
        i += 1
    return out


def test_records_are_keyed_by_id_and_replayed_last_writer_wins() -> None:
    logs = Logs()
    journal = logs.journal()
    (tid,) = ids_in(1, 1)
    with pytest.raises(TxnJournalError, match="does not hold"):
        journal.put(TxnRecord(tid, producer_id=5))
    assert journal.load_partition(1) == {}
    journal.put(TxnRecord(tid, producer_id=5, producer_epoch=0))
    journal.put(TxnRecord(tid, producer_id=5, producer_epoch=1, state=TransactionState.ONGOING))
    (record,) = decode_records(logs.batches[1][-1])
    assert record.key == b'["t","' + tid.encode() + b'"]'
    again = logs.journal().load_partition(1)
    assert again[tid].producer_epoch == 1 and again[tid].state is TransactionState.ONGOING


def test_a_deleted_id_is_a_tombstone_and_unloading_forgets_only_its_partition() -> None:
    logs = Logs()
    journal = logs.journal()
    a, b = ids_in(0, 2)
    (c,) = ids_in(2, 1)
    journal.load_partition(0)
    journal.load_partition(2)
    for tid in (a, b, c):
        journal.put(TxnRecord(tid, producer_id=1))
    journal.delete(a)
    (tombstone,) = decode_records(logs.batches[0][-1])
    assert tombstone.value is None
    assert set(logs.journal().load_partition(0)) == {b}
    assert journal.unload_partition(0) == {b}
    assert set(journal.records()) == {c}
    assert journal.loaded_partitions() == {2}


def test_an_unreadable_record_is_an_error_not_skipped() -> None:
    logs = Logs()
    from trafka.codec.records import encode_batch

    logs.append(0, encode_batch([(0, b'["x","?"]', b"{}", ())]))
    with pytest.raises(TxnJournalError, match="unreadable record"):
        logs.journal().load_partition(0)


def coordinator(logs: Logs, epochs: dict[str, int]) -> TransactionCoordinator:
    pids = iter(range(100, 200))
    return TransactionCoordinator(
        logs.journal(),
        allocate_producer_id=lambda: next(pids),
        coordinator_epoch_for=lambda tid: epochs.get(tid, 0),
        group_partition=lambda group: ("__consumer_offsets", 4),
        stage_group_offsets=lambda *a: ErrorCode.NONE,
    )


def test_a_new_coordinator_completes_a_decided_transaction_at_its_own_epoch() -> None:
    logs = Logs()
    (tid,) = ids_in(1, 1)
    first = coordinator(logs, {tid: 4})
    first.load(first.journal.load_partition(1))  # type: ignore[attr-defined]
    init, _ = first.init_producer_id(
        ipi.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000), 4, 0
    )
    pid, epoch = init.producer_id, init.producer_epoch
    add = apt.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            apt.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="t", partitions=[0, 1])
        ],
    )
    first.add_partitions_to_txn(add, 3, 10)
    # The group's offsets partition joins the transaction (its leader gets a marker).
    added = first.add_offsets_to_txn(
        aot.AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id="g"
        ),
        3,
        11,
    )
    assert added.error_code == ErrorCode.NONE
    response, completions = first.end_txn(
        et.EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True
        ),
        3,
        20,
    )
    assert response.error_code == ErrorCode.NONE
    assert [c.coordinator_epoch for c in completions] == [4]
    # The leader dies before the markers: its successor reads the decision back.
    first.unload(first.journal.unload_partition(1))  # type: ignore[attr-defined]
    assert first.record(tid) is None
    second = coordinator(logs, {tid: 5})
    second.load(second.journal.load_partition(1))  # type: ignore[attr-defined]
    assert second.record(tid).state is TransactionState.PREPARE_COMMIT
    (again,) = second.tick(30)
    assert again.commit and again.coordinator_epoch == 5
    assert {(mk.topic, mk.partition) for mk in again.markers} == {
        ("t", 0),
        ("t", 1),
        ("__consumer_offsets", 4),
    }
    assert second.markers_written(again, 40)
    assert second.record(tid).state is TransactionState.COMPLETE_COMMIT
    third = logs.journal()
    assert third.load_partition(1)[tid].state is TransactionState.COMPLETE_COMMIT


def test_txn_offset_commit_at_the_group_coordinator_only_checks_the_group() -> None:
    """The group's coordinator does not hold the transaction: TxnOffsetCommit hands
    the offsets to the group's store with the producer's id and epoch."""
    staged: list[tuple] = []
    groups_checked: list[tuple] = []

    def stage(group, pid, epoch, offsets):
        staged.append((group, pid, epoch, dict(offsets)))
        return ErrorCode.INVALID_PRODUCER_EPOCH if epoch < 2 else ErrorCode.NONE

    def validate(group, generation, member, instance):
        groups_checked.append((group, generation, member))
        return ErrorCode.NONE

    coord = TransactionCoordinator(
        Logs().journal(),
        allocate_producer_id=lambda: 1,
        group_partition=lambda group: ("__consumer_offsets", 0),
        stage_group_offsets=stage,
        validate_group=validate,
    )

    def commit(epoch: int) -> list[int]:
        R = toc.TxnOffsetCommitRequest
        request = R(
            transactional_id="unknown-here",
            group_id="g",
            producer_id=9,
            producer_epoch=epoch,
            generation_id_or_member_epoch=3,
            member_id="m",
            topics=[
                R.TxnOffsetCommitRequestTopic(
                    name="in",
                    partitions=[
                        R.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=42)
                    ],
                )
            ],
        )
        response = coord.txn_offset_commit(request, 3, 77)
        return [p.error_code for t in response.topics for p in t.partitions]

    assert commit(2) == [ErrorCode.NONE]
    assert commit(1) == [ErrorCode.INVALID_PRODUCER_EPOCH]
    assert groups_checked == [("g", 3, "m"), ("g", 3, "m")]
    group, pid, epoch, offsets = staged[0]
    assert (group, pid, epoch) == ("g", 9, 2)
    assert offsets[("in", 0)].offset == 42 and offsets[("in", 0)].commit_timestamp_ms == 77
