"""The share consumer's sans-IO core (:mod:`trafka.sdk.share_fetcher`): session
epochs, incremental ShareFetch requests, acknowledgement batches, piggy-backed
and separate acknowledgements, gaps, error paths, commits and closing, driven
by hand-made responses (no sockets, no clock)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k03_metadata as md
from trafka.codec.messages import k78_share_fetch as sf
from trafka.codec.messages import k79_share_acknowledge as sa
from trafka.codec.records import ControlRecordType, encode_batch, encode_control_batch
from trafka.sdk.errors import UsageError
from trafka.sdk.fetcher import TopicPartition
from trafka.sdk.metadata import MetadataCache
from trafka.sdk.share_fetcher import (
    GAP,
    AcknowledgeType,
    ShareFetcher,
    ShareRequest,
    acknowledgement_batches,
    decode_acquired,
    next_epoch,
)

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT
TID = {"a": uuid.UUID(int=1), "b": uuid.UUID(int=2)}
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
FR = sf.ShareFetchResponse
AR = sa.ShareAcknowledgeResponse


def metadata(leaders: dict[TopicPartition, int], ids: dict[str, uuid.UUID] = TID) -> MetadataCache:
    cache = MetadataCache()
    R = md.MetadataResponse
    topics: dict[str, list[Any]] = {}
    for tp, node in sorted(leaders.items()):
        topics.setdefault(tp.topic, []).append(
            R.MetadataResponsePartition(
                partition_index=tp.partition, leader_id=node, leader_epoch=0
            )
        )
    cache.update(
        R(
            brokers=[R.MetadataResponseBroker(node_id=n, host="h", port=1) for n in (0, 1)],
            topics=[
                R.MetadataResponseTopic(name=t, topic_id=ids[t], partitions=ps)
                for t, ps in topics.items()
            ],
        ),
        0.0,
    )
    return cache


def fetcher(leaders: dict[TopicPartition, int] | None = None, **kw: Any) -> ShareFetcher:
    cache = metadata(leaders or {A0: 0, A1: 0, B0: 1})
    f = ShareFetcher(cache, group_id="g", member_id="m", retry_backoff=0.1, **kw)
    f.set_assignment(set(leaders or {A0: 0, A1: 0, B0: 1}))
    return f


def blob(first: int, values: list[bytes]) -> bytes:
    return encode_batch([(1000, None, v, ()) for v in values], base_offset=first)


def part(index: int, **kw: Any) -> Any:
    acquired = [
        FR.AcquiredRecords(first_offset=f, last_offset=last, delivery_count=n)
        for f, last, n in kw.pop("acquired", [])
    ]
    return FR.PartitionData(partition_index=index, acquired_records=acquired, **kw)


def fetch_answer(parts: dict[str, list[Any]], **kw: Any) -> Any:
    return FR(
        acquisition_lock_timeout_ms=kw.pop("lock", 30_000),
        responses=[
            FR.ShareFetchableTopicResponse(topic_id=TID[t], partitions=ps)
            for t, ps in parts.items()
        ],
        **kw,
    )


def ack_answer(parts: dict[str, list[tuple[int, int]]], **kw: Any) -> Any:
    return AR(
        responses=[
            AR.ShareAcknowledgeTopicResponse(
                topic_id=TID[t],
                partitions=[AR.PartitionData(partition_index=p, error_code=c) for p, c in ps],
            )
            for t, ps in parts.items()
        ],
        **kw,
    )


def only(requests: list[ShareRequest], node: int = 0) -> ShareRequest:
    found = [r for r in requests if r.node == node]
    assert len(found) == 1, requests
    return found[0]


def fetched(request: ShareRequest) -> dict[TopicPartition, list[tuple[int, int, list[int]]]]:
    """What a request names: partition -> its acknowledgement batches."""
    out = {}
    for t in request.body.topics:
        name = next(n for n, i in TID.items() if i == t.topic_id)
        for p in getattr(t, "partitions", []):
            out[TopicPartition(name, p.partition_index)] = [
                (b.first_offset, b.last_offset, list(b.acknowledge_types))
                for b in p.acknowledgement_batches
            ]
    return out


def forgotten(request: ShareRequest) -> set[TopicPartition]:
    names = {i: n for n, i in TID.items()}
    return {
        TopicPartition(names[t.topic_id], p)
        for t in request.body.forgotten_topics_data
        for p in t.partitions
    }


def open_session(f: ShareFetcher, node: int = 0, answer: Any = None) -> ShareRequest:
    f.want_records()
    request = only(f.requests(0.0), node)
    f.on_response(request, answer or fetch_answer({}), 0.0)
    return request


def one_record_delivered() -> ShareFetcher:
    """A fetcher whose share session with node 0 delivered one record (a-0,
    offset 0, acquired), not taken yet."""
    f = fetcher({A0: 0})
    open_session(
        f, answer=fetch_answer({"a": [part(0, records=blob(0, [b"x"]), acquired=[(0, 0, 1)])]})
    )
    return f


# -- acknowledgement batches and epochs ----------------------------------------------------


def test_batches_coalesce_contiguous_offsets_of_one_type() -> None:
    assert acknowledgement_batches({5: 1, 6: 1, 7: 1}) == [(5, 7, (1,))]
    # A hole starts a new batch; each batch of one type carries that one type.
    assert acknowledgement_batches({1: 1, 2: 1, 4: 3, 5: 3}) == [(1, 2, (1,)), (4, 5, (3,))]


def test_mixed_types_carry_one_type_per_offset() -> None:
    assert acknowledgement_batches({10: 1, 11: 2, 12: 1, 13: 0}) == [(10, 13, (1, 2, 1, 0))]


def test_long_stretches_inside_a_mixed_run_get_their_own_batch() -> None:
    acks = {o: 1 for o in range(0, 12)} | {12: 2, 13: 3} | {o: 1 for o in range(14, 16)}
    assert acknowledgement_batches(acks) == [(0, 11, (1,)), (12, 15, (2, 3, 1, 1))]
    # A short stretch between two long ones is one batch of its own type.
    acks = {o: 1 for o in range(10)} | {10: 2, 11: 2} | {o: 3 for o in range(12, 22)}
    assert acknowledgement_batches(acks) == [(0, 9, (1,)), (10, 11, (2,)), (12, 21, (3,))]


def test_every_offset_keeps_its_type_in_the_batches() -> None:
    import random

    rng = random.Random(7)
    for _ in range(200):
        offsets = sorted(rng.sample(range(60), rng.randrange(1, 40)))
        acks = {o: rng.choice([0, 1, 1, 1, 2, 3]) for o in offsets}
        seen = {}
        for first, last, types in acknowledgement_batches(acks):
            assert len(types) in (1, last - first + 1)
            for i, o in enumerate(range(first, last + 1)):
                seen[o] = types[0] if len(types) == 1 else types[i]
        assert seen == acks


def test_session_epochs_wrap_as_kafka_does() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(-1) == -1


# -- sessions ------------------------------------------------------------------------------


def test_a_session_opens_with_every_partition_then_fetches_incrementally() -> None:
    f = fetcher()
    f.want_records()
    first = f.requests(0.0)
    assert sorted(r.node for r in first) == [0, 1]  # one session per leader
    r0 = only(first, 0)
    assert r0.body.share_session_epoch == 0
    assert set(fetched(r0)) == {A0, A1}
    assert r0.body.max_records == 500 and r0.body.batch_size == 500
    assert only(first, 1).body.share_session_epoch == 0
    f.on_response(r0, fetch_answer({}), 0.0)
    # Node 0 answered and fetches again at epoch 1; node 1's fetch is still in flight.
    assert [(r.node, r.body.share_session_epoch) for r in f.requests(0.0)] == [(0, 1)]


def test_incremental_fetch_names_only_changes() -> None:
    f = fetcher({A0: 0, A1: 0})
    open_session(f)
    again = only(f.requests(0.0))
    assert again.body.share_session_epoch == 1
    assert fetched(again) == {} and forgotten(again) == set()
    f.on_response(again, fetch_answer({}), 0.0)
    f.set_assignment({A0})
    dropped = only(f.requests(0.0))
    assert dropped.body.share_session_epoch == 2
    assert fetched(dropped) == {} and forgotten(dropped) == {A1}
    f.on_response(dropped, fetch_answer({}), 0.0)
    f.set_assignment({A0, A1})
    added = only(f.requests(0.0))
    assert set(fetched(added)) == {A1} and forgotten(added) == set()


def test_a_recreated_topic_is_forgotten_under_its_old_id_and_added_under_its_new() -> None:
    f = fetcher({A0: 0})
    open_session(f)
    new_id = uuid.UUID(int=99)
    f.metadata = metadata({A0: 0}, {"a": new_id})
    request = only(f.requests(0.0))
    assert [t.topic_id for t in request.body.topics] == [new_id]
    assert [t.topic_id for t in request.body.forgotten_topics_data] == [TID["a"]]


@pytest.mark.parametrize(
    "code",
    [ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH, 133],
)
def test_session_errors_start_a_new_session_and_fail_the_acknowledgements_carried(
    code: int,
) -> None:
    f = fetcher({A0: 0})
    open_session(
        f,
        answer=fetch_answer({"a": [part(0, records=blob(0, [b"x", b"y"]), acquired=[(0, 1, 1)])]}),
    )
    f.take(10)
    f.acknowledge_all(ACCEPT)
    f.take_acknowledged()
    f.want_records()
    carrying = only(f.requests(0.0))
    assert carrying.body.share_session_epoch == 1
    assert fetched(carrying) == {A0: [(0, 1, [1])]}
    f.on_response(carrying, FR(error_code=code), 0.0)
    [outcome] = f.outcomes
    assert outcome.partition == A0 and outcome.offsets == {0, 1}
    assert isinstance(outcome.error, KafkaError) and outcome.error.raw_code == code
    fresh = only(f.requests(1.0))
    assert fresh.body.share_session_epoch == 0
    assert fetched(fresh) == {A0: []}


def test_another_request_error_still_moves_the_epoch_on() -> None:
    f = fetcher({A0: 0})
    open_session(f)
    request = only(f.requests(0.0))
    f.on_response(request, FR(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED), 0.0)
    assert f.sessions[0].epoch == 2
    assert isinstance(f.errors[0], KafkaError)
    assert f.errors[0].code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert f.requests(0.0) == []  # backing off
    assert only(f.requests(1.0)).body.share_session_epoch == 2


def test_a_lost_connection_resets_the_session_and_fails_what_was_carried() -> None:
    f = one_record_delivered()
    f.take(10)
    f.acknowledge(A0, 0, REJECT)
    f.take_acknowledged()
    f.want_records()
    request = only(f.requests(0.0))
    f.on_failure(request, ConnectionError("gone"), 0.0)
    [outcome] = f.outcomes
    assert outcome.offsets == {0} and isinstance(outcome.error, ConnectionError)
    assert f.sessions[0].epoch == 0


def test_acknowledgements_pending_for_a_session_at_epoch_0_fail_and_never_ride_on_it() -> None:
    f = one_record_delivered()
    f.take(10)
    f.sessions[0].reset()  # as after SHARE_SESSION_NOT_FOUND on another request
    f.acknowledge_all(ACCEPT)
    f.take_acknowledged()
    f.want_records()
    request = only(f.requests(0.0))
    assert request.body.share_session_epoch == 0
    assert fetched(request) == {A0: []}
    [outcome] = f.outcomes
    assert outcome.error.code == ErrorCode.INVALID_SHARE_SESSION_EPOCH


def test_one_request_per_broker_at_a_time() -> None:
    f = fetcher({A0: 0})
    f.want_records()
    request = only(f.requests(0.0))
    f.commit(0.0, 5.0)  # nothing pending: nothing to send
    assert f.requests(0.0) == []
    f.on_response(request, fetch_answer({}), 0.0)
    assert only(f.requests(0.0)).body.share_session_epoch == 1


# -- records -------------------------------------------------------------------------------


def test_only_acquired_offsets_are_handed_out_with_their_delivery_counts() -> None:
    data = blob(10, [b"a", b"b", b"c", b"d", b"e"])  # offsets 10-14
    records, acks, error = decode_acquired(A0, data, [(11, 12, 1), (13, 13, 3)])
    assert [(r.offset, r.value, r.delivery_count) for r in records] == [
        (11, b"b", 1),
        (12, b"c", 1),
        (13, b"d", 3),
    ]
    assert acks == {} and error is None


def test_acquired_offsets_without_records_are_gaps_and_past_the_data_released() -> None:
    data = (
        blob(0, [b"a"])
        + encode_control_batch(
            ControlRecordType.COMMIT,
            producer_id=1,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp=0,
            base_offset=1,
        )
        + blob(4, [b"e"])  # 2 and 3 were compacted away
    )
    records, acks, _ = decode_acquired(A0, data, [(0, 6, 1)])
    assert [r.offset for r in records] == [0, 4]
    assert acks == {1: GAP, 2: GAP, 3: GAP, 5: RELEASE, 6: RELEASE}


def test_a_corrupt_batch_is_rejected_and_reported() -> None:
    good, bad = blob(0, [b"a"]), bytearray(blob(1, [b"b", b"c"]))
    bad[-1] ^= 0xFF
    records, acks, error = decode_acquired(A0, good + bytes(bad), [(0, 2, 1)])
    assert [r.offset for r in records] == [0]
    assert acks == {1: REJECT, 2: REJECT}
    assert error is not None and error.code == ErrorCode.CORRUPT_MESSAGE


def test_gaps_ride_on_the_next_fetch() -> None:
    f = fetcher({A0: 0})
    answer = fetch_answer(
        {"a": [part(0, records=blob(0, [b"x"]) + blob(3, [b"y"]), acquired=[(0, 3, 1)])]}
    )
    open_session(f, answer=answer)
    assert [r.offset for r in f.take(10)] == [0, 3]
    f.acknowledge_all(ACCEPT)
    f.take_acknowledged()
    f.want_records()
    assert fetched(only(f.requests(0.0))) == {A0: [(0, 3, [1, 0, 0, 1])]}


def test_a_response_with_records_stops_fetching_until_they_are_wanted() -> None:
    f = one_record_delivered()
    assert not f.fetch_wanted
    assert f.requests(0.0) == []
    assert f.acquisition_lock_timeout_ms == 30_000
    f.want_records()
    assert only(f.requests(0.0)).is_fetch


def test_records_for_a_partition_no_longer_assigned_are_released() -> None:
    f = fetcher({A0: 0, A1: 0})
    f.want_records()
    request = only(f.requests(0.0))
    f.set_assignment({A0})
    f.on_response(
        request,
        fetch_answer({"a": [part(1, records=blob(0, [b"x", b"y"]), acquired=[(0, 1, 1)])]}),
        0.0,
    )
    assert not f.has_records()
    # The release goes in a ShareAcknowledge before the fetch that forgets a-1.
    f.want_records()
    release = only(f.requests(0.0))
    assert not release.is_fetch
    assert fetched(release) == {A1: [(0, 1, [2])]}
    f.on_response(release, ack_answer({"a": [(1, 0)]}), 0.0)
    follow = only(f.requests(0.0))
    assert follow.is_fetch and forgotten(follow) == {A1}


# -- acknowledging -------------------------------------------------------------------------


def test_acknowledging_again_changes_the_type_until_it_is_taken() -> None:
    f = fetcher({A0: 0})
    open_session(
        f,
        answer=fetch_answer({"a": [part(0, records=blob(0, [b"x", b"y"]), acquired=[(0, 1, 1)])]}),
    )
    f.take(10)
    f.acknowledge(A0, 0, RELEASE)
    f.acknowledge(A0, 0, ACCEPT)
    assert f.take_acknowledged() == 1  # offset 1 is not acknowledged
    with pytest.raises(UsageError, match="cannot be acknowledged"):
        f.acknowledge(A0, 0, REJECT)
    with pytest.raises(UsageError):
        f.acknowledge(A0, 7, ACCEPT)
    f.acknowledge(A0, 1, REJECT)
    assert f.take_acknowledged() == 0
    f.want_records()
    assert fetched(only(f.requests(0.0))) == {A0: [(0, 1, [1, 3])]}


def test_pending_acknowledgements_go_alone_when_no_fetch_is_wanted() -> None:
    f = one_record_delivered()
    f.take(10)
    f.acknowledge_all(ACCEPT)
    f.take_acknowledged()
    request = only(f.requests(0.0))
    assert not request.is_fetch and request.body.share_session_epoch == 1
    f.on_response(request, ack_answer({"a": [(0, 0)]}), 0.0)
    assert [(o.partition, o.offsets, o.error) for o in f.outcomes] == [(A0, frozenset({0}), None)]
    assert f.sessions[0].epoch == 2


def test_piggybacked_acknowledgement_errors_reach_the_outcomes() -> None:
    f = one_record_delivered()
    f.take(10)
    f.acknowledge_all(ACCEPT)
    f.take_acknowledged()
    f.want_records()
    request = only(f.requests(0.0))
    f.on_response(
        request,
        fetch_answer({"a": [part(0, acknowledge_error_code=ErrorCode.INVALID_RECORD_STATE)]}),
        0.0,
    )
    [outcome] = f.outcomes
    assert outcome.error.code == ErrorCode.INVALID_RECORD_STATE


def _delivered(f: ShareFetcher, n: int = 2) -> None:
    values = [b"v%d" % i for i in range(n)]
    open_session(
        f, answer=fetch_answer({"a": [part(0, records=blob(0, values), acquired=[(0, n - 1, 1)])]})
    )
    f.take(n)
    f.acknowledge_all(ACCEPT)
    f.take_acknowledged()


def test_commit_reports_per_partition_and_retries_what_passes() -> None:
    f = fetcher({A0: 0})
    _delivered(f)
    commit = f.commit(0.0, 5.0, cookie="c")
    request = only(f.requests(0.0))
    assert not request.is_fetch
    f.on_response(request, ack_answer({"a": [(0, ErrorCode.NOT_LEADER_OR_FOLLOWER)]}), 0.0)
    assert not commit.done
    assert f.requests(0.0) == []  # backing off
    retry = only(f.requests(1.0))
    assert fetched(retry) == {A0: [(0, 1, [1])]}
    f.on_response(retry, ack_answer({"a": [(0, 0)]}), 1.0)
    assert commit.done and commit.results == {A0: None}
    assert list(f.commits_done) == [commit]


def test_commit_gives_up_at_its_deadline() -> None:
    f = fetcher({A0: 0})
    _delivered(f)
    commit = f.commit(0.0, 2.0)
    request = only(f.requests(0.0))
    f.on_response(request, ack_answer({"a": [(0, ErrorCode.NOT_LEADER_OR_FOLLOWER)]}), 0.0)
    assert f.next_deadline() is not None
    assert f.requests(3.0) == []
    assert commit.done
    assert commit.results[A0].code == ErrorCode.REQUEST_TIMED_OUT


def test_commit_does_not_retry_what_cannot_pass() -> None:
    f = fetcher({A0: 0})
    _delivered(f)
    commit = f.commit(0.0, 5.0)
    f.on_response(
        only(f.requests(0.0)), ack_answer({"a": [(0, ErrorCode.INVALID_RECORD_STATE)]}), 0.0
    )
    assert commit.results[A0].code == ErrorCode.INVALID_RECORD_STATE


def test_commit_with_nothing_to_send_is_done_at_once() -> None:
    f = fetcher({A0: 0})
    commit = f.commit(0.0, 5.0)
    assert commit.done and commit.results == {}


def test_closing_releases_what_is_buffered_and_closes_the_session_at_epoch_minus_1() -> None:
    f = fetcher({A0: 0})
    open_session(
        f,
        answer=fetch_answer(
            {"a": [part(0, records=blob(0, [b"x", b"y", b"z"]), acquired=[(0, 2, 1)])]}
        ),
    )
    f.take(1)
    f.acknowledge_all(ACCEPT)
    f.take_acknowledged()
    f.close(0.0)
    assert not f.close_done
    request = only(f.requests(0.0))
    assert not request.is_fetch and request.body.share_session_epoch == -1
    assert fetched(request) == {A0: [(0, 2, [1, 2, 2])]}  # accepted, then released
    f.on_response(request, ack_answer({"a": [(0, 0)]}), 0.0)
    assert f.close_done and f.sessions == {}
    assert f.requests(0.0) == []


def test_closing_a_session_never_opened_sends_nothing() -> None:
    f = fetcher({A0: 0})
    f.close(0.0)
    assert f.requests(0.0) == [] and f.close_done


def test_given_back_records_come_out_first_again() -> None:
    f = fetcher({A0: 0})
    open_session(
        f,
        answer=fetch_answer(
            {"a": [part(0, records=blob(0, [b"a", b"b", b"c"]), acquired=[(0, 2, 1)])]}
        ),
    )
    taken = f.take(3)
    f.give_back(taken[1:])
    assert f.unacknowledged() == 1
    assert [r.value for r in f.take(5)] == [b"b", b"c"]


def test_no_deadline_in_the_past_once_nothing_can_be_sent() -> None:
    """The driver sleeps until next_deadline(): a past one it cannot act on would spin it."""
    f = fetcher({A0: 0})
    f.want_records()
    f.on_failure(only(f.requests(0.0)), ConnectionError("gone"), 0.0)
    f.set_assignment(set())  # the partition moved away during the backoff
    assert f.requests(5.0) == []
    assert f.next_deadline() is None
    # A retry waiting behind a request in flight waits for its answer, not for a clock.
    g = fetcher({A0: 0})
    _delivered(g)
    g.commit(0.0, 30.0)
    g.on_response(
        only(g.requests(0.0)), ack_answer({"a": [(0, ErrorCode.NOT_LEADER_OR_FOLLOWER)]}), 0.0
    )
    g.want_records()
    fetch = only(g.requests(5.0))  # the retry went first ...
    assert not fetch.is_fetch
    g.on_response(fetch, ack_answer({"a": [(0, ErrorCode.NOT_LEADER_OR_FOLLOWER)]}), 5.0)
    busy = only(g.requests(5.0))  # ... now a fetch is in flight, the retry due later
    assert busy.is_fetch
    deadline = g.next_deadline()
    assert deadline is not None and deadline >= 30.0  # only the commit's deadline


# -- decoding acquired records against a plain reference -------------------------------------


def _batch_with_deltas(base_offset: int, deltas: list[int], last_delta: int) -> bytes:
    """A batch whose records carry these offset deltas (a compacted batch has
    holes; a broken one may repeat or step back)."""
    from trafka.codec import records as rec
    from trafka.codec._batch_encode import _encode_record

    payload = b"".join(_encode_record(d, 0, None, b"d%d" % d, ()) for d in deltas)
    return rec.assemble_batch(
        payload,
        len(deltas),
        base_offset=base_offset,
        base_timestamp=1000,
        max_timestamp=1000,
        compression=0,
        compression_level=None,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        attributes=0,
        partition_leader_epoch=-1,
        last_offset_delta=last_delta,
    )


def _reference_decode(
    data: bytes, ranges: list[tuple[int, int, int]]
) -> tuple[list[tuple[Any, ...]], dict[int, int], bool]:
    """decode_acquired's rules, record by record (ranges do not overlap)."""
    from trafka.codec import DecodeError
    from trafka.codec.records import decode_batch, iter_batches

    def count_of(o: int) -> int | None:
        return next((n for f, last, n in ranges if f <= o <= last), None)

    records: list[tuple[Any, ...]] = []
    acks: dict[int, int] = {}
    corrupt, end = False, None
    try:
        for header, view in iter_batches(data):
            end = header.next_offset
            span = range(header.base_offset, header.last_offset + 1)
            if all(count_of(o) is None for o in span):
                continue  # nothing acquired in it: not even read
            try:
                batch = decode_batch(view)
            except DecodeError:
                corrupt = True
                for o in span:
                    if count_of(o) is not None:
                        acks[o] = REJECT
                continue
            if header.attributes & 0x20:
                continue
            for r in batch.records:
                n = count_of(r.offset)
                if n is not None:
                    records.append((r.offset, r.value, n))
    except DecodeError:
        corrupt = True
    present = {r[0] for r in records}
    for first, last, _ in ranges:
        for o in range(first, last + 1):
            if o not in present and o not in acks:
                acks[o] = GAP if end is not None and o < end else RELEASE
    return records, acks, corrupt


