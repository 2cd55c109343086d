"""trafka.codec.compression: round trips, peers' framings, bombs and fuzzing.

Peers are used as independent implementations: kafka-python's codec module
(which writes and reads the xerial snappy stream and lz4 frames the way the Java
client does), and the lz4, python-snappy and zstandard packages where installed.
"""

from __future__ import annotations

import concurrent.futures
import gzip
import os
import struct
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import peak_allocation

from trafka.codec.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Compression,
    _xxh32,
    compress,
    decompress,
)
from trafka.codec.errors import DecodeError, EncodeError

CODECS = list(Compression)
COMPRESSED = [c for c in Compression if c != Compression.NONE]

# Half random, half repetitive: compresses, but not to nothing.
PAYLOAD = b"".join(os.urandom(16) + b"kafka-record-" * 6 for _ in range(4000))
BIG_RANDOM = os.urandom(300_000)


def kafka_codec() -> Any:
    return pytest.importorskip("kafka.codec")


# -- round trips --------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize(
    "data",
    [b"", b"x", PAYLOAD, BIG_RANDOM, bytes(200_000)],
    ids=["empty", "one", "mixed", "random", "zeros"],
)
def test_round_trip(codec: Compression, data: bytes) -> None:
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == data
    assert decompress(int(codec), bytearray(packed)) == data
    assert decompress(codec, memoryview(packed)) == data


@settings(max_examples=40, deadline=None)
@given(
    codec=st.sampled_from(CODECS), data=st.binary(max_size=3000), magic=st.sampled_from([0, 1, 2])
)
def test_round_trip_property(codec: Compression, data: bytes, magic: int) -> None:
    assert decompress(codec, compress(codec, data, magic=magic), magic=magic) == data


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_compression_shrinks_repetitive_data(codec: Compression) -> None:
    assert len(compress(codec, PAYLOAD)) < len(PAYLOAD) // 2


def test_levels_are_honoured() -> None:
    fast = compress(Compression.GZIP, PAYLOAD, level=1)
    best = compress(Compression.GZIP, PAYLOAD, level=9)
    assert fast != best
    assert decompress(Compression.GZIP, fast) == decompress(Compression.GZIP, best) == PAYLOAD
    z1 = compress(Compression.ZSTD, PAYLOAD, level=1)
    z19 = compress(Compression.ZSTD, PAYLOAD, level=19)
    assert len(z19) <= len(z1)
    assert decompress(Compression.ZSTD, z19) == PAYLOAD
    # lz4 always uses the fast compressor, as Java does by default.
    assert compress(Compression.LZ4, PAYLOAD, level=9) == compress(Compression.LZ4, PAYLOAD)


def test_none_is_a_copy() -> None:
    data = bytearray(b"abc")
    out = compress(Compression.NONE, data)
    assert out == b"abc" and isinstance(out, bytes)
    assert decompress(Compression.NONE, memoryview(b"xyz")) == b"xyz"
    with pytest.raises(DecodeError):
        decompress(Compression.NONE, b"xyz", max_size=2)


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 99])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(DecodeError, match="unknown compression codec"):
        decompress(codec, b"data")
    with pytest.raises(EncodeError, match="unknown compression codec"):
        compress(codec, b"data")


# -- gzip ------------------------------------------------------------------------------


def test_gzip_is_a_standard_member() -> None:
    packed = compress(Compression.GZIP, PAYLOAD)
    assert packed[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed) == PAYLOAD


def test_gzip_reads_several_members() -> None:
    packed = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(Compression.GZIP, packed) == b"first second"


def test_gzip_lying_trailer_size() -> None:
    packed = bytearray(gzip.compress(PAYLOAD))
    packed[-4:] = struct.pack("<I", 10)  # claims 10 bytes
    with pytest.raises(DecodeError, match="gzip"):
        decompress(Compression.GZIP, bytes(packed))


def test_gzip_trailing_garbage() -> None:
    with pytest.raises(DecodeError, match="gzip"):
        decompress(Compression.GZIP, gzip.compress(b"data") + b"garbage-garbage-garbage")


# -- snappy ----------------------------------------------------------------------------

XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)


