"""trafka.codec._speedups: the optional C record loops against the pure-Python ones.

The C module only ever *refuses* input (returns None) and leaves the explaining
to Python, so the properties checked here are:

* on valid batches it accepts, and decodes and encodes exactly as the Python
  code and the construct definitions do (equal records, identical bytes);
* on mutated, truncated or lying input it refuses whenever Python raises, and
  the error users see is the Python DecodeError/EncodeError, field path and all;
* ``trafka.codec.records`` really uses it in a dev install (a silent fallback to
  pure Python fails here rather than only showing up in benchmarks).

This module also re-runs every test of ``test_records.py`` with the C module
switched off, since that file runs with it switched on (when built).
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import pytest
import test_records
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_records import (
    BAD_CASES,
    TS,
    batch_options,
    construct_batch,
    raw_record,
    record_lists,
    wrap,
    zz,
)

from trafka.codec import _accel, records
from trafka.codec._batch_decode import _decode_records_v2
from trafka.codec._batch_encode import _encode_all, _encode_record
from trafka.codec.columns import ColumnBuffers
from trafka.codec.compression import Compression
from trafka.codec.errors import CodecError, DecodeError, EncodeError
from trafka.codec.records import (
    BATCH_HEADER_SIZE,
    Record,
    RecordBatchBuilder,
    decode_batch,
    decode_batch_as,
    decode_records,
    encode_batch,
    set_base_offset,
)

try:
    from trafka.codec import _speedups as C  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a failure reported by the build test below
    C = None

DISABLED = os.environ.get("TRAFKA_NO_SPEEDUPS", "0") not in ("", "0")
needs_c = pytest.mark.skipif(C is None, reason="trafka.codec._speedups is not built")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module", autouse=True)
def pure_python() -> Iterator[None]:
    """Every test here starts on the Python path; tests switch to C explicitly."""
    saved = _accel.speedups
    _accel.speedups = None
    yield
    _accel.speedups = saved


@contextmanager
def path(fast: bool) -> Iterator[None]:
    saved = _accel.speedups
    _accel.speedups = C if fast else None
    try:
        yield
    finally:
        _accel.speedups = saved


def outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """The result, or the error as (type, str, field) so two paths can be compared."""
    try:
        return fn(*args, **kwargs)
    except CodecError as exc:
        return (type(exc), str(exc), exc.field)


def both_paths(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    with path(True):
        fast = outcome(fn, *args, **kwargs)
    with path(False):
        slow = outcome(fn, *args, **kwargs)
    return fast, slow


# -- the build --------------------------------------------------------------------------------


@pytest.mark.skipif(DISABLED, reason="TRAFKA_NO_SPEEDUPS is set")
def test_extension_is_built_and_loaded() -> None:
    assert C is not None, "trafka.codec._speedups did not build: re-run pip install -e '.[dev]'"
    assert _accel.load_speedups() is C


def test_env_var_forces_pure_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAFKA_NO_SPEEDUPS", "1")
    assert _accel.load_speedups() is None
    monkeypatch.setenv("TRAFKA_NO_SPEEDUPS", "0")
    assert _accel.load_speedups() is C


class _Spy:
    """Counts calls into the C module (which has no Python-level hooks of its own)."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        target = getattr(C, name)

        def call(*args: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            result = target(*args)
            assert result is not None, f"{name} refused valid input"
            return result

        return call


@needs_c
def test_records_module_calls_the_extension() -> None:
    spy = _Spy()
    saved = _accel.speedups
    _accel.speedups = spy
    try:
        rows = [(TS + i, b"k", b"v" * i, (("h", b"x"),)) for i in range(3)]
        data = encode_batch(rows)
        builder = RecordBatchBuilder()
        for row in rows:
            builder.append(*row)
        assert builder.build() == data
        assert decode_batch(data).records == decode_batch_as(data, Record)[1]
        assert list(decode_records(data)) == decode_batch(data).records
    finally:
        _accel.speedups = saved
    # An uncompressed batch is encoded whole in C; a compressed one has its records
    # section encoded there.
    assert spy.calls == {"encode_batch": 1, "encode_record": 3, "decode_records": 4}
    _accel.speedups = spy
    try:
        encode_batch(rows, compression=Compression.GZIP)
    finally:
        _accel.speedups = saved
    assert spy.calls["encode_records"] == 1 and spy.calls["encode_batch"] == 1


# -- valid input: same results ------------------------------------------------------------------


def _section(data: bytes) -> tuple[bytes, int, int, int, int | None]:
    """The decode_records arguments for an uncompressed batch."""
    header = records.read_batch_header(data)
    log_append = header.max_timestamp if header.attributes & 0x08 else None
    return (
        data[BATCH_HEADER_SIZE:],
        header.records_count,
        header.base_offset,
        header.base_timestamp,
        log_append,
    )


@needs_c
@SETTINGS
@given(rows=record_lists(), options=batch_options)
def test_c_decodes_like_python_and_construct(rows: list[Any], options: dict[str, Any]) -> None:
    data = construct_batch(rows, compiled=True, **options)
    section, count, base_offset, base_ts, log_append = _section(data)
    fast = C.decode_records(section, count, base_offset, base_ts, log_append, Record, (), (), None)
    assert fast is not None, "valid records refused"
    assert fast == _decode_records_v2(section, count, base_offset, base_ts, log_append)
    assert all(type(r) is Record for r in fast)
    with path(True):
        assert decode_batch(data).records == fast
    with path(False):
        assert decode_batch(data).records == fast


@needs_c
@SETTINGS
@given(rows=record_lists(), options=batch_options, buffers=st.booleans())
def test_c_encodes_byte_for_byte(rows: list[Any], options: dict[str, Any], buffers: bool) -> None:
    if buffers:  # bytearray keys/values and list headers take the C path too
        rows = [
            (ts, None if k is None else bytearray(k), v, [list(h) for h in hs])
            for ts, k, v, hs in rows
        ]
    base_ts = rows[0][0]
    assert C.encode_records(rows, base_ts) == _encode_all(rows, base_ts)
    for i, (ts, key, value, headers) in enumerate(rows):
        assert C.encode_record(i, ts - base_ts, key, value, headers) == _encode_record(
            i, ts - base_ts, key, value, headers
        )
    expected = construct_batch(rows, compiled=True, **options)
    with path(True):
        assert encode_batch(rows, **options) == expected
    with path(False):
        assert encode_batch(rows, **options) == expected


@needs_c
def test_c_encodes_varint_boundaries() -> None:
    # Lengths and deltas straddling every varint width up to the int32/int64 limits.
    for n in (0, 63, 64, 8191, 8192, 2**20, 2**27):
        value = bytes(n)
        rows = [(TS, None, value, ()), (TS + n, value[:5], None, (("é" * (n % 7), value[:3]),))]
        assert C.encode_records(rows, TS) == _encode_all(rows, TS)
    for delta in (2**31 - 1, -(2**31), 2**62, -(2**63) + TS + 1, 2**63 - 1 - TS):
        rows = [(TS, None, b"x", ()), (TS + delta, None, b"y", ())]
        assert C.encode_records(rows, TS) == _encode_all(rows, TS)


class ConsumerLike(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple[Any, ...]
    timestamp_type: int = 0
    leader_epoch: int = -1


@needs_c
@SETTINGS
@given(
    rows=record_lists(),
    codec=st.sampled_from([Compression.NONE, Compression.NONE, Compression.LZ4]),
    min_offset=st.none() | st.integers(95, 110),
    log_append=st.booleans(),
)
def test_decode_batch_as_builds_the_callers_tuples(
    rows: list[Any], codec: Compression, min_offset: int | None, log_append: bool
) -> None:
    data = encode_batch(rows, base_offset=100, compression=codec, timestamp_type=int(log_append))
    kwargs: dict[str, Any] = {"prefix": ("t", 3), "suffix": (1, 7), "min_offset": min_offset}
    fast, slow = both_paths(decode_batch_as, data, ConsumerLike, **kwargs)
    assert fast == slow
    header, out = fast
    assert header == decode_batch(data).header
    expected = [
        ConsumerLike("t", 3, *r, 1, 7)
        for r in decode_batch(data).records
        if min_offset is None or r.offset >= min_offset
    ]
    assert out == expected
    for rec in out:
        assert type(rec) is ConsumerLike
        assert hash(rec) == hash(tuple(rec))  # allocated as a whole, hashable tuple
        assert rec.leader_epoch == 7 and rec.topic == "t"


@needs_c
def test_decode_batch_as_plain_tuples_and_refused_types() -> None:
    data = encode_batch([(TS, b"k", b"v", ())], base_offset=5)
    with path(True):
        assert decode_batch_as(data, tuple) == (
            decode_batch(data).header,
            [(5, TS, b"k", b"v", ())],
        )
        with pytest.raises(TypeError):
            decode_batch_as(data, list)  # type: ignore[type-var]

    class WithDict(tuple):  # type: ignore[type-arg]
        pass

    section, count, base_offset, base_ts, _ = _section(data)
    assert (
        C.decode_records(section, count, base_offset, base_ts, None, WithDict, (), (), None) is None
    )
    with pytest.raises(TypeError):
        C.decode_records(section, count, base_offset, base_ts, None, list, (), (), None)
    with pytest.raises(TypeError):
        C.decode_records(section, count, base_offset, base_ts, None, Record, [], (), None)
    with pytest.raises(TypeError):
        C.decode_records(section, "1", base_offset, base_ts, None, Record, (), (), None)
    with pytest.raises(TypeError):
        C.decode_records(section, count)
    with path(True):  # the Python path still handles classes the C path cannot fill
        assert decode_batch_as(data, WithDict)[1] == [(5, TS, b"k", b"v", ())]


@needs_c
def test_values_beyond_int64_are_left_to_python() -> None:
    # Offsets and timestamps past int64 are nonsense, but Python's ints carry
    # them; the C path must not wrap around.
    data = encode_batch([(TS, None, b"a", ()), (TS + 1, None, b"b", ())])
    section, count, _, _, _ = _section(data)
    assert C.decode_records(section, count, 2**63 - 1, TS, None, Record, (), (), None) is None
    assert C.decode_records(section, count, 0, 2**63 - 1, None, Record, (), (), None) is None
    assert C.decode_records(section, count, 2**63, TS, None, Record, (), (), None) is None
    assert C.decode_records(section, count, 0, TS, None, Record, (), (), 2**64) is None
    low = C.decode_records(section, count, 0, TS, None, Record, (), (), -(2**64))
    assert [r.offset for r in low] == [0, 1]
    shifted = set_base_offset(data, 2**63 - 1)
    fast, slow = both_paths(decode_batch, shifted, verify=False)
    assert fast == slow
    assert [r.offset for r in fast.records] == [2**63 - 1, 2**63]
    big = [(2**63 - 1, None, b"a", ()), (2**63, None, b"b", ())]
    assert C.encode_records(big, 2**63 - 1) is None
    fast, slow = both_paths(encode_batch, big)
    assert fast == slow and fast[0] is EncodeError


# -- malformed input: C refuses, Python explains ------------------------------------------------------


def compare_on(
    section: bytes, count: int, base_offset: int = 0, log_append: int | None = None
) -> None:
    """C refuses exactly when Python raises; otherwise both give the same records
    (and the column decoder, the same parser, the same records as columns)."""
    fast = C.decode_records(section, count, base_offset, TS, log_append, Record, (), (), None)
    columns = C.decode_records_columns(section, count, base_offset, TS, log_append, 1, None, True)
    try:
        if count < 0 or count * 7 > len(section):  # checked before the loop, as records.py does
            raise DecodeError("records_count")
        slow = _decode_records_v2(section, count, base_offset, TS, log_append)
    except DecodeError:
        assert fast is None, "C accepted what Python refuses"
        assert columns is None, "C's columns accepted what Python refuses"
        return
    assert fast == slow
    assert columns is not None and ColumnBuffers.of(columns) == ColumnBuffers.pack(slow, 1, True)


@st.composite
def mutated_sections(draw: Any) -> tuple[bytes, int]:
    rows = draw(record_lists(max_size=5))
    section, count, _, _, _ = _section(encode_batch(rows))
    data = bytearray(section)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete", "count"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= draw(st.sampled_from([0x01, 0x02, 0x40, 0x80, 0xFF]))
        elif op == "set" and data:
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=6))
        elif op == "delete" and data:
            del data[at : at + draw(st.integers(1, 4))]
        elif op == "count":
            count = draw(st.integers(-2, min(count, 40) + 3) | st.just(2**31 - 1))
    return bytes(data), count


