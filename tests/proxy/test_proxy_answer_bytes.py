"""Key routing's answers written on bytes (answers.merge_answers,
idempotent_plan.idempotent_answer_bytes) against the reference on decoded
messages (merge_produce, idempotent_answer, then the proxy's address rewriting
and the codec's encoder): the same bytes for every Produce version, for split
and kept partitions, errors, record errors (KIP-467), leader hints and node
endpoints (KIP-951), parts that got no answer, and clients of either kind of
"no offset" (routing.unknown_base_offset)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proxy_helpers import keyed, request

from trafka.codec import protocol
from trafka.codec.errors import DecodeError, ErrorCode
from trafka.codec.messages import k00_produce as pm
from trafka.codec.produce_response import read_produce_response
from trafka.codec.records import encode_batch
from trafka.proxy.keyrouting.answers import failed_answer, failed_part, merge_answers, merge_produce
from trafka.proxy.keyrouting.idempotent_plan import (
    IdempotentPlan,
    idempotent_answer,
    idempotent_answer_bytes,
)
from trafka.proxy.keyrouting.plan import plan_produce
from trafka.proxy.keyrouting.sequences import ClientBatch, State, Upstream
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.rewrite import PRODUCE_MAX_ROUTED, Addresses, rewrite_addresses
from trafka.proxy.topics import Topics
from trafka.sdk.partitioners import murmur2_partition

R = pm.ProduceResponse
VERSIONS = list(range(pm.MIN_VERSION, PRODUCE_MAX_ROUTED + 1))  # what the proxy advertises
SOFTWARE = st.sampled_from([None, "librdkafka", "apache-kafka-java"])
LEADERS = {p: 1 + p % 3 for p in range(6)}
ERRORS = st.sampled_from([0, 0, 0, 0, 6, 5, 7, 19, 13, 87])  # NOT_LEADER..., INVALID_RECORD
I64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.none() | st.text(max_size=6) | st.text(min_size=130, max_size=135)
ADDRESSES = Addresses(lambda node, host, port: ("proxy.example", 19_000 + node))


def endpoints(nodes: list[Any]) -> list[Any]:
    """The proxy's rewriting of KIP-951 node endpoints (as in key_routing)."""
    return list(rewrite_addresses(0, R(node_endpoints=nodes), ADDRESSES).node_endpoints)


def unknown_tags(draw: st.DrawFn, known: int) -> list[tuple[int, bytes]]:
    tags = draw(st.lists(st.integers(known, 30), max_size=2, unique=True))
    return [(t, draw(st.binary(max_size=3))) for t in sorted(tags)]


@st.composite
def partition_answer(draw: st.DrawFn, version: int, index: int) -> Any:
    p = R.PartitionProduceResponse(
        index=index, error_code=draw(ERRORS), base_offset=draw(st.integers(-1, 10**12))
    )
    if version >= 2:
        p = dataclasses.replace(p, log_append_time_ms=draw(st.sampled_from([-1, 1_700_000_000])))
    if version >= 5:
        p = dataclasses.replace(p, log_start_offset=draw(st.integers(-1, 50)))
    if version >= 8 and draw(st.booleans()):
        errors = [
            R.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=draw(TEXT))
            for i in draw(st.lists(st.integers(0, 400), max_size=3))
        ]
        p = dataclasses.replace(p, record_errors=errors, error_message=draw(TEXT))
    if version >= 9 and draw(st.integers(0, 4)) == 0:
        p = dataclasses.replace(p, unknown_tagged_fields=unknown_tags(draw, 1))
    if version >= 10 and p.error_code in (6, 5) and draw(st.booleans()):
        leader = R.LeaderIdAndEpoch(leader_id=draw(st.integers(1, 3)), leader_epoch=4)
        p = dataclasses.replace(p, current_leader=leader)
    return p


@st.composite
def part_answer(draw: st.DrawFn, version: int, part: Any) -> Any:
    """A broker's answer to ``part``: its partitions (in any order), top-level
    fields, sometimes an extra partition the part did not send."""
    topics = []
    for t in part.topic_data:
        parts = [draw(partition_answer(version, p.index)) for p in t.partition_data]
        topics.append(
            R.TopicProduceResponse(name=t.name, partition_responses=draw(st.permutations(parts)))
        )
    body = R(responses=topics, throttle_time_ms=draw(st.integers(0, 3)) if version else 0)
    if version >= 9:
        body = dataclasses.replace(body, unknown_tagged_fields=unknown_tags(draw, 1))
    if version >= 10 and draw(st.booleans()):
        nodes = [
            R.NodeEndpoint(
                node_id=n, host=f"broker-{n}", port=9092, rack=draw(st.none() | st.just("r1"))
            )
            for n in draw(st.lists(st.integers(1, 3), max_size=3))
        ]
        body = dataclasses.replace(body, node_endpoints=nodes)
    return body


