"""Transaction version 2 (KIP-890 part 2, "Transactions Server-Side Defense") in
brokerlite: the coordinator's rules sans-IO, then each rule on the wire.

KIP-890 part 2, as Kafka 4.x serves it:

* ``transaction.version`` is supported 0-2 and finalized at 2 on a new cluster;
  clients pick the flow from the finalized level (UpdateFeatures lowers it).
* Produce v12+ adds its partition to the transaction (no AddPartitionsToTxn),
  TxnOffsetCommit v5+ its group (no AddOffsetsToTxn).
* EndTxn v5+ bumps the producer epoch; the markers carry the bumped epoch and
  the answer hands it (or, when the epochs ran out, a new producer id at epoch
  0) to the producer for its next transaction.
* A late batch of the previous transaction (its epoch is the one before the
  bump) is refused with INVALID_PRODUCER_EPOCH; an EndTxn retry with that epoch
  gets the same answer again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from brokerlite_wire import batch, create, markers, read

from trafka.brokerlite.features import (
    SUPPORTED,
    FeatureStore,
    FeatureUpdateError,
    plan_update,
)
from trafka.brokerlite.transactions.coordinator import (
    TransactionCoordinator,
    TransactionState,
    TxnMarker,
)
from trafka.brokerlite.transactions.journal import TxnJournal, TxnRecord
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k09_offset_fetch as offset_fetch
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k22_init_producer_id as ipi
from trafka.codec.messages import k24_add_partitions_to_txn as apt
from trafka.codec.messages import k26_end_txn as et
from trafka.codec.messages import k28_txn_offset_commit as toc
from trafka.codec.messages import k57_update_features as uf
from trafka.codec.records import iter_batches

pytestmark = pytest.mark.timeout(60)

T0 = 1_700_000_000_000
TV = "transaction.version"
LAST_USABLE_EPOCH = 32766  # Kafka keeps 32767 free for fencing


# -- the coordinator, sans-IO -------------------------------------------------------------------


def open_coordinator(tmp_path: Path) -> TransactionCoordinator:
    journal = TxnJournal(tmp_path / "txn" / "transactions.journal", fsync=False)
    return TransactionCoordinator(journal, partition_exists=lambda t, p: t == "orders")


@pytest.fixture
def coord(tmp_path: Path) -> Any:
    c = open_coordinator(tmp_path)
    yield c
    c.close()


def init(c: TransactionCoordinator, tid: str = "t") -> tuple[int, int]:
    request = ipi.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000)
    response, completions = c.init_producer_id(request, 5, T0)
    assert (response.error_code, completions) == (ErrorCode.NONE, [])
    return response.producer_id, response.producer_epoch


def end(
    c: TransactionCoordinator, pid: int, epoch: int, commit: bool = True, version: int = 5
) -> tuple[tuple[ErrorCode, int, int], list[Any]]:
    request = et.EndTxnRequest(
        transactional_id="t", producer_id=pid, producer_epoch=epoch, committed=commit
    )
    response, completions = c.end_txn(request, version, T0)
    answer = (ErrorCode(response.error_code), response.producer_id, response.producer_epoch)
    return answer, completions


def add(c: TransactionCoordinator, pid: int, epoch: int, partition: int = 0) -> ErrorCode:
    """The brokers' AddPartitionsToTxn (v4, not ``verify_only``): what a partition
    leader sends for a Produce v12+ (KIP-890 part 2), a TV2 add."""
    r = apt.AddPartitionsToTxnRequest
    one = r.AddPartitionsToTxnTransaction(
        transactional_id="t",
        producer_id=pid,
        producer_epoch=epoch,
        verify_only=False,
        topics=[r.AddPartitionsToTxnTopic(name="orders", partitions=[partition])],
    )
    answer = c.add_partitions_to_txn(r(transactions=[one]), 4, T0)
    (result,) = answer.results_by_transaction[0].topic_results[0].results_by_partition
    return ErrorCode(result.partition_error_code)


def record(c: TransactionCoordinator) -> TxnRecord:
    found = c.record("t")
    assert found is not None
    return found


def test_end_txn_v5_bumps_the_epoch_and_its_markers_carry_it(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord)
    assert add(coord, pid, epoch, 0) is ErrorCode.NONE
    answer, (completion,) = end(coord, pid, epoch)
    assert answer == (ErrorCode.NONE, pid, epoch + 1)
    assert completion.markers == (TxnMarker("orders", 0, pid, epoch + 1, 0, True),)
    # Decided, markers not yet written: every EndTxn waits (Kafka's pending
    # transition to CompleteCommit comes first).
    assert end(coord, pid, epoch)[0] == (ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)
    assert end(coord, pid, epoch + 1)[0] == (ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)
    assert coord.markers_written(completion, T0)
    # Completed: the retry gets the same answer again; the other outcome does not;
    # another epoch is fenced; the bumped epoch commits nothing (none is ongoing).
    assert end(coord, pid, epoch) == ((ErrorCode.NONE, pid, epoch + 1), [])
    assert end(coord, pid, epoch, commit=False)[0][0] is ErrorCode.INVALID_TXN_STATE
    assert end(coord, pid, epoch - 1)[0][0] is ErrorCode.PRODUCER_FENCED
    assert end(coord, pid, epoch + 1)[0] == (ErrorCode.INVALID_TXN_STATE, -1, -1)
    # The next transaction runs at the bumped epoch; the old one is fenced.
    assert add(coord, pid, epoch, 1) is (ErrorCode.PRODUCER_FENCED)
    assert add(coord, pid, epoch + 1, 1) is ErrorCode.NONE
    assert end(coord, pid, epoch + 1, commit=False)[0] == (ErrorCode.NONE, pid, epoch + 2)


def test_an_abort_with_nothing_ongoing_bumps_the_epoch(coord: TransactionCoordinator) -> None:
    """Kafka 4.4 under TV2: an EndTxn v5 abort that is no retry, with no transaction
    ongoing (Empty, or the last one complete), is decided as one: it bumps the
    epoch, with no partition to mark; a commit is INVALID_TXN_STATE."""
    pid, epoch = init(coord)
    assert end(coord, pid, epoch)[0] == (ErrorCode.INVALID_TXN_STATE, -1, -1)
    answer, (completion,) = end(coord, pid, epoch, commit=False)
    assert (answer, completion.markers) == ((ErrorCode.NONE, pid, epoch + 1), ())
    assert coord.markers_written(completion, T0)
    assert record(coord).state is TransactionState.COMPLETE_ABORT
    # Its retry is answered the same way; an abort at the new epoch bumps again.
    assert end(coord, pid, epoch, commit=False) == ((ErrorCode.NONE, pid, epoch + 1), [])
    answer, (completion,) = end(coord, pid, epoch + 1, commit=False)
    assert answer == (ErrorCode.NONE, pid, epoch + 2)
    assert coord.markers_written(completion, T0)
    # After a commit, the retry of an abort is refused, a new abort bumps.
    assert add(coord, pid, epoch + 2, 0) is ErrorCode.NONE
    (code, _, _), (completion,) = end(coord, pid, epoch + 2)
    assert code is ErrorCode.NONE and coord.markers_written(completion, T0)
    assert end(coord, pid, epoch + 2, commit=False)[0][0] is ErrorCode.INVALID_TXN_STATE
    answer, (completion,) = end(coord, pid, epoch + 3, commit=False)
    assert answer == (ErrorCode.NONE, pid, epoch + 4)
    assert coord.markers_written(completion, T0)
    # EndTxn v4 (TV1) keeps the older rules: an abort after an abort is its retry
    # (no bump), a commit after it INVALID_TXN_STATE.
    assert end(coord, pid, epoch + 4, commit=False, version=4) == ((ErrorCode.NONE, -1, -1), [])
    assert end(coord, pid, epoch + 4, version=4)[0][0] is ErrorCode.INVALID_TXN_STATE
    assert record(coord).producer_epoch == epoch + 4


def test_end_txn_v4_keeps_the_epoch(coord: TransactionCoordinator) -> None:
    """Transaction version 1 (EndTxn v0-4): one epoch per producer session."""
    pid, epoch = init(coord)
    assert add(coord, pid, epoch, 0) is ErrorCode.NONE
    (code, _, _), (completion,) = end(coord, pid, epoch, version=4)
    assert code is ErrorCode.NONE
    assert completion.producer_epoch == epoch
    assert coord.markers_written(completion, T0)
    assert end(coord, pid, epoch, version=4)[0][0] is ErrorCode.NONE  # a retry
    assert record(coord).producer_epoch == epoch


def test_an_exhausted_epoch_moves_to_a_new_producer_id_after_the_markers(
    tmp_path: Path,
) -> None:
    c = open_coordinator(tmp_path)
    pid, _ = init(c)
    c.journal.put(
        TxnRecord("t", pid, producer_epoch=LAST_USABLE_EPOCH, timeout_ms=60_000, last_update_ms=T0)
    )
    c.close()
    c = open_coordinator(tmp_path)
    assert add(c, pid, LAST_USABLE_EPOCH, 0) is ErrorCode.NONE
    (code, new_pid, new_epoch), (completion,) = end(c, pid, LAST_USABLE_EPOCH)
    assert (code, new_pid != pid, new_epoch) == (ErrorCode.NONE, True, 0)
    # The markers use the last epoch of the old id (the bump), as Kafka writes them.
    assert completion.markers == (TxnMarker("orders", 0, pid, LAST_USABLE_EPOCH + 1, 0, True),)
    # The new id used before the markers are written waits instead of failing.
    assert add(c, new_pid, 0, 0) is (ErrorCode.CONCURRENT_TRANSACTIONS)
    # A restart in between keeps the decision and the id it moves to.
    c.close()
    c = open_coordinator(tmp_path)
    (reissued,) = c.tick(T0 + 1)
    assert reissued.markers == completion.markers
    assert c.markers_written(reissued, T0 + 1)
    moved = record(c)
    assert (moved.producer_id, moved.producer_epoch, moved.last_producer_id) == (new_pid, 0, pid)
    assert moved.state is TransactionState.COMPLETE_COMMIT
    # The retry of that EndTxn (old id, last usable epoch) gets the same answer.
    assert end(c, pid, LAST_USABLE_EPOCH) == ((ErrorCode.NONE, new_pid, 0), [])
    assert add(c, new_pid, 0, 0) is ErrorCode.NONE
    c.close()


def fencing_coordinator(tmp_path: Path, level: int) -> TransactionCoordinator:
    """A coordinator whose finalized ``transaction.version`` is ``level``."""
    journal = TxnJournal(tmp_path / "txn" / "transactions.journal", fsync=False)
    return TransactionCoordinator(
        journal, partition_exists=lambda t, p: t == "orders", transaction_version=lambda: level
    )


def fence(c: TransactionCoordinator) -> Any:
    """An admin's fence (KIP-664's fenceProducers: InitProducerId with the
    transactional id alone) of an ongoing transaction: CONCURRENT_TRANSACTIONS
    and the abort's completion."""
    request = ipi.InitProducerIdRequest(transactional_id="t", transaction_timeout_ms=60_000)
    response, (abort,) = c.init_producer_id(request, 5, T0)
    assert response.error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    return abort


