"""Request and response headers: the version rules and the hand-written fast path.

``trafka.codec.protocol`` reads and writes headers by hand (they are on every
frame); these tests hold that code to the generated header schemas
(``REQUESTHEADER_SCHEMAS`` / ``RESPONSEHEADER_SCHEMAS``) byte for byte, with
hypothesis, and spell out the version rules from Kafka's protocol guide.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import unknown_tags_strategy

from trafka.codec import DecodeError, EncodeError, UnsupportedVersionError, protocol
from trafka.codec.messages import headers
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.protocol import RequestHeader, ResponseHeader, all_apis, api

REQ = headers.REQUESTHEADER_SCHEMAS
RESP = headers.RESPONSEHEADER_SCHEMAS
APIS = all_apis()
_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _default_body(key: int, version: int, response: bool = False) -> Any:
    info = api(key)
    return (info.response_type if response else info.request_type)()


# -- version rules -------------------------------------------------------------------


@pytest.mark.parametrize("info", APIS, ids=[a.name for a in APIS])
def test_header_versions_follow_flexibility(info: protocol.ApiInfo) -> None:
    for v in range(info.min_version, info.max_version + 1):
        flexible = info.is_flexible(v)
        assert info.request_header_version(v) == (2 if flexible else 1)
        if info.key == 18:
            # ApiVersions responses are read before the client knows what the
            # broker speaks: always header v0, even for flexible versions.
            assert info.response_header_version(v) == 0
        else:
            assert info.response_header_version(v) == (1 if flexible else 0)


def test_request_header_v2_keeps_a_classic_client_id() -> None:
    """ApiVersions v3 is flexible: header v2, but client_id has an int16 length."""
    header = RequestHeader(
        request_api_key=18, request_api_version=3, correlation_id=7, client_id="abc"
    )
    body = api_versions.ApiVersionsRequest(client_software_name="x", client_software_version="1")
    frame = protocol.encode_request(header, body)
    body_bytes = protocol.encode_request_body(18, 3, body)
    expected_header = (
        struct.pack(">hhi", 18, 3, 7) + b"\x00\x03abc" + b"\x00"  # no tagged fields
    )
    assert frame[4:] == expected_header + body_bytes
    assert frame[:4] == struct.pack(">i", len(expected_header) + len(body_bytes))
    assert REQ[2].build(header) == expected_header


def test_request_header_v1_has_no_tagged_section() -> None:
    header = RequestHeader(
        request_api_key=18, request_api_version=2, correlation_id=-5, client_id=None
    )
    frame = protocol.encode_request(header, api_versions.ApiVersionsRequest())
    assert frame[4:] == struct.pack(">hhih", 18, 2, -5, -1)  # v2 request body is empty
    assert protocol.decode_request(frame[4:]) == (header, api_versions.ApiVersionsRequest())


def test_request_header_v2_tagged_fields_round_trip() -> None:
    header = RequestHeader(
        request_api_key=3,
        request_api_version=12,
        correlation_id=1,
        client_id="c",
        unknown_tagged_fields=[(0, b"\x01"), (70000, b"")],
    )
    frame = protocol.encode_request(header, metadata.MetadataRequest(topics=None))
    # Two tags: 0 (one byte of data), then 70000 (uvarint f0 a2 04, empty).
    tagged = b"\x02" + b"\x00\x01\x01" + b"\xf0\xa2\x04\x00"
    assert frame[4:].startswith(struct.pack(">hhi", 3, 12, 1) + b"\x00\x01c" + tagged)
    got, body = protocol.decode_request(frame[4:])
    assert got == header
    assert body == metadata.MetadataRequest(topics=None)


def test_response_header_v0_and_v1() -> None:
    body = metadata.MetadataResponse()
    v0 = protocol.encode_response(9, 3, 8, body)  # Metadata v8: not flexible
    assert v0[4:] == struct.pack(">i", 9) + protocol.encode_response_body(3, 8, body)
    v1 = protocol.encode_response(9, 3, 9, body)  # Metadata v9: flexible
    assert v1[4:] == struct.pack(">i", 9) + b"\x00" + protocol.encode_response_body(3, 9, body)
    assert protocol.decode_response(v1[4:], 3, 9) == (ResponseHeader(correlation_id=9), body)

    tagged = struct.pack(">i", 9) + b"\x01\x05\x02hi" + protocol.encode_response_body(3, 9, body)
    header, decoded = protocol.decode_response(tagged, 3, 9)
    assert header == ResponseHeader(correlation_id=9, unknown_tagged_fields=[(5, b"hi")])
    assert decoded == body
    # The clients' path skips the header's tags, whichever form they take.
    for frame, version in ((v0[4:], 8), (v1[4:], 9), (tagged, 9)):
        assert protocol.decode_response_frame(frame, 3, version) == body
    assert protocol.decode_response_frame(memoryview(tagged), 3, 9) == body


@pytest.mark.parametrize("version", range(api(18).min_version, api(18).max_version + 1))
def test_api_versions_response_always_uses_header_v0(version: int) -> None:
    body = api_versions.ApiVersionsResponse(error_code=35)
    frame = protocol.encode_response(11, 18, version, body)
    assert frame[4:] == struct.pack(">i", 11) + protocol.encode_response_body(18, version, body)
    assert protocol.decode_response(frame[4:], 18, version) == (
        ResponseHeader(correlation_id=11),
        body,
    )


def test_api_versions_v0_response_is_readable_by_an_old_client() -> None:
    """A broker answers an unknown ApiVersions version with a v0 body; the error
    code comes first, so any client can read it."""
    frame = protocol.encode_response(3, 18, 0, api_versions.ApiVersionsResponse(error_code=35))
    assert frame[8:10] == struct.pack(">h", 35)


def test_unknown_api_still_yields_the_header() -> None:
    """A broker must answer even an unknown API key, so it needs the correlation id."""
    frame = struct.pack(">hhih", 999, 0, 77, 2) + b"id" + b"junk"
    header, offset = protocol.decode_request_header(frame)
    assert header == RequestHeader(
        request_api_key=999, request_api_version=0, correlation_id=77, client_id="id"
    )
    assert offset == 12
    with pytest.raises(UnsupportedVersionError) as info:
        protocol.decode_request(frame)
    assert info.value.header == header  # type: ignore[attr-defined]


def test_unsupported_version_of_a_known_api_yields_the_header() -> None:
    frame = struct.pack(">hhih", 18, 99, 5, -1) + b"\x00\x00"
    with pytest.raises(UnsupportedVersionError) as info:
        protocol.decode_request(frame)
    header = info.value.header  # type: ignore[attr-defined]
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (
        18,
        99,
        5,
    )


def test_peek_correlation_id() -> None:
    assert protocol.peek_correlation_id(struct.pack(">i", -3) + b"rest") == -3
    with pytest.raises(DecodeError):
        protocol.peek_correlation_id(b"\x00\x00\x01")


# -- the fast path against the generated schemas ---------------------------------------

_KEYS = st.sampled_from([a.key for a in APIS])


@st.composite
def request_headers(draw: st.DrawFn) -> RequestHeader:
    info = api(draw(_KEYS))
    version = draw(st.integers(info.min_version, info.max_version))
    flexible = info.is_flexible(version)
    return RequestHeader(
        request_api_key=info.key,
        request_api_version=version,
        correlation_id=draw(st.integers(-(2**31), 2**31 - 1)),
        client_id=draw(st.none() | st.text(max_size=30)),
        unknown_tagged_fields=draw(unknown_tags_strategy(set())) if flexible else [],
    )


@_SETTINGS
@given(header=request_headers(), trailer=st.binary(max_size=8))
def test_request_header_fast_path_matches_schemas(header: RequestHeader, trailer: bytes) -> None:
    version = api(header.request_api_key).request_header_version(header.request_api_version)
    schema = REQ[version]
    encoded = schema.build(header)
    assert schema.compile().build(header) == encoded

    # Encoding: the header part of encode_request is the schema's bytes.
    body = _default_body(header.request_api_key, header.request_api_version)
    frame = protocol.encode_request(header, body)
    assert frame[4 : 4 + len(encoded)] == encoded

    # Decoding: the fast path gives the schema's value and stops where it does.
    got, offset = protocol.decode_request_header(encoded + trailer)
    assert got == schema.parse(encoded + trailer) == header
    assert offset == len(encoded)


@_SETTINGS
@given(data=st.binary(min_size=8, max_size=40), key=_KEYS, version=st.integers(0, 20))
def test_request_header_fast_path_agrees_on_any_bytes(data: bytes, key: int, version: int) -> None:
    """Arbitrary header bytes: both readers accept the same thing, or both refuse."""
    info = api(key)
    assume(info.supports(version))
    frame = struct.pack(">hh", key, version) + data[4:]
    schema = REQ[info.request_header_version(version)]
    try:
        expected: Any = schema.parse(frame)
        consumed = len(schema.build(expected))
    except DecodeError:
        expected = DecodeError
    try:
        got: Any = protocol.decode_request_header(frame)
    except DecodeError as exc:
        assert exc.message_name == "RequestHeader"
        got = DecodeError
    if expected is DecodeError:
        assert got is DecodeError
    else:
        assert got == (expected, consumed)


@_SETTINGS
@given(
    corr=st.integers(-(2**31), 2**31 - 1),
    tags=unknown_tags_strategy(set()),
    key=_KEYS,
    data=st.data(),
)
def test_response_header_fast_path_matches_schemas(
    corr: int, tags: list[tuple[int, bytes]], key: int, data: st.DataObject
) -> None:
    info = api(key)
    version = data.draw(st.integers(info.min_version, info.max_version), label="version")
    header_version = info.response_header_version(version)
    if header_version == 0:
        tags = []
    header = ResponseHeader(correlation_id=corr, unknown_tagged_fields=tags)
    schema = RESP[header_version]
    encoded = schema.build(header)
    assert schema.compile().build(header) == encoded
    body = _default_body(key, version, response=True)
    body_bytes = protocol.encode_response_body(key, version, body)

    got_header, got_body = protocol.decode_response(encoded + body_bytes, key, version)
    assert got_header == schema.parse(encoded) == header
    assert got_body == body
    if not tags:
        # encode_response writes no header tags; then the bytes are the schema's.
        assert protocol.encode_response(corr, key, version, body)[4:] == encoded + body_bytes


@pytest.mark.parametrize(
    ("frame", "field"),
    [
        (b"\x00\x12\x00", None),  # shorter than the fixed part
        (struct.pack(">hhi", 18, 3, 1) + b"\x00", "client_id"),  # half a length
        (struct.pack(">hhih", 18, 3, 1, 5) + b"abc", "client_id"),  # length > bytes left
        (struct.pack(">hhih", 18, 3, 1, -2), "client_id"),  # negative, not -1
        (struct.pack(">hhih", 18, 3, 1, 2) + b"\xc3\x28", "client_id"),  # bad UTF-8
        (struct.pack(">hhih", 18, 3, 1, -1), "_tagged_fields"),  # v2: tag count missing
        (struct.pack(">hhih", 18, 3, 1, -1) + b"\x01\x00\x05ab", "_tagged_fields"),
        (struct.pack(">hhih", 18, 3, 1, -1) + b"\xff\xff\xff\xff\xff\x01", "_tagged_fields"),
    ],
)
def test_bad_request_headers_are_decode_errors(frame: bytes, field: str | None) -> None:
    with pytest.raises(DecodeError) as info:
        protocol.decode_request_header(frame)
    assert info.value.message_name == "RequestHeader"
    assert info.value.field == field
    # The generated schema refuses them too.
    with pytest.raises(DecodeError):
        REQ[2].parse(frame)


@pytest.mark.parametrize("corr", [2**31, -(2**31) - 1])
def test_out_of_range_correlation_id_is_an_encode_error(corr: int) -> None:
    header = RequestHeader(request_api_key=18, request_api_version=0, correlation_id=corr)
    with pytest.raises(EncodeError):
        protocol.encode_request(header, api_versions.ApiVersionsRequest())
    with pytest.raises(EncodeError):
        protocol.encode_response(corr, 18, 0, api_versions.ApiVersionsResponse())


def test_malformed_header_tag_is_an_encode_error() -> None:
    header = RequestHeader(
        request_api_key=18,
        request_api_version=3,
        correlation_id=1,
        unknown_tagged_fields=[(1, "text")],  # type: ignore[list-item]
    )
    with pytest.raises(EncodeError):
        protocol.encode_request(header, api_versions.ApiVersionsRequest())


def test_trailing_bytes_refused_unless_allowed() -> None:
    """Strict by default; a server that must accept what Kafka accepts can opt out."""
    header = RequestHeader(request_api_key=3, request_api_version=12, correlation_id=9)
    frame = protocol.encode_request(header, metadata.MetadataRequest(topics=None))[4:] + b"\0\0\0"
    with pytest.raises(DecodeError, match="3 trailing bytes"):
        protocol.decode_request(frame)
    got_header, body = protocol.decode_request(frame, allow_trailing=True)
    assert got_header.correlation_id == 9 and body.topics is None
    body_only = frame[protocol.decode_request_header(frame)[1] :]
    assert protocol.decode_request_body(3, 12, body_only, allow_trailing=True) == body
    with pytest.raises(DecodeError, match="trailing"):
        protocol.decode_request_body(3, 12, body_only)


def test_headers_and_bodies_decode_in_place_from_bytes_or_memoryview() -> None:
    header = RequestHeader(
        request_api_key=3,
        request_api_version=12,
        correlation_id=4,
        client_id="c",
        unknown_tagged_fields=[(2, b"ab")],
    )
    body = metadata.MetadataRequest(topics=None)
    frame = protocol.encode_request(header, body)[4:]
    for data in (frame, memoryview(frame), bytearray(frame)):
        got, at = protocol.decode_request_header(data)
        assert got == header
        assert protocol.decode_request_body(3, 12, data, start=at) == body
    plain = RequestHeader(
        request_api_key=3, request_api_version=12, correlation_id=4, client_id="c"
    )
    untagged = protocol.encode_request(plain, body)[4:]
    got, at = protocol.decode_request_header(memoryview(untagged))
    assert not got.unknown_tagged_fields and untagged[at - 1] == 0
    assert protocol.decode_request_body(3, 12, untagged, start=at) == body

    response = protocol.encode_response(9, 3, 12, metadata.MetadataResponse())[4:]
    got_response = protocol.decode_response(memoryview(response), 3, 12)[0]
    assert got_response == ResponseHeader(correlation_id=9)
    truncated = struct.pack(">i", 9)  # a flexible header without its tag count
    with pytest.raises(DecodeError) as info:
        protocol.decode_response(memoryview(truncated), 3, 12)
    assert info.value.field == "_tagged_fields"
