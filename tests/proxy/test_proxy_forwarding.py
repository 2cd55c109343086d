"""The proxy's forwarding path (issue #66): what no filter asks to see crosses
the proxy as the bytes that arrived, in both directions, while the answers that
name brokers are still rewritten and a filter still sees its APIs decoded.

A tap (plain sockets, threads) sits between the proxy and brokerlite and keeps
every byte each side wrote, so the tests compare what brokerlite received with
what the client sent, and what the client received with what brokerlite
answered. The client's connection has an upstream connection of its own, so its
requests keep their correlation ids: the bytes are compared whole.

A stand-in broker that withholds an answer shows that the proxy acknowledges
a client's request when it reads it, not with the answer (docs/proxy.md,
"Acknowledged when read").

Kafka's protocol guide (protocol.html, "The Client Server Interaction"): a
broker answers one connection's requests in the order they were sent, which is
what lets the proxy write several requests at once and hand on the answers in
that order.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from proxy_helpers import create, fresh, request

from trafka.brokerlite import RunningBroker
from trafka.codec import ApiKey, protocol
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k03_metadata as md
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.records import encode_batch, iter_batches
from trafka.proxy import Filter, FilterContext, proxy_in_thread

pytestmark = pytest.mark.timeout(120)

DEADLINE = 30.0  # seconds a socket read may take on a loaded machine


class Tap:
    """A relay in front of ``target`` that keeps what each side of each
    connection wrote (``sent[i]``: to the broker, ``answered[i]``: back)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self.sent: list[bytearray] = []
        self.answered: list[bytearray] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            sent, answered = bytearray(), bytearray()
            self.sent.append(sent)
            self.answered.append(answered)
            for a, b, kept in ((client, upstream, sent), (upstream, client, answered)):
                threading.Thread(target=_pump, args=(a, b, kept), daemon=True).start()

    def close(self) -> None:
        self.listener.close()


def _pump(src: socket.socket, dst: socket.socket, kept: bytearray) -> None:
    try:
        while data := src.recv(65536):
            kept += data
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class SeesMetadata(Filter):
    """Asks for Metadata only, and keeps what it saw."""

    api_keys = frozenset({ApiKey.METADATA})

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.answers: list[Any] = []

    def on_request(self, ctx: FilterContext, body: Any) -> Any:
        self.requests.append((ctx.api_key, body))
        return body

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        self.answers.append((ctx.api_key, body))
        return body


@contextmanager
def tapped(broker: RunningBroker, **settings: Any) -> Iterator[tuple[Tap, Any]]:
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    tap = Tap((host, int(port)))
    try:
        upstream = (f"{tap.address[0]}:{tap.address[1]}",)
        with proxy_in_thread(upstream=upstream, port=0, route_keys="none", **settings) as px:
            yield tap, px
    finally:
        tap.close()


def frame_of(key: int, version: int, corr: int, body: Any) -> bytes:
    header = RequestHeader(
        request_api_key=key, request_api_version=version, correlation_id=corr, client_id="fwd"
    )
    return protocol.encode_request(header, body)


def read_frames(sock: socket.socket, n: int) -> list[bytes]:
    """``n`` whole frames, size prefixes included."""
    data = b""
    frames: list[bytes] = []
    while len(frames) < n:
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "the proxy closed the connection"
            data += chunk
        size = 4 + struct.unpack(">i", data[:4])[0]
        frames.append(data[:size])
        data = data[size:]
    assert not data
    return frames


