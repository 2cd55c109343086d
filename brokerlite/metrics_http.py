"""The metrics listener's driver: ``/metrics``, ``/healthz`` and ``/readyz`` over HTTP.

Rules:

* One small HTTP/1.x exchange per connection: the request head (at most
  8 KiB, within 5 s) is read, one answer is written, the connection closes.
  Only ``GET`` (and ``HEAD``) are answered; anything else is 405, an unknown
  path 404, a malformed or oversized head 400.
* ``/metrics`` is the Prometheus text format of :mod:`.metrics`, built on the
  trio thread that owns the broker core. ``/healthz`` is 200 while the process
  serves. ``/readyz`` is 200 once the broker serves clients: on a single node at
  once, in a cluster once this broker sees itself registered and a controller
  elected; 503 otherwise.
* The proxy serves its own metrics with the same driver (:class:`Endpoint`:
  what ``/metrics`` and ``/readyz`` say).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from .lograte import RateLimitedLog, accept_forever
from .metrics import CONTENT_TYPE

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["Endpoint", "serve_metrics"]

log = logging.getLogger("trafka.brokerlite")

_MAX_HEAD = 8192
_HEAD_TIMEOUT_S = 5.0


def ready(broker: Broker) -> bool:
    """Whether the broker serves clients (see the module rules)."""
    cluster = broker.cluster
    if cluster is None:
        return True
    image = cluster.image
    return broker.node_id in image.brokers and image.controller_id >= 0


class Endpoint:
    """What the listener serves: the exposition and the readiness of a server."""

    def __init__(self, exposition: Callable[[], bytes], ready: Callable[[], bool]) -> None:
        self.exposition = exposition
        self.ready = ready

    @classmethod
    def of(cls, broker: Broker) -> Endpoint:
        return cls(broker.metrics.exposition, lambda: ready(broker))


def answer(server: Broker | Endpoint, head: bytes) -> bytes:
    """The whole HTTP answer to a request head."""
    endpoint = server if isinstance(server, Endpoint) else Endpoint.of(server)
    line = head.split(b"\r\n", 1)[0].split()
    if len(line) != 3 or not line[2].startswith(b"HTTP/"):
        return _response(400, b"bad request\n")
    method, target = line[0], line[1].split(b"?", 1)[0]
    if method not in (b"GET", b"HEAD"):
        return _response(405, b"method not allowed\n")
    if target == b"/metrics":
        body, status, kind = endpoint.exposition(), 200, CONTENT_TYPE
    elif target == b"/healthz":
        body, status, kind = b"ok\n", 200, "text/plain"
    elif target == b"/readyz":
        ok = endpoint.ready()
        body, status, kind = (
            (b"ready\n", 200, "text/plain") if ok else (b"not ready\n", 503, "text/plain")
        )
    else:
        return _response(404, b"not found\n")
    return _response(status, b"" if method == b"HEAD" else body, kind, len(body))


def _response(
    status: int, body: bytes, kind: str = "text/plain", length: int | None = None
) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}.get(
        status, "Service Unavailable"
    )
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def _exchange(endpoint: Endpoint, stream: trio.SocketStream) -> None:
    head = bytearray()
    with trio.move_on_after(_HEAD_TIMEOUT_S):
        while b"\r\n\r\n" not in head and len(head) <= _MAX_HEAD:
            data = await stream.receive_some(_MAX_HEAD)
            if not data:
                break
            head += data
    if b"\r\n\r\n" not in head:
        await stream.send_all(_response(400, b"bad request\n"))
        return
    await stream.send_all(answer(endpoint, bytes(head)))


async def serve_metrics(
    server: Broker | Endpoint,
    listeners: list[trio.SocketListener],
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer metrics and health requests on ``listeners`` until cancelled."""
    endpoint = server if isinstance(server, Endpoint) else Endpoint.of(server)

    async def handle(stream: trio.SocketStream) -> None:
        try:
            await _exchange(endpoint, stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    quiet = RateLimitedLog(log, clock=trio.current_time)
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(
                accept_forever, listener, lambda s: nursery.start_soon(handle, s), quiet
            )
        task_status.started()
