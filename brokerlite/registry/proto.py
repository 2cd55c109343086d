""".proto text, as far as the registry needs it: parsing and compatibility.

The parser reads ``syntax``, ``package``, ``import``, messages (nested messages
and enums, fields with label, type and number, ``map<K, V>``, ``oneof``) and
enums; options, ``reserved``, ``extensions``, ``extend`` and services are read
past. Anything else is an invalid schema (:class:`ProtoError`).

Compatibility, from the reader's side (for BACKWARD the new schema), as the
registry's documentation for Protobuf lists the changes:

* a changed package, a message the writer had and the reader lacks, a field
  whose type changed outside a wire-compatible group, a named type (message or
  enum) changed, a
  ``required`` field added or removed, a field moved out of its ``oneof`` or
  several fields moved into one, a field changing between singular and repeated
  (except string, bytes and messages): incompatible;
* messages, enums, enum values and fields added or removed (the numbers
  decide), fields renamed: compatible.

Wire-compatible groups (protobuf's language guide, "Updating a message type"):
int32, uint32, int64, uint64, bool and enums; sint32, sint64; string, bytes;
fixed32, sfixed32; fixed64, sfixed64.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from typing import Any

__all__ = [
    "SCALARS",
    "ProtoError",
    "ProtoFile",
    "is_descriptor",
    "parse_proto",
    "proto_incompatibilities",
    "proto_tokens",
]

_TOKEN = re.compile(
    r'\s+|//[^\n]*|/\*.*?\*/|("(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\')|([A-Za-z_.][\w.]*)|'
    r"([-+]?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?))|([{}\[\]()<>;=,:])",
    re.S,
)
SCALARS = {
    "double",
    "float",
    "int32",
    "int64",
    "uint32",
    "uint64",
    "sint32",
    "sint64",
    "fixed32",
    "fixed64",
    "sfixed32",
    "sfixed64",
    "bool",
    "string",
    "bytes",
}
_GROUPS = [
    {"int32", "uint32", "int64", "uint64", "bool", "enum"},
    {"sint32", "sint64"},
    {"string", "bytes"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
]


class ProtoError(ValueError):
    """The text is not a .proto file this parser reads."""


@dataclasses.dataclass(slots=True)
class Field:
    name: str
    number: int
    label: str  # "", "optional", "required", "repeated"
    type: str
    oneof: str | None = None


@dataclasses.dataclass(slots=True)
class Message:
    name: str
    fields: dict[int, Field] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class ProtoFile:
    syntax: str = "proto2"
    package: str = ""
    imports: list[str] = dataclasses.field(default_factory=list)
    messages: dict[str, Message] = dataclasses.field(default_factory=dict)
    enums: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)


def proto_tokens(text: str) -> list[str]:
    out, at = [], 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            raise ProtoError(f"unexpected character {text[at]!r} at offset {at}")
        at = match.end()
        token = next((g for g in match.groups() if g is not None), None)
        if token is not None:
            out.append(token)
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = proto_tokens(text)
        self.at = 0
        self.file = ProtoFile()

    def peek(self) -> str:
        return self.tokens[self.at] if self.at < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if not token or (expected is not None and token != expected):
            raise ProtoError(f"expected {expected or 'more'} at token {self.at}, found {token!r}")
        self.at += 1
        return token

    def skip_statement(self) -> None:
        """Past the next ``;`` or balanced ``{...}`` block."""
        depth = 0
        while True:
            token = self.take()
            if token == "{":
                depth += 1
            elif token == "}":
                depth -= 1
                if depth == 0:
                    return
            elif token == ";" and depth == 0:
                return

    def parse(self) -> ProtoFile:
        while self.peek():
            token = self.take()
            if token == "syntax" or token == "edition":
                self.take("=")
                self.file.syntax = self.take().strip("\"'")
                self.take(";")
            elif token == "package":
                self.file.package = self.take()
                self.take(";")
            elif token == "import":
                name = self.take()
                if name in ("public", "weak"):
                    name = self.take()
                self.file.imports.append(name.strip("\"'"))
                self.take(";")
            elif token == "message":
                self.message(self.take(), self.file.package)
            elif token == "enum":
                self.enum(self.take(), self.file.package)
            elif token in ("option", "service", "extend"):
                self.skip_statement()
            elif token != ";":
                raise ProtoError(f"unexpected {token!r} at the top level")
        return self.file

    def message(self, name: str, scope: str) -> None:
        full = f"{scope}.{name}" if scope else name
        message = self.file.messages[full] = Message(full)
        self.take("{")
        oneof: str | None = None
        while True:
            token = self.take()
            if token == "}":
                if oneof is None:
                    return
                oneof = None
            elif token == "message":
                self.message(self.take(), full)
            elif token == "enum":
                self.enum(self.take(), full)
            elif token == "oneof":
                oneof = self.take()
                self.take("{")
            elif token in ("option", "reserved", "extensions", "extend"):
                self.skip_statement()
            elif token != ";":
                self.field(message, token, oneof)

    def field(self, message: Message, token: str, oneof: str | None) -> None:
        label = ""
        if token in ("optional", "required", "repeated"):
            label, token = token, self.take()
        if token == "map":
            self.take("<")
            key = self.take()
            self.take(",")
            value = self.take()
            self.take(">")
            token, label = f"map<{key},{value}>", "repeated"
        name = self.take()
        self.take("=")
        number = self.take()
        if not number.isdigit():
            raise ProtoError(f"field {name!r} has no number")
        if self.peek() == "[":
            while self.take() != "]":
                pass
        self.take(";")
        if int(number) in message.fields:
            raise ProtoError(f"field number {number} used twice in {message.name}")
        message.fields[int(number)] = Field(name, int(number), label, token, oneof)

    def enum(self, name: str, scope: str) -> None:
        full = f"{scope}.{name}" if scope else name
        values = self.file.enums[full] = {}
        self.take("{")
        while (token := self.take()) != "}":
            if token in ("option", "reserved"):
                self.skip_statement()
            elif token != ";":
                self.take("=")
                values[token] = int(self.take(), 0)
                if self.peek() == "[":
                    while self.take() != "]":
                        pass
                self.take(";")


def parse_proto(text: str) -> ProtoFile:
    """The parts of a .proto file compatibility reads; the text may also be a
    serialized ``FileDescriptorProto`` in base64 (what confluent-kafka's
    ProtobufSerializer registers).

    Raises:
        ProtoError: neither a .proto file this parser reads nor a descriptor.
    """
    if not isinstance(text, str) or not text.strip():
        raise ProtoError("empty schema")
    parsed: ProtoFile | None
    try:
        parsed = _Parser(text).parse()
    except (IndexError, ValueError) as exc:
        parsed = _from_descriptor(text)
        if parsed is None:
            raise ProtoError(str(exc)) from None
    if not parsed.messages and not parsed.enums:
        raise ProtoError("no message or enum")
    return parsed


_LABELS = {1: "optional", 2: "required", 3: "repeated"}


def is_descriptor(text: str) -> bool:
    """Whether ``text`` is a base64 ``FileDescriptorProto`` (not .proto source)."""
    try:
        _Parser(text).parse()
    except (IndexError, ValueError):
        return _from_descriptor(text) is not None
    return False


def _from_descriptor(text: str) -> ProtoFile | None:
    """A base64 ``FileDescriptorProto`` as a :class:`ProtoFile`; None if it is not one."""
    try:
        from google.protobuf import descriptor_pb2
        from google.protobuf.message import DecodeError
    except ImportError:
        return None
    try:
        data = base64.b64decode(text.strip(), validate=True)
        file = descriptor_pb2.FileDescriptorProto.FromString(data)
    except (ValueError, DecodeError):
        return None
    if not file.message_type and not file.enum_type:
        return None
    out = ProtoFile(file.syntax or "proto2", file.package, list(file.dependency))
    kinds = {number: name[5:].lower() for name, number in
             descriptor_pb2.FieldDescriptorProto.Type.items()}  # fmt: skip
    proto3 = out.syntax == "proto3"

    def enums(found: Any, scope: str) -> None:
        for enum in found:
            out.enums[f"{scope}.{enum.name}" if scope else enum.name] = {
                v.name: v.number for v in enum.value
            }

    def messages(found: Any, scope: str) -> None:
        for message in found:
            full = f"{scope}.{message.name}" if scope else message.name
            fields = {}
            for f in message.field:
                label = _LABELS.get(f.label, "")
                if proto3 and label == "optional":
                    label = ""
                kind = f.type_name if f.type_name else kinds.get(f.type, "bytes")
                oneof = (
                    message.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else None
                )
                fields[f.number] = Field(f.name, f.number, label, kind, oneof)
            out.messages[full] = Message(full, fields)
            messages(message.nested_type, full)
            enums(message.enum_type, full)

    messages(file.message_type, file.package)
    enums(file.enum_type, file.package)
    return out


def _resolve(proto: ProtoFile, scope: str, name: str) -> str:
    """A field's type as a kind: a scalar, ``map<..>``, or ``enum:`` / ``message:``
    and the type's name relative to the package."""
    if name in SCALARS or name.startswith("map<"):
        return name
    candidates = [name.lstrip(".")]
    if not name.startswith("."):
        parts = scope.split(".")
        candidates = [".".join([*parts[:i], name]) for i in range(len(parts), -1, -1)]
    for candidate in candidates:
        if candidate in proto.enums:
            return "enum:" + _relative(proto, candidate)
        if candidate in proto.messages:
            return "message:" + _relative(proto, candidate)
    return "message:" + name.lstrip(".")


