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
# A few examples per (API, version, direction) keep the ~550 cases at about 30 s
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
