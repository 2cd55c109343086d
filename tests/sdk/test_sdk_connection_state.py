"""ConnectionState: correlation, pipelining, handshake, deadlines, protocol errors (no sockets)."""

from __future__ import annotations

import pytest

from trafka.codec import UnsupportedVersionError, api, decode_request, encode_response
from trafka.codec.messages import k03_metadata as md
from trafka.codec.messages import k18_api_versions as av
from trafka.sdk.connection_state import (
    CLIENT_VERSIONS,
    ConnectionState,
    choose_version,
    reauthentication_delay,
)
from trafka.sdk.errors import ProtocolError, UsageError


def _api_versions_body(**ranges: tuple[int, int]) -> av.ApiVersionsResponse:
    keys = {0: (0, 11), 1: (0, 17), 3: (0, 12), 18: (0, 4)}
    keys.update({int(k[1:]): v for k, v in ranges.items()})
    return av.ApiVersionsResponse(
        api_keys=[
            av.ApiVersionsResponse.ApiVersion(api_key=k, min_version=a, max_version=b)
            for k, (a, b) in keys.items()
        ]
    )


def _ready_state() -> ConnectionState:
    st = ConnectionState("cid")
    frame = st.handshake(now=0.0, timeout=5.0)
    header, _ = decode_request(frame[4:])
    assert header.request_api_key == 18 and header.correlation_id == 0
    out = st.receive_data(
        encode_response(0, 18, header.request_api_version, _api_versions_body()), now=0.0
    )
    assert len(out) == 1 and st.ready
    return st


def test_choose_version_is_highest_common() -> None:
    assert choose_version(3, (0, 12)) == min(12, CLIENT_VERSIONS[3][1])
    assert choose_version(3, (0, 5)) == 5
    assert choose_version(1, (0, 17)) == 17  # topic-id fetches (v13+) included
    assert choose_version(1, (0, 18)) == 18  # KIP-1166: a follower's field only
    assert choose_version(1, (0, 99)) == CLIENT_VERSIONS[1][1]
    with pytest.raises(UnsupportedVersionError, match="does not support"):
        choose_version(3, None)
    with pytest.raises(UnsupportedVersionError, match="no common version"):
        choose_version(0, (0, 2))  # produce below v3 has no record batches


def test_requests_before_handshake_refused() -> None:
    st = ConnectionState()
    with pytest.raises(UsageError):
        st.send_request(3, md.MetadataRequest(), now=0.0, timeout=1.0)


def test_pipelined_responses_in_order() -> None:
    st = _ready_state()
    sent = []
    for i in range(3):
        corr, frame = st.send_request(
            3, md.MetadataRequest(topics=[]), now=1.0, timeout=1.0, cookie=i
        )
        header, _ = decode_request(frame[4:])
        assert header.correlation_id == corr and header.client_id == "cid"
        sent.append((corr, header.request_api_version))
    assert [c for c, _ in sent] == [1, 2, 3]
    blob = b"".join(
        encode_response(c, 3, v, md.MetadataResponse(cluster_id=f"c{c}")) for c, v in sent
    )
    got = []
    for i in range(len(blob)):  # one byte at a time
        got += st.receive_data(blob[i : i + 1])
    assert [r.cookie for r in got] == [0, 1, 2]
    assert [r.body.cluster_id for r in got] == ["c1", "c2", "c3"]
    assert st.in_flight_count == 0


def test_out_of_order_response_is_protocol_error() -> None:
    st = _ready_state()
    (_, _), (c2, f2) = (
        st.send_request(3, md.MetadataRequest(), now=0, timeout=1) for _ in range(2)
    )
    v = decode_request(f2[4:])[0].request_api_version
    with pytest.raises(ProtocolError, match="out of order"):
        st.receive_data(encode_response(c2, 3, v, md.MetadataResponse()))
    assert st.broken
    with pytest.raises(UsageError):
        st.send_request(3, md.MetadataRequest(), now=0, timeout=1)
    assert len(st.fail_all()) == 2


def test_unknown_correlation_id() -> None:
    st = _ready_state()
    with pytest.raises(ProtocolError, match="no request in flight"):
        st.receive_data(encode_response(99, 3, 12, md.MetadataResponse()))
    st = _ready_state()
    st.send_request(3, md.MetadataRequest(), now=0, timeout=1)
    with pytest.raises(ProtocolError, match="unknown correlation id 99"):
        st.receive_data(encode_response(99, 3, 12, md.MetadataResponse()))


def test_garbage_body_is_protocol_error() -> None:
    st = _ready_state()
    corr, _ = st.send_request(3, md.MetadataRequest(), now=0, timeout=1, cookie="m")
    with pytest.raises(ProtocolError, match="undecodable"):
        st.receive_data(b"\x00\x00\x00\x06" + corr.to_bytes(4, "big") + b"\xff\xff")
    # The request the bad frame answered is still there to be failed: its
    # waiter must not wait forever.
    assert [entry.cookie for entry in st.fail_all()] == ["m"]


def test_requests_answered_with_a_bad_frame_are_all_failed() -> None:
    # Three answers in one read, the last undecodable: the first two are not
    # returned (receive_data raises), so fail_all() must give back all three.
    st = _ready_state()
    sent = [st.send_request(3, md.MetadataRequest(), now=0, timeout=1, cookie=i) for i in range(3)]
    good = b"".join(
        encode_response(
            corr, 3, decode_request(frame[4:])[0].request_api_version, md.MetadataResponse()
        )
        for corr, frame in sent[:2]
    )
    bad = b"\x00\x00\x00\x06" + sent[2][0].to_bytes(4, "big") + b"\xff\xff"
    with pytest.raises(ProtocolError, match="undecodable"):
        st.receive_data(good + bad)
    assert [entry.cookie for entry in st.fail_all()] == [0, 1, 2]


