"""Every message of every API at every version survives encode -> decode.

Bodies come from hypothesis strategies built from the generated schemas
themselves (``strategies.message_strategy``). Each body goes through both of the
codec's paths, which must agree byte for byte:

* compiled: ``protocol.encode_*_body`` / ``protocol.decode_*_body`` (the schema's
  ``.compile()`` output, what production code runs);
* interpreted: ``schema.build`` / ``schema.parse`` (construct walking the
  declarations, the reference the compiled code is checked against).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import Case, all_cases, message_strategy, sample_message

from trafka.codec import protocol
from trafka.codec.messages import consumer_protocol, headers
from trafka.codec.messages import k00_produce as produce
from trafka.codec.protocol import RequestHeader, ResponseHeader

CASES = all_cases()
# A few examples per (API, version, direction) keep the ~550 cases at about 15 s
# (under a minute on two busy cores); the deterministic sample test sets every
# field of every case anyway, and hypothesis' database replays past failures.
EXAMPLES = 4
_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _encode_body(case: Case, body: Any) -> bytes:
    if case.response:
        return protocol.encode_response_body(case.key, case.version, body)
    return protocol.encode_request_body(case.key, case.version, body)


def _decode_body(case: Case, data: bytes) -> Any:
    if case.response:
        return protocol.decode_response_body(case.key, case.version, data)
    return protocol.decode_request_body(case.key, case.version, data)


def check_both_paths(case: Case, body: Any) -> bytes:
    """Encode ``body`` both ways, decode both ways; return the bytes."""
    schema = case.schema
    compiled = _encode_body(case, body)
    interpreted = schema.build(body)
    assert compiled == interpreted, "compiled and interpreted encoders disagree"
    assert _decode_body(case, compiled) == body
    assert schema.parse(compiled) == body
    return compiled


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_roundtrip_sample(case: Case) -> None:
    """A deterministic body with a non-default value in every field."""
    body = sample_message(case.schema)
    data = check_both_paths(case, body)
    # Every field non-default: the encoding differs from the default body's,
    # unless the version has no fields at all.
    if case.schema.fields or case.schema.tagged:
        assert data != _encode_body(case, case.schema.cls())


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@_SETTINGS
@given(data=st.data())
def test_roundtrip_generated(case: Case, data: st.DataObject) -> None:
    body = data.draw(message_strategy(case.schema), label="body")
    check_both_paths(case, body)


@pytest.mark.parametrize("case", CASES[::7], ids=[c.id for c in CASES[::7]])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_whole_frame_roundtrip(case: Case, data: st.DataObject) -> None:
    """Header + body through encode_request/decode_request (and responses)."""
    body = data.draw(message_strategy(case.schema), label="body")
    corr = data.draw(st.integers(-(2**31), 2**31 - 1), label="correlation_id")
    if case.response:
        frame = protocol.encode_response(corr, case.key, case.version, body)
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        assert protocol.peek_correlation_id(frame[4:]) == corr
        header, decoded = protocol.decode_response(frame[4:], case.key, case.version)
        assert header == ResponseHeader(correlation_id=corr)
    else:
        client_id = data.draw(st.none() | st.text(max_size=20), label="client_id")
        header = RequestHeader(
            request_api_key=case.key,
            request_api_version=case.version,
            correlation_id=corr,
            client_id=client_id,
        )
        frame = protocol.encode_request(header, body)
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        got_header, decoded = protocol.decode_request(frame[4:])
        assert got_header == header
    assert decoded == body


PLAIN_SCHEMAS = [
    (f"{name}-v{v}", schema)
    for name, table in [
        ("RequestHeader", headers.REQUESTHEADER_SCHEMAS),
        ("ResponseHeader", headers.RESPONSEHEADER_SCHEMAS),
        ("ConsumerProtocolSubscription", consumer_protocol.CONSUMERPROTOCOLSUBSCRIPTION_SCHEMAS),
        ("ConsumerProtocolAssignment", consumer_protocol.CONSUMERPROTOCOLASSIGNMENT_SCHEMAS),
    ]
    for v, schema in table.items()
]


@pytest.mark.parametrize(("name", "schema"), PLAIN_SCHEMAS, ids=[n for n, _ in PLAIN_SCHEMAS])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_plain_schemas_roundtrip(name: str, schema: Any, data: st.DataObject) -> None:
    """Headers and consumer-protocol payloads: compiled == interpreted, both ways."""
    compiled = schema.compile()
    body = data.draw(message_strategy(schema), label="body")
    out = schema.build(body)
    assert compiled.build(body) == out
    assert schema.parse(out) == body
    assert compiled.parse(out) == body


def test_decoded_messages_share_no_mutable_state() -> None:
    """Two decodes never hand out the same list object.

    Messages are frozen dataclasses but their lists are ordinary lists; a caller
    that appends to one decoded message must not change another one, nor the
    defaults that the encoder compares tagged fields with.
    """
    # ProduceResponse v10 has a tagged list (node_endpoints) that is absent here.
    body = produce.ProduceResponse(throttle_time_ms=5)
    data = protocol.encode_response_body(0, 10, body)
    first = protocol.decode_response_body(0, 10, data)
    second = protocol.decode_response_body(0, 10, data)
    assert first == second == body
    try:
        first.node_endpoints.append(produce.ProduceResponse.NodeEndpoint(node_id=1))
        third = protocol.decode_response_body(0, 10, data)
        assert second.node_endpoints == []
        assert third.node_endpoints == []
        assert protocol.encode_response_body(0, 10, body) == data
    finally:
        # If the list is shared, this undoes the damage for the other tests.
        first.node_endpoints.clear()


REQUEST_CASES = [c for c in CASES if not c.response]


@pytest.mark.parametrize("case", REQUEST_CASES, ids=[c.id for c in REQUEST_CASES])
def test_request_parts_join_to_the_interpreted_frame(case: Case) -> None:
    """encode_request_parts, joined, is the frame the interpreted path builds
    (size prefix, header from its own schema, body by construct)."""
    body = sample_message(case.schema)
    header = RequestHeader(
        request_api_key=case.key,
        request_api_version=case.version,
        correlation_id=7,
        client_id="parts",
    )
    info = protocol.api(case.key)
    head = headers.REQUESTHEADER_SCHEMAS[info.request_header_version(case.version)].build(header)
    rest = head + case.schema.build(body)
    expected = len(rest).to_bytes(4, "big") + rest
    parts = protocol.encode_request_parts(header, body)
    assert b"".join(parts) == expected
    assert protocol.encode_request(header, body) == expected
    # The clients' framer: the same frame, from its plan and again from the
    # plan it kept (only the correlation id differs).
    framer = protocol.RequestFramer("parts")
    assert b"".join(framer.parts(case.key, case.version, 7, body)) == expected
    again = b"".join(framer.parts(case.key, case.version, 2**31 - 1, body))
    assert again == expected[:8] + (2**31 - 1).to_bytes(4, "big") + expected[12:]


@pytest.mark.parametrize("version", range(3, produce.MAX_VERSION + 1))
def test_a_produce_requests_batches_are_parts_of_their_own(version: int) -> None:
    """Record batches of 8 KiB or more go out as the very objects given (sendmsg,
    no copy); the small fields around them are joined."""
    P = produce.ProduceRequest
    big0, big1, small = b"a" * 8192, b"b" * 100_000, b"c" * 8191
    body = P(
        transactional_id="tx" if version >= 3 else None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            P.TopicProduceData(
                # v13 names the topic by id (KIP-516)
                **({"name": "t"} if version < 13 else {"topic_id": uuid.UUID(int=5)}),
                partition_data=[
                    P.PartitionProduceData(index=0, records=big0),
                    P.PartitionProduceData(index=1, records=small),
                    P.PartitionProduceData(index=2, records=big1),
                ],
            )
        ],
    )
    header = RequestHeader(
        request_api_key=0, request_api_version=version, correlation_id=1, client_id="c"
    )
    parts = protocol.encode_request_parts(header, body)
    assert parts[1] is big0 and parts[3] is big1
    assert small in parts[2]  # joined with the fields around it
    assert len(parts) == (5 if version >= 9 else 4)  # flexible: tagged fields after
    frame = b"".join(parts)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    got_header, decoded = protocol.decode_request(frame[4:])
    assert got_header == header and decoded == body


def test_the_framer_refuses_what_encode_request_refuses() -> None:
    """A bad body, a correlation id out of range, a client id that is no string
    and an unknown version: the errors encode_request gives."""
    from trafka.codec.errors import EncodeError, UnsupportedVersionError

    P = produce.ProduceRequest
    framer = protocol.RequestFramer("c")
    good = P(acks=-1, timeout_ms=5, topic_data=[])
    bad = P(acks=-1, timeout_ms="soon", topic_data=[])  # type: ignore[arg-type]
    header = RequestHeader(
        request_api_key=0, request_api_version=9, correlation_id=1, client_id="c"
    )
    with pytest.raises(EncodeError) as expected:
        protocol.encode_request(header, bad)
    with pytest.raises(EncodeError) as got:
        framer.parts(0, 9, 1, bad)
    assert str(got.value) == str(expected.value)
    assert got.value.message_name == "ProduceRequest v9"
    with pytest.raises(EncodeError, match="correlation_id"):
        framer.parts(0, 9, 2**31, good)
    assert b"".join(framer.parts(0, 9, 1, good)) == protocol.encode_request(header, good)
    with pytest.raises(EncodeError) as no_string:
        protocol.RequestFramer(5).parts(0, 9, 1, good)  # type: ignore[arg-type]
    assert no_string.value.message_name == "RequestHeader"
    with pytest.raises(UnsupportedVersionError):
        framer.parts(0, produce.MAX_VERSION + 1, 1, good)
    anonymous = protocol.RequestFramer(None)
    frame = b"".join(anonymous.parts(0, 9, 3, good))
    assert protocol.decode_request(frame[4:])[0].client_id is None


def test_request_parts_refuse_a_bad_body_as_encode_request_does() -> None:
    """A value the fast builder refuses gets the interpreted path's precise error."""
    from trafka.codec.errors import EncodeError

    P = produce.ProduceRequest
    body = P(acks=-1, timeout_ms="soon", topic_data=[])  # type: ignore[arg-type]
    header = RequestHeader(request_api_key=0, request_api_version=9, correlation_id=1)
    with pytest.raises(EncodeError) as parts_error:
        protocol.encode_request_parts(header, body)
    with pytest.raises(EncodeError) as frame_error:
        protocol.encode_request(header, body)
    assert str(parts_error.value) == str(frame_error.value)
    assert parts_error.value.message_name == "ProduceRequest v9"
    assert "timeout_ms" in str(parts_error.value)


def test_every_kafka_3_9_version_is_round_tripped() -> None:
    """Issue #37: the cases cover every (API, version) of Kafka 3.9's specs,
    the versions Kafka 4.0 removed included (the codec generates them)."""
    from trafka.tools import codegen

    cases = {(c.key, c.version, c.response) for c in CASES}
    old = codegen.load_old_specs(codegen.DEFAULT_OLD_SPECS)
    count = 0
    for spec in old.values():
        if spec["type"] != "request" or "broker" not in spec.get("listeners", ()):
            continue
        v = codegen.Versions.parse(spec["validVersions"])
        flexible = codegen.Versions.parse(spec.get("flexibleVersions", "none"))
        for version in range(v.low, v.high + 1):
            early = version in range(flexible.low, v.high + 1) and spec["name"].startswith("Share")
            if early and version < protocol.api(spec["apiKey"]).min_version:
                continue  # early access (Kafka 4.0), retired in 4.1: not KIP-896's
            for response in (False, True):
                assert (spec["apiKey"], version, response) in cases, (spec["name"], version)
                count += 1
    assert count > 500
