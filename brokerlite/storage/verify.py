"""Checking every record batch of a data directory, offline (``trafka log verify``).

What brokerlite checks, and when:

* Produce (and a follower's append): every batch's length, magic and CRC32C,
  before anything is written (:meth:`~.partition.PartitionLog.append`).
* Opening a partition after an unclean shutdown: the segments from its
  recovery point on, batch by batch (length, magic, CRC32C, offsets), cut
  after the last good batch (:meth:`~.segment.Segment.load`).
* Nothing else: segments sealed before a crash, and every segment after a
  clean shutdown, are trusted and served as they are (Fetch sends their bytes
  with ``sendfile``), as Kafka does. Consumers check CRCs themselves
  (``check.crcs``), so a damaged batch shows up as their error, not the broker's.

:func:`verify_data_dir` reads every batch of every segment and reports the
damaged ones with their file and position; it changes nothing. Run it on a
stopped broker: a running one may be appending to its active segments, whose
last batch can then look torn (:func:`broker_running` tells).

Rules: a CRC mismatch is reported and the walk goes on with the next batch
(the length is trusted); an impossible header or a torn batch is reported and
ends the walk of that segment (nothing after it can be located); a batch whose
offsets go back below the previous batch's is reported and the walk goes on.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
from collections.abc import Collection
from pathlib import Path

from .log_manager import LOCK_FILE
from .segment import walk_batches

__all__ = ["Damage", "Report", "broker_running", "partition_dirs", "verify_data_dir"]


@dataclasses.dataclass(frozen=True, slots=True)
class Damage:
    """A damaged batch.

    Attributes:
        path: the segment's ``.log`` file.
        position: the batch's byte position in it.
        base_offset: the offset its header claims (None when unreadable).
        problem: what is wrong.
    """

    path: Path
    position: int
    base_offset: int | None
    problem: str


@dataclasses.dataclass(slots=True)
class Report:
    """What :func:`verify_data_dir` read and found."""

    partitions: int = 0
    segments: int = 0
    batches: int = 0
    bytes: int = 0
    damaged: list[Damage] = dataclasses.field(default_factory=list)


def partition_dirs(data_dir: Path, topics: Collection[str] = ()) -> list[Path]:
    """The partition directories (``<topic>-<n>``) of ``data_dir``, or of ``topics``."""
    found = []
    for entry in sorted(os.scandir(data_dir), key=lambda e: e.name):
        name, _, index = entry.name.rpartition("-")
        if not entry.is_dir() or not name or not index.isdigit():
            continue  # files, and directories being deleted (``...-delete``)
        if not topics or name in topics:
            found.append(Path(entry.path))
    return found


def verify_data_dir(data_dir: Path, topics: Collection[str] = ()) -> Report:
    """Check every batch of every segment of ``data_dir`` (or of ``topics``).

    Raises:
        OSError: a directory or file cannot be read.
    """
    report = Report()
    for directory in partition_dirs(data_dir, topics):
        report.partitions += 1
        for path in sorted(directory.glob("[0-9]" * 20 + ".log")):
            report.segments += 1
            _verify_segment(path, report)
    return report


def _verify_segment(path: Path, report: Report) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        report.bytes += size
        expected = int(path.name[:20])
        for position, header, fault in walk_batches(fd, size):
            report.batches += 1
            base = header[0] if header else None
            if base is not None:
                if fault is None and base < expected:
                    fault = f"offset {base} goes back below {expected}"
                expected = max(expected, base + header[6] + 1)
            if fault is not None:
                report.damaged.append(Damage(path, position, base, fault))
    finally:
        os.close(fd)


def broker_running(data_dir: Path) -> bool:
    """Whether a broker holds ``data_dir`` (its lock file is locked)."""
    try:
        fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False
