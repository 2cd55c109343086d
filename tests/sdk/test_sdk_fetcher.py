"""Fetcher: positions, fetch requests, response handling, record hand-out (no sockets)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sdk_metadata import one_topic_cache

from trafka.codec import DecodeError, ErrorCode, KafkaError
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k02_list_offsets as lo
from trafka.codec.messages import k03_metadata as md
from trafka.codec.records import encode_batch, encode_control_batch, set_base_offset
from trafka.sdk.fetcher import (
    EARLIEST,
    LATEST,
    Fetcher,
    OffsetOutOfRangeError,
    TopicPartition,
    build_list_offsets,
    parse_list_offsets,
)
from trafka.sdk.metadata import MetadataCache

TP = TopicPartition("t", 0)
R = fetch.FetchResponse


def cache() -> MetadataCache:
    return one_topic_cache("t", 2, leader_epoch=2)


def batch(base: int, n: int, **kw: object) -> bytes:
    raw = encode_batch([(1000 + i, None, b"v%d" % (base + i), ()) for i in range(n)], **kw)  # type: ignore[arg-type]
    return bytes(set_base_offset(raw, base))


def response(blob: bytes | None, *, code: int = 0, hw: int = 100, **kw: object) -> R:
    return R(
        responses=[
            R.FetchableTopicResponse(
                topic="t",
                partitions=[
                    R.PartitionData(
                        partition_index=0, error_code=code, high_watermark=hw, records=blob, **kw
                    )
                ],  # type: ignore[arg-type]
            )
        ]
    )


def test_fetch_request_shape_and_in_flight() -> None:
    f = Fetcher(cache(), fetch_max_wait_ms=250, max_partition_fetch_bytes=1000)
    f.assign([TP, TopicPartition("t", 1)])
    assert f.fetchable() == {}  # no positions yet
    assert set(f.missing_positions()) == {TP, TopicPartition("t", 1)}
    f.seek(TP, 5)
    assert f.fetchable() == {1: [TP]}
    req, positions = f.build_fetch([TP], 12)
    assert positions == {TP: 5}
    assert req.max_wait_ms == 250 and req.session_epoch == -1 and req.replica_id == -1
    part = req.topics[0].partitions[0]
    assert (part.fetch_offset, part.partition_max_bytes, part.current_leader_epoch) == (5, 1000, 2)
    assert f.fetchable() == {}  # in flight


def test_records_skip_below_position_and_advance() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 3)
    _, positions = f.build_fetch([TP], 12)
    blob = batch(0, 5) + batch(5, 5)
    assert f.handle_fetch_response(positions, response(blob, hw=10))
    got = f.take(4)
    assert [r.offset for r in got[TP]] == [3, 4, 5, 6]
    assert f.position(TP) == 7
    assert f.lag(TP) == 3
    got = f.take(100)
    assert [r.offset for r in got[TP]] == [7, 8, 9]
    assert f.position(TP) == 10
    assert f.fetchable() == {1: [TP]}
    assert f.build_fetch([TP], 12)[1] == {TP: 10}


def test_control_batches_are_skipped_but_advance() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0)
    _, positions = f.build_fetch([TP], 12)
    marker = bytes(
        set_base_offset(
            encode_control_batch(
                1, producer_id=7, producer_epoch=0, coordinator_epoch=0, timestamp=1
            ),
            2,
        )
    )
    f.handle_fetch_response(positions, response(batch(0, 2) + marker))
    got = f.take(100)
    assert [r.offset for r in got[TP]] == [0, 1]
    assert f.position(TP) == 3


def test_stale_response_after_seek_ignored() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0)
    _, positions = f.build_fetch([TP], 12)
    f.seek(TP, 50)
    assert not f.handle_fetch_response(positions, response(batch(0, 3)))
    assert f.take(10) == {}
    assert f.position(TP) == 50


def test_offset_out_of_range_resets_or_raises() -> None:
    f = Fetcher(cache(), auto_offset_reset="earliest")
    f.assign([TP])
    f.seek(TP, 999)
    _, positions = f.build_fetch([TP], 12)
    assert not f.reset_wanted
    f.handle_fetch_response(positions, response(None, code=ErrorCode.OFFSET_OUT_OF_RANGE))
    assert f.needs_reset() == {TP: EARLIEST}
    assert f.reset_wanted  # the driver must start the lookup
    f.apply_reset(TP, 4)
    assert f.position(TP) == 4

    strict = Fetcher(cache(), auto_offset_reset="none")
    strict.assign([TP])
    strict.seek(TP, 999)
    _, positions = strict.build_fetch([TP], 12)
    strict.handle_fetch_response(positions, response(None, code=ErrorCode.OFFSET_OUT_OF_RANGE))
    with pytest.raises(OffsetOutOfRangeError):
        strict.take(1)
    with pytest.raises(OffsetOutOfRangeError):
        strict.default_reset([TP])


def test_leader_error_requests_metadata() -> None:
    m = cache()
    f = Fetcher(m)
    f.assign([TP])
    f.seek(TP, 0)
    _, positions = f.build_fetch([TP], 12)
    assert not m.needs_update(0.0)
    f.handle_fetch_response(positions, response(None, code=ErrorCode.NOT_LEADER_OR_FOLLOWER))
    assert m.needs_update(0.0)
    assert f.fetchable() == {1: [TP]}  # may be fetched again


def test_a_leader_hint_with_its_endpoint_moves_the_fetch_to_a_new_broker() -> None:
    """KIP-951 (Fetch v16+): a NOT_LEADER_OR_FOLLOWER partition names its new leader
    (``current_leader``) and the answer the leader's address (``node_endpoints``):
    the next fetch goes there, even to a broker the client had not met."""
    m = cache()
    f = Fetcher(m)
    f.assign([TP])
    f.seek(TP, 0)
    _, positions = f.build_fetch([TP], 12)
    answer = response(
        None,
        code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
        current_leader=R.LeaderIdAndEpoch(leader_id=5, leader_epoch=3),
    )
    answer = R(
        responses=answer.responses, node_endpoints=[R.NodeEndpoint(node_id=5, host="b5", port=9095)]
    )
    f.handle_fetch_response(positions, answer)
    assert m.broker(5) is not None and (m.broker(5).host, m.broker(5).port) == ("b5", 9095)
    assert f.fetchable() == {5: [TP]}
    # The hint does not replace the refresh (KIP-951; Java's fetcher asks for one
    # after every NOT_LEADER_OR_FOLLOWER too).
    assert m.update_requested


@pytest.mark.parametrize(
    ("epoch", "endpoints"),
    [(2, [R.NodeEndpoint(node_id=5, host="b5", port=9095)]), (1, []), (3, [])],
    ids=["same-epoch", "older-epoch", "no-endpoint"],
)
def test_a_leader_hint_that_does_not_apply_keeps_the_fetch_at_the_leader_known(
    epoch: int, endpoints: list[R.NodeEndpoint]
) -> None:
    """KIP-951 (as Java's ``Metadata.updatePartitionLeadership``): a hint whose
    epoch is not newer than the cached one (2 here), or that names a broker of
    unknown endpoint, moves nothing; the refresh it asks for finds the leader."""
    m = cache()
    f = Fetcher(m)
    f.assign([TP])
    f.seek(TP, 0)
    _, positions = f.build_fetch([TP], 12)
    answer = response(
        None,
        code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
        current_leader=R.LeaderIdAndEpoch(leader_id=5, leader_epoch=epoch),
    )
    f.handle_fetch_response(positions, R(responses=answer.responses, node_endpoints=endpoints))
    assert m.update_requested
    assert (m.leader_for("t", 0), m.leader_epoch("t", 0)) == (1, 2)
    assert f.fetchable() == {1: [TP]}


def test_other_errors_surface_once() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0)
    _, positions = f.build_fetch([TP], 12)
    f.handle_fetch_response(positions, response(None, code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    with pytest.raises(KafkaError, match="TOPIC_AUTHORIZATION_FAILED"):
        f.take(1)
    assert f.take(1) == {}


def test_corrupt_batch() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0)
    _, positions = f.build_fetch([TP], 12)
    bad = bytearray(batch(0, 2))
    bad[-1] ^= 0xFF
    f.handle_fetch_response(positions, response(bytes(bad)))
    with pytest.raises(KafkaError, match="CORRUPT_MESSAGE"):
        f.take(10)


def test_read_committed_drops_aborted() -> None:
    f = Fetcher(cache(), read_committed=True)
    f.assign([TP])
    f.seek(TP, 0)
    _, positions = f.build_fetch([TP], 12)
    aborted = bytes(
        set_base_offset(
            encode_batch(
                [(1, None, b"x", ())],
                producer_id=9,
                producer_epoch=0,
                base_sequence=0,
                is_transactional=True,
            ),
            0,
        )
    )
    marker = bytes(
        set_base_offset(
            encode_control_batch(
                0, producer_id=9, producer_epoch=0, coordinator_epoch=0, timestamp=1
            ),
            1,
        )
    )
    f.handle_fetch_response(
        positions,
        response(
            aborted + marker + batch(2, 1),
            aborted_transactions=[R.AbortedTransaction(producer_id=9, first_offset=0)],
        ),
    )
    got = f.take(10)
    assert [r.offset for r in got[TP]] == [2]


def test_pause_and_reassign() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0)
    f.pause([TP])
    assert f.fetchable() == {} and f.paused() == {TP}
    f.resume([TP])
    assert f.fetchable() == {1: [TP]}
    f.assign([TopicPartition("t", 1)])
    assert f.assignment == {TopicPartition("t", 1)}
    with pytest.raises(KeyError):
        f.position(TP)


def test_list_offsets_round_trip() -> None:
    req = build_list_offsets({TP: LATEST, TopicPartition("t", 1): 123}, 7, read_committed=True)
    assert req.isolation_level == 1
    assert {p.partition_index: p.timestamp for p in req.topics[0].partitions} == {0: -1, 1: 123}
    L = lo.ListOffsetsResponse
    resp = L(
        topics=[
            L.ListOffsetsTopicResponse(
                name="t",
                partitions=[
                    L.ListOffsetsPartitionResponse(partition_index=0, offset=10, timestamp=-1),
                    L.ListOffsetsPartitionResponse(
                        partition_index=1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER
                    ),
                ],
            )
        ]
    )
    out = parse_list_offsets(resp)
    assert out[TP] == (10, -1)
    assert isinstance(out[TopicPartition("t", 1)], KafkaError)


def test_stale_reset_answer_is_ignored() -> None:
    f = Fetcher(cache(), auto_offset_reset="earliest")
    f.assign([TP])
    f.default_reset([TP])
    assert f.needs_reset() == {TP: EARLIEST}
    # While the EARLIEST lookup is out, the user asks for the end.
    f.request_reset(TP, LATEST)
    f.apply_reset(TP, 0, EARLIEST)
    assert f.position(TP) is None
    assert f.needs_reset() == {TP: LATEST}
    f.apply_reset(TP, 6, LATEST)
    assert f.position(TP) == 6


def test_timestamp_type_and_leader_epoch_from_the_batch() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0)
    _, positions = f.build_fetch([TP], 12)
    blob = batch(0, 2) + batch(2, 2, timestamp_type=1, partition_leader_epoch=7)
    f.handle_fetch_response(positions, response(blob, hw=4))
    got = f.take(10)[TP]
    assert [(r.offset, r.timestamp_type, r.leader_epoch) for r in got] == [
        (0, 0, -1),
        (1, 0, -1),
        (2, 1, 7),
        (3, 1, 7),
    ]
    # Under log-append time every record carries the batch's max timestamp.
    assert got[2].timestamp == got[3].timestamp


def _cache_with_ids() -> tuple[MetadataCache, object]:
    import uuid

    M = md.MetadataResponse
    topic_id = uuid.uuid4()
    m = MetadataCache()
    m.update(
        M(
            brokers=[M.MetadataResponseBroker(node_id=1, host="h", port=1)],
            topics=[
                M.MetadataResponseTopic(
                    name="t",
                    topic_id=topic_id,
                    partitions=[
                        M.MetadataResponsePartition(partition_index=0, leader_id=1, leader_epoch=2)
                    ],
                )
            ],
        ),
        now=0.0,
    )
    return m, topic_id


def test_fetch_v13_names_topics_by_id() -> None:
    from trafka.codec import RequestHeader, decode_request, encode_request, encode_response
    from trafka.codec.protocol import decode_response

    m, topic_id = _cache_with_ids()
    f = Fetcher(m)
    f.assign([TP])
    f.seek(TP, 0)
    assert f.fetch_version(17, [TP]) == 17
    req, positions = f.build_fetch([TP], 17)
    frame = encode_request(
        RequestHeader(request_api_key=1, request_api_version=17, correlation_id=1), req
    )
    sent = decode_request(frame[4:])[1]
    assert sent.topics[0].topic_id == topic_id and sent.topics[0].topic == ""
    # The response names the topic by id only, as it does on the wire.
    wire = encode_response(
        1,
        1,
        17,
        R(
            responses=[
                R.FetchableTopicResponse(
                    topic_id=topic_id,
                    partitions=[
                        R.PartitionData(partition_index=0, high_watermark=3, records=batch(0, 3))
                    ],
                )
            ]
        ),
    )
    _, body = decode_response(wire[4:], 1, 17)
    assert f.handle_fetch_response(positions, body)
    assert [r.value for r in f.take(10)[TP]] == [b"v0", b"v1", b"v2"]


def test_fetch_steps_down_to_v12_without_topic_ids() -> None:
    f = Fetcher(cache())  # metadata without topic ids
    f.assign([TP])
    f.seek(TP, 0)
    assert f.fetch_version(17, [TP]) == 12
    assert f.fetch_version(11, [TP]) == 11
    with pytest.raises(KeyError):
        f.build_fetch([TP], 13)


def test_unknown_topic_id_refreshes_metadata() -> None:
    m, _ = _cache_with_ids()
    f = Fetcher(m)
    f.assign([TP])
    f.seek(TP, 0)
    _, positions = f.build_fetch([TP], 17)
    m.attempt_started(0.0)
    f.handle_fetch_response(positions, response(None, code=ErrorCode.UNKNOWN_TOPIC_ID))
    assert m.needs_update(0.0)
    assert f.fetchable() == {1: [TP]}


def test_committed_offsets_and_reset_answers() -> None:
    from trafka.sdk.fetcher import COMMITTED

    tp1 = TopicPartition("t", 1)
    f = Fetcher(cache(), auto_offset_reset="latest")
    f.assign([TP, tp1])
    f.mark_committed_lookup([TP, tp1])
    assert f.needs_reset() == {} and f.awaiting_committed(TP)
    f.apply_committed([TP, tp1], {TP: 7})
    assert f.position(TP) == 7
    assert f.needs_reset() == {tp1: LATEST}  # no commit: auto.offset.reset
    f.apply_reset_results({tp1: LATEST}, {tp1: None})  # empty partition: starts at 0
    assert f.position(tp1) == 0
    # A timestamp without a record at or after it stays pending; with one it applies.
    f.request_reset(tp1, 1234)
    f.apply_reset_results({tp1: 1234}, {tp1: None})
    assert f.position(tp1) is None and f.needs_reset() == {tp1: 1234}
    f.apply_reset_results({tp1: 1234}, {tp1: (3, 1300)})
    assert f.position(tp1) == 3
    # A failed lookup is retried; a seek meanwhile wins over a late answer.
    f.mark_committed_lookup([TP])  # position known: untouched
    f.request_reset(TP, EARLIEST)
    f.partitions[TP].reset = COMMITTED
    f.committed_lookup_failed([TP])
    assert f.missing_positions() == [TP]
    f.mark_committed_lookup([TP])
    f.seek(TP, 42)
    f.apply_committed([TP], {TP: 7})
    assert f.position(TP) == 42

    strict = Fetcher(cache(), auto_offset_reset="none")
    strict.assign([TP])
    strict.mark_committed_lookup([TP])
    strict.apply_committed([TP], {})
    with pytest.raises(OffsetOutOfRangeError):
        strict.take(1)


def test_consumed_positions() -> None:
    from trafka.sdk.fetcher import ConsumedPositions

    tp1 = TopicPartition("t", 1)
    c = ConsumedPositions()
    c.handed_out(TP, 5)
    assert c.processed({TP}) == {}  # not processed until the next poll starts
    c.poll_started()
    c.handed_out(TP, 9)
    c.handed_out(tp1, 2)
    assert c.processed({TP, tp1}) == {TP: 5}
    assert c.all({TP}) == {TP: 9}  # commit() counts everything handed out; tp1 not assigned
    c.forget([TP])
    assert c.all({TP, tp1}) == {tp1: 2}


def test_any_paused_tracks_pause_resume_and_removal() -> None:
    tp1 = TopicPartition("t", 1)
    f = Fetcher(cache())
    f.assign([TP, tp1])
    assert not f.any_paused()
    f.pause([TP, TP])
    assert f.any_paused() and f.paused() == {TP}
    f.resume([TP])
    assert not f.any_paused()
    f.pause([tp1])
    f.assign([TP])  # tp1 leaves the assignment
    assert not f.any_paused()
    f.pause([TP])
    f.remove([TP])
    assert not f.any_paused()


# -- prefetching -----------------------------------------------------------------------------


def _fetch_and_answer(f: Fetcher, blob: bytes, hw: int = 100) -> dict[TopicPartition, int]:
    """Build the next fetch for TP and answer it with ``blob``; returns the offsets asked."""
    _, positions = f.build_fetch([TP], 12)
    f.handle_fetch_response(positions, response(blob, hw=hw))
    return positions


def test_prefetch_asks_for_the_data_after_the_buffered_blob() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0)
    assert _fetch_and_answer(f, batch(0, 5)) == {TP: 0}
    # The first response is not consumed yet, and the next fetch is already wanted.
    assert f.fetchable() == {1: [TP]}
    assert _fetch_and_answer(f, batch(5, 5)) == {TP: 5}
    assert f.fetchable() == {}  # two responses buffered: no third fetch
    assert f.position(TP) == 0
    # One take crosses from the first blob into the prefetched one.
    got = f.take(7)
    assert [r.offset for r in got[TP]] == list(range(7))
    assert type(got[TP]) is list  # the application's to keep and change
    assert f.position(TP) == 7
    assert f.fetchable() == {1: [TP]}  # the first blob is drained
    assert f.build_fetch([TP], 12)[1] == {TP: 10}
    f.fetch_failed({TP: 10})
    assert [r.offset for r in f.take(100)[TP]] == [7, 8, 9]
    assert f.position(TP) == 10
    assert not f.has_data()


def test_a_deeper_prefetch_buffers_that_many_answers_in_order() -> None:
    from trafka.sdk.config import ConsumerConfig
    from trafka.sdk.errors import ConfigError

    f = Fetcher.for_consumer(cache(), ConsumerConfig.from_dict({"fetch.prefetch": 3}))
    assert f.prefetch == 3
    with pytest.raises(ConfigError, match=r"fetch\.prefetch"):
        ConsumerConfig.from_dict({"fetch.prefetch": 0})
    f.assign([TP])
    f.seek(TP, 0)
    assert _fetch_and_answer(f, batch(0, 4)) == {TP: 0}
    # Each fetch asks for the offset after the last buffered answer.
    assert _fetch_and_answer(f, batch(4, 4)) == {TP: 4}
    assert _fetch_and_answer(f, batch(8, 4)) == {TP: 8}
    assert _fetch_and_answer(f, batch(12, 4)) == {TP: 12}
    assert f.fetchable() == {}  # the one taken and three ahead: no fifth fetch
    got = f.take(6)
    assert [r.offset for r in got[TP]] == list(range(6))
    assert f.fetchable() == {1: [TP]}  # the first answer is used up
    assert f.build_fetch([TP], 12)[1] == {TP: 16}
    f.fetch_failed({TP: 16})
    assert [r.offset for r in f.take(100)[TP]] == list(range(6, 16))
    assert f.position(TP) == 16
    # A seek drops every buffered answer.
    _fetch_and_answer(f, batch(16, 2))
    _fetch_and_answer(f, batch(18, 2))
    f.seek(TP, 17)
    assert f.take(100) == {} and not f.has_data()
    assert f.build_fetch([TP], 12)[1] == {TP: 17}


def test_a_stale_answer_in_a_deeper_prefetch_drops_those_behind_it() -> None:
    f = Fetcher(cache(), prefetch=3)
    f.assign([TP])
    f.seek(TP, 0)
    bad = bytearray(batch(3, 3))
    bad[-1] ^= 0xFF  # corrupt: decoding stops before it
    _fetch_and_answer(f, batch(0, 3) + bytes(bad))
    _fetch_and_answer(f, batch(6, 2))
    _fetch_and_answer(f, batch(8, 2))
    assert [r.offset for r in f.take(100)[TP]] == [0, 1, 2]
    # The next answer starts at 6, not at the position (3): it and the one behind go.
    assert not f.has_data()
    assert f.build_fetch([TP], 12)[1] == {TP: 3}


def test_seek_until_sends_no_fetch_at_or_past_the_end() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0, until=8)
    assert _fetch_and_answer(f, batch(0, 5)) == {TP: 0}
    assert _fetch_and_answer(f, batch(5, 5)) == {TP: 5}  # 5 is below the end: prefetched
    assert [r.offset for r in f.take(100)[TP]] == list(range(10))  # a batch past it stays whole
    assert f.position(TP) == 10
    assert f.fetchable() == {}  # 10 is past the end: no fetch the broker would hold
    f.seek(TP, 3, until=4)
    assert f.fetchable() == {1: [TP]}
    assert _fetch_and_answer(f, batch(3, 1)) == {TP: 3}
    assert f.fetchable() == {}  # the answer reaches the end: no prefetch
    f.seek(TP, 20)  # a seek without until lifts the end
    assert f.fetchable() == {1: [TP]}


def test_prefetch_from_a_blob_cut_mid_batch() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0)
    whole = batch(0, 3)
    _fetch_and_answer(f, whole + batch(3, 4)[:30])  # the second batch is cut short
    assert f.build_fetch([TP], 12)[1] == {TP: 3}


def test_no_prefetch_without_a_complete_batch() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0)
    _fetch_and_answer(f, batch(0, 3)[:-1])  # nothing complete: nothing to fetch after
    assert f.fetchable() == {}
    assert f.take(10) == {}
    assert f.fetchable() == {1: [TP]}  # drained (empty): fetched again from the position
    assert f.build_fetch([TP], 12)[1] == {TP: 0}


def test_seek_drops_both_buffered_responses_and_a_stale_prefetch() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0)
    _fetch_and_answer(f, batch(0, 5))
    _fetch_and_answer(f, batch(5, 5))
    f.seek(TP, 2)
    assert f.take(100) == {}  # nothing buffered any more
    # The answer to a prefetch sent before the seek does not match the position.
    _, positions = f.build_fetch([TP], 12)
    assert positions == {TP: 2}
    assert not f.handle_fetch_response({TP: 10}, response(batch(10, 2)))
    assert f.handle_fetch_response(positions, response(batch(0, 5)))
    assert [r.offset for r in f.take(100)[TP]] == [2, 3, 4]


def test_prefetched_blob_dropped_when_the_first_stops_early() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0)
    bad = bytearray(batch(3, 3))
    bad[-1] ^= 0xFF  # corrupt: decoding stops before it
    _fetch_and_answer(f, batch(0, 3) + bytes(bad))
    assert _fetch_and_answer(f, batch(6, 2)) == {TP: 6}
    assert [r.offset for r in f.take(100)[TP]] == [0, 1, 2]
    # The prefetched blob starts at 6, not where the position stopped (3): dropped.
    assert f.position(TP) == 3
    assert not f.has_data()
    assert f.build_fetch([TP], 12)[1] == {TP: 3}
    f.handle_fetch_response({TP: 3}, response(bytes(bad)))
    with pytest.raises(KafkaError, match="CORRUPT_MESSAGE"):
        f.take(100)
    assert f.position(TP) == 3


def test_prefetch_error_out_of_range_resets() -> None:
    f = Fetcher(cache(), auto_offset_reset="earliest")
    f.assign([TP])
    f.seek(TP, 0)
    _fetch_and_answer(f, batch(0, 5))
    _, positions = f.build_fetch([TP], 12)
    f.handle_fetch_response(positions, response(None, code=ErrorCode.OFFSET_OUT_OF_RANGE))
    assert f.needs_reset() == {TP: EARLIEST}
    assert f.take(100) == {}  # the reset dropped what was buffered


@pytest.mark.parametrize("code", [ErrorCode.CORRUPT_MESSAGE, ErrorCode.TOPIC_AUTHORIZATION_FAILED])
def test_a_prefetch_error_waits_for_the_records_buffered_before_it(code: int) -> None:
    """The prefetch after a buffered answer meets an error: the buffered records
    come out first, the error once the position reaches the offset that fetch
    asked for, as Kafka's consumer returns a partition's fetched records before
    the error of its next fetch (KafkaConsumer#poll: an error is thrown only
    when no records were fetched before it)."""
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0)
    _fetch_and_answer(f, batch(0, 5))
    _, positions = f.build_fetch([TP], 12)
    assert positions == {TP: 5}
    f.handle_fetch_response(positions, response(None, code=code))
    assert f.has_data()
    assert [r.offset for r in f.take(3)[TP]] == [0, 1, 2]
    assert [r.offset for r in f.take(100)[TP]] == [3, 4]
    assert f.has_data()
    with pytest.raises(KafkaError, match=ErrorCode(code).name):
        f.take(100)
    assert f.take(100) == {} and f.position(TP) == 5


def test_a_prefetch_error_is_dropped_by_a_seek_elsewhere() -> None:
    f = Fetcher(cache())
    f.assign([TP])
    f.seek(TP, 0)
    _fetch_and_answer(f, batch(0, 5))
    _, positions = f.build_fetch([TP], 12)
    f.handle_fetch_response(positions, response(None, code=ErrorCode.CORRUPT_MESSAGE))
    f.seek(TP, 2)  # before the failed offset: fetched again from there
    assert f.take(100) == {} and not f.has_data()
    assert f.build_fetch([TP], 12)[1] == {TP: 2}


def test_corrupt_partition_does_not_swallow_records_already_taken() -> None:
    tp1 = TopicPartition("t", 1)
    f = Fetcher(cache())
    f.assign([TP])
    f.add([tp1])  # taken in this order
    f.seek(TP, 0)
    f.seek(tp1, 0)
    _, positions = f.build_fetch([TP, tp1], 12)
    bad = bytearray(batch(0, 2))
    bad[-1] ^= 0xFF
    R_ = fetch.FetchResponse
    f.handle_fetch_response(
        positions,
        R_(
            responses=[
                R_.FetchableTopicResponse(
                    topic="t",
                    partitions=[
                        R_.PartitionData(partition_index=0, high_watermark=3, records=batch(0, 3)),
                        R_.PartitionData(partition_index=1, high_watermark=2, records=bytes(bad)),
                    ],
                )
            ]
        ),
    )
    got = f.take(100)  # partition 0's records come out; partition 1's error waits
    assert [r.offset for r in got[TP]] == [0, 1, 2] and tp1 not in got
    with pytest.raises(KafkaError, match="CORRUPT_MESSAGE"):
        f.take(100)
    assert f.position(tp1) == 0


# -- the C fast path and the ordinary path hand out the same ------------------------------------


def _entry(kind: str, base: int, n: int, pid: int) -> bytes:
    from trafka.codec.compression import Compression
    from trafka.codec.legacy import encode_message_set

    rows = [
        (1000 + i, None, b"v%d" % (base + i), (("h", b"x"),) if i % 2 else ()) for i in range(n)
    ]
    if kind == "plain":
        raw = encode_batch(rows, partition_leader_epoch=base % 3)  # type: ignore[arg-type]
    elif kind == "gzip":
        raw = encode_batch(rows, compression=Compression.GZIP)  # type: ignore[arg-type]
    elif kind == "txn":
        raw = encode_batch(
            rows,  # type: ignore[arg-type]
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
    elif kind in ("abort", "commit"):
        raw = encode_control_batch(
            int(kind == "commit"),
            producer_id=pid,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp=1,
        )
    elif kind == "legacy":
        return encode_message_set([(1000, None, b"m", ())] * n, magic=1, base_offset=base)
    elif kind == "bad":
        bad = bytearray(encode_batch(rows))  # type: ignore[arg-type]
        bad[17] ^= 0xFF
        raw = bytes(bad)
    else:
        raise AssertionError(kind)
    return bytes(set_base_offset(raw, base))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(
        st.tuples(
            st.sampled_from(
                ["plain", "plain", "txn", "txn", "abort", "commit", "gzip", "legacy", "bad"]
            ),
            st.integers(1, 5),
            st.sampled_from([7, 8]),
        ),
        max_size=8,
    ),
    position=st.integers(0, 6) | st.integers(0, 30),
    read_committed=st.booleans(),
    aborted_picks=st.lists(st.tuples(st.integers(0, 12), st.sampled_from([7, 8])), max_size=3),
    cut=st.integers(0, 60),
)
@example(  # an aborted transaction's batch inside a run of plain batches
    specs=[("plain", 2, 7), ("txn", 3, 7), ("abort", 1, 7), ("plain", 2, 7)],
    position=0,
    read_committed=True,
    aborted_picks=[(2, 7)],
    cut=0,
)
def test_fast_and_ordinary_paths_agree(
    specs: list[tuple[str, int, int]],
    position: int,
    read_committed: bool,
    aborted_picks: list[tuple[int, int]],
    cut: int,
) -> None:
    from trafka.codec import _accel

    parts = []
    offset = 0
    for kind, n, pid in specs:
        n = 1 if kind in ("abort", "commit") else n
        parts.append(_entry(kind, offset, n, pid))
        offset += n
    blob = b"".join(parts) + _entry("plain", offset, 2, 7)[:cut]
    aborted = [R.AbortedTransaction(first_offset=o, producer_id=p) for o, p in aborted_picks]

    def decode(fast: bool, columns: bool | None = None) -> object:
        saved = _accel.speedups
        if not fast:
            _accel.speedups = None
        try:
            f = Fetcher(cache(), read_committed=read_committed)
            f.columns = columns
            f.assign([TP])
            f.seek(TP, position)
            _, positions = f.build_fetch([TP], 12)
            f.handle_fetch_response(positions, response(blob, aborted_transactions=aborted))
            taken: list[object] = []
            for _ in range(len(specs) + 2):
                try:
                    if columns is None:
                        # As the columns have them (no topic, partition, leader epoch).
                        taken.append({tp: [r[2:8] for r in rs] for tp, rs in f.take(7).items()})
                    else:
                        taken.append({tp: c.rows() for tp, c in f.take_columns(7).items()})
                except (KafkaError, DecodeError) as exc:
                    taken.append(repr(exc))
                taken.append(f.position(TP))
            return taken
        finally:
            _accel.speedups = saved

    expected = decode(True)
    assert decode(False) == expected
    # Columns (Fetcher.columns, the Spark reader's): the same records, positions and errors.
    assert decode(True, columns=True) == expected
    assert decode(False, columns=True) == expected


def _answer(
    f: Fetcher, tps: list[TopicPartition], parts: dict[int, tuple[bytes, int, int]]
) -> None:
    """Fetch ``tps`` and apply an answer: partition -> (records, high watermark, LSO)."""
    _, positions = f.build_fetch(tps, 12)
    f.handle_fetch_response(
        positions,
        R(
            responses=[
                R.FetchableTopicResponse(
                    topic="t",
                    partitions=[
                        R.PartitionData(
                            partition_index=i, high_watermark=hw, last_stable_offset=lso, records=b
                        )
                        for i, (b, hw, lso) in parts.items()
                    ],
                )
            ]
        ),
    )


@pytest.mark.parametrize("read_committed", [False, True])
def test_hold_back_a_fetch_that_could_only_wait(read_committed: bool) -> None:
    a, b = TP, TopicPartition("t", 1)
    f = Fetcher(cache(), read_committed=read_committed)
    f.assign([a, b])
    f.seek(a, 0)
    f.seek(b, 0)
    # Under read_committed the end is the LSO: a's open transaction (HW 7) is not readable.
    a_end = (b"", 7 if read_committed else 0, 0)
    assert f.fetchable(hold_back=True) == {1: [a, b]}  # no answer yet: ends unknown
    _answer(f, [a, b], {0: a_end, 1: (batch(0, 5), 20, 20)})
    assert f.fetchable(hold_back=True) == {1: [a, b]}  # b is prefetched
    _answer(f, [a, b], {0: a_end, 1: (batch(5, 5), 20, 20)})
    # b's two slots are full and its log goes on; a alone would wait at the broker.
    assert f.fetchable(hold_back=True, now=10.0) == {} and f.held_back
    assert f.hold_deadline == 10.5  # fetch.max.wait.ms, the longest it is held
    assert f.fetchable(hold_back=True, now=10.4) == {} and f.hold_deadline == 10.5
    assert f.fetchable(hold_back=True, now=10.5) == {1: [a]} and not f.held_back
    assert f.hold_deadline is None
    assert f.fetchable(hold_back=True, now=20.0) == {} and f.hold_deadline == 20.5  # anew
    assert f.fetchable() == {1: [a]} and not f.held_back
    f.pause([b])  # b's records will not be taken: nothing to hold a back for
    assert f.fetchable(hold_back=True) == {1: [a]}
    f.resume([b])
    assert [r.offset for r in f.take(6)[b]] == [0, 1, 2, 3, 4, 5]  # a slot frees
    assert f.fetch_wanted
    assert f.fetchable(hold_back=True) == {1: [a, b]}


def test_no_hold_back_when_the_buffered_data_reaches_the_end() -> None:
    a, b = TP, TopicPartition("t", 1)
    f = Fetcher(cache())
    f.assign([a, b])
    f.seek(a, 0)
    f.seek(b, 0)
    _answer(f, [a, b], {0: (b"", 0, 0), 1: (batch(0, 5), 10, 10)})
    _answer(f, [a, b], {0: (b"", 0, 0), 1: (batch(5, 5), 10, 10)})
    # b's buffers hold its whole log: a later fetch of b could only wait too.
    assert f.fetchable(hold_back=True) == {1: [a]} and not f.held_back


def test_no_hold_back_while_another_partition_has_more_to_fetch() -> None:
    a, b = TP, TopicPartition("t", 1)
    f = Fetcher(cache())
    f.assign([a, b])
    f.seek(a, 0)
    f.seek(b, 0)
    _answer(f, [a, b], {0: (batch(0, 2), 4, 4), 1: (batch(0, 5), 20, 20)})
    _answer(f, [b], {1: (batch(5, 5), 20, 20)})
    # b waits for a free slot, but a (prefetching offset 2 of 4) has data to get.
    assert f.fetchable(hold_back=True) == {1: [a]} and not f.held_back