@needs_c
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated=mutated_sections(), log_append=st.none() | st.just(TS + 9))
def test_c_refuses_mutated_sections_like_python(
    mutated: tuple[bytes, int], log_append: int | None
) -> None:
    section, count = mutated
    compare_on(section, count, 1000, log_append)


@needs_c
@settings(max_examples=400, deadline=None)
@given(body=st.binary(max_size=80), count=st.integers(-1, 12))
def test_c_refuses_random_bytes_like_python(body: bytes, count: int) -> None:
    compare_on(body, count)


@needs_c
@SETTINGS
@given(mutated=mutated_sections(), codec=st.sampled_from([0, 0, 3]))
def test_users_get_the_python_error(mutated: tuple[bytes, int], codec: int) -> None:
    section, count = mutated
    data = wrap(section, count, codec)
    fast, slow = both_paths(decode_batch, data)
    assert fast == slow
    fast, slow = both_paths(decode_batch_as, data, ConsumerLike, prefix=("t", 0), suffix=(0, -1))
    assert fast == slow


@needs_c
@pytest.mark.parametrize(("data", "field", "match"), BAD_CASES)
def test_bad_cases_raise_the_same_located_error(data: bytes, field: str | None, match: str) -> None:
    fast, slow = both_paths(decode_batch, data)
    assert fast == slow
    assert fast[0] is DecodeError and match in fast[1]


