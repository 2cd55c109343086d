"""Kafka's primitive types as construct classes, and their compiler.

Two ways through every class here, which must agree byte for byte:

* **Interpreted** (``.parse``/``.build``): ``_parse``/``_build`` walk the
  declarations and read or write a stream through the checked helpers of
  :mod:`trafka.codec._wire`. This path is the reference: its errors are the
  ones users see, with the field path (``topic_data[0].partition_data[2].records``)
  prepended as they travel out of nested schemas.
* **Compiled** (``.compile()``): a :class:`Schema`, :class:`Array` or
  :class:`NullableStruct` generates one flat Python function per direction for
  its whole tree (nested schemas and array loops inlined, runs of fixed-width
  fields read and written with a single struct call, one-byte varints and
  lengths handled inline). The parser works on the bytes behind the
  ``BytesIO`` and an offset; the builder appends parts to a list and writes
  them once.

The compiled code is a fast path, not a second implementation of the rules: it
only has to *refuse* whatever the interpreted path refuses, never to explain
why. Whenever it raises, for any reason (a check of its own, a short
``unpack_from``, an IndexError past the end, invalid UTF-8, a value of the
wrong type), the entry function rewinds and runs the interpreted path on the
same input, which raises the precise :class:`~trafka.codec.errors.DecodeError`
or :class:`~trafka.codec.errors.EncodeError`. Invariants of the fast path:

* it accepts no input and no value that the interpreted path refuses, and
  produces the same object or bytes for everything it accepts;
* it allocates nothing from lengths it has not checked against the bytes
  received (counts above ``_wire.COUNT_CHECK`` are compared with the bytes
  left; string and byte lengths with the end of the buffer);
* it has no side effect before it succeeds: the stream is only moved (parse)
  or written (build) at the end, and it touches no global state.

Primitives used on their own inside construct's containers (as
:mod:`trafka.codec.records` does) compile to calls of the ``_wire`` stream
readers, so context-dependent construct code around them keeps working.

This module declares the types; the compiler lives in
:mod:`trafka.codec._compiler`, which knows each class by the name it declares
as ``codec_node`` (``primitive``, ``array``, ``schema``, ``nullable``) and so
imports nothing from here.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from io import BytesIO
from typing import Any, ClassVar

from construct import Construct

from . import _wire as w
from ._construct_calls import build_sub, parse_sub
from .errors import CodecError, EncodeError

__all__ = [
    "Array",
    "Boolean",
    "Bytes",
    "CompactBytes",
    "CompactNullableBytes",
    "CompactNullableString",
    "CompactRecords",
    "CompactString",
    "Float64",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "NullableBytes",
    "NullableString",
    "NullableStruct",
    "Records",
    "Schema",
    "String",
    "TaggedField",
    "UInt16",
    "UInt32",
    "UVarInt",
    "Uuid",
    "VarInt",
    "VarLong",
]

_IMPORT = "from trafka.codec._wire import *"


def _prelude(code: Any) -> None:
    code.append(_IMPORT)


class Primitive(Construct):  # type: ignore[misc]
    """A primitive read and written by one pair of ``_wire`` functions.

    Args:
        name: Kafka's name of the type (``int32``, ``compact nullable string``).
        reader, writer: the ``_wire`` stream functions of the type.
        min_size: the fewest bytes a value takes on the wire.
        fmt: the struct code of fixed-width types.
        kind: how the compiler handles the type: ``fixed`` (``fmt``), ``bool``,
            ``uuid``, ``uvarint``, ``varint``, ``varlong``, ``string``, ``bytes``.
        compact: strings and bytes: uvarint length+1 rather than int16/int32.
        nullable: strings and bytes: whether null is allowed.
    """

    codec_node: ClassVar[str] = "primitive"

    def __init__(
        self,
        name: str,
        reader: str,
        writer: str,
        min_size: int,
        fmt: str | None = None,
        *,
        kind: str = "fixed",
        compact: bool = False,
        nullable: bool = False,
    ) -> None:
        super().__init__()
        self.kafka_type = name
        self.fmt = fmt
        self.kind = kind
        self.compact = compact
        self.nullable = nullable
        self.reader_name = reader
        self.writer_name = writer
        self._reader = getattr(w, reader)
        self._writer = getattr(w, writer)
        self.min_size = min_size
        self.flagbuildnone = False

    def __repr__(self) -> str:
        return f"<{self.kafka_type}>"

    def _parse(self, stream: BytesIO, context: Any, path: str) -> Any:
        return self._reader(stream)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        self._writer(stream, obj)
        return obj

    # Alone (inside construct's own Struct, If...), a primitive compiles to a call
    # of its stream reader/writer, so it sees the same io and context as its
    # neighbours. Inside our containers the compiler below inlines it instead.
    def _emitparse(self, code: Any) -> str:
        _prelude(code)
        return f"{self.reader_name}(io)"

    def _emitbuild(self, code: Any) -> str:
        # construct's own Struct stores the expression's value in the context for
        # later fields to read, so it must evaluate to the object built.
        _prelude(code)
        return f"({self.writer_name}(io, obj), obj)[1]"


Int8 = Primitive("int8", "r_i8", "w_i8", 1, "b")
Int16 = Primitive("int16", "r_i16", "w_i16", 2, "h")
Int32 = Primitive("int32", "r_i32", "w_i32", 4, "i")
Int64 = Primitive("int64", "r_i64", "w_i64", 8, "q")
UInt16 = Primitive("uint16", "r_u16", "w_u16", 2, "H")
UInt32 = Primitive("uint32", "r_u32", "w_u32", 4, "I")
Float64 = Primitive("float64", "r_f64", "w_f64", 8, "d")
Boolean = Primitive("bool", "r_bool", "w_bool", 1, "?", kind="bool")
Uuid = Primitive("uuid", "r_uuid", "w_uuid", 16, kind="uuid")
UVarInt = Primitive("uvarint", "r_uvarint", "w_uvarint", 1, kind="uvarint")
VarInt = Primitive("varint", "r_varint", "w_varint", 1, kind="varint")
VarLong = Primitive("varlong", "r_varlong", "w_varlong", 1, kind="varlong")

String = Primitive("string", "r_string", "w_string", 2, kind="string")
NullableString = Primitive(
    "nullable string", "r_nstring", "w_nstring", 2, kind="string", nullable=True
)
CompactString = Primitive(
    "compact string", "r_cstring", "w_cstring", 1, kind="string", compact=True
)
CompactNullableString = Primitive(
    "compact nullable string",
    "r_cnstring",
    "w_cnstring",
    1,
    kind="string",
    compact=True,
    nullable=True,
)
Bytes = Primitive("bytes", "r_bytes", "w_bytes", 4, kind="bytes")
NullableBytes = Primitive("nullable bytes", "r_nbytes", "w_nbytes", 4, kind="bytes", nullable=True)
CompactBytes = Primitive("compact bytes", "r_cbytes", "w_cbytes", 1, kind="bytes", compact=True)
CompactNullableBytes = Primitive(
    "compact nullable bytes",
    "r_cnbytes",
    "w_cnbytes",
    1,
    kind="bytes",
    compact=True,
    nullable=True,
)
# A record set travels as (nullable) bytes; trafka.codec.records reads inside it.
Records = Primitive("records", "r_nbytes", "w_nbytes", 4, kind="bytes", nullable=True)
CompactRecords = Primitive(
    "compact records", "r_cnbytes", "w_cnbytes", 1, kind="bytes", compact=True, nullable=True
)


class _Compiled(Construct):  # type: ignore[misc]
    """A container whose ``.compile()`` goes through the fast-path compiler.

    The compiler (:mod:`trafka.codec._compiler`) is imported where it is first
    needed: once per container, when it is compiled.
    """

    _entries: tuple[Callable[..., Any], Callable[..., Any]] | None = None

    def _fast_entries(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        entries = self.__dict__.get("_entries")
        if entries is None:
            from ._compiler import _build_entry, _parse_entry

            entries = (_parse_entry(self), _build_entry(self, self.parts_builder()))
            self._entries = entries
        return entries

    def parts_builder(self) -> Callable[[Any, Callable[[Any], None]], None] | None:
        """The fast builder as ``f(value, append)``: it hands the encoding to
        ``append`` in parts, byte fields (a Produce's record batches) as the
        very objects given, uncopied; it raises on anything wrong, without the
        precise error the construct's ``build`` gives. None where there is no
        fast builder."""
        if "_parts" not in self.__dict__:
            from ._compiler import _build_function, _Unsupported

            parts: Callable[[Any, Callable[[Any], None]], None] | None
            try:
                parts = _build_function(self)
            except _Unsupported:
                parts = None
            self._parts = parts
        return self._parts

    def _emitparse(self, code: Any) -> str:
        from ._compiler import _link_entry

        return _link_entry(code, self._fast_entries()[0], "parse", "io, this")

    def _emitbuild(self, code: Any) -> str:
        from ._compiler import _link_entry

        return _link_entry(code, self._fast_entries()[1], "build", "obj, io, this")


class Array(_Compiled):
    """Kafka array: int32 count (or compact uvarint count+1), then the elements.

    Null is count -1 (compact: 0) and only allowed when ``nullable``. A count
    larger than the bytes left is rejected before reading any element.
    """

    codec_node: ClassVar[str] = "array"

    def __init__(self, subcon: Construct, *, compact: bool = False, nullable: bool = False):
        super().__init__()
        self.subcon = subcon
        self.compact = compact
        self.nullable = nullable
        self.min_size = 1 if compact else 4
        self.flagbuildnone = False

    def __repr__(self) -> str:
        kind = ("Compact" if self.compact else "") + ("Nullable" if self.nullable else "")
        return f"<{kind}Array of {self.subcon!r}>"

    def _parse(self, stream: BytesIO, context: Any, path: str) -> Any:
        n = w.r_count(stream, self.compact, self.nullable)
        if n < 0:
            return None
        out = []
        for i in range(n):
            try:
                out.append(parse_sub(self.subcon, stream, context, path))
            except CodecError as exc:
                exc.add_field_prefix(f"[{i}]")
                raise
        return out

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        if w.w_count(stream, obj, self.compact, self.nullable) < 0:
            return obj
        for i, item in enumerate(obj):
            try:
                build_sub(self.subcon, item, stream, context, path)
            except CodecError as exc:
                exc.add_field_prefix(f"[{i}]")
                raise
        return obj


@dataclasses.dataclass(frozen=True, slots=True)
class TaggedField:
    """A tagged field of a flexible schema: its tag, attribute name, type and default."""

    tag: int
    name: str
    subcon: Construct
    default: Any


class Schema(_Compiled):
    """A Kafka struct at one version, parsed into and built from a dataclass.

    Args:
        name: the schema's name for error messages (``ProduceRequest v9``).
        cls: the frozen dataclass the struct parses into. It has one attribute per
            field of every version; fields absent from this version keep their
            defaults.
        fields: ``(attribute, construct)`` pairs in wire order.
        tagged: the tagged fields this version knows (flexible versions only).
        flexible: whether the struct ends with a tagged-field section.
        absent: ``(attribute, default)`` of fields that this version lacks and that
            are not ignorable: building with a non-default value there is an error,
            as in Kafka's own generated code.
    """

    codec_node: ClassVar[str] = "schema"

    def __init__(
        self,
        name: str,
        cls: type,
        fields: Sequence[tuple[str, Construct]],
        *,
        tagged: Sequence[TaggedField] = (),
        flexible: bool = False,
        absent: Sequence[tuple[str, Any]] = (),
    ) -> None:
        super().__init__()
        self.schema_name = name
        self.cls = cls
        self.fields = tuple(fields)
        self.tagged = tuple(sorted(tagged, key=lambda t: t.tag))
        self.flexible = flexible
        self.absent = tuple(absent)
        if self.tagged and not flexible:
            raise ValueError(f"{name}: tagged fields need a flexible version")
        self.min_size = sum(getattr(sc, "min_size", 0) for _, sc in self.fields) + (
            1 if flexible else 0
        )
        self.flagbuildnone = False

    def __repr__(self) -> str:
        return f"<Schema {self.schema_name}>"

    def _parse(self, stream: BytesIO, context: Any, path: str) -> Any:
        values: dict[str, Any] = {}
        current: str | None = None
        try:
            for current, sc in self.fields:
                values[current] = parse_sub(sc, stream, context, path)
            if self.flexible:
                current = "_tagged_fields"
                known = {t.tag: t for t in self.tagged}
                unknown = []
                for _ in range(w.r_uvarint(stream)):
                    tag, data = w.r_tag_header(stream)
                    spec = known.get(tag)
                    if spec is None:
                        unknown.append((tag, data))
                        continue
                    current = spec.name
                    sub = BytesIO(data)
                    values[spec.name] = parse_sub(spec.subcon, sub, context, path)
                    w.check_consumed(sub, f"tagged field {tag}")
                    current = "_tagged_fields"
                values["unknown_tagged_fields"] = unknown
        except CodecError as exc:
            exc.add_field_prefix(current)
            raise
        return self.cls(**values)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        if type(obj) is not self.cls:
            raise EncodeError(
                f"expected {self.cls.__qualname__}, got {type(obj).__name__}",
                message_name=self.schema_name,
            )
        current: str | None = None
        try:
            for current, sc in self.fields:
                build_sub(sc, getattr(obj, current), stream, context, path)
            for current, default in self.absent:
                if getattr(obj, current) != default:
                    raise EncodeError(f"not supported by {self.schema_name}")
            if self.flexible:
                items = list(getattr(obj, "unknown_tagged_fields", ()))
                for spec in self.tagged:
                    current = spec.name
                    value = getattr(obj, spec.name)
                    if value != spec.default:
                        sub = BytesIO()
                        build_sub(spec.subcon, value, sub, context, path)
                        items.append((spec.tag, sub.getvalue()))
                current = "_tagged_fields"
                w.w_tagged(stream, items)
        except CodecError as exc:
            exc.add_field_prefix(current)
            raise
        return obj


def null_uuid() -> uuid.UUID:
    """The all-zero UUID Kafka uses as "no topic id"."""
    return w.NULL_UUID


class NullableStruct(_Compiled):
    """A struct that may be null: an int8 marker (-1 null, 1 present), then the struct."""

    codec_node: ClassVar[str] = "nullable"

    def __init__(self, subcon: Construct) -> None:
        super().__init__()
        self.subcon = subcon
        self.min_size = 1
        self.flagbuildnone = False

    def __repr__(self) -> str:
        return f"<Nullable {self.subcon!r}>"

    def _parse(self, stream: BytesIO, context: Any, path: str) -> Any:
        if w.r_i8(stream) < 0:
            return None
        return parse_sub(self.subcon, stream, context, path)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            stream.write(b"\xff")
            return obj
        stream.write(b"\x01")
        return build_sub(self.subcon, obj, stream, context, path)
