"""Client quota entities, filters and alterations for :class:`~trafka.sdk.Admin`'s
quota calls (DescribeClientQuotas and AlterClientQuotas, KIP-546).

A quota applies to an *entity*: a user, a client id, both together, or a client
IP address. Each part names one entity type (``user``, ``client-id`` or ``ip``)
and either one name or, with None, that type's *default* entity (shown as
``<default>`` by Kafka's tools), whose quotas apply to every name without its
own. The quota keys are Kafka's: ``producer_byte_rate`` and
``consumer_byte_rate`` (bytes per second), ``request_percentage`` (percent of
one broker thread), ``controller_mutation_rate`` (partitions created or deleted
per second) and, for IP entities only, ``connection_creation_rate``. The broker
validates entities and keys; these types only check their own shape.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping
from typing import ClassVar, Literal

from .errors import ArgumentTypeError, ArgumentValueError

__all__ = [
    "ClientQuotaAlteration",
    "ClientQuotaEntity",
    "ClientQuotaFilterComponent",
]


class _Unset(enum.Enum):
    UNSET = 0


_UNSET: Literal[_Unset.UNSET] = _Unset.UNSET
_TYPE_RANK = {"user": 0, "client-id": 1, "ip": 2}


def _type_order(pair: tuple[str, str | None]) -> tuple[int, str]:
    return _TYPE_RANK.get(pair[0], len(_TYPE_RANK)), pair[0]


@dataclasses.dataclass(frozen=True, slots=True, init=False, repr=False)
class ClientQuotaEntity:
    """The entity a quota applies to: entity type -> name, None naming the type's default.

    Build it from keywords, leaving out the types it does not have::

        ClientQuotaEntity(user="alice")                  # user alice
        ClientQuotaEntity(user="alice", client_id=None)  # alice's default client id
        ClientQuotaEntity(client_id=None)                # the default client id
        ClientQuotaEntity(ip="10.0.0.7")

    or from a mapping, as Java's ``new ClientQuotaEntity(Map.of("user", "alice"))``:
    ``ClientQuotaEntity({"user": "alice"})``. Entities are equal when their parts
    are, whatever the order they were given in, and can be dictionary keys.

    Attributes:
        entries: the ``(entity type, name)`` pairs: ``user``, ``client-id``
            and ``ip`` in this order, then any other type by name.

    Raises:
        ValueError: an entity type that is empty or given twice.
        TypeError: a name that is neither a string nor None.
    """

    USER: ClassVar[str] = "user"
    CLIENT_ID: ClassVar[str] = "client-id"
    IP: ClassVar[str] = "ip"

    entries: tuple[tuple[str, str | None], ...]

    def __init__(
        self,
        entries: Mapping[str, str | None] | Iterable[tuple[str, str | None]] = (),
        *,
        user: str | Literal[_Unset.UNSET] | None = _UNSET,
        client_id: str | Literal[_Unset.UNSET] | None = _UNSET,
        ip: str | Literal[_Unset.UNSET] | None = _UNSET,
    ) -> None:
        pairs = list(entries.items() if isinstance(entries, Mapping) else entries)
        for etype, name in (("user", user), ("client-id", client_id), ("ip", ip)):
            if name is not _UNSET:
                pairs.append((etype, name))
        seen: dict[str, str | None] = {}
        for etype, name in pairs:
            if not isinstance(etype, str) or not etype:
                raise ArgumentValueError(
                    f"an entity type must be a non-empty string, not {etype!r}"
                )
            if etype in seen:
                raise ArgumentValueError(f"entity type {etype!r} given twice")
            if name is not None and not isinstance(name, str):
                raise ArgumentTypeError(f"the {etype} name must be a string or None, not {name!r}")
            seen[etype] = name
        object.__setattr__(self, "entries", tuple(sorted(seen.items(), key=_type_order)))

    def as_dict(self) -> dict[str, str | None]:
        """The entity as ``{entity type: name or None}``."""
        return dict(self.entries)

    def __repr__(self) -> str:
        keywords = {"user": "user", "client-id": "client_id", "ip": "ip"}
        if all(t in keywords for t, _ in self.entries):
            args = ", ".join(f"{keywords[t]}={n!r}" for t, n in self.entries)
        else:
            args = repr(self.as_dict())
        return f"ClientQuotaEntity({args})"

    def __str__(self) -> str:
        """As Kafka's tools write it: ``user=alice, client-id=<default>``."""
        if not self.entries:
            return "(no entity)"
        return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in self.entries)

    def sort_key(self) -> tuple[tuple[int, str, int, str], ...]:
        """A key that orders entities by their types, then defaults before names."""
        return tuple(
            (*_type_order((t, n)), 0 if n is None else 1, n or "") for t, n in self.entries
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ClientQuotaFilterComponent:
    """One condition of :meth:`~trafka.sdk.Admin.describe_client_quotas`' filter,
    on one entity type. Make it with :meth:`of_entity`, :meth:`of_default_entity`
    or :meth:`of_entity_type`.

    Attributes:
        entity_type: ``user``, ``client-id`` or ``ip``.
        match_type: :data:`EXACT` (the entity named ``match``), :data:`DEFAULT`
            (the type's default entity) or :data:`SPECIFIED` (any entity of the
            type, the default included), as on the wire.
        match: the name for EXACT, else None.

    Raises:
        ValueError: an empty entity type, an unknown match type, or a name that
            does not fit it.
    """

    EXACT: ClassVar[int] = 0
    DEFAULT: ClassVar[int] = 1
    SPECIFIED: ClassVar[int] = 2

    entity_type: str
    match_type: int
    match: str | None = None

    def __post_init__(self) -> None:
        if not self.entity_type:
            raise ArgumentValueError("a filter component needs an entity type")
        if self.match_type == self.EXACT:
            if self.match is None:
                raise ArgumentValueError("an exact filter component needs a name")
        elif self.match_type in (self.DEFAULT, self.SPECIFIED):
            if self.match is not None:
                raise ArgumentValueError("only an exact filter component takes a name")
        else:
            raise ArgumentValueError(f"unknown match type {self.match_type}")

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        """Entities whose ``entity_type`` part is ``name``."""
        return cls(entity_type, cls.EXACT, name)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        """Entities whose ``entity_type`` part is the default."""
        return cls(entity_type, cls.DEFAULT)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        """Entities that have an ``entity_type`` part, named or default."""
        return cls(entity_type, cls.SPECIFIED)


@dataclasses.dataclass(frozen=True, slots=True)
class ClientQuotaAlteration:
    """Changes to one entity's quotas (:meth:`~trafka.sdk.Admin.alter_client_quotas`).

    Args:
        entity: the entity.
        ops: quota key -> the value to set, or None to remove the key (removing
            a key that is not set is no error). Keys not named keep their values.

    Raises:
        ValueError: an empty key, or a value that is not a finite number.
        TypeError: a value that is not a number or None.
    """

    entity: ClientQuotaEntity
    ops: Mapping[str, float | None]

    def __post_init__(self) -> None:
        ops: dict[str, float | None] = {}
        for key, value in dict(self.ops).items():
            if not isinstance(key, str) or not key:
                raise ArgumentValueError(f"a quota key must be a non-empty string, not {key!r}")
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ArgumentTypeError(f"quota {key}: {value!r} is not a number")
                value = float(value)
                if not math.isfinite(value):
                    raise ArgumentValueError(f"quota {key}: {value!r} is not a finite number")
            ops[key] = value
        object.__setattr__(self, "ops", ops)