@pytest.mark.parametrize("how", ["fenced", "timed out"])
def test_a_fencing_abort_is_a_tv2_abort_once_tv2_is_finalized(tmp_path: Path, how: str) -> None:
    """Kafka 4.4 ends a fenced (KIP-664) or timed-out transaction by the finalized
    ``transaction.version`` (``TransactionCoordinator.handleInitProducerId`` and
    ``abortTimedOutTransactions`` pass the server's level to ``endTransaction``),
    whatever the transaction's own version: at 2, an abort with one bump that
    keeps the epoch before (``prepareAbortOrCommit``). The old producer's EndTxn
    v5 then repeats that abort (``retryOnEpochBump``): a commit is
    INVALID_TXN_STATE, an abort NONE with the epoch after; its KIP-360
    InitProducerId with its old epoch repeats the bump (the epoch before is
    ``lastProducerEpoch``). As observed against Kafka 4.4 in
    test_differential_kafka4.py."""
    c = fencing_coordinator(tmp_path, 2)
    pid, epoch = init(c)
    assert add(c, pid, epoch, 0) is ErrorCode.NONE
    (abort,) = [fence(c)] if how == "fenced" else c.tick(T0 + 60_000)
    assert abort.markers == (TxnMarker("orders", 0, pid, epoch + 1, 0, False),)
    # While the markers are written, every EndTxn waits.
    assert end(c, pid, epoch, commit=True)[0][0] is ErrorCode.CONCURRENT_TRANSACTIONS
    assert c.markers_written(abort, T0 + 60_000)
    done = record(c)
    assert (done.state, done.producer_epoch, done.last_producer_epoch, done.tv2) == (
        TransactionState.COMPLETE_ABORT,
        epoch + 1,
        epoch,
        True,
    )
    assert end(c, pid, epoch, commit=True) == ((ErrorCode.INVALID_TXN_STATE, -1, -1), [])
    assert end(c, pid, epoch, commit=False) == ((ErrorCode.NONE, pid, epoch + 1), [])
    assert add(c, pid, epoch, 0) is ErrorCode.PRODUCER_FENCED
    if how == "fenced":
        # The fencer's retry gets the epoch after; the old epoch is fenced then.
        assert init(c) == (pid, epoch + 2)
        assert end(c, pid, epoch, commit=True)[0][0] is ErrorCode.PRODUCER_FENCED
    else:
        request = ipi.InitProducerIdRequest(
            transactional_id="t",
            transaction_timeout_ms=60_000,
            producer_id=pid,
            producer_epoch=epoch,
        )
        response, _ = c.init_producer_id(request, 5, T0 + 60_000)
        assert (response.error_code, response.producer_id, response.producer_epoch) == (
            ErrorCode.NONE,
            pid,
            epoch + 1,
        )
        assert record(c).state is TransactionState.EMPTY
    c.close()