def test_decoding_acquired_records_matches_the_rules_record_by_record() -> None:
    import random

    rng = random.Random(932)
    for _ in range(1500):
        parts: list[bytes] = []
        offset = rng.randrange(3)
        for _ in range(rng.randrange(6)):
            kind = rng.random()
            if kind < 0.15:
                parts.append(
                    encode_control_batch(
                        ControlRecordType.COMMIT,
                        producer_id=1,
                        producer_epoch=0,
                        coordinator_epoch=0,
                        timestamp=0,
                        base_offset=offset,
                    )
                )
                offset += 1
            elif kind < 0.3:  # compacted (holes) or broken (repeats, steps back)
                size = rng.randrange(2, 7)
                deltas = sorted(rng.sample(range(size), rng.randrange(1, size + 1)))
                if rng.random() < 0.5:
                    deltas[rng.randrange(len(deltas))] = rng.randrange(size + 2)
                parts.append(_batch_with_deltas(offset, deltas, size - 1))
                offset += size
            else:
                n = rng.randrange(1, 8)
                batch = bytearray(blob(offset, [b"v%d" % i for i in range(n)]))
                if rng.random() < 0.1:
                    batch[-1] ^= 0xFF  # a corrupt batch
                parts.append(bytes(batch))
                if rng.random() < 0.1:
                    parts.append(bytes(batch))  # the same batch twice
                offset += n
            offset += rng.choice([0, 0, 0, 1, 2])  # compacted away
        data = b"".join(parts)
        if data and rng.random() < 0.2:
            data = data[: rng.randrange(len(data))]  # cut off by the size limit
        ranges, o = [], rng.randrange(4)
        while o < offset + 4 and len(ranges) < 4:
            size = rng.randrange(1, 12)
            ranges.append((o, o + size - 1, rng.randrange(1, 4)))
            o += size + rng.choice([0, 0, 1, 3])
        rng.shuffle(ranges)
        records, acks, error = decode_acquired(A0, data, ranges)
        want_records, want_acks, corrupt = _reference_decode(data, ranges)
        assert [(r.offset, r.value, r.delivery_count) for r in records] == want_records
        assert all(r.topic == "a" and r.partition == 0 for r in records)
        assert acks == want_acks
        assert (error is not None) == corrupt


