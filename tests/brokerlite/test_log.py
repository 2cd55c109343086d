"""PartitionLog: appends, reads, indexes, timestamps, retention, DeleteRecords, failures."""

from __future__ import annotations

import errno
import itertools
import os
import socket
import struct
from pathlib import Path

import pytest
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from trafka.brokerlite.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogError,
    LogStorageError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from trafka.brokerlite.storage import segment as segment_module
from trafka.brokerlite.storage.partition import PartitionLog
from trafka.brokerlite.storage.topic_configs import LogConfig
from trafka.codec.crc import crc32c
from trafka.codec.errors import ErrorCode
from trafka.codec.records import Compression, decode_batch, decode_records, encode_batch

NOW = 1_700_000_000_000


def batch(
    values: list[bytes],
    ts: int | list[int] = NOW,
    *,
    compression: Compression = Compression.NONE,
    **kw: object,
) -> bytes:
    stamps = ts if isinstance(ts, list) else [ts] * len(values)
    return encode_batch(
        [(t, b"k", v, []) for t, v in zip(stamps, values, strict=True)],
        compression=compression,
        **kw,  # type: ignore[arg-type]
    )


def kp_batch(values: list[bytes], ts: int = NOW) -> bytes:
    """A batch built by kafka-python, an independent encoder."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, value in enumerate(values):
        builder.append(i, timestamp=ts + i, key=None, value=value, headers=[])
    return bytes(builder.build())


def kp_records(data: bytes) -> list[tuple[int, int, bytes | None, int]]:
    """(offset, timestamp, value, timestamp_type) via kafka-python, CRCs checked."""
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        b = records.next_batch()
        assert b.validate_crc()
        out.extend((r.offset, r.timestamp, r.value, b.timestamp_type) for r in b)
    return out


def open_log(path: Path, now_ms: int = NOW, **config: object) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**config), now_ms=now_ms)  # type: ignore[arg-type]


def offsets_of(data: bytes) -> list[int]:
    return [r.offset for r in decode_records(data)]


# -- append / read ------------------------------------------------------------------------------


def test_round_trip_with_both_encoders(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    inputs = [
        batch([b"a", b"b"]),
        kp_batch([b"c"]),
        batch([b"d", b"e", b"f"]),
        kp_batch([b"g"] * 4),
    ]
    results = [log.append(b, now_ms=NOW) for b in inputs]
    assert [(r.base_offset, r.last_offset) for r in results] == [(0, 1), (2, 2), (3, 5), (6, 9)]
    assert all(r.log_append_time_ms == -1 and r.log_start_offset == 0 for r in results)
    assert log.log_end_offset == log.high_watermark == 10

    data = log.read(0, 1 << 20).tobytes()
    assert [(o, v) for o, _, v, _ in kp_records(data)] == list(
        enumerate([b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"g", b"g", b"g"])
    )
    # Stored byte for byte, except the base offset and the leader epoch (not in the CRC).
    pos = 0
    for original, result in zip(inputs, results, strict=True):
        stored = data[pos : pos + len(original)]
        assert struct.unpack_from(">q", stored)[0] == result.base_offset
        assert struct.unpack_from(">i", stored, 12)[0] == 0
        assert stored[8:12] == original[8:12] and stored[16:] == original[16:]
        pos += len(original)
    assert pos == len(data)
    log.close()


def test_multi_batch_append_is_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path / "t-0")
    writes: list[int] = []
    real = segment_module._write

    def counting(fd: int, data: object) -> int:
        writes.append(fd)
        return real(fd, data)  # type: ignore[arg-type]

    monkeypatch.setattr(segment_module, "_write", counting)
    blob = batch([b"a"]) + batch([b"b", b"c"]) + batch([b"d"])
    result = log.append(blob, now_ms=NOW)
    assert (result.base_offset, result.last_offset) == (0, 3)
    assert len(writes) == 1
    assert offsets_of(log.read(0, 1 << 20).tobytes()) == [0, 1, 2, 3]


def test_offsets_across_segment_rolls(tmp_path: Path) -> None:
    one = len(batch([b"x" * 10]))
    log = open_log(tmp_path / "t-0", segment_bytes=3 * one, index_interval_bytes=0)
    for i in range(10):
        assert log.append(batch([b"%09d" % i + b"x"]), now_ms=NOW).base_offset == i
    assert log.segment_base_offsets == [0, 3, 6, 9]
    names = sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.suffix == ".log")
    assert names == [f"{b:020d}.log" for b in (0, 3, 6, 9)]
    assert all((tmp_path / "t-0" / n).stat().st_size <= 3 * one for n in names)
    for offset in range(10):
        res = log.read(offset, 1)
        assert res.first_offset == offset
        assert [r.value for r in decode_records(res.tobytes())] == [b"%09dx" % offset]
    # One read crosses segments while the budget allows.
    res = log.read(1, 1 << 20)
    assert len(res.chunks) == 4 and offsets_of(res.tobytes()) == list(range(1, 10))


def _open_fds(directory: Path) -> int:
    """How many of this process's descriptors point into ``directory``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(directory) + os.sep)
    return count


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_finished_segments_keep_one_descriptor(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    one = len(batch([b"x" * 10]))
    log = open_log(d, segment_bytes=3 * one, index_interval_bytes=0)
    for i in range(30):
        log.append(batch([b"%09d" % i + b"x"]), now_ms=NOW)
    segments = len(log.segment_base_offsets)
    assert segments == 10
    # The .log of every segment, and the two index files of the active one only.
    assert _open_fds(d) == segments + 2
    log.close()
    assert _open_fds(d) == 0
    log = open_log(d, segment_bytes=3 * one, index_interval_bytes=0)
    assert _open_fds(d) == segments + 2
    # Sealed segments still answer lookups from their in-memory indexes.
    for offset in range(30):
        assert offsets_of(log.read(offset, 1).tobytes()) == [offset]
    assert log.offset_for_timestamp(NOW) == (0, NOW)
    log.close()


def test_batch_larger_than_segment_is_rejected(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=100)
    with pytest.raises(RecordBatchTooLargeError) as info:
        log.append(batch([b"x" * 100]), now_ms=NOW)
    assert info.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 0


def test_read_mid_batch_returns_the_containing_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch([b"a"] * 10), now_ms=NOW)
    log.append(batch([b"b"] * 5), now_ms=NOW)
    res = log.read(12, 1 << 20)
    assert res.first_offset == 10
    assert offsets_of(res.tobytes()) == [10, 11, 12, 13, 14]
    res = log.read(3, 1 << 20)
    assert res.first_offset == 0 and offsets_of(res.tobytes())[0] == 0


