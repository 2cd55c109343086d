"""Checked readers and writers for Kafka's primitive types.

The stream functions (``r_*``/``w_*``) are what the construct classes in
:mod:`trafka.codec.primitives` call from their interpreted ``_parse``/``_build``,
and what a primitive compiles to inside construct's own containers. They are the
reference for strictness and for error messages: compiled schemas run an inlined
fast path, and hand whatever it refuses back to these (see the primitives module).

Rules every reader follows:

* never trust a length before the bytes are there: ``io.read(n)`` on a
  ``BytesIO`` returns at most what is buffered, and we compare the length we got
  with the length we asked for;
* a count (array length, string length) larger than the bytes that remain is a
  lie and is rejected before any element is read, as Kafka's Java code does;
* unsigned varints are at most 5 bytes and must fit 32 bits; zig-zag varints at
  most 5 bytes (int32) and varlongs at most 10 bytes (int64);
* every failure raises :class:`~trafka.codec.errors.DecodeError` (on parse) or
  :class:`~trafka.codec.errors.EncodeError` (on build) without a location; the
  schema that called us adds the field path.

The ``b_*`` readers at the end work on a ``bytes`` buffer and an offset instead
of a stream, for the code that compiled schemas generate: they return
``(value, new_offset)`` and enforce the same limits as their stream twins.
"""

from __future__ import annotations

import struct
import uuid
from io import BytesIO
from typing import Any

from .errors import CodecError, DecodeError, EncodeError

# No __all__: the source that compiled schemas emit star-imports this module and
# needs every public reader, writer and error class.
_EXPORTS = (BytesIO, CodecError, DecodeError, EncodeError, Any)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")

_u_i8 = _I8.unpack
_u_i16 = _I16.unpack
_u_i32 = _I32.unpack
_u_i64 = _I64.unpack
_u_u16 = _U16.unpack
_u_u32 = _U32.unpack
_u_f64 = _F64.unpack

NULL_UUID = uuid.UUID(int=0)


def short(wanted: int, got: int) -> DecodeError:
    return DecodeError(f"truncated: needed {wanted} bytes, {got} left")


def remaining(io: BytesIO) -> int:
    """Bytes left in ``io`` (O(1): two seeks, no copy)."""
    pos = io.tell()
    end = io.seek(0, 2)
    io.seek(pos)
    return end - pos


def r_exact(io: BytesIO, n: int) -> bytes:
    data = io.read(n)
    if len(data) != n:
        raise short(n, len(data))
    return data


# -- fixed-size integers ------------------------------------------------------


def r_i8(io: BytesIO) -> int:
    b = io.read(1)
    if len(b) != 1:
        raise short(1, 0)
    return _u_i8(b)[0]  # type: ignore[no-any-return]


def r_i16(io: BytesIO) -> int:
    b = io.read(2)
    if len(b) != 2:
        raise short(2, len(b))
    return _u_i16(b)[0]  # type: ignore[no-any-return]


def r_i32(io: BytesIO) -> int:
    b = io.read(4)
    if len(b) != 4:
        raise short(4, len(b))
    return _u_i32(b)[0]  # type: ignore[no-any-return]


def r_i64(io: BytesIO) -> int:
    b = io.read(8)
    if len(b) != 8:
        raise short(8, len(b))
    return _u_i64(b)[0]  # type: ignore[no-any-return]


def r_u16(io: BytesIO) -> int:
    b = io.read(2)
    if len(b) != 2:
        raise short(2, len(b))
    return _u_u16(b)[0]  # type: ignore[no-any-return]


def r_u32(io: BytesIO) -> int:
    b = io.read(4)
    if len(b) != 4:
        raise short(4, len(b))
    return _u_u32(b)[0]  # type: ignore[no-any-return]


def r_f64(io: BytesIO) -> float:
    b = io.read(8)
    if len(b) != 8:
        raise short(8, len(b))
    return _u_f64(b)[0]  # type: ignore[no-any-return]


def r_bool(io: BytesIO) -> bool:
    b = io.read(1)
    if len(b) != 1:
        raise short(1, 0)
    # Java reads any non-zero byte as true; so do we.
    return b[0] != 0


