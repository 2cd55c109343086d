"""A record batch's header, the walk over a records blob, CRCs and in-place rewrites.

Job: read the 61-byte header (:func:`read_batch_header`), walk the entries of a
blob of any magic (:func:`iter_batches`, :func:`blob_next_offset`,
:func:`assign_offsets`), check CRCs (:func:`verify_crc`, :func:`check_batch`)
and rewrite the fields a broker may change without re-encoding
(:func:`set_base_offset`, :func:`set_partition_leader_epoch`,
:func:`set_base_sequence`).

Rules: a trailing entry cut short is skipped silently, a length below the
format's minimum is corrupt; no buffer is sized from a length before its bytes
have been received; rewrites touch only fields outside the CRC-32C's range
(or recompute it). Errors are located :class:`~trafka.codec.errors.DecodeError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple, overload

from ._batch_format import (
    _ATTRIBUTES_AT,
    _BASE_SEQUENCE_AT,
    _CODEC_MASK,
    _CONTROL_BIT,
    _CRC_AT,
    _EPOCH_AT,
    _HEADER,
    _I32,
    _I64,
    _INT32_MAX,
    _MIN_LEGACY_LENGTH,
    _NAME,
    _TRANSACTIONAL_BIT,
    _U32,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BytesLike,
    TimestampType,
    _new,
)
from .compression import Compression
from .crc import crc32, crc32c
from .errors import DecodeError, EncodeError
from .legacy import LegacyMessageHeader, assign_legacy_offsets, read_message_header

# -- header --------------------------------------------------------------------------


class RecordBatchHeader(NamedTuple):
    """The 61-byte header of a record batch (magic 2), fields in wire order."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> Compression:
        """The codec of the records payload."""
        return Compression(self.attributes & _CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        """CREATE_TIME (0) or LOG_APPEND_TIME (1)."""
        return TimestampType((self.attributes >> 3) & 1)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        """The whole batch's size in bytes, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_sequence(self) -> int:
        """The sequence number of the last record; -1 without idempotence.

        Sequence numbers wrap from 2**31-1 to 0, as in the Java client.
        """
        if self.base_sequence == -1:
            return -1
        last = self.base_sequence + self.last_offset_delta
        return last - _INT32_MAX - 1 if last > _INT32_MAX else last


def read_batch_header(buf: BytesLike, pos: int = 0) -> RecordBatchHeader:
    """Decode the 61-byte header of the batch at ``buf[pos:]``, not its records.

    Only the header has to be present; callers that need the whole batch check
    ``len(buf) - pos >= header.size`` (as :func:`iter_batches` does).

    Args:
        buf: bytes holding the batch.
        pos: where the batch starts.

    Returns:
        The header.

    Raises:
        DecodeError: fewer than 61 bytes, magic other than 2, ``batch_length`` below
            49, or an unknown compression codec.
    """
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise DecodeError(
            f"truncated: a batch header needs {BATCH_HEADER_SIZE} bytes, {max(len(buf) - pos, 0)} left",
            message_name=_NAME,
        )
    fields = _HEADER.unpack_from(buf, pos)
    if fields[3] != 2:
        raise DecodeError(f"magic {fields[3]} is not 2", message_name=_NAME, field="magic")
    if fields[1] < MIN_BATCH_LENGTH:
        raise DecodeError(
            f"batch_length {fields[1]} is below the minimum of {MIN_BATCH_LENGTH}",
            message_name=_NAME,
            field="batch_length",
        )
    if fields[5] & _CODEC_MASK > 4:
        raise DecodeError(
            f"unknown compression codec {fields[5] & _CODEC_MASK}",
            message_name=_NAME,
            field="attributes",
        )
    header: RecordBatchHeader = _new(RecordBatchHeader, fields)
    return header


# -- walking a blob ----------------------------------------------------------------------


def iter_batches(
    buf: BytesLike, start: int = 0
) -> Iterator[tuple[RecordBatchHeader | LegacyMessageHeader, memoryview]]:
    """Walk a records blob, yielding each entry's header and bytes (no copy).

    Magic 2 entries yield a :class:`RecordBatchHeader`; legacy entries (magic 0
    and 1: one message, possibly a compressed wrapper holding several) yield a
    :class:`~trafka.codec.legacy.LegacyMessageHeader`. Use ``header.magic`` or
    ``isinstance`` to tell them apart; both have ``last_offset``,
    ``next_offset``, ``size``, ``compression`` and ``crc``.

    A trailing entry cut short is skipped silently, as a Fetch response may end
    mid-batch. Nothing is decompressed and CRCs are not checked here.

    Args:
        buf: the blob.
        start: where to start (the start of an entry), 0 by default.

    Yields:
        ``(header, view)`` where ``view`` covers exactly the entry.

    Raises:
        DecodeError: a length below the minimum for the entry's magic, an
            unknown magic, or a malformed batch header.
    """
    view = memoryview(buf)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    end = len(view)
    pos = start
    if pos < 0:
        raise ValueError("start must be >= 0")
    while end - pos >= LOG_OVERHEAD:
        length = _I32.unpack_from(view, pos + 8)[0]
        if length < _MIN_LEGACY_LENGTH:
            raise DecodeError(
                f"length {length} at byte {pos + 8} is below the minimum of {_MIN_LEGACY_LENGTH}",
                message_name="Records",
                field="length",
            )
        stop = pos + LOG_OVERHEAD + length
        if stop > end:
            return
        magic = view[pos + 16]
        header: RecordBatchHeader | LegacyMessageHeader
        if magic == 2:
            header = read_batch_header(view, pos)
        elif magic < 2:
            header = read_message_header(view, pos)
        else:
            raise DecodeError(
                f"unsupported magic {magic} at byte {pos + 16}",
                message_name="Records",
                field="magic",
            )
        yield header, view[pos:stop]
        pos = stop


def batches_of(
    buf: BytesLike | None,
) -> list[tuple[RecordBatchHeader | LegacyMessageHeader, memoryview]]:
    """``list(iter_batches(buf))`` (None: no records), read without walking when
    ``buf`` is exactly one magic 2 batch: a producer's usual partition of a
    Produce request, whose header the proxy's routing reads twice a request."""
    if buf is None:
        return []
    if len(buf) >= BATCH_HEADER_SIZE and buf[16] == 2:
        length = _I32.unpack_from(buf, 8)[0]
        if length >= MIN_BATCH_LENGTH and length + LOG_OVERHEAD == len(buf):
            view = memoryview(buf)
            if view.ndim == 1 and view.itemsize == 1:
                return [(read_batch_header(view), view)]
    return list(iter_batches(buf))


def blob_next_offset(buf: BytesLike) -> int | None:
    """The offset after the last complete entry of a records blob, read cheaply.

    Only the entries' length fields and the last entry's header are read: no
    CRC, no records. A consumer uses it to fetch the data after a blob before
    decoding the blob.

    Args:
        buf: the blob (a trailing partial entry is ignored, as by :func:`iter_batches`).

    Returns:
        The last complete entry's ``next_offset``, or None when the blob holds
        no complete entry or its framing is malformed (:func:`iter_batches`
        raises the error when the blob is decoded).
    """
    view = memoryview(buf)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    end = len(view)
    unpack = _I32.unpack_from
    pos = 0
    last = -1
    while end - pos >= LOG_OVERHEAD:
        length = unpack(view, pos + 8)[0]
        if length < _MIN_LEGACY_LENGTH:
            return None
        stop = pos + LOG_OVERHEAD + length
        if stop > end:
            break
        last = pos
        pos = stop
    if last < 0:
        return None
    magic = view[last + 16]
    try:
        if magic == 2:
            return read_batch_header(view, last).next_offset
        if magic < 2:
            return read_message_header(view, last).next_offset
    except DecodeError:
        pass
    return None


def assign_offsets(buf: BytesLike, base_offset: int) -> tuple[bytes, int]:
    """Give every entry of a produced blob its offsets, as a broker's log does.

    Magic 2 batches get their ``base_offset`` rewritten (CRC untouched); legacy
    entries are handled by :func:`trafka.codec.legacy.assign_legacy_offsets`.

    Args:
        buf: a complete blob (a trailing partial entry is an error here).
        base_offset: the offset of the blob's first record.

    Returns:
        ``(new_blob, next_offset)``.

    Raises:
        DecodeError: malformed or incomplete blob.
        EncodeError: an offset out of the int64 range.
    """
    out = bytearray(buf)
    next_offset = base_offset
    consumed = 0
    parts: list[bytes | bytearray] = []
    for header, view in iter_batches(out):
        consumed += len(view)
        if isinstance(header, LegacyMessageHeader):
            data, next_offset = assign_legacy_offsets(view, next_offset)
            parts.append(data)
            continue
        set_base_offset(view, next_offset)
        next_offset += header.last_offset_delta + 1
        parts.append(view.tobytes())
    if consumed != len(out):
        raise DecodeError(
            f"incomplete entry: {len(out) - consumed} trailing bytes", message_name="Records"
        )
    return b"".join(parts), next_offset


# -- CRC ------------------------------------------------------------------------------------


def _entry_bounds(batch: BytesLike) -> tuple[memoryview, int, int]:
    view = memoryview(batch)
    if len(view) < 17:
        raise DecodeError(f"truncated: {len(view)} bytes cannot hold a batch", message_name=_NAME)
    length = _I32.unpack_from(view, 8)[0]
    magic = view[16]
    minimum = MIN_BATCH_LENGTH if magic == 2 else _MIN_LEGACY_LENGTH
    if length < minimum:
        raise DecodeError(
            f"length {length} is below {minimum}", message_name=_NAME, field="batch_length"
        )
    if len(view) < LOG_OVERHEAD + length:
        raise DecodeError(
            f"truncated: the batch needs {LOG_OVERHEAD + length} bytes, {len(view)} given",
            message_name=_NAME,
        )
    if magic > 2:
        raise DecodeError(f"unsupported magic {magic}", message_name=_NAME, field="magic")
    return view, magic, LOG_OVERHEAD + length


def _crc_pair(batch: BytesLike) -> tuple[int, int]:
    """(stored, computed) checksum of one batch or legacy message."""
    view, magic, end = _entry_bounds(batch)
    if magic == 2:
        return _U32.unpack_from(view, _CRC_AT)[0], crc32c(view[_ATTRIBUTES_AT:end])
    return _U32.unpack_from(view, LOG_OVERHEAD)[0], crc32(view[16:end])


def verify_crc(batch: BytesLike) -> bool:
    """Whether one batch's (or legacy message's) stored CRC matches its bytes.

    Magic 2 uses CRC-32C over ``attributes`` to the end; magic 0/1 use CRC-32
    over ``magic`` to the end. Bytes after the entry's declared length are
    ignored.

    Raises:
        DecodeError: too short to hold the checksum or the declared length.
    """
    stored, computed = _crc_pair(batch)
    return stored == computed


def check_batch(batch: BytesLike) -> None:
    """Raise DecodeError("CRC mismatch ...") unless :func:`verify_crc` holds."""
    stored, computed = _crc_pair(batch)
    if stored != computed:
        raise DecodeError(
            f"CRC mismatch: stored {stored:#010x}, computed {computed:#010x}",
            message_name=_NAME if memoryview(batch)[16] == 2 else "Message",
            field="crc",
        )


# -- in-place rewrites -------------------------------------------------------------------------


@overload
def set_base_offset(batch: bytearray, base_offset: int) -> bytearray: ...
@overload
def set_base_offset(batch: memoryview, base_offset: int) -> memoryview | bytes: ...
@overload
def set_base_offset(batch: bytes, base_offset: int) -> bytes: ...
def set_base_offset(batch: BytesLike, base_offset: int) -> BytesLike:
    """Set a magic 2 batch's ``base_offset`` (the CRC does not cover it).

    Args:
        batch: the batch. A ``bytearray`` or writable ``memoryview`` is changed in
            place and returned; ``bytes`` (or a read-only view) is copied.
        base_offset: the new base offset.

    Returns:
        The batch with its first 8 bytes rewritten.

    Raises:
        DecodeError: not a magic 2 batch.
        EncodeError: ``base_offset`` outside int64.
    """
    return _rewrite(batch, 0, _I64, base_offset, "base_offset")


@overload
def set_partition_leader_epoch(batch: bytearray, epoch: int) -> bytearray: ...
@overload
def set_partition_leader_epoch(batch: memoryview, epoch: int) -> memoryview | bytes: ...
@overload
def set_partition_leader_epoch(batch: bytes, epoch: int) -> bytes: ...
def set_partition_leader_epoch(batch: BytesLike, epoch: int) -> BytesLike:
    """Set a magic 2 batch's ``partition_leader_epoch`` (not covered by the CRC).

    Same in-place rules as :func:`set_base_offset`.
    """
    return _rewrite(batch, _EPOCH_AT, _I32, epoch, "partition_leader_epoch")


def set_base_sequence(batch: BytesLike, base_sequence: int) -> bytes:
    """A copy of one magic 2 batch with ``base_sequence`` set and its CRC-32C
    computed again (the checksum covers the sequence).

    Args:
        batch: exactly one batch (bytes after its declared length are dropped).
        base_sequence: the new first sequence number (int32).

    Returns:
        The rewritten batch.

    Raises:
        DecodeError: not a whole magic 2 batch.
        EncodeError: ``base_sequence`` outside int32.
    """
    view, magic, end = _entry_bounds(batch)
    if magic != 2:
        raise DecodeError("not a magic 2 record batch", message_name=_NAME, field="magic")
    try:
        packed = _I32.pack(base_sequence)
    except struct.error:
        raise EncodeError(
            f"{base_sequence!r} is out of range", message_name=_NAME, field="base_sequence"
        ) from None
    out = bytearray(view[:end])
    out[_BASE_SEQUENCE_AT : _BASE_SEQUENCE_AT + 4] = packed
    _U32.pack_into(out, _CRC_AT, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return bytes(out)


def _rewrite(batch: BytesLike, at: int, st: struct.Struct, value: int, what: str) -> BytesLike:
    if len(batch) < BATCH_HEADER_SIZE or memoryview(batch)[16] != 2:
        raise DecodeError("not a magic 2 record batch", message_name=_NAME, field="magic")
    try:
        packed = st.pack(value)
    except struct.error:
        raise EncodeError(f"{value!r} is out of range", message_name=_NAME, field=what) from None
    if isinstance(batch, bytearray) or (isinstance(batch, memoryview) and not batch.readonly):
        batch[at : at + st.size] = packed
        return batch
    data = bytes(batch)
    return data[:at] + packed + data[at + st.size :]
