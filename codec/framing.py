"""Incremental, I/O-free splitting of a byte stream into Kafka frames.

Rules and invariants:

* A frame is a big-endian int32 size ``n`` followed by ``n`` bytes. A negative
  size is a protocol error; a size above ``max_frame_size`` is rejected with
  :class:`~trafka.codec.errors.FrameTooLargeError` as soon as the 4 size bytes
  are in, before any of the frame is buffered.
* Memory follows what was received, never what a size field claims: the buffer
  holds exactly the fed bytes not yet returned.
* A large frame (``join_from`` bytes or more, when asked for) is kept, once its
  size prefix is in, as the pieces it arrives in, joined into one ``bytes``
  when the last arrives: a piece fed as ``bytes`` that lies within the frame is
  kept as it is, not copied, so a socket that receives each piece as a new
  ``bytes`` of at most :attr:`FrameReader.wanted` bytes gets the frame with one
  copy (the join) rather than two (into the buffer, then out of it).
* After an error the reader is broken: the stream has lost its framing and the
  only safe thing is to close the connection (``feed`` raises again).
* ``feed`` may be called with any split of the stream, down to one byte at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

from .errors import DecodeError, FrameTooLargeError

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "FrameReader"]

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024


class FrameReader:
    """Feed bytes, get whole frames (without their size prefix).

    Args:
        max_frame_size: the largest frame accepted, in bytes (default 100 MiB).

    Example::

        reader = FrameReader()
        reader.feed(data_from_socket)
        for frame in reader:
            handle(frame)
    """

    __slots__ = (
        "_broken",
        "_buf",
        "_have",
        "_need",
        "_pieces",
        "_pos",
        "join_from",
        "max_frame_size",
    )

    def __init__(
        self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, *, join_from: int | None = None
    ) -> None:
        if max_frame_size < 0:
            raise ValueError("max_frame_size must be >= 0")
        if join_from is not None and join_from < 1:
            raise ValueError("join_from must be >= 1")
        self.max_frame_size = max_frame_size
        self.join_from = join_from
        self._buf = bytearray()
        self._pos = 0
        self._need = -1  # size of the frame being collected, -1 until its prefix is in
        # The pieces of a large frame being collected (see the module doc) and
        # their length in all; its bytes are not in _buf. None: no such frame.
        self._pieces: list[bytes] | None = None
        self._have = 0
        self._broken: DecodeError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames (a size prefix already read included)."""
        return len(self._buf) - self._pos + (4 if self._need >= 0 else 0) + self._have

    @property
    def wanted(self) -> int:
        """The bytes the large frame being collected still lacks (0 when none
        is): what a socket may receive as one piece (see the module doc)."""
        return self._need - self._have if self._pieces is not None else 0

    @property
    def pending_frame_size(self) -> int | None:
        """The announced size of the frame being collected, once its prefix is in."""
        return None if self._need < 0 else self._need

    def whole_frames(self) -> int:
        """How many whole frames are buffered and not yet returned.

        A walk over the buffered size prefixes, for a metrics scrape rather than
        the receive path; it stops at a size :meth:`next_frame` would refuse.
        """
        if self._broken is not None:
            return 0
        buf = self._buf
        pos, end, count = self._pos, len(self._buf), 0
        if self._pieces is not None:
            if self._have < self._need:
                return 0
            count = 1
        elif self._need >= 0:
            if end - pos < self._need:
                return 0
            pos += self._need
            count = 1
        while end - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
            if size < 0 or size > self.max_frame_size or end - pos - 4 < size:
                break
            pos += 4 + size
            count += 1
        return count

    def peek(self, n: int) -> bytes | None:
        """The first ``n`` bytes of the frame being collected (its request header's
        API key, say), once its size prefix and those bytes are in; else None."""
        if self._need < 0 or n > self._need:
            return None
        if self._pieces is not None:
            head = b"".join(self._pieces[:n])[:n]  # a piece holds one byte at least
            return head if len(head) == n else None
        if len(self._buf) - self._pos < n:
            return None
        return bytes(self._buf[self._pos : self._pos + n])

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes. Raises the reader's error if it is broken."""
        if self._broken is not None:
            raise self._broken
        pieces = self._pieces
        if pieces is not None and self._have < self._need and data:
            n = min(len(data), self._need - self._have)
            # Bytes that lie within the frame are kept as they are (see the module doc).
            pieces.append(data if n == len(data) and type(data) is bytes else bytes(data[:n]))
            self._have += n
            if n == len(data):
                return
            data = data[n:]
        self._buf += data

    def take(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """:meth:`feed` ``data``, then return every whole frame now buffered.

        The usual small answer arrives alone in one read: with nothing buffered
        and ``data`` exactly one frame, it is returned without passing through
        the buffer.

        Raises:
            FrameTooLargeError, DecodeError: as :meth:`next_frame`.
        """
        if self._broken is None and self._need < 0 and not self._buf and len(data) >= 4:
            size = int.from_bytes(data[:4], "big", signed=True)
            if len(data) - 4 == size <= self.max_frame_size:
                return [bytes(data[4:])]
        self.feed(data)
        return list(self)

    def next_frame(self) -> bytes | None:
        """Return the next whole frame, or ``None`` if more bytes are needed.

        Raises:
            FrameTooLargeError: a size prefix exceeds ``max_frame_size``.
            DecodeError: a negative size prefix.
        """
        if self._broken is not None:
            raise self._broken
        if self._pieces is not None:
            if self._have < self._need:
                return None
            pieces, self._pieces = self._pieces, None
            self._have = 0
            self._need = -1
            return pieces[0] if len(pieces) == 1 else b"".join(pieces)
        buf = self._buf
        avail = len(buf) - self._pos
        if self._need < 0:
            if avail < 4:
                return None
            size = int.from_bytes(buf[self._pos : self._pos + 4], "big", signed=True)
            if size < 0:
                self._broken = DecodeError(f"negative frame size {size}", message_name="frame")
                raise self._broken
            if size > self.max_frame_size:
                self._broken = FrameTooLargeError(
                    f"frame of {size} bytes exceeds the maximum of {self.max_frame_size}",
                    message_name="frame",
                )
                raise self._broken
            self._pos += 4
            avail -= 4
            self._need = size
        if avail < self._need:
            if self.join_from is not None and self._need >= self.join_from:
                # A large frame: collected as its pieces from here on.
                with memoryview(buf) as view:
                    self._pieces = [view[self._pos :].tobytes()] if avail else []
                self._have = avail
                self._pos += avail
            self._compact()
            return None
        start = self._pos
        end = start + self._need
        with memoryview(buf) as view:  # one copy (bytes(buf[a:b]) makes two)
            frame = view[start:end].tobytes()
        self._pos = end
        self._need = -1
        self._compact()
        return frame

    def __iter__(self) -> Iterator[bytes]:
        while (frame := self.next_frame()) is not None:
            yield frame

    def _compact(self) -> None:
        # Drop consumed bytes once they dominate, keeping appends amortised O(1).
        if self._pos and self._pos * 2 >= len(self._buf):
            del self._buf[: self._pos]
            self._pos = 0

    def close(self) -> None:
        """Declare end of stream. Raises DecodeError if a frame was cut short."""
        if self._broken is None and self.buffered:
            left = self.buffered
            self._broken = DecodeError(
                f"stream ended inside a frame ({left} bytes buffered)", message_name="frame"
            )
            raise self._broken
