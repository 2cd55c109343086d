"""Log compaction of a partition log (brokerlite/storage/cleaner.py and PartitionLog's cleaning).

Every test checks the log against a model of what compaction must keep: for each
key, its latest record among the cleanable segments, everything in the segments
the pass may not touch, offsets unchanged.
"""

from __future__ import annotations

import json
import os
import random
import struct
from pathlib import Path
from typing import Any

import pytest

from trafka.brokerlite.errors import InvalidRecordError
from trafka.brokerlite.storage.cleaner import CLEANED_SUFFIX, complete_swaps
from trafka.brokerlite.storage.partition import CLEAN_SHUTDOWN_FILE, PartitionLog
from trafka.brokerlite.storage.topic_configs import LogConfig
from trafka.codec.errors import ErrorCode
from trafka.codec.records import (
    Compression,
    ControlRecordType,
    RecordBatchHeader,
    decode_batch,
    encode_batch,
    encode_control_batch,
    iter_batches,
)

NOW = 1_700_000_000_000
DAY = 86_400_000

Row = tuple[int, bytes | None, bytes | None]  # offset, key, value


def kv_batch(
    items: list[tuple[bytes | None, bytes | None]],
    ts: int = NOW,
    *,
    compression: Compression = Compression.NONE,
    **kw: object,
) -> bytes:
    return encode_batch(
        [(ts + i, k, v, []) for i, (k, v) in enumerate(items)],
        compression=compression,
        **kw,  # type: ignore[arg-type]
    )


def open_log(path: Path, **config: object) -> PartitionLog:
    cfg = {"segment_bytes": 400, "cleanup_policy": "compact", **config}
    return PartitionLog.open(path, LogConfig(**cfg), now_ms=NOW)  # type: ignore[arg-type]


def batches(log: PartitionLog, start: int | None = None) -> list[tuple[RecordBatchHeader, bytes]]:
    offset = log.log_start_offset if start is None else start
    out = []
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).tobytes()
        found = [(h, bytes(b)) for h, b in iter_batches(data)]
        if not found:
            break  # only a gap left before the log end: compaction removed the tail
        for header, raw in found:
            assert isinstance(header, RecordBatchHeader)
            if header.next_offset > offset:
                out.append((header, raw))
        offset = found[-1][0].next_offset
    return out


def rows(log: PartitionLog) -> list[Row]:
    """Every data record, in log order (control batches left out)."""
    out: list[Row] = []
    for header, raw in batches(log):
        if header.is_control:
            continue
        out.extend((r.offset, r.key, r.value) for r in decode_batch(raw).records)
    return out


def compact_model(before: list[Row], cleanable_end: int) -> list[Row]:
    """What one pass over ``[.., cleanable_end)`` keeps (no tombstone old enough to go)."""
    latest = {key: off for off, key, _ in before if off < cleanable_end}
    return [
        (off, key, value)
        for off, key, value in before
        if off >= cleanable_end or (key is not None and latest[key] == off)
    ]


def clean(log: PartitionLog, now_ms: int = NOW, **kw: object) -> object:
    kw.setdefault("last_stable_offset", log.log_end_offset)
    cleaning = log.plan_cleaning(now_ms, force=True, **kw)  # type: ignore[arg-type]
    assert cleaning is not None
    cleaning.run()
    stats = log.finish_cleaning(cleaning, now_ms=now_ms)
    assert stats is not None
    return stats


def write_checkpoint(directory: Path, *, clean_offset: int) -> None:
    """A checkpoint that makes the next open validate every segment."""
    data = {"version": 1, "log_start_offset": 0, "recovery_point": 0, "clean_offset": clean_offset}
    (directory / "trafka.checkpoint").write_text(json.dumps(data))


def fill(log: PartitionLog, n: int, keys: int, *, seed: int = 1, per_batch: int = 3) -> None:
    rnd = random.Random(seed)
    for i in range(n):
        items = [(b"k%d" % rnd.randrange(keys), b"v%d-%d" % (i, j)) for j in range(per_batch)]
        log.append(kv_batch(items, NOW + i), now_ms=NOW)


