"""Key routing, I/O-free: where each keyed record of a Produce goes, and how the
answers to the parts become the one answer the client expects.

Rules:

* The target of a record with a key is ``hash(key) % partitions`` (the
  configured hash of :data:`HASHES`, Java's murmur2 by default); a record
  without a key stays in the partition the client chose.
* A batch whose records all stay passes byte for byte. Otherwise it is split
  into one batch per target partition, each keeping the client's compression,
  timestamps, headers and record order. A legacy message of Produce v0-2
  (magic 0 or 1, or a compressed wrapper of several) is routed the same way,
  split into message sets of its own magic.
* In a target partition, the client's own batches that did not move come
  first, then the records moved in from its other partitions (in the client's
  order). So a partition none of whose records moved is answered with the
  broker's own offsets for them.
* Two plans, chosen per request by the driver:

  - *Pooled* (:func:`plan_produce`): a plain producer's request (no
    transactional id, no batch with a producer id). Each record
    goes to its target whichever broker leads it: the request is split into
    one part per leader (as the proxy last learned it), each sent on the
    proxy's own connection to that broker. The plan is refused (None) when a
    topic or the leader of a partition the client named is unknown; a batch
    whose targets have no known leader stays where the client put it.
  - *Single connection* (:func:`route_produce`): the client's own upstream
    connection, for what the pooled plan refuses (idempotent and
    transactional batches, which stay unrouted: their sequence numbers belong
    to the partition the producer chose; unknown topics). Records move only
    between partitions that broker leads.

* The answer (:func:`merge_produce`) names exactly the partitions the client
  sent, in its order. A partition none of whose records moved gets the
  broker's answer for it unchanged. A partition some of whose records moved
  gets the error of the first of its targets that failed (none if none did)
  and the offsets ``-1`` (unknown, as for acks=0): its records are not where
  the client believes, so no offset of the partition it named would be true.
* A part that got no answer (its connection lost, its deadline passed) is
  answered for the driver by :func:`failed_answer`: each of its partitions
  with the same retriable error.
* Leaders are learned from Metadata answers (:class:`Topics`). A part's
  partition answered NOT_LEADER_OR_FOLLOWER (or another error meaning the
  proxy's view is stale) takes the KIP-951 ``current_leader`` hint at once
  when there is one; otherwise :func:`learn_leaders` names its topic for a
  Metadata refresh (:func:`metadata_request`), which the driver sends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trafka.codec.compression import Compression
from trafka.codec.errors import DecodeError, ErrorCode
from trafka.codec.legacy import decode_legacy_entry, encode_message_set
from trafka.codec.messages import k00_produce as produce_msgs
from trafka.codec.messages import k03_metadata as metadata_msgs
from trafka.codec.records import TimestampType, decode_batch, encode_batch, iter_batches

from ..sdk.partitioners import KEY_HASHES

__all__ = [
    "HASHES",
    "ProducePlan",
    "ProduceRoute",
    "RouteStats",
    "Topics",
    "failed_answer",
    "learn_leaders",
    "merge_produce",
    "metadata_request",
    "plan_produce",
    "route_produce",
]

HASHES: dict[str, Callable[[bytes, int], int]] = KEY_HASHES  # the SDK's, by name

_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_LOG_APPEND_TIME = 0x08

# Errors meaning the proxy's idea of the partition's leader may be wrong.
_STALE = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NETWORK_EXCEPTION,
    }
)


@dataclass(slots=True)
class Topics:
    """What the proxy learned from Metadata answers: partition counts, leaders,
    and the newest Metadata version a client used (for the proxy's own)."""

    partitions: dict[str, int] = field(default_factory=dict)
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)
    metadata_version: int = -1

    def learn(self, body: Any, version: int = -1) -> None:
        self.metadata_version = max(self.metadata_version, version)
        for t in body.topics:
            if t.error_code or t.name is None:
                continue
            self.partitions[t.name] = len(t.partitions)
            for p in t.partitions:
                self.leaders[(t.name, p.partition_index)] = p.leader_id

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader, or -1 when unknown."""
        return self.leaders.get((topic, partition), -1)


@dataclass(slots=True)
class RouteStats:
    """Counts of the routing decisions (for ``statistics()`` and logs)."""

    records_moved: int = 0
    records_kept: int = 0
    batches_rebuilt: int = 0
    batches_untouched_idempotent: int = 0
    batches_untouched_other_leader: int = 0
    batches_untouched_unknown_leader: int = 0
    batches_untouched_unknown_topic: int = 0
    batches_untouched_malformed: int = 0
    requests_pooled: int = 0
    requests_split: int = 0
    parts_failed: int = 0
    metadata_refreshes: int = 0


@dataclass(frozen=True, slots=True)
class ProduceRoute:
    """How a routed Produce maps back: for each partition the client sent
    (in its order), the partitions its records went to (in record order)."""

    origin: tuple[tuple[str, tuple[tuple[int, tuple[int, ...]], ...]], ...]


@dataclass(frozen=True, slots=True)
class ProducePlan:
    """A pooled Produce: the part for each leader, and how answers map back."""

    parts: tuple[tuple[int, Any], ...]
    route: ProduceRoute


# Per topic: target partition -> (the client's own unmoved batches, records moved in).
_Placed = list[tuple[str, dict[int, tuple[list[bytes], list[bytes]]]]]


def plan_produce(
    body: Any, *, topics: Topics, hash_name: str, stats: RouteStats
) -> ProducePlan | None:
    """Split a plain producer's Produce request by the leader of each record's target.

    Args:
        body: the decoded ProduceRequest.
        topics: partition counts and leaders.
        hash_name: a key of :data:`HASHES`.
        stats: counters to update.

    Returns:
        The parts and the route to merge their answers, or None when the
        request is not for this plan (see the module's rules).

    Raises:
        DecodeError: a batch is malformed.
    """
    if body.transactional_id is not None:
        return None
    for t in body.topic_data:
        if not topics.partitions.get(t.name):
            return None
        for p in t.partition_data:
            if topics.leader(t.name, p.index) < 0:
                return None
            for header, _ in iter_batches(p.records or b""):
                # Legacy messages (magic 0/1) never carry a producer id.
                if header.magic == 2 and _untouchable(header):
                    return None

    def reachable(topic: str, targets: Iterable[int]) -> bool:
        return all(topics.leader(topic, x) >= 0 for x in targets)

    placed, origin, _ = _place(
        body, topics, HASHES[hash_name], stats, reachable, "batches_untouched_unknown_leader"
    )
    by_leader: dict[int, list[tuple[str, dict[int, bytes]]]] = {}
    for name, targets in placed:
        for target, (stayed, moved) in targets.items():
            leader = topics.leader(name, target)
            parts = by_leader.setdefault(leader, [])
            if not parts or parts[-1][0] != name:
                parts.append((name, {}))
            parts[-1][1][target] = b"".join(stayed + moved)
    stats.requests_pooled += 1
    if len(by_leader) > 1:
        stats.requests_split += 1
    return ProducePlan(
        tuple(
            (leader, dataclasses.replace(body, topic_data=_topic_data(parts)))
            for leader, parts in by_leader.items()
        ),
        ProduceRoute(origin),
    )


def route_produce(
    body: Any,
    *,
    node_id: int,
    topics: Topics,
    hash_name: str,
    stats: RouteStats,
) -> tuple[Any, ProduceRoute | None]:
    """Move keyed records of a Produce request sent on the client's own connection.

    Args:
        body: the decoded ProduceRequest.
        node_id: the upstream broker this request goes to (a target partition
            must be led by it).
        topics: partition counts and leaders.
        hash_name: a key of :data:`HASHES`.
        stats: counters to update.

    Returns:
        The request to send (``body`` itself when nothing moves) and the route
        to merge its answer with (None when nothing moved).

    Raises:
        DecodeError: a batch is malformed (the client's request is refused).
    """

    def led_here(topic: str, targets: Iterable[int]) -> bool:
        return all(topics.leader(topic, x) == node_id for x in targets)

    placed, origin, moved_any = _place(
        body, topics, HASHES[hash_name], stats, led_here, "batches_untouched_other_leader"
    )
    if not moved_any:
        return body, None
    joined = [
        (name, {t: b"".join(stayed + moved) for t, (stayed, moved) in targets.items()})
        for name, targets in placed
    ]
    return dataclasses.replace(body, topic_data=_topic_data(joined)), ProduceRoute(origin)


def _topic_data(parts: list[tuple[str, dict[int, bytes]]]) -> list[Any]:
    return [
        produce_msgs.ProduceRequest.TopicProduceData(
            name=name,
            partition_data=[
                produce_msgs.ProduceRequest.PartitionProduceData(index=index, records=records)
                for index, records in sorted(partitions.items())
            ],
        )
        for name, partitions in parts
    ]


def _untouchable(header: Any) -> bool:
    return bool(header.producer_id >= 0 or header.attributes & (_TRANSACTIONAL | _CONTROL))


def _place(
    body: Any,
    topics: Topics,
    hash_of: Callable[[bytes, int], int],
    stats: RouteStats,
    may_move: Callable[[str, Iterable[int]], bool],
    refused: str,
) -> tuple[_Placed, tuple[Any, ...], bool]:
    moved_any = False
    placed: _Placed = []
    origin: list[tuple[str, tuple[tuple[int, tuple[int, ...]], ...]]] = []
    for t in body.topic_data:
        name = t.name
        count = topics.partitions.get(name)
        out: dict[int, tuple[list[bytes], list[bytes]]] = {}
        parts_origin: list[tuple[int, tuple[int, ...]]] = []
        for p in t.partition_data:
            targets: list[int] = []
            blob = p.records
            if not blob:
                out.setdefault(p.index, ([], []))[0].append(b"")
                parts_origin.append((p.index, (p.index,)))
                continue
            for batch_header, raw in iter_batches(blob):
                pieces = _route_batch(
                    batch_header, raw, name, p.index, count, hash_of, stats, may_move, refused
                )
                for target, data in pieces:
                    out.setdefault(target, ([], []))[target != p.index].append(data)
                    if target not in targets:
                        targets.append(target)
                    moved_any = moved_any or target != p.index
            parts_origin.append((p.index, tuple(targets) or (p.index,)))
        placed.append((name, out))
        origin.append((name, tuple(parts_origin)))
    return placed, tuple(origin), moved_any


def _route_batch(
    header: Any,
    raw: memoryview,
    topic: str,
    partition: int,
    count: int | None,
    hash_of: Callable[[bytes, int], int],
    stats: RouteStats,
    may_move: Callable[[str, Iterable[int]], bool],
    refused: str,
) -> list[tuple[int, bytes]]:
    data = bytes(raw)
    if header.magic != 2:
        return _route_legacy(
            header, data, topic, partition, count, hash_of, stats, may_move, refused
        )
    if _untouchable(header):
        stats.batches_untouched_idempotent += 1
        return [(partition, data)]
    if not count:
        stats.batches_untouched_unknown_topic += 1
        return [(partition, data)]
    batch = decode_batch(data)
    groups: dict[int, list[Any]] = {}
    for r in batch.records:
        target = partition if r.key is None else hash_of(r.key, count)
        groups.setdefault(target, []).append(r)
    if list(groups) == [partition]:
        stats.records_kept += len(batch.records)
        return [(partition, data)]
    if not may_move(topic, groups):
        setattr(stats, refused, getattr(stats, refused) + 1)
        return [(partition, data)]
    stats.batches_rebuilt += 1
    attributes = header.attributes
    compression = Compression(attributes & 0x07)
    log_append = 1 if attributes & _LOG_APPEND_TIME else 0
    pieces = []
    for target, records in groups.items():
        moved = len(records) if target != partition else 0
        stats.records_moved += moved
        stats.records_kept += len(records) - moved
        pieces.append(
            (
                target,
                encode_batch(
                    [(r.timestamp, r.key, r.value, r.headers) for r in records],
                    compression=compression,
                    timestamp_type=log_append,
                ),
            )
        )
    return pieces


def _route_legacy(
    header: Any,
    data: bytes,
    topic: str,
    partition: int,
    count: int | None,
    hash_of: Callable[[bytes, int], int],
    stats: RouteStats,
    may_move: Callable[[str, Iterable[int]], bool],
    refused: str,
) -> list[tuple[int, bytes]]:
    """A legacy message (Produce v0-2: magic 0 or 1, a compressed wrapper holding
    several) routed as a batch is: split into one message set per target, of the
    same magic, compression and timestamp type."""
    if not count:
        stats.batches_untouched_unknown_topic += 1
        return [(partition, data)]
    records = decode_legacy_entry(data)
    groups: dict[int, list[Any]] = {}
    for r in records:
        target = partition if r.key is None else hash_of(r.key, count)
        groups.setdefault(target, []).append(r)
    if list(groups) == [partition]:
        stats.records_kept += len(records)
        return [(partition, data)]
    if not may_move(topic, groups):
        setattr(stats, refused, getattr(stats, refused) + 1)
        return [(partition, data)]
    stats.batches_rebuilt += 1
    log_append = 1 if header.timestamp_type == TimestampType.LOG_APPEND_TIME else 0
    pieces = []
    for target, group in groups.items():
        moved = len(group) if target != partition else 0
        stats.records_moved += moved
        stats.records_kept += len(group) - moved
        pieces.append(
            (
                target,
                encode_message_set(
                    [(r.timestamp, r.key, r.value, ()) for r in group],
                    magic=header.magic,
                    compression=header.compression,
                    timestamp_type=log_append,
                ),
            )
        )
    return pieces


# -- answers ------------------------------------------------------------------------------


def merge_produce(route: ProduceRoute, answers: Sequence[Any]) -> Any:
    """The client's answer, from the answers to every part of its request.

    Args:
        route: the request's route.
        answers: the decoded ProduceResponse of each part (at least one), or
            :func:`failed_answer`'s stand-in for a part that got none.

    Returns:
        A ProduceResponse naming exactly the client's partitions.

    Raises:
        DecodeError: an answer lacks a partition its part sent.
    """
    resp = produce_msgs.ProduceResponse
    got: dict[tuple[str, int], Any] = {
        (t.name, p.index): p for a in answers for t in a.responses for p in t.partition_responses
    }
    responses = []
    for name, parts in route.origin:
        merged = []
        for index, targets in parts:
            if any((name, x) not in got for x in targets):
                raise DecodeError(
                    f"the broker did not answer for every part of {name}-{index}",
                    message_name="ProduceResponse",
                )
            if targets == (index,):
                merged.append(got[(name, index)])
                continue
            failed = next((got[(name, x)] for x in targets if got[(name, x)].error_code), None)
            merged.append(
                resp.PartitionProduceResponse(
                    index=index,
                    error_code=failed.error_code if failed else 0,
                    error_message=failed.error_message if failed else None,
                    base_offset=-1,
                    log_append_time_ms=-1,
                    log_start_offset=-1,
                )
            )
        responses.append(resp.TopicProduceResponse(name=name, partition_responses=merged))
    endpoints = {e.node_id: e for a in answers for e in a.node_endpoints}
    return dataclasses.replace(
        answers[0],
        responses=responses,
        throttle_time_ms=max(a.throttle_time_ms for a in answers),
        node_endpoints=list(endpoints.values()),
    )


def failed_answer(part: Any, error: ErrorCode, message: str | None = None) -> Any:
    """A stand-in answer for a part that got none: each of its partitions failed
    with ``error``."""
    resp = produce_msgs.ProduceResponse
    return resp(
        responses=[
            resp.TopicProduceResponse(
                name=t.name,
                partition_responses=[
                    resp.PartitionProduceResponse(
                        index=p.index, error_code=error, base_offset=-1, error_message=message
                    )
                    for p in t.partition_data
                ],
            )
            for t in part.topic_data
        ]
    )


def learn_leaders(topics: Topics, answer: Any) -> set[str]:
    """Take the leader hints of a part's answer.

    Returns:
        The topics whose leaders the proxy should ask again (an error says its
        view is stale and the answer gave no hint).
    """
    stale: set[str] = set()
    for t in answer.responses:
        for p in t.partition_responses:
            if p.error_code not in _STALE:
                continue
            if p.current_leader.leader_id >= 0:
                topics.leaders[(t.name, p.index)] = p.current_leader.leader_id
            else:
                stale.add(t.name)
    return stale


def metadata_request(names: Iterable[str]) -> Any:
    """The proxy's own Metadata request for ``names`` (never creating topics)."""
    m = metadata_msgs.MetadataRequest
    return m(
        topics=[m.MetadataRequestTopic(name=n) for n in sorted(names)],
        allow_auto_topic_creation=False,
    )