def test_read_bounds(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert log.read(0, 100).size == 0  # empty log, offset == end
    log.append(batch([b"a", b"b"]), now_ms=NOW)
    empty = log.read(2, 100)
    assert (empty.size, empty.chunks, empty.first_offset, empty.tobytes()) == (0, [], 2, b"")
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(3, 100)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_max_bytes_and_min_one_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=0)
    sizes = []
    for i in range(6):
        b = batch([b"v" * (10 * i + 1)])
        sizes.append(len(b))
        log.append(b, now_ms=NOW)
    # Exactly the first three batches fit.
    res = log.read(0, sum(sizes[:3]))
    assert res.size == sum(sizes[:3]) and offsets_of(res.tobytes()) == [0, 1, 2]
    res = log.read(0, sum(sizes[:3]) - 1)
    assert offsets_of(res.tobytes()) == [0, 1]
    # A first batch bigger than max_bytes: returned alone, or not at all.
    res = log.read(5, 1)
    assert res.size == sizes[5] and offsets_of(res.tobytes()) == [5]
    assert log.read(5, 0).size == sizes[5]
    res = log.read(5, 1, min_one_batch=False)
    assert (res.size, res.chunks) == (0, [])
    assert log.read(4, sizes[4], min_one_batch=False).size == sizes[4]


