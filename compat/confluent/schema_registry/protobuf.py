"""confluent-kafka's ``confluent_kafka.schema_registry.protobuf``: Protobuf serdes,
sync (:class:`ProtobufSerializer`, :class:`ProtobufDeserializer`) and async
(:class:`AsyncProtobufSerializer`...), with 2.16.1's arguments and settings,
over the SDK's descriptors (:mod:`trafka.sdk.schemas.protobuf`).

Rules:

* The serializer registers the .proto text of its message's file, after each
  file it imports (under ``reference.subject.name.strategy``'s subject, the
  file's name by default; ``google/protobuf/`` files are skipped with
  ``skip.known.types``), each referenced by the version the registry gives it.
* A frame carries the message indexes of the message in its file (see
  :class:`~.common.serde.SchemaId`).
* The deserializer parses into ``message_type``; without one (a trafka
  extension) into a dynamic message of the writer's registered schema.
* ``use.deprecated.format`` is refused when true, as in 2.16.1.
"""

from __future__ import annotations

from typing import Any

from trafka.sdk.schemas.protobuf import build_file_descriptor, find_message, proto_file_text

from .common.protobuf import (
    _create_index_array,
    decimal_message_class,
    decimal_to_protobuf,
    field_transformer,
    get_type,
    protobuf_to_decimal,
)
from .common.serde import Steps, ask, reference_subject_name_strategy, serialization_error
from .rule_registry import RuleRegistry
from .serde import (
    AsyncBaseDeserializer,
    AsyncBaseSerializer,
    BaseDeserializer,
    BaseSerializer,
    DeserializerSettings,
    SchemaId,
    SerializerSettings,
    check_bool,
    check_callable,
    deserializer_defaults,
    guid_of,
    serde_builder,
    serializer_defaults,
)

__all__ = [
    "AsyncProtobufDeserializer",
    "AsyncProtobufDeserializerBuilder",
    "AsyncProtobufSerializer",
    "AsyncProtobufSerializerBuilder",
    "ProtobufDeserializer",
    "ProtobufDeserializerBuilder",
    "ProtobufSerializer",
    "ProtobufSerializerBuilder",
    "_create_index_array",
    "decimal_message_class",
    "decimal_to_protobuf",
    "get_type",
    "protobuf_to_decimal",
]


def _check_deprecated(settings: dict[str, Any]) -> None:
    if check_bool(settings, "use.deprecated.format"):
        raise ValueError("use.deprecated.format is no longer supported")


class _ProtobufSerde:
    _schema_type = "PROTOBUF"
    _schema_fmt: str | None = "serialized"

    def _parse(self, schema: Any, referenced: list[tuple[str, Any]]) -> Any:
        return build_file_descriptor(schema.schema_str, [(n, s.schema_str) for n, s in referenced])

    def _field_transformer(self, parsed: Any) -> Any:
        return field_transformer(parsed)


