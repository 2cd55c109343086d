"""Non-blocking sockets for broker connections: the TCP connect, the TLS
handshake, closing, and what a socket's failure is as a trafka error.

Rules:

* Opening is bounded by the caller's timeout (``socket.connection.setup.timeout.ms``);
  a socket that fails or is abandoned half-open is closed here, never leaked.
* Nothing leaves as an ``OSError``: a failure is a
  :class:`~trafka.sdk.errors.KafkaConnectionError`, a certificate that does not
  verify an :class:`~trafka.sdk.errors.AuthenticationError`.
* A socket is closed only after the tasks waiting on it were woken
  (``anyio.notify_closing``), so a recycled descriptor never wakes them.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import ssl
from typing import Any

import anyio

from trafka.codec import CodecError

from .errors import AuthenticationError, KafkaConnectionError, ProtocolError, RequestTimeoutError

log = logging.getLogger("trafka.sdk")


#: Socket options of broker connections: ``(SO_KEEPALIVE, SO_SNDBUF, SO_RCVBUF)``,
#: a buffer size <= 0 leaving the operating system's.
SocketOptions = tuple[bool, int, int]
DEFAULT_OPTIONS: SocketOptions = (False, 0, 0)


def options_of(config: Any) -> SocketOptions:
    """The socket options a client's configuration asks for."""
    return (
        config.socket_keepalive_enable,
        config.socket_send_buffer_bytes,
        config.socket_receive_buffer_bytes,
    )


def _set_options(sock: socket.socket, options: SocketOptions) -> None:
    keepalive, send_buffer, receive_buffer = options
    if keepalive:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    # Before connect: a receive buffer set later does not change the TCP
    # window scale agreed in the handshake.
    if send_buffer > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    if receive_buffer > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)


async def connect_socket(
    host: str, port: int, options: SocketOptions = DEFAULT_OPTIONS
) -> socket.socket:
    """A connected non-blocking TCP socket to the first address of ``host`` that
    accepts, with ``options`` set."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    last: OSError | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if options != DEFAULT_OPTIONS:
                _set_options(sock, options)
            code = sock.connect_ex(address)
            if code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                await anyio.wait_writable(sock)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise OSError(code, os.strerror(code))
            return sock
        except BaseException as exc:
            close_socket(sock)
            if not isinstance(exc, OSError):
                raise
            last = exc
    raise last or OSError(f"no address for {host}")


async def tls_handshake(
    sock: socket.socket, context: ssl.SSLContext, host: str, port: int
) -> ssl.SSLSocket:
    """``sock`` wrapped in TLS, its handshake done (the caller bounds the time).

    Raises:
        AuthenticationError: the broker's certificate did not verify.
        KafkaConnectionError: the handshake failed otherwise.
    """
    try:
        tls = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    except (OSError, ValueError) as exc:
        close_socket(sock)
        raise KafkaConnectionError(f"cannot start TLS with {host}:{port}: {exc}") from None
    try:
        while True:
            try:
                tls.do_handshake()
                return tls
            except ssl.SSLWantReadError:
                await anyio.wait_readable(tls)
            except ssl.SSLWantWriteError:
                await anyio.wait_writable(tls)
    except ssl.SSLCertVerificationError as exc:
        close_socket(tls)
        raise AuthenticationError(
            f"the TLS certificate of {host}:{port} did not verify: {exc.verify_message}"
        ) from None
    except OSError as exc:
        close_socket(tls)
        raise KafkaConnectionError(f"TLS handshake with {host}:{port} failed: {exc}") from None
    except BaseException:
        close_socket(tls)
        raise


def close_socket(sock: socket.socket) -> None:
    # Tasks waiting on the socket are woken (with ClosedResourceError) before the
    # descriptor goes away, so that a recycled descriptor never wakes them.
    try:
        anyio.notify_closing(sock)
    except RuntimeError:  # no event loop (interpreter shutdown)
        pass
    sock.close()


async def open_socket(
    host: str,
    port: int,
    tls: ssl.SSLContext | None,
    timeout: float,
    options: SocketOptions = DEFAULT_OPTIONS,
) -> socket.socket:
    """A connected non-blocking socket to ``host:port``, in TLS when ``tls`` is
    given, within ``timeout`` seconds.

    Raises:
        KafkaConnectionError: connect or TLS failed or timed out.
        AuthenticationError: the broker's certificate did not verify.
    """
    try:
        with anyio.fail_after(timeout):
            sock = await connect_socket(host, port, options)
            if tls is not None:
                sock = await tls_handshake(sock, tls, host, port)
            return sock
    except TimeoutError:
        raise KafkaConnectionError(f"connecting to {host}:{port} timed out") from None
    except KafkaConnectionError:
        raise
    except OSError as exc:
        raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc}") from None


def socket_error(node_id: int, exc: Exception) -> BaseException:
    """What a failure of reading ``exc`` fails the connection's requests with."""
    if isinstance(exc, anyio.EndOfStream):
        return KafkaConnectionError(f"node {node_id} closed the connection")
    # Before OSError: two of these subclass TimeoutError / ConnectionError.
    if isinstance(exc, (ProtocolError, RequestTimeoutError, KafkaConnectionError)):
        return exc
    if isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError)):
        return KafkaConnectionError(f"connection to node {node_id} closed")
    if isinstance(exc, OSError):
        return KafkaConnectionError(f"connection to node {node_id} lost: {exc!r}")
    if isinstance(exc, CodecError):  # pragma: no cover - the state translates these
        return ProtocolError(str(exc))
    # A bug of ours: fail the waiters rather than hang them.
    log.error("reader of node %s crashed", node_id, exc_info=exc)
    return ProtocolError(f"internal error in the connection reader: {exc!r}")