HAND_MADE = [
    raw_record(od=b"\x80\x00"),  # non-minimal varints are accepted by both
    raw_record(ts=b"\xff" * 9 + b"\x01"),  # the largest 10-byte varlong
    raw_record(ts=b"\xff" * 9 + b"\x02"),  # one bit too many
    raw_record(od=b"\xff\xff\xff\xff\x0f"),
    raw_record(od=b"\xff\xff\xff\xff\x10"),
    raw_record(od=b"\xff\xff\xff\xff\x8f\x00"),
    raw_record(key=zz(3) + b"abc", value=zz(0)),
    raw_record(headers=zz(2) + zz(1) + b"a" + zz(-1) + zz(0) + zz(0)),
    raw_record(headers=zz(1) + zz(3) + "é".encode() + b"x" + zz(1) + b"v"),
    raw_record(headers=zz(1) + zz(2) + b"\xed\xa0" + zz(-1)),  # a truncated surrogate
    raw_record(headers=zz(1) + zz(3) + b"\xed\xa0\x80" + zz(-1)),  # an encoded surrogate
    raw_record(headers=b"\x80\x00"),  # zero headers, non-minimal
    raw_record(length=zz(6), key=b"\x80\x80\x80\x80\x80"),  # varint runs past the record
    raw_record(length=b"\x80\x80\x80\x80\x10"),
]


