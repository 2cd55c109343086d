"""PartitionLog for replication: follower appends, the leader epoch cache, truncation,
the high watermark, and topic ids chosen by a cluster."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import struct
import uuid
from pathlib import Path

import pytest
from test_log import NOW, batch, open_log

from trafka.brokerlite.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    TopicExistsError,
)
from trafka.brokerlite.storage import segment as segment_module
from trafka.brokerlite.storage.cleaner import CleaningCancelled
from trafka.brokerlite.storage.epochs import EPOCH_CHECKPOINT_FILE
from trafka.brokerlite.storage.log_manager import LogManager
from trafka.brokerlite.storage.partition import CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE, PartitionLog
from trafka.brokerlite.storage.topic_configs import LogConfig
from trafka.codec.records import Compression, decode_records, encode_batch

ONE = len(batch([b"v"]))  # a single-record batch with a 1-byte value
SIZE = len(batch([b"v00"]))  # one with a 3-byte value
# Four batches of SIZE a segment, an index entry every other batch.
TRUNC_CONFIG = {"segment_bytes": 4 * SIZE, "index_interval_bytes": SIZE + 1}


def one(value: bytes, ts: int = NOW) -> bytes:
    return batch([value], ts)


def control_batch(producer_id: int) -> bytes:
    """A COMMIT marker: key (version 0, type 1), value (version 0, coordinator epoch 0)."""
    return encode_batch(
        [(NOW, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])],
        producer_id=producer_id,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )


def leader_history(log: PartitionLog) -> None:
    """Epochs 0, 3 and 5; plain, transactional, control, compressed and multi-record batches."""
    log.leader_epoch = 0
    log.append(batch([b"a", b"b"]), now_ms=NOW)
    log.append(one(b"c", NOW + 1), now_ms=NOW)
    log.leader_epoch = 3
    txn = batch(
        [b"d"] * 3, NOW + 2, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    log.append(txn, now_ms=NOW)
    log.append(control_batch(7), now_ms=NOW, from_client=False)
    log.leader_epoch = 5
    log.append(batch([b"e" * 30] * 4, NOW + 3, compression=Compression.GZIP), now_ms=NOW)
    for i in range(6):
        log.append(one(b"f%d" % i, NOW + 10 - i), now_ms=NOW)


def replicate(
    leader: PartitionLog, follower: PartitionLog, *, max_bytes: int = 1, now_ms: int = NOW
) -> None:
    """Fetch from the leader at the follower's end until caught up (one batch a fetch
    with the default ``max_bytes``)."""
    while follower.log_end_offset < leader.log_end_offset:
        data = leader.read(follower.log_end_offset, max_bytes).tobytes()
        result = follower.append_replicated(data, now_ms=now_ms)
        assert result.log_append_time_ms == -1


def files(directory: Path) -> dict[str, bytes]:
    """The segment, index and epoch files of a partition directory."""
    return {
        p.name: p.read_bytes()
        for p in directory.iterdir()
        if p.suffix in (".log", ".index", ".timeindex") or p.name == EPOCH_CHECKPOINT_FILE
    }


def values(log: PartitionLog) -> list[tuple[int, bytes | None]]:
    data = log.read(log.log_start_offset, 1 << 30).tobytes()
    return [(r.offset, r.value) for r in decode_records(data, verify=True)]


def batch_bounds(log: PartitionLog) -> list[tuple[int, int]]:
    """``(base offset, last offset)`` of every readable batch."""
    data = log.read(log.log_start_offset, 1 << 30).tobytes()
    out = []
    pos = 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        (lod,) = struct.unpack_from(">i", data, pos + 23)
        out.append((base, base + lod))
        pos += length + 12
    return out


def crashed_copy(src: Path, dst: Path) -> Path:
    """The files as a crash would leave them (the page cache survives a process kill)."""
    shutil.copytree(src, dst)
    (dst / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    return dst


def checkpoint(directory: Path) -> dict[str, int]:
    data: dict[str, int] = json.loads((directory / CHECKPOINT_FILE).read_text())
    return data


def epoch_file(entries: list[tuple[int, int]]) -> str:
    return "".join(
        f"{line}\n" for line in ["0", str(len(entries))] + [f"{e} {o}" for e, o in entries]
    )


# -- follower appends ----------------------------------------------------------------------------


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_a_follower_stores_the_leaders_bytes(tmp_path: Path, timestamp_type: str) -> None:
    config = {
        "segment_bytes": 300,
        "index_interval_bytes": 100,
        "message_timestamp_type": timestamp_type,
    }
    leader = open_log(tmp_path / "leader", **config)  # type: ignore[arg-type]
    leader_history(leader)
    assert len(leader.segment_base_offsets) >= 3
    follower = open_log(tmp_path / "follower", **config)  # type: ignore[arg-type]
    # Later, so a follower that stamped LogAppendTime would show it.
    replicate(leader, follower, now_ms=NOW + 99_999)
    assert follower.segment_base_offsets == leader.segment_base_offsets
    assert follower.log_end_offset == leader.log_end_offset
    assert follower.epoch_entries == leader.epoch_entries == [(0, 0), (3, 3), (5, 7)]
    assert follower.read(0, 1 << 20).tobytes() == leader.read(0, 1 << 20).tobytes()
    leader.close()
    follower.close()
    assert files(tmp_path / "follower") == files(tmp_path / "leader")
    # Reopened, the follower serves the same batches.
    follower = open_log(tmp_path / "follower", **config)  # type: ignore[arg-type]
    assert follower.opened_clean
    assert [b for b, _ in batch_bounds(follower)] == [0, 2, 3, 6, 7, 11, 12, 13, 14, 15, 16]
    follower.close()


def test_multi_batch_fetches_replicate_the_same_data(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    leader_history(leader)
    follower = open_log(tmp_path / "follower", index_interval_bytes=0)
    replicate(leader, follower, max_bytes=200)
    assert follower.read(0, 1 << 20).tobytes() == leader.read(0, 1 << 20).tobytes()
    assert follower.epoch_entries == leader.epoch_entries
    assert follower.offset_for_timestamp(NOW + 4) == leader.offset_for_timestamp(NOW + 4)


def test_follower_appends_skip_the_leaders_rules_but_not_the_structure(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    leader_history(leader)
    leader.append(encode_batch([(NOW, None, b"no key", [])]), now_ms=NOW)
    data = leader.read(0, 1 << 20).tobytes()
    # Smaller than the leader's batches, and compacted: a follower stores what its
    # leader accepted (no max.message.bytes, no key rule, control batches fine).
    follower = open_log(tmp_path / "f", message_max_bytes=70, cleanup_policy="compact")
    assert follower.append_replicated(data, now_ms=NOW)[:2] == (0, leader.log_end_offset - 1)
    small = open_log(tmp_path / "small", segment_bytes=len(data) - 1)
    with pytest.raises(RecordBatchTooLargeError):
        small.append_replicated(data, now_ms=NOW)


def test_offsets_that_overlap_or_go_backwards_write_nothing(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    leader_history(leader)
    # Batches [0, 1], [2], [3, 5], [6], [7, 10], [11] ...
    b = [leader.read(base, 1).tobytes() for base, _ in batch_bounds(leader)]
    follower = open_log(tmp_path / "f")
    directory = tmp_path / "f"

    def unchanged(end: int) -> None:
        assert follower.log_end_offset == end
        assert follower.size == sum(len(x) for x in b[: len(batch_bounds(follower))])
        saved = checkpoint(directory) if (directory / CHECKPOINT_FILE).exists() else {}
        assert "replicated_gaps_offset" not in saved

    with pytest.raises(
        InvalidRecordError, match="starts at offset 0; the previous batch ends at 1"
    ):
        follower.append_replicated(b[0] + b[0], now_ms=NOW)
    unchanged(0)
    # A gap first (accepted on its own), then an offset going backwards.
    with pytest.raises(
        InvalidRecordError, match="starts at offset 2; the previous batch ends at 5"
    ):
        follower.append_replicated(b[2] + b[1], now_ms=NOW)
    unchanged(0)
    corrupt = bytearray(b[1])
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        follower.append_replicated(b[0] + bytes(corrupt), now_ms=NOW)
    unchanged(0)
    with pytest.raises(InvalidRecordError, match="empty"):
        follower.append_replicated(b"", now_ms=NOW)
    assert follower.epoch_entries == []
    assert not (directory / EPOCH_CHECKPOINT_FILE).exists()
    assert (directory / f"{0:020d}.log").stat().st_size == 0

    follower.append_replicated(b[0] + b[1], now_ms=NOW)
    unchanged(3)
    with pytest.raises(InvalidRecordError, match="start at offset 2, below the log end offset 3"):
        follower.append_replicated(b[1], now_ms=NOW)  # an overlap
    with pytest.raises(InvalidRecordError, match="start at offset 0, below"):
        follower.append_replicated(b[0], now_ms=NOW)  # the log is not empty: no restart
    # Epochs 5 then 3 going backwards: refused before the cache moves.
    with pytest.raises(InvalidRecordError, match="offsets must increase"):
        follower.append_replicated(b[2] + b[4] + b[3], now_ms=NOW)
    assert follower.epoch_entries == [(0, 0)]
    unchanged(3)
    follower.append_replicated(b"".join(b[2:]), now_ms=NOW)
    assert follower.read(0, 1 << 20).tobytes() == leader.read(0, 1 << 20).tobytes()


def test_a_failed_follower_write_leaves_the_epoch_cache_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    leader = open_log(tmp_path / "leader")
    leader_history(leader)
    follower = open_log(tmp_path / "f")
    replicate(leader, follower, max_bytes=1)
    follower.truncate_to(3)
    assert follower.epoch_entries == [(0, 0)]

    def enospc(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "full")

    monkeypatch.setattr(segment_module, "_write", enospc)
    with pytest.raises(LogStorageError, match="nothing appended"):
        follower.append_replicated(leader.read(3, 1).tobytes(), now_ms=NOW)
    assert follower.epoch_entries == [(0, 0)]
    assert (tmp_path / "f" / EPOCH_CHECKPOINT_FILE).read_text() == epoch_file([(0, 0)])
    monkeypatch.undo()
    replicate(leader, follower)
    assert follower.epoch_entries == leader.epoch_entries


# -- copying a compacted leader (offset gaps) ---------------------------------------------------

# Single-record batches of about one size, three or four a segment.
GAP_CONFIG = {"segment_bytes": 4 * ONE + 8, "index_interval_bytes": 2 * ONE}


def keyed(i: int) -> bytes:
    """Every third batch has a key of its own (kept by compaction), the others share five."""
    key = b"k%d" % (i % 5) if i % 3 else b"u%d" % i
    return encode_batch([(NOW + i, key, b"%02d" % i, [])])


def compacted_leader(path: Path) -> PartitionLog:
    """40 keyed batches in epochs 0, 2 and 5, the closed segments compacted by the real
    cleaner (only the latest record of each key stays there: offset gaps), then 6 more."""
    leader = open_log(path, cleanup_policy="compact", **GAP_CONFIG)  # type: ignore[arg-type]
    for i in range(40):
        leader.leader_epoch = 0 if i < 12 else 2 if i < 30 else 5
        leader.append(keyed(i), now_ms=NOW)
    cleaning = leader.plan_cleaning(NOW, last_stable_offset=40, force=True)
    assert cleaning is not None
    cleaning.run()
    assert leader.finish_cleaning(cleaning, now_ms=NOW) is not None
    for i in range(40, 46):
        leader.append(keyed(i), now_ms=NOW)
    bounds = batch_bounds(leader)
    assert any(b[0] > a[1] + 1 for a, b in itertools.pairwise(bounds))
    return leader


def gap_offsets(log: PartitionLog) -> list[int]:
    bounds = [(-1, -1), *batch_bounds(log)]
    return [o for a, b in itertools.pairwise(bounds) for o in range(a[1] + 1, b[0])]


def epochs_of(log: PartitionLog) -> list[tuple[int, int]]:
    """The epoch cache the readable batches build (each epoch from its first kept batch)."""
    data = log.read(log.log_start_offset, 1 << 30).tobytes()
    out: list[tuple[int, int]] = []
    pos = 0
    while pos < len(data):
        base, length, epoch = struct.unpack_from(">qii", data, pos)
        if not out or epoch > out[-1][0]:
            out.append((epoch, base))
        pos += length + 12
    return out


def assert_copy(follower: PartitionLog, leader: PartitionLog) -> None:
    assert follower.log_end_offset == leader.log_end_offset
    assert follower.read(0, 1 << 20).tobytes() == leader.read(0, 1 << 20).tobytes()
    assert follower.epoch_entries == epochs_of(leader)
    for ts in (NOW, NOW + 7, NOW + 33, NOW + 45):
        assert follower.offset_for_timestamp(ts) == leader.offset_for_timestamp(ts)


@pytest.mark.parametrize("max_bytes", [1, 3 * ONE, GAP_CONFIG["segment_bytes"]])
def test_a_follower_copies_a_compacted_leaders_gaps(tmp_path: Path, max_bytes: int) -> None:
    leader = compacted_leader(tmp_path / "leader")
    gaps = gap_offsets(leader)
    d = tmp_path / "f"
    follower = open_log(d, **GAP_CONFIG)  # type: ignore[arg-type]
    replicate(leader, follower, max_bytes=max_bytes)
    assert_copy(follower, leader)
    assert gap_offsets(follower) == gaps
    assert len(follower.segment_base_offsets) > 2
    # Inside a gap, a read starts with the next batch, as the leader's does.
    for offset in gaps:
        assert follower.read(offset, 1).tobytes() == leader.read(offset, 1).tobytes() != b""
    assert follower.set_high_watermark(gaps[-1]) == gaps[-1]
    assert follower.read(gaps[0], 1 << 20, upper_bound=gaps[-1]).tobytes() == (
        leader.read(gaps[0], 1 << 20, upper_bound=gaps[-1]).tobytes()
    )
    # Only segments that received a gap are marked as gap-tolerant.
    marked = checkpoint(d)["replicated_gaps_offset"]
    assert 0 < marked <= max(b for b in follower.segment_base_offsets if b <= gaps[-1]) + 1

    # A crash (the page cache survives), recovering every segment from offset 0.
    copy = crashed_copy(d, tmp_path / "crash")
    saved = checkpoint(copy)
    (copy / CHECKPOINT_FILE).write_text(json.dumps({**saved, "recovery_point": 0}))
    reopened = open_log(copy, **GAP_CONFIG)  # type: ignore[arg-type]
    assert not reopened.opened_clean
    assert_copy(reopened, leader)
    assert reopened.segment_base_offsets == follower.segment_base_offsets
    reopened.close()

    # A clean close, and index files to rebuild on the next open.
    follower.close()
    copy = tmp_path / "clean"
    shutil.copytree(d, copy)
    follower = open_log(d, **GAP_CONFIG)  # type: ignore[arg-type]
    assert follower.opened_clean
    assert_copy(follower, leader)
    assert follower.high_watermark == gaps[-1]
    follower.close()
    for index in copy.glob("*.index"):
        index.unlink()
    follower = open_log(copy, **GAP_CONFIG)  # type: ignore[arg-type]
    assert_copy(follower, leader)
    # And the copy goes on.
    for i in range(46, 50):
        leader.append(keyed(i), now_ms=NOW)
    replicate(leader, follower, max_bytes=max_bytes)
    assert_copy(follower, leader)
    follower.close()


def test_segments_without_replicated_gaps_keep_the_contiguity_check(tmp_path: Path) -> None:
    leader = compacted_leader(tmp_path / "leader")
    d = tmp_path / "f"
    follower = open_log(d, **GAP_CONFIG)  # type: ignore[arg-type]
    replicate(leader, follower, max_bytes=GAP_CONFIG["segment_bytes"])
    for i in range(46, 60):  # contiguous, into new segments
        leader.append(keyed(i), now_ms=NOW)
        replicate(leader, follower)
    marked = checkpoint(d)["replicated_gaps_offset"]
    last = follower.active_segment_base_offset
    assert last >= marked
    follower.close()
    # A base offset jumping forward (the field is not covered by the CRC) in a
    # segment that never received a gap is corruption: recovery cuts there.
    copy = crashed_copy(d, tmp_path / "crash")
    path = copy / f"{last:020d}.log"
    data = bytearray(path.read_bytes())
    (length,) = struct.unpack_from(">i", data, 8)
    second = length + 12
    (base,) = struct.unpack_from(">q", data, second)
    struct.pack_into(">q", data, second, base + 3)
    path.write_bytes(bytes(data))
    reopened = open_log(copy, **GAP_CONFIG)  # type: ignore[arg-type]
    assert reopened.log_end_offset == base
    reopened.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_gap_is_made_durable_once_per_segment_before_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leader = compacted_leader(tmp_path / "leader")
    bounds = batch_bounds(leader)
    b = [leader.read(base, 1).tobytes() for base, _ in bounds]
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    d = tmp_path / "f"
    follower = open_log(d, segment_bytes=1 << 20)
    assert bounds[0][0] == 0 and bounds[1][0] > 1
    follower.append_replicated(b[0], now_ms=NOW)  # contiguous: no checkpoint write
    assert synced == [] and not (d / CHECKPOINT_FILE).exists()
    follower.append_replicated(b[1], now_ms=NOW)  # a gap: fsynced first
    assert synced == [CHECKPOINT_FILE + ".tmp", "f"]
    assert checkpoint(d)["replicated_gaps_offset"] == 1
    synced.clear()
    follower.append_replicated(b"".join(b[2:]), now_ms=NOW)  # the segment is marked already
    assert synced == []
    assert follower.read(0, 1 << 20).tobytes() == leader.read(0, 1 << 20).tobytes()

    # A checkpoint that cannot be written: nothing appended.
    other = open_log(tmp_path / "g")
    other.append_replicated(b[0], now_ms=NOW)

    def failing(fd: int) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(LogStorageError, match="nothing appended"):
        other.append_replicated(b[1], now_ms=NOW)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert other.log_end_offset == bounds[0][1] + 1 and other.size == len(b[0])
    other.append_replicated(b[1], now_ms=NOW)
    assert other.log_end_offset == bounds[1][1] + 1


def test_an_empty_follower_restarts_at_a_batch_holding_its_end(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    leader.truncate_fully_and_start_at(10)
    leader.leader_epoch = 4
    leader.append(batch([b"a", b"b", b"c"]), now_ms=NOW)  # [10, 12]
    leader.leader_epoch = 6
    leader.append(one(b"d"), now_ms=NOW)  # [13]
    assert leader.delete_records(11) == 11  # the log start inside the first batch
    data = leader.read(11, 1 << 20).tobytes()
    first = leader.read(11, 1).tobytes()

    # Not empty (its end is inside the batch, but so is data): refused.
    busy = open_log(tmp_path / "busy")
    busy.truncate_fully_and_start_at(10)
    source = open_log(tmp_path / "src")
    source.truncate_fully_and_start_at(10)
    source.append(one(b"z"), now_ms=NOW)
    busy.append_replicated(source.read(10, 1).tobytes(), now_ms=NOW)
    with pytest.raises(InvalidRecordError, match="start at offset 10, below the log end offset 11"):
        busy.append_replicated(first, now_ms=NOW)
    assert busy.log_end_offset == 11 and values(busy) == [(10, b"z")]

    d = tmp_path / "f"
    follower = open_log(d)
    follower.truncate_fully_and_start_at(13)
    # Empty, but the batch ends before the log end: refused.
    with pytest.raises(InvalidRecordError, match="below the log end offset 13"):
        follower.append_replicated(first, now_ms=NOW)
    follower.truncate_fully_and_start_at(11)
    # The restart is only for the first batch: an overlap after it refuses it all.
    with pytest.raises(InvalidRecordError, match="offsets must increase"):
        follower.append_replicated(first + first, now_ms=NOW)
    assert follower.segment_base_offsets == [11] and follower.log_start_offset == 11
    assert follower.log_end_offset == 11 and follower.size == 0

    result = follower.append_replicated(data, now_ms=NOW)
    assert (result.base_offset, result.last_offset, result.log_start_offset) == (10, 13, 10)
    assert (follower.log_start_offset, follower.log_end_offset) == (10, 14)
    assert follower.segment_base_offsets == [10]
    assert follower.read(10, 1 << 20).tobytes() == data
    assert follower.epoch_entries == [(4, 10), (6, 13)]
    assert checkpoint(d)["log_start_offset"] == 10
    copy = crashed_copy(d, tmp_path / "crash")
    reopened = open_log(copy)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (10, 14)
    assert reopened.read(10, 1 << 20).tobytes() == data
    assert reopened.epoch_entries == [(4, 10), (6, 13)]
    reopened.close()
    follower.close()


# -- leader epoch cache --------------------------------------------------------------------------


def epoch_log(path: Path, **config: object) -> PartitionLog:
    """Offsets 0-9 in epoch 0, 10-19 in epoch 2, 20-24 in epoch 5 (single-record batches)."""
    log = open_log(path, **config)
    for epoch, count in ((0, 10), (2, 10), (5, 5)):
        log.leader_epoch = epoch
        for _ in range(count):
            log.append(one(b"v"), now_ms=NOW)
    return log


def test_appends_fill_the_epoch_cache_and_its_file(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    assert log.latest_epoch == -1 and log.epoch_entries == []
    log.append(one(b"v"), now_ms=NOW)  # leader_epoch 0 by default
    assert log.epoch_entries == [(0, 0)]
    log.close()
    log = epoch_log(tmp_path / "e")
    assert log.epoch_entries == [(0, 0), (2, 10), (5, 20)] and log.latest_epoch == 5
    text = epoch_file([(0, 0), (2, 10), (5, 20)])
    assert (tmp_path / "e" / EPOCH_CHECKPOINT_FILE).read_text() == text
    log.leader_epoch = 4  # a lower epoch than the cache's latest adds nothing
    log.append(one(b"v"), now_ms=NOW)
    assert log.epoch_entries == [(0, 0), (2, 10), (5, 20)]
    log.close()
    log = open_log(tmp_path / "e")
    assert log.epoch_entries == [(0, 0), (2, 10), (5, 20)]
    log.close()


@pytest.mark.parametrize("damage", ["missing", "garbage", "unordered", "bad count"])
def test_a_missing_or_unreadable_epoch_file_is_rebuilt_from_the_batches(
    tmp_path: Path, damage: str
) -> None:
    d = tmp_path / "e"
    epoch_log(d, segment_bytes=8 * ONE).close()
    path = d / EPOCH_CHECKPOINT_FILE
    original = path.read_text()
    if damage == "missing":
        path.unlink()
    elif damage == "garbage":
        path.write_bytes(b"\xff\x00 not a checkpoint")
    elif damage == "unordered":
        path.write_text(epoch_file([(2, 10), (0, 0)]))
    else:
        path.write_text("0\n2\n0 0\n2 10\n5 20\n")
    log = open_log(d, segment_bytes=8 * ONE)
    assert log.opened_clean
    assert log.epoch_entries == [(0, 0), (2, 10), (5, 20)]
    assert path.read_text() == original
    log.close()


def test_a_log_written_before_epochs_and_high_watermarks_opens(tmp_path: Path) -> None:
    """What the code before them left: no epoch file, a checkpoint without the new key."""
    d = tmp_path / "old"
    epoch_log(d, segment_bytes=8 * ONE).close()
    (d / EPOCH_CHECKPOINT_FILE).unlink()
    old = {"version": 1, "log_start_offset": 0, "recovery_point": 25, "clean_offset": 0}
    (d / CHECKPOINT_FILE).write_text(json.dumps(old))
    log = open_log(d, segment_bytes=8 * ONE)
    assert log.opened_clean and log.log_end_offset == 25
    assert log.epoch_entries == [(0, 0), (2, 10), (5, 20)]
    assert not log.tracks_high_watermark and log.high_watermark == 25
    log.append(one(b"w"), now_ms=NOW)
    assert log.high_watermark == 26
    log.close()
    assert "high_watermark" not in checkpoint(d)


def test_an_empty_log_writes_no_epoch_file(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.close()
    assert not (tmp_path / "t-0" / EPOCH_CHECKPOINT_FILE).exists()
    log = open_log(tmp_path / "t-0")
    assert log.epoch_entries == [] and log.end_offset_for_epoch(0) == (-1, -1)
    log.close()


def test_end_offset_for_epoch_follows_kafka(tmp_path: Path) -> None:
    log = epoch_log(tmp_path / "e", segment_bytes=8 * ONE)
    cases = {
        -1: (-1, -1),  # undefined
        5: (5, 25),  # the latest epoch ends at the log end
        6: (-1, -1),  # above every cached epoch
        4: (2, 20),  # between cached epochs: the one below, the start of the one above
        3: (2, 20),
        2: (2, 20),
        1: (0, 10),
        0: (0, 10),
    }
    assert {epoch: log.end_offset_for_epoch(epoch) for epoch in cases} == cases
    # Older than the whole cache: the requested epoch, the start of the first cached one.
    assert log.delete_records(12) == 12
    assert log.epoch_entries == [(2, 12), (5, 20)]
    assert log.end_offset_for_epoch(1) == (1, 12)
    assert log.end_offset_for_epoch(0) == (0, 12)
    assert log.end_offset_for_epoch(2) == (2, 20)
    log.close()


def test_assign_epoch_follows_kafkas_rules(tmp_path: Path) -> None:
    d = tmp_path / "e"
    log = epoch_log(d)
    assert not log.assign_epoch(5, 25)  # already the latest epoch, from an earlier offset
    assert log.assign_epoch(7, 25)  # a new leader: its epoch at its log end
    assert log.epoch_entries == [(0, 0), (2, 10), (5, 20), (7, 25)]
    assert (d / EPOCH_CHECKPOINT_FILE).read_text() == epoch_file(log.epoch_entries)
    assert log.end_offset_for_epoch(7) == (7, 25) and log.end_offset_for_epoch(5) == (5, 25)
    # An entry that conflicts with later ones replaces them (Kafka's assign).
    assert log.assign_epoch(6, 25)
    assert log.epoch_entries == [(0, 0), (2, 10), (5, 20), (6, 25)]
    assert log.assign_epoch(6, 22)
    assert log.epoch_entries == [(0, 0), (2, 10), (5, 20), (6, 22)]
    assert log.assign_epoch(3, 15)
    assert log.epoch_entries == [(0, 0), (2, 10), (3, 15)]
    for epoch, start in ((-1, 0), (1, -1), (9, 26)):
        with pytest.raises(ValueError):
            log.assign_epoch(epoch, start)
    log.leader_epoch = 3  # appends in the current epoch add nothing
    log.append(one(b"v"), now_ms=NOW)
    assert log.epoch_entries == [(0, 0), (2, 10), (3, 15)]
    # As Kafka's loader: an epoch starting at the log end has no batch yet, and goes.
    assert log.assign_epoch(9, 26)
    log.close()
    log = open_log(d)
    assert log.epoch_entries == [(0, 0), (2, 10), (3, 15)]
    assert (d / EPOCH_CHECKPOINT_FILE).read_text() == epoch_file(log.epoch_entries)
    log.close()


def test_entries_past_the_log_end_are_dropped_on_open(tmp_path: Path) -> None:
    """A crash after the cache was written and before the batches were."""
    d = tmp_path / "e"
    log = epoch_log(d)
    log.leader_epoch = 8
    log.append(one(b"lost"), now_ms=NOW)
    assert log.epoch_entries[-1] == (8, 25)
    log.abandon()
    (d / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    with open(d / f"{0:020d}.log", "r+b") as f:
        f.truncate(25 * ONE)  # the batch did not reach the disk
    log = open_log(d)
    assert log.log_end_offset == 25
    assert log.epoch_entries == [(0, 0), (2, 10), (5, 20)]
    assert (d / EPOCH_CHECKPOINT_FILE).read_text() == epoch_file(log.epoch_entries)
    log.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_appends_never_wait_for_the_epoch_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append writes the file without an fsync; it is fsynced before the recovery
    point moves past it (a roll, a close), ahead of the checkpoint naming that point."""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=2 * ONE)
    log.append(one(b"v"), now_ms=NOW)
    log.leader_epoch = 1
    log.append(one(b"v"), now_ms=NOW)
    assert synced == []
    assert (d / EPOCH_CHECKPOINT_FILE).read_text() == epoch_file([(0, 0), (1, 1)])
    log.append(one(b"v"), now_ms=NOW)  # rolls
    assert synced[:2] == [EPOCH_CHECKPOINT_FILE + ".tmp", "t-0"]
    assert synced[2:] == [CHECKPOINT_FILE + ".tmp", "t-0"]
    synced.clear()
    log.append(one(b"v"), now_ms=NOW)  # no new epoch, nothing to write
    log.leader_epoch = 2
    log.append(one(b"v"), now_ms=NOW)  # rolls: the file holds no entry the roll needs
    assert EPOCH_CHECKPOINT_FILE + ".tmp" not in synced
    synced.clear()
    log.close()
    assert synced[:2] == [EPOCH_CHECKPOINT_FILE + ".tmp", "t-0"]


