"""The proxy's I/O-free logic: address rewriting at every version, key routing, merging."""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from typing import Any

import pytest
from proxy_helpers import answer, keyed, read_answer, records_of, request

from trafka.codec import protocol
from trafka.codec.compression import Compression
from trafka.codec.errors import DecodeError
from trafka.codec.messages import k00_produce as pm
from trafka.codec.messages import k03_metadata as mm
from trafka.codec.messages import k10_find_coordinator as fm
from trafka.codec.messages import k60_describe_cluster as dm
from trafka.codec.records import encode_batch, iter_batches
from trafka.proxy.keyrouting.answers import merge_produce, patch_answer, sub_request, unwritten
from trafka.proxy.keyrouting.plan import HASHES, route_produce
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.rewrite import Addresses, Pending, reads_answer, rewrite_response
from trafka.proxy.topics import Topics
from trafka.sdk.partitioners import murmur2_partition

PROXY = {1: ("proxy.local", 19001), 2: ("proxy.local", 19002)}


def addresses() -> tuple[Addresses, list[tuple[int, str, int]]]:
    seen: list[tuple[int, str, int]] = []

    def listen_for(node: int, host: str, port: int) -> tuple[str, int]:
        seen.append((node, host, port))
        return PROXY[node]

    return Addresses(listen_for), seen


def versions(key: int) -> range:
    info = protocol.api(key)
    return range(info.min_version, info.max_version + 1)


def round_trip(key: int, version: int, body: Any, topics: Topics | None = None) -> Any:
    frame = protocol.encode_response(42, key, version, body)[4:]
    addr, _ = addresses()
    out = rewrite_response(Pending(key, version), frame, addr, topics or Topics())
    header, decoded = protocol.decode_response(out[4:], key, version)
    assert header.correlation_id == 42
    return decoded


@pytest.mark.parametrize("version", versions(3))
def test_metadata_names_the_proxy_and_teaches_partitions(version: int) -> None:
    r = mm.MetadataResponse
    body = r(
        brokers=[
            r.MetadataResponseBroker(node_id=1, host="kafka-1", port=9092),
            r.MetadataResponseBroker(node_id=2, host="kafka-2", port=9093),
        ],
        controller_id=1,
        topics=[
            r.MetadataResponseTopic(
                name="orders",
                partitions=[
                    r.MetadataResponsePartition(partition_index=i, leader_id=1 + i % 2)
                    for i in range(3)
                ],
            ),
            r.MetadataResponseTopic(name="missing", error_code=3),
        ],
    )
    topics = Topics()
    got = round_trip(3, version, body, topics)
    assert [(b.node_id, b.host, b.port) for b in got.brokers] == [
        (1, "proxy.local", 19001),
        (2, "proxy.local", 19002),
    ]
    assert (
        got.topics
        == protocol.decode_response(protocol.encode_response(42, 3, version, body)[4:], 3, version)[
            1
        ].topics
    )
    assert topics.partitions == {"orders": 3}
    assert topics.leaders == {("orders", 0): 1, ("orders", 1): 2, ("orders", 2): 1}


@pytest.mark.parametrize("version", versions(10))
def test_find_coordinator_names_the_proxy(version: int) -> None:
    r = fm.FindCoordinatorResponse
    if version >= 4:
        body = r(
            coordinators=[
                r.Coordinator(key="g1", node_id=2, host="kafka-2", port=9093),
                r.Coordinator(key="g2", node_id=-1, error_code=15),
            ]
        )
        got = round_trip(10, version, body)
        assert [(c.key, c.host, c.port, c.error_code) for c in got.coordinators] == [
            ("g1", "proxy.local", 19002, 0),
            ("g2", "", -1 if got.coordinators[1].port == -1 else 0, 15),
        ]
    else:
        got = round_trip(10, version, r(node_id=1, host="kafka-1", port=9092))
        assert (got.node_id, got.host, got.port) == (1, "proxy.local", 19001)
        failed = round_trip(10, version, r(error_code=15, node_id=-1, host="", port=-1))
        assert (failed.error_code, failed.host, failed.port) == (15, "", -1)


