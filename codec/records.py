"""Kafka record batches (magic 2), and the walk over a records blob of any magic.

A *records blob* is the ``records`` field of a Produce request or Fetch response:
entries laid end to end, each starting with ``[int64 offset][int32 length]``
and holding either a record batch (magic 2) or a legacy message (magic 0 and
1, see :mod:`trafka.codec.legacy`). The magic byte sits at byte 16 in every
format, so the walk reads the length, then the magic, then hands the entry to
the right decoder.

Batch layout (big-endian; 61-byte header)::

    0  base_offset int64           21 attributes int16        43 producer_id int64
    8  batch_length int32          23 last_offset_delta int32 51 producer_epoch int16
    12 partition_leader_epoch int32 27 base_timestamp int64   53 base_sequence int32
    16 magic int8 (= 2)            35 max_timestamp int64     57 records_count int32
    17 crc uint32                                             61 records...

Rules and invariants:

* ``batch_length`` counts the bytes after itself, so a batch is
  ``12 + batch_length`` bytes and ``batch_length >= 49``.
* The CRC-32C covers ``attributes`` to the end of the batch. It does not cover
  ``base_offset`` or ``partition_leader_epoch``: the broker rewrites those two
  in place (:func:`set_base_offset`, :func:`set_partition_leader_epoch`) and
  stores the batch otherwise byte for byte as the producer sent it.
* attributes: bits 0-2 compression codec, bit 3 timestamp type (1 =
  log-append time, when every record's timestamp is ``max_timestamp``), bit 4
  transactional, bit 5 control. With compression, everything after
  ``records_count`` is one compressed payload holding the records.
* A record is ``[varint length][int8 attributes][varlong timestamp_delta]
  [varint offset_delta][varint key length][key][varint value length][value]
  [varint header count]([varint key length][utf-8 key][varint value length]
  [value])*``. Varints are zig-zag; a length of -1 is null (not allowed for
  header keys); int32 varints have at most 5 bytes, varlongs 10.
* In a blob, a trailing entry cut short (a Fetch response may end mid-batch) is
  skipped silently; a length below the format's minimum is corrupt. No buffer is
  ever sized from a length before the bytes behind it have been received.

Every malformed input raises :class:`~trafka.codec.errors.DecodeError` naming
the structure and the field (``records[3].key``), never a lower-level error.

The decoder and encoder here are hand-written for speed and checked byte for
byte against the declarative construct definitions at the end of this module
(:data:`RecordBatchV2`, :data:`RecordV2`) by the property tests.

The per-record loops also exist in C (``codec/_speedups.c``, an optional
extension; ``TRAFKA_NO_SPEEDUPS=1`` turns it off). The C code only *refuses*:
given anything malformed or unusual it returns None, and the Python loop below
runs and raises the located error. Both paths give equal records and identical
bytes (tests/codec/test_speedups.py). A consumer's walk over a whole blob goes
the same way (:func:`decode_batch_run_as`): C decodes the run of plain batches
it accepts and stops before anything else, which the ordinary walk then handles
(tests/codec/test_records_consumer_paths.py).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import os
import struct
import sys
from collections.abc import Iterable, Iterator, Sequence
from io import BytesIO
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, overload

from construct import Construct, GreedyBytes, IfThenElse, Struct, this
from construct.core import evaluate

from . import _wire
from .compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, compress, decompress
from .crc import crc32, crc32c, crc32c_function
from .errors import CodecError, DecodeError, EncodeError
from .primitives import Int8, Int16, Int32, Int64, UInt32, VarInt, VarLong

if TYPE_CHECKING:
    from .legacy import LegacyMessageHeader

__all__ = [
    "BATCH_HEADER_SIZE",
    "MIN_BATCH_LENGTH",
    "ControlRecord",
    "ControlRecordType",
    "Header",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "RecordBatchHeader",
    "RecordBatchV2",
    "RecordHeaderV2",
    "RecordV2",
    "TimestampType",
    "assign_offsets",
    "blob_next_offset",
    "check_batch",
    "decode_batch",
    "decode_batch_as",
    "decode_batch_run_as",
    "decode_control_record",
    "decode_records",
    "encode_batch",
    "encode_control_batch",
    "iter_batches",
    "read_batch_header",
    "rebuild_batch",
    "set_base_offset",
    "set_base_sequence",
    "set_partition_leader_epoch",
    "verify_crc",
]

BytesLike = bytes | bytearray | memoryview
_T = TypeVar("_T", bound=tuple[Any, ...])
Header = tuple[str, bytes | None]
RecordInput = tuple[int, BytesLike | None, BytesLike | None, Sequence[tuple[str, BytesLike | None]]]

BATCH_HEADER_SIZE = 61
# batch_length counts from partition_leader_epoch: 61 - 8 (offset) - 4 (length).
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - 12
LOG_OVERHEAD = 12
_MIN_LEGACY_LENGTH = 14  # crc, magic, attributes, key length, value length (v0)
# Smallest record: 1-byte length, attributes, and five 1-byte varints.
_MIN_RECORD = 7

_HEADER = struct.Struct(">qiibIhiqqqhii")
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. records_count: what the CRC covers
_HEAD = struct.Struct(">qiibI")  # base_offset .. crc
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_HH = struct.Struct(">hh")
_HI = struct.Struct(">hi")

_CRC_AT = 17
_ATTRIBUTES_AT = 21
_EPOCH_AT = 12
_BASE_SEQUENCE_AT = 53

_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20

_INT32_MAX = 2**31 - 1
_NAME = "RecordBatch"

_new: Any = tuple.__new__


def _load_speedups() -> Any:
    """The C fast paths (``trafka.codec._speedups``), or None.

    None when the extension was not built (no compiler at install time) or when
    ``TRAFKA_NO_SPEEDUPS`` is set to anything but ``0`` (the tests compare both).
    The C code only ever refuses input: every error is still raised, and
    explained, by the Python code below.
    """
    if os.environ.get("TRAFKA_NO_SPEEDUPS", "0") not in ("", "0"):
        return None
    try:
        return importlib.import_module("._speedups", __package__)
    except ImportError:
        return None


# Read at each call, so tests can switch paths by patching this attribute.
_speedups: Any = _load_speedups()


def accelerated(name: str) -> Any | None:
    """The C accelerator's function ``name`` (``murmur2``, ``murmur2_pick``...),
    or None when the accelerator is not built or is turned off
    (``TRAFKA_NO_SPEEDUPS``): for packages that keep a Python fallback."""
    return getattr(_speedups, name, None)


class TimestampType(enum.IntEnum):
    """How a batch's timestamps were assigned (attribute bit 3)."""

    NO_TIMESTAMP_TYPE = -1  # legacy magic 0 messages carry no timestamp
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


# -- varints ------------------------------------------------------------------------
# Every 1- and 2-byte unsigned varint, precomputed: record lengths, offset deltas,
# timestamp deltas and key/value lengths of typical records all fall in this
# range, and a list lookup is several times cheaper than encoding. The table (and
# _ZZ2 below) is made when first needed, as ``_UV or _uv_table()``: 16,384 small
# objects take milliseconds, which a process whose records the C speedups encode
# never needs to spend at import (issue #48).

_UV_N = 1 << 14
_UV: list[bytes] = []
_UV_HALF = _UV_N >> 1  # non-negative values whose zig-zag form is in the table


def _uv_table() -> list[bytes]:
    if not _UV:
        _UV[:] = [
            bytes((n,)) if n < 0x80 else bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(_UV_N)
        ]
    return _UV


