"""Hostile bytes: truncated, mutated and lying frames.

Whatever a peer sends, the decoders raise only trafka's ``DecodeError`` (or
``UnsupportedVersionError`` for an unknown API or version), never IndexError,
struct.error, MemoryError or a construct exception, and they do it without
allocating what a length field claims. ``protocol._decode`` turns unexpected
exceptions into ``DecodeError("internal decoder error: ...")`` as a last line
of defence; these tests treat that message as a failure, since it means a
reader let a foreign exception through.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from io import BytesIO
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import Case, peak_allocation, sample_message

from trafka.codec import (
    CodecError,
    DecodeError,
    FrameReader,
    UnsupportedVersionError,
    protocol,
)
from trafka.codec.protocol import RequestHeader, all_apis, api

# Messages with deep nesting, tagged fields, records and compact/classic forms.
SAMPLES = [
    Case(0, "Produce", 3, False),
    Case(0, "Produce", 9, False),
    Case(0, "Produce", 10, True),
    Case(1, "Fetch", 4, True),
    Case(1, "Fetch", 13, True),
    Case(3, "Metadata", 12, True),
    Case(11, "JoinGroup", 9, False),
    Case(18, "ApiVersions", 3, True),
    Case(32, "DescribeConfigs", 4, True),
]


def frame_of(case: Case, salt: int = 0) -> bytes:
    """A full frame (without size prefix) of a sample with every field set."""
    body = sample_message(case.schema, salt)
    if case.response:
        return protocol.encode_response(1234, case.key, case.version, body)[4:]
    header = RequestHeader(
        request_api_key=case.key,
        request_api_version=case.version,
        correlation_id=1234,
        client_id="fuzz",
    )
    return protocol.encode_request(header, body)[4:]


def decoder(case: Case) -> Callable[[bytes], Any]:
    if case.response:
        return lambda frame: protocol.decode_response(frame, case.key, case.version)
    return protocol.decode_request


def assert_clean(exc: BaseException) -> None:
    """A refusal that came from a checked reader, not from a foreign exception."""
    assert isinstance(exc, DecodeError | UnsupportedVersionError), repr(exc)
    assert "internal decoder error" not in str(exc), repr(exc.__cause__)
    assert exc.__cause__ is None or isinstance(exc.__cause__, CodecError), repr(exc.__cause__)


def outcome(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except CodecError as exc:
        assert_clean(exc)
        return exc


# -- truncation ------------------------------------------------------------------------


@pytest.mark.parametrize("case", SAMPLES, ids=[c.id for c in SAMPLES])
def test_every_truncation_is_refused(case: Case) -> None:
    frame = frame_of(case)
    decode = decoder(case)
    assert decode(frame)  # the whole frame is fine
    header_size = 4 if case.response else 8
    for cut in range(len(frame)):
        with pytest.raises(DecodeError) as info:
            decode(frame[:cut])
        exc = info.value
        assert_clean(exc)
        assert exc.message_name, cut
        if cut >= header_size:
            # Past the fixed header part, the error says where it gave up.
            assert exc.field, (cut, str(exc))
            assert exc.message_name in str(exc) and exc.field in str(exc)


RESPONSE_SAMPLES = [c for c in SAMPLES if c.response]


@pytest.mark.parametrize("case", RESPONSE_SAMPLES, ids=[c.id for c in RESPONSE_SAMPLES])
def test_a_response_bodys_truncations_are_refused_as_decode_response_does(case: Case) -> None:
    """decode_response_frame (what the clients run) refuses each cut frame with
    decode_response's error, where it gave up included."""
    frame = frame_of(case)
    assert (
        protocol.decode_response_frame(frame, case.key, case.version)
        == (protocol.decode_response(frame, case.key, case.version)[1])
    )
    for cut in range(len(frame)):
        with pytest.raises(DecodeError) as fast:
            protocol.decode_response_frame(frame[:cut], case.key, case.version)
        with pytest.raises(DecodeError) as full:
            protocol.decode_response(frame[:cut], case.key, case.version)
        assert str(fast.value) == str(full.value), cut
        assert (fast.value.message_name, fast.value.field) == (
            full.value.message_name,
            full.value.field,
        )


@pytest.mark.parametrize("case", SAMPLES, ids=[c.id for c in SAMPLES])
def test_every_truncation_of_the_body_is_refused_by_the_interpreted_path(case: Case) -> None:
    body = sample_message(case.schema, 1)
    data = case.schema.build(body)
    for cut in range(len(data)):
        with pytest.raises(DecodeError) as info:
            case.schema.parse(data[:cut])
        assert info.value.field, cut


