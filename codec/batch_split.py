"""Splitting a magic 2 batch by record key without decoding its records.

The proxy's key routing (``trafka.proxy.routing``) moves each keyed record of a
client's batch to the partition its key hashes to. Its reference path decodes
every record (:func:`~.records.decode_batch`) and encodes each group again
(:func:`~.records.encode_batch`); this module is the same work done in the C
accelerator (``index_records`` and ``build_records`` of ``codec/_speedups.c``),
with no Python object per record: the batch header is read here, and the
CRC and (de)compression called from here one batch at a time
(:func:`split_batch`, :func:`build_batch`). ``place_sections`` indexes all
the batches of one topic of a request in one call and groups their pieces by
target partition, with no Python code per piece, an lz4 batch's CRC checked
and frame read in that call too (:func:`lazy_section`); ``build_batches``
builds all the upstream batches of a request, records, lz4 frames, headers
and CRCs, in one call.

Rules:

* A fast path only. Every function returns None when the accelerator is not
  built or is turned off (``TRAFKA_NO_SPEEDUPS``), and whenever anything about
  the batch is unusual or malformed (a CRC mismatch, a record the decoder
  refuses, a varint not in its shortest form, a value beyond int64, a payload
  that inflates past ``max_size``): the caller then runs the reference path,
  which raises the precise error. Nothing here raises on bad input.
* What is returned is byte for byte what the reference path builds for the same
  records: the same partitions in the same order (first seen), the same record
  bytes (attributes 0, offset deltas 0, 1, 2..., timestamps relative to the
  first record's), header fields, compression and CRC
  (tests/codec/test_batch_split.py checks it on random batches).
* Key hashes are those of ``trafka.sdk.partitioners.KEY_HASHES``, by the same
  names (:data:`HASH_IDS`); a record without a key stays in the client's partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from . import records as _records
from .compression import _LZ4_HEADER, DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, decompress
from .crc import crc32c
from .errors import DecodeError
from .records import BATCH_HEADER_SIZE, RecordBatchHeader

__all__ = [
    "HASH_IDS",
    "Piece",
    "Placed",
    "Section",
    "Spans",
    "available",
    "build_batch",
    "build_batches",
    "lazy_section",
    "place_sections",
    "placing",
    "section",
    "split_batch",
]

#: The key hashes the C pass computes, by their ``KEY_HASHES`` names.
HASH_IDS = {"murmur2": 0, "crc32": 1, "fnv1a": 2}

#: Some records of a decompressed records section: the section and the records'
#: spans in it (opaque, made by the C pass). ``len(spans) // SPAN_SIZE`` records.
Spans = tuple[Any, bytes]
SPAN_SIZE = 16

_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_CRC_FROM = 21  # the CRC covers the batch from its attributes on
_MIN_RECORD = 7


def available(hash_name: str) -> bool:
    """Whether the C pass is on (built, not turned off) and computes ``hash_name``."""
    return _records.accelerated("index_records") is not None and hash_name in HASH_IDS


def split_batch(
    batch: bytes,
    header: RecordBatchHeader,
    *,
    partitions: int,
    hash_name: str,
    own: int,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[tuple[int, Spans]] | None:
    """The records of a whole magic 2 batch, grouped by target partition.

    Args:
        batch: the batch's bytes (``header.size`` of them).
        header: its header (:func:`~.records.read_batch_header`).
        partitions: the topic's partition count.
        hash_name: a key of :data:`HASH_IDS`.
        own: the partition the client sent the batch to (records without a key
            stay there).
        max_size: the most the records may inflate to.

    Returns:
        ``(target, spans)`` per target partition, in the order first seen (a
        record's target is its key's partition), or None: the reference path
        decides (see the module's rules).
    """
    index_records = _records.accelerated("index_records")
    hash_id = HASH_IDS.get(hash_name)
    if index_records is None or hash_id is None:
        return None
    found_section = section(batch, header, own=own, partitions=partitions, max_size=max_size)
    if found_section is None:
        return None
    data, log_append = found_section
    count = header.records_count
    found = index_records(data, count, header.base_timestamp, log_append, partitions, hash_id, own)
    if found is None:
        return None
    return [(target, (data, spans)) for target, spans in found]


def section(
    batch: bytes,
    header: RecordBatchHeader,
    *,
    own: int,
    partitions: int,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[Any, int | None] | None:
    """The records section of a whole magic 2 batch, checked and decompressed, as
    the C pass indexes it: (its bytes, the log append time of every record or
    None); None when the reference path must decide (see the module's rules).
    Arguments as for :func:`split_batch`."""
    if header.magic != 2 or header.attributes & _CONTROL:
        return None
    view = memoryview(batch)
    if len(view) < header.size or not 0 <= own < partitions:
        return None
    if crc32c(view[_CRC_FROM : header.size]) != header.crc:
        return None
    payload = view[BATCH_HEADER_SIZE : header.size]
    data: Any = payload
    codec = header.attributes & _CODEC_MASK
    if codec:
        try:
            data = decompress(codec, payload, max_size=max_size)
        except DecodeError:
            return None
    count = header.records_count
    if count < 0 or count * _MIN_RECORD > len(data):
        return None
    log_append = header.max_timestamp if header.attributes & _LOG_APPEND_TIME else None
    return data, log_append


#: One batch for :func:`place_sections`: (its section's bytes or None, record count, base
#: timestamp, log append time or None, the client's partition, the batch's size on
#: the wire, its bytes, and two objects the pieces carry: its owner and header).
Section = tuple[Any, int, int, int | None, int, int, bytes, Any, Any]
#: A piece of :func:`place_sections`: (owner, estimated bytes, the batch's bytes
#: when it stays whole else None, its spans, header).
Piece = tuple[Any, int, bytes | None, Spans, Any]
#: What :func:`place_sections` gives: (the targets in the order first seen; per
#: partition None or its (own, moved) pieces; per batch (records moved, records
#: kept, whether it was split)).
Placed = tuple[list[int], list[tuple[list[Piece], list[Piece]] | None], list[tuple[int, int, bool]]]


def placing(hash_name: str) -> bool:
    """Whether :func:`place_sections` runs (the C pass is on and computes ``hash_name``)."""
    return _records.accelerated("place_sections") is not None and hash_name in HASH_IDS


def place_sections(
    batches: list[Section],
    *,
    partitions: int,
    hash_name: str,
    known: bytes,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Placed | None:
    """:func:`split_batch` for the batches of one topic of a request at once,
    their pieces grouped by target partition, with no Python code per piece.

    A batch whose records all stay in its partition (``own``) is one piece, of
    its size and bytes; the pieces of one that does not are estimated at its
    size times their share of its records, plus 64 bytes, and have no bytes.

    A batch's section may be None (:func:`lazy_section`): the C call then reads
    it (the CRC checked, the lz4 frame read), with no Python code per batch;
    when it cannot, the sections are read here and the call made again.

    Args:
        batches: the batches (:data:`Section`), in the request's order.
        partitions, hash_name: as for :func:`split_batch`.
        known: one byte per partition, non-zero where the target may take
            records moved in (its leader is known).
        max_size: the most a section may inflate to.

    Returns:
        (the targets in the order first seen; per partition None or its pieces,
        the client's own batches' first and those moved in; per batch (records
        moved, records kept, whether it was split)), or None: the C pass
        declines a batch, or a batch that is split has a target not ``known``.
    """
    place = _records.accelerated("place_sections")
    hash_id = HASH_IDS.get(hash_name)
    if place is None or hash_id is None:
        return None
    done = place(batches, partitions, hash_id, known, crc32c, max_size)
    if done is None and any(b[0] is None for b in batches):
        read = []
        for b in batches:
            if b[0] is None:
                found = section(b[6], b[8], own=b[4], partitions=partitions, max_size=max_size)
                if found is None:
                    return None
                b = (found[0], *b[1:])
            read.append(b)
        done = place(read, partitions, hash_id, known)
    return cast("Placed | None", done)


def lazy_section(
    batch: bytes,
    header: RecordBatchHeader,
    *,
    own: int,
    partitions: int,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[Any, int | None] | None:
    """:func:`section`, or for an lz4 batch (the usual kind) (None, its log
    append time or None): its section left for :func:`place_sections` to read
    in C."""
    attributes = header.attributes
    if (
        attributes & (_CODEC_MASK | _CONTROL) == 3
        and header.magic == 2
        and 0 <= own < partitions
        and len(batch) == header.size
    ):
        return None, header.max_timestamp if attributes & _LOG_APPEND_TIME else None
    return section(batch, header, own=own, partitions=partitions, max_size=max_size)


def build_batch(
    pieces: Sequence[Spans],
    *,
    attributes: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int | None = None,
) -> tuple[bytes, int] | None:
    """One batch of the records of ``pieces``, in order, and how many they are.

    What :func:`~.records.encode_batch` writes for the same records with the
    codec, timestamp type and transactional bit of ``attributes``, producer id,
    epoch and base sequence as given (None: 0, or -1 without a producer id);
    None when the C pass declines (the reference path then decides).

    Raises:
        EncodeError: a header field is out of its range.
    """
    build_records = _records.accelerated("build_records")
    if build_records is None or not pieces:
        return None
    built = build_records(list(pieces))
    if built is None:
        return None
    payload, count, base_ts, max_ts = built
    data = _records.assemble_batch(
        payload,
        count,
        base_offset=0,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        compression=Compression(attributes & _CODEC_MASK),
        compression_level=None,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=(0 if producer_id >= 0 else -1) if base_sequence is None else base_sequence,
        attributes=attributes & (_TRANSACTIONAL | _LOG_APPEND_TIME),
        partition_leader_epoch=-1,
    )
    return data, count


#: One batch for :func:`build_batches`: (its pieces' spans, attributes, producer
#: id, producer epoch, base sequence), as :func:`build_batch` takes them.
Job = tuple[list[Spans], int, int, int, int]


def build_batches(jobs: list[Job]) -> list[tuple[bytes, int] | None]:
    """:func:`build_batch` of each job, in order, in one C call when it can
    (``build_batches`` of the C module: the records of every batch assembled,
    lz4-compressed and checksummed with no Python code per batch).

    Returns:
        Per job, what :func:`build_batch` returns for it: the batch and its
        record count, or None (the C pass declines; the reference path then
        decides). Byte for byte the same either way
        (tests/codec/test_batch_split.py).

    Raises:
        EncodeError: a header field is out of its range.
    """
    fast = _records.accelerated("build_batches")
    if fast is not None and jobs:
        done = fast(jobs, crc32c, _LZ4_HEADER)
        if done is not None:
            return cast("list[tuple[bytes, int] | None]", done)
    return [
        build_batch(
            pieces,
            attributes=attributes,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=sequence,
        )
        for pieces, attributes, producer_id, producer_epoch, sequence in jobs
    ]
