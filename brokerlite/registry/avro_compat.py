"""Avro compatibility: can a reader schema read what a writer schema wrote?

The rules are Avro's schema resolution (the Avro specification, "Schema
Resolution"), as Confluent's registry applies them:

* a union written is readable when every branch of it is; a union reading a
  non-union takes the first branch that can read it;
* primitives match by type, with the promotions int -> long, float, double;
  long -> float, double; float -> double; string <-> bytes;
* records, enums and fixed match by full name, or a reader alias naming the
  writer's type;
* a reader field is found in the writer by name or by one of the reader field's
  aliases; one not found needs a default; writer fields the reader lacks are
  skipped;
* every enum symbol the writer has must be a reader symbol, unless the reader
  enum has a default; fixed sizes must be equal; arrays by items, maps by values.

Named types are resolved through the names each schema defines (and those of its
references); a pair of named types already being compared is taken as readable
(recursive types).
"""

from __future__ import annotations

from typing import Any

__all__ = ["avro_incompatibilities", "named_types"]

_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def named_types(
    schema: Any, namespace: str = "", into: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The named types (record, enum, fixed) ``schema`` defines, by full name."""
    names = {} if into is None else into
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, namespace, names)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            full = _full_name(schema["name"], schema.get("namespace", namespace))
            names[full] = schema
            namespace = full.rpartition(".")[0]
            for field in schema.get("fields", ()) if kind != "enum" else ():
                named_types(field.get("type"), namespace, names)
        elif kind == "array":
            named_types(schema.get("items"), namespace, names)
        elif kind == "map":
            named_types(schema.get("values"), namespace, names)
        elif isinstance(kind, (dict, list)):
            named_types(kind, namespace, names)
    return names


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


class _Side:
    """One schema's named types, to resolve references by name."""

    def __init__(self, names: dict[str, Any]) -> None:
        self.names = names

    def resolve(self, schema: Any, namespace: str) -> tuple[Any, str]:
        """The schema itself (a name looked up) and the namespace inside it."""
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            full = schema if schema in self.names else _full_name(schema, namespace)
            schema = self.names.get(full, self.names.get(schema, schema))
        if isinstance(schema, dict):
            kind = schema.get("type")
            if isinstance(kind, (dict, list)) or (
                isinstance(kind, str) and kind not in _PRIMITIVES and kind not in _COMPLEX
            ):
                return self.resolve(kind, namespace)
            if kind in ("record", "error", "enum", "fixed"):
                namespace = _full_name(schema["name"], schema.get("namespace", namespace))
                namespace = namespace.rpartition(".")[0]
        return schema, namespace


_COMPLEX = {"record", "error", "enum", "fixed", "array", "map"}


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return str(schema.get("type"))
    return str(schema)


def _name(schema: dict[str, Any], namespace: str) -> str:
    return _full_name(schema["name"], schema.get("namespace", namespace))


def avro_incompatibilities(
    reader: Any, writer: Any, reader_names: dict[str, Any], writer_names: dict[str, Any]
) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (empty: it can)."""
    problems: list[str] = []
    _check(_Side(reader_names), _Side(writer_names), reader, writer, ("", ""), "", problems, set())
    return problems


def _check(
    rs: _Side,
    ws: _Side,
    reader: Any,
    writer: Any,
    spaces: tuple[str, str],
    path: str,
    problems: list[str],
    seen: set[tuple[str, str]],
) -> None:
    reader, r_space = rs.resolve(reader, spaces[0])
    writer, w_space = ws.resolve(writer, spaces[1])
    r_kind, w_kind = _kind(reader), _kind(writer)
    where = path or "/"
    if w_kind == "union":
        for index, branch in enumerate(writer):
            _check(rs, ws, reader, branch, (r_space, w_space), f"{path}/{index}", problems, seen)
        return
    if r_kind == "union":
        for branch in reader:
            found: list[str] = []
            _check(rs, ws, branch, writer, (r_space, w_space), path, found, set(seen))
            if not found:
                return
        problems.append(
            f"TYPE_MISMATCH at {where}: the reader's union has no branch for the writer's {w_kind}"
        )
        return
    if r_kind != w_kind:
        if r_kind in _PROMOTIONS.get(w_kind, ()):
            return
        problems.append(f"TYPE_MISMATCH at {where}: reader {r_kind}, writer {w_kind}")
        return
    if r_kind in ("record", "error", "enum", "fixed"):
        r_name, w_name = _name(reader, r_space), _name(writer, w_space)
        aliases = {_full_name(a, r_name.rpartition(".")[0]) for a in reader.get("aliases", ())}
        if r_name != w_name and w_name not in aliases:
            problems.append(f"NAME_MISMATCH at {where}: reader {r_name}, writer {w_name}")
            return
        if (r_name, w_name) in seen:
            return
        seen.add((r_name, w_name))
        r_space, w_space = r_name.rpartition(".")[0], w_name.rpartition(".")[0]
    if r_kind in ("record", "error"):
        _check_fields(rs, ws, reader, writer, (r_space, w_space), path, problems, seen)
    elif r_kind == "enum":
        missing = [s for s in writer.get("symbols", ()) if s not in reader.get("symbols", ())]
        if missing and "default" not in reader:
            problems.append(f"MISSING_ENUM_SYMBOLS at {where}: {', '.join(missing)}")
    elif r_kind == "fixed":
        if reader.get("size") != writer.get("size"):
            problems.append(
                f"FIXED_SIZE_MISMATCH at {where}: reader {reader.get('size')}, "
                f"writer {writer.get('size')}"
            )
    elif r_kind == "array":
        _check(
            rs,
            ws,
            reader["items"],
            writer["items"],
            (r_space, w_space),
            f"{path}/items",
            problems,
            seen,
        )
    elif r_kind == "map":
        _check(
            rs,
            ws,
            reader["values"],
            writer["values"],
            (r_space, w_space),
            f"{path}/values",
            problems,
            seen,
        )


def _check_fields(
    rs: _Side,
    ws: _Side,
    reader: dict[str, Any],
    writer: dict[str, Any],
    spaces: tuple[str, str],
    path: str,
    problems: list[str],
    seen: set[tuple[str, str]],
) -> None:
    written = {field["name"]: field for field in writer.get("fields", ())}
    for index, field in enumerate(reader.get("fields", ())):
        match = written.get(field["name"])
        for alias in field.get("aliases", ()):
            match = match or written.get(alias)
        if match is None:
            if "default" not in field:
                problems.append(
                    f"READER_FIELD_MISSING_DEFAULT_VALUE at {path}/fields/{index}: "
                    f"field {field['name']!r} is not in the writer's schema and has no default"
                )
            continue
        _check(
            rs, ws, field["type"], match["type"], spaces, f"{path}/fields/{index}", problems, seen
        )
