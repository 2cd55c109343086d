"""Registry-framed keys and values decoded to JSON values, whatever their
format: for tools that show records to a person (``trafka consume``, the
console), where the format is the registry's answer, not the reader's code.

Rules:

* The schema a frame names (payload prefix, or the ``__key_schema_id`` /
  ``__value_schema_id`` header) is asked of the registry once per id; its
  type picks the SDK's deserializer (Avro, Protobuf without generated
  classes, JSON Schema). With ``expect``, a schema of another type is an
  error that says so.
* Values come back as JSON values: Avro's as fastavro reads them, with
  ``bytes`` and ``fixed`` as Avro's JSON encoding writes them (one code point
  per byte), dates and times in ISO 8601, decimals and UUIDs as text;
  Protobuf's in its JSON mapping, with the ``.proto``'s field names.
* The subject shown is the topic's own (``<topic>-key`` / ``<topic>-value``)
  when the schema is one of its versions, else the first the registry names
  for the id (None when it names none).
* Errors are :class:`~.types.SchemaSerializationError` naming the record, as
  the deserializers' own.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from dataclasses import dataclass
from typing import Any

from .framing import FramingError, header_name, read_frame
from .types import SchemaRegistryError, SchemaSerializationError

__all__ = ["Decoded", "DecodingDeserializer", "jsonable"]


def jsonable(value: Any) -> Any:
    """A decoded Avro value as JSON values (see the module rules)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    return value


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded key or value: its JSON value, and the schema it was written
    with (all None for a value that needed no schema)."""

    value: Any
    schema_id: int | None = None
    schema_type: str | None = None
    subject: str | None = None


class DecodingDeserializer:
    """Decodes registry-framed keys or values of any format into :class:`Decoded`.

    Args:
        registry: a blocking :class:`~.blocking_registry.SchemaRegistryClient`.
        expect: the registry type the records must have (``AVRO``,
            ``PROTOBUF``, ``JSON``), or None: any.
    """

    def __init__(self, registry: Any, expect: str | None = None) -> None:
        self.registry = registry
        self.expect = expect
        self._by_type: dict[str, Any] = {}
        self._subjects: dict[tuple[int, str], str | None] = {}

    def deserializer_for(self, schema_type: str) -> Any:
        """The SDK's deserializer for a registry type (``AVRO``, ``PROTOBUF``,
        ``JSON``), one per type, on this decoder's registry client."""
        hit = self._by_type.get(schema_type)
        if hit is None:
            if schema_type == "PROTOBUF":
                from .protobuf import ProtobufDeserializer

                hit = ProtobufDeserializer(schema_registry_client=self.registry)
            elif schema_type == "JSON":
                from .json_schema import JSONDeserializer

                hit = JSONDeserializer(None, schema_registry_client=self.registry)
            else:
                from .avro import AvroDeserializer

                hit = AvroDeserializer(self.registry)
            self._by_type[schema_type] = hit
        return hit

    def deserialize_record(
        self,
        data: bytes | None,
        topic: str,
        partition: int | None,
        offset: int | None,
        headers: Any = None,
        is_key: bool = False,
        ctx: Any = None,
    ) -> Decoded | None:
        """``data`` decoded (None stays None).

        Raises:
            SchemaSerializationError: not a frame, a schema the registry does
                not give, of another type than ``expect``, or a payload that
                does not decode with it.
        """
        if data is None:
            return None
        name = header_name(is_key)
        frame = next((bytes(v) for k, v in headers or () if k == name and v), None)
        where: dict[str, Any] = {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "is_key": is_key,
        }
        try:
            ref, _ = read_frame(frame or data, False)
        except FramingError as exc:
            raise SchemaSerializationError(f"not a schema registry frame: {exc}", **where) from exc
        schema_type = self.expect or "AVRO"
        if ref.schema_id is not None:
            try:
                schema_type = self.registry.get_schema(ref.schema_id).schema_type
            except SchemaRegistryError as exc:
                reason = f"schema id {ref.schema_id}: {exc.message} (error_code {exc.error_code})"
                raise SchemaSerializationError(reason, **where) from exc
            if self.expect is not None and schema_type != self.expect:
                reason = f"schema id {ref.schema_id} is a {schema_type} schema, not {self.expect}"
                raise SchemaSerializationError(reason, **where)
        deserializer = self.deserializer_for(schema_type)
        value = deserializer.deserialize_record(data, topic, partition, offset, headers, is_key)
        if schema_type == "PROTOBUF":
            from google.protobuf import json_format

            value = json_format.MessageToDict(value, preserving_proto_field_name=True)
        elif schema_type == "AVRO":
            value = jsonable(value)
        subject = None
        if ref.schema_id is not None:
            subject = self._subject(ref.schema_id, f"{topic}-{'key' if is_key else 'value'}")
        return Decoded(value, ref.schema_id, schema_type, subject)

    def _subject(self, schema_id: int, own: str) -> str | None:
        key = (schema_id, own)
        if key not in self._subjects:
            try:
                held = self.registry.request("GET", f"/schemas/ids/{schema_id}/versions")
                found = [str(v["subject"]) for v in held]
            except (SchemaRegistryError, KeyError, TypeError):
                found = []
            self._subjects[key] = own if own in found else (found[0] if found else None)
        return self._subjects[key]
