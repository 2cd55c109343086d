"""Schema Registry serdes: Avro, Protobuf and JSON Schema in Confluent's wire
formats, and a registry client (async and blocking).

Needs the ``schemas`` extra (``pip install 'trafka[schemas]'``: httpx,
fastavro, protobuf, jsonschema); without it the names still import, and using
one raises :class:`MissingExtraError` naming the extra.

A serializer or deserializer is given to a producer or consumer as any other::

    registry = SchemaRegistryClient({"url": "http://localhost:8081"})
    producer = Producer(bootstrap_servers=..., value_serializer=AvroSerializer(registry, schema))
    consumer = Consumer("t", bootstrap_servers=..., value_deserializer=AvroDeserializer(registry))

The producer and consumer hand it the record's topic and headers (and
partition and offset), so its errors name them; see ``docs/schemas.md``.
"""

from typing import TYPE_CHECKING

from trafka.common.lazy import lazy_exports

from .framing import FramingError
from .types import (
    MissingExtraError,
    RegisteredSchema,
    Schema,
    SchemaReference,
    SchemaRegistryError,
    SchemaSerializationError,
)

__all__ = [
    "AsyncSchemaRegistryClient",
    "AvroDeserializer",
    "AvroSerializer",
    "FramingError",
    "JSONDeserializer",
    "JSONSerializer",
    "MissingExtraError",
    "ProtobufDeserializer",
    "ProtobufSerializer",
    "RegisteredSchema",
    "RegistryConfig",
    "Schema",
    "SchemaReference",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "SchemaSerializationError",
    "open_schema_registry",
]

if TYPE_CHECKING:
    from .avro import AvroDeserializer, AvroSerializer
    from .blocking_registry import SchemaRegistryClient
    from .json_schema import JSONDeserializer, JSONSerializer
    from .protobuf import ProtobufDeserializer, ProtobufSerializer
    from .registry import AsyncSchemaRegistryClient, open_schema_registry
    from .registry_config import RegistryConfig

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AsyncSchemaRegistryClient": ".registry",
        "open_schema_registry": ".registry",
        "RegistryConfig": ".registry_config",
        "SchemaRegistryClient": ".blocking_registry",
        "AvroSerializer": ".avro",
        "AvroDeserializer": ".avro",
        "JSONSerializer": ".json_schema",
        "JSONDeserializer": ".json_schema",
        "ProtobufSerializer": ".protobuf",
        "ProtobufDeserializer": ".protobuf",
    },
)
