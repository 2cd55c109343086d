"""Incremental fetch sessions (KIP-227): brokerlite's FetchManager and cache.

Through the codec in the sans-IO core, then the long poll through the real
server, then kafka-python's consumer (which uses sessions by default).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from brokerlite_wire import batch, create, send

from trafka.brokerlite.fetch_sessions import FetchSessionCache, next_epoch
from trafka.brokerlite.outcomes import Parked
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k20_delete_topics as delete_topics
from trafka.codec.messages import k22_init_producer_id as init_producer_id
from trafka.codec.messages import k24_add_partitions_to_txn as add_partitions
from trafka.codec.messages import k26_end_txn as end_txn
from trafka.codec.records import decode_records

NULL = uuid.UUID(int=0)
Topics = dict[str, dict[int, int]]  # topic -> partition -> fetch offset


def request(
    topics: Topics,
    session_id: int = 0,
    epoch: int = -1,
    *,
    forget: dict[str, list[int]] | None = None,
    ids: dict[str, uuid.UUID] | None = None,
    max_wait_ms: int = 0,
    max_bytes: int = 64 << 20,
    isolation: int = 0,
) -> fetch.FetchRequest:
    """A Fetch of ``topics`` (by id when ``ids`` names them, for v13+)."""
    ids = ids or {}
    return fetch.FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=isolation,
        session_id=session_id,
        session_epoch=epoch,
        topics=[
            fetch.FetchRequest.FetchTopic(
                topic=name,
                topic_id=ids.get(name, NULL),
                partitions=[
                    fetch.FetchRequest.FetchPartition(
                        partition=p, fetch_offset=offset, partition_max_bytes=1 << 20
                    )
                    for p, offset in parts.items()
                ],
            )
            for name, parts in topics.items()
        ],
        forgotten_topics_data=[
            fetch.FetchRequest.ForgottenTopic(
                topic=name, topic_id=ids.get(name, NULL), partitions=ps
            )
            for name, ps in (forget or {}).items()
        ],
    )


def answered(response: Any) -> dict[tuple[str | uuid.UUID, int], Any]:
    """(topic name, or id from v13, partition) -> partition data, of a response."""
    return {
        (t.topic or t.topic_id, p.partition_index): p
        for t in response.responses
        for p in t.partitions
    }


def values(part: Any) -> list[bytes | None]:
    return [r.value for r in decode_records(part.records or b"")]


def put(core: Any, topic: str, partition: int, *vals: bytes) -> None:
    assert send(core, topic, batch(core, list(vals)), partition=partition).error_code == 0


def open_session(core: Any, topics: Topics, version: int = 12, **kw: Any) -> tuple[int, Any]:
    response = core.call(1, version, request(topics, 0, 0, **kw))
    assert response.error_code == 0 and response.session_id != 0, response
    return response.session_id, response


# -- the session's life -----------------------------------------------------------------------


def test_a_full_fetch_opens_a_session_and_incremental_ones_carry_only_news(core: Any) -> None:
    create(core, "t", 3)
    put(core, "t", 0, b"a")
    sid, first = open_session(core, {"t": {0: 0, 1: 0, 2: 0}})
    assert set(answered(first)) == {("t", 0), ("t", 1), ("t", 2)}
    assert values(answered(first)[("t", 0)]) == [b"a"]
    assessions = core.broker.fetch_sessions
    assert (assessions.size, assessions.cache.total_partitions) == (1, 3)

    # Nothing new (the client moved its offset on p0): an answer with no partitions.
    quiet = core.call(1, 12, request({"t": {0: 1}}, sid, 1))
    assert (quiet.error_code, quiet.session_id, quiet.responses) == (0, sid, [])

    put(core, "t", 1, b"b")
    news = core.call(1, 12, request({}, sid, 2))
    assert set(answered(news)) == {("t", 1)}
    part = answered(news)[("t", 1)]
    assert (values(part), part.high_watermark, part.log_start_offset) == ([b"b"], 1, 0)
    # The session still reads p1 from 0 until told otherwise, but its high
    # watermark was sent: only records make it news again.
    again = core.call(1, 12, request({}, sid, 3))
    assert set(answered(again)) == {("t", 1)} and values(answered(again)[("t", 1)]) == [b"b"]
    assert core.call(1, 12, request({"t": {1: 1}}, sid, 4)).responses == []
    assert assessions.incremental_fetches == 4


def test_a_changed_high_watermark_is_news_and_partitions_take_turns(core: Any) -> None:
    create(core, "t", 2)
    sid, _ = open_session(core, {"t": {0: 0, 1: 0}})
    put(core, "t", 0, b"x" * 100)
    put(core, "t", 1, b"y" * 100)
    # max_bytes lets only the first batch through: p1 has no records, but its
    # high watermark moved, so it is in the answer.
    tight = core.call(1, 12, request({}, sid, 1, max_bytes=1))
    parts = answered(tight)
    assert values(parts[("t", 0)]) == [b"x" * 100]
    assert (parts[("t", 1)].high_watermark, parts[("t", 1)].records) == (1, b"")
    # p0 returned records, so p1 comes first now and gets the batch.
    turn = core.call(1, 12, request({"t": {0: 1}}, sid, 2, max_bytes=1))
    assert list(answered(turn)) == [("t", 1)]
    assert values(answered(turn)[("t", 1)]) == [b"y" * 100]


def test_forgotten_partitions_leave_the_session(core: Any) -> None:
    create(core, "t", 2)
    sid, _ = open_session(core, {"t": {0: 0, 1: 0}})
    forgot = core.call(1, 12, request({}, sid, 1, forget={"t": [1]}))
    assert forgot.responses == []
    assert core.broker.fetch_sessions.cache.get(sid).size == 1
    put(core, "t", 1, b"gone")
    put(core, "t", 0, b"kept")
    assert set(answered(core.call(1, 12, request({}, sid, 2)))) == {("t", 0)}
    # Re-adding it: a partition new to the session is news.
    readd = core.call(1, 12, request({"t": {0: 1, 1: 0}}, sid, 3))
    assert set(answered(readd)) == {("t", 1)} and values(answered(readd)[("t", 1)]) == [b"gone"]
    # Forgetting everything closes the session; the answer is sessionless.
    empty = core.call(1, 12, request({}, sid, 4, forget={"t": [0, 1]}))
    assert (empty.error_code, empty.session_id) == (0, 0)
    assert core.broker.fetch_sessions.size == 0


def test_epoch_and_session_errors(core: Any) -> None:
    create(core, "t")
    sid, _ = open_session(core, {"t": {0: 0}})
    for epoch in (2, 0x7FFFFFFF, -2):
        wrong = core.call(1, 12, request({"t": {0: 0}}, sid, epoch))
        assert (wrong.error_code, wrong.session_id, wrong.responses) == (
            ErrorCode.INVALID_FETCH_SESSION_EPOCH,
            0,
            [],
        )
    # A refused request does not move the session on.
    assert core.call(1, 12, request({}, sid, 1)).error_code == 0
    unknown = core.call(1, 12, request({}, sid + 1, 1))
    assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and unknown.session_id == 0
    assert core.call(1, 12, request({}, 0, 5)).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # A session made by name cannot go on by id, nor the other way round.
    by_id = core.call(1, 13, request({}, sid, 2))
    assert by_id.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    assert core.broker.fetch_sessions.session_errors == 6


def test_epochs_wrap_as_kafka_does(core: Any) -> None:
    assert [next_epoch(e) for e in (-1, 0, 1, 0x7FFFFFFE, 0x7FFFFFFF)] == [
        -1,
        1,
        2,
        0x7FFFFFFF,
        1,
    ]
    create(core, "t")
    sid, _ = open_session(core, {"t": {0: 0}})
    core.broker.fetch_sessions.cache.get(sid).epoch = 0x7FFFFFFF
    assert core.call(1, 12, request({}, sid, 0x7FFFFFFF)).error_code == 0
    assert core.call(1, 12, request({}, sid, 1)).error_code == 0


def test_closing_and_recreating_sessions(core: Any) -> None:
    create(core, "t")
    sid, _ = open_session(core, {"t": {0: 0}})
    # (X, 0): X is closed and a new session made from this full fetch.
    renewed = core.call(1, 12, request({"t": {0: 0}}, sid, 0))
    assert renewed.session_id not in (0, sid) and len(renewed.responses) == 1
    assert core.call(1, 12, request({}, sid, 1)).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert core.broker.fetch_sessions.size == 1
    # (X, -1): X is closed, the fetch is sessionless.
    closed = core.call(1, 12, request({"t": {0: 0}}, renewed.session_id, -1))
    assert (closed.session_id, len(closed.responses)) == (0, 1)
    assert core.broker.fetch_sessions.size == 0
    # Before v7 there are no sessions at all.
    assert core.call(1, 6, request({"t": {0: 0}})).responses[0].partitions[0].error_code == 0
    assert core.broker.fetch_sessions.size == 0


def test_sessions_are_not_tied_to_a_connection(core: Any) -> None:
    create(core, "t")
    sid, _ = open_session(core, {"t": {0: 0}})
    core.broker.connection_closed(1)
    put(core, "t", 0, b"later")
    moved = core.call(1, 12, request({}, sid, 1), conn_id=7)
    assert values(answered(moved)[("t", 0)]) == [b"later"]


# -- the cache --------------------------------------------------------------------------------


def test_a_full_cache_creates_no_session(open_core: Any) -> None:
    core = open_core(max_incremental_fetch_session_cache_slots=1)
    create(core, "t", 2)
    sid, _ = open_session(core, {"t": {0: 0}})
    # Same size, and the session is young: no room, answer session 0.
    refused = core.call(1, 12, request({"t": {1: 0}}, 0, 0))
    assert (refused.error_code, refused.session_id, len(refused.responses)) == (0, 0, 1)
    assert core.broker.fetch_sessions.size == 1 and core.broker.fetch_sessions.cache.get(sid)


def test_no_slots_means_no_sessions(open_core: Any) -> None:
    core = open_core(max_incremental_fetch_session_cache_slots=0)
    create(core, "t")
    assert core.call(1, 12, request({"t": {0: 0}}, 0, 0)).session_id == 0


def test_eviction_of_stale_and_of_smaller_sessions(open_core: Any) -> None:
    core = open_core(max_incremental_fetch_session_cache_slots=1)
    cache = core.broker.fetch_sessions.cache
    create(core, "t", 3)
    stale, _ = open_session(core, {"t": {0: 0}})
    core.now += 120_001  # unused for longer than Kafka's 120 s
    fresh, _ = open_session(core, {"t": {1: 0}})
    assert stale not in cache and fresh in cache and cache.evictions == 1
    assert (
        core.call(1, 12, request({}, stale, 1)).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    )

    # Used again once it is older than 120 s: a bigger newcomer may evict it...
    core.now += 120_001
    assert core.call(1, 12, request({}, fresh, 1)).error_code == 0
    core.now += 1
    refused = core.call(1, 12, request({"t": {2: 0}}, 0, 0))
    assert refused.session_id == 0  # same size: it stays
    bigger, _ = open_session(core, {"t": {0: 0, 2: 0}})
    assert fresh not in cache and bigger in cache and cache.evictions == 2
    # ...but a young session is not evicted even by a bigger one.
    core.now += 1
    assert core.call(1, 12, request({"t": {0: 0, 1: 0, 2: 0}}, 0, 0)).session_id == 0
    assert cache.size == 1 and cache.total_partitions == 2


def test_the_cache_alone_follows_kafka_eviction_keys() -> None:
    import random

    cache = FetchSessionCache(2, eviction_ms=10, rng=random.Random(1))
    a = cache.maybe_create(0, False, {("t", 0): object()}, False)  # type: ignore[dict-item]
    b = cache.maybe_create(0, False, {("t", 0): object(), ("t", 1): object()}, False)  # type: ignore[dict-item]
    assert a and b and a.id != b.id and 0 not in (a.id, b.id)
    cache.touch(a, 11)
    cache.touch(b, 11)
    # Neither is stale (used at 11); the smallest old session, a, makes way for a
    # privileged newcomer of any size.
    c = cache.maybe_create(12, True, {}, False)
    assert c is not None and a.id not in cache and b.id in cache


# -- topics -----------------------------------------------------------------------------------


def test_a_deleted_topic_stays_in_the_session_with_its_error(core: Any) -> None:
    create(core, "t")
    create(core, "u")
    ids = {n: core.broker.logs.topic(n).topic_id for n in ("t", "u")}
    sid, first = open_session(core, {"t": {0: 0}, "u": {0: 0}}, version=13, ids=ids)
    assert {k for k in answered(first)} == {(ids["t"], 0), (ids["u"], 0)}
    body = delete_topics.DeleteTopicsRequest(topic_names=["t"])
    assert core.call(20, 5, body).responses[0].error_code == 0
    for epoch in (1, 2):  # errors are always news
        gone = core.call(1, 13, request({}, sid, epoch))
        assert list(answered(gone)) == [(ids["t"], 0)]
        assert answered(gone)[(ids["t"], 0)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # Another topic under the name: the session's id no longer matches it.
    create(core, "t")
    mismatch = core.call(1, 13, request({}, sid, 3))
    assert answered(mismatch)[(ids["t"], 0)].error_code == ErrorCode.INCONSISTENT_TOPIC_ID
    assert core.broker.fetch_sessions.cache.get(sid).size == 2
    forgot = core.call(1, 13, request({}, sid, 4, forget={"t": [0]}, ids=ids))
    assert forgot.responses == [] and core.broker.fetch_sessions.cache.get(sid).size == 1


def test_an_unknown_topic_id_is_resolved_once_the_topic_exists(core: Any) -> None:
    create(core, "t")
    missing = uuid.uuid4()
    tid = core.broker.logs.topic("t").topic_id
    sid, first = open_session(
        core, {"t": {0: 0}, "x": {0: 0}}, version=13, ids={"t": tid, "x": missing}
    )
    assert answered(first)[(missing, 0)].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    again = core.call(1, 13, request({}, sid, 1))
    assert list(answered(again)) == [(missing, 0)]


# -- long poll --------------------------------------------------------------------------------


def test_an_incremental_fetch_with_nothing_new_waits_then_answers_empty(core: Any) -> None:
    create(core, "t", 2)
    sid, _ = open_session(core, {"t": {0: 0, 1: 0}})
    assert isinstance(core.send(1, 12, request({}, sid, 1, max_wait_ms=500)), Parked)
    [done] = core.poll(500)
    timed_out = core.decode(done.reply)
    assert (timed_out.error_code, timed_out.session_id, timed_out.responses) == (0, sid, [])
    # Woken by a produce: only that partition is in the answer.
    assert isinstance(core.send(1, 12, request({}, sid, 2, max_wait_ms=60_000)), Parked)
    put(core, "t", 1, b"wake")
    [woken] = core.poll()
    assert list(answered(core.decode(woken.reply))) == [("t", 1)]


def test_a_waiting_fetch_overtaken_on_its_session_gets_an_epoch_error(core: Any) -> None:
    create(core, "t")
    sid, _ = open_session(core, {"t": {0: 0}})
    assert isinstance(core.send(1, 12, request({}, sid, 1, max_wait_ms=500), conn_id=1), Parked)
    assert core.call(1, 12, request({}, sid, 2), conn_id=2).error_code == 0
    [done] = core.poll(500)
    late = core.decode(done.reply)
    assert (late.error_code, late.session_id) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, sid)


def test_read_committed_in_a_session(core: Any) -> None:
    create(core, "t")
    sid, _ = open_session(core, {"t": {0: 0}}, isolation=1)
    pid, epoch = _init(core, "tx")
    _add(core, "tx", pid, epoch, "t")
    assert send(core, "t", batch(core, [b"a1"], pid, epoch, 0, txn=True), tid="tx").error_code == 0
    # Open: the high watermark moved (news), the LSO did not, no records yet.
    open_ = answered(core.call(1, 12, request({}, sid, 1, isolation=1)))[("t", 0)]
    assert (open_.high_watermark, open_.last_stable_offset, open_.records) == (1, 0, b"")
    assert _end(core, "tx", pid, epoch, commit=False) == 0
    aborted = answered(core.call(1, 12, request({}, sid, 2, isolation=1)))[("t", 0)]
    assert (aborted.high_watermark, aborted.last_stable_offset) == (2, 2)
    assert [(t.producer_id, t.first_offset) for t in aborted.aborted_transactions] == [(pid, 0)]
    assert core.call(1, 12, request({"t": {0: 2}}, sid, 3, isolation=1)).responses == []


def _init(core: Any, tid: str) -> tuple[int, int]:
    body = init_producer_id.InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=60_000
    )
    response = core.call(22, 4, body)
    assert response.error_code == 0
    return response.producer_id, response.producer_epoch


def _add(core: Any, tid: str, pid: int, epoch: int, topic: str) -> None:
    body = add_partitions.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            add_partitions.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                name=topic, partitions=[0]
            )
        ],
    )
    result = core.call(24, 3, body).results_by_topic_v3_and_below[0]
    assert [p.partition_error_code for p in result.results_by_partition] == [0]


def _end(core: Any, tid: str, pid: int, epoch: int, *, commit: bool) -> int:
    body = end_txn.EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    return int(core.call(26, 3, body).error_code)


# -- through the server -----------------------------------------------------------------------


def _produce_body(topic: str, partition: int, value: bytes) -> produce.ProduceRequest:
    records = batch(type("C", (), {"now": 1_700_000_000_000})(), [value])
    return produce.ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            produce.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    produce.ProduceRequest.PartitionProduceData(index=partition, records=records)
                ],
            )
        ],
    )


@pytest.mark.timeout(60)
def test_long_poll_on_a_session_through_the_server(running: Any, raw_client: Any) -> None:
    from trafka.codec.messages import k19_create_topics as create_topics

    client = raw_client(running.address)
    body = create_topics.CreateTopicsRequest(
        topics=[
            create_topics.CreateTopicsRequest.CreatableTopic(
                name="lp", num_partitions=2, replication_factor=1
            )
        ]
    )
    assert client.request(19, 7, body).topics[0].error_code == 0
    opened = client.request(1, 12, request({"lp": {0: 0, 1: 0}}, 0, 0))
    sid = opened.session_id
    assert sid != 0

    def produce_later() -> None:
        time.sleep(0.5)
        with type(client)(running.address) as producer:
            assert producer.request(0, 9, _produce_body("lp", 1, b"hi")).responses

    thread = threading.Thread(target=produce_later)
    thread.start()
    started = time.monotonic()
    woken = client.request(1, 12, request({}, sid, 1, max_wait_ms=20_000))
    thread.join()
    assert time.monotonic() - started < 15
    assert list(answered(woken)) == [("lp", 1)] and values(answered(woken)[("lp", 1)]) == [b"hi"]
    # A new connection goes on with the same session; nothing new: it waits, then empty.
    client.close()
    again = raw_client(running.address)
    started = time.monotonic()
    quiet = again.request(1, 12, request({"lp": {1: 1}}, sid, 2, max_wait_ms=300))
    assert (quiet.error_code, quiet.session_id, quiet.responses) == (0, sid, [])
    assert time.monotonic() - started >= 0.25


# -- interop ----------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_kafka_python_consumer_reads_everything_once_over_a_session(
    running: Any, topic_name: str
) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    servers = running.bootstrap_servers
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        admin.create_topics([NewTopic(topic_name, 4, 1)])
    finally:
        admin.close()
    expected: set[bytes] = set()
    stop = threading.Event()

    def write() -> None:
        producer = KafkaProducer(bootstrap_servers=servers, linger_ms=0)
        try:
            i = 0
            while not stop.is_set() or i < 200:
                value = b"v%d" % i
                producer.send(topic_name, value=value, partition=i % 2)  # partitions 0 and 1
                expected.add(value)
                i += 1
                if i % 20 == 0:
                    producer.flush(timeout=30)
                    time.sleep(0.05)
            producer.flush(timeout=30)
        finally:
            producer.close(timeout=10)

    consumer = KafkaConsumer(
        topic_name,
        bootstrap_servers=servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=200,
    )
    writer = threading.Thread(target=write)
    writer.start()
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(r.value for r in records)
            if len(got) >= 200 and not stop.is_set():
                stop.set()
            if stop.is_set() and not writer.is_alive() and len(got) >= len(expected):
                break
    finally:
        stop.set()
        writer.join(timeout=30)
        consumer.close()
    assert len(got) == len(set(got)) and set(got) == expected
    # Plain reads of counters the broker thread writes (ints; no state is changed).
    assert running.broker.fetch_sessions.incremental_fetches > 0
