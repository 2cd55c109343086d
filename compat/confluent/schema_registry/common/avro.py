"""confluent-kafka's ``confluent_kafka.schema_registry.common.avro``: what the
sync and async Avro serdes share."""

from __future__ import annotations

from typing import Any

__all__ = ["AvroMessage", "AvroSchema", "is_schema", "schema_loads"]

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