def test_entries_lost_with_an_unsynced_file_are_rebuilt(tmp_path: Path) -> None:
    """A power loss can keep the batches and lose the last write of the epoch file."""
    d = tmp_path / "e"
    log = epoch_log(d, segment_bytes=8 * ONE)
    assert checkpoint(d)["recovery_point"] == 24  # the file was fsynced for the roll
    log.leader_epoch = 7
    log.append(one(b"v"), now_ms=NOW)
    assert log.epoch_entries[-1] == (7, 25)
    copy = crashed_copy(d, tmp_path / "copy")
    (copy / EPOCH_CHECKPOINT_FILE).write_text(epoch_file([(0, 0), (2, 10), (5, 20)]))
    reopened = open_log(copy, segment_bytes=8 * ONE)
    assert reopened.epoch_entries == [(0, 0), (2, 10), (5, 20), (7, 25)]
    assert (copy / EPOCH_CHECKPOINT_FILE).read_text() == epoch_file(reopened.epoch_entries)
    reopened.close()
    log.close()


def test_retention_moves_the_first_epoch_to_the_log_start(tmp_path: Path) -> None:
    d = tmp_path / "e"
    log = epoch_log(d, segment_bytes=4 * ONE, retention_bytes=9 * ONE, retention_ms=-1)
    assert log.apply_retention(NOW) == 4
    assert log.log_start_offset == 16
    assert log.epoch_entries == [(2, 16), (5, 20)]
    assert (d / EPOCH_CHECKPOINT_FILE).read_text() == epoch_file([(2, 16), (5, 20)])
    log.close()
    log = open_log(d, segment_bytes=4 * ONE)
    assert log.epoch_entries == [(2, 16), (5, 20)]
    log.close()


