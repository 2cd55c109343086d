"""TransactionCoordinator (sans-IO) and its journal: Kafka's transaction protocol."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from trafka.brokerlite.groups.offsets import CommittedOffset
from trafka.brokerlite.storage.journal import frame
from trafka.brokerlite.transactions.coordinator import (
    TransactionCoordinator,
    TransactionState,
    TxnCompletion,
    TxnMarker,
    classic_group_validator,
)
from trafka.brokerlite.transactions.journal import TxnJournal, TxnJournalError, TxnRecord
from trafka.brokerlite.transactions.producer_state import ProducerStateManager, headers_of
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k22_init_producer_id as ipi
from trafka.codec.messages import k24_add_partitions_to_txn as apt
from trafka.codec.messages import k25_add_offsets_to_txn as aot
from trafka.codec.messages import k26_end_txn as et
from trafka.codec.messages import k28_txn_offset_commit as toc
from trafka.codec.messages import k65_describe_transactions as dt
from trafka.codec.messages import k66_list_transactions as lt
from trafka.codec.records import encode_batch

T0 = 1_700_000_000_000
TOPICS = {"orders": 3, "audit": 1}


def exists(topic: str, partition: int) -> bool:
    return 0 <= partition < TOPICS.get(topic, 0)


def journal_path(tmp_path: Path) -> Path:
    return tmp_path / "txn" / "transactions.journal"


def open_coordinator(tmp_path: Path, **kwargs: Any) -> TransactionCoordinator:
    kwargs.setdefault("partition_exists", exists)
    return TransactionCoordinator(TxnJournal(journal_path(tmp_path), fsync=False), **kwargs)


@pytest.fixture
def coord(tmp_path: Path) -> Any:
    c = open_coordinator(tmp_path)
    yield c
    c.close()


def init(
    c: TransactionCoordinator,
    tid: str | None,
    now: int = T0,
    *,
    version: int = 4,
    timeout: int = 60_000,
    pid: int = -1,
    epoch: int = -1,
) -> tuple[ipi.InitProducerIdResponse, list[TxnCompletion]]:
    request = ipi.InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=timeout, producer_id=pid, producer_epoch=epoch
    )
    return c.init_producer_id(request, version, now)


def init_ok(
    c: TransactionCoordinator, tid: str | None, now: int = T0, **kw: Any
) -> tuple[int, int]:
    response, completions = init(c, tid, now, **kw)
    assert response.error_code == ErrorCode.NONE, ErrorCode(response.error_code)
    assert completions == []
    return response.producer_id, response.producer_epoch


def add(
    c: TransactionCoordinator,
    tid: str,
    pid: int,
    epoch: int,
    parts: dict[str, list[int]],
    now: int = T0,
    *,
    version: int = 3,
) -> dict[tuple[str, int], ErrorCode]:
    request = apt.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            apt.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
            for t, ps in parts.items()
        ],
    )
    response = c.add_partitions_to_txn(request, version, now)
    return {
        (t.name, r.partition_index): ErrorCode(r.partition_error_code)
        for t in response.results_by_topic_v3_and_below
        for r in t.results_by_partition
    }


def add_ok(
    c: TransactionCoordinator,
    tid: str,
    pid: int,
    epoch: int,
    parts: dict[str, list[int]],
    now: int = T0,
) -> None:
    codes = add(c, tid, pid, epoch, parts, now)
    assert set(codes.values()) == {ErrorCode.NONE}, codes


def add_offsets(
    c: TransactionCoordinator,
    tid: str,
    pid: int,
    epoch: int,
    group: str,
    now: int = T0,
    version: int = 3,
) -> ErrorCode:
    request = aot.AddOffsetsToTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
    )
    return ErrorCode(c.add_offsets_to_txn(request, version, now).error_code)


def end(
    c: TransactionCoordinator,
    tid: str,
    pid: int,
    epoch: int,
    commit: bool,
    now: int = T0,
    *,
    version: int = 3,
) -> tuple[ErrorCode, list[TxnCompletion]]:
    request = et.EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    response, completions = c.end_txn(request, version, now)
    return ErrorCode(response.error_code), completions


def commit_offsets(
    c: TransactionCoordinator,
    tid: str,
    pid: int,
    epoch: int,
    group: str,
    offsets: dict[tuple[str, int], int],
    now: int = T0,
    *,
    version: int = 3,
    generation: int = -1,
    member: str = "",
    instance: str | None = None,
    metadata: str | None = "m",
) -> dict[tuple[str, int], ErrorCode]:
    Req = toc.TxnOffsetCommitRequest
    by_topic: dict[str, list[Any]] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append(
            Req.TxnOffsetCommitRequestPartition(
                partition_index=p,
                committed_offset=o,
                committed_leader_epoch=7,
                committed_metadata=metadata,
            )
        )
    request = Req(
        transactional_id=tid,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=instance,
        topics=[
            Req.TxnOffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()
        ],
    )
    response = c.txn_offset_commit(request, version, now)
    return {
        (t.name, p.partition_index): ErrorCode(p.error_code)
        for t in response.topics
        for p in t.partitions
    }


def state(c: TransactionCoordinator, tid: str) -> TransactionState:
    record = c.record(tid)
    assert record is not None
    return record.state


# -- InitProducerId -------------------------------------------------------------------------------


def test_idempotent_producers_get_fresh_ids_never_reused_after_restart(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    ids = [init_ok(c, None, version=v) for v in (0, 2, 4, 5)]
    assert all(epoch == 0 for _, epoch in ids)
    assert len({pid for pid, _ in ids}) == 4
    # A KIP-360 "bump" without a transactional id is just a new id, as in Kafka.
    bumped, _ = init_ok(c, None, pid=ids[-1][0], epoch=0)
    c.close()
    c = open_coordinator(tmp_path)
    after = init_ok(c, None)[0]
    assert after > max(bumped, *(pid for pid, _ in ids))
    c.close()


def test_external_producer_id_allocator_is_used(tmp_path: Path) -> None:
    counter = iter(range(500, 600))
    c = open_coordinator(tmp_path, allocate_producer_id=lambda: next(counter))
    assert init_ok(c, None) == (500, 0)
    assert init_ok(c, "t") == (501, 0)
    c.close()

    def broken() -> int:
        raise OSError("disk full")

    c = open_coordinator(tmp_path / "b", allocate_producer_id=broken)
    response, _ = init(c, None)
    assert response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    c.close()


def test_transactional_id_keeps_its_producer_id_and_bumps_the_epoch(
    coord: TransactionCoordinator,
) -> None:
    pid, epoch = init_ok(coord, "app")
    assert epoch == 0
    assert init_ok(coord, "app", T0 + 1) == (pid, 1)
    assert init_ok(coord, "app", T0 + 2, timeout=1000) == (pid, 2)
    record = coord.record("app")
    assert record is not None
    assert (record.state, record.timeout_ms) == (TransactionState.EMPTY, 1000)
    assert init_ok(coord, "other")[0] != pid


@pytest.mark.parametrize(
    ("tid", "timeout", "code"),
    [
        ("", 1000, ErrorCode.INVALID_REQUEST),
        ("t", 0, ErrorCode.INVALID_TRANSACTION_TIMEOUT),
        ("t", 900_001, ErrorCode.INVALID_TRANSACTION_TIMEOUT),
    ],
)
def test_init_validation(
    coord: TransactionCoordinator, tid: str, timeout: int, code: ErrorCode
) -> None:
    response, _ = init(coord, tid, timeout=timeout)
    assert (response.error_code, response.producer_id, response.producer_epoch) == (code, -1, -1)


def test_kip360_epoch_bump_with_the_current_epoch_and_its_retry(
    coord: TransactionCoordinator,
) -> None:
    pid, _ = init_ok(coord, "t")
    assert init_ok(coord, "t", pid=pid, epoch=0) == (pid, 1)
    # The answer was lost and the producer retries with the epoch it had: same answer.
    assert init_ok(coord, "t", pid=pid, epoch=0) == (pid, 1)
    assert init_ok(coord, "t", pid=pid, epoch=1) == (pid, 2)
    # An epoch that is neither the current nor the previous one is fenced.
    response, _ = init(coord, "t", pid=pid, epoch=0)
    assert response.error_code == ErrorCode.PRODUCER_FENCED
    response, _ = init(coord, "t", pid=pid, epoch=0, version=3)
    assert response.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    response, _ = init(coord, "t", pid=pid + 100, epoch=2)
    assert response.error_code == ErrorCode.PRODUCER_FENCED
    response, _ = init(coord, "t", pid=pid, epoch=-1)
    assert response.error_code == ErrorCode.INVALID_REQUEST
    # Versions before 3 carry no producer id: the fields are ignored.
    assert init_ok(coord, "t", pid=pid + 100, epoch=9, version=2) == (pid, 3)


def test_kip360_unknown_transactional_id_with_producer_id_gets_a_new_one(
    coord: TransactionCoordinator,
) -> None:
    pid, epoch = init_ok(coord, "expired-and-back", pid=12345, epoch=7)
    assert (pid != 12345, epoch) == (True, 0)


def test_exhausted_epoch_moves_to_a_new_producer_id(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    pid, _ = init_ok(c, "t")
    record = c.record("t")
    assert record is not None
    c.journal.put(TxnRecord("t", pid, producer_epoch=32766, timeout_ms=1000, last_update_ms=T0))
    c.close()
    c = open_coordinator(tmp_path)
    new_pid, epoch = init_ok(c, "t", pid=pid, epoch=32766)
    assert (new_pid != pid, epoch) == (True, 0)
    # The retry of that rotation (old id, exhausted epoch) gets the same answer.
    assert init_ok(c, "t", pid=pid, epoch=32766) == (new_pid, 0)
    c.close()


# -- the transaction ------------------------------------------------------------------------------


def test_commit_produces_markers_and_completes(coord: TransactionCoordinator) -> None:
    pid, epoch = init_ok(coord, "t")
    add_ok(coord, "t", pid, epoch, {"orders": [2, 0]})
    add_ok(coord, "t", pid, epoch, {"orders": [0], "audit": [0]}, T0 + 5)
    record = coord.record("t")
    assert record is not None
    assert record.state is TransactionState.ONGOING
    assert record.partitions == (("audit", 0), ("orders", 0), ("orders", 2))
    assert record.txn_start_ms == T0
    code, completions = end(coord, "t", pid, epoch, True, T0 + 10)
    assert code is ErrorCode.NONE
    (completion,) = completions
    assert completion.commit and completion.producer_id == pid
    assert set(completion.markers) == {
        TxnMarker("audit", 0, pid, epoch, 0, True),
        TxnMarker("orders", 0, pid, epoch, 0, True),
        TxnMarker("orders", 2, pid, epoch, 0, True),
    }
    assert state(coord, "t") is TransactionState.PREPARE_COMMIT
    # While the markers are being written everything else waits.
    assert set(add(coord, "t", pid, epoch, {"orders": [1]}).values()) == {
        ErrorCode.CONCURRENT_TRANSACTIONS
    }
    assert end(coord, "t", pid, epoch, True)[0] is ErrorCode.CONCURRENT_TRANSACTIONS
    assert end(coord, "t", pid, epoch, False)[0] is ErrorCode.INVALID_TXN_STATE
    assert init(coord, "t")[0].error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    assert coord.markers_written(completion, T0 + 11)
    assert not coord.markers_written(completion, T0 + 12)  # a second acknowledgement is ignored
    record = coord.record("t")
    assert record is not None
    assert (record.state, record.partitions) == (TransactionState.COMPLETE_COMMIT, ())
    # A retried EndTxn of the same outcome succeeds; the other outcome is refused.
    assert end(coord, "t", pid, epoch, True) == (ErrorCode.NONE, [])
    assert end(coord, "t", pid, epoch, False)[0] is ErrorCode.INVALID_TXN_STATE
    # The next transaction starts from CompleteCommit.
    add_ok(coord, "t", pid, epoch, {"orders": [1]}, T0 + 20)
    assert coord.record("t").txn_start_ms == T0 + 20  # type: ignore[union-attr]


def test_abort_produces_abort_markers_without_offsets(coord: TransactionCoordinator) -> None:
    pid, epoch = init_ok(coord, "t")
    add_ok(coord, "t", pid, epoch, {"orders": [1]})
    assert add_offsets(coord, "t", pid, epoch, "g") is ErrorCode.NONE
    assert commit_offsets(coord, "t", pid, epoch, "g", {("orders", 1): 10}) == {
        ("orders", 1): ErrorCode.NONE
    }
    code, (completion,) = end(coord, "t", pid, epoch, False)
    assert code is ErrorCode.NONE
    assert completion.markers == (TxnMarker("orders", 1, pid, epoch, 0, False),)
    assert completion.offsets == {}
    assert completion.groups == ("g",)
    assert coord.markers_written(completion, T0)
    assert state(coord, "t") is TransactionState.COMPLETE_ABORT
    assert not coord.has_pending_offsets("g", "orders", 1)


def test_end_txn_errors(coord: TransactionCoordinator) -> None:
    assert end(coord, "nobody", 1, 0, True)[0] is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert end(coord, "", 1, 0, True)[0] is ErrorCode.INVALID_REQUEST
    pid, epoch = init_ok(coord, "t")
    assert end(coord, "t", pid + 1, epoch, True)[0] is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert end(coord, "t", pid, epoch + 1, True)[0] is ErrorCode.PRODUCER_FENCED
    assert end(coord, "t", pid, epoch + 1, True, version=1)[0] is ErrorCode.INVALID_PRODUCER_EPOCH
    # Nothing was added: there is no transaction to end.
    assert end(coord, "t", pid, epoch, True)[0] is ErrorCode.INVALID_TXN_STATE


def test_add_partitions_errors(coord: TransactionCoordinator) -> None:
    assert set(add(coord, "nobody", 1, 0, {"orders": [0]}).values()) == {
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    }
    pid, epoch = init_ok(coord, "t")
    codes = add(coord, "t", pid, epoch, {"orders": [0, 7], "ghost": [0]})
    assert codes == {
        ("orders", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
        ("orders", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("ghost", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert state(coord, "t") is TransactionState.EMPTY
    assert set(add(coord, "t", pid, epoch + 1, {"orders": [0]}).values()) == {
        ErrorCode.PRODUCER_FENCED
    }
    assert set(add(coord, "t", pid, epoch + 1, {"orders": [0]}, version=1).values()) == {
        ErrorCode.INVALID_PRODUCER_EPOCH
    }
    assert add_offsets(coord, "t", pid, epoch + 1, "g") is ErrorCode.PRODUCER_FENCED
    assert (
        add_offsets(coord, "t", pid, epoch + 1, "g", version=1) is ErrorCode.INVALID_PRODUCER_EPOCH
    )
    assert add_offsets(coord, "t", pid, epoch, "") is ErrorCode.INVALID_GROUP_ID


def test_add_partitions_v4_batches_and_verify_only(coord: TransactionCoordinator) -> None:
    Req = apt.AddPartitionsToTxnRequest
    a_pid, a_epoch = init_ok(coord, "a")
    b_pid, b_epoch = init_ok(coord, "b")
    add_ok(coord, "b", b_pid, b_epoch, {"orders": [1]})

    def txn(tid: str, pid: int, epoch: int, parts: dict[str, list[int]], verify: bool) -> Any:
        return Req.AddPartitionsToTxnTransaction(
            transactional_id=tid,
            producer_id=pid,
            producer_epoch=epoch,
            verify_only=verify,
            topics=[Req.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in parts.items()],
        )

    request = Req(
        transactions=[
            txn("a", a_pid, a_epoch, {"orders": [0]}, False),
            txn("b", b_pid, b_epoch, {"orders": [1, 2]}, True),
            txn("b", b_pid, b_epoch + 1, {"orders": [1]}, True),
            txn("c", 77, 0, {"ghost": [0], "orders": [0]}, False),
        ]
    )
    response = coord.add_partitions_to_txn(request, 4, T0)
    assert response.error_code == ErrorCode.NONE
    got = [
        (
            r.transactional_id,
            {
                (t.name, p.partition_index): ErrorCode(p.partition_error_code)
                for t in r.topic_results
                for p in t.results_by_partition
            },
        )
        for r in response.results_by_transaction
    ]
    assert got == [
        ("a", {("orders", 0): ErrorCode.NONE}),
        ("b", {("orders", 1): ErrorCode.NONE, ("orders", 2): ErrorCode.INVALID_TXN_STATE}),
        ("b", {("orders", 1): ErrorCode.PRODUCER_FENCED}),
        (
            "c",
            {
                ("ghost", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ("orders", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
            },
        ),
    ]
    assert coord.record("a").partitions == (("orders", 0),)  # type: ignore[union-attr]
    assert coord.record("b").partitions == (("orders", 1),)  # type: ignore[union-attr]


# -- fencing --------------------------------------------------------------------------------------


class Cluster:
    """Partitions as the broker would keep them, driven by a coordinator's completions."""

    def __init__(self, coord: TransactionCoordinator) -> None:
        self.coord = coord
        self.partitions: dict[tuple[str, int], ProducerStateManager] = {}
        self.ends: dict[tuple[str, int], int] = {}
        self.applied: dict[str, dict[tuple[str, int], CommittedOffset]] = {}

    def produce(
        self, topic: str, partition: int, pid: int, epoch: int, seq: int, *, txn: bool
    ) -> ErrorCode:
        state = self.partitions.setdefault((topic, partition), ProducerStateManager())
        headers = headers_of(
            encode_batch(
                [(T0, None, b"x", ())],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
                is_transactional=txn,
            )
        )
        check = state.check_append(headers)
        if not check.ok:
            return check.error
        base = self.ends.get((topic, partition), 0)
        state.on_append(headers, base)
        self.ends[(topic, partition)] = base + 1
        return ErrorCode.NONE

    def complete(self, completions: list[TxnCompletion], now: int) -> None:
        for completion in completions:
            for m in completion.markers:
                state = self.partitions.setdefault((m.topic, m.partition), ProducerStateManager())
                if state.check_marker(m.producer_id, m.producer_epoch, m.coordinator_epoch):
                    continue
                offset = self.ends.get((m.topic, m.partition), 0)
                state.on_marker(
                    m.producer_id,
                    m.producer_epoch,
                    m.coordinator_epoch,
                    commit=m.commit,
                    offset=offset,
                    timestamp=now,
                )
                self.ends[(m.topic, m.partition)] = offset + 1
            for group, offsets in completion.offsets.items():
                self.applied.setdefault(group, {}).update(offsets)
            assert self.coord.markers_written(completion, now)


