"""A partition log's shared state and its durable bookkeeping (see ``partition/__init__.py``).

:class:`PartitionState` is the base of :class:`PartitionLog`: it holds every
bound of the log (segments, start and end offsets, recovery point, clean and
replicated-gaps offsets, high watermark, epoch cache, compaction bookkeeping)
and the steps that every capability shares: writing the checkpoint and the
epoch file, removing the clean-shutdown marker before the files change,
rolling, flushing, closing, and failing (a write failure logged, a failure that
cannot be undone taking the log offline). The capabilities (appending,
reading, truncation, retention, compaction, leader epochs) are mixins over it,
each in its own module: they change the same bounds under the same rules, and
every change ends in the one checkpoint, so the state is one object's.

Rules kept here:

* The clean-shutdown marker is removed (durably) before the first change to
  the files after an open; a clean close writes it after an fsync.
* The epoch file is fsynced before the recovery point on disk moves past
  anything it lags (:meth:`PartitionState._write_checkpoint`).
* A rolled segment is flushed before the new one becomes the recovery point.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from trafka.common.lograte import RateLimitedLog

from ...errors import LogStorageError
from ..cleaner import CleaningPass
from ..epochs import EPOCH_CHECKPOINT_FILE, EpochCache, format_epochs
from ..files import atomic_write, fsync_dir
from ..segment import Segment
from ..topic_configs import LogConfig
from .checkpoint import CLEAN_SHUTDOWN_FILE, Checkpoint, write_checkpoint

__all__ = ["PartitionState"]

logger = logging.getLogger("trafka.brokerlite.log")
# Storage failures, at most one line a minute per partition and kind (a full disk
# fails every Produce).
_storage_log = RateLimitedLog(logger)


class PartitionState:
    """What every capability of a :class:`PartitionLog` shares (see the module docstring).

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
        self._epochs = EpochCache(epochs)
        # Whether the epoch file may lag the cache or not be durable (see _write_checkpoint).
        self._epochs_unsynced = False
        self._rp_saved = recovery_point  # the recovery point in the checkpoint file
        # None: not tracked, the log end offset is the high watermark (single node).
        self._hw = high_watermark
        self._hw_saved = high_watermark
        # Passes planned before a truncation: cancelled, never swapped in.
        self._voided: list[CleaningPass] = []

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
                fsync_dir(self._dir)
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

    def abandon(self) -> None:
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
            fsync_dir(self._dir)
        except OSError as exc:
            raise self._write_failed(f"{self._dir}: cannot remove {what}: {exc}") from exc

    def _write_checkpoint(self) -> None:
        if self._recovery_point > self._rp_saved and self._epochs_unsynced:
            # Every epoch entry below the recovery point on disk must be on disk too:
            # an open after a crash rebuilds only the entries from it on.
            self._write_epochs(sync=True)
        hw = self._hw
        write_checkpoint(
            self._dir,
            Checkpoint(
                self._log_start, self._recovery_point, self._clean_offset, self._gaps_offset, hw
            ),
        )
        self._hw_saved = hw
        self._rp_saved = self._recovery_point

    def _write_epochs(self, *, sync: bool) -> None:
        """Write the epoch cache's file, fsynced with ``sync``.

        Without ``sync`` the file may lag: it is written again, fsynced, before the
        recovery point next moves (see :meth:`_write_checkpoint`).

        Raises:
            OSError: the write failed.
        """
        self._epochs_unsynced = True
        path = self._dir / EPOCH_CHECKPOINT_FILE
        atomic_write(path, format_epochs(self._epochs.entries), sync=sync)
        self._epochs_unsynced = not sync

    def _save_epochs_or_defer(self, *, sync: bool = True) -> None:
        """:meth:`_write_epochs`, a failure only logged: the entries from the recovery
        point on are rebuilt from the batches on open, and the others are written
        before the recovery point moves."""
        try:
            self._write_epochs(sync=sync)
        except OSError as exc:
            logger.warning("%s: cannot write the leader epoch checkpoint: %s", self._dir, exc)

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


def _has_flush_policy(config: LogConfig) -> bool:
    return config.flush_interval_messages is not None or config.flush_interval_ms is not None
