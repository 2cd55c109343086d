"""The Schema Registry wire formats, pure (no registry, no format library).

Rules:

* Payload-prefix framing (the classic one): byte 0 is the magic byte ``0``,
  bytes 1-4 the schema id, big-endian unsigned; the encoded payload follows.
* Protobuf puts the message indexes between the id and the payload: the path
  from the file's top-level messages to the message written (``[1, 0]`` is the
  first nested message of the second top-level one), as a zig-zag varint count
  followed by one zig-zag varint per index; the first top-level message,
  ``[0]``, is written as the single byte ``0`` (a count of zero).
* Header framing (the newer one): the payload is the bare encoding and the
  schema travels in a record header, ``__key_schema_id`` for a key,
  ``__value_schema_id`` for a value, whose value is magic byte ``1`` and the
  schema's 16-byte GUID (or magic ``0`` and a 4-byte id), then for Protobuf
  the message indexes. A reader looks at the header first and falls back to
  the payload prefix.

Every reader checks lengths: a truncated frame is a :class:`FramingError`
saying what was missing, never an IndexError.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import SerializationError

__all__ = [
    "KEY_SCHEMA_ID_HEADER",
    "MAGIC_GUID",
    "MAGIC_ID",
    "VALUE_SCHEMA_ID_HEADER",
    "FramingError",
    "SchemaRef",
    "decode_indexes",
    "encode_indexes",
    "header_name",
    "id_frame",
    "guid_frame",
    "read_frame",
]

MAGIC_ID = 0
MAGIC_GUID = 1
KEY_SCHEMA_ID_HEADER = "__key_schema_id"
VALUE_SCHEMA_ID_HEADER = "__value_schema_id"
_ID = struct.Struct(">bI")
# A message index path longer than this is corrupt input, not a real schema.
_MAX_INDEXES = 10_000


class FramingError(SerializationError):
    """The bytes are not a Schema Registry frame (what is wrong is the message)."""


@dataclass(frozen=True, slots=True)
class SchemaRef:
    """The schema a frame names: its id or its GUID, and Protobuf's message indexes."""

    schema_id: int | None = None
    guid: uuid.UUID | None = None
    indexes: tuple[int, ...] | None = None

    @property
    def schema_key(self) -> int | uuid.UUID | None:
        """What names the schema: its GUID when the frame has one, else its id."""
        return self.schema_id if self.guid is None else self.guid


def header_name(is_key: bool) -> str:
    """The record header carrying a key's or a value's schema (header framing)."""
    return KEY_SCHEMA_ID_HEADER if is_key else VALUE_SCHEMA_ID_HEADER


def _zigzag(buf: bytearray, value: int) -> None:
    n = (value << 1) ^ (value >> 63)
    while n > 0x7F:
        buf.append((n & 0x7F) | 0x80)
        n >>= 7
    buf.append(n)


def encode_indexes(indexes: Sequence[int]) -> bytes:
    """Protobuf's message indexes as Confluent frames them (see the module doc)."""
    if not indexes:
        raise FramingError("a Protobuf message index path cannot be empty")
    if len(indexes) == 1 and indexes[0] == 0:
        return b"\x00"
    buf = bytearray()
    _zigzag(buf, len(indexes))
    for i in indexes:
        _zigzag(buf, i)
    return bytes(buf)


def _read_zigzag(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if pos >= len(data):
            raise FramingError("the Protobuf message indexes are truncated")
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 63:
            raise FramingError("a Protobuf message index is not a valid varint")


def decode_indexes(data: bytes | memoryview, pos: int) -> tuple[tuple[int, ...], int]:
    """The message indexes at ``data[pos:]`` and the position after them."""
    count, pos = _read_zigzag(data, pos)
    if count == 0:
        return (0,), pos
    if count < 0 or count > _MAX_INDEXES:
        raise FramingError(f"the Protobuf message index count {count} is not valid")
    out = []
    for _ in range(count):
        i, pos = _read_zigzag(data, pos)
        if i < 0:
            raise FramingError(f"the Protobuf message index {i} is negative")
        out.append(i)
    return tuple(out), pos


def id_frame(schema_id: int, indexes: Sequence[int] | None = None) -> bytes:
    """Magic byte 0 and the id (and the indexes): the payload prefix, or a header's value."""
    if not 0 <= schema_id <= 0xFFFFFFFF:
        raise FramingError(f"schema id {schema_id} does not fit 4 bytes")
    head = _ID.pack(MAGIC_ID, schema_id)
    return head if indexes is None else head + encode_indexes(indexes)


def guid_frame(guid: uuid.UUID, indexes: Sequence[int] | None = None) -> bytes:
    """Magic byte 1 and the GUID (and the indexes): a schema id header's value."""
    head = bytes((MAGIC_GUID,)) + guid.bytes
    return head if indexes is None else head + encode_indexes(indexes)


def read_frame(data: bytes, with_indexes: bool) -> tuple[SchemaRef, int]:
    """The schema a frame names and where its payload starts.

    Args:
        data: a payload with the prefix, or a schema id header's value.
        with_indexes: Protobuf: message indexes follow the id.

    Raises:
        FramingError: empty or truncated input, or a magic byte neither 0 nor 1.
    """
    if not data:
        raise FramingError("empty: no magic byte")
    magic = data[0]
    if magic == MAGIC_ID:
        if len(data) < 5:
            raise FramingError(f"truncated: {len(data)} bytes, the schema id needs 5")
        schema_id: int | None = _ID.unpack_from(data)[1]
        guid, pos = None, 5
    elif magic == MAGIC_GUID:
        if len(data) < 17:
            raise FramingError(f"truncated: {len(data)} bytes, the schema GUID needs 17")
        schema_id, guid, pos = None, uuid.UUID(bytes=bytes(data[1:17])), 17
    else:
        raise FramingError(f"unknown magic byte {magic} (expected 0, or 1 in a header)")
    indexes = None
    if with_indexes:
        indexes, pos = decode_indexes(data, pos)
    return SchemaRef(schema_id, guid, indexes), pos