@pytest.mark.parametrize("code", [57, 35])
def test_api_versions_error_leaves_the_handshake_to_fail(code: int) -> None:
    # An error answer to the handshake (35 = UNSUPPORTED_VERSION without our
    # API in its list) breaks the connection; the handshake's waiter is failed.
    st = ConnectionState()
    frame = st.handshake(now=0.0, timeout=5.0, cookie="handshake")
    version = decode_request(frame[4:])[0].request_api_version
    answer = av.ApiVersionsResponse(error_code=code, api_keys=[])
    with pytest.raises(ProtocolError, match="ApiVersions"):
        st.receive_data(encode_response(0, 18, version, answer), now=0.0)
    assert [entry.cookie for entry in st.fail_all()] == ["handshake"]


def test_oversized_frame() -> None:
    st = ConnectionState(max_frame_size=10)
    with pytest.raises(ProtocolError, match="framing"):
        st.receive_data(b"\x00\x00\x01\x00")


def test_acks0_produce_expects_no_response() -> None:
    from trafka.codec.messages import k00_produce as produce

    st = _ready_state()
    st.send_request(0, produce.ProduceRequest(acks=0), now=0, timeout=1, expect_response=False)
    assert st.in_flight_count == 0 and st.next_deadline() is None


def test_deadlines() -> None:
    st = _ready_state()
    st.send_request(3, md.MetadataRequest(), now=10.0, timeout=5.0, cookie="a")
    st.send_request(3, md.MetadataRequest(), now=11.0, timeout=1.0, cookie="b")
    assert st.next_deadline() == 12.0
    assert st.expired(11.5) == []
    assert [r.cookie for r in st.expired(12.0)] == ["b"]
    assert {r.cookie for r in st.expired(15.0)} == {"a", "b"}


def test_version_negotiated_per_broker() -> None:
    st = ConnectionState()
    frame = st.handshake(now=0, timeout=1)
    v = decode_request(frame[4:])[0].request_api_version
    st.receive_data(encode_response(0, 18, v, _api_versions_body(k3=(0, 7))))
    _, frame = st.send_request(3, md.MetadataRequest(), now=0, timeout=1)
    assert decode_request(frame[4:])[0].request_api_version == 7
    assert not st.supports(19)


def test_api_versions_downgrade_retry() -> None:
    st = ConnectionState()
    frame = st.handshake(now=0, timeout=1, cookie="hs")
    assert decode_request(frame[4:])[0].request_api_version == api(18).max_version
    # An old broker: UNSUPPORTED_VERSION in the v0 layout, naming ApiVersions 0-2.
    refusal = av.ApiVersionsResponse(
        error_code=35,
        api_keys=[av.ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=2)],
    )
    assert st.receive_data(encode_response(0, 18, 0, refusal), now=0.5) == []
    retry = st.data_to_send()
    header, _ = decode_request(retry[4:])
    assert header.request_api_version == 2 and header.correlation_id == 1
    out = st.receive_data(encode_response(1, 18, 2, _api_versions_body()))
    assert out[0].cookie == "hs" and st.ready


def test_sessions_are_renewed_between_85_and_95_percent_of_their_lifetime() -> None:
    """KIP-368: a client re-authenticates before its session ends, at a random point
    late in it (Kafka's SaslClientAuthenticator: 85% of the lifetime plus up to 10%
    jitter, so that many connections do not renew at once). A driver that renews
    only between requests (brokerlite's inter-broker links) leaves room for the
    longest a request may wait at the peer, but renews no earlier than half-way."""
    assert reauthentication_delay(0, 0.5) is None  # no lifetime: the session lasts
    assert reauthentication_delay(-1, 0.5) is None
    assert reauthentication_delay(10_000, 0.0) == pytest.approx(8.5)
    assert reauthentication_delay(10_000, 1.0) == pytest.approx(9.5)
    assert reauthentication_delay(10_000, 0.5) == pytest.approx(9.0)
    assert reauthentication_delay(10_000, 0.0, longest_wait=0.5) == pytest.approx(8.0)
    assert reauthentication_delay(10_000, 0.0, longest_wait=9.0) == pytest.approx(5.0)
    # Whatever the draw, inside the window.
    for draw in (-1.0, 0.25, 0.75, 2.0):
        delay = reauthentication_delay(3_000, draw)
        assert delay is not None and 2.55 <= delay <= 2.85


def test_a_raw_request_is_correlated_and_answered_with_its_frame() -> None:
    """The proxy's pool: requests of several clients' ids at versions it chose,
    answered with their frames undecoded, in order; an answer out of order
    still breaks the connection."""
    st = ConnectionState(None)
    sent = []
    for i, client in enumerate(["a", None, "a"]):
        corr, frame = st.send_request(
            3,
            md.MetadataRequest(topics=[]),
            now=0.0,
            timeout=1.0,
            version=9,
            cookie=i,
            raw=True,
            client_id=client,
        )
        header, _ = decode_request(frame[4:])
        assert (header.correlation_id, header.client_id) == (corr, client)
        sent.append(corr)
    answers = [encode_response(c, 3, 9, md.MetadataResponse()) for c in sent]
    out = st.receive_data(answers[0] + answers[1])
    assert [(r.correlation_id, r.cookie, r.body) for r in out] == [
        (sent[0], 0, answers[0][4:]),
        (sent[1], 1, answers[1][4:]),
    ]
    with pytest.raises(ProtocolError, match="unknown correlation id"):
        st.receive_data(encode_response(sent[2] + 7, 3, 9, md.MetadataResponse()))
    assert [r.cookie for r in st.fail_all()] == [2]
