"""ProducerStateManager: idempotence, fencing, transactions, LSO, aborted index, recovery."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trafka.brokerlite.storage.partition import PartitionLog
from trafka.brokerlite.storage.topic_configs import LogConfig
from trafka.brokerlite.transactions.producer_state import (
    INT32_MAX,
    AppendCheck,
    ProducerStateError,
    ProducerStateManager,
    headers_of,
    replay_log,
)
from trafka.codec.errors import DecodeError, ErrorCode
from trafka.codec.records import (
    ControlRecordType,
    RecordBatchHeader,
    encode_batch,
    encode_control_batch,
    iter_batches,
    read_batch_header,
    set_base_offset,
)

TS = 1_700_000_000_000


def batch(
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    count: int = 1,
    *,
    txn: bool = False,
    ts: int = TS,
) -> bytes:
    """A producer's batch (base offset 0, as sent)."""
    return encode_batch(
        [(ts, None, b"v%d" % i, ()) for i in range(count)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


class Partition:
    """A broker's partition in memory: the calling protocol of the module docstring."""

    def __init__(self, state: ProducerStateManager | None = None) -> None:
        self.state = state or ProducerStateManager(name="t-0")
        self.log = bytearray()
        self.next_offset = 0

    def produce(self, *batches: bytes) -> tuple[AppendCheck, int]:
        headers = headers_of(b"".join(batches))
        check = self.state.check_append(headers)
        if not check.ok:
            return check, -1
        base = self.next_offset
        for data in batches:
            self.log += set_base_offset(data, self.next_offset)
            self.next_offset += read_batch_header(data).last_offset_delta + 1
        self.state.on_append(headers, base)
        return check, base

    def marker(self, pid: int, epoch: int, *, commit: bool, coordinator_epoch: int = 0) -> int:
        code = self.state.check_marker(pid, epoch, coordinator_epoch)
        assert code is ErrorCode.NONE, code
        offset = self.next_offset
        self.log += encode_control_batch(
            ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
            producer_id=pid,
            producer_epoch=epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp=TS,
            base_offset=offset,
        )
        self.next_offset += 1
        self.state.on_marker(
            pid, epoch, coordinator_epoch, commit=commit, offset=offset, timestamp=TS
        )
        return offset

    def restarted(self) -> ProducerStateManager:
        fresh = ProducerStateManager(name="t-0")
        fresh.rebuild(iter_batches(bytes(self.log)))
        return fresh


def ok(result: tuple[AppendCheck, int]) -> int:
    check, base = result
    assert check.ok, check
    return base


def err(result: tuple[AppendCheck, int]) -> ErrorCode:
    check, _ = result
    assert check.duplicate is None
    return check.error


# -- idempotence ----------------------------------------------------------------------------------


def test_batches_without_producer_id_are_not_tracked() -> None:
    p = Partition()
    assert ok(p.produce(batch())) == 0
    assert ok(p.produce(batch())) == 1
    assert p.state.producers == {}
    assert p.state.map_end_offset == 2


def test_in_order_sequences_are_accepted_and_a_gap_is_out_of_order() -> None:
    p = Partition()
    assert ok(p.produce(batch(7, 0, 0, count=3))) == 0
    assert ok(p.produce(batch(7, 0, 3, count=2))) == 3
    before = p.state.snapshot()
    assert err(p.produce(batch(7, 0, 6))) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert err(p.produce(batch(7, 0, 4))) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # A refused request changes nothing and writes nothing.
    assert p.state.snapshot() == before
    assert p.next_offset == 5
    assert ok(p.produce(batch(7, 0, 5))) == 5


def test_duplicates_of_the_last_five_batches_get_their_original_offsets() -> None:
    p = Partition()
    p.produce(batch(pid=9))  # another producer's data in between
    bases = [ok(p.produce(batch(1, 0, seq * 2, count=2))) for seq in range(6)]
    written = p.next_offset
    # The oldest of the six is forgotten: its retry is a sequence error, not a duplicate.
    assert err(p.produce(batch(1, 0, 0, count=2))) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    for i in range(1, 6):
        check, _ = p.produce(batch(1, 0, i * 2, count=2))
        assert check.error is ErrorCode.NONE
        assert check.duplicate is not None
        assert (check.duplicate.first_offset, check.duplicate.last_offset) == (
            bases[i],
            bases[i] + 1,
        )
    assert p.next_offset == written
    # A batch overlapping but not equal to a remembered one is no duplicate.
    assert err(p.produce(batch(1, 0, 10, count=1))) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_batch_reusing_an_aborted_batchs_sequences_is_its_duplicate() -> None:
    """Kafka's ProducerStateEntry.findDuplicateBatch compares only the producer epoch
    and the first and last sequence, and a marker keeps the remembered batches. So a
    client that reuses the sequence of a batch it purged on abort (librdkafka hands a
    purged retry's sequence to the next transaction) gets that batch's offsets back
    and nothing written; a new epoch, from sequence 0, is written. A new leader's
    state, rebuilt from the log it replicated, answers the same."""
    p = Partition()
    ok(p.produce(batch(1, 0, 4, txn=True)))
    p.marker(1, 0, commit=True)
    aborted = ok(p.produce(batch(1, 0, 5, txn=True)))
    p.marker(1, 0, commit=False)
    written = p.next_offset
    for leader in (p, Partition(p.restarted())):
        check, _ = leader.produce(batch(1, 0, 5, txn=True))
        assert check.duplicate is not None
        assert check.duplicate.first_offset == aborted
    assert p.next_offset == written
    assert ok(p.produce(batch(1, 1, 0, txn=True))) == written


def test_older_epoch_is_fenced_and_new_epoch_must_start_at_zero() -> None:
    p = Partition()
    ok(p.produce(batch(4, 0, 0)))
    ok(p.produce(batch(4, 0, 1)))
    assert err(p.produce(batch(4, 1, 5))) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    ok(p.produce(batch(4, 1, 0)))
    # The old epoch is fenced, even for what would have been its next batch or a retry.
    assert err(p.produce(batch(4, 0, 2))) is ErrorCode.INVALID_PRODUCER_EPOCH
    assert err(p.produce(batch(4, 0, 1))) is ErrorCode.INVALID_PRODUCER_EPOCH
    ok(p.produce(batch(4, 1, 1)))


def test_unknown_producer_is_accepted_at_any_sequence_then_ordered() -> None:
    # Kafka since KIP-360: a producer without state (e.g. after retention removed its
    # batches, or expiry) is accepted; from then on its sequence is enforced.
    p = Partition()
    ok(p.produce(batch(11, 3, 42, count=2)))
    assert err(p.produce(batch(11, 3, 45))) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    ok(p.produce(batch(11, 3, 44)))


def test_sequence_wraps_after_int32_max() -> None:
    p = Partition()
    ok(p.produce(batch(5, 0, INT32_MAX - 1, count=2)))
    entry = p.state.entry(5)
    assert entry is not None and entry.last_seq == INT32_MAX
    ok(p.produce(batch(5, 0, 0, count=3)))
    # A batch that itself wraps: its last sequence is counted modulo 2**31.
    ok(p.produce(batch(5, 0, 3, count=1)))
    q = Partition()
    ok(q.produce(batch(6, 0, INT32_MAX, count=2)))
    assert q.state.entry(6).last_seq == 0  # type: ignore[union-attr]
    ok(q.produce(batch(6, 0, 1)))


def test_batches_of_one_request_are_checked_in_order_all_or_nothing() -> None:
    p = Partition()
    assert ok(p.produce(batch(3, 0, 0, count=2), batch(3, 0, 2, count=3))) == 0
    assert p.next_offset == 5
    entry = p.state.entry(3)
    assert entry is not None
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches] == [
        (0, 1, 0, 1),
        (2, 4, 2, 4),
    ]
    # The second batch has a gap: the whole request is refused.
    assert err(p.produce(batch(3, 0, 5), batch(3, 0, 7))) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.next_offset == 5
    assert p.state.entry(3).last_seq == 4  # type: ignore[union-attr]


def test_client_rules_control_batches_and_missing_sequence() -> None:
    p = Partition()
    control = encode_control_batch(
        ControlRecordType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=TS
    )
    assert err(p.produce(control)) is ErrorCode.INVALID_RECORD
    assert err(p.produce(batch(1, 0, -1))) is ErrorCode.INVALID_RECORD
    assert err(p.produce(batch(-1, -1, -1, txn=True))) is ErrorCode.INVALID_RECORD


def test_on_append_refuses_control_batches() -> None:
    state = ProducerStateManager()
    control = encode_control_batch(
        ControlRecordType.ABORT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=TS
    )
    with pytest.raises(ValueError):
        state.on_append(headers_of(control), 0)


def test_headers_of_rejects_a_truncated_blob() -> None:
    data = batch(1, 0, 0) + batch(1, 0, 1)
    assert len(headers_of(data)) == 2
    with pytest.raises(DecodeError):
        headers_of(data[:-1])


# -- transactions ---------------------------------------------------------------------------------


def test_non_transactional_batch_inside_a_transaction_is_invalid_txn_state() -> None:
    p = Partition()
    ok(p.produce(batch(2, 0, 0, txn=True)))
    assert err(p.produce(batch(2, 0, 1))) is ErrorCode.INVALID_TXN_STATE
    p.marker(2, 0, commit=True)
    ok(p.produce(batch(2, 0, 1)))


def test_last_stable_offset_with_interleaved_transactions() -> None:
    p = Partition()
    ok(p.produce(batch(-1)))  # 0
    a = ok(p.produce(batch(10, 0, 0, txn=True)))  # 1
    b = ok(p.produce(batch(20, 0, 0, txn=True)))  # 2
    ok(p.produce(batch(10, 0, 1, txn=True)))  # 3
    ok(p.produce(batch(-1)))  # 4
    hw = p.next_offset
    assert (a, b) == (1, 2)
    assert p.state.last_stable_offset(hw) == 1
    assert p.state.ongoing_transactions() == {1: 10, 2: 20}
    p.marker(10, 0, commit=True)  # 5
    assert p.state.last_stable_offset(p.next_offset) == 2
    ok(p.produce(batch(10, 0, 2, txn=True)))  # 6: A's next transaction
    assert p.state.last_stable_offset(p.next_offset) == 2
    p.marker(20, 0, commit=False)  # 7
    assert p.state.last_stable_offset(p.next_offset) == 6
    p.marker(10, 0, commit=False)  # 8
    assert p.state.first_unstable_offset() is None
    assert p.state.last_stable_offset(p.next_offset) == p.next_offset == 9
    # Never above the high watermark, never below the log start offset.
    q = Partition()
    ok(q.produce(batch(1, 0, 0, txn=True)))
    assert q.state.last_stable_offset(0) == 0
    assert q.state.last_stable_offset(5, log_start_offset=3) == 3


def test_aborted_transactions_for_fetch_ranges() -> None:
    p = Partition()
    ok(p.produce(batch(1, 0, 0, txn=True)))  # 0  A
    ok(p.produce(batch(2, 0, 0, txn=True)))  # 1  B
    p.marker(1, 0, commit=False)  # 2  A aborted [0, 2]
    ok(p.produce(batch(3, 0, 0, txn=True)))  # 3  C
    p.marker(3, 0, commit=True)  # 4  C committed: not indexed
    p.marker(2, 0, commit=False)  # 5  B aborted [1, 5]
    ok(p.produce(batch(1, 0, 1, txn=True)))  # 6  A again
    p.marker(1, 0, commit=False)  # 7  A aborted [6, 7]
    index = p.state.aborted_index()
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in index] == [
        (1, 0, 2),
        (2, 1, 5),
        (1, 6, 7),
    ]
    assert [t.last_stable_offset for t in index] == [1, 6, 8]
    aborted = p.state.aborted_transactions
    assert aborted(0, 8) == [(1, 0), (2, 1), (1, 6)]
    assert aborted(3, 8) == [(2, 1), (1, 6)]
    assert aborted(3, 5) == [(2, 1)]
    assert aborted(0, 1) == [(1, 0)]
    # B was open when A aborted: the lookup must not stop at A.
    assert aborted(0, 2) == [(1, 0), (2, 1)]
    assert aborted(6, 7) == [(1, 6)]
    assert aborted(8, 9) == []