class _ProtobufSerializing(_ProtobufSerde, SerializerSettings):
    def __init__(
        self,
        msg_type: Any,
        schema_registry_client: Any,
        conf: dict[str, Any] | None = None,
        rule_conf: dict[str, Any] | None = None,
        rule_registry: RuleRegistry | None = None,
    ) -> None:
        defaults = serializer_defaults(
            **{
                "skip.known.types": True,
                "reference.subject.name.strategy": reference_subject_name_strategy,
                "use.deprecated.format": False,
            }
        )
        settings = self._init_serializer(schema_registry_client, conf, defaults, rule_registry)
        self._skip_known_types = check_bool(settings, "skip.known.types")
        _check_deprecated(settings)
        self._ref_reference_subject_func = check_callable(
            settings, "reference.subject.name.strategy"
        )
        self._check_unknown(settings)
        descriptor = getattr(msg_type, "DESCRIPTOR", None)
        if descriptor is None:
            raise ValueError("msg_type must be a generated Protobuf message class")
        self._msg_class = msg_type
        self._index_array = _create_index_array(descriptor)
        self._schema: Any = None
        self._schema_name = str(descriptor.full_name)
        self._configure_rules(rule_conf)

    def _file_schema_steps(self, file_descriptor: Any, ctx: Any) -> Steps[Any]:
        """The registry schema of a generated file, its imports registered first."""
        from . import Schema, SchemaReference

        refs = []
        for dep in file_descriptor.dependencies:
            if self._skip_known_types and dep.name.startswith("google/protobuf/"):
                continue
            dep_schema = yield from self._file_schema_steps(dep, ctx)
            subject = self._ref_reference_subject_func(ctx, dep)
            if self._auto_register:
                yield from ask("register_schema", subject, dep_schema, self._normalize_schemas)
            registered = yield from ask(
                "lookup_schema", subject, dep_schema, self._normalize_schemas
            )
            refs.append(SchemaReference(dep.name, subject, int(registered.version)))
        make: Any = Schema  # (the client's Schema takes a list, the SDK's any sequence)
        return make(proto_file_text(file_descriptor), "PROTOBUF", refs)

    def _serialize_steps(self, obj: Any, ctx: Any) -> Steps[bytes | None]:
        if not isinstance(obj, self._msg_class):
            raise ValueError(
                f"message must be of type {self._msg_class.DESCRIPTOR.full_name} not {type(obj)}"
            )
        subject = yield from self._subject_steps(ctx, self._schema_name)
        latest = (yield from self._reader_schema_steps(subject)) if subject else None
        if latest is not None:
            schema_id: SchemaId | None = SchemaId("PROTOBUF", latest.schema_id, guid_of(latest))
            self._schema_id = schema_id
        else:
            if self._schema is None and subject is not None and subject not in self._known_subjects:
                self._schema = yield from self._file_schema_steps(
                    self._msg_class.DESCRIPTOR.file, ctx
                )
            schema_id = yield from self._schema_id_steps(subject, self._schema)
        if schema_id is not None:
            schema_id = SchemaId("PROTOBUF", schema_id.id, schema_id.guid, self._index_array)
        if latest is not None:
            obj = yield from self._rules_steps(
                ctx, subject, None, "WRITE", latest.schema, None, obj
            )
        try:
            payload = obj.SerializeToString()
        except Exception as exc:
            raise serialization_error(exc) from exc
        if latest is not None:
            payload = yield from self._encoding_steps(
                ctx, subject, None, "WRITE", latest.schema, payload
            )
        return self._schema_id_serializer(payload, ctx, schema_id)  # type: ignore[no-any-return]


class ProtobufSerializer(_ProtobufSerializing, BaseSerializer):
    """Serialize messages of one generated class, framed with their schema's id
    and message indexes (confluent-kafka's ``ProtobufSerializer``).

    Args:
        msg_type: the generated message class.
        schema_registry_client: a ``SchemaRegistryClient``.
        conf: the serializer settings of :class:`~.avro.AvroSerializer`, and
            ``skip.known.types`` (True), ``reference.subject.name.strategy``,
            ``use.deprecated.format`` (only False).
        rule_conf: the rule executors' settings.
        rule_registry: the rule executors and actions (default: the global one).

    Raises:
        ValueError: a setting of the wrong type, or an unknown one.
    """


class AsyncProtobufSerializer(_ProtobufSerializing, AsyncBaseSerializer):
    """:class:`ProtobufSerializer` over an ``AsyncSchemaRegistryClient``."""


