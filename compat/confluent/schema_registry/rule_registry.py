"""confluent-kafka's ``confluent_kafka.schema_registry.rule_registry``: the rule
executors and actions a serde may run, by their type name.

A serde given no registry uses the process-wide one
(:meth:`RuleRegistry.get_global_instance`), where ``CelExecutor.register()``
and the like put theirs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .common.serde import RuleAction, RuleExecutor

__all__ = ["RuleOverride", "RuleRegistry"]


@dataclass(frozen=True)
class RuleOverride:
    """Settings that replace a rule type's own: its actions, or disabling it."""

    type: str
    on_success: str | None = None
    on_failure: str | None = None
    disabled: bool | None = None


class RuleRegistry:
    """Rule executors, rule actions and overrides, each by its type name."""

    __slots__ = ("_actions", "_executors", "_lock", "_overrides")

    def __init__(self) -> None:
        self._executors: dict[str, RuleExecutor] = {}
        self._actions: dict[str, RuleAction] = {}
        self._overrides: dict[str, RuleOverride] = {}
        self._lock = threading.Lock()

    def register_executor(self, rule_executor: RuleExecutor) -> None:
        """Run ``rule_executor`` for the rules of its ``type()``."""
        with self._lock:
            self._executors[rule_executor.type()] = rule_executor

    def get_executor(self, name: str) -> RuleExecutor | None:
        """The executor of rule type ``name``, if registered."""
        with self._lock:
            return self._executors.get(name)

    def get_executors(self) -> list[RuleExecutor]:
        """Every registered executor."""
        with self._lock:
            return list(self._executors.values())

    def register_action(self, rule_action: RuleAction) -> None:
        """Run ``rule_action`` for the actions named by its ``type()``."""
        with self._lock:
            self._actions[rule_action.type()] = rule_action

    def get_action(self, name: str) -> RuleAction | None:
        """The action ``name``, if registered."""
        with self._lock:
            return self._actions.get(name)

    def get_actions(self) -> list[RuleAction]:
        """Every registered action."""
        with self._lock:
            return list(self._actions.values())

    def register_override(self, rule_override: RuleOverride) -> None:
        """Override the settings of the rules of ``rule_override.type``."""
        with self._lock:
            self._overrides[rule_override.type] = rule_override

    def get_override(self, name: str) -> RuleOverride | None:
        """The override of rule type ``name``, if any."""
        with self._lock:
            return self._overrides.get(name)

    def get_overrides(self) -> list[RuleOverride]:
        """Every override."""
        with self._lock:
            return list(self._overrides.values())

    def clear(self) -> None:
        """Forget every executor, action and override."""
        with self._lock:
            self._executors.clear()
            self._actions.clear()
            self._overrides.clear()

    @staticmethod
    def get_global_instance() -> RuleRegistry:
        """The process-wide registry (what serdes use by default)."""
        return _global_instance

    @staticmethod
    def register_rule_executor(rule_executor: RuleExecutor) -> None:
        """Register ``rule_executor`` in the process-wide registry."""
        _global_instance.register_executor(rule_executor)

    @staticmethod
    def register_rule_action(rule_action: RuleAction) -> None:
        """Register ``rule_action`` in the process-wide registry."""
        _global_instance.register_action(rule_action)

    @staticmethod
    def register_rule_override(rule_override: RuleOverride) -> None:
        """Register ``rule_override`` in the process-wide registry."""
        _global_instance.register_override(rule_override)


# The process-wide registry (a module global, as confluent-kafka's tests clear it).
_global_instance = RuleRegistry()
