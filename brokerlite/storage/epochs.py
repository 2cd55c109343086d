"""The leader epoch cache of a partition log, and its checkpoint file.

Pairs of ``(epoch, start offset)``, strictly increasing in both, kept in Kafka's
text format in ``leader-epoch-checkpoint`` (:mod:`.partition` says when it is
written and how an open rebuilds it).
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path

from .files import atomic_write
from .segment import (
    Segment,
)

__all__ = ["EPOCH_CHECKPOINT_FILE", "EpochCache", "format_epochs", "load_epochs"]

# The partition log's logger: the epoch checkpoint is one of its files.
logger = logging.getLogger("trafka.brokerlite.log")

EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"


# -- leader epoch cache --------------------------------------------------------------------------


class EpochCache:
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


def format_epochs(entries: Sequence[tuple[int, int]]) -> bytes:
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


def _scan_epochs(cache: EpochCache, segments: Sequence[Segment]) -> None:
    """Assign the epochs the batches of ``segments`` start (a header scan), as appends do."""
    for seg in segments:
        for _, base, _, _, _, epoch in seg.iter_headers(0, seg.size):
            if epoch > cache.latest_epoch:
                cache.assign(epoch, base)


def load_epochs(
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
    cache = EpochCache(entries or ())
    if entries is None:
        _scan_epochs(cache, segments)
    elif not clean:
        cache.truncate_from_end(recovery_point)
        _scan_epochs(cache, [seg for seg in segments if seg.next_offset > recovery_point])
    cache.truncate_from_start(log_start)
    cache.truncate_from_end(log_end)
    if cache.entries != (entries or []) or (entries is None and path.exists()):
        atomic_write(path, format_epochs(cache.entries))
    return cache.entries
