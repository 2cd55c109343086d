"""Avro (fastavro): generic dicts, or the application's records through
``to_dict`` / ``from_dict``; named types of other subjects through schema
references; a reader schema for schema evolution."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import ConfigError
from .framing import SchemaRef
from .serde import SchemaDeserializer, SchemaSerializer, _bool
from .types import MissingExtraError, RegisteredSchema, Schema

__all__ = ["AvroDeserializer", "AvroSerializer", "avro_decode", "avro_encode", "parse_avro"]


def _fastavro() -> Any:
    try:
        import fastavro
    except ImportError:
        raise MissingExtraError("Avro needs fastavro: pip install 'trafka[schemas]'") from None
    return fastavro


def parse_avro(schema_str: str, referenced: Iterable[str] = ()) -> Any:
    """``schema_str`` parsed by fastavro, after the schemas it references (their
    text, depth first), whose named types it may use."""
    fastavro = _fastavro()
    named: dict[str, Any] = {}
    for text in referenced:
        fastavro.parse_schema(json.loads(text), named_schemas=named)
    doc = json.loads(schema_str)
    if named and not isinstance(doc, dict):
        # A union (or a bare name) has nowhere to carry the referenced types'
        # definitions, as a parsed record does: each is written out where it
        # is first used instead.
        defs = {_doc_full_name(d): d for d in map(json.loads, referenced) if isinstance(d, dict)}
        doc = _inline(doc, "", defs, set())
    return fastavro.parse_schema(doc, named_schemas=dict(named))


_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _doc_full_name(doc: dict[str, Any], namespace: str = "") -> str:
    name = str(doc.get("name", ""))
    if "." in name:
        return name
    ns = doc.get("namespace", namespace)
    return f"{ns}.{name}" if ns else name


def _inline(node: Any, ns: str, defs: dict[str, Any], defined: set[str]) -> Any:
    """``node`` (Avro JSON in namespace ``ns``) with the first use of each
    referenced name in ``defs`` replaced by its definition (under its full name)."""
    if isinstance(node, str):
        full = node if "." in node or not ns else f"{ns}.{node}"
        if node in _PRIMITIVES or full not in defs or full in defined:
            return node
        definition = {k: v for k, v in defs[full].items() if k != "namespace"}
        return _inline({**definition, "name": full}, ns, defs, defined)
    if isinstance(node, list):
        return [_inline(n, ns, defs, defined) for n in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind in ("record", "error", "enum", "fixed"):
        full = _doc_full_name(node, ns)
        defined.add(full)
        inner = full.rsplit(".", 1)[0] if "." in full else ""
        if kind in ("record", "error"):
            fields = [
                {**f, "type": _inline(f["type"], inner, defs, defined)} for f in node["fields"]
            ]
            return {**node, "fields": fields}
        return node
    if kind == "array":
        return {**node, "items": _inline(node["items"], ns, defs, defined)}
    if kind == "map":
        return {**node, "values": _inline(node["values"], ns, defs, defined)}
    return {**node, "type": _inline(kind, ns, defs, defined)}


def avro_encode(
    writer: Any, obj: Any, strict: bool = False, strict_allow_default: bool = False
) -> bytes:
    """``obj`` in Avro's binary encoding of ``writer`` (a parsed schema), as
    fastavro's schemaless writer writes it.

    Raises:
        ValueError, TypeError: ``obj`` does not match the schema.
    """
    buf = io.BytesIO()
    _fastavro().schemaless_writer(
        buf, writer, obj, strict=strict, strict_allow_default=strict_allow_default
    )
    return buf.getvalue()


def avro_decode(
    payload: bytes | memoryview,
    writer: Any,
    reader: Any = None,
    return_record_name: bool = False,
) -> Any:
    """The value ``payload`` encodes with ``writer``, resolved to ``reader``
    (Avro's schema evolution) when given."""
    return _fastavro().schemaless_reader(
        io.BytesIO(payload), writer, reader, return_record_name=return_record_name
    )


def _parse(serde: Any, schema: Schema) -> Any:
    """``schema`` parsed by fastavro, with the named types of its references."""
    referenced = [s.schema_str for _, s in serde.referenced_schemas(schema)]
    return parse_avro(schema.schema_str, referenced)


def _full_name(parsed: Any) -> str | None:
    if isinstance(parsed, dict) and parsed.get("type") in ("record", "enum", "fixed", "error"):
        return str(parsed["name"])  # fastavro's parsed names are full names
    return None


class AvroSerializer(SchemaSerializer):
    """Serialize dicts (or objects, through ``to_dict``) with an Avro schema.

    Args:
        schema_registry_client: a blocking
            :class:`~trafka.sdk.schemas.SchemaRegistryClient`, or its settings.
        schema_str: the writer schema (Avro JSON), or a :class:`~.types.Schema`
            (with references); None with ``use.latest.version``.
        to_dict: ``to_dict(obj, ctx) -> dict`` for application objects.
        conf: ``auto.register.schemas``, ``normalize.schemas``,
            ``use.latest.version``, ``use.schema.id``, ``subject.name.strategy``,
            ``schema.id.framing`` (see :mod:`.serde`), and ``avro.strict``.

    A record is written as confluent-kafka's serializer writes it (fastavro's
    writer, not strict): a field the record lacks is written with its default
    (an error when it has none and its type takes no null), a field the schema
    lacks is dropped. ``avro.strict`` (False) refuses both instead.
    """

    def __init__(
        self,
        schema_registry_client: Any,
        schema_str: str | Schema | None = None,
        to_dict: Callable[[Any, Any], Any] | None = None,
        conf: Mapping[str, Any] | None = None,
    ) -> None:
        _fastavro()
        super().__init__(schema_registry_client, conf, {"avro.strict": False})
        self.strict = _bool(self.conf, "avro.strict", False)
        if schema_str is None and not (self.use_latest or self.use_schema_id is not None):
            raise ConfigError("AvroSerializer needs schema_str without use.latest.version")
        self.schema = Schema(schema_str) if isinstance(schema_str, str) else schema_str
        self._own = None if self.schema is None else _parse(self, self.schema)
        self.to_dict = to_dict

    def _schema(self, obj: Any) -> Schema:
        assert self.schema is not None
        return self.schema

    def _record_name(self, obj: Any) -> str | None:
        return _full_name(self._own)

    def _writer(self, registered: RegisteredSchema) -> Any:
        if self.schema is not None and registered.schema == self.schema:
            return self._own
        return _parse(self, registered.schema)

    def _encode(self, obj: Any, writer: Any, ctx: Any) -> tuple[bytes, None]:
        if self.to_dict is not None:
            obj = self.to_dict(obj, ctx)
        return avro_encode(writer, obj, self.strict), None


class AvroDeserializer(SchemaDeserializer):
    """Deserialize Avro records written with any registered schema.

    Args:
        schema_registry_client: a blocking
            :class:`~trafka.sdk.schemas.SchemaRegistryClient`, or its settings.
        schema_str: a reader schema (records are resolved to it, Avro's schema
            evolution); None: read as written.
        from_dict: ``from_dict(dict, ctx) -> obj`` for application objects.
        return_record_name: unions of records come back as ``(name, dict)``.
    """

    def __init__(
        self,
        schema_registry_client: Any,
        schema_str: str | Schema | None = None,
        from_dict: Callable[[Any, Any], Any] | None = None,
        return_record_name: bool = False,
        conf: Mapping[str, Any] | None = None,
    ) -> None:
        _fastavro()
        super().__init__(schema_registry_client, conf)
        schema = Schema(schema_str) if isinstance(schema_str, str) else schema_str
        self._reader_schema = None if schema is None else _parse(self, schema)
        self.from_dict = from_dict
        self.return_record_name = return_record_name

    def _reader(self, schema: Schema) -> Any:
        return _parse(self, schema)

    def _decode(self, payload: memoryview, reader: Any, ref: SchemaRef, ctx: Any) -> Any:
        obj = avro_decode(payload, reader, self._reader_schema, self.return_record_name)
        if self.from_dict is not None:
            obj = self.from_dict(obj, ctx)
        return obj
