"""Log compaction (Kafka's log cleaner) for one partition log.

A topic whose ``cleanup.policy`` includes ``compact`` keeps, for every key, at
least its latest value. :class:`~trafka.brokerlite.storage.partition.PartitionLog` plans a
pass (:meth:`~trafka.brokerlite.storage.partition.PartitionLog.plan_cleaning`), a
:class:`CleaningPass` does the heavy part (:meth:`CleaningPass.run`, safe in a
worker thread), and the log swaps the result in
(:meth:`~trafka.brokerlite.storage.partition.PartitionLog.finish_cleaning`).

Rules (Kafka's, with the differences named):

* Only *cleanable* segments are touched: a prefix of the log's segments, never
  the active one, each wholly below the last stable offset (no open transaction
  in it) and, with ``min.compaction.lag.ms``, none newer than the lag. The
  *clean offset* (kept in the partition's checkpoint) splits them into the clean
  section, compacted by an earlier pass, and the dirty section after it.
* A pass maps each key of the dirty section to its latest offset (up to
  ``max_keys`` keys: the map stops after the segment that fills it, and the
  pass covers that far). It then rewrites every cleanable segment up to the end
  of the map, and drops a record when:
  - a later record of its key is in the map;
  - it has no key (producers cannot write one to a compacted topic; older data can);
  - it belongs to an aborted transaction;
  - it is a tombstone (null value), the latest of its key, older than
    ``delete.retention.ms``. brokerlite measures that age from the record's
    timestamp; Kafka (KIP-534) measures it from the pass that first saw the
    tombstone, so brokerlite may drop a tombstone sooner when producers' clocks
    lag, never while a consumer that started within ``delete.retention.ms`` of
    the write could still need it to.
* A pass is due when the dirty bytes reach ``min.cleanable.dirty.ratio`` of the
  cleanable bytes, when the oldest dirty segment is older than
  ``max.compaction.lag.ms``, or when a tombstone kept by an earlier pass has
  outlived ``delete.retention.ms`` (as with Kafka's KIP-534; brokerlite remembers
  that time in memory only, so after a restart it waits for the next pass that
  new data brings).
* Control batches (transaction markers) are kept. Kafka removes them once their
  transaction holds no data; keeping them costs a few bytes and no correctness.
* A batch keeps its base offset, last offset delta and producer fields; its
  records keep their offsets (:func:`~trafka.codec.records.rebuild_batch`). A
  batch whose records all stay is copied byte for byte. A batch left empty is
  removed, except a producer's last batch, which stays as an empty batch so that
  producer state rebuilt from the log still knows the producer's sequence and
  epoch (Kafka does the same).
* Offsets therefore stay increasing but may have gaps: readers get the next batch
  after a removed offset, as from Kafka.
* Consecutive segments are merged while the result stays within
  ``segment.bytes`` (by the sources' sizes) and within an int32 offset range
  (the index stores relative offsets); each group becomes one segment named by
  its first base offset, so the log start offset never moves.

Crash safety: a group is written to ``<base>.log.cleaned`` and fsynced, then
renamed to ``<base>.<next>.swap`` (``next``: the base offset of the segment after
the group), then the group's old files are deleted and the swap file is renamed
to ``<base>.log``. On open (:func:`complete_swaps`) a swap file finishes its
swap (the old files in ``[base, next)`` go, the swap becomes the segment) and a
``.cleaned`` file is deleted: after a crash a group is either wholly old or
wholly new.

Threading: :meth:`CleaningPass.run` reads only the source segments' file
descriptors, held open by the pass (:class:`~trafka.brokerlite.storage.segment.FileHandle`),
and writes only its own new files, so the broker's loop keeps appending to the
active segment meanwhile. The log checks, when swapping, that the segments are
still the ones planned (retention, DeleteRecords or a topic deletion may have
removed some); otherwise it throws the pass away.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from trafka.codec.records import (
    Record,
    RecordBatchHeader,
    decode_batch,
    read_batch_header,
    rebuild_batch,
)

from .segment import (
    BATCH_HEADER_SIZE,
    INT32_MAX,
    FileHandle,
    Segment,
    pread_all,
    segment_name,
    write_all,
)

__all__ = [
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
    "CleaningCancelled",
    "CleaningPass",
    "CleanedGroup",
    "CleaningStats",
    "Source",
    "complete_swaps",
]

logger = logging.getLogger("trafka.brokerlite.cleaner")

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

# How much of a source segment is read at a time, and written to a cleaned file.
_READ_BLOCK = 1 << 20
_WRITE_BLOCK = 1 << 20
# The most keys one pass maps; Kafka bounds its map by memory the same way.
DEFAULT_MAX_KEYS = 2_000_000

_fdatasync = getattr(os, "fdatasync", os.fsync)


class CleaningCancelled(Exception):
    """The pass was cancelled (the broker is stopping)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    """A segment a pass reads: what it was when the pass was planned.

    Attributes:
        segment: the log's segment object (identity is checked when swapping).
        handle: keeps the .log file's descriptor open for the pass.
        base_offset: the segment's base offset.
        size: its bytes (a closed segment does not grow).
        next_base: the base offset of the segment after it in the log.
        mtime_ms: its modification time (the age of records without a timestamp).
    """

    segment: Segment
    handle: FileHandle
    base_offset: int
    size: int
    next_base: int
    mtime_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class CleanedGroup:
    """One group of source segments rewritten into one cleaned file.

    Attributes:
        sources: the segments it replaces, in order.
        path: the ``.cleaned`` file (fsynced).
        next_base: the base offset of the segment after the group.
        size: the cleaned file's bytes.
    """

    sources: tuple[Source, ...]
    path: Path
    next_base: int
    size: int

    @property
    def base_offset(self) -> int:
        return self.sources[0].base_offset

    def swap_path(self) -> Path:
        """Where the cleaned file sits while the old segments are being replaced."""
        return self.path.parent / (
            f"{segment_name(self.base_offset)}.{segment_name(self.next_base)}{SWAP_SUFFIX}"
        )


