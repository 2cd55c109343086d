"""ACL bindings and filters as confluent-kafka's admin API has them: seven
fields (resource type, name, pattern type, principal, host, operation,
permission), each enum taken as a member, its number or its name.

Rules: a binding has every field, and none of the "match anything" values
(ANY, MATCH); a filter may leave its strings None and take ANY and MATCH,
but not UNKNOWN (which only a broker's answer holds). A string field must be
a str (TypeError), a field that must be there, not None (ValueError).
"""

from __future__ import annotations

import functools
from typing import Any

from ._enums import AclOperation, AclPermissionType, ResourcePatternType, ResourceType, to_enum

__all__ = ["AclBinding", "AclBindingFilter"]

_STRINGS = ("name", "principal", "host")
_ENUMS: tuple[tuple[str, Any], ...] = (
    ("restype", ResourceType),
    ("resource_pattern_type", ResourcePatternType),
    ("operation", AclOperation),
    ("permission_type", AclPermissionType),
)


@functools.total_ordering
class AclBinding:
    """One ACL: ``principal`` from ``host`` is allowed or denied ``operation``
    on the resources ``name`` and ``resource_pattern_type`` pick.

    Raises:
        ValueError: a field that is None, an unknown enum value, or a filter's
            value (ANY, MATCH).
        TypeError: a name, principal or host that is not a str; an enum field
            of another type.
    """

    #: The fields that may not be None.
    _required: tuple[str, ...] = ("restype", "name", "resource_pattern_type", "principal", "host")
    _required += ("operation", "permission_type")
    #: Values a binding of this class may not hold.
    _refused: dict[str, tuple[Any, ...]] = {
        "restype": (ResourceType.ANY,),
        "resource_pattern_type": (ResourcePatternType.ANY, ResourcePatternType.MATCH),
        "operation": (AclOperation.ANY,),
        "permission_type": (AclPermissionType.ANY,),
    }

    def __init__(
        self,
        restype: ResourceType | str | int,
        name: str,
        resource_pattern_type: ResourcePatternType | str | int,
        principal: str,
        host: str,
        operation: AclOperation | str | int,
        permission_type: AclPermissionType | str | int,
    ) -> None:
        given: dict[str, Any] = {
            "restype": restype,
            "name": name,
            "resource_pattern_type": resource_pattern_type,
            "principal": principal,
            "host": host,
            "operation": operation,
            "permission_type": permission_type,
        }
        for field in self._required:
            if given[field] is None:
                raise ValueError(f"Expected {field} to be not None")
        for field in _STRINGS:
            if given[field] is not None and not isinstance(given[field], str):
                raise TypeError(f"Expected {field} to be a string")
        for field, kind in _ENUMS:
            given[field] = to_enum(given[field], kind)
        for field, refused in self._refused.items():
            if given[field] in refused:
                raise ValueError(
                    f"Cannot use enum {field}, value {given[field].name} in this class"
                )
        self.restype: ResourceType = given["restype"]
        self.name: str | None = given["name"]
        self.resource_pattern_type: ResourcePatternType = given["resource_pattern_type"]
        self.principal: str | None = given["principal"]
        self.host: str | None = given["host"]
        self.operation: AclOperation = given["operation"]
        self.permission_type: AclPermissionType = given["permission_type"]
        self.restype_int = self.restype.value
        self.resource_pattern_type_int = self.resource_pattern_type.value
        self.operation_int = self.operation.value
        self.permission_type_int = self.permission_type.value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({','.join(str(v) for v in _key(self))})"

    def __hash__(self) -> int:
        return hash(_key(self))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AclBinding):
            return NotImplemented
        return _key(self) == _key(other)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, AclBinding):
            return NotImplemented
        less: bool = _key(self) < _key(other)
        return less


class AclBindingFilter(AclBinding):
    """Which ACLs ``describe_acls`` and ``delete_acls`` are about: a None string
    or an ANY value matches anything, MATCH a pattern that covers the name."""

    _required = ("restype", "resource_pattern_type", "operation", "permission_type")
    _refused = {
        "restype": (ResourceType.UNKNOWN,),
        "resource_pattern_type": (ResourcePatternType.UNKNOWN,),
        "operation": (AclOperation.UNKNOWN,),
        "permission_type": (AclPermissionType.UNKNOWN,),
    }


def _key(b: AclBinding) -> tuple[Any, ...]:
    """A binding's seven fields, in order: what it is compared and hashed by."""
    return (
        b.restype,
        b.name,
        b.resource_pattern_type,
        b.principal,
        b.host,
        b.operation,
        b.permission_type,
    )
