"""JSON Schema compatibility: does a reader schema accept every document a writer
schema accepts?

The rules are those Confluent's registry documents for JSON Schema (its
"difference types"), stated here from the reader's side (for BACKWARD the
reader is the new schema, for FORWARD the old one):

* types: the reader must allow every type the writer allows (``integer`` is
  within ``number``); a narrowed or changed type is incompatible, a widened one
  is not;
* objects: a property the reader requires that the writer did not is
  incompatible; a property added in the reader is compatible when the writer's
  content model was closed (``additionalProperties: false``), incompatible when
  it was open (old documents may carry that name with any value), and checked
  against the writer's ``additionalProperties`` schema when that is a schema; a
  property removed in the reader is compatible when the reader's model is open,
  incompatible when closed; closing an open model is incompatible;
* ranges and sizes: a reader bound (``maximum``, ``maxLength``, ``maxItems``,
  ``maxProperties`` and the minimums) added, or tightened, is incompatible; a
  ``pattern`` added or changed is incompatible; an ``enum`` (or ``const``)
  added or narrowed is incompatible, one extended is compatible;
* arrays by ``items``; ``anyOf`` / ``oneOf``: each writer branch must be accepted by
  some reader branch; ``allOf``: every reader branch must accept the writer;
  ``$ref`` targets are compared by reference, not followed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["json_incompatibilities"]

_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_ANY = {"null", "boolean", "object", "array", "number", "string", "integer"}


def json_incompatibilities(reader: Any, writer: Any) -> list[str]:
    """Why ``reader`` does not accept every document ``writer`` accepts (empty: it does)."""
    problems: list[str] = []
    _check(reader, writer, "#", problems)
    return problems


def _types(schema: dict[str, Any]) -> set[str]:
    kind = schema.get("type")
    if kind is None:
        return set(_ANY)
    return {kind} if isinstance(kind, str) else set(kind)


def _check(reader: Any, writer: Any, path: str, problems: list[str]) -> None:
    if writer is False or reader is True or reader == {}:
        return
    if reader is False:
        problems.append(f"FALSE_SCHEMA at {path}: the reader accepts nothing")
        return
    if writer is True:
        writer = {}
    if not isinstance(reader, dict) or not isinstance(writer, dict):
        return
    if "$ref" in reader or "$ref" in writer:
        if reader.get("$ref") != writer.get("$ref"):
            problems.append(f"REFERENCE_CHANGED at {path}")
        return
    r_types, w_types = _types(reader), _types(writer)
    narrowed = {
        t for t in w_types if t not in r_types and not (t == "integer" and "number" in r_types)
    }
    if narrowed:
        problems.append(f"TYPE_NARROWED at {path}: the reader no longer allows {sorted(narrowed)}")
    _check_values(reader, writer, path, problems)
    if "object" in r_types & w_types or ("properties" in reader and "properties" in writer):
        _check_object(reader, writer, path, problems)
    if "array" in r_types & w_types and isinstance(reader.get("items"), (dict, bool)):
        items = writer.get("items", True)
        if isinstance(items, (dict, bool)):
            _check(reader["items"], items, f"{path}/items", problems)
    _check_combined(reader, writer, path, problems)


def _check_values(
    reader: dict[str, Any], writer: dict[str, Any], path: str, problems: list[str]
) -> None:
    """Enums, consts, bounds and patterns."""
    for key in ("enum", "const"):
        if key not in reader:
            continue
        allowed = reader[key] if key == "enum" else [reader[key]]
        written = writer.get("enum", [writer["const"]] if "const" in writer else None)
        if written is None:
            problems.append(f"{key.upper()}_ADDED at {path}")
        elif any(value not in allowed for value in written):
            problems.append(f"{key.upper()}_NARROWED at {path}")
    for key in _UPPER:
        if key in reader and (key not in writer or writer[key] > reader[key]):
            problems.append(f"{key.upper()}_ADDED_OR_DECREASED at {path}")
    for key in _LOWER:
        if key in reader and (key not in writer or writer[key] < reader[key]):
            problems.append(f"{key.upper()}_ADDED_OR_INCREASED at {path}")
    if "pattern" in reader and reader["pattern"] != writer.get("pattern"):
        problems.append(f"PATTERN_ADDED_OR_CHANGED at {path}")
    if reader.get("uniqueItems") and not writer.get("uniqueItems"):
        problems.append(f"UNIQUE_ITEMS_ADDED at {path}")
    if "multipleOf" in reader:
        written_step = writer.get("multipleOf")
        if written_step is None or written_step % reader["multipleOf"] != 0:
            problems.append(f"MULTIPLE_OF_ADDED_OR_CHANGED at {path}")


def _check_object(
    reader: dict[str, Any], writer: dict[str, Any], path: str, problems: list[str]
) -> None:
    r_props: dict[str, Any] = reader.get("properties", {})
    w_props: dict[str, Any] = writer.get("properties", {})
    r_extra = reader.get("additionalProperties", True)
    w_extra = writer.get("additionalProperties", True)
    added_required = set(reader.get("required", ())) - set(writer.get("required", ()))
    for name in sorted(added_required):
        problems.append(f"REQUIRED_PROPERTY_ADDED at {path}/properties/{name}")
    for name, schema in r_props.items():
        where = f"{path}/properties/{name}"
        if name in w_props:
            _check(schema, w_props[name], where, problems)
        elif w_extra is True and schema not in (True, {}):
            problems.append(f"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at {where}")
        elif isinstance(w_extra, dict):
            _check(schema, w_extra, where, problems)
    for name, schema in w_props.items():
        if name in r_props:
            continue
        where = f"{path}/properties/{name}"
        if r_extra is False:
            problems.append(f"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at {where}")
        elif isinstance(r_extra, dict):
            _check(r_extra, schema, where, problems)
    if r_extra is not True and w_extra is not False:
        if r_extra is False:
            problems.append(f"ADDITIONAL_PROPERTIES_REMOVED at {path}")
        else:
            _check(r_extra, w_extra, f"{path}/additionalProperties", problems)


def _check_combined(
    reader: dict[str, Any], writer: dict[str, Any], path: str, problems: list[str]
) -> None:
    for key in ("anyOf", "oneOf"):
        if key not in reader:
            continue
        branches = writer.get("anyOf") or writer.get("oneOf") or [writer]
        for index, branch in enumerate(branches):
            accepted = False
            for option in reader[key]:
                found: list[str] = []
                _check(option, branch, path, found)
                accepted = accepted or not found
            if not accepted:
                problems.append(f"COMBINED_TYPE_SUBSCHEMAS_CHANGED at {path}/{key}/{index}")
    for index, option in enumerate(reader.get("allOf", ())):
        found = []
        _check(option, writer, path, found)
        if found:
            problems.append(f"COMBINED_TYPE_SUBSCHEMAS_CHANGED at {path}/allOf/{index}")
