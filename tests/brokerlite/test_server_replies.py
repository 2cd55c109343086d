"""The trio driver's two reply paths: direct writes by the reader, and the writer task.

Small all-bytes replies are written by the reader itself when the writer is
idle; file ranges, leftovers of partial writes and everything behind them go
through the writer. These tests drive both paths on one connection and check
what must hold across them: request order, backpressure, and a broken peer
costing only its own connection. Big all-bytes replies come from a patched
DescribeCluster handler whose broker host names add up to as many bytes as the
request's client id asks (``big-<bytes>``); they are sized above what the kernel buffers for the
connection, so part of each waits in the writer.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from brokerlite_wire import fetch_body, produce_body

from trafka.brokerlite.handlers import HANDLERS
from trafka.brokerlite.server.writes import _PeerLost, _unsent, _write_now
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k60_describe_cluster as describe_cluster
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response, encode_request, peek_correlation_id
from trafka.codec.records import decode_records

pytestmark = pytest.mark.timeout(120)

IO_TIMEOUT = 30.0
SMALL_RCVBUF = 16 * 1024
MIB = 1 << 20
HOST_CHUNK = 32_000  # the codec's strings hold at most 32767 bytes


def kernel_send_buffer_max() -> int:
    """The most a TCP socket's send buffer grows to (Linux's tcp_wmem maximum)."""
    try:
        return int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    except (OSError, IndexError, ValueError):
        return 4 * MIB


@functools.lru_cache(maxsize=8)
def pattern(size: int) -> str:
    """A string whose every 16 bytes differ from their neighbours' (catches shifted bytes)."""
    out = "".join(f"{i:015x}-" for i in range(size // 16 + 1))
    return out[:size]


class Wire:
    """A blocking raw-frame client; every socket call times out after IO_TIMEOUT."""

    def __init__(self, address: tuple[str, int], *, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            # Before connect, so that the window it advertises stays small.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(IO_TIMEOUT)
        self.sock.connect(address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port = self.sock.getsockname()[1]
        self.corr = 0
        self.sent: dict[int, tuple[int, int]] = {}

    def frame(self, key: int, version: int, body: Any, *, client_id: str = "wire") -> bytes:
        """Encode a request (recorded for decoding its response), without sending it."""
        self.corr += 1
        self.sent[self.corr] = (key, version)
        header = RequestHeader(
            request_api_key=key,
            request_api_version=version,
            correlation_id=self.corr,
            client_id=client_id,
        )
        return encode_request(header, body)

    def read_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(min(n - len(out), MIB))
            if not chunk:
                raise ConnectionError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def response(self) -> tuple[int, Any]:
        """The next response: (correlation id, decoded body)."""
        (size,) = struct.unpack(">i", self.read_exactly(4))
        frame = self.read_exactly(size)
        corr = peek_correlation_id(frame)
        key, version = self.sent.pop(corr)
        return corr, decode_response(frame, key, version)[1]

    def request(self, key: int, version: int, body: Any) -> Any:
        self.sock.sendall(self.frame(key, version, body))
        return self.response()[1]

    def reset(self) -> None:
        """Close with a TCP reset (SO_LINGER 0) instead of a FIN."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def wire(running: Any) -> Iterator[Callable[..., Wire]]:
    """``wire(rcvbuf=None) -> Wire`` connected to the running broker; closed after the test."""
    opened: list[Wire] = []

    def connect(*, rcvbuf: int | None = None) -> Wire:
        client = Wire(running.address, rcvbuf=rcvbuf)
        opened.append(client)
        return client

    yield connect
    for client in opened:
        client.close()


@pytest.fixture
def handled(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[int, str | None]]:
    """Requests handled, by (api key, client id); DescribeCluster patched for big replies.

    The broker thread writes the counter while the test reads it (single
    increments of a dict entry, safe under the GIL).
    """
    counts: Counter[tuple[int, str | None]] = Counter()
    api_spec = HANDLERS[18]

    def big(ctx: Any, request: Any) -> Any:
        counts[60, ctx.client_id] += 1
        size = int((ctx.client_id or "big-16").removeprefix("big-"))
        text = pattern(size)
        hosts = [text[i : i + HOST_CHUNK] for i in range(0, size, HOST_CHUNK)]
        return describe_cluster.DescribeClusterResponse(
            cluster_id="big",
            brokers=[
                describe_cluster.DescribeClusterResponse.DescribeClusterBroker(
                    broker_id=i, host=host, port=i
                )
                for i, host in enumerate(hosts)
            ],
        )

    def counted_api_versions(ctx: Any, request: Any) -> Any:
        counts[18, ctx.client_id] += 1
        return api_spec.handle(ctx, request)

    monkeypatch.setitem(HANDLERS, 60, dataclasses.replace(HANDLERS[60], handle=big))
    monkeypatch.setitem(HANDLERS, 18, dataclasses.replace(api_spec, handle=counted_api_versions))
    return counts


def big_text(response: Any) -> str:
    """The text a patched DescribeCluster response carries."""
    return "".join(b.host for b in response.brokers)


def api_versions_frame(client: Wire, client_id: str = "wire") -> bytes:
    return client.frame(18, 3, api_versions.ApiVersionsRequest(), client_id=client_id)


def big_frame(client: Wire, size: int) -> bytes:
    return client.frame(60, 1, describe_cluster.DescribeClusterRequest(), client_id=f"big-{size}")


def metadata_frame(client: Wire, topic: str) -> bytes:
    body = metadata.MetadataRequest(
        topics=[metadata.MetadataRequest.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=True,
    )
    return client.frame(3, 12, body)


def still_serving(client: Wire) -> None:
    response = client.request(18, 3, api_versions.ApiVersionsRequest())
    assert response.error_code == 0 and response.api_keys


def wait_for_log(caplog: pytest.LogCaptureFixture, *needles: str, within: float = 20.0) -> str:
    """The first log message holding every needle, waiting up to ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        for record in list(caplog.records):
            message = record.getMessage()
            if all(needle in message for needle in needles):
                return message
        if time.monotonic() > deadline:
            raise AssertionError(f"no log line with {needles}")
        time.sleep(0.02)


def wait_until_quiet(counts: Counter[Any], *, quiet: float = 1.0, within: float = 30.0) -> None:
    """Wait until ``counts`` has not changed for ``quiet`` seconds (at most ``within``)."""
    deadline = time.monotonic() + within
    last, since = dict(counts), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = dict(counts)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
    raise AssertionError(f"the broker kept handling requests: {dict(counts)}")


# -- the direct write's helpers, on a socketpair --------------------------------------


def test_unsent_is_what_follows_the_bytes_written() -> None:
    parts = [b"abc", bytearray(b"defg"), memoryview(b"hi")]
    assert b"".join(_unsent(parts, 0)) == b"abcdefghi"
    assert b"".join(_unsent(parts, 2)) == b"cdefghi"
    assert b"".join(_unsent(parts, 3)) == b"defghi"
    assert b"".join(_unsent(parts, 8)) == b"i"
    assert _unsent(parts, 9) == []


def test_write_now_never_blocks_and_reports_what_the_kernel_took() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.setblocking(False)
        fd = left.fileno()
        assert _write_now(fd, [b"he", b"llo"]) == -1  # all of it
        assert right.recv(16) == b"hello"
        big = [b"x" * MIB] * 16
        taken = _write_now(fd, big)
        assert 0 < taken < 16 * MIB  # partial, not blocked
        assert _write_now(fd, [b"more"]) == 0  # full: nothing, still not blocked
        many = [b"y"] * 1000  # more buffers than one writev takes
        right.close()
        with pytest.raises(_PeerLost):
            _write_now(fd, many)
        with pytest.raises(_PeerLost):
            _write_now(fd, [b"z"])


def test_trio_sockets_are_non_blocking() -> None:
    # Direct writes rely on it (the driver also checks it per connection).
    async def main() -> bool:
        with trio.fail_after(10):
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            stream = await trio.open_tcp_stream(*listeners[0].socket.getsockname()[:2])
            try:
                return os.get_blocking(stream.socket.fileno())
            finally:
                await stream.aclose()
                for listener in listeners:
                    await listener.aclose()

    assert trio.run(main) is False


# -- order, backpressure and broken peers over real connections ----------------------


def test_pipelined_replies_keep_their_order_across_both_paths(
    wire: Callable[..., Wire], handled: Counter[Any]
) -> None:
    topic = "mixed"
    setup = wire()
    setup.sock.sendall(metadata_frame(setup, topic))  # creates the topic
    assert setup.response()[1].topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE
    setup.sock.sendall(metadata_frame(setup, topic))
    assert setup.response()[1].topics[0].error_code == 0
    values = [os.urandom(4000) for _ in range(12)]
    for i in range(0, len(values), 3):
        response = setup.request(0, 9, produce_body(topic, values[i : i + 3]))
        assert response.responses[0].partition_responses[0].error_code == 0

    big = 2 * kernel_send_buffer_max() + MIB
    client = wire(rcvbuf=SMALL_RCVBUF)
    requests: list[tuple[str, bytes]] = []
    for round_ in range(2):
        requests += [
            ("api", api_versions_frame(client)),
            ("metadata", metadata_frame(client, topic)),
            ("fetch0", client.frame(1, 12, fetch_body(topic, 0))),  # file ranges: the writer
            ("api", api_versions_frame(client)),  # behind a reply the writer may still hold
            ("big", big_frame(client, big)),  # more than the kernel takes: partly queued
            ("api", api_versions_frame(client)),  # behind the leftover: must queue
            ("fetch6", client.frame(1, 12, fetch_body(topic, 6))),
            ("metadata", metadata_frame(client, topic)),
            ("small", big_frame(client, 100_000 + round_)),
            ("api", api_versions_frame(client)),
        ]
    # All at once, and nothing read until every request is out.
    client.sock.sendall(b"".join(frame for _, frame in requests))
    for expected_corr, (kind, _) in enumerate(requests, 1):
        corr, body = client.response()
        assert corr == expected_corr, f"response {corr} came where {expected_corr} belongs"
        if kind == "api":
            assert body.error_code == 0 and body.api_keys
        elif kind == "metadata":
            assert body.topics[0].name == topic and body.topics[0].error_code == 0
        elif kind.startswith("fetch"):
            part = body.responses[0].partitions[0]
            assert part.error_code == 0
            start = int(kind.removeprefix("fetch"))
            assert [r.value for r in decode_records(part.records)] == values[start:]
        else:
            size = big if kind == "big" else 100_000 + (expected_corr > 10)
            assert big_text(body) == pattern(size)
    # The connection is still in step afterwards.
    still_serving(client)


def test_a_client_that_does_not_read_stops_being_read(
    wire: Callable[..., Wire], handled: Counter[Any]
) -> None:
    bystander = wire()
    still_serving(bystander)
    size = max(MIB, kernel_send_buffer_max() // 4)
    bigs, smalls = 24, 50
    slow = wire(rcvbuf=SMALL_RCVBUF)
    frames = [big_frame(slow, size) for _ in range(bigs)]
    frames += [api_versions_frame(slow, client_id="after-the-bigs") for _ in range(smalls)]
    slow.sock.sendall(b"".join(frames))  # small requests: all of them fit in the buffers

    # Quiet only counts once the broker has started on them (a loaded machine may
    # take a while to get there).
    deadline = time.monotonic() + 30
    while not handled[60, f"big-{size}"]:
        assert time.monotonic() < deadline, "the broker handled none of the big requests"
        time.sleep(0.02)
    wait_until_quiet(handled)
    # The kernel holds a few big replies, the writer one, its channel a handful:
    # then the reader stops, and what follows stays unread in the socket.
    assert 0 < handled[60, f"big-{size}"] < bigs
    assert handled[18, "after-the-bigs"] == 0
    for _ in range(3):
        still_serving(bystander)

    for expected_corr in range(1, bigs + smalls + 1):
        corr, body = slow.response()
        assert corr == expected_corr
        if expected_corr <= bigs:
            assert len(big_text(body)) == size
        else:
            assert body.error_code == 0
    assert handled[60, f"big-{size}"] == bigs
    assert handled[18, "after-the-bigs"] == smalls


def test_a_reset_in_the_middle_of_a_queued_reply_closes_only_that_connection(
    wire: Callable[..., Wire], handled: Counter[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trafka.brokerlite")
    bystander = wire()
    still_serving(bystander)
    victim = wire(rcvbuf=SMALL_RCVBUF)
    victim.sock.sendall(big_frame(victim, 2 * kernel_send_buffer_max() + MIB))
    victim.read_exactly(64 * 1024)  # the reply has started, and is far from done
    port = victim.port
    victim.reset()

    peer = f"127.0.0.1:{port}"
    wait_for_log(caplog, "lost while sending", peer)
    wait_for_log(caplog, "connection", f"from {peer} closed")
    still_serving(bystander)
    still_serving(wire())


def test_a_peer_gone_before_a_direct_write_closes_only_that_connection(
    wire: Callable[..., Wire], handled: Counter[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trafka.brokerlite")
    bystander = wire()
    bystander.sock.sendall(metadata_frame(bystander, "empty"))  # creates the topic
    assert bystander.response()[1].topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE
    bystander.sock.sendall(metadata_frame(bystander, "empty"))
    assert bystander.response()[1].topics[0].error_code == 0
    victim = wire()
    peer = f"127.0.0.1:{victim.port}"
    wait_for_log(caplog, f"from {peer}")  # the broker knows the peer before it goes
    # A long poll parks the reader, so the reset lands before the reply is written;
    # the empty reply is all bytes, so the reader writes it itself, and that fails.
    victim.sock.sendall(
        victim.frame(1, 12, fetch_body("empty", 0, max_wait_ms=300))
        + api_versions_frame(victim, client_id="never-read")
    )
    victim.reset()

    wait_for_log(caplog, "lost while sending", peer)
    wait_for_log(caplog, "connection", f"from {peer} closed")
    # The failed write closed the connection at once: the next request, already
    # read in the same chunk, was never handled.
    assert handled[18, "never-read"] == 0
    still_serving(bystander)
    still_serving(wire())