def test_new_instance_fences_the_zombie_and_aborts_its_transaction(
    coord: TransactionCoordinator,
) -> None:
    cluster = Cluster(coord)
    pid, zombie_epoch = init_ok(coord, "app")
    add_ok(coord, "app", pid, zombie_epoch, {"orders": [0]})
    assert cluster.produce("orders", 0, pid, zombie_epoch, 0, txn=True) is ErrorCode.NONE
    # The new instance: its ongoing transaction is aborted first, with a bumped epoch.
    response, completions = init(coord, "app", T0 + 1)
    assert response.error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    (abort,) = completions
    assert (abort.commit, abort.producer_epoch) == (False, zombie_epoch + 1)
    assert abort.markers == (TxnMarker("orders", 0, pid, zombie_epoch + 1, 0, False),)
    assert state(coord, "app") is TransactionState.PREPARE_ABORT
    # Retrying before the markers are written is still CONCURRENT_TRANSACTIONS.
    assert init(coord, "app", T0 + 2)[0].error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    cluster.complete(completions, T0 + 3)
    new_pid, new_epoch = init_ok(coord, "app", T0 + 4)
    assert (new_pid, new_epoch) == (pid, zombie_epoch + 2)
    # The zombie is fenced at the coordinator...
    assert end(coord, "app", pid, zombie_epoch, True)[0] is ErrorCode.PRODUCER_FENCED
    assert (
        end(coord, "app", pid, zombie_epoch, True, version=0)[0] is ErrorCode.INVALID_PRODUCER_EPOCH
    )
    assert set(add(coord, "app", pid, zombie_epoch, {"orders": [1]}).values()) == {
        ErrorCode.PRODUCER_FENCED
    }
    # ...and on the partition, where its data is aborted for read_committed readers.
    assert (
        cluster.produce("orders", 0, pid, zombie_epoch, 1, txn=True)
        is ErrorCode.INVALID_PRODUCER_EPOCH
    )
    partition = cluster.partitions[("orders", 0)]
    assert partition.aborted_transactions(0, 10) == [(pid, 0)]
    assert partition.last_stable_offset(cluster.ends[("orders", 0)]) == 2
    # The new instance works normally.
    add_ok(coord, "app", pid, new_epoch, {"orders": [0]}, T0 + 5)
    assert cluster.produce("orders", 0, pid, new_epoch, 0, txn=True) is ErrorCode.NONE
    code, completions = end(coord, "app", pid, new_epoch, True, T0 + 6)
    assert code is ErrorCode.NONE
    cluster.complete(completions, T0 + 7)
    assert partition.last_stable_offset(cluster.ends[("orders", 0)]) == 4


