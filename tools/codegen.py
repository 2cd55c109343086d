"""Generate trafka's protocol modules from Apache Kafka's JSON message specs.

Usage::

    python -m trafka.tools.codegen [--specs DIR] [--old-specs DIR] [--check]

Writes ``codec/_error_codes.py`` (from ``errors.json``) and ``codec/messages/``:
one module per API whose request lists the ``broker`` listener (named by key and
name, ``k00_produce.py``), the request/response headers and the consumer
protocol's embedded data types. ``--check`` writes nothing and exits 1 when a
committed module differs from what the specs produce.

A message's class is written out whole, methods included (:func:`emit_written_class`,
``codec/_frozen.py``), rather than left to ``@dataclasses.dataclass`` at import:
importing the modules was most of a client's import time (issue #48). The
decorated form (:func:`emit_dataclass`, ``generate(..., decorated=True)``) is
kept as the reference the written-out classes are tested against.

What is carried over from the specs are facts: names (mechanically converted to
snake_case), types, versions, nullability, tagged fields, defaults and the
ignorable flag. Descriptions and comments are not.

Old versions (issue #37): Kafka 4.0 removed the versions of KIP-896 from its
specs (Produce v0-2, Fetch v0-3, JoinGroup v0-1...). Clients older than Kafka 4
still send them, so each message is generated over the union of its versions in
the main specs and in Kafka 3.9's (``--old-specs``): the main spec is the
authority for every version it defines, and the 3.9 spec only for the versions
below the main spec's lowest (:func:`merge_old_versions`). The merge is checked:
every version must have the same wire layout as its own spec alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import keyword
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GENERATOR = "trafka.tools.codegen"
REPO = Path(__file__).resolve().parent.parent
# The specs the codec is generated from, carried by the repository (see
# codec/specs/README.md): a clone needs nothing beside it.
SPECS_ROOT = REPO / "codec" / "specs"
DEFAULT_SPECS = SPECS_ROOT / "kafka-protocol"
# Kafka 3.9's specs: the versions that Kafka 4.0 removed (KIP-896) come from here.
DEFAULT_OLD_SPECS = SPECS_ROOT / "kafka-protocol-3.9"
# Message specs that replace the snapshot's of the same name: versions that
# Apache Kafka made stable after the snapshot (see that folder's README).
OVERRIDES = SPECS_ROOT / "overrides"
# Message specs of APIs newer than the snapshot (see that folder's README).
ADDITIONS = SPECS_ROOT / "additions"

PRIMITIVES = {
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "float64",
    "bool",
    "string",
    "bytes",
    "records",
    "uuid",
}
# Spec data types generated besides the APIs: the consumer protocol's payloads,
# carried inside JoinGroup/SyncGroup as bytes.
DATA_SPECS = ("ConsumerProtocolSubscription", "ConsumerProtocolAssignment")
MAX_VERSION = 0x7FFF


# -- reading the specs ------------------------------------------------------------


def strip_comments(text: str) -> str:
    """Remove ``//`` comments outside JSON strings."""
    out = []
    i = 0
    n = len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif c == "/" and text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def load_spec(path: Path) -> dict[str, Any]:
    return json.loads(strip_comments(path.read_text()))  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Versions:
    """A version range such as ``0+``, ``3-7``, ``5`` or ``none``."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return cls(1, 0)
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), MAX_VERSION)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, v: object) -> bool:
        return isinstance(v, int) and self.low <= v <= self.high

    @property
    def empty(self) -> bool:
        return self.low > self.high


def snake(name: str) -> str:
    """CamelCase (or camelCase) to snake_case, mechanically: ``ThrottleTimeMs`` -> ``throttle_time_ms``."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    s = s.lower()
    return s + "_" if keyword.iskeyword(s) else s


@dataclass
class Field:
    name: str  # the spec's name
    attr: str  # snake_case attribute
    type: str  # primitive name, or struct name (element type for arrays)
    is_array: bool
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    ignorable: bool
    default: Any  # the spec's default text, or None
    flexible_override: Versions | None
    struct: Struct | None = None

    @property
    def is_struct(self) -> bool:
        return self.struct is not None


@dataclass
class Struct:
    name: str
    versions: Versions
    fields: list[Field] = field(default_factory=list)


