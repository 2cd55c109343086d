"""Validating the record batches of an append, and assigning their offsets (I/O-free).

Rules (those of ``partition/__init__.py`` for appends, applied before a byte is
written):

* Every batch is checked: a whole header, magic 2, a length that fits, CRC32C,
  a known codec, a non-negative offset delta; a leader's append also checks
  ``message_max_bytes`` and, for clients, Kafka's producer rules (the offset
  range matches the record count, no control batches, a producer id needs a
  sequence) and, on a compacted topic, a key on every record. The append as a
  whole must fit a segment.
* A leader's append rewrites each batch's base offset and leader epoch in
  place (neither is covered by the CRC), and its timestamp type (the CRC then
  recomputed) when the topic stamps LogAppendTime or the producer claimed it.
* A follower's append rewrites nothing and checks the offsets instead: they
  increase, gaps allowed; the one overlap allowed is an empty log's end inside
  the first batch.

The first rule a rejected batch breaks is named by :func:`_reject`, off the
accepted path, which one combined test keeps short.
"""

from __future__ import annotations

import struct
from typing import NoReturn

from trafka.codec.crc import crc32c

from ...errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from ..segment import BATCH_HEADER_SIZE, LOG_OVERHEAD
from ..topic_configs import LogConfig

__all__ = ["Prepared", "prepare_batches"]

# A tuple (appends are a hot path): ``(buf, batches, next_offset, record_count,
# new_epochs, gapped)``, see :func:`prepare_batches`.
Prepared = tuple[bytearray, list[tuple[int, int, int, int]], int, int, list[tuple[int, int]], bool]

_LONG_MAX = 2**63 - 1
# The leader checked message_max_bytes: a follower stores what it accepted.
_NO_SIZE_LIMIT = _LONG_MAX

# The whole 61-byte batch header, in wire order.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
# What the log rewrites in place on append: base_offset, batch_length (unchanged),
# partition_leader_epoch. None of it is covered by the CRC.
_PREFIX = struct.Struct(">qii")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")

_CODEC_MASK = 0x07
_CONTROL_BIT = 0x20


def prepare_batches(
    records: bytes | bytearray | memoryview,
    now_ms: int,
    *,
    config: LogConfig,
    log_append_time: bool,
    leader_epoch: int,
    latest_epoch: int,
    next_offset: int,
    log_start: int,
    from_client: bool,
    replicated: bool,
) -> Prepared:
    """Validate every batch and, unless ``replicated``, assign offsets in place.

    ``next_offset`` and ``log_start`` are the log's end and start offsets,
    ``latest_epoch`` its epoch cache's latest epoch (-1 when empty), and
    ``leader_epoch`` what a leader stamps on the batches.

    Returns:
        ``(buf, batches, next_offset, record_count, new_epochs, gapped)``:
        ``batches`` as :meth:`Segment.append` takes them; ``new_epochs`` the epoch
        cache entries the batches' own leader epochs bring, and ``gapped`` whether
        the offsets leave a gap (``replicated`` only). A replicated first batch
        starting below the log end (allowed only as the module rules say) makes
        the offsets continue from its base offset.
    """
    buf = bytearray(records)
    n = len(buf)
    if not n:
        raise InvalidRecordError("the records are empty: at least one record batch is needed")
    view = memoryview(buf)
    cfg = config
    max_size = _NO_SIZE_LIMIT if replicated else cfg.message_max_bytes
    log_append = log_append_time
    epoch = leader_epoch
    new_epochs: list[tuple[int, int]] = []
    offset = next_offset
    gapped = False
    unpack = _BATCH_HEADER.unpack_from
    prefix = _PREFIX.pack_into
    batches: list[tuple[int, int, int, int]] = []
    count_total = 0
    pos = 0
    append = batches.append
    while pos < n:
        if n - pos < BATCH_HEADER_SIZE:
            raise CorruptRecordError(
                f"truncated record batch at byte {pos}: {n - pos} bytes cannot hold a header"
            )
        (base, length, b_epoch, magic, crc, attrs, lod, _, max_ts, pid, _, seq, count) = unpack(
            buf, pos
        )
        end = pos + length + 12
        # One combined test keeps the accepted path short; _reject names the fault.
        if (
            magic != 2
            or length < 49
            or end > n
            or end - pos > max_size
            or crc32c(view[pos + 21 : end]) != crc
            or lod < 0
            or attrs & 0x07 > 4
            or (from_client and (lod + 1 != count or attrs & 0x20 or (pid >= 0 and seq < 0)))
        ):
            _reject(view, pos, max_size, from_client)
        if replicated:
            if base > offset:
                gapped = True
            elif base < offset:
                if batches or base + lod < offset or offset != log_start:
                    _refuse_offset(pos, base, offset, first=not batches)
                # The empty log restarts at ``base``, its epoch cache emptied.
                latest_epoch = -1
            offset = base
            if b_epoch > latest_epoch:
                new_epochs.append((b_epoch, base))
                latest_epoch = b_epoch
        else:
            if log_append:
                max_ts = now_ms
                _stamp(buf, view, pos, end, attrs | 0x08, now_ms)
            elif attrs & 0x08:
                # A CreateTime topic keeps the producer's timestamps, whatever it claimed.
                _stamp(buf, view, pos, end, attrs & ~0x08, max_ts)
            prefix(buf, pos, offset, length, epoch)
        append((pos, end - pos, offset, max_ts))
        offset += lod + 1
        count_total += count
        pos = end
    view.release()
    if from_client and cfg.compact:
        _check_keys(buf, batches)
    if n > cfg.segment_bytes:
        raise RecordBatchTooLargeError(
            f"{n} bytes of record batches cannot fit a segment of segment.bytes={cfg.segment_bytes}"
        )
    return buf, batches, offset, count_total, new_epochs, gapped