def test_snappy_writes_xerial_framing() -> None:
    import cramjam

    packed = compress(Compression.SNAPPY, PAYLOAD)
    assert packed.startswith(XERIAL_HEADER)
    # Walk the chunks independently: [int32 BE length][raw snappy block], 32 KiB each.
    pos = len(XERIAL_HEADER)
    out = []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        block = bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + n]))
        assert len(block) <= 32 * 1024
        out.append(block)
        pos += 4 + n
    assert pos == len(packed)
    assert b"".join(out) == PAYLOAD
    assert len(out) == -(-len(PAYLOAD) // (32 * 1024))


def test_snappy_raw_on_request() -> None:
    snappy = pytest.importorskip("snappy")
    packed = compress(Compression.SNAPPY, PAYLOAD, xerial=False)
    assert snappy.decompress(packed) == PAYLOAD
    assert decompress(Compression.SNAPPY, packed) == PAYLOAD


def test_snappy_reads_hand_built_xerial_stream() -> None:
    import cramjam

    chunks = [b"hello " * 10, b"", b"world" * 3]
    stream = XERIAL_HEADER + b"".join(
        struct.pack(">i", len(c)) + c
        for c in (bytes(cramjam.snappy.compress_raw(chunk)) for chunk in chunks)
    )
    assert decompress(Compression.SNAPPY, stream) == b"".join(chunks)
    assert decompress(Compression.SNAPPY, XERIAL_HEADER) == b""


@pytest.mark.parametrize(
    "stream",
    [
        XERIAL_HEADER[:12],  # truncated header
        XERIAL_HEADER + b"\x00\x00",  # truncated chunk length
        XERIAL_HEADER + b"\xff\xff\xff\xff" + b"x" * 10,  # negative chunk length
        XERIAL_HEADER + b"\x7f\xff\xff\xff" + b"x" * 10,  # lying chunk length
        XERIAL_HEADER + b"\x00\x00\x00\x03abc",  # garbage block
    ],
)
def test_snappy_bad_xerial(stream: bytes) -> None:
    with pytest.raises(DecodeError, match="snappy"):
        decompress(Compression.SNAPPY, stream)


def test_snappy_interop_with_kafka_python() -> None:
    kc = kafka_codec()
    if not kc.has_snappy():
        pytest.skip("kafka-python has no snappy library")
    assert kc.snappy_decode(compress(Compression.SNAPPY, PAYLOAD)) == PAYLOAD
    assert decompress(Compression.SNAPPY, kc.snappy_encode(PAYLOAD)) == PAYLOAD
    raw = kc.snappy_encode(PAYLOAD, xerial_compatible=False)
    assert decompress(Compression.SNAPPY, raw) == PAYLOAD


# -- lz4 -----------------------------------------------------------------------------------

LZ4_MAGIC = b"\x04\x22\x4d\x18"


def xxh32_oracle(data: bytes) -> int:
    """XXH32 as computed by the lz4 library: the content checksum of a frame."""
    lz4_frame = pytest.importorskip("lz4.frame")
    frame = lz4_frame.compress(data, content_checksum=True)
    return int.from_bytes(frame[-4:], "little")


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=80))
def test_xxh32_matches_lz4(data: bytes) -> None:
    assert _xxh32(data) == xxh32_oracle(data)


def test_lz4_writes_what_java_reads() -> None:
    lz4_frame = pytest.importorskip("lz4.frame")
    packed = compress(Compression.LZ4, PAYLOAD)
    # Version 1, independent blocks, no checksums, 64 KiB blocks, correct HC.
    assert packed[:6] == LZ4_MAGIC + b"\x60\x40"
    assert packed[6] == (xxh32_oracle(b"\x60\x40") >> 8) & 0xFF
    assert packed.endswith(b"\x00\x00\x00\x00")
    assert lz4_frame.decompress(packed) == PAYLOAD
    # Every block decompresses on its own (Java cannot read linked blocks).
    lz4_block = pytest.importorskip("lz4.block")
    pos = 7
    out = []
    while True:
        (word,) = struct.unpack_from("<I", packed, pos)
        pos += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        block = packed[pos : pos + size]
        out.append(block if word >> 31 else lz4_block.decompress(block, uncompressed_size=65536))
        pos += size
    assert b"".join(out) == PAYLOAD