def test_upper_bound(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=0)
    for _ in range(4):
        log.append(batch([b"a", b"b", b"c"]), now_ms=NOW)  # batches at 0, 3, 6, 9
    assert offsets_of(log.read(0, 1 << 20, upper_bound=6).tobytes()) == [0, 1, 2, 3, 4, 5]
    # A batch starting below the bound is whole even if it ends beyond it.
    assert offsets_of(log.read(0, 1 << 20, upper_bound=7).tobytes())[-1] == 8
    assert log.read(6, 1 << 20, upper_bound=6).size == 0
    assert log.read(7, 1 << 20, upper_bound=7).size == 0
    assert offsets_of(log.read(4, 1 << 20, upper_bound=100).tobytes())[-1] == 11


@pytest.mark.parametrize("interval", [0, 200, 10**9])
def test_every_read_matches_a_brute_force_model(tmp_path: Path, interval: int) -> None:
    """Every offset, several budgets and bounds, over several segments, with and without index."""
    log = open_log(tmp_path / "t-0", segment_bytes=1200, index_interval_bytes=interval)
    model: list[tuple[int, int, int]] = []  # (base, last, size) per batch
    for i in range(40):
        n = 1 + (i * 7) % 4
        b = batch([b"x" * ((i * 13) % 50)] * n)
        r = log.append(b, now_ms=NOW)
        model.append((r.base_offset, r.last_offset, len(b)))
    assert len(log.segment_base_offsets) > 3
    end = log.log_end_offset
    for offset in range(end):
        first = next(i for i, (_, last, _) in enumerate(model) if last >= offset)
        for max_bytes in (0, 100, 350, 5000):
            for upper in (None, offset + 1, offset + 6, end):
                bound = end if upper is None else upper
                expect: list[int] = []
                used = 0
                for base, _, size in model[first:]:
                    if base >= bound or (expect and used + size > max_bytes):
                        break
                    if not expect and size > max_bytes:
                        expect.append(base)
                        break
                    expect.append(base)
                    used += size
                res = log.read(offset, max_bytes, upper_bound=upper)
                got = [b.header.base_offset for b in _batches(res.tobytes())]
                assert got == expect, (offset, max_bytes, upper)
                assert res.size == sum(s for b, _, s in model if b in expect)


def _batches(data: bytes) -> list:  # type: ignore[type-arg]
    out = []
    pos = 0
    while pos < len(data):
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        out.append(decode_batch(data[pos : pos + size]))
        pos += size
    return out


def test_index_files_point_at_batch_starts(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=300)
    positions = {}
    pos = 0
    for i in range(30):
        b = batch([b"y" * 50] * (1 + i % 3), ts=NOW + i)
        positions[log.append(b, now_ms=NOW).base_offset] = pos
        pos += len(b)
    log.close()
    raw = (tmp_path / "t-0" / f"{0:020d}.index").read_bytes()
    entries = list(struct.iter_unpack(">ii", raw))
    assert len(entries) >= 5
    for rel, position in entries:
        assert positions[rel] == position
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(entries)]
    assert all(g >= 300 for g in gaps)
    times = list(struct.iter_unpack(">qi", (tmp_path / "t-0" / f"{0:020d}.timeindex").read_bytes()))
    assert times and [t for t, _ in times] == sorted({t for t, _ in times})


# -- validation ------------------------------------------------------------------------------


