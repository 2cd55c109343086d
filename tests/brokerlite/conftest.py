"""Shared fixtures for brokerlite's server and interop tests.

* ``running``: a broker served on a background thread (``broker_in_thread``) on
  127.0.0.1 port 0 with a fresh data directory and no initial rebalance delay.
* ``core``: the sans-IO :class:`Broker` alone, driven with :func:`call`, which
  sends each request through the real codec both ways (request encoded and
  decoded by ``handle_frame``, the response encoded to its parts and decoded),
  so every test also checks that the response is encodable at its version.
  ``open_core`` opens such cores with other settings, and again on the same
  data directory (restarts).
* ``raw_client``: a factory of blocking socket clients for hand-made (and
  broken) frames, closed at the end of the test.
* ``make_batch``: a record batch of given values.
* ``zookeeper``, ``zk_chroot``, ``make_zookeeper`` and ``build_go_client``: in
  ``tests/conftest.py`` (the proxy's tests use them too).

Helpers are handed out as fixtures (not imported) so that test modules never
import this file by name.
"""

from __future__ import annotations

import re
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trafka.brokerlite.broker import Broker
from trafka.brokerlite.config import BrokerConfig
from trafka.brokerlite.outcomes import Close, NoResponse, Outcome, Parked, Reply
from trafka.brokerlite.server import RunningBroker, broker_in_thread
from trafka.codec.errors import ErrorCode
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.messages.k17_sasl_handshake import SaslHandshakeRequest
from trafka.codec.messages.k36_sasl_authenticate import SaslAuthenticateRequest
from trafka.codec.protocol import decode_response, encode_request
from trafka.codec.records import encode_batch

START_MS = 1_700_000_000_000


def frame_bytes(reply: Reply) -> bytes:
    """A reply's whole frame (size prefix included), file ranges read."""
    out = bytearray()
    for part in reply.encode():
        if isinstance(part, bytes | bytearray | memoryview):
            out += part
        else:
            out += part.read()  # type: ignore[union-attr]
    return bytes(out)


def decode_reply(reply: Reply) -> Any:
    """Encode a reply like the driver does, then decode it with the codec."""
    data = frame_bytes(reply)
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4, "size prefix must match the parts"
    header, body = decode_response(data[4:], reply.api_key, reply.api_version)
    assert header.correlation_id == reply.correlation_id
    return body