def _packer(st: struct.Struct, kind: str) -> Any:
    pack = st.pack

    def write(io: BytesIO, value: Any) -> None:
        try:
            io.write(pack(value))
        except (struct.error, TypeError) as exc:
            raise EncodeError(f"{value!r} is not a valid {kind}") from exc

    write.__name__ = f"w_{kind}"
    return write


w_i8 = _packer(_I8, "int8")
w_i16 = _packer(_I16, "int16")
w_i32 = _packer(_I32, "int32")
w_i64 = _packer(_I64, "int64")
w_u16 = _packer(_U16, "uint16")
w_u32 = _packer(_U32, "uint32")
w_f64 = _packer(_F64, "float64")


def w_bool(io: BytesIO, value: Any) -> None:
    if value is not True and value is not False:
        raise EncodeError(f"{value!r} is not a bool")
    io.write(b"\x01" if value else b"\x00")


# -- varints --------------------------------------------------------------------


def r_uvarint(io: BytesIO) -> int:
    """Unsigned varint of at most 5 bytes whose value fits 32 bits."""
    b = io.read(1)
    if not b:
        raise short(1, 0)
    v = b[0]
    if v < 0x80:
        return v
    result = v & 0x7F
    shift = 7
    while True:
        b = io.read(1)
        if not b:
            raise DecodeError("truncated varint")
        v = b[0]
        result |= (v & 0x7F) << shift
        if v < 0x80:
            break
        shift += 7
        if shift >= 35:
            raise DecodeError("unsigned varint longer than 5 bytes")
    if result > 0xFFFFFFFF:
        raise DecodeError("unsigned varint does not fit 32 bits")
    return result


def _r_varbits(io: BytesIO, max_bytes: int, what: str) -> int:
    result = 0
    shift = 0
    limit = 7 * max_bytes
    while True:
        b = io.read(1)
        if not b:
            raise DecodeError(f"truncated {what}")
        v = b[0]
        result |= (v & 0x7F) << shift
        if v < 0x80:
            return result
        shift += 7
        if shift >= limit:
            raise DecodeError(f"{what} longer than {max_bytes} bytes")


def r_varint(io: BytesIO) -> int:
    """Zig-zag int32 varint (at most 5 bytes)."""
    raw = _r_varbits(io, 5, "varint")
    if raw > 0xFFFFFFFF:
        raise DecodeError("varint does not fit 32 bits")
    return (raw >> 1) ^ -(raw & 1)


def r_varlong(io: BytesIO) -> int:
    """Zig-zag int64 varlong (at most 10 bytes)."""
    raw = _r_varbits(io, 10, "varlong")
    if raw > 0xFFFFFFFFFFFFFFFF:
        raise DecodeError("varlong does not fit 64 bits")
    return (raw >> 1) ^ -(raw & 1)


def uvarint_bytes(value: int) -> bytes:
    if value < 0x80:
        if value < 0:
            raise EncodeError(f"{value!r} is negative; unsigned varint expected")
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def w_uvarint(io: BytesIO, value: Any) -> None:
    if type(value) is not int or not 0 <= value <= 0xFFFFFFFF:
        raise EncodeError(f"{value!r} is not a valid unsigned varint (0..2**32-1)")
    io.write(uvarint_bytes(value))


def w_varint(io: BytesIO, value: Any) -> None:
    if type(value) is not int or not -(2**31) <= value < 2**31:
        raise EncodeError(f"{value!r} is not a valid int32 varint")
    io.write(uvarint_bytes((value << 1) ^ (value >> 31)))


def w_varlong(io: BytesIO, value: Any) -> None:
    if type(value) is not int or not -(2**63) <= value < 2**63:
        raise EncodeError(f"{value!r} is not a valid int64 varlong")
    io.write(uvarint_bytes((value << 1) ^ (value >> 63)))


# -- lengths ----------------------------------------------------------------------


def _check_len(io: BytesIO, n: int) -> None:
    left = remaining(io)
    if n > left:
        raise DecodeError(f"length {n} exceeds the {left} bytes left")


def r_len16(io: BytesIO, nullable: bool) -> int:
    """Classic string length: int16, -1 for null. Returns -1 for null."""
    n = r_i16(io)
    if n < 0:
        if n == -1 and nullable:
            return -1
        raise DecodeError(f"invalid length {n}" if n != -1 else "null for a non-nullable field")
    return n


