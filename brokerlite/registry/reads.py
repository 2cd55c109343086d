"""The registry's read-only answers, from a caught-up :class:`~.store.RegistryState`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .errors import ApiError, bad_version, flag
from .store import RegistryState

__all__ = [
    "RawBody",
    "effective_level",
    "effective_mode",
    "schema_by_id",
    "setting",
    "subjects",
    "version",
    "version_body",
    "version_number",
    "versions",
]

DEFAULT_LEVEL = "BACKWARD"
DEFAULT_MODE = "READWRITE"


class RawBody(str):
    """A schema served as itself (``/schema`` endpoints), not as a JSON value."""


def effective_level(state: RegistryState, subject: str | None) -> str:
    return state.configs.get(subject) or state.configs.get(None) or DEFAULT_LEVEL


def effective_mode(state: RegistryState, subject: str | None) -> str:
    return state.modes.get(subject) or state.modes.get(None) or DEFAULT_MODE


def _text(state: RegistryState, schema_id: int, query: Mapping[str, str]) -> str:
    """The schema's text; ``format=serialized`` gives a Protobuf schema as a
    base64 ``FileDescriptorProto`` (whatever form it was registered in)."""
    schema = state.schemas[schema_id]
    if schema.schema_type != "PROTOBUF" or query.get("format") != "serialized":
        return schema.text
    from .proto import is_descriptor, serialized

    if is_descriptor(schema.text):
        return schema.text
    imported = []
    for _, subject, number in schema.references:
        held = state.subjects.get(subject, {}).get(number)
        if held is not None and state.schemas[held.id].schema_type == "PROTOBUF":
            imported.append(state.schemas[held.id].text)
    return serialized(schema.text, f"schema-{schema_id}.proto", imported)


def _schema_fields(
    state: RegistryState, schema_id: int, query: Mapping[str, str]
) -> dict[str, Any]:
    schema = state.schemas[schema_id]
    out: dict[str, Any] = {}
    if schema.schema_type != "AVRO":
        out["schemaType"] = schema.schema_type
    if schema.references:
        out["references"] = [
            {"name": n, "subject": s, "version": v} for n, s, v in schema.references
        ]
    out["schema"] = _text(state, schema_id, query)
    return out


def _raw(state: RegistryState, schema_id: int) -> Any:
    schema = state.schemas[schema_id]
    if schema.schema_type == "PROTOBUF":
        return RawBody(schema.text)
    return json.loads(schema.text)


def schema_by_id(state: RegistryState, text: str, what: str, query: Mapping[str, str]) -> Any:
    """``GET /schemas/ids/{id}`` and its ``/schema``, ``/subjects``, ``/versions``."""
    try:
        schema_id = int(text)
    except ValueError:
        raise ApiError(404, 40403, "Schema not found") from None
    if schema_id not in state.schemas or what not in ("", "schema", "subjects", "versions"):
        raise ApiError(404, 40403 if schema_id not in state.schemas else 404, "Schema not found")
    uses = state.uses(schema_id, deleted=flag(query, "deleted"))
    if "subject" in query:
        uses = [(s, v) for s, v in uses if s == query["subject"]]
    if what == "schema":
        return _raw(state, schema_id)
    if what == "subjects":
        return sorted({s for s, _ in uses})
    if what == "versions":
        return [{"subject": s, "version": v} for s, v in uses]
    return _schema_fields(state, schema_id, query)


def subjects(state: RegistryState, query: Mapping[str, str]) -> list[str]:
    """``GET /subjects`` (``deleted``, ``subjectPrefix``)."""
    prefix = query.get("subjectPrefix", "")
    deleted = flag(query, "deleted")
    return sorted(
        s for s in state.subjects if s.startswith(prefix) and state.versions(s, deleted=deleted)
    )


def versions(state: RegistryState, subject: str, query: Mapping[str, str]) -> list[int]:
    """``GET /subjects/{s}/versions`` (``deleted``)."""
    found = list(state.versions(subject, deleted=flag(query, "deleted")))
    if not found:
        raise ApiError(404, 40401, f"Subject '{subject}' not found.")
    return found


def version_number(state: RegistryState, subject: str, text: str, *, deleted: bool) -> int:
    """The version ``text`` names (a number, ``latest`` or -1) in ``subject``.

    Raises:
        ApiError: 42202 not a version, 40401 no such subject, 40402 no such version.
    """
    if text == "latest":
        text = "-1"
    try:
        number = int(text)
    except ValueError:
        raise bad_version(text) from None
    if number == 0 or number < -1 or number > 2**31 - 1:
        raise bad_version(text)
    live = state.versions(subject, deleted=deleted)
    if not live:
        # No such subject, or (asked without ``deleted``) only soft-deleted versions.
        raise ApiError(404, 40401, f"Subject '{subject}' not found.")
    if number == -1:
        return max(live)
    if number not in live:
        raise ApiError(404, 40402, f"Version {number} not found.")
    return number


def version_body(
    state: RegistryState,
    subject: str,
    number: int,
    schema_id: int,
    query: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    return {"subject": subject, "version": number, "id": schema_id} | _schema_fields(
        state, schema_id, query or {}
    )


def version(
    state: RegistryState, subject: str, text: str, what: str, query: Mapping[str, str]
) -> Any:
    """``GET /subjects/{s}/versions/{v}`` and its ``/schema`` and ``/referencedby``."""
    number = version_number(state, subject, text, deleted=flag(query, "deleted"))
    schema_id = state.subjects[subject][number].id
    if what == "schema":
        return _raw(state, schema_id)
    if what == "referencedby":
        return state.referenced_by(subject, number)
    if what:
        raise ApiError(404, 404, "HTTP 404 Not Found")
    return version_body(state, subject, number, schema_id, query)


def setting(
    state: RegistryState, kind: str, subject: str | None, query: Mapping[str, str]
) -> dict[str, str]:
    """``GET /config[/{s}]`` and ``GET /mode[/{s}]`` (``defaultToGlobal``)."""
    table = state.configs if kind == "config" else state.modes
    field = "compatibilityLevel" if kind == "config" else "mode"
    value = table.get(subject)
    if value is None and (subject is None or flag(query, "defaultToGlobal")):
        value = effective_level(state, None) if kind == "config" else effective_mode(state, None)
    if value is None:
        if kind == "config":
            raise ApiError(
                404,
                40408,
                f"Subject '{subject}' does not have subject-level compatibility configured",
            )
        raise ApiError(
            404, 40409, f"Subject '{subject}' does not have subject-level mode configured"
        )
    return {field: value}