def test_a_fence_from_the_last_usable_epoch_moves_to_a_new_producer_id(tmp_path: Path) -> None:
    """A TV2 fencing abort from epoch 32766 reserves a new producer id, as any TV2
    abort does (Kafka's ``endTransaction`` asks for one when the epoch is
    exhausted): the markers carry 32767, the id moves to the new one at epoch 0."""
    c = fencing_coordinator(tmp_path, 2)
    pid, _ = init(c)
    c.journal.put(
        TxnRecord("t", pid, producer_epoch=LAST_USABLE_EPOCH, timeout_ms=60_000, last_update_ms=T0)
    )
    c.close()
    c = fencing_coordinator(tmp_path, 2)
    assert add(c, pid, LAST_USABLE_EPOCH, 0) is ErrorCode.NONE
    abort = fence(c)
    assert abort.markers == (TxnMarker("orders", 0, pid, LAST_USABLE_EPOCH + 1, 0, False),)
    assert c.markers_written(abort, T0)
    moved = record(c)
    assert (moved.producer_id != pid, moved.producer_epoch, moved.last_producer_id) == (
        True,
        0,
        pid,
    )
    new_pid, new_epoch = init(c)
    assert (new_pid, new_epoch) == (moved.producer_id, 1)
    c.close()


@pytest.mark.parametrize("level", [0, 1])
def test_a_fencing_abort_below_tv2_is_no_tv2_decision(tmp_path: Path, level: int) -> None:
    """Below ``transaction.version`` 2 (a cluster finalizes none), Kafka fences as
    transaction version 1 does: one bump, no epoch before kept; the old
    producer's EndTxn (v5 too) is PRODUCER_FENCED, its KIP-360 InitProducerId
    too."""
    c = fencing_coordinator(tmp_path, level)
    pid, epoch = init(c)
    assert add(c, pid, epoch, 0) is ErrorCode.NONE
    (abort,) = c.tick(T0 + 60_000)
    assert (abort.commit, abort.producer_epoch) == (False, epoch + 1)
    assert c.markers_written(abort, T0 + 60_000)
    assert end(c, pid, epoch, commit=False)[0] == (ErrorCode.PRODUCER_FENCED, -1, -1)
    assert end(c, pid, epoch, commit=True)[0] == (ErrorCode.PRODUCER_FENCED, -1, -1)
    request = ipi.InitProducerIdRequest(
        transactional_id="t", transaction_timeout_ms=60_000, producer_id=pid, producer_epoch=epoch
    )
    response, _ = c.init_producer_id(request, 5, T0 + 60_000)
    assert response.error_code == ErrorCode.PRODUCER_FENCED
    c.close()


