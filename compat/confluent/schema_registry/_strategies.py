"""confluent-kafka's subject name strategies and schema id (de)serializers,
as ``confluent_kafka.schema_registry`` offers them (``subject.name.strategy``,
``schema.id.serializer``, ``schema.id.deserializer``). The serdes' own module
(``common.serde``) offers the same names; this one stands until it does."""

from __future__ import annotations

import io
from typing import Any

from ..serialization import MessageField, SerializationContext, SerializationError
from .common.schema_registry_client import SchemaReference

__all__ = [
    "dual_schema_id_deserializer",
    "header_schema_id_serializer",
    "prefix_schema_id_deserializer",
    "prefix_schema_id_serializer",
    "record_subject_name_strategy",
    "reference_subject_name_strategy",
    "topic_record_subject_name_strategy",
    "topic_subject_name_strategy",
]

# The headers a schema's GUID travels in (confluent-kafka's names).
_KEY_SCHEMA_ID = "__key_schema_id"
_VALUE_SCHEMA_ID = "__value_schema_id"

_MAGIC_BYTE = 0
_MAGIC_BYTE_V0 = _MAGIC_BYTE
_MAGIC_BYTE_V1 = 1


def _needs(ctx: SerializationContext | None, strategy: str) -> SerializationContext:
    if ctx is None:
        raise ValueError(
            f"SerializationContext is required for {strategy}. "
            "Either provide a SerializationContext or use record_subject_name_strategy."
        )
    return ctx


def topic_subject_name_strategy(
    ctx: SerializationContext | None, record_name: str | None
) -> str | None:
    """The subject ``<topic>-key`` or ``<topic>-value``.

    Raises:
        ValueError: ``ctx`` is None.
    """
    ctx = _needs(ctx, "topic_subject_name_strategy")
    return f"{ctx.topic}-{ctx.field}"


def topic_record_subject_name_strategy(
    ctx: SerializationContext | None, record_name: str | None
) -> str | None:
    """The subject ``<topic>-<record name>`` (None without a record name).

    Raises:
        ValueError: ``ctx`` is None.
    """
    ctx = _needs(ctx, "topic_record_subject_name_strategy")
    return None if record_name is None else f"{ctx.topic}-{record_name}"


def record_subject_name_strategy(
    ctx: SerializationContext | None, record_name: str | None
) -> str | None:
    """The subject ``<record name>`` (``ctx`` is not needed)."""
    return record_name


def reference_subject_name_strategy(
    ctx: SerializationContext | None, schema_ref: SchemaReference | None
) -> str | None:
    """The subject of a referenced schema: the reference's name."""
    return None if schema_ref is None else schema_ref.name


def _header_key(ctx: SerializationContext) -> str:
    return _KEY_SCHEMA_ID if ctx.field == MessageField.KEY else _VALUE_SCHEMA_ID


def header_schema_id_serializer(
    payload: bytes, ctx: SerializationContext | None, schema_id: Any
) -> bytes:
    """Put the schema's GUID in the record's headers; the payload as it is.

    Raises:
        SerializationError: no context, no headers, or headers neither a
            list nor a dict.
    """
    if ctx is None:
        raise SerializationError("SerializationContext is required for header_schema_id_serializer")
    headers = ctx.headers
    if headers is None:
        raise SerializationError("Missing headers")
    value = schema_id.guid_to_bytes()
    if isinstance(headers, list):
        headers.append((_header_key(ctx), value))
    elif isinstance(headers, dict):
        headers[_header_key(ctx)] = value
    else:
        raise SerializationError("Invalid headers type")
    return payload


def prefix_schema_id_serializer(payload: bytes, ctx: Any, schema_id: Any) -> bytes:
    """The payload after the schema id's prefix (magic byte and id)."""
    return bytes(schema_id.id_to_bytes()) + payload


def dual_schema_id_deserializer(
    payload: bytes, ctx: SerializationContext | None, schema_id: Any
) -> io.BytesIO:
    """Read the schema id from the record's headers if one is there (the
    payload is then whole), else from the payload's prefix (the rest is the
    payload)."""
    found = None
    headers = None if ctx is None else ctx.headers
    if ctx is not None and headers is not None:
        key = _header_key(ctx)
        if isinstance(headers, list):
            found = next((v for k, v in headers if k == key), None)
        elif isinstance(headers, dict):
            found = headers.get(key)
    if found is None:
        return schema_id.from_bytes(io.BytesIO(payload))  # type: ignore[no-any-return]
    schema_id.from_bytes(io.BytesIO(found))
    return io.BytesIO(payload)


def prefix_schema_id_deserializer(payload: bytes, ctx: Any, schema_id: Any) -> io.BytesIO:
    """Read the schema id from the payload's prefix; the rest of the payload."""
    return schema_id.from_bytes(io.BytesIO(payload))  # type: ignore[no-any-return]
