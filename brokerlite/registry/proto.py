""".proto text, as far as the registry needs it: parsing and compatibility.

The text is read by the SDK's parser (:mod:`trafka.sdk.schemas.proto_text`,
which says what it reads) into a ``FileDescriptorProto``, as is a base64
serialized one, and from that into the few facts compatibility compares
(:class:`ProtoFile`). Text that is neither is an invalid schema
(:class:`ProtoError`). :func:`serialized` is what ``format=serialized`` serves:
the descriptor with its types resolved as protoc resolves them (from the
innermost scope outwards, in the file, then in the files its references name).

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
from collections.abc import Sequence
from typing import Any

__all__ = [
    "SCALARS",
    "ProtoError",
    "ProtoFile",
    "is_descriptor",
    "parse_proto",
    "proto_incompatibilities",
    "serialized",
]

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


def _descriptor(text: str, name: str = "schema.proto") -> Any:
    """The ``FileDescriptorProto`` of .proto text (the SDK's parser) or of a
    base64 serialized one; None when the text is neither."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    from ...sdk.schemas.proto_text import ProtoSyntaxError
    from ...sdk.schemas.proto_text import parse_proto as parse_text

    try:
        return parse_text(text, name)
    except ProtoSyntaxError as exc:
        error = str(exc)
    try:
        file = descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(text.strip(), validate=True)
        )
    except (ValueError, DecodeError):
        raise ProtoError(error) from None
    if not file.message_type and not file.enum_type:
        raise ProtoError(error)
    return file


def parse_proto(text: str) -> ProtoFile:
    """The parts of a .proto file compatibility reads; the text may also be a
    serialized ``FileDescriptorProto`` in base64 (what confluent-kafka's
    ProtobufSerializer registers).

    Raises:
        ProtoError: neither a .proto file the parser reads nor a descriptor.
    """
    if not isinstance(text, str) or not text.strip():
        raise ProtoError("empty schema")
    parsed = _model(_descriptor(text))
    if not parsed.messages and not parsed.enums:
        raise ProtoError("no message or enum")
    return parsed


def is_descriptor(text: str) -> bool:
    """Whether ``text`` is a base64 ``FileDescriptorProto`` (not .proto source)."""
    from ...sdk.schemas.proto_text import ProtoSyntaxError
    from ...sdk.schemas.proto_text import parse_proto as parse_text

    try:
        parse_text(text, "schema.proto")
    except ProtoSyntaxError:
        return True
    return False


def serialized(text: str, file_name: str, imported: Sequence[str] = ()) -> str:
    """The file's ``FileDescriptorProto``, its field types resolved as protoc
    resolves them, serialized in base64 (``imported``: the texts of the schemas
    its references name)."""
    from ...sdk.schemas.proto_text import resolve_types

    file = resolve_types(_descriptor(text, file_name), [_descriptor(t) for t in imported])
    file.name = file_name
    return base64.standard_b64encode(file.SerializeToString()).decode("ascii")


_LABELS = {1: "optional", 2: "required", 3: "repeated"}


def _model(file: Any) -> ProtoFile:
    """A ``FileDescriptorProto`` as the :class:`ProtoFile` compatibility reads."""
    from google.protobuf import descriptor_pb2

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
                    message.oneof_decl[f.oneof_index].name
                    if f.HasField("oneof_index") and not f.proto3_optional
                    else None
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
