"""The three schema types: parsing, the stored text, identity and compatibility.

* AVRO is parsed by fastavro (``parse_schema``, with the named types of the
  schema's references), stored as compact JSON;
* JSON is checked against its draft's metaschema by jsonschema, stored as
  compact JSON;
* PROTOBUF is parsed by :mod:`.proto`, stored as written.

Two schemas are the same schema (the same id) when their type, references and
*identity* agree: the compact JSON for AVRO and JSON (whitespace does not
count; for AVRO neither does ``{"type": "int"}`` against ``"int"``), the token
sequence for PROTOBUF (whitespace and comments do not count). ``normalize`` also sorts JSON object keys (AVRO, JSON), so that schemas
differing only in key order are the same.

fastavro, jsonschema and protobuf are the ``schemas`` extra: :func:`missing` says what is
absent, for a clear error before the registry starts.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from .avro_compat import avro_incompatibilities, named_types
from .json_compat import json_incompatibilities
from .proto import ProtoError, parse_proto, proto_incompatibilities

__all__ = ["SCHEMA_TYPES", "InvalidSchema", "Parsed", "incompatibilities", "missing", "parse"]

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


class InvalidSchema(ValueError):
    """A schema its type's parser refuses (the registry's 42201)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Parsed:
    """A parsed schema: ``text`` to store and serve, ``identity`` to compare,
    ``tree`` for the compatibility checks (and ``names``: Avro's named types)."""

    schema_type: str
    text: str
    identity: str
    tree: Any
    names: dict[str, Any]


def missing() -> str | None:
    """Why the registry cannot run here (an extra not installed), or None."""
    try:
        import fastavro  # noqa: F401
        import google.protobuf  # noqa: F401
        import jsonschema  # noqa: F401
    except ImportError as exc:
        return (
            f"the schema registry needs {exc.name}: pip install 'trafka[schemas]' "
            "(fastavro, jsonschema, protobuf)"
        )
    return None


def _compact(tree: Any, normalize: bool) -> str:
    return json.dumps(tree, separators=(",", ":"), sort_keys=normalize, ensure_ascii=False)


def parse(
    schema_type: str, text: str, references: Sequence[str] = (), *, normalize: bool = False
) -> Parsed:
    """Parse ``text`` as a schema of ``schema_type`` (``references``: the texts of
    the schemas it references, already registered).

    Raises:
        InvalidSchema: the text is not a valid schema of that type.
    """
    if not isinstance(text, str):
        raise InvalidSchema("the schema is not a string")
    if schema_type == "PROTOBUF":
        try:
            tree = parse_proto(text)
        except ProtoError as exc:
            raise InvalidSchema(f"Invalid schema: {exc}") from None
        from ...sdk.schemas.proto_text import ProtoSyntaxError, proto_tokens

        try:
            identity = " ".join(proto_tokens(text))
        except ProtoSyntaxError:  # a base64 descriptor is its own identity
            identity = text.strip()
        return Parsed(schema_type, text, identity, tree, {})
    try:
        tree = json.loads(text)
    except ValueError as exc:
        raise InvalidSchema(f"Invalid schema: not JSON: {exc}") from None
    if schema_type == "AVRO":
        names = _avro_names(tree, references)
        identity = _compact(_avro_identity(tree), normalize)
    else:
        _check_json_schema(tree)
        names = {}
        identity = _compact(tree, normalize)
    return Parsed(schema_type, _compact(tree, normalize), identity, tree, names)


def _avro_identity(tree: Any) -> Any:
    """The schema with ``{"type": "int"}`` written ``"int"`` (as Avro's own
    canonical form writes a primitive), so that the two spellings are one schema."""
    if isinstance(tree, list):
        return [_avro_identity(branch) for branch in tree]
    if isinstance(tree, dict):
        if set(tree) == {"type"} and isinstance(tree["type"], str):
            return tree["type"]
        return {key: _avro_identity(value) for key, value in tree.items()}
    return tree


def _avro_names(tree: Any, references: Sequence[str]) -> dict[str, Any]:
    import fastavro
    from fastavro.schema import SchemaParseException, UnknownType

    named: dict[str, Any] = {}
    names: dict[str, Any] = {}
    try:
        for reference in references:
            ref_tree = json.loads(reference)
            fastavro.parse_schema(ref_tree, named_schemas=named)
            named_types(ref_tree, into=names)
        fastavro.parse_schema(tree, named_schemas=named)
    except (SchemaParseException, UnknownType, ValueError, TypeError, KeyError) as exc:
        raise InvalidSchema(f"Invalid schema: {type(exc).__name__}: {exc}") from None
    return named_types(tree, into=names)


def _check_json_schema(tree: Any) -> None:
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    if not isinstance(tree, (dict, bool)):
        raise InvalidSchema("Invalid schema: a JSON Schema is an object or a boolean")
    try:
        validator_for(tree).check_schema(tree)
    except SchemaError as exc:
        raise InvalidSchema(f"Invalid schema: {exc.message}") from None


def incompatibilities(reader: Parsed, writer: Parsed) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
    if reader.schema_type != writer.schema_type:
        return [f"TYPE_CHANGED: {writer.schema_type} to {reader.schema_type}"]
    if reader.schema_type == "AVRO":
        return avro_incompatibilities(reader.tree, writer.tree, reader.names, writer.names)
    if reader.schema_type == "JSON":
        return json_incompatibilities(reader.tree, writer.tree)
    return proto_incompatibilities(reader.tree, writer.tree)
