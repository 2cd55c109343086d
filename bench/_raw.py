"""A bare Kafka client for the benchmarks: one blocking socket and trafka.codec, nothing else.

It measures what the broker and the machine cost without any client library in
the way: requests are framed by the codec and written with ``sendall``; answers
are read with blocking ``recv`` calls.
"""

from __future__ import annotations

import socket
from typing import Any

from trafka.codec.framing import FrameReader
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response, encode_request


class RawClient:
    def __init__(self, servers: str, timeout: float | None = None) -> None:
        host, port = servers.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.frames = FrameReader()
        self.corr = 0

    def send(self, key: int, version: int, body: object) -> None:
        self.corr += 1
        header = RequestHeader(
            request_api_key=key, request_api_version=version, correlation_id=self.corr
        )
        self.sock.sendall(encode_request(header, body))

    def frame(self) -> bytes:
        """The next response frame (without its size prefix)."""
        while True:
            frame = self.frames.next_frame()
            if frame is not None:
                return frame
            data = self.sock.recv(4 << 20)
            if not data:
                raise EOFError("the broker closed the connection")
            self.frames.feed(data)

    def request(self, key: int, version: int, body: object) -> Any:
        """Send one request and wait for its decoded response body."""
        self.send(key, version, body)
        _, response = decode_response(self.frame(), key, version)
        return response

    def close(self) -> None:
        self.sock.close()