# -- truncation ----------------------------------------------------------------------------------


def truncation_log(path: Path) -> PartitionLog:
    """30 single-record batches, timestamps jumping about, 4 batches a segment, an
    index entry every other batch; epochs 1 (0-9), 4 (10-19) and 6 (20-29)."""
    log = open_log(path, **TRUNC_CONFIG)  # type: ignore[arg-type]
    for i in range(30):
        log.leader_epoch = (1, 4, 6)[i // 10]
        log.append(one(b"v%02d" % i, NOW + (i * 7919) % 31), now_ms=NOW)
    assert log.segment_base_offsets == list(range(0, 30, 4))
    return log


def expected_values(end: int) -> list[tuple[int, bytes | None]]:
    return [(i, b"v%02d" % i) for i in range(end)]


def assert_files_match_recovery(directory: Path, scratch: Path) -> None:
    """A closed log's files are what a full recovery of its batches builds."""
    copy = crashed_copy(directory, scratch)
    (copy / CHECKPOINT_FILE).unlink()  # validate every segment, rebuild every index
    (copy / EPOCH_CHECKPOINT_FILE).unlink()
    PartitionLog.open(copy, LogConfig(**TRUNC_CONFIG), now_ms=NOW).close()
    assert files(copy) == files(directory)


@pytest.mark.parametrize("target", range(0, 31))
def test_truncate_then_append_matches_a_model(tmp_path: Path, target: int) -> None:
    d = tmp_path / "t-0"
    log = truncation_log(d)
    assert log.truncate_to(target) == target
    assert log.log_end_offset == target
    assert values(log) == expected_values(target)
    assert all(start < target for _, start in log.epoch_entries)
    assert log.epoch_entries == [e for e in [(1, 0), (4, 10), (6, 20)] if e[1] < target]
    # Segments above go; the one holding the target is cut and stays (even empty).
    assert log.segment_base_offsets == [b for b in range(0, 30, 4) if b <= target]
    for base in range(0, 30, 4):
        assert (d / f"{base:020d}.log").exists() == (base in log.segment_base_offsets)
    for offset in range(target):
        assert log.read(offset, 1).first_offset == offset
    # Appending again continues at the target, rolling as before.
    log.leader_epoch = 9
    for i in range(target, 34):
        assert log.append(one(b"v%02d" % i, NOW + i), now_ms=NOW).base_offset == i
    assert values(log) == expected_values(34)
    assert log.segment_base_offsets == list(range(0, 34, 4))
    assert log.epoch_entries[-1] == (9, target)
    assert log.offset_for_timestamp(NOW + 33) == (33, NOW + 33)
    log.close()
    assert_files_match_recovery(d, tmp_path / "copy")
    log = open_log(d, **TRUNC_CONFIG)  # type: ignore[arg-type]
    assert log.opened_clean and values(log) == expected_values(34)
    log.close()


def test_truncate_inside_a_batch_removes_the_whole_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch([b"a"] * 3), now_ms=NOW)
    log.append(batch([b"b"] * 3), now_ms=NOW)
    assert log.truncate_to(4) == 3
    assert log.log_end_offset == 3 and batch_bounds(log) == [(0, 2)]
    assert log.truncate_to(1) == 0
    assert log.log_end_offset == 0 and log.size == 0 and log.epoch_entries == []
    assert log.append(batch([b"c"] * 2), now_ms=NOW)[:2] == (0, 1)
    log.close()


