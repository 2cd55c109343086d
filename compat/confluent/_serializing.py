"""confluent-kafka's ``SerializingProducer`` and ``DeserializingConsumer``:
the key and value (de)serializers of the configuration
(``key.serializer``...) called with a :class:`SerializationContext`."""

from __future__ import annotations

from typing import Any

from ._consumer import Consumer
from ._errors import KafkaError, KafkaException, internal
from ._producer import Producer
from ._types import Message
from .serialization import MessageField, SerializationContext

__all__ = ["DeserializingConsumer", "SerializingProducer"]


class SerializingProducer(Producer):
    def __init__(self, conf: dict[str, Any]) -> None:
        conf = dict(conf)
        self._key_serializer = conf.pop("key.serializer", None)
        self._value_serializer = conf.pop("value.serializer", None)
        super().__init__(conf)

    def produce(self, topic: str, key: Any = None, value: Any = None, **kwargs: Any) -> None:  # type: ignore[override]
        headers = kwargs.get("headers")
        if self._key_serializer is not None:
            key = self._key_serializer(key, SerializationContext(topic, MessageField.KEY, headers))
        if self._value_serializer is not None:
            ctx = SerializationContext(topic, MessageField.VALUE, headers)
            value = self._value_serializer(value, ctx)
        self._produce_one(topic, value, key, **kwargs)


class DeserializingConsumer(Consumer):
    def __init__(self, conf: dict[str, Any]) -> None:
        conf = dict(conf)
        self._key_deserializer = conf.pop("key.deserializer", None)
        self._value_deserializer = conf.pop("value.deserializer", None)
        super().__init__(conf)

    def poll(self, timeout: float | None = None) -> Message | None:
        msg = super().poll(timeout)
        if msg is None or msg.error() is not None:
            return msg
        topic, headers = msg.topic() or "", msg.headers()
        try:
            if self._key_deserializer is not None:
                ctx = SerializationContext(topic, MessageField.KEY, headers)
                msg.set_key(self._key_deserializer(msg.key(), ctx))
        except Exception as exc:
            raise KafkaException(KafkaError(internal("_KEY_DESERIALIZATION"), str(exc))) from None
        try:
            if self._value_deserializer is not None:
                ctx = SerializationContext(topic, MessageField.VALUE, headers)
                msg.set_value(self._value_deserializer(msg.value(), ctx))
        except Exception as exc:
            raise KafkaException(KafkaError(internal("_VALUE_DESERIALIZATION"), str(exc))) from None
        return msg