def _corrupt(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0xFF
    return bytes(out)


@pytest.mark.parametrize(
    ("blob", "error", "code"),
    [
        (_corrupt(batch([b"a"]), -2), CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
        (
            batch([b"a"]) + _corrupt(batch([b"b"]), -2),
            CorruptRecordError,
            ErrorCode.CORRUPT_MESSAGE,
        ),
        (batch([b"a"])[:-1], CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
        (batch([b"a"]) + batch([b"b"])[:30], CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
        (b"", InvalidRecordError, ErrorCode.INVALID_RECORD),
        (batch([b"a"], is_control=True), InvalidRecordError, ErrorCode.INVALID_RECORD),
        (
            batch([b"a"], producer_id=5, producer_epoch=0),
            InvalidRecordError,
            ErrorCode.INVALID_RECORD,
        ),
    ],
)
def test_bad_input_is_rejected_before_anything_is_written(
    tmp_path: Path, blob: bytes, error: type[LogError], code: ErrorCode
) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch([b"first"]), now_ms=NOW)
    size = (tmp_path / "t-0" / f"{0:020d}.log").stat().st_size
    with pytest.raises(error) as info:
        log.append(blob, now_ms=NOW)
    assert info.value.code == code
    assert log.log_end_offset == 1
    assert (tmp_path / "t-0" / f"{0:020d}.log").stat().st_size == size
    assert log.append(batch([b"next"]), now_ms=NOW).base_offset == 1


def _with_header(data: bytes, fmt: str, at: int, value: int) -> bytes:
    """Rewrite a header field and fix the CRC, so only the field is wrong."""
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def test_header_rules(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", message_max_bytes=200)
    two = batch([b"a", b"b"])
    with pytest.raises(InvalidRecordError, match="offset range"):
        log.append(_with_header(two, ">i", 23, 5), now_ms=NOW)  # last_offset_delta
    with pytest.raises(InvalidRecordError, match="compression"):
        log.append(_with_header(two, ">h", 21, 7), now_ms=NOW)
    legacy = bytearray(two)
    legacy[16] = 1
    with pytest.raises(InvalidRecordError, match="magic 2"):
        log.append(bytes(legacy), now_ms=NOW)
    legacy[16] = 9
    with pytest.raises(CorruptRecordError, match="magic"):
        log.append(bytes(legacy), now_ms=NOW)
    with pytest.raises(RecordTooLargeError) as info:
        log.append(batch([b"z" * 200]), now_ms=NOW)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    # Exactly at the limit is accepted (the limit counts the whole batch).
    exact = next(b for n in range(200) if len(b := batch([b"z" * n])) == 200)
    log.append(exact, now_ms=NOW)
    # The broker's own control batches are allowed.
    assert (
        log.append(batch([b"m"], is_control=True), now_ms=NOW, from_client=False).base_offset == 1
    )
    assert log.log_end_offset == 2


def test_compressed_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        log.append(
            batch([b"%d" % i for i in range(5)], [NOW + i for i in range(5)], compression=codec),
            now_ms=NOW,
        )
    records = list(decode_records(log.read(0, 1 << 20).tobytes()))
    assert [r.offset for r in records] == list(range(20))
    assert log.offset_for_timestamp(NOW + 3) == (3, NOW + 3)


def test_log_append_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", message_timestamp_type="LogAppendTime")
    r = log.append(kp_batch([b"a", b"b"], ts=5), now_ms=NOW + 7)
    assert r.log_append_time_ms == NOW + 7
    recs = kp_records(log.read(0, 1 << 20).tobytes())  # CRC recomputed: kafka-python checks it
    assert [(o, t, tt) for o, t, _, tt in recs] == [(0, NOW + 7, 1), (1, NOW + 7, 1)]
    assert log.offset_for_timestamp(NOW) == (0, NOW + 7)
    # Back to CreateTime: a batch claiming log-append time keeps its own timestamps.
    log.reconfigure(LogConfig())
    r = log.append(batch([b"c"], ts=NOW + 100, timestamp_type=1), now_ms=NOW + 8)
    assert r.log_append_time_ms == -1
    (rec,) = [x for x in kp_records(log.read(2, 1 << 20).tobytes())]
    assert rec[1] == NOW + 100 and rec[3] == 0


# -- timestamps -------------------------------------------------------------------------------


def test_offset_for_timestamp_matches_a_model(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=600, index_interval_bytes=150)
    # Mostly increasing, with some records going back in time, over several segments.
    stamps: list[int] = []
    for i in range(60):
        ts = [NOW + 10 * i + d for d in (0, -25, 3)][: 1 + i % 3]
        log.append(batch([b"v"] * len(ts), ts), now_ms=NOW)
        stamps.extend(ts)
    assert len(log.segment_base_offsets) > 3
    for target in range(NOW - 30, NOW + 620, 7):
        expect = next(((o, t) for o, t in enumerate(stamps) if t >= target), None)
        assert log.offset_for_timestamp(target) == expect, target
    assert log.offset_of_max_timestamp() == (stamps.index(max(stamps)), max(stamps))
    # Records below the log start offset are never returned.
    log.delete_records(50)
    assert log.offset_for_timestamp(NOW - 100) == (50, stamps[50])


def test_offset_for_timestamp_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert log.offset_for_timestamp(0) is None
    assert log.offset_of_max_timestamp() is None
    log.append(batch([b"a"], ts=NOW), now_ms=NOW)
    assert log.offset_for_timestamp(NOW + 1) is None
    assert log.offset_for_timestamp(NOW) == (0, NOW)


# -- rolling and retention -----------------------------------------------------------------------


def test_roll_by_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_ms=1000)
    log.append(batch([b"a"]), now_ms=NOW)
    log.append(batch([b"b"]), now_ms=NOW + 1000)
    assert log.segment_base_offsets == [0]
    log.append(batch([b"c"]), now_ms=NOW + 1001)
    assert log.segment_base_offsets == [0, 2]
    assert not log.maybe_roll(NOW + 1500)
    assert log.maybe_roll(NOW + 2002)
    assert log.segment_base_offsets == [0, 2, 3]
    assert not log.maybe_roll(NOW + 99999)  # the new segment is empty


def _segmented_log(path: Path, **config: object) -> tuple[PartitionLog, int]:
    """Five segments of two single-record batches; segment i has timestamps NOW + 1000 * i."""
    size = len(batch([b"v"]))
    log = open_log(path, segment_bytes=2 * size, **config)
    for i in range(10):
        log.append(batch([b"v"], ts=NOW + 1000 * (i // 2)), now_ms=NOW)
    assert log.segment_base_offsets == [0, 2, 4, 6, 8]
    return log, size


def test_retention_by_time(tmp_path: Path) -> None:
    log, _ = _segmented_log(tmp_path / "t-0", retention_ms=2500)
    assert log.apply_retention(NOW + 2500) == 0
    assert log.apply_retention(NOW + 3501) == 2  # segments with newest NOW, NOW+1000
    assert log.segment_base_offsets == [4, 6, 8]
    assert log.log_start_offset == 4
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    assert log.read(4, 1).first_offset == 4
    # Far in the future every segment is expired but the active one stays.
    assert log.apply_retention(NOW + 10**9) == 2
    assert log.segment_base_offsets == [8] and log.log_start_offset == 8
    assert not (tmp_path / "t-0" / f"{0:020d}.log").exists()
    assert not (tmp_path / "t-0" / f"{0:020d}.index").exists()


def test_retention_by_size(tmp_path: Path) -> None:
    size = len(batch([b"v"]))
    log, _ = _segmented_log(tmp_path / "t-0", retention_ms=-1, retention_bytes=5 * size)
    assert log.apply_retention(NOW) == 2  # 10 batches -> 6 kept (5 would split a segment)
    assert log.segment_base_offsets == [4, 6, 8] and log.size == 6 * size
    assert log.apply_retention(NOW) == 0
    log.reconfigure(LogConfig(segment_bytes=2 * size, retention_ms=-1, retention_bytes=0))
    assert log.apply_retention(NOW) == 2
    assert log.segment_base_offsets == [8]


def test_retention_of_untimestamped_data_uses_the_file_time(tmp_path: Path) -> None:
    size = len(batch([b"v"], ts=-1))
    log = open_log(tmp_path / "t-0", segment_bytes=size, retention_ms=1000)
    for _ in range(3):
        log.append(batch([b"v"], ts=-1), now_ms=NOW)
    assert log.segment_base_offsets == [0, 1, 2]
    for base, mtime in ((0, NOW - 5000), (1, NOW)):
        os.utime(tmp_path / "t-0" / f"{base:020d}.log", ns=(mtime * 10**6, mtime * 10**6))
    assert log.apply_retention(NOW) == 1
    assert log.segment_base_offsets == [1, 2]


def test_compact_policy_keeps_everything(tmp_path: Path) -> None:
    log, _ = _segmented_log(
        tmp_path / "t-0", retention_ms=1, retention_bytes=1, cleanup_policy="compact"
    )
    assert log.apply_retention(NOW + 10**9) == 0
    log.reconfigure(dataclass_replace(log.config, cleanup_policy="compact,delete"))
    assert log.apply_retention(NOW + 10**9) == 4


def dataclass_replace(config: LogConfig, **changes: object) -> LogConfig:
    import dataclasses

    return dataclasses.replace(config, **changes)  # type: ignore[arg-type]


def test_delete_records(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log, _ = _segmented_log(path, retention_ms=-1)
    assert log.delete_records(3) == 3
    assert log.segment_base_offsets == [2, 4, 6, 8]  # [0, 2) went; [2, 4) holds offset 3
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    assert log.read(3, 1).first_offset == 3
    assert log.delete_records(1) == 3  # lower: no change
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(11)
    assert log.delete_records(-1) == 10  # -1: up to the high watermark
    assert log.segment_base_offsets == [8]  # the active segment stays
    assert log.read(10, 100).size == 0
    log.close()
    log = PartitionLog.open(path, log.config, now_ms=NOW)
    assert (log.log_start_offset, log.log_end_offset) == (10, 10)
    assert log.append(batch([b"z"]), now_ms=NOW).base_offset == 10


# -- files and failures -------------------------------------------------------------------------


def test_delete_records_needs_the_delete_policy(tmp_path: Path) -> None:
    """Kafka's leader refuses DeleteRecords with POLICY_VIOLATION on a topic whose
    cleanup.policy lacks ``delete`` (``Partition.deleteRecordsOnLeader``): a
    compacted topic's records go only by compaction. Checked before the offset."""
    log, _ = _segmented_log(tmp_path / "c-0", retention_ms=-1, cleanup_policy="compact")
    with pytest.raises(PolicyViolationError):
        log.delete_records(3)
    with pytest.raises(PolicyViolationError):
        log.delete_records(11)
    assert log.log_start_offset == 0
    log.close()


def test_chunks_outlive_deleted_segments(tmp_path: Path) -> None:
    log, _ = _segmented_log(tmp_path / "t-0", retention_ms=0)
    res = log.read(0, 1 << 20)
    expected = res.tobytes()
    assert log.apply_retention(NOW + 10**6) == 4
    assert not (tmp_path / "t-0" / f"{0:020d}.log").exists()
    assert res.tobytes() == expected
    # And os.sendfile, as the server uses them.
    a, b = socket.socketpair()
    with a, b:
        for chunk in res.chunks:
            sent = 0
            while sent < chunk.length:
                sent += os.sendfile(
                    a.fileno(), chunk.path_or_fd, chunk.position + sent, chunk.length - sent
                )
        got = b""
        while len(got) < len(expected):
            got += b.recv(1 << 16)
    assert got == expected
    log.close()
    assert res.tobytes() == expected  # still open: the chunks hold the fds


def test_failed_write_leaves_the_log_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=0)
    log.append(batch([b"a"]), now_ms=NOW)
    path = tmp_path / "t-0" / f"{0:020d}.log"
    index = tmp_path / "t-0" / f"{0:020d}.index"
    sizes = (path.stat().st_size, index.stat().st_size)
    real = segment_module._write

    def half_then_enospc(fd: int, data: bytes) -> int:
        if len(data) > 20:
            return real(fd, memoryview(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(segment_module, "_write", half_then_enospc)
    with pytest.raises(LogStorageError) as info:
        log.append(batch([b"b" * 100]), now_ms=NOW)
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert (path.stat().st_size, index.stat().st_size) == sizes
    assert log.log_end_offset == 1

    monkeypatch.setattr(segment_module, "_write", real)
    assert log.append(batch([b"c"]), now_ms=NOW).base_offset == 1
    assert [r.value for r in decode_records(log.read(0, 1 << 20).tobytes())] == [b"a", b"c"]
    log.close()
    log = open_log(tmp_path / "t-0")
    assert [r.value for r in decode_records(log.read(0, 1 << 20).tobytes())] == [b"a", b"c"]


def test_index_entries_reach_the_files_on_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=0)
    index = tmp_path / "t-0" / f"{0:020d}.index"
    log.append(batch([b"a"]), now_ms=NOW)
    log.append(batch([b"b"]), now_ms=NOW)
    assert index.stat().st_size == 0  # appends make no index syscalls
    log.flush()
    assert index.stat().st_size == 16
    log.append(batch([b"c"]), now_ms=NOW)
    real = segment_module._write

    def torn(fd: int, data: bytes) -> int:
        real(fd, memoryview(data)[:3])
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(segment_module, "_write", torn)
    with pytest.raises(LogStorageError, match="flush failed"):
        log.flush()
    assert index.stat().st_size == 16  # back to whole entries
    monkeypatch.setattr(segment_module, "_write", real)
    log.flush()
    assert [p for _, p in struct.iter_unpack(">ii", index.read_bytes())] == [
        0,
        len(batch([b"a"])),
        2 * len(batch([b"a"])),
    ]


def test_unrecoverable_write_takes_the_log_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0")

    def enospc(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "full")

    def eio(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "broken disk")

    monkeypatch.setattr(segment_module, "_write", enospc)
    monkeypatch.setattr(segment_module, "_ftruncate", eio)
    with pytest.raises(LogStorageError, match="undone"):
        log.append(batch([b"a"]), now_ms=NOW)
    with pytest.raises(LogStorageError, match="offline"):
        log.read(0, 10)
    with pytest.raises(LogStorageError, match="offline"):
        log.append(batch([b"a"]), now_ms=NOW)


def test_flush_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    monkeypatch.setattr(segment_module, "_fdatasync", synced.append)
    log = open_log(tmp_path / "t-0", flush_interval_messages=5)
    log.append(batch([b"a"] * 3), now_ms=NOW)
    assert synced == []
    log.append(batch([b"a"] * 2), now_ms=NOW)
    assert len(synced) == 3  # log, index, time index
    log.reconfigure(LogConfig(flush_interval_ms=1000))
    synced.clear()
    log.append(batch([b"a"]), now_ms=NOW + 999)
    assert synced == [] and not log.maybe_flush(NOW + 999)
    assert log.maybe_flush(NOW + 1000) and len(synced) == 3
    assert not log.maybe_flush(NOW + 5000)  # nothing pending
    log.reconfigure(LogConfig())
    synced.clear()
    for _ in range(20):
        log.append(batch([b"a"]), now_ms=NOW + 10**7)
    assert synced == []  # left to the OS


def test_closed_log_refuses_work(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.close()
    log.close()
    assert log.closed
    with pytest.raises(LogStorageError, match="closed"):
        log.append(batch([b"a"]), now_ms=NOW)


def test_config_validation() -> None:
    for bad in (
        {"segment_bytes": 10},
        {"segment_bytes": 2**31},
        {"retention_ms": -2},
        {"message_timestamp_type": "Whenever"},
        {"cleanup_policy": "shred"},
        {"flush_interval_messages": 0},
    ):
        with pytest.raises(ValueError):
            LogConfig(**bad)  # type: ignore[arg-type]
