"""The proxy's authorization rules, I/O-free: who may do what to which topic,
group, transactional id or the cluster, decided as Kafka's StandardAuthorizer
decides for its ACLs (KIP-11, KIP-290 prefixed patterns, KIP-50).

Rules (what :meth:`Rules.allowed` answers):

* A rule is an ACL: a principal (``User:alice``; ``User:*`` is every
  principal, ``User:ANONYMOUS`` a client that did not authenticate), a host
  (``*``: any), an operation (``ALL``: every one), a permission (allow or
  deny) and a resource pattern: a type (``topic``, ``group``,
  ``transactional_id``, ``cluster``), a name and a pattern type: ``literal``
  (the name itself; ``*`` is every name) or ``prefixed`` (every name starting
  with it).
* Super users are allowed everything.
* A deny rule that matches wins over any allow rule. A deny names its
  operation exactly (or ``ALL``).
* An allow rule for READ, WRITE, DELETE or ALTER also allows DESCRIBE; one
  for ALTER_CONFIGS also allows DESCRIBE_CONFIGS (Kafka's implied operations).
* When no rule, of any principal, names the resource, the default decides:
  ``deny`` (Kafka's ``allow.everyone.if.no.acl.found=false``, its default) or
  ``allow``. When some rule names it, only a matching allow lets the request in.
"""

from __future__ import annotations

import ipaddress
import json
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trafka.sdk import ConfigError

__all__ = [
    "ANONYMOUS",
    "OPERATIONS",
    "RESOURCE_TYPES",
    "Rule",
    "Rules",
    "parse_rules",
]

ANONYMOUS = "User:ANONYMOUS"
CLUSTER_NAME = "kafka-cluster"

