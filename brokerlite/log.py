"""brokerlite's storage: partition logs on disk, and the durable topic registry.

Layout of a data directory::

    <data_dir>/.lock                        flock'd while a LogManager owns the directory
    <data_dir>/trafka-topics.json           the topic registry (written atomically)
    <data_dir>/<topic>-<partition>/         one directory per partition:
        00000000000000000000.log            segments, named by base offset (see segment.py)
        00000000000000000000.index
        00000000000000000000.timeindex
        trafka.checkpoint                   log start offset, recovery point, clean offset,
                                            replicated gaps offset (when not 0) and, once
                                            tracked, the high watermark (JSON, atomic)
        leader-epoch-checkpoint             the leader epoch cache (Kafka's text format, atomic)
        .clean-shutdown                     present only while the files are known consistent

Rules and invariants of a :class:`PartitionLog`:

* Offsets are assigned on append, contiguously from ``log_end_offset``, by
  rewriting each batch's base offset in place; batches are otherwise stored as
  received. Every batch of an append is validated (size, magic 2, CRC32C, header
  consistency, ``message_max_bytes``) before a single byte is written, so bad
  input never reaches the files.
* A follower's append (:meth:`PartitionLog.append_replicated`) stores the
  leader's batches byte for byte: nothing is rewritten, and only the structural
  checks apply (length, magic 2, CRC32C, header consistency, ``segment_bytes``;
  not ``message_max_bytes`` nor the rules for clients, which the leader
  applied). Offsets may have gaps, as a compacted leader serves them (Kafka's
  rule): the first batch must start at or after ``log_end_offset`` and each
  next one after the previous batch's last offset; an overlap or an offset
  going backwards writes nothing. The one exception is Kafka's too: when the
  log is empty (log start = log end) and the first batch *holds* the log end
  offset (the leader's log start fell inside it), the log first restarts empty
  at that batch's base offset (:meth:`PartitionLog.truncate_fully_and_start_at`).
  The log end offset becomes the last batch's last offset + 1. Both kinds of
  append share one write path (rolling, indexes, flushing, marker).
* Which segments may hold offset gaps is decided per segment, from the
  checkpoint: those whose base offset is below the clean offset (compaction
  rewrote them) or below the *replicated gaps offset*. Before the first
  replicated batch that leaves a gap is written into a segment whose base
  offset is not below that offset, the offset is raised to the segment's base
  + 1 and the checkpoint written and fsynced (so at most one extra fsync per
  segment, none for contiguous appends): any open, after a crash or a power
  loss, then accepts that segment's gaps, in recovery as in trusted loading.
  Every other segment keeps the contiguity check (and every segment the checks
  against offsets going backwards and past the next segment). Truncation lowers
  the replicated gaps offset to the new log end, as it does the clean offset,
  and an open to the log end.
* The leader epoch cache holds ``(epoch, start offset)`` pairs, strictly
  increasing in both, every start offset at most ``log_end_offset``. Every append
  adds ``(epoch, base offset)`` for a batch whose ``partition_leader_epoch``
  exceeds the latest cached epoch; :meth:`PartitionLog.assign_epoch` follows
  Kafka's ``assign`` (conflicting later entries are dropped). The file is
  replaced atomically on every change: fsynced, except after an append, whose
  durability it shares (an append never waits for an fsync). The file is
  fsynced before the recovery point moves past anything it lags, so its
  entries below the recovery point are durable; an open after a crash keeps
  those and rebuilds the rest from the batch headers of the segments it
  validates anyway. A missing or unreadable file is rebuilt from every batch
  header. Every open drops the entries at or after the log end, and those below
  the log start offset but the one covering it, which moves to start there (as
  retention and DeleteRecords do while running).
* :meth:`PartitionLog.truncate_to` removes every batch whose last offset is at
  or beyond the target (a batch holding it goes whole): segments above are
  deleted newest first, the one holding the target is cut in place and fsynced,
  then the epoch cache, high watermark, recovery point and checkpoint follow.
  The clean-shutdown marker is removed and the recovery point lowered to the
  cut segment first, so a crash at any step leaves a prefix of the old log that
  the next open validates. :meth:`PartitionLog.truncate_fully_and_start_at`
  removes the epoch checkpoint first (a crash then rebuilds it from whatever is
  left), deletes every segment and restarts empty at the given offset. A
  compaction pass planned before a truncation is cancelled and never swapped in.
  Truncation cuts files in place: read chunks taken before it, beyond the new
  end, must not be used.
* An append is one ``write()`` of all its batches to the active segment. If the
  write (or an index write) fails, the files are truncated back to where they
  were and :class:`~trafka.brokerlite.errors.LogStorageError` is raised; if even
  that fails, the log goes offline (every later call raises) until the broker
  restarts, or :meth:`LogManager.reopen_partition` opens it again after a check,
  as a restart would. Failed writes are logged as warnings and going offline as
  an error, naming the partition, the file and the OS error (at most a line a
  minute of each per partition).
* ``log_start_offset <= high_watermark <= log_end_offset``. The high watermark
  is ``log_end_offset`` (single node) until :meth:`PartitionLog.set_high_watermark`
  is first called; from then on it is tracked: clamped into that range on every
  change (set, truncation, log start moves), written in ``trafka.checkpoint`` on
  flush, close, roll, truncation and :meth:`PartitionLog.checkpoint_high_watermark`
  (not on every change, as Kafka), and reloaded clamped on open, so a restart
  never reports a higher one than was reached. DeleteRecords stops at it and
  retention deletes only segments wholly below it. Reads are served only from
  ``[log_start_offset, log_end_offset)`` and always return whole batches.
* Segments roll when the next append would push the active segment past
  ``segment_bytes``, or when it is older than ``segment_ms``. Retention deletes
  whole segments from the oldest, never the active one.

Durability policy:

* An append is acknowledged once ``write()`` has put it in the OS page cache:
  it survives a crash (``kill -9``) of the broker process, not a power loss.
* ``fsync`` happens every ``flush_interval_messages`` records and/or every
  ``flush_interval_ms`` (``None`` for both, the default, leaves it to the OS, as
  Kafka's defaults do), on :meth:`PartitionLog.flush`, on every segment roll
  (the finished segment) and on close.
* Recovery: a segment roll fsyncs the finished segment and then records the new
  segment's base offset as the *recovery point*; a clean close writes the
  ``.clean-shutdown`` marker after an fsync. On open without the marker, every
  segment holding offsets at or above the recovery point is validated batch by
  batch (length, magic, CRC32C, contiguous offsets), truncated after the last
  good batch, and its indexes rebuilt; a corrupt segment also drops the
  segments after it. Older segments, and all segments after a clean shutdown,
  are opened from their indexes, and any inconsistency found there triggers the
  same validation. The marker is removed (and the removal fsynced) before the
  first write after open.

Not thread-safe: one task owns the logs. Everything here is synchronous file
I/O, sized to be cheap enough for an event loop: an append validates headers and
CRCs, rewrites 12 bytes per batch and makes one ``write()``; index entries are
kept in memory and reach the index files on flush (see ``segment.py``). A read
is one bisect over segments, one over the index and a short header scan.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import re
import shutil
import struct
import uuid
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from trafka.codec.crc import crc32c
from trafka.common.lograte import RateLimitedLog

from .cleaner import (
    CLEANED_SUFFIX,
    CleanedGroup,
    CleaningPass,
    CleaningStats,
    Source,
    complete_swaps,
)
from .errors import (
    CorruptRecordError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTopicError,
    LogStorageError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from .segment import (
    BATCH_HEADER_SIZE,
    INT32_MAX,
    LOG_OVERHEAD,
    BrokenSegmentError,
    FileHandle,
    Segment,
    pread_all,
    write_all,
)

__all__ = [
    "AppendResult",
    "ConfigEntry",
    "ConfigSource",
    "ConfigType",
    "FileChunk",
    "LogConfig",
    "LogManager",
    "PartitionLog",
    "ReadResult",
    "TopicInfo",
    "validate_topic_name",
]

logger = logging.getLogger("trafka.brokerlite.log")
# Storage failures, at most one line a minute per partition and kind (a full disk
# fails every Produce).
_storage_log = RateLimitedLog(logger)

CHECKPOINT_FILE = "trafka.checkpoint"
EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"
REGISTRY_FILE = "trafka-topics.json"
LOCK_FILE = ".lock"

_LONG_MAX = 2**63 - 1
# The leader checked message_max_bytes: a follower stores what it accepted.
_NO_SIZE_LIMIT = _LONG_MAX

# The whole 61-byte batch header, in wire order.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
# What the log rewrites in place on append: base_offset, batch_length (unchanged),
# partition_leader_epoch. None of it is covered by the CRC.
_PREFIX = struct.Struct(">qii")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")

_CODEC_MASK = 0x07
_CONTROL_BIT = 0x20


# -- configuration ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    """The settings of one partition log (a topic's effective configuration).

    Attributes:
        segment_bytes: roll when an append would make the active segment larger.
        segment_ms: roll when the active segment's first append is older than this.
        retention_ms: delete segments whose newest timestamp is older than this (-1: never).
        retention_bytes: delete the oldest segments while the partition exceeds this (-1: no limit).
        index_interval_bytes: bytes between two offset-index entries.
        flush_interval_messages: fsync after this many records (None: leave it to the OS).
        flush_interval_ms: fsync when the last one is older than this (None: leave it to the OS).
        message_max_bytes: the largest batch accepted, header included.
        message_timestamp_type: ``CreateTime`` (keep the producer's timestamps) or
            ``LogAppendTime`` (the broker stamps each batch on append).
        cleanup_policy: ``delete``, ``compact`` or ``compact,delete``: ``delete``
            enables time/size retention, ``compact`` log compaction (``cleaner.py``).
        delete_retention_ms: how long compaction keeps a tombstone (a null value).
        min_cleanable_dirty_ratio: compact once this share of the cleanable bytes
            has not been compacted yet.
        min_compaction_lag_ms: records younger than this are not compacted.
        max_compaction_lag_ms: compact records older than this whatever the ratio.
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    retention_ms: int = 604800000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    flush_interval_messages: int | None = None
    flush_interval_ms: int | None = None
    message_max_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86_400_000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _LONG_MAX

    def __post_init__(self) -> None:
        if not 14 <= self.segment_bytes <= INT32_MAX:
            raise ValueError(
                f"segment_bytes must be in [14, {INT32_MAX}], got {self.segment_bytes}"
            )
        if self.segment_ms < 1:
            raise ValueError(f"segment_ms must be positive, got {self.segment_ms}")
        if self.retention_ms < -1 or self.retention_bytes < -1:
            raise ValueError("retention_ms and retention_bytes must be >= -1")
        if self.index_interval_bytes < 0 or self.message_max_bytes < 0:
            raise ValueError("index_interval_bytes and message_max_bytes must be >= 0")
        if self.flush_interval_messages is not None and self.flush_interval_messages < 1:
            raise ValueError("flush_interval_messages must be positive or None")
        if self.flush_interval_ms is not None and self.flush_interval_ms < 0:
            raise ValueError("flush_interval_ms must be >= 0 or None")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(
                "message_timestamp_type must be CreateTime or LogAppendTime, "
                f"got {self.message_timestamp_type!r}"
            )
        policies = self.cleanup_policy.split(",")
        if not policies or not set(policies) <= {"delete", "compact"}:
            raise ValueError(
                f"cleanup_policy must be delete and/or compact, got {self.cleanup_policy!r}"
            )
        if self.delete_retention_ms < 0 or self.min_compaction_lag_ms < 0:
            raise ValueError("delete_retention_ms and min_compaction_lag_ms must be >= 0")
        if self.max_compaction_lag_ms < 1:
            raise ValueError("max_compaction_lag_ms must be positive")
        if not 0 <= self.min_cleanable_dirty_ratio <= 1:
            raise ValueError("min_cleanable_dirty_ratio must be in [0, 1]")

    @property
    def compact(self) -> bool:
        """Whether the cleanup policy includes compaction."""
        return "compact" in self.cleanup_policy.split(",")


# -- results -------------------------------------------------------------------------------------


class AppendResult(NamedTuple):
    """What an append did (a tuple: appends are a hot path).

    Attributes:
        base_offset: offset of the first record appended.
        last_offset: offset of the last record appended.
        log_append_time_ms: the time stamped on the batches (LogAppendTime), else -1.
        log_start_offset: the log start offset after the append.
    """

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int


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


# -- leader epoch cache --------------------------------------------------------------------------


class _EpochCache:
    """Leader epochs and the offsets they start at (Kafka's LeaderEpochFileCache,
    in memory; :class:`PartitionLog` persists it).

    ``entries`` are ``(epoch, start_offset)`` pairs, strictly increasing in both.
    """

    __slots__ = ("entries",)

    def __init__(self, entries: Sequence[tuple[int, int]] = ()) -> None:
        self.entries: list[tuple[int, int]] = list(entries)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Kafka's ``assign``: nothing to do when ``epoch`` is the latest one and does
        not start earlier; otherwise every trailing entry whose epoch or start offset
        is not below the new one's is dropped, and the new entry appended.

        Returns:
            Whether the entries changed.
        """
        entries = self.entries
        if entries and entries[-1][0] == epoch and start_offset >= entries[-1][1]:
            return False
        while entries and (entries[-1][0] >= epoch or entries[-1][1] >= start_offset):
            entries.pop()
        entries.append((epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop the entries starting at or after ``end_offset``; whether any went."""
        entries = self.entries
        count = len(entries)
        while entries and entries[-1][1] >= end_offset:
            entries.pop()
        return len(entries) != count

    def truncate_from_start(self, start_offset: int) -> bool:
        """Drop the entries starting at or before ``start_offset`` but the last of them,
        which is moved to start at ``start_offset``; whether anything changed."""
        entries = self.entries
        covered = bisect_right(entries, start_offset, key=lambda entry: entry[1])
        if not covered or (covered == 1 and entries[0][1] == start_offset):
            return False
        entries[:covered] = [(entries[covered - 1][0], start_offset)]
        return True

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``; see :meth:`PartitionLog.end_offset_for_epoch`."""
        entries = self.entries
        if requested == -1:
            return -1, -1
        if entries and entries[-1][0] == requested:
            return requested, log_end_offset
        higher = bisect_right(entries, requested, key=lambda entry: entry[0])
        if higher == len(entries):
            return -1, -1
        if higher == 0:
            return requested, entries[0][1]
        return entries[higher - 1][0], entries[higher][1]


def _format_epochs(entries: Sequence[tuple[int, int]]) -> bytes:
    """Kafka's leader-epoch-checkpoint text: version 0, the count, one entry a line."""
    lines = ["0", str(len(entries)), *(f"{epoch} {start}" for epoch, start in entries)]
    return ("\n".join(lines) + "\n").encode()


def _read_epochs(path: Path) -> list[tuple[int, int]] | None:
    """The entries of a leader-epoch-checkpoint file; None when missing or unreadable."""
    try:
        lines = path.read_bytes().decode("ascii").splitlines()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        logger.warning("%s is unreadable (%s); rebuilding it from the log", path, exc)
        return None
    try:
        if len(lines) < 2 or lines[0].strip() != "0" or int(lines[1]) != len(lines) - 2:
            raise ValueError("bad version or count line")
        entries: list[tuple[int, int]] = []
        for line in lines[2:]:
            epoch_text, start_text = line.split()
            epoch, start = int(epoch_text), int(start_text)
            if epoch < 0 or start < 0:
                raise ValueError(f"negative entry {line!r}")
            if entries and (epoch <= entries[-1][0] or start <= entries[-1][1]):
                raise ValueError(f"entry {line!r} does not increase")
            entries.append((epoch, start))
    except ValueError as exc:
        logger.warning("%s is unreadable (%s); rebuilding it from the log", path, exc)
        return None
    return entries


def _scan_epochs(cache: _EpochCache, segments: Sequence[Segment]) -> None:
    """Assign the epochs the batches of ``segments`` start (a header scan), as appends do."""
    for seg in segments:
        for _, base, _, _, _, epoch in seg.iter_headers(0, seg.size):
            if epoch > cache.latest_epoch:
                cache.assign(epoch, base)


def _load_epochs(
    directory: Path,
    segments: Sequence[Segment],
    log_start: int,
    log_end: int,
    *,
    clean: bool,
    recovery_point: int,
) -> list[tuple[int, int]]:
    """The epoch cache of a log being opened.

    After a clean shutdown the file is complete. After a crash, only its entries
    below the recovery point are known durable: the rest are rebuilt from the
    batches of the segments that may hold offsets from the recovery point on. A
    missing or unreadable file is rebuilt from every batch. Then the entries before
    ``log_start`` (but the one covering it) and from ``log_end`` on go, and the
    file is rewritten (fsynced) when all that changed it.

    Raises:
        OSError: the scan or the rewrite failed.
    """
    path = directory / EPOCH_CHECKPOINT_FILE
    entries = _read_epochs(path)
    cache = _EpochCache(entries or ())
    if entries is None:
        _scan_epochs(cache, segments)
    elif not clean:
        cache.truncate_from_end(recovery_point)
        _scan_epochs(cache, [seg for seg in segments if seg.next_offset > recovery_point])
    cache.truncate_from_start(log_start)
    cache.truncate_from_end(log_end)
    if cache.entries != (entries or []) or (entries is None and path.exists()):
        atomic_write(path, _format_epochs(cache.entries))
    return cache.entries


# -- partition log -------------------------------------------------------------------------------


class PartitionLog:
    """One partition's log on disk. Use :meth:`open`; see the module docstring for the rules.

    Attributes:
        leader_epoch: written into each appended batch's ``partition_leader_epoch``
            (and so into the leader epoch cache when it exceeds the latest epoch);
            :meth:`append_replicated` keeps the leader's instead.
    """

    leader_epoch: int = 0

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[Segment],
        *,
        log_start_offset: int,
        recovery_point: int,
        clean_offset: int = 0,
        gaps_offset: int = 0,
        clean_marker: bool,
        now_ms: int,
        epochs: Sequence[tuple[int, int]] = (),
        high_watermark: int | None = None,
    ) -> None:
        """Internal: use :meth:`open`."""
        self._dir = directory
        self._config = config
        self._log_append_time = config.message_timestamp_type == "LogAppendTime"
        self._flush_policy = _has_flush_policy(config)
        self._segments = segments
        self._bases = [seg.base_offset for seg in segments]
        self._next_offset = segments[-1].next_offset
        self._log_start = log_start_offset
        self._recovery_point = recovery_point
        self._clean_offset = clean_offset
        # Segments whose base offset is below it may hold gaps a follower copied.
        self._gaps_offset = gaps_offset
        self._cleaning: CleaningPass | None = None
        self._uncleanable: str | None = None
        self._tombstones_due_ms: int | None = None
        self._clean_marker = clean_marker
        self._opened_clean = clean_marker
        self._unflushed = 0
        self._last_flush_ms = now_ms
        self._offline: str | None = None
        self._closed = False
        self._epochs = _EpochCache(epochs)
        # Whether the epoch file may lag the cache or not be durable (see _write_checkpoint).
        self._epochs_unsynced = False
        self._rp_saved = recovery_point  # the recovery point in the checkpoint file
        # None: not tracked, the log end offset is the high watermark (single node).
        self._hw = high_watermark
        self._hw_saved = high_watermark
        # Passes planned before a truncation: cancelled, never swapped in.
        self._voided: list[CleaningPass] = []

    # -- open ------------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, config: LogConfig, *, now_ms: int) -> PartitionLog:
        """Open the log in ``directory``, creating it, or recovering it after a crash.

        Args:
            directory: the partition's directory (created when missing).
            config: the log's settings.
            now_ms: the current time in ms since the epoch.

        Returns:
            The open log.

        Raises:
            LogStorageError: the files cannot be created or read.
        """
        try:
            return cls._open(directory, config, now_ms)
        except OSError as exc:
            raise LogStorageError(f"cannot open the log in {directory}: {exc}") from exc

    @classmethod
    def _open(cls, directory: Path, config: LogConfig, now_ms: int) -> PartitionLog:
        directory.mkdir(parents=True, exist_ok=True)
        complete_swaps(directory)
        log_bases: set[int] = set()
        index_files: list[tuple[int, str]] = []
        for name in os.listdir(directory):
            if name.endswith((".tmp", ".deleted", CLEANED_SUFFIX)):
                (directory / name).unlink()
                continue
            stem, _, ext = name.partition(".")
            if len(stem) != 20 or not stem.isdigit():
                continue
            if ext == "log":
                log_bases.add(int(stem))
            elif ext in ("index", "timeindex"):
                index_files.append((int(stem), name))
        for base, name in index_files:
            if base not in log_bases:
                (directory / name).unlink()
        checkpoint = _read_checkpoint(directory / CHECKPOINT_FILE)
        marker = directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists() and checkpoint is not None
        if marker.exists() and not clean:
            marker.unlink()
        log_start, recovery_point, clean_offset, gaps_offset, high_watermark = (
            checkpoint if checkpoint is not None else (0, 0, 0, 0, None)
        )
        gaps_below = max(clean_offset, gaps_offset)
        bases = sorted(log_bases)
        segments: list[Segment] = []
        try:
            for i, base in enumerate(bases):
                next_base = bases[i + 1] if i + 1 < len(bases) else None
                if segments and (segments[-1].next_offset > base or segments[-1].truncated):
                    # An overlap, or anything after a segment that recovery cut short:
                    # what follows cannot be trusted to continue it, as in Kafka. (A
                    # gap alone is what compaction leaves when it removes a segment's
                    # last batches.)
                    logger.warning(
                        "%s: segment %d does not follow offset %d; deleting it and later segments",
                        directory,
                        base,
                        segments[-1].next_offset,
                    )
                    for later in bases[i:]:
                        Segment(directory, later).delete()
                    break
                validate = not clean and (next_base is None or next_base > recovery_point)
                seg, recovered = Segment.load(
                    directory,
                    base,
                    index_interval_bytes=config.index_interval_bytes,
                    now_ms=now_ms,
                    validate=validate,
                    gaps=base < gaps_below,
                    offset_limit=next_base,
                )
                if recovered and clean:
                    # The marker vouched for files that were not consistent: stop
                    # trusting it, durably, before anything else changes.
                    marker.unlink()
                    _fsync_dir(directory)
                    clean = False
                if seg.size == 0 and next_base is not None and (segments or seg.truncated):
                    # Kept only as the first segment: compaction leaves an emptied
                    # first segment so that the log start offset stays where it is.
                    seg.delete()
                    continue
                if segments:
                    segments[-1].seal()
                segments.append(seg)
            if not segments:
                segments.append(Segment.create(directory, log_start))
        except BaseException:
            for seg in segments:
                seg.release()
            raise
        log_end = segments[-1].next_offset
        log_start = min(max(log_start, segments[0].base_offset), log_end)
        try:
            epochs = _load_epochs(
                directory, segments, log_start, log_end, clean=clean, recovery_point=recovery_point
            )
        except BaseException:
            for seg in segments:
                seg.release()
            raise
        return cls(
            directory,
            config,
            segments,
            log_start_offset=log_start,
            recovery_point=recovery_point,
            clean_offset=min(clean_offset, log_end),
            gaps_offset=min(gaps_offset, log_end),
            clean_marker=clean,
            now_ms=now_ms,
            epochs=epochs,
            high_watermark=(
                None if high_watermark is None else min(max(high_watermark, log_start), log_end)
            ),
        )

    # -- properties ------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The partition's directory."""
        return self._dir

    @property
    def config(self) -> LogConfig:
        """The log's current settings (change them with :meth:`reconfigure`)."""
        return self._config

    @property
    def opened_clean(self) -> bool:
        """Whether the log was opened after a clean close (not a crash or a first open)."""
        return self._opened_clean

    @property
    def log_start_offset(self) -> int:
        """The first offset that can be read."""
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._next_offset

    @property
    def high_watermark(self) -> int:
        """The tracked high watermark (see :meth:`set_high_watermark`), else
        :attr:`log_end_offset` (a single node)."""
        return self._next_offset if self._hw is None else self._hw

    @property
    def tracks_high_watermark(self) -> bool:
        """Whether :meth:`set_high_watermark` was ever called on this log (persisted)."""
        return self._hw is not None

    @property
    def size(self) -> int:
        """Total bytes of all segments."""
        return sum(seg.size for seg in self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        """The base offsets of the segments, oldest first (the last one is active)."""
        return list(self._bases)

    @property
    def active_segment_base_offset(self) -> int:
        """The base offset of the active (last) segment; it changes when the log rolls."""
        return self._bases[-1]

    @property
    def offline(self) -> str | None:
        """Why the log went offline (a write that could not be undone, a
        truncation or compaction swap that failed half-way), or None."""
        return self._offline

    @property
    def closed(self) -> bool:
        return self._closed

    def reconfigure(self, config: LogConfig) -> None:
        """Apply new settings; they take effect from the next call."""
        self._config = config
        self._log_append_time = config.message_timestamp_type == "LogAppendTime"
        self._flush_policy = _has_flush_policy(config)

    # -- append ----------------------------------------------------------------------------

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        now_ms: int,
        from_client: bool = True,
    ) -> AppendResult:
        """Validate record batches, assign their offsets and write them in one write.

        Args:
            records: one or more magic 2 batches, end to end, exactly as produced.
            now_ms: the current time (log-append timestamps, segment age, flushing).
            from_client: apply the rules Kafka applies to producers' batches (offset
                range matches the record count, no control batches, a producer id
                needs a sequence). The broker's own writes (transaction markers) pass
                False.

        Returns:
            The offsets assigned.

        Raises:
            CorruptRecordError: truncated input, a bad length or magic, or a CRC mismatch.
            RecordTooLargeError: a batch is larger than ``message_max_bytes``.
            RecordBatchTooLargeError: the append is larger than ``segment_bytes``.
            InvalidRecordError: no batches, a legacy (magic 0/1) batch, an unknown
                codec or an inconsistent header.
            LogStorageError: the write failed (nothing was written) or the log is offline.
        """
        if self._closed or self._offline is not None:
            self._check_usable()
        first = self._next_offset
        buf, batches, end, count, _, _ = self._prepare(
            records, now_ms, from_client=from_client, replicated=False
        )
        epoch = self.leader_epoch
        new_epochs = [(epoch, first)] if epoch > self._epochs.latest_epoch else []
        self._write(buf, batches, end, count, new_epochs, now_ms)
        log_append_time = now_ms if self._log_append_time else -1
        return AppendResult(first, end - 1, log_append_time, self._log_start)

    def append_replicated(
        self, records: bytes | bytearray | memoryview, *, now_ms: int
    ) -> AppendResult:
        """A follower's append: store the leader's batches exactly as the leader did.

        Nothing is rewritten (offsets, leader epochs, timestamps, attributes), and
        only the structural checks apply: the leader applied ``message_max_bytes``
        and the client rules when it accepted the batches. The epoch cache learns
        the epoch of every batch whose ``partition_leader_epoch`` exceeds the latest
        cached one.

        Offsets may have gaps (a compacted leader's log): the first batch must
        start at or after :attr:`log_end_offset`, each next one after the previous
        batch's last offset. When the log is empty (log start = log end) and the
        first batch holds the log end offset, the log restarts empty at that batch's
        base offset first (:meth:`truncate_fully_and_start_at`), as Kafka's follower
        does when the leader's log start offset is inside a batch.

        Args:
            records: whole magic 2 batches as the leader stores them (a fetch
                response's records).
            now_ms: the current time (segment age, flushing).

        Returns:
            The range written, from the first batch's base offset; ``log_append_time_ms``
            is -1.

        Raises:
            CorruptRecordError: truncated input, a bad length or magic, or a CRC mismatch.
            RecordBatchTooLargeError: the batches are larger than ``segment_bytes``.
            InvalidRecordError: no batches, a legacy (magic 0/1) batch, an unknown
                codec, an inconsistent header, or offsets that overlap the log or each
                other or go backwards (nothing is written).
            LogStorageError: the write failed (nothing was written) or the log is offline.
        """
        if self._closed or self._offline is not None:
            self._check_usable()
        buf, batches, end, count, new_epochs, gapped = self._prepare(
            records, now_ms, from_client=False, replicated=True
        )
        first = batches[0][2]
        if first < self._next_offset:
            # _prepare allowed it: an empty log, its end inside the first batch.
            self.truncate_fully_and_start_at(first)
        self._write(buf, batches, end, count, new_epochs, now_ms, gapped=gapped)
        return AppendResult(first, end - 1, -1, self._log_start)

    def _prepare(
        self,
        records: bytes | bytearray | memoryview,
        now_ms: int,
        *,
        from_client: bool,
        replicated: bool,
    ) -> tuple[bytearray, list[tuple[int, int, int, int]], int, int, list[tuple[int, int]], bool]:
        """Validate every batch and, unless ``replicated``, assign offsets in place.

        Returns:
            ``(buf, batches, next_offset, record_count, new_epochs, gapped)``:
            ``batches`` as :meth:`Segment.append` takes them; ``new_epochs`` the epoch
            cache entries the batches' own leader epochs bring, and ``gapped`` whether
            the offsets leave a gap (``replicated`` only). A replicated first batch
            starting below the log end (allowed only as the module rules say) makes
            the offsets continue from its base offset.
        """
        buf = bytearray(records)
        n = len(buf)
        if not n:
            raise InvalidRecordError("the records are empty: at least one record batch is needed")
        view = memoryview(buf)
        cfg = self._config
        max_size = _NO_SIZE_LIMIT if replicated else cfg.message_max_bytes
        log_append = self._log_append_time
        epoch = self.leader_epoch
        latest_epoch = self._epochs.latest_epoch
        new_epochs: list[tuple[int, int]] = []
        offset = self._next_offset
        gapped = False
        unpack = _BATCH_HEADER.unpack_from
        prefix = _PREFIX.pack_into
        batches: list[tuple[int, int, int, int]] = []
        count_total = 0
        pos = 0
        append = batches.append
        while pos < n:
            if n - pos < BATCH_HEADER_SIZE:
                raise CorruptRecordError(
                    f"truncated record batch at byte {pos}: {n - pos} bytes cannot hold a header"
                )
            (base, length, b_epoch, magic, crc, attrs, lod, _, max_ts, pid, _, seq, count) = unpack(
                buf, pos
            )
            end = pos + length + 12
            # One combined test keeps the accepted path short; _reject names the fault.
            if (
                magic != 2
                or length < 49
                or end > n
                or end - pos > max_size
                or crc32c(view[pos + 21 : end]) != crc
                or lod < 0
                or attrs & 0x07 > 4
                or (from_client and (lod + 1 != count or attrs & 0x20 or (pid >= 0 and seq < 0)))
            ):
                _reject(view, pos, max_size, from_client)
            if replicated:
                if base > offset:
                    gapped = True
                elif base < offset:
                    if batches or base + lod < offset or offset != self._log_start:
                        _refuse_offset(pos, base, offset, first=not batches)
                    # The empty log restarts at ``base``, its epoch cache emptied.
                    latest_epoch = -1
                offset = base
                if b_epoch > latest_epoch:
                    new_epochs.append((b_epoch, base))
                    latest_epoch = b_epoch
            else:
                if log_append:
                    max_ts = now_ms
                    _stamp(buf, view, pos, end, attrs | 0x08, now_ms)
                elif attrs & 0x08:
                    # A CreateTime topic keeps the producer's timestamps, whatever it claimed.
                    _stamp(buf, view, pos, end, attrs & ~0x08, max_ts)
                prefix(buf, pos, offset, length, epoch)
            append((pos, end - pos, offset, max_ts))
            offset += lod + 1
            count_total += count
            pos = end
        view.release()
        if from_client and cfg.compact:
            _check_keys(buf, batches)
        if n > cfg.segment_bytes:
            raise RecordBatchTooLargeError(
                f"{n} bytes of record batches cannot fit a segment of segment.bytes={cfg.segment_bytes}"
            )
        return buf, batches, offset, count_total, new_epochs, gapped

    def _write(
        self,
        buf: bytearray,
        batches: list[tuple[int, int, int, int]],
        next_offset: int,
        count: int,
        new_epochs: Sequence[tuple[int, int]],
        now_ms: int,
        *,
        gapped: bool = False,
    ) -> None:
        """The write path of every append: roll if due, epoch cache, one write, flush policy.

        ``gapped``: the batches leave an offset gap, so the segment they go to must
        be gap-tolerant on open (see the module rules) before they are written.
        """
        cfg = self._config
        seg = self._segments[-1]
        if seg.size and (
            seg.size + len(buf) > cfg.segment_bytes
            or now_ms - seg.roll_base_ms > cfg.segment_ms
            or next_offset - 1 - seg.base_offset > INT32_MAX
        ):
            seg = self._roll()
        if self._clean_marker:
            self._mark_dirty()
        if gapped and seg.base_offset >= self._gaps_offset:
            previous = self._gaps_offset
            self._gaps_offset = seg.base_offset + 1
            try:
                self._write_checkpoint()
            except OSError as exc:
                self._gaps_offset = previous
                raise self._write_failed(
                    f"{self._dir}: cannot write the checkpoint, nothing appended: {exc}"
                ) from exc
        try:
            seg.append(buf, batches, next_offset, interval=cfg.index_interval_bytes, now_ms=now_ms)
        except BrokenSegmentError as exc:
            self._go_offline(f"a failed write could not be undone: {exc}", exc)
        except OSError as exc:
            raise self._write_failed(
                f"{seg.log_path}: write failed, nothing appended: {exc}"
            ) from exc
        self._next_offset = next_offset
        self._unflushed += count
        if new_epochs:
            for epoch, start in new_epochs:
                self._epochs.assign(epoch, start)
            # Not fsynced, like the batches: the next open rebuilds what a crash lost.
            self._save_epochs_or_defer(sync=False)
        if self._flush_policy and self._flush_due(now_ms):
            self._flush_segment(now_ms)

    # -- leader epochs ---------------------------------------------------------------------

    @property
    def latest_epoch(self) -> int:
        """The latest epoch in the leader epoch cache; -1 when it is empty."""
        return self._epochs.latest_epoch

    @property
    def epoch_entries(self) -> list[tuple[int, int]]:
        """The leader epoch cache: ``(epoch, start_offset)`` pairs, oldest first."""
        return list(self._epochs.entries)

    def assign_epoch(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (a new leader: its epoch, its
        log end offset), with Kafka's rule: nothing happens when ``epoch`` is already
        the latest epoch and does not start earlier; otherwise every trailing entry
        whose epoch or start offset is not below the new one's is dropped first.

        Returns:
            Whether the cache changed (it is then written before returning).

        Raises:
            ValueError: a negative epoch or offset, or an offset past the log end.
            LogStorageError: the checkpoint cannot be written (the cache is unchanged)
                or the log is offline.
        """
        self._check_usable()
        if epoch < 0 or not 0 <= start_offset <= self._next_offset:
            raise ValueError(
                f"cannot assign epoch {epoch} at offset {start_offset} "
                f"(the log ends at {self._next_offset})"
            )
        previous = list(self._epochs.entries)
        if not self._epochs.assign(epoch, start_offset):
            return False
        try:
            self._write_epochs(sync=True)
        except OSError as exc:
            self._epochs.entries = previous
            raise LogStorageError(
                f"{self._dir}: cannot write the leader epoch checkpoint: {exc}"
            ) from exc
        return True

    def end_offset_for_epoch(self, requested_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: where ``requested_epoch`` ends in this log.

        Kafka's ``LeaderEpochFileCache.endOffsetFor``, exactly:

        * ``requested_epoch`` is -1 (undefined): ``(-1, -1)``;
        * it is the latest cached epoch: ``(latest, log_end_offset)``;
        * no cached epoch is above it (it is above the latest, or the cache is
          empty): ``(-1, -1)``;
        * no cached epoch is at or below it (older than the whole cache):
          ``(requested_epoch, start offset of the first cached epoch)``;
        * otherwise ``(largest cached epoch <= requested, start offset of the
          first cached epoch above it)``.

        Returns:
            ``(epoch, end_offset)``.

        Raises:
            LogStorageError: the log is closed or offline.
        """
        self._check_usable()
        return self._epochs.end_offset_for(requested_epoch, self._next_offset)

    def _write_epochs(self, *, sync: bool) -> None:
        """Write the epoch cache's file, fsynced with ``sync``.

        Without ``sync`` the file may lag: it is written again, fsynced, before the
        recovery point next moves (see :meth:`_write_checkpoint`).

        Raises:
            OSError: the write failed.
        """
        self._epochs_unsynced = True
        path = self._dir / EPOCH_CHECKPOINT_FILE
        atomic_write(path, _format_epochs(self._epochs.entries), sync=sync)
        self._epochs_unsynced = not sync

    def _save_epochs_or_defer(self, *, sync: bool = True) -> None:
        """:meth:`_write_epochs`, a failure only logged: the entries from the recovery
        point on are rebuilt from the batches on open, and the others are written
        before the recovery point moves."""
        try:
            self._write_epochs(sync=sync)
        except OSError as exc:
            logger.warning("%s: cannot write the leader epoch checkpoint: %s", self._dir, exc)

    # -- high watermark ----------------------------------------------------------------------

    def set_high_watermark(self, offset: int) -> int:
        """Set the high watermark; from then on it is tracked apart from the log end.

        It is persisted lazily (flush, close, roll, truncation,
        :meth:`checkpoint_high_watermark`), never ahead of what was set.

        Args:
            offset: the new high watermark (any direction).

        Returns:
            The high watermark, ``offset`` clamped into ``[log_start_offset, log_end_offset]``.

        Raises:
            LogStorageError: the log is closed or offline.
        """
        self._check_usable()
        self._hw = min(max(offset, self._log_start), self._next_offset)
        return self._hw

    def checkpoint_high_watermark(self) -> bool:
        """Write a tracked high watermark that changed since it was last written.

        Returns:
            Whether the checkpoint was written.

        Raises:
            LogStorageError: the write failed or the log is offline.
        """
        self._check_usable()
        if self._hw is None or self._hw == self._hw_saved:
            return False
        try:
            self._write_checkpoint()
        except OSError as exc:
            raise LogStorageError(f"{self._dir}: cannot write the checkpoint: {exc}") from exc
        return True

    # -- truncation --------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every record at ``offset`` and above (a follower whose log diverged).

        A batch holding ``offset`` goes whole (Kafka's ``LogSegment.truncateTo``), so
        the new log end offset can be below ``offset``. Segments wholly above go, the
        one holding ``offset`` is cut; the epoch cache loses the entries from the new
        end, a tracked high watermark is clamped to it, the log start offset is
        lowered to it if above, and it is all durable before returning. When
        ``offset`` is below the first segment, this is
        :meth:`truncate_fully_and_start_at`. Nothing happens when ``offset`` is at
        or beyond the log end offset. See the module rules for crash safety; a
        compaction pass planned before is cancelled.

        Returns:
            The log end offset afterwards.

        Raises:
            ValueError: a negative offset.
            LogStorageError: a file operation failed (before anything changed, or
                the log goes offline and the next open recovers) or the log is offline.
        """
        self._check_truncation(offset)
        if offset >= self._next_offset:
            return self._next_offset
        if offset < self._bases[0]:
            self.truncate_fully_and_start_at(offset)
            return offset
        self._begin_truncation()
        i = bisect_right(self._bases, offset) - 1
        cut = self._segments[i]
        if self._recovery_point > cut.base_offset:
            # Durably first: a crash from here on makes the next open validate the
            # cut segment (and drop anything after a half-cut one).
            previous = self._recovery_point
            self._recovery_point = cut.base_offset
            try:
                self._write_checkpoint()
            except OSError as exc:
                self._recovery_point = previous
                raise LogStorageError(
                    f"{self._dir}: cannot write the checkpoint, nothing truncated: {exc}"
                ) from exc
        try:
            doomed = self._segments[i + 1 :]
            for seg in reversed(doomed):  # newest first: what is left is always a prefix
                seg.delete()
            del self._segments[i + 1 :], self._bases[i + 1 :]
            if doomed:
                _fsync_dir(self._dir)
            cut.truncate_to(offset)
        except OSError as exc:
            self._go_offline(f"a truncation failed half-way: {exc}", exc)
        self._next_offset = end = cut.next_offset
        self._unflushed = 0  # the cut segment was just fsynced
        self._restart_at(min(self._log_start, end), min(self._clean_offset, end))
        if self._epochs.truncate_from_end(end):
            self._save_epochs_or_defer()
        return end

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Remove every segment and restart the log empty at ``offset`` (a follower
        behind its leader's log start offset): log start = log end = ``offset``, the
        epoch cache empty, a tracked high watermark at ``offset``.

        Raises:
            ValueError: a negative offset.
            LogStorageError: a file operation failed (before anything changed, or
                the log goes offline and the next open recovers) or the log is offline.
        """
        self._check_truncation(offset)
        self._begin_truncation()
        # Without its file the cache is rebuilt on open from whatever batches a crash
        # leaves, so it never outlives the data it describes.
        self._remove_durably(EPOCH_CHECKPOINT_FILE, "the leader epoch checkpoint")
        self._epochs.entries = []
        try:
            for seg in reversed(self._segments):
                seg.delete()
            self._segments.clear()
            self._bases.clear()
            _fsync_dir(self._dir)
            fresh = Segment.create(self._dir, offset)
        except OSError as exc:
            self._go_offline(f"a truncation failed half-way: {exc}", exc)
        self._segments.append(fresh)
        self._bases.append(offset)
        self._next_offset = offset
        self._unflushed = 0
        self._recovery_point = offset
        self._restart_at(offset, offset)
        self._save_epochs_or_defer()

    def _restart_at(self, log_start: int, clean_offset: int) -> None:
        """After a truncation: the new bounds, a clamped high watermark, the checkpoint."""
        self._log_start = log_start
        self._clean_offset = clean_offset
        # Every segment left ends at or before the log end: those below it keep
        # their gaps' tolerance, and a segment starting at the end holds nothing.
        self._gaps_offset = min(self._gaps_offset, self._next_offset)
        if self._hw is not None:
            self._hw = min(max(self._hw, log_start), self._next_offset)
        self._recovery_point = min(self._recovery_point, self._next_offset)
        try:
            self._write_checkpoint()
        except OSError as exc:
            # The old checkpoint could name a log start or high watermark the log
            # no longer has: only an open can sort that out.
            self._go_offline(f"cannot write the checkpoint after a truncation: {exc}", exc)

    def _check_truncation(self, offset: int) -> None:
        self._check_usable()
        if offset < 0:
            raise ValueError(f"cannot truncate the log to a negative offset {offset}")

    def _begin_truncation(self) -> None:
        """Cancel a planned compaction pass (it read segments about to change), and
        remove the clean-shutdown marker."""
        if self._cleaning is not None:
            self._cleaning.cancel()
            self._voided.append(self._cleaning)
            self._cleaning = None
        if self._clean_marker:
            self._mark_dirty()

    def _go_offline(self, reason: str, exc: BaseException) -> NoReturn:
        self._offline = reason
        _storage_log.error(
            ("offline", self._dir),
            "partition %s is OFFLINE: %s; it stays offline until the broker restarts, or "
            "until `trafka log-dirs reopen TOPIC PARTITION BROKER` brings it back",
            self._dir,
            reason,
        )
        raise LogStorageError(f"{self._dir}: {reason}") from exc

    def _write_failed(self, message: str) -> LogStorageError:
        """Log a failed write (its file and the OS error are in ``message``) and
        return the error that makes its request fail with KAFKA_STORAGE_ERROR."""
        _storage_log.warning(
            ("write", self._dir),
            "partition %s: %s (requests writing to it fail with KAFKA_STORAGE_ERROR)",
            self._dir,
            message,
        )
        return LogStorageError(message)

    # -- read ------------------------------------------------------------------------------

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

    # -- deletion --------------------------------------------------------------------------

    def delete_records(self, before_offset: int) -> int:
        """Move the log start offset (DeleteRecords), deleting segments wholly below it.

        Args:
            before_offset: the new log start offset; -1 means the high watermark.

        Returns:
            The log start offset afterwards (unchanged when ``before_offset`` is lower).

        Raises:
            OffsetOutOfRangeError: ``before_offset`` is above the high watermark.
            LogStorageError: the checkpoint cannot be written or the log is offline.
        """
        self._check_usable()
        limit = self.high_watermark
        if before_offset == -1:
            before_offset = limit
        if before_offset < 0 or before_offset > limit:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {before_offset}: the log ends at {self._next_offset}"
                + ("" if self._hw is None else f" and its high watermark is {self._hw}")
            )
        if before_offset > self._log_start:
            self._log_start = before_offset
            try:
                self._write_checkpoint()
            except OSError as exc:
                raise LogStorageError(f"{self._dir}: cannot write the checkpoint: {exc}") from exc
            self._delete_oldest(self._count_below_start(0))
            self._log_start_moved()
        return self._log_start

    def apply_retention(self, now_ms: int) -> int:
        """Delete old segments by time (``retention_ms``) and size (``retention_bytes``).

        Only whole segments go, oldest first, never the active one; segments wholly
        below the log start offset go too.

        Args:
            now_ms: the current time.

        Returns:
            The number of segments deleted.
        """
        self._check_usable()
        cfg = self._config
        candidates = self._segments[:-1]
        if self._hw is not None:
            # As Kafka: only segments wholly below the high watermark.
            candidates = candidates[: bisect_right(self._bases, self._hw, lo=1) - 1]
        count = 0
        if "delete" in cfg.cleanup_policy.split(","):
            if cfg.retention_ms >= 0:
                for seg in candidates:
                    newest = seg.max_timestamp if seg.max_timestamp >= 0 else seg.last_modified_ms()
                    if now_ms - newest <= cfg.retention_ms:
                        break
                    count += 1
            if cfg.retention_bytes >= 0:
                excess = sum(seg.size for seg in self._segments[count:]) - cfg.retention_bytes
                for seg in candidates[count:]:
                    if excess < seg.size:
                        break
                    excess -= seg.size
                    count += 1
        count = self._count_below_start(count)
        self._delete_oldest(count)
        return count

    def _count_below_start(self, count: int) -> int:
        """Extend ``count`` over the non-active segments that hold nothing readable."""
        segments = self._segments
        while count < len(segments) - 1 and segments[count].next_offset <= self._log_start:
            count += 1
        return count

    def _delete_oldest(self, count: int) -> None:
        for _ in range(count):
            seg = self._segments.pop(0)
            del self._bases[0]
            seg.delete()
        if count:
            self._log_start = max(self._log_start, self._segments[0].base_offset)
            self._log_start_moved()

    def _log_start_moved(self) -> None:
        """Keep the high watermark and the epoch cache within the new log start."""
        if self._hw is not None and self._hw < self._log_start:
            self._hw = self._log_start
        if self._epochs.truncate_from_start(self._log_start):
            # A failure is harmless: every open drops the entries below the log start.
            self._save_epochs_or_defer()

    # -- compaction --------------------------------------------------------------------------

    @property
    def clean_offset(self) -> int:
        """Where the part of the log that no compaction pass has covered yet starts."""
        return self._clean_offset

    @property
    def cleaning(self) -> bool:
        """Whether a compaction pass is planned and not finished yet."""
        return self._cleaning is not None

    def _cleanable_count(self, now_ms: int, last_stable_offset: int) -> int:
        """How many of the oldest segments a compaction pass may rewrite."""
        lag = self._config.min_compaction_lag_ms
        count = 0
        for seg in self._segments[:-1]:
            if seg.next_offset > last_stable_offset:
                break
            if lag and _segment_time(seg) > now_ms - lag:
                break
            count += 1
        return count

    def dirty_ratio(self, now_ms: int, *, last_stable_offset: int) -> float:
        """The share of the cleanable bytes that no compaction pass has covered yet."""
        count = self._cleanable_count(now_ms, last_stable_offset)
        segments = self._segments[:count]
        dirty = sum(seg.size for seg in segments if seg.base_offset >= self._clean_offset)
        total = sum(seg.size for seg in segments)
        return dirty / total if total else 0.0

    def plan_cleaning(
        self,
        now_ms: int,
        *,
        last_stable_offset: int,
        aborted: Mapping[int, Sequence[tuple[int, int]]] | None = None,
        producer_last_offsets: Mapping[int, int] | None = None,
        force: bool = False,
        max_keys: int | None = None,
    ) -> CleaningPass | None:
        """A compaction pass over this log, when one is due (see ``cleaner.py``).

        Due when the cleanup policy includes ``compact``, the cleanable segments hold
        dirty bytes, and either they are at least ``min_cleanable_dirty_ratio`` of the
        cleanable bytes, or the oldest dirty segment is older than
        ``max_compaction_lag_ms`` (or ``force``). Run the pass
        (:meth:`CleaningPass.run`, in a thread if wanted), then hand it to
        :meth:`finish_cleaning`. One pass at a time per log.

        Args:
            now_ms: the current time.
            last_stable_offset: nothing at or above it is touched (open transactions).
            aborted: per producer id, the ``(first offset, marker offset)`` of its
                aborted transactions: their records are removed.
            producer_last_offsets: per producer id, the last offset of its last
                batch: that batch is kept (emptied if need be) for producer state.
            force: plan a pass whenever anything is dirty.
            max_keys: the most keys a pass maps (default: the cleaner's).

        Returns:
            The pass, or None when none is due.
        """
        cfg = self._config
        if (
            not cfg.compact
            or self._cleaning is not None
            or self._uncleanable is not None
            or self._closed
            or self._offline
        ):
            return None
        count = self._cleanable_count(now_ms, last_stable_offset)
        segments = self._segments
        dirty_index = 0
        while dirty_index < count and segments[dirty_index].base_offset < self._clean_offset:
            dirty_index += 1
        dirty = sum(seg.size for seg in segments[dirty_index:count])
        tombstones_due = self._tombstones_due_ms is not None and now_ms >= self._tombstones_due_ms
        if not dirty and not (tombstones_due and count):
            return None
        if not force and not tombstones_due:
            total = sum(seg.size for seg in segments[:count])
            overdue = now_ms - _segment_time(segments[dirty_index]) > cfg.max_compaction_lag_ms
            if dirty / total < cfg.min_cleanable_dirty_ratio and not overdue:
                return None
        sources = []
        for i in range(count):
            seg = segments[i]
            assert seg.handle is not None
            sources.append(
                Source(
                    segment=seg,
                    handle=seg.handle,
                    base_offset=seg.base_offset,
                    size=seg.size,
                    next_base=segments[i + 1].base_offset,
                    mtime_ms=seg.last_modified_ms(),
                )
            )
        extra = {} if max_keys is None else {"max_keys": max_keys}
        cleaning = CleaningPass(
            self._dir,
            sources,
            dirty_index=dirty_index,
            aborted=aborted or {},
            producer_last_offsets=producer_last_offsets or {},
            delete_horizon_ms=now_ms - cfg.delete_retention_ms,
            segment_bytes=cfg.segment_bytes,
            **extra,
        )
        self._cleaning = cleaning
        return cleaning

    def finish_cleaning(self, cleaning: CleaningPass, *, now_ms: int) -> CleaningStats | None:
        """Swap a finished pass's segments in (or throw the pass away).

        The pass is thrown away (its files deleted) when the log closed meanwhile,
        or when any segment it read is gone (retention, DeleteRecords).

        Returns:
            The pass's figures, or None when it was thrown away.

        Raises:
            LogStorageError: a swap failed half-way; the log goes offline (the next
                open completes the swap from the files).
        """
        if self._cleaning is cleaning:
            self._cleaning = None
        if (
            self._forget_voided(cleaning)
            or self._closed
            or self._offline is not None
            or not self._still_holds(cleaning)
        ):
            cleaning.discard()
            return None
        if self._clean_marker:
            self._mark_dirty()
        previous = self._clean_offset
        self._clean_offset = max(previous, cleaning.stats.end_offset)
        try:
            # The clean offset first: it is what lets the next open accept the gaps
            # of the segments about to be swapped in.
            self._write_checkpoint()
        except OSError as exc:
            self._clean_offset = previous
            cleaning.discard()
            logger.warning(
                "%s: cannot write the checkpoint, compaction skipped: %s", self._dir, exc
            )
            return None
        oldest = cleaning.stats.oldest_tombstone_ms
        self._tombstones_due_ms = (
            None if oldest is None else oldest + self._config.delete_retention_ms + 1
        )
        try:
            for group in cleaning.groups:
                self._swap_in(group, now_ms)
        except OSError as exc:
            self._go_offline(f"a compaction swap failed half-way: {exc}", exc)
        return cleaning.stats

    def abandon_cleaning(self, cleaning: CleaningPass, reason: str) -> None:
        """Forget a pass that failed; the log is not compacted again until it reopens
        (Kafka's "uncleanable" partitions), so one bad batch does not fail every pass."""
        if self._cleaning is cleaning:
            self._cleaning = None
        if not self._forget_voided(cleaning):  # a truncation cancelled it: no fault
            self._uncleanable = reason

    def _forget_voided(self, cleaning: CleaningPass) -> bool:
        """Whether a truncation cancelled this pass (forgetting it)."""
        for i, voided in enumerate(self._voided):
            if voided is cleaning:
                del self._voided[i]
                return True
        return False

    def _still_holds(self, cleaning: CleaningPass) -> bool:
        """Whether every group's segments are still in the log, consecutively."""
        for group in cleaning.groups:
            first = group.sources[0].segment
            at = next((i for i, seg in enumerate(self._segments) if seg is first), None)
            if at is None:
                return False
            here = self._segments[at : at + len(group.sources)]
            if len(here) != len(group.sources) or any(
                seg is not src.segment for seg, src in zip(here, group.sources, strict=True)
            ):
                return False
            if at + len(here) >= len(self._segments):
                return False  # never the active segment
        return True

    def _swap_in(self, group: CleanedGroup, now_ms: int) -> None:
        """Replace a group's segments by its cleaned file (see ``cleaner.py``)."""
        first = group.sources[0].segment
        at = next(i for i, seg in enumerate(self._segments) if seg is first)
        swap = group.swap_path()
        os.replace(group.path, swap)
        _fsync_dir(self._dir)
        for src in group.sources:
            src.segment.delete()
        del self._segments[at : at + len(group.sources)]
        del self._bases[at : at + len(group.sources)]
        if group.size == 0 and at > 0:
            # Nothing left, and not the first segment: the group simply goes.
            swap.unlink()
            _fsync_dir(self._dir)
            return
        os.replace(swap, first.log_path)
        _fsync_dir(self._dir)
        seg, _ = Segment.load(
            self._dir,
            group.base_offset,
            index_interval_bytes=self._config.index_interval_bytes,
            now_ms=now_ms,
            validate=True,
            gaps=True,
            offset_limit=group.next_base,
        )
        if seg.truncated:
            # The pass wrote what it read from validated segments: this cannot be.
            seg.release()
            raise OSError(f"the compacted segment {seg.log_path} failed validation")
        try:
            seg.flush()
            seg.seal()
        except OSError:
            seg.release()
            raise
        self._segments.insert(at, seg)
        self._bases.insert(at, seg.base_offset)

    # -- rolling, flushing, closing ---------------------------------------------------------

    def maybe_roll(self, now_ms: int) -> bool:
        """Roll the active segment if it is non-empty and older than ``segment_ms``
        (or full), so that retention can delete it later.

        Returns:
            Whether a new segment was started.

        Raises:
            LogStorageError: the new segment cannot be created or the log is offline.
        """
        self._check_usable()
        seg = self._segments[-1]
        cfg = self._config
        if seg.size and (
            now_ms - seg.roll_base_ms > cfg.segment_ms or seg.size >= cfg.segment_bytes
        ):
            self._roll()
            return True
        return False

    def _roll(self) -> Segment:
        if self._clean_marker:
            self._mark_dirty()
        try:
            self._segments[-1].flush()
            seg = Segment.create(self._dir, self._next_offset)
        except OSError as exc:
            raise self._write_failed(f"{self._dir}: cannot roll a new segment: {exc}") from exc
        try:
            self._segments[-1].seal()
        except OSError as exc:
            # Its index files were just flushed: only a descriptor stays open.
            logger.warning("%s: cannot close a finished segment's indexes: %s", self._dir, exc)
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._recovery_point = seg.base_offset
        try:
            self._write_checkpoint()
        except OSError as exc:
            # Only costs a longer recovery after a crash: the old recovery point stays valid.
            logger.warning("%s: cannot write the checkpoint: %s", self._dir, exc)
        return seg

    def flush(self, *, now_ms: int | None = None) -> None:
        """fsync the active segment and its indexes (older ones were synced on roll), and
        write a tracked high watermark that moved (:meth:`checkpoint_high_watermark`).

        The flushes that ``flush_interval_messages`` triggers within an append do
        only the first part.

        Args:
            now_ms: the current time, to restart the ``flush_interval_ms`` clock.

        Raises:
            LogStorageError: fsync failed, the checkpoint cannot be written, or the
                log is offline.
        """
        self._check_usable()
        self._flush_segment(now_ms)
        self.checkpoint_high_watermark()

    def _flush_segment(self, now_ms: int | None) -> None:
        try:
            self._segments[-1].flush()
        except OSError as exc:
            raise self._write_failed(f"{self._segments[-1].log_path}: flush failed: {exc}") from exc
        self._unflushed = 0
        if now_ms is not None:
            self._last_flush_ms = now_ms

    def _flush_due(self, now_ms: int) -> bool:
        cfg = self._config
        every = cfg.flush_interval_messages
        interval = cfg.flush_interval_ms
        return (every is not None and self._unflushed >= every) or (
            interval is not None and now_ms - self._last_flush_ms >= interval
        )

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush when ``flush_interval_ms`` has passed since the last flush and data is pending.

        Returns:
            Whether a flush happened.
        """
        interval = self._config.flush_interval_ms
        if interval is None or self._closed or self._offline or not self._unflushed:
            return False
        if now_ms - self._last_flush_ms < interval:
            return False
        self.flush(now_ms=now_ms)
        return True

    def close(self) -> None:
        """Flush, record a clean shutdown and release the files (idempotent).

        Read chunks handed out earlier stay readable until dropped.
        """
        if self._closed:
            return
        try:
            if not self._clean_marker and self._offline is None:
                self._segments[-1].flush()
                if self._epochs_unsynced:
                    self._write_epochs(sync=True)
                self._recovery_point = self._next_offset
                self._write_checkpoint()
                fd = os.open(self._dir / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT, 0o644)
                os.close(fd)
                _fsync_dir(self._dir)
            elif self._offline is None and self._hw != self._hw_saved:
                self._write_checkpoint()  # only the high watermark moved since the open
        except OSError as exc:
            logger.warning("%s: unclean close, recovery will run on open: %s", self._dir, exc)
        finally:
            self._release()

    def _release(self) -> None:
        self._closed = True
        for seg in self._segments:
            seg.release()

    def _abandon(self) -> None:
        """Release the files without flushing (the log is being deleted)."""
        if not self._closed:
            self._release()

    # -- helpers -----------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise LogStorageError(f"{self._dir}: the log is closed")
        if self._offline is not None:
            raise LogStorageError(f"{self._dir}: the log is offline: {self._offline}")

    def _mark_dirty(self) -> None:
        """Remove the clean-shutdown marker durably, before the files change."""
        self._remove_durably(CLEAN_SHUTDOWN_FILE, "the clean-shutdown marker")
        self._clean_marker = False

    def _remove_durably(self, name: str, what: str) -> None:
        """Remove a file of the partition's directory, and fsync the directory.

        Raises:
            LogStorageError: either failed.
        """
        try:
            (self._dir / name).unlink(missing_ok=True)
            _fsync_dir(self._dir)
        except OSError as exc:
            raise self._write_failed(f"{self._dir}: cannot remove {what}: {exc}") from exc

    def _write_checkpoint(self) -> None:
        if self._recovery_point > self._rp_saved and self._epochs_unsynced:
            # Every epoch entry below the recovery point on disk must be on disk too:
            # an open after a crash rebuilds only the entries from it on.
            self._write_epochs(sync=True)
        data = {
            "version": 1,
            "log_start_offset": self._log_start,
            "recovery_point": self._recovery_point,
            "clean_offset": self._clean_offset,
        }
        if self._gaps_offset:
            # Present only once a follower copied a gap: older readers do without.
            data["replicated_gaps_offset"] = self._gaps_offset
        hw = self._hw
        if hw is not None:
            # Present only once tracked: older checkpoints (and readers) do without.
            data["high_watermark"] = hw
        atomic_write(self._dir / CHECKPOINT_FILE, json.dumps(data).encode())
        self._hw_saved = hw
        self._rp_saved = self._recovery_point

    def __repr__(self) -> str:
        return (
            f"<PartitionLog {self._dir.name} [{self._log_start}, {self._next_offset}) "
            f"{len(self._segments)} segment(s)>"
        )


def _segment_time(seg: Segment) -> int:
    """A segment's age reference: its newest timestamp, else its file's modification time."""
    return seg.max_timestamp if seg.max_timestamp >= 0 else seg.last_modified_ms()


def _has_flush_policy(config: LogConfig) -> bool:
    return config.flush_interval_messages is not None or config.flush_interval_ms is not None


def _stamp(buf: bytearray, view: memoryview, pos: int, end: int, attrs: int, max_ts: int) -> None:
    """Rewrite a batch's timestamp type and max_timestamp, then its CRC."""
    _I16.pack_into(buf, pos + 21, attrs)
    _I64.pack_into(buf, pos + 35, max_ts)
    _U32.pack_into(buf, pos + 17, crc32c(view[pos + 21 : end]))


def _refuse_offset(pos: int, base: int, expected: int, *, first: bool) -> NoReturn:
    """Raise the error for a replicated batch that overlaps what precedes it."""
    if first:
        raise InvalidRecordError(
            f"the replicated batches start at offset {base}, below the log end offset "
            f"{expected} (offsets must increase)"
        )
    raise InvalidRecordError(
        f"the replicated batch at byte {pos} starts at offset {base}; the previous batch "
        f"ends at {expected - 1} (offsets must increase)"
    )


def _reject(view: memoryview, pos: int, max_size: int, from_client: bool) -> None:
    """Raise the error for the first rule that the batch at ``pos`` breaks."""
    n = len(view)
    (_, length, _, magic, crc, attrs, lod, _, _, pid, _, seq, count) = _BATCH_HEADER.unpack_from(
        view, pos
    )
    size = length + LOG_OVERHEAD
    if magic != 2:
        if magic in (0, 1):
            raise InvalidRecordError(
                f"message format v{magic} at byte {pos}: only magic 2 batches are accepted"
            )
        raise CorruptRecordError(f"invalid magic {magic} at byte {pos + 16}")
    if length < BATCH_HEADER_SIZE - LOG_OVERHEAD or size > n - pos:
        raise CorruptRecordError(
            f"batch length {length} at byte {pos + 8} does not fit the {n} bytes given"
        )
    if size > max_size:
        raise RecordTooLargeError(
            f"a record batch of {size} bytes exceeds max.message.bytes ({max_size})"
        )
    if crc32c(view[pos + 21 : pos + size]) != crc:
        raise CorruptRecordError(f"CRC mismatch in the record batch at byte {pos}")
    if attrs & _CODEC_MASK > 4:
        raise InvalidRecordError(f"unknown compression codec {attrs & _CODEC_MASK}")
    if lod < 0:
        raise InvalidRecordError(f"negative last_offset_delta {lod}")
    if from_client:
        if count <= 0 or lod + 1 != count:
            raise InvalidRecordError(
                f"record batch claims {count} records but an offset range of {lod + 1}"
            )
        if attrs & _CONTROL_BIT:
            raise InvalidRecordError("clients may not write control batches")
        if pid >= 0 and seq < 0:
            raise InvalidRecordError(f"producer id {pid} with invalid base sequence {seq}")
    raise AssertionError("unreachable: the batch breaks no rule")  # pragma: no cover


def _check_keys(buf: bytearray, batches: list[tuple[int, int, int, int]]) -> None:
    """Refuse records without a key, as Kafka does for a compacted topic."""
    from trafka.codec.errors import DecodeError
    from trafka.codec.records import decode_batch

    view = memoryview(buf)
    try:
        for pos, size, base, _ in batches:
            try:
                records = decode_batch(view[pos : pos + size], verify=False).records
            except DecodeError as exc:
                raise CorruptRecordError(
                    f"the record batch at offset {base} cannot be decoded: {exc}"
                ) from None
            for record in records:
                if record.key is None:
                    raise InvalidRecordError(
                        f"record {record.offset - base} of a batch has no key: "
                        "a compacted topic accepts only records with keys"
                    )
    finally:
        view.release()


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


def _read_checkpoint(path: Path) -> tuple[int, int, int, int, int | None] | None:
    """``(log start offset, recovery point, clean offset, replicated gaps offset, high
    watermark or None when not tracked)``, or None."""
    try:
        data = json.loads(path.read_bytes())
        hw = data.get("high_watermark")
        return (
            int(data["log_start_offset"]),
            int(data["recovery_point"]),
            int(data.get("clean_offset", 0)),
            int(data.get("replicated_gaps_offset", 0)),
            None if hw is None else int(hw),
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        logger.warning("%s is unreadable (%s); recovering the whole log", path, exc)
        return None


def _probe_write(directory: Path) -> None:
    """Write a block to a file in ``directory`` the way segments are written,
    fsync it, and remove it (a ``.tmp`` name, which an open removes if left).

    Raises:
        OSError: a step failed.
    """
    path = directory / ".write-probe.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        write_all(fd, bytes(4096))
        os.fsync(fd)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content.

    Writes a temporary file, fsyncs it, renames it over ``path`` and fsyncs the
    directory. Without ``sync`` nothing is fsynced: a process crash still leaves the
    old or the new content, a power loss possibly an empty or missing file.

    Raises:
        OSError: any step failed (``path`` is then unchanged).
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        write_all(fd, data, write=os.write)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- topic configs --------------------------------------------------------------------------------


class ConfigType(enum.IntEnum):
    """Kafka's config value types, as DescribeConfigs reports them."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """Where a config value comes from, as DescribeConfigs reports it."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One topic config as DescribeConfigs reports it."""

    name: str
    value: str | None
    is_default: bool
    read_only: bool
    sensitive: bool
    source: ConfigSource
    config_type: ConfigType = ConfigType.UNKNOWN


@dataclasses.dataclass(frozen=True, slots=True)
class _ConfigDef:
    type: ConfigType
    field: str | None = None  # the LogConfig field it sets; None: stored, no effect here
    default: str | None = None  # Kafka's default, for configs without a field
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()


_I = ConfigType.INT
_L = ConfigType.LONG

# Topic configs brokerlite implements (with a LogConfig field) and the other Kafka
# topic configs, which it accepts and reports but which change nothing on a single
# node without replication or tiered storage. Rejecting those would break tools
# (Kafka Streams, Connect, schema registries) that set them routinely.
_TOPIC_CONFIGS: dict[str, _ConfigDef] = {
    "cleanup.policy": _ConfigDef(ConfigType.LIST, "cleanup_policy", choices=("compact", "delete")),
    "flush.messages": _ConfigDef(_L, "flush_interval_messages", low=1),
    "flush.ms": _ConfigDef(_L, "flush_interval_ms", low=0),
    "index.interval.bytes": _ConfigDef(_I, "index_interval_bytes", low=0),
    "max.message.bytes": _ConfigDef(_I, "message_max_bytes", low=0),
    "message.timestamp.type": _ConfigDef(
        ConfigType.STRING, "message_timestamp_type", choices=("CreateTime", "LogAppendTime")
    ),
    "retention.bytes": _ConfigDef(_L, "retention_bytes", low=-1),
    "retention.ms": _ConfigDef(_L, "retention_ms", low=-1),
    "segment.bytes": _ConfigDef(_I, "segment_bytes", low=14),
    "segment.ms": _ConfigDef(_L, "segment_ms", low=1),
    "compression.type": _ConfigDef(
        ConfigType.STRING,
        default="producer",
        choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    ),
    "compression.gzip.level": _ConfigDef(_I, default="-1", low=-1, high=9),
    "compression.lz4.level": _ConfigDef(_I, default="9", low=1, high=17),
    "compression.zstd.level": _ConfigDef(_I, default="3", low=-131072, high=22),
    "delete.retention.ms": _ConfigDef(_L, "delete_retention_ms", low=0),
    "file.delete.delay.ms": _ConfigDef(_L, default="60000", low=0),
    "follower.replication.throttled.replicas": _ConfigDef(ConfigType.LIST, default=""),
    "leader.replication.throttled.replicas": _ConfigDef(ConfigType.LIST, default=""),
    "local.retention.bytes": _ConfigDef(_L, default="-2", low=-2),
    "local.retention.ms": _ConfigDef(_L, default="-2", low=-2),
    "max.compaction.lag.ms": _ConfigDef(_L, "max_compaction_lag_ms", low=1),
    "message.timestamp.after.max.ms": _ConfigDef(_L, default="3600000", low=0),
    "message.timestamp.before.max.ms": _ConfigDef(_L, default=str(_LONG_MAX), low=0),
    "min.cleanable.dirty.ratio": _ConfigDef(
        ConfigType.DOUBLE, "min_cleanable_dirty_ratio", low=0, high=1
    ),
    "min.compaction.lag.ms": _ConfigDef(_L, "min_compaction_lag_ms", low=0),
    "min.insync.replicas": _ConfigDef(_I, default="1", low=1),
    "preallocate": _ConfigDef(ConfigType.BOOLEAN, default="false"),
    "remote.log.copy.disable": _ConfigDef(ConfigType.BOOLEAN, default="false"),
    "remote.log.delete.on.disable": _ConfigDef(ConfigType.BOOLEAN, default="false"),
    "remote.storage.enable": _ConfigDef(ConfigType.BOOLEAN, default="false"),
    "segment.index.bytes": _ConfigDef(_I, default="10485760", low=4),
    "segment.jitter.ms": _ConfigDef(_L, default="0", low=0),
    "unclean.leader.election.enable": _ConfigDef(ConfigType.BOOLEAN, default="false"),
}

# LogConfig field names whose dotted spelling is not the topic config's name.
_PYTHON_NAMES = {
    "message_max_bytes": "max.message.bytes",
    "flush_interval_messages": "flush.messages",
    "flush_interval_ms": "flush.ms",
}
# "Never" for the flush settings: Kafka's Long.MAX_VALUE default, None in LogConfig.
_NONE_AS_LONG_MAX = ("flush_interval_messages", "flush_interval_ms")


def _config_name(key: str) -> str:
    if key in _TOPIC_CONFIGS:
        return key
    name = _PYTHON_NAMES.get(key, key.replace("_", "."))
    if name not in _TOPIC_CONFIGS:
        raise InvalidConfigError(f"unknown topic config {key!r}")
    return name


def _parse_config(name: str, value: str) -> str:
    """Validate one topic config value; returns its normalised string form."""
    spec = _TOPIC_CONFIGS[name]
    if not isinstance(value, str):
        raise InvalidConfigError(f"{name}: the value must be a string, got {value!r}")
    text = value.strip()
    kind = spec.type
    number: float
    if kind in (ConfigType.INT, ConfigType.LONG):
        try:
            number = int(text)
        except ValueError:
            raise InvalidConfigError(f"{name}: {value!r} is not an integer") from None
        bits = 31 if kind == ConfigType.INT else 63
        if not -(2**bits) <= number < 2**bits:
            raise InvalidConfigError(f"{name}: {value!r} is out of range")
        text = str(number)
    elif kind == ConfigType.DOUBLE:
        try:
            number = float(text)
        except ValueError:
            raise InvalidConfigError(f"{name}: {value!r} is not a number") from None
    elif kind == ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise InvalidConfigError(f"{name}: {value!r} is not true or false")
        return text.lower()
    elif kind == ConfigType.LIST:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if spec.choices:
            bad = [item for item in items if item not in spec.choices]
            if bad or not items:
                raise InvalidConfigError(
                    f"{name}: {value!r} is not a list of {', '.join(spec.choices)}"
                )
            items = sorted(set(items))
        return ",".join(items)
    else:
        if spec.choices and text not in spec.choices:
            raise InvalidConfigError(f"{name}: {value!r} is not one of {', '.join(spec.choices)}")
        return text
    if spec.low is not None and number < spec.low:
        raise InvalidConfigError(f"{name}: {value!r} is below the minimum {spec.low:g}")
    if spec.high is not None and number > spec.high:
        raise InvalidConfigError(f"{name}: {value!r} is above the maximum {spec.high:g}")
    return text


def _normalise_configs(configs: Mapping[str, str | None]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key, value in configs.items():
        name = _config_name(key)
        out[name] = None if value is None else _parse_config(name, value)
    return out


def _field_value(field: str, text: str) -> Any:
    if field in _NONE_AS_LONG_MAX:
        number = int(text)
        return None if number == _LONG_MAX else number
    kind = _TOPIC_CONFIGS[_PYTHON_NAMES.get(field, field.replace("_", "."))].type
    if kind in (ConfigType.INT, ConfigType.LONG):
        return int(text)
    if kind == ConfigType.DOUBLE:
        return float(text)
    return text


def _field_text(field: str, value: Any) -> str:
    return str(_LONG_MAX) if value is None and field in _NONE_AS_LONG_MAX else str(value)


def _effective_config(default: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
    changes = {}
    for name, text in overrides.items():
        field = _TOPIC_CONFIGS[name].field
        if field is not None:
            changes[field] = _field_value(field, text)
    try:
        return dataclasses.replace(default, **changes) if changes else default
    except ValueError as exc:
        raise InvalidConfigError(str(exc)) from exc


# -- topic registry -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as the registry records it.

    Attributes:
        name: the topic's name.
        topic_id: its id (random, never zero).
        num_partitions: how many partitions it has.
        configs: its config overrides (Kafka names, normalised values); treat as read-only.
    """

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str]


_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_MAX_TOPIC_LENGTH = 249


def validate_topic_name(name: str) -> None:
    """Check Kafka's topic naming rules.

    Raises:
        InvalidTopicError: empty, ``.`` or ``..``, longer than 249 characters, or a
            character other than ASCII letters, digits, ``.``, ``_`` and ``-``.
    """
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("the topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"the topic name cannot be {name!r}")
    if len(name) > _MAX_TOPIC_LENGTH:
        raise InvalidTopicError(
            f"the topic name is {len(name)} characters long; the maximum is {_MAX_TOPIC_LENGTH}"
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(
            f"the topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
        )


def check_topic_collision(name: str, existing: Iterable[str]) -> None:
    """Kafka's rule that no two topics may differ only by '.' against '_' (their
    metric names would be the same).

    Raises:
        InvalidTopicError: ``name`` collides with one of ``existing`` (itself aside).
    """
    folded = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == folded:
            raise InvalidTopicError(f"topic {name!r} collides with existing topic {other!r}")


def new_topic_id() -> uuid.UUID:
    """A random topic id, as Kafka makes them (see the comment)."""
    # Like Kafka: never the zero id, and never one whose base64 form starts with
    # '-' (which command-line tools would read as an option).
    import base64

    while True:
        topic_id = uuid.uuid4()
        if not base64.urlsafe_b64encode(topic_id.bytes).startswith(b"-"):
            return topic_id


def _wall_ms() -> int:
    import time

    return time.time_ns() // 1_000_000


class LogManager:
    """The topics of a data directory, their partition logs and their configs.

    The registry (names, ids, partition counts, config overrides) is one JSON file
    replaced atomically on every change, so it survives crashes; changes are
    written before the partition directories are created or removed. A topic's
    deletion is durable once :meth:`delete_topic` returns; its directories are
    renamed ``*-delete`` and removed (again at the next start if interrupted).

    Args:
        data_dir: the directory (created when missing). It is locked (``flock``)
            while this manager is open.
        default_config: the settings of topics without overrides.
        now_ms: the current time (defaults to the wall clock).
        broker_defaults: the broker's settings of topic configs that have no
            ``LogConfig`` field (Kafka name -> value), reported as their defaults.

    Raises:
        LogStorageError: the directory is locked by another manager, or unreadable.
    """

    def __init__(
        self,
        data_dir: Path,
        default_config: LogConfig | None = None,
        *,
        now_ms: int | None = None,
        max_partitions: int | None = None,
        broker_defaults: Mapping[str, str] | None = None,
    ) -> None:
        import fcntl

        self._broker_defaults = dict(broker_defaults or {})

        #: The most partitions this broker holds (None: no limit); each open
        #: partition takes file descriptors, so the broker derives it from its
        #: open-file limit.
        self.max_partitions = max_partitions
        self._data_dir = Path(data_dir)
        self._default = default_config if default_config is not None else LogConfig()
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, str] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._configs: dict[str, LogConfig] = {}
        self._closed = False
        now = _wall_ms() if now_ms is None else now_ms
        try:
            self._data_dir.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self._data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LogStorageError(f"cannot use the data directory {data_dir}: {exc}") from exc
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._lock_fd)
            raise LogStorageError(
                f"the data directory {data_dir} is in use by another broker"
            ) from exc
        try:
            self._load(now)
        except BaseException:
            self.close()
            raise

    def _load(self, now_ms: int) -> None:
        for entry in os.scandir(self._data_dir):
            if entry.is_dir() and entry.name.endswith("-delete"):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif entry.name.endswith(".tmp"):
                os.unlink(entry.path)
        path = self._data_dir / REGISTRY_FILE
        try:
            raw = json.loads(path.read_bytes())
            topics = raw["topics"]
        except FileNotFoundError:
            topics = {}
        except (ValueError, KeyError, TypeError) as exc:
            raise LogStorageError(f"the topic registry {path} is unreadable: {exc}") from exc
        try:
            for name, entry in topics.items():
                info = TopicInfo(
                    name=name,
                    topic_id=uuid.UUID(entry["topic_id"]),
                    num_partitions=int(entry["num_partitions"]),
                    configs={str(k): str(v) for k, v in entry["configs"].items()},
                )
                self._topics[name] = info
                self._by_id[info.topic_id] = name
                self._configs[name] = _effective_config(self._default, info.configs)
        except (ValueError, KeyError, TypeError, AttributeError, InvalidConfigError) as exc:
            raise LogStorageError(f"the topic registry {path} is unreadable: {exc}") from exc
        for info in self._topics.values():
            for index in range(info.num_partitions):
                self._open_partition(info.name, index, now_ms)

    # -- queries ---------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def default_config(self) -> LogConfig:
        return self._default

    def topics(self) -> list[TopicInfo]:
        """Every topic, sorted by name."""
        return [self._topics[name] for name in sorted(self._topics)]

    def topic(self, name: str) -> TopicInfo | None:
        """The topic called ``name``, or None."""
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        """The topic with this id, or None."""
        name = self._by_id.get(topic_id)
        return None if name is None else self._topics[name]

    def partition(self, name: str, index: int) -> PartitionLog:
        """The log of one partition.

        Raises:
            UnknownTopicOrPartitionError: no such topic or partition.
        """
        log = self._logs.get((name, index))
        if log is None:
            raise UnknownTopicOrPartitionError(f"unknown topic-partition {name}-{index}")
        return log

    def partitions(self, name: str) -> list[PartitionLog]:
        """All partition logs of a topic, by index.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        info = self._require(name)
        return [self._logs[(name, i)] for i in range(info.num_partitions)]

    def config(self, name: str) -> LogConfig:
        """A topic's effective settings.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        self._require(name)
        return self._configs[name]

    # -- topic changes -----------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        configs: Mapping[str, str | None] | None = None,
        *,
        validate_only: bool = False,
        now_ms: int | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> TopicInfo:
        """Create a topic and its partition logs.

        Args:
            name: the topic's name (Kafka's rules; see :func:`validate_topic_name`).
            num_partitions: at least 1.
            configs: config overrides, by Kafka name (``retention.ms``) or Python
                spelling (``retention_ms``); None values are skipped.
            validate_only: check everything but change nothing (CreateTopics' flag).
            now_ms: the current time (defaults to the wall clock).
            topic_id: the topic's id, when a cluster already chose it (every broker
                of a cluster must use the same); None draws a random one.

        Returns:
            The new topic.

        Raises:
            InvalidTopicError: a bad name, or one that collides with an existing
                topic once '.' and '_' are treated alike (as Kafka forbids).
            TopicExistsError: the topic exists, or another topic has ``topic_id``.
            InvalidPartitionsError: ``num_partitions`` below 1.
            InvalidConfigError: an unknown config, or a bad value.
            ValueError: ``topic_id`` is not a UUID, or is the zero UUID.
            LogStorageError: the registry or a log cannot be written.
        """
        self._check_open()
        validate_topic_name(name)
        if name in self._topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if topic_id is not None:
            if not isinstance(topic_id, uuid.UUID) or topic_id.int == 0:
                raise ValueError(f"a topic id must be a non-zero UUID, got {topic_id!r}")
            if topic_id in self._by_id:
                raise TopicExistsError(
                    f"topic id {topic_id} is already used by topic {self._by_id[topic_id]!r}"
                )
        check_topic_collision(name, self._topics)
        if not isinstance(num_partitions, int) or num_partitions < 1:
            raise InvalidPartitionsError(
                f"the number of partitions must be at least 1, got {num_partitions}"
            )
        self._check_room(num_partitions)
        overrides = {k: v for k, v in _normalise_configs(configs or {}).items() if v is not None}
        config = _effective_config(self._default, overrides)
        info = TopicInfo(
            name=name,
            topic_id=new_topic_id() if topic_id is None else topic_id,
            num_partitions=num_partitions,
            configs=overrides,
        )
        if validate_only:
            return info
        self._topics[name] = info
        self._by_id[info.topic_id] = name
        self._configs[name] = config
        try:
            self._save()
        except BaseException:
            del self._topics[name], self._by_id[info.topic_id], self._configs[name]
            raise
        now = _wall_ms() if now_ms is None else now_ms
        for index in range(num_partitions):
            self._open_partition(name, index, now, fresh=True)
        return info

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its data.

        Read chunks handed out earlier stay readable until dropped.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            LogStorageError: the registry cannot be written.
        """
        self._check_open()
        info = self._require(name)
        del self._topics[name]
        del self._by_id[info.topic_id]
        config = self._configs.pop(name)
        try:
            self._save()
        except BaseException:
            self._topics[name] = info
            self._by_id[info.topic_id] = name
            self._configs[name] = config
            raise
        for index in range(info.num_partitions):
            log = self._logs.pop((name, index), None)
            if log is not None:
                log._abandon()
            self._remove_partition_dir(name, index, info.topic_id.hex)

    def create_partitions(
        self, name: str, total: int, *, validate_only: bool = False, now_ms: int | None = None
    ) -> TopicInfo:
        """Grow a topic to ``total`` partitions.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            InvalidPartitionsError: ``total`` is not larger than the current count.
            LogStorageError: the registry or a log cannot be written.
        """
        self._check_open()
        info = self._require(name)
        if not isinstance(total, int) or total <= info.num_partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {info.num_partitions} partitions; cannot change it to {total}"
            )
        self._check_room(total - info.num_partitions)
        new = dataclasses.replace(info, num_partitions=total)
        if validate_only:
            return new
        self._topics[name] = new
        try:
            self._save()
        except BaseException:
            self._topics[name] = info
            raise
        now = _wall_ms() if now_ms is None else now_ms
        for index in range(info.num_partitions, total):
            self._open_partition(name, index, now, fresh=True)
        return new

    def _check_room(self, more: int) -> None:
        """Refuse ``more`` partitions that would take the broker past ``max_partitions``."""
        limit = self.max_partitions
        if limit is None:
            return
        held = sum(info.num_partitions for info in self._topics.values())
        if held + more > limit:
            raise PolicyViolationError(
                f"{more} more partition(s) would make {held + more}; this broker holds at most "
                f"{limit} (max.partitions: each partition keeps files open)"
            )

    def describe_configs(self, name: str) -> list[ConfigEntry]:
        """Every topic config with its value and source, sorted by name.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        info = self._require(name)
        config = self._configs[name]
        builtin = LogConfig()
        out = []
        for key in sorted(_TOPIC_CONFIGS):
            spec = _TOPIC_CONFIGS[key]
            if key in info.configs:
                value: str | None = info.configs[key]
                source = ConfigSource.DYNAMIC_TOPIC_CONFIG
            elif spec.field is not None:
                value = _field_text(spec.field, getattr(config, spec.field))
                differs = getattr(self._default, spec.field) != getattr(builtin, spec.field)
                source = (
                    ConfigSource.STATIC_BROKER_CONFIG if differs else ConfigSource.DEFAULT_CONFIG
                )
            else:
                value = self._broker_defaults.get(key, spec.default)
                source = (
                    ConfigSource.DEFAULT_CONFIG
                    if value == spec.default
                    else ConfigSource.STATIC_BROKER_CONFIG
                )
            out.append(
                ConfigEntry(
                    name=key,
                    value=value,
                    is_default=source == ConfigSource.DEFAULT_CONFIG,
                    read_only=False,
                    sensitive=False,
                    source=source,
                    config_type=spec.type,
                )
            )
        return out

    def alter_configs(
        self,
        name: str,
        changes: Mapping[str, str | None],
        *,
        incremental: bool = True,
        validate_only: bool = False,
    ) -> TopicInfo:
        """Change a topic's config overrides; the logs pick them up at once.

        Args:
            name: the topic.
            changes: config name -> new value, or None to return to the default.
            incremental: apply ``changes`` to the current overrides
                (IncrementalAlterConfigs); False replaces the whole set (AlterConfigs).
            validate_only: check, change nothing.

        Returns:
            The topic with its new overrides.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            InvalidConfigError: an unknown config or a bad value.
            LogStorageError: the registry cannot be written.
        """
        self._check_open()
        info = self._require(name)
        parsed = _normalise_configs(changes)
        overrides = dict(info.configs) if incremental else {}
        for key, value in parsed.items():
            if value is None:
                overrides.pop(key, None)
            else:
                overrides[key] = value
        config = _effective_config(self._default, overrides)
        new = dataclasses.replace(info, configs=overrides)
        if validate_only:
            return new
        self._topics[name] = new
        try:
            self._save()
        except BaseException:
            self._topics[name] = info
            raise
        self._configs[name] = config
        for index in range(info.num_partitions):
            self._logs[(name, index)].reconfigure(config)
        return new

    # -- maintenance -----------------------------------------------------------------------

    def apply_retention(self, now_ms: int) -> int:
        """Roll segments older than ``segment_ms``, then apply every log's retention.

        Returns:
            The number of segments deleted.
        """
        deleted = 0
        for log in list(self._logs.values()):
            try:
                log.maybe_roll(now_ms)
                deleted += log.apply_retention(now_ms)
            except LogStorageError as exc:
                logger.warning("retention skipped for %s: %s", log.directory.name, exc)
        return deleted

    def maybe_flush_all(self, now_ms: int) -> int:
        """Flush the logs whose ``flush_interval_ms`` has passed.

        Returns:
            How many logs were flushed.
        """
        return sum(1 for log in list(self._logs.values()) if log.maybe_flush(now_ms))

    def checkpoint_high_watermarks(self) -> int:
        """Write the tracked high watermarks that moved (Kafka does it every few seconds).

        Returns:
            How many checkpoints were written; failures are logged and skipped.
        """
        written = 0
        for log in list(self._logs.values()):
            try:
                written += log.checkpoint_high_watermark()
            except LogStorageError as exc:
                logger.warning("high watermark checkpoint skipped: %s", exc)
        return written

    def flush_all(self) -> None:
        """fsync every log.

        Raises:
            LogStorageError: an fsync failed.
        """
        for log in self._logs.values():
            log.flush()

    def close(self) -> None:
        """Close every log (clean shutdown) and unlock the directory (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        os.close(self._lock_fd)

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogStorageError("the log manager is closed")

    def _require(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return info

    def reopen_partition(self, name: str, index: int, now_ms: int) -> PartitionLog:
        """Bring an offline partition back without restarting the broker.

        The check: the partition's directory takes a write again (a small file is
        written, fsynced and removed), then the log is opened afresh exactly as a
        restart opens it, recovery validating every segment from its recovery
        point (the failed write's segment included) and cutting what is torn. Only
        then does the new log replace the offline one, whose files are released.
        A partition that is not offline is left alone.

        Returns:
            The partition's log (the new one when it was reopened).

        Raises:
            UnknownTopicOrPartitionError: no such partition.
            LogStorageError: the check or the open failed; the partition stays offline.
        """
        old = self.partition(name, index)
        if old.offline is None:
            return old
        directory = old.directory
        try:
            _probe_write(directory)
        except OSError as exc:
            raise LogStorageError(f"{directory}: still cannot write: {exc}") from exc
        new = PartitionLog.open(directory, self._configs[name], now_ms=now_ms)
        old._abandon()
        self._logs[(name, index)] = new
        logger.warning(
            "partition %s is back online (it went offline: %s); log end offset %d",
            directory,
            old.offline,
            new.log_end_offset,
        )
        return new

    def _partition_dir(self, name: str, index: int) -> Path:
        return self._data_dir / f"{name}-{index}"

    def _open_partition(self, name: str, index: int, now_ms: int, *, fresh: bool = False) -> None:
        directory = self._partition_dir(name, index)
        if fresh and directory.exists():
            # Left by a deletion interrupted between the registry write and the
            # rename: it belongs to an older topic of the same name.
            self._remove_partition_dir(name, index, "stale")
        self._logs[(name, index)] = PartitionLog.open(directory, self._configs[name], now_ms=now_ms)

    def _remove_partition_dir(self, name: str, index: int, tag: str) -> None:
        directory = self._partition_dir(name, index)
        target = directory.with_name(f"{directory.name}.{tag}{uuid.uuid4().hex[:8]}-delete")
        try:
            os.replace(directory, target)
        except FileNotFoundError:
            return
        except OSError as exc:
            logger.warning("cannot rename %s for deletion: %s", directory, exc)
            return
        shutil.rmtree(target, ignore_errors=True)

    def _save(self) -> None:
        data = {
            "version": 1,
            "topics": {
                name: {
                    "topic_id": str(info.topic_id),
                    "num_partitions": info.num_partitions,
                    "configs": info.configs,
                }
                for name, info in sorted(self._topics.items())
            },
        }
        try:
            atomic_write(self._data_dir / REGISTRY_FILE, json.dumps(data, indent=1).encode())
        except OSError as exc:
            raise LogStorageError(f"cannot write the topic registry: {exc}") from exc
