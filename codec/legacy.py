"""Legacy message sets: magic 0 (Kafka < 0.10) and magic 1 (0.10 to 0.11).

A message set is entries laid end to end, each
``[int64 offset][int32 message_size][message]``, where the message is::

    crc uint32 | magic int8 | attributes int8 | (v1) timestamp int64 |
    key: int32 length + bytes (-1 = null) | value: int32 length + bytes (-1 = null)

Rules and invariants:

* ``message_size`` counts the message (crc included): at least 14 bytes in v0,
  22 in v1. The CRC-32 (zlib polynomial) covers ``magic`` to the end of the
  message; the offset and size are outside it.
* attributes: bits 0-2 compression codec (gzip, snappy or lz4; zstd needs magic
  2), bit 3 (v1) timestamp type. Magic 0 has no timestamp: records read from it
  carry timestamp -1.
* A compressed message is a *wrapper*: its value is a compressed message set
  of uncompressed messages of the same magic (one level only). The wrapper's
  offset is the absolute offset of its last inner message. Inner offsets are
  absolute in v0 and relative (0, 1, 2...) in v1, where inner absolute offset =
  wrapper offset - last inner relative offset + inner relative offset.
* Under log-append time (v1), inner messages take the wrapper's timestamp; the
  wrapper of a create-time set carries the largest inner timestamp.
* Magic 0 lz4 payloads carry the pre-0.10 frame checksum (KAFKA-3160), which
  :mod:`trafka.codec.compression` writes and accepts when given ``magic=0``.

Records come out as :class:`trafka.codec.records.Record`, the same type the
magic 2 decoder yields, so consumers never need to know the format. Errors are
:class:`~trafka.codec.errors.DecodeError` located as ``Message`` fields.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

from construct import If, Struct, this

from ._batch_format import LOG_OVERHEAD, BytesLike, Record, RecordInput, TimestampType
from ._batch_schema import LengthPrefixed, Magic, Ref
from .compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, compress, decompress
from .crc import crc32
from .errors import CodecError, DecodeError, EncodeError
from .primitives import Int8, Int32, Int64, NullableBytes, UInt32

__all__ = [
    "LegacyMessageHeader",
    "MessageSetEntry",
    "MessageV0",
    "MessageV1",
    "assign_legacy_offsets",
    "decode_legacy_entry",
    "encode_message_set",
    "read_message_header",
]

_NAME = "Message"
_HEADER_V0 = struct.Struct(">qiIbb")
_HEADER_V1 = struct.Struct(">qiIbbq")
_ENTRY = struct.Struct(">qiI")  # offset, message_size, crc
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MIN_SIZE = (14, 22)  # message_size minimum per magic
_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_NULL = b"\xff\xff\xff\xff"
_new: Any = tuple.__new__


class LegacyMessageHeader(NamedTuple):
    """The fixed fields of a legacy message-set entry (magic 0 or 1).

    ``timestamp`` is -1 for magic 0. For a compressed wrapper ``offset`` is the
    offset of its last inner message.
    """

    offset: int
    message_size: int
    crc: int
    magic: int
    attributes: int
    timestamp: int

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & _CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        return TimestampType((self.attributes >> 3) & 1)

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def size(self) -> int:
        """The entry's size in bytes, offset and size fields included."""
        return LOG_OVERHEAD + self.message_size