def _uvarint(n: int) -> bytes:
    """Unsigned varint of a non-negative ``n`` (any size; callers bound it)."""
    if n < _UV_N:
        return (_UV or _uv_table())[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zz32(value: int, what: str) -> bytes:
    """Zig-zag int32 varint, range-checked."""
    if not -(2**31) <= value < 2**31:
        raise EncodeError(f"{value} does not fit an int32 varint", message_name=_NAME, field=what)
    return _uvarint(value << 1 if value >= 0 else ((-value) << 1) - 1)


def _zz64(value: int, what: str) -> bytes:
    if not -(2**63) <= value < 2**63:
        raise EncodeError(f"{value} does not fit an int64 varlong", message_name=_NAME, field=what)
    return _uvarint(value << 1 if value >= 0 else ((-value) << 1) - 1)


def _read_varint_tail(data: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Finish reading an unsigned varint whose first byte at ``pos`` had its high bit set.

    Returns (raw value, position after it). Raises ``IndexError`` when the data
    ends first (the caller turns that into a located DecodeError) and
    ``_VarintError`` when the varint is longer than ``max_bytes``.
    """
    result = 0
    shift = 0
    limit = pos + max_bytes
    while pos < limit:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if max_bytes == 5:
                if result > 0xFFFFFFFF:
                    raise _VarintError("varint does not fit 32 bits")
            elif result > 0xFFFFFFFFFFFFFFFF:
                raise _VarintError("varlong does not fit 64 bits")
            return result, pos
        shift += 7
    raise _VarintError(f"{'varint' if max_bytes == 5 else 'varlong'} longer than {max_bytes} bytes")


class _VarintError(Exception):
    """Internal: a malformed varint; converted to a located DecodeError."""


# -- header --------------------------------------------------------------------------


class RecordBatchHeader(NamedTuple):
    """The 61-byte header of a record batch (magic 2), fields in wire order."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> Compression:
        """The codec of the records payload."""
        return Compression(self.attributes & _CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        """CREATE_TIME (0) or LOG_APPEND_TIME (1)."""
        return TimestampType((self.attributes >> 3) & 1)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        """The whole batch's size in bytes, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_sequence(self) -> int:
        """The sequence number of the last record; -1 without idempotence.

        Sequence numbers wrap from 2**31-1 to 0, as in the Java client.
        """
        if self.base_sequence == -1:
            return -1
        last = self.base_sequence + self.last_offset_delta
        return last - _INT32_MAX - 1 if last > _INT32_MAX else last


def read_batch_header(buf: BytesLike, pos: int = 0) -> RecordBatchHeader:
    """Decode the 61-byte header of the batch at ``buf[pos:]``, not its records.

    Only the header has to be present; callers that need the whole batch check
    ``len(buf) - pos >= header.size`` (as :func:`iter_batches` does).

    Args:
        buf: bytes holding the batch.
        pos: where the batch starts.

    Returns:
        The header.

    Raises:
        DecodeError: fewer than 61 bytes, magic other than 2, ``batch_length`` below
            49, or an unknown compression codec.
    """
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise DecodeError(
            f"truncated: a batch header needs {BATCH_HEADER_SIZE} bytes, {max(len(buf) - pos, 0)} left",
            message_name=_NAME,
        )
    fields = _HEADER.unpack_from(buf, pos)
    if fields[3] != 2:
        raise DecodeError(f"magic {fields[3]} is not 2", message_name=_NAME, field="magic")
    if fields[1] < MIN_BATCH_LENGTH:
        raise DecodeError(
            f"batch_length {fields[1]} is below the minimum of {MIN_BATCH_LENGTH}",
            message_name=_NAME,
            field="batch_length",
        )
    if fields[5] & _CODEC_MASK > 4:
        raise DecodeError(
            f"unknown compression codec {fields[5] & _CODEC_MASK}",
            message_name=_NAME,
            field="attributes",
        )
    header: RecordBatchHeader = _new(RecordBatchHeader, fields)
    return header


# -- walking a blob ----------------------------------------------------------------------


def iter_batches(
    buf: BytesLike, start: int = 0
) -> Iterator[tuple[RecordBatchHeader | LegacyMessageHeader, memoryview]]:
    """Walk a records blob, yielding each entry's header and bytes (no copy).

    Magic 2 entries yield a :class:`RecordBatchHeader`; legacy entries (magic 0
    and 1: one message, possibly a compressed wrapper holding several) yield a
    :class:`~trafka.codec.legacy.LegacyMessageHeader`. Use ``header.magic`` or
    ``isinstance`` to tell them apart; both have ``last_offset``,
    ``next_offset``, ``size``, ``compression`` and ``crc``.

    A trailing entry cut short is skipped silently, as a Fetch response may end
    mid-batch. Nothing is decompressed and CRCs are not checked here.

    Args:
        buf: the blob.
        start: where to start (the start of an entry), 0 by default.

    Yields:
        ``(header, view)`` where ``view`` covers exactly the entry.

    Raises:
        DecodeError: a length below the minimum for the entry's magic, an
            unknown magic, or a malformed batch header.
    """
    from .legacy import read_message_header

    view = memoryview(buf)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    end = len(view)
    pos = start
    if pos < 0:
        raise ValueError("start must be >= 0")
    while end - pos >= LOG_OVERHEAD:
        length = _I32.unpack_from(view, pos + 8)[0]
        if length < _MIN_LEGACY_LENGTH:
            raise DecodeError(
                f"length {length} at byte {pos + 8} is below the minimum of {_MIN_LEGACY_LENGTH}",
                message_name="Records",
                field="length",
            )
        stop = pos + LOG_OVERHEAD + length
        if stop > end:
            return
        magic = view[pos + 16]
        header: RecordBatchHeader | LegacyMessageHeader
        if magic == 2:
            header = read_batch_header(view, pos)
        elif magic < 2:
            header = read_message_header(view, pos)
        else:
            raise DecodeError(
                f"unsupported magic {magic} at byte {pos + 16}",
                message_name="Records",
                field="magic",
            )
        yield header, view[pos:stop]
        pos = stop


def blob_next_offset(buf: BytesLike) -> int | None:
    """The offset after the last complete entry of a records blob, read cheaply.

    Only the entries' length fields and the last entry's header are read: no
    CRC, no records. A consumer uses it to fetch the data after a blob before
    decoding the blob.

    Args:
        buf: the blob (a trailing partial entry is ignored, as by :func:`iter_batches`).

    Returns:
        The last complete entry's ``next_offset``, or None when the blob holds
        no complete entry or its framing is malformed (:func:`iter_batches`
        raises the error when the blob is decoded).
    """
    from .legacy import read_message_header

    view = memoryview(buf)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    end = len(view)
    unpack = _I32.unpack_from
    pos = 0
    last = -1
    while end - pos >= LOG_OVERHEAD:
        length = unpack(view, pos + 8)[0]
        if length < _MIN_LEGACY_LENGTH:
            return None
        stop = pos + LOG_OVERHEAD + length
        if stop > end:
            break
        last = pos
        pos = stop
    if last < 0:
        return None
    magic = view[last + 16]
    try:
        if magic == 2:
            return read_batch_header(view, last).next_offset
        if magic < 2:
            return read_message_header(view, last).next_offset
    except DecodeError:
        pass
    return None


def assign_offsets(buf: BytesLike, base_offset: int) -> tuple[bytes, int]:
    """Give every entry of a produced blob its offsets, as a broker's log does.

    Magic 2 batches get their ``base_offset`` rewritten (CRC untouched); legacy
    entries are handled by :func:`trafka.codec.legacy.assign_legacy_offsets`.

    Args:
        buf: a complete blob (a trailing partial entry is an error here).
        base_offset: the offset of the blob's first record.

    Returns:
        ``(new_blob, next_offset)``.

    Raises:
        DecodeError: malformed or incomplete blob.
        EncodeError: an offset out of the int64 range.
    """
    from .legacy import LegacyMessageHeader, assign_legacy_offsets

    out = bytearray(buf)
    next_offset = base_offset
    consumed = 0
    parts: list[bytes | bytearray] = []
    for header, view in iter_batches(out):
        consumed += len(view)
        if isinstance(header, LegacyMessageHeader):
            data, next_offset = assign_legacy_offsets(view, next_offset)
            parts.append(data)
            continue
        set_base_offset(view, next_offset)
        next_offset += header.last_offset_delta + 1
        parts.append(view.tobytes())
    if consumed != len(out):
        raise DecodeError(
            f"incomplete entry: {len(out) - consumed} trailing bytes", message_name="Records"
        )
    return b"".join(parts), next_offset


# -- CRC ------------------------------------------------------------------------------------


def _entry_bounds(batch: BytesLike) -> tuple[memoryview, int, int]:
    view = memoryview(batch)
    if len(view) < 17:
        raise DecodeError(f"truncated: {len(view)} bytes cannot hold a batch", message_name=_NAME)
    length = _I32.unpack_from(view, 8)[0]
    magic = view[16]
    minimum = MIN_BATCH_LENGTH if magic == 2 else _MIN_LEGACY_LENGTH
    if length < minimum:
        raise DecodeError(
            f"length {length} is below {minimum}", message_name=_NAME, field="batch_length"
        )
    if len(view) < LOG_OVERHEAD + length:
        raise DecodeError(
            f"truncated: the batch needs {LOG_OVERHEAD + length} bytes, {len(view)} given",
            message_name=_NAME,
        )
    if magic > 2:
        raise DecodeError(f"unsupported magic {magic}", message_name=_NAME, field="magic")
    return view, magic, LOG_OVERHEAD + length


def _crc_pair(batch: BytesLike) -> tuple[int, int]:
    """(stored, computed) checksum of one batch or legacy message."""
    view, magic, end = _entry_bounds(batch)
    if magic == 2:
        return _U32.unpack_from(view, _CRC_AT)[0], crc32c(view[_ATTRIBUTES_AT:end])
    return _U32.unpack_from(view, LOG_OVERHEAD)[0], crc32(view[16:end])


def verify_crc(batch: BytesLike) -> bool:
    """Whether one batch's (or legacy message's) stored CRC matches its bytes.

    Magic 2 uses CRC-32C over ``attributes`` to the end; magic 0/1 use CRC-32
    over ``magic`` to the end. Bytes after the entry's declared length are
    ignored.

    Raises:
        DecodeError: too short to hold the checksum or the declared length.
    """
    stored, computed = _crc_pair(batch)
    return stored == computed


def check_batch(batch: BytesLike) -> None:
    """Raise DecodeError("CRC mismatch ...") unless :func:`verify_crc` holds."""
    stored, computed = _crc_pair(batch)
    if stored != computed:
        raise DecodeError(
            f"CRC mismatch: stored {stored:#010x}, computed {computed:#010x}",
            message_name=_NAME if memoryview(batch)[16] == 2 else "Message",
            field="crc",
        )


# -- in-place rewrites -------------------------------------------------------------------------


@overload
def set_base_offset(batch: bytearray, base_offset: int) -> bytearray: ...
@overload
def set_base_offset(batch: memoryview, base_offset: int) -> memoryview | bytes: ...
@overload
def set_base_offset(batch: bytes, base_offset: int) -> bytes: ...
def set_base_offset(batch: BytesLike, base_offset: int) -> BytesLike:
    """Set a magic 2 batch's ``base_offset`` (the CRC does not cover it).

    Args:
        batch: the batch. A ``bytearray`` or writable ``memoryview`` is changed in
            place and returned; ``bytes`` (or a read-only view) is copied.
        base_offset: the new base offset.

    Returns:
        The batch with its first 8 bytes rewritten.

    Raises:
        DecodeError: not a magic 2 batch.
        EncodeError: ``base_offset`` outside int64.
    """
    return _rewrite(batch, 0, _I64, base_offset, "base_offset")


@overload
def set_partition_leader_epoch(batch: bytearray, epoch: int) -> bytearray: ...
@overload
def set_partition_leader_epoch(batch: memoryview, epoch: int) -> memoryview | bytes: ...
@overload
def set_partition_leader_epoch(batch: bytes, epoch: int) -> bytes: ...
def set_partition_leader_epoch(batch: BytesLike, epoch: int) -> BytesLike:
    """Set a magic 2 batch's ``partition_leader_epoch`` (not covered by the CRC).

    Same in-place rules as :func:`set_base_offset`.
    """
    return _rewrite(batch, _EPOCH_AT, _I32, epoch, "partition_leader_epoch")


def set_base_sequence(batch: BytesLike, base_sequence: int) -> bytes:
    """A copy of one magic 2 batch with ``base_sequence`` set and its CRC-32C
    computed again (the checksum covers the sequence).

    Args:
        batch: exactly one batch (bytes after its declared length are dropped).
        base_sequence: the new first sequence number (int32).

    Returns:
        The rewritten batch.

    Raises:
        DecodeError: not a whole magic 2 batch.
        EncodeError: ``base_sequence`` outside int32.
    """
    view, magic, end = _entry_bounds(batch)
    if magic != 2:
        raise DecodeError("not a magic 2 record batch", message_name=_NAME, field="magic")
    try:
        packed = _I32.pack(base_sequence)
    except struct.error:
        raise EncodeError(
            f"{base_sequence!r} is out of range", message_name=_NAME, field="base_sequence"
        ) from None
    out = bytearray(view[:end])
    out[_BASE_SEQUENCE_AT : _BASE_SEQUENCE_AT + 4] = packed
    _U32.pack_into(out, _CRC_AT, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return bytes(out)


def _rewrite(batch: BytesLike, at: int, st: struct.Struct, value: int, what: str) -> BytesLike:
    if len(batch) < BATCH_HEADER_SIZE or memoryview(batch)[16] != 2:
        raise DecodeError("not a magic 2 record batch", message_name=_NAME, field="magic")
    try:
        packed = st.pack(value)
    except struct.error:
        raise EncodeError(f"{value!r} is out of range", message_name=_NAME, field=what) from None
    if isinstance(batch, bytearray) or (isinstance(batch, memoryview) and not batch.readonly):
        batch[at : at + st.size] = packed
        return batch
    data = bytes(batch)
    return data[:at] + packed + data[at + st.size :]


# -- records --------------------------------------------------------------------------------------


class Record(NamedTuple):
    """One record, with its absolute offset and timestamp.

    ``headers`` is a tuple of ``(key, value)``; legacy messages have none, and
    magic 0 messages have timestamp -1.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class RecordBatch:
    """A decoded magic 2 batch: its header and its records, decompressed."""

    header: RecordBatchHeader
    records: list[Record]


def decode_batch(
    batch: BytesLike,
    *,
    verify: bool = True,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> RecordBatch:
    """Decode one magic 2 batch, decompressing its records.

    Args:
        batch: the batch's bytes (bytes after its declared length are ignored).
        verify: check the CRC first.
        max_size: the largest decompressed payload accepted.

    Returns:
        The batch. Under log-append time every record carries ``max_timestamp``.

    Raises:
        DecodeError: anything malformed, located (``records[3].key``).
    """
    header, payload = _checked_payload(batch, verify)
    return RecordBatch(header, _records_of(header, payload, max_size))


def decode_batch_as(
    batch: BytesLike,
    record_type: type[_T],
    *,
    prefix: tuple[Any, ...] = (),
    suffix: tuple[Any, ...] = (),
    min_offset: int | None = None,
    verify: bool = True,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[RecordBatchHeader, list[_T]]:
    """Decode one magic 2 batch straight into the caller's record tuples.

    For consumers that hand out their own record type: each record becomes
    ``record_type(*prefix, offset, timestamp, key, value, headers, *suffix)``,
    built as ``tuple.__new__`` would (the class is not called), without a
    :class:`Record` in between.

    Args:
        batch: the batch's bytes, as for :func:`decode_batch`.
        record_type: ``tuple`` or a tuple subclass that adds no per-instance
            storage, such as a ``NamedTuple``. Records whose fields are all
            atomic (ints, strs, bytes, None, untracked tuples) are left
            untracked by the garbage collector, as CPython does for plain
            tuples: so the class must not hold its own records.
        prefix, suffix: fields placed before and after each record's five.
        min_offset: leave out records with a lower offset (None: keep all).
        verify, max_size: as for :func:`decode_batch`.

    Returns:
        ``(header, records)``.

    Raises:
        DecodeError: anything malformed, located as by :func:`decode_batch`.
        TypeError: ``record_type`` is not such a class.
    """
    if not (isinstance(record_type, type) and issubclass(record_type, tuple)):
        raise TypeError(f"{record_type!r} is not a tuple subclass")
    header, payload = _checked_payload(batch, verify)
    data, count, log_append = _records_section(header, payload, max_size)
    sp = _speedups
    if sp is not None:
        fast = sp.decode_records(
            data,
            count,
            header.base_offset,
            header.base_timestamp,
            log_append,
            record_type,
            prefix,
            suffix,
            min_offset,
        )
        if fast is not None:
            return header, fast
    records = _decode_records_v2(
        bytes(data), count, header.base_offset, header.base_timestamp, log_append
    )
    new = _new
    if min_offset is None:
        return header, [new(record_type, prefix + r + suffix) for r in records]
    return header, [new(record_type, prefix + r + suffix) for r in records if r[0] >= min_offset]


def decode_batch_run_as(
    buf: BytesLike,
    pos: int,
    record_type: type[_T],
    *,
    prefix: tuple[Any, ...] = (),
    min_offset: int | None = None,
    verify: bool = True,
    stop_at_transactional: bool = False,
    max_records: int | None = None,
) -> tuple[tuple[_T, ...], int, int | None]:
    """Decode the run of *plain* batches of a blob starting at ``pos``, if it is fast to.

    The consumer's fast path over a Fetch response: a plain batch is magic 2,
    uncompressed and not a control batch (nor transactional, with
    ``stop_at_transactional``). Each of its records becomes, as by
    :func:`decode_batch_as`, ``record_type(*prefix, offset, timestamp, key,
    value, headers, timestamp_type, partition_leader_epoch)``: the batch's
    timestamp type and leader epoch follow the record's fields. Batches ending
    at or below ``min_offset`` are skipped unread (as a consumer skips data
    below its position); records below it are left out.

    The run stops at the first entry that is not plain, at a trailing partial
    entry, at the end, at anything malformed or unusual, and after the batch
    that brings it to ``max_records`` records (so that a consumer decodes
    what it hands out next while the memory is still warm). The caller then
    handles the entry at the returned position the ordinary way
    (:func:`iter_batches` from there, :func:`decode_batch_as`), which also
    raises the located error for malformed input. Without the C accelerator
    (or for input it does not take, such as a blob that is not ``bytes``) the
    run is empty: the ordinary way then does all the work, with equal results.

    Args:
        buf: the records blob.
        pos: where an entry starts.
        record_type, prefix: as for :func:`decode_batch_as`.
        min_offset: leave out records with a lower offset (None: keep all).
        verify: check each batch's CRC.
        stop_at_transactional: end the run at transactional batches too.
        max_records: end the run once it holds this many records (None: no limit).

    Returns:
        ``(records, pos, next_offset)``: the run's records (a tuple: it costs
        the garbage collector nothing to keep), the position after the run,
        and the ``next_offset`` of its last batch that was decoded rather than
        skipped (None when there is none).

    Raises:
        TypeError: ``record_type`` is not a tuple subclass.
    """
    if not (isinstance(record_type, type) and issubclass(record_type, tuple)):
        raise TypeError(f"{record_type!r} is not a tuple subclass")
    sp = _speedups
    if sp is None or type(buf) is not bytes:
        return (), pos, None
    # The crc32c package's C function itself: no Python code runs inside the loop.
    crc = crc32c_function if verify else None
    limit = sys.maxsize if max_records is None else max_records
    run: tuple[tuple[_T, ...], int, int | None] = sp.decode_batch_run(
        buf, pos, record_type, prefix, min_offset, crc, stop_at_transactional, limit
    )
    return run


def _checked_payload(batch: BytesLike, verify: bool) -> tuple[RecordBatchHeader, memoryview]:
    """The header and the (maybe compressed) records payload of a whole batch."""
    header = read_batch_header(batch)
    view = memoryview(batch)
    size = header.size
    if len(view) < size:
        raise DecodeError(
            f"truncated: the batch needs {size} bytes, {len(view)} given", message_name=_NAME
        )
    if verify:
        computed = crc32c(view[_ATTRIBUTES_AT:size])
        if computed != header.crc:
            raise DecodeError(
                f"CRC mismatch: stored {header.crc:#010x}, computed {computed:#010x}",
                message_name=_NAME,
                field="crc",
            )
    return header, view[BATCH_HEADER_SIZE:size]


def _records_section(
    header: RecordBatchHeader, payload: memoryview, max_size: int
) -> tuple[bytes | memoryview, int, int | None]:
    """The decompressed records, their checked count, and the log-append timestamp."""
    codec = header.attributes & _CODEC_MASK
    data: bytes | memoryview
    if codec:
        try:
            data = decompress(codec, payload, max_size=max_size)
        except DecodeError as exc:
            raise type(exc)(exc.detail, message_name=_NAME, field="records") from None
    else:
        if payload.ndim != 1 or payload.itemsize != 1:
            payload = payload.cast("B")
        data = payload
    count = header.records_count
    if count < 0 or count * _MIN_RECORD > len(data):
        raise DecodeError(
            f"records_count {count} does not fit the {len(data)} bytes of records",
            message_name=_NAME,
            field="records_count",
        )
    log_append = header.max_timestamp if header.attributes & _TIMESTAMP_TYPE_BIT else None
    return data, count, log_append


def _records_of(header: RecordBatchHeader, payload: memoryview, max_size: int) -> list[Record]:
    data, count, log_append = _records_section(header, payload, max_size)
    sp = _speedups
    if sp is not None:
        # The C loop reads the buffer in place (no copy of an uncompressed
        # payload); None means it refused, and the Python loop explains why.
        fast: list[Record] | None = sp.decode_records(
            data, count, header.base_offset, header.base_timestamp, log_append, Record, (), (), None
        )
        if fast is not None:
            return fast
    if type(data) is not bytes:
        data = bytes(data)
    return _decode_records_v2(data, count, header.base_offset, header.base_timestamp, log_append)


# Zig-zag decoding of every 1- and 2-byte varint, indexed by the raw value (the
# 2-byte table made when first needed, as _UV is).
_ZZ1 = [(b >> 1) ^ -(b & 1) for b in range(0x80)]
_ZZ2: list[int] = []


def _zz2_table() -> list[int]:
    if not _ZZ2:
        _ZZ2[:] = [(n >> 1) ^ -(n & 1) for n in range(1 << 14)]
    return _ZZ2


def _decode_records_v2(
    data: bytes, count: int, base_offset: int, base_ts: int, log_append: int | None
) -> list[Record]:
    # The hot loop: one pass over ``data`` with the 1- and 2-byte varint cases
    # inlined. ``f`` names the field being read so that an IndexError (data
    # ran out) can be reported where it happened.
    out: list[Record] = []
    append = out.append
    new = _new
    rec = Record
    zz1 = _ZZ1
    zz2 = _ZZ2 or _zz2_table()
    tail = _read_varint_tail
    end = len(data)
    pos = 0
    i = 0
    f = "length"
    try:
        for i in range(count):
            f = "length"
            b = data[pos]
            if b < 0x80:
                n = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    n = zz2[(b & 0x7F) | (c << 7)]
                    pos += 2
                else:
                    n, pos = tail(data, pos, 5)
                    n = (n >> 1) ^ -(n & 1)
            rec_end = pos + n
            if n < 6 or rec_end > end:
                raise _located(f"length {n} does not fit the {end - pos} bytes left", i, f)
            f = "timestamp_delta"
            pos += 1  # the attributes byte has no defined bits
            b = data[pos]
            if b < 0x80:
                tsd = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    tsd = zz2[(b & 0x7F) | (c << 7)]
                    pos += 2
                else:
                    tsd, pos = tail(data, pos, 10)
                    tsd = (tsd >> 1) ^ -(tsd & 1)
            f = "offset_delta"
            b = data[pos]
            if b < 0x80:
                od = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    od = zz2[(b & 0x7F) | (c << 7)]
                    pos += 2
                else:
                    od, pos = tail(data, pos, 5)
                    od = (od >> 1) ^ -(od & 1)
            f = "key"
            b = data[pos]
            if b < 0x80:
                n = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    n = zz2[(b & 0x7F) | (c << 7)]
                    pos += 2
                else:
                    n, pos = tail(data, pos, 5)
                    n = (n >> 1) ^ -(n & 1)
            if n >= 0:
                stop = pos + n
                if stop > rec_end:
                    raise _located(f"length {n} overruns the record", i, f)
                key: bytes | None = data[pos:stop]
                pos = stop
            elif n == -1:
                key = None
            else:
                raise _located(f"invalid length {n}", i, f)
            f = "value"
            b = data[pos]
            if b < 0x80:
                n = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    n = zz2[(b & 0x7F) | (c << 7)]
                    pos += 2
                else:
                    n, pos = tail(data, pos, 5)
                    n = (n >> 1) ^ -(n & 1)
            if n >= 0:
                stop = pos + n
                if stop > rec_end:
                    raise _located(f"length {n} overruns the record", i, f)
                value: bytes | None = data[pos:stop]
                pos = stop
            elif n == -1:
                value = None
            else:
                raise _located(f"invalid length {n}", i, f)
            f = "headers"
            b = data[pos]
            if b == 0:
                headers: tuple[Header, ...] = ()
                pos += 1
            else:
                headers, pos = _read_headers(data, pos, rec_end, i)
            if pos != rec_end:
                raise _located(
                    f"record length says {rec_end - pos} more bytes than its fields use"
                    if pos < rec_end
                    else "fields overrun the record length",
                    i,
                    "length",
                )
            append(
                new(
                    rec,
                    (
                        base_offset + od,
                        base_ts + tsd if log_append is None else log_append,
                        key,
                        value,
                        headers,
                    ),
                )
            )
    except IndexError:
        raise _located("truncated", i, f) from None
    except _VarintError as exc:
        raise _located(str(exc), i, f) from None
    if pos != end:
        raise DecodeError(
            f"{end - pos} bytes left after the last of {count} records",
            message_name=_NAME,
            field="records",
        )
    return out


def _located(detail: str, index: int, field: str) -> DecodeError:
    return DecodeError(detail, message_name=_NAME, field=f"records[{index}].{field}")


def _read_varint32(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _read_varint_tail(data, pos, 5)
    return (raw >> 1) ^ -(raw & 1), pos


def _read_headers(
    data: bytes, pos: int, rec_end: int, index: int
) -> tuple[tuple[Header, ...], int]:
    # Off the hottest path (most records have no headers) but still common
    # enough to inline the 1-byte varints and build error locations lazily.
    zz1 = _ZZ1
    b = data[pos]
    if b < 0x80:
        count = zz1[b]
        pos += 1
    else:
        count, pos = _read_varint32(data, pos)
    if count < 0 or count * 2 > rec_end - pos:
        raise _located(f"header count {count} does not fit the record", index, "headers")
    out: list[Header] = []
    append = out.append
    for h in range(count):
        b = data[pos]
        if b < 0x80:
            n = zz1[b]
            pos += 1
        else:
            n, pos = _read_varint32(data, pos)
        stop = pos + n
        if n < 0 or stop > rec_end:
            raise _located(f"invalid length {n}", index, f"headers[{h}].key")
        try:
            name = data[pos:stop].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _located(
                f"invalid UTF-8 at byte {exc.start}", index, f"headers[{h}].key"
            ) from None
        pos = stop
        b = data[pos]
        if b < 0x80:
            n = zz1[b]
            pos += 1
        else:
            n, pos = _read_varint32(data, pos)
        if n >= 0:
            stop = pos + n
            if stop > rec_end:
                raise _located(f"length {n} overruns the record", index, f"headers[{h}].value")
            append((name, data[pos:stop]))
            pos = stop
        elif n == -1:
            append((name, None))
        else:
            raise _located(f"invalid length {n}", index, f"headers[{h}].value")
    return tuple(out), pos


def decode_records(
    buf: BytesLike,
    *,
    verify: bool = True,
    include_control: bool = False,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[Record]:
    """Every record of a blob of any magic (0, 1, 2), in order.

    A trailing partial entry is skipped (see :func:`iter_batches`).

    Args:
        buf: the records blob.
        verify: check each entry's CRC.
        include_control: also yield the records of control batches (transaction
            markers), which consumers normally skip.
        max_size: the largest decompressed payload accepted per entry.

    Yields:
        :class:`Record` objects, offsets absolute.

    Raises:
        DecodeError: anything malformed.
    """
    from .legacy import decode_legacy_entry

    for header, view in iter_batches(buf):
        if header.magic == 2:
            if not include_control and header.attributes & _CONTROL_BIT:
                continue
            yield from decode_batch(view, verify=verify, max_size=max_size).records
        else:
            yield from decode_legacy_entry(view, verify=verify, max_size=max_size)


# -- encoding ------------------------------------------------------------------------------------------


_BYTE_BUFFERS = (bytes, bytearray, memoryview)


def _headers_bytes(headers: Iterable[tuple[str, BytesLike | None]]) -> bytes:
    """A record's header count and headers."""
    uv = _UV or _uv_table()
    half = _UV_HALF
    parts: list[bytes] = [b""]
    count = 0
    for name, value in headers:
        # TypeError rather than EncodeError: the callers' fallback locates the record.
        if type(name) is not str:
            raise TypeError(f"header key {name!r} is not a str")
        raw = name.encode()
        n = len(raw)
        parts += (uv[n << 1] if n < half else _uvarint(n << 1), raw)
        if value is None:
            parts.append(b"\x01")
        else:
            if type(value) is not bytes:
                if not isinstance(value, _BYTE_BUFFERS):
                    raise TypeError(f"header value {type(value).__name__} is not bytes")
                value = bytes(value)
            n = len(value)
            parts += (uv[n << 1] if n < half else _uvarint(n << 1), value)
        count += 1
    parts[0] = uv[count << 1] if count < half else _uvarint(count << 1)
    return b"".join(parts)


def _encode_record(offset_delta: int, ts_delta: int, key: Any, value: Any, headers: Any) -> bytes:
    """One record, length prefix included (the builder's per-append path)."""
    uv = _UV or _uv_table()
    if -_UV_HALF <= ts_delta < _UV_HALF:
        t = uv[ts_delta << 1 if ts_delta >= 0 else ((-ts_delta) << 1) - 1]
    else:
        t = _zz64(ts_delta, "timestamp")
    o = uv[offset_delta << 1] if offset_delta < _UV_HALF else _zz32(offset_delta, "offset_delta")
    if key is None:
        kh = b"\x01"
        key = b""
    else:
        n = len(key)
        kh = uv[n << 1] if n < _UV_HALF else _zz32(n, "key")
    if value is None:
        vh = b"\x01"
        value = b""
    else:
        n = len(value)
        vh = uv[n << 1] if n < _UV_HALF else _zz32(n, "value")
    h = _headers_bytes(headers) if headers else b"\x00"
    body = b"".join((b"\x00", t, o, kh, key, vh, value, h))
    n = len(body)
    return (uv[n << 1] if n < _UV_HALF else _zz32(n, "length")) + body


def _encode_all(records: Sequence[RecordInput], base_ts: int) -> tuple[bytes, int]:
    """Encode every record; returns (payload, max_timestamp)."""
    # Lengths are computed arithmetically so each record costs one extend of a
    # tuple of ready-made pieces and a single join at the end.
    uv = _UV or _uv_table()
    half = _UV_HALF
    parts: list[Any] = []
    expected = 0
    mx = records[0][0]
    for i, (ts, key, value, headers) in enumerate(records):
        d = ts - base_ts
        if -half <= d < half:
            t = uv[d << 1 if d >= 0 else ((-d) << 1) - 1]
        else:
            t = _zz64(d, f"records[{i}].timestamp")
        o = uv[i << 1] if i < half else _zz32(i, "offset_delta")
        if key is None:
            kh = b"\x01"
            key = b""
            kl = 0
        else:
            kl = len(key)
            kh = uv[kl << 1] if kl < half else _zz32(kl, f"records[{i}].key")
        if value is None:
            vh = b"\x01"
            value = b""
            vl = 0
        else:
            vl = len(value)
            vh = uv[vl << 1] if vl < half else _zz32(vl, f"records[{i}].value")
        h = _headers_bytes(headers) if headers else b"\x00"
        n = 1 + len(t) + len(o) + len(kh) + kl + len(vh) + vl + len(h)
        lh = uv[n << 1] if n < half else _zz32(n, f"records[{i}].length")
        parts += (lh, b"\x00", t, o, kh, key, vh, value, h)
        expected += len(lh) + n
        if ts > mx:
            mx = ts
    payload = b"".join(parts)
    if len(payload) != expected:
        # len() of a key or value did not count bytes (a memoryview of wider items).
        raise EncodeError(
            "keys and values must be byte buffers", message_name=_NAME, field="records"
        )
    return payload, mx


def _check_header_fields(
    base_offset: int,
    partition_leader_epoch: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> None:
    for name, value, bits in (
        ("base_offset", base_offset, 64),
        ("partition_leader_epoch", partition_leader_epoch, 32),
        ("producer_id", producer_id, 64),
        ("producer_epoch", producer_epoch, 16),
        ("base_sequence", base_sequence, 32),
    ):
        if type(value) is not int or not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            raise EncodeError(f"{value!r} is not an int{bits}", message_name=_NAME, field=name)


def assemble_batch(
    payload: bytes,
    count: int,
    *,
    base_offset: int,
    base_timestamp: int,
    max_timestamp: int,
    compression: Compression | int,
    compression_level: int | None,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    attributes: int,
    partition_leader_epoch: int,
    last_offset_delta: int | None = None,
) -> bytes:
    _check_header_fields(
        base_offset, partition_leader_epoch, producer_id, producer_epoch, base_sequence
    )
    codec = int(compression)
    if codec:
        payload = compress(codec, payload, level=compression_level)
    try:
        tail = _TAIL.pack(
            attributes | codec,
            count - 1 if last_offset_delta is None else last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    except struct.error as exc:
        raise EncodeError(f"header field out of range: {exc}", message_name=_NAME) from None
    batch_length = MIN_BATCH_LENGTH + len(payload)
    if batch_length > _INT32_MAX:
        raise EncodeError(f"batch of {batch_length} bytes is too large", message_name=_NAME)
    crc = crc32c(payload, crc32c(tail))
    head = _HEAD.pack(base_offset, batch_length, partition_leader_epoch, 2, crc)
    return b"".join((head, tail, payload))


def _attributes(is_transactional: bool, is_control: bool, timestamp_type: int) -> int:
    if timestamp_type not in (0, 1):
        raise EncodeError(f"timestamp_type {timestamp_type!r} is not 0 or 1", message_name=_NAME)
    return (
        (_TRANSACTIONAL_BIT if is_transactional else 0)
        | (_CONTROL_BIT if is_control else 0)
        | (_TIMESTAMP_TYPE_BIT if timestamp_type else 0)
    )


def encode_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    compression: Compression | int = Compression.NONE,
    compression_level: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: int = 0,
    base_timestamp: int | None = None,
) -> bytes:
    """Encode one magic 2 batch.

    Args:
        records: ``(timestamp, key, value, headers)`` tuples; keys and values are
            bytes or None, headers a sequence of ``(str, bytes | None)``. Offset
            deltas are 0, 1, 2... in order.
        base_offset: the first record's offset (producers send 0).
        compression: the codec for the records payload.
        compression_level: codec level; None for Java's default.
        producer_id: the idempotent producer's id (-1: none).
        producer_epoch: its epoch (-1: none).
        base_sequence: the first record's sequence number (-1: none).
        is_transactional: the batch's transactional attribute bit.
        is_control: the batch's control attribute bit.
        partition_leader_epoch: -1 from producers; set by the leader.
        timestamp_type: 0 create time, 1 log-append time.
        base_timestamp: defaults to the first record's timestamp; record
            timestamps are stored relative to it.

    Returns:
        The batch.

    Raises:
        EncodeError: no records, or a value the format cannot carry.
    """
    if not records:
        raise EncodeError("a batch needs at least one record", message_name=_NAME)
    attributes = _attributes(is_transactional, is_control, timestamp_type)
    try:
        base_ts = records[0][0] if base_timestamp is None else base_timestamp
        sp = _speedups
        # The C encoder returns None for whatever it leaves to Python (errors included).
        if sp is not None and compression == Compression.NONE:
            # Uncompressed: the whole batch in one allocation, the records not
            # copied again behind the header.
            whole = sp.encode_batch(
                records,
                base_ts,
                base_offset,
                partition_leader_epoch,
                attributes,
                producer_id,
                producer_epoch,
                base_sequence,
                crc32c_function,
            )
            if whole is not None:
                return whole[0]  # type: ignore[no-any-return]
        fast = None if sp is None else sp.encode_records(records, base_ts)
        payload, max_ts = _encode_all(records, base_ts) if fast is None else fast
    except (TypeError, ValueError) as exc:
        if isinstance(exc, CodecError):
            raise
        raise _bad_input(records, exc) from None
    return assemble_batch(
        payload,
        len(records),
        base_offset=base_offset,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        compression=compression,
        compression_level=compression_level,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        attributes=attributes,
        partition_leader_epoch=partition_leader_epoch,
    )


def rebuild_batch(header: RecordBatchHeader, records: Sequence[Record]) -> bytes:
    """A batch holding some of another batch's records (what log compaction writes).

    Everything in the header is kept except what the retained records change:
    the base offset, the last offset delta, the producer fields, the attributes
    (codec included: the records are compressed again) and the base timestamp
    stay; each record keeps its own offset and timestamp; ``records_count`` and
    the CRC are recomputed, and so is ``max_timestamp`` under create time (it
    stays under log-append time, and when no record is left). Keeping the offset
    range and the sequence range is what lets a reader, and a broker rebuilding
    its producer state, treat the batch as the one originally written. With no
    records the result is an empty, uncompressed batch: a header that keeps the
    range.

    Args:
        header: the original batch's header.
        records: records decoded from it (:func:`decode_batch`), in offset order.

    Returns:
        The batch.

    Raises:
        EncodeError: a record lies outside the batch's offset range or out of order.
    """
    base = header.base_offset
    base_ts = header.base_timestamp
    last = header.last_offset
    parts: list[bytes] = []
    max_ts = header.max_timestamp
    log_append = bool(header.attributes & _TIMESTAMP_TYPE_BIT)
    if records and not log_append:
        max_ts = max(record.timestamp for record in records)
    previous = base - 1
    for i, record in enumerate(records):
        if not previous < record.offset <= last:
            raise EncodeError(
                f"offset {record.offset} is not after {previous} within [{base}, {last}]",
                message_name=_NAME,
                field=f"records[{i}].offset",
            )
        previous = record.offset
        parts.append(
            _encode_record(
                record.offset - base,
                record.timestamp - base_ts,
                record.key,
                record.value,
                record.headers,
            )
        )
    return assemble_batch(
        b"".join(parts),
        len(records),
        base_offset=base,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        compression=header.attributes & _CODEC_MASK if records else 0,
        compression_level=None,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        attributes=header.attributes & ~_CODEC_MASK,
        partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta,
    )


def _bad_input(records: Sequence[Any], exc: Exception) -> EncodeError:
    """Find the record (and field) behind a TypeError from the fast path."""
    for i, item in enumerate(records):
        where = f"records[{i}]"
        if not isinstance(item, tuple | list) or len(item) != 4:
            return EncodeError(
                "expected a (timestamp, key, value, headers) tuple", message_name=_NAME, field=where
            )
        ts, key, value, headers = item
        if type(ts) is not int:
            return EncodeError(
                f"{ts!r} is not an int", message_name=_NAME, field=f"{where}.timestamp"
            )
        for name, v in (("key", key), ("value", value)):
            if v is not None and not isinstance(v, bytes | bytearray | memoryview):
                return EncodeError(
                    f"{type(v).__name__} is not bytes", message_name=_NAME, field=f"{where}.{name}"
                )
        try:
            _headers_bytes(headers)
        except (TypeError, ValueError) as err:
            return EncodeError(str(err), message_name=_NAME, field=f"{where}.headers")
    return EncodeError(str(exc), message_name=_NAME)


class RecordBatchBuilder:
    """Accumulates records for one magic 2 batch, as a producer's accumulator does.

    Each :meth:`append` encodes its record at once, so :attr:`estimated_size` is
    exact for an uncompressed batch and an upper bound for a compressed one,
    and :meth:`build` only compresses and writes the header.

    Args:
        max_bytes: :meth:`append` refuses a record that would take the batch
            past this size, except the first record, which is always accepted.
        compression, compression_level: the records payload's codec and level.
        producer_id, producer_epoch, base_sequence, is_transactional: defaults
            for :meth:`build`, which may override them when the batch is drained.
    """

    __slots__ = (
        "_base_ts",
        "_compression",
        "_count",
        "_is_transactional",
        "_level",
        "_max_bytes",
        "_max_ts",
        "_parts",
        "_producer_epoch",
        "_producer_id",
        "_sequence",
        "_size",
    )

    def __init__(
        self,
        *,
        max_bytes: int = 16384,
        compression: Compression | int = Compression.NONE,
        compression_level: int | None = None,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
    ) -> None:
        if int(compression) not in range(5):
            raise EncodeError(f"unknown compression codec {compression!r}", message_name=_NAME)
        self._max_bytes = max_bytes
        self._compression = Compression(compression)
        self._level = compression_level
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._sequence = base_sequence
        self._is_transactional = is_transactional
        self._parts: list[bytes] = []
        self._size = BATCH_HEADER_SIZE
        self._count = 0
        self._base_ts = 0
        self._max_ts = 0

    @property
    def record_count(self) -> int:
        """Records appended so far."""
        return self._count

    @property
    def estimated_size(self) -> int:
        """The batch's size if built now without compression (an upper bound with it)."""
        return self._size

    def append(
        self,
        timestamp: int,
        key: BytesLike | None,
        value: BytesLike | None,
        headers: Sequence[tuple[str, BytesLike | None]] = (),
    ) -> int | None:
        """Add a record.

        Args:
            timestamp: milliseconds since the epoch (the codec reads no clock).
            key, value: bytes or None.
            headers: ``(str, bytes | None)`` pairs.

        Returns:
            The record's offset delta, or None when the batch is full (nothing was
            added).

        Raises:
            EncodeError: a value the format cannot carry.
        """
        count = self._count
        if count == 0:
            if type(timestamp) is not int:
                raise EncodeError(
                    f"{timestamp!r} is not an int", message_name=_NAME, field="timestamp"
                )
            self._base_ts = self._max_ts = timestamp
        try:
            sp = _speedups
            ts_delta = timestamp - self._base_ts
            data = None if sp is None else sp.encode_record(count, ts_delta, key, value, headers)
            if data is None:
                data = _encode_record(count, ts_delta, key, value, headers)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, CodecError):
                raise
            raise _bad_input([(timestamp, key, value, headers)], exc) from None
        if count and self._size + len(data) > self._max_bytes:
            return None
        self._parts.append(data)
        self._size += len(data)
        self._count = count + 1
        if timestamp > self._max_ts:
            self._max_ts = timestamp
        return count

    def build(
        self,
        *,
        base_offset: int = 0,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        base_sequence: int | None = None,
        is_transactional: bool | None = None,
        partition_leader_epoch: int = -1,
    ) -> bytes:
        """Encode the batch; the builder stays usable (e.g. to rebuild on retry).

        Producer fields left as None take the builder's defaults.

        Raises:
            EncodeError: no records appended, or a header field out of range.
        """
        if not self._count:
            raise EncodeError("a batch needs at least one record", message_name=_NAME)
        transactional = self._is_transactional if is_transactional is None else is_transactional
        return assemble_batch(
            b"".join(self._parts),
            self._count,
            base_offset=base_offset,
            base_timestamp=self._base_ts,
            max_timestamp=self._max_ts,
            compression=self._compression,
            compression_level=self._level,
            producer_id=self._producer_id if producer_id is None else producer_id,
            producer_epoch=self._producer_epoch if producer_epoch is None else producer_epoch,
            base_sequence=self._sequence if base_sequence is None else base_sequence,
            attributes=_attributes(transactional, False, 0),
            partition_leader_epoch=partition_leader_epoch,
        )


# -- control records ------------------------------------------------------------------------------


class ControlRecordType(enum.IntEnum):
    """The ``type`` in a control record's key."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


class ControlRecord(NamedTuple):
    """A decoded control record.

    ``type`` is a :class:`ControlRecordType` when known (a plain int otherwise);
    ``version`` is the key's version; ``coordinator_epoch`` comes from the value
    of transaction markers (ABORT/COMMIT) and is -1 for other types.
    """

    type: int
    version: int
    coordinator_epoch: int


def decode_control_record(record: Record) -> ControlRecord:
    """Read a control batch's record: key ``(int16 version, int16 type)``, and for
    transaction markers value ``(int16 version, int32 coordinator_epoch)``.

    Raises:
        DecodeError: key or marker value too short, or a negative version.
    """
    key = record.key
    if key is None or len(key) < 4:
        raise DecodeError(
            "control record key needs 4 bytes", message_name="ControlRecord", field="key"
        )
    version, kind = _HH.unpack_from(key)
    if version < 0:
        raise DecodeError(f"invalid version {version}", message_name="ControlRecord", field="key")
    try:
        kind = ControlRecordType(kind)
    except ValueError:
        pass
    epoch = -1
    if kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        value = record.value
        if value is None or len(value) < 6:
            raise DecodeError(
                "transaction marker value needs 6 bytes",
                message_name="ControlRecord",
                field="value",
            )
        epoch = _HI.unpack_from(value)[1]
    return ControlRecord(kind, version, epoch)


def encode_control_batch(
    marker_type: ControlRecordType | int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker batch (transactional + control, one record).

    Args:
        marker_type: ABORT (0) or COMMIT (1).
        producer_id, producer_epoch: the transaction's producer.
        coordinator_epoch: the transaction coordinator's epoch.
        timestamp: the marker's timestamp (the codec reads no clock).
        base_offset: where the marker goes in the log.
        partition_leader_epoch: the writing leader's epoch.

    Raises:
        EncodeError: a marker type other than ABORT/COMMIT or a field out of range.
    """
    if marker_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise EncodeError(f"marker type {marker_type!r} is not ABORT or COMMIT", message_name=_NAME)
    try:
        key = _HH.pack(0, marker_type)
        value = _HI.pack(0, coordinator_epoch)
    except struct.error:
        raise EncodeError(
            f"coordinator_epoch {coordinator_epoch!r} is not an int32", message_name="ControlRecord"
        ) from None
    return encode_batch(
        [(timestamp, key, value, ())],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


# -- declarative definitions ----------------------------------------------------------------------
# The formats above as construct structures. They are the readable statement of
# the layout and the oracle the hand-written code is tested against. They parse
# to and build from plain dicts; ``batch_length`` and ``crc`` are ordinary
# fields (building needs them). Every class below compiles to code that reads
# through the same checked functions as the interpreted path.


def _link(code: Any, obj: object) -> str:
    code.linkedinstances[id(obj)] = obj
    return f"linkedinstances[{id(obj)}]"


def _sub_reader(io: BytesIO, n: Any) -> BytesIO:
    if type(n) is not int or n < 0:
        raise DecodeError(f"invalid length {n!r}")
    return BytesIO(_wire.r_exact(io, n))


def _r_vbytes(io: BytesIO) -> bytes | None:
    n = _wire.r_varint(io)
    if n < 0:
        if n != -1:
            raise DecodeError(f"invalid length {n}")
        return None
    return _wire.r_exact(io, n)


def _w_vbytes(io: BytesIO, obj: Any) -> None:
    if obj is None:
        io.write(b"\x01")
        return
    if not isinstance(obj, bytes | bytearray | memoryview):
        raise EncodeError(f"{type(obj).__name__} is not bytes")
    _wire.w_varint(io, len(obj))
    io.write(obj)


def _r_vstring(io: BytesIO) -> str:
    n = _wire.r_varint(io)
    if n < 0:
        raise DecodeError(f"invalid length {n} for a string")
    try:
        return _wire.r_exact(io, n).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 at byte {exc.start}") from None


def _w_vstring(io: BytesIO, obj: Any) -> None:
    if type(obj) is not str:
        raise EncodeError(f"{obj!r} is not a str")
    raw = obj.encode("utf-8")
    _wire.w_varint(io, len(raw))
    io.write(raw)


def _check_magic(found: int, expected: int) -> int:
    if found != expected:
        raise DecodeError(f"magic {found} is not {expected}")
    return found


def _check_count(io: BytesIO, n: Any) -> int:
    if type(n) is not int or n < 0:
        raise DecodeError(f"invalid count {n!r}")
    left = _wire.remaining(io)
    if n > left:
        raise DecodeError(f"count {n} exceeds the {left} bytes left")
    return n


class _Function(Construct):  # type: ignore[misc]
    """A field read and written by a pair of functions of this module."""

    def __init__(self, name: str, reader: Any, writer: Any) -> None:
        super().__init__()
        self.kafka_type = name
        self.reader = reader
        self.writer = writer
        self.flagbuildnone = False

    def __repr__(self) -> str:
        return f"<{self.kafka_type}>"

    def _parse(self, stream: BytesIO, context: Any, path: str) -> Any:
        return self.reader(stream)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        self.writer(stream, obj)
        return obj

    def _emitparse(self, code: Any) -> str:
        return f"{_link(code, self.reader)}(io)"

    def _emitbuild(self, code: Any) -> str:
        return f"({_link(code, self.writer)}(io, obj), obj)[1]"


VarIntBytes = _Function("varint nullable bytes", _r_vbytes, _w_vbytes)
VarIntString = _Function("varint string", _r_vstring, _w_vstring)


class Magic(Construct):  # type: ignore[misc]
    """The int8 magic byte, which must equal ``value`` (built without being given)."""

    def __init__(self, value: int) -> None:
        super().__init__()
        self.value = value
        self.flagbuildnone = True

    def _parse(self, stream: BytesIO, context: Any, path: str) -> Any:
        return _check_magic(_wire.r_i8(stream), self.value)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        _wire.w_i8(stream, self.value)
        return self.value

    def _emitparse(self, code: Any) -> str:
        return f"{_link(code, _check_magic)}({_link(code, _wire.r_i8)}(io), {self.value})"

    def _emitbuild(self, code: Any) -> str:
        return f"({_link(code, _wire.w_i8)}(io, {self.value}), {self.value})[1]"


class Ref(Construct):  # type: ignore[misc]
    """A field that later fields refer to through ``this``.

    Compiled building stores the value of each field's build expression in the
    context, and a primitive's build expression need not evaluate to the field's
    value; the wrapper makes sure a field read back through ``this`` while
    building (a length, a count, the attributes) keeps its value.
    """

    def __init__(self, subcon: Construct) -> None:
        super().__init__()
        self.subcon = subcon
        self.flagbuildnone = subcon.flagbuildnone

    def _parse(self, stream: BytesIO, context: Any, path: str) -> Any:
        return self.subcon._parsereport(stream, context, path)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        self.subcon._build(obj, stream, context, path)
        return obj

    def _emitparse(self, code: Any) -> str:
        return str(self.subcon._compileparse(code))

    def _emitbuild(self, code: Any) -> str:
        return f"({self.subcon._compilebuild(code)}, obj)[1]"


class LengthPrefixed(Construct):  # type: ignore[misc]
    """``subcon`` preceded by its size in bytes, written by ``lengthfield``.

    Parsing reads exactly that many bytes (never trusting the length before the
    bytes are there) and requires ``subcon`` to use all of them; building
    computes the length.
    """

    def __init__(self, lengthfield: Construct, subcon: Construct) -> None:
        super().__init__()
        self.lengthfield = lengthfield
        self.subcon = subcon
        self.flagbuildnone = False

    def _parse(self, stream: BytesIO, context: Any, path: str) -> Any:
        sub = _sub_reader(stream, self.lengthfield._parsereport(stream, context, path))
        value = self.subcon._parsereport(sub, context, path)
        _wire.check_consumed(sub, "length-prefixed data")
        return value

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        sub = BytesIO()
        self.subcon._build(obj, sub, context, path)
        data = sub.getvalue()
        self.lengthfield._build(len(data), stream, context, path)
        stream.write(data)
        return obj

    def _emitparse(self, code: Any) -> str:
        fname = f"parse_length_prefixed_{code.allocateId()}"
        code.append(f"""
            def {fname}(io, this):
                io = {_link(code, _sub_reader)}(io, {self.lengthfield._compileparse(code)})
                value = {self.subcon._compileparse(code)}
                {_link(code, _wire.check_consumed)}(io, "length-prefixed data")
                return value
        """)
        return f"{fname}(io, this)"

    def _emitbuild(self, code: Any) -> str:
        fname = f"build_length_prefixed_{code.allocateId()}"
        code.append(f"""
            def {fname}(obj, io, this):
                value = obj
                outer, io = io, BytesIO()
                {self.subcon._compilebuild(code)}
                data = io.getvalue()
                io = outer
                obj = len(data)
                {self.lengthfield._compilebuild(code)}
                io.write(data)
                return value
        """)
        return f"{fname}(obj, io, this)"


class Sized(Construct):  # type: ignore[misc]
    """``subcon`` filling exactly ``length`` bytes (a ``this`` expression)."""

    def __init__(self, length: Any, subcon: Construct) -> None:
        super().__init__()
        self.length = length
        self.subcon = subcon
        self.flagbuildnone = subcon.flagbuildnone

    def _parse(self, stream: BytesIO, context: Any, path: str) -> Any:
        sub = _sub_reader(stream, evaluate(self.length, context))
        value = self.subcon._parsereport(sub, context, path)
        _wire.check_consumed(sub, "sized data")
        return value

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        sub = BytesIO()
        self.subcon._build(obj, sub, context, path)
        _check_sized(sub.getvalue(), evaluate(self.length, context))
        stream.write(sub.getvalue())
        return obj

    def _emitparse(self, code: Any) -> str:
        fname = f"parse_sized_{code.allocateId()}"
        code.append(f"""
            def {fname}(io, this):
                io = {_link(code, _sub_reader)}(io, {self.length!r})
                value = {self.subcon._compileparse(code)}
                {_link(code, _wire.check_consumed)}(io, "sized data")
                return value
        """)
        return f"{fname}(io, this)"

    def _emitbuild(self, code: Any) -> str:
        fname = f"build_sized_{code.allocateId()}"
        code.append(f"""
            def {fname}(obj, io, this):
                value = obj
                outer, io = io, BytesIO()
                {self.subcon._compilebuild(code)}
                {_link(code, _check_sized)}(io.getvalue(), {self.length!r})
                outer.write(io.getvalue())
                return value
        """)
        return f"{fname}(obj, io, this)"


def _check_sized(data: bytes, length: Any) -> None:
    if len(data) != length:
        raise EncodeError(f"{len(data)} bytes where the length field says {length!r}")


class Counted(Construct):  # type: ignore[misc]
    """``count`` elements (a ``this`` expression, or None to read a varint count first)."""

    def __init__(self, count: Any, subcon: Construct) -> None:
        super().__init__()
        self.count = count
        self.subcon = subcon
        self.flagbuildnone = False

    def _parse(self, stream: BytesIO, context: Any, path: str) -> Any:
        n = _wire.r_varint(stream) if self.count is None else evaluate(self.count, context)
        out = []
        for i in range(_check_count(stream, n)):
            try:
                out.append(self.subcon._parsereport(stream, context, path))
            except CodecError as exc:
                exc.add_field_prefix(f"[{i}]")
                raise
        return out

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        if self.count is None:
            _wire.w_varint(stream, len(obj))
        for i, item in enumerate(obj):
            try:
                self.subcon._build(item, stream, context, path)
            except CodecError as exc:
                exc.add_field_prefix(f"[{i}]")
                raise
        return obj

    def _emitparse(self, code: Any) -> str:
        fname = f"parse_counted_{code.allocateId()}"
        count = f"{_link(code, _wire.r_varint)}(io)" if self.count is None else repr(self.count)
        code.append(f"""
            def {fname}(io, this):
                out = []
                i = 0
                try:
                    for i in range({_link(code, _check_count)}(io, {count})):
                        out.append({self.subcon._compileparse(code)})
                except {_link(code, CodecError)} as exc:
                    exc.add_field_prefix(f"[{{i}}]")
                    raise
                return out
        """)
        return f"{fname}(io, this)"

    def _emitbuild(self, code: Any) -> str:
        fname = f"build_counted_{code.allocateId()}"
        prefix = "" if self.count is not None else f"{_link(code, _wire.w_varint)}(io, len(items))"
        code.append(f"""
            def {fname}(items, io, this):
                {prefix}
                i = 0
                try:
                    for i, obj in enumerate(items):
                        {self.subcon._compilebuild(code)}
                except {_link(code, CodecError)} as exc:
                    exc.add_field_prefix(f"[{{i}}]")
                    raise
                return items
        """)
        return f"{fname}(obj, io, this)"


RecordHeaderV2 = Struct(
    "key" / VarIntString,
    "value" / VarIntBytes,
)

RecordV2 = LengthPrefixed(
    VarInt,
    Struct(
        "attributes" / Int8,
        "timestamp_delta" / VarLong,
        "offset_delta" / VarInt,
        "key" / VarIntBytes,
        "value" / VarIntBytes,
        "headers" / Counted(None, RecordHeaderV2),
    ),
)

RecordBatchV2 = Struct(
    "base_offset" / Int64,
    "batch_length" / Ref(Int32),
    "partition_leader_epoch" / Int32,
    "magic" / Magic(2),
    "crc" / UInt32,
    "attributes" / Ref(Int16),
    "last_offset_delta" / Int32,
    "base_timestamp" / Int64,
    "max_timestamp" / Int64,
    "producer_id" / Int64,
    "producer_epoch" / Int16,
    "base_sequence" / Int32,
    "records_count" / Ref(Int32),
    "records"
    / Sized(
        this.batch_length - MIN_BATCH_LENGTH,
        IfThenElse(
            this.attributes & _CODEC_MASK == 0,
            Counted(this.records_count, RecordV2),
            GreedyBytes,
        ),
    ),
)