def test_abort_marker_without_open_transaction_is_not_indexed() -> None:
    p = Partition()
    ok(p.produce(batch(1, 0, 0)))
    p.marker(1, 0, commit=False)
    assert p.state.aborted_index() == []
    assert p.state.entry(1).epoch == 0  # type: ignore[union-attr]


def test_markers_fence_producer_and_coordinator_epochs() -> None:
    p = Partition()
    ok(p.produce(batch(1, 0, 0, txn=True)))
    # The coordinator fenced the producer: its abort marker carries the bumped epoch.
    p.marker(1, 1, commit=False, coordinator_epoch=3)
    assert err(p.produce(batch(1, 0, 1, txn=True))) is ErrorCode.INVALID_PRODUCER_EPOCH
    assert p.state.check_marker(1, 0, 3) is ErrorCode.INVALID_PRODUCER_EPOCH
    assert p.state.check_marker(1, 1, 2) is ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert p.state.check_marker(1, 1, 3) is ErrorCode.NONE
    assert p.state.check_marker(99, 0, 0) is ErrorCode.NONE
    ok(p.produce(batch(1, 2, 0, txn=True)))


@settings(max_examples=60, deadline=None)
@example([("txn", 0), ("txn", 1), ("abort", 0), ("abort", 1)])
@example(
    [("txn", 0), ("data", 0), ("txn", 1), ("commit", 1), ("txn", 2), ("abort", 0), ("abort", 2)]
)
@given(
    st.lists(
        st.tuples(st.sampled_from(["data", "txn", "commit", "abort"]), st.integers(0, 3)),
        max_size=40,
    )
)
def test_aborted_lookup_and_lso_match_brute_force(ops: list[tuple[str, int]]) -> None:
    p = Partition()
    seqs = [0, 0, 0, 0]
    open_txn: dict[int, int] = {}
    aborted: list[tuple[int, int, int]] = []
    for op, pid in ops:
        if op == "data":
            ok(p.produce(batch(-1)))
        elif op == "txn":
            base = ok(p.produce(batch(pid, 0, seqs[pid], txn=True)))
            seqs[pid] += 1
            open_txn.setdefault(pid, base)
        else:
            offset = p.marker(pid, 0, commit=op == "commit")
            first = open_txn.pop(pid, None)
            if op == "abort" and first is not None:
                aborted.append((pid, first, offset))
    end = p.next_offset
    expected_lso = min(open_txn.values(), default=end)
    assert p.state.last_stable_offset(end) == expected_lso
    for fetch in range(end + 1):
        for upper in range(fetch, end + 2):
            want = [(pid, first) for pid, first, last in aborted if last >= fetch and first < upper]
            assert p.state.aborted_transactions(fetch, upper) == want
    # A restart (replay of the log) rebuilds exactly the same state.
    assert p.restarted().snapshot() == p.state.snapshot()


