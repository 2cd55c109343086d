"""Fetcher: positions, fetch requests, response handling, record hand-out (no sockets)."""

from __future__ import annotations

import pytest

from trafka.codec import ErrorCode, KafkaError
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
    M = md.MetadataResponse
    m = MetadataCache()
    m.update(
        M(
            brokers=[M.MetadataResponseBroker(node_id=1, host="h", port=1)],
            topics=[
                M.MetadataResponseTopic(
                    name="t",
                    partitions=[
                        M.MetadataResponsePartition(partition_index=i, leader_id=1, leader_epoch=2)
                        for i in range(2)
                    ],
                )
            ],
        ),
        now=0.0,
    )
    return m


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
    assert f.fetchable() == {}  # data buffered: no prefetch beyond one fetch
    got = f.take(4)
    assert [r.offset for r in got[TP]] == [3, 4, 5, 6]
    assert f.position(TP) == 7
    assert f.lag(TP) == 3
    got = f.take(100)
    assert [r.offset for r in got[TP]] == [7, 8, 9]
    assert f.position(TP) == 10
    assert f.fetchable() == {1: [TP]}


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
    f.handle_fetch_response(positions, response(None, code=ErrorCode.OFFSET_OUT_OF_RANGE))
    assert f.needs_reset() == {TP: EARLIEST}
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
