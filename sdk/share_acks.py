"""A share consumer's acknowledgements (KIP-932), without I/O.

Rules:

* Records handed out by the last poll are *delivered* (:class:`Deliveries`):
  each may be typed (:class:`AcknowledgeType`), again and again (the type
  changes), until :meth:`Deliveries.take_typed` moves every typed one out to
  be sent to the broker that delivered it (the latest one, when a record was
  delivered again). A record given back (taken, never handed out) is
  delivered no more.
* Acknowledgements travel as batches (:func:`acknowledgement_batches`): a run
  of consecutive offsets is one batch; a run of one type carries that one
  type, a mixed run one type per offset, except that long stretches of one
  type inside it become batches of their own.
* The acknowledgements of one partition that travel, and succeed or fail,
  together are an :class:`AckUnit`; each ends in exactly one
  :class:`AckOutcome`. A :class:`ShareCommit` is done once every unit it
  sent has ended.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import operator
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from .consumer_types import TopicPartition
from .errors import UsageError

__all__ = [
    "GAP",
    "LONG_STRETCH",
    "AckOutcome",
    "AckUnit",
    "AcknowledgeType",
    "Deliveries",
    "ShareCommit",
    "acknowledgement_batches",
    "can_ride",
    "merged_acks",
    "renews",
]

#: The acknowledgement type of an acquired offset without a record.
GAP = 0
#: Stretches of one type at least this long inside a mixed run get a batch of their own.
LONG_STRETCH = 10


class AcknowledgeType(enum.IntEnum):
    """How a delivered record is acknowledged (Kafka's ids on the wire).

    ``ACCEPT``: processed, never delivered again. ``RELEASE``: give it back
    for another delivery (its delivery count grows). ``REJECT``: unprocessable,
    never delivered again. ``RENEW`` (KIP-1222, brokers of Kafka 4.2+): still
    being processed: its acquisition lock starts again, and once the broker
    renewed it the record is delivered again by a later poll (as Kafka's Java
    client does), to be acknowledged for good then.
    """

    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


def renews(acks: Mapping[int, int]) -> bool:
    """Whether acknowledgements (offset -> type) hold a RENEW: those travel in a
    ShareAcknowledge marked IsRenewAck, never on a ShareFetch."""
    return AcknowledgeType.RENEW in acks.values()


def acknowledgement_batches(acks: Mapping[int, int]) -> list[tuple[int, int, tuple[int, ...]]]:
    """``offset -> type`` as ``(first_offset, last_offset, types)`` batches (see the rules).

    ``types`` has one entry when every offset of the batch has that type, else
    one per offset.
    """
    if not acks:
        return []
    low, high = min(acks), max(acks)
    if high - low + 1 == len(acks):  # one run (the keys are distinct) ...
        kinds = set(acks.values())
        if len(kinds) == 1:  # ... of one type: the usual case, without a sort
            return [(low, high, (kinds.pop(),))]
    out: list[tuple[int, int, tuple[int, ...]]] = []
    offsets = sorted(acks)
    i = 0
    while i < len(offsets):
        j = i
        while j + 1 < len(offsets) and offsets[j + 1] == offsets[j] + 1:
            j += 1
        _split_run(offsets[i], [acks[o] for o in offsets[i : j + 1]], out)
        i = j + 1
    return out


def _emit(first: int, types: Sequence[int], out: list[tuple[int, int, tuple[int, ...]]]) -> None:
    if all(t == types[0] for t in types):
        out.append((first, first + len(types) - 1, (types[0],)))
    else:
        out.append((first, first + len(types) - 1, tuple(types)))


def _split_run(first: int, types: list[int], out: list[tuple[int, int, tuple[int, ...]]]) -> None:
    """One run of consecutive offsets from ``first``: long one-type stretches
    alone, what lies between them as one batch."""
    mixed_from: int | None = None
    k = 0
    while k < len(types):
        m = k
        while m + 1 < len(types) and types[m + 1] == types[k]:
            m += 1
        if m - k + 1 >= LONG_STRETCH or (k == 0 and m == len(types) - 1):
            if mixed_from is not None:
                _emit(first + mixed_from, types[mixed_from:k], out)
                mixed_from = None
            out.append((first + k, first + m, (types[k],)))
        elif mixed_from is None:
            mixed_from = k
        k = m + 1
    if mixed_from is not None:
        _emit(first + mixed_from, types[mixed_from:], out)


@dataclasses.dataclass(slots=True, eq=False)
class ShareCommit:
    """A commit of acknowledgements: done once every partition has its result.

    ``results``: per partition, None or the error. ``cookie`` is the driver's.
    """

    cookie: Any
    results: dict[TopicPartition, BaseException | None] = dataclasses.field(default_factory=dict)
    pending: int = 0
    done: bool = False


@dataclasses.dataclass(slots=True, eq=False)
class AckUnit:
    """Acknowledgements of one partition that travel (and succeed or fail) together."""

    node: int
    tp: TopicPartition
    acks: dict[int, int]
    commit: ShareCommit | None
    deadline: float
    attempts: int = 0
    retry_at: float = -math.inf  # not retrying (any clock reading is after it)
    #: Meant for a ShareAcknowledge: retried as those are, even when it rides on a ShareFetch.
    retriable: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class AckOutcome:
    """The broker's answer for acknowledgements of one partition (None: done)."""

    partition: TopicPartition
    offsets: frozenset[int]
    error: BaseException | None


def can_ride(
    units: Iterable[AckUnit],
    pending: Mapping[TopicPartition, Any],
    wanted: Mapping[TopicPartition, uuid.UUID],
    kept: Mapping[TopicPartition, uuid.UUID],
) -> bool:
    """Whether acknowledgements meant for a ShareAcknowledge may ride on the ShareFetch
    about to leave instead: none belongs to a commit (those go in a ShareAcknowledge,
    as Kafka's commitSync/commitAsync) or renews, and that fetch keeps every
    partition of them and of the pending ones in the open session (``kept``:
    what it holds)."""
    return all(
        u.commit is None and u.tp in wanted and u.tp in kept and not renews(u.acks) for u in units
    ) and all(tp in wanted and tp in kept for tp in pending)


def merged_acks(units: Iterable[AckUnit]) -> dict[TopicPartition, Mapping[int, int]]:
    """The units' acknowledgements per partition (a later unit's type wins)."""
    single: dict[TopicPartition, Mapping[int, int]] = {}
    several: dict[TopicPartition, dict[int, int]] = {}  # merged into a dict of our own
    for u in units:
        mine = several.get(u.tp)
        if mine is not None:
            mine.update(u.acks)
        elif u.tp in single:
            several[u.tp] = {**single[u.tp], **u.acks}
        else:
            single[u.tp] = u.acks
    return {**single, **several}


_OFFSET = operator.itemgetter(2)  # a ShareRecord's offset


class Deliveries:
    """The records handed out by the last poll, and the types given to them."""

    __slots__ = ("delivered", "nodes", "typed")

    def __init__(self) -> None:
        # offset -> the node that delivered it; the nodes that did, per partition
        # (a superset once records are given back); and the types given so far
        # (offset -> type, for delivered offsets only). Whole dicts are built and
        # merged at once (dict.fromkeys, update), not record by record.
        self.delivered: dict[TopicPartition, dict[int, int]] = {}
        self.nodes: dict[TopicPartition, set[int]] = {}
        self.typed: dict[TopicPartition, dict[int, int]] = {}

    def deliver(self, node: int, tp: TopicPartition, records: Sequence[Any]) -> None:
        """``records`` (ShareRecords) of ``tp``, fetched from ``node``, go to the application."""
        offsets = dict.fromkeys(map(_OFFSET, records), node)
        delivered = self.delivered.get(tp)
        if delivered is None:
            self.delivered[tp] = offsets
            self.nodes[tp] = {node}
            return
        delivered.update(offsets)  # delivered again: the latest node acknowledges it
        self.nodes[tp].add(node)
        typed = self.typed.get(tp)
        if typed:  # and untyped again
            for offset in offsets:
                typed.pop(offset, None)

    def undeliver(self, tp: TopicPartition, offset: int) -> int:
        """A record given back: no longer delivered. Returns the node that
        delivered it (-1: none)."""
        self.typed.get(tp, {}).pop(offset, None)
        return self.delivered.get(tp, {}).pop(offset, -1)

    def acknowledge(self, tp: TopicPartition, offset: int, kind: int) -> None:
        """Type a delivered record (typing it again changes the type).

        Raises:
            UsageError: the record is not among those delivered by the last
                poll, or its acknowledgement was already taken (committed).
        """
        if offset not in self.delivered.get(tp, ()):
            raise UsageError(
                f"{tp.topic}-{tp.partition} offset {offset} cannot be acknowledged: it was not "
                "delivered by the last poll, or its acknowledgement was already committed"
            )
        self.typed.setdefault(tp, {})[offset] = int(kind)

    def acknowledge_all(
        self, kind: int, skip: Collection[tuple[TopicPartition, int]] = frozenset()
    ) -> None:
        """Type every delivered record that has no type yet (implicit acknowledgement),
        except the ``(partition, offset)`` pairs in ``skip``."""
        kind = int(kind)
        for tp, offsets in self.delivered.items():
            typed = self.typed.get(tp)
            if skip:
                typed = self.typed.setdefault(tp, {})
                for offset in offsets:
                    if offset not in typed and (tp, offset) not in skip:
                        typed[offset] = kind
            else:
                every = dict.fromkeys(offsets, kind)
                if typed:
                    every.update(typed)
                self.typed[tp] = every

    def unacknowledged(self) -> int:
        """Delivered records without a type."""
        return sum(len(o) - len(self.typed.get(tp, ())) for tp, o in self.delivered.items())

    def take_typed(self, pending: dict[int, dict[TopicPartition, dict[int, int]]]) -> int:
        """Move every typed delivered record to ``pending`` (node -> partition ->
        offset -> type); returns how many stay untyped."""
        left = 0
        for tp in list(self.delivered):
            offsets = self.delivered[tp]
            typed = self.typed.pop(tp, None)
            if typed:
                nodes = self.nodes[tp]
                if len(nodes) == 1 and len(typed) == len(offsets):
                    # Every one typed, from one node: the usual case, moved at once.
                    [node] = nodes
                    pending.setdefault(node, {}).setdefault(tp, {}).update(typed)
                    offsets.clear()
                else:
                    for offset, kind in typed.items():
                        node = offsets.pop(offset)
                        pending.setdefault(node, {}).setdefault(tp, {})[offset] = kind
            left += len(offsets)
            if not offsets:
                del self.delivered[tp]
                del self.nodes[tp]
        return left
