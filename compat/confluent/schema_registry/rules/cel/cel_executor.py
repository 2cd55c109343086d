"""confluent-kafka's ``CelExecutor``: a ``CEL`` rule's expression evaluated
with the message bound to ``message`` (cel-python; the ``rules`` extra).

Rules: a record (a dict, or a Protobuf message, seen as its fields) becomes a
CEL map, a list a CEL list, bytes CEL bytes, numbers and strings themselves;
a CONDITION's expression must give a bool, a TRANSFORM's result becomes the
message (back in Python's types). ``guard ; expr`` runs ``expr`` only where
``guard`` holds. Each expression is compiled once.
"""

from __future__ import annotations

import datetime
import decimal
import threading
from typing import Any

import celpy
from celpy import celtypes

from ...common.serde import RuleContext, RuleExecutor
from ...rule_registry import RuleRegistry

__all__ = ["CelExecutor", "from_cel", "to_cel"]


def to_cel(value: Any) -> Any:
    """``value`` in CEL's types (see the module doc)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float | decimal.Decimal):
        return celtypes.DoubleType(float(value))
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, bytes | bytearray):
        return celtypes.BytesType(bytes(value))
    if isinstance(value, datetime.datetime):
        return celtypes.TimestampType(value)
    if isinstance(value, dict):
        return celtypes.MapType({celtypes.StringType(str(k)): to_cel(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return celtypes.ListType([to_cel(v) for v in value])
    if hasattr(value, "DESCRIPTOR") and hasattr(value, "ListFields"):
        return _message_to_cel(value)
    if hasattr(value, "items"):  # a Protobuf map
        return to_cel(dict(value.items()))
    if hasattr(value, "__len__") and hasattr(value, "__getitem__"):  # a repeated field
        return to_cel(list(value))
    return celtypes.StringType(str(value))


def _repeated(fd: Any) -> bool:
    found = getattr(fd, "is_repeated", None)  # (protobuf 7 has no label)
    return bool(found) if found is not None else bool(fd.label == fd.LABEL_REPEATED)


def _message_to_cel(message: Any) -> Any:
    """A Protobuf message as a CEL map of every field (unset ones at their
    defaults), by the field's name, numbers as numbers (not JSON's strings)."""
    out = {}
    for fd in message.DESCRIPTOR.fields:
        value = getattr(message, fd.name)
        if fd.message_type is not None and not _repeated(fd) and not message.HasField(fd.name):
            value = None
        out[celtypes.StringType(fd.name)] = to_cel(value)
    return celtypes.MapType(out)


def from_cel(value: Any) -> Any:
    """A CEL value in Python's types."""
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.MapType | dict):
        return {from_cel(k): from_cel(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType | list):
        return [from_cel(v) for v in value]
    kinds: tuple[Any, ...] = (bytes, str, int, float)  # (celpy's types subclass these)
    for kind in kinds:
        if isinstance(value, kind):
            return kind(value)
    return value


def _is_condition(ctx: RuleContext) -> bool:
    kind = ctx.rule.kind
    return str(getattr(kind, "value", kind)).upper() == "CONDITION"


class CelExecutor(RuleExecutor):
    """Runs ``CEL`` rules; ``CelExecutor.register()`` adds it to the global rule registry."""

    def __init__(self) -> None:
        self._env = celpy.Environment()
        self._programs: dict[str, Any] = {}
        self._lock = threading.Lock()

    def type(self) -> str:
        return "CEL"

    def _program(self, expr: str) -> Any:
        with self._lock:
            program = self._programs.get(expr)
            if program is None:
                program = self._programs[expr] = self._env.program(self._env.compile(expr))
            return program

    def execute(self, ctx: RuleContext, message: Any, args: dict[str, Any]) -> Any:
        """The rule's expression evaluated with ``args`` bound (in Python's
        types). ``guard ; expr``: where the guard is false, a condition holds
        and a transform leaves ``message`` as it is. No expression: ``message``."""
        expr = ctx.rule.expr
        if not expr:
            return message
        bound = {name: to_cel(value) for name, value in args.items()}
        guard, sep, rest = expr.partition(";")
        if sep:
            if guard.strip() and not self._program(guard).evaluate(bound):
                return True if _is_condition(ctx) else message
            expr = rest
        result = from_cel(self._program(expr).evaluate(bound))
        if not _is_condition(ctx) and isinstance(result, dict) and hasattr(message, "DESCRIPTOR"):
            from google.protobuf.json_format import ParseDict

            return ParseDict(result, type(message)())  # (a transform of a Protobuf message)
        return result

    def transform(self, ctx: RuleContext, message: Any) -> Any:
        return self.execute(ctx, message, {"message": message})

    @classmethod
    def register(cls) -> None:
        """Add a CelExecutor to the global rule registry."""
        RuleRegistry.register_rule_executor(cls())
