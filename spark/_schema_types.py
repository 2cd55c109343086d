"""Registered schemas as Spark types, and decoded records as rows of them.

Rules:

* Avro maps as Spark's ``from_avro`` maps it (Spark's ``SchemaConverters``):
  boolean, int, long, float, double, bytes, string to their Spark types;
  ``date`` to DateType, ``timestamp-millis``/``-micros`` to TimestampType,
  ``local-timestamp-*`` to TimestampNTZType, ``decimal`` to DecimalType; enums
  to strings, fixed to binary, records to structs, arrays and maps (string
  keys). A union with ``null`` is its other branch, nullable; ``[int, long]`` is
  long and ``[float, double]`` double; any other union a struct of
  ``member0``, ``member1``... of which the written branch is set. A field is
  nullable only when its type admits null. A recursive type is refused.
* Protobuf as ``from_protobuf`` maps it with ``upcast.unsigned.ints``
  (``uint32`` to long, ``uint64`` to decimal(20, 0): no value read wraps
  round), enums to their names, ``google.protobuf.Timestamp`` to TimestampType,
  messages to structs, repeated fields to arrays, maps to maps. Every field is
  nullable: a field with presence (a message, ``optional``, a ``oneof``
  member) is null when unset; a proto3 scalar without presence reads as its
  value, default included.
* JSON Schema: an ``object`` with ``properties`` is a struct, ``integer`` long,
  ``number`` double, ``boolean``, ``string``, an ``array`` of its ``items``;
  ``["T", "null"]`` is T; local ``$ref`` s are followed. Anything else (no
  type, several, an object without properties) is a string holding the value
  as JSON text. Every field is nullable (JSON Schema fields are optional
  unless ``required``; an absent one reads as null).
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from ..sdk.errors import ConfigError

__all__ = ["avro_type", "from_avro_value", "json_type", "from_json_value", "proto_type"]

_AVRO_PRIMITIVES: dict[str, DataType] = {
    "null": NullType(),
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}
_AVRO_LOGICAL: dict[str, DataType] = {
    "date": DateType(),
    "timestamp-millis": TimestampType(),
    "timestamp-micros": TimestampType(),
    "local-timestamp-millis": TimestampNTZType(),
    "local-timestamp-micros": TimestampNTZType(),
}


def avro_type(
    schema: Any, named: Mapping[str, Any], seen: tuple[str, ...] = ()
) -> tuple[DataType, bool]:
    """The Spark type of a parsed Avro schema and whether it admits null.

    ``named``: the full names of the named types (fastavro's ``named_schemas``).

    Raises:
        ConfigError: a recursive type, which a Spark type cannot hold.
    """
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema], schema == "null"
        if schema in seen:
            raise ConfigError(f"Avro type {schema} is recursive: a Spark schema cannot hold it")
        return avro_type(named[schema], named, (*seen, schema))
    if isinstance(schema, list):
        return _avro_union(schema, named, seen)
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return DecimalType(int(schema["precision"]), int(schema.get("scale", 0))), False
    if logical in _AVRO_LOGICAL:
        return _AVRO_LOGICAL[logical], False
    if kind == "record":
        name = schema.get("name", "")
        if name in seen:
            raise ConfigError(f"Avro type {name} is recursive: a Spark schema cannot hold it")
        fields = []
        for f in schema["fields"]:
            t, nullable = avro_type(f["type"], named, (*seen, name))
            fields.append(StructField(f["name"], t, nullable))
        return StructType(fields), False
    if kind == "enum":
        return StringType(), False
    if kind == "fixed":
        return BinaryType(), False
    if kind == "array":
        t, nullable = avro_type(schema["items"], named, seen)
        return ArrayType(t, nullable), False
    if kind == "map":
        t, nullable = avro_type(schema["values"], named, seen)
        return MapType(StringType(), t, nullable), False
    return avro_type(kind, named, seen)


def _avro_union(
    branches: list[Any], named: Mapping[str, Any], seen: tuple[str, ...]
) -> tuple[DataType, bool]:
    nullable = "null" in branches
    rest = [b for b in branches if b != "null"]
    if not rest:
        return NullType(), True
    if len(rest) == 1:
        return avro_type(rest[0], named, seen)[0], nullable
    if set(map(str, rest)) == {"int", "long"}:
        return LongType(), nullable
    if set(map(str, rest)) == {"float", "double"}:
        return DoubleType(), nullable
    members = [
        StructField(f"member{i}", avro_type(b, named, seen)[0], True) for i, b in enumerate(rest)
    ]
    return StructType(members), nullable


def _branch(branches: list[Any], named: Mapping[str, Any], value: Any) -> int:
    """The index (among the non-null branches) a decoded value was written as."""
    for i, b in enumerate(branches):
        s = named.get(b, b) if isinstance(b, str) else b
        kind = s["type"] if isinstance(s, dict) else s
        if isinstance(value, bool):
            ok = kind == "boolean"
        elif isinstance(value, int):
            ok = kind in ("int", "long")
        elif isinstance(value, float):
            ok = kind in ("float", "double")
        elif isinstance(value, str):
            ok = kind in ("string", "enum")
        elif isinstance(value, bytes):
            ok = kind in ("bytes", "fixed")
        elif isinstance(value, list):
            ok = kind == "array"
        elif isinstance(value, dict):
            ok = kind == "map" or (
                kind == "record" and {f["name"] for f in s["fields"]} == set(value)
            )
        else:  # a logical type's value: date, datetime, Decimal, UUID
            ok = isinstance(s, dict) and "logicalType" in s
        if ok:
            return i
    raise ValueError(f"no branch of union {branches} holds {value!r}")


def from_avro_value(schema: Any, named: Mapping[str, Any], value: Any) -> Any:
    """A value fastavro decoded, as the row value of :func:`avro_type`'s type."""
    if value is None:
        return None
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return value
        return from_avro_value(named[schema], named, value)
    if isinstance(schema, list):
        rest = [b for b in schema if b != "null"]
        if len(rest) == 1:
            return from_avro_value(rest[0], named, value)
        if set(map(str, rest)) in ({"int", "long"}, {"float", "double"}):
            return value
        chosen = _branch(rest, named, value)
        return {
            f"member{i}": from_avro_value(b, named, value) if i == chosen else None
            for i, b in enumerate(rest)
        }
    kind = schema["type"]
    if kind == "record":
        return {
            f["name"]: from_avro_value(f["type"], named, value.get(f["name"]))
            for f in schema["fields"]
        }
    if kind == "array":
        return [from_avro_value(schema["items"], named, v) for v in value]
    if kind == "map":
        return [(k, from_avro_value(schema["values"], named, v)) for k, v in value.items()]
    if schema.get("logicalType") == "uuid":
        return str(value)
    return value


def to_avro_value(schema: Any, named: Mapping[str, Any], value: Any) -> Any:
    """A row value of :func:`avro_type`'s type as fastavro writes it."""
    if value is None:
        return None
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return value
        return to_avro_value(named[schema], named, value)
    if isinstance(schema, list):
        rest = [b for b in schema if b != "null"]
        if len(rest) == 1 or set(map(str, rest)) in ({"int", "long"}, {"float", "double"}):
            return to_avro_value(rest[0], named, value)
        for i, b in enumerate(rest):
            if value.get(f"member{i}") is not None:
                return to_avro_value(b, named, value[f"member{i}"])
        return None
    kind = schema["type"]
    if kind == "record":
        return {
            f["name"]: to_avro_value(f["type"], named, value.get(f["name"]))
            for f in schema["fields"]
        }
    if kind == "array":
        return [to_avro_value(schema["items"], named, v) for v in value]
    if kind == "map":
        pairs = value.items() if isinstance(value, dict) else value
        return {k: to_avro_value(schema["values"], named, v) for k, v in pairs}
    return value


# Protobuf: FieldDescriptor.CPPTYPE_* and TYPE_* numbers.
_PROTO_TYPES: dict[int, DataType] = {
    5: IntegerType(),  # int32
    17: IntegerType(),  # sint32
    15: IntegerType(),  # sfixed32
    7: LongType(),  # fixed32 (unsigned)
    13: LongType(),  # uint32
    3: LongType(),  # int64
    18: LongType(),  # sint64
    16: LongType(),  # sfixed64
    4: DecimalType(20, 0),  # uint64
    6: DecimalType(20, 0),  # fixed64
    1: DoubleType(),
    2: FloatType(),
    8: BooleanType(),
    9: StringType(),
    12: BinaryType(),
    14: StringType(),  # enum
}
_TIMESTAMP = "google.protobuf.Timestamp"


def _repeated(field: Any) -> bool:
    # (protobuf 6 has is_repeated; label is deprecated there, gone in upb's)
    repeated = getattr(field, "is_repeated", None)
    return bool(field.label == field.LABEL_REPEATED if repeated is None else repeated)


def _is_map(field: Any) -> bool:
    return bool(field.message_type is not None and field.message_type.GetOptions().map_entry)


def proto_type(descriptor: Any, seen: tuple[str, ...] = ()) -> StructType:
    """The Spark struct of a Protobuf message descriptor.

    Raises:
        ConfigError: a recursive message.
    """
    if descriptor.full_name in seen:
        raise ConfigError(
            f"Protobuf message {descriptor.full_name} is recursive: a Spark schema cannot hold it"
        )
    seen = (*seen, descriptor.full_name)
    fields = []
    for f in descriptor.fields:
        if _is_map(f):
            key, value = (
                f.message_type.fields_by_name["key"],
                f.message_type.fields_by_name["value"],
            )
            t: DataType = MapType(_proto_field(key, seen), _proto_field(value, seen), True)
        else:
            t = _proto_field(f, seen)
            if _repeated(f):
                t = ArrayType(t, False)
        fields.append(StructField(f.name, t, True))
    return StructType(fields)


def _proto_field(field: Any, seen: tuple[str, ...]) -> DataType:
    if field.type in (field.TYPE_MESSAGE, field.TYPE_GROUP):
        if field.message_type.full_name == _TIMESTAMP:
            return TimestampType()
        return proto_type(field.message_type, seen)
    return _PROTO_TYPES[field.type]


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def from_proto_message(msg: Any) -> dict[str, Any]:
    """A Protobuf message as the row of :func:`proto_type`'s struct."""
    out: dict[str, Any] = {}
    for f in msg.DESCRIPTOR.fields:
        value = getattr(msg, f.name)
        if _is_map(f):
            value_field = f.message_type.fields_by_name["value"]
            out[f.name] = [(k, _proto_value(value_field, v)) for k, v in value.items()]
        elif _repeated(f):
            out[f.name] = [_proto_value(f, v) for v in value]
        elif f.has_presence and not msg.HasField(f.name):
            out[f.name] = None
        else:
            out[f.name] = _proto_value(f, value)
    return out


def _proto_value(field: Any, value: Any) -> Any:
    if field.type == field.TYPE_ENUM:
        named = field.enum_type.values_by_number.get(value)
        return named.name if named is not None else str(value)
    if field.type in (field.TYPE_UINT64, field.TYPE_FIXED64):
        return decimal.Decimal(value)
    if field.type in (field.TYPE_MESSAGE, field.TYPE_GROUP):
        if field.message_type.full_name == _TIMESTAMP:
            return _EPOCH + datetime.timedelta(
                seconds=value.seconds, microseconds=value.nanos // 1000
            )
        return from_proto_message(value)
    return value


def to_proto_message(msg: Any, row: Mapping[str, Any]) -> Any:
    """Fill ``msg`` from a row of :func:`proto_type`'s struct; returns it."""
    for f in msg.DESCRIPTOR.fields:
        value = row.get(f.name)
        if value is None:
            continue
        if _is_map(f):
            target = getattr(msg, f.name)
            value_field = f.message_type.fields_by_name["value"]
            for k, v in value.items() if isinstance(value, dict) else value:
                if value_field.type == value_field.TYPE_MESSAGE:
                    _set_message(target[k], value_field, v)
                else:
                    target[k] = _to_proto_scalar(value_field, v)
        elif _repeated(f):
            target = getattr(msg, f.name)
            for v in value:
                if f.type == f.TYPE_MESSAGE:
                    _set_message(target.add(), f, v)
                else:
                    target.append(_to_proto_scalar(f, v))
        elif f.type == f.TYPE_MESSAGE:
            _set_message(getattr(msg, f.name), f, value)
        else:
            setattr(msg, f.name, _to_proto_scalar(f, value))
    return msg


def _set_message(target: Any, field: Any, value: Any) -> None:
    if field.message_type.full_name == _TIMESTAMP:
        delta = value - _EPOCH
        target.seconds = delta.days * 86400 + delta.seconds
        target.nanos = delta.microseconds * 1000
    else:
        to_proto_message(target, value)


def _to_proto_scalar(field: Any, value: Any) -> Any:
    if field.type == field.TYPE_ENUM:
        return field.enum_type.values_by_name[value].number
    if isinstance(value, decimal.Decimal):
        return int(value)
    return value


_JSON_TYPES: dict[str, DataType] = {
    "integer": LongType(),
    "number": DoubleType(),
    "boolean": BooleanType(),
    "string": StringType(),
}


def json_type(schema: Any, root: Any = None, seen: tuple[str, ...] = ()) -> DataType:
    """The Spark type of a JSON Schema (see the module doc)."""
    root = schema if root is None else root
    if not isinstance(schema, dict):
        return StringType()
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        if ref in seen:
            raise ConfigError(f"JSON Schema {ref} is recursive: a Spark schema cannot hold it")
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        return json_type(target, root, (*seen, ref))
    kind = schema.get("type")
    if isinstance(kind, list):
        rest = [k for k in kind if k != "null"]
        kind = rest[0] if len(rest) == 1 else None
    if kind == "object" and isinstance(schema.get("properties"), dict):
        return StructType(
            [
                StructField(n, json_type(s, root, seen), True)
                for n, s in schema["properties"].items()
            ]
        )
    if kind == "array":
        return ArrayType(json_type(schema.get("items"), root, seen), True)
    return _JSON_TYPES.get(kind, StringType()) if isinstance(kind, str) else StringType()


def from_json_value(kind: DataType, value: Any) -> Any:
    """A decoded JSON value as a row value of ``kind`` (from :func:`json_type`)."""
    if value is None:
        return None
    if isinstance(kind, StructType):
        return {f.name: from_json_value(f.dataType, value.get(f.name)) for f in kind.fields}
    if isinstance(kind, ArrayType):
        return [from_json_value(kind.elementType, v) for v in value]
    if isinstance(kind, StringType) and not isinstance(value, str):
        return json.dumps(value)
    if isinstance(kind, DoubleType) and isinstance(value, int):
        return float(value)
    return value


def to_json_value(kind: DataType, value: Any) -> Any:
    """A row value of ``kind`` as the JSON value it stands for (the reverse of
    :func:`from_json_value`; a string that stood for JSON text stays a string)."""
    if value is None:
        return None
    if isinstance(kind, StructType):
        return {
            f.name: to_json_value(f.dataType, value.get(f.name))
            for f in kind.fields
            if value.get(f.name) is not None
        }
    if isinstance(kind, ArrayType):
        return [to_json_value(kind.elementType, v) for v in value]
    return value


Converter = Callable[[Any], Any]
