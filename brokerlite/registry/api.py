"""Confluent's Schema Registry REST API over :class:`~.store.RegistryState`.

:meth:`Registry.handle` answers one request (method, path, query, body) with a
status and a JSON value; it does no HTTP. Reads catch up to the end of the
``_schemas`` topic first (:class:`Log`), so a node answers with every write any
node made before the request. Writes, one at a time per node: catch up, decide
from the state, append the records, catch up again and check they were applied;
a record refused because another node wrote the same version first is
tombstoned and the write decided again (:mod:`.store`'s rules).

Errors are the registry's: an HTTP status and ``{"error_code", "message"}``
(40401 subject not found, 40402 version not found, 40403 schema not found,
40404/40405 and 40406/40407 the soft-delete rules, 40408/40409 no subject-level
config/mode, 409 incompatible, 42201 invalid schema, 42202 invalid version,
42203 invalid compatibility level, 42204 invalid mode, 42205 operation not
permitted, 42206 references exist, 50001 store error, 50002 timeout).
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import trio

from . import deks, reads
from .errors import ApiError, flag
from .formats import SCHEMA_TYPES, InvalidSchema, Parsed, incompatibilities, parse
from .store import IDS_KEY, RegistryState, config_key, dumps, mode_key, schema_key

__all__ = ["LEVELS", "MODES", "Log", "Registry"]

LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
_WRITE_ATTEMPTS = 5

log = logging.getLogger("trafka.brokerlite.registry")


Records = list[tuple[bytes, bytes | None]]


class Log(Protocol):
    """The ``_schemas`` topic as the API uses it."""

    async def catch_up(self) -> None:
        """Apply every record up to the topic's current end to the state."""

    async def append(self, records: Records) -> list[int]:
        """Write records (in order, acknowledged by all in-sync replicas); their offsets."""
        ...


