""".proto text and Protobuf's FileDescriptorProto, both ways (no protoc).

The registry keeps a Protobuf schema as .proto text; a deserializer without
the generated classes builds the messages from it, and a serializer registers
the text of its generated class's file.

Rules:

* :func:`parse_proto` reads ``syntax``, ``edition`` is refused, ``package``,
  ``import`` (``public``/``weak``), messages (nested messages and enums,
  fields with a label, ``map<K, V>``, ``oneof``, proto3 ``optional``) and
  enums; options, ``reserved``, ``extensions``, ``extend`` blocks and services
  are read past. Field types other than scalars are left for the descriptor
  pool to resolve (C++ scoping, message or enum), as ``descriptor.proto``
  allows. Anything else is a :class:`ProtoSyntaxError` naming the line.
* :func:`resolve_types` names each field's type as protoc does (``TYPE_ENUM``
  or ``TYPE_MESSAGE`` and the full name), looking a name up from the innermost
  scope outwards, in the file and then in the files it imports; a name found
  nowhere is taken as a message of that full name.
* :func:`render_proto` writes what the parser reads back to the same
  messages: a descriptor's file, without its options.
* :func:`proto_tokens` is the text without its comments and spacing (the
  registry's identity of a .proto schema).

brokerlite's registry and the SDK's serdes share this one parser.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["ProtoSyntaxError", "parse_proto", "proto_tokens", "render_proto", "resolve_types"]

_TOKEN = re.compile(
    r"(?P<ws>\s+)|(?P<comment>//[^\n]*|/\*.*?\*/)|(?P<str>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')"
    r"|(?P<word>[A-Za-z_.][\w.]*)|(?P<num>[-+]?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?))"
    r"|(?P<sym>[{}\[\]()<>;=,:])",
    re.S,
)
# descriptor.proto's FieldDescriptorProto.Type numbers.
_SCALARS = {
    "double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "fixed64": 6, "fixed32": 7,
    "bool": 8, "string": 9, "bytes": 12, "uint32": 13, "sfixed32": 15, "sfixed64": 16,
    "sint32": 17, "sint64": 18,
}  # fmt: skip
_NAMES = {v: k for k, v in _SCALARS.items()}
_LABELS = {"optional": 1, "required": 2, "repeated": 3}
_TYPE_MESSAGE, _TYPE_ENUM, _TYPE_GROUP = 11, 14, 10


class ProtoSyntaxError(ValueError):
    """The text is not .proto this parser reads (the message names the line)."""


class _Tokens:
    def __init__(self, text: str) -> None:
        self.items: list[tuple[str, int]] = []
        pos, line = 0, 1
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise ProtoSyntaxError(f"line {line}: unexpected {text[pos]!r}")
            if m.lastgroup not in ("ws", "comment"):
                self.items.append((m.group(), line))
            line += m.group().count("\n")
            pos = m.end()
        self.i = 0

    def words(self) -> list[str]:
        return [word for word, _ in self.items]

    def peek(self) -> str:
        return self.items[self.i][0] if self.i < len(self.items) else ""

    def next(self) -> str:
        if self.i >= len(self.items):
            raise ProtoSyntaxError("unexpected end of the file")
        self.i += 1
        return self.items[self.i - 1][0]

    def expect(self, want: str) -> None:
        got = self.next()
        if got != want:
            raise self.error(f"expected {want!r}, got {got!r}", back=1)

    def error(self, what: str, back: int = 0) -> ProtoSyntaxError:
        i = min(max(self.i - back, 0), len(self.items) - 1)
        line = self.items[i][1] if self.items else 1
        return ProtoSyntaxError(f"line {line}: {what}")

    def skip_statement(self) -> None:
        """Skip to the end of a statement or past a balanced block."""
        depth = 0
        while True:
            tok = self.next()
            if tok == "{":
                depth += 1
            elif tok == "}":
                depth -= 1
                if depth == 0:
                    if self.peek() == ";":
                        self.next()
                    return
            elif tok == ";" and depth == 0:
                return


def _unquote(tok: str) -> str:
    if len(tok) < 2 or tok[0] not in "\"'":
        raise ProtoSyntaxError(f"expected a string, got {tok!r}")
    return bytes(tok[1:-1], "utf-8").decode("unicode_escape")


def proto_tokens(text: str) -> list[str]:
    """The tokens of .proto ``text`` (comments and spacing left out).

    Raises:
        ProtoSyntaxError: a character no token starts with.
    """
    return _Tokens(text).words()


def parse_proto(text: str, name: str) -> Any:
    """The FileDescriptorProto of .proto ``text``, as file ``name``.

    Raises:
        ProtoSyntaxError: text this parser does not read.
    """
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto(name=name)
    t = _Tokens(text)
    fdp.syntax = "proto2"
    while t.peek():
        tok = t.next()
        if tok == "syntax":
            t.expect("=")
            fdp.syntax = _unquote(t.next())
            t.expect(";")
        elif tok == "edition":
            raise t.error("editions are not supported", back=1)
        elif tok == "package":
            fdp.package = t.next()
            t.expect(";")
        elif tok == "import":
            kind = t.peek()
            if kind in ("public", "weak"):
                t.next()
            fdp.dependency.append(_unquote(t.next()))
            if kind == "public":
                fdp.public_dependency.append(len(fdp.dependency) - 1)
            t.expect(";")
        elif tok == "message":
            _message(t, fdp.message_type.add(), fdp.syntax == "proto3")
        elif tok == "enum":
            _enum(t, fdp.enum_type.add())
        elif tok in ("option", "service", "extend"):
            t.skip_statement()
        elif tok == ";":
            continue
        else:
            raise t.error(f"unexpected {tok!r}", back=1)
    if fdp.syntax == "proto2":
        fdp.ClearField("syntax")
    return fdp


def _message(t: _Tokens, msg: Any, proto3: bool) -> None:
    msg.name = t.next()
    t.expect("{")
    synthetic: list[str] = []
    while True:
        tok = t.peek()
        if tok == "}":
            t.next()
            break
        if tok == "message":
            t.next()
            _message(t, msg.nested_type.add(), proto3)
        elif tok == "enum":
            t.next()
            _enum(t, msg.enum_type.add())
        elif tok == "oneof":
            t.next()
            index = len(msg.oneof_decl)
            msg.oneof_decl.add(name=t.next())
            t.expect("{")
            while t.peek() != "}":
                if t.peek() == "option":
                    t.skip_statement()
                    continue
                _field(t, msg, proto3, oneof=index)
            t.next()
        elif tok in ("option", "reserved", "extensions", "extend"):
            t.skip_statement()
        elif tok == ";":
            t.next()
        else:
            field = _field(t, msg, proto3, oneof=None)
            if field is not None and field.proto3_optional:
                synthetic.append(field.name)
    # proto3 optional fields each sit in a synthetic oneof, after the real ones.
    for fname in synthetic:
        field = next(f for f in msg.field if f.name == fname)
        field.oneof_index = len(msg.oneof_decl)
        msg.oneof_decl.add(name="_" + fname)


def _field(t: _Tokens, msg: Any, proto3: bool, oneof: int | None) -> Any:
    label = 1
    tok = t.next()
    explicit_optional = False
    if tok in _LABELS:
        label = _LABELS[tok]
        explicit_optional = tok == "optional"
        tok = t.next()
    if tok == "map":
        t.expect("<")
        key_type = t.next()
        t.expect(",")
        value_type = t.next()
        t.expect(">")
        fname = t.next()
        entry = msg.nested_type.add(
            name="".join(p.capitalize() for p in fname.split("_")) + "Entry"
        )
        entry.options.map_entry = True
        _typed(entry.field.add(name="key", number=1, label=1), key_type)
        _typed(entry.field.add(name="value", number=2, label=1), value_type)
        field = msg.field.add(name=fname, label=3, type=_TYPE_MESSAGE, type_name=entry.name)
    elif tok == "group":
        raise t.error("groups are not supported", back=1)
    else:
        field = msg.field.add(name=t.next(), label=label)
        _typed(field, tok)
    t.expect("=")
    try:
        field.number = int(t.next(), 0)
    except ValueError:
        raise t.error("a field number must be an integer", back=1) from None
    if t.peek() == "[":
        while t.next() != "]":
            pass
    t.expect(";")
    if any(f.number == field.number for f in msg.field[:-1]):
        raise t.error(f"field number {field.number} used twice in {msg.name}", back=1)
    field.json_name = _json_name(field.name)
    if oneof is not None:
        field.oneof_index = oneof
    elif proto3 and explicit_optional:
        field.proto3_optional = True
    return field


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _typed(field: Any, type_name: str) -> None:
    if type_name in _SCALARS:
        field.type = _SCALARS[type_name]
    else:
        field.type_name = type_name


def _enum(t: _Tokens, enum: Any) -> None:
    enum.name = t.next()
    t.expect("{")
    while True:
        tok = t.next()
        if tok == "}":
            return
        if tok in ("option", "reserved"):
            t.i -= 1
            t.skip_statement()
            continue
        if tok == ";":
            continue
        t.expect("=")
        try:
            number = int(t.next(), 0)
        except ValueError:
            raise t.error("an enum value must be an integer", back=1) from None
        if t.peek() == "[":
            while t.next() != "]":
                pass
        t.expect(";")
        enum.value.add(name=tok, number=number)


def _names(fdp: Any) -> dict[str, int]:
    """Every message and enum a file defines: full name (no leading dot) -> type."""
    out: dict[str, int] = {}

    def walk(messages: Any, enums: Any, scope: str) -> None:
        for enum in enums:
            out[f"{scope}{enum.name}"] = _TYPE_ENUM
        for msg in messages:
            out[f"{scope}{msg.name}"] = _TYPE_MESSAGE
            walk(msg.nested_type, msg.enum_type, f"{scope}{msg.name}.")

    walk(fdp.message_type, fdp.enum_type, f"{fdp.package}." if fdp.package else "")
    return out


def resolve_types(fdp: Any, imported: Any = ()) -> Any:
    """``fdp`` with each named field type resolved (see the module doc), in place;
    ``imported``: the FileDescriptorProtos of the files it imports. Returns it."""
    known = _names(fdp)
    for other in imported:
        known.update(_names(other))

    def walk(messages: Any, scope: str) -> None:
        for msg in messages:
            inner = f"{scope}.{msg.name}" if scope else msg.name
            for field in msg.field:
                unresolved = not field.HasField("type") or not field.type_name.startswith(".")
                if field.type_name and unresolved:
                    field.type, field.type_name = _lookup(known, inner, field.type_name)
            walk(msg.nested_type, inner)

    walk(fdp.message_type, fdp.package)
    return fdp


def _lookup(known: dict[str, int], scope: str, name: str) -> tuple[int, str]:
    if name.startswith("."):
        candidates = [name[1:]]
    else:
        parts = scope.split(".")
        candidates = [".".join([*parts[:i], name]) for i in range(len(parts), -1, -1)]
    for candidate in candidates:
        if candidate in known:
            return known[candidate], "." + candidate
    return _TYPE_MESSAGE, "." + name.lstrip(".")


def render_proto(fdp: Any) -> str:
    """.proto text of a FileDescriptorProto (options left out)."""
    out = [f'syntax = "{fdp.syntax or "proto2"}";']
    if fdp.package:
        out.append(f"package {fdp.package};")
    for i, dep in enumerate(fdp.dependency):
        public = "public " if i in fdp.public_dependency else ""
        out.append(f'import {public}"{dep}";')
    proto3 = fdp.syntax == "proto3"
    for msg in fdp.message_type:
        _render_message(msg, out, "", proto3)
    for enum in fdp.enum_type:
        _render_enum(enum, out, "")
    return "\n".join(out) + "\n"


def _render_message(msg: Any, out: list[str], pad: str, proto3: bool) -> None:
    out.append(f"{pad}message {msg.name} {{")
    inner = pad + "  "
    entries = {n.name: n for n in msg.nested_type if n.options.map_entry}
    for nested in msg.nested_type:
        if nested.name not in entries:
            _render_message(nested, out, inner, proto3)
    for enum in msg.enum_type:
        _render_enum(enum, out, inner)
    real_oneofs = {
        f.oneof_index for f in msg.field if f.HasField("oneof_index") and not f.proto3_optional
    }
    done: set[int] = set()
    for field in msg.field:
        if field.HasField("oneof_index") and field.oneof_index in real_oneofs:
            index = field.oneof_index
            if index in done:
                continue
            done.add(index)
            out.append(f"{inner}oneof {msg.oneof_decl[index].name} {{")
            for f in msg.field:
                if f.HasField("oneof_index") and f.oneof_index == index:
                    out.append(f"{inner}  {_render_field(f, entries, proto3, in_oneof=True)}")
            out.append(f"{inner}}}")
        else:
            out.append(f"{inner}{_render_field(field, entries, proto3, in_oneof=False)}")
    out.append(f"{pad}}}")


def _type_of(field: Any) -> str:
    if field.type in _NAMES:
        return _NAMES[field.type]
    if field.type == _TYPE_GROUP:
        raise ValueError(f"field {field.name}: groups cannot be rendered")
    return str(field.type_name)


def _render_field(field: Any, entries: dict[str, Any], proto3: bool, in_oneof: bool) -> str:
    entry = entries.get(field.type_name.rsplit(".", 1)[-1]) if field.type == _TYPE_MESSAGE else None
    if entry is not None and field.label == 3:
        k, v = entry.field[0], entry.field[1]
        return f"map<{_type_of(k)}, {_type_of(v)}> {field.name} = {field.number};"
    label = ""
    if not in_oneof:
        if field.label == 3:
            label = "repeated "
        elif field.label == 2:
            label = "required "
        elif not proto3 or field.proto3_optional:
            label = "optional "
    return f"{label}{_type_of(field)} {field.name} = {field.number};"


def _render_enum(enum: Any, out: list[str], pad: str) -> None:
    out.append(f"{pad}enum {enum.name} {{")
    for value in enum.value:
        out.append(f"{pad}  {value.name} = {value.number};")
    out.append(f"{pad}}}")