def test_unseen_requests_and_answers_cross_byte_for_byte(broker: RunningBroker) -> None:
    """A Produce and a Fetch (v12: no broker addresses in its answer) reach
    brokerlite as the client wrote them, pipelined with a Metadata request in one
    write, and their answers reach the client as brokerlite wrote them, the
    fetched records' bytes among them; the Metadata answer is rewritten to name
    the proxy, and the filter that asks for Metadata sees it (and nothing else)
    decoded."""
    topic = fresh("fwd")
    create(broker.bootstrap_servers, topic, 1)
    seer = SeesMetadata()
    batch = encode_batch([(0, b"k", b"value-%d" % i, []) for i in range(50)])
    produce = frame_of(ApiKey.PRODUCE, 9, 11, request({0: [batch]}, topic=topic))
    metadata = frame_of(
        ApiKey.METADATA,
        9,
        12,
        md.MetadataRequest(topics=[md.MetadataRequest.MetadataRequestTopic(name=topic)]),
    )
    fetch_frame = frame_of(
        ApiKey.FETCH,
        12,
        13,
        fetch.FetchRequest(
            max_wait_ms=5000,
            min_bytes=1,
            max_bytes=1 << 20,
            topics=[
                fetch.FetchRequest.FetchTopic(
                    topic=topic,
                    partitions=[
                        fetch.FetchRequest.FetchPartition(partition=0, partition_max_bytes=1 << 20)
                    ],
                )
            ],
        ),
    )
    with tapped(broker, filters=(seer,)) as (tap, px):
        with socket.create_connection(px.address, timeout=DEADLINE) as sock:
            sock.sendall(produce + metadata)
            produced, described = read_frames(sock, 2)
            sock.sendall(fetch_frame)
            (fetched,) = read_frames(sock, 1)
        (sent,) = tap.sent  # the client's own upstream connection, alone
        (answered,) = tap.answered

    # What brokerlite received is what the client sent, byte for byte.
    assert bytes(sent) == produce + metadata + fetch_frame
    broker_answers = read_buffer(bytes(answered))
    assert [protocol.peek_correlation_id(f[4:]) for f in broker_answers] == [11, 12, 13]
    # Produce's and Fetch's answers are brokerlite's bytes.
    assert produced == broker_answers[0]
    assert fetched == broker_answers[2]
    _, body = protocol.decode_response(fetched[4:], ApiKey.FETCH, 12)
    (partition,) = body.responses[0].partitions
    assert partition.error_code == 0
    (stored,) = [bytes(raw) for _, raw in iter_batches(partition.records)]
    assert stored[61:] == batch[61:]  # the records, after the header the broker fills in
    # Metadata's answer names the proxy, brokerlite's named itself.
    _, theirs = protocol.decode_response(broker_answers[1][4:], ApiKey.METADATA, 9)
    _, ours = protocol.decode_response(described[4:], ApiKey.METADATA, 9)
    assert [b.port for b in theirs.brokers] == [int(broker.bootstrap_servers.rsplit(":", 1)[1])]
    assert [(b.host, b.port) for b in ours.brokers] == [
        px.statistics.nodes[b.node_id] for b in ours.brokers
    ]
    assert described != broker_answers[1]
    # The filter saw Metadata decoded, both ways, and nothing else.
    assert [(k, [t.name for t in b.topics]) for k, b in seer.requests] == [
        (ApiKey.METADATA, [topic])
    ]
    assert [(k, [t.name for t in b.topics]) for k, b in seer.answers] == [
        (ApiKey.METADATA, [topic])
    ]


def read_buffer(data: bytes) -> list[bytes]:
    """The frames of ``data`` (size prefixes included), which holds whole ones only."""
    frames = []
    while data:
        size = 4 + struct.unpack(">i", data[:4])[0]
        frames.append(data[:size])
        data = data[size:]
    return frames


class HoldingUpstream:
    """A stand-in broker: on each connection, answers the first request at once
    (an empty body: the proxy passes an unseen answer on unread) and keeps the
    second unanswered, telling when it arrived."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        host, port = self.listener.getsockname()[:2]
        self.address = f"{host}:{port}"
        self.held = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                (first,) = read_frames(conn, 1)
                corr = struct.unpack_from(">i", first, 8)[0]  # after size, key, version
                conn.sendall(struct.pack(">ii", 4, corr))
                read_frames(conn, 1)
                self.held.set()
                conn.recv(1)  # until the proxy closes
            except (AssertionError, OSError):
                pass  # a connection that only checked the port

    def close(self) -> None:
        self.listener.close()


def _unacked(sock: socket.socket) -> int:
    """The segments ``sock`` sent that its peer has not acknowledged (Linux's
    ``struct tcp_info``: 8 bytes of flags, then rto, ato, snd_mss, rcv_mss and
    unacked, 32 bits each)."""
    return int(
        struct.unpack_from("I", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 64), 24)[0]
    )


@pytest.mark.skipif(
    not hasattr(socket, "TCP_QUICKACK") or not hasattr(socket, "TCP_INFO"),
    reason="Linux's TCP_QUICKACK and TCP_INFO",
)
def test_a_request_is_acknowledged_when_read_not_with_its_answer() -> None:
    """A client with Nagle's algorithm on (librdkafka's default until 2025) holds a small
    request back until the one before it is acknowledged; the proxy
    acknowledges what it reads at once. After a first round trip (which puts
    Linux's side of the connection in its "ping-pong" mode, where ACKs wait for
    the next answer), a request whose answer the broker withholds is already
    acknowledged when the broker has it: the proxy sends the ACK before it
    writes the request upstream."""
    upstream = HoldingUpstream()
    produce = [
        frame_of(ApiKey.PRODUCE, 9, corr, request({0: [b""]}, acks=1, topic="held"))
        for corr in (1, 2)
    ]
    try:
        with (
            proxy_in_thread(upstream=(upstream.address,), port=0, route_keys="none") as px,
            socket.create_connection(px.address, timeout=DEADLINE) as sock,
        ):
            sock.sendall(produce[0])
            (answered,) = read_frames(sock, 1)
            assert protocol.peek_correlation_id(answered[4:]) == 1
            sock.sendall(produce[1])
            assert upstream.held.wait(DEADLINE)
            assert _unacked(sock) == 0
    finally:
        upstream.close()
