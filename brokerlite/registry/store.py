"""The registry's state, rebuilt from the records of its ``_schemas`` topic.

Every change is a record of the compacted topic; the state is what applying
the records in offset order gives, so every node that reads the topic has the
same registry, and a restart (or kill -9) rebuilds it. Keys and values are
compact JSON with sorted keys:

===================================================================  =========================================
key                                                                  value (None: a tombstone)
===================================================================  =========================================
``{"keytype":"SCHEMA","magic":1,"subject":S,"version":V,"writer":N}``  ``{"subject","version","id","schemaType",
                                                                     "schema","references","deleted"}``
``{"keytype":"CONFIG","magic":0,"subject":S|null}``                  ``{"compatibilityLevel": LEVEL}``
``{"keytype":"MODE","magic":0,"subject":S|null}``                    ``{"mode": MODE}``
``{"keytype":"IDS","magic":0}``                                      ``{"max_id": N}``
===================================================================  =========================================

The DEK registry's KEK and DEK records are :mod:`.deks`'s.

Rules:

* A SCHEMA record *holds* its subject-version when none is held, or when it
  has the holder's key (a soft delete rewrites the holder with
  ``deleted: true``; a tombstone of the holder's key is the hard delete). A
  record for a version another key holds, or binding an id already bound to
  a different schema, is *refused*: it changes nothing. Every node refuses the
  same records, since the rules only read earlier records.
* ``writer`` is the node id of the registry that wrote the record: two nodes
  racing to write the same version write different keys, so compaction keeps
  both and the first stays the holder. The refused writer tombstones its own
  key and tries again (:mod:`.api`).
* Ids only grow: the next id is one more than the highest ever seen, counting
  the IDS record written before a hard delete (compaction may drop the deleted
  schema's record).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from .deks import KeyState

__all__ = [
    "Registered",
    "RegistryState",
    "Version",
    "config_key",
    "dumps",
    "mode_key",
    "schema_key",
]


def dumps(value: Any) -> bytes:
    """Compact JSON with sorted keys (record keys compare byte for byte)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def schema_key(subject: str, version: int, writer: int) -> bytes:
    return dumps(
        {"keytype": "SCHEMA", "magic": 1, "subject": subject, "version": version, "writer": writer}
    )


def config_key(subject: str | None) -> bytes:
    return dumps({"keytype": "CONFIG", "magic": 0, "subject": subject})


def mode_key(subject: str | None) -> bytes:
    return dumps({"keytype": "MODE", "magic": 0, "subject": subject})


IDS_KEY = dumps({"keytype": "IDS", "magic": 0})


@dataclasses.dataclass(frozen=True, slots=True)
class Registered:
    """A schema as registered: its type, its text and its references
    (``(name, subject, version)``)."""

    schema_type: str
    text: str
    references: tuple[tuple[str, str, int], ...]


@dataclasses.dataclass(slots=True)
class Version:
    """A subject's version: the schema id, soft-deleted or not, the holding key."""

    id: int
    deleted: bool
    key: bytes


class RegistryState:
    """Subjects, versions, schemas by id, configs and modes (no I/O)."""

    def __init__(self) -> None:
        self.schemas: dict[int, Registered] = {}
        self.identities: dict[int, str] = {}
        self.subjects: dict[str, dict[int, Version]] = {}
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        self.max_id = 0
        self.applied_offset = -1
        self.keys = KeyState()  # the DEK registry's KEKs and DEKs

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> bool:
        """Apply one record of the topic; False when refused or not understood."""
        self.applied_offset = max(self.applied_offset, offset)
        try:
            parsed_key = json.loads(key) if key else None
            parsed_value = json.loads(value) if value is not None else None
        except ValueError:
            return False
        if not isinstance(parsed_key, dict):
            return False
        kind = parsed_key.get("keytype")
        if kind == "SCHEMA":
            return self._apply_schema(key or b"", parsed_key, parsed_value)
        if kind in ("CONFIG", "MODE"):
            table = self.configs if kind == "CONFIG" else self.modes
            field = "compatibilityLevel" if kind == "CONFIG" else "mode"
            if parsed_value is None:
                table.pop(parsed_key.get("subject"), None)
            else:
                table[parsed_key.get("subject")] = str(parsed_value[field])
            return True
        if kind in ("KEK", "DEK"):
            return self.keys.apply(key or b"", parsed_key, parsed_value)
        if kind == "IDS" and isinstance(parsed_value, dict):
            self.max_id = max(self.max_id, int(parsed_value.get("max_id", 0)))
            return True
        return False

    def _apply_schema(self, key: bytes, parsed_key: dict[str, Any], value: Any) -> bool:
        subject, number = str(parsed_key.get("subject")), int(parsed_key.get("version", 0))
        versions = self.subjects.get(subject, {})
        held = versions.get(number)
        if held is not None and held.key != key:
            return False
        if value is None:
            if held is None:
                return False
            del versions[number]
            if not versions:
                self.subjects.pop(subject, None)
            self._forget_unused(held.id)
            return True
        schema = Registered(
            str(value.get("schemaType", "AVRO")),
            str(value["schema"]),
            tuple(
                (r["name"], r["subject"], int(r["version"])) for r in value.get("references", ())
            ),
        )
        schema_id = int(value["id"])
        identity = value.get("identity", schema.text)
        bound = self.schemas.get(schema_id)
        if bound is not None and (
            bound.schema_type,
            self.identities[schema_id],
            bound.references,
        ) != (schema.schema_type, identity, schema.references):
            return False
        self.schemas[schema_id] = schema
        self.identities[schema_id] = identity
        self.max_id = max(self.max_id, schema_id)
        self.subjects.setdefault(subject, {})[number] = Version(
            schema_id, bool(value.get("deleted", False)), key
        )
        return True

    def _forget_unused(self, schema_id: int) -> None:
        if not any(v.id == schema_id for vs in self.subjects.values() for v in vs.values()):
            self.schemas.pop(schema_id, None)
            self.identities.pop(schema_id, None)

    # Queries.

    def versions(self, subject: str, *, deleted: bool = False) -> dict[int, Version]:
        """A subject's versions in order (soft-deleted ones only with ``deleted``)."""
        found = self.subjects.get(subject, {})
        return {n: v for n, v in sorted(found.items()) if deleted or not v.deleted}

    def find_id(self, schema_type: str, identity: str, references: tuple[Any, ...]) -> int | None:
        """The id of a schema already registered with this identity, if any."""
        for schema_id, schema in sorted(self.schemas.items()):
            if (
                schema.schema_type == schema_type
                and schema.references == references
                and self.identities[schema_id] == identity
            ):
                return schema_id
        return None

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of the live schemas whose references name ``subject`` ``version``."""
        ids = {
            v.id
            for vs in self.subjects.values()
            for v in vs.values()
            if not v.deleted
            and any(r[1] == subject and r[2] == version for r in self.schemas[v.id].references)
        }
        return sorted(ids)

    def uses(self, schema_id: int, *, deleted: bool = False) -> list[tuple[str, int]]:
        """The (subject, version) pairs registered with ``schema_id``."""
        return [
            (subject, number)
            for subject, vs in sorted(self.subjects.items())
            for number, v in sorted(vs.items())
            if v.id == schema_id and (deleted or not v.deleted)
        ]
