"""confluent-kafka's ``confluent_kafka.serialization``: the serializer
contract (``serializer(obj, ctx) -> bytes``) and its string and integer
serializers."""

from __future__ import annotations

import struct
from typing import Any

__all__ = [
    "IntegerDeserializer",
    "IntegerSerializer",
    "MessageField",
    "SerializationContext",
    "SerializationError",
    "StringDeserializer",
    "StringSerializer",
]


class SerializationError(Exception):
    """A key or value could not be serialized or deserialized."""


class MessageField:
    NONE = "none"
    KEY = "key"
    VALUE = "value"


class SerializationContext:
    """What a serializer is told: the topic, the field, the headers."""

    def __init__(self, topic: str, field: str, headers: Any = None) -> None:
        self.topic = topic
        self.field = field
        self.headers = headers


class StringSerializer:
    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = codec

    def __call__(self, obj: Any, ctx: Any = None) -> bytes | None:
        if obj is None:
            return None
        if not isinstance(obj, str):
            raise SerializationError(f"Unsupported type {type(obj)}")
        return obj.encode(self.codec)


class StringDeserializer:
    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = codec

    def __call__(self, value: bytes | None, ctx: Any = None) -> str | None:
        return None if value is None else value.decode(self.codec)


class IntegerSerializer:
    def __call__(self, obj: Any, ctx: Any = None) -> bytes | None:
        return None if obj is None else struct.pack(">i", obj)


class IntegerDeserializer:
    def __call__(self, value: bytes | None, ctx: Any = None) -> int | None:
        if value is None:
            return None
        if len(value) != 4:
            raise SerializationError("IntegerDeserializer: the value is not 4 bytes")
        return int(struct.unpack(">i", value)[0])