# -- recovery -------------------------------------------------------------------------------------


def test_rebuild_after_restart_still_deduplicates() -> None:
    p = Partition()
    ok(p.produce(batch(8, 0, 0, count=2)))
    ok(p.produce(batch(9, 2, 0, txn=True)))
    last = ok(p.produce(batch(8, 0, 2, count=3)))
    p.marker(9, 2, commit=False)
    ok(p.produce(batch(9, 2, 1, txn=True)))
    restarted = Partition(p.restarted())
    restarted.log, restarted.next_offset = p.log, p.next_offset
    assert restarted.state.snapshot() == p.state.snapshot()
    check, _ = restarted.produce(batch(8, 0, 2, count=3))
    assert check.duplicate is not None and check.duplicate.first_offset == last
    assert err(restarted.produce(batch(8, 0, 9))) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert restarted.state.last_stable_offset(restarted.next_offset) == 7
    assert restarted.state.aborted_transactions(0, 10) == [(9, 2)]


def test_rebuild_in_chunks_equals_one_pass_and_skips_applied_batches() -> None:
    p = Partition()
    for i in range(6):
        ok(p.produce(batch(1, 0, i, txn=i % 2 == 0)))
        if i % 2 == 0:
            p.marker(1, 0, commit=i % 4 == 0)
    entries = list(iter_batches(bytes(p.log)))
    chunked = ProducerStateManager()
    assert chunked.rebuild(entries[:4]) == 4
    assert chunked.rebuild(entries[2:]) == len(entries) - 4  # overlap is skipped
    assert chunked.snapshot() == p.state.snapshot()
    assert chunked.map_end_offset == p.next_offset