@dataclasses.dataclass(slots=True)
class CleaningStats:
    """What a pass did.

    Attributes:
        bytes_read: bytes of the segments rewritten.
        bytes_written: bytes of the cleaned segments.
        records_read: records decoded.
        records_kept: records kept.
        keys: distinct keys in the map.
        end_offset: where the mapped (dirty) section ends: the next clean offset.
        oldest_tombstone_ms: the age reference of the oldest tombstone kept (None
            when none was kept): it is due to go ``delete.retention.ms`` later.
    """

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    keys: int = 0
    end_offset: int = 0
    oldest_tombstone_ms: int | None = None


class CleaningPass:
    """One compaction pass over a prefix of a partition log's segments.

    Made by :meth:`~trafka.brokerlite.storage.partition.PartitionLog.plan_cleaning`; see the
    module docstring for what it keeps and how it stays crash-safe.
    """

    def __init__(
        self,
        directory: Path,
        sources: Sequence[Source],
        *,
        dirty_index: int,
        aborted: Mapping[int, Sequence[tuple[int, int]]],
        producer_last_offsets: Mapping[int, int],
        delete_horizon_ms: int,
        segment_bytes: int,
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        """Internal: see :meth:`~trafka.brokerlite.storage.partition.PartitionLog.plan_cleaning`.

        Args:
            directory: the partition's directory.
            sources: the cleanable segments, oldest first.
            dirty_index: the first source of the dirty section.
            aborted: per producer id, its aborted transactions' ``(first offset,
                marker offset)`` ranges.
            producer_last_offsets: per producer id, the last offset of its last batch
                (that batch is never removed, only emptied).
            delete_horizon_ms: tombstones older than this may go.
            segment_bytes: the largest merged segment.
            max_keys: the most keys to map.
        """
        self.directory = directory
        self.sources = list(sources)
        self.dirty_index = dirty_index
        self._aborted = {
            pid: (sorted(r[0] for r in ranges), sorted(ranges))
            for pid, ranges in aborted.items()
            if ranges
        }
        self._producer_last = dict(producer_last_offsets)
        self.delete_horizon_ms = delete_horizon_ms
        self.segment_bytes = segment_bytes
        self.max_keys = max_keys
        self.groups: list[CleanedGroup] = []
        self.stats = CleaningStats()
        self._cancel = threading.Event()

    def cancel(self) -> None:
        """Ask a running :meth:`run` to stop soon (it raises :class:`CleaningCancelled`)."""
        self._cancel.set()

    def discard(self) -> None:
        """Delete the cleaned files written so far (the pass is thrown away)."""
        for group in self.groups:
            for path in (group.path, group.swap_path()):
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    logger.warning("cannot delete %s: %s", path, exc)
        self.groups = []

    # -- the pass ------------------------------------------------------------------------

    def run(self) -> None:
        """Map the dirty section's keys, then write the cleaned groups.

        Safe to call in a worker thread (see the module docstring). On any error
        the files written so far are deleted.

        Raises:
            CleaningCancelled: :meth:`cancel` was called.
            OSError: reading a segment or writing a cleaned file failed.
            CodecError: a batch in a segment cannot be decoded.
        """
        try:
            latest, mapped = self._build_map()
            self.stats.keys = len(latest)
            end = self.sources[mapped - 1].next_base
            self.stats.end_offset = end
            for group in self._groups(self.sources[:mapped]):
                self.groups.append(self._write_group(group, latest))
        except BaseException:
            self.discard()
            raise

    def _batches(self, source: Source) -> Iterator[bytes]:
        """Every batch of a source, read in big blocks."""
        fd = source.handle.fd
        pos = 0
        while pos < source.size:
            if self._cancel.is_set():
                raise CleaningCancelled
            block = pread_all(fd, pos, min(_READ_BLOCK, source.size - pos))
            view = memoryview(block)
            rel = 0
            while len(block) - rel >= BATCH_HEADER_SIZE:
                size = read_batch_header(view, rel).size
                if rel + size > len(block):
                    break
                yield bytes(view[rel : rel + size])
                rel += size
            if rel == 0:
                # One batch larger than the block: read it whole (its length was
                # validated when it was appended or recovered).
                size = read_batch_header(block).size
                yield pread_all(fd, pos, size)
                rel = size
            pos += rel

    def _is_aborted(self, producer_id: int, offset: int) -> bool:
        found = self._aborted.get(producer_id)
        if found is None:
            return False
        firsts, ranges = found
        i = bisect.bisect_right(firsts, offset) - 1
        while i >= 0:
            first, last = ranges[i]
            if first <= offset < last:
                return True
            if last <= offset:
                # Ranges of one producer do not overlap: an earlier one ends sooner.
                return False
            i -= 1
        return False

    def _records(self, header: RecordBatchHeader, data: bytes) -> tuple[Record, ...] | None:
        """The records of a data batch that may hold keys; None for batches kept as they are."""
        if header.is_control:
            return None
        if header.is_transactional and self._is_aborted(header.producer_id, header.base_offset):
            return ()
        return tuple(decode_batch(data).records)

    def _build_map(self) -> tuple[dict[bytes, int], int]:
        latest: dict[bytes, int] = {}
        mapped = self.dirty_index
        for source in self.sources[self.dirty_index :]:
            for data in self._batches(source):
                records = self._records(read_batch_header(data), data)
                if not records:
                    continue
                for record in records:
                    if record.key is not None:
                        latest[record.key] = record.offset
            mapped += 1
            if len(latest) >= self.max_keys:
                break
        return latest, mapped

    def _groups(self, sources: list[Source]) -> list[list[Source]]:
        groups: list[list[Source]] = []
        for source in sources:
            if groups:
                group = groups[-1]
                size = sum(s.size for s in group) + source.size
                if (
                    size <= self.segment_bytes
                    and source.next_base - 1 - group[0].base_offset <= INT32_MAX
                ):
                    group.append(source)
                    continue
            groups.append([source])
        return groups

    def _write_group(self, group: list[Source], latest: dict[bytes, int]) -> CleanedGroup:
        path = self.directory / (segment_name(group[0].base_offset) + ".log" + CLEANED_SUFFIX)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags, 0o644)
        written = 0
        try:
            pending: list[bytes] = []
            pending_bytes = 0
            for source in group:
                self.stats.bytes_read += source.size
                for data in self._batches(source):
                    kept = self._clean_batch(data, latest, source.mtime_ms)
                    if kept is None:
                        continue
                    pending.append(kept)
                    pending_bytes += len(kept)
                    if pending_bytes >= _WRITE_BLOCK:
                        write_all(fd, b"".join(pending))
                        written += pending_bytes
                        pending, pending_bytes = [], 0
            if pending:
                write_all(fd, b"".join(pending))
                written += pending_bytes
            _fdatasync(fd)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        os.close(fd)
        self.stats.bytes_written += written
        return CleanedGroup(tuple(group), path, group[-1].next_base, written)

    def _clean_batch(self, data: bytes, latest: dict[bytes, int], mtime_ms: int) -> bytes | None:
        """The batch to write for ``data``: itself, a rebuilt one, an empty one, or None."""
        header = read_batch_header(data)
        records = self._records(header, data)
        if records is None:
            return data
        self.stats.records_read += header.records_count if records == () else len(records)
        horizon = self.delete_horizon_ms
        kept: list[Record] = []
        for record in records:
            key = record.key
            if key is None:
                continue
            newest = latest.get(key)
            if newest is not None and newest > record.offset:
                continue
            if record.value is None:
                age_from = record.timestamp if record.timestamp >= 0 else mtime_ms
                if age_from < horizon:
                    continue
                oldest = self.stats.oldest_tombstone_ms
                if oldest is None or age_from < oldest:
                    self.stats.oldest_tombstone_ms = age_from
            kept.append(record)
        self.stats.records_kept += len(kept)
        if len(kept) == len(records) and records:
            return data
        if kept:
            return rebuild_batch(header, kept)
        pid = header.producer_id
        if pid >= 0 and self._producer_last.get(pid) == header.last_offset:
            return rebuild_batch(header, [])
        return None


