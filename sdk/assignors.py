"""Partition assignors of the classic consumer group protocol, and their wire payloads.

Rules (matching the Java client's assignors):

* ``range``: per topic, the subscribed members sorted by (group instance id
  or member id) each get a contiguous range; the first ``partitions %
  members`` get one extra.
* ``roundrobin``: every subscribed partition, sorted by topic then partition,
  dealt to the sorted members in turn, skipping members not subscribed to
  the partition's topic.
* ``sticky``: balanced (member counts differ by at most one where their
  subscriptions allow) while keeping as many partitions with their current
  owners as possible. An owned partition claimed by two members stays with
  the one that reports the newer generation.
* ``cooperative-sticky``: the sticky assignment, minus every partition that
  changes owner: it is first revoked by its old owner and given to the new
  one in the follow-up rebalance that the old owner triggers (KIP-429).
* Every assignor is deterministic: same input, same output.

The member metadata on the wire is ``ConsumerProtocolSubscription`` (we write
version 3: topics, user data, owned partitions, generation, rack) and the
assignment ``ConsumerProtocolAssignment`` (version 3); both start with an
int16 version and any version is read (newer ones are forward compatible).
"""

from __future__ import annotations

import dataclasses
import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping

from trafka.codec import decode_versioned
from trafka.codec.messages import consumer_protocol as cp

from .fetcher import TopicPartition

__all__ = [
    "ASSIGNORS",
    "MemberSubscription",
    "assign",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "is_cooperative",
]

_SUB_VERSION = 3
_ASSIGN_VERSION = 3
_I16 = struct.Struct(">h")