# -- acknowledgements meant for a ShareAcknowledge, records of one partition from two brokers ----


def test_acknowledgements_queued_for_a_share_acknowledge_ride_on_a_fetch_leaving_first() -> None:
    f = fetcher({A0: 0})
    open_session(
        f,
        answer=fetch_answer(
            {"a": [part(0, records=blob(0, [b"a", b"b", b"c", b"d"]), acquired=[(0, 3, 1)])]}
        ),
    )
    f.take(2)
    f.acknowledge_all(ACCEPT)
    f.take_acknowledged()
    f.send_pending_now(0.0)  # records are still buffered: meant for a ShareAcknowledge ...
    f.take(2)
    f.acknowledge_all(ACCEPT)
    f.take_acknowledged()
    f.want_records()  # ... but a fetch leaves first, and takes them along
    request = only(f.requests(0.0))
    assert request.is_fetch and fetched(request) == {A0: [(0, 3, [1])]}
    f.on_response(
        request,
        fetch_answer({"a": [part(0, acknowledge_error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)]}),
        0.0,
    )
    # Those meant for a ShareAcknowledge are retried as they would have been (on the
    # next fetch, as one is still wanted); the fetch's own fail, as piggy-backed ones do.
    [outcome] = f.outcomes
    assert outcome.offsets == {2, 3} and outcome.error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    retry = only(f.requests(1.0))  # after the backoff
    assert fetched(retry) == {A0: [(0, 1, [1])]}
    f.on_response(retry, fetch_answer({}), 1.0)
    assert [(o.offsets, o.error) for o in f.outcomes][1:] == [({0, 1}, None)]