def commit_request(pid: int, epoch: int, offset: int, **group: Any) -> toc.TxnOffsetCommitRequest:
    t = toc.TxnOffsetCommitRequest
    return t(
        transactional_id="t",
        group_id="g",
        producer_id=pid,
        producer_epoch=epoch,
        topics=[
            t.TxnOffsetCommitRequestTopic(
                name="orders",
                partitions=[
                    t.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset)
                ],
            )
        ],
        **group,
    )


def codes_of(response: toc.TxnOffsetCommitResponse) -> list[ErrorCode]:
    return [ErrorCode(p.error_code) for t in response.topics for p in t.partitions]


def test_txn_offset_commit_v5_adds_its_group(tmp_path: Path) -> None:
    generations = {"g": 3}
    journal = TxnJournal(tmp_path / "txn.journal", fsync=False)
    c = TransactionCoordinator(
        journal,
        validate_group=lambda g, gen, member, instance: (
            ErrorCode.NONE if gen in (-1, generations[g]) else ErrorCode.ILLEGAL_GENERATION
        ),
    )
    pid, epoch = init(c)
    # v4 (TV1) needs AddOffsetsToTxn first; v5 does not.
    assert codes_of(c.txn_offset_commit(commit_request(pid, epoch, 5), 4, T0)) == [
        ErrorCode.INVALID_TXN_STATE
    ]
    # The group's checks come first: a stale generation adds nothing.
    stale = commit_request(pid, epoch, 5, generation_id_or_member_epoch=2)
    assert codes_of(c.txn_offset_commit(stale, 5, T0)) == [ErrorCode.ILLEGAL_GENERATION]
    assert record(c).state is TransactionState.EMPTY
    assert codes_of(c.txn_offset_commit(commit_request(pid, epoch, 5), 5, T0)) == [ErrorCode.NONE]
    started = record(c)
    assert (started.state, started.groups, started.tv2) == (TransactionState.ONGOING, ("g",), True)
    # A stale epoch is refused as before.
    assert codes_of(c.txn_offset_commit(commit_request(pid, epoch - 1, 6), 5, T0)) == [
        ErrorCode.INVALID_PRODUCER_EPOCH
    ]
    (_, _, bumped), (completion,) = end(c, pid, epoch)
    assert bumped == epoch + 1
    assert {g: dict(o) for g, o in completion.offsets.items()}["g"][("orders", 0)].offset == 5
    c.close()