def complete_swaps(directory: Path) -> int:
    """Finish the swaps a crash interrupted in a partition directory (call before opening it).

    For each ``<base>.<next>.swap`` file, the old segment files with a base offset
    in ``[base, next)`` are deleted and the swap file becomes ``<base>.log``.

    Returns:
        How many swaps were completed.

    Raises:
        OSError: a file cannot be deleted or renamed.
    """
    done = 0
    names = os.listdir(directory)
    for name in sorted(names):
        if not name.endswith(SWAP_SUFFIX):
            continue
        parts = name[: -len(SWAP_SUFFIX)].split(".")
        if len(parts) != 2 or not all(len(p) == 20 and p.isdigit() for p in parts):
            logger.warning("%s: ignoring unexpected file %s", directory, name)
            continue
        base, next_base = int(parts[0]), int(parts[1])
        for other in names:
            stem, _, ext = other.partition(".")
            if (
                ext in ("log", "index", "timeindex")
                and len(stem) == 20
                and stem.isdigit()
                and base <= int(stem) < next_base
            ):
                (directory / other).unlink(missing_ok=True)
        os.replace(directory / name, directory / (segment_name(base) + ".log"))
        logger.warning("%s: completed the interrupted swap of segment %d", directory, base)
        done += 1
    if done:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return done
