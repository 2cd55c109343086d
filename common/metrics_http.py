"""Metrics and health over HTTP: ``/metrics``, ``/healthz`` and ``/readyz``.

What brokerlite, the proxy and the SDK's clients serve when asked to
(``--metrics-listen``, ``metrics.listen``), answered the same way by all.

Rules:

* One small HTTP/1.x exchange per connection: the request head (at most
  :data:`MAX_HEAD` bytes, within :data:`HEAD_TIMEOUT_S`) is read, one answer is
  written, the connection closes.
* Only ``GET`` (and ``HEAD``) are answered; anything else is 405, an unknown
  path 404, a malformed or oversized head 400.
* ``/metrics`` is the server's Prometheus text exposition, ``/healthz`` 200
  while it serves, ``/readyz`` 200 when the server says it is ready, else 503
  (:class:`Endpoint`: what a server answers with). A server may add pages of
  its own that take I/O to build (brokerlite's ``/metrics/cluster``), answered
  by :func:`serve_metrics` only; one that fails is a 500.
* :func:`http_answer` is the whole answer to a head, without I/O;
  :func:`serve_metrics` is the trio driver of brokerlite and the proxy (the SDK
  drives the same answer through anyio on its client's own task group).
* The same plumbing serves brokerlite's schema registry (:func:`serve_http`):
  one request per connection as above, any method, and a body of at most
  ``max_body`` bytes by its ``Content-Length`` (refused with 413 before it is
  read; a chunked body is refused with 411).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import NamedTuple

import trio

from .accept import accept_forever
from .lograte import RateLimitedLog

__all__ = [
    "CONTENT_TYPE",
    "HEAD_TIMEOUT_S",
    "MAX_HEAD",
    "Endpoint",
    "Request",
    "http_answer",
    "http_response",
    "serve_http",
    "serve_metrics",
]

log = logging.getLogger("trafka.common.metrics_http")

MAX_HEAD = 8192
HEAD_TIMEOUT_S = 5.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Endpoint:
    """What the listener serves: the exposition and the readiness of a server, and
    ``pages``: more expositions by path, built with I/O (awaited)."""

    def __init__(
        self,
        exposition: Callable[[], bytes],
        ready: Callable[[], bool],
        pages: Mapping[str, Callable[[], Awaitable[bytes]]] | None = None,
    ) -> None:
        self.exposition = exposition
        self.ready = ready
        self.pages: Mapping[str, Callable[[], Awaitable[bytes]]] = pages or {}


def http_answer(exposition: Callable[[], bytes], ready: Callable[[], bool], head: bytes) -> bytes:
    """The whole HTTP answer of a metrics listener to a request head: ``/metrics``
    (``exposition()``), ``/healthz``, ``/readyz`` (``ready()``); 404, 405 and 400
    otherwise."""
    line = head.split(b"\r\n", 1)[0].split()
    if len(line) != 3 or not line[2].startswith(b"HTTP/"):
        return http_response(400, b"bad request\n")
    method, target = line[0], line[1].split(b"?", 1)[0]
    if method not in (b"GET", b"HEAD"):
        return http_response(405, b"method not allowed\n")
    if target == b"/metrics":
        body, status, kind = exposition(), 200, CONTENT_TYPE
    elif target == b"/healthz":
        body, status, kind = b"ok\n", 200, "text/plain"
    elif target == b"/readyz":
        body, status, kind = (
            (b"ready\n", 200, "text/plain") if ready() else (b"not ready\n", 503, "text/plain")
        )
    else:
        return http_response(404, b"not found\n")
    return http_response(status, b"" if method == b"HEAD" else body, kind, len(body))


def http_response(
    status: int, body: bytes, kind: str = "text/plain", length: int | None = None
) -> bytes:
    """An HTTP/1.1 answer that closes the connection (``length``: the body's
    length when ``body`` is left out, as for HEAD)."""
    reason = {
        200: "OK",
        400: "Bad Request",
        404: "Not Found",
        405: "Method Not Allowed",
        409: "Conflict",
        411: "Length Required",
        413: "Content Too Large",
        422: "Unprocessable Content",
        500: "Internal Server Error",
    }.get(status, "Service Unavailable")
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def _receive_head(stream: trio.SocketStream) -> bytes | None:
    """The request head and what followed it in the same reads; None when no
    whole head came (too long, too slow or closed)."""
    head = bytearray()
    with trio.move_on_after(HEAD_TIMEOUT_S):
        while b"\r\n\r\n" not in head and len(head) <= MAX_HEAD:
            data = await stream.receive_some(MAX_HEAD)
            if not data:
                break
            head += data
    return bytes(head) if b"\r\n\r\n" in head else None


async def _exchange(endpoint: Endpoint, stream: trio.SocketStream) -> None:
    head = await _receive_head(stream)
    if head is None:
        await stream.send_all(http_response(400, b"bad request\n"))
        return
    line = bytes(head).split(b"\r\n", 1)[0].split()
    page = None
    if len(line) == 3 and line[0] in (b"GET", b"HEAD") and line[2].startswith(b"HTTP/"):
        page = endpoint.pages.get(line[1].split(b"?", 1)[0].decode("latin-1"))
    if page is None:
        await stream.send_all(http_answer(endpoint.exposition, endpoint.ready, bytes(head)))
        return
    try:
        body = await page()
    except Exception:
        log.exception("internal error building %s", line[1].decode("latin-1"))
        await stream.send_all(http_response(500, b"internal error\n"))
        return
    await stream.send_all(
        http_response(200, b"" if line[0] == b"HEAD" else body, CONTENT_TYPE, len(body))
    )


async def _accept_all(
    listeners: list[trio.SocketListener],
    handle: Callable[[trio.SocketStream], Awaitable[None]],
    task_status: trio.TaskStatus[None],
) -> None:
    """Serve every connection of ``listeners`` in a task of its own, with
    ``handle``, until cancelled."""
    quiet = RateLimitedLog(log, clock=trio.current_time)
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(
                accept_forever, listener, lambda s: nursery.start_soon(handle, s), quiet
            )
        task_status.started()


async def serve_metrics(
    endpoint: Endpoint,
    listeners: list[trio.SocketListener],
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer metrics and health requests on ``listeners`` until cancelled."""

    async def handle(stream: trio.SocketStream) -> None:
        try:
            await _exchange(endpoint, stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    await _accept_all(listeners, handle, task_status)


class Request(NamedTuple):
    """A request read by :func:`serve_http`: the method, the target (path and
    query, undecoded), the headers (names in lower case) and the body."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes


async def _receive_request(stream: trio.SocketStream, max_body: int) -> Request | bytes:
    """The request, or the whole error answer to send instead."""
    received = await _receive_head(stream)
    if received is None:
        return http_response(400, b"bad request\n")
    head, _, rest = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    line = lines[0].split()
    if len(line) != 3 or not line[2].startswith("HTTP/"):
        return http_response(400, b"bad request\n")
    headers = {}
    for header in lines[1:]:
        name, colon, value = header.partition(":")
        if not colon:
            return http_response(400, b"bad request\n")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return http_response(411, b"a Content-Length is required\n")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        return http_response(400, b"bad request\n")
    if length < 0:
        return http_response(400, b"bad request\n")
    if length > max_body:
        return http_response(413, b"request body too large\n")
    body = bytearray(rest[:length])
    with trio.move_on_after(HEAD_TIMEOUT_S):
        while len(body) < length:
            data = await stream.receive_some(length - len(body))
            if not data:
                break
            body += data
    if len(body) < length:
        return http_response(400, b"incomplete body\n")
    return Request(line[0], line[1], headers, bytes(body))


async def serve_http(
    handler: Callable[[Request], Awaitable[bytes]],
    listeners: list[trio.SocketListener],
    max_body: int,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer requests on ``listeners`` with ``handler`` (the whole answer's
    bytes, :func:`http_response`) until cancelled; a handler that fails is a 500."""

    async def handle(stream: trio.SocketStream) -> None:
        try:
            request = await _receive_request(stream, max_body)
            if isinstance(request, Request):
                try:
                    answer = await handler(request)
                except Exception:
                    log.exception("internal error answering %s %s", request.method, request.target)
                    answer = http_response(500, b"internal error\n")
            else:
                answer = request
            await stream.send_all(answer)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    await _accept_all(listeners, handle, task_status)
