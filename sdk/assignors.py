"""Partition assignors of the classic consumer group protocol, and their wire payloads.

Rules (matching the Java client's assignors):

* ``range``: per topic, the subscribed members sorted by (group instance id
  or member id) each get a contiguous range; the first ``partitions %
  members`` get one extra.
* ``roundrobin``: every subscribed partition, sorted by topic then partition,
  dealt to the sorted members in turn, skipping members not subscribed to
  the partition's topic.
* ``sticky`` (KIP-54): balanced (with equal subscriptions, member counts
  differ by at most one; otherwise no member holds two or more partitions
  more than a member that could take one of them) while keeping as many
  partitions as balance allows with the members that held them. A member's
  history is its user data (its last assignment and that assignment's
  generation, in Java's layout: see :mod:`trafka.codec.assignor_data`), since
  an eager member joins owning nothing. A partition claimed by several
  members stays with the highest generation; a tie at the top frees it. The
  detailed rules open the sticky section below.
* ``cooperative-sticky``: the same assignment from the owned partitions and
  generation of the subscription, minus every partition that changes owner:
  it is first revoked by its old owner and given to the new one in the
  follow-up rebalance that the old owner triggers (KIP-429).
* Every assignor is deterministic: same input, same output.

The member metadata on the wire is ``ConsumerProtocolSubscription`` (we write
version 3: topics, user data, owned partitions, generation, rack) and the
assignment ``ConsumerProtocolAssignment`` (version 3); both start with an
int16 version and any version is read (newer ones are forward compatible).
Each assignor a member offers gets its own subscription, with that assignor's
user data (:func:`subscription_user_data`; all of them: :func:`join_protocols`).
The leader's step (:class:`LeaderAssignment`) reads every member's
subscription; one it cannot read subscribes to nothing.
"""

from __future__ import annotations

import dataclasses
import struct
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from typing import Any

from trafka.codec import DecodeError, decode_versioned
from trafka.codec.assignor_data import (
    NO_GENERATION,
    decode_cooperative_sticky_user_data,
    decode_sticky_user_data,
    encode_cooperative_sticky_user_data,
    encode_sticky_user_data,
)
from trafka.codec.messages import consumer_protocol as cp

from .consumer_types import TopicPartition

