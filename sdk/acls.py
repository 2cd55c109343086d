"""ACL bindings and filters for :class:`~trafka.sdk.Admin`'s ACL calls (KIP-140).

The numbers are Kafka's, as the ACL APIs (DescribeAcls, CreateAcls, DeleteAcls)
carry them. A binding names one resource pattern and one entry (principal, host,
operation, permission); a filter may leave any part open (None for names, ANY
for the enums, MATCH for the pattern type: a literal name, the wildcard ``*``
and every prefix that covers it).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TypeVar

from trafka.codec.acl import AclOperation, AclPermissionType, AclResourceType, PatternType

from ._validate import check_str, describe
from .errors import ArgumentTypeError, ArgumentValueError

_E = TypeVar("_E", bound=enum.IntEnum)

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
        ValueError: an ANY, MATCH or UNKNOWN value, which only filters may hold,
            or a number none of the enum's members has.
        TypeError: an enum field that is not one (nor an int), a name, principal
            or host that is not a str.
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
            (
                "resource_type",
                _member("resource_type", self.resource_type, AclResourceType),
                (0, 1),
            ),
            ("pattern_type", _member("pattern_type", self.pattern_type, PatternType), (0, 1, 2)),
            ("operation", _member("operation", self.operation, AclOperation), (0, 1)),
            ("permission", _member("permission", self.permission, AclPermissionType), (0, 1)),
        ):
            if value in open_:
                raise ArgumentValueError(f"an ACL binding's {field} cannot be {value.name}")
            object.__setattr__(self, field, value)
        # The broker judges the strings (an empty name, a malformed principal);
        # they only have to be strings a request can carry.
        for field in ("name", "principal", "host"):
            check_str(field, getattr(self, field), empty=True)

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

    Raises:
        ValueError, TypeError: as :class:`AclBinding`'s (None is taken for the strings).
    """

    resource_type: AclResourceType = AclResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def __post_init__(self) -> None:
        for field, kind in (
            ("resource_type", AclResourceType),
            ("pattern_type", PatternType),
            ("operation", AclOperation),
            ("permission", AclPermissionType),
        ):
            object.__setattr__(self, field, _member(field, getattr(self, field), kind))
        for field in ("name", "principal", "host"):
            check_str(field, getattr(self, field), empty=True, none=True)


def _member(field: str, value: object, kind: type[_E]) -> _E:
    """``value`` as a member of ``kind`` (a member, or its number), else an
    error naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{field} must be an {kind.__name__}, got {describe(value)}")
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(m.name for m in kind)
        raise ArgumentValueError(
            f"{field} must be an {kind.__name__} ({known}), got {value!r}"
        ) from None
