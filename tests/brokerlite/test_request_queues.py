"""Kafka's request-channel gauges, read from brokerlite's real queues.

Kafka's ``kafka.network:type=RequestChannel,name=RequestQueueSize`` and
``name=ResponseQueueSize`` beans, as the JMX exporter's Kafka rules name them
(prometheus/jmx_exporter ``examples/kafka-kraft-3_0_0.yml``: the generic gauge
rule ``kafka.(\\w+)<type=(.+), name=(.+)><>Value`` to ``kafka_$1_$2_$3``, names
lowercased): ``kafka_network_requestchannel_requestqueuesize`` and
``kafka_network_requestchannel_responsequeuesize``. Here a raw client pipelines
requests in one write while the broker cannot take them (a long poll parked
ahead of them) or cannot write the replies (the client does not read), and the
scrape counts exactly those waiting, then 0 once they are served.
"""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path
from typing import Any

import trio
from brokerlite_wire import fetch_body, produce_body
from prometheus_client.parser import text_string_to_metric_families

from trafka.brokerlite import serve_broker
from trafka.codec.framing import FrameReader
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import encode_request, peek_correlation_id

DEADLINE = 60
REQUESTS = "kafka_network_requestchannel_requestqueuesize"
REPLIES = "kafka_network_requestchannel_responsequeuesize"
PARKED_FETCHES = ("kafka_server_delayedoperationpurgatory_purgatorysize", "Fetch")


def frame(key: int, version: int, corr: int, body: Any) -> bytes:
    header = RequestHeader(
        request_api_key=key, request_api_version=version, correlation_id=corr, client_id="q"
    )
    return encode_request(header, body)


async def scrape(address: tuple[str, int]) -> dict[str | tuple[str, str], float]:
    def get() -> str:
        url = f"http://{address[0]}:{address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return str(answer.read().decode())

    found: dict[str | tuple[str, str], float] = {}
    for family in text_string_to_metric_families(await trio.to_thread.run_sync(get)):
        for sample in family.samples:
            if not sample.labels:
                found[sample.name] = sample.value
            elif sample.name == PARKED_FETCHES[0]:
                found[sample.name, sample.labels["delayedoperation"]] = sample.value
    return found


async def scrape_until(address: tuple[str, int], wanted: dict[Any, float]) -> dict[Any, float]:
    """Scrape until every series in ``wanted`` has its value (the caller's deadline bounds it)."""
    while True:
        found = await scrape(address)
        if all(found.get(name) == value for name, value in wanted.items()):
            return found
        await trio.sleep(0.02)


async def read_replies(stream: trio.SocketStream, count: int) -> list[int]:
    """The correlation ids of the next ``count`` replies, in the order they came."""
    frames = FrameReader()
    got: list[int] = []
    while len(got) < count:
        data = await stream.receive_some(1 << 20)
        assert data, "the broker closed the connection"
        frames.feed(data)
        got += [peek_correlation_id(f) for f in frames]
    return got


def metadata_body(topic: str) -> metadata.MetadataRequest:
    return metadata.MetadataRequest(
        topics=[metadata.MetadataRequest.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=True,
    )


async def connect_with_topic(running: Any, topic: str) -> trio.SocketStream:
    """A connection on which ``topic`` was created (Metadata with auto-creation)."""
    stream = await trio.open_tcp_stream(*running.address)
    await stream.send_all(frame(3, 12, 1, metadata_body(topic)))
    assert await read_replies(stream, 1) == [1]
    return stream


def serve(data_dir: Path) -> Any:
    return serve_broker(port=0, data_dir=data_dir, metrics_listen="127.0.0.1:0")


def test_requests_read_behind_a_parked_one_are_counted_until_taken(data_dir: Path) -> None:
    async def main() -> None:
        with trio.fail_after(DEADLINE):
            async with serve(data_dir) as running:
                metrics = running.metrics_address
                other = await connect_with_topic(running, "t")
                assert (await scrape(metrics))[REQUESTS] == 0
                # One write: a long poll on the empty topic, then five ApiVersions.
                # The broker reads them all and takes the first; the other five
                # wait behind it, whole, in the connection's read buffer.
                client = await trio.open_tcp_stream(*running.address)
                pipelined = frame(1, 12, 1, fetch_body("t", max_wait_ms=30_000))
                pipelined += b"".join(
                    frame(18, 3, corr, api_versions.ApiVersionsRequest()) for corr in range(2, 7)
                )
                await client.send_all(pipelined)
                found = await scrape_until(metrics, {PARKED_FETCHES: 1, REQUESTS: 5})
                assert found[REPLIES] == 0
                # A record wakes the long poll: its answer, then the five in order.
                await other.send_all(frame(0, 9, 2, produce_body("t", [b"go"])))
                assert await read_replies(other, 1) == [2]
                assert await read_replies(client, 6) == [1, 2, 3, 4, 5, 6]
                found = await scrape(metrics)
                assert (found[REQUESTS], found[REPLIES], found[PARKED_FETCHES]) == (0, 0, 0)
                await client.aclose()
                await other.aclose()

    trio.run(main)


def test_replies_the_client_does_not_read_are_counted_until_written(data_dir: Path) -> None:
    batches = [[bytes([b]) * 65536 for _ in range(8)] for b in range(10)]  # 5 MiB
    log_bytes = 5 * (1 << 20)

    async def main() -> None:
        with trio.fail_after(DEADLINE):
            async with serve(data_dir) as running:
                metrics = running.metrics_address
                writer = await connect_with_topic(running, "big")
                for corr, values in enumerate(batches, start=2):
                    await writer.send_all(frame(0, 9, corr, produce_body("big", values)))
                    assert await read_replies(writer, 1) == [corr]
                # A reader with a small receive window asks for the whole log four
                # times in one write and reads nothing: no reply can be written out.
                sock = trio.socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                await sock.connect(running.address)
                client = trio.SocketStream(sock)
                await client.send_all(
                    b"".join(
                        frame(1, 12, corr, fetch_body("big", max_bytes=2 * log_bytes))
                        for corr in range(1, 5)
                    )
                )
                await scrape_until(metrics, {REPLIES: 4, REQUESTS: 0})
                assert await read_replies(client, 4) == [1, 2, 3, 4]
                found = await scrape(metrics)
                assert (found[REQUESTS], found[REPLIES]) == (0, 0)
                await client.aclose()
                await writer.aclose()

    trio.run(main)