class _ProtobufDeserializing(_ProtobufSerde, DeserializerSettings):
    def __init__(
        self,
        message_type: Any = None,
        conf: dict[str, Any] | None = None,
        schema_registry_client: Any = None,
        rule_conf: dict[str, Any] | None = None,
        rule_registry: RuleRegistry | None = None,
    ) -> None:
        defaults = deserializer_defaults(**{"use.deprecated.format": False})
        settings = self._init_deserializer(schema_registry_client, conf, defaults, rule_registry)
        _check_deprecated(settings)
        self._check_unknown(settings)
        if message_type is None and schema_registry_client is None:
            raise ValueError("message_type (or a schema_registry_client) must be provided")
        self._msg_class = message_type
        self._configure_rules(rule_conf)

    def _deserialize_steps(self, data: bytes, ctx: Any) -> Steps[Any]:
        schema_id = SchemaId("PROTOBUF")
        payload = self._schema_id_deserializer(data, ctx, schema_id)
        msg_class = self._msg_class
        writer_schema = None
        if self._registry is not None:
            writer_schema = yield from self._writer_schema_steps(schema_id)
        if msg_class is None:
            file_descriptor = yield from self._parsed_steps(writer_schema)
            from google.protobuf import message_factory

            descriptor = find_message(file_descriptor, schema_id.message_indexes or [0])
            msg_class = message_factory.GetMessageClass(descriptor)
        if writer_schema is not None:
            payload = yield from self._encoding_steps(
                ctx, None, msg_class.DESCRIPTOR.full_name, "READ", writer_schema, payload
            )
        msg = msg_class()
        try:
            msg.ParseFromString(payload.read())
        except Exception as exc:
            raise serialization_error(exc) from exc
        if writer_schema is not None:
            name = msg.DESCRIPTOR.full_name
            msg = yield from self._rules_steps(ctx, None, name, "READ", writer_schema, None, msg)
        return msg


class ProtobufDeserializer(_ProtobufDeserializing, BaseDeserializer):
    """Deserialize Protobuf messages into ``message_type`` (confluent-kafka's
    ``ProtobufDeserializer``).

    Args:
        message_type: the generated message class; None (a trafka extension):
            dynamic messages of the writer's registered schema.
        conf: ``use.latest.version``, ``use.latest.with.metadata``,
            ``subject.name.strategy`` (and ``.type``, ``.conf``),
            ``schema.id.deserializer``, ``use.deprecated.format`` (only False).
        schema_registry_client: a ``SchemaRegistryClient`` (needed without
            ``message_type``).

    Raises:
        ValueError: a setting of the wrong type, or an unknown one.
    """


class AsyncProtobufDeserializer(_ProtobufDeserializing, AsyncBaseDeserializer):
    """:class:`ProtobufDeserializer` over an ``AsyncSchemaRegistryClient``."""


# -- builders (a producer's ``key.serializer.builder``...; confluent-kafka's, experimental there) --
_PROTOBUFSERIALIZER_FIELDS: list[tuple[str, Any]] = [
    ("message_type", None),
    ("serializer_config", None),
    ("rule_config", None),
    ("rule_registry", None),
    ("serializer_init", None),
]
ProtobufSerializerBuilder = serde_builder(
    "ProtobufSerializerBuilder", ProtobufSerializer, _PROTOBUFSERIALIZER_FIELDS, __name__
)
AsyncProtobufSerializerBuilder = serde_builder(
    "AsyncProtobufSerializerBuilder", AsyncProtobufSerializer, _PROTOBUFSERIALIZER_FIELDS, __name__
)
_PROTOBUFDESERIALIZER_FIELDS: list[tuple[str, Any]] = [
    ("message_type", None),
    ("deserializer_config", None),
    ("rule_config", None),
    ("rule_registry", None),
    ("deserializer_init", None),
]
ProtobufDeserializerBuilder = serde_builder(
    "ProtobufDeserializerBuilder", ProtobufDeserializer, _PROTOBUFDESERIALIZER_FIELDS, __name__
)
AsyncProtobufDeserializerBuilder = serde_builder(
    "AsyncProtobufDeserializerBuilder",
    AsyncProtobufDeserializer,
    _PROTOBUFDESERIALIZER_FIELDS,
    __name__,
)