class Core:
    """A sans-IO broker plus a clock, for driving requests by hand."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.now = START_MS
        self._corr = 0

    def send(
        self, key: int, version: int, body: Any, *, conn_id: int = 1, client_id: str = "test-client"
    ) -> Outcome:
        self._corr += 1
        header = RequestHeader(
            request_api_key=key,
            request_api_version=version,
            correlation_id=self._corr,
            client_id=client_id,
        )
        frame = encode_request(header, body)[4:]
        return self.broker.handle_frame(conn_id, frame, self.now)

    outcome_types = (Reply, NoResponse, Parked, Close)

    @staticmethod
    def decode(reply: Reply) -> Any:
        return decode_reply(reply)

    @staticmethod
    def frame(reply: Reply) -> bytes:
        return frame_bytes(reply)

    def call(
        self, key: int, version: int, body: Any, *, conn_id: int = 1, client_id: str = "test-client"
    ) -> Any:
        """Send a request that must be answered at once; return the decoded response."""
        outcome = self.send(key, version, body, conn_id=conn_id, client_id=client_id)
        assert isinstance(outcome, Reply), outcome
        return decode_reply(outcome)

    def poll(self, advance_ms: int = 0) -> list[Any]:
        self.now += advance_ms
        return self.broker.poll(self.now)

    def login(
        self, user: str, password: str, *, conn_id: int = 1, peer: str = "127.0.0.1:50000"
    ) -> None:
        """Open ``conn_id`` from ``peer`` and authenticate it as ``user`` with SASL PLAIN
        (the broker needs a SASL listener with that user)."""
        self.broker.connection_opened(conn_id, peer)
        shake = self.call(17, 1, SaslHandshakeRequest(mechanism="PLAIN"), conn_id=conn_id)
        assert shake.error_code == ErrorCode.NONE, shake
        token = b"\0" + user.encode() + b"\0" + password.encode()
        done = self.call(36, 2, SaslAuthenticateRequest(auth_bytes=token), conn_id=conn_id)
        assert done.error_code == ErrorCode.NONE, done


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def core(data_dir: Path) -> Iterator[Core]:
    config = BrokerConfig(port=0, data_dir=data_dir, group_initial_rebalance_delay_ms=0)
    broker = Broker(config, now_ms=START_MS, advertised=("127.0.0.1", 9999))
    try:
        yield Core(broker)
    finally:
        broker.close()


@pytest.fixture
def open_core(data_dir: Path) -> Iterator[Any]:
    """``open_core(now_ms=START_MS, **settings) -> Core`` on the test's data directory.

    For restarts: close one core's broker, open another on the same directory.
    Every broker still open is closed after the test.
    """
    opened: list[Broker] = []

    def open_(now_ms: int = START_MS, **settings: Any) -> Core:
        config = BrokerConfig(
            port=0, data_dir=data_dir, group_initial_rebalance_delay_ms=0, **settings
        )
        broker = Broker(config, now_ms=now_ms, advertised=("127.0.0.1", 9999))
        opened.append(broker)
        opened_core = Core(broker)
        opened_core.now = now_ms
        return opened_core

    yield open_
    for broker in opened:
        broker.close()


@pytest.fixture
def running(data_dir: Path) -> Iterator[RunningBroker]:
    with broker_in_thread(port=0, data_dir=data_dir, group_initial_rebalance_delay_ms=0) as running:
        yield running


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to the test."""
    return re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:200]


def _batch(values: list[bytes], *, compression: int = 0, timestamp: int | None = None) -> bytes:
    """One record batch holding ``values`` (keys None), timestamps 1 ms apart."""
    base = START_MS if timestamp is None else timestamp
    return encode_batch(
        [(base + i, None, v, ()) for i, v in enumerate(values)], compression=compression
    )


class RawClient:
    """A blocking client speaking raw frames (every call has a timeout)."""

    def __init__(self, address: tuple[str, int], *, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self._corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, key: int, version: int, body: Any, *, client_id: str = "raw") -> int:
        self._corr += 1
        header = RequestHeader(
            request_api_key=key,
            request_api_version=version,
            correlation_id=self._corr,
            client_id=client_id,
        )
        self.sock.sendall(encode_request(header, body))
        return self._corr

    def read_frame(self) -> bytes:
        head = self._read_exactly(4)
        (size,) = struct.unpack(">i", head)
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def request(self, key: int, version: int, body: Any) -> Any:
        corr = self.send(key, version, body)
        header, response = decode_response(self.read_frame(), key, version)
        assert header.correlation_id == corr
        return response

    def is_closed_by_peer(self, within: float = 10.0) -> bool:
        """True when the broker closes the connection (reads EOF) within ``within`` s."""
        deadline = time.monotonic() + within
        self.sock.settimeout(0.2)
        try:
            while time.monotonic() < deadline:
                try:
                    data = self.sock.recv(65536)
                except TimeoutError:
                    continue
                except ConnectionResetError:
                    return True
                if not data:
                    return True
            return False
        finally:
            self.sock.settimeout(10.0)


@pytest.fixture
def make_batch() -> Any:
    """``make_batch(values, compression=0, timestamp=None) -> bytes``."""
    return _batch


@pytest.fixture
def raw_client() -> Iterator[Any]:
    """``raw_client(address) -> RawClient``; every client is closed after the test."""
    clients: list[RawClient] = []

    def connect(address: tuple[str, int]) -> RawClient:
        client = RawClient(address)
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()
