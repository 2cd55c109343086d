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
import struct
import uuid
from collections.abc import Sequence
from io import BytesIO
from typing import Any

from construct import Construct

from . import _wire as w
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
    """A primitive read and written by one pair of ``_wire`` functions."""

    def __init__(
        self, name: str, reader: str, writer: str, min_size: int, fmt: str | None = None
    ) -> None:
        super().__init__()
        self.kafka_type = name
        # struct format of fixed-width types: the compiled code reads runs of
        # consecutive fixed-width fields (and arrays of them) with one unpack.
        self.fmt = fmt
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
        # construct's own Struct stores the expression's value in the context for
        # later fields to read, so it must evaluate to the object built.
        _prelude(code)
        return f"({self.writer_name}(io, obj), obj)[1]"

    def emit_write(self) -> str:
        """The bare write call, for schemas that do not use the value."""
        return f"{self.writer_name}(io, obj)"


Int8 = Primitive("int8", "r_i8", "w_i8", 1, "b")
Int16 = Primitive("int16", "r_i16", "w_i16", 2, "h")
Int32 = Primitive("int32", "r_i32", "w_i32", 4, "i")
Int64 = Primitive("int64", "r_i64", "w_i64", 8, "q")
UInt16 = Primitive("uint16", "r_u16", "w_u16", 2, "H")
UInt32 = Primitive("uint32", "r_u32", "w_u32", 4, "I")
Float64 = Primitive("float64", "r_f64", "w_f64", 8, "d")
Boolean = Primitive("bool", "r_bool", "w_bool", 1, "?")
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
        fmt = getattr(self.subcon, "fmt", None)
        if fmt is not None:
            size = struct.calcsize(">" + fmt)
            code.append(f"""
                def {fname}(io, this):
                    n = r_count(io, {self.compact}, {self.nullable})
                    if n < 0:
                        return None
                    data = io.read(n * {size})
                    if len(data) != n * {size}:
                        raise DecodeError(f"truncated: needed {{n * {size}}} bytes, {{len(data)}} left")
                    return list(unpack_from_fmt(">%d{fmt}" % n, data))
            """)
            return f"{fname}(io, this)"
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
    #
    # Each schema compiles to a pair of closures made on first call: the closure
    # binds the dataclass, its slot setters, struct packers and defaults as
    # locals, so the per-message code does no global or dict lookups. Frozen
    # dataclasses are filled through their slot descriptors (a frozen __init__
    # costs about three times as much), and runs of consecutive fixed-width
    # fields are read and written with a single struct call.

    def _link(self, code: Any, value: Any) -> str:
        code.linkedinstances[id(value)] = value
        return f"linkedinstances[{id(value)}]"

    def _runs(self, build: bool) -> list[list[tuple[str, Any]]]:
        """Group fields into runs of consecutive fixed-width primitives."""
        runs: list[list[tuple[str, Any]]] = []
        for name, sc in self.fields:
            if runs and self._fixed(sc, build) and self._fixed(runs[-1][-1][1], build):
                runs[-1].append((name, sc))
            else:
                runs.append([(name, sc)])
        return runs

    @staticmethod
    def _fixed(sc: Any, build: bool) -> bool:
        fmt = getattr(sc, "fmt", None)
        # On build, bools go through w_bool: struct's "?" would accept any object.
        return fmt is not None and not (build and fmt == "?")

    def _slot_setters(self) -> dict[str, Any]:
        setters = getattr(self, "_setters", None)
        if setters is None:
            setters = {
                f.name: self.cls.__dict__[f.name].__set__ for f in dataclasses.fields(self.cls)
            }
            self._setters = setters
        return setters

    def _emitparse(self, code: Any) -> str:
        _prelude(code)
        ident = code.allocateId()
        fname = f"parse_schema_{ident}"
        setters = self._slot_setters()
        binds = [f"cls = {self._link(code, self.cls)}", "new = object.__new__"]
        body = ["        _f = None", "        try:"]
        assigned: list[str] = []
        for run in self._runs(build=False):
            if len(run) > 1:
                names = [n for n, _ in run]
                fmt = ">" + "".join(sc.fmt for _, sc in run)
                st = struct.Struct(fmt)
                self._keep(st)
                ends = []
                pos = 0
                for _, sc in run:
                    pos += struct.calcsize(">" + sc.fmt)
                    ends.append(pos)
                binds.append(f"unpack_{len(binds)} = {self._link(code, st)}.unpack")
                run_info = (tuple(names), tuple(ends))
                self._keep(run_info)
                body += [
                    "            _f = None",
                    f"            {', '.join('v_' + n for n in names)}, = unpack_{len(binds) - 1}"
                    f"(r_run(io, {st.size}, {self._link(code, run_info)}))",
                ]
                assigned += names
            else:
                name, sc = run[0]
                body += [
                    f"            _f = {name!r}",
                    f"            v_{name} = {sc._compileparse(code)}",
                ]
                assigned.append(name)
        tagged_names = [t.name for t in self.tagged]
        if self.flexible:
            for spec in self.tagged:
                binds.append(f"d_{spec.name} = {self._link(code, spec.default)}")
                body.append(f"            v_{spec.name} = d_{spec.name}")
            # Most structs carry no tagged fields: a single 0 byte, checked inline.
            body += [
                "            _f = '_tagged_fields'",
                "            unknown = []",
                "            ntags = io.read(1)",
                "            if ntags == b'\\x00':",
                "                ntags = 0",
                "            else:",
                "                if ntags:",
                "                    io.seek(-1, 1)",
                "                ntags = r_uvarint(io)",
                "            for _ in range(ntags):",
                "                tag, data = r_tag_header(io)",
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
                body += [
                    f"                {keyword} tag == {spec.tag}:",
                    f"                    _f = {spec.name!r}",
                    f"                    v_{spec.name} = {sub}(BytesIO(data), this)",
                    "                    _f = '_tagged_fields'",
                ]
                keyword = "elif"
            if self.tagged:
                body += ["                else:", "                    unknown.append((tag, data))"]
            else:
                body += ["                unknown.append((tag, data))"]
            assigned += tagged_names
        body += [
            "            pass",
            "        except CodecError as exc:",
            "            exc.add_field_prefix(_f)",
            "            raise",
            "        o = new(cls)",
        ]
        for name in assigned:
            binds.append(f"s_{name} = {self._link(code, setters[name])}")
            body.append(f"        s_{name}(o, v_{name})")
        # Fields this version lacks take their dataclass defaults.
        for f in dataclasses.fields(self.cls):
            if f.name in assigned:
                continue
            binds.append(f"s_{f.name} = {self._link(code, setters[f.name])}")
            if f.name == "unknown_tagged_fields" and self.flexible:
                body.append("        s_unknown_tagged_fields(o, unknown)")
            elif f.default_factory is not dataclasses.MISSING:
                binds.append(f"f_{f.name} = {self._link(code, f.default_factory)}")
                body.append(f"        s_{f.name}(o, f_{f.name}())")
            else:
                binds.append(f"d_{f.name} = {self._link(code, f.default)}")
                body.append(f"        s_{f.name}(o, d_{f.name})")
        body.append("        return o")
        lines = [f"def make_{fname}():"]
        lines += ["    " + b for b in binds]
        lines += ["    def parse(io, this):", *body, "    return parse"]
        lines += [
            f"def {fname}(io, this):",
            f"    global {fname}",
            f"    {fname} = make_{fname}()",
            f"    return {fname}(io, this)",
        ]
        code.append("\n".join(lines))
        return f"{fname}(io, this)"

    def _keep(self, obj: Any) -> None:
        # Objects referenced by id from compiled code must outlive it.
        kept = self.__dict__.setdefault("_kept", [])
        kept.append(obj)

    def _emitbuild(self, code: Any) -> str:
        _prelude(code)
        ident = code.allocateId()
        fname = f"build_schema_{ident}"
        binds = [f"cls = {self._link(code, self.cls)}"]
        body = [
            "        if type(struct) is not cls:",
            f"            raise EncodeError('expected {self.cls.__qualname__}, got ' + type(struct).__name__,"
            f" message_name={self.schema_name!r})",
            "        _f = None",
            "        try:",
        ]
        for run in self._runs(build=True):
            if len(run) > 1:
                st = struct.Struct(">" + "".join(sc.fmt for _, sc in run))
                self._keep(st)
                checks = tuple((n, sc.writer_name) for n, sc in run)
                self._keep(checks)
                k = len(binds)
                binds.append(f"pack_{k} = {self._link(code, st)}.pack")
                args = ", ".join(f"struct.{n}" for n, _ in run)
                body += [
                    "            _f = None",
                    "            try:",
                    f"                io.write(pack_{k}({args}))",
                    "            except Exception:",
                    f"                explain_run(struct, {self._link(code, checks)})",
                ]
            else:
                name, sc = run[0]
                write = sc.emit_write() if isinstance(sc, Primitive) else sc._compilebuild(code)
                body += [
                    f"            _f = {name!r}",
                    f"            obj = struct.{name}",
                    f"            {write}",
                ]
        for name, default in self.absent:
            binds.append(f"a_{name} = {self._link(code, default)}")
            body += [
                f"            if struct.{name} != a_{name}:",
                f"                _f = {name!r}",
                f"                raise EncodeError('not supported by {self.schema_name}')",
            ]
        if self.flexible:
            body.append("            items = list(struct.unknown_tagged_fields)")
            for spec in self.tagged:
                binds.append(f"d_{spec.name} = {self._link(code, spec.default)}")
                body += [
                    f"            _f = {spec.name!r}",
                    f"            obj = struct.{spec.name}",
                    f"            if obj != d_{spec.name}:",
                    "                outer, io = io, BytesIO()",
                    f"                {spec.subcon._compilebuild(code)}",
                    f"                items.append(({spec.tag}, io.getvalue()))",
                    "                io = outer",
                ]
            body += ["            _f = '_tagged_fields'", "            w_tagged(io, items)"]
        body += [
            "            pass",
            "        except CodecError as exc:",
            "            exc.add_field_prefix(_f)",
            "            raise",
        ]
        lines = [f"def make_{fname}():"]
        lines += ["    " + b for b in binds]
        lines += ["    def build(struct, io, this):", *body, "    return build"]
        lines += [
            f"def {fname}(struct, io, this):",
            f"    global {fname}",
            f"    {fname} = make_{fname}()",
            f"    return {fname}(struct, io, this)",
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
