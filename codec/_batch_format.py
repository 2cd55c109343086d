"""The record batch format's constants and varints, shared by the batch modules.

Job: the numbers of the magic 2 layout (header size, field positions, attribute
bits, the ``struct`` formats) and the varint helpers that the hand-written
encoder and decoder inline. The layout itself is described in
:mod:`trafka.codec.records`, which re-exports the public names.

Rules: nothing here does I/O or keeps state beyond the lookup tables, which are
made on first use (``_UV or _uv_table()``, ``_ZZ2 or _zz2_table()``) and then
only read; a varint longer than its type allows raises :class:`_VarintError`,
which callers turn into a located DecodeError.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar

from .errors import EncodeError

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


def _zigzag_tail(data: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Finish reading a zig-zag varint whose first byte at ``pos`` had its high bit set.

    Returns (value, position after it). Raises ``IndexError`` when the data
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
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise _VarintError(f"{'varint' if max_bytes == 5 else 'varlong'} longer than {max_bytes} bytes")


class _VarintError(Exception):
    """Internal: a malformed varint; converted to a located DecodeError."""


# Zig-zag decoding of every 1- and 2-byte varint, indexed by the raw value (the
# 2-byte table made when first needed, as _UV is).
_ZZ1 = [(b >> 1) ^ -(b & 1) for b in range(0x80)]
_ZZ2: list[int] = []


def _zz2_table() -> list[int]:
    if not _ZZ2:
        _ZZ2[:] = [(n >> 1) ^ -(n & 1) for n in range(1 << 14)]
    return _ZZ2


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
