"""The two checksums of Kafka's record formats.

* Record batches (magic 2) carry a CRC-32C (Castagnoli) of everything from the
  ``attributes`` field to the end of the batch. It is computed by the native
  ``crc32c`` package, which uses the CPU's CRC instructions where present: a
  batch is checksummed once on the way in and once on the way out, so this is
  on the hot path of every produce and fetch.
* Legacy messages (magic 0 and 1) carry a plain CRC-32 (the zlib polynomial) of
  everything from the ``magic`` byte to the end of the message.

Both functions return the checksum as an unsigned 32-bit integer, the way the
record formats store it.
"""

from __future__ import annotations

import zlib

import crc32c as _crc32c

__all__ = ["BytesLike", "crc32", "crc32c", "crc32c_function"]

BytesLike = bytes | bytearray | memoryview

#: The C implementation itself, ``(data, value) -> int``: for C loops that call it
#: back (no Python frame per call), where :func:`crc32c` would add one.
crc32c_function = _crc32c.crc32c


def crc32c(data: BytesLike, value: int = 0) -> int:
    """CRC-32C of ``data``.

    Args:
        data: the bytes to checksum (any contiguous buffer; not copied).
        value: a previous result, to continue a checksum over several pieces.

    Returns:
        The checksum, 0 <= crc < 2**32.
    """
    return crc32c_function(data, value)


def crc32(data: BytesLike, value: int = 0) -> int:
    """CRC-32 (zlib polynomial) of ``data``, as legacy messages use.

    Args:
        data: the bytes to checksum (any contiguous buffer; not copied).
        value: a previous result, to continue a checksum over several pieces.

    Returns:
        The checksum, 0 <= crc < 2**32.
    """
    return zlib.crc32(data, value)