@st.composite
def routed(draw: st.DrawFn) -> Any:
    """A plain producer's request and its plan: batches whose records all stay
    (the partition keeps its broker's answer), batches split over partitions
    and leaders, empty partitions, two topics."""
    parts: dict[int, list[bytes]] = {}
    for index in draw(st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True)):
        kind = draw(st.sampled_from(["split", "stays", "empty"]))
        if kind == "empty":
            parts[index] = []
            continue
        records = keyed(draw(st.integers(1, 40)), keys=draw(st.integers(1, 30)))
        if kind == "stays":
            records = [r for r in records if murmur2_partition(r[1], 6) == index] or [
                (1, None, b"v", [])
            ]
        parts[index] = [encode_batch(records)]
    body = request(parts)
    if draw(st.booleans()):
        other = request({0: [encode_batch(keyed(5))]}, topic="payments")
        body = dataclasses.replace(body, topic_data=body.topic_data + other.topic_data)
    topics = Topics(
        {"orders": 6, "payments": 6},
        {(t, p): leader for t in ("orders", "payments") for p, leader in LEADERS.items()},
    )
    plan = plan_produce(body, topics=topics, hash_name="murmur2", stats=RouteStats())
    assert plan is not None
    return plan


def encoded(body: Any, version: int) -> bytes:
    return protocol.encode_response(3, 0, version, body)[4:]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(VERSIONS), software=SOFTWARE, data=st.data())
def test_the_merged_answer_on_bytes_is_the_reference_s(
    version: int, software: str | None, data: st.DataObject
) -> None:
    plan = data.draw(routed())
    decoded, read = [], []
    for _, part in plan.parts:
        if data.draw(st.integers(0, 6)) == 0:  # no answer: a stand-in
            code = data.draw(
                st.sampled_from([ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT])
            )
            decoded.append(failed_answer(part, code, "broker 2: gone"))
            read.append(failed_part(part, version, code, "broker 2: gone"))
            continue
        frame = encoded(data.draw(part_answer(version, part)), version)
        decoded.append(protocol.decode_response(frame, 0, version)[1])
        read.append(read_produce_response(frame, version))
    reference = rewrite_addresses(0, merge_produce(plan.route, decoded, software), ADDRESSES)
    out = merge_answers(plan.route, read, version, software, endpoints)
    assert out == protocol.encode_response_body(0, version, reference)


def test_a_part_answer_without_a_partition_it_was_sent_is_refused_on_both_paths() -> None:
    plan = plan_produce(
        request({0: [encode_batch(keyed(50, keys=29))]}),
        topics=Topics({"orders": 6}, {("orders", p): node for p, node in LEADERS.items()}),
        hash_name="murmur2",
        stats=RouteStats(),
    )
    assert plan is not None

    def answered(part: Any, skip: int = 0) -> bytes:
        (t,) = part.topic_data
        parts = [R.PartitionProduceResponse(index=p.index) for p in t.partition_data[skip:]]
        body = R(responses=[R.TopicProduceResponse(name=t.name, partition_responses=parts)])
        return encoded(body, 9)

    frames = [answered(part, skip=1 if i == 0 else 0) for i, (_, part) in enumerate(plan.parts)]
    with pytest.raises(DecodeError, match="did not answer"):
        merge_produce(plan.route, [protocol.decode_response(f, 0, 9)[1] for f in frames])
    with pytest.raises(DecodeError, match="did not answer"):
        merge_answers(plan.route, [read_produce_response(f, 9) for f in frames], 9)


@st.composite
def idempotent_plans(draw: st.DrawFn) -> IdempotentPlan:
    """Client partitions answered by the proxy itself (an ErrorCode), or by
    upstream batches in every state, acknowledged with or without the client's
    base offset, failed with any error."""
    answers = []
    for topic in draw(st.lists(st.sampled_from(["orders", "payments"]), min_size=1, unique=True)):
        entries: list[Any] = []
        for index in draw(st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True)):
            if draw(st.integers(0, 4)) == 0:
                entries.append((index, ErrorCode(draw(st.sampled_from([3, 45, 47])))))
                continue
            upstream = []
            for target in draw(st.lists(st.integers(0, 5), min_size=1, max_size=3)):
                u = Upstream(topic, target, 0, 1, None, draw(st.sampled_from(list(State))))
                u.error = ErrorCode(draw(st.sampled_from([0, 6, 45, 56, 19])))
                u.error_message = draw(TEXT)
                u.base_offset, u.log_append_time_ms, u.log_start_offset = draw(I64), -1, 3
                upstream.append(u)
            lead = upstream[0] if draw(st.booleans()) else None
            count = draw(st.integers(1, 9))
            entries.append((index, ClientBatch(topic, index, 0, count, tuple(upstream), lead)))
        answers.append((topic, entries))
    return IdempotentPlan(1, [], [], answers)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(VERSIONS), software=SOFTWARE, data=st.data())
def test_the_idempotent_answer_on_bytes_is_the_reference_s(
    version: int, software: str | None, data: st.DataObject
) -> None:
    plan = data.draw(idempotent_plans())
    template = None
    if data.draw(st.booleans()):
        part = request({0: [b""], 1: [b""]})
        frame = encoded(data.draw(part_answer(version, part)), version)
        template = frame
    if template is None:
        reference = idempotent_answer(plan, R(), software)
        read = None
    else:
        reference = idempotent_answer(
            plan, protocol.decode_response(template, 0, version)[1], software
        )
        read = read_produce_response(template, version)
    reference = rewrite_addresses(0, reference, ADDRESSES)
    out = idempotent_answer_bytes(plan, read, version, software, endpoints)
    assert out == protocol.encode_response_body(0, version, reference)