def parse_fields(
    raw: Iterable[dict[str, Any]], structs: dict[str, Struct], common: dict[str, Any]
) -> list[Field]:
    out = []
    for f in raw:
        ftype = f["type"]
        is_array = ftype.startswith("[]")
        elem = ftype[2:] if is_array else ftype
        fld = Field(
            name=f["name"],
            attr=snake(f["name"]),
            type=elem,
            is_array=is_array,
            versions=Versions.parse(f.get("versions")),
            nullable=Versions.parse(f.get("nullableVersions")),
            tagged=Versions.parse(f.get("taggedVersions")),
            tag=f.get("tag"),
            ignorable=bool(f.get("ignorable", False)),
            default=f.get("default"),
            flexible_override=Versions.parse(f["flexibleVersions"])
            if "flexibleVersions" in f
            else None,
        )
        if elem not in PRIMITIVES:
            if elem not in structs:
                definition = f if "fields" in f else common.get(elem)
                if definition is None:
                    raise SystemExit(f"struct {elem} has no definition")
                st = Struct(elem, Versions.parse(definition.get("versions", f.get("versions"))))
                structs[elem] = st
                st.fields = parse_fields(definition["fields"], structs, common)
            fld.struct = structs[elem]
        out.append(fld)
    return out


@dataclass
class Message:
    spec: dict[str, Any]
    name: str
    versions: Versions
    flexible: Versions
    fields: list[Field]
    structs: dict[str, Struct]  # nested structs, in definition order

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> Message:
        structs: dict[str, Struct] = {}
        common = {c["name"]: c for c in spec.get("commonStructs", [])}
        fields = parse_fields(spec.get("fields", []), structs, common)
        return cls(
            spec=spec,
            name=spec["name"],
            versions=Versions.parse(spec["validVersions"]),
            flexible=Versions.parse(spec.get("flexibleVersions", "none")),
            fields=fields,
            structs=structs,
        )


# -- the versions Kafka 4.0 removed -------------------------------------------------


def _range_text(low: int, high: int) -> str:
    return f"{low}+" if high >= MAX_VERSION else f"{low}-{high}"


def _field_versions(new: str | None, old: str | None, below: int, where: str) -> str | None:
    """``new``'s range extended by ``old``'s below version ``below``.

    The old spec speaks only for the versions the new one dropped, so its range
    is clipped to ``below - 1`` first (a ``0+`` in 3.9 that the new spec ends
    at ``0-1`` must stay ``0-1``). The result has to be one range.
    """
    n, o = Versions.parse(new), Versions.parse(old)
    o = Versions(o.low, min(o.high, below - 1))
    if o.empty:
        return new
    # What the new spec says below its own lowest version means nothing.
    n = Versions(max(n.low, below), n.high)
    if n.empty:
        return _range_text(o.low, o.high)
    if n.low != o.high + 1:
        raise SystemExit(f"{where}: versions {old} (old) and {new} do not join into one range")
    return _range_text(o.low, n.high)


def _merge_fields(
    new: list[dict[str, Any]], old: list[dict[str, Any]], below: int, where: str
) -> list[dict[str, Any]]:
    """``new``'s fields, extended to the versions below ``below`` that ``old`` has.

    A field only the old spec knows goes right after the field that precedes it
    there (or first), which keeps the wire order of every version.
    """
    old_by_name = {f["name"]: f for f in old}
    out: list[dict[str, Any]] = []
    for f in new:
        o = old_by_name.get(f["name"])
        if o is None:
            out.append(f)
            continue
        out.append(_merge_field(f, o, below, f"{where}.{f['name']}"))
    names = {f["name"] for f in new}
    for i, o in enumerate(old):
        if o["name"] in names:
            continue
        clipped = Versions.parse(o.get("versions"))
        if clipped.low >= below:
            continue  # a field the new spec dropped in a version it defines
        only_old = _merge_field({}, o, below, f"{where}.{o['name']}")
        if i == 0:
            out.insert(0, only_old)
        else:
            before = old[i - 1]["name"]
            at = next(j for j, f in enumerate(out) if f["name"] == before)
            out.insert(at + 1, only_old)
        names.add(o["name"])
    return out