def _relative(proto: ProtoFile, full: str) -> str:
    prefix = proto.package + "." if proto.package else ""
    return full[len(prefix) :] if full.startswith(prefix) else full


def _group(kind: str) -> int | None:
    kind = "enum" if kind.startswith("enum:") else kind
    return next((i for i, group in enumerate(_GROUPS) if kind in group), None)


def proto_incompatibilities(reader: ProtoFile, writer: ProtoFile) -> list[str]:
    """Why data written with ``writer`` does not read with ``reader`` (empty: it does)."""
    problems = []
    if reader.package != writer.package:
        problems.append(f"PACKAGE_CHANGED: {writer.package!r} to {reader.package!r}")
    readers = {_relative(reader, name): m for name, m in reader.messages.items()}
    for name, written in writer.messages.items():
        short = _relative(writer, name)
        read = readers.get(short)
        if read is None:
            problems.append(f"MESSAGE_REMOVED: {short}")
            continue
        moved = [
            n
            for n, f in read.fields.items()
            if f.oneof and n in written.fields and written.fields[n].oneof is None
        ]
        if len(moved) > 1:
            problems.append(f"MULTIPLE_FIELDS_MOVED_TO_ONEOF in {short}: {moved}")
        for number, old in written.fields.items():
            new = read.fields.get(number)
            if new is None:
                if old.label == "required":
                    problems.append(f"REQUIRED_FIELD_REMOVED in {short}: {old.name} = {number}")
                continue
            problems.extend(_field_changes(short, reader, writer, read, written, new, old))
        for number, new in read.fields.items():
            if number not in written.fields and new.label == "required":
                problems.append(f"REQUIRED_FIELD_ADDED in {short}: {new.name} = {number}")
    return problems


