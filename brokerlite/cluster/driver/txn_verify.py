"""The driver of KIP-890 verification in cluster mode: sends the
AddPartitionsToTxn requests of :mod:`.verification` (v4 ``verify_only``, v5
adding partitions for transaction version 2) to the transaction coordinators
and reports their answers.

Rules:

* One connection per coordinator, one request on it at a time (the core hands
  out at most one batch per coordinator until it is answered); coordinators
  are asked concurrently.
* A request that fails (connection refused or lost, no answer within
  30 s, an undecodable answer) is reported as failed: its
  Produce requests are refused with a retriable error, and the connection is
  opened again for the next question.
* It wakes when the core has questions, touches the core only from the trio
  thread, and calls ``kick`` after each answer so that the server delivers the
  Produce answers the core made ready.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from trafka.codec import ApiKey
from trafka.codec.errors import CodecError

from ...transactions.verification import VerifyBatch
from ..inter_broker import InterBrokerConnection

if TYPE_CHECKING:
    from ...broker import Broker
    from ...transactions.verification import TxnVerification

__all__ = ["VerificationSender"]

log = logging.getLogger("trafka.brokerlite.transactions")


class VerificationSender:
    """Sends a cluster member's verification questions (see the module rules)."""

    def __init__(self, broker: Broker, kick: Callable[[], None]) -> None:
        assert broker.txn_verification is not None
        self._broker = broker
        self._core: TxnVerification = broker.txn_verification
        self._kick = kick
        self._event = trio.Event()
        self._conns: dict[int, InterBrokerConnection] = {}

    def _wake(self) -> None:
        self._event.set()

    async def run(self) -> None:
        self._core.on_ready = self._wake
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    for batch in self._core.batches():
                        nursery.start_soon(self._send, batch)
                    # (batches() answers at once the questions without a coordinator.)
                    self._kick()
                    await self._event.wait()
                    self._event = trio.Event()
        finally:
            self._core.on_ready = lambda: None
            with trio.CancelScope(shield=True):
                for conn in self._conns.values():
                    await conn.aclose()

    async def _send(self, batch: VerifyBatch) -> None:
        node = batch.node
        try:
            conn = self._conns.get(node)
            if conn is None:
                conn = await InterBrokerConnection.to_node(self._broker, node, "txn-verify")
                self._conns[node] = conn
            answer = await conn.request(
                ApiKey.ADD_PARTITIONS_TO_TXN, batch.body, version=batch.version
            )
        except (OSError, ConnectionError, CodecError, trio.TooSlowError) as exc:
            log.debug("verification with broker %d: %s", node, exc)
            self._core.failed(batch)
            dropped = self._conns.pop(node, None)
            if dropped is not None:
                await dropped.aclose()
        else:
            self._core.answered(batch, answer)
        self._kick()
