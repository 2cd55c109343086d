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

from trafka.sdk.prometheus import http_answer

from .lograte import RateLimitedLog, accept_forever

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
    """The whole HTTP answer to a request head (the SDK's metrics listeners answer
    the same way: :func:`trafka.sdk.prometheus.http_answer`)."""
    endpoint = server if isinstance(server, Endpoint) else Endpoint.of(server)
    return http_answer(endpoint.exposition, endpoint.ready, head)


def _bad_request() -> bytes:
    return http_answer(lambda: b"", lambda: False, b"\r\n\r\n")


async def _exchange(endpoint: Endpoint, stream: trio.SocketStream) -> None:
    head = bytearray()
    with trio.move_on_after(_HEAD_TIMEOUT_S):
        while b"\r\n\r\n" not in head and len(head) <= _MAX_HEAD:
            data = await stream.receive_some(_MAX_HEAD)
            if not data:
                break
            head += data
    if b"\r\n\r\n" not in head:
        await stream.send_all(_bad_request())
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
