"""Compaction of a partition log: planning a pass, and swapping its result in.

The pass itself (reading the segments, keeping the latest record per key) is
``cleaner.py``'s and may run in a thread; this is the log's side. Rules: one
pass at a time; only segments below the last stable offset and older than
``min.compaction.lag.ms``, never the active one; the clean offset is written
durably before a swap (it is what lets an open accept the gaps of compacted
segments); a pass whose segments changed meanwhile (retention, DeleteRecords,
a truncation) is thrown away, and a pass that failed makes the log
uncleanable until it reopens, as Kafka does.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

from ..cleaner import CleanedGroup, CleaningPass, CleaningStats, Source
from ..files import fsync_dir
from ..segment import Segment
from .state import PartitionState

__all__ = ["Compaction"]

logger = logging.getLogger("trafka.brokerlite.log")


class Compaction(PartitionState):
    """Compaction (a mixin of :class:`PartitionLog`, rewriting its one state's segments)."""

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
        fsync_dir(self._dir)
        for src in group.sources:
            src.segment.delete()
        del self._segments[at : at + len(group.sources)]
        del self._bases[at : at + len(group.sources)]
        if group.size == 0 and at > 0:
            # Nothing left, and not the first segment: the group simply goes.
            swap.unlink()
            fsync_dir(self._dir)
            return
        os.replace(swap, first.log_path)
        fsync_dir(self._dir)
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


def _segment_time(seg: Segment) -> int:
    """A segment's age reference: its newest timestamp, else its file's modification time."""
    return seg.max_timestamp if seg.max_timestamp >= 0 else seg.last_modified_ms()
