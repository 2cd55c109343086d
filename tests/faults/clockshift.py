"""Step a process's wall clock while it runs (clockshift.c, preloaded).

:func:`library` builds the shim once with the system's C compiler into the system's
temporary folder, named by its source's hash. A :class:`ClockShift` is one
shift's file: :meth:`ClockShift.env` is what a process started under it needs,
:meth:`ClockShift.set` moves every such process's wall clock at once (the
monotonic clock stays). Works under CPython (``time.time``) and the JVM
(``System.currentTimeMillis``): both read the wall clock through libc's
``clock_gettime``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().with_name("clockshift.c")


def available() -> str | None:
    """Why the shim cannot be built here (None when it can)."""
    return None if shutil.which("cc") else "no C compiler (apt-get install gcc)"


def library() -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    built = Path(tempfile.gettempdir()) / f"trafka-clockshift-{digest}.so"
    if not built.is_file():
        partial = built.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(partial), str(SOURCE), "-ldl"],
                       check=True, capture_output=True)  # fmt: skip
        partial.replace(built)
    return built


class ClockShift:
    """One shift, in a file (``path``), zero until :meth:`set`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.set(0.0)

    def set(self, seconds: float) -> None:
        """Processes under this shift read the wall clock ``seconds`` from the true one."""
        with open(self.path, "r+b" if self.path.exists() else "wb") as file:
            file.write(struct.pack("<q", round(seconds * 1e9)))

    def env(self) -> dict[str, str]:
        return {"LD_PRELOAD": str(library()), "TRAFKA_CLOCK_SHIFT": str(self.path)}
