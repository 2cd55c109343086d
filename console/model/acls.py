"""ACLs as the console shows and takes them: the ACL form parsed into a
binding, and bindings in a stable order.

Rules:

* The form offers only what a binding may hold (no ``ANY`` or ``MATCH``,
  which are a filter's); a choice outside them is an :class:`~.forms.InputError`
  that lists the choices.
* A principal is ``Type:name``; a cluster ACL's name defaults to Kafka's
  ``kafka-cluster``; a blank host is ``*``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import TypeVar

from trafka.sdk.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)

from .forms import InputError

_E = TypeVar("_E", bound=enum.IntEnum)


def _enum_choice(raw: str, label: str, allowed: tuple[_E, ...]) -> _E:
    wanted = raw.strip().upper()
    for value in allowed:
        if value.name == wanted:
            return value
    names = ", ".join(e.name.lower() for e in allowed)
    raise InputError(f"{label} must be one of {names}, got {raw!r}")


#: What the ACL form offers (the values a binding may hold, not a filter's).
ACL_RESOURCE_TYPES = tuple(t for t in AclResourceType if t > AclResourceType.ANY)
ACL_PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)
ACL_OPERATIONS = tuple(o for o in AclOperation if o > AclOperation.ANY)
ACL_PERMISSIONS = (AclPermissionType.ALLOW, AclPermissionType.DENY)


def parse_acl_form(form: Mapping[str, str]) -> AclBinding:
    """An ACL binding from the ACL form (or a row's delete button, which sends the
    same fields). The principal must be ``Type:name`` (``User:alice``)."""
    resource_type = _enum_choice(form.get("resource_type", ""), "resource type", ACL_RESOURCE_TYPES)
    pattern = _enum_choice(form.get("pattern_type", "literal"), "pattern type", ACL_PATTERN_TYPES)
    operation = _enum_choice(form.get("operation", ""), "operation", ACL_OPERATIONS)
    permission = _enum_choice(form.get("permission", "allow"), "permission", ACL_PERMISSIONS)
    name = form.get("name", "").strip()
    if resource_type == AclResourceType.CLUSTER:
        name = name or "kafka-cluster"
    if not name:
        raise InputError("resource name: give a name (or * for every resource)")
    principal = form.get("principal", "").strip()
    kind, sep, who = principal.partition(":")
    if not sep or not kind or not who:
        raise InputError(f"principal must be Type:name, e.g. User:alice, got {principal!r}")
    host = form.get("host", "").strip() or "*"
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def acl_rows(bindings: Iterable[AclBinding]) -> list[AclBinding]:
    """ACLs in a stable order: by resource, then principal, operation, permission."""
    return sorted(
        bindings,
        key=lambda b: (
            int(b.resource_type),
            b.name,
            int(b.pattern_type),
            b.principal,
            b.host,
            int(b.operation),
            int(b.permission),
        ),
    )
