"""The driver of share groups' dead letters in cluster mode (KIP-1191): sends the
Produce requests of :mod:`trafka.brokerlite.shares.dead_letter_outbox` to the
DLQ partitions' leaders and reports their answers.

Rules:

* One connection per leader, one request on it at a time, in the order they
  were taken; leaders are written to concurrently (a Produce with ``acks=-1``
  waits for the in-sync replicas: it must not hold up another leader's).
* A lost, refused or timed-out connection is reported as NETWORK_EXCEPTION
  (a connection that took too long to open: REQUEST_TIMED_OUT), an undecodable answer or one
  without the partition as UNKNOWN_SERVER_ERROR (as Kafka's handler reads an
  empty answer); the connection is opened again for the next request. The
  outbox decides what is retried.
* It touches the outbox only from the trio thread, and calls ``kick`` after
  each answer so that the server's ticker archives what was written.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from trafka.codec import ApiKey
from trafka.codec.errors import CodecError, ErrorCode

from ...clock import now_ms
from ...shares.dead_letter_outbox import (
    PRODUCE_TIMEOUT_MS,
    PRODUCE_VERSION,
    DeadLetterOutbox,
    LetterSend,
)
from ..inter_broker import InterBrokerConnection

if TYPE_CHECKING:
    from ...broker import Broker

__all__ = ["DeadLetterSender"]

log = logging.getLogger("trafka.brokerlite.shares")

# The connection's own deadline: the Produce's timeout, and time for its answer.
_REQUEST_TIMEOUT_S = PRODUCE_TIMEOUT_MS / 1000 + 5


class DeadLetterSender:
    """Sends a share-partition leader's dead letters (see the module rules)."""

    def __init__(self, broker: Broker, outbox: DeadLetterOutbox, kick: Callable[[], None]) -> None:
        self._broker = broker
        self._outbox = outbox
        self._kick = kick
        self._event = trio.Event()
        self._queues: dict[int, trio.MemorySendChannel[LetterSend]] = {}

    def _wake(self) -> None:
        self._event.set()

    async def run(self) -> None:
        self._outbox.on_ready = self._wake
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    for send in self._outbox.take(now_ms()):
                        queue = self._queues.get(send.node)
                        if queue is None:
                            queue, receive = trio.open_memory_channel[LetterSend](math.inf)
                            self._queues[send.node] = queue
                            nursery.start_soon(self._serve, send.node, receive)
                        queue.send_nowait(send)
                    self._kick()  # (jobs given up in take() archive at the next tick)
                    retry = self._outbox.next_retry()
                    timeout = math.inf if retry is None else max(retry - now_ms(), 0) / 1000
                    with trio.move_on_after(timeout):
                        await self._event.wait()
                    self._event = trio.Event()
        finally:
            self._outbox.on_ready = lambda: None

    async def _serve(self, node: int, receive: trio.MemoryReceiveChannel[LetterSend]) -> None:
        conn: InterBrokerConnection | None = None
        try:
            async for send in receive:
                code, message = ErrorCode.UNKNOWN_SERVER_ERROR, ""
                try:
                    if conn is None:
                        conn = await InterBrokerConnection.to_node(self._broker, node, "dlq")
                    answer = await conn.request(
                        ApiKey.PRODUCE,
                        send.body,
                        version=PRODUCE_VERSION,
                        timeout=_REQUEST_TIMEOUT_S,
                    )
                except (OSError, ConnectionError, trio.TooSlowError) as exc:
                    log.debug("dead letters to broker %d: %s", node, exc)
                    code = (
                        ErrorCode.REQUEST_TIMED_OUT
                        if isinstance(exc, trio.TooSlowError)
                        else ErrorCode.NETWORK_EXCEPTION
                    )
                    message = str(exc)
                    if conn is not None:
                        await conn.aclose()
                        conn = None
                except CodecError as exc:
                    message = str(exc)
                    if conn is not None:
                        await conn.aclose()
                        conn = None
                else:
                    code, message = _result(answer, send)
                self._outbox.answered(send, code, message, now_ms())
                self._kick()
        finally:
            if conn is not None:
                with trio.CancelScope(shield=True):
                    await conn.aclose()


def _result(answer: Any, send: LetterSend) -> tuple[ErrorCode, str]:
    """The code and message of the one partition ``send`` wrote."""
    (topic,) = send.body.topic_data
    (data,) = topic.partition_data
    for response in answer.responses:
        if response.topic_id != topic.topic_id:
            continue
        for partition in response.partition_responses:
            if partition.index == data.index:
                return ErrorCode.of(partition.error_code), partition.error_message or ""
    return ErrorCode.UNKNOWN_SERVER_ERROR, "no answer for the partition"
