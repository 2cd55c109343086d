"""FetchResponse walked on bytes (codec/fetch_response.py) against the codec:
on every answer the codec writes, the walk finds the body's tagged fields where
the codec put them, and says whether ``node_endpoints`` (KIP-951, Fetch v16+)
or any other body tag is there; on what the codec refuses, the walk never
claims an answer without tags (the caller then decodes and gets the error)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import message_strategy

from trafka.codec import ApiKey, protocol
from trafka.codec.errors import DecodeError
from trafka.codec.fetch_response import FIRST_SCANNED_VERSION, fetch_body_tags_at, has_body_tags
from trafka.codec.messages import k01_fetch as fm

VERSIONS = list(range(FIRST_SCANNED_VERSION, fm.MAX_VERSION + 1))
R = fm.FetchResponse


def _frame(version: int, body: Any) -> bytes:
    return protocol.encode_response(11, ApiKey.FETCH, version, body)[4:]


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40)
@given(data=st.data())
def test_the_walk_finds_the_body_tags_the_codec_wrote(version: int, data: st.DataObject) -> None:
    body = data.draw(message_strategy(fm.RESPONSE_SCHEMAS[version]))
    frame = _frame(version, body)
    at = fetch_body_tags_at(frame, version)
    assert at is not None
    tagged = bool(body.unknown_tagged_fields) or bool(getattr(body, "node_endpoints", None))
    assert has_body_tags(frame, version) is tagged
    # What lies before the tags is the answer with none: the codec agrees.
    bare = dataclasses.replace(body, unknown_tagged_fields=[])
    if version >= 16:
        bare = dataclasses.replace(bare, node_endpoints=[])
    assert _frame(version, bare) == frame[:at] + b"\0"


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40)
@given(data=st.data())
def test_a_cut_or_padded_answer_is_left_to_the_codec(version: int, data: st.DataObject) -> None:
    body = data.draw(message_strategy(fm.RESPONSE_SCHEMAS[version]))
    frame = _frame(version, body)
    cut = data.draw(st.integers(0, len(frame) - 1))
    for broken in (frame[:cut], frame + b"\0"):
        try:
            protocol.decode_response(broken, ApiKey.FETCH, version)
        except DecodeError:
            assert has_body_tags(broken, version) is not False
        else:  # a shorter frame the codec still reads: the walk must agree
            assert has_body_tags(broken, version) is not None


def test_a_leader_hint_is_seen_and_a_plain_answer_is_not() -> None:
    """KIP-951: a refused partition names its new leader (current_leader, an id
    and an epoch) and the answer the leader's address (node_endpoints)."""
    plain = R(
        responses=[
            R.FetchableTopicResponse(
                topic_id=uuid.UUID(int=3),
                partitions=[R.PartitionData(partition_index=0, records=b"x" * 300)],
            )
        ]
    )
    hinted = dataclasses.replace(
        plain, node_endpoints=[R.NodeEndpoint(node_id=2, host="kafka-2", port=9092)]
    )
    for version in VERSIONS:
        assert has_body_tags(_frame(version, plain), version) is False
        if version >= 16:
            assert has_body_tags(_frame(version, hinted), version) is True
    assert fetch_body_tags_at(b"", 11) is None
