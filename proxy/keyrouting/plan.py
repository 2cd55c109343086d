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
* Four plans, chosen per request by the filter (:mod:`.filter`):

  - *Spans* (:func:`place_spans`): a plain request (as below) whose records the
    codec's C pass places, acks 1 or -1, with coalescing on: its pieces, per
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
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from trafka.codec import batch_split
from trafka.codec.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression
from trafka.codec.errors import ErrorCode
from trafka.codec.legacy import decode_legacy_entry, encode_message_set
from trafka.codec.produce_request import ProduceRequestData, produce_request
from trafka.codec.records import (
    Record,
    RecordBatchHeader,
    TimestampType,
    decode_batch,
    encode_batch,
    iter_batches,
)
from trafka.sdk.partitioners import KEY_HASHES

from ..topics import Topics
from .sequences import next_sequence
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

log = logging.getLogger("trafka.proxy")

HASHES: dict[str, Callable[[bytes, int], int]] = KEY_HASHES  # the SDK's, by name
# The hashes the codec's C pass computes (trafka.codec.batch_split), by function.
_FAST_HASHES = {fn: name for name, fn in HASHES.items() if name in batch_split.HASH_IDS}

_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_LOG_APPEND_TIME = 0x08
# A merged batch may hold this much even when the request's batches are smaller.
_MIN_MERGE_BYTES = 16 * 1024

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


# -- placing records ---------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Piece:
    """Records of one client batch bound for one partition."""

    records: list[Record] | None  # None: not decoded (``raw`` or ``spans`` hold them)
    header: Any
    raw: bytes | None  # the client's whole batch, when it stays whole
    size: int  # estimated bytes on the wire
    # The records as the codec's C pass located them (trafka.codec.batch_split).
    spans: batch_split.Spans | None = None

    def decoded(self) -> list[Record]:
        if self.records is None:
            if self.raw is None:  # located by the C pass: built alone, then decoded
                assert self.spans is not None
                built = batch_split.build_batch([self.spans], attributes=0)
                assert built is not None  # these spans were built once already
                self.records = decode_batch(built[0]).records
            elif self.header.magic == 2:
                self.records = decode_batch(self.raw).records
            else:
                self.records = decode_legacy_entry(self.raw)
        return self.records


@dataclass(slots=True, eq=False)
class _Split:
    """One client batch, placed."""

    topic: str
    partition: int
    header: Any
    pieces: dict[int, _Piece]  # target -> records (the client's order)
    # Some of its pieces were taken out, written before (a journaled placement,
    # see .idempotent_plan): those left do not hold all its records.
    partial: bool = False

    @property
    def moved(self) -> bool:
        """Whether any of its records is not at its place in the client's
        partition (so no offset of an upstream batch is the client batch's)."""
        return self.partial or list(self.pieces) != [self.partition]

    def count(self) -> int:
        """How many records the client's batch (or legacy message) holds."""
        if self.header.magic == 2:
            return int(self.header.records_count)
        return sum(len(p.decoded()) for p in self.pieces.values())