def read_message_header(buf: BytesLike, pos: int = 0) -> LegacyMessageHeader:
    """Decode the fixed fields of the legacy entry at ``buf[pos:]``.

    Raises:
        DecodeError: truncated header, magic other than 0/1, ``message_size`` below
            the minimum, or a codec other than none/gzip/snappy/lz4.
    """
    left = len(buf) - pos
    if pos < 0 or left < 17:
        raise DecodeError(
            f"truncated: {max(left, 0)} bytes cannot hold a message", message_name=_NAME
        )
    magic = buf[pos + 16]
    if magic not in (0, 1):
        raise DecodeError(f"magic {magic} is not 0 or 1", message_name=_NAME, field="magic")
    st = _HEADER_V1 if magic else _HEADER_V0
    if left < st.size:
        raise DecodeError(
            f"truncated: a v{magic} message header needs {st.size} bytes, {left} left",
            message_name=_NAME,
        )
    fields = st.unpack_from(buf, pos)
    if fields[1] < _MIN_SIZE[magic]:
        raise DecodeError(
            f"message_size {fields[1]} is below the minimum of {_MIN_SIZE[magic]}",
            message_name=_NAME,
            field="message_size",
        )
    if fields[4] & _CODEC_MASK > 3:
        raise DecodeError(
            f"compression codec {fields[4] & _CODEC_MASK} is not valid for magic {magic}",
            message_name=_NAME,
            field="attributes",
        )
    header: LegacyMessageHeader = _new(LegacyMessageHeader, fields if magic else (*fields, -1))
    return header


class _Message(NamedTuple):
    header: LegacyMessageHeader
    key: bytes | None
    value: bytes | None


def _read_bytes(data: bytes, pos: int, end: int, field: str) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise DecodeError("truncated length", message_name=_NAME, field=field)
    n = _I32.unpack_from(data, pos)[0]
    pos += 4
    if n < 0:
        if n != -1:
            raise DecodeError(f"invalid length {n}", message_name=_NAME, field=field)
        return None, pos
    if n > end - pos:
        raise DecodeError(
            f"length {n} exceeds the {end - pos} bytes left", message_name=_NAME, field=field
        )
    return data[pos : pos + n], pos + n


def _read_message(data: bytes, pos: int, verify: bool) -> tuple[_Message, int]:
    """One complete entry at ``data[pos:]``; returns it and the position after it."""
    header = read_message_header(data, pos)
    end = pos + header.size
    if end > len(data):
        raise DecodeError(
            f"truncated: the message needs {header.size} bytes, {len(data) - pos} left",
            message_name=_NAME,
        )
    if verify:
        computed = crc32(memoryview(data)[pos + 16 : end])
        if computed != header.crc:
            raise DecodeError(
                f"CRC mismatch: stored {header.crc:#010x}, computed {computed:#010x}",
                message_name=_NAME,
                field="crc",
            )
    at = pos + (_HEADER_V1.size if header.magic else _HEADER_V0.size)
    key, at = _read_bytes(data, at, end, "key")
    value, at = _read_bytes(data, at, end, "value")
    if at != end:
        raise DecodeError(
            f"{end - at} bytes left after the value", message_name=_NAME, field="message_size"
        )
    return _Message(header, key, value), end


def _inner_messages(
    message: _Message, verify: bool, max_size: int
) -> tuple[bytes, list[tuple[_Message, int, int]]]:
    """Decompress a wrapper; returns the inner set and each inner message with its span."""
    header = message.header
    if message.value is None:
        raise DecodeError("compressed message without a value", message_name=_NAME, field="value")
    try:
        inner = decompress(
            header.attributes & _CODEC_MASK, message.value, max_size=max_size, magic=header.magic
        )
    except DecodeError as exc:
        raise DecodeError(exc.detail, message_name=_NAME, field="value") from None
    out: list[tuple[_Message, int, int]] = []
    pos = 0
    try:
        while pos < len(inner):
            item, end = _read_message(inner, pos, verify)
            if item.header.magic != header.magic:
                raise DecodeError(
                    f"inner magic {item.header.magic} differs from the wrapper's {header.magic}",
                    field="magic",
                )
            if item.header.attributes & _CODEC_MASK:
                raise DecodeError("nested compression", field="attributes")
            out.append((item, pos, end))
            pos = end
    except CodecError as exc:
        field = f"value.messages[{len(out)}]" + (f".{exc.field}" if exc.field else "")
        raise DecodeError(exc.detail, message_name=_NAME, field=field) from None
    if not out:
        raise DecodeError("compressed message holds no messages", message_name=_NAME, field="value")
    return inner, out


