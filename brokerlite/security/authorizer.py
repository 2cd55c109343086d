"""ACL authorization: Kafka's standard authorizer rules, without I/O.

brokerlite authorizes only when configured to (``authorizer_class_name``, as
Kafka's ``authorizer.class.name``); without it every request is allowed and the
ACL APIs answer SECURITY_DISABLED, as a Kafka broker without an authorizer.

Rules and invariants:

* A principal is ``Type:Name``: ``User:<name>`` for a SASL login, ``User:<subject
  DN>`` for a TLS client certificate, and ``User:ANONYMOUS`` otherwise. The host
  is the client's IP address.
* An ACL is a resource pattern (resource type, name, LITERAL or PREFIXED) and an
  entry (principal or ``User:*``, host or ``*``, operation, ALLOW or DENY). A
  literal ``*`` names every resource of its type; ``kafka-cluster`` is the one
  CLUSTER resource.
* A decision on (principal, host, operation, resource) follows Kafka:

  1. a super user (``super_users``) is allowed everything;
  2. the ACLs that apply are those whose pattern matches the resource: the
     literal name, the literal ``*``, and every prefix of the name;
  3. with none at all (for any principal), the answer is
     ``allow_everyone_if_no_acl_found`` (default: denied);
  4. a DENY for the principal (or ``User:*``), the host (or ``*``) and the
     operation (or ALL) denies;
  5. else an ALLOW for them allows, where READ, WRITE, DELETE and ALTER imply
     DESCRIBE, and ALTER_CONFIGS implies DESCRIBE_CONFIGS;
  6. else denied.
* :meth:`Authorizer.authorize_by_type` asks whether the principal may do an
  operation on *some* resource of a type (Kafka's ``authorizeByResourceType``,
  KIP-679): an idempotent producer without IDEMPOTENT_WRITE on the cluster
  may still write if it may write some topic.
* Changes (:meth:`Authorizer.create`, :meth:`Authorizer.delete`) are written to
  the ACL store, fsynced, before they apply and before they are answered; the
  store is replayed on start. A binding stored twice is stored once. In
  cluster mode ZooKeeper is the store (:mod:`.zk_acls`): the handlers check a
  change here (:meth:`Authorizer.check_create`, :meth:`Authorizer.match_delete`),
  the cluster driver writes it, and every broker takes what ZooKeeper holds
  (:meth:`Authorizer.replace`).
* Decisions are cached per (principal, host, operation, resource) until the
  next change.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.storage.journal import CrcJournal, JournalStore
from trafka.codec.acl import AclOperation, AclPermissionType, AclResourceType, PatternType
from trafka.codec.errors import ErrorCode
from trafka.common.x500 import distinguished_name

__all__ = [
    "ACLS_JOURNAL",
    "ANONYMOUS",
    "CLUSTER_NAME",
    "AclBinding",
    "AclFilter",
    "AclStore",
    "AclStoreError",
    "Authorizer",
    "DescribedAcls",
    "RESOURCE_OPERATIONS",
    "authorizer_enabled",
    "binding_problem",
    "certificate_subject",
    "host_of",
    "parse_super_users",
    "principal_for",
]

log = logging.getLogger(__name__)

ACLS_JOURNAL = "trafka-acls.journal"
ANONYMOUS = "User:ANONYMOUS"
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

# The authorizer classes ``authorizer.class.name`` may name: Kafka's two standard
# authorizers (KRaft's and ZooKeeper's; brokerlite keeps its ACLs itself either way).
_STANDARD_AUTHORIZERS = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
    }
)

_T = AclResourceType
_O = AclOperation

# The operations whose bits the authorized-operations fields carry, per
# resource type (KIP-430): what Kafka reports for each type.
RESOURCE_OPERATIONS: dict[int, tuple[AclOperation, ...]] = {
    _T.TOPIC: (
        _O.READ, _O.WRITE, _O.CREATE, _O.DELETE, _O.ALTER, _O.DESCRIBE,
        _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
    ),
    _T.GROUP: (_O.READ, _O.DELETE, _O.DESCRIBE),
    _T.CLUSTER: (
        _O.CREATE, _O.ALTER, _O.DESCRIBE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE,
    ),
    _T.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
    _T.DELEGATION_TOKEN: (_O.DESCRIBE,),
    _T.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}  # fmt: skip

# An ALLOW of any of these allows the key (Kafka's implied operations).
_ALLOWED_BY: dict[int, frozenset[int]] = {
    _O.DESCRIBE: frozenset({_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER, _O.ALL}),
    _O.DESCRIBE_CONFIGS: frozenset({_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.ALL}),
}

_CACHE_MAX = 65_536


def authorizer_enabled(class_name: str | None) -> bool:
    """Whether ``authorizer.class.name`` turns the authorizer on.

    Raises:
        ValueError: a class other than Kafka's standard authorizers.
    """
    if class_name is None or not class_name.strip():
        return False
    if class_name.strip() in _STANDARD_AUTHORIZERS:
        return True
    raise ValueError(
        f"brokerlite has Kafka's standard ACL authorizer only ({', '.join(sorted(_STANDARD_AUTHORIZERS))}),"
        f" not {class_name!r}"
    )


class AclBinding(NamedTuple):
    """One stored ACL (the enumerations' numbers, as the ACL APIs carry them)."""

    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def describe(self) -> str:
        return (
            f"{_name(AclPermissionType, self.permission)} {self.principal!r} from {self.host!r} "
            f"{_name(AclOperation, self.operation)} on {_name(AclResourceType, self.resource_type)}"
            f" {_name(PatternType, self.pattern_type)} {self.name!r}"
        )


class AclFilter(NamedTuple):
    """Which ACLs a describe or delete is about: None or ANY leaves a part open;
    pattern type MATCH matches the ACLs that would apply to the named resource."""

    resource_type: int = AclResourceType.ANY
    name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission: int = AclPermissionType.ANY

    def matches(self, acl: AclBinding) -> bool:
        """Whether ``acl`` is one this filter is about (Kafka's filter rules)."""
        if self.resource_type != _T.ANY and self.resource_type != acl.resource_type:
            return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != _O.ANY and self.operation != acl.operation:
            return False
        if self.permission != AclPermissionType.ANY and self.permission != acl.permission:
            return False
        return self._matches_pattern(acl)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        wanted = self.pattern_type
        if wanted not in (PatternType.ANY, PatternType.MATCH) and wanted != acl.pattern_type:
            return False
        name = self.name
        if name is None:
            return True
        if wanted != PatternType.MATCH:
            return name == acl.name
        if acl.pattern_type == PatternType.LITERAL:
            return acl.name in (name, WILDCARD)
        return acl.pattern_type == PatternType.PREFIXED and name.startswith(acl.name)

    def problem(self) -> str | None:
        """Why a describe or delete may not use this filter, or None."""
        for enum_type, value in (
            (AclResourceType, self.resource_type),
            (PatternType, self.pattern_type),
            (AclOperation, self.operation),
            (AclPermissionType, self.permission),
        ):
            if _known(enum_type, value) in (None, 0):
                return f"the filter's {enum_type.__name__} {value} is unknown"
        return None


class DescribedAcls(NamedTuple):
    """The answer to a describe: an error (code, message) or the ACLs found."""

    error: tuple[ErrorCode, str] | None
    acls: list[AclBinding]


class AclStoreError(BrokerError):
    """The ACL journal cannot be read or written."""


class AclStore(JournalStore):
    """The ACLs, kept in a CRC-checked journal (:mod:`..storage.journal`).

    Entry kinds: ``add`` and ``remove``, each with a list of bindings (as
    seven-element lists). A mutating method returns once its entry is fsynced.

    Raises:
        AclStoreError: the journal cannot be read or written, or holds a
            malformed entry.
    """

    def __init__(self, path: Path, *, fsync: bool = True, compact_min_bytes: int = 1 << 20) -> None:
        journal = CrcJournal(
            Path(path), format_name="acls", version=1, fsync=fsync, error=AclStoreError
        )
        super().__init__(journal, compact_min_bytes=compact_min_bytes, name="ACL journal")
        self._acls: dict[AclBinding, None] = {}  # in creation order
        self._load()

    def acls(self) -> list[AclBinding]:
        """Every stored ACL, oldest first."""
        return list(self._acls)

    def add(self, acls: Iterable[AclBinding]) -> None:
        new = [a for a in dict.fromkeys(map(_plain, acls)) if a not in self._acls]
        if new:
            self._write({"kind": "add", "acls": [list(a) for a in new]})

    def remove(self, acls: Iterable[AclBinding]) -> None:
        gone = [a for a in dict.fromkeys(map(_plain, acls)) if a in self._acls]
        if gone:
            self._write({"kind": "remove", "acls": [list(a) for a in gone]})

    def _apply(self, entry: dict[str, Any]) -> None:
        kind = entry.get("kind")
        try:
            acls = [_binding_from_json(a) for a in entry["acls"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise AclStoreError(
                f"ACL journal {self.path}: malformed {kind!r} entry: {exc!r}"
            ) from exc
        if kind == "add":
            for acl in acls:
                self._acls[acl] = None
        elif kind == "remove":
            for acl in acls:
                self._acls.pop(acl, None)
        else:
            raise AclStoreError(
                f"ACL journal {self.path}: unknown entry kind {kind!r} (written by a newer brokerlite?)"
            )

    def _live_entries(self) -> list[dict[str, Any]]:
        return [{"kind": "add", "acls": [list(a) for a in self._acls]}] if self._acls else []


def _plain(acl: AclBinding) -> AclBinding:
    """``acl`` with plain ints for its enumerations (IntEnum members compare and
    hash alike, but are not what the journal holds)."""
    rtype, name, ptype, principal, host, op, permission = acl
    return AclBinding(int(rtype), name, int(ptype), principal, host, int(op), int(permission))


def _binding_from_json(item: Any) -> AclBinding:
    rtype, name, ptype, principal, host, op, permission = item
    for value in (rtype, ptype, op, permission):
        if type(value) is not int:
            raise ValueError(f"{value!r} is not an enumeration number")
    for value in (name, principal, host):
        if type(value) is not str:
            raise ValueError(f"{value!r} is not a string")
    return AclBinding(rtype, name, ptype, principal, host, op, permission)


class Authorizer:
    """ACLs and the decisions they make (see the module rules).

    Args:
        store: where the ACLs are kept (None: in memory only).
        super_users: principals allowed everything (``User:admin``).
        allow_everyone_if_no_acl_found: the decision on a resource no ACL names.
    """

    def __init__(
        self,
        store: AclStore | None,
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self._store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        # (resource type, pattern type, name) -> the ACLs of that pattern
        self._by_pattern: dict[tuple[int, int, str], dict[AclBinding, None]] = {}
        self._prefixes: dict[int, set[str]] = {}  # resource type -> prefixed names
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}
        self._acls: dict[AclBinding, None] = {}
        for acl in store.acls() if store is not None else ():
            self._index(acl)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    # -- decisions ------------------------------------------------------------------

    def authorize(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the resource."""
        key = (principal, host, operation, resource_type, name)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        allowed = self._decide(principal, host, operation, resource_type, name)
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[key] = allowed
        return allowed

    def _decide(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        acls = self._applying(resource_type, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        allowing = _ALLOWED_BY.get(operation, frozenset({operation, _O.ALL}))
        allowed = False
        for acl in acls:
            if acl.principal not in (principal, WILDCARD_PRINCIPAL) or acl.host not in (
                host,
                WILDCARD,
            ):
                continue
            if acl.permission == AclPermissionType.DENY:
                if acl.operation in (operation, _O.ALL):
                    return False
            elif acl.operation in allowing:
                allowed = True
        return allowed

    def _applying(self, resource_type: int, name: str) -> list[AclBinding]:
        found: list[AclBinding] = []
        for pattern_name in (name, WILDCARD) if name != WILDCARD else (WILDCARD,):
            found.extend(
                self._by_pattern.get((resource_type, PatternType.LITERAL, pattern_name), ())
            )
        for prefix in self._prefixes.get(resource_type, ()):
            if name.startswith(prefix):
                found.extend(self._by_pattern[(resource_type, PatternType.PREFIXED, prefix)])
        return found

    def authorize_by_type(
        self, principal: str, host: str, operation: int, resource_type: int
    ) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of
        the type: an ALLOW that no DENY covers (Kafka's ``authorizeByResourceType``)."""
        if principal in self.super_users:
            return True

        def entries(permission: int, pattern_type: int) -> set[str]:
            return {
                acl.name
                for (rtype, ptype, _), acls in self._by_pattern.items()
                if rtype == resource_type and ptype == pattern_type
                for acl in acls
                if acl.permission == permission
                and acl.principal in (principal, WILDCARD_PRINCIPAL)
                and acl.host in (host, WILDCARD)
                and acl.operation in (operation, _O.ALL)
            }

        deny_literals = entries(AclPermissionType.DENY, PatternType.LITERAL)
        if WILDCARD in deny_literals:
            return False
        if self.allow_everyone_if_no_acl_found:
            return True
        deny_prefixes = entries(AclPermissionType.DENY, PatternType.PREFIXED)

        def denied_by_prefix(name: str) -> bool:
            return any(name.startswith(p) for p in deny_prefixes)

        if any(
            not denied_by_prefix(p) for p in entries(AclPermissionType.ALLOW, PatternType.PREFIXED)
        ):
            return True
        return any(
            name == WILDCARD or (name not in deny_literals and not denied_by_prefix(name))
            for name in entries(AclPermissionType.ALLOW, PatternType.LITERAL)
        )

    def authorized_operations(
        self, principal: str, host: str, resource_type: int, name: str
    ) -> int:
        """The KIP-430 bit field: bit ``op`` set for each operation of the type allowed."""
        bits = 0
        for op in RESOURCE_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits

    # -- ACL changes ----------------------------------------------------------------

    def create(self, acls: Iterable[AclBinding]) -> list[tuple[ErrorCode, str | None]]:
        """Store the valid ``acls``: per binding, in order, NONE or why it was refused.

        Raises:
            AclStoreError: the store could not write them (none applies).
        """
        results, new = self.check_create(acls)
        if new:
            if self._store is not None:
                self._store.add(new)
            for acl in new:
                self._index(acl)
                log.info("ACL created: %s", acl.describe())
        return results

    def check_create(
        self, acls: Iterable[AclBinding]
    ) -> tuple[list[tuple[ErrorCode, str | None]], list[AclBinding]]:
        """What :meth:`create` would answer, and the valid bindings not held yet
        (nothing changes: cluster mode writes them to ZooKeeper first)."""
        results: list[tuple[ErrorCode, str | None]] = []
        valid: list[AclBinding] = []
        for acl in (_plain(a) for a in acls):
            problem = binding_problem(acl)
            if problem is None:
                valid.append(acl)
                results.append((ErrorCode.NONE, None))
            else:
                results.append((ErrorCode.INVALID_REQUEST, problem))
        return results, [a for a in dict.fromkeys(valid) if a not in self._acls]

    def describe(self, acl_filter: AclFilter) -> DescribedAcls:
        """The ACLs ``acl_filter`` matches, oldest first."""
        problem = acl_filter.problem()
        if problem is not None:
            return DescribedAcls((ErrorCode.INVALID_REQUEST, problem), [])
        return DescribedAcls(None, [a for a in self._acls if acl_filter.matches(a)])

    def delete(
        self, filters: Iterable[AclFilter]
    ) -> list[tuple[ErrorCode, str | None, list[AclBinding]]]:
        """Remove what each filter matches: per filter, its error and the ACLs it removed.

        An ACL two filters match is reported under the first (as Kafka).

        Raises:
            AclStoreError: the store could not write the removal (nothing removed).
        """
        results, gone = self.match_delete(filters)
        if gone:
            if self._store is not None:
                self._store.remove(gone)
            for acl in gone:
                self._unindex(acl)
                log.info("ACL deleted: %s", acl.describe())
        return results

    def match_delete(
        self, filters: Iterable[AclFilter]
    ) -> tuple[list[tuple[ErrorCode, str | None, list[AclBinding]]], list[AclBinding]]:
        """What :meth:`delete` would answer, and the ACLs it would remove (nothing
        changes: cluster mode removes them from ZooKeeper first)."""
        taken: set[AclBinding] = set()
        results: list[tuple[ErrorCode, str | None, list[AclBinding]]] = []
        for acl_filter in filters:
            problem = acl_filter.problem()
            if problem is not None:
                results.append((ErrorCode.INVALID_REQUEST, problem, []))
                continue
            matched = [a for a in self._acls if a not in taken and acl_filter.matches(a)]
            taken.update(matched)
            results.append((ErrorCode.NONE, None, matched))
        return results, [a for a in self._acls if a in taken]

    def replace(self, acls: Iterable[AclBinding]) -> None:
        """Hold exactly ``acls`` from now on (cluster mode: what ZooKeeper holds);
        the store, if any, is not written."""
        wanted = dict.fromkeys(_plain(a) for a in acls)
        for acl in [a for a in self._acls if a not in wanted]:
            self._unindex(acl)
            log.info("ACL deleted (through ZooKeeper): %s", acl.describe())
        for acl in wanted:
            if acl not in self._acls:
                self._index(acl)
                log.info("ACL created (through ZooKeeper): %s", acl.describe())

    def acls(self) -> list[AclBinding]:
        """Every ACL, oldest first."""
        return list(self._acls)

    def _index(self, acl: AclBinding) -> None:
        self._acls[acl] = None
        self._by_pattern.setdefault((acl.resource_type, acl.pattern_type, acl.name), {})[acl] = None
        if acl.pattern_type == PatternType.PREFIXED:
            self._prefixes.setdefault(acl.resource_type, set()).add(acl.name)
        self._cache.clear()

    def _unindex(self, acl: AclBinding) -> None:
        self._acls.pop(acl, None)
        key = (acl.resource_type, acl.pattern_type, acl.name)
        same = self._by_pattern.get(key)
        if same is not None:
            same.pop(acl, None)
            if not same:
                del self._by_pattern[key]
                if acl.pattern_type == PatternType.PREFIXED:
                    self._prefixes[acl.resource_type].discard(acl.name)
        self._cache.clear()


def binding_problem(acl: AclBinding) -> str | None:
    """Why ``acl`` cannot be stored (Kafka's checks on a new ACL), or None."""
    rtype = _known(AclResourceType, acl.resource_type)
    if rtype is None or rtype in (_T.UNKNOWN, _T.ANY):
        return f"invalid resource type {acl.resource_type}"
    if _known(PatternType, acl.pattern_type) not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"invalid pattern type {acl.pattern_type}: an ACL is LITERAL or PREFIXED"
    if _known(AclOperation, acl.operation) in (None, _O.UNKNOWN, _O.ANY):
        return f"invalid operation {acl.operation}"
    if _known(AclPermissionType, acl.permission) not in (
        AclPermissionType.ALLOW,
        AclPermissionType.DENY,
    ):
        return f"invalid permission type {acl.permission}: an ACL is ALLOW or DENY"
    if not acl.name:
        return "the resource name must not be empty"
    if rtype == _T.CLUSTER and acl.name != CLUSTER_NAME:
        return f"the cluster resource is named {CLUSTER_NAME!r}, not {acl.name!r}"
    kind, sep, name = acl.principal.partition(":")
    if not sep or not kind or not name:
        return f"principal {acl.principal!r} is not of the form Type:Name (User:alice)"
    if not acl.host:
        return "the host must not be empty (use * for any host)"
    return None


def _known(enum_type: Any, value: int) -> Any:
    try:
        return enum_type(value)
    except ValueError:
        return None


def _name(enum_type: Any, value: int) -> str:
    known = _known(enum_type, value)
    return known.name if known is not None else str(value)


def principal_for(sasl_user: str | None, tls_subject: str | None) -> str:
    """The principal of a connection: its SASL user, its TLS client certificate's
    subject, or ANONYMOUS."""
    if sasl_user is not None:
        return f"User:{sasl_user}"
    if tls_subject:
        return f"User:{tls_subject}"
    return ANONYMOUS


def host_of(peer: str) -> str:
    """The IP address of a ``host:port`` peer (``[v6]:port`` too), as Java writes
    it (``InetAddress.getHostAddress``, which ACL hosts are compared with): an
    IPv6 address in full, without leading zeros (``0:0:0:0:0:0:0:1``)."""
    host = (peer.rpartition(":")[0] if ":" in peer else peer).strip("[]") or peer
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        return ":".join(f"{int(group, 16):x}" for group in address.exploded.split(":"))
    return host


def parse_super_users(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """Kafka's ``super.users``: principals separated by ``;``.

    Raises:
        ValueError: an entry that is not ``Type:Name``.
    """
    if value is None:
        return ()
    items = value.split(";") if isinstance(value, str) else list(value)
    users = tuple(u.strip() for u in items if u.strip())
    for user in users:
        kind, sep, name = user.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"super user {user!r} is not a principal of the form Type:Name")
    return users


# Attribute names of a certificate subject, as RFC 2253 writes them (Java's
# X500Principal, which Kafka's default principal builder uses).
def certificate_subject(cert: Any) -> str | None:
    """The subject of a peer certificate as :meth:`ssl.SSLSocket.getpeercert`
    gives it, written as Java's ``X500Principal.getName()`` writes it (RFC 2253,
    ``CN=alice,O=Acme``: most specific first; :mod:`trafka.common.x500`), or
    None without one."""
    return (distinguished_name(cert) or None) if cert else None
