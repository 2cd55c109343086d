"""Encoding magic 2 record batches (the producer's hot path).

Job: :func:`encode_batch` and :class:`RecordBatchBuilder` (a producer's
incremental batch), :func:`assemble_batch` (header around already encoded
records) and :func:`rebuild_batch` (a decoded batch back to bytes).

Rules: the C accelerator (read as ``_accel.speedups`` at each call) encodes the
records when it accepts them; otherwise the Python encoder gives identical
bytes. Bad input raises :class:`~trafka.codec.errors.EncodeError` naming the
record and field; nothing is half-written.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any

from . import _accel
from ._batch_format import (
    _CODEC_MASK,
    _CONTROL_BIT,
    _HEAD,
    _INT32_MAX,
    _NAME,
    _TAIL,
    _TIMESTAMP_TYPE_BIT,
    _TRANSACTIONAL_BIT,
    _UV,
    _UV_HALF,
    BATCH_HEADER_SIZE,
    MIN_BATCH_LENGTH,
    BytesLike,
    Record,
    RecordInput,
    _uv_table,
    _uvarint,
    _zz32,
    _zz64,
)
from ._batch_header import (
    RecordBatchHeader,
)
from .compression import Compression, compress
from .crc import crc32c, crc32c_function
from .errors import CodecError, EncodeError

# -- encoding ------------------------------------------------------------------------------------------


_BYTE_BUFFERS = (bytes, bytearray, memoryview)


def _headers_bytes(headers: Iterable[tuple[str, BytesLike | None]]) -> bytes:
    """A record's header count and headers."""
    uv = _UV or _uv_table()
    half = _UV_HALF
    parts: list[bytes] = [b""]
    count = 0
    for name, value in headers:
        # TypeError rather than EncodeError: the callers' fallback locates the record.
        if type(name) is not str:
            raise TypeError(f"header key {name!r} is not a str")
        raw = name.encode()
        n = len(raw)
        parts += (uv[n << 1] if n < half else _uvarint(n << 1), raw)
        if value is None:
            parts.append(b"\x01")
        else:
            if type(value) is not bytes:
                if not isinstance(value, _BYTE_BUFFERS):
                    raise TypeError(f"header value {type(value).__name__} is not bytes")
                value = bytes(value)
            n = len(value)
            parts += (uv[n << 1] if n < half else _uvarint(n << 1), value)
        count += 1
    parts[0] = uv[count << 1] if count < half else _uvarint(count << 1)
    return b"".join(parts)


def _encode_record(offset_delta: int, ts_delta: int, key: Any, value: Any, headers: Any) -> bytes:
    """One record, length prefix included (the builder's per-append path)."""
    uv = _UV or _uv_table()
    if -_UV_HALF <= ts_delta < _UV_HALF:
        t = uv[ts_delta << 1 if ts_delta >= 0 else ((-ts_delta) << 1) - 1]
    else:
        t = _zz64(ts_delta, "timestamp")
    o = uv[offset_delta << 1] if offset_delta < _UV_HALF else _zz32(offset_delta, "offset_delta")
    if key is None:
        kh = b"\x01"
        key = b""
    else:
        n = len(key)
        kh = uv[n << 1] if n < _UV_HALF else _zz32(n, "key")
    if value is None:
        vh = b"\x01"
        value = b""
    else:
        n = len(value)
        vh = uv[n << 1] if n < _UV_HALF else _zz32(n, "value")
    h = _headers_bytes(headers) if headers else b"\x00"
    body = b"".join((b"\x00", t, o, kh, key, vh, value, h))
    n = len(body)
    return (uv[n << 1] if n < _UV_HALF else _zz32(n, "length")) + body


