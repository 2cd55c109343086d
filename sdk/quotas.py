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
from typing import Any, ClassVar, Literal

from ._validate import check_instance, check_str, describe
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
        TypeError: an entity type that is not a string, a name that is neither
            a string nor None, ``entries`` that are not a mapping or pairs.
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
        if isinstance(entries, Mapping):
            given = list(entries.items())
        elif isinstance(entries, str | bytes) or not isinstance(entries, Iterable):
            raise ArgumentTypeError(
                f"entries must be a mapping or (entity type, name) pairs, got {describe(entries)}"
            )
        else:
            given = list(entries)
        # (where, entity type, name): ``where`` is what an error names.
        pairs: list[tuple[str, Any, Any]] = []
        for i, pair in enumerate(given):
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise ArgumentTypeError(
                    f"entries[{i}] must be an (entity type, name) pair, got {describe(pair)}"
                )
            pairs.append((f"entries[{i}]", *pair))
        for keyword, etype, name in (
            ("user", "user", user),
            ("client_id", "client-id", client_id),
            ("ip", "ip", ip),
        ):
            if name is not _UNSET:
                pairs.append((keyword, etype, name))
        seen: dict[str, str | None] = {}
        for where, etype, name in pairs:
            check_str(f"{where} entity type", etype)
            if etype in seen:
                raise ArgumentValueError(f"{where}: entity type {etype!r} given twice")
            seen[etype] = check_str(where, name, empty=True, none=True)
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
        TypeError: an entity type or name that is not a string, a match type
            that is not an int.
    """

    EXACT: ClassVar[int] = 0
    DEFAULT: ClassVar[int] = 1
    SPECIFIED: ClassVar[int] = 2

    entity_type: str
    match_type: int
    match: str | None = None

    def __post_init__(self) -> None:
        check_str("entity_type", self.entity_type)
        if isinstance(self.match_type, bool) or not isinstance(self.match_type, int):
            raise ArgumentTypeError(
                f"match_type must be EXACT, DEFAULT or SPECIFIED (0-2), "
                f"got {describe(self.match_type)}"
            )
        check_str("match", self.match, empty=True, none=True)
        if self.match_type == self.EXACT:
            if self.match is None:
                raise ArgumentValueError("match: an exact filter component needs a name")
        elif self.match_type in (self.DEFAULT, self.SPECIFIED):
            if self.match is not None:
                raise ArgumentValueError("match: only an exact filter component takes a name")
        else:
            raise ArgumentValueError(
                f"match_type must be EXACT, DEFAULT or SPECIFIED (0-2), got {self.match_type}"
            )

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
        TypeError: an entity that is not a :class:`ClientQuotaEntity`, ``ops``
            that are not a mapping, a key that is not a string, a value that is
            not a number or None.
    """

    entity: ClientQuotaEntity
    ops: Mapping[str, float | None]

    def __post_init__(self) -> None:
        check_instance("entity", self.entity, ClientQuotaEntity)
        if not isinstance(self.ops, Mapping):
            raise ArgumentTypeError(
                f"ops must be a mapping of quota key to value, got {describe(self.ops)}"
            )
        ops: dict[str, float | None] = {}
        for key, value in self.ops.items():
            check_str(f"ops key {key!r}", key)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ArgumentTypeError(
                        f"ops[{key!r}] must be a number or None, got {describe(value)}"
                    )
                try:
                    value = float(value)
                except OverflowError:  # an int past a double's range
                    value = math.inf
                if not math.isfinite(value):
                    raise ArgumentValueError(f"ops[{key!r}] must be a finite number, got {value!r}")
            ops[key] = value
        object.__setattr__(self, "ops", ops)