def test_truncate_at_or_past_the_end_does_nothing(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = truncation_log(d)
    log.close()
    log = open_log(d, **TRUNC_CONFIG)  # type: ignore[arg-type]
    assert log.truncate_to(30) == 30 and log.truncate_to(99) == 30
    assert (d / CLEAN_SHUTDOWN_FILE).exists()  # nothing was touched
    with pytest.raises(ValueError):
        log.truncate_to(-1)
    log.close()


def test_truncate_below_the_log_start_lowers_it(tmp_path: Path) -> None:
    log = truncation_log(tmp_path / "t-0")
    assert log.delete_records(10) == 10
    assert log.segment_base_offsets[0] == 8
    assert log.truncate_to(9) == 9
    assert log.log_start_offset == 9 and values(log) == []
    assert log.epoch_entries == []  # (4, 10), moved from (1, 0) by the deletion, is past the end
    # Below the first segment: the log restarts there, empty.
    assert log.truncate_to(5) == 5
    assert log.segment_base_offsets == [5] and log.log_start_offset == 5
    assert log.epoch_entries == []
    log.close()


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = truncation_log(d)
    log.set_high_watermark(20)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert log.segment_base_offsets == [100] and log.size == 0
    assert log.epoch_entries == [] and log.latest_epoch == -1
    assert (d / EPOCH_CHECKPOINT_FILE).read_text() == "0\n0\n"
    assert sorted(p.name for p in d.glob("*.log")) == [f"{100:020d}.log"]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(99, 1)
    leader = open_log(tmp_path / "leader")
    leader.truncate_fully_and_start_at(100)
    leader.leader_epoch = 7
    leader.append(batch([b"x", b"y"]), now_ms=NOW)
    log.append_replicated(leader.read(100, 1 << 20).tobytes(), now_ms=NOW)
    assert values(log) == [(100, b"x"), (101, b"y")] and log.epoch_entries == [(7, 100)]
    assert checkpoint(d)["log_start_offset"] == 100
    log.close()
    log = open_log(d)
    assert log.log_start_offset == 100 and values(log) == [(100, b"x"), (101, b"y")]
    assert log.epoch_entries == [(7, 100)] and log.high_watermark == 100
    log.close()


# -- crash safety ---------------------------------------------------------------------------------


def assert_consistent_prefix(directory: Path) -> PartitionLog:
    """Open a crashed copy: a contiguous prefix of the history, its epochs those of its batches."""
    log = open_log(directory, **TRUNC_CONFIG)  # type: ignore[arg-type]
    end = log.log_end_offset
    assert values(log) == expected_values(end)
    assert log.epoch_entries == [e for e in [(1, 0), (4, 10), (6, 20)] if e[1] < end]
    return log


def fail_segment_deletion(monkeypatch: pytest.MonkeyPatch, failing_call: int) -> list[int]:
    """Make the ``failing_call``-th segment deletion fail (an I/O error, or the process
    dying there); returns the base offsets of the segments deleted or tried, in order."""
    real_delete = segment_module.Segment.delete
    calls: list[int] = []

    def delete(self: segment_module.Segment) -> None:
        calls.append(self.base_offset)
        if len(calls) == failing_call:
            raise OSError(5, "I/O error")
        real_delete(self)

    monkeypatch.setattr(segment_module.Segment, "delete", delete)
    return calls


def test_a_crash_after_a_truncation_reopens_truncated(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = truncation_log(d)
    log.set_high_watermark(25)
    log.truncate_to(13)
    copy = assert_consistent_prefix(crashed_copy(d, tmp_path / "copy"))
    assert copy.log_end_offset == 13 and copy.high_watermark == 13
    assert not copy.opened_clean
    copy.close()


@pytest.mark.parametrize(("failing_call", "end"), [(1, 30), (2, 28), (4, 20)])
def test_a_truncation_failing_half_way_takes_the_log_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_call: int, end: int
) -> None:
    """Dying at any step leaves files that open as a consistent log."""
    d = tmp_path / "t-0"
    log = truncation_log(d)
    calls = fail_segment_deletion(monkeypatch, failing_call)
    with pytest.raises(LogStorageError, match="half-way"):
        log.truncate_to(6)
    assert calls[0] == 28  # newest first
    with pytest.raises(LogStorageError, match="offline"):
        log.append(one(b"x"), now_ms=NOW)
    monkeypatch.undo()
    copy = assert_consistent_prefix(crashed_copy(d, tmp_path / "copy"))
    assert copy.log_end_offset == end
    copy.close()


def test_a_truncation_failing_in_the_cut_takes_the_log_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "t-0"
    log = truncation_log(d)

    def broken(self: segment_module.Segment, offset: int) -> int:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(segment_module.Segment, "truncate_to", broken)
    with pytest.raises(LogStorageError, match="half-way"):
        log.truncate_to(6)
    monkeypatch.undo()
    copy = assert_consistent_prefix(crashed_copy(d, tmp_path / "copy"))
    assert copy.log_end_offset == 8  # the segments above went, the cut did not happen
    copy.close()


@pytest.mark.parametrize(("failing_call", "end"), [(1, 30), (3, 24)])
def test_truncate_fully_failing_half_way_reopens_consistent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_call: int, end: int
) -> None:
    d = tmp_path / "t-0"
    log = truncation_log(d)
    assert fail_segment_deletion(monkeypatch, failing_call) == []
    with pytest.raises(LogStorageError, match="half-way"):
        log.truncate_fully_and_start_at(500)
    monkeypatch.undo()
    assert not (d / EPOCH_CHECKPOINT_FILE).exists()  # removed first
    copy = assert_consistent_prefix(crashed_copy(d, tmp_path / "copy"))
    assert copy.log_end_offset == end
    copy.close()


