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


# -- field rules: the walk over a Protobuf message ----------------------------------------


def get_type(fd: Any) -> Any:
    """The :class:`~.serde.FieldType` of a field descriptor."""
    from google.protobuf.descriptor import FieldDescriptor as F

    from .serde import FieldType

    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        return FieldType.MAP
    kinds = {
        F.TYPE_MESSAGE: FieldType.RECORD,
        F.TYPE_ENUM: FieldType.ENUM,
        F.TYPE_STRING: FieldType.STRING,
        F.TYPE_BYTES: FieldType.BYTES,
        F.TYPE_FLOAT: FieldType.FLOAT,
        F.TYPE_DOUBLE: FieldType.DOUBLE,
        F.TYPE_BOOL: FieldType.BOOLEAN,
    }
    for ints, kind in (
        (
            (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_UINT32, F.TYPE_FIXED32, F.TYPE_SFIXED32),
            FieldType.INT,
        ),
        (
            (F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_UINT64, F.TYPE_FIXED64, F.TYPE_SFIXED64),
            FieldType.LONG,
        ),
    ):
        for t in ints:
            kinds[t] = kind
    return kinds.get(fd.type, FieldType.NULL)


def _repeated(fd: Any) -> bool:
    # (protobuf 6 has is_repeated, and label only before 7)
    found = getattr(fd, "is_repeated", None)
    return bool(found) if found is not None else bool(fd.label == fd.LABEL_REPEATED)


def transform(ctx: Any, message: Any, field_transform: Any) -> Any:
    """``message`` after a field rule: each field entered in ``ctx`` by its
    full name (``shop.Item.sku``), nested messages, repeated fields and maps
    walked, each scalar given to ``field_transform`` (a field set only when it
    has presence and is set). Field tags come from the rule alone: the
    ``confluent.field_meta`` option is not read, so a rule with tags applies
    to no field."""
    from google.protobuf.message import Message

    from .serde import RuleConditionError

    if isinstance(message, list):
        return [transform(ctx, m, field_transform) for m in message]
    if isinstance(message, dict):
        return {k: transform(ctx, v, field_transform) for k, v in message.items()}
    if isinstance(message, Message):
        for fd in message.DESCRIPTOR.fields:
            if fd.has_presence and not message.HasField(fd.name):
                continue
            ctx.enter_field(message, fd.full_name, fd.name, get_type(fd), ())
            try:
                value = getattr(message, fd.name)
                if get_type(fd).value == "MAP":
                    value = {k: value[k] for k in value}
                elif _repeated(fd):
                    value = list(value)
                new = transform(ctx, value, field_transform)
                if str(getattr(ctx.rule.kind, "value", ctx.rule.kind)).upper() == "CONDITION":
                    if new is False:
                        raise RuleConditionError(ctx.rule)
                elif not isinstance(new, Message):  # (a nested message was changed in place)
                    _set(message, fd, new)
            finally:
                ctx.exit_field()
        return message
    field = ctx.current_field()
    if field is not None:
        rule_tags = set(getattr(ctx.rule, "tags", None) or ())
        if not rule_tags or rule_tags & field.tags:
            return field_transform(ctx, field, message)
    return message


def _set(message: Any, fd: Any, value: Any) -> None:
    if isinstance(value, dict):
        target = getattr(message, fd.name)
        if fd.message_type.fields_by_name["value"].message_type is None:
            message.ClearField(fd.name)
            target.update(value)
        return  # (map values that are messages were changed in place)
    if isinstance(value, list):
        if fd.message_type is None:
            message.ClearField(fd.name)
            getattr(message, fd.name).extend(value)
        return
    setattr(message, fd.name, value)


def field_transformer(parsed: Any) -> Any:
    """The walk of :func:`transform` (over the message's own descriptor)."""

    def walk(ctx: Any, field_transform: Any, message: Any) -> Any:
        return transform(ctx, message, field_transform)

    return walk