@needs_c
@pytest.mark.parametrize("section", HAND_MADE)
@pytest.mark.parametrize("log_append", [None, TS])
def test_hand_made_records(section: bytes, log_append: int | None) -> None:
    for cut in range(len(section) + 1):
        compare_on(section[:cut], 1, 0, log_append)
        compare_on(section[:cut] + section, 2, 0, log_append)
    fast, slow = both_paths(decode_batch, wrap(section, 1))
    assert fast == slow


@needs_c
def test_any_buffer_is_read_in_place() -> None:
    data = encode_batch([(TS, b"k", b"v", (("h", None),))])
    section, count, base_offset, base_ts, _ = _section(data)
    expected = _decode_records_v2(section, count, base_offset, base_ts, None)
    for buf in (bytearray(section), memoryview(section), memoryview(b"xx" + section)[2:]):
        assert C.decode_records(buf, count, base_offset, base_ts, None, Record, (), (), None) == (
            expected
        )
    with path(True):
        assert decode_batch(memoryview(data).cast("c")).records == expected
        assert decode_batch(bytearray(data)).records == expected


# -- encode input the C path leaves to Python -------------------------------------------------------


class BytesSub(bytes):
    pass


ENCODE_INPUTS = [
    [(TS, memoryview(b"key"), b"v", ())],
    [(TS, BytesSub(b"key"), b"v", ())],
    [(TS, b"k", memoryview(b"abcd").cast("i"), ())],
    [(TS, b"k", "not bytes", ())],
    [(TS, b"k", b"v", (("h", memoryview(b"x")),))],
    [(TS, b"k", b"v", (("\ud800", b"x"),))],
    [(TS, b"k", b"v", ((b"h", b"x"),))],
    [(TS, b"k", b"v", (("h", "x"),))],
    [(TS, b"k", b"v", (("h", b"x", b"y"),))],
    [(TS, b"k", b"v", {"h": b"x"})],
    [(TS, b"k", b"v", deque([("h", b"x")]))],
    [(TS, None, None, ()), (float(TS), None, None, ())],
    [(TS, None, None, ()), (True, None, None, ())],
    [(TS, None, None, ()), [TS, None, None]],
    [(TS, None, None, ()), None],
    [(2**64, None, None, ())],
]


