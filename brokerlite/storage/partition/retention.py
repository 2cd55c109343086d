"""Retention of a partition log: DeleteRecords and the time and size limits.

Rules: only whole segments are deleted, oldest first, never the active one; with
a tracked high watermark, only segments wholly below it (as Kafka). The log
start offset moves first and durably (DeleteRecords stops at the high
watermark); the high watermark and the epoch cache then follow it.
"""

from __future__ import annotations

from bisect import bisect_right

from ...errors import LogStorageError, OffsetOutOfRangeError, PolicyViolationError
from .state import PartitionState

__all__ = ["Retention"]


class Retention(PartitionState):
    """Retention (a mixin of :class:`PartitionLog`)."""

    def delete_records(self, before_offset: int) -> int:
        """Move the log start offset (DeleteRecords), deleting segments wholly below it.

        Args:
            before_offset: the new log start offset; -1 means the high watermark.

        Returns:
            The log start offset afterwards (unchanged when ``before_offset`` is lower).

        Raises:
            OffsetOutOfRangeError: ``before_offset`` is above the high watermark.
            PolicyViolationError: the topic's ``cleanup.policy`` lacks ``delete``
                (a compacted topic's records go only by compaction, as in Kafka).
            LogStorageError: the checkpoint cannot be written or the log is offline.
        """
        self._check_usable()
        if "delete" not in self._config.cleanup_policy.split(","):
            raise PolicyViolationError(
                f"records of {self._dir.name} cannot be deleted: its cleanup.policy is "
                f"{self._config.cleanup_policy}"
            )
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