# Kafka's AclOperation codes (the bits of authorized_operations fields).
OPERATIONS: dict[str, int] = {
    "ALL": 2,
    "READ": 3,
    "WRITE": 4,
    "CREATE": 5,
    "DELETE": 6,
    "ALTER": 7,
    "DESCRIBE": 8,
    "CLUSTER_ACTION": 9,
    "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11,
    "IDEMPOTENT_WRITE": 12,
    "CREATE_TOKENS": 13,
    "DESCRIBE_TOKENS": 14,
    "TWO_PHASE_COMMIT": 15,
}
RESOURCE_TYPES = ("topic", "group", "transactional_id", "cluster")
# What an allow rule of an operation allows besides it.
_IMPLIED = {
    "DESCRIBE": ("READ", "WRITE", "DELETE", "ALTER"),
    "DESCRIBE_CONFIGS": ("ALTER_CONFIGS",),
}
# The operations a resource type has (the ones its authorized_operations report).
TYPE_OPERATIONS = {
    "topic": (
        "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
    ),
    "group": ("READ", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
    "transactional_id": ("WRITE", "DESCRIBE", "TWO_PHASE_COMMIT"),
    "cluster": (
        "CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE", "CREATE_TOKENS", "DESCRIBE_TOKENS",
    ),
}  # fmt: skip
_DECISIONS_KEPT = 100_000  # remembered decisions (then forgotten all at once)
_RULE_KEYS = {"principal", "permission", "operation", "resource", "name", "pattern", "host"}


@dataclass(frozen=True, slots=True)
class Rule:
    """One ACL (see the module's rules)."""

    principal: str
    allow: bool
    operation: str
    resource: str
    name: str
    prefixed: bool = False
    host: str = "*"

    def names(self, resource: str, name: str) -> bool:
        """Whether the rule's pattern covers ``resource`` ``name``."""
        if resource != self.resource:
            return False
        if self.prefixed:
            return name.startswith(self.name)
        return self.name in ("*", name)

    def applies(self, principal: str, host: str | None) -> bool:
        """Whether the rule is about this principal, from this host."""
        if self.principal not in ("User:*", principal):
            return False
        return self.host == "*" or (host is not None and _same_host(self.host, host))

    def show(self) -> str:
        pattern = "prefixed" if self.prefixed else "literal"
        permission = "allow" if self.allow else "deny"
        return (
            f"{permission} {self.principal} {self.operation} on {self.resource} "
            f"{pattern} {self.name!r} from {self.host}"
        )


def _same_host(rule_host: str, host: str) -> bool:
    try:
        return ipaddress.ip_address(rule_host) == ipaddress.ip_address(host)
    except ValueError:
        return rule_host == host


class Rules:
    """A set of rules and how the proxy decides with them.

    Args:
        rules: the ACLs.
        super_users: principals allowed everything.
        default_allow: the decision for a resource no rule names.
    """

    def __init__(
        self, rules: Iterable[Rule], super_users: Iterable[str] = (), default_allow: bool = False
    ) -> None:
        self.rules = tuple(rules)
        self.super_users = frozenset(super_users)
        self.default_allow = default_allow
        self._by_type: dict[str, tuple[Rule, ...]] = {
            t: tuple(r for r in self.rules if r.resource == t) for t in RESOURCE_TYPES
        }
        # Literal names' rules by name; the others (``*``, prefixes) scanned.
        self._literal: dict[str, dict[str, list[Rule]]] = {t: {} for t in RESOURCE_TYPES}
        self._scanned: dict[str, list[Rule]] = {t: [] for t in RESOURCE_TYPES}
        for r in self.rules:
            if r.prefixed or r.name == "*":
                self._scanned[r.resource].append(r)
            else:
                self._literal[r.resource].setdefault(r.name, []).append(r)
        # Decisions already made (the rules never change: a reload makes new Rules).
        self._decided: dict[tuple[str, str | None, str, str, str], bool] = {}

    def allowed(
        self, principal: str, host: str | None, operation: str, resource: str, name: str
    ) -> bool:
        """Whether ``principal`` connected from ``host`` may do ``operation``
        on ``resource`` ``name`` (see the module's rules)."""
        key = (principal, host, operation, resource, name)
        known = self._decided.get(key)
        if known is None:
            known = self._decide(principal, host, operation, resource, name)
            if len(self._decided) >= _DECISIONS_KEPT:
                self._decided.clear()
            self._decided[key] = known
        return known

    def _decide(
        self, principal: str, host: str | None, operation: str, resource: str, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        named = False
        allow = False
        implying = _IMPLIED.get(operation, ())
        literal = self._literal[resource].get(name, ())
        scanned = (r for r in self._scanned[resource] if r.names(resource, name))
        for rule in (*literal, *scanned):
            named = True
            if not rule.applies(principal, host):
                continue
            if rule.operation in ("ALL", operation):
                if not rule.allow:
                    return False
                allow = True
            elif rule.allow and rule.operation in implying:
                allow = True
        return allow if named else self.default_allow

    def allowed_on_any(
        self, principal: str, host: str | None, operation: str, resource: str
    ) -> bool:
        """Whether some ``resource`` may be ``operation``-ed by ``principal``:
        Kafka's ``authorizeByResourceType`` (an idempotent producer's
        InitProducerId without IDEMPOTENT_WRITE, KIP-679): an allow rule whose
        pattern no deny rule covers whole."""
        if principal in self.super_users:
            return True
        mine = [
            r
            for r in self._by_type[resource]
            if r.applies(principal, host) and r.operation in ("ALL", operation)
        ]
        denies = [r for r in mine if not r.allow]
        if any(not d.prefixed and d.name == "*" for d in denies):
            return False
        for rule in mine:
            if not rule.allow:
                continue
            covered = any(
                (d.prefixed and rule.name.startswith(d.name))
                or (not d.prefixed and not rule.prefixed and d.name == rule.name)
                for d in denies
            )
            if not covered:
                return True
        return self.default_allow and not self._by_type[resource]

    def authorized_operations(
        self, principal: str, host: str | None, resource: str, name: str
    ) -> int:
        """The bits of the operations allowed, as Kafka's authorized_operations
        fields give them (KIP-430)."""
        bits = 0
        for op in TYPE_OPERATIONS[resource]:
            if self.allowed(principal, host, op, resource, name):
                bits |= 1 << OPERATIONS[op]
        return bits


def _operation(raw: Any) -> str | None:
    if not isinstance(raw, str):
        return None
    text = raw.strip().upper()
    if text in OPERATIONS:
        return text
    # CamelCase as Kafka's tools print them (DescribeConfigs, IdempotentWrite).
    snake = "".join(("_" + c if c.isupper() and i else c) for i, c in enumerate(raw.strip()))
    snake = snake.upper().replace("-", "_")
    return snake if snake in OPERATIONS else None


def _resource(raw: Any) -> str | None:
    if not isinstance(raw, str):
        return None
    text = raw.strip().lower().replace("-", "_").replace(" ", "_")
    text = {"transactionalid": "transactional_id", "txn": "transactional_id"}.get(text, text)
    return text if text in RESOURCE_TYPES else None


def _rule(entry: Any, where: str, problems: list[str]) -> list[Rule]:
    """The rules one entry makes (one per operation it names), or none with
    its problems added."""
    if not isinstance(entry, Mapping):
        problems.append(f"{where}: a rule is a table, not {type(entry).__name__}")
        return []
    found = len(problems)
    extra = sorted(set(entry) - _RULE_KEYS)
    if extra:
        problems.append(f"{where}: unknown key {extra[0]!r} ({', '.join(sorted(_RULE_KEYS))})")
    principal = entry.get("principal")
    if not isinstance(principal, str) or ":" not in principal or principal.endswith(":"):
        problems.append(f"{where}: principal {principal!r} is not TYPE:name (User:alice, User:*)")
    permission = str(entry.get("permission", "allow")).lower()
    if permission not in ("allow", "deny"):
        problems.append(f"{where}: permission {entry.get('permission')!r} is not allow nor deny")
    raw_ops = entry.get("operation")
    ops_list = raw_ops if isinstance(raw_ops, list) else [raw_ops]
    operations = [_operation(o) for o in ops_list]
    for raw, op in zip(ops_list, operations, strict=True):
        if op is None:
            problems.append(f"{where}: operation {raw!r} is not one of {', '.join(OPERATIONS)}")
    resource = _resource(entry.get("resource"))
    if resource is None:
        problems.append(
            f"{where}: resource {entry.get('resource')!r} is not one of {', '.join(RESOURCE_TYPES)}"
        )
    name = entry.get("name", CLUSTER_NAME if resource == "cluster" else None)
    if not isinstance(name, str) or not name:
        problems.append(f"{where}: name {name!r} is not a resource name")
    pattern = str(entry.get("pattern", "literal")).lower()
    if pattern not in ("literal", "prefixed"):
        problems.append(f"{where}: pattern {entry.get('pattern')!r} is not literal nor prefixed")
    host = entry.get("host", "*")
    if not isinstance(host, str) or not host:
        problems.append(f"{where}: host {host!r} is not an address nor *")
    if len(problems) > found:
        return []
    assert isinstance(principal, str) and isinstance(name, str) and resource is not None
    return [
        Rule(principal, permission == "allow", op, resource, name, pattern == "prefixed", host)
        for op in operations
        if op is not None
    ]


def _read_file(path: str, problems: list[str]) -> list[Any]:
    """The rules of a TOML (``[[rules]]`` tables) or JSON (a list) file."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        problems.append(f"rules_file {path!r} cannot be read: {exc.strerror or exc}")
        return []
    try:
        loaded: Any = json.loads(text) if path.endswith(".json") else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        problems.append(f"rules_file {path!r} cannot be read: {exc}")
        return []
    entries = loaded.get("rules", []) if isinstance(loaded, dict) else loaded
    if not isinstance(entries, list):
        problems.append(f"rules_file {path!r}: its rules are not a list")
        return []
    return entries


def parse_rules(settings: Mapping[str, Any], problems: list[str]) -> Rules | None:
    """The :class:`Rules` the filter's settings give (``rules``, a list of
    tables; ``rules_file``; ``super_users``; ``default``); None, with every
    problem added to ``problems``, when they have some."""
    found = len(problems)
    entries: list[tuple[str, Any]] = []
    inline = settings.get("rules", [])
    if not isinstance(inline, list):
        problems.append("rules is not a list of tables")
        inline = []
    entries += [(f"rules[{i}]", e) for i, e in enumerate(inline)]
    path = settings.get("rules_file")
    if path is not None:
        if not isinstance(path, str):
            problems.append(f"rules_file {path!r} is not a path")
        else:
            entries += [
                (f"{path}: rules[{i}]", e) for i, e in enumerate(_read_file(path, problems))
            ]
    rules: list[Rule] = []
    for where, entry in entries:
        rules += _rule(entry, where, problems)
    supers = settings.get("super_users", [])
    if not isinstance(supers, list) or not all(isinstance(s, str) and ":" in s for s in supers):
        problems.append(f"super_users {supers!r} is not a list of principals (User:admin)")
        supers = []
    default = settings.get("default", "deny")
    if default not in ("allow", "deny"):
        problems.append(f"default {default!r} is not allow nor deny")
    if len(problems) > found:
        return None
    return Rules(rules, supers, default == "allow")


def check(settings: Mapping[str, Any]) -> Rules:
    """The rules of ``settings``.

    Raises:
        ConfigError: every problem of them.
    """
    problems: list[str] = []
    rules = parse_rules(settings, problems)
    if rules is None:
        raise ConfigError.of(problems)
    return rules


def rule_lines(rules: Sequence[Rule]) -> list[str]:
    """The rules as one line each (logs, ``--check-config``)."""
    return [r.show() for r in rules]
