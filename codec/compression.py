"""Kafka's compression codecs, with the framings each one uses on the wire.

The codec id lives in the low three bits of a batch's (or legacy message's)
``attributes``. The compressed payload is framed as the Java client writes it:

* **gzip** (1): one RFC 1952 gzip member. Several members are accepted on input.
* **snappy** (2): the *xerial* stream that the Java client writes: an 8-byte magic
  ``82 'SNAPPY' 00``, two big-endian int32s (version, oldest compatible
  version; both 1), then chunks of ``[int32 big-endian length][raw snappy
  block]``, each holding at most 32 KiB of input. Input without the magic is
  read as one raw snappy block (what some non-Java clients write).
* **lz4** (3): one LZ4 frame (magic ``04 22 4D 18``). We write what Java
  writes and what Java can read: independent 64 KiB blocks, no checksums, no
  content size. We read any standard frame, including linked blocks and
  checksums; the frames Kafka's clients write are decoded a block at a time
  (several times faster than the frame decoder for a batch's few blocks).
  When the C module is built and the system has ``liblz4.so.1`` (found at run
  time; the module is built without lz4's headers), those common frames are
  read and written whole in C (``lz4_unframe``, ``lz4_frame``): the same content
  and frame layout (the same bytes when both lz4 libraries compress alike), and
  anything unusual or malformed still read, and refused, here.
  Magic 0 messages written by pre-0.10 clients carry a wrong header
  checksum (KAFKA-3160: the hash also covered the 4 magic bytes); with
  ``magic=0`` we ignore that byte on input and reproduce the old checksum on
  output, as Java does.
* **zstd** (4): zstd frames (skippable frames allowed).

Decompression is bounded: a payload that would inflate beyond ``max_size``
bytes (default :data:`DEFAULT_MAX_DECOMPRESSED_SIZE`) is rejected before its
output is allocated, so a small hostile batch cannot exhaust memory:

* snappy stores each block's decompressed length up front, and we sum them;
* lz4 and zstd frames are walked block by block (headers only) to compute an
  upper bound: the length of each stored (or run-length) block, and the
  frame's maximum block size for each compressed one. A declared content size
  above the limit is rejected too. The limit applies to the bound, so a payload
  within one block (64 KiB for the lz4 frames Java writes, 128 KiB for zstd) of
  ``max_size`` may be refused;
* gzip stores the (mod 2**32) size in its trailer; we decompress into a buffer of
  exactly that size, which the native decoder cannot overrun, and fall back to
  a streaming decoder capped at ``max_size`` for multi-member input.

Every failure, whatever the codec library raised, leaves this module as
:class:`~trafka.codec.errors.DecodeError` (or ``EncodeError`` when compressing)
naming the codec. Third-party exceptions never escape.
"""

from __future__ import annotations

import enum
import threading
import zlib
from typing import TYPE_CHECKING, Any

from . import _accel
from .errors import DecodeError, DecompressionLimitError, EncodeError

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "Compression",
    "compress",
    "decompress",
]

BytesLike = bytes | bytearray | memoryview

# Eight times the 16 MiB that a generously configured producer batch may hold:
# no realistic compression ratio of a legitimate batch gets near it, and it caps
# what one hostile batch can make us allocate. Callers that need more pass
# ``max_size`` explicitly.
DEFAULT_MAX_DECOMPRESSED_SIZE = 128 * 1024 * 1024


