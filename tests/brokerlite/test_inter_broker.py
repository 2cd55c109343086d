"""A broker's connection to another (inter_broker.InterBrokerConnection): a peer
that dies (its connection reset, as after kill -9) raises ConnectionError, the
error its callers (replica fetchers, the transaction markers' sender, KIP-890's
verification sender) catch to reopen; before, trio's BrokenResourceError
escaped the verification sender and took the whole broker down when a
transaction coordinator was killed."""

from __future__ import annotations

import socket
import struct

import pytest
import trio

from trafka.brokerlite.cluster.inter_broker import InterBrokerConnection
from trafka.codec.messages import k18_api_versions as av


async def _connection_to_a_peer_that(how: str) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    conn = InterBrokerConnection(client, "test", 1 << 20)
    if how == "resets":
        # SO_LINGER 0: close sends RST, as the kernel does for a killed process
        # whose peer has unread or unsent data.
        server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await server.aclose()
        await trio.sleep(0.05)
    else:
        await server.aclose()
    try:
        with pytest.raises(ConnectionError):
            await conn.request(18, 0, av.ApiVersionsRequest())
    finally:
        await conn.aclose()
        await listeners[0].aclose()


@pytest.mark.parametrize("how", ["resets", "closes"])
def test_a_peer_that_goes_away_raises_connection_error(how: str) -> None:
    async def main() -> None:
        with trio.fail_after(10):
            await _connection_to_a_peer_that(how)

    trio.run(main)
