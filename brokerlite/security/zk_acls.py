"""ACLs in ZooKeeper, laid out as Kafka 3.9's ZooKeeper-mode authorizer keeps them.

In cluster mode ZooKeeper holds the ACLs (not each broker's journal), so an
ACL created through one broker is enforced by every broker. This module turns
znode bytes into :class:`~.authorizer.AclBinding` values and ACL changes into
znode contents; the cluster driver does the reading and writing.

==============================================  =============================================
``/kafka-acl/<Type>/<name>``                    the ACLs of a LITERAL pattern
``/kafka-acl-extended/prefixed/<Type>/<name>``  the ACLs of a PREFIXED pattern
``/kafka-acl-changes/acl_changes_N``            a literal pattern changed: ``<TYPE>:<name>``
``/kafka-acl-extended-changes/acl_changes_N``   a prefixed pattern changed: a JSON event
==============================================  =============================================

A resource znode holds ``{"version":1,"acls":[{"principal":..,"permissionType":
"Allow","operation":"Read","host":"*"}, ...]}``; type, operation and permission
names are Kafka's enumeration names in Pascal case (``TransactionalId``,
``IdempotentWrite``). Change notifications are sequential znodes; the literal
one holds the resource type's enumeration name and the resource name joined
by ``:``, the extended one ``{"version":1,"resourceType":"TOPIC","name":..,
"patternType":"PREFIXED"}``.

Rules:

* Stateless and I/O-free: bytes in, values out, and back.
* Decoding never trusts ZooKeeper's bytes: what Kafka would not write raises
  :class:`~trafka.brokerlite.cluster.zk_layout.ZkDataError` naming the path.
  Names are read as Kafka reads them: Pascal case, or upper case with
  underscores.
* A resource znode left with no ACL is deleted (as Kafka does), so the
  layout holds only patterns that have ACLs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from trafka.brokerlite.cluster.zk_layout import ZkDataError
from trafka.codec.acl import AclOperation, AclPermissionType, AclResourceType, PatternType

from .authorizer import AclBinding

__all__ = [
    "ACL_CHANGE_PREFIX",
    "EXTENDED_ACL_CHANGES",
    "LITERAL_ACL_CHANGES",
    "acl_roots",
    "change_notification",
    "decode_acls",
    "encode_acls",
    "group_by_resource",
    "name_problem",
    "resource_path",
    "resource_type_from_dir",
    "updated_acls",
]

LITERAL_ACLS = "/kafka-acl"
EXTENDED_ACLS = "/kafka-acl-extended"
LITERAL_ACL_CHANGES = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"

#: A resource (type, pattern type, name).
Resource = tuple[int, int, str]


def _pascal(enum_name: str) -> str:
    return "".join(part.capitalize() for part in enum_name.split("_"))


def _lookup(enum_type: Any, text: Any, path: str, what: str) -> int:
    """Kafka's name lookup: Pascal case first, then upper case (underscores optional)."""
    if isinstance(text, str):
        for member in enum_type:
            if member.name in ("UNKNOWN", "ANY", "MATCH"):
                continue
            if text in (_pascal(member.name), member.name, member.name.replace("_", "")):
                return int(member)
            if text.upper() in (member.name, member.name.replace("_", "")):
                return int(member)
    raise ZkDataError(f"{path}: unknown {what} {text!r}")


def acl_roots() -> list[tuple[str, int]]:
    """The roots under which resource znodes live, with their pattern type."""
    return [
        (LITERAL_ACLS, PatternType.LITERAL),
        (f"{EXTENDED_ACLS}/prefixed", PatternType.PREFIXED),
    ]


def resource_type_from_dir(root: str, name: str) -> int:
    """The resource type a child of an ACL root names (``Topic``)."""
    return _lookup(AclResourceType, name, f"{root}/{name}", "resource type")


def name_problem(name: str) -> str | None:
    """Why a resource name has no znode of its own (None: it has one)."""
    if "/" in name or name in ("", ".", "..") or "\x00" in name:
        return f"resource name {name!r} cannot be a ZooKeeper znode name"
    return None


