"""A partition directory's checkpoint file and clean-shutdown marker.

The checkpoint (``trafka.checkpoint``, JSON) holds the bounds an open needs
before it looks at a segment: the log start offset, the recovery point, the
clean offset, and (present only once used, so older readers do without) the
replicated gaps offset and the tracked high watermark. It is replaced
atomically (``atomic_write``); an unreadable one is as good as none, and the
whole log is then validated. The clean-shutdown marker (``.clean-shutdown``)
is an empty file whose presence vouches for the files: see the rules of
``partition/__init__.py``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import NamedTuple

from ..files import atomic_write

__all__ = [
    "CHECKPOINT_FILE",
    "CLEAN_SHUTDOWN_FILE",
    "Checkpoint",
    "read_checkpoint",
    "write_checkpoint",
]

logger = logging.getLogger("trafka.brokerlite.log")

CHECKPOINT_FILE = "trafka.checkpoint"
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"


class Checkpoint(NamedTuple):
    """What the checkpoint file holds.

    Attributes:
        log_start_offset: the first offset that can be read.
        recovery_point: segments from this offset on are validated after a crash.
        clean_offset: where the part no compaction pass has covered starts.
        gaps_offset: segments whose base offset is below it may hold a
            follower's offset gaps.
        high_watermark: the tracked high watermark, None when not tracked.
    """

    log_start_offset: int
    recovery_point: int
    clean_offset: int
    gaps_offset: int
    high_watermark: int | None


def read_checkpoint(path: Path) -> Checkpoint | None:
    """The checkpoint in ``path``, or None when it is missing or unreadable (logged)."""
    try:
        data = json.loads(path.read_bytes())
        hw = data.get("high_watermark")
        return Checkpoint(
            int(data["log_start_offset"]),
            int(data["recovery_point"]),
            int(data.get("clean_offset", 0)),
            int(data.get("replicated_gaps_offset", 0)),
            None if hw is None else int(hw),
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        logger.warning("%s is unreadable (%s); recovering the whole log", path, exc)
        return None


def write_checkpoint(directory: Path, checkpoint: Checkpoint) -> None:
    """Replace ``directory``'s checkpoint file atomically.

    Raises:
        OSError: the write failed (the old file stays).
    """
    data = {
        "version": 1,
        "log_start_offset": checkpoint.log_start_offset,
        "recovery_point": checkpoint.recovery_point,
        "clean_offset": checkpoint.clean_offset,
    }
    if checkpoint.gaps_offset:
        # Present only once a follower copied a gap: older readers do without.
        data["replicated_gaps_offset"] = checkpoint.gaps_offset
    if checkpoint.high_watermark is not None:
        # Present only once tracked: older checkpoints (and readers) do without.
        data["high_watermark"] = checkpoint.high_watermark
    atomic_write(directory / CHECKPOINT_FILE, json.dumps(data).encode())