def test_a_commit_goes_in_a_share_acknowledge_even_when_a_fetch_is_wanted() -> None:
    f = fetcher({A0: 0})
    _delivered(f)
    f.commit(0.0, 5.0)
    f.want_records()
    request = only(f.requests(0.0))
    assert not request.is_fetch and fetched(request) == {A0: [(0, 1, [1])]}
    f.on_response(request, ack_answer({"a": [(0, 0)]}), 0.0)
    assert only(f.requests(0.0)).is_fetch


def test_records_of_one_partition_from_two_brokers_are_acknowledged_to_each() -> None:
    f = fetcher({A0: 0})
    open_session(
        f,
        answer=fetch_answer({"a": [part(0, records=blob(0, [b"a", b"b"]), acquired=[(0, 1, 1)])]}),
    )
    f.metadata = metadata({A0: 1})  # the leadership moved with records buffered
    f.want_records()
    moved = only(f.requests(0.0), 1)
    f.on_response(
        moved,
        fetch_answer({"a": [part(0, records=blob(2, [b"c", b"d"]), acquired=[(2, 3, 1)])]}),
        0.0,
    )
    assert [r.offset for r in f.take(10)] == [0, 1, 2, 3]
    f.acknowledge(A0, 3, REJECT)
    f.acknowledge_all(ACCEPT)
    assert f.take_acknowledged() == 0
    requests = f.requests(0.0)
    assert fetched(only(requests, 0)) == {A0: [(0, 1, [1])]}
    assert fetched(only(requests, 1)) == {A0: [(2, 3, [1, 3])]}
