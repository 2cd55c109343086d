"""Writing replies to a socket: non-blocking writes, ``sendfile``, and TLS.

Rules: a direct write is one non-blocking ``writev`` of a reply's byte parts
(joined first past ``_WRITEV_MAX`` parts); what the kernel did not take is
handed on as what is left (:func:`_unsent`). File ranges go out with
``os.sendfile`` (``pread`` and write where it is unavailable); a segment file
that ends before its range is a :class:`_ShortFile`, which closes that
connection only. Over TLS every byte goes through the stream, file ranges
read into memory a block at a time and small parts joined into few records.
"""

from __future__ import annotations

import os
from typing import Any

import trio

from ..outcomes import Part

__all__ = ["_PeerLost", "_ShortFile", "_send_parts_tls", "_unsent", "_write_all", "_write_now"]


_COALESCE_LIMIT = 64 * 1024
_PREAD_BLOCK = 1024 * 1024
# Replies of more byte parts than this are joined before a direct write
# (writev takes at most IOV_MAX buffers).
_WRITEV_MAX = 64
_BYTES = (bytes, bytearray, memoryview)
_Buffer = bytes | bytearray | memoryview
# What the writer is handed: a reply's parts, or what is left of them after a
# partial direct write (a memoryview into the first unsent part).
_OutPart = Part | bytearray | memoryview


class _PeerLost(Exception):
    """A direct write found the peer gone; the connection closes quietly."""


async def _send_parts_tls(tls: trio.SSLStream[trio.SocketStream], parts: list[_OutPart]) -> None:
    """Send ``parts`` through TLS, file ranges read into memory a block at a time.

    Small parts are joined (up to ``_COALESCE_LIMIT``) so that a reply of many
    parts becomes a few TLS records, not one per part.
    """
    pending: list[_Buffer] = []
    pending_size = 0

    async def push(block: _Buffer) -> None:
        nonlocal pending, pending_size
        if len(block) >= _COALESCE_LIMIT:
            if pending:
                await tls.send_all(b"".join(pending))
                pending, pending_size = [], 0
            await tls.send_all(block)
            return
        pending.append(block)
        pending_size += len(block)
        if pending_size >= _COALESCE_LIMIT:
            await tls.send_all(b"".join(pending))
            pending, pending_size = [], 0

    for part in parts:
        if isinstance(part, _BYTES):
            await push(part)
            continue
        fd, owned = _chunk_fd(part)
        try:
            position, remaining = part.position, part.length
            while remaining > 0:
                block = os.pread(fd, min(remaining, _PREAD_BLOCK), position)
                if not block:
                    raise _ShortFile(f"segment file ended {remaining} bytes early")
                position += len(block)
                remaining -= len(block)
                await push(block)
        finally:
            if owned:
                os.close(fd)
    if pending:
        await tls.send_all(b"".join(pending))


def _write_now(fd: int, buffers: list[_Buffer]) -> int:
    """One non-blocking write of ``buffers``: -1 when all went, else the bytes taken.

    Raises:
        _PeerLost: the socket is broken (reset by the peer, closed).
    """
    if len(buffers) > _WRITEV_MAX:
        buffers = [b"".join(buffers)]
    try:
        if len(buffers) == 1:
            sent = os.write(fd, buffers[0])
            total = len(buffers[0])
        else:
            sent = os.writev(fd, buffers)
            total = sum(len(b) for b in buffers)
    except BlockingIOError:
        return 0
    except OSError as exc:
        raise _PeerLost(str(exc) or type(exc).__name__) from exc
    return -1 if sent == total else sent


def _unsent(buffers: list[_Buffer], sent: int) -> list[_Buffer]:
    """What is left of ``buffers`` after their first ``sent`` bytes went out."""
    for i, buffer in enumerate(buffers):
        size = len(buffer)
        if sent < size:
            return [memoryview(buffer)[sent:] if sent else buffer, *buffers[i + 1 :]]
        sent -= size
    return []


async def _write_all(fd: int, buffers: list[_Buffer]) -> None:
    """Write ``buffers`` in full, waiting for room in the socket when it is full."""
    data = buffers[0] if len(buffers) == 1 else b"".join(buffers)
    view = memoryview(data)
    while view:
        try:
            sent = os.write(fd, view)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(fd)
            continue
        view = view[sent:]


class _ShortFile(Exception):
    """A file range promised in a response could not be read in full."""


def _chunk_fd(chunk: Any) -> tuple[int, bool]:
    """(fd, owned) for a file chunk whose ``path_or_fd`` is an fd, a handle or a path."""
    target = chunk.path_or_fd
    if isinstance(target, int):
        return target, False
    fd = getattr(target, "fd", None)
    if isinstance(fd, int):
        if fd < 0:
            raise _ShortFile("segment file closed before it was sent")
        return fd, False
    try:
        return os.open(os.fspath(target), os.O_RDONLY), True
    except OSError as exc:
        raise _ShortFile(f"segment file gone before it was sent: {exc}") from exc
