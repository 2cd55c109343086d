"""A private network namespace with only a loopback interface, for a test's own.

A client suite that dials fixed addresses (``localhost:9092``) needs the port
free and its own: each :class:`PrivateNetwork` is a fresh network namespace
(unshare(2)), its loopback brought up with the same ioctl ``ip link set lo up``
makes, so nothing beyond the C library and root is needed (no iproute2, no
named ``ip netns``, nothing to clean up after a killed run: the namespace lives
as long as the file descriptor held here or a process in it).

:meth:`PrivateNetwork.entered` puts the calling thread in it: the sockets it
opens, the threads it starts and the processes it spawns (they inherit the
thread's namespace) are in the private network, and the thread goes back to its
own afterwards. Python 3.11 has no ``os.unshare``/``os.setns``: ctypes calls them.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
#: struct ifreq: a 16-byte interface name, then a union (flags: a short) padded to 40
_IFREQ = "16sH"
_IFREQ_SIZE = 40


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _thread_namespace() -> int:
    """A descriptor of the calling thread's network namespace."""
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        asked = struct.pack(_IFREQ, b"lo", 0).ljust(_IFREQ_SIZE, b"\0")
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _SIOCGIFFLAGS, asked)[:18])[1]
        fcntl.ioctl(
            sock,
            _SIOCSIFFLAGS,
            struct.pack(_IFREQ, b"lo", flags | _IFF_UP).ljust(_IFREQ_SIZE, b"\0"),
        )


def _create() -> int:
    """A new network namespace with its loopback up, made by a thread of its own
    (unshare moves only the calling thread), held by the descriptor returned."""
    made: dict[str, int | BaseException] = {}

    def make() -> None:
        try:
            if _libc().unshare(CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"unshare(CLONE_NEWNET): {os.strerror(errno)}")
            _loopback_up()
            made["fd"] = _thread_namespace()
        except BaseException as exc:  # handed to the caller's thread
            made["error"] = exc

    thread = threading.Thread(target=make, name="private-net")
    thread.start()
    thread.join()
    if "error" in made:
        raise made["error"]  # type: ignore[misc]
    fd = made["fd"]
    assert isinstance(fd, int)
    return fd


def unavailable() -> str | None:
    """Why a private network cannot be made here (None when it can)."""
    if os.geteuid() != 0:
        return "a private network namespace needs root"
    try:
        os.close(_create())
    except OSError as exc:
        return f"no private network namespace: {exc}"
    return None


class PrivateNetwork:
    """A network namespace of its own, loopback only (see the module's doc)."""

    def __init__(self) -> None:
        self._fd: int | None = _create()

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """The calling thread in the private network for the block, then back."""
        if self._fd is None:
            raise RuntimeError("the private network is closed")
        libc = _libc()
        own = _thread_namespace()
        try:
            if libc.setns(self._fd, CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"setns into the private network: {os.strerror(errno)}")
            try:
                yield
            finally:
                if libc.setns(own, CLONE_NEWNET) != 0:
                    errno = ctypes.get_errno()
                    raise OSError(errno, f"setns back: {os.strerror(errno)}")
        finally:
            os.close(own)

    def close(self) -> None:
        """Let go of the namespace (it ends with the last process in it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> PrivateNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
