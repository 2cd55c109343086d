"""confluent-kafka's ``confluent_kafka.schema_registry.avro``: Avro serdes, sync
(:class:`AvroSerializer`, :class:`AvroDeserializer`) and async
(:class:`AsyncAvroSerializer`...), with 2.16.1's arguments and settings, over
the SDK's fastavro encoding (:mod:`trafka.sdk.schemas.avro`).

Rules (2.16.1's):

* A schema string that is not a JSON object or array is a primitive type's
  name (``'"string"'``), wrapped as ``{"type": ...}``.
* The record name the record strategies use is the schema's full name, or a
  primitive's type name; an Avro union has none.
* A plain ``bytes`` schema is written and read as the raw bytes, without
  Avro's length prefix.
* The serializer writes with the schema ``use.schema.id`` / ``use.latest.*``
  names when set, else with its own; the deserializer reads with the writer's
  schema resolved to the subject's latest (``use.latest.*``) or to its own
  ``schema_str``, else as written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from trafka.sdk.schemas.avro import avro_decode, avro_encode, parse_avro

from ..serialization import SerializationError
from .common.avro import (
    AvroMessage,
    AvroSchema,
    field_transformer,
    get_type,
    is_schema,
    schema_loads,
    transform,
)
from .common.serde import Steps, serialization_error
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
    deserializer_defaults,
    guid_of,
    serde_builder,
    serializer_defaults,
)

__all__ = [
    "AsyncAvroDeserializer",
    "AsyncAvroDeserializerBuilder",
    "AsyncAvroSerializer",
    "AsyncAvroSerializerBuilder",
    "AvroDeserializer",
    "AvroDeserializerBuilder",
    "AvroMessage",
    "AvroSchema",
    "AvroSerializer",
    "AvroSerializerBuilder",
    "get_type",
    "transform",
]


def _is_bytes(parsed: Any) -> bool:
    return parsed == "bytes" or (isinstance(parsed, dict) and parsed.get("type") == "bytes")


def _record_name(schema: Any, parsed: Any) -> str | None:
    if isinstance(parsed, dict):
        name = parsed.get("name")
        if name is None and schema is not None:
            doc = json.loads(schema.schema_str)
            name = doc.get("type") if isinstance(doc, dict) else None
        return None if name is None else str(name)
    return None


class _AvroSerde:
    _schema_type = "AVRO"

    def _parse(self, schema: Any, referenced: list[tuple[str, Any]]) -> Any:
        return parse_avro(schema.schema_str, [s.schema_str for _, s in referenced])

    def _field_transformer(self, parsed: Any) -> Any:
        return None if parsed is None else field_transformer(parsed)


class _AvroSerializing(_AvroSerde, SerializerSettings):
    def __init__(
        self,
        schema_registry_client: Any,
        schema_str: Any = None,
        to_dict: Callable[[Any, Any], Any] | None = None,
        conf: dict[str, Any] | None = None,
        rule_conf: dict[str, Any] | None = None,
        rule_registry: RuleRegistry | None = None,
    ) -> None:
        if isinstance(schema_str, str):
            schema = schema_loads(schema_str)
        else:
            schema = schema_str if is_schema(schema_str) else None
        if to_dict is not None and not callable(to_dict):
            raise ValueError(
                "to_dict must be callable with the signature to_dict(object, SerializationContext)->dict"
            )
        self._to_dict = to_dict
        defaults = serializer_defaults(
            **{"validate.strict": False, "validate.strict.allow.default": False}
        )
        settings = self._init_serializer(schema_registry_client, conf, defaults, rule_registry)
        self._strict = check_bool(settings, "validate.strict")
        self._strict_allow_default = check_bool(settings, "validate.strict.allow.default")
        self._check_unknown(settings)
        self._schema = schema
        self._parsed_schema: Any = None
        self._schema_name: str | None = None
        if schema is not None and not schema.references:
            self._parsed_schema = self._parse(schema, [])
            self._schema_name = _record_name(schema, self._parsed_schema)
        self._configure_rules(rule_conf)

    def _own_steps(self) -> Steps[Any]:
        if self._parsed_schema is None and self._schema is not None:
            self._parsed_schema = yield from self._parsed_steps(self._schema)
            self._schema_name = _record_name(self._schema, self._parsed_schema)
        return self._parsed_schema

    def _serialize_steps(self, obj: Any, ctx: Any) -> Steps[bytes | None]:
        own = yield from self._own_steps()
        subject = yield from self._subject_steps(ctx, self._schema_name)
        latest = (yield from self._reader_schema_steps(subject)) if subject else None
        if latest is not None:
            schema_id: SchemaId | None = SchemaId("AVRO", latest.schema_id, guid_of(latest))
            self._schema_id = schema_id
            writer = yield from self._parsed_steps(latest.schema)
        else:
            schema_id = yield from self._schema_id_steps(subject, self._schema)
            writer = own
        if self._to_dict is not None:
            if ctx is None:
                raise TypeError("SerializationContext cannot be None")
            obj = self._to_dict(obj, ctx)
        if latest is not None:
            obj = yield from self._rules_steps(
                ctx, subject, None, "WRITE", latest.schema, writer, obj
            )
        try:
            if _is_bytes(writer):
                payload = obj if isinstance(obj, bytes) else obj.encode()
            else:
                payload = avro_encode(writer, obj, self._strict, self._strict_allow_default)
        except Exception as exc:
            raise serialization_error(exc) from exc
        if latest is not None:
            payload = yield from self._encoding_steps(
                ctx, subject, None, "WRITE", latest.schema, payload
            )
        return self._schema_id_serializer(payload, ctx, schema_id)  # type: ignore[no-any-return]


class AvroSerializer(_AvroSerializing, BaseSerializer):
    """Serialize dicts (or objects, through ``to_dict``) as Avro, framed with
    their schema's id (confluent-kafka's ``AvroSerializer``).

    Args:
        schema_registry_client: a ``SchemaRegistryClient``.
        schema_str: the writer schema (text, or a ``Schema`` with references);
            None with ``use.latest.version`` or ``use.schema.id``.
        to_dict: ``to_dict(obj, ctx) -> dict`` for application objects.
        conf: ``auto.register.schemas``, ``normalize.schemas``, ``use.schema.id``,
            ``use.latest.version``, ``use.latest.with.metadata``,
            ``subject.name.strategy`` (and ``.type``, ``.conf``),
            ``schema.id.serializer``, ``validate.strict``,
            ``validate.strict.allow.default``.
        rule_conf: the rule executors' settings.
        rule_registry: the rule executors and actions (default: the global one).

    Raises:
        ValueError: a setting of the wrong type, or an unknown one.
    """


class AsyncAvroSerializer(_AvroSerializing, AsyncBaseSerializer):
    """:class:`AvroSerializer` over an ``AsyncSchemaRegistryClient``:
    ``serializer = await AsyncAvroSerializer(...)``, ``await serializer(obj, ctx)``."""


class _AvroDeserializing(_AvroSerde, DeserializerSettings):
    def __init__(
        self,
        schema_registry_client: Any,
        schema_str: Any = None,
        from_dict: Callable[[Any, Any], Any] | None = None,
        return_record_name: bool = False,
        conf: dict[str, Any] | None = None,
        rule_conf: dict[str, Any] | None = None,
        rule_registry: RuleRegistry | None = None,
    ) -> None:
        schema = None
        if schema_str is not None:
            if isinstance(schema_str, str):
                schema = schema_loads(schema_str)
            elif is_schema(schema_str):
                schema = schema_str
            else:
                raise TypeError("You must pass either schema string or schema object")
        self._schema = schema
        settings = self._init_deserializer(
            schema_registry_client, conf, deserializer_defaults(), rule_registry
        )
        self._check_unknown(settings)
        self._reader_schema: Any = None
        if schema is not None and not schema.references:
            self._reader_schema = self._parse(schema, [])
        if from_dict is not None and not callable(from_dict):
            raise ValueError(
                "from_dict must be callable with the signature"
                " from_dict(SerializationContext, dict) -> object"
            )
        self._from_dict = from_dict
        if not isinstance(return_record_name, bool):
            raise ValueError("return_record_name must be a boolean value")
        self._return_record_name = return_record_name
        self._configure_rules(rule_conf)

    def _deserialize_steps(self, data: bytes, ctx: Any) -> Steps[Any]:
        if len(data) <= 5:
            raise SerializationError(
                f"Expecting data framing of length 6 bytes or more but total data size is"
                f" {len(data)} bytes. This message was not produced with a Confluent"
                " Schema Registry serializer"
            )
        schema_id = SchemaId("AVRO")
        payload = self._schema_id_deserializer(data, ctx, schema_id)
        writer_schema = yield from self._writer_schema_steps(schema_id)
        writer = yield from self._parsed_steps(writer_schema)
        latest, subject = yield from self._latest_and_subject_steps(ctx, _record_name(None, writer))
        migrations = []
        if latest is not None and subject is not None and ctx is not None:
            migrations = yield from self._migrations_steps(subject, writer_schema, latest)
        if migrations:
            reader = None  # read as written, then migrated
        elif latest is not None:
            reader = yield from self._parsed_steps(latest.schema)
        elif self._schema is not None:
            if self._reader_schema is None:
                self._reader_schema = yield from self._parsed_steps(self._schema)
            reader = self._reader_schema
        else:
            reader = None
        payload = yield from self._encoding_steps(
            ctx, subject, _record_name(None, writer), "READ", writer_schema, payload
        )
        try:
            if _is_bytes(writer):
                value: Any = payload.read()
            else:
                value = avro_decode(payload.read(), writer, reader, self._return_record_name)
        except Exception as exc:
            raise serialization_error(exc) from exc
        if migrations:
            value = self._migrate(ctx, subject, migrations, value)  # type: ignore[arg-type]
            reader = yield from self._parsed_steps(latest.schema)
        target = latest.schema if latest is not None else writer_schema
        value = yield from self._rules_steps(
            ctx, None, _record_name(None, writer), "READ", target, reader or writer, value
        )
        if self._from_dict is not None:
            if ctx is None:
                raise TypeError("SerializationContext cannot be None")
            return self._from_dict(value, ctx)
        return value


class AvroDeserializer(_AvroDeserializing, BaseDeserializer):
    """Deserialize Avro written with any registered schema (confluent-kafka's
    ``AvroDeserializer``).

    Args:
        schema_registry_client: a ``SchemaRegistryClient``.
        schema_str: a reader schema (records are resolved to it); None: as written.
        from_dict: ``from_dict(dict, ctx) -> obj``.
        return_record_name: unions of records come back as ``(name, dict)``.
        conf: ``use.latest.version``, ``use.latest.with.metadata``,
            ``subject.name.strategy`` (and ``.type``, ``.conf``), ``schema.id.deserializer``.

    Raises:
        TypeError: ``schema_str`` neither a string nor a ``Schema``.
        ValueError: a setting of the wrong type, or an unknown one.
    """


class AsyncAvroDeserializer(_AvroDeserializing, AsyncBaseDeserializer):
    """:class:`AvroDeserializer` over an ``AsyncSchemaRegistryClient``."""


# -- builders (a producer's ``key.serializer.builder``...; confluent-kafka's, experimental there) --
_AVROSERIALIZER_FIELDS: list[tuple[str, Any]] = [
    ("schema", None),
    ("to_dict", None),
    ("serializer_config", None),
    ("rule_config", None),
    ("rule_registry", None),
    ("serializer_init", None),
]
AvroSerializerBuilder = serde_builder(
    "AvroSerializerBuilder", AvroSerializer, _AVROSERIALIZER_FIELDS, __name__
)
AsyncAvroSerializerBuilder = serde_builder(
    "AsyncAvroSerializerBuilder", AsyncAvroSerializer, _AVROSERIALIZER_FIELDS, __name__
)
_AVRODESERIALIZER_FIELDS: list[tuple[str, Any]] = [
    ("schema", None),
    ("from_dict", None),
    ("return_record_name", False),
    ("deserializer_config", None),
    ("rule_config", None),
    ("rule_registry", None),
    ("deserializer_init", None),
]
AvroDeserializerBuilder = serde_builder(
    "AvroDeserializerBuilder", AvroDeserializer, _AVRODESERIALIZER_FIELDS, __name__
)
AsyncAvroDeserializerBuilder = serde_builder(
    "AsyncAvroDeserializerBuilder", AsyncAvroDeserializer, _AVRODESERIALIZER_FIELDS, __name__
)
