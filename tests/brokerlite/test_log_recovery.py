"""PartitionLog recovery: torn and corrupt tails, lost indexes, and kill -9 while appending."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trafka.brokerlite.storage.partition import CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE, PartitionLog
from trafka.brokerlite.storage.topic_configs import LogConfig
from trafka.codec.records import decode_records, encode_batch

NOW = 1_700_000_000_000


def batch(value: bytes, ts: int = NOW) -> bytes:
    return encode_batch([(ts, None, value, [])])


def values(log: PartitionLog) -> list[bytes | None]:
    """Every record's value, CRCs checked, offsets checked contiguous from the start."""
    data = log.read(log.log_start_offset, 1 << 30).tobytes()
    records = list(decode_records(data, verify=True))
    assert [r.offset for r in records] == list(range(log.log_start_offset, log.log_end_offset))
    return [r.value for r in records]


def seg_file(directory: Path, base: int, ext: str = "log") -> Path:
    return directory / f"{base:020d}.{ext}"


def crashed_copy(src: Path, dst: Path) -> Path:
    """The files as a crash would leave them: no clean-shutdown marker."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    (dst / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    return dst


def build(directory: Path, n: int, **config: object) -> tuple[PartitionLog, list[int]]:
    """A log of ``n`` single-record batches; returns it and each batch's file position."""
    log = PartitionLog.open(directory, LogConfig(**config), now_ms=NOW)  # type: ignore[arg-type]
    positions = []
    pos = 0
    for i in range(n):
        b = batch(b"value-%03d" % i, NOW + i)
        positions.append(pos)
        log.append(b, now_ms=NOW)
        pos += len(b)
    return log, positions


def test_clean_close_and_reopen(tmp_path: Path) -> None:
    src = tmp_path / "t-0"
    log, _ = build(src, 30, segment_bytes=700, index_interval_bytes=100)
    segments = log.segment_base_offsets
    log.close()
    assert (src / CLEAN_SHUTDOWN_FILE).exists()
    assert json.loads((src / CHECKPOINT_FILE).read_text())["recovery_point"] == 30
    log = PartitionLog.open(src, LogConfig(segment_bytes=700, index_interval_bytes=100), now_ms=NOW)
    assert log.segment_base_offsets == segments
    assert values(log) == [b"value-%03d" % i for i in range(30)]
    assert log.offset_for_timestamp(NOW + 17) == (17, NOW + 17)
    # The marker goes (durably) before the first write.
    assert (src / CLEAN_SHUTDOWN_FILE).exists()
    log.append(batch(b"more"), now_ms=NOW)
    assert not (src / CLEAN_SHUTDOWN_FILE).exists()
    log.close()


def test_truncation_at_every_byte_of_the_last_batch(tmp_path: Path) -> None:
    src = tmp_path / "src"
    log, positions = build(src, 6, index_interval_bytes=0)
    size = seg_file(src, 0).stat().st_size
    expected = [b"value-%03d" % i for i in range(5)]
    for cut in range(positions[-1], size):
        work = crashed_copy(src, tmp_path / "work")
        with open(seg_file(work, 0), "r+b") as f:
            f.truncate(cut)
        recovered = PartitionLog.open(work, LogConfig(index_interval_bytes=0), now_ms=NOW)
        assert recovered.log_end_offset == 5, cut
        assert values(recovered) == expected
        assert seg_file(work, 0).stat().st_size == positions[-1]
        # The rebuilt index stops before the torn batch, and appends carry on.
        entries = list(struct.iter_unpack(">ii", seg_file(work, 0, "index").read_bytes()))
        assert [p for _, p in entries] == positions[:5]
        assert recovered.append(batch(b"again"), now_ms=NOW).base_offset == 5
        recovered.close()
    log.close()


def test_flipped_bytes_in_the_last_batch(tmp_path: Path) -> None:
    src = tmp_path / "src"
    log, positions = build(src, 4, segment_bytes=1 << 20)
    size = seg_file(src, 0).stat().st_size
    for at in range(positions[-1], size):
        if 12 <= at - positions[-1] < 16:
            continue  # partition_leader_epoch: outside the CRC, the broker's to rewrite
        work = crashed_copy(src, tmp_path / "work")
        with open(seg_file(work, 0), "r+b") as f:
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ 0x5A]))
        recovered = PartitionLog.open(work, LogConfig(), now_ms=NOW)
        assert recovered.log_end_offset == 3, at - positions[-1]
        assert values(recovered) == [b"value-000", b"value-001", b"value-002"]
        recovered.close()
    log.close()


