"""A Produce request's names prefixed on its bytes, for the tenants filter
(:mod:`.tenants`): I/O-free.

Decoding a Produce request into the codec's dataclasses and writing it again
costs an object per topic and partition and construct's walk of them, when
only its transactional id and topic names change. This walks the request's
bytes instead and copies what lies between the names.

Rules:

* One outcome: the request written is byte for byte what encoding the
  decoded request with its names prefixed writes
  (tests/proxy/test_proxy_tenants_produce.py checks it on random requests).
* Empty names stay empty (as :func:`~.tenants_apis.map_names` keeps them):
  the broker refuses them, as it would without the proxy.
* Versions 3 to 12 (topics by name, a transactional id); any other, or
  anything the walk does not read as the codec writes it (a null topic name,
  a varint longer than it needs, a name that is not UTF-8, a length past the
  end), gives None: the caller takes the decoded path, whose codec judges the
  request and raises its precise error.
* Bytes after the request's end are dropped, as the codec's decoding (with
  trailing bytes allowed, as brokers read librdkafka's requests) drops them.
"""

from __future__ import annotations

import struct

from trafka.codec.frame_walk import WalkRefused as _Refused
from trafka.codec.frame_walk import count as _count
from trafka.codec.frame_walk import skip_tags as _skip_tags
from trafka.codec.frame_walk import uvarint as _uvarint
from trafka.codec.frame_walk import uvarint_bytes as _uvarint_bytes

__all__ = ["FIRST", "LAST", "prefixed"]

FIRST, LAST = 3, 12  # the versions walked (a transactional id; topics by name)
_FLEXIBLE = 9
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def prefixed(frame: bytes, start: int, version: int, prefix: bytes) -> bytes | None:
    """The Produce request ``frame`` (its body at ``start``, after the header)
    with ``prefix`` before its transactional id and every topic name; None
    when the walk refuses it (see the rules)."""
    if not FIRST <= version <= LAST:
        return None
    try:
        return _walk(frame, start, version >= _FLEXIBLE, prefix)
    except (_Refused, struct.error, IndexError, UnicodeDecodeError):
        return None


def _walk(frame: bytes, pos: int, flexible: bool, prefix: bytes) -> bytes:
    out = [frame[:pos]]
    n, at = _length(frame, pos, flexible)
    if n <= 0:  # no transactional id, or an empty one (kept: the broker judges it)
        out.append(frame[pos : at + max(n, 0)])
        pos = at + max(n, 0)
    else:
        out.append(_string(prefix + _utf8(frame, at, n), flexible))
        pos = at + n
    out.append(frame[pos : pos + 6])  # acks, timeout_ms
    pos += 6
    count, at = _count(frame, pos, flexible)
    out.append(frame[pos:at])
    pos = at
    for _ in range(count):
        n, at = _length(frame, pos, flexible)
        if n < 0:
            raise _Refused  # a null name: the codec's to judge
        if n == 0:
            out.append(frame[pos:at])  # an empty name, kept: the broker judges it
        else:
            out.append(_string(prefix + _utf8(frame, at, n), flexible))
        pos = begin = at + n
        partitions, pos = _count(frame, pos, flexible)
        for _ in range(partitions):
            pos += 4  # index
            if flexible:
                size, pos = _uvarint(frame, pos)
                pos += max(size - 1, 0)
                pos = _skip_tags(frame, pos)
            else:
                (size,) = _I32.unpack_from(frame, pos)
                pos += 4 + max(size, 0)
        if flexible:
            pos = _skip_tags(frame, pos)
        out.append(frame[begin:pos])
    if flexible:
        end = _skip_tags(frame, pos)
        out.append(frame[pos:end])
        pos = end
    if pos > len(frame):
        raise _Refused
    return b"".join(out)


def _utf8(frame: bytes, at: int, n: int) -> bytes:
    name = frame[at : at + n]
    if len(name) != n:
        raise _Refused
    name.decode()  # the codec refuses what is not UTF-8
    return name


def _string(value: bytes, flexible: bool) -> bytes:
    if flexible:
        return _uvarint_bytes(len(value) + 1) + value
    if len(value) > 0x7FFF:
        raise _Refused
    return _I16.pack(len(value)) + value


def _length(frame: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """A string's length (-1: null) and where its bytes start."""
    if flexible:
        n, pos = _uvarint(frame, pos)
        return n - 1, pos
    (n,) = _I16.unpack_from(frame, pos)
    if n < -1:
        raise _Refused
    return n, pos + 2