class Registry:
    """The REST API of one node's registry."""

    def __init__(self, state: RegistryState, log: Log, writer: int) -> None:
        self.state = state
        self.log = log
        self.writer = writer
        self._writing = trio.Lock()
        self._parsed: dict[int, Parsed] = {}

    async def handle(
        self, method: str, segments: list[str], query: Mapping[str, str], body: bytes
    ) -> tuple[int, Any]:
        """Answer a request: (HTTP status, JSON value).

        ``segments``: the path split at ``/`` and percent-decoded.
        """
        try:
            route = self._route(method, segments)
            await self.log.catch_up()
            answer = route(query, _json_body(body) if method in ("POST", "PUT") else None)
            return 200, (await answer) if inspect.isawaitable(answer) else answer
        except ApiError as exc:
            return exc.status, {"error_code": exc.code, "message": exc.message}

    def _route(self, method: str, seg: list[str]) -> Callable[..., Any]:
        state, n = self.state, len(seg)
        table: dict[tuple[str, ...], Callable[..., Any]] = {}
        if n == 0:
            table = {("GET",): _const({})}
        elif seg == ["contexts"]:
            table = {("GET",): _const(["."])}
        elif seg[0] == "schemas" and n == 2 and seg[1] == "types":
            table = {("GET",): _const(list(SCHEMA_TYPES))}
        elif seg[0] == "schemas" and n in (3, 4) and seg[1] == "ids":
            what = seg[3] if n == 4 else ""
            table = {("GET",): lambda q, b: reads.schema_by_id(state, seg[2], what, q)}
        elif seg[0] == "subjects" and n == 1:
            table = {("GET",): lambda q, b: reads.subjects(state, q)}
        elif seg[0] == "subjects" and n == 2:
            table = {
                ("POST",): lambda q, b: self._lookup(seg[1], q, b),
                ("DELETE",): lambda q, b: self._delete_subject(seg[1], q),
            }
        elif seg[0] == "subjects" and n == 3 and seg[2] == "versions":
            table = {
                ("GET",): lambda q, b: reads.versions(state, seg[1], q),
                ("POST",): lambda q, b: self._register(seg[1], q, b),
            }
        elif seg[0] == "subjects" and n in (4, 5) and seg[2] == "versions":
            what = seg[4] if n == 5 else ""
            table = {("GET",): lambda q, b: reads.version(state, seg[1], seg[3], what, q)}
            if n == 4:
                table[("DELETE",)] = lambda q, b: self._delete_version(seg[1], seg[3], q)
        elif seg[0] == "compatibility" and n in (3, 4, 5) and seg[1] == "subjects":
            if n >= 4 and seg[3] == "versions":
                at = seg[4] if n == 5 else None
                table = {("POST",): lambda q, b: self._test(seg[2], at, q, b)}
        elif seg[0] in ("config", "mode") and n in (1, 2):
            table = self._settings_routes(seg[0], seg[1] if n == 2 else None)
        elif seg[:2] == ["dek-registry", "v1"]:
            table = deks.routes(state.keys, self._write, self.writer, seg[2:])
        route = table.get(("GET",) if method == "HEAD" else (method,))
        if route is None:
            if table:
                raise ApiError(405, 405, f"HTTP {method} is not allowed here")
            raise ApiError(404, 404, "HTTP 404 Not Found")
        return route

    def _settings_routes(self, kind: str, subject: str | None) -> dict[tuple[str, ...], Any]:
        state = self.state
        return {
            ("GET",): lambda q, b: reads.setting(state, kind, subject, q),
            ("PUT",): lambda q, b: self._put_setting(kind, subject, q, b),
            ("DELETE",): lambda q, b: self._delete_setting(kind, subject),
        }

    # Writes.

    async def _write(self, decide: Callable[[], tuple[Records, Any]]) -> Any:
        """Under this node's write lock: catch up, decide records from the state,
        append them, and check the SCHEMA records among them were applied (else
        tombstone ours and decide again)."""
        async with self._writing:
            for _ in range(_WRITE_ATTEMPTS):
                await self.log.catch_up()
                records, answer = decide()
                if not records:
                    return answer
                await self.log.append(records)
                await self.log.catch_up()
                lost = [
                    key
                    for key, value in records
                    if value is not None
                    and key.startswith(b'{"keytype":"SCHEMA"')
                    and not self._holds(key, value)
                ]
                if not lost:
                    return answer
                log.info("another node wrote %d of these versions first; deciding again", len(lost))
                await self.log.append([(key, None) for key in lost])
        raise ApiError(500, 50001, "Error while registering: other nodes kept writing first")

    def _holds(self, key: bytes, value: bytes) -> bool:
        """Whether the record ``key``/``value`` is what the state holds now."""
        parsed = json.loads(key)
        held = self.state.subjects.get(parsed["subject"], {}).get(parsed["version"])
        return held is not None and held.key == key and held.id == json.loads(value)["id"]

    def _check_writable(self, subject: str | None, importing: bool = False) -> None:
        mode = reads.effective_mode(self.state, subject)
        if mode.startswith("READONLY"):
            raise ApiError(422, 42205, f"Subject {subject} is in read-only mode")
        if importing and mode != "IMPORT":
            raise ApiError(422, 42205, "Overwrite new schema with id or version is not permitted.")

    def parsed(self, schema_id: int) -> Parsed:
        """A registered schema, parsed (cached: a registered schema never changes)."""
        found = self._parsed.get(schema_id)
        if found is None:
            schema = self.state.schemas[schema_id]
            refs = [self._reference_text(s, v) for _, s, v in schema.references]
            found = self._parsed[schema_id] = parse(schema.schema_type, schema.text, refs)
        return found

    def _reference_text(self, subject: str, version: int) -> str:
        held = self.state.subjects.get(subject, {}).get(version)
        if held is None:
            raise ApiError(422, 42201, f"Invalid schema: reference {subject} {version} not found")
        return self.state.schemas[held.id].text

    def _parse_request(
        self, body: Any, normalize: bool
    ) -> tuple[Parsed, tuple[Any, ...], dict[str, Any]]:
        if not isinstance(body, dict) or not isinstance(body.get("schema", ""), str):
            # As Confluent's server: a request body of the wrong shape is a 400.
            raise ApiError(400, 400, "The request body is not an object with a schema string")
        if not body.get("schema"):
            raise ApiError(422, 42201, "Invalid schema: empty schema")
        schema_type = body.get("schemaType") or "AVRO"
        if schema_type not in SCHEMA_TYPES:
            raise ApiError(422, 42201, f"Invalid schema type {schema_type}")
        refs = []
        for ref in body.get("references") or ():
            try:
                name, subject, number = str(ref["name"]), str(ref["subject"]), int(ref["version"])
            except (KeyError, TypeError, ValueError):
                raise ApiError(422, 42201, f"Invalid schema: invalid reference {ref!r}") from None
            if number == -1:
                live = self.state.versions(subject)
                number = max(live) if live else 0
            refs.append((name, subject, number))
        texts = [self._reference_text(s, v) for _, s, v in refs]
        try:
            parsed = parse(schema_type, body["schema"], texts, normalize=normalize)
        except InvalidSchema as exc:
            raise ApiError(422, 42201, str(exc)) from None
        return parsed, tuple(refs), body

    def _problems(self, subject: str, parsed: Parsed, against: list[int] | None) -> list[str]:
        """Why ``parsed`` may not follow ``subject``'s live versions under its level
        (``against``: only these versions, with the level's direction)."""
        level = reads.effective_level(self.state, subject)
        live = self.state.versions(subject)
        if level == "NONE" or not live:
            return []
        numbers = (
            against
            if against is not None
            else (sorted(live) if level.endswith("TRANSITIVE") else [max(live)])
        )
        problems = []
        for number in numbers:
            old = self.parsed(live[number].id)
            found = []
            if level.startswith(("BACKWARD", "FULL")):
                found += incompatibilities(parsed, old)
            if level.startswith(("FORWARD", "FULL")):
                found += incompatibilities(old, parsed)
            problems += [f"{p} (old schema version {number}, {level})" for p in found]
        return problems

    async def _register(self, subject: str, query: Mapping[str, str], body: Any) -> Any:
        importing = isinstance(body, dict) and ("id" in body or "version" in body)
        parsed, refs, body = self._parse_request(body, flag(query, "normalize"))

        def decide() -> tuple[Records, Any]:
            self._check_writable(subject, importing)
            state = self.state
            every = state.versions(subject, deleted=True)
            for version in every.values():
                if not version.deleted and _same(state, version.id, parsed, refs):
                    return [], {"id": version.id}
            if not importing:
                problems = self._problems(subject, parsed, None)
                if problems:
                    raise ApiError(
                        409,
                        409,
                        f"Schema being registered is incompatible with an earlier schema for "
                        f'subject "{subject}", details: {problems}',
                    )
            known = state.find_id(parsed.schema_type, parsed.identity, refs)
            schema_id = int(body["id"]) if importing and "id" in body else known or state.max_id + 1
            if schema_id in state.schemas and not _same(state, schema_id, parsed, refs):
                raise ApiError(
                    422, 42205, f"Overwrite new schema with id {schema_id} is not permitted."
                )
            number = int(body.get("version", 0)) if importing else 0
            number = number if number > 0 else max(every, default=0) + 1
            if number in every:
                raise ApiError(
                    422, 42205, f"Overwrite of version {number} of {subject} is not permitted."
                )
            value = {
                "subject": subject,
                "version": number,
                "id": schema_id,
                "schemaType": parsed.schema_type,
                "schema": parsed.text,
                "identity": parsed.identity,
                "deleted": False,
                "references": [{"name": n, "subject": s, "version": v} for n, s, v in refs],
            }
            return [(schema_key(subject, number, self.writer), dumps(value))], {"id": schema_id}

        return await self._write(decide)

    async def _lookup(self, subject: str, query: Mapping[str, str], body: Any) -> Any:
        parsed, refs, _ = self._parse_request(body, flag(query, "normalize"))
        every = self.state.versions(subject, deleted=flag(query, "deleted"))
        if not every:
            raise ApiError(404, 40401, f"Subject '{subject}' not found.")
        for number, version in sorted(every.items(), reverse=True):
            if _same(self.state, version.id, parsed, refs):
                return reads.version_body(self.state, subject, number, version.id, query)
        raise ApiError(404, 40403, "Schema not found")

    async def _test(self, subject: str, at: str | None, query: Mapping[str, str], body: Any) -> Any:
        parsed, _, _ = self._parse_request(body, flag(query, "normalize"))
        against = None
        if at is not None:
            against = [reads.version_number(self.state, subject, at, deleted=False)]
        problems = self._problems(subject, parsed, against)
        answer: dict[str, Any] = {"is_compatible": not problems}
        if flag(query, "verbose"):
            answer["messages"] = problems
        return answer

    async def _delete_subject(self, subject: str, query: Mapping[str, str]) -> Any:
        permanent = flag(query, "permanent")

        def decide() -> tuple[Records, Any]:
            self._check_writable(subject)
            every = self.state.versions(subject, deleted=True)
            live = [n for n, v in every.items() if not v.deleted]
            if not every:
                raise ApiError(404, 40401, f"Subject '{subject}' not found.")
            if not permanent and not live:
                raise ApiError(
                    404,
                    40404,
                    f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently",
                )
            if permanent and live:
                raise ApiError(
                    404,
                    40405,
                    f"Subject '{subject}' was not deleted first before being permanently deleted",
                )
            for number in every:
                self._refuse_referenced(subject, number)
            if permanent:
                records: Records = [(IDS_KEY, dumps({"max_id": self.state.max_id}))]
                records += [(v.key, None) for v in every.values()]
                # The subject's own config and mode go with it.
                if subject in self.state.configs:
                    records.append((config_key(subject), None))
                if subject in self.state.modes:
                    records.append((mode_key(subject), None))
                return records, sorted(every)
            return [self._soft(subject, n) for n in live], live

        return await self._write(decide)

    def _refuse_referenced(self, subject: str, number: int) -> None:
        """A version another schema references may not be deleted (42206)."""
        if self.state.referenced_by(subject, number):
            raise ApiError(
                422,
                42206,
                f"One or more references exist to the schema {{subject={subject},version={number}}}.",
            )

    def _soft(self, subject: str, number: int) -> tuple[bytes, bytes]:
        version = self.state.subjects[subject][number]
        schema = self.state.schemas[version.id]
        value = {
            "subject": subject,
            "version": number,
            "id": version.id,
            "schemaType": schema.schema_type,
            "schema": schema.text,
            "identity": self.state.identities[version.id],
            "deleted": True,
            "references": [
                {"name": n, "subject": s, "version": v} for n, s, v in schema.references
            ],
        }
        return version.key, dumps(value)

    async def _delete_version(self, subject: str, at: str, query: Mapping[str, str]) -> Any:
        permanent = flag(query, "permanent")

        def decide() -> tuple[Records, Any]:
            self._check_writable(subject)
            latest = at in ("latest", "-1")
            number = reads.version_number(self.state, subject, at, deleted=permanent or not latest)
            version = self.state.subjects[subject][number]
            if not permanent and version.deleted:
                raise ApiError(
                    404,
                    40406,
                    f"Subject '{subject}' Version {number} was soft deleted.Set permanent=true to delete permanently",
                )
            if permanent and not version.deleted:
                raise ApiError(
                    404,
                    40407,
                    f"Subject '{subject}' Version {number} was not deleted first before being permanently deleted",
                )
            self._refuse_referenced(subject, number)
            if permanent:
                return [
                    (IDS_KEY, dumps({"max_id": self.state.max_id})),
                    (version.key, None),
                ], number
            return [self._soft(subject, number)], number

        return await self._write(decide)

    async def _put_setting(
        self, kind: str, subject: str | None, query: Mapping[str, str], body: Any
    ) -> Any:
        if kind == "config":
            level = (
                body.get("compatibility", body.get("compatibilityLevel"))
                if isinstance(body, dict)
                else None
            )
            if not isinstance(level, str) or level.upper() not in LEVELS:
                raise ApiError(
                    422,
                    42203,
                    "Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive",
                )
            records: Records = [(config_key(subject), dumps({"compatibilityLevel": level.upper()}))]
            return await self._write(lambda: (records, {"compatibility": level.upper()}))
        mode = body.get("mode") if isinstance(body, dict) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise ApiError(
                422,
                42204,
                "Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE and IMPORT",
            )
        if mode.upper() == "IMPORT" and not flag(query, "force"):
            live = self.state.versions(subject) if subject else self.state.subjects
            if live:
                raise ApiError(422, 42205, "Cannot import since found existing subjects")
        records = [(mode_key(subject), dumps({"mode": mode.upper()}))]
        return await self._write(lambda: (records, {"mode": mode.upper()}))

    async def _delete_setting(self, kind: str, subject: str | None) -> Any:
        table = self.state.configs if kind == "config" else self.state.modes
        old = table.get(subject)
        key = config_key(subject) if kind == "config" else mode_key(subject)
        if subject is not None and subject not in self.state.subjects and old is None:
            raise ApiError(404, 40401, f"Subject '{subject}' not found.")
        field = "compatibilityLevel" if kind == "config" else "mode"
        default = "BACKWARD" if kind == "config" else "READWRITE"
        return await self._write(lambda: ([(key, None)], {field: old or default}))


def _same(state: RegistryState, schema_id: int, parsed: Parsed, refs: tuple[Any, ...]) -> bool:
    schema = state.schemas[schema_id]
    return (schema.schema_type, state.identities[schema_id], schema.references) == (
        parsed.schema_type,
        parsed.identity,
        refs,
    )


def _const(value: Any) -> Callable[..., Any]:
    async def answer(query: Mapping[str, str], body: Any) -> Any:
        return value

    return answer


def _json_body(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError as exc:
        raise ApiError(400, 400, f"Unrecognized request body: {exc}") from None
