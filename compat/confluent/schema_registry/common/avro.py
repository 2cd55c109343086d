"""confluent-kafka's ``confluent_kafka.schema_registry.common.avro``: what the
sync and async Avro serdes share."""

from __future__ import annotations

from typing import Any

__all__ = [
    "AvroMessage",
    "AvroSchema",
    "field_transformer",
    "get_type",
    "is_schema",
    "schema_loads",
    "transform",
]

# What fastavro writes and reads, and its parsed schemas (as confluent-kafka names them).
AvroMessage = Any
AvroSchema = Any


def is_schema(value: Any) -> bool:
    """Whether ``value`` is a registry ``Schema`` (its text, type and references)."""
    return hasattr(value, "schema_str") and hasattr(value, "references")


def schema_loads(schema_str: str) -> Any:
    """An Avro ``Schema`` of ``schema_str``: a primitive's name (``'"string"'``)
    is wrapped as ``{"type": "string"}``, as confluent-kafka does."""
    from .. import Schema

    text = schema_str.strip()
    if not text.startswith(("{", "[")):
        text = '{"type":' + text + "}"
    return Schema(text, "AVRO")


# -- field rules: the walk over an Avro value ---------------------------------------------

_FIELD_TYPES = {
    "record": "RECORD",
    "error": "RECORD",
    "enum": "ENUM",
    "array": "ARRAY",
    "map": "MAP",
    "fixed": "FIXED",
    "string": "STRING",
    "bytes": "BYTES",
    "int": "INT",
    "long": "LONG",
    "float": "FLOAT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "null": "NULL",
}


def get_type(schema: Any) -> Any:
    """The :class:`~.serde.FieldType` of an (expanded) Avro schema; a union is COMBINED."""
    from .serde import FieldType

    if isinstance(schema, list):
        return FieldType.COMBINED
    name = schema.get("type") if isinstance(schema, dict) else schema
    return FieldType(_FIELD_TYPES.get(str(name), "NULL"))


def _branch(schema: list[Any], message: Any) -> tuple[Any, Any]:
    """The union branch ``message`` is written with, and its value (fastavro's rules)."""
    from fastavro.validation import validate

    if isinstance(message, tuple) and len(message) == 2 and isinstance(message[0], str):
        for branch in schema:
            if isinstance(branch, dict) and message[0] in _names(branch):
                return branch, message[1]
    for branch in schema:
        if validate(message, _once(branch, set()), raise_errors=False):
            return branch, message
    return None, message


def _names(schema: dict[str, Any]) -> set[str]:
    """The name and full name of a named type."""
    name = str(schema.get("name"))
    namespace = schema.get("namespace")
    return {name, f"{namespace}.{name}"} if namespace and "." not in name else {name}


def _once(schema: Any, seen: set[str]) -> Any:
    """An expanded schema with each named type defined once (its later uses by
    name), as fastavro parses it (an expanded schema repeats definitions)."""
    if isinstance(schema, list):
        return [_once(branch, seen) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind in ("record", "error", "enum", "fixed"):
        names = _names(schema)
        if names & seen:
            return sorted(names)[-1]
        seen |= names
    out = dict(schema)
    if kind in ("record", "error"):
        out["fields"] = [{**f, "type": _once(f["type"], seen)} for f in schema.get("fields", [])]
    elif kind == "array":
        out["items"] = _once(schema["items"], seen)
    elif kind == "map":
        out["values"] = _once(schema["values"], seen)
    elif isinstance(kind, (dict, list)):
        out["type"] = _once(kind, seen)
    return out


def transform(ctx: Any, schema: Any, message: Any, field_transform: Any) -> Any:
    """``message`` (of an expanded Avro schema) after a field rule: each field
    entered in ``ctx`` (its full name ``<record>.<field>``, its
    ``confluent:tags``), each leaf given to ``field_transform`` when the rule's
    tags (none: every field) meet the field's; a CONDITION fails on a leaf
    that answers False."""
    from .serde import RuleConditionError

    if schema is None:
        return message
    field = ctx.current_field()
    if field is not None:
        field.field_type = get_type(schema)
    if isinstance(schema, list):
        branch, value = _branch(schema, message)
        if branch is None:
            return message
        value = transform(ctx, branch, value, field_transform)
        # a union value written as (type name, value) stays so
        return (message[0], value) if isinstance(message, tuple) else value
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if kind == "array" and isinstance(message, list):
        return [transform(ctx, schema["items"], v, field_transform) for v in message]
    if kind == "map" and isinstance(message, dict):
        return {k: transform(ctx, schema["values"], v, field_transform) for k, v in message.items()}
    if kind in ("record", "error"):
        if not isinstance(message, dict):
            return message
        for f in schema["fields"]:
            name = f["name"]
            if name not in message:
                continue
            ctx.enter_field(
                message,
                f"{schema['name']}.{name}",
                name,
                get_type(f["type"]),
                f.get("confluent:tags"),
            )
            try:
                value = transform(ctx, f["type"], message[name], field_transform)
                if str(getattr(ctx.rule.kind, "value", ctx.rule.kind)).upper() == "CONDITION":
                    if value is False:
                        raise RuleConditionError(ctx.rule)
                else:
                    message[name] = value
            finally:
                ctx.exit_field()
        return message
    if field is not None:
        rule_tags = set(getattr(ctx.rule, "tags", None) or ())
        if not rule_tags or rule_tags & field.tags:
            return field_transform(ctx, field, message)
    return message


def field_transformer(parsed: Any) -> Any:
    """The walk of :func:`transform` over values of ``parsed`` (a fastavro-parsed schema)."""
    from fastavro.schema import expand_schema

    expanded = expand_schema(parsed)

    def walk(ctx: Any, field_transform: Any, message: Any) -> Any:
        return transform(ctx, expanded, message, field_transform)

    return walk
