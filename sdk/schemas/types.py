"""What the registry stores and answers, as frozen dataclasses, and its errors."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trafka.codec.errors import TrafkaError

from ..errors import SerializationError

__all__ = [
    "MissingExtraError",
    "RegisteredSchema",
    "Schema",
    "SchemaReference",
    "SchemaRegistryError",
    "SchemaSerializationError",
]


class SchemaRegistryError(TrafkaError):
    """The registry refused a request, or could not be reached.

    Attributes:
        status: the HTTP status (None: no answer, e.g. unreachable or a timeout).
        error_code: the registry's ``error_code`` (40401 subject not found,
            40403 schema not found, 409 incompatible, 42201 invalid schema...),
            or the status when the body had none; -1 without an answer.
        message: the registry's ``message``, or what went wrong.
    """

    def __init__(self, status: int | None, error_code: int, message: str, what: str = "") -> None:
        self.status = status
        self.error_code = error_code
        self.message = message
        where = f"{what}: " if what else ""
        super().__init__(f"{where}{message} (error_code {error_code}, HTTP status {status})")


class SchemaSerializationError(SerializationError):
    """A key or value could not be (de)serialized with its schema.

    Attributes name where: the ``topic`` and the ``subject`` (serializing), or
    the ``topic``, ``partition`` and ``offset`` of the record (deserializing);
    ``is_key``; and ``reason``, what was wrong. ``__cause__`` is the library's
    or the registry's error.
    """

    def __init__(
        self,
        reason: str,
        *,
        topic: str | None = None,
        is_key: bool = False,
        subject: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.topic = topic
        self.is_key = is_key
        self.subject = subject
        self.partition = partition
        self.offset = offset
        where = [f"topic {topic!r}"] if topic is not None else []
        if partition is not None:
            where.append(f"partition {partition}")
        if offset is not None:
            where.append(f"offset {offset}")
        if subject is not None:
            where.append(f"subject {subject!r}")
        field = "key" if is_key else "value"
        super().__init__(f"{field} of {', '.join(where) or 'a record'}: {reason}")


class MissingExtraError(ImportError):
    """A schema format's library is not installed (install ``trafka[schemas]``)."""


@dataclass(frozen=True, slots=True)
class SchemaReference:
    """A named schema a schema imports: ``name`` (the Avro full name, the .proto
    file name or the JSON ``$ref`` URL) is ``version`` of ``subject``."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class Schema:
    """A schema's text, type (``AVRO``, ``PROTOBUF``, ``JSON``) and references."""

    schema_str: str
    schema_type: str = "AVRO"
    references: tuple[SchemaReference, ...] = ()

    def __post_init__(self) -> None:
        # A list (as confluent-kafka's Schema takes them) would make it unhashable.
        object.__setattr__(self, "references", tuple(self.references or ()))

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"schema": self.schema_str}
        # The registry's default type is AVRO; Confluent's clients leave it out.
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = [r.to_json() for r in self.references]
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Schema:
        refs = tuple(
            SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"]))
            for r in body.get("references") or ()
        )
        return cls(str(body["schema"]), str(body.get("schemaType") or "AVRO"), refs)


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    """A schema as a subject holds it: its id, GUID (registries that give
    one), subject and version."""

    schema_id: int
    schema: Schema
    subject: str | None = None
    version: int | None = None
    guid: uuid.UUID | None = None

    @classmethod
    def from_json(cls, body: Mapping[str, Any], schema: Schema | None = None) -> RegisteredSchema:
        guid = body.get("guid")
        return cls(
            int(body["id"]),
            schema if schema is not None else Schema.from_json(body),
            body.get("subject"),
            None if body.get("version") is None else int(body["version"]),
            None if not guid else uuid.UUID(str(guid)),
        )
