"""Appending to a partition log: a leader's appends and a follower's (see ``partition/__init__.py``).

Both kinds of append validate every batch first (``validation.py``, nothing
written on a fault), then share one write path: a roll if the active segment is
full or old, the epoch cache learning the batches' epochs, one ``write()``, and
the flush policy. A write that fails is undone and reported; one that cannot
be undone takes the log offline. A follower's batches that leave an offset gap
first make their segment gap-tolerant on open, in the checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..segment import INT32_MAX, BrokenSegmentError
from .truncation import Truncation
from .validation import Prepared, prepare_batches

__all__ = ["AppendResult", "Appends"]


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


class Appends(Truncation):
    """Appending (a mixin of :class:`PartitionLog`, over its one state; a follower's
    append may restart an empty log, hence the truncation it builds on)."""

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
    ) -> Prepared:
        """:func:`prepare_batches` against this log's bounds and settings."""
        return prepare_batches(
            records,
            now_ms,
            config=self._config,
            log_append_time=self._log_append_time,
            leader_epoch=self.leader_epoch,
            latest_epoch=self._epochs.latest_epoch,
            next_offset=self._next_offset,
            log_start=self._log_start,
            from_client=from_client,
            replicated=replicated,
        )

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
