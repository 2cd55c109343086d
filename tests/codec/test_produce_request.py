"""ProduceRequest bodies written on bytes (codec/produce_request.py) against the
codec's encoder: the same bytes for the same message at every version, the
same EncodeError for what the codec refuses, and the frame RequestFramer
writes around a pre-encoded body the same as around the message."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trafka.codec import protocol
from trafka.codec.errors import EncodeError
from trafka.codec.messages import ApiKey
from trafka.codec.messages import k00_produce as pm
from trafka.codec.produce_request import (
    ProduceRequestData,
    encode_produce_request,
    produce_request,
    produce_request_parts,
)

VERSIONS = list(range(pm.MIN_VERSION, pm.MAX_VERSION + 1))
I16 = st.integers(-(2**15), 2**15 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
NAMES = st.text(max_size=12)  # any unicode: the length is the UTF-8 one
# Records of every kind the proxy hands over: none, small, big enough to be a
# frame part of its own (8 KiB), as bytes or a view into a larger buffer.
RECORDS = st.none() | st.binary(max_size=40) | st.integers(8180, 8200).map(lambda n: b"r" * n)


def _view(data: bytes | None, cut: bool) -> Any:
    if data is None or not cut:
        return data
    return memoryview(b"<" + data + b">")[1:-1]


@st.composite
def requests(draw: st.DrawFn, version: int) -> tuple[Any, ...]:
    """(transactional id, acks, timeout, topics) the codec encodes at ``version``."""
    topic = st.uuids() if version >= 13 else NAMES
    parts = st.lists(
        st.tuples(I32, st.tuples(RECORDS, st.booleans()).map(lambda x: _view(*x))), max_size=3
    )
    tid = draw(st.none() | NAMES) if version >= 3 else None
    return tid, draw(I16), draw(I32), draw(st.lists(st.tuples(topic, parts), max_size=3))


def reference(version: int, request: tuple[Any, ...]) -> bytes:
    return protocol.encode_request_body(ApiKey.PRODUCE, version, produce_request(*request))


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_codecs_bytes(version: int, data: st.DataObject) -> None:
    request = data.draw(requests(version))
    parts = produce_request_parts(version, *request)
    assert b"".join(parts) == reference(version, request)
    # Each big records field is a part of its own, the very object given.
    big = [r for _, ps in request[3] for _, r in ps if r is not None and len(r) >= 8192]
    assert [p for p in parts if len(p) >= 8192 and any(p is r for r in big)] == big


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_decoded_again(version: int, data: st.DataObject) -> None:
    """What is written reads back as the message (the codec's decoder)."""
    request = data.draw(requests(version))
    body = encode_produce_request(version, *request)
    decoded = protocol.decode_request_body(ApiKey.PRODUCE, version, body)
    tid, acks, timeout, topics = request
    as_bytes = [(t, [(i, None if r is None else bytes(r)) for i, r in ps]) for t, ps in topics]
    assert decoded == produce_request(tid, acks, timeout, as_bytes)


# Shapes the fast path leaves to the codec: each either encoded by it (the same
# bytes) or refused with its EncodeError.
ODD: list[tuple[int, tuple[Any, ...]]] = [
    (2, ("tx", 1, 0, [])),  # no transactional id below v3
    (12, (None, 1, 0, [(uuid.uuid4(), [(0, b"")])])),  # a topic id below v13
    (13, (None, 1, 0, [("t", [(0, b"")])])),  # a topic name at v13
    (5, (None, 2**15, 0, [])),  # acks out of range
    (9, (None, 1, 2**31, [])),  # timeout out of range
    (9, (None, 1, 0, [("t", [(2**31, b"")])])),  # partition out of range
    (5, ("x" * 40000, 1, 0, [])),  # a string too long
    (10, (None, 1, 0, [("y" * 40000, [])])),
    (7, (None, 1, 0, [("t", [(0, "text")])])),  # records not bytes
    (9, (None, 1, 0, [(None, [])])),  # a null name
    (11, ("\ud800", 1, 0, [])),  # not UTF-8
    (3, (None, True, 0, [])),  # a bool for an int
    (9, (None, 1, 0, [("t", [(0, memoryview(b"abcd").cast("I"))])])),
    (9, (None, 1, 0, [("t", [(0, bytearray(b"abc"))])])),
]


@pytest.mark.parametrize(("version", "request_"), ODD)
def test_left_to_the_codec(version: int, request_: tuple[Any, ...]) -> None:
    try:
        expected: bytes | str = reference(version, request_)
    except EncodeError as exc:
        expected = str(exc)
    try:
        got: bytes | str = encode_produce_request(version, *request_)
    except EncodeError as exc:
        got = str(exc)
    assert got == expected


def test_unknown_version() -> None:
    with pytest.raises(protocol.UnsupportedVersionError):
        encode_produce_request(pm.MAX_VERSION + 1, None, 1, 0, [])


@pytest.mark.parametrize("version", [3, 8, 9, 11, 13])
@settings(max_examples=30, deadline=None)
@given(data=st.data(), correlation_id=I32.filter(lambda n: n >= 0))
def test_the_framers_frame(version: int, data: st.DataObject, correlation_id: int) -> None:
    """RequestFramer frames a request written on bytes as it frames the message."""
    request = data.draw(requests(version))
    framer = protocol.RequestFramer("proxy")
    message = framer.parts(ApiKey.PRODUCE, version, correlation_id, produce_request(*request))
    encoded = ProduceRequestData(*request)
    assert encoded.message() == produce_request(*request)
    got = framer.parts(ApiKey.PRODUCE, version, correlation_id, encoded)
    assert b"".join(got) == b"".join(message)
    big = [r for _, ps in request[3] for _, r in ps if r is not None and len(r) >= 8192]
    assert [p for p in got if any(p is r for r in big)] == big  # not copied
    # The codec's other request encoders take it too.
    header = protocol.RequestHeader(
        request_api_key=ApiKey.PRODUCE,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id="proxy",
    )
    assert protocol.encode_request(header, encoded) == b"".join(message)
    assert protocol.encode_request_body(ApiKey.PRODUCE, version, encoded) == reference(
        version, request
    )