def _split(
    header: Any,
    raw: bytes,
    topic: str,
    partition: int,
    count: int,
    hash_of: Callable[[bytes, int], int],
    stats: RouteStats,
    max_size: int,
    origin: bool = False,
) -> _Split:
    """Group one batch's records by target partition (``origin``: the records of a
    magic 2 batch that does not stay whole each get a ``trafka-origin`` header,
    see :func:`origin_header`).

    Raises:
        DecodeError: the batch is malformed, or inflates beyond ``max_size``
            (``field`` ``"decompressed_size"``).
    """
    fast_hash = None if origin else _FAST_HASHES.get(hash_of)
    if fast_hash is not None and header.magic == 2:
        found = batch_split.split_batch(
            raw, header, partitions=count, hash_name=fast_hash, own=partition, max_size=max_size
        )
        if found is not None:
            return _split_fast(header, raw, topic, partition, found, stats)
    records = (
        decode_batch(raw, max_size=max_size).records
        if header.magic == 2
        else decode_legacy_entry(raw, max_size=max_size)
    )
    groups = _group(records, partition, count, hash_of)
    total = max(1, len(records))
    if list(groups) == [partition]:
        stats.count(topic, 0, len(records))
        return _Split(topic, partition, header, {partition: _Piece(records, header, raw, len(raw))})
    if origin and header.magic == 2:
        groups = _group(_with_origin(records, partition, header), partition, count, hash_of)
    stats.batches_rebuilt += 1
    pieces = {}
    for target, records in groups.items():
        moved = len(records) if target != partition else 0
        stats.count(topic, moved, len(records) - moved)
        pieces[target] = _Piece(records, header, None, len(raw) * len(records) // total + 64)
    if log.isEnabledFor(logging.DEBUG):
        # Where the records of a client's batch really went (trafka proxy -v).
        log.debug(
            "%r-%d: %d records placed as %s",
            topic,
            partition,
            total,
            ", ".join(f"{len(r)} -> {t}" for t, r in sorted(groups.items())),
        )
    return _Split(topic, partition, header, pieces)


def _split_fast(
    header: Any,
    raw: bytes,
    topic: str,
    partition: int,
    found: list[tuple[int, batch_split.Spans]],
    stats: RouteStats,
) -> _Split:
    """:func:`_split` of what the codec's C pass found: the same pieces, each
    holding its records' spans rather than decoded records."""
    total = header.records_count
    if [target for target, _ in found] == [partition]:
        stats.count(topic, 0, total)
        piece = _Piece(None, header, raw, len(raw), found[0][1])
        return _Split(topic, partition, header, {partition: piece})
    stats.batches_rebuilt += 1
    pieces = {}
    kept = 0
    for target, spans in found:
        n = len(spans[1]) // batch_split.SPAN_SIZE
        if target == partition:
            kept = n
        pieces[target] = _Piece(None, header, None, len(raw) * n // max(1, total) + 64, spans)
    stats.count(topic, total - kept, kept)
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "%r-%d: %d records placed as %s",
            topic,
            partition,
            total,
            ", ".join(f"{len(s[1]) // batch_split.SPAN_SIZE} -> {t}" for t, s in sorted(found)),
        )
    return _Split(topic, partition, header, pieces)


def _group(
    records: Sequence[Record], partition: int, count: int, hash_of: Callable[[bytes, int], int]
) -> dict[int, list[Record]]:
    groups: dict[int, list[Record]] = {}
    for r in records:
        target = partition if r.key is None else hash_of(r.key, count)
        groups.setdefault(target, []).append(r)
    return groups


#: The header :func:`origin_header` writes (``ProxyConfig.origin_headers``).
ORIGIN_HEADER = "trafka-origin"


def origin_header(partition: int, index: int, count: int, header: Any) -> bytes:
    """Where the client put a record the proxy moved or whose batch it split: the
    value of its :data:`ORIGIN_HEADER`.

    ``partition=P,index=I,count=N``: the record was the ``I``-th (from 0) of the
    ``N`` records of the batch the client sent to partition ``P``; for an
    idempotent or transactional producer, then ``,producer=ID,epoch=E,sequence=S``:
    its producer id and epoch and its own sequence number in partition ``P``
    (the batch's base sequence plus ``I``, wrapping as Kafka's do), which no
    other record of that producer and partition has.
    """
    value = f"partition={partition},index={index},count={count}"
    if header.producer_id >= 0:
        sequence = next_sequence(header.base_sequence, index)
        value += f",producer={header.producer_id},epoch={header.producer_epoch},sequence={sequence}"
    return value.encode()


_ORIGIN_FIELDS = ("partition", "index", "count", "producer", "epoch", "sequence")


def parse_origin_header(value: bytes) -> dict[str, int]:
    """The fields of an :data:`ORIGIN_HEADER` value (:func:`origin_header`):
    ``partition``, ``index`` and ``count``, and for an idempotent producer
    ``producer``, ``epoch`` and ``sequence``.

    Raises:
        ValueError: ``value`` is not such a header.
    """
    try:
        fields = {k: int(v) for k, v in (f.split("=") for f in value.decode("ascii").split(","))}
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"not a {ORIGIN_HEADER} header: {value!r}") from None
    if list(fields) not in (list(_ORIGIN_FIELDS[:3]), list(_ORIGIN_FIELDS)):
        raise ValueError(f"not a {ORIGIN_HEADER} header: {value!r}")
    return fields