def _stamp(buf: bytearray, view: memoryview, pos: int, end: int, attrs: int, max_ts: int) -> None:
    """Rewrite a batch's timestamp type and max_timestamp, then its CRC."""
    _I16.pack_into(buf, pos + 21, attrs)
    _I64.pack_into(buf, pos + 35, max_ts)
    _U32.pack_into(buf, pos + 17, crc32c(view[pos + 21 : end]))


def _refuse_offset(pos: int, base: int, expected: int, *, first: bool) -> NoReturn:
    """Raise the error for a replicated batch that overlaps what precedes it."""
    if first:
        raise InvalidRecordError(
            f"the replicated batches start at offset {base}, below the log end offset "
            f"{expected} (offsets must increase)"
        )
    raise InvalidRecordError(
        f"the replicated batch at byte {pos} starts at offset {base}; the previous batch "
        f"ends at {expected - 1} (offsets must increase)"
    )


def _reject(view: memoryview, pos: int, max_size: int, from_client: bool) -> None:
    """Raise the error for the first rule that the batch at ``pos`` breaks."""
    n = len(view)
    (_, length, _, magic, crc, attrs, lod, _, _, pid, _, seq, count) = _BATCH_HEADER.unpack_from(
        view, pos
    )
    size = length + LOG_OVERHEAD
    if magic != 2:
        if magic in (0, 1):
            raise InvalidRecordError(
                f"message format v{magic} at byte {pos}: only magic 2 batches are accepted"
            )
        raise CorruptRecordError(f"invalid magic {magic} at byte {pos + 16}")
    if length < BATCH_HEADER_SIZE - LOG_OVERHEAD or size > n - pos:
        raise CorruptRecordError(
            f"batch length {length} at byte {pos + 8} does not fit the {n} bytes given"
        )
    if size > max_size:
        raise RecordTooLargeError(
            f"a record batch of {size} bytes exceeds max.message.bytes ({max_size})"
        )
    if crc32c(view[pos + 21 : pos + size]) != crc:
        raise CorruptRecordError(f"CRC mismatch in the record batch at byte {pos}")
    if attrs & _CODEC_MASK > 4:
        raise InvalidRecordError(f"unknown compression codec {attrs & _CODEC_MASK}")
    if lod < 0:
        raise InvalidRecordError(f"negative last_offset_delta {lod}")
    if from_client:
        if count <= 0 or lod + 1 != count:
            raise InvalidRecordError(
                f"record batch claims {count} records but an offset range of {lod + 1}"
            )
        if attrs & _CONTROL_BIT:
            raise InvalidRecordError("clients may not write control batches")
        if pid >= 0 and seq < 0:
            raise InvalidRecordError(f"producer id {pid} with invalid base sequence {seq}")
    raise AssertionError("unreachable: the batch breaks no rule")  # pragma: no cover


def _check_keys(buf: bytearray, batches: list[tuple[int, int, int, int]]) -> None:
    """Refuse records without a key, as Kafka does for a compacted topic."""
    from trafka.codec.errors import DecodeError
    from trafka.codec.records import decode_batch

    view = memoryview(buf)
    try:
        for pos, size, base, _ in batches:
            try:
                records = decode_batch(view[pos : pos + size], verify=False).records
            except DecodeError as exc:
                raise CorruptRecordError(
                    f"the record batch at offset {base} cannot be decoded: {exc}"
                ) from None
            for record in records:
                if record.key is None:
                    raise InvalidRecordError(
                        f"record {record.offset - base} of a batch has no key: "
                        "a compacted topic accepts only records with keys"
                    )
    finally:
        view.release()