def _encode_all(records: Sequence[RecordInput], base_ts: int) -> tuple[bytes, int]:
    """Encode every record; returns (payload, max_timestamp)."""
    # Lengths are computed arithmetically so each record costs one extend of a
    # tuple of ready-made pieces and a single join at the end.
    uv = _UV or _uv_table()
    half = _UV_HALF
    parts: list[Any] = []
    expected = 0
    mx = records[0][0]
    for i, (ts, key, value, headers) in enumerate(records):
        d = ts - base_ts
        if -half <= d < half:
            t = uv[d << 1 if d >= 0 else ((-d) << 1) - 1]
        else:
            t = _zz64(d, f"records[{i}].timestamp")
        o = uv[i << 1] if i < half else _zz32(i, "offset_delta")
        if key is None:
            kh = b"\x01"
            key = b""
            kl = 0
        else:
            kl = len(key)
            kh = uv[kl << 1] if kl < half else _zz32(kl, f"records[{i}].key")
        if value is None:
            vh = b"\x01"
            value = b""
            vl = 0
        else:
            vl = len(value)
            vh = uv[vl << 1] if vl < half else _zz32(vl, f"records[{i}].value")
        h = _headers_bytes(headers) if headers else b"\x00"
        n = 1 + len(t) + len(o) + len(kh) + kl + len(vh) + vl + len(h)
        lh = uv[n << 1] if n < half else _zz32(n, f"records[{i}].length")
        parts += (lh, b"\x00", t, o, kh, key, vh, value, h)
        expected += len(lh) + n
        if ts > mx:
            mx = ts
    payload = b"".join(parts)
    if len(payload) != expected:
        # len() of a key or value did not count bytes (a memoryview of wider items).
        raise EncodeError(
            "keys and values must be byte buffers", message_name=_NAME, field="records"
        )
    return payload, mx