@pytest.mark.parametrize("case", SAMPLES, ids=[c.id for c in SAMPLES])
def test_truncated_stream_through_the_frame_reader(case: Case) -> None:
    stream = struct.pack(">i", len(frame_of(case))) + frame_of(case)
    for cut in (1, 4, 5, len(stream) // 2, len(stream) - 1):
        reader = FrameReader()
        reader.feed(stream[:cut])
        assert reader.next_frame() is None
        reader.feed(stream[cut:])
        frame = reader.next_frame()
        assert frame is not None
        assert decoder(case)(frame)


def test_trailing_bytes_are_refused() -> None:
    case = SAMPLES[0]
    with pytest.raises(DecodeError, match="trailing") as info:
        decoder(case)(frame_of(case) + b"\x00")
    assert info.value.message_name == "ProduceRequest v3"


# -- mutation --------------------------------------------------------------------------

_FRAMES = [frame_of(c) for c in SAMPLES]


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    which=st.integers(0, len(SAMPLES) - 1),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_mutated_frames_decode_or_are_refused_cleanly(
    which: int, flips: list[tuple[int, int]]
) -> None:
    case = SAMPLES[which]
    frame = bytearray(_FRAMES[which])
    for pos, byte in flips:
        frame[pos % len(frame)] = byte
    data = bytes(frame)
    result = outcome(lambda: decoder(case)(data))
    if not isinstance(result, CodecError):
        # What decodes re-encodes; it need not give the same bytes (a flipped
        # bool byte reads as True, a padded varint shrinks).
        _, body = result
        assert case.schema.parse(case.schema.build(body)) == body
    if case.response:  # the clients' path, without the header object: the same outcome
        fast = outcome(lambda: protocol.decode_response_frame(data, case.key, case.version))
        if isinstance(result, CodecError):
            assert type(fast) is type(result) and str(fast) == str(result)
        else:
            assert fast == result[1]
    # The body alone, through the compiled and the interpreted decoders: they
    # must agree. The interpreted path has no catch-all, so a foreign exception
    # would escape from it.
    body_bytes = data[body_offset(case) :]
    compiled = outcome(lambda: body_decoder(case)(body_bytes))
    interpreted = interpreted_outcome(case, body_bytes)
    if isinstance(compiled, CodecError) or isinstance(interpreted, CodecError):
        assert isinstance(compiled, CodecError), f"only the interpreted path refused: {interpreted}"
        assert isinstance(interpreted, CodecError), f"only the compiled path refused: {compiled}"
    else:
        assert compiled == interpreted


def body_offset(case: Case) -> int:
    if case.response:
        return 4 + api(case.key).response_header_version(case.version)
    return protocol.decode_request_header(_FRAMES[SAMPLES.index(case)])[1]


def body_decoder(case: Case) -> Callable[[bytes], Any]:
    if case.response:
        return lambda data: protocol.decode_response_body(case.key, case.version, data)
    return lambda data: protocol.decode_request_body(case.key, case.version, data)


def interpreted_outcome(case: Case, data: bytes) -> Any:
    io = BytesIO(data)
    try:
        body = case.schema.parse_stream(io)
    except CodecError as exc:
        assert_clean(exc)
        return exc
    if io.read(1):
        return DecodeError("trailing bytes")
    return body


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    key=st.sampled_from([a.key for a in all_apis()]),
    data=st.data(),
    garbage=st.binary(max_size=64),
)
def test_random_bodies_are_refused_cleanly(key: int, data: st.DataObject, garbage: bytes) -> None:
    info = api(key)
    version = data.draw(st.integers(info.min_version, info.max_version), label="version")
    for response in (False, True):
        case = Case(key, info.name, version, response)
        compiled = outcome(lambda case=case: body_decoder(case)(garbage))
        interpreted = interpreted_outcome(case, garbage)
        assert isinstance(compiled, CodecError) == isinstance(interpreted, CodecError)
        if not isinstance(compiled, CodecError):
            assert compiled == interpreted


@settings(max_examples=200, deadline=None)
@given(frame=st.binary(max_size=40))
def test_random_request_frames_are_refused_cleanly(frame: bytes) -> None:
    outcome(lambda: protocol.decode_request(frame))


# -- lying lengths ----------------------------------------------------------------------


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def request(key: int, version: int, body: bytes, flexible: bool) -> bytes:
    head = struct.pack(">hhi", key, version, 99) + i16(-1)
    return head + (b"\x00" if flexible else b"") + body


# Produce v3: transactional_id, acks, timeout_ms, topic_data[name, partition_data[index, records]]
P3 = i16(-1) + i16(1) + i32(1000)
P3_TOPIC = i32(1) + i16(1) + b"t"
# Produce v9, compact: the same, with uvarint lengths and tag sections.
P9 = b"\x00" + i16(1) + i32(1000)
P9_TOPIC = uvarint(2) + uvarint(2) + b"t"