def resource_path(resource_type: int, pattern_type: int, name: str) -> str:
    """The znode of a pattern's ACLs.

    Raises:
        ValueError: a name ZooKeeper cannot hold as one znode (Kafka writes the
            name as it is, so it has no place for these either).
    """
    problem = name_problem(name)
    if problem is not None:
        raise ValueError(problem)
    type_dir = _pascal(AclResourceType(resource_type).name)
    if pattern_type == PatternType.LITERAL:
        return f"{LITERAL_ACLS}/{type_dir}/{name}"
    if pattern_type == PatternType.PREFIXED:
        return f"{EXTENDED_ACLS}/prefixed/{type_dir}/{name}"
    raise ValueError(f"pattern type {pattern_type} is not stored")


def encode_acls(acls: Iterable[AclBinding]) -> bytes:
    """A resource znode's content (the entries of ``acls``, in a stable order)."""
    entries = sorted(
        {
            (
                acl.principal,
                _pascal(AclPermissionType(acl.permission).name),
                _pascal(AclOperation(acl.operation).name),
                acl.host,
            )
            for acl in acls
        }
    )
    doc = {
        "version": 1,
        "acls": [
            {"principal": p, "permissionType": perm, "operation": op, "host": h}
            for p, perm, op, h in entries
        ],
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_acls(resource: Resource, path: str, data: bytes) -> list[AclBinding]:
    """The ACLs a resource znode holds (``data`` empty or null: none).

    Raises:
        ZkDataError: not Kafka's document.
    """
    if not data or data.strip() == b"null":
        return []
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ZkDataError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("acls"), list):
        raise ZkDataError(f"{path}: expected {{'version': 1, 'acls': [...]}}, got {doc!r}")
    if doc.get("version") != 1:
        raise ZkDataError(f"{path}: unsupported version {doc.get('version')!r}")
    rtype, ptype, name = resource
    out: list[AclBinding] = []
    for entry in doc["acls"]:
        if not isinstance(entry, dict):
            raise ZkDataError(f"{path}: an ACL entry must be an object, got {entry!r}")
        principal, host = entry.get("principal"), entry.get("host")
        if not isinstance(principal, str) or not isinstance(host, str):
            raise ZkDataError(f"{path}: an ACL entry needs a principal and a host: {entry!r}")
        out.append(
            AclBinding(
                rtype,
                name,
                ptype,
                principal,
                host,
                _lookup(AclOperation, entry.get("operation"), path, "operation"),
                _lookup(AclPermissionType, entry.get("permissionType"), path, "permission type"),
            )
        )
    return out


def change_notification(resource: Resource) -> tuple[str, bytes]:
    """The sequential znode to create after a resource's ACLs changed: its path
    prefix (ZooKeeper appends the sequence number) and content."""
    rtype, ptype, name = resource
    type_name = AclResourceType(rtype).name
    if ptype == PatternType.LITERAL:
        return f"{LITERAL_ACL_CHANGES}/{ACL_CHANGE_PREFIX}", f"{type_name}:{name}".encode()
    event = {
        "version": 1,
        "resourceType": type_name,
        "name": name,
        "patternType": PatternType(ptype).name,
    }
    return (
        f"{EXTENDED_ACL_CHANGES}/{ACL_CHANGE_PREFIX}",
        json.dumps(event, separators=(",", ":")).encode(),
    )


def group_by_resource(
    add: Iterable[AclBinding], remove: Iterable[AclBinding]
) -> dict[Resource, tuple[list[AclBinding], list[AclBinding]]]:
    """The changes per resource znode: what to add and what to remove."""
    out: dict[Resource, tuple[list[AclBinding], list[AclBinding]]] = {}
    for acl in add:
        out.setdefault((acl.resource_type, acl.pattern_type, acl.name), ([], []))[0].append(acl)
    for acl in remove:
        out.setdefault((acl.resource_type, acl.pattern_type, acl.name), ([], []))[1].append(acl)
    return out


def updated_acls(
    current: Iterable[AclBinding], add: Iterable[AclBinding], remove: Iterable[AclBinding]
) -> list[AclBinding]:
    """A resource's ACLs after a change (``current`` as read from its znode)."""
    gone = set(remove)
    kept = dict.fromkeys(a for a in current if a not in gone)
    kept.update(dict.fromkeys(add))
    return list(kept)