# -- on the wire ------------------------------------------------------------------------------------


def init_wire(core: Any, tid: str = "tx") -> tuple[int, int]:
    body = ipi.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000)
    response = core.call(22, 5, body)
    assert response.error_code == 0, ErrorCode(response.error_code)
    return response.producer_id, response.producer_epoch


def produce_v(core: Any, version: int, records: bytes, *, partition: int = 0) -> Any:
    body = produce.ProduceRequest(
        transactional_id="tx",
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            produce.ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[
                    produce.ProduceRequest.PartitionProduceData(index=partition, records=records)
                ],
            )
        ],
    )
    return core.call(0, version, body).responses[0].partition_responses[0]


def end_wire(core: Any, pid: int, epoch: int, commit: bool = True) -> tuple[int, int, int]:
    body = et.EndTxnRequest(
        transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=commit
    )
    answer = core.call(26, 5, body)
    return answer.error_code, answer.producer_id, answer.producer_epoch


def marker_epochs(records: bytes | None) -> list[int]:
    return [h.producer_epoch for h, _ in iter_batches(records or b"") if h.is_control]


def test_a_fresh_broker_finalizes_transaction_version_2(core: Any) -> None:
    answer = core.call(18, 4, api_versions.ApiVersionsRequest())
    supported = {f.name: (f.min_version, f.max_version) for f in answer.supported_features}
    finalized = {f.name: f.max_version_level for f in answer.finalized_features}
    assert (supported[TV], finalized[TV]) == ((0, 2), 2)
    served = {k.api_key: k.max_version for k in answer.api_keys}
    assert (served[0], served[26], served[28]) == (13, 5, 6)


