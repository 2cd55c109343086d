"""Consumed records as columns in Arrow's memory layout, without a Python object per record.

For readers that hand records on in bulk (the Spark data source makes Arrow
batches of them): the record walks of :mod:`.records` can lay the records out
as column buffers instead of record tuples. The buffers are plain ``bytes`` in
Arrow's layout, so a caller wraps them without copying (``pyarrow.py_buffer``
and ``Array.from_buffers``); this module does not import pyarrow.

Rules and invariants:

* One set of buffers (:class:`ColumnBuffers`) is what one decoding call made:
  ``offsets`` int64, ``timestamp_types`` int32 (0 create time, 1 log-append
  time, -1 legacy magic 0), native byte order, one entry per record;
  ``timestamps`` as Arrow's ``timestamp("us")`` (:class:`TimestampColumn`:
  int64 microseconds, Spark's ``TimestampType``, so a reader hands them on
  without a cast or a multiplication; Kafka's "no timestamp", any negative
  one, is null, its slot 0; a timestamp whose microseconds do not fit in
  int64 is a :class:`~trafka.codec.records.DecodeError`, as Spark's own
  conversion fails on it); ``key`` and ``value`` binary columns (:class:`BinaryColumn`: int32
  offsets from 0, one more than the items, the bytes end to end, a validity
  bitmap or None when nothing is null); ``headers`` None unless asked for,
  else an int32 start per record (one more, from 0) into the header names
  (never null, UTF-8) and values.
* The records are exactly those the tuple walks give (same offsets,
  timestamps, filtering below ``min_offset``), in the same order. The C
  accelerator does the per-record work (one record parser for tuples and
  columns, in ``codec/_speedups.c``); it only refuses, and then the tuples the
  Python decoder makes are packed here (:meth:`ColumnBuffers.pack`), which is
  also the path without the accelerator and for legacy messages.
* :class:`RecordColumns` is a sequence of records as pieces of buffers
  (``(buffers, start, stop)``): slicing and joining make new pieces and never
  copy record bytes.
"""

from __future__ import annotations

import bisect
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import _accel
from ._batch_decode import _checked_payload, _decode_records_v2, _records_section
from .compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from .crc import crc32c_function
from .records import BytesLike, DecodeError, RecordBatchHeader

__all__ = [
    "BinaryColumn",
    "ColumnBuffers",
    "HeaderColumns",
    "RecordColumns",
    "TimestampColumn",
    "decode_batch_columns",
    "decode_batch_run_columns",
]


def _validity(valid: Sequence[bool]) -> tuple[bytes | None, int]:
    """An Arrow validity bitmap of ``valid`` (None when every item is valid) and the null count."""
    bits = bytearray((len(valid) + 7) >> 3)
    for i, ok in enumerate(valid):
        if ok:
            bits[i >> 3] |= 1 << (i & 7)
    nulls = len(valid) - sum(valid)
    return (bytes(bits) if nulls else None), nulls


def _is_valid(validity: bytes | None, i: int) -> bool:
    return validity is None or bool(validity[i >> 3] & (1 << (i & 7)))


# The largest timestamp (ms) whose microseconds fit in int64.
_MAX_MICROS_MS = (2**63 - 1) // 1000


@dataclass(frozen=True, slots=True)
class TimestampColumn:
    """Timestamps in Arrow's ``timestamp("us")`` layout (see the module doc)."""

    micros: bytes  # int64
    validity: bytes | None  # bit i set: timestamp i is not null; None: none is null
    nulls: int

    @classmethod
    def pack(cls, millis: Sequence[int]) -> TimestampColumn:
        """From Kafka's timestamps (ms, negative: none)."""
        for ms in millis:
            if ms > _MAX_MICROS_MS:
                raise DecodeError(
                    f"timestamp {ms} ms is beyond what int64 microseconds (Spark's "
                    "TimestampType) hold"
                )
        validity, nulls = _validity([ms >= 0 for ms in millis])
        return cls(
            array("q", [ms * 1000 if ms >= 0 else 0 for ms in millis]).tobytes(), validity, nulls
        )

    def millis(self, i: int) -> int:
        """Timestamp ``i`` in Kafka's terms (ms, -1 when null)."""
        if not _is_valid(self.validity, i):
            return -1
        value: int = memoryview(self.micros).cast("q")[i]
        return value // 1000


