"""The tenants filter's Produce requests rewritten on their bytes
(``trafka.proxy.tenants_produce``) against the reference: the codec's
decoding, the names prefixed, the codec's encoding, byte for byte, on
random requests of every version walked; what the walk does not read as the
codec writes it is left to the decoded path (None)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from trafka.codec import ApiKey, protocol
from trafka.codec.messages import k00_produce as pm
from trafka.codec.messages.headers import RequestHeader
from trafka.proxy.tenants_apis import REQUEST_NAMES, map_names
from trafka.proxy.tenants_produce import FIRST, LAST, prefixed

PREFIX = "acme."
R = pm.ProduceRequest
names = st.text(alphabet="abcxyz._-é", min_size=0, max_size=12)
tags = st.lists(
    st.tuples(st.integers(0, 3), st.binary(max_size=4)), max_size=2, unique_by=lambda t: t[0]
).map(sorted)


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.integers(FIRST, LAST))
    flexible = version >= 9
    body = R(
        transactional_id=draw(st.none() | names),
        acks=draw(st.sampled_from([-1, 0, 1])),
        timeout_ms=draw(st.integers(0, 60_000)),
        topic_data=[
            R.TopicProduceData(
                name=name,
                partition_data=[
                    R.PartitionProduceData(
                        index=i,
                        records=draw(st.none() | st.binary(max_size=40)),
                        unknown_tagged_fields=draw(tags) if flexible else [],
                    )
                    for i in range(draw(st.integers(0, 3)))
                ],
                unknown_tagged_fields=draw(tags) if flexible else [],
            )
            for name in draw(st.lists(names, max_size=3))
        ],
        unknown_tagged_fields=draw(tags) if flexible else [],
    )
    header = RequestHeader(
        request_api_key=ApiKey.PRODUCE,
        request_api_version=version,
        correlation_id=draw(st.integers(0, 1000)),
        client_id=draw(st.none() | names),
    )
    return version, protocol.encode_request(header, body)[4:]


def reference(frame: bytes) -> bytes:
    header, body = protocol.decode_request(frame, allow_trailing=True)
    body = map_names(body, REQUEST_NAMES[ApiKey.PRODUCE], lambda n: PREFIX + n)
    return protocol.encode_request(header, body)[4:]


@settings(max_examples=300, deadline=None)
@given(requests(), st.binary(max_size=3))
def test_prefixed_on_bytes_as_the_codec_writes_it(request: tuple[int, bytes], extra: bytes) -> None:
    version, frame = request
    _, start = protocol.decode_request_header(frame)
    out = prefixed(frame + extra, start, version, PREFIX.encode())
    assert out == reference(frame + extra)


def test_what_the_walk_does_not_read_is_left_to_the_codec() -> None:
    header = RequestHeader(
        request_api_key=ApiKey.PRODUCE, request_api_version=9, correlation_id=1, client_id="c"
    )
    body = R(acks=-1, timeout_ms=1, topic_data=[R.TopicProduceData(name="t")])
    frame = protocol.encode_request(header, body)[4:]
    _, start = protocol.decode_request_header(frame)
    assert prefixed(frame, start, 9, b"p.") is not None
    assert prefixed(frame[:-2], start, 9, b"p.") is None  # cut short
    assert prefixed(frame, start, 13, b"p.") is None  # topics by id
    bad = frame.replace(b"\x02t", b"\x02\xff")  # a name that is not UTF-8
    assert prefixed(bad, start, 9, b"p.") is None
    old = replace(header, request_api_version=2)
    assert prefixed(protocol.encode_request(old, body)[4:], start, 2, b"p.") is None