def test_produce_v12_adds_its_partition_and_end_txn_v5_bumps_the_epoch(core: Any) -> None:
    create(core, "t", 2)
    pid, epoch = init_wire(core)
    first = produce_v(core, 12, batch(core, [b"a"], pid, epoch, 0, txn=True))
    assert (first.error_code, first.base_offset) == (0, 0)
    # The TV1 form (v11) still needs AddPartitionsToTxn for a partition.
    stray = produce_v(core, 11, batch(core, [b"x"], pid, epoch, 0, txn=True), partition=1)
    assert stray.error_code == ErrorCode.INVALID_TXN_STATE
    assert read(core, "t", isolation=1).last_stable_offset == 0
    assert end_wire(core, pid, epoch) == (0, pid, epoch + 1)
    view = read(core, "t", isolation=1)
    assert markers(view.records) == [(1, True)]
    assert marker_epochs(view.records) == [epoch + 1]
    assert view.last_stable_offset == view.high_watermark == 2
    # A late batch of the committed transaction (its epoch is the one before the
    # bump) is refused, and nothing is written.
    late = produce_v(core, 12, batch(core, [b"late"], pid, epoch, 1, txn=True))
    assert late.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert core.broker.logs.partition("t", 0).log_end_offset == 2
    # The next transaction: the bumped epoch from sequence 0.
    second = produce_v(core, 12, batch(core, [b"b"], pid, epoch + 1, 0, txn=True))
    assert (second.error_code, second.base_offset) == (0, 2)
    assert end_wire(core, pid, epoch + 1, commit=False) == (0, pid, epoch + 2)
    view = read(core, "t", isolation=1)
    assert marker_epochs(view.records) == [epoch + 1, epoch + 2]
    assert [(t.producer_id, t.first_offset) for t in view.aborted_transactions] == [(pid, 2)]
    # The retry of that EndTxn gets the same answer; a commit at the current epoch
    # finds nothing to commit.
    assert end_wire(core, pid, epoch + 1, commit=False) == (0, pid, epoch + 2)
    assert end_wire(core, pid, epoch + 2)[0] == ErrorCode.INVALID_TXN_STATE
    # An abort with nothing ongoing bumps the epoch all the same (no marker to write).
    assert end_wire(core, pid, epoch + 2, commit=False) == (0, pid, epoch + 3)
    core.poll()  # (the completion is carried out at the next poll)
    assert core.broker.txn.record("tx").state is TransactionState.COMPLETE_ABORT
    assert core.broker.logs.partition("t", 0).log_end_offset == 4


def test_add_partitions_v4_without_verify_only_adds_for_tv2(core: Any) -> None:
    """What Kafka's leader sends for a v12 Produce (the brokers' form)."""
    create(core, "t")
    pid, epoch = init_wire(core)
    r = apt.AddPartitionsToTxnRequest
    body = r(
        transactions=[
            r.AddPartitionsToTxnTransaction(
                transactional_id="tx",
                producer_id=pid,
                producer_epoch=epoch,
                verify_only=False,
                topics=[r.AddPartitionsToTxnTopic(name="t", partitions=[0])],
            )
        ]
    )
    result = core.call(24, 4, body).results_by_transaction[0]
    assert result.topic_results[0].results_by_partition[0].partition_error_code == 0
    found = core.broker.txn.record("tx")
    assert (found.partitions, found.tv2) == ((("t", 0),), True)