# -- what a pass keeps ---------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP, Compression.ZSTD])
def test_the_latest_record_of_each_key_survives(tmp_path: Path, compression: Compression) -> None:
    log = open_log(tmp_path / "p")
    rnd = random.Random(7)
    for i in range(60):
        items = [(b"k%d" % rnd.randrange(6), b"v%d-%d" % (i, j)) for j in range(3)]
        log.append(kv_batch(items, NOW + i, compression=compression), now_ms=NOW)
    before = rows(log)
    end = log.active_segment_base_offset
    segments_before = len(log.segment_base_offsets)
    assert segments_before > 5
    clean(log)
    after = rows(log)
    assert after == compact_model(before, end)
    assert len(after) < len(before)
    assert log.log_start_offset == 0 and log.log_end_offset == before[-1][0] + 1
    assert log.clean_offset == end
    # Groups of small segments were merged, within segment.bytes.
    assert len(log.segment_base_offsets) < segments_before
    # Batches still carry their codec, and their offset ranges did not move.
    for header, _ in batches(log):
        if header.records_count:
            assert header.compression == compression
    # The log reopens to the same content after a clean close and after a crash
    # (every segment validated: gaps must be accepted, nothing truncated).
    log.close()
    log = open_log(tmp_path / "p")
    assert rows(log) == after
    log.abandon()
    (tmp_path / "p" / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    write_checkpoint(tmp_path / "p", clean_offset=end)
    log = open_log(tmp_path / "p")
    assert rows(log) == after
    assert log.log_end_offset == before[-1][0] + 1
    log.close()


def test_a_second_pass_compacts_new_records_against_the_old(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    fill(log, 40, 5, seed=1)
    before = rows(log)
    clean(log)
    first_end = log.clean_offset
    model = compact_model(before, first_end)
    assert rows(log) == model
    fill(log, 40, 5, seed=2)
    more = rows(log)
    clean(log)
    assert log.clean_offset > first_end
    assert rows(log) == compact_model(more, log.clean_offset)
    # Every key now appears once below the clean offset.
    keys = [k for off, k, _ in rows(log) if off < log.clean_offset]
    assert len(keys) == len(set(keys))
    log.close()


def test_reads_inside_a_removed_range_get_the_next_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=10_000)
    for i in range(10):
        log.append(kv_batch([(b"same", b"v%d" % i)]), now_ms=NOW)
    log.append(kv_batch([(b"other", b"x")]), now_ms=NOW)
    log.maybe_roll(NOW + 10 * DAY)
    clean(log)
    assert rows(log) == [(9, b"same", b"v9"), (10, b"other", b"x")]
    result = log.read(3, 1 << 20)
    assert result.first_offset == 9
    assert [h.base_offset for h, _ in iter_batches(result.tobytes())] == [9, 10]
    # The log start offset stays where it was: offset 0 is still readable (as a gap).
    assert log.read(0, 1 << 20).first_offset == 9
    log.close()


def test_tombstones_stay_for_delete_retention_then_go(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=10_000, delete_retention_ms=DAY)
    log.append(kv_batch([(b"a", b"1"), (b"b", b"1")]), now_ms=NOW)
    log.append(kv_batch([(b"a", None)], NOW + 5), now_ms=NOW)
    log.maybe_roll(NOW + 10 * DAY)
    clean(log, NOW + 1000)
    assert rows(log) == [(1, b"b", b"1"), (2, b"a", None)]
    # A day later the tombstone itself goes; the live key stays.
    clean(log, NOW + DAY + 1000)
    assert rows(log) == [(1, b"b", b"1")]
    log.close()


def test_records_without_a_key(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", cleanup_policy="delete", segment_bytes=10_000)
    log.append(kv_batch([(None, b"old"), (b"k", b"v")]), now_ms=NOW)
    log.reconfigure(LogConfig(segment_bytes=10_000, cleanup_policy="compact"))
    with pytest.raises(InvalidRecordError, match="no key"):
        log.append(kv_batch([(b"k", b"v2"), (None, b"x")], compression=Compression.LZ4), now_ms=NOW)
    assert log.log_end_offset == 2
    # The broker's own writes (markers) are not checked; data already there is
    # removed by the cleaner, as Kafka's does.
    log.maybe_roll(NOW + 10 * DAY)
    clean(log)
    assert rows(log) == [(1, b"k", b"v")]
    log.close()


def test_aborted_transactions_are_removed_and_markers_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=10_000)
    log.append(kv_batch([(b"k", b"committed-1")]), now_ms=NOW)  # 0
    txn = {"producer_id": 9, "producer_epoch": 0, "is_transactional": True}
    log.append(
        kv_batch([(b"k", b"aborted"), (b"j", b"aborted")], base_sequence=0, **txn), now_ms=NOW
    )
    abort = encode_control_batch(
        ControlRecordType.ABORT, producer_id=9, producer_epoch=0, coordinator_epoch=0, timestamp=NOW
    )
    log.append(abort, now_ms=NOW, from_client=False)  # 3
    log.append(kv_batch([(b"k", b"committed-2")], base_sequence=2, **txn), now_ms=NOW)  # 4
    commit = encode_control_batch(
        ControlRecordType.COMMIT,
        producer_id=9,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp=NOW,
    )
    log.append(commit, now_ms=NOW, from_client=False)  # 5
    log.maybe_roll(NOW + 10 * DAY)
    clean(log, aborted={9: [(1, 3)]}, producer_last_offsets={9: 4})
    assert rows(log) == [(4, b"k", b"committed-2")]
    controls = [h.base_offset for h, _ in batches(log) if h.is_control]
    assert controls == [3, 5]
    log.close()


def test_an_aborted_latest_value_leaves_the_committed_one(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=10_000)
    log.append(kv_batch([(b"k", b"good")]), now_ms=NOW)  # 0
    txn = {"producer_id": 9, "producer_epoch": 0, "is_transactional": True, "base_sequence": 0}
    log.append(kv_batch([(b"k", b"aborted")], **txn), now_ms=NOW)  # 1
    abort = encode_control_batch(
        ControlRecordType.ABORT, producer_id=9, producer_epoch=0, coordinator_epoch=0, timestamp=NOW
    )
    log.append(abort, now_ms=NOW, from_client=False)  # 2
    log.maybe_roll(NOW + 10 * DAY)
    clean(log, aborted={9: [(1, 2)]})
    assert rows(log) == [(0, b"k", b"good")]
    log.close()


def test_a_producers_last_batch_stays_as_an_empty_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=10_000)
    idem = {"producer_id": 5, "producer_epoch": 3, "base_sequence": 17}
    log.append(kv_batch([(b"k", b"a"), (b"k", b"b")], **idem), now_ms=NOW)  # 0-1
    log.append(
        kv_batch([(b"q", b"1")], producer_id=6, producer_epoch=0, base_sequence=0), now_ms=NOW
    )
    log.append(
        kv_batch([(b"q", b"2")], producer_id=6, producer_epoch=0, base_sequence=1), now_ms=NOW
    )
    log.append(kv_batch([(b"k", b"c")]), now_ms=NOW)  # 4
    log.maybe_roll(NOW + 10 * DAY)
    clean(log, producer_last_offsets={5: 1, 6: 3})
    found = [
        (h.base_offset, h.last_offset, h.records_count, h.producer_id) for h, _ in batches(log)
    ]
    # Producer 5's only batch is emptied but kept, with its offset and sequence
    # range; producer 6's older batch goes entirely.
    assert found == [(0, 1, 0, 5), (3, 3, 1, 6), (4, 4, 1, -1)]
    empty = batches(log)[0][0]
    assert (empty.producer_epoch, empty.base_sequence, empty.last_sequence) == (3, 17, 18)
    assert rows(log) == [(3, b"q", b"2"), (4, b"k", b"c")]
    log.close()


