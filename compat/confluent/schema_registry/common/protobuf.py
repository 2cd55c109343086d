"""confluent-kafka's ``confluent_kafka.schema_registry.common.protobuf``: what
the sync and async Protobuf serdes share, and Confluent's ``confluent.type.Decimal``.

``confluent.type.Decimal`` (``bytes value = 1; uint32 precision = 2; int32
scale = 3``) holds a decimal as its unscaled value, big-endian two's
complement in the fewest bytes (Java's ``BigInteger.toByteArray``), and its
scale: ``12.34`` is ``1234`` at scale 2.
"""

from __future__ import annotations

import functools
from decimal import Decimal
from typing import Any

from trafka.sdk.schemas.protobuf import message_indexes

__all__ = [
    "_create_index_array",
    "decimal_message_class",
    "decimal_to_protobuf",
    "protobuf_to_decimal",
]

# A scale wider than this many digits is refused (a value Java's BigInteger cannot hold either).
_MAX_DIGITS = 1 << 26


def _create_index_array(descriptor: Any) -> list[int]:
    """The message indexes of a message descriptor in its file (as confluent-kafka names it)."""
    return list(message_indexes(descriptor))


@functools.cache
def decimal_message_class() -> Any:
    """The ``confluent.type.Decimal`` message class (built in a pool of its own)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(
        name="confluent/type/decimal.proto", package="confluent.type", syntax="proto3"
    )
    msg = fdp.message_type.add(name="Decimal")
    field = descriptor_pb2.FieldDescriptorProto
    for name, number, kind in (
        ("value", 1, field.TYPE_BYTES),
        ("precision", 2, field.TYPE_UINT32),
        ("scale", 3, field.TYPE_INT32),
    ):
        msg.field.add(name=name, number=number, type=kind, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("confluent.type.Decimal"))


def decimal_to_protobuf(value: Decimal, scale: int) -> Any:
    """``value`` as a ``confluent.type.Decimal`` at ``scale``.

    Raises:
        ValueError: ``value`` has more decimal places than ``scale`` (it would
            be rounded), or the scale is too wide.
    """
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"{value} is not a finite decimal")
    unscaled = int("".join(map(str, digits)) or "0")
    shift = exponent + scale
    if shift >= 0:
        if shift + len(digits) > _MAX_DIGITS:
            raise ValueError("Scale provided is too wide for the decimal")
        unscaled *= 10**shift
    else:
        unscaled, rest = divmod(unscaled, 10**-shift)
        if rest:
            raise ValueError("Scale provided does not match the decimal")
    if sign:
        unscaled = -unscaled
    size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    out = decimal_message_class()()
    out.value = unscaled.to_bytes(size, "big", signed=True)
    out.precision = len(str(abs(unscaled)))
    out.scale = scale
    return out


def protobuf_to_decimal(value: Any) -> Decimal:
    """The decimal a ``confluent.type.Decimal`` holds (exactly)."""
    unscaled = int.from_bytes(value.value, "big", signed=True)
    digits = tuple(int(d) for d in str(abs(unscaled)))
    return Decimal((1 if unscaled < 0 else 0, digits, -value.scale))
