"""ProduceResponse read and written on bytes (codec/produce_response.py) against
the codec's decoder and encoder: the same fields read, the same bytes written,
the same answers refused, for every version and shape."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import message_strategy

from trafka.codec import protocol
from trafka.codec.errors import DecodeError
from trafka.codec.messages import k00_produce as pm
from trafka.codec.produce_response import (
    MAX_SCANNED_VERSION,
    ProduceAnswer,
    ProduceResponseWriter,
    as_encoded,
    read_produce_response,
    scan_produce_response,
)

# The versions the scan reads (v13, topics by id, is decoded by the codec).
VERSIONS = list(range(pm.MIN_VERSION, MAX_SCANNED_VERSION + 1))
R = pm.ProduceResponse
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)


def partition_schema(version: int) -> Any:
    topics = pm.RESPONSE_SCHEMAS[version].fields[0][1]
    return topics.subcon.fields[1][1].subcon


def plain_partition(version: int) -> st.SearchStrategy[Any]:
    """A partition in the usual shape (what the scan reads without the codec)."""
    fields: dict[str, Any] = {"index": I32, "error_code": st.integers(-1, 120), "base_offset": I64}
    if version >= 2:
        fields["log_append_time_ms"] = I64
    if version >= 5:
        fields["log_start_offset"] = I64
    return st.builds(R.PartitionProduceResponse, **fields)


@st.composite
def answers(draw: st.DrawFn, version: int) -> Any:
    """An answer of unique partitions, most in the usual shape, some of any
    shape the version allows (errors' messages, record errors, leader hints,
    unknown tags), its topics without tags of their own."""
    one = plain_partition(version) | message_strategy(partition_schema(version))
    top = R(throttle_time_ms=draw(I32) if version else 0)
    if version >= 9:
        schema = pm.RESPONSE_SCHEMAS[version]
        unknown = st.lists(st.tuples(st.integers(1, 40), st.binary(max_size=4)), max_size=2)
        top = dataclasses.replace(top, unknown_tagged_fields=sorted(dict(draw(unknown)).items()))
        if schema.tagged:
            endpoints = message_strategy(schema.tagged[0].subcon.subcon)
            top = dataclasses.replace(top, node_endpoints=draw(st.lists(endpoints, max_size=2)))
    topics = []
    names = draw(st.lists(st.text(max_size=8) | st.just("orders"), max_size=3, unique=True))
    for name in names:
        parts = draw(st.lists(one, max_size=5, unique_by=lambda p: p.index))
        topics.append(R.TopicProduceResponse(name=name, partition_responses=parts))
    return dataclasses.replace(top, responses=topics)


def encoded(body: Any, version: int) -> bytes:
    return protocol.encode_response(7, 0, version, body)[4:]


def fields(p: Any) -> tuple[Any, ...]:
    return (
        p.error_code,
        p.base_offset,
        p.log_append_time_ms,
        p.log_start_offset,
        p.error_message,
        p.current_leader.leader_id,
    )


def read_fields(answer: ProduceAnswer) -> dict[tuple[str, int], tuple[Any, ...]]:
    return {
        k: (
            p.error_code,
            p.base_offset,
            p.log_append_time_ms,
            p.log_start_offset,
            p.error_message,
            p.leader_id,
        )
        for k, p in answer.partitions.items()
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(VERSIONS), data=st.data())
def test_the_scan_reads_what_the_decoder_reads(version: int, data: st.DataObject) -> None:
    body = data.draw(answers(version))
    frame = encoded(body, version)
    decoded = protocol.decode_response(frame, 0, version)[1]
    got = read_produce_response(frame, version)
    assert read_fields(got) == {
        (t.name, p.index): fields(p) for t in decoded.responses for p in t.partition_responses
    }
    assert got.throttle_time_ms == decoded.throttle_time_ms
    assert got.node_endpoints == decoded.node_endpoints
    assert got.unknown_tagged_fields == decoded.unknown_tagged_fields
    usual = all(
        not (p.record_errors or p.unknown_tagged_fields)
        and p.error_message is None
        and p.current_leader.leader_id == p.current_leader.leader_epoch == -1
        for t in body.responses
        for p in t.partition_responses
    )
    top = body.node_endpoints or body.unknown_tagged_fields
    usual = usual and not top and not any(t.unknown_tagged_fields for t in body.responses)
    assert as_encoded(frame, version) == usual


@pytest.mark.parametrize("version", VERSIONS)
def test_usual_answers_are_read_without_the_codec(version: int) -> None:
    body = R(
        responses=[
            R.TopicProduceResponse(
                name="orders",
                partition_responses=[
                    R.PartitionProduceResponse(index=i, base_offset=10 * i) for i in range(3)
                ],
            )
        ],
        throttle_time_ms=5 if version else 0,
    )
    frame = encoded(body, version)
    got = scan_produce_response(frame, version, 5 if version >= 9 else 4)
    assert got is not None
    assert all(p.message is None for p in got.partitions.values())
    assert [p.base_offset for p in got.partitions.values()] == [0, 10, 20]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(VERSIONS), data=st.data())
def test_copied_partitions_are_written_as_the_encoder_writes_them(
    version: int, data: st.DataObject
) -> None:
    body = data.draw(answers(version))
    got = read_produce_response(encoded(body, version), version)
    w = ProduceResponseWriter(version, len(body.responses))
    expected = []
    for t in body.responses:
        w.topic(t.name, len(t.partition_responses))
        parts = []
        for p in t.partition_responses:
            index, error = data.draw(I32), data.draw(st.integers(-1, 120))
            below = data.draw(st.integers(-1, 3))
            w.copy(got.partitions[(t.name, p.index)], index, error, below)
            errors = p.record_errors
            if below >= 0 and errors:
                errors = [e for e in errors if e.batch_index < below]
            parts.append(
                dataclasses.replace(p, index=index, error_code=error, record_errors=errors)
            )
        expected.append(R.TopicProduceResponse(name=t.name, partition_responses=parts))
    out = w.finish(got.throttle_time_ms, got.node_endpoints, got.unknown_tagged_fields)
    assert out == protocol.encode_response_body(
        0, version, dataclasses.replace(body, responses=expected)
    )


@settings(max_examples=100, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    made=st.lists(
        st.tuples(
            I32,
            st.integers(-1, 120),
            I64,
            I64,
            I64,
            st.none() | st.text(max_size=5) | st.text(min_size=130, max_size=140),
        ),
        max_size=4,
    ),
    throttle=I32,
)
def test_made_partitions_are_written_as_the_encoder_writes_them(
    version: int, made: list[tuple[int, int, int, int, int, str | None]], throttle: int
) -> None:
    w = ProduceResponseWriter(version, 1)
    w.topic("t\u00e9", len(made))
    for fields_ in made:
        w.add(*fields_)
    expected = R(
        responses=[
            R.TopicProduceResponse(
                name="t\u00e9",
                partition_responses=[
                    R.PartitionProduceResponse(
                        index=i,
                        error_code=e,
                        base_offset=b,
                        log_append_time_ms=a,
                        log_start_offset=s,
                        error_message=m,
                    )
                    for i, e, b, a, s, m in made
                ],
            )
        ],
        throttle_time_ms=throttle if version else 0,
    )
    assert w.finish(throttle) == protocol.encode_response_body(0, version, expected)


def outcome(frame: bytes, version: int) -> Any:
    try:
        got = read_produce_response(frame, version)
    except DecodeError as exc:
        return ("refused", str(exc))
    top = (got.throttle_time_ms, got.node_endpoints, got.unknown_tagged_fields)
    return read_fields(got), top


def reference(frame: bytes, version: int) -> Any:
    try:
        decoded = protocol.decode_response(frame, 0, version)[1]
    except DecodeError as exc:
        return ("refused", str(exc))
    top = (decoded.throttle_time_ms, decoded.node_endpoints, decoded.unknown_tagged_fields)
    parts = {(t.name, p.index): fields(p) for t in decoded.responses for p in t.partition_responses}
    return parts, top


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(VERSIONS), data=st.data())
def test_mutated_and_truncated_answers_are_refused_as_the_decoder_refuses_them(
    version: int, data: st.DataObject
) -> None:
    frame = bytearray(encoded(data.draw(answers(version)), version))
    for _ in range(data.draw(st.integers(1, 3))):
        if data.draw(st.booleans()) and len(frame) > 4:
            frame[data.draw(st.integers(4, len(frame) - 1))] = data.draw(st.integers(0, 255))
        else:
            del frame[data.draw(st.integers(0, len(frame))) :]
    assert outcome(bytes(frame), version) == reference(bytes(frame), version)
    if as_encoded(bytes(frame), version):  # passed as it is: the codec would write it so
        decoded = protocol.decode_response(bytes(frame), 0, version)[1]
        assert encoded(decoded, version) == bytes(frame)


def test_a_topic_s_tags_and_header_tags_are_left_to_the_codec() -> None:
    # Shapes the scan leaves to the codec: same answer either way.
    version = 10
    body = R(
        responses=[
            R.TopicProduceResponse(
                name="a",
                partition_responses=[R.PartitionProduceResponse(index=0, base_offset=1)],
                unknown_tagged_fields=[(3, b"x")],
            )
        ]
    )
    frame = encoded(body, version)
    assert scan_produce_response(frame, version, 5) is None
    assert outcome(frame, version) == reference(frame, version)
    tagged = frame[:4] + b"\x01\x05\x01z" + frame[5:]  # a response header tag
    assert outcome(tagged, version) == reference(frame, version)
