"""Protobuf: generated message classes, or dynamic messages built from the
registered schema when the reader has no generated class.

Rules:

* The serializer registers the .proto text of its message's file (what
  Confluent's Java serializer registers), and each file it imports first, as a
  reference under a subject named after the file (``reference.subject.name.strategy``,
  a callable ``(file name) -> subject``); ``google/protobuf/*`` files are
  known to every registry client and skipped (``skip.known.types``).
* The message indexes of the frame name the message inside its file (see
  :mod:`.framing`); a reader finds the message by them.
* The deserializer parses its message with the class it was given, or builds
  the writer's file (and its references) into a descriptor pool of its own and
  parses a dynamic message of the type the indexes name. A schema the registry
  answers in base64 (a serialized FileDescriptorProto, as Confluent's Python
  serializer registers it) is read too.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from .framing import SchemaRef
from .proto_text import parse_proto, render_proto
from .serde import SchemaDeserializer, SchemaSerializer
from .types import MissingExtraError, RegisteredSchema, Schema, SchemaReference

__all__ = [
    "ProtobufDeserializer",
    "ProtobufSerializer",
    "build_file_descriptor",
    "find_message",
    "message_indexes",
    "proto_file_text",
]


def _protobuf() -> Any:
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise MissingExtraError("Protobuf needs protobuf: pip install 'trafka[schemas]'") from None
    return descriptor_pb2, descriptor_pool, message_factory


def _file_proto(file_descriptor: Any) -> Any:
    descriptor_pb2 = _protobuf()[0]
    fdp = descriptor_pb2.FileDescriptorProto()
    file_descriptor.CopyToProto(fdp)
    return fdp


def message_indexes(descriptor: Any) -> tuple[int, ...]:
    """The path of a message descriptor inside its file (first: a top-level index)."""
    path: list[int] = []
    d = descriptor
    while d.containing_type is not None:
        parent = d.containing_type
        path.append([n.full_name for n in parent.nested_types].index(d.full_name))
        d = parent
    top = list(d.file.message_types_by_name)
    path.append(top.index(d.name))
    return tuple(reversed(path))


def proto_file_text(file_descriptor: Any) -> str:
    """The .proto text of a generated file (what the serializer registers)."""
    return render_proto(_file_proto(file_descriptor))


def build_file_descriptor(schema_str: str, referenced: Iterable[tuple[str, str]] = ()) -> Any:
    """The ``FileDescriptor`` of a registered schema (.proto text, or base64 of
    a serialized descriptor), built in a pool of its own after the files it
    imports: ``referenced`` is ``(file name, schema text)``, depth first; the
    ``google/protobuf/`` files come from protobuf's own pool."""
    _, descriptor_pool, _ = _protobuf()
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(name: str, text: str | None) -> Any:
        if name in added:
            return None
        added.add(name)
        fdp = _known_file(name) if text is None else _to_file_proto(text, name)
        for dep in fdp.dependency:
            if _known(dep):
                add(dep, None)
        return pool.Add(fdp)

    for ref_name, ref_text in referenced:
        add(ref_name, ref_text)
    return add("registered.proto", schema_str)


def find_message(file_descriptor: Any, indexes: Sequence[int]) -> Any:
    """The message descriptor ``indexes`` name in a file (see :mod:`.framing`).

    Raises:
        ValueError: the file has no such message.
    """
    return _find(file_descriptor, tuple(indexes))


def _known(name: str) -> bool:
    return name.startswith("google/protobuf/")


def _known_file(name: str) -> Any:
    """A well-known file from protobuf's own pool (its module imported first)."""
    import importlib

    _, descriptor_pool, _ = _protobuf()
    module = name.removeprefix("google/protobuf/").removesuffix(".proto")
    try:
        importlib.import_module(f"google.protobuf.{module}_pb2")
    except ImportError:
        pass  # not one protobuf ships: the pool says so below
    return _file_proto(descriptor_pool.Default().FindFileByName(name))