__all__ = [
    "ASSIGNORS",
    "LeaderAssignment",
    "MemberSubscription",
    "assign",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "is_cooperative",
    "join_protocols",
    "subscription_user_data",
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


# -- the sticky assignors ---------------------------------------------------------------------
#
# Rules (Java's StickyAssignor and CooperativeStickyAssignor, KIP-54, KIP-429):
#
# * What a member held before ("history") comes, for ``sticky``, from its user data
#   (Java's layout: the previous assignment and its generation), because an eager
#   member revokes everything and joins with no owned partitions; a member without
#   readable user data falls back on the subscription's owned partitions and
#   generation. For ``cooperative-sticky`` it is the owned partitions and the
#   subscription's generation (version 2+), else the generation in its user data.
# * A claim counts if the partition still exists and its claimant still subscribes
#   to the topic. A partition claimed by several members goes to the one with the
#   highest generation; on a tie at the top nobody keeps it.
# * Balance first: when every member subscribes to the same topics, counts differ by
#   at most one; otherwise no member holds two or more partitions more than a member
#   that could take one of them. Within that, kept claims are as many as possible:
#   with equal subscriptions exactly as many as the quotas allow (the members that
#   kept the most get the larger quota); otherwise greedily, a kept partition moving
#   only when no chain of moves of unkept ones restores balance. Like Java's general
#   case this is a heuristic: a cleverer placement of the unkept partitions can
#   sometimes spare a kept one.
# * cooperative-sticky withholds a partition from its new owner while another member
#   still reports owning it (unless the new owner is the claim's winner): the owner
#   revokes it first, and the follow-up rebalance hands it over.


def subscription_user_data(
    name: str, assigned: Iterable[TopicPartition] | None, generation: int
) -> bytes | None:
    """The user data assignor ``name`` puts in a member's subscription (Java's
    ``subscriptionUserData``): ``sticky`` the member's last assignment and its generation
    (nothing before the first assignment), ``cooperative-sticky`` the generation."""
    if name == "sticky":
        return None if assigned is None else encode_sticky_user_data(assigned, generation)
    if name == "cooperative-sticky":
        return encode_cooperative_sticky_user_data(generation)
    return None


def _history(name: str, m: MemberSubscription) -> tuple[tuple[TopicPartition, ...], int]:
    """``(partitions, generation)`` the member held before, as assignor ``name`` reads it
    (Java's ``memberData``)."""
    if name == "sticky":
        data = decode_sticky_user_data(m.user_data)
        if data is not None:
            return tuple(TopicPartition(t, p) for t, p in data.partitions), data.generation
        return m.owned, m.generation
    generation = m.generation
    if generation < 0:
        from_user_data = decode_cooperative_sticky_user_data(m.user_data)
        generation = NO_GENERATION if from_user_data is None else from_user_data
    return m.owned, generation


def _claim_winners(
    partitions: Mapping[str, int],
    subscribed: Mapping[str, frozenset[str]],
    histories: Mapping[str, tuple[tuple[TopicPartition, ...], int]],
) -> dict[TopicPartition, str]:
    """The member that keeps each validly claimed partition: the highest generation
    wins; a tie at the top leaves the partition to nobody."""
    best: dict[TopicPartition, tuple[int, list[str]]] = {}
    for mid, (tps, generation) in histories.items():
        for tp in set(tps):
            if tp.topic not in subscribed[mid] or not 0 <= tp.partition < partitions[tp.topic]:
                continue
            seen = best.get(tp)
            if seen is None or generation > seen[0]:
                best[tp] = (generation, [mid])
            elif generation == seen[0]:
                seen[1].append(mid)
    return {tp: mids[0] for tp, (_, mids) in best.items() if len(mids) == 1}


def _order(members: Mapping[str, MemberSubscription]) -> dict[str, tuple[str, str]]:
    return {mid: (m.sort_key, mid) for mid, m in members.items()}


def _fill_equal(
    all_tps: list[TopicPartition],
    kept: dict[str, list[TopicPartition]],
    key: Mapping[str, tuple[str, str]],
) -> dict[str, list[TopicPartition]]:
    """Every member subscribes to ``all_tps``: quotas of ``floor`` or ``floor + 1``,
    the larger ones to the members that kept the most (so the fewest partitions
    move), then the rest dealt round-robin (from nothing, the round robin
    assignment, as in the javadoc's first example)."""
    n = len(kept)
    floor, extra = divmod(len(all_tps), n)
    out: dict[str, list[TopicPartition]] = {}
    for mid in sorted(kept, key=lambda k: (-len(kept[k]), key[k])):
        mine = sorted(kept[mid])
        cap = floor
        if extra and len(mine) > floor:
            cap, extra = floor + 1, extra - 1
        out[mid] = mine[:cap]
    taken = {tp for tps in out.values() for tp in tps}
    free = deque(tp for tp in all_tps if tp not in taken)
    members = sorted(out, key=key.__getitem__)
    hungry = deque(mid for mid in members if len(out[mid]) < floor)
    while hungry and free:
        mid = hungry.popleft()
        out[mid].append(free.popleft())
        if len(out[mid]) < floor:
            hungry.append(mid)
    for mid in members:  # the remaining ``extra`` partitions, one to a member at floor
        if not free:
            break
        if len(out[mid]) == floor:
            out[mid].append(free.popleft())
    return out


def _fill_general(
    all_tps: list[TopicPartition],
    subscribed: Mapping[str, frozenset[str]],
    kept: dict[str, list[TopicPartition]],
    key: Mapping[str, tuple[str, str]],
) -> dict[str, list[TopicPartition]]:
    """Subscriptions differ: keep every claim and give each other partition (topics
    with the fewest subscribers first) to its least loaded subscriber. Then, while a
    member holds two or more partitions more than another that could take one of
    them, move partitions: first along a chain of "loose" partitions (never claimed,
    or moved already), each to a member subscribed to its topic, from a member to one
    holding two or more fewer; only when no such chain exists, a kept partition
    straight from the largest such gap."""
    subscribers: dict[str, list[str]] = defaultdict(list)
    for mid in sorted(subscribed, key=key.__getitem__):
        for t in subscribed[mid]:
            subscribers[t].append(mid)
    held = {mid: _ByTopic(tps) for mid, tps in kept.items()}
    loose = {mid: _ByTopic(()) for mid in kept}
    size = {mid: len(tps) for mid, tps in kept.items()}
    taken = {tp for tps in kept.values() for tp in tps}
    for tp in sorted(all_tps, key=lambda tp: (len(subscribers[tp.topic]), tp)):
        if tp not in taken:
            mid = min(subscribers[tp.topic], key=lambda k: (size[k], key[k]))
            loose[mid].add(tp)
            size[mid] += 1
    # Every step takes one partition from a member and gives one to a member holding
    # two or more fewer (those in between give one and take one): the sum of the
    # squared counts falls, so this ends.
    while True:
        chain = _loose_chain(size, subscribers, loose, key)
        if chain is None:
            move = _kept_move(size, subscribed, held, key)
            if move is None:
                break
            tp, src, dst = move
            held[src].remove(tp)
            chain = [(tp, src, dst)]
        else:
            for tp, src, _ in chain:
                loose[src].remove(tp)
        for tp, _, dst in chain:
            loose[dst].add(tp)
        size[chain[0][1]] -= 1
        size[chain[-1][2]] += 1
    return {mid: sorted(held[mid].all() + loose[mid].all()) for mid in kept}


class _ByTopic:
    """A member's partitions indexed by topic, for the moves' topic intersections."""

    __slots__ = ("topics",)

    def __init__(self, tps: Iterable[TopicPartition]) -> None:
        self.topics: dict[str, set[TopicPartition]] = defaultdict(set)
        for tp in tps:
            self.topics[tp.topic].add(tp)

    def add(self, tp: TopicPartition) -> None:
        self.topics[tp.topic].add(tp)

    def remove(self, tp: TopicPartition) -> None:
        ps = self.topics[tp.topic]
        ps.remove(tp)
        if not ps:
            del self.topics[tp.topic]

    def movable_to(self, topics: frozenset[str]) -> TopicPartition | None:
        """The greatest partition of one of ``topics``, if any."""
        mine = self.topics
        if len(mine) < len(topics):
            common = [t for t in mine if t in topics]
        else:
            common = [t for t in topics if t in mine]
        return max(mine[max(common)]) if common else None

    def all(self) -> list[TopicPartition]:
        return [tp for ps in self.topics.values() for tp in ps]


def _loose_chain(
    size: Mapping[str, int],
    subscribers: Mapping[str, list[str]],
    loose: Mapping[str, _ByTopic],
    key: Mapping[str, tuple[str, str]],
) -> list[tuple[TopicPartition, str, str]] | None:
    """The shortest chain of loose partition moves ``(partition, from, to)`` from a
    member to one holding two or more fewer, starting from the largest members; None
    if there is none. A breadth-first search over members, a member leading to every
    subscriber of a topic it holds a loose partition of."""
    smallest = min(size.values())
    for level in sorted(set(size.values()), reverse=True):
        if level - smallest < 2:
            return None
        came: dict[str, tuple[TopicPartition, str] | None] = {
            mid: None for mid in sorted((m for m in size if size[m] == level), key=key.__getitem__)
        }
        queue = deque(came)
        while queue:
            src = queue.popleft()
            for topic in sorted(loose[src].topics):
                tp = max(loose[src].topics[topic])
                for dst in subscribers[topic]:
                    if dst in came:
                        continue
                    came[dst] = (tp, src)
                    if size[dst] <= level - 2:
                        chain = []
                        at: str = dst
                        step = came[at]
                        while step is not None:
                            chain.append((step[0], step[1], at))
                            at = step[1]
                            step = came[at]
                        return chain[::-1]
                    queue.append(dst)
    return None


def _kept_move(
    size: Mapping[str, int],
    subscribed: Mapping[str, frozenset[str]],
    held: Mapping[str, _ByTopic],
    key: Mapping[str, tuple[str, str]],
) -> tuple[TopicPartition, str, str] | None:
    """A kept partition to move straight to a member holding two or more fewer: the
    widest gap, then the smaller member keys; None once balanced."""
    by_size = sorted(size, key=lambda k: (size[k], key[k]))
    best: tuple[tuple[int, tuple[str, str], tuple[str, str]], TopicPartition, str, str] | None
    best = None
    for src in reversed(by_size):
        for dst in by_size:
            gap = size[src] - size[dst]
            if gap < 2 or (best is not None and -gap > best[0][0]):
                break
            tp = held[src].movable_to(subscribed[dst])
            if tp is not None:
                rank = (-gap, key[src], key[dst])
                if best is None or rank < best[0]:
                    best = (rank, tp, src, dst)
                break
    if best is None:
        return None
    return best[1], best[2], best[3]


def _sticky_target(
    name: str, partitions: Mapping[str, int], members: Mapping[str, MemberSubscription]
) -> tuple[
    Assignment, dict[TopicPartition, str], dict[str, tuple[tuple[TopicPartition, ...], int]]
]:
    """The sticky assignment, the winner of each claim, and each member's history."""
    key = _order(members)
    subscribed = {
        mid: frozenset(t for t in m.topics if partitions.get(t, 0) > 0)
        for mid, m in members.items()
    }
    histories = {mid: _history(name, m) for mid, m in members.items()}
    winners = _claim_winners(partitions, subscribed, histories)
    kept: dict[str, list[TopicPartition]] = {mid: [] for mid in members}
    for tp, mid in winners.items():
        kept[mid].append(tp)
    topics = sorted({t for ts in subscribed.values() for t in ts})
    all_tps = [TopicPartition(t, p) for t in topics for p in range(partitions[t])]
    if not members:
        return {}, winners, histories
    if len(set(subscribed.values())) == 1:
        plan = _fill_equal(all_tps, kept, key)
    else:
        plan = _fill_general(all_tps, subscribed, kept, key)
    return {mid: sorted(plan[mid]) for mid in members}, winners, histories


def _sticky(partitions: Mapping[str, int], members: Mapping[str, MemberSubscription]) -> Assignment:
    return _sticky_target("sticky", partitions, members)[0]


def _cooperative_sticky(
    partitions: Mapping[str, int], members: Mapping[str, MemberSubscription]
) -> Assignment:
    target, winners, histories = _sticky_target("cooperative-sticky", partitions, members)
    owners: dict[TopicPartition, set[str]] = defaultdict(set)
    for mid, (tps, _) in histories.items():
        for tp in tps:
            owners[tp].add(mid)
    return {
        mid: [tp for tp in tps if winners.get(tp) == mid or not owners.get(tp, set()) - {mid}]
        for mid, tps in target.items()
    }


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


# -- a member's side: what it offers in JoinGroup, and the leader's step ------------------------


def join_protocols(
    assignors: Iterable[str],
    topics: Iterable[str],
    owned: Iterable[TopicPartition],
    *,
    generation: int,
    rack: str | None,
    assigned: frozenset[TopicPartition] | None,
    assigned_generation: int,
) -> list[tuple[str, bytes]]:
    """JoinGroup's protocols: each assignor the member offers, in its order, with
    the member's subscription for it (its own user data: :func:`subscription_user_data`
    of the last assignment ``assigned`` and its generation)."""
    topics, owned = tuple(topics), sorted(owned)
    return [
        (
            name,
            encode_subscription(
                topics,
                owned,
                generation=generation,
                rack=rack,
                user_data=subscription_user_data(name, assigned, assigned_generation),
            ),
        )
        for name in assignors
    ]


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderAssignment:
    """The group leader's step of a rebalance: the members' subscriptions from its
    JoinGroup answer, assigned once the partition counts of their topics are known.

    Attributes:
        members: every member's subscription; one whose metadata cannot be read
            subscribes to nothing (it is still a member, and gets an empty assignment).
        topics: the topics any member subscribes to.
    """

    members: tuple[MemberSubscription, ...]
    topics: frozenset[str]

    @classmethod
    def from_join(cls, members: Iterable[Any]) -> LeaderAssignment:
        """From JoinGroup's ``members`` (``member_id``, ``metadata``, ``group_instance_id``)."""
        subscriptions = []
        for m in members:
            try:
                sub = decode_subscription(m.member_id, m.metadata, m.group_instance_id)
            except DecodeError:
                sub = MemberSubscription(m.member_id, ())
            subscriptions.append(sub)
        return cls(tuple(subscriptions), frozenset(t for s in subscriptions for t in s.topics))

    def assignments(self, name: str, partition_counts: Mapping[str, int]) -> dict[str, bytes]:
        """SyncGroup's assignments by member id, from assignor ``name``.

        Raises:
            KeyError: unknown assignor name.
        """
        counts = {t: partition_counts.get(t, 0) for t in self.topics}
        plan = assign(name, counts, {m.member_id: m for m in self.members})
        return {mid: encode_assignment(tps) for mid, tps in plan.items()}
