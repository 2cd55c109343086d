"""JSON Schema (jsonschema): values validated against the schema when
written and, unless ``validate`` is off, when read; ``$ref`` to other subjects
through schema references (the reference's name is the URL ``$ref`` uses)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import ConfigError
from .framing import SchemaRef
from .serde import SchemaDeserializer, SchemaSerializer
from .types import MissingExtraError, RegisteredSchema, Schema

__all__ = ["JSONDeserializer", "JSONSerializer", "json_check", "json_validator"]


def _jsonschema() -> Any:
    try:
        import jsonschema
        import referencing
    except ImportError:
        raise MissingExtraError(
            "JSON Schema needs jsonschema: pip install 'trafka[schemas]'"
        ) from None
    return jsonschema, referencing


def _validator(serde: Any, schema: Schema) -> Any:
    """A validator of ``schema`` whose ``$ref`` resolve to its references."""
    referenced = [(name, s.schema_str) for name, s in serde.referenced_schemas(schema)]
    return json_validator(schema.schema_str, referenced)


def json_validator(schema_str: str, referenced: Iterable[tuple[str, str]] = ()) -> Any:
    """``(validator, schema document)`` of ``schema_str``, whose ``$ref`` resolve
    to ``referenced`` (each ``(the URL $ref names, its schema text)``).

    Raises:
        jsonschema.SchemaError: ``schema_str`` is not a valid JSON Schema.
    """
    jsonschema, referencing = _jsonschema()
    doc = json.loads(schema_str)
    resources = [
        (
            name,
            referencing.Resource.from_contents(
                json.loads(text), default_specification=referencing.jsonschema.DRAFT7
            ),
        )
        for name, text in referenced
    ]
    registry = referencing.Registry().with_resources(resources)
    cls = jsonschema.validators.validator_for(doc, default=jsonschema.Draft7Validator)
    cls.check_schema(doc)
    return cls(doc, registry=registry), doc


def _encode(value: Any) -> bytes:
    # Compact, UTF-8 as written (what Confluent's serializers write).
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class JSONSerializer(SchemaSerializer):
    """Serialize JSON values (or objects, through ``to_dict``) checked against a JSON Schema.

    Args:
        schema_str: the schema (JSON text), or a :class:`~.types.Schema` with references.
        schema_registry_client: a blocking
            :class:`~trafka.sdk.schemas.SchemaRegistryClient`, or its settings.
        to_dict: ``to_dict(obj, ctx) -> JSON value`` for application objects.
        conf: the settings of :mod:`.serde`, and ``validate`` (default True).
    """

    schema_type = "JSON"

    def __init__(
        self,
        schema_str: str | Schema | None,
        schema_registry_client: Any,
        to_dict: Callable[[Any, Any], Any] | None = None,
        conf: Mapping[str, Any] | None = None,
    ) -> None:
        _jsonschema()
        super().__init__(schema_registry_client, conf, {"validate": True})
        self.validate = self.conf.pop("validate")
        if schema_str is None and not (self.use_latest or self.use_schema_id is not None):
            raise ConfigError("JSONSerializer needs schema_str without use.latest.version")
        schema = Schema(schema_str, "JSON") if isinstance(schema_str, str) else schema_str
        self.schema = schema
        self._own = None if schema is None else _validator(self, schema)
        self.to_dict = to_dict

    def _schema(self, obj: Any) -> Schema:
        assert self.schema is not None
        return self.schema

    def _record_name(self, obj: Any) -> str | None:
        doc = None if self._own is None else self._own[1]
        return doc.get("title") if isinstance(doc, dict) else None

    def _writer(self, registered: RegisteredSchema) -> Any:
        if self.schema is not None and registered.schema == self.schema:
            return self._own
        return _validator(self, registered.schema)

    def _encode(self, obj: Any, writer: Any, ctx: Any) -> tuple[bytes, None]:
        if self.to_dict is not None:
            obj = self.to_dict(obj, ctx)
        if self.validate:
            _check(writer[0], obj)
        return _encode(obj), None


def json_check(validator: Any, value: Any) -> None:
    """Raise ValueError naming where ``value`` first breaks ``validator``'s schema."""
    _check(validator, value)


def _check(validator: Any, value: Any) -> None:
    error = next(iter(validator.iter_errors(value)), None)
    if error is not None:
        path = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise ValueError(f"JSON Schema validation failed at {path}: {error.message}")


class JSONDeserializer(SchemaDeserializer):
    """Deserialize JSON values, validated against their writer schema (or ``schema_str``).

    Args:
        schema_str: validate against this schema instead of the writer's; None:
            the writer's (fetched by id).
        from_dict: ``from_dict(value, ctx) -> obj``.
        schema_registry_client: a blocking
            :class:`~trafka.sdk.schemas.SchemaRegistryClient`, or its settings.
        conf: ``validate`` (default True).
    """

    schema_type = "JSON"

    def __init__(
        self,
        schema_str: str | Schema | None,
        from_dict: Callable[[Any, Any], Any] | None = None,
        schema_registry_client: Any = None,
        conf: Mapping[str, Any] | None = None,
    ) -> None:
        _jsonschema()
        if schema_registry_client is None:
            raise ConfigError("JSONDeserializer needs a schema_registry_client")
        super().__init__(schema_registry_client, conf, {"validate": True})
        self.validate = self.conf.pop("validate")
        schema = Schema(schema_str, "JSON") if isinstance(schema_str, str) else schema_str
        self._fixed = None if schema is None else _validator(self, schema)
        self.from_dict = from_dict

    def _reader(self, schema: Schema) -> Any:
        return self._fixed if self._fixed is not None else _validator(self, schema)

    def _decode(self, payload: memoryview, reader: Any, ref: SchemaRef, ctx: Any) -> Any:
        value = json.loads(bytes(payload))
        if self.validate:
            _check(reader[0], value)
        if self.from_dict is not None:
            value = self.from_dict(value, ctx)
        return value
