"""The driver of transaction markers in cluster mode: sends the WriteTxnMarkers
requests of :mod:`.marker_queue` to partition leaders and reports the answers.

Rules:

* One connection per destination broker, one request on it at a time (a lock);
  requests to different brokers go out concurrently.
* A request that fails (connection refused or lost, no answer within the
  leader's replication wait plus a margin, an undecodable answer) is reported
  as failed: its markers are sent again after the queue's backoff, on a new
  connection.
* It wakes when the core says markers may be ready (a completion queued, a
  ``__transaction_state`` high watermark moved) and, while completions are
  queued, at least every 100 ms (retries and leader moves).
* It touches the broker core only from the trio thread, and calls ``kick``
  after each answer so the server delivers what the core made ready.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from trafka.codec import ApiKey
from trafka.codec.errors import CodecError

from ..clock import now_ms
from ..cluster.inter_broker import InterBrokerConnection
from .cluster_mode import MARKER_REPLICATION_TIMEOUT_MS
from .marker_queue import MarkerRequest

if TYPE_CHECKING:
    from ..broker import Broker

__all__ = ["MarkerSender"]

log = logging.getLogger("trafka.brokerlite.transactions")

#: WriteTxnMarkers v2 (KIP-1228): each marker says its transaction version.
_VERSION = 2
_POLL_S = 0.1
_ANSWER_TIMEOUT_S = MARKER_REPLICATION_TIMEOUT_MS / 1000 + 5


class MarkerSender:
    """Sends a cluster member's transaction markers (see the module rules)."""

    def __init__(self, broker: Broker, kick: Callable[[], None]) -> None:
        assert broker.cluster is not None and broker.cluster_txn is not None
        self._broker = broker
        self._txn = broker.cluster_txn
        self._kick = kick
        self._event = trio.Event()
        self._locks: dict[int, trio.Lock] = {}
        self._conns: dict[int, InterBrokerConnection] = {}

    def _wake(self) -> None:
        self._event.set()

    async def run(self) -> None:
        self._txn.on_ready = self._wake
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    for request in self._txn.requests(now_ms()):
                        nursery.start_soon(self._send, request)
                    wait = _POLL_S if len(self._txn.markers) else math.inf
                    with trio.move_on_after(wait):
                        await self._event.wait()
                    self._event = trio.Event()
        finally:
            self._txn.on_ready = lambda: None
            with trio.CancelScope(shield=True):
                for conn in self._conns.values():
                    await conn.aclose()

    async def _send(self, request: MarkerRequest) -> None:
        node = request.node
        lock = self._locks.setdefault(node, trio.Lock())
        async with lock:
            try:
                conn = await self._connection(node)
                answer = await conn.request(
                    ApiKey.WRITE_TXN_MARKERS,
                    request.body,
                    version=_VERSION,
                    timeout=_ANSWER_TIMEOUT_S,
                )
            except (OSError, ConnectionError, CodecError, trio.TooSlowError) as exc:
                log.debug("markers for broker %d: %s; will retry", node, exc)
                self._txn.failed(request.request_id, now_ms())
                dropped = self._conns.pop(node, None)
                if dropped is not None:
                    await dropped.aclose()
            else:
                self._txn.answered(request.request_id, answer, now_ms())
                self._kick()
        self._wake()

    async def _connection(self, node: int) -> InterBrokerConnection:
        conn = self._conns.get(node)
        if conn is not None:
            return conn
        conn = await InterBrokerConnection.to_node(self._broker, node, "txn-markers")
        self._conns[node] = conn
        return conn
