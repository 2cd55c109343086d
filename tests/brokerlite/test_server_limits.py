"""What a connection may cost the broker, through real sockets: the memory of
requests still arriving (queued.max.request.bytes, and the smaller limit before
SASL authentication), idle connections (connections.max.idle.ms), requests that
stop or trickle mid-frame (request.receive.timeout.ms), and log lines a client
can repeat at will (one a minute, with a count).

Each test starts its own broker with small limits. Nothing here measures time:
the tests wait (within generous deadlines) for what must happen.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from brokerlite_wire import fetch_body, produce_body

from trafka.brokerlite.server import RunningBroker, broker_in_thread
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k19_create_topics as create_topics
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response, encode_request

pytestmark = pytest.mark.timeout(60)


@contextmanager
def served(data_dir: Path, **settings: Any) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0, data_dir=data_dir, group_initial_rebalance_delay_ms=0, **settings
    ) as running:
        yield running


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def still_serving(client: Any) -> None:
    assert client.request(18, 3, api_versions.ApiVersionsRequest()).error_code == 0


def produce_frame(corr: int, size: int) -> bytes:
    """A whole Produce v9 frame (size prefix included) of about ``size`` bytes."""
    header = RequestHeader(
        request_api_key=0, request_api_version=9, correlation_id=corr, client_id="big"
    )
    return encode_request(header, produce_body("absent", [b"x" * size], acks=1))


def closing_lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "trafka.brokerlite" and text in r.getMessage()
    ]


def test_requests_still_arriving_share_one_budget(data_dir: Path, raw_client: Any) -> None:
    """Three connections each send part of a 700 KB request to a broker with a
    1 MB budget: the first to be read reserves its request, the others are not
    read until it is in and answered, then one after the other."""
    with served(data_dir, queued_max_request_bytes=1_000_000) as running:
        budget = running.request_budget
        frames = [produce_frame(corr, 700_000) for corr in (1, 2, 3)]
        clients = [raw_client(running.address) for _ in frames]
        for client, frame in zip(clients, frames, strict=True):
            client.send_raw(frame[:100_000])
        size = len(frames[0]) - 4
        wait_until(lambda: budget.used == size and budget.waiting == 2, "two readers held back")
        # The rests, from threads: those held back are not read until their turn.
        senders = [
            threading.Thread(target=client.send_raw, args=(frame[100_000:],))
            for client, frame in zip(clients, frames, strict=True)
        ]
        for sender in senders:
            sender.start()
        for client in clients:
            _, answer = decode_response(client.read_frame(), 0, 9)
            [partition] = answer.responses[0].partition_responses
            assert partition.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for sender in senders:
            sender.join()
        wait_until(lambda: budget.used == 0 and budget.waiting == 0, "everything released")


def test_a_frame_too_large_before_sasl_authentication_closes_with_a_clear_line(
    data_dir: Path, raw_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trafka.brokerlite")
    with served(data_dir, security_protocol="SASL_PLAINTEXT", sasl_users="alice:secret") as b:
        bystander = raw_client(b.address)
        still_serving(bystander)
        client = raw_client(b.address)
        client.send_raw(struct.pack(">i", 20 * 1024 * 1024))
        assert client.is_closed_by_peer()
        [line] = closing_lines(caplog, "before SASL authentication")
        assert "20971520 bytes exceeds the maximum of 524288" in line
        assert "sasl.server.max.receive.size" in line
        still_serving(bystander)


def test_a_request_refused_before_authentication_closes_before_its_body(
    data_dir: Path, raw_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka reads a whole request (up to 512 KiB) before refusing it by its API
    key; brokerlite refuses it from its header and does not wait for the body."""
    caplog.set_level(logging.WARNING, logger="trafka.brokerlite")
    with served(data_dir, security_protocol="SASL_PLAINTEXT", sasl_users="alice:secret") as b:
        client = raw_client(b.address)
        client.send_raw(struct.pack(">ihhi", 400_000, 0, 9, 1))  # a Produce's header only
        assert client.is_closed_by_peer()
        [line] = closing_lines(caplog, "closing the connection")
        assert "Produce request before SASL authentication" in line


def test_idle_connections_close_but_parked_requests_do_not_count(
    data_dir: Path, raw_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trafka.brokerlite")
    with served(data_dir, connections_max_idle_ms=1000) as running:
        client = raw_client(running.address)
        topic = create_topics.CreateTopicsRequest.CreatableTopic(
            name="idle", num_partitions=1, replication_factor=1
        )
        created = client.request(19, 5, create_topics.CreateTopicsRequest(topics=[topic]))
        assert created.topics[0].error_code == 0
        # A fetch parked for longer than the idle limit is answered on its connection.
        answer = client.request(1, 11, fetch_body("idle", max_wait_ms=2500))
        assert answer.responses[0].partitions[0].error_code == 0
        still_serving(client)
        # Then, silent, it is closed.
        assert client.is_closed_by_peer()
        assert closing_lines(caplog, "idle for 1000 ms (connections.max.idle.ms)")


def test_a_request_that_stops_mid_frame_is_closed(
    data_dir: Path, raw_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trafka.brokerlite")
    with served(data_dir, request_receive_timeout_ms=300) as running:
        bystander = raw_client(running.address)
        client = raw_client(running.address)
        client.send_raw(struct.pack(">i", 100) + b"\x00\x12\x00\x03\x00")
        assert client.is_closed_by_peer()
        [line] = closing_lines(caplog, "request.receive.timeout.ms")
        assert "9 of 104 bytes" in line
        still_serving(bystander)


def test_a_trickled_request_is_closed_however_steady_the_trickle(
    data_dir: Path, raw_client: Any
) -> None:
    """Slowloris: a byte every 20 ms keeps a connection busy but never completes a
    request; the request's own deadline closes it."""
    with served(data_dir, request_receive_timeout_ms=500) as running:
        client = raw_client(running.address)
        client.send_raw(struct.pack(">i", 1000))
        deadline = time.monotonic() + 20
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                client.send_raw(b"\x00")
            except OSError:
                closed = True
                break
            closed = client.is_closed_by_peer(within=0.02)
        assert closed


def test_a_flood_of_malformed_frames_logs_one_line(
    data_dir: Path, raw_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trafka.brokerlite")
    with served(data_dir) as running:
        bystander = raw_client(running.address)
        for _ in range(30):
            bad = raw_client(running.address)
            bad.send_raw(struct.pack(">i", -5))
            assert bad.is_closed_by_peer()
            bad.close()
        assert len(closing_lines(caplog, "negative frame size")) == 1
        still_serving(bystander)
