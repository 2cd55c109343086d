"""confluent-kafka's ``confluent_kafka.schema_registry.json_schema``: JSON Schema
serdes, sync (:class:`JSONSerializer`, :class:`JSONDeserializer`) and async
(:class:`AsyncJSONSerializer`...), with 2.16.1's arguments and settings, over
the SDK's validation (:mod:`trafka.sdk.schemas.json_schema`, jsonschema).

Rules (2.16.1's):

* The record name the record strategies use is the schema's ``title``.
* With ``validate`` (the default) a value is checked against the schema it is
  written with (serializing) or read as (deserializing); a value that fails is
  a ``SerializationError`` naming where.
* ``json_encode`` / ``json_decode`` replace the JSON text codec (e.g.
  ``orjson.dumps``); an encoder may return text or bytes. The default writes
  compact UTF-8 JSON, as confluent-kafka does.
* The deserializer needs no registry when given ``schema_str`` (it is then
  the schema the value is checked against); a ``Schema`` with references
  needs one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from trafka.sdk.schemas.json_schema import json_check, json_validator

from .common.avro import is_schema
from .common.json_schema import JsonMessage, JsonSchema, field_transformer, get_type
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
    "AsyncJSONDeserializer",
    "AsyncJSONDeserializerBuilder",
    "AsyncJSONSerializer",
    "AsyncJSONSerializerBuilder",
    "JSONDeserializer",
    "JSONDeserializerBuilder",
    "JSONSerializer",
    "JSONSerializerBuilder",
    "JsonMessage",
    "JsonSchema",
    "get_type",
]


def _json_dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _schema(schema_str: str) -> Any:
    from . import Schema

    return Schema(schema_str, "JSON")


class _JSONSerde:
    _schema_type = "JSON"

    def _parse(self, schema: Any, referenced: list[tuple[str, Any]]) -> Any:
        texts = [(n, s.schema_str) for n, s in referenced]
        validator, doc = json_validator(schema.schema_str, texts)
        return validator, doc, texts

    def _field_transformer(self, parsed: Any) -> Any:
        return None if parsed is None else field_transformer(parsed[1], parsed[2])


def _title(parsed: Any) -> str | None:
    doc = parsed[1] if parsed is not None else None
    title = doc.get("title") if isinstance(doc, dict) else None
    return None if title is None else str(title)


class _JSONSerializing(_JSONSerde, SerializerSettings):
    def __init__(
        self,
        schema_str: Any,
        schema_registry_client: Any,
        to_dict: Callable[[Any, Any], Any] | None = None,
        conf: dict[str, Any] | None = None,
        rule_conf: dict[str, Any] | None = None,
        rule_registry: RuleRegistry | None = None,
        json_encode: Callable[[Any], Any] | None = None,
    ) -> None:
        if isinstance(schema_str, str):
            schema = _schema(schema_str)
        else:
            schema = schema_str if is_schema(schema_str) else None
        self._json_encode = json_encode or _json_dumps
        if to_dict is not None and not callable(to_dict):
            raise ValueError(
                "to_dict must be callable with the signature to_dict(object, SerializationContext)->dict"
            )
        self._to_dict = to_dict
        settings = self._init_serializer(
            schema_registry_client, conf, serializer_defaults(validate=True), rule_registry
        )
        self._validate = check_bool(settings, "validate")
        self._check_unknown(settings)
        self._schema = schema
        self._parsed_schema: Any = None
        if schema is not None and not schema.references:
            self._parsed_schema = self._parse(schema, [])
        self._schema_name = _title(self._parsed_schema)
        self._configure_rules(rule_conf)

    def _serialize_steps(self, obj: Any, ctx: Any) -> Steps[bytes | None]:
        if self._parsed_schema is None and self._schema is not None:
            self._parsed_schema = yield from self._parsed_steps(self._schema)
            self._schema_name = _title(self._parsed_schema)
        subject = yield from self._subject_steps(ctx, self._schema_name)
        latest = (yield from self._reader_schema_steps(subject)) if subject else None
        if latest is not None:
            schema_id: SchemaId | None = SchemaId("JSON", latest.schema_id, guid_of(latest))
            self._schema_id = schema_id
            writer = yield from self._parsed_steps(latest.schema)
        else:
            schema_id = yield from self._schema_id_steps(subject, self._schema)
            writer = self._parsed_schema
        if self._to_dict is not None:
            if ctx is None:
                raise TypeError("SerializationContext cannot be None")
            obj = self._to_dict(obj, ctx)
        if latest is not None:
            obj = yield from self._rules_steps(
                ctx, subject, None, "WRITE", latest.schema, writer, obj
            )
        try:
            if self._validate and writer is not None:
                json_check(writer[0], obj)
            encoded = self._json_encode(obj)
        except Exception as exc:
            raise serialization_error(exc) from exc
        payload = encoded.encode("utf-8") if isinstance(encoded, str) else bytes(encoded)
        if latest is not None:
            payload = yield from self._encoding_steps(
                ctx, subject, None, "WRITE", latest.schema, payload
            )
        return self._schema_id_serializer(payload, ctx, schema_id)  # type: ignore[no-any-return]


class JSONSerializer(_JSONSerializing, BaseSerializer):
    """Serialize JSON values (or objects, through ``to_dict``) checked against a
    JSON Schema, framed with its id (confluent-kafka's ``JSONSerializer``).

    Args:
        schema_str: the schema (text, or a ``Schema`` with references); None
            with ``use.latest.version`` or ``use.schema.id``.
        schema_registry_client: a ``SchemaRegistryClient``.
        to_dict: ``to_dict(obj, ctx) -> dict`` for application objects.
        conf: the serializer settings of :class:`~.avro.AvroSerializer`, and
            ``validate`` (True).
        rule_conf: the rule executors' settings.
        rule_registry: the rule executors and actions (default: the global one).
        json_encode: ``json_encode(value) -> str | bytes`` (default: compact JSON).

    Raises:
        ValueError: a setting of the wrong type, or an unknown one.
    """


class AsyncJSONSerializer(_JSONSerializing, AsyncBaseSerializer):
    """:class:`JSONSerializer` over an ``AsyncSchemaRegistryClient``."""


class _JSONDeserializing(_JSONSerde, DeserializerSettings):
    def __init__(
        self,
        schema_str: Any,
        from_dict: Callable[[Any, Any], Any] | None = None,
        schema_registry_client: Any = None,
        conf: dict[str, Any] | None = None,
        rule_conf: dict[str, Any] | None = None,
        rule_registry: RuleRegistry | None = None,
        json_decode: Callable[[Any], Any] | None = None,
    ) -> None:
        if isinstance(schema_str, str):
            schema = _schema(schema_str)
        elif is_schema(schema_str):
            schema = schema_str
            if schema.references and schema_registry_client is None:
                raise ValueError(
                    'schema_registry_client must be provided if "schema_str" is a Schema'
                    " instance with references"
                )
        elif schema_str is None:
            if schema_registry_client is None:
                raise ValueError(
                    'schema_registry_client must be provided if "schema_str" is not provided'
                )
            schema = None
        else:
            raise TypeError("You must pass either str or Schema")
        self._schema = schema
        self._json_decode = json_decode or json.loads
        settings = self._init_deserializer(
            schema_registry_client, conf, deserializer_defaults(validate=True), rule_registry
        )
        self._validate = check_bool(settings, "validate")
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
        self._configure_rules(rule_conf)

    def _deserialize_steps(self, data: bytes, ctx: Any) -> Steps[Any]:
        schema_id = SchemaId("JSON")
        payload = self._schema_id_deserializer(data, ctx, schema_id)
        writer = writer_schema = None
        if self._registry is not None:
            writer_schema = yield from self._writer_schema_steps(schema_id)
            writer = yield from self._parsed_steps(writer_schema)
        latest = subject = None
        migrations: list[Any] = []
        if self._registry is not None:
            latest, subject = yield from self._latest_and_subject_steps(ctx, _title(writer))
            if latest is not None and subject is not None and ctx is not None:
                migrations = yield from self._migrations_steps(subject, writer_schema, latest)
        if latest is not None:
            reader = yield from self._parsed_steps(latest.schema)
        elif self._schema is not None:
            if self._reader_schema is None:
                self._reader_schema = yield from self._parsed_steps(self._schema)
            reader = self._reader_schema
        else:
            reader = writer
        if self._registry is not None:
            payload = yield from self._encoding_steps(
                ctx, subject, _title(writer), "READ", writer_schema, payload
            )
        try:
            value = self._json_decode(payload.read())
        except Exception as exc:
            raise serialization_error(exc) from exc
        if migrations:
            value = self._migrate(ctx, subject, migrations, value)  # type: ignore[arg-type]
        if self._registry is not None:
            target = latest.schema if latest is not None else writer_schema
            value = yield from self._rules_steps(
                ctx, None, _title(writer), "READ", target, reader, value
            )
        try:
            if self._validate and reader is not None:
                json_check(reader[0], value)
        except Exception as exc:
            raise serialization_error(exc) from exc
        if self._from_dict is not None:
            if ctx is None:
                raise TypeError("SerializationContext cannot be None")
            return self._from_dict(value, ctx)
        return value


class JSONDeserializer(_JSONDeserializing, BaseDeserializer):
    """Deserialize JSON values, checked against their schema (confluent-kafka's
    ``JSONDeserializer``).

    Args:
        schema_str: the schema values are checked against (text, or a
            ``Schema``); None: the writer's, from the registry.
        from_dict: ``from_dict(dict, ctx) -> obj``.
        schema_registry_client: a ``SchemaRegistryClient`` (needed without
            ``schema_str``, or for its references).
        conf: ``use.latest.version``, ``use.latest.with.metadata``,
            ``subject.name.strategy`` (and ``.type``, ``.conf``),
            ``schema.id.deserializer``, ``validate``.
        json_decode: ``json_decode(bytes) -> value`` (default: json.loads).

    Raises:
        TypeError: ``schema_str`` neither a string nor a ``Schema``.
        ValueError: no registry where one is needed, or a bad setting.
    """


class AsyncJSONDeserializer(_JSONDeserializing, AsyncBaseDeserializer):
    """:class:`JSONDeserializer` over an ``AsyncSchemaRegistryClient``."""


# -- builders (a producer's ``key.serializer.builder``...; confluent-kafka's, experimental there) --
_JSONSERIALIZER_FIELDS: list[tuple[str, Any]] = [
    ("schema", None),
    ("to_dict", None),
    ("serializer_config", None),
    ("rule_config", None),
    ("rule_registry", None),
    ("json_encode", None),
    ("serializer_init", None),
]
JSONSerializerBuilder = serde_builder(
    "JSONSerializerBuilder", JSONSerializer, _JSONSERIALIZER_FIELDS, __name__
)
AsyncJSONSerializerBuilder = serde_builder(
    "AsyncJSONSerializerBuilder", AsyncJSONSerializer, _JSONSERIALIZER_FIELDS, __name__
)
_JSONDESERIALIZER_FIELDS: list[tuple[str, Any]] = [
    ("schema", None),
    ("from_dict", None),
    ("deserializer_config", None),
    ("rule_config", None),
    ("rule_registry", None),
    ("json_decode", None),
    ("deserializer_init", None),
]
JSONDeserializerBuilder = serde_builder(
    "JSONDeserializerBuilder", JSONDeserializer, _JSONDESERIALIZER_FIELDS, __name__
)
AsyncJSONDeserializerBuilder = serde_builder(
    "AsyncJSONDeserializerBuilder", AsyncJSONDeserializer, _JSONDESERIALIZER_FIELDS, __name__
)