def r_len32(io: BytesIO, nullable: bool) -> int:
    n = r_i32(io)
    if n < 0:
        if n == -1 and nullable:
            return -1
        raise DecodeError(f"invalid length {n}" if n != -1 else "null for a non-nullable field")
    return n


def r_clen(io: BytesIO, nullable: bool) -> int:
    """Compact length: unsigned varint N+1, 0 for null. Returns -1 for null."""
    n = r_uvarint(io) - 1
    if n < 0 and not nullable:
        raise DecodeError("null for a non-nullable field")
    return n


def _decode_utf8(data: bytes) -> str:
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 at byte {exc.start}") from None


def r_string(io: BytesIO) -> str:
    n = r_len16(io, False)
    return _decode_utf8(r_exact(io, n)) if n else ""


def r_nstring(io: BytesIO) -> str | None:
    n = r_len16(io, True)
    if n < 0:
        return None
    return _decode_utf8(r_exact(io, n)) if n else ""


def r_cstring(io: BytesIO) -> str:
    b = io.read(1)
    if b and 0 < b[0] < 0x80:  # lengths below 127 bytes: the common case
        n = b[0] - 1
    else:
        if b:
            io.seek(-1, 1)
        n = r_clen(io, False)
    if not n:
        return ""
    if n > 0x7FFF:
        raise DecodeError(f"string length {n} exceeds 32767")
    data = io.read(n)
    if len(data) != n:
        raise short(n, len(data))
    return _decode_utf8(data)


def r_cnstring(io: BytesIO) -> str | None:
    b = io.read(1)
    if b and b[0] < 0x80:
        n = b[0] - 1
    else:
        if b:
            io.seek(-1, 1)
        n = r_clen(io, True)
    if n <= 0:
        return None if n < 0 else ""
    if n > 0x7FFF:
        raise DecodeError(f"string length {n} exceeds 32767")
    data = io.read(n)
    if len(data) != n:
        raise short(n, len(data))
    return _decode_utf8(data)


def r_bytes(io: BytesIO) -> bytes:
    return r_exact(io, r_len32(io, False))


def r_nbytes(io: BytesIO) -> bytes | None:
    n = r_len32(io, True)
    return None if n < 0 else r_exact(io, n)


def r_cbytes(io: BytesIO) -> bytes:
    return r_exact(io, r_clen(io, False))


def r_cnbytes(io: BytesIO) -> bytes | None:
    n = r_clen(io, True)
    return None if n < 0 else r_exact(io, n)


def _utf8(value: Any) -> bytes:
    if type(value) is not str:
        raise EncodeError(f"{value!r} is not a str")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodeError(f"{value!r} cannot be encoded as UTF-8") from exc


def w_string(io: BytesIO, value: Any) -> None:
    if value is None:
        raise EncodeError("null for a non-nullable string")
    data = _utf8(value)
    if len(data) > 0x7FFF:
        raise EncodeError(f"string of {len(data)} bytes exceeds 32767")
    io.write(_I16.pack(len(data)))
    io.write(data)


def w_nstring(io: BytesIO, value: Any) -> None:
    if value is None:
        io.write(b"\xff\xff")
    else:
        w_string(io, value)


def w_cstring(io: BytesIO, value: Any) -> None:
    if value is None:
        raise EncodeError("null for a non-nullable string")
    data = _utf8(value)
    if len(data) > 0x7FFF:
        raise EncodeError(f"string of {len(data)} bytes exceeds 32767")
    io.write(uvarint_bytes(len(data) + 1))
    io.write(data)


def w_cnstring(io: BytesIO, value: Any) -> None:
    if value is None:
        io.write(b"\x00")
    else:
        w_cstring(io, value)


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return value  # type: ignore[return-value]
    raise EncodeError(f"{type(value).__name__} is not bytes")


def w_bytes(io: BytesIO, value: Any) -> None:
    if value is None:
        raise EncodeError("null for non-nullable bytes")
    data = _as_bytes(value)
    io.write(_I32.pack(len(data)))
    io.write(data)


def w_nbytes(io: BytesIO, value: Any) -> None:
    if value is None:
        io.write(b"\xff\xff\xff\xff")
    else:
        w_bytes(io, value)


def w_cbytes(io: BytesIO, value: Any) -> None:
    if value is None:
        raise EncodeError("null for non-nullable bytes")
    data = _as_bytes(value)
    io.write(uvarint_bytes(len(data) + 1))
    io.write(data)


