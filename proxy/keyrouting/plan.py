"""Key routing, I/O-free: where each keyed record of a Produce goes, and how the
answers to the parts become the one answer the client expects.

Rules:

* The target of a record with a key is ``hash(key) % partitions`` (the
  configured hash of :data:`HASHES`, Java's murmur2 by default); a record
  without a key stays in the partition the client chose.
* A batch whose records all stay passes byte for byte (an idempotent one with
  only its sequence renumbered, see :mod:`.sequences`). Otherwise its records
  are grouped by target partition, keeping the client's compression,
  timestamps, headers and record order. The legacy messages of Produce v0-2
  (magic 0 or 1, or a compressed wrapper of several) are routed the same way,
  into message sets of their own magic and codec.
* A request carries at most one batch per partition (Kafka refuses more in a
  magic 2 Produce). What a request sends to one target partition is merged
  into one batch: the client's own records for it first (so a partition none
  of whose records moved is answered with the broker's own base offset for
  them), then the records moved in, in the client's order. A merged batch
  holds at most about as many bytes as the largest batch of the request (so
  routing never makes a batch the broker's ``max.message.bytes`` refuses when
  the client's passed); the rest goes in further batches, sent in further
  requests (*rounds*) after the first.
* Where each record goes is decided once, by :mod:`.placement` (the codec's C
  pass its fast path); the plans below differ in what they do with a batch a
  target of which cannot take records, and in how the pieces are sent.
* Four plans, chosen per request by the filter (:mod:`.filter`):

  - *Spans* (:func:`place_spans`): a plain request (as below) whose records the
    codec's C pass locates, acks 1 or -1, with coalescing on: its pieces, per
    target partition, join their leaders' accumulators (:mod:`.coalesce`).
  - *Plain* (:func:`plan_produce`): no transactional id, every batch magic 2
    without producer id. The request is split into one part per leader (as
    the proxy last learned it) and round, each sent on the proxy's own
    connection to that broker. Refused (None) when a topic or the leader of a
    partition the client named is unknown; a batch whose targets have no known
    leader stays where the client put it.
  - *Idempotent* (:mod:`.idempotent_plan`):
    every batch magic 2 with the same producer id and epoch (transactional or
    not). Sequence numbers are the proxy's (:mod:`.sequences`); a client's
    retry re-sends the same upstream batches. Refused like the plain plan, and
    when a batch's targets have no known leader.
  - *Single connection* (:func:`route_produce`): the client's own upstream
    connection, for what the others refuse (SASL clients, unknown topics,
    legacy message sets, mixed producers). Plain batches move only between
    partitions that broker leads; idempotent ones stay.

* The answer (:func:`~.answers.merge_produce`) names exactly the partitions the client
  sent, in its order. A partition whose records were all written, in the
  client's order, at the start of one batch of that same partition gets the
  broker's answer for that batch: its base offset is true for every record
  (and its record errors are those of the client's records, which come first).
  Any other partition gets the error of the first of its batches that failed
  (none if none did), no log append time or log start offset (-1), and a base
  offset that no client turns into a place (:func:`unknown_base_offset`): its
  records are not where the client believes, so no offset of the partition it
  named would be true. Where they are is the consumer's to see
  (``origin_headers``, :func:`origin_header`).
* A part that got no answer (its connection lost, its deadline passed) is
  answered for the driver by :func:`~.answers.failed_answer`: each of its partitions
  with the same retriable error. The client hears a lost connection as
  REQUEST_TIMED_OUT (retried by every client; librdkafka gives up on a
  NETWORK_EXCEPTION in a Produce answer).
* Leaders are learned from Metadata answers (:class:`~..topics.Topics`). A part's
  partition answered NOT_LEADER_OR_FOLLOWER (or another error meaning the
  proxy's view is stale) takes the KIP-951 ``current_leader`` hint at once
  when there is one; otherwise :func:`~.answers.learn_leaders` names its topic
  for a Metadata refresh (:func:`~..topics.metadata_request`), which the
  driver sends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trafka.codec.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from trafka.codec.errors import ErrorCode
from trafka.codec.legacy import decode_legacy_entry
from trafka.codec.produce_request import ProduceRequestData, produce_request
from trafka.codec.records import RecordBatchHeader, iter_batches

from ..topics import Topics
from .placement import (
    HASHES,
    ORIGIN_HEADER,
    Hashing,
    Piece,
    Placed,
    build,
    cap_of,
    cheap_to_plan,
    chunked,
    origin_header,
    parse_origin_header,
    place_topic,
    untouchable,
)
from .stats import RouteStats

__all__ = [
    "HASHES",
    "MINUS_ONE_CLIENTS",
    "ORIGIN_HEADER",
    "ProducePlan",
    "ProduceRoute",
    "cheap_to_plan",
    "origin_header",
    "parse_origin_header",
    "plan_produce",
    "route_produce",
    "unknown_base_offset",
]

# Errors meaning the proxy's idea of the partition's leader may be wrong.
_STALE = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NETWORK_EXCEPTION,
    }
)


#: Clients (their ApiVersions software names, KIP-511) whose delivery reports take
#: a base offset of -1 as "no offset" for every record of the batch: Java's
#: ``RecordMetadata``, kafka-python's ``FutureRecordMetadata`` and trafka's SDK.
#: Others (librdkafka, so confluent-kafka and kcat; aiokafka; sarama) give
#: record *i* the offset ``base + i`` whatever the base, so -1 would give every
#: record but the first a real-looking offset: 0, 1, 2...
MINUS_ONE_CLIENTS = frozenset({"apache-kafka-java", "kafka-python", "trafka"})


def unknown_base_offset(count: int, client_software: str | None) -> int:
    """The base offset that makes a client report no offset for any of the
    ``count`` records of its batch: -1 for :data:`MINUS_ONE_CLIENTS` (and for a
    batch of one record), else ``-count``, so that ``base + i`` is negative for
    every record (librdkafka's, aiokafka's and sarama's "no offset")."""
    if count <= 1 or client_software in MINUS_ONE_CLIENTS:
        return -1
    return -count


# A request's part: (round, leader) -> {topic: {partition: batch}}.
_Parts = dict[tuple[int, int], dict[str, dict[int, bytes]]]
# Where the answer for a partition comes from: (part index, partition).
_Source = tuple[int, int]
# A piece of a plain plan (.placement.Piece), its owner the client partition.
_Span = Piece


@dataclass(frozen=True, slots=True)
class ProduceRoute:
    """How a routed Produce maps back: for each partition the client sent (in
    its order), the batches its records went to, the one whose answer is the
    partition's when they all lead it (else None), and how many records the
    client sent there (magic 2 ones only when the answer is the batch's);
    and per part, the (topic, partition) pairs whose answers the merge reads."""

    origin: tuple[tuple[str, tuple[tuple[int, tuple[_Source, ...], _Source | None, int], ...]], ...]
    needs: tuple[frozenset[tuple[str, int]], ...] = ()


@dataclass(frozen=True, slots=True)
class ProducePlan:
    """A pooled Produce: the parts in the order they are sent (one per leader
    and round, earlier rounds first), and how their answers map back."""

    parts: tuple[tuple[int, Any], ...]
    route: ProduceRoute


def plain_request(body: Any, topics: Topics, *, batches: bool = True) -> bool:
    """Whether ``body`` is for the plain plans: no transactional id, every topic
    and the leader of every partition it names known, and (``batches``) no
    batch with a producer id (which :func:`place_plain` checks itself)."""
    if body.transactional_id is not None:
        return False
    for t in body.topic_data:
        if not topics.partitions.get(t.name):
            return False
        for p in t.partition_data:
            if topics.leader(t.name, p.index) < 0:
                return False
            if not batches:
                continue
            for header, _ in iter_batches(p.records or b""):
                # Legacy messages (magic 0/1) never carry a producer id.
                if isinstance(header, RecordBatchHeader) and untouchable(header):
                    return False
    return True


def place_plain(
    body: Any,
    topics: Topics,
    hash_name: Hashing,
    max_size: int,
    origin_headers: bool = False,
    tally: tuple[dict[tuple[str, int], int], list[int]] | None = None,
) -> Placed | None:
    """The records of a plain request (:func:`plain_request`) placed, counted
    nowhere: a batch a target of which has no known leader stays whole. None
    when a batch has a producer id (or the transactional or control bit).
    ``tally``: per client partition its batches' records, and each batch's
    size, added as the batches are read (and a legacy message set, never
    placed as spans, declines at once)."""
    placed = Placed()
    for t in body.topic_data:
        topic, partitions = t.name, topics.partitions[t.name]
        batches = []
        for p in t.partition_data:
            for header, raw in iter_batches(p.records or b""):
                owner = (topic, p.index)
                data = bytes(raw)
                if isinstance(header, RecordBatchHeader):
                    if untouchable(header):
                        return None  # a producer id: another plan
                    if tally is not None:
                        tally[0][owner] = tally[0].get(owner, 0) + header.records_count
                        tally[1].append(len(data))
                elif tally is not None:
                    return None  # legacy messages: never spans
                batches.append((owner, p.index, header, data, True))
        known = bytes(topics.leaders.get((topic, x), -1) >= 0 for x in range(partitions))
        place_topic(
            placed, topic, partitions, batches, hash_name=hash_name, can_take=known,
            max_size=max_size, origin_headers=origin_headers,
        )  # fmt: skip
    return placed


# What :func:`place_spans` found: per target partition its own and moved-in
# pieces, the client partitions some of whose records moved, the records sent
# to each client partition, per batch (topic, records moved, kept), and the cap
# of a merged batch's bytes.
SpansPlaced = tuple[
    dict[tuple[str, int], tuple[list[_Span], list[_Span]]],
    set[tuple[str, int]],
    dict[tuple[str, int], int],
    list[tuple[str, int, int]],
    int,
]


def place_spans(body: Any, topics: Topics, hash_name: Hashing, max_size: int) -> SpansPlaced | None:
    """The pieces of a plain request all of whose records the codec's C pass
    locates (:func:`place_plain`), by target partition, counted nowhere; None
    when it does not, a batch has a producer id, or a target's leader is unknown."""
    counts: dict[tuple[str, int], int] = {}
    sizes: list[int] = []
    placed = place_plain(body, topics, hash_name, max_size, tally=(counts, sizes))
    if placed is None or not placed.located:
        return None
    return placed.targets, placed.split, counts, placed.counted, cap_of(sizes)


def count_placed(stats: RouteStats, placed: list[tuple[str, int, int]]) -> None:
    """Count placed batches (topic, records moved, kept)."""
    for topic, moved_n, kept_n in placed:
        if moved_n:
            stats.batches_rebuilt += 1
        stats.count(topic, moved_n, kept_n)


def _counter(placed: Placed) -> Callable[[tuple[str, int], bool], int]:
    """``count(partition, told)``: the records the client sent to a partition
    (``told``: answered with its batch's own answer). Legacy messages are
    counted (decoded) only when answered without an offset; they have no
    record errors for the count to bound."""
    of: dict[tuple[str, int], list[tuple[Any, bytes]]] = {}
    for owner, _, header, data, _ in placed.batches:
        of.setdefault(owner, []).append((header, data))

    def count(key: tuple[str, int], told: bool) -> int:
        total = 0
        for header, data in of.get(key, ()):
            if header.magic == 2:
                total += header.records_count
            elif not told:
                total += len(decode_legacy_entry(data))
        return total

    return count


def _route_counted(
    body: Any,
    sources: dict[tuple[str, int], list[_Source]],
    kept: dict[tuple[str, int], _Source],
    count: Callable[[tuple[str, int], bool], int],
) -> ProduceRoute:
    """The route of a plan, ``count(partition, told)`` the records the client
    sent to a partition (``told``: answered with its batch's own answer)."""
    origin = []
    needs: dict[int, set[tuple[str, int]]] = {}
    for t in body.topic_data:
        entries = []
        for p in t.partition_data:
            key = (t.name, p.index)
            found = tuple(dict.fromkeys(sources.get(key, [])))
            for part, target in found:
                needs.setdefault(part, set()).add((t.name, target))
            lead = kept.get(key)
            told = lead is not None and len(found) == 1  # the batch's own answer
            entries.append((p.index, found, lead, count(key, told)))
        origin.append((t.name, tuple(entries)))
    parts = max(needs, default=-1) + 1
    return ProduceRoute(tuple(origin), tuple(frozenset(needs.get(i, ())) for i in range(parts)))


def _part_body(body: Any, topics: dict[str, dict[int, bytes]]) -> Any:
    """The upstream request of ``topics``, written on bytes when sent (with a
    client's unknown tagged fields, the codec's message that keeps them)."""
    if body.unknown_tagged_fields:
        return dataclasses.replace(body, topic_data=_topic_data(topics))
    return ProduceRequestData(body.transactional_id, body.acks, body.timeout_ms, _in_order(topics))


def _in_order(topics: dict[str, dict[int, bytes]]) -> list[Any]:
    return [(name, sorted(partitions.items())) for name, partitions in topics.items()]


def _topic_data(topics: dict[str, dict[int, bytes]]) -> list[Any]:
    return produce_request(None, 0, 0, _in_order(topics)).topic_data  # type: ignore[no-any-return]


# -- the plain plan ----------------------------------------------------------------------


def plan_produce(
    body: Any,
    *,
    topics: Topics,
    hash_name: Hashing,
    stats: RouteStats,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    origin_headers: bool = False,
) -> ProducePlan | None:
    """Split a plain producer's Produce request by the leader of each record's target.

    Args:
        body: the decoded ProduceRequest.
        topics: partition counts and leaders.
        hash_name: a key of :data:`HASHES`.
        stats: counters to update.
        max_size: the most a batch may inflate to.
        origin_headers: give the records of a batch that does not stay whole
            a ``trafka-origin`` header (:func:`origin_header`).

    Returns:
        The parts and the route to merge their answers, or None when the
        request is not for this plan (see the module's rules).

    Raises:
        DecodeError: a batch is malformed.
    """
    if not plain_request(body, topics):
        return None
    placed = place_plain(body, topics, hash_name, max_size, origin_headers)
    assert placed is not None  # (plain_request checked the producer ids)
    count_placed(stats, placed.counted)
    stats.batches_untouched_unknown_leader += len(placed.held)
    parts: _Parts = {}
    sources: dict[tuple[str, int], list[_Source]] = {}  # client partition -> its batches
    kept: dict[tuple[str, int], _Source] = {}
    order = _part_order()
    cap = cap_of(len(b[3]) for b in placed.batches)
    chunks: list[list[Piece]] = []
    where: list[tuple[str, int, int, int]] = []  # per chunk: topic, target, round, leader
    for (topic, target), (own, moved) in placed.targets.items():
        leader = topics.leader(topic, target)
        for rnd, chunk in enumerate(chunked(own, moved, cap)):
            chunks.append(chunk)
            where.append((topic, target, rnd, leader))
            order(rnd, leader)
        if own and own[0][0] not in placed.split:
            kept[own[0][0]] = (order(0, leader), target)
    for chunk, (data, _), (topic, target, rnd, leader) in zip(
        chunks, build(chunks, located=placed.located), where, strict=True
    ):
        part = order(rnd, leader)
        parts.setdefault((rnd, leader), {}).setdefault(topic, {})[target] = data
        for piece in chunk:
            sources.setdefault(piece[0], []).append((part, target))
    for t in body.topic_data:
        for p in t.partition_data:
            if not p.records:
                leader = topics.leader(t.name, p.index)
                part = order(0, leader)
                parts.setdefault((0, leader), {}).setdefault(t.name, {})[p.index] = b""
                sources[(t.name, p.index)] = [(part, p.index)]
                kept[(t.name, p.index)] = (part, p.index)
    route = _route_counted(body, sources, kept, _counter(placed))
    return _pooled(body, parts, order, stats, route)


def _pooled(
    body: Any,
    parts: _Parts,
    order: Callable[[int, int], int],
    stats: RouteStats,
    route: ProduceRoute,
) -> ProducePlan:
    """The plan of ``parts`` (counted), in the order ``order`` numbered them."""
    stats.requests_pooled += 1
    if len({leader for _, leader in parts}) > 1:
        stats.requests_split += 1
    ordered = sorted(parts, key=lambda k: order(*k))
    return ProducePlan(
        tuple((leader, _part_body(body, parts[(rnd, leader)])) for rnd, leader in ordered),
        route,
    )


def _part_order() -> Callable[[int, int], int]:
    """Numbers parts in the order they are first named (round by round)."""
    seen: dict[tuple[int, int], int] = {}

    def index(rnd: int, leader: int) -> int:
        return seen.setdefault((rnd, leader), len(seen))

    return index


# -- the single-connection plan ------------------------------------------------------------


def route_produce(
    body: Any,
    *,
    node_id: int,
    topics: Topics,
    hash_name: Hashing,
    stats: RouteStats,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    origin_headers: bool = False,
) -> tuple[Any, ProduceRoute | None]:
    """Move keyed records of a Produce request sent on the client's own connection.

    Only plain magic 2 batches move, and only between partitions ``node_id``
    leads; each target gets one merged batch (no rounds on this path).

    Args:
        body: the decoded ProduceRequest.
        node_id: the upstream broker this request goes to.
        topics: partition counts and leaders.
        hash_name: a key of :data:`HASHES`.
        stats: counters to update.
        max_size, origin_headers: as for :func:`plan_produce`.

    Returns:
        The request to send (``body`` itself when nothing moves) and the route
        to merge its answer with (None when nothing moved).

    Raises:
        DecodeError: a batch is malformed (the client's request is refused).
    """
    placed = Placed()
    for t in body.topic_data:
        count = topics.partitions.get(t.name) or 0
        batches = []
        for p in t.partition_data:
            for header, raw in iter_batches(p.records or b""):
                place = True
                if isinstance(header, RecordBatchHeader) and untouchable(header):
                    stats.batches_untouched_idempotent += 1
                    place = False
                elif not count:
                    stats.batches_untouched_unknown_topic += 1
                    place = False
                batches.append(((t.name, p.index), p.index, header, bytes(raw), place))
        led = bytes(topics.leaders.get((t.name, x), -1) == node_id for x in range(count))
        place_topic(
            placed, t.name, count, batches, hash_name=hash_name, can_take=led,
            max_size=max_size, origin_headers=origin_headers,
        )  # fmt: skip
    count_placed(stats, placed.counted)
    stats.batches_untouched_other_leader += len(placed.held)
    if not placed.split:
        return body, None
    out: dict[str, dict[int, bytes]] = {}
    sources: dict[tuple[str, int], list[_Source]] = {}
    kept: dict[tuple[str, int], _Source] = {}
    chunks = [own + moved for own, moved in placed.targets.values()]
    for (topic, target), chunk, (data, _) in zip(
        placed.targets, chunks, build(chunks, located=placed.located), strict=True
    ):
        out.setdefault(topic, {})[target] = data
        for piece in chunk:
            sources.setdefault(piece[0], []).append((0, target))
        if chunk[0][0] not in placed.split and chunk[0][0] == (topic, target):
            kept[chunk[0][0]] = (0, target)
    for t in body.topic_data:
        for p in t.partition_data:
            if not p.records:
                out.setdefault(t.name, {})[p.index] = p.records
                sources[(t.name, p.index)] = [(0, p.index)]
                kept[(t.name, p.index)] = (0, p.index)
    return dataclasses.replace(body, topic_data=_topic_data(out)), _route_counted(
        body, sources, kept, _counter(placed)
    )
