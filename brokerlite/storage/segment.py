"""One segment of a partition log: a file of record batches and its two sparse indexes.

A segment is named by its *base offset* (the offset of its first record), written
as 20 decimal digits, and owns three files in the partition's directory::

    <base>.log        magic 2 record batches end to end, exactly as produced, except the
                      bytes the log rewrites: base_offset and partition_leader_epoch (not
                      covered by the CRC) and, for LogAppendTime topics, the timestamp
                      type bit, max_timestamp and the CRC.
    <base>.index      8-byte entries: int32 (offset - base), int32 file position, both
                      big-endian; the entry's offset is the base offset of the batch that
                      starts at that position.
    <base>.timeindex  12-byte entries: int64 timestamp, int32 (offset - base).

Rules and invariants (``size`` is the in-memory length of the segment):

* Bytes ``[0, size)`` of the .log file are whole batches that passed validation
  (length, magic, CRC32C) when appended or recovered. Bytes beyond ``size`` are
  never read, and are truncated away when a write fails or on recovery.
* Bytes ``[0, size)`` never change while the segment is open: appends only add
  beyond ``size``. So a ``(fd, position, length)`` chunk handed to a reader stays
  valid for as long as the fd is open; the fd lives in a reference-counted
  :class:`FileHandle`, so a deleted segment's fd closes only when the last reader
  drops its chunk (the unlinked file stays readable until then). The one
  exception is :meth:`Segment.truncate_to` (a follower whose log diverged from
  its leader's): it cuts the file at a batch boundary, in place, so a chunk
  taken earlier beyond the new end must not be used once the segment is cut.
* Offsets are contiguous: the first batch's base offset is the segment's base
  offset and each next batch starts at the previous batch's last offset + 1;
  except in a segment that log compaction rewrote (see ``cleaner.py``), where
  removed batches leave gaps, and in a follower's segment that received a
  compacted leader's batches (gaps and all). Loading such a segment
  (``gaps=True``, decided by the log from its clean offset and its replicated
  gaps offset) accepts gaps but no offset going backwards, and
  every segment with a successor must end before the successor's base offset
  (``offset_limit``). The base offset field is not covered by the CRC, so these
  checks are what catches its corruption.
* Offset index entries increase strictly in offset and in position. An entry is
  added for a batch when at least ``index_interval_bytes`` bytes were appended
  since the previous entry (counted from the previous entry's batch start), so a
  lookup scans at most about that many bytes of batch headers.
* Time index entries increase strictly in timestamp. Entry ``(t, o)`` is written
  together with an offset index entry, when the running maximum timestamp ``t``
  grew since the last time index entry; ``o`` is the base offset of the *first*
  batch whose max_timestamp is ``t``. Hence every batch before ``o`` has a
  max_timestamp below ``t``, which is what makes a time lookup correct. Right
  after each offset index entry the last time index entry holds the running
  maximum, and it was written with that offset entry or an earlier one: cutting
  both indexes back to an offset entry leaves exactly what appending the kept
  batches alone would have built (what :meth:`Segment.truncate_to` relies on).
* Only the active segment keeps its index files open: the others are sealed
  (:meth:`Segment.seal`) once complete, and only their .log descriptor stays.
* Index entries in memory are the source of truth while running. They reach the
  index files only on flush (every roll, fsync and clean close), never on the
  append path: a segment whose index files may lag is one that may hold
  unflushed data, and recovery validates such a segment and rebuilds its
  indexes anyway. The files are read back only on open, where any
  inconsistency with the log makes the segment recover the same way.

This module is not thread-safe: one task owns a partition log.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path

from trafka.codec.crc import crc32c

__all__ = [
    "BATCH_HEADER_SIZE",
    "BrokenSegmentError",
    "LOG_OVERHEAD",
    "FileHandle",
    "Segment",
    "segment_name",
    "walk_batches",
]

logger = logging.getLogger("trafka.brokerlite.log")

LOG_OVERHEAD = 12  # base_offset int64 + batch_length int32
BATCH_HEADER_SIZE = 61
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
INT32_MAX = 2**31 - 1

# Everything a scan needs from a batch header: base_offset, batch_length,
# partition_leader_epoch, magic, crc, attributes, last_offset_delta, base_timestamp,
# max_timestamp (43 bytes).
SCAN_HEADER = struct.Struct(">qiibIhiqq")
SCAN_HEADER_SIZE = SCAN_HEADER.size
_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")

# Header scans read this much at a time, so walking an index interval of small
# batches costs one or two preads rather than one per batch.
_SCAN_BLOCK = 16 * 1024
# Recovery reads whole stretches of the file at once: few syscalls, bounded memory.
_RECOVERY_BLOCK = 1024 * 1024

_WRITE_FLAGS = os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)

_fdatasync = getattr(os, "fdatasync", os.fsync)

# Indirections so tests can inject write failures (ENOSPC) without patching ``os``.
_write = os.write
_ftruncate = os.ftruncate


def segment_name(base_offset: int) -> str:
    """The file stem of the segment starting at ``base_offset`` (20 digits)."""
    return f"{base_offset:020d}"


class FileHandle:
    """An open file descriptor, closed when the last reference goes away.

    The segment and every read chunk taken from it share one handle, so deleting
    a segment (retention, topic deletion) never closes an fd that a pending
    ``sendfile`` is about to use, and never lets the number be reused under it.
    """

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self, _close: Callable[[int], None] = os.close) -> None:
        """Close the descriptor now (idempotent)."""
        # ``_close`` is bound at definition time so that a handle collected during
        # interpreter shutdown, after module globals are cleared, still closes.
        fd, self.fd = self.fd, -1
        if fd >= 0:
            _close(fd)

    def __del__(self) -> None:
        self.close()


def write_all(
    fd: int,
    data: bytes | bytearray | memoryview,
    *,
    write: Callable[[int, bytes | bytearray | memoryview], int] | None = None,
) -> None:
    """Write all of ``data`` (a regular file may accept a partial write when nearly full).

    ``write`` defaults to the module's ``_write``, the hook through which tests make
    segment writes fail; small checkpoint files pass ``os.write``.
    """
    if write is None:
        write = _write
    n = write(fd, data)
    if n == len(data):
        return
    if n <= 0:
        raise OSError(errno.EIO, "write returned 0")
    view = memoryview(data)[n:]
    while view:
        n = write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "write returned 0")
        view = view[n:]


class Segment:
    """A segment's files and in-memory indexes. See the module docstring for the rules.

    Attributes:
        base_offset: offset of the first record the segment holds (or will hold).
        next_offset: offset after the last record (``base_offset`` when empty).
        size: bytes of whole validated batches.
        handle: the .log file's descriptor (shared with read chunks).
        max_timestamp: largest batch max_timestamp seen (-1 when none).
        roll_base_ms: the time the segment's age is measured from (for ``segment.ms``).
    """

    __slots__ = (
        "base_offset",
        "bytes_since_index",
        "directory",
        "fd",
        "handle",
        "idx_fd",
        "idx_offsets",
        "idx_persisted",
        "idx_positions",
        "max_timestamp",
        "max_timestamp_offset",
        "next_offset",
        "roll_base_ms",
        "size",
        "tidx_fd",
        "tidx_offsets",
        "tidx_persisted",
        "tidx_timestamps",
        "truncated",
    )

    def __init__(self, directory: Path, base_offset: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.next_offset = base_offset
        self.size = 0
        self.handle: FileHandle | None = None
        self.fd = -1
        self.idx_fd = -1
        self.tidx_fd = -1
        self.idx_offsets = array("q")
        self.idx_positions = array("q")
        self.tidx_timestamps = array("q")
        self.tidx_offsets = array("q")
        self.idx_persisted = 0  # entries already in the index files
        self.tidx_persisted = 0
        self.bytes_since_index = 0
        self.max_timestamp = -1
        self.max_timestamp_offset = base_offset
        self.roll_base_ms = -1
        self.truncated = 0  # bytes recovery cut off the end of the .log file

    # -- paths ---------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + ".log")

    @property
    def index_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + ".index")

    @property
    def timeindex_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + ".timeindex")

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int) -> Segment:
        """Create an empty segment (any leftover files of that name are truncated).

        Raises:
            OSError: the files cannot be created.
        """
        seg = cls(directory, base_offset)
        flags = _WRITE_FLAGS | os.O_CREAT | os.O_TRUNC
        try:
            seg.fd = os.open(seg.log_path, flags, 0o644)
            seg.handle = FileHandle(seg.fd)
            seg.idx_fd = os.open(seg.index_path, flags, 0o644)
            seg.tidx_fd = os.open(seg.timeindex_path, flags, 0o644)
        except OSError:
            seg.release()
            raise
        return seg

    @classmethod
    def load(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        now_ms: int,
        validate: bool,
        gaps: bool = False,
        offset_limit: int | None = None,
    ) -> tuple[Segment, bool]:
        """Open an existing segment.

        With ``validate`` false the indexes are trusted when consistent, and only the
        batch headers after the last index entry are read. Otherwise (or when an index
        is missing or inconsistent, or a header is bad) every batch is checked (length,
        magic, CRC32C, offsets), the file is truncated after the last good batch and
        both indexes are rebuilt.

        Args:
            directory: the partition's directory.
            base_offset: the segment's base offset (its file name).
            index_interval_bytes: the log's index interval.
            now_ms: the current time (the age of a segment without timestamps).
            validate: check every batch, whatever the index files say.
            gaps: the segment may have offset gaps (compaction rewrote it, or a
                follower copied a compacted leader's batches into it).
            offset_limit: every offset must be below this (the next segment's base).

        Returns:
            ``(segment, recovered)``: whether every batch was validated and the
            indexes rebuilt (possibly truncating the file).

        Raises:
            OSError: the files cannot be opened, read or truncated.
        """
        seg = cls(directory, base_offset)
        try:
            seg.fd = os.open(seg.log_path, _WRITE_FLAGS)
            seg.handle = FileHandle(seg.fd)
            flags = _WRITE_FLAGS | os.O_CREAT
            missing = not seg.index_path.exists() or not seg.timeindex_path.exists()
            seg.idx_fd = os.open(seg.index_path, flags, 0o644)
            seg.tidx_fd = os.open(seg.timeindex_path, flags, 0o644)
            file_size = os.fstat(seg.fd).st_size
            recovered = bool(
                validate
                or (missing and file_size)
                or not seg.load_trusted_indexes(file_size, index_interval_bytes, gaps, offset_limit)
            )
            if recovered:
                seg.rebuild_indexes(file_size, index_interval_bytes, gaps, offset_limit)
            seg.roll_base_ms = seg.first_timestamp(now_ms) if seg.size else -1
        except BaseException:
            seg.release()
            raise
        return seg, recovered

    def load_trusted_indexes(
        self, file_size: int, interval: int, gaps: bool, offset_limit: int | None
    ) -> bool:
        """Load the index files and walk the tail; False when anything is inconsistent
        (a step of :meth:`load`, on the files it opened).

        The tail (from the last indexed batch) must not hold a batch that the index
        rule would have indexed: that would mean index entries were lost.
        """
        idx_data = _read_whole(self.idx_fd)
        tidx_data = _read_whole(self.tidx_fd)
        if len(idx_data) % _INDEX_ENTRY.size or len(tidx_data) % _TIME_ENTRY.size:
            return False
        base = self.base_offset
        prev_off = prev_pos = -1
        for rel, pos in _INDEX_ENTRY.iter_unpack(idx_data):
            off = base + rel
            if rel < 0 or off <= prev_off or pos <= prev_pos or pos >= file_size:
                return False
            self.idx_offsets.append(off)
            self.idx_positions.append(pos)
            prev_off, prev_pos = off, pos
        prev_ts = -1
        prev_off = base - 1
        for ts, rel in _TIME_ENTRY.iter_unpack(tidx_data):
            off = base + rel
            if rel < 0 or ts <= prev_ts or off <= prev_off:
                return False
            self.tidx_timestamps.append(ts)
            self.tidx_offsets.append(off)
            prev_ts, prev_off = ts, off
        if self.tidx_timestamps:
            self.max_timestamp = self.tidx_timestamps[-1]
            self.max_timestamp_offset = self.tidx_offsets[-1]
        if self.idx_offsets:
            pos, expected = self.idx_positions[-1], self.idx_offsets[-1]
        else:
            pos, expected = 0, base
        max_ts, max_off = self.max_timestamp, self.max_timestamp_offset
        since = 0
        indexed = bool(self.idx_offsets)  # the first batch walked is the indexed one
        try:
            for _, b_base, b_size, lod, mts, _ in self.iter_headers(pos, file_size, checked=True):
                if (
                    (b_base != expected if indexed or not gaps else b_base < expected)
                    or lod < 0
                    or (offset_limit is not None and b_base + lod >= offset_limit)
                    or (since >= interval and not indexed)
                ):
                    return False
                indexed = False
                since += b_size
                if mts > max_ts:
                    max_ts, max_off = mts, b_base
                expected = b_base + lod + 1
                pos += b_size
        except _BadHeader:
            return False
        if pos != file_size or (self.tidx_offsets and self.tidx_offsets[-1] >= expected):
            return False
        self.size = file_size
        self.next_offset = expected
        self.max_timestamp, self.max_timestamp_offset = max_ts, max_off
        self.bytes_since_index = since
        self.idx_persisted = len(self.idx_offsets)
        self.tidx_persisted = len(self.tidx_timestamps)
        return True

    def rebuild_indexes(
        self, file_size: int, interval: int, gaps: bool = False, offset_limit: int | None = None
    ) -> int:
        """Validate every batch, truncate after the last good one, rebuild the indexes
        (a step of :meth:`load`); returns the bytes truncated."""
        fd = self.fd
        self.idx_offsets = array("q")
        self.idx_positions = array("q")
        self.tidx_timestamps = array("q")
        self.tidx_offsets = array("q")
        idx_offsets, idx_positions = self.idx_offsets, self.idx_positions
        tidx_ts, tidx_offsets = self.tidx_timestamps, self.tidx_offsets
        max_ts, max_off = -1, self.base_offset
        last_tidx_ts = -1
        since = 0
        expected = self.base_offset
        pos = 0
        reason = ""
        for at, header, fault in walk_batches(fd, file_size):
            if fault is not None:
                reason = fault
                break
            b_base, length, _epoch, _magic, _crc, _attrs, lod, _bts, mts = header
            if (b_base < expected if gaps else b_base != expected) or lod < 0:
                reason = (
                    f"offset {b_base} where {'at least ' if gaps else ''}{expected} was expected"
                )
                break
            if offset_limit is not None and b_base + lod >= offset_limit:
                reason = f"offset {b_base + lod} is not below the next segment's {offset_limit}"
                break
            if mts > max_ts:
                max_ts, max_off = mts, b_base
            if since >= interval:
                idx_offsets.append(b_base)
                idx_positions.append(at)
                since = 0
                if max_ts > last_tidx_ts:
                    tidx_ts.append(max_ts)
                    tidx_offsets.append(max_off)
                    last_tidx_ts = max_ts
            b_size = length + LOG_OVERHEAD
            since += b_size
            expected = b_base + lod + 1
            pos = at + b_size
        truncated = file_size - pos
        if truncated:
            logger.warning(
                "%s: %s at byte %d; truncating %d bytes", self.log_path, reason, pos, truncated
            )
            os.ftruncate(fd, pos)
        self.truncated = truncated
        self.size = pos
        self.next_offset = expected
        self.max_timestamp, self.max_timestamp_offset = max_ts, max_off
        self.bytes_since_index = since
        os.ftruncate(self.idx_fd, 0)
        os.ftruncate(self.tidx_fd, 0)
        self.idx_persisted = self.tidx_persisted = 0
        self.persist_indexes()
        return truncated

    def first_timestamp(self, now_ms: int) -> int:
        """Where a reopened segment's age counts from: its first batch's time, capped at now."""
        head = os.pread(self.fd, SCAN_HEADER_SIZE, 0)
        ts = SCAN_HEADER.unpack_from(head)[8] if len(head) == SCAN_HEADER_SIZE else -1
        return ts if 0 <= ts <= now_ms else now_ms

    # -- appending -----------------------------------------------------------------------

    def append(
        self,
        buf: bytearray,
        batches: list[tuple[int, int, int, int]],
        next_offset: int,
        *,
        interval: int,
        now_ms: int,
    ) -> None:
        """Write validated batches (with offsets already assigned) in one write.

        New index entries go to memory only; :meth:`flush` writes them out.

        Args:
            buf: the batches, end to end.
            batches: ``(position in buf, size, base_offset, max_timestamp)`` per batch.
            next_offset: the offset after the last record of ``buf``.
            interval: the index interval in bytes.
            now_ms: the current time (starts the segment's age when it was empty).

        Raises:
            OSError: the write failed; the segment is unchanged (the file is
                truncated back to its previous size).
            BrokenSegmentError: the write failed and the truncation too.
        """
        start = self.size
        try:
            write_all(self.fd, buf)
        except OSError as failed:
            # Put the file back as it was, so nothing half-written is ever read or
            # recovered; if even that fails, the caller takes the log offline.
            try:
                _ftruncate(self.fd, start)
            except OSError as exc:
                raise BrokenSegmentError(
                    f"{self.log_path}: write failed ({failed}), then cannot truncate: {exc}"
                ) from exc
            raise
        if not start:
            self.roll_base_ms = now_ms
        since = self.bytes_since_index
        max_ts, max_off = self.max_timestamp, self.max_timestamp_offset
        for pos, b_size, b_base, mts in batches:
            if mts > max_ts:
                max_ts, max_off = mts, b_base
            if since >= interval:
                self.idx_offsets.append(b_base)
                self.idx_positions.append(start + pos)
                since = 0
                tidx = self.tidx_timestamps
                if max_ts > (tidx[-1] if tidx else -1):
                    tidx.append(max_ts)
                    self.tidx_offsets.append(max_off)
            since += b_size
        self.size = start + len(buf)
        self.next_offset = next_offset
        self.bytes_since_index = since
        self.max_timestamp, self.max_timestamp_offset = max_ts, max_off

    def persist_indexes(self) -> None:
        """Write the index entries not yet in the index files.

        Entries reach the files lazily (here, from :meth:`flush`): the files of a
        segment that might hold unflushed data are rebuilt by recovery anyway, so
        appends need no index syscalls.

        Raises:
            OSError: a write failed (the files are truncated back to whole entries).
        """
        base = self.base_offset
        done = self.idx_persisted
        if done < len(self.idx_offsets):
            data = b"".join(
                _INDEX_ENTRY.pack(self.idx_offsets[i] - base, self.idx_positions[i])
                for i in range(done, len(self.idx_offsets))
            )
            _write_entries(self.idx_fd, data, done * _INDEX_ENTRY.size)
            self.idx_persisted = len(self.idx_offsets)
        done = self.tidx_persisted
        if done < len(self.tidx_timestamps):
            data = b"".join(
                _TIME_ENTRY.pack(self.tidx_timestamps[i], self.tidx_offsets[i] - base)
                for i in range(done, len(self.tidx_timestamps))
            )
            _write_entries(self.tidx_fd, data, done * _TIME_ENTRY.size)
            self.tidx_persisted = len(self.tidx_timestamps)

    # -- truncating ----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is at least ``offset``, durably.

        A batch holding ``offset`` goes whole (as in Kafka), so the segment still ends
        on a batch boundary. The segment is left unsealed (it becomes the active one):
        the index entries of removed batches leave memory and the files, and the
        .log and index files are fsynced before returning.

        Returns:
            The number of bytes removed from the .log file.

        Raises:
            OSError: a truncation or fsync failed (the caller takes the log offline).
        """
        pos, _, b_size = self.locate(offset)
        self.unseal()
        removed = 0
        if b_size:
            keep = bisect_left(self.idx_positions, pos)
            # The time entries written with the kept index entries: what appends (or
            # recovery) of the kept batches alone would have written.
            keep_time = bisect_right(self.tidx_offsets, self.idx_offsets[keep - 1]) if keep else 0
            del self.idx_offsets[keep:], self.idx_positions[keep:]
            del self.tidx_timestamps[keep_time:], self.tidx_offsets[keep_time:]
            if self.idx_persisted > keep:
                _ftruncate(self.idx_fd, keep * _INDEX_ENTRY.size)
                self.idx_persisted = keep
            if self.tidx_persisted > keep_time:
                _ftruncate(self.tidx_fd, keep_time * _TIME_ENTRY.size)
                self.tidx_persisted = keep_time
            removed = self.size - pos
            _ftruncate(self.fd, pos)
            self.size = pos
            self._reload_tail()
            if not pos:
                self.roll_base_ms = -1
        self.flush()
        return removed

    def _reload_tail(self) -> None:
        """Recompute what appends build up (next offset, bytes since the last index
        entry, maximum timestamp) from the index entries and the batches after the last."""
        start = self.idx_positions[-1] if self.idx_positions else 0
        if self.tidx_timestamps:
            max_ts, max_off = self.tidx_timestamps[-1], self.tidx_offsets[-1]
        else:
            max_ts, max_off = -1, self.base_offset
        next_offset = self.base_offset
        since = 0
        # At an index entry the last time entry is the running maximum (see the
        # module rules), so only the batches from the entry on can raise it.
        for _, b_base, b_size, lod, mts, _ in self.iter_headers(start, self.size):
            if mts > max_ts:
                max_ts, max_off = mts, b_base
            since += b_size
            next_offset = b_base + lod + 1
        self.next_offset = next_offset
        self.bytes_since_index = since
        self.max_timestamp, self.max_timestamp_offset = max_ts, max_off

    # -- reading -------------------------------------------------------------------------

    def iter_headers(
        self, pos: int, end: int, *, checked: bool = False
    ) -> Iterator[tuple[int, int, int, int, int, int]]:
        """Walk batch headers from ``pos`` (a batch start) up to ``end``.

        Yields:
            ``(position, base_offset, size, last_offset_delta, max_timestamp,
            partition_leader_epoch)``.

        Raises:
            _BadHeader: with ``checked``, when a header is truncated, has a bad magic
                or length, or runs past ``end`` (used when loading trusted files).
        """
        fd = self.fd
        unpack = SCAN_HEADER.unpack_from
        buf = b""
        buf_start = 0
        while pos < end:
            rel = pos - buf_start
            if rel + SCAN_HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(_SCAN_BLOCK, end - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < SCAN_HEADER_SIZE:
                    if checked:
                        raise _BadHeader
                    raise OSError(errno.EIO, f"{self.log_path}: short read at byte {pos}")
            b_base, length, epoch, magic, _crc, _attrs, lod, _bts, mts = unpack(buf, rel)
            b_size = length + LOG_OVERHEAD
            if checked and (magic != 2 or length < MIN_BATCH_LENGTH or pos + b_size > end):
                raise _BadHeader
            yield pos, b_base, b_size, lod, mts, epoch
            pos += b_size

    def locate(self, offset: int) -> tuple[int, int, int]:
        """Find the first batch whose last offset is at least ``offset``.

        Returns:
            ``(position, base_offset, size)`` of that batch, or ``(self.size, -1, 0)``
            when the segment holds no such batch.
        """
        i = bisect_right(self.idx_offsets, offset) - 1
        pos = self.idx_positions[i] if i >= 0 else 0
        for b_pos, b_base, b_size, lod, _, _ in self.iter_headers(pos, self.size):
            if b_base + lod >= offset:
                return b_pos, b_base, b_size
        return self.size, -1, 0

    def end_position(self, start: int, limit: int, upper: int) -> int:
        """The furthest batch boundary ``e`` with ``start <= e <= limit`` such that every
        batch in ``[start, e)`` has a base offset below ``upper``.

        The index jumps over most of the range, so the header scan stays short.
        """
        pos = start
        k = min(
            bisect_right(self.idx_positions, limit) - 1,
            bisect_left(self.idx_offsets, upper) - 1,
        )
        if k >= 0 and self.idx_positions[k] > pos:
            pos = self.idx_positions[k]
        for b_pos, b_base, b_size, _, _, _ in self.iter_headers(pos, self.size):
            if b_base >= upper or b_pos + b_size > limit:
                return b_pos
        return self.size

    def find_timestamp(self, timestamp: int, min_offset: int) -> tuple[int, int, int] | None:
        """The first batch with max_timestamp >= ``timestamp`` and last offset >= ``min_offset``.

        Returns:
            ``(position, size, max_timestamp)`` or None.
        """
        if self.max_timestamp < timestamp:
            return None
        # Every batch before the entry's offset has max_timestamp < entry ts <= timestamp.
        j = bisect_right(self.tidx_timestamps, timestamp) - 1
        start = self.tidx_offsets[j] if j >= 0 else self.base_offset
        pos, _, _ = self.locate(max(start, min_offset))
        for b_pos, b_base, b_size, lod, mts, _ in self.iter_headers(pos, self.size):
            if mts >= timestamp and b_base + lod >= min_offset:
                return b_pos, b_size, mts
        return None

    def read_at(self, position: int, length: int) -> bytes:
        """``length`` bytes at ``position`` (within ``[0, size)``)."""
        return pread_all(self.fd, position, length)

    # -- lifecycle -----------------------------------------------------------------------

    def flush(self) -> None:
        """Write pending index entries, then fsync the log and index files.

        Raises:
            OSError: a write or fsync failed.
        """
        self.persist_indexes()
        _fdatasync(self.fd)
        _fdatasync(self.idx_fd)
        _fdatasync(self.tidx_fd)

    def seal(self) -> None:
        """Close the index files of a segment that no longer grows (any but the active one).

        Its index entries stay in memory, where lookups read them; the files are
        complete (a roll flushed them, or loading read or rebuilt them), so a
        partition keeps one descriptor per sealed segment instead of three.

        Raises:
            OSError: pending index entries could not be written.
        """
        if self.idx_fd < 0:
            return
        self.persist_indexes()
        for fd in (self.idx_fd, self.tidx_fd):
            os.close(fd)
        self.idx_fd = self.tidx_fd = -1

    def unseal(self) -> None:
        """Reopen the index files of a sealed segment (it becomes the active one again).

        Raises:
            OSError: the files cannot be opened.
        """
        if self.idx_fd >= 0:
            return
        flags = _WRITE_FLAGS | os.O_CREAT
        idx_fd = os.open(self.index_path, flags, 0o644)
        try:
            self.tidx_fd = os.open(self.timeindex_path, flags, 0o644)
        except OSError:
            os.close(idx_fd)
            raise
        self.idx_fd = idx_fd

    def last_modified_ms(self) -> int:
        """The .log file's modification time in ms (retention for untimestamped data)."""
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    def release(self) -> None:
        """Close the index files and drop this segment's reference to the log fd.

        The log fd itself closes once no read chunk references it any more.
        """
        for fd in (self.idx_fd, self.tidx_fd):
            if fd >= 0:
                os.close(fd)
        self.idx_fd = self.tidx_fd = -1
        self.handle = None
        self.fd = -1

    def delete(self) -> None:
        """Release the segment and remove its files (the .log first: see the module rules)."""
        paths = (self.log_path, self.index_path, self.timeindex_path)
        self.release()
        for path in paths:
            try:
                path.unlink()
            except FileNotFoundError:
                pass


def walk_batches(fd: int, file_size: int) -> Iterator[tuple[int, tuple[int, ...], str | None]]:
    """Walk the batches of a segment's .log file from its start, checking each.

    Yields ``(position, header, fault)`` per batch: ``header`` the
    :data:`SCAN_HEADER` fields, ``fault`` None for a sound batch, else what is
    wrong. A CRC32C mismatch (``"CRC mismatch"``) leaves the batch's length
    trusted and the walk goes on to the next batch; a batch whose header cannot
    be read, whose magic or length is impossible, or that runs past the end of
    the file (torn) ends the walk (its ``header`` is then empty, or what could
    be read). The file is read a block at a time and large batches are
    checksummed piecewise, so a length (even a corrupt one) never decides how
    much memory a walk takes.

    Raises:
        OSError: a read failed.
    """
    pos = 0
    buf = b""
    buf_start = 0
    unpack = SCAN_HEADER.unpack_from
    while pos < file_size:
        if file_size - pos < BATCH_HEADER_SIZE:
            yield pos, (), "torn batch header"
            return
        rel = pos - buf_start
        if rel + BATCH_HEADER_SIZE > len(buf):
            buf = pread_all(fd, pos, min(_RECOVERY_BLOCK, file_size - pos))
            buf_start, rel = pos, 0
        header = unpack(buf, rel)
        length, magic, crc = header[1], header[3], header[4]
        b_size = length + LOG_OVERHEAD
        if magic != 2 or length < MIN_BATCH_LENGTH:
            yield pos, header, f"bad magic {magic} or length {length}"
            return
        if pos + b_size > file_size:
            yield pos, header, "torn batch"
            return
        if rel + b_size <= len(buf):
            computed = crc32c(memoryview(buf)[rel + 21 : rel + b_size])
        else:
            computed = _crc_of_range(fd, pos + 21, pos + b_size)
            buf = b""
        yield pos, header, None if computed == crc else "CRC mismatch"
        pos += b_size


class BrokenSegmentError(Exception):
    """A failed write could not be undone: the file may hold a partial batch."""


class _BadHeader(Exception):
    """Internal: a trusted file turned out to be inconsistent."""


def _write_entries(fd: int, data: bytes, size_before: int) -> None:
    try:
        write_all(fd, data)
    except OSError:
        _ftruncate(fd, size_before)
        raise


def _crc_of_range(fd: int, start: int, end: int) -> int:
    value = 0
    while start < end:
        chunk = pread_all(fd, start, min(_RECOVERY_BLOCK, end - start))
        value = crc32c(chunk, value)
        start += len(chunk)
    return value


def _read_whole(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return pread_all(fd, 0, size) if size else b""


def pread_all(fd: int, position: int, length: int) -> bytes:
    """Read exactly ``length`` bytes at ``position``.

    Raises:
        OSError: the file ended early (EIO) or the read failed.
    """
    data = os.pread(fd, length, position)
    if len(data) == length:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, position + got)
        if not more:
            raise OSError(errno.EIO, f"short read: {got} of {length} bytes at {position}")
        parts.append(more)
        got += len(more)
    return b"".join(parts)