@dataclasses.dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What a member told the group in JoinGroup."""

    member_id: str
    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...] = ()
    generation: int = -1
    instance_id: str | None = None
    rack: str | None = None
    user_data: bytes | None = None

    @property
    def sort_key(self) -> str:
        return self.instance_id or self.member_id


# -- payloads -----------------------------------------------------------------------------


def _group_tps(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in tps:
        by_topic[tp.topic].append(tp.partition)
    return {t: sorted(ps) for t, ps in sorted(by_topic.items())}


def encode_subscription(
    topics: Iterable[str],
    owned: Iterable[TopicPartition] = (),
    *,
    generation: int = -1,
    rack: str | None = None,
    user_data: bytes | None = None,
) -> bytes:
    """The JoinGroup protocol metadata for a consumer."""
    obj = cp.ConsumerProtocolSubscription(
        topics=sorted(set(topics)),
        user_data=user_data,
        owned_partitions=[
            cp.ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=ps)
            for t, ps in _group_tps(owned).items()
        ],
        generation_id=generation,
        rack_id=rack or None,
    )
    body: bytes = cp.CONSUMERPROTOCOLSUBSCRIPTION_SCHEMAS[_SUB_VERSION].compile().build(obj)
    return _I16.pack(_SUB_VERSION) + body


def decode_subscription(
    member_id: str, data: bytes, instance_id: str | None = None
) -> MemberSubscription:
    """A member's subscription from its JoinGroup metadata.

    Raises:
        DecodeError: malformed metadata.
    """
    sub = decode_versioned(
        cp.CONSUMERPROTOCOLSUBSCRIPTION_SCHEMAS, data, "ConsumerProtocolSubscription"
    )
    owned = tuple(TopicPartition(t.topic, p) for t in sub.owned_partitions for p in t.partitions)
    return MemberSubscription(
        member_id=member_id,
        topics=tuple(sub.topics),
        owned=owned,
        generation=sub.generation_id,
        instance_id=instance_id,
        rack=sub.rack_id,
        user_data=sub.user_data,
    )


def encode_assignment(
    partitions: Iterable[TopicPartition], user_data: bytes | None = None
) -> bytes:
    """The SyncGroup assignment payload for one member."""
    obj = cp.ConsumerProtocolAssignment(
        assigned_partitions=[
            cp.ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
            for t, ps in _group_tps(partitions).items()
        ],
        user_data=user_data,
    )
    body: bytes = cp.CONSUMERPROTOCOLASSIGNMENT_SCHEMAS[_ASSIGN_VERSION].compile().build(obj)
    return _I16.pack(_ASSIGN_VERSION) + body


def decode_assignment(data: bytes) -> set[TopicPartition]:
    """The partitions of a SyncGroup assignment (empty payload: nothing assigned).

    Raises:
        DecodeError: malformed payload.
    """
    if not data:
        return set()
    obj = decode_versioned(
        cp.CONSUMERPROTOCOLASSIGNMENT_SCHEMAS, data, "ConsumerProtocolAssignment"
    )
    return {TopicPartition(t.topic, p) for t in obj.assigned_partitions for p in t.partitions}


# -- assignors ----------------------------------------------------------------------------

Assignment = dict[str, list[TopicPartition]]


def _range(partitions: Mapping[str, int], members: Mapping[str, MemberSubscription]) -> Assignment:
    out: Assignment = {m: [] for m in members}
    by_topic: dict[str, list[MemberSubscription]] = defaultdict(list)
    for m in members.values():
        for t in m.topics:
            by_topic[t].append(m)
    for topic in sorted(by_topic):
        n = partitions.get(topic)
        if not n:
            continue
        subs = sorted(by_topic[topic], key=lambda m: (m.sort_key, m.member_id))
        per, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            count = per + (1 if i < extra else 0)
            out[m.member_id].extend(TopicPartition(topic, p) for p in range(start, start + count))
            start += count
    return out


def _roundrobin(
    partitions: Mapping[str, int], members: Mapping[str, MemberSubscription]
) -> Assignment:
    out: Assignment = {m: [] for m in members}
    order = sorted(members.values(), key=lambda m: (m.sort_key, m.member_id))
    if not order:
        return out
    subscribed = {m.member_id: set(m.topics) for m in order}
    topics = sorted({t for m in order for t in m.topics if partitions.get(t)})
    i = 0
    for topic in topics:
        for p in range(partitions[topic]):
            for _ in range(len(order)):
                m = order[i % len(order)]
                i += 1
                if topic in subscribed[m.member_id]:
                    out[m.member_id].append(TopicPartition(topic, p))
                    break
    return out


def _sticky(partitions: Mapping[str, int], members: Mapping[str, MemberSubscription]) -> Assignment:
    subscribed = {mid: set(m.topics) for mid, m in members.items()}
    all_tps = sorted(
        TopicPartition(t, p)
        for t in {t for m in members.values() for t in m.topics}
        for p in range(partitions.get(t, 0))
    )
    valid = set(all_tps)
    # Keep owned partitions that still exist and are still subscribed; on a
    # double claim the newer generation wins (then the smaller member id).
    claims: dict[TopicPartition, tuple[int, str]] = {}
    for mid in sorted(members):
        m = members[mid]
        for tp in m.owned:
            if tp not in valid or tp.topic not in subscribed[mid]:
                continue
            prev = claims.get(tp)
            if prev is None or m.generation > prev[0]:
                claims[tp] = (m.generation, mid)
    out: dict[str, list[TopicPartition]] = {mid: [] for mid in members}
    for tp, (_, mid) in sorted(claims.items()):
        out[mid].append(tp)
    # Quotas for the common case of members sharing subscriptions: nobody keeps
    # more than the ceiling, and only as many members as the remainder allow
    # keep the ceiling.
    n_members = len(members)
    if n_members:
        ceil = -(-len(all_tps) // n_members)
        floor = len(all_tps) // n_members
        extra_slots = len(all_tps) - floor * n_members
        for mid in sorted(out, key=lambda k: (-len(out[k]), k)):
            owned = out[mid]
            if extra_slots > 0 and len(owned) >= ceil:
                keep = ceil
                extra_slots -= 1
            else:
                keep = floor
            if len(owned) > keep:
                out[mid] = owned[:keep]
    taken = {tp for tps in out.values() for tp in tps}
    for tp in all_tps:
        if tp in taken:
            continue
        cands = [mid for mid in members if tp.topic in subscribed[mid]]
        if not cands:
            continue
        best = min(cands, key=lambda k: (len(out[k]), k))
        out[best].append(tp)
    # Rebalance what subscriptions allow: move from the fullest to the emptiest.
    for _ in range(len(all_tps) + 1):
        order = sorted(out, key=lambda k: (len(out[k]), k))
        moved = False
        for small in order:
            for big in reversed(order):
                if len(out[big]) - len(out[small]) <= 1:
                    break
                movable = [tp for tp in out[big] if tp.topic in subscribed[small]]
                if movable:
                    tp = movable[-1]
                    out[big].remove(tp)
                    out[small].append(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break
    return {mid: sorted(tps) for mid, tps in out.items()}


def _cooperative_sticky(
    partitions: Mapping[str, int], members: Mapping[str, MemberSubscription]
) -> Assignment:
    target = _sticky(partitions, members)
    owner: dict[TopicPartition, str] = {}
    for mid, m in members.items():
        for tp in m.owned:
            owner.setdefault(tp, mid)
    return {mid: [tp for tp in tps if owner.get(tp, mid) == mid] for mid, tps in target.items()}


ASSIGNORS = {
    "range": _range,
    "roundrobin": _roundrobin,
    "sticky": _sticky,
    "cooperative-sticky": _cooperative_sticky,
}


def is_cooperative(name: str) -> bool:
    """Whether the assignor follows the incremental (KIP-429) rebalance protocol."""
    return name == "cooperative-sticky"


def assign(
    name: str, partitions: Mapping[str, int], members: Mapping[str, MemberSubscription]
) -> Assignment:
    """Run assignor ``name`` over ``members`` for topics with the given partition counts.

    Raises:
        KeyError: unknown assignor name.
    """
    return ASSIGNORS[name](partitions, members)