def test_lz4_incompressible_blocks_are_stored() -> None:
    packed = compress(Compression.LZ4, BIG_RANDOM[:1000])
    (word,) = struct.unpack_from("<I", packed, 7)
    assert word == 0x80000000 | 1000
    assert packed[11:1011] == BIG_RANDOM[:1000]
    assert decompress(Compression.LZ4, packed) == BIG_RANDOM[:1000]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"block_linked": False},
        {"content_checksum": True},
        {"block_checksum": True},
        {"store_size": True},
        {"block_size": 7},
    ],
    ids=repr,
)
def test_lz4_reads_any_standard_frame(options: dict[str, object]) -> None:
    lz4_frame = pytest.importorskip("lz4.frame")
    if "block_size" in options:
        options = {"block_size": lz4_frame.BLOCKSIZE_MAX4MB}
    assert decompress(Compression.LZ4, lz4_frame.compress(PAYLOAD, **options)) == PAYLOAD


def test_lz4_frames_of_kafka_batches_decode_block_by_block() -> None:
    """What Java and librdkafka write (independent 64 KiB blocks, no checksums) is
    decoded a block at a time; linked, checksummed or larger-block frames go to
    the frame decoder. Both must give the same bytes (LZ4 frame format spec,
    https://github.com/lz4/lz4/blob/dev/doc/lz4_Frame_format.md)."""
    lz4_frame = pytest.importorskip("lz4.frame")
    for payload in (b"", b"x", PAYLOAD[:1000], PAYLOAD, BIG_RANDOM):
        for linked in (False, True):
            frame = lz4_frame.compress(payload, block_linked=linked)
            assert decompress(Compression.LZ4, frame) == payload
        assert decompress(Compression.LZ4, compress(Compression.LZ4, payload)) == payload


def test_lz4_block_inflating_past_the_frame_block_size_is_refused() -> None:
    # A 64 KiB-block frame whose one block decodes to 70,000 bytes: the block
    # maximum binds the decoder, whichever path reads it.
    packed = bytes(cramjam_lz4().compress_block(bytes(70_000), store_size=False))
    frame = LZ4_MAGIC + b"\x60\x40\x82" + struct.pack("<I", len(packed)) + packed + bytes(4)
    with pytest.raises(DecodeError, match="lz4"):
        decompress(Compression.LZ4, frame)
    fine = bytes(cramjam_lz4().compress_block(bytes(60_000), store_size=False))
    frame = LZ4_MAGIC + b"\x60\x40\x82" + struct.pack("<I", len(fine)) + fine + bytes(4)
    assert decompress(Compression.LZ4, frame) == bytes(60_000)


def test_lz4_decoding_in_threads_keeps_each_threads_output() -> None:
    frames = [compress(Compression.LZ4, bytes([i]) * (1000 + i * 700)) for i in range(16)]

    def check(i: int) -> bool:
        return all(
            decompress(Compression.LZ4, frames[i]) == bytes([i]) * (1000 + i * 700)
            for _ in range(200)
        )

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(check, range(16)))


def cramjam_lz4() -> Any:
    return pytest.importorskip("cramjam").lz4


def test_lz4_legacy_header_checksum() -> None:
    """Magic 0 (KAFKA-3160): the HC byte hashed the magic bytes too."""
    packed = compress(Compression.LZ4, PAYLOAD, magic=0)
    broken = (xxh32_oracle(LZ4_MAGIC + b"\x60\x40") >> 8) & 0xFF
    assert packed[:7] == LZ4_MAGIC + b"\x60\x40" + bytes((broken,))
    assert packed[7:] == compress(Compression.LZ4, PAYLOAD)[7:]
    assert decompress(Compression.LZ4, packed, magic=0) == PAYLOAD
    with pytest.raises(DecodeError, match="checksum"):
        decompress(Compression.LZ4, packed)
    # A correct frame is fine under magic 0 too (Java ignores the byte there).
    assert decompress(Compression.LZ4, compress(Compression.LZ4, PAYLOAD), magic=0) == PAYLOAD


def test_lz4_interop_with_kafka_python() -> None:
    kc = kafka_codec()
    if not kc.has_lz4():
        pytest.skip("kafka-python has no lz4 library")
    assert kc.lz4_decode(compress(Compression.LZ4, PAYLOAD)) == PAYLOAD
    assert decompress(Compression.LZ4, kc.lz4_encode(PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        LZ4_MAGIC,
        LZ4_MAGIC + b"\x60\x40",  # no HC
        b"\x00\x00\x00\x00\x60\x40\x82\x00\x00\x00\x00",  # wrong magic
        LZ4_MAGIC + b"\xa0\x40\x00\x00\x00\x00\x00",  # version 2
        LZ4_MAGIC + b"\x62\x40\x00\x00\x00\x00\x00",  # reserved bit
        LZ4_MAGIC + b"\x60\x30\x00\x00\x00\x00\x00",  # block size code 3
        LZ4_MAGIC + b"\x60\x40\x82",  # no end mark
        LZ4_MAGIC + b"\x60\x40\x82\xff\xff\x00\x00",  # block beyond 64 KiB
        LZ4_MAGIC + b"\x60\x40\x82\x10\x00\x00\x00abc",  # truncated block
        LZ4_MAGIC + b"\x60\x40\x82\x00\x00\x00\x00trailing",
    ],
)
def test_lz4_bad_frames(frame: bytes) -> None:
    with pytest.raises(DecodeError, match="lz4"):
        decompress(Compression.LZ4, frame)