@needs_c
@pytest.mark.parametrize("rows", ENCODE_INPUTS, ids=range(len(ENCODE_INPUTS)))
def test_unusual_encode_input_goes_to_python(rows: list[Any]) -> None:
    base_ts = rows[0][0]
    assert C.encode_records(rows, base_ts) is None
    fast, slow = both_paths(encode_batch, rows)
    assert fast == slow
    ts, key, value, headers = rows[0]
    fast, slow = both_paths(lambda: RecordBatchBuilder().append(ts, key, value, headers))
    assert fast == slow


@needs_c
def test_encode_record_refuses_out_of_range_arguments() -> None:
    assert C.encode_record(-1, 0, None, None, ()) is None
    assert C.encode_record(2**31, 0, None, None, ()) is None
    assert C.encode_record(0, 2**63, None, None, ()) is None
    assert C.encode_record(0, -(2**63), None, None, ()) == _encode_record(
        0, -(2**63), None, None, ()
    )
    assert C.encode_records((), TS) is None
    assert C.encode_records(iter([(TS, None, None, ())]), TS) is None
    with pytest.raises(TypeError):
        C.encode_records([])


@needs_c
def test_encode_batch_leaves_header_fields_out_of_range_to_python() -> None:
    """A header field beyond its width is refused in C; the Python path names it."""
    from trafka.codec.crc import crc32c_function

    rows = [(TS, None, b"v", ())]
    good = (TS, 0, -1, 0, -1, -1, -1)
    assert C.encode_batch(rows, *good, crc32c_function)[0] == encode_batch(rows)
    bad = {
        "base_offset": (1, 2**63),
        "partition_leader_epoch": (2, 2**31),
        "producer_id": (4, -(2**63) - 1),
        "producer_epoch": (5, 2**15),
        "base_sequence": (6, -(2**31) - 1),
    }
    for field, (at, value) in bad.items():
        args = list(good)
        args[at] = value
        assert C.encode_batch(rows, *args, crc32c_function) is None
        with pytest.raises(EncodeError) as err:
            encode_batch(rows, **{field: value})
        assert err.value.field == field
    for attributes in (-1, 2**15):
        assert C.encode_batch(rows, TS, 0, -1, attributes, -1, -1, -1, crc32c_function) is None
    assert C.encode_batch(rows, TS, True, -1, 0, -1, -1, -1, crc32c_function) is None
    with pytest.raises(TypeError):
        C.encode_batch(rows, *good)

    def broken(view: Any) -> int:
        raise RuntimeError("crc")

    with pytest.raises(RuntimeError, match="crc"):
        C.encode_batch(rows, *good, broken)
    assert C.encode_batch(rows, *good, lambda view: -1) is None


@needs_c
def test_builder_sizes_agree() -> None:
    rows = [(TS + i, b"k" * i, bytes(300 * i), (("h", b"x" * i),) * (i % 3)) for i in range(40)]
    built = []
    for fast in (True, False):
        with path(fast):
            builder = RecordBatchBuilder(max_bytes=4000)
            taken = [builder.append(*row) for row in rows]
            built.append((taken, builder.estimated_size, builder.build(base_sequence=4)))
    assert built[0] == built[1]
    assert struct.unpack_from(">i", built[0][2], 53)[0] == 4


# -- test_records.py, pure Python -------------------------------------------------------------------
# test_records.py runs on whichever path records.py picked (C when built); its
# tests are collected here a second time, under this module's pure_python fixture.

for _name in dir(test_records):
    if _name.startswith("test_"):
        globals()[f"{_name}_pure"] = getattr(test_records, _name)
