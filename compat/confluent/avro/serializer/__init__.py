"""confluent-kafka's ``confluent_kafka.avro.serializer``: the legacy
serializer's errors (:mod:`.message_serializer` has the serializer)."""

from __future__ import annotations

__all__ = ["KeySerializerError", "SerializerError", "ValueSerializerError"]


class SerializerError(Exception):
    """Encoding or decoding a record failed; ``str()`` is the message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(error={self.message})"


class KeySerializerError(SerializerError):
    """A record's key could not be encoded."""


class ValueSerializerError(SerializerError):
    """A record's value could not be encoded."""