# -- high watermark ------------------------------------------------------------------------------


def test_the_high_watermark_is_the_log_end_until_set(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = truncation_log(d)
    assert log.high_watermark == log.log_end_offset == 30 and not log.tracks_high_watermark
    log.flush()
    assert "high_watermark" not in checkpoint(d)
    assert log.set_high_watermark(12) == 12
    assert log.tracks_high_watermark and log.high_watermark == 12
    log.append(one(b"x"), now_ms=NOW)
    assert log.high_watermark == 12 and log.log_end_offset == 31
    assert log.set_high_watermark(99) == 31
    assert log.set_high_watermark(-5) == 0
    log.delete_records(0)
    assert log.set_high_watermark(20) == 20
    # DeleteRecords stops at the high watermark; -1 means it.
    with pytest.raises(OffsetOutOfRangeError, match="high watermark is 20"):
        log.delete_records(21)
    assert log.delete_records(-1) == 20
    assert log.set_high_watermark(3) == 20  # never below the log start
    log.close()


def test_the_high_watermark_is_persisted_lazily_and_never_ahead(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = truncation_log(d)
    log.set_high_watermark(10)
    assert "high_watermark" not in checkpoint(d)  # not on every change
    log.flush()
    assert checkpoint(d)["high_watermark"] == 10
    log.set_high_watermark(17)
    crashed = open_log(crashed_copy(d, tmp_path / "crash"))
    assert crashed.tracks_high_watermark and crashed.high_watermark == 10  # not 17
    crashed.close()
    assert log.checkpoint_high_watermark() and not log.checkpoint_high_watermark()
    assert checkpoint(d)["high_watermark"] == 17
    log.set_high_watermark(21)
    log.close()
    log = open_log(d)
    assert log.opened_clean and log.tracks_high_watermark and log.high_watermark == 21
    # Only the high watermark moves: the close still writes it (the marker stays).
    log.set_high_watermark(22)
    log.close()
    log = open_log(d)
    assert log.opened_clean and log.high_watermark == 22
    log.close()


def test_a_persisted_high_watermark_past_the_log_end_is_clamped(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = truncation_log(d)
    log.set_high_watermark(30)
    log.close()
    data = checkpoint(d)
    data["high_watermark"] = 1000
    (d / CHECKPOINT_FILE).write_text(json.dumps(data))
    log = open_log(d)
    assert log.high_watermark == 30
    log.close()


def test_truncation_clamps_and_persists_the_high_watermark(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = truncation_log(d)
    log.set_high_watermark(25)
    log.truncate_to(21)
    assert log.high_watermark == 21 and checkpoint(d)["high_watermark"] == 21
    log.truncate_to(22)  # a no-op
    assert log.high_watermark == 21
    log.set_high_watermark(5)
    log.truncate_to(18)
    assert log.high_watermark == 5
    log.close()


def test_retention_keeps_segments_above_the_high_watermark(tmp_path: Path) -> None:
    log = truncation_log(tmp_path / "t-0")
    log.reconfigure(LogConfig(**TRUNC_CONFIG, retention_bytes=0, retention_ms=-1))
    log.set_high_watermark(9)
    assert log.apply_retention(NOW) == 2  # [0, 4) and [4, 8); [8, 12) holds 9
    assert log.segment_base_offsets[0] == 8 and log.log_start_offset == 8
    log.set_high_watermark(30)
    assert log.apply_retention(NOW) == 5
    assert log.segment_base_offsets == [28]


def test_the_manager_checkpoints_the_high_watermarks(tmp_path: Path) -> None:
    with LogManager(tmp_path, now_ms=NOW) as manager:
        manager.create_topic("t", 2, now_ms=NOW)
        log = manager.partition("t", 1)
        log.append(batch([b"a", b"b"]), now_ms=NOW)
        assert manager.checkpoint_high_watermarks() == 0
        log.set_high_watermark(1)
        assert manager.checkpoint_high_watermarks() == 1
        assert manager.checkpoint_high_watermarks() == 0
        assert checkpoint(log.directory)["high_watermark"] == 1


# -- compaction and truncation --------------------------------------------------------------------


def test_a_truncation_cancels_a_planned_compaction(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=4 * SIZE, cleanup_policy="compact")
    for i in range(20):
        log.append(one(b"v%02d" % i), now_ms=NOW)
    end = log.log_end_offset
    cleaning = log.plan_cleaning(NOW, last_stable_offset=end, force=True)
    assert cleaning is not None
    log.truncate_to(10)
    with pytest.raises(CleaningCancelled):
        cleaning.run()  # told to stop
    log.abandon_cleaning(cleaning, "cancelled")
    for i in range(10, 20):
        log.append(one(b"w%02d" % i), now_ms=NOW)
    # Not marked uncleanable: the next pass runs and swaps in.
    again = log.plan_cleaning(NOW, last_stable_offset=log.log_end_offset, force=True)
    assert again is not None
    again.run()
    assert log.finish_cleaning(again, now_ms=NOW) is not None
    assert values(log)[-1] == (19, b"w19")
    log.close()


def test_a_pass_run_before_the_truncation_is_never_swapped_in(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=4 * SIZE, cleanup_policy="compact")
    for i in range(20):
        log.append(one(b"v%02d" % i), now_ms=NOW)
    cleaning = log.plan_cleaning(NOW, last_stable_offset=log.log_end_offset, force=True)
    assert cleaning is not None
    cleaning.run()
    log.truncate_to(6)
    for i in range(6, 20):
        log.append(one(b"w%02d" % i), now_ms=NOW)
    assert log.finish_cleaning(cleaning, now_ms=NOW) is None
    assert values(log) == [(i, b"v%02d" % i) for i in range(6)] + [
        (i, b"w%02d" % i) for i in range(6, 20)
    ]
    log.close()


# -- topic ids --------------------------------------------------------------------------------------


def test_create_topic_with_a_given_topic_id(tmp_path: Path) -> None:
    chosen = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
    with LogManager(tmp_path, now_ms=NOW) as manager:
        info = manager.create_topic("a", 1, topic_id=chosen, now_ms=NOW)
        assert info.topic_id == chosen
        assert manager.topic_by_id(chosen) == info
        with pytest.raises(TopicExistsError, match="already used by topic 'a'"):
            manager.create_topic("b", 1, topic_id=chosen, now_ms=NOW)
        with pytest.raises(TopicExistsError):
            manager.create_topic("b", 1, topic_id=chosen, validate_only=True)
        with pytest.raises(ValueError, match="non-zero"):
            manager.create_topic("b", 1, topic_id=uuid.UUID(int=0), now_ms=NOW)
        assert manager.topic("b") is None
        other = manager.create_topic("b", 1, now_ms=NOW).topic_id
        assert other not in (chosen, uuid.UUID(int=0))
    with LogManager(tmp_path, now_ms=NOW) as manager:
        assert manager.topic_by_id(chosen) is not None
        assert manager.topic_by_id(chosen).name == "a"  # type: ignore[union-attr]
