"""protocol.peek_produce_acks: a Produce request's acks read without decoding its
body, against the codec's own decoding, for every version (the nullable
transactional id before it, classic or compact); what cannot be read is None."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trafka.codec import protocol
from trafka.codec.messages import k00_produce as pm
from trafka.codec.messages.headers import RequestHeader

PRODUCE = protocol.api(0)


def frame(version: int, transactional_id: str | None, acks: int) -> bytes:
    body = pm.ProduceRequest(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            pm.ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[pm.ProduceRequest.PartitionProduceData(index=0, records=b"x")],
            )
        ],
    )
    header = RequestHeader(
        request_api_key=0, request_api_version=version, correlation_id=3, client_id="c"
    )
    return protocol.encode_request(header, body)[4:]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(PRODUCE.min_version, PRODUCE.max_version),
    st.none() | st.text(max_size=200),
    st.sampled_from([0, 1, -1]),
)
def test_the_acks_read_are_the_decoded_ones(version: int, tid: str | None, acks: int) -> None:
    if version < 3:
        tid = None
    data = frame(version, tid, acks)
    _, start = protocol.decode_request_header(data)
    _, body = protocol.decode_request(data)
    assert protocol.peek_produce_acks(data, start, version) == body.acks == acks
    assert protocol.peek_produce_acks(memoryview(data), start, version) == acks


@given(st.integers(PRODUCE.min_version, PRODUCE.max_version), st.data())
def test_a_body_cut_before_its_acks_is_none(version: int, data: st.DataObject) -> None:
    whole = frame(version, "tx" if version >= 3 else None, 1)
    _, start = protocol.decode_request_header(whole)
    acks_at = start + (0 if version < 3 else 3 if PRODUCE.is_flexible(version) else 4)
    cut = data.draw(st.integers(start, acks_at + 1))
    assert protocol.peek_produce_acks(whole[:cut], start, version) is None


def test_an_unknown_version_is_none() -> None:
    data = frame(PRODUCE.max_version, None, 1)
    _, start = protocol.decode_request_header(data)
    assert protocol.peek_produce_acks(data, start, PRODUCE.max_version + 1) is None