# -- zstd ------------------------------------------------------------------------------------


def test_zstd_interop() -> None:
    zstandard = pytest.importorskip("zstandard")
    assert zstandard.ZstdDecompressor().decompress(compress(Compression.ZSTD, PAYLOAD)) == PAYLOAD
    # Java's streaming writer does not record the content size.
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(PAYLOAD)
    assert decompress(Compression.ZSTD, streamed) == PAYLOAD
    checked = zstandard.ZstdCompressor(write_checksum=True).compress(PAYLOAD)
    assert decompress(Compression.ZSTD, checked) == PAYLOAD
    two = zstandard.ZstdCompressor().compress(b"ab") + zstandard.ZstdCompressor().compress(b"cd")
    assert decompress(Compression.ZSTD, two) == b"abcd"
    skippable = struct.pack("<II", 0x184D2A50, 3) + b"xyz"
    assert decompress(Compression.ZSTD, skippable + compress(Compression.ZSTD, b"q")) == b"q"


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x28\xb5\x2f",
        b"\x28\xb5\x2f\xfd",
        b"\x00\x00\x00\x00\x00",
        b"\x28\xb5\x2f\xfd\x08\x00",  # reserved bit
        b"\x28\xb5\x2f\xfd\x00\x38\x07\x00\x00",  # reserved block type
        b"\x28\xb5\x2f\xfd\x00\x38\x01\x01\x00",  # raw block of 32 bytes, none there
        struct.pack("<II", 0x184D2A50, 100) + b"x",  # truncated skippable frame
    ],
)
def test_zstd_bad_frames(frame: bytes) -> None:
    with pytest.raises(DecodeError, match="zstd"):
        decompress(Compression.ZSTD, frame)


# -- decompression bombs -------------------------------------------------------------------------


def zstd_rle_bomb(blocks: int) -> bytes:
    """A zstd frame of ``blocks`` run-length blocks of 128 KiB each: 4 bytes per 128 KiB."""
    header = b"\x28\xb5\x2f\xfd" + b"\x00" + bytes((7 << 3,))  # no content size, 128 KiB window
    body = b"".join(
        ((128 * 1024) << 3 | 1 << 1 | (i == blocks - 1)).to_bytes(3, "little") + b"A"
        for i in range(blocks)
    )
    return header + body


def test_default_limit() -> None:
    assert DEFAULT_MAX_DECOMPRESSED_SIZE == 128 * 1024 * 1024


