"""Truncating a partition log: a follower whose log diverged, or one behind its leader's start.

Rules (``partition/__init__.py`` has them whole): a batch holding the target
offset goes whole; segments above it are deleted newest first, so what is left
is always a prefix; the clean-shutdown marker is removed and the recovery point
lowered to the cut segment first, durably, so a crash at any step leaves a
prefix of the old log that the next open validates. Then the epoch cache, the
high watermark, the clean and replicated-gaps offsets and the checkpoint
follow. A compaction pass planned before is cancelled and never swapped in.
"""

from __future__ import annotations

from bisect import bisect_right

from ...errors import LogStorageError
from ..epochs import EPOCH_CHECKPOINT_FILE
from ..files import fsync_dir
from ..segment import Segment
from .state import PartitionState

__all__ = ["Truncation"]


class Truncation(PartitionState):
    """Truncation (a mixin of :class:`PartitionLog`)."""

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
                fsync_dir(self._dir)
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
            fsync_dir(self._dir)
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
