"""FrameReader: any split of the stream gives the same frames, with bounded memory."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trafka.codec import DecodeError, FrameTooLargeError
from trafka.codec.framing import DEFAULT_MAX_FRAME_SIZE, FrameReader


def framed(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


PAYLOADS = [b"", b"a", b"hello", bytes(range(256)) * 3, b"\x00\x00\x00\x05"]
STREAM = framed(*PAYLOADS)


def test_whole_stream_at_once() -> None:
    reader = FrameReader()
    reader.feed(STREAM)
    assert list(reader) == PAYLOADS
    assert reader.buffered == 0
    assert reader.next_frame() is None
    reader.close()


def test_one_byte_at_a_time() -> None:
    reader = FrameReader()
    frames: list[bytes] = []
    for i in range(len(STREAM)):
        reader.feed(STREAM[i : i + 1])
        fed = i + 1
        frames.extend(reader)
        # Memory follows exactly what was received and not yet returned.
        pending = fed - sum(4 + len(f) for f in frames)
        assert reader.buffered == pending
    assert frames == PAYLOADS
    reader.close()


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(0, 3000), max_size=20),
    feed_types=st.sampled_from([bytes, bytearray, memoryview]),
    take=st.booleans(),
    join_from=st.sampled_from([None, 1, 5, 100]),
)
def test_random_splits(
    payloads: list[bytes], cuts: list[int], feed_types: type, take: bool, join_from: int | None
) -> None:
    stream = framed(*payloads)
    points = sorted({c for c in cuts if c < len(stream)} | {0, len(stream)})
    reader = FrameReader(join_from=join_from)
    frames: list[bytes] = []
    for start, end in itertools.pairwise(points):
        chunk = feed_types(stream[start:end])
        if take:  # feed and iterate in one call (a whole frame alone skips the buffer)
            got = reader.take(chunk)
            assert all(type(frame) is bytes for frame in got)
            frames.extend(got)
        else:
            reader.feed(chunk)
            while (frame := reader.next_frame()) is not None:
                assert type(frame) is bytes
                frames.append(frame)
        pending = end - sum(4 + len(f) for f in frames)
        assert reader.buffered == pending
    assert frames == payloads
    reader.close()


def test_pending_frame_size() -> None:
    reader = FrameReader()
    reader.feed(b"\x00\x00")
    assert reader.next_frame() is None
    assert reader.pending_frame_size is None
    reader.feed(b"\x00\x03ab")
    assert reader.next_frame() is None
    assert reader.pending_frame_size == 3
    assert reader.buffered == 6  # the size prefix counts: received, not yet returned
    reader.feed(b"c")
    assert reader.next_frame() == b"abc"
    assert reader.pending_frame_size is None


def test_peek_shows_the_head_of_the_frame_being_collected() -> None:
    reader = FrameReader()
    reader.feed(b"\x00\x00\x00\x05\x00")
    assert reader.next_frame() is None
    assert reader.peek(2) is None  # one byte of the frame is in
    reader.feed(b"\x12\x00")
    assert reader.next_frame() is None
    assert reader.peek(2) == b"\x00\x12"
    assert reader.peek(6) is None  # beyond the frame
    reader.feed(b"\x03\x00")
    assert reader.next_frame() == b"\x00\x12\x00\x03\x00"
    assert reader.peek(1) is None  # no frame under way


def test_too_large_is_raised_as_soon_as_the_prefix_is_in() -> None:
    reader = FrameReader(max_frame_size=10)
    reader.feed(framed(b"x" * 10))
    assert reader.next_frame() == b"x" * 10
    reader.feed(b"\x00\x00\x00")
    assert reader.next_frame() is None
    reader.feed(b"\x0b")  # 11: the body has not started arriving
    with pytest.raises(FrameTooLargeError) as info:
        reader.next_frame()
    assert "11" in str(info.value)
    assert info.value.message_name == "frame"
    assert isinstance(info.value, DecodeError)


def test_default_maximum() -> None:
    assert DEFAULT_MAX_FRAME_SIZE == 100 * 1024 * 1024
    reader = FrameReader()
    reader.feed(struct.pack(">i", DEFAULT_MAX_FRAME_SIZE))
    assert reader.next_frame() is None
    reader = FrameReader()
    reader.feed(struct.pack(">i", DEFAULT_MAX_FRAME_SIZE + 1))
    with pytest.raises(FrameTooLargeError):
        reader.next_frame()


def test_huge_announced_size_allocates_nothing() -> None:
    """A peer announcing 2 GiB gets refused without the reader reserving anything."""
    reader = FrameReader()
    reader.feed(struct.pack(">i", 2**31 - 1) + b"abc")
    with pytest.raises(FrameTooLargeError):
        reader.next_frame()
    assert reader.buffered <= 7


def test_negative_size() -> None:
    reader = FrameReader()
    reader.feed(struct.pack(">i", -1))
    with pytest.raises(DecodeError, match="negative") as info:
        reader.next_frame()
    assert not isinstance(info.value, FrameTooLargeError)


def test_zero_maximum_accepts_only_empty_frames() -> None:
    reader = FrameReader(max_frame_size=0)
    reader.feed(framed(b"") + framed(b"x"))
    assert reader.next_frame() == b""
    with pytest.raises(FrameTooLargeError):
        reader.next_frame()
    with pytest.raises(ValueError):
        FrameReader(max_frame_size=-1)


@pytest.mark.parametrize("prefix", [struct.pack(">i", -7), struct.pack(">i", 1 << 30)])
def test_a_broken_reader_stays_broken(prefix: bytes) -> None:
    reader = FrameReader(max_frame_size=1000)
    reader.feed(framed(b"ok") + prefix)
    assert reader.next_frame() == b"ok"
    with pytest.raises(DecodeError) as first:
        reader.next_frame()
    # The stream has lost its framing: every later call raises the same error.
    with pytest.raises(DecodeError) as again:
        reader.next_frame()
    assert again.value is first.value
    with pytest.raises(DecodeError) as fed:
        reader.feed(framed(b"more"))
    assert fed.value is first.value
    with pytest.raises(DecodeError):
        list(reader)
    reader.close()  # already broken: nothing new to report


def test_close_mid_frame() -> None:
    reader = FrameReader()
    reader.feed(framed(b"whole") + framed(b"cut short")[:-3])
    assert reader.next_frame() == b"whole"
    assert reader.next_frame() is None
    with pytest.raises(DecodeError, match="stream ended inside a frame"):
        reader.close()
    with pytest.raises(DecodeError):
        reader.feed(b"abc")


def test_close_right_after_a_size_prefix() -> None:
    reader = FrameReader()
    reader.feed(struct.pack(">i", 5))
    assert reader.next_frame() is None
    with pytest.raises(DecodeError, match="stream ended inside a frame"):
        reader.close()


def test_buffered_counts_a_size_prefix_already_read() -> None:
    reader = FrameReader()
    reader.feed(struct.pack(">i", 5) + b"ab")
    assert reader.next_frame() is None
    assert reader.buffered == 6


def test_close_mid_prefix() -> None:
    reader = FrameReader()
    reader.feed(b"\x00\x00")
    with pytest.raises(DecodeError):
        reader.close()


def test_close_between_frames_is_clean() -> None:
    reader = FrameReader()
    reader.feed(framed(b"a", b"b"))
    assert list(reader) == [b"a", b"b"]
    reader.close()
    reader.close()


def test_many_small_frames_keep_the_buffer_compact() -> None:
    """Returned bytes are dropped: feeding a long stream does not grow the buffer."""
    reader = FrameReader()
    chunk = framed(*([b"0123456789"] * 100))
    for _ in range(200):
        reader.feed(chunk)
        assert len(list(reader)) == 100
        assert reader.buffered == 0
    # The internal buffer was released, not merely skipped over.
    assert len(reader._buf) < 2 * len(chunk)


def test_take_returns_a_lone_whole_frame_without_buffering_it() -> None:
    reader = FrameReader(max_frame_size=10)
    assert reader.take(framed(b"answer")) == [b"answer"]
    assert reader.take(framed(b"")) == [b""]
    assert reader.buffered == 0
    # Two frames in one read, and a frame after a partial one, use the buffer.
    assert reader.take(framed(b"a", b"bb")) == [b"a", b"bb"]
    stream = framed(b"first", b"second")
    assert reader.take(stream[:3]) == []
    assert reader.take(stream[3:11]) == [b"first"]
    assert reader.take(stream[11:]) == [b"second"]
    assert reader.buffered == 0
    with pytest.raises(FrameTooLargeError):
        reader.take(framed(b"x" * 11))
    with pytest.raises(FrameTooLargeError):
        reader.take(framed(b"ok"))  # broken for good


@settings(max_examples=200, deadline=None)
@given(
    cuts=st.lists(st.integers(0, len(STREAM)), max_size=8),
    takes=st.lists(st.integers(0, 2), min_size=9, max_size=9),
    join_from=st.sampled_from([None, 1, 5, 100]),
)
def test_whole_frames_counts_what_next_frame_would_return(
    cuts: list[int], takes: list[int], join_from: int | None
) -> None:
    # brokerlite's request-queue gauge reads this: whole frames received and not
    # yet returned, whatever the split and however many were taken meanwhile.
    ends = list(itertools.accumulate(4 + len(p) for p in PAYLOADS))
    points = sorted({c for c in cuts} | {0, len(STREAM)})
    reader = FrameReader(join_from=join_from)
    returned = 0
    for (start, end), take in zip(itertools.pairwise(points), takes, strict=False):
        reader.feed(STREAM[start:end])
        for _ in range(take):
            if reader.next_frame() is None:
                break
            returned += 1
        whole = sum(1 for e in ends if e <= end)
        assert reader.whole_frames() == whole - returned
    assert reader.whole_frames() == len(list(reader))


def test_whole_frames_stops_at_a_size_it_would_refuse() -> None:
    reader = FrameReader(max_frame_size=8)
    reader.feed(framed(b"ok") + struct.pack(">i", 9) + b"x" * 9)
    assert reader.whole_frames() == 1
    reader = FrameReader()
    reader.feed(framed(b"ok") + struct.pack(">i", -1))
    assert reader.whole_frames() == 1


def test_a_large_frame_keeps_the_bytes_pieces_it_is_given() -> None:
    reader = FrameReader(join_from=4)
    assert reader.wanted == 0
    reader.feed(struct.pack(">i", 6) + b"ab")
    assert reader.next_frame() is None
    # What the frame still lacks: a socket receives at most that as one piece.
    assert (reader.wanted, reader.buffered, reader.peek(2)) == (4, 6, b"ab")
    piece = bytes(bytearray(b"cdef"))  # a new bytes object, as socket.recv makes
    reader.feed(piece)
    assert reader.wanted == 0 and reader.whole_frames() == 1
    assert reader.next_frame() == b"abcdef"
    # A frame whose size prefix came alone and whose bytes came as one piece is
    # that piece: no copy at all.
    reader.feed(struct.pack(">i", 5))
    assert reader.next_frame() is None and reader.wanted == 5
    piece = bytes(bytearray(b"vwxyz"))
    reader.feed(piece)
    assert reader.next_frame() is piece
    # A small frame still goes through the buffer; bytes past a large frame's
    # end wait there for the next one.
    reader.feed(framed(b"xy") + struct.pack(">i", 4))
    assert reader.next_frame() == b"xy" and reader.next_frame() is None
    reader.feed(b"1234" + framed(b"z")[:3])
    assert reader.next_frame() == b"1234" and reader.buffered == 3
    reader.feed(framed(b"z")[3:])
    assert list(reader) == [b"z"]
    reader.close()


def test_a_large_frame_is_refused_before_anything_is_kept() -> None:
    reader = FrameReader(max_frame_size=10, join_from=1)
    reader.feed(struct.pack(">i", 11) + b"x")
    with pytest.raises(FrameTooLargeError):
        reader.next_frame()
    assert reader.wanted == 0
    # Cut short inside a large frame: the end of the stream is an error.
    reader = FrameReader(join_from=1)
    reader.feed(struct.pack(">i", 3) + b"a")
    assert reader.next_frame() is None
    with pytest.raises(DecodeError, match="5 bytes buffered"):
        reader.close()


def test_join_from_must_be_positive() -> None:
    with pytest.raises(ValueError):
        FrameReader(join_from=0)
