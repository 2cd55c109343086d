"""confluent-kafka's ``JsonataExecutor``: a ``JSONATA`` rule's expression
applied to the message (jsonata-python; the ``rules`` extra); its result is
the message. Each expression is compiled once."""

from __future__ import annotations

import threading
from typing import Any

import jsonata

from ...common.serde import RuleContext, RuleExecutor
from ...rule_registry import RuleRegistry

__all__ = ["JsonataExecutor"]


class JsonataExecutor(RuleExecutor):
    """Runs ``JSONATA`` rules; ``JsonataExecutor.register()`` adds it to the global rule registry."""

    def __init__(self) -> None:
        self._compiled: dict[str, Any] = {}
        self._lock = threading.Lock()

    def type(self) -> str:
        return "JSONATA"

    def transform(self, ctx: RuleContext, message: Any) -> Any:
        """``message`` after the rule's expression.

        Raises:
            ValueError: the rule has no expression.
        """
        expr = ctx.rule.expr
        if not expr:
            raise ValueError("the JSONATA rule has no expression")
        with self._lock:
            compiled = self._compiled.get(expr)
            if compiled is None:
                compiled = self._compiled[expr] = jsonata.Jsonata(expr)
        return compiled.evaluate(message)

    @classmethod
    def register(cls) -> None:
        """Add a JsonataExecutor to the global rule registry."""
        RuleRegistry.register_rule_executor(cls())
