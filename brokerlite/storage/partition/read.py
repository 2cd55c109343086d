"""Reading a partition log: whole batches for Fetch, and offsets by timestamp for ListOffsets.

Rules: reads are served only from ``[log_start_offset, log_end_offset)`` (or below an
upper bound, the last stable offset) and return whole batches, as byte ranges
of the segment files (:class:`FileChunk`) that the driver sends with
``os.sendfile``; a chunk keeps its file open even if its segment is deleted
meanwhile (a truncation cuts files in place, though: chunks taken before one,
beyond the new end, must not be used). A read is one bisect over the segments,
one over the index and a short header scan.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
from bisect import bisect_right

from ...errors import LogStorageError, OffsetOutOfRangeError
from ..segment import FileHandle, Segment, pread_all
from .state import PartitionState

__all__ = ["FileChunk", "ReadResult", "Reads"]

logger = logging.getLogger("trafka.brokerlite.log")

_I64 = struct.Struct(">q")


@dataclasses.dataclass(frozen=True, slots=True)
class FileChunk:
    """A byte range of a segment file, ready for ``os.sendfile``.

    Attributes:
        path_or_fd: an open file descriptor (PartitionLog never hands out paths). It
            stays open at least as long as this chunk exists, even if the segment is
            deleted meanwhile.
        position: where the range starts in the file.
        length: its length in bytes.
    """

    path_or_fd: int
    position: int
    length: int
    handle: FileHandle | None = dataclasses.field(default=None, repr=False, compare=False)

    def read(self) -> bytes:
        """The chunk's bytes (``os.pread``).

        Raises:
            OSError: the read failed.
        """
        return pread_all(self.path_or_fd, self.position, self.length)


@dataclasses.dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole record batches read from a partition log.

    Attributes:
        chunks: the byte ranges, in order (one per segment touched).
        size: total bytes.
        first_offset: base offset of the first batch returned (it can be below the
            requested offset when that offset is in the middle of a batch); the
            requested offset when nothing was returned.
    """

    chunks: list[FileChunk]
    size: int
    first_offset: int

    def tobytes(self) -> bytes:
        """All the chunks' bytes, concatenated (the path when ``sendfile`` is not used).

        Raises:
            LogStorageError: a read failed.
        """
        try:
            if len(self.chunks) == 1:
                return self.chunks[0].read()
            return b"".join(chunk.read() for chunk in self.chunks)
        except OSError as exc:
            raise LogStorageError(f"read failed: {exc}") from exc


class Reads(PartitionState):
    """Reading (a mixin of :class:`PartitionLog`)."""

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        upper_bound: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadResult:
        """Whole batches starting with the one that holds ``offset``.

        Args:
            offset: the first offset wanted; a batch holding it is returned whole.
            max_bytes: the most bytes to return (whole batches only).
            upper_bound: batches whose base offset is at or after this are left out
                (e.g. the last stable offset); defaults to the log end offset.
            min_one_batch: return the first batch even when it is larger than
                ``max_bytes`` (otherwise return nothing in that case).

        Returns:
            The chunks; empty when ``offset`` is the log end offset (or at/after
            ``upper_bound``).

        Raises:
            OffsetOutOfRangeError: ``offset`` is below the log start offset or above
                the log end offset.
            LogStorageError: a read failed or the log is offline.
        """
        self._check_usable()
        leo = self._next_offset
        if offset < self._log_start or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self._log_start}, {leo}] in {self._dir.name}"
            )
        upper = leo if upper_bound is None or upper_bound > leo else upper_bound
        if offset >= upper:
            return ReadResult([], 0, offset)
        try:
            return self._read(offset, max(max_bytes, 0), upper, min_one_batch)
        except OSError as exc:
            raise LogStorageError(f"{self._dir}: read failed: {exc}") from exc

    def _read(self, offset: int, max_bytes: int, upper: int, min_one_batch: bool) -> ReadResult:
        segments = self._segments
        i = bisect_right(self._bases, offset) - 1
        seg = segments[i]
        start, base, b_size = seg.locate(offset)
        while b_size == 0:  # not in this segment (only at a segment's very end)
            i += 1
            if i == len(segments):
                return ReadResult([], 0, offset)
            seg = segments[i]
            start, base, b_size = seg.locate(offset)
        if base >= upper:
            return ReadResult([], 0, offset)
        chunks: list[FileChunk] = []
        end = seg.end_position(start, start + max_bytes, upper)
        if end == start:
            if not min_one_batch:
                return ReadResult([], 0, offset)
            end = start + b_size
        chunks.append(FileChunk(seg.fd, start, end - start, seg.handle))
        total = end - start
        # Fill the rest of the budget from the next segments, whole batches only.
        while end == seg.size and total < max_bytes and i + 1 < len(segments):
            i += 1
            seg = segments[i]
            if seg.base_offset >= upper:
                break
            end = seg.end_position(0, max_bytes - total, upper)
            if end == 0:
                break
            chunks.append(FileChunk(seg.fd, 0, end, seg.handle))
            total += end
        return ReadResult(chunks, total, base)

    # -- timestamps ------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """The earliest record whose timestamp is at least ``timestamp_ms`` (ListOffsets).

        The time index finds the first batch with ``max_timestamp >= timestamp_ms``;
        that batch's records are then searched for the first one at or after the
        timestamp, skipping records below the log start offset.

        Returns:
            ``(offset, timestamp)`` of that record, or None when no record is that recent.

        Raises:
            LogStorageError: a read failed or the log is offline.
        """
        self._check_usable()
        log_start = self._log_start
        try:
            for seg in self._segments:
                if seg.next_offset <= log_start:
                    continue
                found = seg.find_timestamp(timestamp_ms, log_start)
                if found is not None:
                    pos, b_size, max_ts = found
                    data = seg.read_at(pos, b_size)
                    return _first_record_at(data, timestamp_ms, log_start, max_ts)
        except OSError as exc:
            raise LogStorageError(f"{self._dir}: read failed: {exc}") from exc
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """The record with the largest timestamp (ListOffsets' MAX_TIMESTAMP, -3).

        Returns:
            ``(offset, timestamp)``, or None when the log holds no timestamped record.

        Raises:
            LogStorageError: a read failed or the log is offline.
        """
        self._check_usable()
        best: Segment | None = None
        for seg in self._segments:
            if (
                seg.next_offset > self._log_start
                and seg.max_timestamp >= 0
                and (best is None or seg.max_timestamp > best.max_timestamp)
            ):
                best = seg
        if best is None:
            return None
        target = best.max_timestamp
        try:
            pos, _, b_size = best.locate(best.max_timestamp_offset)
            data = best.read_at(pos, b_size)
        except OSError as exc:
            raise LogStorageError(f"{self._dir}: read failed: {exc}") from exc
        offset, ts = _first_record_at(data, target, self._log_start, target)
        return offset, ts


def _first_record_at(data: bytes, timestamp: int, min_offset: int, max_ts: int) -> tuple[int, int]:
    """The first record of a batch at/after ``timestamp`` and ``min_offset``."""
    from trafka.codec.errors import DecodeError
    from trafka.codec.records import decode_batch

    base = _I64.unpack_from(data, 0)[0]
    try:
        batch = decode_batch(data, verify=False)
    except DecodeError as exc:
        logger.warning("cannot decode the batch at offset %d for a timestamp lookup: %s", base, exc)
        return max(base, min_offset), max_ts
    for record in batch.records:
        if record.timestamp >= timestamp and record.offset >= min_offset:
            return record.offset, record.timestamp
    return max(base, min_offset), max_ts