class Compression(enum.IntEnum):
    """Codec ids, as stored in the low 3 bits of the attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

# Java's default zstd level (gzip's, 6, is zlib's own default).
_ZSTD_DEFAULT_LEVEL = 3


class _Library:
    """cramjam (snappy, lz4, zstd), imported on its first use: a client that
    never meets those codecs does not load it (gzip is zlib's), issue #48."""

    def __getattr__(self, name: str) -> Any:
        import cramjam as library

        globals()["cramjam"] = library  # later lookups find the module itself
        return getattr(library, name)


if TYPE_CHECKING:
    import cramjam
else:
    cramjam = _Library()


def _cramjam_errors(*more: type[BaseException]) -> tuple[type[BaseException], ...]:
    """What cramjam raises on bad input, and ``more`` (an ``except`` evaluates
    it only when something was raised)."""
    return (cramjam.DecompressionError, cramjam.CompressionError, OSError, ValueError, *more)


def compress(
    codec: Compression | int,
    data: BytesLike,
    *,
    level: int | None = None,
    magic: int = 2,
    xerial: bool = True,
) -> bytes:
    """Compress ``data`` the way the Java client does for ``codec``.

    Args:
        codec: a :class:`Compression` (or its integer id).
        data: the uncompressed payload.
        level: codec-specific level; ``None`` picks Java's default (gzip 6, zstd
            3). Ignored for snappy, and for lz4, which always uses the fast
            compressor (Java's default too): the block API we write independent
            blocks with has no high-compression mode.
        magic: the record format the payload is for; ``0`` writes lz4 with the
            pre-0.10 header checksum that old brokers and clients expect.
        xerial: snappy only; ``False`` writes one raw snappy block instead of the
            xerial stream.

    Returns:
        The compressed payload (for ``NONE``, a copy of ``data``).

    Raises:
        EncodeError: unknown codec, or the codec rejected the level or data.
    """
    kind = _codec(codec, EncodeError)
    try:
        if kind == 0:
            return bytes(data)
        if kind == 1:
            return zlib.compress(data, -1 if level is None else level, wbits=31)
        if kind == 2:
            return _snappy_xerial(data) if xerial else bytes(cramjam.snappy.compress_raw(data))
        if kind == 3:
            return _lz4_frame(data, legacy_checksum=magic == 0)
        return bytes(
            cramjam.zstd.compress(data, level=_ZSTD_DEFAULT_LEVEL if level is None else level)
        )
    except _cramjam_errors(zlib.error, TypeError) as exc:
        raise EncodeError(f"{_NAMES[kind]} compression failed: {exc}") from None


def decompress(
    codec: Compression | int,
    data: BytesLike,
    *,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    magic: int = 2,
) -> bytes:
    """Decompress a payload written by any Kafka client.

    Args:
        codec: a :class:`Compression` (or its integer id, as read from the wire).
        data: the compressed payload.
        max_size: the largest decompressed size accepted.
        magic: the record format the payload came from; ``0`` accepts the
            pre-0.10 lz4 header checksum (KAFKA-3160).

    Returns:
        The decompressed bytes.

    Raises:
        DecodeError: unknown codec id, corrupt or truncated data, or output
            larger than ``max_size``. The message names the codec.
    """
    kind = _codec(codec, DecodeError)
    if kind == 0:
        if len(data) > max_size:
            raise _too_big("none", len(data), max_size)
        return bytes(data)
    if type(data) is not bytes:
        data = bytes(data)
    if kind == 1:
        return _gunzip(data, max_size)
    if kind == 2:
        return _unsnappy(data, max_size)
    if kind == 3:
        return _unlz4(data, max_size, legacy_checksum=magic == 0)
    return _unzstd(data, max_size)


def _codec(codec: Compression | int, error: type[DecodeError] | type[EncodeError]) -> int:
    if type(codec) is not Compression and (not isinstance(codec, int) or codec not in _NAMES):
        raise error(f"unknown compression codec {codec!r}")
    return int(codec)


def _too_big(name: str, size: int, max_size: int) -> DecodeError:
    return DecompressionLimitError(
        f"{name} payload may inflate to {size} bytes, over the limit of {max_size}"
    )


def _corrupt(name: str, exc: BaseException | str) -> DecodeError:
    return DecodeError(f"invalid {name} data: {exc}")


# -- gzip -------------------------------------------------------------------------


def _gunzip(data: bytes, max_size: int) -> bytes:
    if len(data) < 18:
        raise _corrupt("gzip", f"truncated: {len(data)} bytes is shorter than a gzip member")
    # The trailer's ISIZE is only a claim, but decompressing into a buffer of
    # exactly that size makes the native decoder fail rather than overrun it.
    claimed = int.from_bytes(data[-4:], "little")
    if claimed <= max_size:
        out = bytearray(claimed)
        try:
            if cramjam.gzip.decompress_into(data, out) == claimed:
                return bytes(out)
        except _cramjam_errors():
            pass
    # Several members, a lying trailer, or corrupt data: the streaming decoder
    # handles the first, enforces max_size and words the error precisely.
    return _gunzip_stream(data, max_size)


def _gunzip_stream(data: bytes, max_size: int) -> bytes:
    out = bytearray()
    rest = data
    try:
        while True:
            d = zlib.decompressobj(wbits=31)
            out += d.decompress(rest, max_size + 1 - len(out))
            if len(out) > max_size:
                raise _too_big("gzip", len(out), max_size)
            if not d.eof:
                raise _corrupt("gzip", "truncated stream")
            rest = d.unused_data
            if not rest:
                return bytes(out)
    except zlib.error as exc:
        raise _corrupt("gzip", exc) from None


# -- snappy (raw and xerial) ------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")
_XERIAL_BLOCK = 32 * 1024


def _snappy_xerial(data: BytesLike) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    raw = cramjam.snappy.compress_raw
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(len(block).to_bytes(4, "big"))
        parts.append(block)
    return b"".join(parts)


def _unsnappy(data: bytes, max_size: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _unsnappy_raw(data, max_size, 0)
    if len(data) < len(_XERIAL_HEADER):
        raise _corrupt("snappy", "truncated xerial header")
    parts = []
    total = 0
    pos = len(_XERIAL_HEADER)
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise _corrupt("snappy", f"truncated xerial chunk length at byte {pos}")
        n = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        pos += 4
        if n < 0 or n > end - pos:
            raise _corrupt("snappy", f"xerial chunk length {n} at byte {pos - 4} exceeds the data")
        block = _unsnappy_raw(data[pos : pos + n], max_size - total, total)
        total += len(block)
        parts.append(block)
        pos += n
    return b"".join(parts)


def _unsnappy_raw(block: bytes, budget: int, before: int) -> bytes:
    try:
        size = cramjam.snappy.decompress_raw_len(block)
    except _cramjam_errors() as exc:
        raise _corrupt("snappy", exc) from None
    if size > budget:
        raise _too_big("snappy", before + size, before + budget)
    try:
        out = bytes(cramjam.snappy.decompress_raw(block))
    except _cramjam_errors() as exc:
        raise _corrupt("snappy", exc) from None
    if len(out) != size:
        raise _corrupt("snappy", "block length does not match its header")
    return out


# -- lz4 frame --------------------------------------------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK = 64 * 1024
_LZ4_UNCOMPRESSED = 0x80000000
_P1, _P2, _P3, _P4, _P5 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32, which lz4 frames use for their header checksum (a few bytes only)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i in range(4):
                lane = int.from_bytes(data[pos : pos + 4], "little")
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
                pos += 4
        acc = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        acc = (seed + _P5) & _M32
    acc = (acc + n) & _M32
    while pos + 4 <= n:
        lane = int.from_bytes(data[pos : pos + 4], "little")
        acc = (_rotl((acc + lane * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        acc = (_rotl((acc + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _M32
    acc ^= acc >> 13
    acc = (acc * _P3) & _M32
    acc ^= acc >> 16
    return acc


# The checksums of 2-byte frame descriptors (no content size, no dictionary:
# every frame Kafka's clients write), computed once each: XXH32 in Python costs
# microseconds, paid for every batch decompressed. At most 65,536 entries.
_DESCRIPTOR_CHECKSUMS: dict[bytes, int] = {}


def _lz4_header_checksum(descriptor: bytes) -> int:
    if len(descriptor) == 2:
        known = _DESCRIPTOR_CHECKSUMS.get(descriptor)
        if known is None:
            known = _DESCRIPTOR_CHECKSUMS[bytes(descriptor)] = (_xxh32(descriptor) >> 8) & 0xFF
        return known
    return (_xxh32(descriptor) >> 8) & 0xFF


# Version 1, independent blocks, no checksums, no content size; 64 KiB blocks.
_LZ4_DESCRIPTOR = b"\x60\x40"
_LZ4_HEADER = _LZ4_MAGIC + _LZ4_DESCRIPTOR + bytes((_lz4_header_checksum(_LZ4_DESCRIPTOR),))
_LZ4_LEGACY_HEADER = (
    _LZ4_MAGIC + _LZ4_DESCRIPTOR + bytes((_lz4_header_checksum(_LZ4_MAGIC + _LZ4_DESCRIPTOR),))
)
_LZ4_END = b"\x00\x00\x00\x00"


def _lz4_frame(data: BytesLike, *, legacy_checksum: bool) -> bytes:
    header = _LZ4_LEGACY_HEADER if legacy_checksum else _LZ4_HEADER
    # The same frame written whole by the C module with the system's liblz4
    # (``lz4_frame``; None without it).
    frame = getattr(_accel.speedups, "lz4_frame", None)
    if frame is not None:
        out: bytes | None = frame(data, header)
        if out is not None:
            return out
    view = memoryview(data)
    parts = [header]
    block = cramjam.lz4.compress_block
    for start in range(0, len(view), _LZ4_BLOCK):
        chunk = view[start : start + _LZ4_BLOCK]
        packed = block(chunk, store_size=False)
        if len(packed) < len(chunk):
            parts.append(len(packed).to_bytes(4, "little"))
            parts.append(bytes(packed))
        else:
            parts.append((len(chunk) | _LZ4_UNCOMPRESSED).to_bytes(4, "little"))
            parts.append(bytes(chunk))
    parts.append(_LZ4_END)
    return b"".join(parts)


# Frames whose blocks can be decoded one by one (below) use a scratch buffer of
# the frame's block maximum per thread: 64 KiB for what Java and librdkafka
# write. Larger block sizes (up to 4 MiB) go to the frame decoder instead.
_SCRATCH_MAX = 256 * 1024
_scratch = threading.local()


def _unlz4(data: bytes, max_size: int, *, legacy_checksum: bool) -> bytes:
    # The common frame read whole by the C module with the system's liblz4
    # (``lz4_unframe``); None for anything else, which the code below reads.
    unframe = getattr(_accel.speedups, "lz4_unframe", None)
    if unframe is not None and not legacy_checksum:
        out: bytes | None = unframe(data, max_size)
        if out is not None:
            return out
    fixed, blocks, block_max = _walk_lz4(data, max_size, legacy_checksum)
    try:
        if blocks is not None:
            out = _unlz4_blocks(fixed, blocks, block_max)
        else:
            out = bytes(cramjam.lz4.decompress(fixed))
    except _cramjam_errors() as exc:
        raise _corrupt("lz4", exc) from None
    if len(out) > max_size:
        raise _too_big("lz4", len(out), max_size)
    return out


def _unlz4_blocks(data: bytes, blocks: list[int], block_max: int) -> bytes:
    """Decode a frame's blocks one by one, without the frame decoder.

    The frame decoder costs several times the block decoder for the small
    frames of Kafka batches (most hold one block). ``blocks`` holds, per block,
    its start and its header word; each compressed block decodes into the
    thread's scratch buffer of ``block_max`` bytes, which it may not overrun
    (the decoder fails instead, and that is a corrupt frame).
    """
    buf: bytearray | None = getattr(_scratch, "buf", None)
    if buf is None or len(buf) != block_max:
        buf = _scratch.buf = bytearray(block_max)
    view = memoryview(data)
    parts = []
    into = cramjam.lz4.decompress_block_into
    for i in range(0, len(blocks), 2):
        start, word = blocks[i], blocks[i + 1]
        if word & _LZ4_UNCOMPRESSED:
            parts.append(data[start : start + (word & ~_LZ4_UNCOMPRESSED)])
        else:
            size = into(view[start : start + word], buf)
            parts.append(bytes(memoryview(buf)[:size]))
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _walk_lz4(
    data: bytes, max_size: int, legacy_checksum: bool
) -> tuple[bytes, list[int] | None, int]:
    """Check one frame's structure and bound its output; return it ready for the decoder.

    The bound is the frame's block maximum for every compressed block plus the
    length of every stored block; a conforming decoder cannot exceed it.

    Also returned: the blocks (start and header word of each, flat) when they
    can be decoded one by one: no checksums to verify, blocks independent (or
    only one), a block maximum within ``_SCRATCH_MAX``. Otherwise None, and the
    frame decoder reads it. And the frame's block maximum.
    """
    end = len(data)
    if end < 7 or not data.startswith(_LZ4_MAGIC):
        raise _corrupt("lz4", "missing lz4 frame magic" if end >= 4 else "truncated frame")
    flg = data[4]
    bd = data[5]
    if flg >> 6 != 1:
        raise _corrupt("lz4", f"unsupported frame version {flg >> 6}")
    if flg & 0x02 or bd & 0x8F:
        raise _corrupt("lz4", "reserved bits set in the frame descriptor")
    code = (bd >> 4) & 7
    if code < 4:
        raise _corrupt("lz4", f"invalid block size code {code}")
    block_max = 1 << (2 * code + 8)
    pos = 6
    content_size = -1
    if flg & 0x08:
        if end < pos + 8:
            raise _corrupt("lz4", "truncated frame descriptor")
        content_size = int.from_bytes(data[pos : pos + 8], "little")
        pos += 8
    if flg & 0x01:
        pos += 4
    if end < pos + 1:
        raise _corrupt("lz4", "truncated frame descriptor")
    expected = _lz4_header_checksum(data[4:pos])
    if data[pos] != expected:
        if not legacy_checksum:
            raise _corrupt("lz4", "frame descriptor checksum mismatch")
        # Old clients hashed the magic too; the decoder only needs the right byte.
        data = data[:pos] + bytes((expected,)) + data[pos + 1 :]
    if content_size > max_size:
        raise _too_big("lz4", content_size, max_size)
    pos += 1
    block_checksum = 4 if flg & 0x10 else 0
    bound = 0
    blocks: list[int] | None = [] if not flg & 0x15 and block_max <= _SCRATCH_MAX else None
    while True:
        if end < pos + 4:
            raise _corrupt("lz4", f"truncated block header at byte {pos}")
        word = int.from_bytes(data[pos : pos + 4], "little")
        pos += 4
        if word == 0:
            break
        size = word & ~_LZ4_UNCOMPRESSED
        if size > block_max:
            raise _corrupt("lz4", f"block of {size} bytes exceeds the frame's {block_max}")
        bound += size if word & _LZ4_UNCOMPRESSED else block_max
        if blocks is not None:
            blocks += (pos, word)
        pos += size + block_checksum
        if pos > end:
            raise _corrupt("lz4", "truncated block")
    if flg & 0x04:
        pos += 4
    if pos > end:
        raise _corrupt("lz4", "truncated content checksum")
    if pos != end:
        raise _corrupt("lz4", f"{end - pos} trailing bytes after the frame")
    if bound > max_size:
        raise _too_big("lz4", bound, max_size)
    if blocks is not None and len(blocks) > 2 and not flg & 0x20:
        blocks = None  # linked blocks: a block may refer to the ones before it
    return data, blocks, block_max


# -- zstd -------------------------------------------------------------------------

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024
_FCS_BYTES = (0, 2, 4, 8)
_DICT_BYTES = (0, 1, 2, 4)


def _unzstd(data: bytes, max_size: int) -> bytes:
    _bound_zstd(data, max_size)
    try:
        out = bytes(cramjam.zstd.decompress(data))
    except _cramjam_errors() as exc:
        raise _corrupt("zstd", exc) from None
    if len(out) > max_size:
        raise _too_big("zstd", len(out), max_size)
    return out


def _bound_zstd(data: bytes, max_size: int) -> None:
    """Walk every frame's block headers and reject output that could exceed ``max_size``."""
    end = len(data)
    pos = 0
    bound = 0
    if end == 0:
        raise _corrupt("zstd", "empty input")
    while pos < end:
        if end - pos < 4:
            raise _corrupt("zstd", f"truncated frame magic at byte {pos}")
        magic = int.from_bytes(data[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:
            if end - pos < 8:
                raise _corrupt("zstd", "truncated skippable frame")
            pos += 8 + int.from_bytes(data[pos + 4 : pos + 8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            raise _corrupt("zstd", f"bad frame magic at byte {pos}")
        pos += 4
        if pos >= end:
            raise _corrupt("zstd", "truncated frame header")
        fhd = data[pos]
        pos += 1
        if fhd & 0x08:
            raise _corrupt("zstd", "reserved bit set in the frame header")
        single = fhd & 0x20
        window = 0
        if not single:
            if pos >= end:
                raise _corrupt("zstd", "truncated frame header")
            wd = data[pos]
            pos += 1
            base = 1 << (10 + (wd >> 3))
            window = base + (base >> 3) * (wd & 7)
        pos += _DICT_BYTES[fhd & 3]
        fcs_size = _FCS_BYTES[fhd >> 6] or (1 if single else 0)
        if pos + fcs_size > end:
            raise _corrupt("zstd", "truncated frame header")
        content_size = -1
        if fcs_size:
            content_size = int.from_bytes(data[pos : pos + fcs_size], "little")
            if fcs_size == 2:
                content_size += 256
            pos += fcs_size
            if single:
                window = content_size
        block_max = min(window, _ZSTD_BLOCK_MAX)
        frame_bound = 0
        while True:
            if pos + 3 > end:
                raise _corrupt("zstd", f"truncated block header at byte {pos}")
            header = int.from_bytes(data[pos : pos + 3], "little")
            pos += 3
            kind = (header >> 1) & 3
            size = header >> 3
            if kind == 0:
                frame_bound += size
                pos += size
            elif kind == 1:
                frame_bound += size
                pos += 1
            elif kind == 2:
                frame_bound += block_max
                pos += size
            else:
                raise _corrupt("zstd", f"reserved block type at byte {pos - 3}")
            if pos > end:
                raise _corrupt("zstd", "truncated block")
            if header & 1:
                break
        if fhd & 0x04:
            pos += 4
            if pos > end:
                raise _corrupt("zstd", "truncated content checksum")
        if content_size > max_size:
            raise _too_big("zstd", content_size, max_size)
        bound += frame_bound
        if bound > max_size:
            raise _too_big("zstd", bound, max_size)
    if pos > end:
        raise _corrupt("zstd", "truncated skippable frame")