@pytest.mark.parametrize("version", versions(60))
def test_describe_cluster_names_the_proxy(version: int) -> None:
    r = dm.DescribeClusterResponse
    body = r(cluster_id="c", brokers=[r.DescribeClusterBroker(broker_id=2, host="k", port=1)])
    got = round_trip(60, version, body)
    assert [(b.broker_id, b.host, b.port) for b in got.brokers] == [(2, "proxy.local", 19002)]


# -- key routing ---------------------------------------------------------------------------


def topics_of(count: int = 6, leader: int = 1) -> Topics:
    return Topics({"orders": count}, {("orders", i): leader for i in range(count)})


@pytest.mark.parametrize("hash_name", sorted(HASHES))
@pytest.mark.parametrize(
    "compression", [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]
)
def test_keyed_records_move_to_their_hash_partition(hash_name: str, compression: int) -> None:
    sent = keyed(200, null_every=7)
    body = request({0: [encode_batch(sent, compression=compression)]})
    stats = RouteStats()
    routed, route = route_produce(
        body, node_id=1, topics=topics_of(), hash_name=hash_name, stats=stats
    )
    assert route is not None
    got = records_of(routed)
    for partition, records in got.items():
        for r in records:
            want = 0 if r.key is None else HASHES[hash_name](r.key, 6)
            assert partition == want
    # Nothing lost or invented; each partition keeps the client's order; fields kept.
    flat = [(r.timestamp, r.key, r.value, r.headers) for rs in got.values() for r in rs]
    assert Counter(flat) == Counter((ts, k, v, tuple(h)) for ts, k, v, h in sent)
    for records in got.values():
        values = [int(r.value.split(b"-")[1]) for r in records]
        assert values == sorted(values)
    # Rebuilt batches keep the client's compression.
    for t in routed.topic_data:
        for p in t.partition_data:
            for header, _ in iter_batches(p.records):
                assert header.attributes & 0x07 == compression
    assert stats.records_moved + stats.records_kept == 200
    assert stats.records_moved > 0 and stats.batches_rebuilt == 1
    # The answer maps back to the one partition the client sent.
    ((topic, ((index, sources, kept, count),)),) = route.origin
    assert (topic, index, kept, count) == ("orders", 0, None, 200)
    assert sorted(x for _, x in sources) == sorted(got)
    # One batch per partition: Kafka refuses a magic 2 Produce with more.
    for t in routed.topic_data:
        for p in t.partition_data:
            assert len(list(iter_batches(p.records))) == 1


def test_batches_already_in_place_pass_byte_for_byte() -> None:
    records = [r for r in keyed(100) if murmur2_partition(r[1], 6) == 2]
    blob = encode_batch(records)
    body = request({2: [blob]})
    routed, route = route_produce(
        body, node_id=1, topics=topics_of(), hash_name="murmur2", stats=RouteStats()
    )
    assert routed is body and route is None


@pytest.mark.parametrize(
    ("why", "topics", "batch_kwargs", "stat"),
    [
        ("idempotent", topics_of(), {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0}, "batches_untouched_idempotent"),
        ("transactional", topics_of(), {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0, "is_transactional": True}, "batches_untouched_idempotent"),
        ("unknown topic", Topics(), {}, "batches_untouched_unknown_topic"),
        ("other leader", topics_of(leader=2), {}, "batches_untouched_other_leader"),
    ],
)  # fmt: skip
def test_batches_the_proxy_must_not_touch(
    why: str, topics: Topics, batch_kwargs: dict[str, Any], stat: str
) -> None:
    blob = encode_batch(keyed(50), **batch_kwargs)
    body = request({0: [blob]})
    stats = RouteStats()
    routed, route = route_produce(body, node_id=1, topics=topics, hash_name="murmur2", stats=stats)
    assert routed is body and route is None, why
    assert getattr(stats, stat) == 1


def test_a_malformed_batch_is_refused() -> None:
    blob = bytearray(encode_batch(keyed(5)))
    blob[-1] ^= 0xFF  # the CRC no longer matches
    with pytest.raises(DecodeError):
        route_produce(
            request({0: [bytes(blob)]}),
            node_id=1,
            topics=topics_of(),
            hash_name="murmur2",
            stats=RouteStats(),
        )