def test_txn_offset_commit_v5_needs_no_add_offsets(core: Any) -> None:
    create(core, "t")
    pid, epoch = init_wire(core)
    t = toc.TxnOffsetCommitRequest
    body = t(
        transactional_id="tx",
        group_id="g",
        producer_id=pid,
        producer_epoch=epoch,
        generation_id_or_member_epoch=-1,
        topics=[
            t.TxnOffsetCommitRequestTopic(
                name="t",
                partitions=[
                    t.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=7)
                ],
            )
        ],
    )
    assert core.call(28, 4, body).topics[0].partitions[0].error_code == ErrorCode.INVALID_TXN_STATE
    assert core.call(28, 5, body).topics[0].partitions[0].error_code == 0
    assert end_wire(core, pid, epoch) == (0, pid, epoch + 1)
    fetch = offset_fetch.OffsetFetchRequest(
        group_id="g",
        require_stable=True,
        topics=[
            offset_fetch.OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])
        ],
    )
    part = core.call(9, 7, fetch).topics[0].partitions[0]
    assert (part.committed_offset, part.error_code) == (7, 0)


# -- the feature level ------------------------------------------------------------------------------


def test_transaction_version_is_updated_as_kafka_updates_it(open_core: Any) -> None:
    core = open_core()
    r = uf.UpdateFeaturesRequest

    def update(level: int, upgrade_type: int) -> Any:
        key = r.FeatureUpdateKey(feature=TV, max_version_level=level, upgrade_type=upgrade_type)
        return core.call(57, 1, r(timeout_ms=5000, feature_updates=[key]))

    assert update(3, 1).error_code == ErrorCode.INVALID_UPDATE_VERSION  # above 2
    assert update(1, 1).error_code == ErrorCode.INVALID_UPDATE_VERSION  # lowering: a downgrade
    assert update(1, 2).error_code == ErrorCode.NONE
    assert core.broker.features.level(TV) == 1
    core.broker.close()
    core = open_core()  # the level survives a restart
    finalized = {
        f.name: f.max_version_level
        for f in core.call(18, 3, api_versions.ApiVersionsRequest()).finalized_features
    }
    assert finalized[TV] == 1
    assert update(2, 1).error_code == ErrorCode.NONE
    assert core.broker.features.level(TV) == 2


def test_a_cluster_broker_finalizes_transaction_version_2(tmp_path: Path) -> None:
    """A cluster supports transaction version 0-2 as a single node and a Kafka 4.x
    cluster do, finalized at 2 when fresh; it is lowered and raised again with
    UpdateFeatures' downgrade and upgrade types, as on a single node."""
    with FeatureStore(tmp_path / "f.journal", supported=SUPPORTED) as store:
        assert store.supported[TV] == (0, 2) and store.level(TV) == 2
        assert plan_update(store.levels(), [(TV, 1, 2)], SUPPORTED) == {TV: 1}
        with pytest.raises(FeatureUpdateError, match="downgrade"):
            plan_update(store.levels(), [(TV, 1, 1)], SUPPORTED)
        with pytest.raises(FeatureUpdateError, match="supports levels 0 to 2"):
            plan_update(store.levels(), [(TV, 3, 1)], SUPPORTED)


def test_a_cluster_nodes_journal_of_an_earlier_brokerlite_opens_at_transaction_version_2(
    tmp_path: Path,
) -> None:
    """A cluster node's journal written when a cluster supported no
    transaction.version (its levels of group.version and share.version only, a
    compaction included) opens with transaction.version 2, as a fresh one; a
    level lowered since is kept across a restart."""
    path = tmp_path / "f.journal"
    earlier = {"group.version": (0, 1), "share.version": (0, 2)}
    with FeatureStore(path, supported=earlier) as store:
        assert store.update({"group.version": 0}) == 2
        store.compact()
    with FeatureStore(path, supported=SUPPORTED) as store:
        assert (store.level("group.version"), store.level(TV), store.epoch) == (0, 2, 2)
        assert store.update({TV: 1}) == 3
    with FeatureStore(path, supported=SUPPORTED) as store:
        assert (store.level(TV), store.epoch) == (1, 3)
