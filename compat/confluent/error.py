"""confluent-kafka's ``confluent_kafka.error``: the errors its serializing
producer and deserializing consumer raise, each a
:class:`~trafka.compat.confluent.KafkaException` carrying its
:class:`~trafka.compat.confluent.KafkaError` (``args[0]``), the exception
that caused it (``exception``) and, on the consumer's side, the message
(``kafka_message``) whose key or value did not deserialize.

A (de)serialization error is also a
:class:`~trafka.compat.confluent.serialization.SerializationError`, so that
``except SerializationError`` and ``except KafkaException`` both catch it, as
with confluent-kafka.
"""

from __future__ import annotations

from typing import Any

from ._errors import KafkaError, KafkaException, internal
from ._types import Message
from .serialization import SerializationError

__all__ = [
    "ConsumeError",
    "KafkaError",
    "KafkaException",
    "KeyDeserializationError",
    "KeySerializationError",
    "Message",
    "ProduceError",
    "SerializationError",
    "ValueDeserializationError",
    "ValueSerializationError",
]


class _KafkaClientError(KafkaException):
    """An error of a client's call: its KafkaError, the exception behind it,
    and the message concerned (if any)."""

    def __init__(
        self,
        kafka_error: KafkaError,
        exception: BaseException | None = None,
        kafka_message: Any = None,
    ) -> None:
        super().__init__(kafka_error)
        self.exception = exception
        self.kafka_message = kafka_message

    @property
    def code(self) -> int:
        code: int = self.args[0].code()
        return code

    @property
    def name(self) -> str:
        name: str = self.args[0].name()
        return name


class ConsumeError(_KafkaClientError):
    """An error met consuming a message (``kafka_message`` holds it, its key
    and value as fetched when they did not deserialize)."""


class ProduceError(_KafkaClientError):
    """An error met producing a message."""

    def __init__(self, kafka_error: KafkaError, exception: BaseException | None = None) -> None:
        super().__init__(kafka_error, exception, None)


def _where(message: Any) -> str:
    """`` (topic t, partition p, offset o)`` of a consumed message, or nothing."""
    if message is None:
        return ""
    try:
        return (
            f" (topic {message.topic()}, partition {message.partition()}, "
            f"offset {message.offset()})"
        )
    except Exception:  # a message of the application's own making
        return ""


class KeyDeserializationError(ConsumeError, SerializationError):
    """A consumed message's key did not deserialize."""

    def __init__(self, exception: BaseException | None = None, kafka_message: Any = None) -> None:
        error = KafkaError(internal("_KEY_DESERIALIZATION"), f"{exception}{_where(kafka_message)}")
        super().__init__(error, exception=exception, kafka_message=kafka_message)


class ValueDeserializationError(ConsumeError, SerializationError):
    """A consumed message's value did not deserialize."""

    def __init__(self, exception: BaseException | None = None, kafka_message: Any = None) -> None:
        error = KafkaError(
            internal("_VALUE_DESERIALIZATION"), f"{exception}{_where(kafka_message)}"
        )
        super().__init__(error, exception=exception, kafka_message=kafka_message)


class KeySerializationError(ProduceError, SerializationError):
    """A key did not serialize."""

    def __init__(self, exception: BaseException | None = None) -> None:
        super().__init__(KafkaError(internal("_KEY_SERIALIZATION"), str(exception)), exception)


class ValueSerializationError(ProduceError, SerializationError):
    """A value did not serialize."""

    def __init__(self, exception: BaseException | None = None) -> None:
        super().__init__(KafkaError(internal("_VALUE_SERIALIZATION"), str(exception)), exception)