def test_zstd_bomb_is_refused_before_inflating(monkeypatch: pytest.MonkeyPatch) -> None:
    small = zstd_rle_bomb(3)
    assert decompress(Compression.ZSTD, small) == b"A" * (3 * 128 * 1024)
    bomb = zstd_rle_bomb(2000)  # 8 KB claiming 250 MiB
    cramjam = pytest.importorskip("cramjam")

    def never(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("the bomb reached the decoder")

    # Refused from the frame's block headers alone: the decoder is never run.
    monkeypatch.setattr(cramjam.zstd, "decompress", never)
    with pytest.raises(DecodeError, match="zstd payload may inflate"):
        decompress(Compression.ZSTD, bomb)


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_max_size_is_enforced(codec: Compression) -> None:
    packed = compress(codec, bytes(2_000_000))
    # lz4 and zstd bound the output from block headers: exact to within one block.
    assert len(decompress(codec, packed, max_size=2_000_000 + 128 * 1024)) == 2_000_000
    with pytest.raises(DecodeError, match=f"{codec.name.lower()}.*1000000"):
        decompress(codec, packed, max_size=1_000_000)


def test_gzip_bomb_with_lying_trailer() -> None:
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    packed = bytearray(b"".join(deflate.compress(chunk) for _ in range(64)) + deflate.flush())
    packed[-4:] = struct.pack("<I", 100)  # claims 100 bytes; holds 64 MiB
    with pytest.raises(DecodeError, match="gzip"):
        decompress(Compression.GZIP, bytes(packed), max_size=4 << 20)
    # The stream is cut at the limit: nothing near the 64 MiB it holds is made.
    peak = peak_allocation(lambda: decompress(Compression.GZIP, bytes(packed), max_size=4 << 20))
    assert peak < 3 * (4 << 20) + 2 * len(packed), peak


def test_snappy_bomb_claims_are_checked_first() -> None:
    # Raw snappy starts with the decompressed length; claim 2 GiB in 6 bytes.
    claim = b"\x80\x80\x80\x80\x08" + b"\x00"
    with pytest.raises(DecodeError, match="snappy payload may inflate"):
        decompress(Compression.SNAPPY, claim)


# -- fuzzing ----------------------------------------------------------------------------------------

SAMPLE = PAYLOAD[:3000] + bytes(2000)


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
@pytest.mark.parametrize("magic", [0, 2])
def test_every_truncation_raises_decode_error_or_decodes(codec: Compression, magic: int) -> None:
    packed = compress(codec, SAMPLE, magic=magic)
    for cut in range(len(packed)):
        try:
            out = decompress(codec, packed[:cut], magic=magic)
        except DecodeError as exc:
            assert codec.name.lower() in str(exc)
        else:
            # Only framings without an end marker can stop early (xerial chunks).
            assert codec == Compression.SNAPPY and SAMPLE.startswith(out)


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_flipped_bytes_raise_decode_error_or_decode(codec: Compression) -> None:
    packed = compress(codec, SAMPLE)
    for pos in range(0, len(packed), max(1, len(packed) // 300)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(packed)
            damaged[pos] ^= mask
            try:
                decompress(codec, bytes(damaged))
            except DecodeError:
                pass


@settings(max_examples=150, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=200), magic=st.sampled_from([0, 2])
)
def test_garbage_raises_only_decode_error(codec: Compression, data: bytes, magic: int) -> None:
    try:
        out = decompress(codec, data, magic=magic, max_size=1 << 20)
    except DecodeError:
        return
    assert isinstance(out, bytes)


@settings(max_examples=100, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED),
    prefix_of=st.sampled_from(["gzip", "snappy", "lz4", "zstd"]),
    tail=st.binary(max_size=60),
)
def test_valid_headers_with_garbage_bodies(codec: Compression, prefix_of: str, tail: bytes) -> None:
    headers = {
        "gzip": gzip.compress(b"")[:10],
        "snappy": XERIAL_HEADER,
        "lz4": compress(Compression.LZ4, b"")[:7],
        "zstd": b"\x28\xb5\x2f\xfd\x00\x38",
    }
    try:
        decompress(codec, headers[prefix_of] + tail, max_size=1 << 20)
    except DecodeError:
        pass


# -- lz4 frames read whole in C (the system's liblz4) ---------------------------------------


def lz4_unframe() -> Any:
    from trafka.codec import _accel

    unframe = getattr(_accel.speedups, "lz4_unframe", None)
    if unframe is None:
        pytest.skip("the C module is not built or is turned off")
    if unframe(compress(Compression.LZ4, b"x"), 10) is None:
        pytest.skip("no liblz4 on this system: the Python path reads every frame")
    return unframe


def python_unlz4(frame: bytes, max_size: int, monkeypatch: pytest.MonkeyPatch) -> bytes | str:
    from trafka.codec import _accel

    with monkeypatch.context() as m:
        m.setattr(_accel, "speedups", None)
        try:
            return decompress(Compression.LZ4, frame, max_size=max_size)
        except DecodeError as exc:
            return str(exc)


def test_lz4_common_frames_are_read_in_c_as_the_python_path_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Java's and librdkafka's frames (independent 64 KiB blocks, no checksums,
    stored or compressed blocks) come back whole from the C module, the same
    bytes as the Python path's; the frames it does not read (checksums, content
    size, linked blocks of more than one block, the pre-0.10 header checksum)
    it returns None for."""
    unframe = lz4_unframe()
    for payload in (b"", b"x", PAYLOAD[:1000], PAYLOAD, BIG_RANDOM, bytes(200_000)):
        frame = compress(Compression.LZ4, payload)
        assert unframe(frame, DEFAULT_MAX_DECOMPRESSED_SIZE) == payload
        assert python_unlz4(frame, DEFAULT_MAX_DECOMPRESSED_SIZE, monkeypatch) == payload
        assert unframe(compress(Compression.LZ4, payload, magic=0), 1 << 30) is None
    lz4_frame = pytest.importorskip("lz4.frame")
    for options in (
        {"content_checksum": True},
        {"block_checksum": True},
        {"store_size": True},
        {"block_linked": True},
    ):
        frame = lz4_frame.compress(PAYLOAD, **options)
        if options == {"block_linked": True}:
            assert frame[4] & 0x20 == 0
        assert unframe(frame, 1 << 30) is None, options
        assert decompress(Compression.LZ4, frame) == PAYLOAD
    one_linked = lz4_frame.compress(PAYLOAD[:1000], block_linked=True, store_size=False)
    assert unframe(one_linked, 1 << 30) == PAYLOAD[:1000]  # one block: nothing to link to


@pytest.mark.parametrize("seed", range(4))
def test_lz4_frames_damaged_read_in_c_or_refused_as_the_python_path_does(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random damage (bytes changed, cut short, lengthened) and small output
    limits: the C module returns exactly what the Python path returns, or None
    (the Python path then reads it and raises its own error)."""
    import random

    unframe = lz4_unframe()
    rng = random.Random(seed)
    sources = [
        compress(Compression.LZ4, p)
        for p in (b"", b"abc" * 7, PAYLOAD[:3000], PAYLOAD[:70_000], BIG_RANDOM[:140_000])
    ]
    sources.append(LZ4_MAGIC + b"\x60\x40\x82" + struct.pack("<I", 0x80000003) + b"abc" + bytes(4))
    for _ in range(300):
        frame = bytearray(rng.choice(sources))
        damage = rng.randrange(4)
        if damage == 0 and frame:
            for _ in range(rng.randint(1, 3)):
                frame[rng.randrange(len(frame))] = rng.randrange(256)
        elif damage == 1:
            del frame[rng.randrange(len(frame) + 1) :]
        elif damage == 2:
            frame += bytes(rng.randrange(1, 6))
        max_size = rng.choice([0, 3, 100, 65_536, 70_000, DEFAULT_MAX_DECOMPRESSED_SIZE])
        got = unframe(bytes(frame), max_size)
        expected = python_unlz4(bytes(frame), max_size, monkeypatch)
        if got is not None:
            assert got == expected
            assert decompress(Compression.LZ4, bytes(frame), max_size=max_size) == got


