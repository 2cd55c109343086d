"""The hand-written Fetch response encoder against the generated codec, byte for byte.

``FetchPlan.encode_parts`` writes the response around file ranges of the log
(for sendfile); the same response built as the generated ``FetchResponse``
dataclass and encoded by the codec must give exactly the same bytes, for every
version served.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trafka.brokerlite.handlers import k01_fetch
from trafka.brokerlite.handlers.k01_fetch import FetchPlan, PartitionResult, TopicResult
from trafka.brokerlite.outcomes import Reply
from trafka.brokerlite.storage.log_manager import LogManager
from trafka.brokerlite.storage.partition import FileChunk
from trafka.brokerlite.storage.topic_configs import LogConfig
from trafka.codec.messages import k01_fetch as m
from trafka.codec.protocol import encode_response, encode_response_body
from trafka.codec.records import encode_batch

VERSIONS = range(k01_fetch.MIN_VERSION, k01_fetch.MAX_VERSION + 1)


def joined(parts: list[Any]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.read() for p in parts)


def codec_message(plan: FetchPlan, version: int) -> m.FetchResponse:
    message = plan.to_message()
    if version < 13:  # topic ids are not on the wire before v13
        message = dataclasses.replace(
            message,
            responses=[
                dataclasses.replace(t, topic_id=uuid.UUID(int=0)) for t in message.responses
            ],
        )
    return message


@pytest.fixture
def logs(tmp_path: Path) -> Any:
    # Small segments, so that a read spans several files (several chunks).
    manager = LogManager(tmp_path, LogConfig(segment_bytes=600), now_ms=0)
    manager.create_topic("alpha", 2, now_ms=0)
    manager.create_topic("beta", 1, now_ms=0)
    for i in range(12):
        batch = encode_batch([(1000 + i, b"k%d" % i, b"v" * (40 + i), ())])
        manager.partition("alpha", 0).append(batch, now_ms=i)
    manager.partition("beta", 0).append(encode_batch([(5, None, b"x", ())]), now_ms=0)
    yield manager
    manager.close()


def real_plan(logs: Any) -> FetchPlan:
    alpha = logs.partition("alpha", 0)
    beta = logs.partition("beta", 0)
    read = alpha.read(0, 10_000)
    assert len(read.chunks) > 1, "the test wants a read spanning segments"
    return FetchPlan(
        0,
        0,
        [
            TopicResult(
                "alpha",
                logs.topic("alpha").topic_id,
                [
                    PartitionResult(
                        0, 0, alpha.log_end_offset, alpha.log_end_offset, 0, None, read
                    ),
                    PartitionResult(1, 0, 0, 0, 0, [], None),
                ],
            ),
            TopicResult(
                "beta",
                logs.topic("beta").topic_id,
                [PartitionResult(0, 0, 1, 1, 0, [], beta.read(0, 100))],
            ),
            TopicResult("gone", uuid.UUID(int=7), [PartitionResult(3, 3)]),
        ],
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_parts_match_the_codec_for_real_log_reads(logs: Any, version: int) -> None:
    plan = real_plan(logs)
    parts = plan.encode_parts(version)
    assert any(isinstance(p, FileChunk) for p in parts), "records must stay file ranges"
    expected = encode_response_body(1, version, codec_message(plan, version))
    assert joined(parts) == expected


@pytest.mark.parametrize("version", [4, 11, 12, 17])
def test_whole_frame_matches_encode_response(logs: Any, version: int) -> None:
    plan = real_plan(logs)
    reply = Reply(correlation_id=4242, api_key=1, api_version=version, body=plan)
    expected = encode_response(4242, 1, version, codec_message(plan, version))
    assert joined(reply.encode()) == expected


@dataclasses.dataclass
class _BytesRead:
    """A stand-in for ReadResult whose chunks are in memory."""

    chunks: list[bytes]

    @property
    def size(self) -> int:
        return sum(len(c) for c in self.chunks)

    def tobytes(self) -> bytes:
        return b"".join(self.chunks)


_int64 = st.integers(-(2**63), 2**63 - 1)
_partitions = st.builds(
    PartitionResult,
    partition=st.integers(0, 2**31 - 1),
    error_code=st.integers(-1, 120),
    high_watermark=_int64,
    last_stable_offset=_int64,
    log_start_offset=_int64,
    aborted_transactions=st.one_of(
        st.none(),
        st.lists(
            st.builds(m.FetchResponse.AbortedTransaction, producer_id=_int64, first_offset=_int64),
            max_size=2,
        ),
    ),
    records=st.one_of(
        st.none(), st.builds(_BytesRead, st.lists(st.binary(min_size=1, max_size=300), max_size=3))
    ),
)
_topics = st.builds(
    TopicResult,
    name=st.text(max_size=20),
    topic_id=st.uuids(),
    partitions=st.lists(_partitions, max_size=4),
)
_plans = st.builds(
    FetchPlan,
    error_code=st.integers(-1, 120),
    session_id=st.integers(-(2**31), 2**31 - 1),
    topics=st.lists(_topics, max_size=4),
)


@settings(max_examples=150, deadline=None)
@given(plan=_plans, version=st.sampled_from(list(VERSIONS)))
def test_parts_match_the_codec_for_any_response(plan: FetchPlan, version: int) -> None:
    if version < 7:
        plan = dataclasses.replace(plan, error_code=0, session_id=0)
    expected = encode_response_body(1, version, codec_message(plan, version))
    assert joined(plan.encode_parts(version)) == expected


def test_versions_outside_the_served_range_are_refused() -> None:
    with pytest.raises(ValueError):
        FetchPlan(0, 0, []).encode_parts(19)  # (brokerlite serves Fetch up to v18)


def test_versions_below_4_are_encoded_by_the_codec_with_old_message_sets() -> None:
    """Fetch v0-3 (issue #37): the generated schema, no file ranges."""
    from trafka.codec.protocol import decode_response_body

    for version in range(4):
        parts = FetchPlan(0, 0, [], throttle_time_ms=5 if version else 0).encode_parts(version)
        assert all(isinstance(part, bytes) for part in parts)
        body = decode_response_body(1, version, b"".join(parts))  # type: ignore[arg-type]
        assert body.responses == []


def _transactional_broker(data_dir: Path) -> tuple[Any, int]:
    """A broker whose partition holds a committed, an aborted and an open transaction."""
    from trafka.brokerlite.broker import Broker
    from trafka.brokerlite.config import BrokerConfig
    from trafka.codec.messages import k22_init_producer_id as ipi
    from trafka.codec.messages import k24_add_partitions_to_txn as apt
    from trafka.codec.messages import k26_end_txn as et
    from trafka.codec.messages.headers import RequestHeader

    broker = Broker(BrokerConfig(port=0, data_dir=data_dir), now_ms=1000)
    broker.logs.create_topic("t", 1, now_ms=1000)

    def call(key: int, version: int, body: Any) -> Any:
        header = RequestHeader(request_api_key=key, request_api_version=version, correlation_id=1)
        reply = broker.handle(1, header, body, 1000)
        assert isinstance(reply, Reply)
        return reply.body

    init = call(22, 4, ipi.InitProducerIdRequest(transactional_id="x", transaction_timeout_ms=9000))
    pid, epoch = init.producer_id, init.producer_epoch
    seq = 0
    for outcome in (True, False, None):
        topic = apt.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="t", partitions=[0])
        call(
            24,
            3,
            apt.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id="x",
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[topic],
            ),
        )
        records = encode_batch(
            [(1000, None, b"v%d" % i, ()) for i in range(3)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=True,
        )
        seq += 3
        result = broker.producers.produce(
            "t", 0, records, transactional_id="x", verify=broker.txn.verify_partition, now_ms=1000
        )
        assert result.error == 0
        if outcome is not None:
            request = et.EndTxnRequest(
                transactional_id="x", producer_id=pid, producer_epoch=epoch, committed=outcome
            )
            assert call(26, 3, request).error_code == 0
    return broker, pid


@pytest.mark.parametrize("version", VERSIONS)
def test_parts_match_the_codec_for_read_committed_fetches(tmp_path: Path, version: int) -> None:
    broker, pid = _transactional_broker(tmp_path)
    try:
        request = m.FetchRequest(
            max_bytes=1 << 20,
            isolation_level=1,
            topics=[
                m.FetchRequest.FetchTopic(
                    topic="t",
                    topic_id=broker.logs.topic("t").topic_id,
                    partitions=[
                        m.FetchRequest.FetchPartition(
                            partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                        )
                    ],
                )
            ],
        )
        plan = k01_fetch.build(broker, version, request)
        [part] = plan.topics[0].partitions
        # Committed (0-3), aborted (4-7), open from 8: the LSO stops before it.
        assert (part.high_watermark, part.last_stable_offset) == (11, 8)
        aborted = [(t.producer_id, t.first_offset) for t in part.aborted_transactions]
        assert aborted == [(pid, 4)]
        expected = encode_response_body(1, version, codec_message(plan, version))
        assert joined(plan.encode_parts(version)) == expected
    finally:
        broker.close()
