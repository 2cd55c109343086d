"""confluent-kafka's ``SerializingProducer`` and ``DeserializingConsumer``:
the key and value (de)serializers of the configuration
(``key.serializer``...) called with a :class:`SerializationContext`.

The serdes may come from builders (``key.serializer.builder``...: see
:mod:`._serde_building`); those are the client's, closed with it.

Rules (confluent-kafka's): what a serializer raises comes out of ``produce()``
as :class:`~.error.KeySerializationError` / :class:`~.error.ValueSerializationError`,
what a deserializer raises out of ``poll()`` as
:class:`~.error.KeyDeserializationError` / :class:`~.error.ValueDeserializationError`
(with the message, its key and value as fetched, in ``kafka_message``, and
its topic, partition and offset in the error's text); each is both a
``KafkaException`` and a ``SerializationError``, the serde's own error its
``exception``.
"""

from __future__ import annotations

from typing import Any

from ._consumer import Consumer
from ._producer import Producer
from ._serde_building import build, close_all, pop_specs
from ._types import Message
from .error import (
    ConsumeError,
    KeyDeserializationError,
    KeySerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)
from .serialization import MessageField, SerializationContext

__all__ = ["DeserializingConsumer", "SerializingProducer"]


class SerializingProducer(Producer):
    #: The serializers built from ``.builder`` settings: closed with the producer.
    _owned: list[Any] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        specs, conf = pop_specs(conf, "key.serializer", "value.serializer")
        (self._key_serializer, self._value_serializer), self._owned, conf = build(specs, conf)
        try:
            super().__init__(conf)
        except BaseException:
            close_all(self._owned)
            raise

    def close(self) -> bool:
        """Close the producer, then the serializers it built."""
        closed = super().close()
        owned, self._owned = self._owned, []
        close_all(owned)
        return closed

    def produce(self, topic: str, key: Any = None, value: Any = None, **kwargs: Any) -> None:  # type: ignore[override]
        headers = kwargs.get("headers")
        if self._key_serializer is not None:
            ctx = SerializationContext(topic, MessageField.KEY, headers)
            try:
                key = self._key_serializer(key, ctx)
            except Exception as exc:
                raise KeySerializationError(exc) from exc
        if self._value_serializer is not None:
            ctx = SerializationContext(topic, MessageField.VALUE, headers)
            try:
                value = self._value_serializer(value, ctx)
            except Exception as exc:
                raise ValueSerializationError(exc) from exc
        self._produce_one(topic, value, key, **kwargs)


class DeserializingConsumer(Consumer):
    #: The deserializers built from ``.builder`` settings: closed with the consumer.
    _owned: list[Any] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        specs, conf = pop_specs(conf, "key.deserializer", "value.deserializer")
        (self._key_deserializer, self._value_deserializer), self._owned, conf = build(specs, conf)
        try:
            super().__init__(conf)
        except BaseException:
            close_all(self._owned)
            raise

    def close(self) -> None:
        """Close the consumer, then the deserializers it built."""
        super().close()
        owned, self._owned = self._owned, []
        close_all(owned)

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next record, its key and value deserialized; an event (an
        end of partition...) is raised as :class:`~.error.ConsumeError`."""
        msg = super().poll(timeout)
        if msg is None:
            return None
        error = msg.error()
        if error is not None:
            raise ConsumeError(error, kafka_message=msg)
        # The key first (its deserializer may leave state for the value's), and
        # both set only once both are made: a failure leaves the message as fetched.
        ctx = SerializationContext(msg.topic() or "", MessageField.KEY, msg.headers())
        key = msg.key()
        if self._key_deserializer is not None:
            try:
                key = self._key_deserializer(key, ctx)
            except Exception as exc:
                raise KeyDeserializationError(exc, msg) from exc
        value = msg.value()
        if self._value_deserializer is not None:
            ctx.field = MessageField.VALUE
            try:
                value = self._value_deserializer(value, ctx)
            except Exception as exc:
                raise ValueDeserializationError(exc, msg) from exc
        msg.set_key(key)
        msg.set_value(value)
        return msg

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        """Not offered, as in confluent-kafka: use :meth:`poll`."""
        raise NotImplementedError
