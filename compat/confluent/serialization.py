"""confluent-kafka's ``confluent_kafka.serialization``: the serializer
contract (``serializer(obj, ctx) -> bytes``), the base classes custom serdes
subclass, and the string, integer and double serdes.

Rules (confluent-kafka's): a serde's failure is a :class:`SerializationError`,
a :class:`~trafka.compat.confluent.KafkaException`; None is Kafka's null
both ways; the integer serdes are a big-endian int32, the double serdes an
IEEE 754 binary64.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from typing import Any

from ._errors import KafkaException

__all__ = [
    "Deserializer",
    "DeserializerBuilder",
    "DoubleDeserializer",
    "DoubleSerializer",
    "IntegerDeserializer",
    "IntegerSerializer",
    "MessageField",
    "SerializationContext",
    "SerializationError",
    "Serializer",
    "SerializerBuilder",
    "StringDeserializer",
    "StringSerializer",
]


class SerializationError(KafkaException):
    """A key or value could not be serialized or deserialized."""


class MessageField(enum.StrEnum):
    """Which part of a message a serde works on (a str: ``"key"``...)."""

    NONE = "none"
    KEY = "key"
    VALUE = "value"


class SerializationContext:
    """What a serde is told: the topic, the field, the headers."""

    def __init__(self, topic: str, field: Any, headers: Any = None) -> None:
        self.topic = topic
        self.field = field
        self.headers = headers


class Serializer:
    """The base of serializers: ``serializer(obj, ctx) -> bytes | None``."""

    __slots__: list[str] = []

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        raise NotImplementedError

    def set_cluster_id_resolver(self, resolver: Callable[[], Any]) -> None:
        """Told how to learn the cluster's id (used by none of these serdes)."""

    def close(self) -> None:
        """Release what the serializer holds (nothing, here)."""


class Deserializer:
    """The base of deserializers: ``deserializer(value, ctx) -> object``."""

    __slots__: list[str] = []

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        raise NotImplementedError

    def set_cluster_id_resolver(self, resolver: Callable[[], Any]) -> None:
        """Told how to learn the cluster's id (used by none of these serdes)."""

    def close(self) -> None:
        """Release what the deserializer holds (nothing, here)."""


class SerializerBuilder:
    """Builds a serializer from a client's configuration: ``build(conf,
    is_key) -> (serializer, the configuration left for the client)``."""

    __slots__: list[str] = []

    def build(self, conf: dict[str, Any], is_key: bool) -> tuple[Serializer, dict[str, Any]]:
        raise NotImplementedError


class DeserializerBuilder:
    """Builds a deserializer from a client's configuration (see :class:`SerializerBuilder`)."""

    __slots__: list[str] = []

    def build(self, conf: dict[str, Any], is_key: bool) -> tuple[Deserializer, dict[str, Any]]:
        raise NotImplementedError


def _pack(fmt: str, obj: Any) -> bytes | None:
    if obj is None:
        return None
    try:
        return struct.pack(fmt, obj)
    except struct.error as exc:
        raise SerializationError(str(exc)) from None


def _unpack(fmt: str, value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return struct.unpack(fmt, value)[0]
    except struct.error as exc:
        raise SerializationError(str(exc)) from None


class StringSerializer(Serializer):
    """A str as bytes in ``codec`` (UTF-8 by default)."""

    __slots__ = ["codec"]

    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = codec

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if obj is None:
            return None
        try:
            encoded: bytes = obj.encode(self.codec)
        except UnicodeError as exc:
            raise SerializationError(str(exc)) from None
        return encoded


class StringDeserializer(Deserializer):
    """Bytes in ``codec`` (UTF-8 by default) as a str."""

    __slots__ = ["codec"]

    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = codec

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if value is None:
            return None
        try:
            return value.decode(self.codec)
        except UnicodeError as exc:
            raise SerializationError(str(exc)) from None


class IntegerSerializer(Serializer):
    """An int as a big-endian int32."""

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        return _pack(">i", obj)


class IntegerDeserializer(Deserializer):
    """A big-endian int32 as an int."""

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        return _unpack(">i", value)


class DoubleSerializer(Serializer):
    """A float as an IEEE 754 binary64, big-endian."""

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        return _pack(">d", obj)


class DoubleDeserializer(Deserializer):
    """A big-endian IEEE 754 binary64 as a float."""

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        return _unpack(">d", value)