@pytest.mark.parametrize("version", [3, 7, 9, 11])
def test_the_answer_covers_exactly_the_partitions_the_client_sent(version: int) -> None:
    # Partition 0 holds records for several partitions; partition 4 only its own.
    own = [r for r in keyed(300, keys=97) if murmur2_partition(r[1], 6) == 4]
    assert own
    body = request({0: [encode_batch(keyed(60))], 4: [encode_batch(own)]})
    routed, route = route_produce(
        body, node_id=1, topics=topics_of(), hash_name="murmur2", stats=RouteStats()
    )
    assert route is not None
    targets = {index: [x for _, x in sources] for index, sources, _, _ in route.origin[0][1]}
    assert targets[4] == [4] and len(targets[0]) > 1

    def merged(errors: dict[int, int] | None) -> Any:
        # The broker's answer as the proxy reads it at the client's version.
        frame = protocol.encode_response(9, 0, version, answer(routed, errors))[4:]
        out = merge_produce(route, [protocol.decode_response(frame, 0, version)[1]])
        return protocol.decode_response(
            protocol.encode_response(9, 0, version, out)[4:], 0, version
        )[1]

    ok = merged(None)
    parts = {p.index: p for t in ok.responses for p in t.partition_responses}
    assert set(parts) == {0, 4}
    assert parts[4].base_offset == 400 and parts[0].error_code == 0
    # A failure in any part of partition 0's records fails partition 0.
    moved_to = next(t for t in targets[0] if t != 0)
    failed = merged({moved_to: 6})
    parts = {p.index: p for t in failed.responses for p in t.partition_responses}
    assert parts[0].error_code == 6 and parts[4].error_code == 0


def test_an_answer_missing_a_part_is_an_error() -> None:
    body = request({0: [encode_batch(keyed(60))]})
    routed, route = route_produce(
        body, node_id=1, topics=topics_of(), hash_name="murmur2", stats=RouteStats()
    )
    assert route is not None
    reply = answer(routed)
    first = reply.responses[0]
    reply = dataclasses.replace(
        reply,
        responses=[dataclasses.replace(first, partition_responses=first.partition_responses[:1])],
    )
    with pytest.raises(DecodeError, match="did not answer"):
        merge_produce(route, [reply])


@pytest.mark.parametrize("version", [v for v in versions(0) if v >= 10])
def test_produce_leader_hints_name_the_proxy(version: int) -> None:
    r = pm.ProduceResponse
    body = r(
        responses=[
            r.TopicProduceResponse(
                name="orders",
                partition_responses=[r.PartitionProduceResponse(index=0, error_code=6)],
            )
        ],
        node_endpoints=[r.NodeEndpoint(node_id=2, host="kafka-2", port=9093)],
    )
    got = round_trip(0, version, body)
    assert [(e.node_id, e.host, e.port) for e in got.node_endpoints] == [(2, "proxy.local", 19002)]
    assert got.responses[0].partition_responses[0].error_code == 6


@pytest.mark.parametrize("version", [v for v in versions(1) if v >= 16])
def test_fetch_leader_hints_name_the_proxy(version: int) -> None:
    from trafka.codec.messages import k01_fetch as fetch

    r = fetch.FetchResponse
    body = r(
        responses=[
            r.FetchableTopicResponse(
                topic="orders",
                topic_id=uuid.UUID(int=7),
                partitions=[
                    r.PartitionData(
                        partition_index=0,
                        error_code=6,
                        current_leader=r.LeaderIdAndEpoch(leader_id=2, leader_epoch=3),
                        records=b"",
                    )
                ],
            )
        ],
        node_endpoints=[r.NodeEndpoint(node_id=2, host="kafka-2", port=9093, rack="r1")],
    )
    got = round_trip(1, version, body)
    assert [(e.node_id, e.host, e.port, e.rack) for e in got.node_endpoints] == [
        (2, "proxy.local", 19002, "r1")
    ]
    assert got.responses[0].partitions[0].current_leader.leader_id == 2


@pytest.mark.parametrize("key", [78, 79])
def test_share_group_leader_hints_name_the_proxy(key: int) -> None:
    from trafka.codec.messages import k78_share_fetch as sf
    from trafka.codec.messages import k79_share_acknowledge as sa

    r = sf.ShareFetchResponse if key == 78 else sa.ShareAcknowledgeResponse
    body = r(node_endpoints=[r.NodeEndpoint(node_id=1, host="kafka-1", port=9092)])
    for version in versions(key):
        got = round_trip(key, version, body)
        assert [(e.node_id, e.host, e.port) for e in got.node_endpoints] == [
            (1, "proxy.local", 19001)
        ]


