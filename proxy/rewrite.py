"""The proxy's protocol logic, I/O-free: address rewriting and key-hash routing.

Rules:

* Every request is forwarded on the upstream connection that pairs with the
  client's connection, in order, with its correlation id unchanged; responses
  come back in the same order. So nothing is renumbered: the proxy only
  remembers, per correlation id, the API and version of each request whose
  answer it must read (:class:`Pending`).
* Answers that carry broker addresses (Metadata, FindCoordinator,
  DescribeCluster, and Produce's ``node_endpoints``) are decoded, their
  addresses replaced by the proxy's listener for that node
  (:class:`Addresses`), and encoded again at the same version. Every other
  answer passes byte for byte.
* Fetch answers from version 16 on, and ShareFetch and ShareAcknowledge
  answers, carry leader hints with addresses (``node_endpoints``, KIP-951) too.
  ApiVersions answers cap Fetch at version 15, so that consumers do not make
  the proxy decode (and copy) every fetched record to rewrite hints that are
  mostly empty; a client that sends a newer Fetch anyway has its answer read
  and rewritten like the others, so no broker address reaches it.
* ApiVersions answers are capped, for the APIs above, at the versions the
  proxy's codec knows, so that no client uses a version whose addresses the
  proxy could not read. An ApiVersions answer the proxy cannot decode (the
  broker's v0 refusal of a version it does not know) passes unchanged.
* Metadata answers also teach the proxy each topic's partition count and
  leaders (:class:`Topics`), which key routing needs.
* Key routing (Produce, magic 2 batches): every record with a key goes to the
  partition the configured hash gives (Java's murmur2 by default), whichever
  partition the client chose. Records without a key stay where the client put
  them. A batch is rebuilt only when some record moves; it keeps its
  compression, timestamps and headers. Batches the proxy must not touch pass
  unchanged: idempotent or transactional ones (their sequence numbers belong
  to the partition the producer chose), legacy message sets, and batches whose
  target partition is led by another broker or whose topic the proxy has not
  seen in a Metadata answer.
* The client gets an answer for exactly the partitions it sent: for each,
  the error of the first part that failed (else none), and the offsets of the
  part that stayed in its partition (else of the first part).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trafka.codec import protocol
from trafka.codec.compression import Compression
from trafka.codec.errors import DecodeError
from trafka.codec.messages import k00_produce as produce_msgs
from trafka.codec.records import decode_batch, encode_batch, iter_batches

from ..sdk.partitioners import KEY_HASHES

__all__ = [
    "HASHES",
    "READ_APIS",
    "Addresses",
    "Pending",
    "ProduceRoute",
    "RouteStats",
    "Topics",
    "reads_answer",
    "rewrite_response",
    "route_produce",
]

log = logging.getLogger("trafka.proxy")

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, API_VERSIONS = 0, 1, 3, 10, 18
DESCRIBE_CLUSTER, SHARE_FETCH, SHARE_ACKNOWLEDGE = 60, 78, 79
# The APIs whose answers name brokers, and Produce (routing). The proxy must
# read them, so ApiVersions answers cap them at the versions the codec knows:
# a client must not use a newer one that would carry addresses past the proxy.
READ_APIS = frozenset(
    {PRODUCE, FETCH, METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER, SHARE_FETCH, SHARE_ACKNOWLEDGE}
)
REWRITTEN_APIS = READ_APIS | {API_VERSIONS}
# Fetch answers name brokers from this version on (see the rules).
FETCH_ENDPOINTS_VERSION = 16
_VERSION_CAPS = {FETCH: FETCH_ENDPOINTS_VERSION - 1}
_HINTING_APIS = frozenset({PRODUCE, FETCH, SHARE_FETCH, SHARE_ACKNOWLEDGE})


def reads_answer(api_key: int, api_version: int) -> bool:
    """Whether the proxy must read the answer to this request (else it passes
    byte for byte)."""
    if api_key == FETCH:
        return api_version >= FETCH_ENDPOINTS_VERSION
    return api_key in REWRITTEN_APIS


HASHES: dict[str, Callable[[bytes, int], int]] = KEY_HASHES  # the SDK's, by name

_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_LOG_APPEND_TIME = 0x08


class Addresses:
    """Which proxy address stands for which upstream broker.

    ``listen_for(node_id, host, port)`` returns the proxy's (host, port) for
    that broker; the driver supplies it (opening a listener on first sight).
    """

    def __init__(self, listen_for: Callable[[int, str, int], tuple[str, int]]) -> None:
        self._listen_for = listen_for

    def __call__(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        return self._listen_for(node_id, host, port)


@dataclass(slots=True)
class Topics:
    """What the proxy learned from Metadata answers: partition counts and leaders."""

    partitions: dict[str, int] = field(default_factory=dict)
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)

    def learn(self, body: Any) -> None:
        for t in body.topics:
            if t.error_code or t.name is None:
                continue
            self.partitions[t.name] = len(t.partitions)
            for p in t.partitions:
                self.leaders[(t.name, p.partition_index)] = p.leader_id


@dataclass(slots=True)
class RouteStats:
    """Counts of the routing decisions (for ``statistics()`` and logs)."""

    records_moved: int = 0
    records_kept: int = 0
    batches_rebuilt: int = 0
    batches_untouched_idempotent: int = 0
    batches_untouched_other_leader: int = 0
    batches_untouched_unknown_topic: int = 0
    batches_untouched_malformed: int = 0


@dataclass(frozen=True, slots=True)
class ProduceRoute:
    """How a routed Produce maps back: for each partition the client sent
    (in its order), the partitions its records went to."""

    origin: tuple[tuple[str, tuple[tuple[int, tuple[int, ...]], ...]], ...]


@dataclass(frozen=True, slots=True)
class Pending:
    """A request whose answer the proxy must read."""

    api_key: int
    api_version: int
    route: ProduceRoute | None = None


def _replace_addresses(key: int, body: Any, addresses: Addresses) -> Any:
    if key == METADATA:
        brokers = [
            dataclasses.replace(b, host=h, port=p)
            for b in body.brokers
            for h, p in [addresses(b.node_id, b.host, b.port)]
        ]
        return dataclasses.replace(body, brokers=brokers)
    if key == FIND_COORDINATOR:
        if body.coordinators:
            coordinators = []
            for c in body.coordinators:
                if c.node_id >= 0 and not c.error_code:
                    h, p = addresses(c.node_id, c.host, c.port)
                    c = dataclasses.replace(c, host=h, port=p)
                coordinators.append(c)
            return dataclasses.replace(body, coordinators=coordinators)
        if body.node_id >= 0 and not body.error_code:
            h, p = addresses(body.node_id, body.host, body.port)
            return dataclasses.replace(body, host=h, port=p)
        return body
    if key == DESCRIBE_CLUSTER:
        brokers = [
            dataclasses.replace(b, host=h, port=p)
            for b in body.brokers
            for h, p in [addresses(b.broker_id, b.host, b.port)]
        ]
        return dataclasses.replace(body, brokers=brokers)
    if key in _HINTING_APIS and body.node_endpoints:
        endpoints = [
            dataclasses.replace(e, host=h, port=p)
            for e in body.node_endpoints
            for h, p in [addresses(e.node_id, e.host, e.port)]
        ]
        return dataclasses.replace(body, node_endpoints=endpoints)
    return body


def rewrite_response(
    pending: Pending, frame: bytes | memoryview, addresses: Addresses, topics: Topics
) -> bytes:
    """The frame to send the client (size prefix included) for an upstream answer.

    Raises:
        DecodeError: the answer is malformed.
    """
    key, version = pending.api_key, pending.api_version
    if key == API_VERSIONS:
        return _cap_versions(frame, version)
    header, body = protocol.decode_response(frame, key, version)
    if key == METADATA:
        topics.learn(body)
    if key == PRODUCE and pending.route is not None:
        body = _merge_produce(body, pending.route, version)
    body = _replace_addresses(key, body, addresses)
    return protocol.encode_response(header.correlation_id, key, version, body)


def _cap_versions(frame: bytes | memoryview, version: int) -> bytes:
    try:
        header, body = protocol.decode_response(frame, API_VERSIONS, version)
    except DecodeError:
        return len(frame).to_bytes(4, "big") + bytes(frame)
    capped = []
    for entry in body.api_keys:
        if entry.api_key in READ_APIS:
            known = protocol.api(entry.api_key).max_version
            cap = min(known, _VERSION_CAPS.get(entry.api_key, known))
            if entry.max_version > cap:
                entry = dataclasses.replace(entry, max_version=max(cap, entry.min_version))
        capped.append(entry)
    body = dataclasses.replace(body, api_keys=capped)
    return protocol.encode_response(header.correlation_id, API_VERSIONS, version, body)


# -- key routing ----------------------------------------------------------------------------


def route_produce(
    body: Any,
    *,
    node_id: int,
    topics: Topics,
    hash_name: str,
    stats: RouteStats,
) -> tuple[Any, ProduceRoute | None]:
    """Move keyed records of a Produce request to their key's partition.

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
    hash_of = HASHES[hash_name]
    moved_any = False
    new_topics: list[tuple[str, dict[int, list[bytes]]]] = []
    origin: list[tuple[str, tuple[tuple[int, tuple[int, ...]], ...]]] = []
    for t in body.topic_data:
        name = t.name
        count = topics.partitions.get(name)
        out: dict[int, list[bytes]] = {}
        parts_origin: list[tuple[int, tuple[int, ...]]] = []
        for p in t.partition_data:
            targets: list[int] = []
            blob = p.records
            if not blob:
                out.setdefault(p.index, []).append(b"")
                parts_origin.append((p.index, (p.index,)))
                continue
            for batch_header, raw in iter_batches(blob):
                pieces = _route_batch(
                    batch_header, raw, name, p.index, count, node_id, topics, hash_of, stats
                )
                for target, data in pieces:
                    out.setdefault(target, []).append(data)
                    if target not in targets:
                        targets.append(target)
                    if target != p.index:
                        moved_any = True
            parts_origin.append((p.index, tuple(targets) or (p.index,)))
        new_topics.append((name, out))
        origin.append((name, tuple(parts_origin)))
    if not moved_any:
        return body, None
    topic_data = [
        produce_msgs.ProduceRequest.TopicProduceData(
            name=name,
            partition_data=[
                produce_msgs.ProduceRequest.PartitionProduceData(
                    index=index, records=b"".join(chunks)
                )
                for index, chunks in sorted(parts.items())
            ],
        )
        for name, parts in new_topics
    ]
    return dataclasses.replace(body, topic_data=topic_data), ProduceRoute(tuple(origin))


