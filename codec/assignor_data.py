"""The user data that Kafka's sticky assignors put in a consumer's subscription.

A member's JoinGroup metadata (``ConsumerProtocolSubscription``) carries, for
each assignor it offers, opaque user data that the assignor writes and the
group leader's copy of the same assignor reads. Java's two sticky assignors
define theirs with Kafka's older ``Struct`` types rather than the JSON message
specs, so the layouts are written out here (no generator covers them).

Rules:

* ``sticky`` (Java's ``StickyAssignor``, KIP-54). Version 1: the member's
  previous assignment, an int32-counted array of (topic: int16-length string,
  partitions: int32-counted array of int32), then the generation (int32) in
  which the member got that assignment. Version 0 lacks the generation. The
  bytes carry no version: a reader tries version 1, then version 0, ignores
  anything past the end of what it parsed (as Java's ``Schema.read`` does),
  and treats data that parses as neither as absent. Writers always write
  version 1, without a version number, as Java does.
* kafka-python (3.x) writes version 1 behind an int16 version number (1).
  That layout is read too, after Java's, which it cannot be mistaken for:
  read as Java's, its first int32 (an array count) is at least 65536, more
  elements than the bytes left can hold, so that parse fails.
* ``cooperative-sticky`` (Java's ``CooperativeStickyAssignor``): the
  generation (int32) alone. Since ``ConsumerProtocolSubscription`` version 2
  carries the generation itself, this only matters to leaders that read older
  subscriptions.
* A generation of -1 means none (the member never had an assignment).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from io import BytesIO

from . import primitives as p

__all__ = [
    "NO_GENERATION",
    "StickyUserData",
    "decode_cooperative_sticky_user_data",
    "decode_sticky_user_data",
    "encode_cooperative_sticky_user_data",
    "encode_sticky_user_data",
]

NO_GENERATION = -1


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _TopicAssignment:
    topic: str = ""
    partitions: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _StickyStruct:
    previous_assignment: list[_TopicAssignment] = dataclasses.field(default_factory=list)
    generation: int = NO_GENERATION


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _CooperativeStruct:
    generation: int = NO_GENERATION


_TOPIC = p.Schema(
    "StickyAssignorUserData.TopicAssignment",
    _TopicAssignment,
    [("topic", p.String), ("partitions", p.Array(p.Int32))],
)
_STICKY_V0 = p.Schema(
    "StickyAssignorUserData v0", _StickyStruct, [("previous_assignment", p.Array(_TOPIC))]
)
_STICKY_V1 = p.Schema(
    "StickyAssignorUserData v1",
    _StickyStruct,
    [("previous_assignment", p.Array(_TOPIC)), ("generation", p.Int32)],
)
_COOPERATIVE_V0 = p.Schema(
    "CooperativeStickyAssignorUserData v0", _CooperativeStruct, [("generation", p.Int32)]
)


@dataclasses.dataclass(frozen=True, slots=True)
class StickyUserData:
    """What a ``sticky`` member reported: its previous assignment and that assignment's
    generation (:data:`NO_GENERATION` when absent, as in version 0)."""

    partitions: tuple[tuple[str, int], ...]
    generation: int = NO_GENERATION


def encode_sticky_user_data(partitions: Iterable[tuple[str, int]], generation: int) -> bytes:
    """The ``sticky`` assignor's user data (version 1) for a member that was last
    assigned ``partitions`` (``(topic, partition)`` pairs) in ``generation``."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    obj = _StickyStruct(
        previous_assignment=[
            _TopicAssignment(topic=t, partitions=sorted(ps)) for t, ps in sorted(by_topic.items())
        ],
        generation=generation,
    )
    out: bytes = _STICKY_V1.compile().build(obj)
    return out


def decode_sticky_user_data(data: bytes | None) -> StickyUserData | None:
    """A ``sticky`` member's user data (version 1, else version 0); None when there is
    none or it parses as neither (the leader then ignores the member's history)."""
    if not data:
        return None
    attempts = [(_STICKY_V1, 0), (_STICKY_V0, 0)]
    if data[:2] == b"\x00\x01":  # kafka-python's: version 1, then its struct
        attempts.append((_STICKY_V1, 2))
    for schema, start in attempts:
        try:
            obj = schema.compile().parse_stream(BytesIO(data[start:]))
        except Exception:  # construct and codec errors alike: try the next layout
            continue
        return StickyUserData(
            tuple((t.topic, part) for t in obj.previous_assignment for part in t.partitions),
            obj.generation,
        )
    return None


def encode_cooperative_sticky_user_data(generation: int) -> bytes:
    """The ``cooperative-sticky`` assignor's user data: the member's generation."""
    out: bytes = _COOPERATIVE_V0.compile().build(_CooperativeStruct(generation=generation))
    return out


def decode_cooperative_sticky_user_data(data: bytes | None) -> int | None:
    """The generation in ``cooperative-sticky`` user data; None when absent or malformed."""
    if not data:
        return None
    try:
        obj = _COOPERATIVE_V0.compile().parse_stream(BytesIO(data))
    except Exception:
        return None
    generation: int = obj.generation
    return generation
