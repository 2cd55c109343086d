"""The SDK's schema serdes as confluent-kafka's: a failure raised as
:class:`~trafka.compat.confluent.serialization.SerializationError` (a
``KafkaException``, as confluent-kafka's serdes raise), the SDK's error its
``__cause__`` (its topic, subject, partition and offset as attributes)."""

from __future__ import annotations

from typing import Any, TypeVar

from trafka.sdk.errors import SerializationError as _SdkSerializationError

from ..serialization import Deserializer, SerializationError, Serializer

__all__ = ["as_confluent"]

T = TypeVar("T", bound=type)


def as_confluent(base: T, kind: type, module: str) -> T:
    """``base`` (an SDK serializer or deserializer class) raising
    confluent-kafka's SerializationError, and a subclass of ``kind``
    (:class:`Serializer` or :class:`Deserializer`), named in ``module``."""
    assert kind in (Serializer, Deserializer)

    def __call__(self: Any, data: Any, ctx: Any = None) -> Any:
        try:
            return base.__call__(self, data, ctx)
        except _SdkSerializationError as exc:
            raise SerializationError(str(exc)) from exc

    made = type(
        base.__name__,
        (base, kind),
        {"__call__": __call__, "__doc__": base.__doc__, "__module__": module},
    )
    return made  # type: ignore[return-value]