def _route_batch(
    header: Any,
    raw: memoryview,
    topic: str,
    partition: int,
    count: int | None,
    node_id: int,
    topics: Topics,
    hash_of: Callable[[bytes, int], int],
    stats: RouteStats,
) -> list[tuple[int, bytes]]:
    data = bytes(raw)
    if header.magic != 2:
        return [(partition, data)]
    if header.producer_id >= 0 or header.attributes & (_TRANSACTIONAL | _CONTROL):
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
    if any(topics.leaders.get((topic, target)) != node_id for target in groups):
        stats.batches_untouched_other_leader += 1
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


def _merge_produce(body: Any, route: ProduceRoute, version: int) -> Any:
    resp = produce_msgs.ProduceResponse
    got: dict[tuple[str, int], Any] = {
        (t.name, p.index): p for t in body.responses for p in t.partition_responses
    }
    responses = []
    for name, parts in route.origin:
        merged = []
        for index, targets in parts:
            answers = {t: got[(name, t)] for t in targets if (name, t) in got}
            if len(answers) != len(targets):
                raise DecodeError(
                    f"the broker did not answer for every part of {name}-{index}",
                    message_name="ProduceResponse",
                )
            base = answers.get(index) or answers[targets[0]]
            failed = next((a for a in answers.values() if a.error_code), None)
            merged.append(
                dataclasses.replace(
                    base,
                    index=index,
                    error_code=failed.error_code if failed else 0,
                    error_message=failed.error_message if failed else base.error_message,
                )
            )
        responses.append(resp.TopicProduceResponse(name=name, partition_responses=merged))
    return dataclasses.replace(body, responses=responses)
