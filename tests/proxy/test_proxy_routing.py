"""Key routing across brokers, without sockets: the split by leader, the merged
answer (a failing part included), and what the proxy learns from answers."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest
from proxy_helpers import answer, keyed, read_answer, records_of, request

from trafka.codec import protocol
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as pm
from trafka.codec.records import encode_batch, read_batch_header
from trafka.proxy.keyrouting.answers import failed_answer, learn_leaders, merge_produce
from trafka.proxy.keyrouting.plan import (
    ORIGIN_HEADER,
    ProducePlan,
    origin_header,
    parse_origin_header,
    plan_produce,
)
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.topics import Topics, metadata_request
from trafka.sdk.partitioners import murmur2_partition

# Six partitions led by three brokers, as Kafka spreads them.
LEADERS = {p: 1 + p % 3 for p in range(6)}


def cluster() -> Topics:
    return Topics({"orders": 6}, {("orders", p): leader for p, leader in LEADERS.items()})


def plan(body: Any, topics: Topics | None = None) -> tuple[ProducePlan, RouteStats]:
    stats = RouteStats()
    got = plan_produce(body, topics=topics or cluster(), hash_name="murmur2", stats=stats)
    assert got is not None
    return got, stats


def by_partition(body: Any) -> dict[int, Any]:
    return {p.index: p for t in body.responses for p in t.partition_responses}


def test_each_part_goes_to_the_leader_of_its_partitions() -> None:
    sent = keyed(300, keys=41, null_every=9)
    body = request({0: [encode_batch(sent)]})
    routed, stats = plan(body)
    assert sorted(node for node, _ in routed.parts) == [1, 2, 3]
    flat = []
    for node, part in routed.parts:
        assert part.acks == body.acks and part.timeout_ms == body.timeout_ms
        for partition, records in records_of(part).items():
            assert LEADERS[partition] == node
            for r in records:
                want = 0 if r.key is None else murmur2_partition(r.key, 6)
                assert partition == want
            values = [int(r.value.split(b"-")[1]) for r in records]
            assert values == sorted(values)  # the client's order, per partition
            flat.extend((r.timestamp, r.key, r.value, tuple(r.headers)) for r in records)
    assert Counter(flat) == Counter((ts, k, v, tuple(h)) for ts, k, v, h in sent)
    assert stats.requests_pooled == stats.requests_split == 1
    assert stats.records_moved + stats.records_kept == 300


def test_a_partition_keeps_its_own_records_first() -> None:
    own = [r for r in keyed(200, keys=53) if murmur2_partition(r[1], 6) == 4]
    elsewhere = keyed(100, keys=53)
    body = request({0: [encode_batch(elsewhere)], 4: [encode_batch(own)]})
    routed, _ = plan(body)
    (part,) = [p for node, p in routed.parts if node == LEADERS[4]]
    records = records_of(part)[4]
    # Partition 4's own batch comes first, byte for byte: its base offset is the client's.
    assert [r.value for r in records[: len(own)]] == [r[2] for r in own]
    assert len(records) > len(own)


def test_requests_the_pooled_plan_refuses() -> None:
    plain = encode_batch(keyed(20))
    idempotent = encode_batch(keyed(20), producer_id=7, producer_epoch=0, base_sequence=0)
    cases = [
        (request({0: [idempotent]}), cluster()),
        (request({0: [plain, idempotent]}), cluster()),
        (request({0: [plain]}), Topics()),  # topic never seen in Metadata
        (request({0: [plain]}), Topics({"orders": 6}, {})),  # leader unknown
    ]
    txn = request({0: [plain]})
    cases.append((type(txn)(transactional_id="t", acks=-1, topic_data=txn.topic_data), cluster()))
    for body, topics in cases:
        stats = RouteStats()
        assert plan_produce(body, topics=topics, hash_name="murmur2", stats=stats) is None
        assert stats == RouteStats()  # refused before counting anything


def test_a_batch_whose_target_leader_is_unknown_stays_put() -> None:
    topics = cluster()
    del topics.leaders[("orders", 1)]
    body = request({0: [encode_batch(keyed(100))]})
    routed, stats = plan(body, topics)
    assert [node for node, _ in routed.parts] == [LEADERS[0]]
    assert list(records_of(routed.parts[0][1])) == [0]
    assert stats.batches_untouched_unknown_leader == 1


def test_the_merged_answer_covers_the_client_partitions_with_their_offsets() -> None:
    own = [r for r in keyed(200, keys=53) if murmur2_partition(r[1], 6) == 4]
    body = request({0: [encode_batch(keyed(90))], 4: [encode_batch(own)]})
    routed, _ = plan(body)
    answers = [answer(part) for _, part in routed.parts]
    merged = merge_produce(routed.route, answers)
    parts = by_partition(merged)
    assert list(parts) == [0, 4]
    # Nothing of partition 4 moved: the broker's own answer for it.
    assert (parts[4].error_code, parts[4].base_offset, parts[4].log_start_offset) == (0, 400, 0)
    # Partition 0's records moved: no offset of partition 0 would be true. A client
    # that gives record i the offset base + i (librdkafka, aiokafka, sarama, and any
    # client that does not say what it is) gets a base making all 90 negative...
    assert (parts[0].error_code, parts[0].base_offset, parts[0].log_start_offset) == (0, -90, -1)
    assert parts[0].log_append_time_ms == -1
    # ... one whose reports take -1 as "no offset" for the whole batch (Java's
    # RecordMetadata ignores the batch index when the base offset is -1) gets -1; it
    # says what it is in ApiVersions v3+ (KIP-511's client software name).
    for software in ("apache-kafka-java", "kafka-python", "trafka"):
        java = by_partition(merge_produce(routed.route, answers, software))
        assert (java[0].base_offset, java[4].base_offset) == (-1, 400)
    # The merged answer encodes at every version the proxy serves.
    for version in (3, 7, 9, 11):
        protocol.encode_response(1, 0, version, merged)


def test_a_failing_part_fails_the_partitions_whose_records_it_carried() -> None:
    own = {p: [r for r in keyed(400, keys=97) if murmur2_partition(r[1], 6) == p] for p in (1, 2)}
    body = request(
        {1: [encode_batch(own[1])], 2: [encode_batch(own[2])], 0: [encode_batch(keyed(60))]}
    )
    routed, _ = plan(body)
    dead = LEADERS[2]
    answers = [
        failed_answer(part, ErrorCode.NETWORK_EXCEPTION, "gone") if node == dead else answer(part)
        for node, part in routed.parts
    ]
    parts = by_partition(merge_produce(routed.route, answers))
    # Its own part failed; the lost connection is said as REQUEST_TIMED_OUT, which
    # every client retries (librdkafka gives up on NETWORK_EXCEPTION).
    assert parts[2].error_code == ErrorCode.REQUEST_TIMED_OUT
    assert parts[1].error_code == 0 and parts[1].base_offset == 100  # untouched
    # Partition 0's records went to every broker: the failing part fails it too.
    assert parts[0].error_code == ErrorCode.REQUEST_TIMED_OUT and parts[0].base_offset == -1


def test_throttle_and_leader_hints_are_kept_across_parts() -> None:
    body = request({0: [encode_batch(keyed(90))]})
    routed, _ = plan(body)
    r = pm.ProduceResponse
    answers = [
        dataclasses.replace(
            answer(part),
            throttle_time_ms=10 * node,
            node_endpoints=[r.NodeEndpoint(node_id=node, host=f"kafka-{node}", port=9092)],
        )
        for node, part in routed.parts
    ]
    merged = merge_produce(routed.route, answers)
    assert merged.throttle_time_ms == 30
    assert sorted(e.node_id for e in merged.node_endpoints) == [1, 2, 3]


def test_not_leader_takes_the_hint_or_asks_again() -> None:
    topics = cluster()
    r = pm.ProduceResponse
    hinted = r.PartitionProduceResponse(
        index=1,
        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
        current_leader=r.LeaderIdAndEpoch(leader_id=3, leader_epoch=5),
    )
    bare = r.PartitionProduceResponse(index=2, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    fine = r.PartitionProduceResponse(index=0, error_code=0)
    body = r(
        responses=[
            r.TopicProduceResponse(name="orders", partition_responses=[hinted, fine]),
            r.TopicProduceResponse(name="payments", partition_responses=[bare]),
        ]
    )
    assert learn_leaders(topics, read_answer(body)) == {"payments"}
    assert topics.leader("orders", 1) == 3
    request_body = metadata_request({"payments", "orders"})
    assert [t.name for t in request_body.topics] == ["orders", "payments"]
    assert request_body.allow_auto_topic_creation is False


def test_legacy_message_sets_are_routed_in_their_own_format() -> None:
    """Produce v0-2 (issue #37): magic 0/1 messages, a compressed wrapper among
    them, go by key like batches and stay in their magic and codec."""
    from trafka.codec.legacy import encode_message_set
    from trafka.codec.records import decode_message_set, iter_batches

    for magic in (0, 1):
        sent = [(1_000 + i, k, v, ()) for i, (_, k, v, _) in enumerate(keyed(60, keys=17))]
        blob = encode_message_set(sent[:30], magic=magic) + encode_message_set(
            sent[30:], magic=magic, compression=1
        )
        routed, stats = plan(request({0: [blob]}))
        flat = []
        for node, part in routed.parts:
            for t in part.topic_data:
                for p in t.partition_data:
                    assert LEADERS[p.index] == node
                    headers = [h for h, _ in iter_batches(p.records)]
                    assert {h.magic for h in headers} == {magic}
                    for r in decode_message_set(p.records):
                        assert p.index == murmur2_partition(r.key, 6)
                        flat.append((r.key, r.value))
                    # The compressed wrapper's share stays gzip.
                    assert {h.compression for h in headers} <= {0, 1}
        assert Counter(flat) == Counter((k, v) for _, k, v, _ in sent)
        assert stats.records_moved + stats.records_kept == 60
        # Every version that carries message sets encodes the routed parts.
        for version in (0, 1, 2):
            for _, part in routed.parts:
                protocol.encode_request_body(0, version, part)


def test_a_moved_batch_is_logged_where_its_records_went(caplog: Any) -> None:
    import logging

    body = request({0: [encode_batch(keyed(60))]})
    with caplog.at_level(logging.DEBUG, logger="trafka.proxy"):
        plan(body)
    (line,) = [r.getMessage() for r in caplog.records if "records placed as" in r.getMessage()]
    placed = dict(
        (int(t), int(n))
        for n, t in (part.split(" -> ") for part in line.split(" as ")[1].split(", "))
    )
    assert line.startswith("'orders'-0: 60 records placed as")
    assert sum(placed.values()) == 60
    assert placed == dict(Counter(murmur2_partition(k, 6) for _, k, _, _ in keyed(60)))


def test_origin_headers_mark_every_record_of_a_split_batch_and_no_other() -> None:
    own = [
        (t, k, b"own-" + v, h) for t, k, v, h in keyed(200, keys=53) if murmur2_partition(k, 6) == 4
    ]
    sent = keyed(90, null_every=7)
    body = request({0: [encode_batch(sent)], 4: [encode_batch(own)]})
    stats = RouteStats()
    routed = plan_produce(
        body, topics=cluster(), hash_name="murmur2", stats=stats, origin_headers=True
    )
    assert routed is not None
    seen = {}
    for _, part in routed.parts:
        for records in records_of(part).values():
            seen.update((r.value, r.headers) for r in records)
    # Partition 4's batch stayed whole: its records are as the client sent them.
    for _, _, value, headers in own:
        assert seen[value] == tuple(headers)
    # Each record of partition 0's batch (those without a key too, which stay)
    # keeps its own headers, then says where the client put it.
    for i, (_, _, value, headers) in enumerate(sent):
        *theirs, (name, origin) = seen[value]
        assert theirs == list(headers) and name == ORIGIN_HEADER
        assert origin == b"partition=0,index=%d,count=90" % i
        assert parse_origin_header(origin) == {"partition": 0, "index": i, "count": 90}


def test_an_idempotent_producers_origin_names_its_producer_and_each_records_sequence() -> None:
    header = read_batch_header(
        encode_batch(keyed(3), producer_id=77, producer_epoch=2, base_sequence=0x7FFFFFFE)
    )
    values = [origin_header(5, i, 3, header) for i in range(3)]
    # Sequences wrap past int32's maximum to 0, as Kafka's do.
    assert values == [
        b"partition=5,index=0,count=3,producer=77,epoch=2,sequence=2147483646",
        b"partition=5,index=1,count=3,producer=77,epoch=2,sequence=2147483647",
        b"partition=5,index=2,count=3,producer=77,epoch=2,sequence=0",
    ]
    assert parse_origin_header(values[2])["sequence"] == 0
    for bad in (b"", b"partition=1", b"partition=x,index=0,count=1", b"count=1,index=0,partition=1",
                b"\xff", b"partition=1,index=0,count=1,producer=2"):  # fmt: skip
        with pytest.raises(ValueError, match="not a trafka-origin header"):
            parse_origin_header(bad)


def test_a_partition_told_its_batchs_answer_hears_only_its_own_records_errors() -> None:
    """KIP-467's record errors name records by their index in the batch written:
    the client's own records come first in it, the records moved in after them;
    the client hears of its own only (an index past its batch names no record of it)."""
    own = [r for r in keyed(200, keys=53) if murmur2_partition(r[1], 6) == 4]
    moved_in = [r for r in keyed(300, keys=97) if murmur2_partition(r[1], 6) == 4][:5]
    body = request({0: [encode_batch(moved_in)], 4: [encode_batch(own)]})
    routed, _ = plan(body)
    answers = [answer(part) for _, part in routed.parts]
    errors = [
        pm.ProduceResponse.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message="x")
        for i in (0, len(own) - 1, len(own), len(own) + 4)
    ]
    answers = [
        dataclasses.replace(
            a,
            responses=[
                dataclasses.replace(
                    t,
                    partition_responses=[
                        dataclasses.replace(p, error_code=87, record_errors=errors)
                        if p.index == 4
                        else p
                        for p in t.partition_responses
                    ],
                )
                for t in a.responses
            ],
        )
        for a in answers
    ]
    parts = by_partition(merge_produce(routed.route, answers))
    assert parts[4].error_code == 87  # INVALID_RECORD: the batch was refused
    assert [e.batch_index for e in parts[4].record_errors] == [0, len(own) - 1]
