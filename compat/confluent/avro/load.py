"""Parsing Avro schemas into the ``avro`` package's schema objects, as
confluent-kafka's legacy module hands them out (``avro.schema.Schema``; its
records and unions hash and compare by their JSON, so they key the registry
client's caches)."""

from __future__ import annotations

from typing import Any

from .error import ClientError

__all__ = ["load", "loads"]


def _avro_schema() -> Any:
    try:
        from avro import schema
    except ImportError:
        raise ImportError(
            "confluent_kafka.avro needs the avro package: pip install 'trafka[schemas]'"
        ) from None
    return schema


def loads(schema_str: str) -> Any:
    """The schema ``schema_str`` (Avro's JSON) as an ``avro.schema.Schema``.

    Raises:
        ClientError: the text is not a valid Avro schema (``Schema parse failed: ...``).
    """
    schema = _avro_schema()
    from avro.errors import SchemaParseException

    try:
        return schema.parse(schema_str)
    except SchemaParseException as exc:
        raise ClientError(f"Schema parse failed: {exc}") from None


def load(fp: str) -> Any:
    """The schema in the file at path ``fp`` (see :func:`loads`)."""
    with open(fp) as f:
        return loads(f.read())