@pytest.mark.parametrize("magic", [0, 2])
def test_lz4_frames_written_in_c_are_the_python_paths(
    magic: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The C module's frame (the system's liblz4, LZ4_compress_default) is the
    Python path's (cramjam's block compressor): the same header, 64 KiB blocks,
    one stored when compressing does not shrink it, the end mark, and it reads
    back through both readers. The compressed blocks are the same bytes when
    both lz4 libraries are the same release (here); another liblz4 release may
    compress differently, so only the frame's reading is required of it."""
    from trafka.codec import _accel

    lz4_unframe()  # skips without the C module or liblz4
    # Whether the two libraries compress alike, seen on one compressible payload.
    sample = PAYLOAD * 4
    with monkeypatch.context() as m:
        m.setattr(_accel, "speedups", None)
        python_sample = compress(Compression.LZ4, sample, magic=magic)
    same_lz4_release = compress(Compression.LZ4, sample, magic=magic) == python_sample
    rng = __import__("random").Random(magic)
    payloads = [b"", b"x", PAYLOAD[:1000], PAYLOAD, BIG_RANDOM, bytes(200_000)]
    payloads += [
        rng.randbytes(rng.randrange(200)) + b"key-%d" % i * rng.randrange(300) for i in range(50)
    ]
    payloads.append(BIG_RANDOM[:65_536] + bytes(65_536) + BIG_RANDOM[:1])
    for payload in payloads:
        for data in (payload, bytearray(payload), memoryview(payload)):
            made = compress(Compression.LZ4, data, magic=magic)
            with monkeypatch.context() as m:
                m.setattr(_accel, "speedups", None)
                python_made = compress(Compression.LZ4, data, magic=magic)
                assert decompress(Compression.LZ4, made, magic=magic) == payload
            assert made[:7] == python_made[:7]  # magic, FLG, BD, header checksum
            assert made[-4:] == python_made[-4:] == bytes(4)  # the end mark
            if same_lz4_release:
                assert made == python_made
            assert decompress(Compression.LZ4, made, magic=magic) == payload