def test_transaction_timeout_aborts_and_fences(coord: TransactionCoordinator) -> None:
    pid, epoch = init_ok(coord, "slow", timeout=5_000)
    coord.tick(T0)
    add_ok(coord, "slow", pid, epoch, {"orders": [0]}, T0 + 100)
    assert coord.next_deadline() == T0 + 5_100
    assert coord.tick(T0 + 5_099) == []
    assert state(coord, "slow") is TransactionState.ONGOING
    (abort,) = coord.tick(T0 + 5_100)
    assert (abort.commit, abort.producer_epoch) == (False, epoch + 1)
    assert abort.markers == (TxnMarker("orders", 0, pid, epoch + 1, 0, False),)
    assert coord.markers_written(abort, T0 + 5_101)
    # The timed-out producer learns it was fenced.
    assert end(coord, "slow", pid, epoch, True)[0] is ErrorCode.PRODUCER_FENCED
    assert coord.tick(T0 + 100_000) == []


def test_a_finished_transaction_leaves_no_timer_behind(coord: TransactionCoordinator) -> None:
    pid, epoch = init_ok(coord, "t", timeout=1_000)
    coord.tick(T0)
    add_ok(coord, "t", pid, epoch, {"orders": [0]}, T0)
    _, completions = end(coord, "t", pid, epoch, True, T0 + 10)
    assert coord.markers_written(completions[0], T0 + 10)
    add_ok(coord, "t", pid, epoch, {"orders": [0]}, T0 + 900)
    # The first transaction's timer (T0 + 1000) must not abort the second one.
    assert coord.tick(T0 + 1_000) == []
    assert state(coord, "t") is TransactionState.ONGOING
    assert len(coord.tick(T0 + 1_900)) == 1


