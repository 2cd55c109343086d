"""One broker's connection to another, for inter-broker requests: a driver (trio).

The replica fetchers (:mod:`.replica_fetcher`) and the transaction markers'
sender (:mod:`trafka.brokerlite.transactions.marker_sender`) talk to other
cluster members through it.

Rules:

* One request at a time, answered before the next is sent: Kafka's framing,
  no pipelining. A caller that needs several in flight opens several
  connections.
* A member is reached at the address it registered in ZooKeeper, within the
  ZooKeeper session timeout: a broker silent that long is gone anyway.
* A closed connection raises :class:`ConnectionError`; the callers reopen.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import trio

from trafka.codec.framing import FrameReader
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response_frame, encode_request

if TYPE_CHECKING:
    from ..broker import Broker

__all__ = ["InterBrokerConnection"]


class InterBrokerConnection:
    """A minimal request/answer connection to another broker (inter-broker traffic)."""

    def __init__(self, stream: trio.SocketStream, client_id: str, max_frame: int) -> None:
        self._stream = stream
        self._client_id = client_id
        self._reader = FrameReader(max_frame)
        self._corr = itertools.count(1)

    @classmethod
    async def to_node(cls, broker: Broker, node: int, purpose: str) -> InterBrokerConnection:
        """Connect to cluster member ``node`` at its registered address, within the
        ZooKeeper session timeout (a broker silent that long is gone anyway).

        Raises:
            ConnectionError: ``node`` is not registered.
            OSError, trio.TooSlowError: the connection failed or took too long.
        """
        assert broker.cluster is not None
        target = broker.cluster.broker(node)
        if target is None:
            raise ConnectionError(f"broker {node} is not registered")
        config = broker.config
        with trio.fail_after(config.zookeeper_session_timeout_ms / 1000):
            stream = await trio.open_tcp_stream(target.host, target.port)
        return cls(stream, f"broker-{broker.node_id}-{purpose}", config.socket_request_max_bytes)

    async def request(self, key: int, version: int, body: Any) -> Any:
        corr = next(self._corr)
        header = RequestHeader(
            request_api_key=key,
            request_api_version=version,
            correlation_id=corr,
            client_id=self._client_id,
        )
        await self._stream.send_all(encode_request(header, body))
        while True:
            frame = self._reader.next_frame()
            if frame is not None:
                break
            data = await self._stream.receive_some(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self._reader.feed(data)
        return decode_response_frame(frame, key, version)

    async def aclose(self) -> None:
        await self._stream.aclose()
