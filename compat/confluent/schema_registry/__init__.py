"""confluent-kafka's ``confluent_kafka.schema_registry``: the registry clients
(:mod:`.schema_registry_client`, over :mod:`trafka.sdk.schemas`), the models
and error they use, the subject name strategies and the schema id
serializers the serdes take (``subject.name.strategy``,
``schema.id.serializer``, ``schema.id.deserializer``); the serdes in
:mod:`.avro`, :mod:`.protobuf` and :mod:`.json_schema`, as in confluent-kafka.
Needs the ``schemas`` extra."""

from __future__ import annotations

from .common.schema_registry_client import (
    Association,
    AssociationCreateOrUpdateInfo,
    AssociationCreateOrUpdateRequest,
    AssociationInfo,
    AssociationResponse,
    ConfigCompatibilityLevel,
    Metadata,
    MetadataProperties,
    MetadataTags,
    RegisteredSchema,
    Rule,
    RuleKind,
    RuleMode,
    RuleParams,
    RuleSet,
    Schema,
    SchemaReference,
    ServerConfig,
)
from .error import SchemaRegistryError
from .schema_registry_client import AsyncSchemaRegistryClient, SchemaRegistryClient

__all__ = [
    "Association",
    "AssociationCreateOrUpdateInfo",
    "AssociationCreateOrUpdateRequest",
    "AssociationInfo",
    "AssociationResponse",
    "AsyncSchemaRegistryClient",
    "ConfigCompatibilityLevel",
    "Metadata",
    "MetadataProperties",
    "MetadataTags",
    "RegisteredSchema",
    "Rule",
    "RuleKind",
    "RuleMode",
    "RuleParams",
    "RuleSet",
    "Schema",
    "SchemaReference",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "ServerConfig",
    "dual_schema_id_deserializer",
    "header_schema_id_serializer",
    "prefix_schema_id_deserializer",
    "prefix_schema_id_serializer",
    "record_subject_name_strategy",
    "reference_subject_name_strategy",
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

# confluent-kafka's module offers these names too.
__all__ += ["MessageField", "SerializationContext", "SerializationError"]
# -- end of the serdes' names --