def w_cnbytes(io: BytesIO, value: Any) -> None:
    if value is None:
        io.write(b"\x00")
    else:
        w_cbytes(io, value)


# -- uuid ---------------------------------------------------------------------------


def r_uuid(io: BytesIO) -> uuid.UUID:
    b = io.read(16)
    if len(b) != 16:
        raise short(16, len(b))
    return uuid.UUID(bytes=b)


def w_uuid(io: BytesIO, value: Any) -> None:
    if not isinstance(value, uuid.UUID):
        raise EncodeError(f"{value!r} is not a uuid.UUID")
    io.write(value.bytes)


# -- arrays -------------------------------------------------------------------------


def r_count(io: BytesIO, compact: bool, nullable: bool) -> int:
    """Array count; -1 for null. A count larger than the bytes left is a lie.

    The comparison with the bytes left costs two seeks, so small counts skip it:
    every element takes at least one byte, hence a lying small count still fails
    at the truncation, having allocated no more than the input.
    """
    if compact:
        b = io.read(1)
        if b and b[0] < 0x80:
            n = b[0] - 1
            if n < 0 and not nullable:
                raise DecodeError("null for a non-nullable field")
            return n
        if not b:
            raise short(1, 0)
        io.seek(-1, 1)
        n = r_clen(io, nullable)
    else:
        n = r_len32(io, nullable)
    if n > COUNT_CHECK:
        _check_len(io, n)
    return n


COUNT_CHECK = 64


def w_count(io: BytesIO, value: Any, compact: bool, nullable: bool) -> int:
    """Write an array's count; returns -1 when null (nothing more to write)."""
    if value is None:
        if not nullable:
            raise EncodeError("null for a non-nullable array")
        io.write(b"\x00" if compact else b"\xff\xff\xff\xff")
        return -1
    try:
        n = len(value)
    except TypeError:
        raise EncodeError(f"{type(value).__name__} is not a sequence") from None
    io.write(uvarint_bytes(n + 1) if compact else _I32.pack(n))
    return n


# -- tagged fields ---------------------------------------------------------------------


def r_tag_header(io: BytesIO) -> tuple[int, bytes]:
    """One tagged field: its tag and its raw (size-delimited) bytes."""
    tag = r_uvarint(io)
    size = r_uvarint(io)
    return tag, r_exact(io, size)


def check_consumed(io: BytesIO, what: str) -> None:
    left = remaining(io)
    if left:
        raise DecodeError(f"{left} unexpected trailing bytes in {what}")


def w_tagged(io: BytesIO, items: list[tuple[int, bytes]]) -> None:
    for tag, data in items:
        if type(tag) is not int or not 0 <= tag <= 0xFFFFFFFF:
            raise EncodeError(f"tag {tag!r} is not an unsigned 32-bit int")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise EncodeError(f"tagged field {tag} holds {type(data).__name__}, not bytes")
    items.sort(key=_tag_key)
    io.write(uvarint_bytes(len(items)))
    last = -1
    for tag, data in items:
        if tag == last:
            raise EncodeError(f"tagged field {tag} given twice")
        last = tag
        io.write(uvarint_bytes(tag))
        io.write(uvarint_bytes(len(data)))
        io.write(data)


def _tag_key(item: tuple[int, bytes]) -> int:
    return item[0]


# -- buffer readers (compiled code) ---------------------------------------------------
#
# Compiled parsers read a bytes object at an offset. Their inline code handles the
# common cases (one-byte varints, lengths that fit) and calls these for the rest.


def b_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Unsigned varint at ``pos``: at most 5 bytes, value within 32 bits."""
    end = len(buf)
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise DecodeError("truncated varint")
        v = buf[pos]
        pos += 1
        result |= (v & 0x7F) << shift
        if v < 0x80:
            break
        shift += 7
        if shift >= 35:
            raise DecodeError("unsigned varint longer than 5 bytes")
    if result > 0xFFFFFFFF:
        raise DecodeError("unsigned varint does not fit 32 bits")
    return result, pos


def _b_varbits(buf: bytes | memoryview, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    end = len(buf)
    result = 0
    shift = 0
    limit = 7 * max_bytes
    while True:
        if pos >= end:
            raise DecodeError(f"truncated {what}")
        v = buf[pos]
        pos += 1
        result |= (v & 0x7F) << shift
        if v < 0x80:
            return result, pos
        shift += 7
        if shift >= limit:
            raise DecodeError(f"{what} longer than {max_bytes} bytes")


def b_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag int32 varint at ``pos`` (at most 5 bytes)."""
    raw, pos = _b_varbits(buf, pos, 5, "varint")
    if raw > 0xFFFFFFFF:
        raise DecodeError("varint does not fit 32 bits")
    return (raw >> 1) ^ -(raw & 1), pos