@dataclass(frozen=True, slots=True)
class BinaryColumn:
    """A nullable binary (or UTF-8 string) column in Arrow's layout."""

    validity: bytes | None  # bit i set: item i is not null; None: no item is null
    offsets: bytes  # int32, one more than the items, from 0
    data: bytes
    nulls: int

    @classmethod
    def pack(cls, items: Sequence[bytes | None]) -> BinaryColumn:
        offsets = array("i", [0])
        data = bytearray()
        for item in items:
            if item is not None:
                data += item
            offsets.append(len(data))
        validity, nulls = _validity([item is not None for item in items])
        return cls(validity, offsets.tobytes(), bytes(data), nulls)

    def item(self, i: int) -> bytes | None:
        if not _is_valid(self.validity, i):
            return None
        at = memoryview(self.offsets).cast("i")
        return self.data[at[i] : at[i + 1]]


@dataclass(frozen=True, slots=True)
class HeaderColumns:
    """Every record's headers: record ``i`` has entries ``starts[i]`` to ``starts[i + 1]``."""

    starts: bytes  # int32, one more than the records, from 0
    names: BinaryColumn
    values: BinaryColumn


@dataclass(frozen=True, slots=True)
class ColumnBuffers:
    """The records one decoding call made, as columns (see the module doc)."""

    count: int
    offsets: bytes  # int64
    timestamps: TimestampColumn
    timestamp_types: bytes  # int32
    key: BinaryColumn
    value: BinaryColumn
    headers: HeaderColumns | None

    @classmethod
    def of(cls, fast: tuple[Any, ...]) -> ColumnBuffers:
        """From what the C accelerator returns."""
        count, offsets, timestamps, types, key, value, headers = fast
        return cls(
            count,
            offsets,
            TimestampColumn(*timestamps),
            types,
            BinaryColumn(*key),
            BinaryColumn(*value),
            None
            if headers is None
            else HeaderColumns(headers[0], BinaryColumn(*headers[1]), BinaryColumn(*headers[2])),
        )

    @classmethod
    def pack(
        cls,
        records: Sequence[tuple[Any, ...]],
        timestamp_types: int | Sequence[int],
        headers: bool,
    ) -> ColumnBuffers:
        """From record tuples ``(offset, timestamp, key, value, headers, ...)``
        (:class:`~trafka.codec.records.Record` and the like), with one timestamp
        type for all or one each."""
        n = len(records)
        types = [timestamp_types] * n if isinstance(timestamp_types, int) else timestamp_types
        header_columns = None
        if headers:
            starts = array("i", [0])
            names: list[bytes | None] = []
            values: list[bytes | None] = []
            for r in records:
                for name, value in r[4]:
                    names.append(name.encode())
                    values.append(value)
                starts.append(len(names))
            header_columns = HeaderColumns(
                starts.tobytes(), BinaryColumn.pack(names), BinaryColumn.pack(values)
            )
        return cls(
            n,
            array("q", [r[0] for r in records]).tobytes(),
            TimestampColumn.pack([r[1] for r in records]),
            array("i", types).tobytes(),
            BinaryColumn.pack([r[2] for r in records]),
            BinaryColumn.pack([r[3] for r in records]),
            header_columns,
        )

    def offset_at(self, i: int) -> int:
        value: int = memoryview(self.offsets).cast("q")[i]
        return value


@dataclass(frozen=True, slots=True)
class _Piece:
    buffers: ColumnBuffers
    start: int
    stop: int


