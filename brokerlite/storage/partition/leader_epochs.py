"""A partition log's leader epochs: assigning them, and OffsetForLeaderEpoch.

The cache itself, its file and its rules are ``epochs.py``'s; appends feed it
(``append.py``), truncation and retention trim it. Here: a new leader's epoch
assigned with Kafka's rule, written (fsynced) before returning, and the end
offset of an epoch as a follower or a client asks for it.
"""

from __future__ import annotations

from ...errors import LogStorageError
from .state import PartitionState

__all__ = ["LeaderEpochs"]


class LeaderEpochs(PartitionState):
    """Leader epochs (a mixin of :class:`PartitionLog`)."""

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
