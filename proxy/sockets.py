"""The core's socket details: listening sockets bound (the broker ports and
the named listeners', :mod:`.listeners`), a client's address, and the
acknowledgement of what was read from it (:func:`ack_now`)."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import TypeVar

import trio

from .startup import shared_sockets

__all__ = ["ack_now", "bind", "bind_all", "peer_of"]

_Key = TypeVar("_Key")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``SO_REUSEADDR``).

    Raises:
        OSError: the port cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_all(
    wanted: Iterable[tuple[_Key, str, int]], *, shared: bool = False
) -> list[tuple[_Key, socket.socket]]:
    """A socket bound for each ``(key, host, port)``, with its key; none left
    open when one cannot be bound. ``shared``: each port bound with
    ``SO_REUSEPORT`` on every address of its host (:func:`.startup.shared_sockets`:
    the workers of ``--workers`` serve it together), a socket per address.

    Raises:
        OSError: that one's port cannot be bound (its address named).
    """
    out: list[tuple[_Key, socket.socket]] = []
    try:
        for key, host, port in wanted:
            try:
                if shared:
                    out += [(key, sock) for sock in shared_sockets(host, port)]
                else:
                    out.append((key, bind(host, port)))
            except OSError as exc:
                raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    except BaseException:
        for _, sock in out:
            sock.close()
        raise
    return out


def peer_of(stream: trio.SocketStream) -> tuple[str, int] | None:
    """A client connection's (host, port), None when the socket cannot tell."""
    try:
        host, port = stream.socket.getpeername()[:2]
    except (OSError, ValueError):
        return None
    return str(host), int(port)


# Linux's; absent elsewhere, where the client's ACKs are the system's to time.
_TCP_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)


def ack_now(sock: trio.socket.SocketType) -> None:
    """Acknowledge what was just read from a client now, not with its answer.

    A client that leaves Nagle's algorithm on (librdkafka's default until 2025,
    ``socket.nagle.disable=false``) holds a small request back while an earlier
    one is unacknowledged (RFC 896). Linux delays the ACK of what a connection
    that answers on the same socket receives, to carry it on the answer
    ("ping-pong" mode, RFC 1122's delayed ACK), so each request would wait for
    the answer to the one before it, as long as the proxy's round trip. Setting
    ``TCP_QUICKACK`` after a read leaves that mode and sends the pending ACK
    (the kernel re-enters it at the next answer, hence once per read)."""
    if _TCP_QUICKACK is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 1)
        except OSError:
            pass  # not a TCP socket (a test's), or closing
