"""The consumer's core without I/O: what polls hand out and what counts as
consumed, over a fetcher fed decoded Fetch answers (no broker, no socket)."""

from __future__ import annotations

from typing import Any

import pytest
from sdk_metadata import one_topic_cache

from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.records import encode_batch, set_base_offset
from trafka.sdk.config import ConsumerConfig, make_config
from trafka.sdk.consumer_core import ConsumerCore
from trafka.sdk.errors import UsageError
from trafka.sdk.fetcher import EARLIEST, TopicPartition

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
R = fetch.FetchResponse


def core(**settings: Any) -> ConsumerCore[Any, Any]:
    config = make_config(ConsumerConfig, None, {"bootstrap_servers": "h:1", **settings})
    return ConsumerCore(config, one_topic_cache("t", 2))


def fetched(c: ConsumerCore[Any, Any], tp: TopicPartition, base: int, n: int) -> None:
    """``n`` records from ``base`` arrive for ``tp`` (positioned at ``base``)."""
    c.fetcher.seek(tp, base)
    _, positions = c.fetcher.build_fetch([tp], 12)
    raw = encode_batch([(1000 + i, None, b"v%d" % (base + i), ()) for i in range(n)])
    blob = bytes(set_base_offset(raw, base))
    answer = R(
        responses=[
            R.FetchableTopicResponse(
                topic=tp.topic,
                partitions=[
                    R.PartitionData(
                        partition_index=tp.partition, high_watermark=base + n, records=blob
                    )
                ],
            )
        ]
    )
    assert c.fetcher.handle_fetch_response(positions, answer)


def test_a_poll_hands_out_records_and_they_count_as_consumed_at_the_next() -> None:
    c = core()
    c.fetcher.assign([TP])
    fetched(c, TP, 10, 5)
    c.poll_started()
    out = c.poll(3, None)
    assert [r.offset for r in out[TP]] == [10, 11, 12]
    assert c.auto_commit_offsets() == {}  # handed out, not processed yet
    c.poll_started()  # the next poll: the caller processed them
    assert c.auto_commit_offsets() == {TP: 13}
    assert [r.offset for r in c.poll(10, None)[TP]] == [13, 14]
    assert c.consumed_offsets() == {TP: 15}


def test_records_held_for_one_at_a_time_come_first_and_are_dropped_on_seek() -> None:
    c = core()
    c.fetcher.assign([TP, TP1])
    fetched(c, TP, 0, 3)
    fetched(c, TP1, 0, 2)
    c.hold(c.take(100, None))
    assert c.held_count() == 5 and c.held_count(TP1) == 2
    c.poll_started()  # as getone does before each record
    first = c.next_record()
    assert first is not None and (first.partition, first.offset) == (0, 0)
    c.fetcher.pause([TP])
    c.poll_started()
    nxt = c.next_record()  # a paused partition hands out nothing
    assert nxt is not None and (nxt.partition, nxt.offset) == (1, 0)
    c.seek(TP1, 0)  # the record handed out last is sought away before it was processed
    assert c.held_count(TP1) == 0 and c.dropped == 1
    assert c.consumed_offsets() == {TP: 1}  # the record of TP1 was sought away


def test_records_given_back_are_not_committed_and_revoked_ones_are_forgotten() -> None:
    c = core()
    c.fetcher.assign([TP, TP1])
    fetched(c, TP, 0, 4)
    c.poll_started()
    assert len(c.poll(10, None)[TP]) == 4
    assert c.consumed_offsets() == {TP: 4}
    assert c.rewind({TP: 2, TopicPartition("other", 0): 7}) == [TP]  # only TP is assigned
    assert c.consumed_offsets() == {TP: 2}
    c.partitions_removed({TP})
    assert c.consumed_offsets() == {} and c.fetcher.assignment == {TP1}


def test_resets_drop_what_was_taken_and_ask_for_positions() -> None:
    c = core()
    c.fetcher.assign([TP])
    fetched(c, TP, 0, 2)
    c.hold(c.take(10, None))
    c.request_resets([TP], EARLIEST)
    assert c.held_count() == 0 and c.dropped == 2
    assert c.fetcher.needs_reset() == {TP: EARLIEST}


def test_deserializers_apply_to_what_is_taken() -> None:
    c = core(value_deserializer=lambda v: v.decode().upper())
    c.fetcher.assign([TP])
    fetched(c, TP, 0, 2)
    assert [r.value for r in c.poll(10, None)[TP]] == ["V0", "V1"]


def test_with_the_offset_store_off_commits_are_the_stored_offsets() -> None:
    # librdkafka's enable.auto.offset.store=false: what was handed out does not
    # count; store_offsets() says what commits without offsets commit.
    c = core(enable_auto_offset_store=False)
    c.fetcher.assign([TP, TP1])
    fetched(c, TP, 10, 5)
    c.poll_started()
    assert [r.offset for r in c.poll(10, None)[TP]] == [10, 11, 12, 13, 14]
    c.poll_started()
    assert c.auto_commit_offsets() == {} and c.consumed_offsets() == {}
    c.store_offsets({TP: 12, TP1: 3})
    assert c.auto_commit_offsets() == {TP: 12, TP1: 3} == c.consumed_offsets()
    with pytest.raises(UsageError, match="not assigned"):
        c.store_offsets({TopicPartition("t", 5): 1})
    c.partitions_removed({TP1})  # revoked: its stored offset goes with it
    assert c.consumed_offsets() == {TP: 12}


def test_storing_offsets_needs_the_offset_store_off() -> None:
    c = core()
    c.fetcher.assign([TP])
    with pytest.raises(UsageError, match=r"enable\.auto\.offset\.store=false"):
        c.store_offsets({TP: 1})