def test_snapshot_round_trip_then_replay_of_the_tail() -> None:
    p = Partition()
    ok(p.produce(batch(1, 0, 0, txn=True)))
    p.marker(1, 0, commit=False)
    ok(p.produce(batch(2, 5, 0, count=4)))
    snap = p.state.snapshot()
    cut = len(p.log)
    ok(p.produce(batch(1, 0, 1, txn=True)))
    ok(p.produce(batch(2, 5, 4)))
    loaded = ProducerStateManager()
    loaded.load_snapshot(snap)
    assert loaded.map_end_offset == 6
    tail = list(iter_batches(bytes(p.log[cut:])))
    loaded.rebuild(tail)
    assert loaded.snapshot() == p.state.snapshot()


def test_corrupt_snapshot_is_refused_and_state_kept() -> None:
    p = Partition()
    ok(p.produce(batch(1, 0, 0)))
    snap = bytearray(p.state.snapshot())
    target = ProducerStateManager()
    ok(Partition(target).produce(batch(5, 0, 0)))
    before = target.snapshot()
    for bad in (bytes(snap[:-1]), b"TPS", b"XXXX" + bytes(snap[4:])):
        with pytest.raises(ProducerStateError):
            target.load_snapshot(bad)
    snap[-2] ^= 0xFF
    with pytest.raises(ProducerStateError):
        target.load_snapshot(bytes(snap))
    assert target.snapshot() == before


