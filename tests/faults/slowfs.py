"""A disk that can be made slow or stalled: a FUSE file system passing every call
through to a backing directory, each data call first held as its control file says.

Run as ``python slowfs.py BACKING MOUNTPOINT CONTROL`` (in the foreground; libfuse 3
through mfusepy's ctypes binding, Debian's ``fuse3`` for ``fusermount3``). The
control file holds one word, read every 100 ms (a fault's hold is seconds;
reading it every 20 ms cost each slowfs 0.8 % of a core, idle; 0.2 % now):

* ``0`` (or missing): calls pass at once;
* a number of seconds: each data call (read, write, fsync, create, truncate,
  rename, unlink) waits that long first, as a slow device's queue does;
* ``stall``: each data call waits until the word changes, as a device that stopped
  answering does (a process writing to it blocks in the kernel, uninterruptibly,
  as on a real stalled disk: a SIGKILL waits too).

Metadata calls (getattr, readdir, open, statfs) pass at once, as a page cache
answers them. File locks are the kernel's own (this file system implements none,
so FUSE keeps them locally), which Kafka's ``.lock`` file needs.

:class:`SlowDisk` mounts one and holds its control (the test side).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

READ_EVERY = 0.1


class _Gate:
    """The control file's word, as a wait before each data call."""

    def __init__(self, control: Path) -> None:
        self.control = control
        self.word = "0"
        self.changed = threading.Condition()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while True:
            try:
                word = self.control.read_text().strip() or "0"
            except OSError:
                word = "0"
            if word != self.word:
                with self.changed:
                    self.word = word
                    self.changed.notify_all()
            time.sleep(READ_EVERY)

    def wait(self) -> None:
        with self.changed:
            while self.word == "stall":
                self.changed.wait()
            word = self.word
        delay = float(word) if word.replace(".", "", 1).isdigit() else 0.0
        if delay > 0:
            time.sleep(delay)


def serve(backing: str, mountpoint: str, control: str) -> None:
    import mfusepy as fuse

    gate = _Gate(Path(control))

    def real(path: str) -> str:
        return os.path.join(backing, path.lstrip("/"))

    def oserror(call: Any) -> Any:
        def wrapped(*args: Any) -> Any:
            try:
                return call(*args)
            except OSError as exc:
                raise fuse.FuseOSError(exc.errno or errno.EIO) from None

        return wrapped

    class Passthrough(fuse.Operations):
        use_ns = True

        @oserror
        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            st = os.fstat(fh) if fh is not None else os.lstat(real(path))
            keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size",
                    "st_atime_ns", "st_mtime_ns", "st_ctime_ns")  # fmt: skip
            attrs = {k.removesuffix("_ns"): getattr(st, k) for k in keys}
            return attrs

        @oserror
        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(real(path))]

        @oserror
        def access(self, path: str, amode: int) -> int:
            if not os.access(real(path), amode):
                raise fuse.FuseOSError(errno.EACCES)
            return 0

        @oserror
        def statfs(self, path: str) -> dict[str, int]:
            st = os.statvfs(real(path))
            return {k: getattr(st, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree",
                                                "f_bavail", "f_files", "f_ffree", "f_namemax")}  # fmt: skip

        @oserror
        def open(self, path: str, flags: int) -> int:
            # read-write whatever was asked: the kernel reads through a write-only
            # handle too (a shared mapping's page faults); no O_APPEND, since
            # writes come with their offsets
            try:
                return os.open(real(path), flags & ~(os.O_ACCMODE | os.O_APPEND) | os.O_RDWR)
            except PermissionError:
                return os.open(real(path), flags & ~os.O_APPEND)

        @oserror
        def create(self, path: str, mode: int, fi: Any = None) -> int:
            gate.wait()
            return os.open(real(path), os.O_RDWR | os.O_CREAT, mode)

        @oserror
        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            gate.wait()
            return os.pread(fh, size, offset)

        @oserror
        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            gate.wait()
            return os.pwrite(fh, data, offset)

        @oserror
        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            gate.wait()
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(real(path), length)
            return 0

        @oserror
        def fsync(self, path: str, datasync: int, fh: int) -> int:
            gate.wait()
            (os.fdatasync if datasync else os.fsync)(fh)
            return 0

        @oserror
        def flush(self, path: str, fh: int) -> int:
            return 0

        @oserror
        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

        @oserror
        def unlink(self, path: str) -> int:
            gate.wait()
            os.unlink(real(path))
            return 0

        @oserror
        def rename(self, old: str, new: str) -> int:
            gate.wait()
            os.rename(real(old), real(new))
            return 0

        @oserror
        def mkdir(self, path: str, mode: int) -> int:
            os.mkdir(real(path), mode)
            return 0

        @oserror
        def rmdir(self, path: str) -> int:
            os.rmdir(real(path))
            return 0

        @oserror
        def chmod(self, path: str, mode: int) -> int:
            os.chmod(real(path), mode)
            return 0

        @oserror
        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            os.utime(real(path), ns=times)
            return 0

        @oserror
        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            gate.wait()
            return 0

    fuse.FUSE(Passthrough(), mountpoint, foreground=True, nothreads=False)


class SlowDisk:
    """One mounted slowfs: ``path`` is where to write, ``backing`` where it lands."""

    def __init__(self, path: Path, log: IO[bytes]) -> None:
        self.path = Path(path)
        self.backing = self.path.with_name(self.path.name + ".backing")
        self.control = self.path.with_name(self.path.name + ".disk")
        for folder in (self.path, self.backing):
            folder.mkdir(parents=True, exist_ok=True)
        self.control.write_text("0\n")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, str(self.backing), str(self.path), str(self.control)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while not os.path.ismount(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"slowfs did not mount {self.path} (see its log)")
            time.sleep(0.05)

    def set(self, word: str) -> None:
        """``0``, a delay in seconds, or ``stall`` (see the module's docstring)."""
        self.control.write_text(f"{word}\n")

    def close(self) -> None:
        self.set("0")
        subprocess.run(["fusermount3", "-u", "-z", str(self.path)], capture_output=True)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def available() -> str | None:
    """Why a slowfs cannot be mounted here (None when it can)."""
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:  # the module, or libfuse under it
        return f"mfusepy or libfuse3 missing ({exc}): pip install mfusepy; apt-get install fuse3"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    return None


if __name__ == "__main__":
    serve(*sys.argv[1:4])