def _merge_field(
    new: dict[str, Any], old: dict[str, Any], below: int, where: str
) -> dict[str, Any]:
    merged = dict(old) if not new else dict(new)
    if new and new["type"] != old["type"]:
        raise SystemExit(f"{where}: type {old['type']} (old) and {new['type']} differ")
    for key in ("versions", "nullableVersions"):
        versions = _field_versions(
            new.get(key, "none" if new else None), old.get(key), below, where
        )
        if versions is not None:
            merged[key] = versions
    if not new and "versions" in merged:
        merged["versions"] = _field_versions(None, old["versions"], below, where)
    if "fields" in old or "fields" in new:
        merged["fields"] = _merge_fields(new.get("fields", []), old.get("fields", []), below, where)
    return merged


def merge_old_versions(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """``new`` extended down to the versions only ``old`` (Kafka 3.9's spec) has.

    Returns ``new`` itself when the old spec has no lower version. Tagged
    versions and flexibility are the new spec's: the versions Kafka 4.0 removed
    are all below the first flexible one. Old versions that were flexible
    already were not removed by KIP-896 but retired for another reason (the
    share-group APIs' early-access v0 of Kafka 4.0, gone in 4.1): ``new`` is
    returned, without them.
    """
    nv, ov = Versions.parse(new["validVersions"]), Versions.parse(old["validVersions"])
    if ov.empty or ov.low >= nv.low:
        return new
    old_flexible = Versions.parse(old.get("flexibleVersions", "none"))
    if not old_flexible.empty and old_flexible.low <= ov.low:
        return new
    name = new["name"]
    flexible = Versions.parse(new.get("flexibleVersions", "none"))
    if not flexible.empty and flexible.low < nv.low:
        raise SystemExit(f"{name}: old versions below {nv.low} would be flexible")
    merged = dict(new)
    merged["validVersions"] = f"{ov.low}-{nv.high}"
    merged["fields"] = _merge_fields(new.get("fields", []), old.get("fields", []), nv.low, name)
    old_common = {c["name"]: c for c in old.get("commonStructs", [])}
    merged["commonStructs"] = [
        _merge_field(c, old_common[c["name"]], nv.low, f"{name}.{c['name']}")
        if c["name"] in old_common
        else c
        for c in new.get("commonStructs", [])
    ]
    return merged


def check_merge(merged: Message, new: Message, old: Message) -> None:
    """Every version of ``merged`` has the wire layout of the spec it came from."""
    ours = SchemaWriter(merged, merged.name, with_absent=False)
    for source in (new, old):
        theirs = SchemaWriter(source, source.name, with_absent=False)
        for v in range(source.versions.low, source.versions.high + 1):
            if source is old and v >= new.versions.low:
                break
            if ours.top(v) != theirs.top(v):
                raise SystemExit(f"{merged.name} v{v}: the merged spec changes its layout")


# -- emitting ---------------------------------------------------------------------


def py_type(f: Field, qual: str) -> str:
    base = {
        "int8": "int",
        "int16": "int",
        "int32": "int",
        "int64": "int",
        "uint16": "int",
        "uint32": "int",
        "float64": "float",
        "bool": "bool",
        "string": "str",
        "bytes": "bytes",
        "records": "bytes",
        "uuid": "uuid.UUID",
    }.get(f.type)
    if base is None:
        base = f"{qual}.{f.type}"
    t = f"list[{base}]" if f.is_array else base
    nullable = not f.nullable.empty or f.type == "records" or f.default == "null"
    return f"{t} | None" if nullable else t


def default_expr(f: Field, qual: str, factories: dict[str, str]) -> str:
    """The dataclass default (``= ...`` right-hand side) for a field."""
    d = f.default
    if d == "null":
        return "None"
    if f.is_array:
        return "dataclasses.field(default_factory=list)"
    if f.struct is not None:
        fn = f"_new_{qual.replace('.', '_')}_{f.type}"
        factories[fn] = f"{qual}.{f.type}"
        return f"dataclasses.field(default_factory={fn})"
    t = f.type
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return str(int(str(d), 0)) if d is not None else "0"
    if t == "float64":
        return repr(float(d)) if d is not None else "0.0"
    if t == "bool":
        return "True" if str(d).lower() == "true" else "False"
    if t == "string":
        return repr(d) if d is not None else "''"
    if t == "bytes":
        return "b''"
    if t == "records":
        return "None"
    if t == "uuid":
        return "NULL_UUID"
    raise SystemExit(f"no default for {f.name}: {t}")


def emit_dataclass(
    lines: list[str],
    name: str,
    fields: list[Field],
    nested: list[Struct],
    qual: str,
    flexible_any: bool,
    indent: str,
    factories: dict[str, str],
) -> None:
    """The decorated form of a class: ``@dataclasses.dataclass`` makes its
    methods at import. The reference that the written-out form is tested
    against (tests/codec/test_frozen_classes.py); the modules were generated
    this way until import time mattered (issue #48)."""
    lines.append(f"{indent}@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)")
    lines.append(f"{indent}class {name}:")
    inner = indent + "    "
    for st in nested:
        emit_dataclass(lines, st.name, st.fields, [], qual, flexible_any, inner, factories)
        lines.append("")
    if not fields and not flexible_any:
        lines.append(f"{inner}pass")
    for f in fields:
        if f.type == "records":
            lines.append(
                f"{inner}{f.attr}: {py_type(f, qual)} = dataclasses.field("
                f"default={default_expr(f, qual, factories)}, metadata=RECORDS)"
            )
        else:
            lines.append(
                f"{inner}{f.attr}: {py_type(f, qual)} = {default_expr(f, qual, factories)}"
            )
    if flexible_any:
        lines.append(
            f"{inner}unknown_tagged_fields: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)"
        )


# Names the written-out methods use besides their fields.
RESERVED = {"self", "other", "setattr_", "LIST"}


@dataclass(frozen=True)
class Slot:
    """A field of a written-out class."""

    attr: str
    annotation: str
    default: str  # __init__'s default: a literal, or a factory marker
    make: str | None  # with a marker: what makes the value when none is given


def slot_of(f: Field, qual: str, factories: dict[str, str]) -> Slot:
    annotation = py_type(f, qual)
    if f.default != "null" and f.is_array:
        return Slot(f.attr, annotation, "LIST", "[]")
    if f.default != "null" and f.struct is not None:
        fn = f"_new_{qual.replace('.', '_')}_{f.type}"
        factories[fn] = f"{qual}.{f.type}"
        return Slot(f.attr, annotation, factory_marker(fn), f"{fn}()")
    return Slot(f.attr, annotation, default_expr(f, qual, factories), None)


def tuple_text(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def factory_marker(fn: str) -> str:
    return "_NEW" + fn.removeprefix("_new")


def emit_written_class(
    lines: list[str],
    name: str,
    fields: list[Field],
    nested: list[Struct],
    qual: str,
    flexible_any: bool,
    indent: str,
    factories: dict[str, str],
) -> None:
    """A class with its methods written out (see codec/_frozen.py): what the
    decorated form's dataclass makes, without making it at import."""
    slots = [slot_of(f, qual, factories) for f in fields]
    if flexible_any:
        slots.append(Slot("unknown_tagged_fields", "list[tuple[int, bytes]]", "LIST", "[]"))
    for slot in slots:
        if slot.attr in RESERVED:
            raise SystemExit(f"{qual}: field {slot.attr} clashes with a name of the methods")
    records = tuple(f.attr for f in fields if f.type == "records")
    inner = indent + "    "
    body = inner + "    "
    lines.append(f"{indent}@message(records={records!r})" if records else f"{indent}@message")
    lines.append(f"{indent}class {name}:")
    for st in nested:
        emit_written_class(lines, st.name, st.fields, [], qual, flexible_any, inner, factories)
        lines.append("")
    lines.append(f"{inner}__slots__ = {tuple(s.attr for s in slots)!r}")
    lines += [f"{inner}{s.attr}: {s.annotation}" for s in slots]
    lines.append("")
    if slots:
        lines += [f"{inner}def __init__(", f"{body}self,", f"{body}*,"]
        lines += [f"{body}{s.attr}: {s.annotation} = {s.default}," for s in slots]
        lines.append(f"{inner}) -> None:")
        for s in slots:
            value = (
                s.attr if s.make is None else f"{s.make} if {s.attr} is {s.default} else {s.attr}"
            )
            lines.append(f"{body}setattr_(self, {s.attr!r}, {value})")
    else:
        lines += [f"{inner}def __init__(self) -> None:", f"{body}pass"]
    mine = tuple_text([f"self.{s.attr}" for s in slots])
    theirs = tuple_text([f"other.{s.attr}" for s in slots])
    lines += [
        "",
        f"{inner}def __eq__(self, other: object) -> bool:",
        f"{body}if other.__class__ is self.__class__:",
        f"{body}    return {mine} == {theirs}",
        f"{body}return NotImplemented",
        "",
        f"{inner}def __hash__(self) -> int:",
        f"{body}return hash({mine})",
    ]


class SchemaWriter:
    """Emits one construct declaration per (struct, version), sharing identical ones."""

    def __init__(self, msg: Message, qual: str, *, with_absent: bool = True):
        # with_absent=False: the wire layout only (no absent-field defaults, nested
        # declarations inline), to compare versions across specs.
        self.msg = msg
        self.qual = qual
        self.with_absent = with_absent
        self.decls: list[str] = []
        self.by_text: dict[str, str] = {}

    def prim(self, f: Field, v: int, flexible: bool) -> str:
        if f.flexible_override is not None:
            flexible = v in f.flexible_override
        # nullableVersions of an array applies to the array, never to its elements.
        nullable = v in f.nullable and not f.is_array
        t = f.type
        if t in ("string", "bytes"):
            base = "String" if t == "string" else "Bytes"
            return "p." + ("Compact" if flexible else "") + ("Nullable" if nullable else "") + base
        if t == "records":
            if nullable:
                return "p.CompactRecords" if flexible else "p.Records"
            return "p.CompactBytes" if flexible else "p.Bytes"
        return (
            "p."
            + {
                "int8": "Int8",
                "int16": "Int16",
                "int32": "Int32",
                "int64": "Int64",
                "uint16": "UInt16",
                "uint32": "UInt32",
                "float64": "Float64",
                "bool": "Boolean",
                "uuid": "Uuid",
            }[t]
        )

    def field_construct(self, f: Field, v: int, flexible: bool) -> str:
        if f.struct is not None:
            elem = self.struct_decl(f.struct, v, flexible)
            if not f.is_array and v in f.nullable:
                return f"p.NullableStruct({elem})"
        else:
            elem = self.prim(f, v, flexible)
        if f.is_array:
            args = [elem]
            if flexible:
                args.append("compact=True")
            if v in f.nullable:
                args.append("nullable=True")
            return f"p.Array({', '.join(args)})"
        return elem

    def body(self, name: str, cls: str, fields: list[Field], v: int, flexible: bool) -> str:
        regular = []
        tagged = []
        absent = []
        for f in fields:
            present = v in f.versions
            is_tagged = f.tag is not None and v in f.tagged
            if present and is_tagged:
                tagged.append(
                    f"p.TaggedField({f.tag}, {f.attr!r}, {self.field_construct(f, v, flexible)}, "
                    f"{self.default_value(f)})"
                )
            elif present and f.tag is None:
                regular.append(f"({f.attr!r}, {self.field_construct(f, v, flexible)})")
            elif not f.ignorable and self.with_absent:
                absent.append(f"({f.attr!r}, {self.default_value(f)})")
        parts = [repr(name), cls, "[" + ", ".join(regular) + "]"]
        if tagged:
            parts.append("tagged=[" + ", ".join(tagged) + "]")
        if flexible:
            parts.append("flexible=True")
        if absent:
            parts.append("absent=[" + ", ".join(absent) + "]")
        return f"p.Schema({', '.join(parts)})"

    def default_value(self, f: Field) -> str:
        """The default as a value (not a dataclass default)."""
        if f.default == "null":
            return "None"
        if f.is_array:
            return "[]"
        if f.struct is not None:
            return f"{self.qual}.{f.type}()"
        return default_expr(f, self.qual, {})

    def intern(self, stem: str, text: str) -> str:
        if not self.with_absent:
            return text  # a layout to compare: nested declarations inline
        name = self.by_text.get(text)
        if name is None:
            name = f"_{stem}_{len(self.by_text)}"
            self.by_text[text] = name
            self.decls.append(f"{name} = {text}")
        return name

    def struct_decl(self, st: Struct, v: int, flexible: bool) -> str:
        text = self.body(f"{self.qual}.{st.name}", f"{self.qual}.{st.name}", st.fields, v, flexible)
        return self.intern(st.name, text)

    def top(self, v: int) -> str:
        flexible = v in self.msg.flexible
        return self.body(f"{self.msg.name} v{v}", self.qual, self.msg.fields, v, flexible)


def emit_message(
    msg: Message, lines: list[str], factories: dict[str, str], decorated: bool = False
) -> list[str]:
    """Emit the class and per-version schemas; return the schema variable names."""
    flexible_any = not msg.flexible.empty and msg.flexible.low <= msg.versions.high
    emit_class = emit_dataclass if decorated else emit_written_class
    emit_class(
        lines,
        msg.name,
        msg.fields,
        list(msg.structs.values()),
        msg.name,
        flexible_any,
        "",
        factories,
    )
    lines.append("")
    lines.append("")
    writer = SchemaWriter(msg, msg.name)
    names = []
    tops = []
    for v in range(msg.versions.low, msg.versions.high + 1):
        text = writer.top(v)
        var = f"{msg.name}V{v}"
        tops.append(f"{var} = {text}")
        names.append(var)
    lines.extend(writer.decls)
    lines.extend(tops)
    lines.append("")
    return names


HEADER = """\
# Generated by {gen} from Apache Kafka's message specs ({spec}). DO NOT EDIT.
# Regenerate with `make codegen`; tests/codec/test_codegen.py fails when this file is stale.
"""


def module_prelude(spec_id: str, decorated: bool = False) -> list[str]:
    lines = [
        HEADER.format(gen=GENERATOR, spec=spec_id),
        "from __future__ import annotations",
        "",
    ]
    if decorated:
        return [
            *lines,
            "import dataclasses",
            "import uuid",
            "",
            "from .. import primitives as p",
            "from .._wire import NULL_UUID",
            "",
            "RECORDS = {'kafka_type': 'records'}",
            "",
        ]
    return [
        *lines,
        "import uuid",
        "",
        "from .. import primitives as p",
        "from .._frozen import LIST, factory, message, setattr_",
        "from .._wire import NULL_UUID",
        "",
    ]


def emit_factories(factories: dict[str, str], decorated: bool = False) -> list[str]:
    out = []
    for fn, target in sorted(factories.items()):
        out += ["", "", f"def {fn}() -> {target}:", f"    return {target}()"]
        if not decorated:
            out += ["", "", f"{factory_marker(fn)} = factory({fn})"]
    return out


def render_api(req: Message, resp: Message, spec_id: str, decorated: bool = False) -> str:
    lines = module_prelude(spec_id, decorated)
    factories: dict[str, str] = {}
    body: list[str] = []
    req_names = emit_message(req, body, factories, decorated)
    body.append("")
    resp_names = emit_message(resp, body, factories, decorated)
    lines += emit_factories(factories, decorated)
    lines += ["", "", *body]
    spec = req.spec
    deprecated = Versions.parse(spec.get("deprecatedVersions"))
    lines += [
        "",
        f"API_KEY = {spec['apiKey']}",
        f"API_NAME = {req.name.removesuffix('Request')!r}",
        f"MIN_VERSION = {req.versions.low}",
        f"MAX_VERSION = {req.versions.high}",
        f"FIRST_FLEXIBLE_VERSION = {None if req.flexible.empty else req.flexible.low}",
        f"DEPRECATED_VERSIONS = {None if deprecated.empty else (deprecated.low, min(deprecated.high, req.versions.high))}",
        f"LATEST_VERSION_UNSTABLE = {bool(spec.get('latestVersionUnstable', False))}",
        f"LISTENERS = {tuple(spec.get('listeners', ()))!r}",
        f"Request = {req.name}",
        f"Response = {resp.name}",
        "REQUEST_SCHEMAS = {" + ", ".join(f"{n.rsplit('V', 1)[1]}: {n}" for n in req_names) + "}",
        "RESPONSE_SCHEMAS = {" + ", ".join(f"{n.rsplit('V', 1)[1]}: {n}" for n in resp_names) + "}",
        "",
    ]
    return "\n".join(lines)


def render_plain(messages: list[Message], spec_id: str, decorated: bool = False) -> str:
    lines = module_prelude(spec_id, decorated)
    factories: dict[str, str] = {}
    body: list[str] = []
    for m in messages:
        names = emit_message(m, body, factories, decorated)
        body.append(
            f"{m.name.upper()}_SCHEMAS = {{"
            + ", ".join(f"{n.rsplit('V', 1)[1]}: {n}" for n in names)
            + "}"
        )
        body.append("")
    lines += emit_factories(factories, decorated)
    lines += ["", "", *body]
    return "\n".join(lines)


def render_error_codes(errors: list[dict[str, Any]], spec_id: str) -> str:
    lines = [
        HEADER.format(gen=GENERATOR, spec=spec_id),
        '"""Kafka error codes, with their retriable flag and default message."""',
        "",
        "from __future__ import annotations",
        "",
        "import enum",
        "",
        "",
        "class ErrorCode(enum.IntEnum):",
        '    """A Kafka error code. ``retriable`` and ``message`` come from Kafka\'s error table."""',
        "",
        "    retriable: bool",
        "    message: str | None",
        "",
        "    # Defaults only so that type checkers accept lookups by value: ErrorCode(3).",
        "    def __new__(cls, code: int, retriable: bool = False, message: str | None = None) -> ErrorCode:",
        "        obj = int.__new__(cls, code)",
        "        obj._value_ = code",
        "        obj.retriable = retriable",
        "        obj.message = message",
        "        return obj",
        "",
        "    @classmethod",
        "    def of(cls, code: int) -> ErrorCode:",
        '        """The member for ``code``; a code this table lacks maps to UNKNOWN_SERVER_ERROR."""',
        "        member = cls._value2member_map_.get(code)",
        "        return cls.UNKNOWN_SERVER_ERROR if member is None else cls(code)",
        "",
    ]
    for e in sorted(errors, key=lambda e: e["code"]):
        lines.append(f"    {e['name']} = ({e['code']}, {bool(e['retriable'])}, {e['message']!r})")
    lines.append("")
    return "\n".join(lines)


def render_registry(apis: list[tuple[int, str, str]], spec_id: str) -> str:
    lines = [
        HEADER.format(gen=GENERATOR, spec=spec_id),
        '"""Generated protocol modules, one per API, loaded on first use by trafka.codec.protocol."""',
        "",
        "from __future__ import annotations",
        "",
        "import enum",
        "",
        "",
        "class ApiKey(enum.IntEnum):",
        '    """Every API the codec speaks, by its key: an int wherever a key is expected."""',
        "",
    ]
    for key, _, name in sorted(apis):
        lines.append(f"    {snake(name).upper()} = {key}")
    lines += [
        "",
        "",
        "# api key -> (module name, API name)",
        "API_MODULES: dict[int, tuple[str, str]] = {",
    ]
    for key, module, name in sorted(apis):
        lines.append(f"    {key}: ({module!r}, {name!r}),")
    lines += ["}", ""]
    return "\n".join(lines)


def spec_digest(specs_dir: Path, old_specs_dir: Path = DEFAULT_OLD_SPECS) -> str:
    h = hashlib.sha256()
    paths = [*sorted((specs_dir / "message").glob("*.json")), specs_dir / "errors.json"]
    for p in [*paths, *sorted(OVERRIDES.glob("*.json")), *sorted(ADDITIONS.glob("*.json"))]:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    for p in sorted((old_specs_dir / "message").glob("*.json")):
        h.update(b"old/" + p.name.encode())
        h.update(p.read_bytes())
    return "specs sha256 " + h.hexdigest()[:16]


def load_old_specs(old_specs_dir: Path) -> dict[str, dict[str, Any]]:
    """Kafka 3.9's specs by name; the folder must exist (it is an input, not optional)."""
    msg_dir = old_specs_dir / "message"
    if not msg_dir.is_dir():
        raise SystemExit(f"{msg_dir}: no such folder (Kafka 3.9's specs, see --old-specs)")
    return {p.stem: load_spec(p) for p in sorted(msg_dir.glob("*.json"))}


def message_of(
    name: str, specs: dict[str, dict[str, Any]], old_specs: dict[str, dict[str, Any]]
) -> Message:
    """The message ``name`` over its versions in both spec sets (checked)."""
    spec = specs[name]
    old = old_specs.get(name)
    if old is None:
        return Message.from_spec(spec)
    merged = merge_old_versions(spec, old)
    if merged is spec:
        return Message.from_spec(spec)
    msg = Message.from_spec(merged)
    check_merge(msg, Message.from_spec(spec), Message.from_spec(old))
    return msg


def generate(
    specs_dir: Path, old_specs_dir: Path = DEFAULT_OLD_SPECS, *, decorated: bool = False
) -> dict[Path, str]:
    """The generated files' text by path. ``decorated``: the message classes in
    their decorated form (:func:`emit_dataclass`), which is only ever compared
    with, never written."""
    spec_id = spec_digest(specs_dir, old_specs_dir)
    old_specs = load_old_specs(old_specs_dir)
    msg_dir = specs_dir / "message"
    specs = {p.stem: load_spec(p) for p in sorted(msg_dir.glob("*.json"))}
    for p in sorted(OVERRIDES.glob("*.json")):
        if p.stem not in specs:
            raise SystemExit(f"{p}: overrides no spec of the snapshot")
        specs[p.stem] = load_spec(p)
    for p in sorted(ADDITIONS.glob("*.json")):
        if p.stem in specs:
            raise SystemExit(f"{p}: the snapshot has this spec; override it instead")
        specs[p.stem] = load_spec(p)
    out: dict[Path, str] = {}
    apis = []
    for name, spec in specs.items():
        if spec["type"] != "request" or "broker" not in spec.get("listeners", ()):
            continue
        req = message_of(name, specs, old_specs)
        resp = message_of(name.removesuffix("Request") + "Response", specs, old_specs)
        if (req.versions.low, req.versions.high) != (resp.versions.low, resp.versions.high):
            raise SystemExit(f"{name}: request and response versions differ")
        key = spec["apiKey"]
        module = f"k{key:02d}_{snake(name.removesuffix('Request'))}"
        out[REPO / "codec" / "messages" / f"{module}.py"] = render_api(
            req, resp, spec_id, decorated
        )
        apis.append((key, module, name.removesuffix("Request")))
    headers = [
        Message.from_spec(specs["RequestHeader"]),
        Message.from_spec(specs["ResponseHeader"]),
    ]
    out[REPO / "codec" / "messages" / "headers.py"] = render_plain(headers, spec_id, decorated)
    data = [Message.from_spec(specs[n]) for n in DATA_SPECS]
    out[REPO / "codec" / "messages" / "consumer_protocol.py"] = render_plain(
        data, spec_id, decorated
    )
    out[REPO / "codec" / "messages" / "__init__.py"] = render_registry(apis, spec_id)
    errors = json.loads((specs_dir / "errors.json").read_text())
    out[REPO / "codec" / "_error_codes.py"] = render_error_codes(errors, spec_id)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", type=Path, default=DEFAULT_SPECS, help="the kafka-protocol folder")
    ap.add_argument(
        "--old-specs",
        type=Path,
        default=DEFAULT_OLD_SPECS,
        help="Kafka 3.9's kafka-protocol folder, for the versions Kafka 4.0 removed",
    )
    ap.add_argument("--check", action="store_true", help="fail if generated files are stale")
    args = ap.parse_args(argv)
    files = generate(args.specs, args.old_specs)
    stale = []
    for path, text in files.items():
        current = path.read_text() if path.exists() else None
        if current != text:
            stale.append(path)
            if not args.check:
                path.write_text(text)
    expected = set(files)
    for path in (REPO / "codec" / "messages").glob("*.py"):
        if path not in expected:
            stale.append(path)
            if not args.check:
                path.unlink()
    if args.check:
        for p in stale:
            print(f"stale: {p.relative_to(REPO)}", file=sys.stderr)
        return 1 if stale else 0
    print(f"{len(files)} files checked, {len(stale)} written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
