"""Bad input closes only the offending connection; the broker keeps serving others.

Each test breaks one connection in one way, checks that the broker closed it
(and, where it says why, that the log line names the client), then checks that
a second client, connected before the damage, is still answered.
"""

from __future__ import annotations

import logging
import struct
from typing import Any

import pytest

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k22_init_producer_id as init_producer_id
from trafka.codec.messages import k60_describe_cluster as describe_cluster

pytestmark = pytest.mark.timeout(60)


def still_serving(client: Any) -> None:
    response = client.request(18, 3, api_versions.ApiVersionsRequest())
    assert response.error_code == 0 and response.api_keys


def header(key: int, version: int, corr: int = 1, client_id: bytes = b"evil") -> bytes:
    return struct.pack(">hhih", key, version, corr, len(client_id)) + client_id


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@pytest.fixture
def pair(running: Any, raw_client: Any) -> tuple[Any, Any]:
    bystander = raw_client(running.address)
    still_serving(bystander)
    return raw_client(running.address), bystander


def test_garbage_frame(pair: tuple[Any, Any], caplog: pytest.LogCaptureFixture) -> None:
    bad, good = pair
    caplog.set_level(logging.WARNING, logger="trafka.brokerlite")
    bad.send_raw(framed(b"\x00\x03\x00\x01garbage that is not a request"))
    assert bad.is_closed_by_peer()
    still_serving(good)


def test_lying_array_length(pair: tuple[Any, Any], caplog: pytest.LogCaptureFixture) -> None:
    bad, good = pair
    caplog.set_level(logging.WARNING, logger="trafka.brokerlite")
    # Metadata v1 whose topics array claims two billion entries in a 4-byte body.
    bad.send_raw(framed(header(3, 1) + b"\x7f\xff\xff\xff"))
    assert bad.is_closed_by_peer()
    line = next(r.getMessage() for r in caplog.records if "malformed Metadata" in r.getMessage())
    assert "127.0.0.1:" in line and "'evil'" in line
    still_serving(good)


def test_frame_size_larger_than_what_follows(pair: tuple[Any, Any]) -> None:
    bad, good = pair
    # Announces 1000 bytes, sends 20, then half-closes: the frame never completes.
    bad.send_raw(struct.pack(">i", 1000) + header(18, 0) + b"\x00" * 10)
    bad.sock.shutdown(1)
    assert bad.is_closed_by_peer()
    still_serving(good)


def test_negative_and_oversized_frame_sizes(running: Any, raw_client: Any) -> None:
    good = raw_client(running.address)
    negative = raw_client(running.address)
    negative.send_raw(struct.pack(">i", -5) + b"abcd")
    assert negative.is_closed_by_peer()
    huge = raw_client(running.address)
    huge.send_raw(struct.pack(">i", 200 * 1024 * 1024))  # above socket.request.max.bytes
    assert huge.is_closed_by_peer()
    still_serving(good)


def test_unknown_api_key_is_logged_with_the_client(
    pair: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    bad, good = pair
    caplog.set_level(logging.WARNING, logger="trafka.brokerlite")
    bad.send_raw(framed(header(4242, 0, client_id=b"mystery-client")))
    assert bad.is_closed_by_peer()
    line = next(r.getMessage() for r in caplog.records if "unknown API key" in r.getMessage())
    assert "mystery-client" in line and "127.0.0.1:" in line
    still_serving(good)


def test_unsupported_versions(pair: tuple[Any, Any]) -> None:
    client, good = pair
    # A version the codec knows but brokerlite does not serve: an error response,
    # and the connection stays usable.
    # (InitProducerId v6, KIP-939's two-phase commit in Kafka 4.4's specs, which
    # Kafka 4.0 does not serve: brokerlite serves v0-5.)
    body = init_producer_id.InitProducerIdRequest(transaction_timeout_ms=1000)
    response = client.request(22, 6, body)
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    # ApiVersions from the future: a v0 answer naming the versions to use.
    corr = 99
    client.send_raw(framed(header(18, 42, corr) + b"\x00\x00"))
    frame = client.read_frame()
    correlation, error, count = struct.unpack_from(">ihi", frame)
    assert (correlation, error, count) == (corr, ErrorCode.UNSUPPORTED_VERSION, 1)
    assert struct.unpack_from(">hhh", frame, 10) == (18, 0, 5)  # (v5: KIP-1242, as Kafka 4.4)
    still_serving(client)
    # A version no schema exists for: nothing to answer with, so the connection closes.
    client.send_raw(framed(header(3, 99)))
    assert client.is_closed_by_peer()
    still_serving(good)


def test_a_slow_reader_is_not_a_problem_for_others(running: Any, raw_client: Any) -> None:
    slow = raw_client(running.address)
    good = raw_client(running.address)
    # Pipeline many requests and read none of the responses for now.
    for _ in range(200):
        slow.send(3, 12, metadata.MetadataRequest(topics=None))
    still_serving(good)
    for _ in range(200):
        assert slow.read_frame()


def test_an_unencodable_response_costs_one_connection(
    running: Any, raw_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from trafka.brokerlite.handlers import HANDLERS

    def broken(ctx: Any, request: Any) -> Any:
        not_a_string: Any = None  # cluster_id cannot be null: the encoder refuses it
        return describe_cluster.DescribeClusterResponse(cluster_id=not_a_string)

    good = raw_client(running.address)
    still_serving(good)
    monkeypatch.setitem(HANDLERS, 60, dataclasses.replace(HANDLERS[60], handle=broken))
    bad = raw_client(running.address)
    bad.send(60, 1, describe_cluster.DescribeClusterRequest())
    assert bad.is_closed_by_peer()
    still_serving(good)
