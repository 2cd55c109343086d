"""confluent-kafka's ``CelFieldExecutor``: a ``CEL_FIELD`` rule's expression
evaluated on each scalar field the rule's tags select (every field without
tags), with ``value``, ``fullName``, ``name``, ``typeName``, ``tags`` and
``message`` (the record holding the field) bound; a TRANSFORM's result
replaces the value, a CONDITION's False fails the rule."""

from __future__ import annotations

from typing import Any

from ...common.serde import FieldContext, FieldRuleExecutor, FieldTransform, RuleContext
from ...rule_registry import RuleRegistry
from .cel_executor import CelExecutor

__all__ = ["CelFieldExecutor"]


class CelFieldExecutor(FieldRuleExecutor):
    """Runs ``CEL_FIELD`` rules; ``CelFieldExecutor.register()`` adds it to the global rule registry."""

    def __init__(self) -> None:
        self._executor = CelExecutor()

    def type(self) -> str:
        return "CEL_FIELD"

    def new_transform(self, ctx: RuleContext) -> FieldTransform:
        return self._field

    def _field(self, ctx: RuleContext, field: FieldContext, value: Any) -> Any:
        if not field.is_primitive():
            return value
        args = {
            "value": value,
            "fullName": field.full_name,
            "name": field.name,
            "typeName": field.type_name(),
            "tags": sorted(field.tags),
            "message": field.containing_message,
        }
        return self._executor.execute(ctx, value, args)

    @classmethod
    def register(cls) -> None:
        """Add a CelFieldExecutor to the global rule registry."""
        RuleRegistry.register_rule_executor(cls())
