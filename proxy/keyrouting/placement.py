"""Where the records of a routed Produce go, decided once: every plan (the plain
and single-connection plans and coalescing of :mod:`.plan`, the idempotent plan
of :mod:`.idempotent_plan`) builds on :func:`place_topic`, :func:`chunked` and
:func:`build`.

Rules:

* The target of a record with a key is ``hash(key) % partitions`` (the
  configured hash of :data:`HASHES`, Java's murmur2 by default); a record
  without a key stays in the partition the client chose.
* A client batch whose records all stay is one piece: its own bytes, passed on
  byte for byte. Otherwise it makes one piece per target partition, its records
  there in the client's order, estimated at the batch's size times their share
  of its records plus 64 bytes (with ``origin_headers`` each record gets a
  ``trafka-origin`` header first, :func:`origin_header`).
* A batch a target of which cannot take records (``can_take``: its leader is
  unknown, or on one connection another broker leads it) is *held*: kept whole
  where the client put it, or left out (``hold_out``: the idempotent plan
  refuses it). A batch the caller does not place (:data:`Batch`) is kept whole.
* Per target partition the pieces are the client's own first, then those moved
  in, each in the request's order; the targets in the order first named.
* :func:`chunked` cuts a target's pieces into batches of at most about ``cap``
  bytes (:func:`cap_of`: the largest client batch of the request, so routing
  never makes a batch the broker's ``max.message.bytes`` refuses when the
  client's passed; at least 16 KiB); :func:`build` writes them, a whole client
  batch as it is.
* The codec's C pass is the fast path: one call a topic places its batches
  (:func:`~trafka.codec.batch_split.place_sections`), and one call builds the
  batches a request's pieces make (:func:`~trafka.codec.batch_split.build_batches`).
  What it does not take is placed a batch at a time in Python: a topic it
  declines (a batch it does not read, a held batch), a batch not to place,
  origin headers, DEBUG logging (each batch's placement is logged); there a
  batch's records are located by the C pass's index of one batch when it can
  (:func:`~trafka.codec.batch_split.split_batch`), else decoded (legacy message
  sets, hashes the C pass lacks, unusual batches; a malformed batch raises
  there). Both give the same pieces (tests/proxy/test_proxy_placement.py checks
  the C call against a Python reference of it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import compress
from operator import itemgetter
from typing import Any

from trafka.codec import batch_split
from trafka.codec.compression import Compression
from trafka.codec.legacy import decode_legacy_entry, encode_message_set
from trafka.codec.records import (
    Record,
    TimestampType,
    decode_batch,
    encode_batch,
    iter_batches,
    set_base_sequence,
)
from trafka.sdk.partitioners import KEY_HASHES

from .sequences import next_sequence

__all__ = [
    "HASHES",
    "ORIGIN_HEADER",
    "OWNER",
    "Batch",
    "Piece",
    "Placed",
    "build",
    "cap_of",
    "chunked",
    "origin_header",
    "parse_origin_header",
    "piece_count",
    "place_topic",
]

log = logging.getLogger("trafka.proxy")

HASHES: dict[str, Callable[[bytes, int], int]] = KEY_HASHES  # the SDK's, by name


class ClientKeys:
    """A hash of :data:`HASHES` over the keys the clients gave, where a filter
    before routing rewrote them (record encryption's key frames: the note
    :data:`~..filters.CLIENT_KEYS` maps each rewritten key to its client's):
    a record goes where its client's key puts it. Computed in Python (the
    codec's C pass reads the keys in the batch)."""

    __slots__ = ("hash", "keys")

    def __init__(self, name: str, keys: Mapping[bytes, bytes]) -> None:
        self.hash = HASHES[name]
        self.keys = keys

    def __call__(self, key: bytes, count: int) -> int:
        return self.hash(self.keys.get(key, key), count)


#: How records are placed: a key of :data:`HASHES` (the codec's C pass
#: computes those it knows), or :class:`ClientKeys`.
Hashing = str | ClientKeys


def _accelerated(hashing: Hashing) -> str | None:
    """The name the codec's C pass would compute (None: Python only)."""
    return hashing if isinstance(hashing, str) else None


_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_LOG_APPEND_TIME = 0x08
# A merged batch may hold this much even when the request's batches are smaller.
_MIN_MERGE_BYTES = 16 * 1024

#: Records bound for one target partition: (owner, estimated bytes, the client's
#: whole batch when it stays whole else None, its records, header). The records
#: are spans the C pass located (``batch_split.Spans``), decoded records (a
#: list), or None (not decoded: the whole batch holds them).
Piece = tuple[Any, int, bytes | None, Any, Any]
#: A target partition's pieces: the client's own, and those moved in.
Slot = tuple[list[Piece], list[Piece]]
# A piece's owner, estimated bytes and records (C-level, no Python code per piece).
OWNER, _SIZE, _RECORDS = itemgetter(0), itemgetter(1), itemgetter(3)
_SPLIT = itemgetter(2)  # of place_sections' per batch (moved, kept, split)


#: A client batch to place: (its owner, what its pieces carry; its partition,
#: header and bytes; whether to place it, else it is kept whole).
Batch = tuple[Any, int, Any, bytes, bool]
_PLACE = itemgetter(4)


class Placed:
    """A request's records placed (:func:`place_topic`, topic by topic)."""

    __slots__ = ("batches", "counted", "held", "located", "split", "targets")

    def __init__(self) -> None:
        # Per target partition, in the order first named: its own and moved-in pieces.
        self.targets: dict[tuple[str, int], Slot] = {}
        # The owners of the batches some of whose records are not at their place.
        self.split: set[Any] = set()
        # Per batch placed: (topic, records moved, records kept).
        self.counted: list[tuple[str, int, int]] = []
        self.held: list[Any] = []  # the owners of batches held
        self.batches: list[Batch] = []  # every batch, in the order placed
        self.located = True  # every piece's records are spans (coalescing takes them)

    def owned(self, owner: Any) -> list[tuple[str, int]]:
        """The target partitions holding pieces of ``owner``."""
        return [
            key
            for key, (own, moved) in self.targets.items()
            if any(p[0] is owner for p in own) or any(p[0] is owner for p in moved)
        ]

    def take_out(self, owner: Any, key: tuple[str, int]) -> Piece:
        """Remove ``owner``'s piece bound for ``key`` (written before, see
        :mod:`.idempotent_plan`); its batch no longer holds all its records."""
        self.split.add(owner)
        for pieces in self.targets[key]:
            for i, piece in enumerate(pieces):
                if piece[0] is owner:
                    return pieces.pop(i)
        raise KeyError(key)


def place_topic(
    placed: Placed,
    topic: str,
    partitions: int,
    batches: list[Batch],
    *,
    hash_name: Hashing,
    can_take: bytes,
    max_size: int,
    origin_headers: bool = False,
    hold_out: bool = False,
) -> None:
    """Place the batches of one topic of a request into ``placed``.

    Args:
        placed: what earlier topics placed (a topic named twice adds to it).
        topic, partitions: the topic and its partition count (0: unknown,
            every batch then kept whole).
        batches: the topic's batches in the request's order.
        hash_name: a key of :data:`HASHES`, or :class:`ClientKeys`.
        can_take: a byte per partition, non-zero where records may be moved in.
        max_size: the most a batch may inflate to.
        origin_headers: give the records of a magic 2 batch that does not stay
            whole a ``trafka-origin`` header.
        hold_out: leave a held batch out rather than whole (see the rules).

    Raises:
        DecodeError: a batch is malformed, or inflates beyond ``max_size``
            (``field`` ``"decompressed_size"``).
    """
    if (
        not origin_headers
        and batches
        and all(map(_PLACE, batches))
        and not log.isEnabledFor(logging.DEBUG)
        and (name := _accelerated(hash_name)) is not None
        and batch_split.placing(name)
        and _place_at_once(placed, topic, partitions, batches, name, can_take, max_size)
    ):
        return
    for b in batches:
        _place_one(
            placed, topic, partitions, b, hash_name, can_take, max_size, origin_headers, hold_out
        )


def _place_at_once(
    placed: Placed,
    topic: str,
    partitions: int,
    batches: list[Batch],
    hash_name: str,
    can_take: bytes,
    max_size: int,
) -> bool:
    """:func:`place_topic` in one C call; False (nothing changed) when it declines."""
    sections: list[batch_split.Section] = []
    for owner, own, header, data, _ in batches:
        if header.magic != 2:
            return False
        found = batch_split.lazy_section(
            data, header, own=own, partitions=partitions, max_size=max_size
        )
        if found is None:
            return False
        section, log_append = found
        sections.append(
            (section, header.records_count, header.base_timestamp, log_append, own, len(data),
             data, owner, header)
        )  # fmt: skip
    done = batch_split.place_sections(
        sections, partitions=partitions, hash_name=hash_name, known=can_take, max_size=max_size
    )
    if done is None:
        return False
    order, slots, per_batch = done
    targets = placed.targets
    for target in order:
        pieces = slots[target]
        assert pieces is not None
        got = targets.get((topic, target))
        if got is None:
            targets[(topic, target)] = pieces
        else:
            got[0].extend(pieces[0])
            got[1].extend(pieces[1])
    placed.counted.extend([(topic, moved_n, kept_n) for moved_n, kept_n, _ in per_batch])
    placed.batches.extend(batches)
    placed.split.update(compress(map(OWNER, batches), map(_SPLIT, per_batch)))
    return True


def _place_one(
    placed: Placed,
    topic: str,
    partitions: int,
    b: Batch,
    hash_name: Hashing,
    can_take: bytes,
    max_size: int,
    origin_headers: bool,
    hold_out: bool,
) -> None:
    """One batch of :func:`place_topic`, placed alone."""
    owner, own, header, data, place = b
    groups: Sequence[tuple[int, Any]] | None = None
    if not place:
        _add(placed, topic, own, (owner, len(data), data, None, header), True)
        placed.located = False
        placed.batches.append(b)
        return
    name = _accelerated(hash_name)
    if not origin_headers and header.magic == 2 and name in batch_split.HASH_IDS:
        groups = batch_split.split_batch(
            data, header, partitions=partitions, hash_name=name, own=own, max_size=max_size
        )
    if groups is not None:
        total = header.records_count
        counts = [len(spans[1]) // batch_split.SPAN_SIZE for _, spans in groups]
    else:
        placed.located = False
        records = (
            decode_batch(data, max_size=max_size).records
            if header.magic == 2
            else decode_legacy_entry(data, max_size=max_size)
        )
        hash_of = HASHES[hash_name] if isinstance(hash_name, str) else hash_name
        grouped = _group(records, own, partitions, hash_of)
        if origin_headers and header.magic == 2 and list(grouped) != [own]:
            grouped = _group(_with_origin(records, own, header), own, partitions, hash_of)
        groups = list(grouped.items())
        total = len(records)
        counts = [len(r) for _, r in groups]
    placed.batches.append(b)
    if len(groups) == 1 and groups[0][0] == own:
        placed.counted.append((topic, 0, total))
        _add(placed, topic, own, (owner, len(data), data, groups[0][1], header), True)
        return
    kept = sum(n for (target, _), n in zip(groups, counts, strict=True) if target == own)
    placed.counted.append((topic, total - kept, kept))
    if log.isEnabledFor(logging.DEBUG):
        # Where the records of a client's batch really went (trafka proxy -v).
        log.debug(
            "%r-%d: %d records placed as %s",
            topic,
            own,
            total,
            ", ".join(f"{n} -> {t}" for (t, _), n in sorted(zip(groups, counts, strict=True))),
        )
    if not all(target < len(can_take) and can_take[target] for target, _ in groups):
        placed.held.append(owner)
        placed.located = False
        if not hold_out:
            _add(placed, topic, own, (owner, len(data), data, None, header), True)
        return
    placed.split.add(owner)
    for (target, records), n in zip(groups, counts, strict=True):
        piece = (owner, len(data) * n // max(1, total) + 64, None, records, header)
        _add(placed, topic, target, piece, target == own)


def _add(placed: Placed, topic: str, target: int, piece: Piece, own: bool) -> None:
    slot = placed.targets.get((topic, target))
    if slot is None:
        slot = placed.targets[(topic, target)] = ([], [])
    slot[0 if own else 1].append(piece)


def _group(
    records: Sequence[Record], partition: int, count: int, hash_of: Callable[[bytes, int], int]
) -> dict[int, list[Record]]:
    groups: dict[int, list[Record]] = {}
    for r in records:
        target = partition if r.key is None else hash_of(r.key, count)
        groups.setdefault(target, []).append(r)
    return groups


def cap_of(sizes: Iterable[int]) -> int:
    """The most estimated bytes a merged batch holds, given the sizes of the
    request's client batches (see the module's rules)."""
    return max(_MIN_MERGE_BYTES, max(sizes, default=0))


def piece_count(piece: Piece) -> int:
    """How many records ``piece`` holds."""
    records = piece[3]
    if records is None:
        header = piece[4]
        return int(header.records_count) if header.magic == 2 else len(_records_of(piece))
    if isinstance(records, list):
        return len(records)
    return len(records[1]) // batch_split.SPAN_SIZE


def chunked(own: list[Piece], moved: list[Piece], cap: int) -> list[list[Piece]]:
    """The pieces bound for one partition, as batches: the client's own first,
    each batch at most ``cap`` estimated bytes (and at least one piece)."""
    pieces = own + moved
    if sum(map(_SIZE, pieces)) <= cap:
        return [pieces]  # the usual case, with no Python code per piece
    out: list[list[Piece]] = []
    size = 0
    for piece in pieces:
        if not out or size + piece[1] > cap:
            out.append([])
            size = 0
        out[-1].append(piece)
        size += piece[1]
    return out


def build(
    chunks: Sequence[list[Piece]],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    sequences: Sequence[int] | None = None,
    located: bool = False,
) -> list[tuple[bytes, int]]:
    """Each chunk as one batch and the number of its records: a whole client
    batch byte for byte (renumbered at its sequence when it has a producer id),
    the others made of their pieces' records in order, with the first piece's
    compression, timestamp type and transactional bit and ``producer_id``,
    ``producer_epoch`` and the chunk's base sequence (``sequences``, else -1).
    Those of spans only in one C call (``located``: every piece's records are
    spans, :attr:`Placed.located`); the rest in Python (a legacy message set
    of the client's own magic and codec for Produce v0-2)."""
    out: list[tuple[bytes, int] | None] = [None] * len(chunks)
    jobs: list[batch_split.Job] = []
    built_for: list[int] = []
    in_python: list[int] = []
    for i, chunk in enumerate(chunks):
        first = chunk[0]
        header = first[4]
        sequence = -1 if sequences is None else sequences[i]
        if len(chunk) == 1 and first[2] is not None:
            data = first[2]
            if producer_id >= 0 and sequence != header.base_sequence:
                data = set_base_sequence(data, sequence)
            out[i] = (data, getattr(header, "records_count", -1))
        elif located or (header.magic == 2 and all(isinstance(p[3], tuple) for p in chunk)):
            spans = list(map(_RECORDS, chunk))
            jobs.append((spans, header.attributes, producer_id, producer_epoch, sequence))
            built_for.append(i)
        else:
            in_python.append(i)
    if jobs:
        for i, made in zip(built_for, batch_split.build_batches(jobs), strict=True):
            if made is None:
                in_python.append(i)
            out[i] = made
    for i in in_python:
        sequence = -1 if sequences is None else sequences[i]
        out[i] = _encode(chunks[i], producer_id, producer_epoch, sequence)
    return out  # type: ignore[return-value]


def _encode(
    pieces: list[Piece], producer_id: int, producer_epoch: int, sequence: int
) -> tuple[bytes, int]:
    """:func:`build` of one chunk in Python."""
    first = pieces[0][4]
    if first.magic != 2:  # Produce v0-2: a message set of the client's own magic
        messages = [(r.timestamp, r.key, r.value, ()) for p in pieces for r in _records_of(p)]
        data = encode_message_set(
            messages,
            magic=first.magic,
            compression=first.compression,
            timestamp_type=1 if first.timestamp_type == TimestampType.LOG_APPEND_TIME else 0,
        )
        return data, len(messages)
    attributes = first.attributes
    records = [(r.timestamp, r.key, r.value, r.headers) for p in pieces for r in _records_of(p)]
    data = encode_batch(
        records,
        compression=Compression(attributes & 0x07),
        timestamp_type=1 if attributes & _LOG_APPEND_TIME else 0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=sequence if producer_id >= 0 else -1,
        is_transactional=bool(attributes & _TRANSACTIONAL),
    )
    return data, len(records)


def _records_of(piece: Piece) -> list[Record]:
    """A piece's records, decoded."""
    records = piece[3]
    if isinstance(records, list):
        return records
    header = piece[4]
    if records is None:  # a whole batch, not decoded
        assert piece[2] is not None
        if header.magic == 2:
            return decode_batch(piece[2]).records
        return decode_legacy_entry(piece[2])
    # Located by the C pass: built alone, then decoded.
    built = batch_split.build_batch([records], attributes=0)
    assert built is not None  # these spans were built once already
    return decode_batch(built[0]).records


def untouchable(header: Any) -> bool:
    """Whether a magic 2 batch has a producer id, the transactional or the
    control bit (the plain plans do not place it)."""
    return bool(header.producer_id >= 0 or header.attributes & (_TRANSACTIONAL | _CONTROL))


# The most record bytes a request may hold for the driver to plan it on its own
# thread: the C pass costs a few microseconds per kilobyte, less than handing
# the request to a worker thread and back; more than this, other clients wait.
_CHEAP_BYTES = 1024 * 1024
# gzip's compressor (zlib, at Java's level) is several times slower than the others.
_SLOW_CODECS = frozenset({Compression.GZIP})


def cheap_to_plan(body: Any, *, hash_name: Hashing, origin_headers: bool) -> bool:
    """Whether placing the records of ``body`` takes so little time (the codec's
    C pass, a request of at most ``_CHEAP_BYTES`` of records, no gzip) that the
    driver does it at once rather than on a worker thread."""
    name = _accelerated(hash_name)
    if origin_headers or name is None or not batch_split.available(name):
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