# -- what a pass may not touch -------------------------------------------------------------------


def test_the_active_segment_and_unstable_records_are_left_alone(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    fill(log, 30, 3)
    before = rows(log)
    segments = log.segment_base_offsets
    lso = segments[3] + 1  # an open transaction starts inside the fourth segment
    clean(log, last_stable_offset=lso)
    assert log.clean_offset == segments[3]
    assert rows(log) == compact_model(before, segments[3])
    log.close()


def test_min_compaction_lag(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", min_compaction_lag_ms=DAY)
    fill(log, 30, 3)  # timestamps NOW + i
    assert log.plan_cleaning(NOW + 1000, last_stable_offset=log.log_end_offset, force=True) is None
    clean(log, NOW + 2 * DAY)
    log.close()


def test_the_dirty_ratio_decides_when_a_pass_is_due(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", min_cleanable_dirty_ratio=0.5)
    lso = {"last_stable_offset": 1 << 62}
    assert log.plan_cleaning(NOW, **lso) is None  # nothing cleanable
    fill(log, 30, 1000)
    assert log.dirty_ratio(NOW, **lso) == 1.0
    clean(log)
    assert log.dirty_ratio(NOW, **lso) == 0.0
    assert log.plan_cleaning(NOW, **lso) is None
    # A little more data: dirty, but below the ratio.
    log.append(kv_batch([(b"k0", b"x")] * 3), now_ms=NOW)
    log.maybe_roll(NOW + 10 * DAY)
    assert 0 < log.dirty_ratio(NOW, **lso) < 0.5
    assert log.plan_cleaning(NOW, **lso) is None
    # ... unless max.compaction.lag.ms says it has waited too long.
    log.reconfigure(
        LogConfig(segment_bytes=400, cleanup_policy="compact", max_compaction_lag_ms=DAY)
    )
    cleaning = log.plan_cleaning(NOW + 2 * DAY, **lso)
    assert cleaning is not None
    assert log.plan_cleaning(NOW + 2 * DAY, **lso) is None  # one pass at a time
    cleaning.run()
    assert log.finish_cleaning(cleaning, now_ms=NOW) is not None
    log.close()


def test_a_delete_only_topic_is_never_compacted(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", cleanup_policy="delete")
    fill(log, 30, 3)
    assert log.plan_cleaning(NOW, last_stable_offset=1 << 62, force=True) is None
    log.close()


def test_a_pass_is_thrown_away_when_its_segments_went_meanwhile(tmp_path: Path) -> None:
    # compact,delete: DeleteRecords is refused where the policy lacks delete (as Kafka).
    log = open_log(tmp_path / "p", cleanup_policy="compact,delete")
    fill(log, 30, 3)
    before = rows(log)
    cleaning = log.plan_cleaning(NOW, last_stable_offset=log.log_end_offset, force=True)
    assert cleaning is not None
    cleaning.run()
    assert list((tmp_path / "p").glob("*" + CLEANED_SUFFIX))
    second = log.segment_base_offsets[1]
    log.delete_records(second)
    assert log.finish_cleaning(cleaning, now_ms=NOW) is None
    assert not list((tmp_path / "p").glob("*" + CLEANED_SUFFIX))
    assert rows(log) == [r for r in before if r[0] >= second]
    assert not log.cleaning
    log.close()


def test_a_cancelled_pass_leaves_no_file(tmp_path: Path) -> None:
    from trafka.brokerlite.storage.cleaner import CleaningCancelled

    log = open_log(tmp_path / "p")
    fill(log, 30, 3)
    cleaning = log.plan_cleaning(NOW, last_stable_offset=log.log_end_offset, force=True)
    assert cleaning is not None
    cleaning.cancel()
    with pytest.raises(CleaningCancelled):
        cleaning.run()
    assert not list((tmp_path / "p").glob("*" + CLEANED_SUFFIX))
    log.close()


# -- crashes ---------------------------------------------------------------------------------------


def _crash(log: PartitionLog, directory: Path) -> None:
    """Drop the log without a clean close."""
    log.abandon()
    (directory / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)


def test_a_crash_before_the_swap_keeps_the_old_segments(tmp_path: Path) -> None:
    d = tmp_path / "p"
    log = open_log(d)
    fill(log, 30, 3)
    before = rows(log)
    cleaning = log.plan_cleaning(NOW, last_stable_offset=log.log_end_offset, force=True)
    assert cleaning is not None
    cleaning.run()
    _crash(log, d)
    log = open_log(d)
    assert rows(log) == before
    assert not list(d.glob("*" + CLEANED_SUFFIX))
    log.close()


@pytest.mark.parametrize("old_files_deleted", [False, True])
def test_a_crash_during_the_swap_completes_it_on_open(
    tmp_path: Path, old_files_deleted: bool
) -> None:
    d = tmp_path / "p"
    log = open_log(d)
    fill(log, 30, 3)
    before = rows(log)
    end = log.active_segment_base_offset
    cleaning = log.plan_cleaning(NOW, last_stable_offset=log.log_end_offset, force=True)
    assert cleaning is not None
    cleaning.run()
    # What finish_cleaning does up to a crash: the checkpoint, then each group's
    # cleaned file renamed to its swap name (and maybe the old files deleted).
    log._clean_offset = cleaning.stats.end_offset
    log._write_checkpoint()
    for group in cleaning.groups:
        os.replace(group.path, group.swap_path())
        if old_files_deleted:
            for src in group.sources:
                for path in (src.segment.log_path, src.segment.index_path):
                    path.unlink()
    _crash(log, d)
    log = open_log(d)
    assert rows(log) == compact_model(before, end)
    assert not list(d.glob("*.swap"))
    log.close()


def test_complete_swaps_ignores_strange_names(tmp_path: Path) -> None:
    (tmp_path / "x.swap").write_bytes(b"")
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    assert complete_swaps(tmp_path) == 0
    assert (tmp_path / "00000000000000000000.log").exists()


def test_a_corrupt_base_offset_in_a_compacted_segment_is_caught(tmp_path: Path) -> None:
    d = tmp_path / "p"
    log = open_log(d)
    fill(log, 30, 3)
    clean(log)
    after = rows(log)
    bases = log.segment_base_offsets
    # The first compacted segment that holds batches (an emptied one can come first).
    k = next(
        i for i, b in enumerate(bases[:-1]) if batches(log, b)[0][0].base_offset < bases[i + 1]
    )
    first, second = bases[k], bases[k + 1]
    _crash(log, d)
    # The base offset is not covered by the CRC: point the last batch of the first
    # segment past the next segment's base.
    path = d / f"{first:020d}.log"
    data = path.read_bytes()
    headers = [h for h, _ in iter_batches(data)]
    pos = sum(h.size for h in headers[:-1])  # type: ignore[union-attr]
    with path.open("r+b") as f:
        f.seek(pos)
        f.write(struct.pack(">q", second + 1000))
    write_checkpoint(d, clean_offset=1 << 40)
    log = open_log(d)
    got = rows(log)
    lost = headers[-1]
    assert isinstance(lost, RecordBatchHeader)
    # Recovery cuts the segment before the bad batch and, as after any truncation,
    # drops the segments after it: the log ends there, not at offset 2**40.
    assert got == [r for r in after if r[0] < lost.base_offset]
    assert log.log_end_offset <= lost.base_offset
    log.close()


# -- with the broker: producer state across compaction and a restart ---------------------------


def test_retries_are_recognised_after_compaction_and_a_restart(
    open_core: Any, data_dir: Path
) -> None:
    """Why a producer's last batch stays, emptied: after compaction removed all its
    records and a restart rebuilt producer state from the log, a retry of that
    batch must still be answered with its original offset, not written again."""
    from brokerlite_wire import create, send

    from trafka.codec.messages import k22_init_producer_id as ipid

    core = open_core()
    create(core, "c", **{"cleanup.policy": "compact", "segment.bytes": "1024"})
    init = ipid.InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=-1, producer_id=-1, producer_epoch=-1
    )
    answer = core.call(22, 4, init)
    pid, epoch = answer.producer_id, answer.producer_epoch

    def idempotent(value: bytes, seq: int) -> bytes:
        return kv_batch(
            [(b"k", value)], core.now, producer_id=pid, producer_epoch=epoch, base_sequence=seq
        )

    sent = [send(core, "c", idempotent(b"v%d" % seq, seq)) for seq in range(3)]
    assert [r.base_offset for r in sent] == [0, 1, 2]
    # Another, plain producer supersedes key k, then fills segments so that they roll.
    for i in range(40):
        assert (
            send(core, "c", kv_batch([(b"k" if i == 0 else b"f%d" % i, b"x" * 40)])).error_code == 0
        )
    job = core.broker.producers.plan_cleaning(core.now, force=True)
    assert job is not None and job.topic == "c"
    job.cleaning.run()
    assert core.broker.producers.finish_cleaning(job, core.now) is not None
    log = core.broker.logs.partition("c", 0)
    kept = [(h.base_offset, h.records_count, h.producer_id) for h, _ in batches(log)[:2]]
    assert kept[0] == (2, 0, pid) and kept[1][0] > 2  # offsets 0-1 gone, 2 emptied
    core.broker.close()
    # As after a crash: no snapshot, no clean-shutdown marker; state comes from the log.
    for path in (data_dir / "c-0").glob("*.snapshot"):
        path.unlink()
    (data_dir / "c-0" / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    core = open_core()
    retry = send(core, "c", idempotent(b"v2", 2))
    assert (retry.error_code, retry.base_offset) == (0, 2)
    gap = send(core, "c", idempotent(b"v9", 9))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(core, "c", idempotent(b"v3", 3)).error_code == 0