def b_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag int64 varlong at ``pos`` (at most 10 bytes)."""
    raw, pos = _b_varbits(buf, pos, 10, "varlong")
    if raw > 0xFFFFFFFFFFFFFFFF:
        raise DecodeError("varlong does not fit 64 bits")
    return (raw >> 1) ^ -(raw & 1), pos


def b_tags(buf: bytes, pos: int) -> tuple[list[tuple[int, bytes]], int]:
    """A tagged-field section at ``pos``: its ``(tag, raw bytes)`` items in wire order."""
    count, pos = b_uvarint(buf, pos)
    items = []
    end = len(buf)
    for _ in range(count):
        tag, pos = b_uvarint(buf, pos)
        size, pos = b_uvarint(buf, pos)
        stop = pos + size
        if stop > end:
            raise short(size, end - pos)
        items.append((tag, buf[pos:stop]))
        pos = stop
    return items, pos


def b_count(buf: bytes, pos: int, nullable: bool) -> tuple[int, int]:
    """Compact array count at ``pos`` (-1 for null), checked like :func:`r_count`."""
    n, pos = b_uvarint(buf, pos)
    n -= 1
    if n < 0 and not nullable:
        raise DecodeError("null for a non-nullable field")
    if n > COUNT_CHECK and n > len(buf) - pos:
        raise DecodeError(f"length {n} exceeds the {len(buf) - pos} bytes left")
    return n, pos


def b_compact(buf: bytes, pos: int, nullable: bool, text: bool) -> tuple[Any, int]:
    """Compact string (``text``) or bytes at ``pos``; None for null."""
    n, pos = b_uvarint(buf, pos)
    if n == 0:
        if nullable:
            return None, pos
        raise DecodeError("null for a non-nullable field")
    if text and n - 1 > 0x7FFF:
        raise DecodeError(f"string length {n - 1} exceeds 32767")
    stop = pos + n - 1
    if stop > len(buf):
        raise short(n - 1, len(buf) - pos)
    data = buf[pos:stop]
    return (_decode_utf8(data) if text else data), stop


def b_fixed_items(buf: bytes, pos: int, n: int, code: str) -> tuple[list[Any], int]:
    """``n`` fixed-width numbers at ``pos`` (``n`` already checked non-negative)."""
    stop = pos + n * struct.calcsize(">" + code)
    if stop > len(buf):
        raise short(stop - pos, len(buf) - pos)
    return list(struct.unpack_from(f">{n}{code}", buf, pos)), stop


# Arrays of fixed-width numbers are read and written with one struct call; the
# structs for small counts are made once, larger ones on demand (the count has
# been checked against the bytes left before one is made).
SMALL_COUNT = 64


def unpackers(code: str) -> tuple[Any, ...]:
    """``unpack_from`` of ``>{n}{code}`` for n in 0..SMALL_COUNT."""
    return tuple(struct.Struct(f">{n}{code}").unpack_from for n in range(SMALL_COUNT + 1))


def packers(code: str) -> tuple[Any, ...]:
    """``pack`` of ``>{n}{code}`` for n in 0..SMALL_COUNT."""
    return tuple(struct.Struct(f">{n}{code}").pack for n in range(SMALL_COUNT + 1))


def pack_many(code: str, n: int, items: Any) -> bytes:
    return struct.pack(f">{n}{code}", *items)


# The one-byte encodings of 0..127, for varints and compact lengths.
UVARINT1 = tuple(bytes((i,)) for i in range(0x80))


def tagged_bytes(items: list[tuple[int, bytes]]) -> bytes:
    """A whole tagged-field section, as :func:`w_tagged` writes it."""
    out = BytesIO()
    w_tagged(out, items)
    return out.getvalue()