def decode_legacy_entry(
    entry: BytesLike,
    *,
    verify: bool = True,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[Record]:
    """The records of one legacy entry: one record, or a wrapper's inner records.

    Args:
        entry: the entry (bytes past its declared size are ignored).
        verify: check the CRCs (the wrapper's and every inner message's).
        max_size: the largest decompressed payload accepted.

    Raises:
        DecodeError: anything malformed (including nested compression, or inner
            messages of another magic).
    """
    data = entry if type(entry) is bytes else bytes(entry)
    message, _ = _read_message(data, 0, verify)
    header = message.header
    if not header.attributes & _CODEC_MASK:
        return [Record(header.offset, header.timestamp, message.key, message.value, ())]
    _, inner = _inner_messages(message, verify, max_size)
    shift = 0
    if header.magic:
        shift = header.offset - inner[-1][0].header.offset
    log_append = header.magic == 1 and header.attributes & _TIMESTAMP_TYPE_BIT
    return [
        Record(
            m.header.offset + shift,
            header.timestamp if log_append else m.header.timestamp,
            m.key,
            m.value,
            (),
        )
        for m, _, _ in inner
    ]


# -- encoding ---------------------------------------------------------------------------


def _encode_message(
    offset: int, magic: int, attributes: int, timestamp: int, key: Any, value: Any
) -> bytes:
    body = b"".join(
        (
            bytes((magic, attributes & 0xFF)),
            _I64.pack(timestamp) if magic else b"",
            _NULL if key is None else _I32.pack(len(key)),
            b"" if key is None else bytes(key),
            _NULL if value is None else _I32.pack(len(value)),
            b"" if value is None else bytes(value),
        )
    )
    return _ENTRY.pack(offset, 4 + len(body), crc32(body)) + body


def encode_message_set(
    messages: Sequence[RecordInput],
    *,
    magic: int,
    compression: Compression | int = Compression.NONE,
    compression_level: int | None = None,
    base_offset: int = 0,
    timestamp_type: int = 0,
) -> bytes:
    """Encode a legacy message set.

    Args:
        messages: ``(timestamp, key, value, headers)`` tuples, headers empty (the
            legacy formats have none). Magic 0 drops the timestamps.
        magic: 0 or 1.
        compression: none, gzip, snappy or lz4; anything else writes one wrapper
            message holding the set.
        compression_level: codec level; None for Java's default.
        base_offset: the first message's offset.
        timestamp_type: (magic 1) 0 create time, 1 log-append time.

    Returns:
        The message set.

    Raises:
        EncodeError: a value the format cannot carry, headers, zstd, or no messages.
    """
    if magic not in (0, 1):
        raise EncodeError(f"magic {magic!r} is not 0 or 1", message_name=_NAME)
    codec = int(compression)
    if codec not in (0, 1, 2, 3):
        raise EncodeError(f"compression {compression!r} needs magic 2", message_name=_NAME)
    if not messages:
        raise EncodeError("a message set needs at least one message", message_name=_NAME)
    if timestamp_type not in (0, 1):
        raise EncodeError(f"timestamp_type {timestamp_type!r} is not 0 or 1", message_name=_NAME)
    ts_bit = _TIMESTAMP_TYPE_BIT if magic and timestamp_type else 0
    inner_base = base_offset if codec == 0 or magic == 0 else 0
    parts = []
    max_ts = -1
    for i, item in enumerate(messages):
        where = f"messages[{i}]"
        try:
            timestamp, key, value, headers = item
        except (TypeError, ValueError):
            raise EncodeError(
                "expected a (timestamp, key, value, headers) tuple", message_name=_NAME, field=where
            ) from None
        if headers:
            raise EncodeError(
                "magic 0 and 1 have no headers", message_name=_NAME, field=f"{where}.headers"
            )
        for name, v in (("key", key), ("value", value)):
            if v is not None and not isinstance(v, bytes | bytearray | memoryview):
                raise EncodeError(
                    f"{type(v).__name__} is not bytes", message_name=_NAME, field=f"{where}.{name}"
                )
        if not magic:
            timestamp = -1
        elif type(timestamp) is not int:
            raise EncodeError(
                f"{timestamp!r} is not an int", message_name=_NAME, field=f"{where}.timestamp"
            )
        max_ts = max(max_ts, timestamp)
        try:
            parts.append(
                _encode_message(
                    inner_base + i, magic, 0 if codec else ts_bit, timestamp, key, value
                )
            )
        except struct.error as exc:
            raise EncodeError(str(exc), message_name=_NAME, field=where) from None
    if not codec:
        return b"".join(parts)
    payload = compress(codec, b"".join(parts), level=compression_level, magic=magic)
    return _encode_message(
        base_offset + len(messages) - 1, magic, codec | ts_bit, max_ts, None, payload
    )


def assign_legacy_offsets(
    buf: BytesLike, base_offset: int, *, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
) -> tuple[bytes, int]:
    """Give the entries of a complete legacy message set their offsets.

    An uncompressed message takes the next offset. A v1 wrapper whose inner
    relative offsets are 0..n-1 only has its own offset rewritten (to its last
    inner offset; the CRC does not cover it). Any other wrapper (v0, whose inner
    offsets are absolute, or v1 with gaps) is decompressed, renumbered and
    recompressed with the same codec, as the broker does; inner messages are
    otherwise kept byte for byte, since their CRCs do not cover their offsets.

    Returns:
        ``(new_set, next_offset)``.

    Raises:
        DecodeError: malformed or incomplete set.
    """
    data = bytes(buf)
    out = []
    pos = 0
    offset = base_offset
    while pos < len(data):
        message, end = _read_message(data, pos, False)
        header = message.header
        codec = header.attributes & _CODEC_MASK
        if not codec:
            out.append(_pack_offset(offset, data[pos + 8 : end]))
            offset += 1
            pos = end
            continue
        inner, items = _inner_messages(message, False, max_size)
        last = offset + len(items) - 1
        in_order = all(m.header.offset == i for i, (m, _, _) in enumerate(items))
        if header.magic == 1 and in_order:
            out.append(_pack_offset(last, data[pos + 8 : end]))
        else:
            first = offset if header.magic == 0 else 0
            renumbered = b"".join(
                _pack_offset(first + i, inner[start + 8 : stop])
                for i, (_, start, stop) in enumerate(items)
            )
            payload = compress(codec, renumbered, magic=header.magic)
            out.append(
                _encode_message(
                    last, header.magic, header.attributes, header.timestamp, message.key, payload
                )
            )
        offset = last + 1
        pos = end
    return b"".join(out), offset


def _pack_offset(offset: int, rest: bytes) -> bytes:
    try:
        return _I64.pack(offset) + rest
    except struct.error:
        raise EncodeError(f"offset {offset} is not an int64", message_name=_NAME) from None


# -- declarative definitions ------------------------------------------------------------
# The same formats as construct structures, against which the hand-written code
# above is checked byte for byte. ``crc`` is a plain field: building needs it.

MessageV0 = Struct(
    "crc" / UInt32,
    "magic" / Magic(0),
    "attributes" / Int8,
    "key" / NullableBytes,
    "value" / NullableBytes,
)

MessageV1 = Struct(
    "crc" / UInt32,
    "magic" / Magic(1),
    "attributes" / Int8,
    "timestamp" / Int64,
    "key" / NullableBytes,
    "value" / NullableBytes,
)

# One entry of a message set of either magic, the timestamp present only in v1.
MessageSetEntry = Struct(
    "offset" / Int64,
    "message"
    / LengthPrefixed(
        Int32,
        Struct(
            "crc" / UInt32,
            "magic" / Ref(Int8),
            "attributes" / Int8,
            "timestamp" / If(this.magic == 1, Int64),
            "key" / NullableBytes,
            "value" / NullableBytes,
        ),
    ),
)
