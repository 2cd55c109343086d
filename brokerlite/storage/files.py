"""Small file-system helpers of the storage: replacing a file atomically.

Rules:

* :func:`atomic_write` leaves the old content or the new, never a mix: a
  temporary file is written (and fsynced), renamed over the target, and the
  directory fsynced. Without ``sync`` the same holds for a process crash but
  not for a power loss.
"""

from __future__ import annotations

import os
from pathlib import Path

from .segment import (
    write_all,
)

__all__ = ["atomic_write", "fsync_dir"]


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content.

    Writes a temporary file, fsyncs it, renames it over ``path`` and fsyncs the
    directory. Without ``sync`` nothing is fsynced: a process crash still leaves the
    old or the new content, a power loss possibly an empty or missing file.

    Raises:
        OSError: any step failed (``path`` is then unchanged).
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        write_all(fd, data, write=os.write)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