def test_recovery_of_batches_larger_than_its_read_block(tmp_path: Path) -> None:
    src = tmp_path / "src"
    log = PartitionLog.open(src, LogConfig(message_max_bytes=4 << 20), now_ms=NOW)
    big = encode_batch([(NOW, None, os.urandom(3 << 20), [])])
    for b in (batch(b"a"), big, batch(b"c")):
        log.append(b, now_ms=NOW)
    work = crashed_copy(src, tmp_path / "work")
    recovered = PartitionLog.open(work, LogConfig(), now_ms=NOW)
    assert recovered.log_end_offset == 3 and values(recovered)[2] == b"c"
    recovered.close()
    work = crashed_copy(src, tmp_path / "work")
    with open(seg_file(work, 0), "r+b") as f:
        f.seek(len(batch(b"a")) + (2 << 20))
        f.write(b"\xff\x00\xff")
    recovered = PartitionLog.open(work, LogConfig(), now_ms=NOW)
    assert recovered.log_end_offset == 1 and values(recovered) == [b"a"]
    recovered.close()
    log.close()


def test_garbage_appended_after_the_last_batch(tmp_path: Path) -> None:
    src = tmp_path / "src"
    log, _ = build(src, 3)
    work = crashed_copy(src, tmp_path / "work")
    with open(seg_file(work, 0), "ab") as f:
        f.write(b"\x00" * 100)  # e.g. a file system that extended the file but lost the data
    recovered = PartitionLog.open(work, LogConfig(), now_ms=NOW)
    assert recovered.log_end_offset == 3 and len(values(recovered)) == 3
    log.close()


def test_torn_tail_is_caught_even_after_a_clean_shutdown(tmp_path: Path) -> None:
    src = tmp_path / "t-0"
    log, positions = build(src, 5, index_interval_bytes=0)
    log.close()
    with open(seg_file(src, 0), "r+b") as f:
        f.truncate(positions[-1] + 20)
    log = PartitionLog.open(src, LogConfig(index_interval_bytes=0), now_ms=NOW)
    assert log.log_end_offset == 4 and len(values(log)) == 4


