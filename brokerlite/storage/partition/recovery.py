"""Opening a partition's directory: leftovers tidied, segments loaded or recovered.

Rules (the durability rules of ``partition/__init__.py`` in detail):

* Leftovers of interrupted work go first: compaction swaps are completed
  (``cleaner.complete_swaps``), temporary and deleted files removed, and index
  files without their segment dropped.
* With the clean-shutdown marker *and* a readable checkpoint, every segment is
  opened from its indexes; otherwise the segments holding offsets at or above
  the recovery point are validated batch by batch. A segment that recovery cut
  short, or one overlapping its predecessor, ends the log: it and every later
  segment are deleted. An inconsistency found in a trusted segment withdraws
  the marker, durably, before anything else changes.
* An emptied segment is kept only as the first one (compaction leaves it so
  that the log start offset stays where it is).
* The bounds read from the checkpoint are clamped into what the segments hold.

Everything here runs once per open, before the :class:`PartitionLog` exists;
it returns what the log is built from.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from ..cleaner import CLEANED_SUFFIX, complete_swaps
from ..epochs import load_epochs
from ..files import fsync_dir
from ..segment import Segment
from ..topic_configs import LogConfig
from .checkpoint import CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE, Checkpoint, read_checkpoint

__all__ = ["Recovered", "recover"]

logger = logging.getLogger("trafka.brokerlite.log")


class Recovered(NamedTuple):
    """What a partition log is opened with (see :func:`recover`)."""

    segments: list[Segment]
    log_start_offset: int
    recovery_point: int
    clean_offset: int
    gaps_offset: int
    clean: bool
    epochs: Sequence[tuple[int, int]]
    high_watermark: int | None


def recover(directory: Path, config: LogConfig, now_ms: int) -> Recovered:
    """Open ``directory``'s files (creating it), recovering them after a crash.

    Raises:
        OSError: a file cannot be created, read or removed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    complete_swaps(directory)
    bases = _tidy(directory)
    checkpoint = read_checkpoint(directory / CHECKPOINT_FILE)
    marker = directory / CLEAN_SHUTDOWN_FILE
    clean = marker.exists() and checkpoint is not None
    if marker.exists() and not clean:
        marker.unlink()
    saved = checkpoint if checkpoint is not None else Checkpoint(0, 0, 0, 0, None)
    segments, clean = _load_segments(directory, config, bases, saved, clean=clean, now_ms=now_ms)
    try:
        log_end = segments[-1].next_offset
        log_start = min(max(saved.log_start_offset, segments[0].base_offset), log_end)
        epochs = load_epochs(
            directory,
            segments,
            log_start,
            log_end,
            clean=clean,
            recovery_point=saved.recovery_point,
        )
    except BaseException:
        for seg in segments:
            seg.release()
        raise
    hw = saved.high_watermark
    return Recovered(
        segments,
        log_start,
        saved.recovery_point,
        min(saved.clean_offset, log_end),
        min(saved.gaps_offset, log_end),
        clean,
        epochs,
        None if hw is None else min(max(hw, log_start), log_end),
    )


def _tidy(directory: Path) -> list[int]:
    """Remove leftovers and orphan indexes; return the segments' base offsets, sorted."""
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
    return sorted(log_bases)


def _load_segments(
    directory: Path,
    config: LogConfig,
    bases: list[int],
    saved: Checkpoint,
    *,
    clean: bool,
    now_ms: int,
) -> tuple[list[Segment], bool]:
    """The segments, validated from the recovery point unless ``clean``; and whether
    the marker still holds (a trusted segment found inconsistent withdraws it)."""
    marker = directory / CLEAN_SHUTDOWN_FILE
    gaps_below = max(saved.clean_offset, saved.gaps_offset)
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
            validate = not clean and (next_base is None or next_base > saved.recovery_point)
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
                fsync_dir(directory)
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
            segments.append(Segment.create(directory, saved.log_start_offset))
    except BaseException:
        for seg in segments:
            seg.release()
        raise
    return segments, clean