class RecordColumns:
    """Records as pieces of :class:`ColumnBuffers`, in offset order.

    Supports ``len``, slicing (``[a:b]``, no step) and ``+``, none of which
    copies record bytes; :meth:`pieces` gives the ``(buffers, start, stop)``
    to wrap.
    """

    __slots__ = ("_length", "_pieces")

    def __init__(self, pieces: Iterable[tuple[ColumnBuffers, int, int]] = ()) -> None:
        self._pieces = tuple(_Piece(b, a, z) for b, a, z in pieces if z > a)
        self._length = sum(p.stop - p.start for p in self._pieces)

    @classmethod
    def whole(cls, buffers: ColumnBuffers) -> RecordColumns:
        return cls([(buffers, 0, buffers.count)])

    @classmethod
    def join(cls, parts: Iterable[RecordColumns]) -> RecordColumns:
        return cls(piece for part in parts for piece in part.pieces())

    def __len__(self) -> int:
        return self._length

    def __bool__(self) -> bool:
        return self._length > 0

    def __add__(self, other: RecordColumns) -> RecordColumns:
        return RecordColumns.join((self, other))

    def __getitem__(self, index: slice) -> RecordColumns:
        if not isinstance(index, slice):
            raise TypeError("RecordColumns take slices only")
        start, stop, step = index.indices(self._length)
        if step != 1:
            raise ValueError("RecordColumns slices take no step")
        out = []
        at = 0
        for p in self._pieces:
            size = p.stop - p.start
            lo, hi = max(start - at, 0), min(stop - at, size)
            if lo < hi:
                out.append((p.buffers, p.start + lo, p.start + hi))
            at += size
        return RecordColumns(out)

    @property
    def last_offset(self) -> int:
        """The last record's offset (IndexError when empty)."""
        if not self._pieces:
            raise IndexError("no records")
        last = self._pieces[-1]
        return last.buffers.offset_at(last.stop - 1)

    def below(self, offset: int) -> RecordColumns:
        """The records whose offset is below ``offset`` (the first ones: offsets ascend)."""
        keep = []
        for p in self._pieces:
            offsets = memoryview(p.buffers.offsets).cast("q")
            stop = bisect.bisect_left(offsets, offset, p.start, p.stop)
            if stop > p.start:
                keep.append((p.buffers, p.start, stop))
            if stop < p.stop:
                break
        return RecordColumns(keep)

    def pieces(self) -> Iterator[tuple[ColumnBuffers, int, int]]:
        for p in self._pieces:
            yield p.buffers, p.start, p.stop

    def rows(self) -> list[tuple[int, int, bytes | None, bytes | None, tuple[Any, ...], int]]:
        """Every record as ``(offset, timestamp, key, value, headers, timestamp_type)``
        (slow: for tests and checks; timestamps in ms, -1 for none; headers
        empty when not decoded)."""
        out = []
        for p in self._pieces:
            b = p.buffers
            offsets = memoryview(b.offsets).cast("q")
            types = memoryview(b.timestamp_types).cast("i")
            starts = memoryview(b.headers.starts).cast("i") if b.headers else None
            for i in range(p.start, p.stop):
                headers: tuple[Any, ...] = ()
                if b.headers is not None and starts is not None:
                    names, values = b.headers.names, b.headers.values
                    headers = tuple(
                        (bytes(names.item(j) or b"").decode(), values.item(j))
                        for j in range(starts[i], starts[i + 1])
                    )
                out.append(
                    (
                        offsets[i],
                        b.timestamps.millis(i),
                        b.key.item(i),
                        b.value.item(i),
                        headers,
                        types[i],
                    )
                )
        return out

    def offsets(self) -> list[int]:
        """Every record's offset (for tests and checks)."""
        return [
            o
            for p in self._pieces
            for o in memoryview(p.buffers.offsets).cast("q")[p.start : p.stop]
        ]

    def __repr__(self) -> str:
        return f"RecordColumns({self._length} records in {len(self._pieces)} pieces)"


def decode_batch_columns(
    batch: BytesLike,
    *,
    min_offset: int | None = None,
    headers: bool = False,
    verify: bool = True,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[RecordBatchHeader, RecordColumns]:
    """:func:`~trafka.codec.records.decode_batch_as`, into columns: one magic 2
    batch (decompressed as needed), records below ``min_offset`` left out, the
    batch's timestamp type for every record, header columns only with ``headers``.

    Raises:
        DecodeError: anything malformed, located as by
            :func:`~trafka.codec.records.decode_batch`.
    """
    header, payload = _checked_payload(batch, verify)
    data, count, log_append = _records_section(header, payload, max_size)
    timestamp_type = header.timestamp_type.value
    sp = _accel.speedups
    if sp is not None:
        fast = sp.decode_records_columns(
            data,
            count,
            header.base_offset,
            header.base_timestamp,
            log_append,
            timestamp_type,
            min_offset,
            headers,
        )
        if fast is not None:
            return header, RecordColumns.whole(ColumnBuffers.of(fast))
    decoded = _decode_records_v2(
        bytes(data), count, header.base_offset, header.base_timestamp, log_append
    )
    if min_offset is not None:
        decoded = [r for r in decoded if r[0] >= min_offset]
    return header, RecordColumns.whole(ColumnBuffers.pack(decoded, timestamp_type, headers))


def decode_batch_run_columns(
    buf: BytesLike,
    pos: int,
    *,
    min_offset: int | None = None,
    headers: bool = False,
    verify: bool = True,
    stop_at_transactional: bool = False,
    max_records: int | None = None,
) -> tuple[RecordColumns, int, int | None]:
    """:func:`~trafka.codec.records.decode_batch_run_as`, into columns (each
    record with its batch's timestamp type); the same run, stops and result,
    with the records as :class:`RecordColumns`. Without the C accelerator (or
    for a blob that is not ``bytes``) the run is empty."""
    sp = _accel.speedups
    if sp is None or type(buf) is not bytes:
        return RecordColumns(), pos, None
    crc = crc32c_function if verify else None
    limit = sys.maxsize if max_records is None else max_records
    fast, pos, next_offset = sp.decode_batch_run_columns(
        buf, pos, min_offset, crc, stop_at_transactional, limit, headers
    )
    return RecordColumns.whole(ColumnBuffers.of(fast)), pos, next_offset