def _with_origin(records: Sequence[Record], partition: int, header: Any) -> list[Record]:
    n = len(records)
    return [
        r._replace(headers=(*r.headers, (ORIGIN_HEADER, origin_header(partition, i, n, header))))
        for i, r in enumerate(records)
    ]


def _whole(topic: str, partition: int, header: Any, data: bytes) -> _Split:
    """A batch left where the client put it."""
    return _Split(topic, partition, header, {partition: _Piece(None, header, data, len(data))})


def _chunks(own: list[_Piece], moved: list[_Piece], cap: int) -> list[list[_Piece]]:
    """The pieces bound for one partition, as batches: the client's own first,
    each batch at most ``cap`` estimated bytes (and at least one piece)."""
    out: list[list[_Piece]] = []
    size = 0
    for piece in own + moved:
        if not out or size + piece.size > cap:
            out.append([])
            size = 0
        out[-1].append(piece)
        size += piece.size
    return out


def _encode(
    pieces: list[_Piece],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
) -> tuple[bytes, int]:
    """One batch of ``pieces`` (byte for byte when it is one whole client
    batch); the number of records in it."""
    first = pieces[0].header
    if len(pieces) == 1 and pieces[0].raw is not None:
        return pieces[0].raw, getattr(first, "records_count", -1)
    if first.magic != 2:  # Produce v0-2: a message set of the client's own magic
        messages = [(r.timestamp, r.key, r.value, ()) for p in pieces for r in p.decoded()]
        data = encode_message_set(
            messages,
            magic=first.magic,
            compression=first.compression,
            timestamp_type=1 if first.timestamp_type == TimestampType.LOG_APPEND_TIME else 0,
        )
        return data, len(messages)
    attributes = first.attributes
    if all(p.spans is not None for p in pieces):
        spans = [p.spans for p in pieces if p.spans is not None]
        built = batch_split.build_batch(
            spans, attributes=attributes, producer_id=producer_id, producer_epoch=producer_epoch
        )
        if built is not None:
            return built
    records = [(r.timestamp, r.key, r.value, r.headers) for p in pieces for r in p.decoded()]
    data = encode_batch(
        records,
        compression=Compression(attributes & 0x07),
        timestamp_type=1 if attributes & _LOG_APPEND_TIME else 0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=bool(attributes & _TRANSACTIONAL),
    )
    return data, len(records)


def _cap(sizes: Iterable[int]) -> int:
    return max(_MIN_MERGE_BYTES, max(sizes, default=0))


def _untouchable(header: Any) -> bool:
    return bool(header.producer_id >= 0 or header.attributes & (_TRANSACTIONAL | _CONTROL))


# The most record bytes a request may hold for the driver to plan it on its own
# thread: the C pass costs a few microseconds per kilobyte, less than handing
# the request to a worker thread and back; more than this, other clients wait.
_CHEAP_BYTES = 1024 * 1024
# gzip's compressor (zlib, at Java's level) is several times slower than the others.
_SLOW_CODECS = frozenset({Compression.GZIP})


def cheap_to_plan(body: Any, *, hash_name: str, origin_headers: bool) -> bool:
    """Whether placing the records of ``body`` takes so little time (the codec's
    C pass, a request of at most ``_CHEAP_BYTES`` of records, no gzip) that the
    driver does it at once rather than on a worker thread."""
    if origin_headers or not batch_split.available(hash_name):
        return False
    size = 0
    for t in body.topic_data:
        for p in t.partition_data:
            if p.records:
                size += len(p.records)
                if size > _CHEAP_BYTES:
                    return False
                for header, _ in iter_batches(p.records):
                    if header.attributes & 0x07 in _SLOW_CODECS:
                        return False
    return True


