"""FetchResponse frames read on bytes, for code that must know whether an
answer names brokers without decoding (and copying) its records: the proxy,
which rewrites the brokers KIP-951 names in ``node_endpoints``.

Rules:

* From version 16 a FetchResponse may end with the body's tagged fields,
  ``node_endpoints`` (tag 0) among them; they are the last bytes of the body.
  :func:`fetch_body_tags_at` walks the answer's structure, skipping each
  partition's records by their length, and returns where those tagged fields
  begin. A partition's own tagged fields (``current_leader``: an id and an
  epoch, no address) are skipped.
* The walk checks only what it needs to find its way: lengths within the frame,
  no null where the schema allows none. Anything else (truncated, a null array,
  bytes left over after the tagged fields) gives ``None``: the caller then
  decodes the frame with the codec, which raises its precise
  :class:`~.errors.DecodeError` or reads what the walk did not expect.
* It reads flexible versions only (12+), and only the response header of
  version 1 (a correlation id and tagged fields), which Fetch has from v12.
"""

from __future__ import annotations

import struct

__all__ = ["FIRST_SCANNED_VERSION", "fetch_body_tags_at", "has_body_tags"]

# The first flexible Fetch version: compact arrays, tagged fields everywhere.
FIRST_SCANNED_VERSION = 12
_I32 = struct.Struct(">i")
# throttle_time_ms, error_code, session_id
_BODY_HEAD = 4 + 2 + 4
# partition_index, error_code, high_watermark, last_stable_offset, log_start_offset
_PARTITION_HEAD = 4 + 2 + 8 + 8 + 8
# producer_id, first_offset
_ABORTED = 8 + 8
_TOPIC_ID = 16
_PREFERRED_READ_REPLICA = 4


class _Short(Exception):
    """The frame ends (or breaks a rule) where the walk was: the codec decides."""


def _uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise _Short
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _skip(data: bytes | memoryview, pos: int, n: int) -> int:
    pos += n
    if pos > len(data):
        raise _Short
    return pos


def _skip_tags(data: bytes | memoryview, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos = _skip(data, pos, size)
    return pos


def _skip_partitions(data: bytes | memoryview, pos: int, count: int) -> int:
    """Past ``count`` partitions from ``pos``. The usual uvarints (one byte) and
    empty tagged fields are read inline; an index past the end raises
    IndexError (the caller's ``_Short``), a skip past it is caught at the end."""
    for _ in range(count):
        pos += _PARTITION_HEAD
        byte = data[pos]  # aborted transactions, nullable: 0 is null
        if byte & 0x80:
            aborted, pos = _uvarint(data, pos)
        else:
            aborted, pos = byte, pos + 1
        for _ in range(aborted - 1):
            pos = _skip_tags(data, _skip(data, pos, _ABORTED))
        pos += _PREFERRED_READ_REPLICA
        byte = data[pos]  # the records' length + 1, nullable
        if byte & 0x80:
            size, pos = _uvarint(data, pos)
        else:
            size, pos = byte, pos + 1
        if size:
            pos += size - 1
        if data[pos]:
            pos = _skip_tags(data, pos)
        else:
            pos += 1
    if pos > len(data):
        raise _Short
    return pos


def fetch_body_tags_at(frame: bytes | memoryview, version: int) -> int | None:
    """Where the body's tagged fields begin in ``frame`` (a FetchResponse of
    ``version``, response header included, size prefix not), or ``None`` when
    the walk cannot tell (see the rules): decode it then.
    """
    if version < FIRST_SCANNED_VERSION:
        return None
    try:
        pos = _skip_tags(frame, _skip(frame, 0, 4))  # correlation id, header tags
        pos = _skip(frame, pos, _BODY_HEAD)
        topics, pos = _uvarint(frame, pos)
        if not topics:
            return None  # a null array, which the schema does not allow
        for _ in range(topics - 1):
            pos = _skip(frame, pos, _TOPIC_ID) if version >= 13 else _skip_name(frame, pos)
            partitions, pos = _uvarint(frame, pos)
            if not partitions:
                return None
            pos = _skip_tags(frame, _skip_partitions(frame, pos, partitions - 1))
        if _skip_tags(frame, pos) != len(frame):
            return None
    except (_Short, IndexError):
        return None
    return pos


def _skip_name(data: bytes | memoryview, pos: int) -> int:
    size, pos = _uvarint(data, pos)
    if not size:
        raise _Short  # a null topic name: not allowed
    return _skip(data, pos, size - 1)


def has_body_tags(frame: bytes | memoryview, version: int) -> bool | None:
    """Whether the body of ``frame`` carries tagged fields (from v16,
    ``node_endpoints``), ``None`` when the walk cannot tell."""
    at = fetch_body_tags_at(frame, version)
    if at is None:
        return None
    return frame[at] != 0