def test_only_segments_after_the_recovery_point_are_validated(tmp_path: Path) -> None:
    src = tmp_path / "src"
    log, _ = build(src, 12, segment_bytes=250)
    bases = log.segment_base_offsets
    assert len(bases) >= 3
    # Damage a batch in the middle of the second segment (data, not header).
    work = crashed_copy(src, tmp_path / "work")
    path = seg_file(work, bases[1])
    data = bytearray(path.read_bytes())
    first = 12 + struct.unpack_from(">i", data, 8)[0]  # second batch of that segment
    data[first + 70] ^= 0xFF
    path.write_bytes(bytes(data))
    # Older than the recovery point: trusted, so the damage is not even read.
    recovered = PartitionLog.open(work, LogConfig(segment_bytes=250), now_ms=NOW)
    assert recovered.log_end_offset == 12
    recovered.close()
    # Without a checkpoint everything is validated: that segment is cut after its
    # first batch and the later segments go (their offsets would leave a hole).
    work = crashed_copy(work, tmp_path / "work2")
    (work / CHECKPOINT_FILE).unlink()
    (work / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    recovered = PartitionLog.open(work, LogConfig(segment_bytes=250), now_ms=NOW)
    assert recovered.log_end_offset == bases[1] + 1
    assert recovered.segment_base_offsets == bases[:2]
    assert values(recovered) == [b"value-%03d" % i for i in range(bases[1] + 1)]
    assert not seg_file(work, bases[2]).exists()
    recovered.close()
    log.close()


@pytest.mark.parametrize("damage", ["missing", "garbage", "past-end", "torn", "timeindex"])
def test_bad_indexes_are_rebuilt(tmp_path: Path, damage: str) -> None:
    src = tmp_path / "t-0"
    config = LogConfig(index_interval_bytes=150)
    log, _ = build(src, 40, index_interval_bytes=150)
    before = [log.read(o, 1).tobytes() for o in range(40)]
    log.close()
    index, timeindex = seg_file(src, 0, "index"), seg_file(src, 0, "timeindex")
    original = (index.read_bytes(), timeindex.read_bytes())
    assert original[0] and original[1]
    if damage == "missing":
        index.unlink()
        timeindex.unlink()
    elif damage == "garbage":
        index.write_bytes(os.urandom(len(original[0])))
    elif damage == "past-end":
        index.write_bytes(original[0] + struct.pack(">ii", 41, 10**6))
    elif damage == "torn":
        index.write_bytes(original[0][:-3])
    else:
        timeindex.write_bytes(original[1][:12] + original[1][:12])  # not increasing
    log = PartitionLog.open(src, config, now_ms=NOW)
    assert not (src / CLEAN_SHUTDOWN_FILE).exists()  # no longer vouched for
    assert [log.read(o, 1).tobytes() for o in range(40)] == before
    assert log.offset_for_timestamp(NOW + 33) == (33, NOW + 33)
    assert (index.read_bytes(), timeindex.read_bytes()) == original
    log.close()


def test_unreadable_checkpoint_means_full_validation(tmp_path: Path) -> None:
    src = tmp_path / "t-0"
    log, _ = build(src, 10, segment_bytes=300)
    log.delete_records(2)
    log.close()
    (src / CHECKPOINT_FILE).write_text("{garbage")
    log = PartitionLog.open(src, LogConfig(segment_bytes=300), now_ms=NOW)
    assert not (src / CLEAN_SHUTDOWN_FILE).exists()
    assert (log.log_start_offset, log.log_end_offset) == (0, 10)  # the start offset was lost
    assert len(values(log)) == 10


def test_stray_files_are_cleaned_up(tmp_path: Path) -> None:
    src = tmp_path / "t-0"
    log, _ = build(src, 3)
    log.close()
    (src / "x.tmp").write_bytes(b"junk")
    (src / f"{99:020d}.index").write_bytes(b"")  # an index without its log
    log = PartitionLog.open(src, LogConfig(), now_ms=NOW)
    assert not (src / "x.tmp").exists() and not (src / f"{99:020d}.index").exists()
    assert len(values(log)) == 3


def test_a_crash_between_roll_and_append(tmp_path: Path) -> None:
    src = tmp_path / "src"
    log, _ = build(src, 4)
    log.maybe_roll(NOW + 10**10)
    assert log.segment_base_offsets == [0, 4]
    work = crashed_copy(src, tmp_path / "work")
    recovered = PartitionLog.open(work, LogConfig(), now_ms=NOW)
    assert recovered.segment_base_offsets == [0, 4] and recovered.log_end_offset == 4
    assert recovered.append(batch(b"x"), now_ms=NOW).base_offset == 4
    log.close()


_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from trafka.brokerlite.storage.partition import PartitionLog
    from trafka.brokerlite.storage.topic_configs import LogConfig
    from trafka.codec.records import encode_batch

    log = PartitionLog.open(
        Path(sys.argv[1]), LogConfig(segment_bytes=20000, index_interval_bytes=256), now_ms=0
    )
    i = log.log_end_offset
    print("ready", i, flush=True)
    while True:
        records = [(i, None, b"%d-%d" % (i, j), []) for j in range(1 + i % 3)]
        result = log.append(encode_batch(records), now_ms=0)
        print(result.base_offset, result.last_offset, flush=True)
        i = result.last_offset + 1
    """
)


@pytest.mark.timeout(60)
def test_kill_9_while_appending_loses_no_acknowledged_batch(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    acked: list[tuple[int, int]] = []
    for round_ in range(4):
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(directory)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        try:
            ready = child.stdout.readline().split()
            assert ready[0] == "ready"
            # The child resumes exactly after the last acknowledged (or written) batch.
            assert int(ready[1]) >= (acked[-1][1] + 1 if acked else 0)
            for _ in range(300 + 250 * round_):
                line = child.stdout.readline()
                assert line, "the child died"
                first, last = map(int, line.split())
                acked.append((first, last))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
            # Through the same reader as readline(): communicate(timeout=...) reads the
            # pipe directly and would lose what readline() already buffered ahead.
            rest = child.stdout.read()
            child.stdout.close()
        # Only whole lines are acknowledgements: the kill may cut the last one short.
        acked.extend(tuple(map(int, line.split())) for line in rest.split("\n")[:-1])  # type: ignore[misc]
        assert child.returncode == -signal.SIGKILL

        log = PartitionLog.open(directory, LogConfig(segment_bytes=20000), now_ms=0)
        try:
            assert log.log_end_offset >= acked[-1][1] + 1
            records = list(decode_records(log.read(0, 1 << 30).tobytes(), verify=True))
        finally:
            log.close()
        assert [r.offset for r in records] == list(range(len(records)))
        by_offset = {r.offset: r.value for r in records}
        for first, last in acked:
            for j, offset in enumerate(range(first, last + 1)):
                assert by_offset[offset] == b"%d-%d" % (first, j)
        # Exactly once and in order. Between rounds there may be batches that were
        # written but not acknowledged before the kill; they are whole and in order too.
        assert all(a[1] < b[0] for a, b in itertools.pairwise(acked))
        assert len(set(by_offset.values())) == len(records)
    assert len(list(directory.glob("*.log"))) > 1