def _check_header_fields(
    base_offset: int,
    partition_leader_epoch: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> None:
    if (
        type(base_offset) is type(partition_leader_epoch) is type(base_sequence) is int
        and type(producer_id) is type(producer_epoch) is int
        and -(2**31) <= partition_leader_epoch < 2**31
        and -(2**31) <= base_sequence < 2**31
        and -(2**15) <= producer_epoch < 2**15
        and -(2**63) <= base_offset < 2**63
        and -(2**63) <= producer_id < 2**63
    ):
        return  # the usual case, decided without the loop below (every batch built pays it)
    for name, value, bits in (
        ("base_offset", base_offset, 64),
        ("partition_leader_epoch", partition_leader_epoch, 32),
        ("producer_id", producer_id, 64),
        ("producer_epoch", producer_epoch, 16),
        ("base_sequence", base_sequence, 32),
    ):
        if type(value) is not int or not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            raise EncodeError(f"{value!r} is not an int{bits}", message_name=_NAME, field=name)


def assemble_batch(
    payload: bytes,
    count: int,
    *,
    base_offset: int,
    base_timestamp: int,
    max_timestamp: int,
    compression: Compression | int,
    compression_level: int | None,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    attributes: int,
    partition_leader_epoch: int,
    last_offset_delta: int | None = None,
) -> bytes:
    _check_header_fields(
        base_offset, partition_leader_epoch, producer_id, producer_epoch, base_sequence
    )
    codec = int(compression)
    if codec:
        payload = compress(codec, payload, level=compression_level)
    try:
        tail = _TAIL.pack(
            attributes | codec,
            count - 1 if last_offset_delta is None else last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    except struct.error as exc:
        raise EncodeError(f"header field out of range: {exc}", message_name=_NAME) from None
    batch_length = MIN_BATCH_LENGTH + len(payload)
    if batch_length > _INT32_MAX:
        raise EncodeError(f"batch of {batch_length} bytes is too large", message_name=_NAME)
    crc = crc32c(payload, crc32c(tail))
    head = _HEAD.pack(base_offset, batch_length, partition_leader_epoch, 2, crc)
    return b"".join((head, tail, payload))


def _attributes(is_transactional: bool, is_control: bool, timestamp_type: int) -> int:
    if timestamp_type not in (0, 1):
        raise EncodeError(f"timestamp_type {timestamp_type!r} is not 0 or 1", message_name=_NAME)
    return (
        (_TRANSACTIONAL_BIT if is_transactional else 0)
        | (_CONTROL_BIT if is_control else 0)
        | (_TIMESTAMP_TYPE_BIT if timestamp_type else 0)
    )


def encode_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    compression: Compression | int = Compression.NONE,
    compression_level: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: int = 0,
    base_timestamp: int | None = None,
) -> bytes:
    """Encode one magic 2 batch.

    Args:
        records: ``(timestamp, key, value, headers)`` tuples; keys and values are
            bytes or None, headers a sequence of ``(str, bytes | None)``. Offset
            deltas are 0, 1, 2... in order.
        base_offset: the first record's offset (producers send 0).
        compression: the codec for the records payload.
        compression_level: codec level; None for Java's default.
        producer_id: the idempotent producer's id (-1: none).
        producer_epoch: its epoch (-1: none).
        base_sequence: the first record's sequence number (-1: none).
        is_transactional: the batch's transactional attribute bit.
        is_control: the batch's control attribute bit.
        partition_leader_epoch: -1 from producers; set by the leader.
        timestamp_type: 0 create time, 1 log-append time.
        base_timestamp: defaults to the first record's timestamp; record
            timestamps are stored relative to it.

    Returns:
        The batch.

    Raises:
        EncodeError: no records, or a value the format cannot carry.
    """
    if not records:
        raise EncodeError("a batch needs at least one record", message_name=_NAME)
    attributes = _attributes(is_transactional, is_control, timestamp_type)
    try:
        base_ts = records[0][0] if base_timestamp is None else base_timestamp
        sp = _accel.speedups
        # The C encoder returns None for whatever it leaves to Python (errors included).
        if sp is not None and compression == Compression.NONE:
            # Uncompressed: the whole batch in one allocation, the records not
            # copied again behind the header.
            whole = sp.encode_batch(
                records,
                base_ts,
                base_offset,
                partition_leader_epoch,
                attributes,
                producer_id,
                producer_epoch,
                base_sequence,
                crc32c_function,
            )
            if whole is not None:
                return whole[0]  # type: ignore[no-any-return]
        fast = None if sp is None else sp.encode_records(records, base_ts)
        payload, max_ts = _encode_all(records, base_ts) if fast is None else fast
    except (TypeError, ValueError) as exc:
        if isinstance(exc, CodecError):
            raise
        raise _bad_input(records, exc) from None
    return assemble_batch(
        payload,
        len(records),
        base_offset=base_offset,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        compression=compression,
        compression_level=compression_level,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        attributes=attributes,
        partition_leader_epoch=partition_leader_epoch,
    )


def rebuild_batch(header: RecordBatchHeader, records: Sequence[Record]) -> bytes:
    """A batch holding some of another batch's records (what log compaction writes).

    Everything in the header is kept except what the retained records change:
    the base offset, the last offset delta, the producer fields, the attributes
    (codec included: the records are compressed again) and the base timestamp
    stay; each record keeps its own offset and timestamp; ``records_count`` and
    the CRC are recomputed, and so is ``max_timestamp`` under create time (it
    stays under log-append time, and when no record is left). Keeping the offset
    range and the sequence range is what lets a reader, and a broker rebuilding
    its producer state, treat the batch as the one originally written. With no
    records the result is an empty, uncompressed batch: a header that keeps the
    range.

    Args:
        header: the original batch's header.
        records: records decoded from it (:func:`decode_batch`), in offset order.

    Returns:
        The batch.

    Raises:
        EncodeError: a record lies outside the batch's offset range or out of order.
    """
    base = header.base_offset
    base_ts = header.base_timestamp
    last = header.last_offset
    parts: list[bytes] = []
    max_ts = header.max_timestamp
    log_append = bool(header.attributes & _TIMESTAMP_TYPE_BIT)
    if records and not log_append:
        max_ts = max(record.timestamp for record in records)
    previous = base - 1
    for i, record in enumerate(records):
        if not previous < record.offset <= last:
            raise EncodeError(
                f"offset {record.offset} is not after {previous} within [{base}, {last}]",
                message_name=_NAME,
                field=f"records[{i}].offset",
            )
        previous = record.offset
        parts.append(
            _encode_record(
                record.offset - base,
                record.timestamp - base_ts,
                record.key,
                record.value,
                record.headers,
            )
        )
    return assemble_batch(
        b"".join(parts),
        len(records),
        base_offset=base,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        compression=header.attributes & _CODEC_MASK if records else 0,
        compression_level=None,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        attributes=header.attributes & ~_CODEC_MASK,
        partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta,
    )


def _bad_input(records: Sequence[Any], exc: Exception) -> EncodeError:
    """Find the record (and field) behind a TypeError from the fast path."""
    for i, item in enumerate(records):
        where = f"records[{i}]"
        if not isinstance(item, tuple | list) or len(item) != 4:
            return EncodeError(
                "expected a (timestamp, key, value, headers) tuple", message_name=_NAME, field=where
            )
        ts, key, value, headers = item
        if type(ts) is not int:
            return EncodeError(
                f"{ts!r} is not an int", message_name=_NAME, field=f"{where}.timestamp"
            )
        for name, v in (("key", key), ("value", value)):
            if v is not None and not isinstance(v, bytes | bytearray | memoryview):
                return EncodeError(
                    f"{type(v).__name__} is not bytes", message_name=_NAME, field=f"{where}.{name}"
                )
        try:
            _headers_bytes(headers)
        except (TypeError, ValueError) as err:
            return EncodeError(str(err), message_name=_NAME, field=f"{where}.headers")
    return EncodeError(str(exc), message_name=_NAME)


class RecordBatchBuilder:
    """Accumulates records for one magic 2 batch, as a producer's accumulator does.

    Each :meth:`append` encodes its record at once, so :attr:`estimated_size` is
    exact for an uncompressed batch and an upper bound for a compressed one,
    and :meth:`build` only compresses and writes the header.

    Args:
        max_bytes: :meth:`append` refuses a record that would take the batch
            past this size, except the first record, which is always accepted.
        compression, compression_level: the records payload's codec and level.
        producer_id, producer_epoch, base_sequence, is_transactional: defaults
            for :meth:`build`, which may override them when the batch is drained.
    """

    __slots__ = (
        "_base_ts",
        "_compression",
        "_count",
        "_is_transactional",
        "_level",
        "_max_bytes",
        "_max_ts",
        "_parts",
        "_producer_epoch",
        "_producer_id",
        "_sequence",
        "_size",
    )

    def __init__(
        self,
        *,
        max_bytes: int = 16384,
        compression: Compression | int = Compression.NONE,
        compression_level: int | None = None,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
    ) -> None:
        if int(compression) not in range(5):
            raise EncodeError(f"unknown compression codec {compression!r}", message_name=_NAME)
        self._max_bytes = max_bytes
        self._compression = Compression(compression)
        self._level = compression_level
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._sequence = base_sequence
        self._is_transactional = is_transactional
        self._parts: list[bytes] = []
        self._size = BATCH_HEADER_SIZE
        self._count = 0
        self._base_ts = 0
        self._max_ts = 0

    @property
    def record_count(self) -> int:
        """Records appended so far."""
        return self._count

    @property
    def estimated_size(self) -> int:
        """The batch's size if built now without compression (an upper bound with it)."""
        return self._size

    def append(
        self,
        timestamp: int,
        key: BytesLike | None,
        value: BytesLike | None,
        headers: Sequence[tuple[str, BytesLike | None]] = (),
    ) -> int | None:
        """Add a record.

        Args:
            timestamp: milliseconds since the epoch (the codec reads no clock).
            key, value: bytes or None.
            headers: ``(str, bytes | None)`` pairs.

        Returns:
            The record's offset delta, or None when the batch is full (nothing was
            added).

        Raises:
            EncodeError: a value the format cannot carry.
        """
        count = self._count
        if count == 0:
            if type(timestamp) is not int:
                raise EncodeError(
                    f"{timestamp!r} is not an int", message_name=_NAME, field="timestamp"
                )
            self._base_ts = self._max_ts = timestamp
        try:
            sp = _accel.speedups
            ts_delta = timestamp - self._base_ts
            data = None if sp is None else sp.encode_record(count, ts_delta, key, value, headers)
            if data is None:
                data = _encode_record(count, ts_delta, key, value, headers)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, CodecError):
                raise
            raise _bad_input([(timestamp, key, value, headers)], exc) from None
        if count and self._size + len(data) > self._max_bytes:
            return None
        self._parts.append(data)
        self._size += len(data)
        self._count = count + 1
        if timestamp > self._max_ts:
            self._max_ts = timestamp
        return count

    def build(
        self,
        *,
        base_offset: int = 0,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        base_sequence: int | None = None,
        is_transactional: bool | None = None,
        partition_leader_epoch: int = -1,
    ) -> bytes:
        """Encode the batch; the builder stays usable (e.g. to rebuild on retry).

        Producer fields left as None take the builder's defaults.

        Raises:
            EncodeError: no records appended, or a header field out of range.
        """
        if not self._count:
            raise EncodeError("a batch needs at least one record", message_name=_NAME)
        transactional = self._is_transactional if is_transactional is None else is_transactional
        return assemble_batch(
            b"".join(self._parts),
            self._count,
            base_offset=base_offset,
            base_timestamp=self._base_ts,
            max_timestamp=self._max_ts,
            compression=self._compression,
            compression_level=self._level,
            producer_id=self._producer_id if producer_id is None else producer_id,
            producer_epoch=self._producer_epoch if producer_epoch is None else producer_epoch,
            base_sequence=self._sequence if base_sequence is None else base_sequence,
            attributes=_attributes(transactional, False, 0),
            partition_leader_epoch=partition_leader_epoch,
        )
