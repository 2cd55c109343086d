"""confluent-kafka's ``confluent_kafka.schema_registry`` over
:mod:`trafka.sdk.schemas`: the registry client with confluent-kafka's return
values (``register_schema`` returns the id), the schema types and the error;
the serializers in :mod:`.avro`, :mod:`.protobuf` and :mod:`.json_schema`, as
in confluent-kafka. Needs the ``schemas`` extra."""

from __future__ import annotations

from typing import Any

from trafka.sdk.schemas import RegisteredSchema, Schema, SchemaReference, SchemaRegistryError
from trafka.sdk.schemas import SchemaRegistryClient as _Client

__all__ = [
    "RegisteredSchema",
    "Schema",
    "SchemaReference",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "record_subject_name_strategy",
    "topic_record_subject_name_strategy",
    "topic_subject_name_strategy",
]

# -- the serdes' names (srserde): subject name strategies, schema id framing --
from ..serialization import MessageField, SerializationContext, SerializationError
from .common.serde import (
    dual_schema_id_deserializer,
    header_schema_id_serializer,
    prefix_schema_id_deserializer,
    prefix_schema_id_serializer,
    record_subject_name_strategy,
    reference_subject_name_strategy,
    topic_record_subject_name_strategy,
    topic_subject_name_strategy,
)

__all__ += [
    "MessageField",
    "SerializationContext",
    "SerializationError",
    "dual_schema_id_deserializer",
    "header_schema_id_serializer",
    "prefix_schema_id_deserializer",
    "prefix_schema_id_serializer",
    "reference_subject_name_strategy",
]
# -- end of the serdes' names --


class SchemaRegistryClient(_Client):
    """confluent-kafka's ``SchemaRegistryClient(conf)`` (``url``,
    ``basic.auth.user.info``, ``ssl.ca.location``...)."""

    def register_schema(
        self, subject_name: str, schema: Schema, normalize_schemas: bool = False
    ) -> int:
        """Register ``schema`` under ``subject_name``; its id (as confluent-kafka returns)."""
        registered: RegisteredSchema = self._call(
            self._loop.client.register_schema, subject_name, schema, normalize_schemas
        )
        return registered.schema_id

    def register_schema_full_response(
        self, subject_name: str, schema: Schema, normalize_schemas: bool = False
    ) -> RegisteredSchema:
        """Register ``schema``; the registered schema (id, and GUID where given)."""
        out: Any = self._call(
            self._loop.client.register_schema, subject_name, schema, normalize_schemas
        )
        return out  # type: ignore[no-any-return]