def test_unacknowledged_completion_is_issued_again(coord: TransactionCoordinator) -> None:
    pid, epoch = init_ok(coord, "t")
    coord.tick(T0)
    add_ok(coord, "t", pid, epoch, {"orders": [0]})
    _, (first,) = end(coord, "t", pid, epoch, True, T0 + 10)
    assert coord.next_deadline() == T0 + 1_010
    assert coord.tick(T0 + 1_009) == []
    (again,) = coord.tick(T0 + 1_010)
    assert again == first
    assert coord.markers_written(again, T0 + 1_011)
    assert coord.tick(T0 + 10_000) == []


# -- offsets in transactions (KIP-447) ------------------------------------------------------------


def test_txn_offsets_are_applied_only_by_commit(coord: TransactionCoordinator) -> None:
    pid, epoch = init_ok(coord, "t")
    # TxnOffsetCommit before AddOffsetsToTxn is refused.
    assert set(commit_offsets(coord, "t", pid, epoch, "g", {("orders", 0): 5}).values()) == {
        ErrorCode.INVALID_TXN_STATE
    }
    assert add_offsets(coord, "t", pid, epoch, "g") is ErrorCode.NONE
    assert state(coord, "t") is TransactionState.ONGOING
    codes = commit_offsets(
        coord, "t", pid, epoch, "g", {("orders", 0): 5, ("orders", 9): 1, ("audit", 0): 2}, T0 + 1
    )
    assert codes == {
        ("orders", 0): ErrorCode.NONE,
        ("orders", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("audit", 0): ErrorCode.NONE,
    }
    commit_offsets(coord, "t", pid, epoch, "g", {("orders", 0): 6}, T0 + 2)
    assert coord.has_pending_offsets("g", "orders", 0)
    assert not coord.has_pending_offsets("g", "orders", 1)
    assert coord.pending_offset_partitions("g") == {("orders", 0), ("audit", 0)}
    code, (completion,) = end(coord, "t", pid, epoch, True, T0 + 3)
    assert code is ErrorCode.NONE
    assert completion.markers == ()  # offsets only: no data partition
    assert completion.offsets == {
        "g": {
            ("orders", 0): CommittedOffset(6, 7, "m", T0 + 2),
            ("audit", 0): CommittedOffset(2, 7, "m", T0 + 1),
        }
    }
    assert coord.markers_written(completion, T0 + 4)
    assert coord.pending_offset_partitions("g") == set()


def test_txn_offset_commit_errors(coord: TransactionCoordinator) -> None:
    assert set(commit_offsets(coord, "nobody", 1, 0, "g", {("orders", 0): 1}).values()) == {
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    }
    pid, epoch = init_ok(coord, "t")
    add_offsets(coord, "t", pid, epoch, "g")
    assert set(commit_offsets(coord, "t", pid, epoch + 1, "g", {("orders", 0): 1}).values()) == {
        ErrorCode.INVALID_PRODUCER_EPOCH
    }
    assert set(commit_offsets(coord, "t", pid, epoch, "other", {("orders", 0): 1}).values()) == {
        ErrorCode.INVALID_TXN_STATE
    }
    assert commit_offsets(coord, "t", pid, epoch, "g", {("orders", 0): 1}, metadata="x" * 5000) == {
        ("orders", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE
    }
    assert commit_offsets(coord, "t", pid, epoch, "g", {("orders", 0): 1}, metadata=None) == {
        ("orders", 0): ErrorCode.NONE
    }
    _, completions = end(coord, "t", pid, epoch, True)
    assert set(commit_offsets(coord, "t", pid, epoch, "g", {("orders", 0): 1}).values()) == {
        ErrorCode.CONCURRENT_TRANSACTIONS
    }
    assert completions[0].offsets["g"][("orders", 0)].metadata is None


def fake_groups() -> Any:
    group = SimpleNamespace(
        members={"m-1": object(), "m-2": object()},
        static_members={"inst-1": "m-1"},
        generation_id=4,
    )
    # "cg" is a consumer group (KIP-848): the generation is the member's epoch.
    consumer = SimpleNamespace(members={"cm-1": SimpleNamespace(epoch=5)})
    return SimpleNamespace(
        group=lambda gid: group if gid == "g" else None,
        consumer_group=lambda gid: consumer if gid == "cg" else None,
        # "sg" is a share group (KIP-932): no offsets, transactional or not.
        share=SimpleNamespace(is_share_group=lambda gid: gid == "sg"),
    )


@pytest.mark.parametrize(
    ("group", "generation", "member", "instance", "code"),
    [
        ("g", 4, "m-1", "inst-1", ErrorCode.NONE),
        ("g", 4, "m-2", None, ErrorCode.NONE),
        ("g", -1, "", None, ErrorCode.NONE),  # a producer outside the group
        ("g", 3, "m-1", None, ErrorCode.ILLEGAL_GENERATION),
        ("g", 4, "m-9", None, ErrorCode.UNKNOWN_MEMBER_ID),
        ("g", 4, "m-2", "inst-1", ErrorCode.FENCED_INSTANCE_ID),
        ("new", -1, "", None, ErrorCode.NONE),
        # Kafka 4.4 (tests/brokerlite/test_differential_kafka44.py): a missing
        # group is made by a commit without a generation, whatever its member id,
        # and is GROUP_ID_NOT_FOUND with one (ILLEGAL_GENERATION before v6).
        ("new", 2, "", None, ErrorCode.GROUP_ID_NOT_FOUND),
        ("new", -1, "m-1", None, ErrorCode.NONE),
        ("cg", 5, "cm-1", None, ErrorCode.NONE),
        ("cg", -1, "", None, ErrorCode.NONE),
        ("cg", 4, "cm-1", None, ErrorCode.STALE_MEMBER_EPOCH),
        ("cg", 5, "cm-9", None, ErrorCode.UNKNOWN_MEMBER_ID),
        ("sg", -1, "", None, ErrorCode.GROUP_ID_NOT_FOUND),
        ("sg", 3, "m-1", None, ErrorCode.GROUP_ID_NOT_FOUND),
    ],
)
def test_classic_group_validator(
    group: str, generation: int, member: str, instance: str | None, code: ErrorCode
) -> None:
    assert classic_group_validator(fake_groups())(group, generation, member, instance) is code


def test_group_fencing_applies_from_v3(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path, validate_group=classic_group_validator(fake_groups()))
    pid, epoch = init_ok(c, "t")
    add_offsets(c, "t", pid, epoch, "g")
    stale = {"generation": 3, "member": "m-1"}
    assert set(commit_offsets(c, "t", pid, epoch, "g", {("orders", 0): 1}, **stale).values()) == {
        ErrorCode.ILLEGAL_GENERATION
    }
    assert not c.has_pending_offsets("g", "orders", 0)
    # v2 carries no member data: nothing to check.
    assert commit_offsets(c, "t", pid, epoch, "g", {("orders", 0): 1}, version=2, **stale) == {
        ("orders", 0): ErrorCode.NONE
    }
    assert c.record("t").pending_offsets["g"][("orders", 0)].leader_epoch == 7  # type: ignore[union-attr]
    commit_offsets(c, "t", pid, epoch, "g", {("orders", 1): 1}, version=1)
    assert c.record("t").pending_offsets["g"][("orders", 1)].leader_epoch == -1  # type: ignore[union-attr]
    c.close()


# -- durability -----------------------------------------------------------------------------------


def test_state_survives_reopen(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    pid, epoch = init_ok(c, "t")
    add_ok(c, "t", pid, epoch, {"orders": [1]})
    add_offsets(c, "t", pid, epoch, "g")
    commit_offsets(c, "t", pid, epoch, "g", {("orders", 1): 3})
    before = c.record("t")
    c.close()
    c = open_coordinator(tmp_path)
    assert c.record("t") == before
    assert c.has_pending_offsets("g", "orders", 1)
    # The reopened coordinator goes on with the transaction.
    code, (completion,) = end(c, "t", pid, epoch, True, T0 + 1)
    assert code is ErrorCode.NONE
    assert completion.offsets["g"][("orders", 1)].offset == 3
    c.close()


def test_restart_completes_a_prepared_commit(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    pid, epoch = init_ok(c, "t")
    add_ok(c, "t", pid, epoch, {"orders": [0, 1]})
    add_offsets(c, "t", pid, epoch, "g")
    commit_offsets(c, "t", pid, epoch, "g", {("orders", 0): 42})
    _, (lost,) = end(c, "t", pid, epoch, True, T0 + 1)
    c.close()  # the broker died before writing the markers
    c = open_coordinator(tmp_path)
    assert c.next_deadline() == 0
    (completion,) = c.tick(T0 + 50)
    assert completion == lost
    assert completion.offsets["g"][("orders", 0)].offset == 42
    assert c.markers_written(completion, T0 + 51)
    c.close()
    c = open_coordinator(tmp_path)
    assert state(c, "t") is TransactionState.COMPLETE_COMMIT
    assert c.tick(T0 + 60) == []
    c.close()


def test_restart_times_out_an_ongoing_transaction(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    pid, epoch = init_ok(c, "t", timeout=10_000)
    add_ok(c, "t", pid, epoch, {"orders": [0]}, T0 + 1)
    c.close()
    c = open_coordinator(tmp_path)
    assert c.tick(T0 + 10_000) == []
    (abort,) = c.tick(T0 + 10_001)
    assert (abort.commit, abort.producer_epoch) == (False, epoch + 1)
    c.close()


def test_torn_tail_is_dropped_on_reopen(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    pid, epoch = init_ok(c, "t")
    add_ok(c, "t", pid, epoch, {"orders": [0]})
    good = c.record("t")
    c.close()
    path = journal_path(tmp_path)
    size = path.stat().st_size
    torn = frame({"kind": "txn", "id": "t", "pid": 1})
    with open(path, "ab") as f:
        f.write(torn[: len(torn) // 2])
    c = open_coordinator(tmp_path)
    assert c.record("t") == good
    assert path.stat().st_size == size
    # Writing after the repair works and is replayed.
    assert end(c, "t", pid, epoch, False)[0] is ErrorCode.NONE
    c.close()
    c = open_coordinator(tmp_path)
    assert state(c, "t") is TransactionState.PREPARE_ABORT
    c.close()


def test_corrupt_entry_in_the_middle_cuts_the_journal_there(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    init_ok(c, "a")
    mid = journal_path(tmp_path).stat().st_size
    init_ok(c, "b")
    init_ok(c, "c")
    c.close()
    data = bytearray(journal_path(tmp_path).read_bytes())
    data[mid + 10] ^= 0xFF
    journal_path(tmp_path).write_bytes(bytes(data))
    c = open_coordinator(tmp_path)
    assert c.transactional_ids() == ["a"]
    c.close()


def test_journal_refuses_foreign_or_newer_files(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(frame({"kind": "header", "format": "trafka-transactions", "version": 99}))
    with pytest.raises(TxnJournalError, match="version"):
        TxnJournal(path)
    path.write_bytes(frame({"kind": "header", "version": 1}))
    with pytest.raises(TxnJournalError):
        TxnJournal(path)
    path.write_bytes(
        frame({"kind": "header", "format": "trafka-transactions", "version": 1})
        + frame({"kind": "from-the-future"})
    )
    with pytest.raises(TxnJournalError, match="unknown entry kind"):
        TxnJournal(path)


def test_journal_compacts_and_keeps_the_live_state(tmp_path: Path) -> None:
    j = TxnJournal(journal_path(tmp_path), fsync=False, compact_min_bytes=2048)
    c = TransactionCoordinator(j, partition_exists=exists)
    pid, epoch = init_ok(c, "t")
    for i in range(200):
        add_ok(c, "t", pid, epoch, {"orders": [i % 3]}, T0 + i)
        _, completions = end(c, "t", pid, epoch, i % 2 == 0, T0 + i)
        assert c.markers_written(completions[0], T0 + i)
    assert j.journal_bytes < 8192
    expected = c.record("t")
    c.close()
    reopened = TxnJournal(journal_path(tmp_path))
    assert reopened.record("t") == expected
    assert reopened.producer_id_limit > pid
    reopened.close()
    assert not any(p.name.endswith(".tmp") for p in journal_path(tmp_path).parent.iterdir())


def test_journal_failure_is_retriable_and_changes_nothing(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    pid, epoch = init_ok(c, "t")
    before = c.record("t")
    c.journal.close()
    assert set(add(c, "t", pid, epoch, {"orders": [0]}).values()) == {
        ErrorCode.COORDINATOR_NOT_AVAILABLE
    }
    assert init(c, "t")[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert c.record("t") == before


# -- housekeeping and admin -----------------------------------------------------------------------


def test_transactional_ids_expire_when_idle(tmp_path: Path) -> None:
    c = open_coordinator(
        tmp_path, transactional_id_expiration_ms=10_000, expiration_check_interval_ms=1_000
    )
    pid, epoch = init_ok(c, "idle")
    busy_pid, busy_epoch = init_ok(c, "busy")
    c.tick(T0)
    add_ok(c, "busy", busy_pid, busy_epoch, {"orders": [0]}, T0 + 5_000)
    assert c.next_deadline() == T0 + 1_000
    c.tick(T0 + 10_500)
    assert c.transactional_ids() == ["busy"]  # ongoing transactions never expire
    assert set(add(c, "idle", pid, epoch, {"orders": [0]}).values()) == {
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    }
    c.close()
    c = open_coordinator(tmp_path)
    assert c.transactional_ids() == ["busy"]
    c.close()


def test_verify_partition(coord: TransactionCoordinator) -> None:
    pid, epoch = init_ok(coord, "t")
    assert coord.verify_partition("t", pid, epoch, "orders", 0) is ErrorCode.INVALID_TXN_STATE
    add_ok(coord, "t", pid, epoch, {"orders": [0]})
    assert coord.verify_partition("t", pid, epoch, "orders", 0) is ErrorCode.NONE
    assert coord.verify_partition("t", pid, epoch, "orders", 1) is ErrorCode.INVALID_TXN_STATE
    assert (
        coord.verify_partition("t", pid, epoch - 1, "orders", 0) is ErrorCode.INVALID_PRODUCER_EPOCH
    )
    assert (
        coord.verify_partition("x", pid, epoch, "orders", 0)
        is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )


def test_describe_and_list_transactions(coord: TransactionCoordinator) -> None:
    pid, epoch = init_ok(coord, "a")
    add_ok(coord, "a", pid, epoch, {"orders": [0, 2]}, T0 + 10)
    init_ok(coord, "b")
    described = coord.describe_transactions(
        dt.DescribeTransactionsRequest(transactional_ids=["a", "zzz"]), 0
    ).transaction_states
    assert described[0].transaction_state == "Ongoing"
    assert described[0].transaction_start_time_ms == T0 + 10
    assert [(t.topic, t.partitions) for t in described[0].topics] == [("orders", [0, 2])]
    assert described[1].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    listed = coord.list_transactions(lt.ListTransactionsRequest(), 1, T0 + 20)
    assert [(s.transactional_id, s.transaction_state) for s in listed.transaction_states] == [
        ("a", "Ongoing"),
        ("b", "Empty"),
    ]
    listed = coord.list_transactions(
        lt.ListTransactionsRequest(state_filters=["Empty", "Bogus"]), 1, T0 + 20
    )
    assert [s.transactional_id for s in listed.transaction_states] == ["b"]
    assert listed.unknown_state_filters == ["Bogus"]
    ongoing = ["Ongoing"]
    listed = coord.list_transactions(
        lt.ListTransactionsRequest(state_filters=ongoing, duration_filter=5), 1, T0 + 20
    )
    assert [s.transactional_id for s in listed.transaction_states] == ["a"]
    listed = coord.list_transactions(
        lt.ListTransactionsRequest(state_filters=ongoing, duration_filter=50), 1, T0 + 20
    )
    assert listed.transaction_states == []
    # v0 has no duration filter.
    listed = coord.list_transactions(
        lt.ListTransactionsRequest(state_filters=ongoing, duration_filter=50), 0, T0 + 20
    )
    assert [s.transactional_id for s in listed.transaction_states] == ["a"]
    listed = coord.list_transactions(lt.ListTransactionsRequest(producer_id_filters=[pid]), 1, T0)
    assert [s.transactional_id for s in listed.transaction_states] == ["a"]


def test_a_stale_completion_does_not_complete_a_newer_transaction(
    coord: TransactionCoordinator,
) -> None:
    pid, epoch = init_ok(coord, "t")
    add_ok(coord, "t", pid, epoch, {"orders": [0]})
    _, (old,) = end(coord, "t", pid, epoch, False)
    assert coord.markers_written(old, T0)
    pid, epoch = init_ok(coord, "t", T0 + 1)
    add_ok(coord, "t", pid, epoch, {"orders": [1]}, T0 + 2)
    response, (fence,) = init(coord, "t", T0 + 3)
    assert response.error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    # Same producer id and outcome as the old completion, another epoch: ignored.
    assert (old.producer_id, old.commit) == (fence.producer_id, fence.commit)
    assert not coord.markers_written(old, T0 + 4)
    assert state(coord, "t") is TransactionState.PREPARE_ABORT
    assert coord.markers_written(fence, T0 + 5)


def test_end_txn_v5_reports_the_producer_id_and_epoch(coord: TransactionCoordinator) -> None:
    pid, epoch = init_ok(coord, "t")
    add_ok(coord, "t", pid, epoch, {"orders": [0]})
    request = et.EndTxnRequest(
        transactional_id="t", producer_id=pid, producer_epoch=epoch, committed=True
    )
    response, (completion,) = coord.end_txn(request, 5, T0)
    # v5 is transaction version 2 (KIP-890 part 2): the epoch is bumped for the
    # next transaction (more in test_txn_v2.py).
    assert (response.error_code, response.producer_id, response.producer_epoch) == (
        0,
        pid,
        epoch + 1,
    )
    assert coord.markers_written(completion, T0)
    # The bumped epoch commits nothing: no transaction is ongoing (Kafka 4.4).
    again = et.EndTxnRequest(
        transactional_id="t", producer_id=pid, producer_epoch=epoch + 1, committed=True
    )
    response, _ = coord.end_txn(again, 5, T0)
    assert (response.error_code, response.producer_id, response.producer_epoch) == (
        ErrorCode.INVALID_TXN_STATE,
        -1,
        -1,
    )
