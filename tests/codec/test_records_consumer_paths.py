"""The record decode paths a consumer leans on: ``blob_next_offset`` and what the C
decoder guarantees beyond equal values (GC tracking, the GC state, shared objects).

The value-for-value agreement of the C and Python decoders is in test_speedups.py.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trafka.codec import _accel, records
from trafka.codec.columns import ColumnBuffers, decode_batch_columns, decode_batch_run_columns
from trafka.codec.compression import Compression
from trafka.codec.legacy import encode_message_set
from trafka.codec.records import (
    BATCH_HEADER_SIZE,
    blob_next_offset,
    decode_batch_as,
    encode_batch,
    encode_control_batch,
    set_base_offset,
)

try:
    from trafka.codec import _speedups as C  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - test_speedups.py reports a missing build
    C = None

needs_c = pytest.mark.skipif(C is None, reason="trafka.codec._speedups is not built")
TS = 1_700_000_000_000


@pytest.fixture(autouse=True)
def c_path() -> Iterator[None]:
    """The C module on, even under TRAFKA_NO_SPEEDUPS (tests switch it off themselves)."""
    saved = _accel.speedups
    _accel.speedups = C
    yield
    _accel.speedups = saved


def batch(base: int, n: int, **kw: Any) -> bytes:
    raw = encode_batch([(TS + i, None, b"v%d" % i, ()) for i in range(n)], **kw)
    return bytes(set_base_offset(raw, base))


class Rec(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple[Any, ...]
    timestamp_type: int
    leader_epoch: int


# -- blob_next_offset ---------------------------------------------------------------------


def test_blob_next_offset_is_the_end_of_the_last_complete_entry() -> None:
    blob = batch(0, 3) + batch(3, 4)
    assert blob_next_offset(blob) == 7
    assert blob_next_offset(memoryview(blob)) == 7
    assert blob_next_offset(blob + batch(7, 2)[:40]) == 7  # a trailing entry cut short
    assert blob_next_offset(blob + batch(7, 2)[:8]) == 7  # not even its length field
    # A batch whose records were compacted away still ends at its last offset delta.
    assert blob_next_offset(bytes(set_base_offset(encode_batch([(TS, None, b"x", ())]), 41))) == 42


def test_blob_next_offset_counts_control_batches_and_compressed_ones() -> None:
    marker = bytes(
        set_base_offset(
            encode_control_batch(
                1, producer_id=7, producer_epoch=0, coordinator_epoch=0, timestamp=1
            ),
            5,
        )
    )
    assert blob_next_offset(batch(0, 5) + marker) == 6
    assert blob_next_offset(batch(0, 5, compression=Compression.GZIP)) == 5


def test_blob_next_offset_of_legacy_entries() -> None:
    rows = [(TS + i, None, b"m%d" % i, ()) for i in range(3)]
    assert blob_next_offset(encode_message_set(rows, magic=1, base_offset=10)) == 13
    assert blob_next_offset(encode_message_set(rows, magic=0, base_offset=10)) == 13
    # A compressed wrapper carries the offset of its last inner message.
    wrapped = encode_message_set(rows, magic=1, base_offset=10, compression=Compression.GZIP)
    assert blob_next_offset(wrapped) == 13


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"\x00" * 11,
        batch(0, 2)[:-1],  # the only entry is incomplete
        bytes(8) + (3).to_bytes(4, "big") + bytes(20),  # a length below any format's minimum
        bytes(8) + (60).to_bytes(4, "big") + bytes([0] * 4 + [7]) + bytes(55),  # magic 7
        bytes(8) + (20).to_bytes(4, "big") + bytes([0] * 4 + [2]) + bytes(15),  # a short batch
    ],
)
def test_blob_next_offset_none_when_nothing_usable(blob: bytes) -> None:
    assert blob_next_offset(blob) is None


# -- the C decoder: objects and the garbage collector -------------------------------------------


def _section(data: bytes) -> tuple[bytes, int, int, int]:
    header = records.read_batch_header(data)
    return data[BATCH_HEADER_SIZE:], header.records_count, header.base_offset, header.base_timestamp


def _rows_with_headers() -> list[Any]:
    return [
        (TS, b"k", b"v", ()),
        (TS, None, b"w", (("a", b"1"), ("b", None))),
        (TS + 1, b"k2", None, (("c", b""),)),
    ]


@needs_c
def test_records_with_atomic_fields_are_untracked() -> None:
    section, count, base, base_ts = _section(encode_batch(_rows_with_headers()))
    out = C.decode_records(section, count, base, base_ts, None, Rec, ("t", 0), (0, -1), None)
    assert [r.offset for r in out] == [0, 1, 2]
    assert gc.is_tracked(out)  # the list itself is the caller's to fill with anything
    for rec in out:
        assert not gc.is_tracked(rec)
        assert not gc.is_tracked(rec.headers)
        assert not any(gc.is_tracked(pair) for pair in rec.headers)
    # Equal to what the Python path builds, which leaves untracking to CPython.
    saved = _accel.speedups
    _accel.speedups = None
    try:
        slow = decode_batch_as(
            encode_batch(_rows_with_headers()), Rec, prefix=("t", 0), suffix=(0, -1)
        )[1]
    finally:
        _accel.speedups = saved
    assert slow == out


@needs_c
@pytest.mark.parametrize(
    "prefix",
    [
        ([],),  # a list could come to hold the record
        ({},),  # an untracked dict is tracked again once it holds a container
        (("nested", []),),  # a tuple that holds a list is tracked
    ],
)
def test_records_holding_containers_stay_tracked(prefix: tuple[Any, ...]) -> None:
    section, count, base, base_ts = _section(batch(0, 2))
    out = C.decode_records(section, count, base, base_ts, None, tuple, prefix, (), None)
    assert out is not None and len(out) == 2
    assert all(gc.is_tracked(r) for r in out)
    suffixed = C.decode_records(section, count, base, base_ts, None, tuple, (), prefix, None)
    assert all(gc.is_tracked(r) for r in suffixed)


class _Marker:
    pass


@needs_c
def test_a_cycle_through_the_records_list_is_still_collected() -> None:
    # The records are untracked, but the list holding them is not: a cycle
    # through it (and what else it holds) is found and freed.
    section, count, base, base_ts = _section(batch(0, 2))
    out = C.decode_records(section, count, base, base_ts, None, Rec, ("t", 0), (0, -1), None)
    marker = _Marker()
    ref = weakref.ref(marker)
    out += [out, marker]
    del out, marker
    gc.collect()
    assert ref() is None


@needs_c
@pytest.mark.parametrize("enabled", [True, False])
def test_gc_state_is_restored(enabled: bool) -> None:
    section, count, base, base_ts = _section(batch(0, 50))
    was = gc.isenabled()
    try:
        if enabled:
            gc.enable()
        else:
            gc.disable()
        assert (
            len(C.decode_records(section, count, base, base_ts, None, Rec, ("t", 0), (0, -1), None))
            == 50
        )
        assert gc.isenabled() is enabled
        # Refused input (a lying count) restores it too.
        assert C.decode_records(section, count + 1, base, base_ts, None, Rec, (), (), None) is None
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


@needs_c
def test_equal_timestamps_share_one_object() -> None:
    rows = [
        (TS + 10**6, None, b"a", ()),
        (TS + 10**6, None, b"b", ()),
        (TS + 10**6 + 1, None, b"c", ()),
    ]
    section, count, base, base_ts = _section(encode_batch(rows))
    out = C.decode_records(section, count, base, base_ts, None, tuple, (), (), None)
    assert [r[1] for r in out] == [TS + 10**6, TS + 10**6, TS + 10**6 + 1]
    assert out[0][1] is out[1][1]
    log_append = C.decode_records(section, count, base, base_ts, TS * 2, tuple, (), (), None)
    assert {id(r[1]) for r in log_append} == {id(log_append[0][1])}
    assert log_append[0][1] == TS * 2


@needs_c
def test_records_below_min_offset_leave_no_gap() -> None:
    section, count, _, base_ts = _section(batch(0, 6))
    out = C.decode_records(section, count, 100, base_ts, None, tuple, (), (), 103)
    assert [r[0] for r in out] == [103, 104, 105]
    out.append("more")  # the unused tail of the list's allocation is usable as usual
    assert len(out) == 4 and out[-1] == "more"
    none = C.decode_records(section, count, 100, base_ts, None, tuple, (), (), 200)
    assert none == []


# -- runs of plain batches ------------------------------------------------------------------------


def _with_crc(batch: bytearray) -> bytes:
    """The batch with its CRC recomputed (so that decoding reaches a planted fault)."""
    import crc32c as crc32c_package

    batch[17:21] = crc32c_package.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    return bytes(batch)


def _entry(kind: str, base: int, n: int, pid: int) -> bytes:
    rows = [
        (
            TS + i,
            None if i % 3 else b"k%d" % i,
            b"v%d" % (base + i),
            (("h", b"x"),) if i % 2 else (),
        )
        for i in range(n)
    ]
    if kind == "plain":
        raw = encode_batch(rows, partition_leader_epoch=base % 5)
    elif kind == "log_append":
        raw = encode_batch(rows, timestamp_type=1)
    elif kind == "gzip":
        raw = encode_batch(rows, compression=Compression.GZIP)
    elif kind == "txn":
        raw = encode_batch(
            rows, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True
        )
    elif kind == "control":
        raw = encode_control_batch(
            n % 2, producer_id=pid, producer_epoch=0, coordinator_epoch=0, timestamp=TS
        )
    elif kind == "legacy":
        return encode_message_set([(TS, None, b"m", ())] * n, magic=1, base_offset=base)
    elif kind == "bad_crc":
        bad = bytearray(encode_batch(rows))
        bad[17] ^= 0xFF  # the stored CRC: the records themselves are fine
        raw = bytes(bad)
    elif kind == "bad_record":
        bad = bytearray(encode_batch(rows))
        bad[BATCH_HEADER_SIZE] = 0x7F  # the first record's length varint lies
        raw = _with_crc(bad)
    elif kind == "bad_count":
        bad = bytearray(encode_batch(rows))
        bad[57:61] = (n + 1).to_bytes(4, "big")
        raw = _with_crc(bad)
    else:
        raise AssertionError(kind)
    return bytes(set_base_offset(raw, base))


KINDS = ["plain", "plain", "plain", "log_append", "gzip", "txn", "control", "legacy"]
BAD_KINDS = ["bad_crc", "bad_record", "bad_count"]


def build_blob(specs: list[tuple[str, int]], cut: int) -> tuple[bytes, list[int]]:
    """Entries laid end to end (offsets consecutive) and where each starts; up to
    ``cut`` bytes of one more plain batch trail the blob (its start is listed too)."""
    parts: list[bytes] = []
    starts: list[int] = []
    offset = 0
    pos = 0
    for i, (kind, n) in enumerate(specs):
        n = 1 if kind == "control" else n
        data = _entry(kind, offset, n, 100 + i % 3)
        starts.append(pos)
        parts.append(data)
        pos += len(data)
        offset += n
    trailer = _entry("plain", offset, 2, 0)
    starts.append(pos)  # where the cut entry starts
    return b"".join(parts) + trailer[: min(cut, len(trailer) - 1)], starts


def ordinary_run(
    blob: bytes, pos: int, min_offset: int | None, stop_txn: bool, max_records: int | None = None
) -> tuple[tuple[Any, ...], int, int | None]:
    """What decode_batch_run_as must return, from the ordinary walk and decoder."""
    out: list[Any] = []
    nxt = None
    for header, view in records.iter_batches(blob, pos):
        if max_records is not None and len(out) >= max_records:
            break
        attrs = header.attributes
        if header.magic != 2 or attrs & 0x27 or (stop_txn and attrs & 0x10):
            break
        if min_offset is not None and header.next_offset <= min_offset:
            pos += len(view)
            continue
        try:
            _, recs = decode_batch_as(
                view,
                Rec,
                prefix=("t", 3),
                suffix=((attrs >> 3) & 1, header.partition_leader_epoch),
                min_offset=min_offset,
            )
        except records.DecodeError:
            break
        out += recs
        nxt = header.next_offset
        pos += len(view)
    return tuple(out), pos, nxt


@needs_c
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(
        st.tuples(st.sampled_from(KINDS + BAD_KINDS), st.integers(1, 6)), min_size=0, max_size=8
    ),
    cut=st.integers(0, 200),
    start=st.integers(0, 9),
    min_offset=st.none() | st.integers(-1, 40),
    stop_txn=st.booleans(),
    max_records=st.none() | st.integers(0, 12),
)
@example(  # a skipped batch counted towards max_records would cut the run short
    specs=[("plain", 1), ("plain", 1), ("plain", 2)],
    cut=0,
    start=0,
    min_offset=1,
    stop_txn=False,
    max_records=2,
)
def test_run_agrees_with_the_ordinary_walk(
    specs: list[tuple[str, int]],
    cut: int,
    start: int,
    min_offset: int | None,
    stop_txn: bool,
    max_records: int | None,
) -> None:
    blob, starts = build_blob(specs, cut)
    pos = starts[min(start, len(starts) - 1)]
    got = records.decode_batch_run_as(
        blob,
        pos,
        Rec,
        prefix=("t", 3),
        min_offset=min_offset,
        stop_at_transactional=stop_txn,
        max_records=max_records,
    )
    assert got == ordinary_run(blob, pos, min_offset, stop_txn, max_records)
    assert all(type(r) is Rec and not gc.is_tracked(r) for r in got[0])
    assert not gc.is_tracked(got[0])


def test_run_is_empty_without_the_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    blob, _ = build_blob([("plain", 3), ("plain", 2)], 0)
    monkeypatch.setattr(_accel, "speedups", None)
    assert records.decode_batch_run_as(blob, 0, Rec, prefix=("t", 3)) == ((), 0, None)


@needs_c
def test_run_takes_only_bytes_and_tuple_types() -> None:
    blob, _ = build_blob([("plain", 3)], 0)
    assert records.decode_batch_run_as(bytearray(blob), 0, Rec) == ((), 0, None)
    with pytest.raises(TypeError):
        records.decode_batch_run_as(blob, 0, list)  # type: ignore[type-var]
    with pytest.raises(TypeError):
        C.decode_batch_run(bytearray(blob), 0, tuple, (), None, None, False, 2**62)
    with pytest.raises(TypeError):
        C.decode_batch_run(blob, 0, tuple, [], None, None, False, 2**62)
    with pytest.raises(TypeError):
        C.decode_batch_run(blob, 0, tuple, (), None, 5, False, 2**62)
    with pytest.raises(TypeError):
        C.decode_batch_run(blob, 0, tuple)

    class WithDict(tuple):  # type: ignore[type-arg]
        pass

    # A class the C path cannot fill, a position off the blob, or a limit past
    # every int64: an empty run, and the ordinary path does the work.
    assert C.decode_batch_run(blob, 0, WithDict, (), None, None, False, 2**62) == ((), 0, None)
    assert C.decode_batch_run(blob, len(blob) + 1, tuple, (), None, None, False, 2**62) == (
        (),
        len(blob) + 1,
        None,
    )
    assert C.decode_batch_run(blob, 0, tuple, (), 2**64, None, False, 2**62) == ((), 0, None)
    whole = C.decode_batch_run(blob, 0, tuple, (), -(2**64), None, False, 2**62)
    assert [r[0] for r in whole[0]] == [0, 1, 2] and whole[1:] == (len(blob), 3)
    # A prefix holding a container keeps the records, and so the tuple, tracked.
    held = C.decode_batch_run(blob, 0, tuple, ([],), None, None, False, 2**62)[0]
    assert gc.is_tracked(held) and all(gc.is_tracked(r) for r in held)


@needs_c
def test_run_with_crc_checking_off_decodes_a_bad_crc() -> None:
    blob = _entry("bad_crc", 0, 3, 0)
    assert records.decode_batch_run_as(blob, 0, Rec, prefix=("t", 3))[1:] == (0, None)
    run = records.decode_batch_run_as(blob, 0, Rec, prefix=("t", 3), verify=False)
    assert [r.offset for r in run[0]] == [0, 1, 2] and run[1:] == (len(blob), 3)


@needs_c
def test_run_restores_the_gc_state() -> None:
    blob, _ = build_blob([("plain", 50), ("bad_record", 3)], 0)
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            gc.enable() if enabled else gc.disable()
            run = records.decode_batch_run_as(blob, 0, Rec, prefix=("t", 3))
            assert len(run[0]) == 50
            assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


# -- columns (trafka.codec.columns) --------------------------------------------------------


@needs_c
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(
        st.tuples(st.sampled_from(KINDS + BAD_KINDS), st.integers(1, 6)), min_size=0, max_size=8
    ),
    cut=st.integers(0, 200),
    start=st.integers(0, 9),
    min_offset=st.none() | st.integers(-1, 40),
    stop_txn=st.booleans(),
    max_records=st.none() | st.integers(0, 12),
    headers=st.booleans(),
)
def test_column_run_agrees_with_the_record_run(
    specs: list[tuple[str, int]],
    cut: int,
    start: int,
    min_offset: int | None,
    stop_txn: bool,
    max_records: int | None,
    headers: bool,
) -> None:
    """The same run, stops and records, one record parser in C for both."""
    blob, starts = build_blob(specs, cut)
    pos = starts[min(start, len(starts) - 1)]
    kw: dict[str, Any] = dict(
        min_offset=min_offset, stop_at_transactional=stop_txn, max_records=max_records
    )
    recs, end, nxt = records.decode_batch_run_as(blob, pos, Rec, prefix=("t", 3), **kw)
    got, got_end, got_nxt = decode_batch_run_columns(blob, pos, headers=headers, **kw)
    assert (got_end, got_nxt) == (end, nxt)
    assert got.rows() == [(*r[2:6], r.headers if headers else (), r[7]) for r in recs]
    if recs:
        packed = ColumnBuffers.pack([r[2:7] for r in recs], [r[7] for r in recs], headers)
        ((buffers, _, _),) = got.pieces()
        assert buffers == packed


@pytest.mark.parametrize("kind", KINDS[3:6] + BAD_KINDS)
@pytest.mark.parametrize("fast", [True, False])
def test_batch_columns_agree_with_the_records(kind: str, fast: bool) -> None:
    if fast and C is None:
        pytest.skip("trafka.codec._speedups is not built")
    if kind in ("control", "legacy"):
        return  # not a batch of records: the fetcher never decodes these as one
    entry = _entry(kind, 10, 5, 7)
    try:
        header, recs = decode_batch_as(entry, Rec, prefix=("t", 3), suffix=(0, 0), min_offset=12)
    except records.DecodeError as exc:
        _accel.speedups = C if fast else None
        with pytest.raises(records.DecodeError) as raised:
            decode_batch_columns(entry, min_offset=12, headers=True)
        assert str(raised.value) == str(exc)
        return
    _accel.speedups = C if fast else None
    _, got = decode_batch_columns(entry, min_offset=12, headers=True)
    ts_type = header.timestamp_type.value
    assert got.rows() == [(*r[2:7], ts_type) for r in recs]