def _field_changes(
    short: str,
    reader: ProtoFile,
    writer: ProtoFile,
    read: Message,
    written: Message,
    new: Field,
    old: Field,
) -> list[str]:
    where = f"in {short}: field {old.number}"
    new_kind = _resolve(reader, read.name, new.type)
    old_kind = _resolve(writer, written.name, old.type)
    problems = []
    if new_kind != old_kind:
        groups = _group(new_kind), _group(old_kind)
        named = ("message:", "enum:")
        if new_kind.startswith(named) and old_kind.startswith(named):
            problems.append(f"FIELD_NAMED_TYPE_CHANGED {where}: {old_kind} to {new_kind}")
        elif groups[0] is None or groups[0] != groups[1]:
            problems.append(f"FIELD_KIND_CHANGED {where}: {old_kind} to {new_kind}")
    if (new.label == "repeated") != (old.label == "repeated") and not (
        {new_kind, old_kind} <= {"string", "bytes"} or new_kind.startswith("message:")
    ):
        problems.append(
            f"FIELD_LABEL_CHANGED {where}: {old.label or 'singular'} to {new.label or 'singular'}"
        )
    if (new.label == "required") != (old.label == "required"):
        problems.append(f"REQUIRED_FIELD_CHANGED {where}")
    if old.oneof is not None and new.oneof is None:
        problems.append(f"ONEOF_FIELD_REMOVED {where}")
    return problems