def plain_request(body: Any, topics: Topics, *, batches: bool = True) -> bool:
    """Whether ``body`` is for the plain plans: no transactional id, every topic
    and the leader of every partition it names known, and (``batches``) no
    batch with a producer id (which :func:`place_spans` checks itself)."""
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
                if isinstance(header, RecordBatchHeader) and _untouchable(header):
                    return False
    return True


# -- the plain plan ----------------------------------------------------------------------


def plan_produce(
    body: Any,
    *,
    topics: Topics,
    hash_name: str,
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
    if not origin_headers:  # (without the accelerator, declined at the first batch)
        fast = _plan_spans(body, topics, hash_name, stats, max_size)
        if fast is not None:
            return fast
    hash_of = HASHES[hash_name]
    splits: list[_Split] = []
    empty: list[tuple[str, int]] = []
    sizes = []
    for t in body.topic_data:
        count = topics.partitions[t.name]
        for p in t.partition_data:
            if not p.records:
                empty.append((t.name, p.index))
                continue
            for header, raw in iter_batches(p.records):
                data = bytes(raw)
                sizes.append(len(data))
                split = _split(
                    header, data, t.name, p.index, count, hash_of, stats, max_size, origin_headers
                )
                if split.moved and not all(topics.leader(t.name, x) >= 0 for x in split.pieces):
                    stats.batches_untouched_unknown_leader += 1
                    split = _whole(t.name, p.index, header, data)
                splits.append(split)
    parts: _Parts = {}
    sources: dict[tuple[str, int], list[_Source]] = {}  # client partition -> its batches
    kept: dict[tuple[str, int], _Source] = {}
    owner_of, moved_out = _owners(splits)
    order = _part_order()
    cap = _cap(sizes)
    for (topic, target), (own, moved) in _by_target(splits).items():
        leader = topics.leader(topic, target)
        for rnd, chunk in enumerate(_chunks(own, [m for _, m in moved], cap)):
            data, _ = _encode(chunk)
            part = order(rnd, leader)
            parts.setdefault((rnd, leader), {}).setdefault(topic, {})[target] = data
            for piece in chunk:
                owner = owner_of[id(piece)]
                sources.setdefault(owner, []).append((part, target))
                if rnd == 0 and piece is next(iter(own), None) and owner not in moved_out:
                    kept[owner] = (part, target)
    for topic, index in empty:
        part = order(0, topics.leader(topic, index))
        parts.setdefault((0, topics.leader(topic, index)), {}).setdefault(topic, {})[index] = b""
        sources[(topic, index)] = [(part, index)]
        kept[(topic, index)] = (part, index)
    return _pooled(body, parts, order, stats, _route(body, sources, kept, splits))


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


# A piece of the fast plain plan: (its client partition, estimated bytes, the
# client's whole batch when it stays whole else None, its spans, the batch's header).
_Span = tuple[tuple[str, int], int, bytes | None, batch_split.Spans, Any]


def _plan_spans(
    body: Any, topics: Topics, hash_name: str, stats: RouteStats, max_size: int
) -> ProducePlan | None:
    """:func:`plan_produce` of a plain request every batch of which the codec's C
    pass splits (the usual case), without its per-piece objects: the same plan,
    byte for byte, and the same counts (tests/proxy/test_proxy_fast_split.py).
    None: the general path decides (a batch the C pass declines, a target
    without a known leader); nothing is counted then."""
    placed = place_spans(body, topics, hash_name, max_size)
    if placed is None:
        return None
    return _assemble_spans(body, topics, stats, *placed)


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


def add_slots(targets: dict[tuple[str, int], Any], topic: str, order: Any, slots: Any) -> None:
    """Add one topic's pieces by target partition (``place_sections``' order and
    slots) to ``targets``, after any the topic gave before (named twice)."""
    for target in order:
        pieces = slots[target]
        assert pieces is not None
        got = targets.get((topic, target))
        if got is None:
            targets[(topic, target)] = pieces
        else:
            got[0].extend(pieces[0])
            got[1].extend(pieces[1])


def place_spans(body: Any, topics: Topics, hash_name: str, max_size: int) -> SpansPlaced | None:
    """The pieces of a plain request every batch of which the codec's C pass
    splits, by target partition (own pieces first), counted nowhere; None when
    the C pass declines a batch, a batch has a producer id (or the
    transactional or control bit), or a target's leader is unknown.

    One C call per topic places its batches' pieces
    (:func:`~trafka.codec.batch_split.place_sections`), with no Python code per
    piece; :func:`place_pieces` is the same in Python, one batch at a time
    (the reference, tests/proxy/test_proxy_fast_split.py; and the path that
    logs each batch's placement at DEBUG)."""
    if log.isEnabledFor(logging.DEBUG) or not batch_split.placing(hash_name):
        return place_pieces(body, topics, hash_name, max_size)
    targets: dict[tuple[str, int], tuple[list[_Span], list[_Span]]] = {}
    moved_out: set[tuple[str, int]] = set()
    counts: dict[tuple[str, int], int] = {}
    placed: list[tuple[str, int, int]] = []  # per batch: topic, records moved, kept
    sizes = []
    for t in body.topic_data:
        topic, partitions = t.name, topics.partitions[t.name]
        known = bytes(topics.leaders.get((topic, x), -1) >= 0 for x in range(partitions))
        batches: list[batch_split.Section] = []
        for p in t.partition_data:
            owner = (topic, p.index)
            for header, raw in iter_batches(p.records or b""):
                if not isinstance(header, RecordBatchHeader) or _untouchable(header):
                    return None  # legacy messages, a producer id: another plan
                data = bytes(raw)
                found = batch_split.lazy_section(
                    data, header, own=p.index, partitions=partitions, max_size=max_size
                )
                if found is None:
                    return None
                total = header.records_count
                counts[owner] = counts.get(owner, 0) + total
                sizes.append(len(data))
                section, log_append = found
                batches.append(
                    (section, total, header.base_timestamp, log_append, p.index, len(data), data,
                     owner, header)
                )  # fmt: skip
        done = batch_split.place_sections(
            batches, partitions=partitions, hash_name=hash_name, known=known, max_size=max_size
        )
        if done is None:
            return None
        order, slots, per_batch = done
        add_slots(targets, topic, order, slots)
        for batch, (moved_n, kept_n, split) in zip(batches, per_batch, strict=True):
            placed.append((topic, moved_n, kept_n))
            if split:
                moved_out.add(batch[7])
    return targets, moved_out, counts, placed, _cap(sizes)


def place_pieces(body: Any, topics: Topics, hash_name: str, max_size: int) -> SpansPlaced | None:
    """:func:`place_spans` in Python, a batch at a time (the reference)."""
    targets: dict[tuple[str, int], tuple[list[_Span], list[_Span]]] = {}
    moved_out: set[tuple[str, int]] = set()
    counts: dict[tuple[str, int], int] = {}
    placed: list[tuple[str, int, int]] = []  # per batch: topic, records moved, kept
    sizes = []
    for t in body.topic_data:
        topic, partitions = t.name, topics.partitions[t.name]
        # Per target partition, looked up once a request rather than once a piece.
        known = [topics.leaders.get((topic, x), -1) >= 0 for x in range(partitions)]
        slots: list[tuple[list[_Span], list[_Span]] | None] = [None] * partitions
        for p in t.partition_data:
            owner = (topic, p.index)
            for header, raw in iter_batches(p.records or b""):
                if not isinstance(header, RecordBatchHeader) or _untouchable(header):
                    return None  # legacy messages, a producer id: another plan
                data = bytes(raw)
                found = batch_split.split_batch(
                    data, header, partitions=partitions, hash_name=hash_name, own=p.index,
                    max_size=max_size,
                )  # fmt: skip
                if found is None:
                    return None
                total = header.records_count
                counts[owner] = counts.get(owner, 0) + total
                sizes.append(len(data))
                if len(found) == 1 and found[0][0] == p.index:
                    slot = slots[p.index]
                    if slot is None:
                        slot = slots[p.index] = targets.setdefault(owner, ([], []))
                    slot[0].append((owner, len(data), data, found[0][1], header))
                    placed.append((topic, 0, total))
                    continue
                moved_out.add(owner)
                kept = 0
                for target, spans in found:
                    if not known[target]:
                        return None
                    n = len(spans[1]) // batch_split.SPAN_SIZE
                    piece = (owner, len(data) * n // max(1, total) + 64, None, spans, header)
                    slot = slots[target]
                    if slot is None:
                        slot = slots[target] = targets.setdefault((topic, target), ([], []))
                    own, moved = slot
                    if target == p.index:
                        kept = n
                        own.append(piece)
                    else:
                        moved.append(piece)
                placed.append((topic, total - kept, kept))
                if log.isEnabledFor(logging.DEBUG):
                    log.debug(
                        "%r-%d: %d records placed as %s",
                        topic,
                        p.index,
                        total,
                        ", ".join(f"{len(s[1]) // batch_split.SPAN_SIZE} -> {t}" for t, s in found),
                    )
    return targets, moved_out, counts, placed, _cap(sizes)


def _assemble_spans(
    body: Any,
    topics: Topics,
    stats: RouteStats,
    targets: dict[tuple[str, int], tuple[list[_Span], list[_Span]]],
    moved_out: set[tuple[str, int]],
    counts: dict[tuple[str, int], int],
    placed: list[tuple[str, int, int]],
    cap: int,
) -> ProducePlan | None:
    """The parts and route of :func:`_plan_spans`'s placed pieces (as
    :func:`plan_produce` chunks and encodes them)."""
    parts: _Parts = {}
    sources: dict[tuple[str, int], list[_Source]] = {}
    kept: dict[tuple[str, int], _Source] = {}
    order = _part_order()
    for (topic, target), (own, moved) in targets.items():
        leader = topics.leader(topic, target)
        chunks: list[list[_Span]] = []
        size = 0
        for piece in own + moved:
            if not chunks or size + piece[1] > cap:
                chunks.append([])
                size = 0
            chunks[-1].append(piece)
            size += piece[1]
        for rnd, chunk in enumerate(chunks):
            first = chunk[0]
            if len(chunk) == 1 and first[2] is not None:
                data = first[2]
            else:
                built = batch_split.build_batch(
                    [piece[3] for piece in chunk], attributes=first[4].attributes
                )
                if built is None:
                    return None
                data = built[0]
            part = order(rnd, leader)
            parts.setdefault((rnd, leader), {}).setdefault(topic, {})[target] = data
            for piece in chunk:
                sources.setdefault(piece[0], []).append((part, target))
        if own and (topic, target) not in moved_out:
            kept[(topic, target)] = (order(0, leader), target)
    for t in body.topic_data:
        for p in t.partition_data:
            if not p.records:
                leader = topics.leader(t.name, p.index)
                part = order(0, leader)
                parts.setdefault((0, leader), {}).setdefault(t.name, {})[p.index] = b""
                sources[(t.name, p.index)] = [(part, p.index)]
                kept[(t.name, p.index)] = (part, p.index)
    count_placed(stats, placed)
    route = _route_counted(body, sources, kept, lambda key, told: counts.get(key, 0))
    return _pooled(body, parts, order, stats, route)


def count_placed(stats: RouteStats, placed: list[tuple[str, int, int]]) -> None:
    """Count :func:`place_spans`'s batches (topic, records moved, kept)."""
    for topic, moved_n, kept_n in placed:
        if moved_n:
            stats.batches_rebuilt += 1
        stats.count(topic, moved_n, kept_n)


def _by_target(
    splits: list[_Split],
) -> dict[tuple[str, int], tuple[list[_Piece], list[tuple[_Split, _Piece]]]]:
    """Per target partition: the client's own pieces (one per batch or legacy
    message it sent there), and the pieces moved in."""
    out: dict[tuple[str, int], tuple[list[_Piece], list[tuple[_Split, _Piece]]]] = {}
    for split in splits:
        for target, piece in split.pieces.items():
            own, moved = out.setdefault((split.topic, target), ([], []))
            if target == split.partition:
                own.append(piece)
            else:
                moved.append((split, piece))
    return out


def _owners(splits: list[_Split]) -> tuple[dict[int, tuple[str, int]], set[tuple[str, int]]]:
    """Each piece's client partition (by ``id``), and the client partitions some
    of whose records moved."""
    owner = {id(piece): (s.topic, s.partition) for s in splits for piece in s.pieces.values()}
    return owner, {(s.topic, s.partition) for s in splits if s.moved}


def _route(
    body: Any,
    sources: dict[tuple[str, int], list[_Source]],
    kept: dict[tuple[str, int], _Source],
    splits: list[_Split],
) -> ProduceRoute:
    of: dict[tuple[str, int], list[_Split]] = {}
    for s in splits:
        of.setdefault((s.topic, s.partition), []).append(s)

    def count(key: tuple[str, int], told: bool) -> int:
        # Legacy messages are counted (decoded) only when answered without an
        # offset; they have no record errors for the count to bound.
        return sum(s.count() for s in of.get(key, ()) if not told or s.header.magic == 2)

    return _route_counted(body, sources, kept, count)


def _route_counted(
    body: Any,
    sources: dict[tuple[str, int], list[_Source]],
    kept: dict[tuple[str, int], _Source],
    count: Callable[[tuple[str, int], bool], int],
) -> ProduceRoute:
    """:func:`_route`, with ``count(partition, told)`` the records the client
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


# -- the single-connection plan ------------------------------------------------------------


def route_produce(
    body: Any,
    *,
    node_id: int,
    topics: Topics,
    hash_name: str,
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
    hash_of = HASHES[hash_name]
    splits: list[_Split] = []
    for t in body.topic_data:
        count = topics.partitions.get(t.name)
        for p in t.partition_data:
            for header, raw in iter_batches(p.records or b""):
                data = bytes(raw)
                stay = _whole(t.name, p.index, header, data)
                if isinstance(header, RecordBatchHeader) and _untouchable(header):
                    stats.batches_untouched_idempotent += 1
                    splits.append(stay)
                    continue
                if not count:
                    stats.batches_untouched_unknown_topic += 1
                    splits.append(stay)
                    continue
                split = _split(
                    header, data, t.name, p.index, count, hash_of, stats, max_size, origin_headers
                )
                if split.moved and not all(
                    topics.leader(t.name, x) == node_id for x in split.pieces
                ):
                    stats.batches_untouched_other_leader += 1
                    split = stay
                splits.append(split)
    if not any(s.moved for s in splits):
        return body, None
    out: dict[str, dict[int, bytes]] = {}
    sources: dict[tuple[str, int], list[_Source]] = {}
    kept: dict[tuple[str, int], _Source] = {}
    owner_of, moved_out = _owners(splits)
    for (topic, target), (own, moved) in _by_target(splits).items():
        pieces = own + [m for _, m in moved]
        data, _ = _encode(pieces)
        out.setdefault(topic, {})[target] = data
        for piece in pieces:
            owner = owner_of[id(piece)]
            sources.setdefault(owner, []).append((0, target))
            if piece is next(iter(own), None) and owner not in moved_out:
                kept[owner] = (0, target)
    for t in body.topic_data:
        for p in t.partition_data:
            if not p.records:
                out.setdefault(t.name, {})[p.index] = p.records
                sources[(t.name, p.index)] = [(0, p.index)]
                kept[(t.name, p.index)] = (0, p.index)
    return dataclasses.replace(body, topic_data=_topic_data(out)), _route(
        body, sources, kept, splits
    )
