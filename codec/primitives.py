"""Kafka's primitive types as construct classes.

Every class here parses and builds through the checked helpers in
:mod:`trafka.codec._wire`, in the interpreted path (``_parse``/``_build``) and in
the source it emits for ``.compile()`` (``_emitparse``/``_emitbuild``). Stock
construct compiles ``Bytes(n)`` to a bare ``io.read(n)`` that accepts truncated
input; ours cannot, because the emitted code calls the same readers.

:class:`Schema` is Kafka's struct at one version: regular fields in order, then,
in flexible versions, the tagged-field section. It parses into (and builds from)
a frozen dataclass. Errors raised below a schema get the field path prepended
on their way out (``topic_data[0].partition_data[2].records``).

Conventions of the emitted code: a parse expression reads from ``io`` and may
use ``this``; a build expression writes ``obj`` to ``io``; its value is unused.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from io import BytesIO
from typing import Any

from construct import Construct

from . import _wire as w
from .errors import CodecError, DecodeError, EncodeError

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
    """A primitive read and written by one pair of ``_wire`` functions."""

    def __init__(self, name: str, reader: str, writer: str, min_size: int) -> None:
        super().__init__()
        self.kafka_type = name
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

    def _emitparse(self, code: Any) -> str:
        _prelude(code)
        return f"{self.reader_name}(io)"

    def _emitbuild(self, code: Any) -> str:
        _prelude(code)
        return f"{self.writer_name}(io, obj)"


Int8 = Primitive("int8", "r_i8", "w_i8", 1)
Int16 = Primitive("int16", "r_i16", "w_i16", 2)
Int32 = Primitive("int32", "r_i32", "w_i32", 4)
Int64 = Primitive("int64", "r_i64", "w_i64", 8)
UInt16 = Primitive("uint16", "r_u16", "w_u16", 2)
UInt32 = Primitive("uint32", "r_u32", "w_u32", 4)
Float64 = Primitive("float64", "r_f64", "w_f64", 8)
Boolean = Primitive("bool", "r_bool", "w_bool", 1)
Uuid = Primitive("uuid", "r_uuid", "w_uuid", 16)
UVarInt = Primitive("uvarint", "r_uvarint", "w_uvarint", 1)
VarInt = Primitive("varint", "r_varint", "w_varint", 1)
VarLong = Primitive("varlong", "r_varlong", "w_varlong", 1)

String = Primitive("string", "r_string", "w_string", 2)
NullableString = Primitive("nullable string", "r_nstring", "w_nstring", 2)
CompactString = Primitive("compact string", "r_cstring", "w_cstring", 1)
CompactNullableString = Primitive("compact nullable string", "r_cnstring", "w_cnstring", 1)
Bytes = Primitive("bytes", "r_bytes", "w_bytes", 4)
NullableBytes = Primitive("nullable bytes", "r_nbytes", "w_nbytes", 4)
CompactBytes = Primitive("compact bytes", "r_cbytes", "w_cbytes", 1)
CompactNullableBytes = Primitive("compact nullable bytes", "r_cnbytes", "w_cnbytes", 1)
# A record set travels as (nullable) bytes; trafka.codec.records reads inside it.
Records = Primitive("records", "r_nbytes", "w_nbytes", 4)
CompactRecords = Primitive("compact records", "r_cnbytes", "w_cnbytes", 1)


class Array(Construct):  # type: ignore[misc]
    """Kafka array: int32 count (or compact uvarint count+1), then the elements.

    Null is count -1 (compact: 0) and only allowed when ``nullable``. A count
    larger than the bytes left is rejected before reading any element.
    """

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
                out.append(self.subcon._parsereport(stream, context, path))
            except CodecError as exc:
                exc.add_field_prefix(f"[{i}]")
                raise
        return out

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        if w.w_count(stream, obj, self.compact, self.nullable) < 0:
            return obj
        for i, item in enumerate(obj):
            try:
                self.subcon._build(item, stream, context, path)
            except CodecError as exc:
                exc.add_field_prefix(f"[{i}]")
                raise
        return obj

    def _emitparse(self, code: Any) -> str:
        _prelude(code)
        fname = f"parse_array_{code.allocateId()}"
        code.append(f"""
            def {fname}(io, this):
                n = r_count(io, {self.compact}, {self.nullable})
                if n < 0:
                    return None
                out = []
                append = out.append
                i = 0
                try:
                    for i in range(n):
                        append({self.subcon._compileparse(code)})
                except CodecError as exc:
                    exc.add_field_prefix(f"[{{i}}]")
                    raise
                return out
        """)
        return f"{fname}(io, this)"

    def _emitbuild(self, code: Any) -> str:
        _prelude(code)
        fname = f"build_array_{code.allocateId()}"
        code.append(f"""
            def {fname}(items, io, this):
                if w_count(io, items, {self.compact}, {self.nullable}) < 0:
                    return
                i = 0
                try:
                    for i, obj in enumerate(items):
                        {self.subcon._compilebuild(code)}
                except CodecError as exc:
                    exc.add_field_prefix(f"[{{i}}]")
                    raise
        """)
        return f"{fname}(obj, io, this)"


@dataclasses.dataclass(frozen=True, slots=True)
class TaggedField:
    """A tagged field of a flexible schema: its tag, attribute name, type and default."""

    tag: int
    name: str
    subcon: Construct
    default: Any


class Schema(Construct):  # type: ignore[misc]
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

    # -- interpreted -------------------------------------------------------------

    def _parse(self, stream: BytesIO, context: Any, path: str) -> Any:
        values: dict[str, Any] = {}
        current: str | None = None
        try:
            for current, sc in self.fields:
                values[current] = sc._parsereport(stream, context, path)
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
                    values[spec.name] = spec.subcon._parsereport(sub, context, path)
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
                sc._build(getattr(obj, current), stream, context, path)
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
                        spec.subcon._build(value, sub, context, path)
                        items.append((spec.tag, sub.getvalue()))
                current = "_tagged_fields"
                w.w_tagged(stream, items)
        except CodecError as exc:
            exc.add_field_prefix(current)
            raise
        return obj

    # -- compiled ----------------------------------------------------------------

    def _link(self, code: Any, value: Any) -> str:
        code.linkedinstances[id(value)] = value
        return f"linkedinstances[{id(value)}]"

    def _emitparse(self, code: Any) -> str:
        _prelude(code)
        fname = f"parse_schema_{code.allocateId()}"
        lines = [
            f"def {fname}(io, this):",
            "    _f = None",
            "    try:",
        ]
        kwargs = []
        for name, sc in self.fields:
            lines.append(f"        _f = {name!r}")
            lines.append(f"        v_{name} = {sc._compileparse(code)}")
            kwargs.append(f"{name}=v_{name}")
        if self.flexible:
            lines += [
                "        _f = '_tagged_fields'",
                "        unknown = []",
                "        kw = {}",
                "        for _ in range(r_uvarint(io)):",
                "            tag, data = r_tag_header(io)",
            ]
            keyword = "if"
            for spec in self.tagged:
                sub = f"parse_tag_{code.allocateId()}"
                code.append(f"""
                    def {sub}(io, this):
                        value = {spec.subcon._compileparse(code)}
                        check_consumed(io, "tagged field {spec.tag}")
                        return value
                """)
                lines += [
                    f"            {keyword} tag == {spec.tag}:",
                    f"                _f = {spec.name!r}",
                    f"                kw[{spec.name!r}] = {sub}(BytesIO(data), this)",
                    "                _f = '_tagged_fields'",
                ]
                keyword = "elif"
            if self.tagged:
                lines += ["            else:", "                unknown.append((tag, data))"]
            else:
                lines += ["            unknown.append((tag, data))"]
            kwargs += ["unknown_tagged_fields=unknown", "**kw"]
        lines += [
            "    except CodecError as exc:",
            "        exc.add_field_prefix(_f)",
            "        raise",
            f"    return {self._link(code, self.cls)}({', '.join(kwargs)})",
        ]
        code.append("\n".join(lines))
        return f"{fname}(io, this)"

    def _emitbuild(self, code: Any) -> str:
        _prelude(code)
        fname = f"build_schema_{code.allocateId()}"
        cls_ref = self._link(code, self.cls)
        lines = [
            f"def {fname}(struct, io, this):",
            f"    if type(struct) is not {cls_ref}:",
            f"        raise EncodeError('expected {self.cls.__qualname__}, got ' + type(struct).__name__,"
            f" message_name={self.schema_name!r})",
            "    _f = None",
            "    try:",
        ]
        for name, sc in self.fields:
            lines += [
                f"        _f = {name!r}",
                f"        obj = struct.{name}",
                f"        {sc._compilebuild(code)}",
            ]
        for name, default in self.absent:
            lines += [
                f"        if struct.{name} != {self._link(code, default)}:",
                f"            _f = {name!r}",
                f"            raise EncodeError('not supported by {self.schema_name}')",
            ]
        if self.flexible:
            lines.append("        items = list(struct.unknown_tagged_fields)")
            for spec in self.tagged:
                lines += [
                    f"        _f = {spec.name!r}",
                    f"        obj = struct.{spec.name}",
                    f"        if obj != {self._link(code, spec.default)}:",
                    "            outer, io = io, BytesIO()",
                    f"            {spec.subcon._compilebuild(code)}",
                    f"            items.append(({spec.tag}, io.getvalue()))",
                    "            io = outer",
                ]
            lines += ["        _f = '_tagged_fields'", "        w_tagged(io, items)"]
        lines += [
            "        pass",
            "    except CodecError as exc:",
            "        exc.add_field_prefix(_f)",
            "        raise",
        ]
        code.append("\n".join(lines))
        return f"{fname}(obj, io, this)"


def null_uuid() -> uuid.UUID:
    """The all-zero UUID Kafka uses as "no topic id"."""
    return w.NULL_UUID




class NullableStruct(Construct):  # type: ignore[misc]
    """A struct that may be null: an int8 marker (-1 null, 1 present), then the struct."""

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
        return self.subcon._parsereport(stream, context, path)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            stream.write(b"\xff")
            return obj
        stream.write(b"\x01")
        return self.subcon._build(obj, stream, context, path)

    def _emitparse(self, code: Any) -> str:
        _prelude(code)
        fname = f"parse_nullable_{code.allocateId()}"
        code.append(f"""
            def {fname}(io, this):
                if r_i8(io) < 0:
                    return None
                return {self.subcon._compileparse(code)}
        """)
        return f"{fname}(io, this)"

    def _emitbuild(self, code: Any) -> str:
        _prelude(code)
        fname = f"build_nullable_{code.allocateId()}"
        code.append(f"""
            def {fname}(obj, io, this):
                if obj is None:
                    io.write(b"\\xff")
                    return
                io.write(b"\\x01")
                {self.subcon._compilebuild(code)}
        """)
        return f"{fname}(obj, io, this)"
