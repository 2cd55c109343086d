"""ACL bindings and filters for :class:`~trafka.sdk.Admin`'s ACL calls (KIP-140).

The numbers are Kafka's, as the ACL APIs (DescribeAcls, CreateAcls, DeleteAcls)
carry them. A binding names one resource pattern and one entry (principal, host,
operation, permission); a filter may leave any part open (None for names, ANY
for the enums, MATCH for the pattern type: a literal name, the wildcard ``*``
and every prefix that covers it).
"""

from __future__ import annotations

import dataclasses

from trafka.codec.acl import AclOperation, AclPermissionType, AclResourceType, PatternType

from .errors import ArgumentValueError

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "AclResourceType",
    "PatternType",
]


@dataclasses.dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: ``principal`` (``User:alice``) from ``host`` (``*`` for any) may
    (ALLOW) or may not (DENY) do ``operation`` on the resources the pattern names.

    Raises:
        ValueError: an ANY, MATCH or UNKNOWN value, which only filters may hold.
    """

    resource_type: AclResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __post_init__(self) -> None:
        for field, value, open_ in (
            ("resource_type", AclResourceType(self.resource_type), (0, 1)),
            ("pattern_type", PatternType(self.pattern_type), (0, 1, 2)),
            ("operation", AclOperation(self.operation), (0, 1)),
            ("permission", AclPermissionType(self.permission), (0, 1)),
        ):
            if value in open_:
                raise ArgumentValueError(f"an ACL binding's {field} cannot be {value.name}")
            object.__setattr__(self, field, value)

    def as_filter(self) -> AclBindingFilter:
        """The filter that matches exactly this binding."""
        return AclBindingFilter(
            self.resource_type,
            self.name,
            self.pattern_type,
            self.principal,
            self.host,
            self.operation,
            self.permission,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which ACLs a describe or a delete is about; None or ANY leaves a part open.

    The default matches every ACL.
    """

    resource_type: AclResourceType = AclResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def __post_init__(self) -> None:
        object.__setattr__(self, "resource_type", AclResourceType(self.resource_type))
        object.__setattr__(self, "pattern_type", PatternType(self.pattern_type))
        object.__setattr__(self, "operation", AclOperation(self.operation))
        object.__setattr__(self, "permission", AclPermissionType(self.permission))