class ListLog:
    """The read side of a PartitionLog over an in-memory blob."""

    def __init__(self, blob: bytes, start: int = 0) -> None:
        self.entries = [(h, bytes(v)) for h, v in iter_batches(blob)]
        self.log_start_offset = start
        self.log_end_offset = self.entries[-1][0].next_offset if self.entries else start
        self.reads = 0

    def read(self, offset: int, max_bytes: int) -> ListLog.Result:
        self.reads += 1
        out = b""
        for h, data in self.entries:
            if h.next_offset <= offset:
                continue
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return ListLog.Result(out)

    class Result:
        def __init__(self, data: bytes) -> None:
            self.data = data
            self.size = len(data)

        def tobytes(self) -> bytes:
            return self.data


def test_replay_log_in_chunks_and_after_a_truncating_recovery() -> None:
    p = Partition()
    for i in range(10):
        ok(p.produce(batch(1, 0, i, txn=True)))
        if i % 3 == 2:
            p.marker(1, 0, commit=False)
    log = ListLog(bytes(p.log))
    state = ProducerStateManager()
    assert replay_log(state, log, chunk_bytes=200) == len(log.entries)
    assert log.reads > 1
    assert state.snapshot() == p.state.snapshot()
    # A snapshot ahead of the log (the log lost its tail) is thrown away.
    short = ListLog(bytes(p.log[: len(p.log) // 2]))
    short_entries = short.entries
    ahead = ProducerStateManager()
    ahead.load_snapshot(p.state.snapshot())
    replay_log(ahead, short)
    expected = ProducerStateManager()
    expected.rebuild(short_entries)
    assert ahead.snapshot() == expected.snapshot()


def test_producers_survive_retention_but_aborted_index_is_truncated() -> None:
    p = Partition()
    ok(p.produce(batch(1, 0, 0, txn=True)))  # 0
    p.marker(1, 0, commit=False)  # 1
    ok(p.produce(batch(2, 0, 0)))  # 2
    ok(p.produce(batch(3, 0, 0, txn=True)))  # 3
    p.marker(3, 0, commit=False)  # 4
    p.state.truncate_head(3)
    assert [t.producer_id for t in p.state.aborted_index()] == [3]
    check, _ = p.produce(batch(2, 0, 0))
    assert check.duplicate is not None and check.duplicate.first_offset == 2


def test_expire_forgets_idle_producers_but_not_open_transactions() -> None:
    state = ProducerStateManager(producer_id_expiration_ms=1000)
    p = Partition(state)
    ok(p.produce(batch(1, 0, 0, ts=5_000)))
    ok(p.produce(batch(2, 0, 0, txn=True, ts=5_000)))
    headers = headers_of(batch(3, 0, 0, ts=1))
    # Under LogAppendTime the broker's time counts, not the producer's.
    state.on_append(headers, p.next_offset, append_time_ms=5_500)
    assert state.expire(5_999) == 0
    assert state.expire(6_000) == 1
    assert set(state.producers) == {2, 3}
    assert state.expire(6_500) == 1
    assert set(state.producers) == {2}


def test_replay_log_with_a_real_partition_log(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), now_ms=TS)
    state = ProducerStateManager()
    try:
        for data in (batch(1, 0, 0, count=2), batch(2, 0, 0, txn=True), batch(1, 0, 2)):
            headers = headers_of(data)
            assert state.check_append(headers).ok
            result = log.append(data, now_ms=TS)
            state.on_append(headers, result.base_offset)
        marker = encode_control_batch(
            ControlRecordType.ABORT,
            producer_id=2,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp=TS,
        )
        result = log.append(marker, now_ms=TS, from_client=False)
        state.on_marker(2, 0, 0, commit=False, offset=result.base_offset, timestamp=TS)
        rebuilt = ProducerStateManager()
        replay_log(rebuilt, log)
        assert rebuilt.snapshot() == state.snapshot()
        assert rebuilt.aborted_transactions(0, log.log_end_offset) == [(2, 2)]
        retry = headers_of(batch(1, 0, 2))
        dup = rebuilt.check_append(retry).duplicate
        assert dup is not None and dup.first_offset == 3
    finally:
        log.close()


def test_header_helpers_agree_with_codec() -> None:
    data = batch(1, 0, 5, count=3, txn=True)
    (h,) = headers_of(data)
    assert isinstance(h, RecordBatchHeader)
    assert (h.base_sequence, h.last_sequence, h.is_transactional) == (5, 7, True)
