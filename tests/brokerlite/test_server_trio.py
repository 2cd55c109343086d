"""The trio driver: ordering, long polls across connections, sendfile, lifecycle."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from brokerlite_wire import fetch_body, produce_body

from trafka.brokerlite import serve_broker
from trafka.codec.errors import ErrorCode
from trafka.codec.framing import FrameReader
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response, encode_request, peek_correlation_id
from trafka.codec.records import decode_records

DEADLINE = 30


class Client:
    """A minimal pipelining trio client: send requests, read responses in order."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.frames = FrameReader()
        self.corr = 0
        self.sent: dict[int, tuple[int, int]] = {}

    @classmethod
    async def connect(cls, address: tuple[str, int]) -> Client:
        return cls(await trio.open_tcp_stream(*address))

    async def send(self, key: int, version: int, body: Any) -> int:
        self.corr += 1
        header = RequestHeader(
            request_api_key=key,
            request_api_version=version,
            correlation_id=self.corr,
            client_id="trio-test",
        )
        self.sent[self.corr] = (key, version)
        await self.stream.send_all(encode_request(header, body))
        return self.corr

    async def receive(self) -> tuple[int, Any]:
        while True:
            frame = self.frames.next_frame()
            if frame is not None:
                corr = peek_correlation_id(frame)
                key, version = self.sent.pop(corr)
                return corr, decode_response(frame, key, version)[1]
            data = await self.stream.receive_some(1 << 20)
            if not data:
                raise EOFError("broker closed the connection")
            self.frames.feed(data)

    async def request(self, key: int, version: int, body: Any) -> Any:
        corr = await self.send(key, version, body)
        got, response = await self.receive()
        assert got == corr
        return response

    async def aclose(self) -> None:
        await self.stream.aclose()


def metadata_body(topic: str) -> metadata.MetadataRequest:
    return metadata.MetadataRequest(
        topics=[metadata.MetadataRequest.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=True,
    )


def run(test: Any, data_dir: Path) -> None:
    async def main() -> None:
        with trio.fail_after(DEADLINE):
            async with serve_broker(
                port=0, data_dir=data_dir, group_initial_rebalance_delay_ms=0
            ) as running:
                await test(running)

    trio.run(main)


def test_long_poll_holds_its_connection_only(data_dir: Path) -> None:
    async def test(running: Any) -> None:
        waiter = await Client.connect(running.address)
        other = await Client.connect(running.address)
        await other.request(3, 12, metadata_body("t"))  # creates it (not yet answered)
        assert (await other.request(3, 12, metadata_body("t"))).topics[0].error_code == 0
        # A long poll, then a pipelined Metadata on the same connection.
        fetch_corr = await waiter.send(1, 12, fetch_body("t", max_wait_ms=20_000))
        meta_corr = await waiter.send(3, 12, metadata_body("t"))
        # The other connection is served while the fetch waits...
        start = trio.current_time()
        for _ in range(3):
            assert (await other.request(3, 12, metadata_body("t"))).topics[0].error_code == 0
        # ...and its produce wakes the fetch long before max_wait_ms.
        await other.request(0, 9, produce_body("t", [b"wake up"]))
        corr, response = await waiter.receive()
        assert corr == fetch_corr
        records = response.responses[0].partitions[0].records
        assert [r.value for r in decode_records(records)] == [b"wake up"]
        corr, _ = await waiter.receive()
        assert corr == meta_corr  # answered after the fetch it was queued behind
        assert trio.current_time() - start < 15
        await waiter.aclose()
        await other.aclose()

    run(test, data_dir)


def test_long_poll_times_out_empty(data_dir: Path) -> None:
    async def test(running: Any) -> None:
        client = await Client.connect(running.address)
        await client.request(3, 12, metadata_body("t"))
        start = trio.current_time()
        response = await client.request(1, 12, fetch_body("t", max_wait_ms=300))
        assert trio.current_time() - start >= 0.25
        part = response.responses[0].partitions[0]
        assert part.error_code == 0 and not part.records
        await client.aclose()

    run(test, data_dir)


@pytest.mark.parametrize("sendfile", [True, False], ids=["sendfile", "pread"])
def test_large_fetch_bytes_are_exact(
    data_dir: Path, sendfile: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not sendfile:
        monkeypatch.delattr(os, "sendfile", raising=False)
    values = [uuid.uuid4().bytes * 2000 for _ in range(40)]  # ~1.3 MB over 40 batches

    async def test(running: Any) -> None:
        client = await Client.connect(running.address)
        await client.request(3, 12, metadata_body("big"))
        for value in values:
            response = await client.request(0, 9, produce_body("big", [value]))
            assert response.responses[0].partition_responses[0].error_code == 0
        got: list[bytes | None] = []
        while len(got) < len(values):
            response = await client.request(1, 12, fetch_body("big", len(got)))
            part = response.responses[0].partitions[0]
            assert part.error_code == 0
            got += [r.value for r in decode_records(part.records)]
        assert got == values
        await client.aclose()

    run(test, data_dir)


def test_data_and_cluster_id_survive_a_restart(data_dir: Path) -> None:
    seen: dict[str, Any] = {}

    async def write(running: Any) -> None:
        client = await Client.connect(running.address)
        await client.request(3, 12, metadata_body("keep"))
        await client.request(0, 9, produce_body("keep", [b"one", b"two"]))
        seen["cluster"] = running.broker.cluster_id
        await client.aclose()

    async def read(running: Any) -> None:
        client = await Client.connect(running.address)
        response = await client.request(1, 12, fetch_body("keep"))
        part = response.responses[0].partitions[0]
        assert [r.value for r in decode_records(part.records)] == [b"one", b"two"]
        assert running.broker.cluster_id == seen["cluster"]
        await client.aclose()

    run(write, data_dir)
    run(read, data_dir)


def test_leaving_the_block_closes_everything_and_errors_pass_through(data_dir: Path) -> None:
    address: list[tuple[str, int]] = []

    async def main() -> None:
        with trio.fail_after(DEADLINE):
            with pytest.raises(KeyError, match="boom"):
                async with serve_broker(port=0, data_dir=data_dir) as running:
                    address.append(running.address)
                    client = await Client.connect(running.address)
                    await client.request(3, 12, metadata_body("t"))
                    raise KeyError("boom")
            # The client's connection was closed by the broker.
            with pytest.raises((EOFError, trio.BrokenResourceError)):
                await client.request(3, 12, metadata_body("t"))

    trio.run(main)
    with pytest.raises(OSError), socket.create_connection(address[0], timeout=2):
        pass


def test_two_brokers_cannot_share_a_data_directory(data_dir: Path) -> None:
    async def main() -> None:
        with trio.fail_after(DEADLINE):
            async with serve_broker(port=0, data_dir=data_dir):
                with pytest.raises(Exception, match="in use"):
                    async with serve_broker(port=0, data_dir=data_dir):
                        pass

    trio.run(main)


def test_unknown_topic_error_is_reported_per_partition(data_dir: Path) -> None:
    async def test(running: Any) -> None:
        client = await Client.connect(running.address)
        response = await client.request(0, 9, produce_body("never-created", [b"x"]))
        code = response.responses[0].partition_responses[0].error_code
        assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await client.aclose()

    run(test, data_dir)
