"""Reading a message's bytes without decoding it: the few primitives the codec's
byte walks share (:mod:`.produce_response`, and the proxy's rewrites of names on
a request's bytes). I/O-free.

Each reads what Kafka's encoding writes in its shortest form and raises
:class:`WalkRefused` for anything else (a null array, a varint longer than it
needs): the caller then takes the decoded path, whose codec judges the message
and raises its precise error. A read past the end raises ``IndexError`` or
``struct.error``, which callers catch with it.
"""

from __future__ import annotations

import struct

from ._wire import uvarint_bytes

__all__ = ["WalkRefused", "count", "length", "skip_tags", "uvarint", "uvarint_bytes"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class WalkRefused(Exception):
    """The bytes are not what the walk reads (see the module doc)."""


def uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint in its shortest form, and where it ends."""
    value = 0
    for shift in range(0, 35, 7):
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if b == 0 and shift:
                raise WalkRefused
            return value, pos
    raise WalkRefused


def count(data: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's length (a null array refused) and where its items start."""
    if flexible:
        n, pos = uvarint(data, pos)
        if n == 0:
            raise WalkRefused  # a null array
        return n - 1, pos
    (n,) = _I32.unpack_from(data, pos)
    if n < 0:
        raise WalkRefused
    return n, pos + 4


def length(data: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """A string's length (-1: null) and where its bytes start."""
    if flexible:
        n, pos = uvarint(data, pos)
        return n - 1, pos
    (n,) = _I16.unpack_from(data, pos)
    return n, pos + 2


def skip_tags(data: bytes, pos: int) -> int:
    """Past a tagged-fields section."""
    n, pos = uvarint(data, pos)
    for _ in range(n):
        _, pos = uvarint(data, pos)
        size, pos = uvarint(data, pos)
        pos += size
    if pos > len(data):
        raise WalkRefused
    return pos
