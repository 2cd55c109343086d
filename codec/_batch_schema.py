"""The record formats declared with construct: the oracle for the hand-written code.

Job: :data:`RecordBatchV2`, :data:`RecordV2`, :data:`RecordHeaderV2` and the
construct classes they are built from (:class:`Magic`, :class:`Ref`,
:class:`LengthPrefixed`, :class:`Sized`, :class:`Counted`, varint strings and
bytes), also used by :mod:`trafka.codec.legacy` for magic 0 and 1.

Rules: these parse to and build from plain dicts and are the readable statement
of the layout; the property tests check the fast encoder and decoder against
them byte for byte. Every class compiles to code that reads through the same
checked functions as the interpreted path (construct's stock compiled code
accepts truncated input; ours must not).
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

from construct import Construct, GreedyBytes, IfThenElse, Struct, this
from construct.core import evaluate

from . import _wire
from ._batch_format import (
    _CODEC_MASK,
    MIN_BATCH_LENGTH,
)
from ._construct_calls import build_sub, emit_build, emit_parse, parse_sub
from .errors import CodecError, DecodeError, EncodeError
from .primitives import Int8, Int16, Int32, Int64, UInt32, VarInt, VarLong

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
        return parse_sub(self.subcon, stream, context, path)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        build_sub(self.subcon, obj, stream, context, path)
        return obj

    def _emitparse(self, code: Any) -> str:
        return emit_parse(self.subcon, code)

    def _emitbuild(self, code: Any) -> str:
        return f"({emit_build(self.subcon, code)}, obj)[1]"


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
        sub = _sub_reader(stream, parse_sub(self.lengthfield, stream, context, path))
        value = parse_sub(self.subcon, sub, context, path)
        _wire.check_consumed(sub, "length-prefixed data")
        return value

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        sub = BytesIO()
        build_sub(self.subcon, obj, sub, context, path)
        data = sub.getvalue()
        build_sub(self.lengthfield, len(data), stream, context, path)
        stream.write(data)
        return obj

    def _emitparse(self, code: Any) -> str:
        fname = f"parse_length_prefixed_{code.allocateId()}"
        code.append(f"""
            def {fname}(io, this):
                io = {_link(code, _sub_reader)}(io, {emit_parse(self.lengthfield, code)})
                value = {emit_parse(self.subcon, code)}
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
                {emit_build(self.subcon, code)}
                data = io.getvalue()
                io = outer
                obj = len(data)
                {emit_build(self.lengthfield, code)}
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
        value = parse_sub(self.subcon, sub, context, path)
        _wire.check_consumed(sub, "sized data")
        return value

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        sub = BytesIO()
        build_sub(self.subcon, obj, sub, context, path)
        _check_sized(sub.getvalue(), evaluate(self.length, context))
        stream.write(sub.getvalue())
        return obj

    def _emitparse(self, code: Any) -> str:
        fname = f"parse_sized_{code.allocateId()}"
        code.append(f"""
            def {fname}(io, this):
                io = {_link(code, _sub_reader)}(io, {self.length!r})
                value = {emit_parse(self.subcon, code)}
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
                {emit_build(self.subcon, code)}
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
                out.append(parse_sub(self.subcon, stream, context, path))
            except CodecError as exc:
                exc.add_field_prefix(f"[{i}]")
                raise
        return out

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        if self.count is None:
            _wire.w_varint(stream, len(obj))
        for i, item in enumerate(obj):
            try:
                build_sub(self.subcon, item, stream, context, path)
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
                        out.append({emit_parse(self.subcon, code)})
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
                        {emit_build(self.subcon, code)}
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
