"""A parsed .proto file (:class:`~.proto.ProtoFile`) as a ``FileDescriptorProto``:
what ``format=serialized`` serves (base64), the form confluent-kafka's
ProtobufDeserializer asks for to read the writer's schema.

Names resolve as protoc resolves them: from the innermost scope outwards, in
the file and then in the files it imports (the schema's references); a name
found nowhere is taken as a message of that full name. ``map<K, V>`` fields become a repeated nested
``...Entry`` message marked ``map_entry``, as protoc writes them.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from .proto import SCALARS, ProtoFile

__all__ = ["serialized"]


def _full_type(files: list[ProtoFile], scope: str, name: str) -> tuple[str, str]:
    """("enum" | "message", the full name) of a named field type, looked up in
    the file and then in the files it imports."""
    candidates = [name.lstrip(".")]
    if not name.startswith("."):
        parts = scope.split(".")
        candidates = [".".join([*parts[:i], name]) for i in range(len(parts), -1, -1)]
    for candidate in candidates:
        for proto in files:
            if candidate in proto.enums:
                return "enum", candidate
            if candidate in proto.messages:
                return "message", candidate
    return "message", name.lstrip(".")


def _entry_name(field: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in field.split("_")) + "Entry"


def serialized(proto: ProtoFile, file_name: str, imported: Sequence[ProtoFile] = ()) -> str:
    """The file's ``FileDescriptorProto``, serialized, in base64 (``imported``:
    the files its references name, to resolve the types it uses from them)."""
    from google.protobuf import descriptor_pb2

    kinds = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name=file_name, package=proto.package)
    if proto.syntax in ("proto2", "proto3"):
        file.syntax = proto.syntax
    file.dependency.extend(proto.imports)
    built: dict[str, Any] = {}

    def container(full: str) -> tuple[Any, str]:
        parent, _, short = full.rpartition(".")
        return built.get(parent), short

    def set_type(field: Any, scope: str, written: str) -> None:
        if written in SCALARS:
            field.type = getattr(kinds, f"TYPE_{written.upper()}")
            return
        kind, full = _full_type([proto, *imported], scope, written)
        field.type = kinds.TYPE_ENUM if kind == "enum" else kinds.TYPE_MESSAGE
        field.type_name = "." + full

    for full, message in proto.messages.items():
        parent, short = container(full)
        desc = (parent.nested_type if parent is not None else file.message_type).add(name=short)
        built[full] = desc
        oneofs: dict[str, int] = {}
        for number, spec in sorted(message.fields.items()):
            field = desc.field.add(name=spec.name, number=number)
            field.label = {"repeated": kinds.LABEL_REPEATED, "required": kinds.LABEL_REQUIRED}.get(
                spec.label, kinds.LABEL_OPTIONAL
            )
            if spec.type.startswith("map<"):
                key, value = spec.type[4:-1].split(",")
                entry = desc.nested_type.add(name=_entry_name(spec.name))
                entry.options.map_entry = True
                for index, (part, written) in enumerate((("key", key), ("value", value)), 1):
                    inner = entry.field.add(name=part, number=index, label=kinds.LABEL_OPTIONAL)
                    set_type(inner, full, written)
                field.type, field.type_name = kinds.TYPE_MESSAGE, f".{full}.{entry.name}"
            else:
                set_type(field, full, spec.type)
            if spec.oneof is not None:
                if spec.oneof not in oneofs:
                    oneofs[spec.oneof] = len(desc.oneof_decl)
                    desc.oneof_decl.add(name=spec.oneof)
                field.oneof_index = oneofs[spec.oneof]
    for full, values in proto.enums.items():
        parent, short = container(full)
        enum = (parent.enum_type if parent is not None else file.enum_type).add(name=short)
        for name, number in values.items():
            enum.value.add(name=name, number=number)
    return base64.standard_b64encode(file.SerializeToString()).decode("ascii")