def test_fetch_answers_are_read_only_where_they_can_name_brokers() -> None:
    assert [reads_answer(1, v) for v in (4, 15, 16, 17)] == [False, False, True, True]
    assert reads_answer(3, 0) and reads_answer(18, 3) and reads_answer(78, 0)
    assert not reads_answer(2, 9) and not reads_answer(8, 9)


def test_produce_answers_are_read_only_where_they_can_name_brokers() -> None:
    """KIP-951 (ProduceResponse.json: "Version 10 adds 'CurrentLeader' and
    'NodeEndpoints'"): an older Produce answer names no broker, so it passes
    unread; from v10 on it is read, as its leader hints name brokers."""
    assert [reads_answer(0, v) for v in (3, 8, 9, 10, 11)] == [False] * 3 + [True] * 2


@pytest.mark.parametrize("version", versions(18))
def test_api_versions_are_capped_where_the_proxy_must_read(version: int) -> None:
    from trafka.codec.messages import k18_api_versions as am

    r = am.ApiVersionsResponse
    body = r(
        api_keys=[
            r.ApiVersion(api_key=3, min_version=0, max_version=99),  # Metadata
            r.ApiVersion(api_key=0, min_version=3, max_version=99),  # Produce
            r.ApiVersion(api_key=1, min_version=4, max_version=17),  # Fetch: hints read
            r.ApiVersion(api_key=2, min_version=1, max_version=99),  # ListOffsets: not read
            r.ApiVersion(api_key=60, min_version=0, max_version=0),  # DescribeCluster
            r.ApiVersion(api_key=78, min_version=0, max_version=99),  # ShareFetch
        ]
    )
    frame = protocol.encode_response(7, 18, version, body)[4:]
    addr, _ = addresses()
    out = rewrite_response(Pending(18, version), frame, addr, Topics())
    got = {
        a.api_key: (a.min_version, a.max_version)
        for a in protocol.decode_response(out[4:], 18, version)[1].api_keys
    }
    assert got == {
        3: (0, protocol.api(3).max_version),
        0: (3, 11),  # v12+: transaction version 2, v13: topics by id (not routed)
        1: (4, 17),  # not capped: its leader hints are rewritten (KIP-951)
        2: (1, 99),
        60: (0, 0),
        78: (0, protocol.api(78).max_version),
    }


def test_an_api_versions_answer_it_cannot_read_passes_unchanged() -> None:
    frame = b"\x00\x00\x00\x07\x00\x23"  # correlation id 7, UNSUPPORTED_VERSION, cut short
    addr, _ = addresses()
    out = rewrite_response(Pending(18, 4), frame, addr, Topics())
    assert out == len(frame).to_bytes(4, "big") + frame


def test_the_partitions_a_former_leader_refused_go_alone_and_their_answers_replace_the_old() -> (
    None
):
    """What following a moved leader needs: which partitions a part's answer says
    were refused unwritten by a former leader, the part with only those, and the
    part's answer with the new leader's answers in their place."""
    body = request(
        {0: [encode_batch(keyed(5))], 1: [encode_batch(keyed(5))], 2: [encode_batch(keyed(5))]}
    )
    # NOT_LEADER, LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS
    refused = read_answer(answer(body, {0: 6, 1: 5, 2: 19}))
    # Not enough replicas: the leader stays; the client retries it.
    assert unwritten(refused) == {("orders", 0), ("orders", 1)}
    alone = sub_request(body, unwritten(refused))
    assert [p.index for t in alone.topic_data for p in t.partition_data] == [0, 1]
    assert (
        alone.topic_data[0].partition_data[0].records
        == body.topic_data[0].partition_data[0].records
    )
    newer = read_answer(answer(alone))
    patched = patch_answer(refused, newer)
    codes = {index: p.error_code for (_, index), p in patched.partitions.items()}
    assert codes == {0: 0, 1: 0, 2: 19}
    assert unwritten(patched) == set()
