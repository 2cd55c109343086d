"""One partition's log on disk: appends, reads, truncation, retention and compaction.

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

The package, by concern (each module opens with its own rules in detail):
``state.py`` (the shared bounds and the checkpoint, rolling, flushing and
closing), ``recovery.py`` (opening a directory, recovering after a crash),
``checkpoint.py`` (the checkpoint file), ``validation.py`` (checking batches
and assigning offsets, I/O-free), ``append.py``, ``read.py``,
``truncation.py``, ``retention.py``, ``compaction.py`` and
``leader_epochs.py``. :class:`PartitionLog` is their composition: each
capability is a mixin over :class:`~.state.PartitionState`, because every one of
them changes the same bounds under the same invariants and ends in the same
checkpoint; what needs no log state (validation, recovery, the checkpoint's
format) is plain functions.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import LogStorageError
from ..topic_configs import LogConfig
from .append import AppendResult, Appends
from .checkpoint import CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE
from .compaction import Compaction
from .leader_epochs import LeaderEpochs
from .read import FileChunk, ReadResult, Reads
from .recovery import recover
from .retention import Retention

__all__ = [
    "CHECKPOINT_FILE",
    "CLEAN_SHUTDOWN_FILE",
    "AppendResult",
    "FileChunk",
    "PartitionLog",
    "ReadResult",
]


class PartitionLog(Appends, Reads, Retention, Compaction, LeaderEpochs):
    """One partition's log on disk. Use :meth:`open`; see the module docstring for the rules.
    Its mixins (appends, reads, truncation, compaction, retention, leader epochs) move
    one state, the segments and offsets of :class:`PartitionState`, so they stay one class.

    Attributes:
        leader_epoch: written into each appended batch's ``partition_leader_epoch``
            (and so into the leader epoch cache when it exceeds the latest epoch);
            :meth:`append_replicated` keeps the leader's instead.
    """

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
            found = recover(directory, config, now_ms)
        except OSError as exc:
            raise LogStorageError(f"cannot open the log in {directory}: {exc}") from exc
        return cls(
            directory,
            config,
            found.segments,
            log_start_offset=found.log_start_offset,
            recovery_point=found.recovery_point,
            clean_offset=found.clean_offset,
            gaps_offset=found.gaps_offset,
            clean_marker=found.clean,
            now_ms=now_ms,
            epochs=found.epochs,
            high_watermark=found.high_watermark,
        )

    def __repr__(self) -> str:
        return (
            f"<PartitionLog {self._dir.name} [{self._log_start}, {self._next_offset}) "
            f"{len(self._segments)} segment(s)>"
        )
