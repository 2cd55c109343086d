"""The fast-path compiler of :mod:`trafka.codec.primitives`' containers.

Job: turn a :class:`~trafka.codec.primitives.Schema`, ``Array`` or
``NullableStruct`` tree into one flat Python function per direction (nested
schemas and array loops inlined, runs of fixed-width fields read and written
with a single struct call, one-byte varints and lengths handled inline), and
wrap them in entry functions that fall back to the interpreted path.

Rules (the invariants of the fast path, stated in full in
:mod:`trafka.codec.primitives`): the compiled code accepts nothing the
interpreted path refuses and gives the same objects and bytes for what it
accepts; it allocates nothing from a length it has not checked against the
bytes received; it has no side effect before it succeeds. Whenever it raises,
the entry function rewinds and the interpreted path raises the precise error.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import keyword
import struct
import uuid
from collections.abc import Callable, Sequence
from io import BytesIO
from typing import Any, Protocol

from . import _wire as w
from ._construct_calls import build_sub, parse_sub

# -- the nodes ---------------------------------------------------------------------------
#
# The compiler knows the nodes of a tree by the ``codec_node`` name their class
# declares (:mod:`trafka.codec.primitives`), not by their classes: the containers
# compile themselves on first use through this module, which therefore imports
# nothing of theirs (no import circle, issue #65). What it reads of each node:


class PrimitiveNode(Protocol):
    """``codec_node = "primitive"``: read and written by one pair of ``_wire`` functions."""

    kind: str
    fmt: str | None
    compact: bool
    nullable: bool


class ArrayNode(Protocol):
    """``codec_node = "array"``: a count, then the elements."""

    subcon: Any
    compact: bool
    nullable: bool


class SchemaNode(Protocol):
    """``codec_node = "schema"``: a struct parsed into and built from a dataclass."""

    schema_name: str
    cls: type
    fields: tuple[tuple[str, Any], ...]
    tagged: tuple[Any, ...]
    flexible: bool
    absent: tuple[tuple[str, Any], ...]


# ``codec_node = "nullable"``: an int8 marker, then ``subcon`` (no fields of its own).


def _fmt(con: PrimitiveNode) -> str | None:
    return con.fmt


def _node(con: Any) -> str | None:
    """Which node ``con`` is (its class's ``codec_node``); None for another construct."""
    return getattr(type(con), "codec_node", None)


# -- the compiler ------------------------------------------------------------------------
#
# Generated code conventions. Parsing: locals ``buf`` (bytes), ``pos`` (offset of
# the next byte) and ``end`` (len(buf)); the code for one construct reads at
# ``pos``, advances it and leaves the value in a local it was given. Building:
# local ``w`` is the append method of the list of parts; the code for one
# construct writes the value held in a local. Every local gets a unique name, so
# nested schemas and loops inline without clashes. Anything the fast path cannot
# or will not handle raises (``Refused`` or whatever Python raises) and the entry
# function hands the input to the interpreted path.


class _Refused(Exception):
    """Raised by compiled code for input it leaves to the interpreted path."""


class _Unsupported(Exception):
    """The tree holds a construct the compiler does not know."""


_LITERAL_TYPES = (int, str, bytes, bool, type(None))


class _Source:
    """Python source being generated, and the objects it refers to by name."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {"Refused": _Refused}
        self._refs: dict[Any, str] = {}
        self._count = 0

    def var(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def ref(self, obj: Any, hint: str = "K", key: Any = None) -> str:
        """A global name for ``obj`` in the generated module (a literal if simple)."""
        if key is None:
            if type(obj) in _LITERAL_TYPES:
                return repr(obj)
            key = id(obj)
        name = self._refs.get(key)
        if name is None:
            self._count += 1
            name = f"{hint.upper()}_{self._count}"
            self._refs[key] = name
            # The namespace keeps obj alive, so its id stays unique as a key.
            self.ns[name] = obj
        return name

    def add(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def define(self, name: str, filename: str) -> Any:
        """Run the source; return the function ``name`` (its globals keep ``__source__``)."""
        source = "\n".join(self.lines) + "\n"
        exec(compile(source, filename, "exec"), self.ns)
        self.ns["__source__"] = source
        return self.ns[name]


def _attr(name: str) -> str:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise _Unsupported(f"field name {name!r}")
    return name


_FILLERS: dict[type, type | None] = {}


def _filler(cls: type) -> type | None:
    """A mutable twin of a slotted dataclass, for filling fresh instances.

    Storing into a plain slotted class is several times faster than going
    through a frozen dataclass's ``__init__`` or its slot descriptors; the
    finished object then takes ``cls`` as its class, which Python allows
    because the two layouts are identical. None when the layouts differ.
    """
    if cls in _FILLERS:
        return _FILLERS[cls]
    twin: type | None = None
    slots = cls.__dict__.get("__slots__")
    if type(cls) is type and cls.__bases__ == (object,) and slots is not None:
        names = (slots,) if isinstance(slots, str) else tuple(slots)
        twin = type(f"{cls.__name__}Filler", (), {"__slots__": names})
        try:
            probe: Any = object.__new__(twin)
            probe.__class__ = cls
        except TypeError:
            twin = None
    _FILLERS[cls] = twin
    return twin


def _fast_uuid_setters() -> tuple[Any, Any] | None:
    """Slot setters that make a UUID from an int without ``UUID.__init__``'s checks."""
    try:
        set_int = uuid.UUID.__dict__["int"].__set__
        set_safe = uuid.UUID.__dict__["is_safe"].__set__
        probe = object.__new__(uuid.UUID)
        set_int(probe, 0x0123456789ABCDEF0123456789ABCDEF)
        set_safe(probe, uuid.SafeUUID.unknown)
        expected = uuid.UUID(bytes=bytes.fromhex("0123456789abcdef0123456789abcdef"))
        if probe != expected or str(probe) != str(expected):
            return None
    except (KeyError, AttributeError, TypeError):
        return None
    return set_int, set_safe


_UUID_SETTERS = _fast_uuid_setters()


def _parse_head(con: Any) -> str | None:
    """The struct code of the fixed-size start of ``con`` on the wire, if any.

    Consecutive heads are read with one ``unpack_from``; a run ends after a
    construct whose head is followed by a variable tail (a classic string's
    bytes, a classic array's elements, a nullable struct's body).
    """
    if _node(con) == "primitive":
        if con.kind in ("fixed", "bool"):
            return _fmt(con)
        if con.kind == "uuid":
            return "16s"
        if con.kind == "string" and not con.compact:
            return "h"
        if con.kind == "bytes" and not con.compact:
            return "i"
        return None
    if _node(con) == "array" and not con.compact:
        return "i"
    if _node(con) == "nullable":
        return "b"
    return None


def _has_tail(con: Any) -> bool:
    return not (_node(con) == "primitive" and con.kind in ("fixed", "bool", "uuid"))


def _fixed_elements(con: Any) -> str | None:
    """The struct code of array elements read or written in bulk."""
    if _node(con) == "primitive" and con.kind == "fixed":
        return _fmt(con)
    return None


def _runs(
    fields: Sequence[tuple[str, Any]], head: Callable[[Any], str | None]
) -> list[list[tuple[str, Any]]]:
    """Fields grouped into runs that share one struct call; a field without a head
    (see :func:`_parse_head`) is a run of its own."""
    runs: list[list[tuple[str, Any]]] = []
    current: list[tuple[str, Any]] = []
    for name, con in fields:
        if head(con) is None:
            if current:
                runs.append(current)
                current = []
            runs.append([(name, con)])
            continue
        current.append((name, con))
        if _has_tail(con):
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


class _ParseGen(_Source):
    """Generates a parser: statements reading ``buf`` at ``pos``."""

    def unpacker(self, fmt: str) -> str:
        return self.ref(struct.Struct(fmt).unpack_from, "U", key=("unpack", fmt))

    def read(self, con: Any, out: str, d: int) -> None:
        """Read one ``con`` into local ``out``."""
        if _parse_head(con) is not None:
            self.run([(con, out)], d)
        elif _node(con) == "schema":
            self.schema(con, out, d)
        elif _node(con) == "array":
            self.compact_array(con, out, d)
        elif _node(con) == "primitive":
            self.primitive(con, out, d)
        else:
            raise _Unsupported(repr(con))

    def uvarint(self, out: str, d: int) -> None:
        self.add(d, f"{out} = buf[pos]")
        self.add(d, f"if {out} < 128:")
        self.add(d + 1, "pos += 1")
        self.add(d, "else:")
        self.add(d + 1, f"{out}, pos = {self.ref(w.b_uvarint)}(buf, pos)")

    def primitive(self, con: PrimitiveNode, out: str, d: int) -> None:
        kind = con.kind
        if kind == "uvarint":
            self.uvarint(out, d)
        elif kind in ("varint", "varlong"):
            slow = self.ref(w.b_varint if kind == "varint" else w.b_varlong)
            self.add(d, f"{out} = buf[pos]")
            self.add(d, f"if {out} < 128:")
            self.add(d + 1, "pos += 1")
            self.add(d + 1, f"{out} = ({out} >> 1) ^ -({out} & 1)")
            self.add(d, "else:")
            self.add(d + 1, f"{out}, pos = {slow}(buf, pos)")
        elif kind in ("string", "bytes"):  # compact: classic ones have a head
            # Lengths below 127 take one byte; the rest (and null) go to b_compact.
            self.add(d, f"{out} = buf[pos]")
            self.add(d, f"if 0 < {out} < 128:")
            self.add(d + 1, f"q = pos + {out}")
            self.add(d + 1, "if q > end:")
            self.add(d + 2, "raise Refused")
            value = "buf[pos + 1:q]" + (".decode()" if kind == "string" else "")
            self.add(d + 1, f"{out} = {value}")
            self.add(d + 1, "pos = q")
            self.add(d, "else:")
            slow = self.ref(w.b_compact)
            self.add(d + 1, f"{out}, pos = {slow}(buf, pos, {con.nullable}, {kind == 'string'})")
        else:
            raise _Unsupported(repr(con))

    def sized_tail(self, con: PrimitiveNode, out: str, size: str, d: int) -> None:
        """Read ``size`` bytes (already checked non-negative) as ``con``'s value."""
        self.add(d, f"q = pos + {size}")
        self.add(d, "if q > end:")
        self.add(d + 1, "raise Refused")
        value = "buf[pos:q].decode()" if con.kind == "string" else "buf[pos:q]"
        self.add(d, f"{out} = {value}")
        self.add(d, "pos = q")

    def run(self, items: list[tuple[Any, str]], d: int) -> None:
        """Read the heads of ``items`` with one struct call, then their tails."""
        codes = [_parse_head(con) for con, _ in items]
        if len(items) == 1 and codes[0] in ("b", "?"):
            (con, out), code = items[0], codes[0]
            if code == "?":  # Java reads any non-zero byte as true
                self.add(d, f"{out} = buf[pos] != 0")
                self.add(d, "pos += 1")
            else:
                self.add(d, f"{out} = buf[pos]")
                self.add(d, "pos += 1")
                self.add(d, f"if {out} > 127:")
                self.add(d + 1, f"{out} -= 256")
        else:
            fmt = ">" + "".join(c for c in codes if c)
            names = ", ".join(out for _, out in items)
            self.add(d, f"{names}, = {self.unpacker(fmt)}(buf, pos)")
            self.add(d, f"pos += {struct.calcsize(fmt)}")
        for con, out in items:
            self.after_head(con, out, d)

    def after_head(self, con: Any, out: str, d: int) -> None:
        """Finish ``con`` whose head was read into ``out``."""
        if _node(con) == "primitive":
            if con.kind == "uuid":
                self.uuid(out, d)
            elif con.kind in ("string", "bytes"):
                self.add(d, f"if {out} >= 0:")
                self.sized_tail(con, out, out, d + 1)
                self.null_or_refuse(con.nullable, out, d)
        elif _node(con) == "array":
            self.array_tail(con, out, d)
        elif _node(con) == "nullable":
            self.add(d, f"if {out} < 0:")
            self.add(d + 1, f"{out} = None")
            self.add(d, "else:")
            self.read(con.subcon, out, d + 1)

    def null_or_refuse(self, nullable: bool, out: str, d: int) -> None:
        """After an ``if out >= 0`` branch: -1 is null when allowed, the rest refused."""
        if nullable:
            self.add(d, f"elif {out} == -1:")
            self.add(d + 1, f"{out} = None")
        self.add(d, "else:")
        self.add(d + 1, "raise Refused")

    def uuid(self, out: str, d: int) -> None:
        if _UUID_SETTERS is None:
            self.add(d, f"{out} = {self.ref(uuid.UUID)}(bytes={out})")
            return
        set_int, set_safe = _UUID_SETTERS
        tmp = self.var("u")
        self.add(d, f"{tmp} = {self.ref(object.__new__, 'new')}({self.ref(uuid.UUID, 'uuid')})")
        self.add(d, f"{self.ref(set_int, 'setint')}({tmp}, int.from_bytes({out}, 'big'))")
        self.add(d, f"{self.ref(set_safe, 'setsafe')}({tmp}, {self.ref(uuid.SafeUUID.unknown)})")
        self.add(d, f"{out} = {tmp}")

    def array_tail(self, con: ArrayNode, out: str, d: int) -> None:
        """``out`` holds a classic count (-1 for null); replace it with the elements."""
        code = _fixed_elements(con.subcon)
        if code is not None:
            small = self.ref(w.unpackers(code), "un", key=("unpackers", code))
            self.add(d, f"if 0 <= {out} <= {w.SMALL_COUNT}:")
            self.add(d + 1, f"q = pos + {struct.calcsize('>' + code)} * {out}")
            self.add(d + 1, f"{out} = [*{small}[{out}](buf, pos)]")
            self.add(d + 1, "pos = q")
            self.add(d, f"elif {out} >= 0:")
            self.add(d + 1, f"if {out} > end - pos:")
            self.add(d + 2, "raise Refused")
            self.add(d + 1, f"{out}, pos = {self.ref(w.b_fixed_items)}(buf, pos, {out}, {code!r})")
            self.null_or_refuse(con.nullable, out, d)
            return
        self.add(d, f"if {out} >= 0:")
        self.add(d + 1, f"if {out} > {w.COUNT_CHECK} and {out} > end - pos:")
        self.add(d + 2, "raise Refused")
        self.elements(con, out, out, d + 1)
        self.null_or_refuse(con.nullable, out, d)

    def compact_array(self, con: ArrayNode, out: str, d: int) -> None:
        # Counts up to SMALL_COUNT take one byte and need no check against the
        # bytes left; the rest (and null) go to the checked helpers.
        self.add(d, f"{out} = buf[pos]")
        code = _fixed_elements(con.subcon)
        if code is not None:
            # Indexed by the raw byte (count + 1).
            table = (None, *w.unpackers(code))
            small = self.ref(table, "un1", key=("unpackers+1", code))
            size = struct.calcsize(">" + code)
            self.add(d, f"if 0 < {out} <= {w.SMALL_COUNT + 1}:")
            self.add(d + 1, f"q = pos + {size} * {out} - {size - 1}")
            self.add(d + 1, f"{out} = [*{small}[{out}](buf, pos + 1)]")
            self.add(d + 1, "pos = q")
            self.add(d, "else:")
            self.add(d + 1, f"{out}, pos = {self.ref(w.b_count)}(buf, pos, {con.nullable})")
            self.add(d + 1, f"if {out} >= 0:")
            fixed = self.ref(w.b_fixed_items)
            self.add(d + 2, f"{out}, pos = {fixed}(buf, pos, {out}, {code!r})")
            self.add(d + 1, "else:")
            self.add(d + 2, f"{out} = None")
            return
        self.add(d, f"if 0 < {out} <= {w.SMALL_COUNT + 1}:")
        self.add(d + 1, "pos += 1")
        self.add(d + 1, f"{out} -= 1")
        self.add(d, "else:")
        self.add(d + 1, f"{out}, pos = {self.ref(w.b_count)}(buf, pos, {con.nullable})")
        if con.nullable:
            self.add(d, f"if {out} >= 0:")
            self.elements(con, out, out, d + 1)
            self.add(d, "else:")
            self.add(d + 1, f"{out} = None")
        else:
            self.elements(con, out, out, d)

    def elements(self, con: ArrayNode, count: str, out: str, d: int) -> None:
        """Read ``count`` elements (checked) into a new list in ``out``."""
        items, item = self.var("items"), self.var("item")
        self.add(d, f"{items} = []")
        self.add(d, f"for _ in range({count}):")
        self.read(con.subcon, item, d + 1)
        self.add(d + 1, f"{items}.append({item})")
        self.add(d, f"{out} = {items}")

    def schema(self, con: SchemaNode, out: str, d: int) -> None:
        values: dict[str, str] = {}
        for run in _runs(con.fields, _parse_head):
            items = []
            for name, sc in run:
                values[_attr(name)] = self.var(f"v_{name}")
                items.append((sc, values[name]))
            if _parse_head(run[0][1]) is not None:
                self.run(items, d)
            else:
                self.read(run[0][1], values[run[0][0]], d)
        unknown = None
        if con.flexible:
            unknown = self.tags(con, values, d)
        self.make_instance(con, values, unknown, out, d)

    def tags(self, con: SchemaNode, values: dict[str, str], d: int) -> str:
        """The tagged-field section; returns the local holding the unknown tags."""
        for spec in con.tagged:
            # An absent tagged field takes its default; a mutable one (a list or a
            # struct) is made afresh for each message, never shared.
            values[_attr(spec.name)] = self.var(f"v_{spec.name}")
            default = spec.default
            if isinstance(default, list) and not default:
                self.add(d, f"{values[spec.name]} = []")
            elif dataclasses.is_dataclass(default):
                self.add(d, f"{values[spec.name]} = {self.ref(_fresh(default), 'default')}()")
            else:
                self.add(d, f"{values[spec.name]} = {self.ref(default, 'default')}")
        unknown = self.var("unknown")
        # Most structs carry no tagged field: a single zero byte.
        self.add(d, "if buf[pos] == 0:")
        self.add(d + 1, "pos += 1")
        self.add(d + 1, f"{unknown} = []")
        self.add(d, "else:")
        if not con.tagged:
            self.add(d + 1, f"{unknown}, pos = {self.ref(w.b_tags)}(buf, pos)")
            return unknown
        found = self.var("found")
        self.add(d + 1, f"{found}, pos = {self.ref(w.b_tags)}(buf, pos)")
        self.add(d + 1, f"{unknown} = []")
        self.add(d + 1, f"for tag, raw in {found}:")
        keyword_ = "if"
        for spec in con.tagged:
            sub = self.ref(_parse_function(spec.subcon), "tagparse")
            self.add(d + 2, f"{keyword_} tag == {spec.tag}:")
            self.add(d + 3, f"{values[spec.name]}, q = {sub}(raw, 0)")
            self.add(d + 3, "if q != len(raw):")
            self.add(d + 4, "raise Refused")
            keyword_ = "elif"
        self.add(d + 2, "else:")
        self.add(d + 3, f"{unknown}.append((tag, raw))")
        return unknown

    def make_instance(
        self, con: SchemaNode, values: dict[str, str], unknown: str | None, out: str, d: int
    ) -> None:
        """Make the dataclass instance without running its ``__init__``."""
        cls = con.cls
        if not dataclasses.is_dataclass(cls):
            raise _Unsupported(f"{cls!r} is not a dataclass")
        assigned: list[tuple[str, str]] = []
        known = set()
        for f in dataclasses.fields(cls):
            name = _attr(f.name)
            known.add(name)
            if name in values:
                value = values[name]
            elif name == "unknown_tagged_fields" and unknown is not None:
                value = unknown
            elif f.default_factory is list:
                value = "[]"
            elif f.default_factory is not dataclasses.MISSING:
                value = f"{self.ref(f.default_factory, 'factory')}()"
            elif f.default is not dataclasses.MISSING:
                value = self.ref(f.default, "default")
            else:
                raise _Unsupported(f"{cls.__qualname__}.{name} has no default")
            assigned.append((name, value))
        if set(values) - known or (unknown is not None and "unknown_tagged_fields" not in known):
            raise _Unsupported(f"fields missing from {cls.__qualname__}")
        twin = _filler(cls)
        if twin is not None:
            self.add(d, f"{out} = {self.ref(object.__new__, 'new')}({self.ref(twin, 'filler')})")
            for name, value in assigned:
                self.add(d, f"{out}.{name} = {value}")
            self.add(d, f"{out}.__class__ = {self.ref(cls, 'cls')}")
        else:
            setattr_ = self.ref(object.__setattr__, "setattr")
            self.add(d, f"{out} = {self.ref(object.__new__, 'new')}({self.ref(cls, 'cls')})")
            for name, value in assigned:
                self.add(d, f"{setattr_}({out}, {name!r}, {value})")


def _build_head(con: Any) -> str | None:
    """The struct codes of the fixed-size start ``con`` writes, if any."""
    if _node(con) == "primitive":
        if con.kind in ("fixed", "bool"):
            return _fmt(con)
        if con.kind == "uuid":
            return "QQ"
    return _parse_head(con)


class _BuildGen(_Source):
    """Generates a builder: statements appending the parts of a value to ``w``."""

    def packer(self, fmt: str) -> str:
        return self.ref(struct.Struct(fmt).pack, "P", key=("pack", fmt))

    def write(self, con: Any, value: str, d: int) -> None:
        """Write the value held in local ``value`` as ``con``."""
        if _build_head(con) is not None:
            self.run([(con, value)], d)
        elif _node(con) == "schema":
            self.schema(con, value, d)
        elif _node(con) == "array":
            self.add(d, f"if {value} is None:")
            self.add(d + 1, "w(b'\\x00')" if con.nullable else "raise Refused")
            self.add(d, "else:")
            n = self.var("n")
            self.add(d + 1, f"{n} = len({value})")
            self.uvarint(f"{n} + 1", f"{n} < 127", d + 1)
            self.elements(con, value, n, d + 1)
        elif _node(con) == "primitive":
            self.primitive(con, value, d)
        else:
            raise _Unsupported(repr(con))

    def uvarint(self, expr: str, small: str, d: int) -> None:
        """Append uvarint ``expr`` (checked in range); ``small`` is true when < 128."""
        one = self.ref(w.UVARINT1, "uvarint1")
        self.add(d, f"w({one}[{expr}] if {small} else {self.ref(w.uvarint_bytes)}({expr}))")

    def primitive(self, con: PrimitiveNode, value: str, d: int) -> None:
        kind = con.kind
        if kind == "uvarint":
            self.add(d, f"if type({value}) is not int or not 0 <= {value} <= 0xFFFFFFFF:")
            self.add(d + 1, "raise Refused")
            self.uvarint(value, f"{value} < 128", d)
        elif kind in ("varint", "varlong"):
            bits = 31 if kind == "varint" else 63
            z = self.var("z")
            self.add(
                d,
                f"if type({value}) is not int or not {-(2**bits)} <= {value} <= {2**bits - 1}:",
            )
            self.add(d + 1, "raise Refused")
            self.add(d, f"{z} = ({value} << 1) ^ ({value} >> {bits})")
            self.uvarint(z, f"{z} < 128", d)
        elif kind in ("string", "bytes"):  # compact: classic ones have a head
            data, n = self.var("data"), self.var("n")
            self.add(d, f"if {self.is_text_or_bytes(con, value)}:")
            self.encode(con, value, data, d + 1)
            self.add(d + 1, f"{n} = len({data})")
            if kind == "string":
                self.add(d + 1, f"if {n} > 0x7FFF:")
                self.add(d + 2, "raise Refused")
            self.uvarint(f"{n} + 1", f"{n} < 127", d + 1)
            self.add(d + 1, f"w({data})")
            if con.nullable:
                self.add(d, f"elif {value} is None:")
                self.add(d + 1, "w(b'\\x00')")
            self.add(d, "else:")
            self.add(d + 1, "raise Refused")
        else:
            raise _Unsupported(repr(con))

    def is_text_or_bytes(self, con: PrimitiveNode, value: str) -> str:
        if con.kind == "string":
            return f"type({value}) is str"
        return f"isinstance({value}, {self.ref((bytes, bytearray, memoryview), 'byteslike')})"

    def encode(self, con: PrimitiveNode, value: str, data: str, d: int) -> None:
        # str.encode refuses lone surrogates, like the interpreted writer.
        self.add(d, f"{data} = {value}.encode()" if con.kind == "string" else f"{data} = {value}")

    def run(self, items: list[tuple[Any, str]], d: int) -> None:
        """Write the heads of ``items`` with one struct call, then their tails."""
        fmt = ">"
        args: list[str] = []
        tails: list[Callable[[], None]] = []
        for con, value in items:
            fmt += _build_head(con) or ""
            arg, tail = self.head(con, value, d)
            args += arg
            if tail is not None:
                tails.append(tail)
        self.add(d, f"w({self.packer(fmt)}({', '.join(args)}))")
        for tail in tails:
            tail()

    def head(self, con: Any, value: str, d: int) -> tuple[list[str], Callable[[], None] | None]:
        """Check ``value`` and prepare its head; returns the head's arguments and a tail."""
        if _node(con) == "primitive":
            kind = con.kind
            if kind == "fixed":  # struct's own range checks are the interpreted ones
                return [value], None
            if kind == "bool":  # struct's "?" would take any object
                self.add(d, f"if {value} is not True and {value} is not False:")
                self.add(d + 1, "raise Refused")
                return [value], None
            if kind == "uuid":
                # Exact UUIDs only: a subclass goes the interpreted way (.bytes).
                number = self.var("uuid")
                self.add(d, f"if type({value}) is not {self.ref(uuid.UUID, 'uuid')}:")
                self.add(d + 1, "raise Refused")
                self.add(d, f"{number} = {value}.int")
                return [f"{number} >> 64", f"{number} & 0xFFFFFFFFFFFFFFFF"], None
            # classic string or bytes: int16/int32 length, -1 for null
            data, n = self.var("data"), self.var("n")
            self.add(d, f"if {self.is_text_or_bytes(con, value)}:")
            self.encode(con, value, data, d + 1)
            self.add(d + 1, f"{n} = len({data})")
            if kind == "string":
                self.add(d + 1, f"if {n} > 0x7FFF:")
                self.add(d + 2, "raise Refused")
            if con.nullable:
                self.add(d, f"elif {value} is None:")
                self.add(d + 1, f"{n} = -1")
                self.add(d + 1, f"{data} = b''")
            self.add(d, "else:")
            self.add(d + 1, "raise Refused")
            return [n], lambda: self.add(d, f"w({data})")
        if _node(con) == "array":
            n = self.var("n")
            self.add(d, f"if {value} is None:")
            if con.nullable:
                self.add(d + 1, f"{n} = -1")
            else:
                self.add(d + 1, "raise Refused")
            self.add(d, "else:")
            self.add(d + 1, f"{n} = len({value})")

            def array_tail() -> None:
                if con.nullable:
                    self.add(d, f"if {value} is not None:")
                    self.elements(con, value, n, d + 1)
                else:
                    self.elements(con, value, n, d)

            return [n], array_tail
        if _node(con) == "nullable":

            def struct_tail() -> None:
                self.add(d, f"if {value} is not None:")
                self.write(con.subcon, value, d + 1)

            return [f"-1 if {value} is None else 1"], struct_tail
        raise _Unsupported(repr(con))

    def elements(self, con: ArrayNode, value: str, n: str, d: int) -> None:
        code = _fixed_elements(con.subcon)
        if code is not None:
            small = self.ref(w.packers(code), "pk", key=("packers", code))
            many = self.ref(w.pack_many)
            self.add(
                d,
                f"w({small}[{n}](*{value}) if {n} <= {w.SMALL_COUNT} "
                f"else {many}({code!r}, {n}, {value}))",
            )
            return
        item = self.var("item")
        self.add(d, f"for {item} in {value}:")
        self.write(con.subcon, item, d + 1)

    def schema(self, con: SchemaNode, obj: str, d: int) -> None:
        self.add(d, f"if type({obj}) is not {self.ref(con.cls, 'cls')}:")
        self.add(d + 1, "raise Refused")
        for run in _runs(con.fields, _build_head):
            if _build_head(run[0][1]) is None:
                name, sc = run[0]
                value = self.var(f"v_{name}")
                self.add(d, f"{value} = {obj}.{_attr(name)}")
                self.write(sc, value, d)
                continue
            items = []
            for name, sc in run:
                if _node(sc) == "primitive" and sc.kind == "fixed":
                    items.append((sc, f"{obj}.{_attr(name)}"))
                else:
                    value = self.var(f"v_{name}")
                    self.add(d, f"{value} = {obj}.{_attr(name)}")
                    items.append((sc, value))
            self.run(items, d)
        for name, default in con.absent:
            self.add(d, f"if {obj}.{_attr(name)} != {self.ref(default, 'default')}:")
            self.add(d + 1, "raise Refused")
        if con.flexible:
            unknown = self.var("unknown")
            self.add(d, f"{unknown} = {obj}.unknown_tagged_fields")
            quiet = [f"type({unknown}) is list", f"not {unknown}"]
            for spec in con.tagged:
                default = self.ref(spec.default, "default")
                quiet.append(f"not ({obj}.{_attr(spec.name)} != {default})")
            self.add(d, f"if {' and '.join(quiet)}:")
            self.add(d + 1, "w(b'\\x00')")
            self.add(d, "else:")
            self.add(d + 1, f"w({self.ref(_tags_writer(con), 'tags')}({obj}))")


def _fresh(default: Any) -> Callable[[], Any]:
    """A factory for a struct default: a copy of it, never the shared object."""
    cls = type(default)
    if default == cls():  # what the generator declares: the struct's own defaults
        return cls

    def make() -> Any:
        return copy.deepcopy(default)

    return make


def _tags_writer(con: SchemaNode) -> Callable[[Any], bytes]:
    """The tagged-field section of ``con``'s instances, for those that have tags."""
    specs = [
        (spec.name, spec.tag, spec.default, _build_function(spec.subcon)) for spec in con.tagged
    ]

    def tags(obj: Any) -> bytes:
        items = list(obj.unknown_tagged_fields)
        for name, tag, default, build in specs:
            value = getattr(obj, name)
            if value != default:
                parts: list[bytes] = []
                build(value, parts.append)
                items.append((tag, b"".join(parts)))
        return w.tagged_bytes(items)

    return tags


def _label(con: Any) -> str:
    return str(getattr(con, "schema_name", None) or type(con).__name__)


def _parse_function(con: Any) -> Callable[[bytes, int], tuple[Any, int]]:
    """``f(buf, pos) -> (value, pos)`` reading ``con``; raises on anything wrong."""
    gen = _ParseGen()
    gen.add(0, "def parse(buf, pos):")
    gen.add(1, "end = len(buf)")
    gen.read(con, "result", 1)
    gen.add(1, "return result, pos")
    return gen.define("parse", f"<trafka parse {_label(con)}>")  # type: ignore[no-any-return]


def _build_function(con: Any) -> Callable[[Any, Callable[[Any], None]], None]:
    """``f(value, append)`` writing ``con``'s parts; raises on anything wrong."""
    gen = _BuildGen()
    gen.add(0, "def build(value, w):")
    gen.write(con, "value", 1)
    return gen.define("build", f"<trafka build {_label(con)}>")  # type: ignore[no-any-return]


def _parse_entry(con: Any) -> Callable[[Any, Any], Any]:
    """The compiled ``parse(io, this)``: the fast path over a BytesIO, else interpreted."""
    slow = functools.partial(parse_sub, con)
    try:
        fast = _parse_function(con)
    except _Unsupported:

        def interpreted(io: Any, this: Any) -> Any:
            return slow(io, this, "(parsing)")

        return interpreted

    def parse(io: Any, this: Any) -> Any:
        if type(io) is not BytesIO:
            return slow(io, this, "(parsing)")
        start = io.tell()
        # getvalue() of a BytesIO made from bytes is that very object: no copy.
        buf = io.getvalue()
        try:
            result, pos = fast(buf, start)
        except Exception:
            io.seek(start)
            return slow(io, this, "(parsing)")
        io.seek(pos)
        return result

    return parse


def _build_entry(
    con: Any, fast: Callable[[Any, Callable[[Any], None]], None] | None
) -> Callable[[Any, Any, Any], Any]:
    """The compiled ``build(obj, io, this)``: ``fast``'s parts joined and written
    once, else interpreted."""
    slow = functools.partial(build_sub, con)
    if fast is None:

        def interpreted(obj: Any, io: Any, this: Any) -> Any:
            return slow(obj, io, this, "(building)")

        return interpreted

    def build(obj: Any, io: Any, this: Any) -> Any:
        parts: list[Any] = []
        try:
            fast(obj, parts.append)
            data = b"".join(parts)
        except Exception:
            # The interpreted path raises the precise EncodeError (or, should the
            # fast path have refused a valid value, writes it).
            slow(obj, io, this, "(building)")
            return obj
        io.write(data)
        return obj

    return build


def _link_entry(code: Any, fn: Any, kind: str, args: str) -> str:
    """Make ``fn`` callable from construct's generated module; returns the call."""
    ident = id(fn)
    code.linkedinstances[ident] = fn
    name = f"{kind}_fast_{ident}"
    # construct fills the module's linkedinstances only after running its source,
    # so the first call looks the function up and rebinds the global to it.
    code.append(f"""
        def {name}({args}):
            global {name}
            {name} = linkedinstances[{ident}]
            return {name}({args})
    """)
    return f"{name}({args})"