class ProtobufSerializer(SchemaSerializer):
    """Serialize messages of one generated class.

    Args:
        msg_type: the generated message class.
        schema_registry_client: a blocking
            :class:`~trafka.sdk.schemas.SchemaRegistryClient`, or its settings.
        conf: the settings of :mod:`.serde`, ``skip.known.types`` (default
            True) and ``reference.subject.name.strategy``.
    """

    schema_type = "PROTOBUF"

    def __init__(
        self, msg_type: Any, schema_registry_client: Any, conf: Mapping[str, Any] | None = None
    ) -> None:
        _protobuf()
        extra = {"skip.known.types": True, "reference.subject.name.strategy": None}
        super().__init__(schema_registry_client, conf, extra)
        self.skip_known = self.conf.pop("skip.known.types")
        self.ref_subject: Callable[[str], str] = (
            self.conf.pop("reference.subject.name.strategy") or str
        )
        if not hasattr(msg_type, "DESCRIPTOR"):
            raise ConfigError("ProtobufSerializer needs a generated message class")
        self.msg_type = msg_type
        self.indexes = message_indexes(msg_type.DESCRIPTOR)

    def _schema(self, obj: Any) -> Schema:
        return self._file_schema(self.msg_type.DESCRIPTOR.file)

    def _file_schema(self, file_descriptor: Any) -> Schema:
        refs = []
        for dep in file_descriptor.dependencies:
            if self.skip_known and _known(dep.name):
                continue
            schema = self._file_schema(dep)
            subject = self.ref_subject(dep.name)
            if self.auto_register:
                self.registry.register_schema(subject, schema, self.normalize)
            version = self.registry.lookup_schema(subject, schema, self.normalize).version
            refs.append(SchemaReference(dep.name, subject, int(version)))
        return Schema(proto_file_text(file_descriptor), "PROTOBUF", tuple(refs))

    def _record_name(self, obj: Any) -> str | None:
        return str(self.msg_type.DESCRIPTOR.full_name)

    def _writer(self, registered: RegisteredSchema) -> Any:
        return self.indexes

    def _encode(self, obj: Any, writer: Any, ctx: Any) -> tuple[bytes, tuple[int, ...]]:
        if not isinstance(obj, self.msg_type):
            raise TypeError(
                f"expected a {self.msg_type.DESCRIPTOR.full_name} message, got {type(obj).__name__}"
            )
        return obj.SerializeToString(), writer


class ProtobufDeserializer(SchemaDeserializer):
    """Deserialize Protobuf messages, into ``message_type`` or, without one,
    into dynamic messages built from the writer's registered schema.

    Args:
        message_type: a generated message class, or None (dynamic messages).
        conf: ``schema.registry.url`` etc. when no client is given, as confluent-kafka takes them.
        schema_registry_client: a blocking
            :class:`~trafka.sdk.schemas.SchemaRegistryClient`, or its settings.
    """

    with_indexes = True
    schema_type = "PROTOBUF"

    def __init__(
        self,
        message_type: Any = None,
        conf: Mapping[str, Any] | None = None,
        schema_registry_client: Any = None,
    ) -> None:
        _protobuf()
        conf = dict(conf or {})
        conf.pop("use.deprecated.format", None)
        if schema_registry_client is None:
            registry_conf = {k: conf.pop(k) for k in list(conf) if k.startswith("schema.registry.")}
            if not registry_conf and message_type is None:
                raise ConfigError("ProtobufDeserializer needs a registry for dynamic messages")
            schema_registry_client = registry_conf or None
        self.message_type = message_type
        super().__init__(schema_registry_client, conf)

    def _reader(self, schema: Schema) -> Any:
        return self.file_descriptor(schema)

    def file_descriptor(self, schema: Schema) -> Any:
        """The ``FileDescriptor`` of a registered schema, built with the files
        its references name in a pool of its own."""
        referenced = [(n, s.schema_str) for n, s in self.referenced_schemas(schema)]
        return build_file_descriptor(schema.schema_str, referenced)

    def message_class(self, schema: Schema, name: str | None = None) -> Any:
        """A dynamic message class of a registered schema, without generated code
        (its references fetched from the registry).

        Args:
            schema: the schema (.proto text, or a base64 serialized descriptor).
            name: the message's full name (``shop.Order.Line``); None: the
                file's first message.

        Raises:
            ValueError: the schema has no such message (or none at all).
        """
        file_descriptor = self._reader(schema)
        if name is None:
            descriptor = _find(file_descriptor, (0,))
        else:
            try:
                descriptor = file_descriptor.pool.FindMessageTypeByName(name)
            except KeyError:
                raise ValueError(f"the schema has no message {name!r}") from None
        return _protobuf()[2].GetMessageClass(descriptor)

    def _decode(self, payload: memoryview, reader: Any, ref: SchemaRef, ctx: Any) -> Any:
        indexes = ref.indexes or (0,)
        if self.message_type is not None:
            msg = self.message_type()
        else:
            _, _, message_factory = _protobuf()
            msg = message_factory.GetMessageClass(_find(reader, indexes))()
        msg.ParseFromString(bytes(payload))
        return msg


def _find(file_descriptor: Any, indexes: tuple[int, ...]) -> Any:
    types = list(file_descriptor.message_types_by_name.values())
    d = None
    for i in indexes:
        if i >= len(types):
            raise ValueError(f"message index {i} is past the {len(types)} messages of the schema")
        d = types[i]
        types = list(d.nested_types)
    return d


def _to_file_proto(text: str, name: str) -> Any:
    """A schema's FileDescriptorProto: .proto text, or base64 of a serialized one."""
    stripped = text.strip()
    if stripped and not any(w in stripped for w in (" ", "\n", ";", "{")):
        descriptor_pb2 = _protobuf()[0]
        try:
            fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(stripped))
        except (binascii.Error, ValueError):
            pass
        else:
            if fdp.name:
                fdp.name = name if name != "registered.proto" else fdp.name
            return fdp
    return parse_proto(text, name)