LIES = [
    pytest.param(
        request(0, 3, P3 + i32(2**31 - 1) + b"\x00" * 16, False),
        "ProduceRequest v3",
        "topic_data",
        id="array count 2**31-1",
    ),
    pytest.param(
        request(0, 3, P3 + i32(-2), False),
        "ProduceRequest v3",
        "topic_data",
        id="array count -2",
    ),
    pytest.param(
        request(0, 3, P3 + i32(-1), False),
        "ProduceRequest v3",
        "topic_data",
        id="null non-nullable array",
    ),
    pytest.param(
        request(0, 3, P3 + i32(1) + i16(0x7FFF) + b"abc", False),
        "ProduceRequest v3",
        "topic_data[0].name",
        id="string length 0x7fff",
    ),
    pytest.param(
        request(0, 3, P3 + P3_TOPIC + i32(1) + i32(0) + i32(2**31 - 1) + b"\x00" * 61, False),
        "ProduceRequest v3",
        "topic_data[0].partition_data[0].records",
        id="records length 2**31-1",
    ),
    pytest.param(
        request(0, 3, P3 + P3_TOPIC + i32(2**31 - 1) + i32(0) * 40, False),
        "ProduceRequest v3",
        "topic_data[0].partition_data",
        id="nested count 2**31-1",
    ),
    pytest.param(
        request(0, 9, P9 + uvarint(2**32 - 1) + b"\x00" * 16, True),
        "ProduceRequest v9",
        "topic_data",
        id="compact count 2**32-2",
    ),
    pytest.param(
        request(0, 9, P9 + b"\xff\xff\xff\xff\xff\x01" + b"\x00" * 16, True),
        "ProduceRequest v9",
        "topic_data",
        id="six-byte varint count",
    ),
    pytest.param(
        request(
            0, 9, P9 + P9_TOPIC + uvarint(2) + i32(0) + uvarint(2**32 - 1) + b"\x00" * 64, True
        ),
        "ProduceRequest v9",
        "topic_data[0].partition_data[0].records",
        id="compact records length 2**32-2",
    ),
    pytest.param(
        request(
            0,
            9,
            P9 + P9_TOPIC + uvarint(2) + i32(0) + b"\x00" + b"\x01\x07" + uvarint(2**32 - 1),
            True,
        ),
        "ProduceRequest v9",
        "topic_data[0].partition_data[0]._tagged_fields",
        id="tagged field size 2**32-1",
    ),
    pytest.param(
        request(0, 9, P9 + uvarint(1) + uvarint(2**32 - 1) + b"\x00" * 8, True),
        "ProduceRequest v9",
        "_tagged_fields",
        id="tag count 2**32-1",
    ),
    pytest.param(
        request(3, 0, i32(-1), False),
        "MetadataRequest v0",
        "topics",
        id="null topics in v0",
    ),
]


@pytest.mark.parametrize(("frame", "message", "field"), LIES)
def test_lying_lengths_are_refused_cheaply(frame: bytes, message: str, field: str) -> None:
    # The first decode also compiles the schema (which allocates); the
    # measured one below only decodes.
    with pytest.raises(DecodeError) as info:
        protocol.decode_request(frame)
    exc = info.value
    assert_clean(exc)
    assert exc.message_name == message
    assert exc.field == field
    assert message in str(exc) and field in str(exc)
    peak = peak_allocation(lambda: protocol.decode_request(frame))
    assert peak < 10 * len(frame) + 64 * 1024, peak


def test_lying_response_lengths_are_refused_cheaply() -> None:
    # Fetch v4 response: throttle_time_ms, responses[topic, partitions[...]]
    frame = i32(5) + i32(0) + i32(1) + i16(1) + b"t" + i32(2**31 - 1) + b"\x00" * 32
    protocol.decode_response(i32(5) + i32(0) + i32(0), 1, 4)
    with pytest.raises(DecodeError) as info:
        protocol.decode_response(frame, 1, 4)
    assert_clean(info.value)
    assert info.value.message_name == "FetchResponse v4"
    assert info.value.field == "responses[0].partitions"
    assert (
        peak_allocation(lambda: protocol.decode_response(frame, 1, 4)) < 10 * len(frame) + 64 * 1024
    )


def test_frame_reader_refuses_a_lying_size_cheaply() -> None:
    def feed() -> None:
        reader = FrameReader()
        reader.feed(i32(2**31 - 1) + b"\x00" * 100)
        reader.next_frame()

    with pytest.raises(DecodeError):
        feed()
    assert peak_allocation(feed) < 64 * 1024
