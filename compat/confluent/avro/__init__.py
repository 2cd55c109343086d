"""confluent-kafka's legacy ``confluent_kafka.avro`` (deprecated there since
2.0.2, still shipped and still imported by services): ``AvroProducer`` and
``AvroConsumer``, the drop-in's :class:`~trafka.compat.confluent.Producer` and
:class:`~trafka.compat.confluent.Consumer` that encode and decode Avro records
through a Schema Registry, with ``load`` / ``loads`` (schemas as the ``avro``
package's objects), the :class:`CachedSchemaRegistryClient` and the
:class:`MessageSerializer`. New code is better served by
``SerializingProducer`` with ``schema_registry.avro.AvroSerializer``.

Rules (confluent-kafka 2.16's):

* The configuration's ``schema.registry.*`` keys are the registry client's
  (the prefix dropped: ``schema.registry.url`` is its ``url``), the others the
  Kafka client's. With ``schema.registry.basic.auth.credentials.source`` =
  ``SASL_INHERIT`` the client's ``sasl.mechanism`` (or ``sasl.mechanisms``),
  ``sasl.username`` and ``sasl.password`` are also the registry's credentials.
* A ``schema_registry`` client given and a ``schema.registry.url`` too is a
  ValueError.
* ``AvroProducer.produce`` takes keyword arguments only: ``topic``, ``value``,
  ``key``, ``value_schema`` / ``key_schema`` (the defaults given to the
  constructor otherwise) and the rest of ``Producer.produce``'s. A value (or
  key) that is not None needs a schema: ValueSerializerError
  (KeySerializerError) otherwise; no topic is a ClientError.
* ``AvroConsumer.poll`` decodes the value and the key of a record (an event or
  an error is handed out as it came); a failure is a SerializerError naming
  the record's topic, partition and offset.
"""

from __future__ import annotations

import warnings
from typing import Any

from .._consumer import Consumer
from .._producer import Producer
from .._types import Message
from .cached_schema_registry_client import CachedSchemaRegistryClient
from .error import ClientError
from .load import load, loads
from .serializer import KeySerializerError, SerializerError, ValueSerializerError
from .serializer.message_serializer import MessageSerializer

__all__ = [
    "AvroConsumer",
    "AvroProducer",
    "CachedSchemaRegistryClient",
    "ClientError",
    "KeySerializerError",
    "MessageSerializer",
    "SerializerError",
    "ValueSerializerError",
    "load",
    "loads",
]

_PREFIX = "schema.registry"


def _split(
    config: dict[str, Any], schema_registry: Any, inherit: tuple[str, ...] = ()
) -> tuple[dict[str, Any], Any]:
    """The Kafka client's configuration, and the registry client (``schema_registry``
    or one made from the ``schema.registry.*`` keys)."""
    registry_conf = {
        key.replace(f"{_PREFIX}.", ""): value
        for key, value in config.items()
        if key.startswith(_PREFIX)
    }
    if registry_conf.get("basic.auth.credentials.source") == "SASL_INHERIT":
        registry_conf["sasl.mechanism"] = config.get(
            "sasl.mechanism", config.get("sasl.mechanisms", "")
        )
        registry_conf["sasl.username"] = config.get("sasl.username", "")
        registry_conf["sasl.password"] = config.get("sasl.password", "")
        for key in inherit:
            if key in config:
                registry_conf[key] = config[key]
    client_conf = {k: v for k, v in config.items() if not k.startswith(_PREFIX)}
    if schema_registry is None:
        schema_registry = CachedSchemaRegistryClient(registry_conf)
    elif registry_conf.get("url") is not None:
        raise ValueError("Cannot pass schema_registry along with schema.registry.url config")
    return client_conf, schema_registry


class AvroProducer(Producer):
    """A producer that encodes keys and values with Avro schemas (deprecated,
    as in confluent-kafka).

    Args:
        config: the producer's configuration with the registry's
            ``schema.registry.*`` keys (see the module).
        default_key_schema, default_value_schema: the schemas of ``produce``
            calls that name none (from :func:`load` / :func:`loads`).
        schema_registry: a registry client to use instead of one made from
            the configuration.
        **kwargs: the producer's (``logger``...).
    """

    def __init__(
        self,
        config: dict[str, Any],
        default_key_schema: Any = None,
        default_value_schema: Any = None,
        schema_registry: Any = None,
        **kwargs: Any,
    ) -> None:
        warnings.warn(
            "AvroProducer has been deprecated. Use AvroSerializer instead.",
            category=DeprecationWarning,
            stacklevel=2,
        )
        client_conf, registry = _split(config, schema_registry, ("auto.register.schemas",))
        super().__init__(client_conf, **kwargs)
        self._serializer = MessageSerializer(registry)
        self._key_schema = default_key_schema
        self._value_schema = default_value_schema

    def produce(self, **kwargs: Any) -> None:  # type: ignore[override]
        """Encode ``value`` and ``key`` (keyword arguments, see the module) and
        queue the record as ``Producer.produce`` does.

        Raises:
            ClientError: no topic, or the registry refused the schema.
            KeySerializerError / ValueSerializerError: a key or value without schema.
            BufferError, KafkaException: as ``Producer.produce``.
        """
        key_schema = kwargs.pop("key_schema", self._key_schema)
        value_schema = kwargs.pop("value_schema", self._value_schema)
        topic = kwargs.pop("topic", None)
        if not topic:
            raise ClientError("Topic name not specified.")
        value = kwargs.pop("value", None)
        key = kwargs.pop("key", None)
        if value is not None:
            if not value_schema:
                raise ValueSerializerError("Avro schema required for values")
            value = self._serializer.encode_record_with_schema(topic, value_schema, value)
        if key is not None:
            if not key_schema:
                raise KeySerializerError("Avro schema required for key")
            key = self._serializer.encode_record_with_schema(topic, key_schema, key, True)
        self._produce_one(topic, value, key, **kwargs)


class AvroConsumer(Consumer):
    """A consumer that decodes keys and values written with Avro schemas
    (deprecated, as in confluent-kafka).

    Args:
        config: the consumer's configuration with the registry's
            ``schema.registry.*`` keys (see the module).
        schema_registry: a registry client to use instead of one made from
            the configuration.
        reader_key_schema, reader_value_schema: the schemas keys and values
            are read as (None: as written).
        **kwargs: the consumer's (``logger``...).
    """

    def __init__(
        self,
        config: dict[str, Any],
        schema_registry: Any = None,
        reader_key_schema: Any = None,
        reader_value_schema: Any = None,
        **kwargs: Any,
    ) -> None:
        warnings.warn(
            "AvroConsumer has been deprecated. Use AvroDeserializer instead.",
            category=DeprecationWarning,
            stacklevel=2,
        )
        client_conf, registry = _split(config, schema_registry)
        super().__init__(client_conf, **kwargs)
        self._serializer = MessageSerializer(registry, reader_key_schema, reader_value_schema)

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next record, its value and key decoded (an event or error as is).

        Raises:
            SerializerError: a value or key that does not decode.
        """
        message = super().poll(timeout)
        if message is None or message.error() is not None:
            return message
        try:
            value = message.value()
            if value is not None:
                message.set_value(self._serializer.decode_message(value, is_key=False))
            key = message.key()
            if key is not None:
                message.set_key(self._serializer.decode_message(key, is_key=True))
        except SerializerError as exc:
            raise SerializerError(
                f"Message deserialization failed for message at {message.topic()} "
                f"[{message.partition()}] offset {message.offset()}: {exc}"
            ) from exc
        return message
