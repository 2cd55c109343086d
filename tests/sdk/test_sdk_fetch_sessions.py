"""Incremental fetch sessions (KIP-227) on the consumer's side, as Java's FetchSessionHandler.

Sans-IO: the session (requests built, answers verified, errors starting it
over). Then the consumer against the scripted fake broker serving sessions
(incremental answers with only some partitions), without sessions, and with
sessions turned off; and against brokerlite when it serves sessions.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from sdk_brokers import fresh, module_broker
from sdk_fakebroker import FakeBroker, serving

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.records import encode_batch, set_base_offset
from trafka.sdk.admin import NewTopic, open_admin
from trafka.sdk.consumer import TopicPartition, open_consumer
from trafka.sdk.fetch_sessions import FetchSession, SessionPartition, next_epoch
from trafka.sdk.fetcher import Fetcher
from trafka.sdk.metadata import MetadataCache
from trafka.sdk.producer import open_producer

R = fetch.FetchResponse
A, B, C = (TopicPartition("t", i) for i in range(3))
ID_T = uuid.uuid5(uuid.NAMESPACE_URL, "t")
NULL = uuid.UUID(int=0)


def sp(offset: int, topic_id: uuid.UUID = ID_T, epoch: int = 0) -> SessionPartition:
    return SessionPartition(topic_id, offset, -1, 1024, epoch)


def answer(
    parts: dict[TopicPartition, int],
    session_id: int = 0,
    *,
    by_id: bool = True,
    code: int = 0,
    records: dict[TopicPartition, bytes] | None = None,
    throttle_time_ms: int = 0,
) -> Any:
    """A FetchResponse naming ``parts`` (partition -> high watermark)."""
    topics: dict[str, list[Any]] = {}
    for tp, hw in parts.items():
        topics.setdefault(tp.topic, []).append(
            R.PartitionData(
                partition_index=tp.partition,
                high_watermark=hw,
                records=(records or {}).get(tp),
            )
        )
    return R(
        throttle_time_ms=throttle_time_ms,
        error_code=code,
        session_id=session_id,
        responses=[
            R.FetchableTopicResponse(topic_id=uuid.uuid5(uuid.NAMESPACE_URL, t), partitions=p)
            if by_id
            else R.FetchableTopicResponse(topic=t, partitions=p)
            for t, p in topics.items()
        ],
    )


def opened(session_id: int = 7) -> FetchSession:
    """A session holding A, B, C at offsets 0, created by the broker."""
    s = FetchSession(1)
    s.build({A: sp(0), B: sp(0), C: sp(0)})
    assert s.handle_response(answer({A: 0, B: 0, C: 0}, session_id), 13) == (True, None)
    return s


# -- the session, sans-IO -------------------------------------------------------------------------


def test_a_full_fetch_asks_for_a_session_and_an_incremental_one_sends_only_changes() -> None:
    s = FetchSession(1)
    plan = s.build({A: sp(0), B: sp(0), C: sp(0)})
    assert (plan.session_id, plan.epoch, plan.full) == (0, 0, True)
    assert list(plan.to_send) == [A, B, C] and plan.to_forget == [] and plan.use_topic_ids
    assert s.handle_response(answer({A: 5, B: 0, C: 0}, 7), 13) == (True, None)
    assert (s.session_id, s.epoch) == (7, 1)

    # A moved on, B is unchanged (implied), C is not wanted (forgotten), D is new.
    d = TopicPartition("t", 3)
    plan = s.build({A: sp(5), B: sp(0), d: sp(0)})
    assert (plan.session_id, plan.epoch, plan.full) == (7, 1, False)
    assert list(plan.to_send) == [d, A]  # new ones first, as Java
    assert plan.to_forget == [(C, ID_T)] and plan.to_replace == []
    assert set(plan.partitions) == {A, B, d} == set(s.partitions)
    assert plan.partitions[B].fetch_offset == 0
    # An incremental answer may leave partitions out.
    assert s.handle_response(answer({A: 6}, 7), 13) == (True, None)
    assert (s.session_id, s.epoch) == (7, 2)
    # Nothing changed: an empty incremental request.
    plan = s.build({A: sp(5), B: sp(0), d: sp(0)})
    assert plan.to_send == {} and plan.to_forget == [] and plan.epoch == 2
    assert (s.full_fetches, s.incremental_fetches) == (1, 2)


def test_a_changed_leader_epoch_or_max_bytes_is_sent_again() -> None:
    s = opened()
    plan = s.build({A: sp(0, epoch=1), B: sp(0)._replace(max_bytes=1), C: sp(0)})
    assert list(plan.to_send) == [A, B]


def test_epochs_wrap_to_one_and_the_final_epoch_stays() -> None:
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(-1) == -1
    s = opened()
    s.epoch = 2**31 - 1
    s.build({A: sp(0), B: sp(0), C: sp(0)})
    assert s.handle_response(answer({}, 7), 13) == (True, None)
    assert (s.session_id, s.epoch) == (7, 1)


@pytest.mark.parametrize(
    ("code", "after"),
    [
        (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, (0, 0)),  # Java: INITIAL
        (ErrorCode.INVALID_FETCH_SESSION_EPOCH, (7, 0)),  # nextCloseExistingAttemptNew
        (ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, (7, 0)),
        (ErrorCode.UNKNOWN_SERVER_ERROR, (7, 0)),
    ],
)
def test_request_errors_start_the_session_over_as_java(code: int, after: tuple[int, int]) -> None:
    s = opened()
    s.build({A: sp(3), B: sp(0), C: sp(0)})
    assert s.handle_response(answer({}, 0, code=code), 13) == (False, None)
    assert (s.session_id, s.epoch) == after
    plan = s.build({A: sp(3), B: sp(0)})
    assert plan.full and list(plan.to_send) == [A, B] and plan.to_forget == []
    assert (plan.session_id, plan.epoch) == after


def test_a_failed_request_closes_the_session_and_asks_for_a_new_one() -> None:
    s = opened()
    s.build({A: sp(3), B: sp(0), C: sp(0)})
    s.handle_error()
    assert (s.session_id, s.epoch) == (7, 0)
    assert s.build({A: sp(3)}).full


def test_a_broker_without_sessions_keeps_getting_full_fetches() -> None:
    s = FetchSession(1)
    for _ in range(3):
        plan = s.build({A: sp(0), B: sp(0)})
        assert plan.full and (plan.session_id, plan.epoch) == (0, 0) and len(plan.to_send) == 2
        assert s.handle_response(answer({A: 0, B: 0}, 0), 13) == (True, None)
    assert (s.full_fetches, s.incremental_fetches) == (3, 0)


def test_a_session_closed_by_the_broker_starts_over() -> None:
    s = opened()
    s.build({A: sp(0), B: sp(0), C: sp(0)})
    assert s.handle_response(answer({A: 1}, 0), 13) == (True, None)
    assert (s.session_id, s.epoch) == (0, 0)


def test_full_answers_must_hold_exactly_the_session() -> None:
    s = FetchSession(1)
    s.build({A: sp(0), B: sp(0)})
    usable, problem = s.handle_response(answer({A: 0}, 7), 13)
    assert not usable and problem is not None and "omitted" in problem
    assert (s.session_id, s.epoch) == (0, 0)
    s.build({A: sp(0), B: sp(0)})
    usable, problem = s.handle_response(answer({A: 0, B: 0, C: 0}, 7), 13)
    assert not usable and problem is not None and "extra" in problem
    # A topic id the session does not know (v13+).
    s.build({A: sp(0)})
    odd = answer({A: 0}, 7)
    odd.responses.append(R.FetchableTopicResponse(topic_id=uuid.uuid4(), partitions=[]))
    usable, problem = s.handle_response(odd, 13)
    assert not usable and problem is not None and "topic ids" in problem


def test_incremental_answers_must_name_only_session_partitions() -> None:
    s = opened()
    s.build({A: sp(0), B: sp(0)})  # C forgotten
    usable, problem = s.handle_response(answer({C: 4}, 7), 13)
    assert not usable and problem is not None and "extra" in problem
    assert (s.session_id, s.epoch) == (7, 0)


def test_an_empty_full_answer_with_a_throttle_is_not_applied() -> None:
    s = FetchSession(1)
    s.build({A: sp(0)})
    throttled = answer({}, 0, throttle_time_ms=100)
    assert s.handle_response(throttled, 13) == (False, "throttled")
    assert (s.session_id, s.epoch) == (0, 0)


def test_a_changed_topic_id_replaces_the_partition() -> None:
    s = opened()
    new_id = uuid.uuid4()
    plan = s.build({A: sp(0, new_id), B: sp(0), C: sp(0)})
    assert list(plan.to_send) == [A] and plan.to_replace == [(A, ID_T)]
    assert s.partitions[A].topic_id == new_id and plan.use_topic_ids


def test_partitions_without_topic_ids_need_names() -> None:
    s = FetchSession(1)
    plan = s.build({A: sp(0, NULL), B: sp(0)})
    assert not plan.use_topic_ids and s.topic_names == {}
    assert s.handle_response(answer({A: 0, B: 0}, 7, by_id=False), 12) == (True, None)
    # Forgetting a partition without an id needs Fetch v12 even if the rest have ids.
    assert s.forgets_nameless([B])
    plan = s.build({B: sp(0)})
    assert not plan.use_topic_ids and plan.to_forget == [(A, NULL)]
    # An id appearing for a partition that had none is a plain change, not a replacement.
    s.handle_response(answer({}, 7, by_id=False), 12)
    plan = s.build({B: sp(0), A: sp(0)})
    assert plan.to_replace == [] and list(plan.to_send) == [A]


def test_sessions_off_send_sessionless_full_fetches() -> None:
    s = FetchSession(1, incremental=False)
    for _ in range(2):
        plan = s.build({A: sp(0)})
        assert (plan.session_id, plan.epoch) == (0, -1) and plan.full
        assert s.handle_response(answer({A: 0}, 0), 13) == (True, None)
    assert s.close_plan() is None


def test_closing_a_session_is_a_final_epoch_fetch_without_partitions() -> None:
    assert FetchSession(1).close_plan() is None  # no session to close
    s = opened()
    plan = s.close_plan()
    assert plan is not None and (plan.session_id, plan.epoch) == (7, -1)
    assert plan.to_send == {} and plan.partitions == {}
    # An answer to a fetch still in flight is not applied any more.
    assert s.handle_response(answer({A: 0, B: 0, C: 0}, 7), 13) == (False, "the session is closed")


# -- the fetcher's requests and answers ---------------------------------------------------------


def _fetcher(n: int = 3) -> Fetcher:
    md = MetadataCache()
    md.update(fetch_md_response("t", n), now=0.0)
    f = Fetcher(md, incremental_fetch_sessions=True)
    f.assign(TopicPartition("t", i) for i in range(n))
    for i in range(n):
        f.seek(TopicPartition("t", i), 0)
    return f


def fetch_md_response(topic: str, n: int) -> Any:
    from trafka.codec.messages import k03_metadata as md

    M = md.MetadataResponse
    return M(
        brokers=[M.MetadataResponseBroker(node_id=1, host="h", port=1)],
        topics=[
            M.MetadataResponseTopic(
                name=topic,
                topic_id=uuid.uuid5(uuid.NAMESPACE_URL, topic),
                partitions=[
                    M.MetadataResponsePartition(partition_index=i, leader_id=1, leader_epoch=0)
                    for i in range(n)
                ],
            )
        ],
    )


def _blob(first: int, n: int) -> bytes:
    rows = [(0, None, b"v%d" % (first + i), ()) for i in range(n)]
    return bytes(set_base_offset(encode_batch(rows), first))  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [12, 13])
def test_the_fetcher_sends_incremental_requests_and_keeps_what_answers_leave_out(
    version: int,
) -> None:
    f = _fetcher()
    session = f.session(1)
    tps = sorted(f.fetchable()[1])
    req, positions = f.build_fetch(tps, version, session)
    assert (req.session_id, req.session_epoch) == (0, 0)
    assert sum(len(t.partitions) for t in req.topics) == 3
    full = answer(
        {A: 2, B: 5, C: 0}, 9, by_id=version >= 13, records={A: _blob(0, 2), B: _blob(0, 5)}
    )
    assert f.handle_fetch_response(positions, full)
    assert (session.session_id, session.epoch) == (9, 1)
    taken = f.take(100)
    assert [r.offset for r in taken[A]] == [0, 1] and [r.offset for r in taken[B]] == list(range(5))

    # The next request names only the partitions whose fetch offset moved.
    tps = sorted(f.fetchable()[1])
    req, positions = f.build_fetch(tps, version, session)
    assert (req.session_id, req.session_epoch) == (9, 1)
    sent = {(p.partition, p.fetch_offset) for t in req.topics for p in t.partitions}
    assert sent == {(0, 2), (1, 5)} and req.forgotten_topics_data == []
    assert positions == {A: 2, B: 5, C: 0}  # C is implied
    # Only C has something new: A and B keep their watermarks.
    inc = answer({C: 3}, 9, by_id=version >= 13, records={C: _blob(0, 3)})
    assert f.handle_fetch_response(positions, inc)
    assert (f.high_watermark(A), f.high_watermark(B), f.high_watermark(C)) == (2, 5, 3)
    assert not any(s.in_flight for s in f.partitions.values())
    assert session.epoch == 2

    # Pausing A forgets it in the next request.
    f.pause([A])
    tps = sorted(f.fetchable()[1])
    req, positions = f.build_fetch(tps, version, session)
    forgotten = req.forgotten_topics_data
    assert [list(t.partitions) for t in forgotten] == [[0]]
    if version >= 13:
        assert forgotten[0].topic_id == uuid.uuid5(uuid.NAMESPACE_URL, "t")
    else:
        assert forgotten[0].topic == "t"
    assert A not in positions


def test_a_session_error_is_not_raised_and_the_next_fetch_is_full() -> None:
    f = _fetcher(1)
    session = f.session(1)
    _, positions = f.build_fetch([A], 13, session)
    assert f.handle_fetch_response(positions, answer({A: 0}, 9)) is False
    _, positions = f.build_fetch([A], 13, session)
    f.fetch_wanted = False
    bad = answer({}, 0, code=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    assert f.handle_fetch_response(positions, bad) is False
    assert f.fetch_wanted and not f.errors and not f.partitions[A].in_flight
    req, _ = f.build_fetch([A], 13, session)
    assert (req.session_id, req.session_epoch) == (9, 0)
    # Other request errors are raised as before (and start the session over too).
    _, positions = f.build_fetch([A], 13, session)
    with pytest.raises(KafkaError):
        f.handle_fetch_response(positions, answer({}, 0, code=ErrorCode.UNKNOWN_SERVER_ERROR))
    assert session.epoch == 0


def test_a_failed_request_starts_its_session_over() -> None:
    f = _fetcher(1)
    session = f.session(1)
    _, positions = f.build_fetch([A], 13, session)
    f.handle_fetch_response(positions, answer({A: 0}, 9))
    _, positions = f.build_fetch([A], 13, session)
    f.fetch_failed(positions)
    assert (session.session_id, session.epoch) == (9, 0)


def test_a_session_forgetting_a_topic_without_id_uses_fetch_v12() -> None:
    f = _fetcher(2)
    session = f.session(1)
    session.build({A: sp(0, NULL), B: sp(0)})
    session.handle_response(answer({A: 0, B: 0}, 7, by_id=False), 12)
    assert f.fetch_version(17, [B], session) == 12
    assert f.fetch_version(17, [A, B], session) == 17


# -- the consumer against a scripted broker ------------------------------------------------------

TOPIC_PARTS = 6


def _produce(broker: FakeBroker, partition: int, n: int) -> None:
    tp = ("s", partition)
    base = broker.next_offset.get(tp, 0)
    broker.logs.setdefault(tp, []).append(_blob(base, n))
    broker.next_offset[tp] = base + n


def _long_polling(broker: FakeBroker) -> Any:
    """The fake's Fetch, holding an answer without records for a moment (as a
    broker's max.wait.ms) so that an idle consumer does not spin."""

    async def handler(header: Any, body: Any) -> Any:
        response = broker.fetch(header, body)
        if not response.error_code and not any(
            p.records for t in response.responses for p in t.partitions
        ):
            await anyio.sleep(0.02)
        return response

    return handler


def _fetches(broker: FakeBroker) -> list[Any]:
    return [body for key, _v, body in broker.requests if key == 1]


async def _more_fetches(broker: FakeBroker, count: int) -> None:
    """Wait until the consumer has sent ``count`` fetches (rounds go at the machine's
    pace: a fixed sleep may see fewer)."""
    with anyio.fail_after(15):
        while len(_fetches(broker)) < count:
            await anyio.sleep(0.01)


async def _read_all(
    consumer: Any, want: dict[int, int], timeout: float = 15
) -> dict[int, list[int]]:
    got: dict[int, list[int]] = {}
    with anyio.fail_after(timeout):
        while sum(len(v) for v in got.values()) < sum(want.values()):
            batch = await consumer.getmany(timeout_ms=200)
            for tp, recs in batch.items():
                got.setdefault(tp.partition, []).extend(r.offset for r in recs)
    return got


@pytest.mark.anyio
async def test_the_consumer_reads_every_record_once_through_incremental_fetches() -> None:
    broker = FakeBroker(topics={"s": TOPIC_PARTS}, fetch_sessions=True)
    broker.handlers[1] = _long_polling(broker)
    async with serving(broker):
        _produce(broker, 0, 5)
        _produce(broker, 3, 2)
        async with open_consumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50
        ) as consumer:
            consumer.assign([("s", i) for i in range(TOPIC_PARTS)])
            got = await _read_all(consumer, {0: 5, 3: 2})
            # More records arrive on a few partitions while the session is open.
            _produce(broker, 3, 4)
            _produce(broker, 5, 3)
            got2 = await _read_all(consumer, {3: 4, 5: 3})
            for p, offs in got2.items():
                got.setdefault(p, []).extend(offs)
            assert got == {0: list(range(5)), 3: list(range(6)), 5: list(range(3))}
            await anyio.sleep(0.2)  # a few more (empty) rounds: nothing more comes
            assert await consumer.getmany(timeout_ms=100) == {}
            for p in range(TOPIC_PARTS):
                end = broker.next_offset.get(("s", p), 0)
                assert await consumer.position(("s", p)) == end
                assert consumer.highwater(("s", p)) == end
                assert consumer.lag(("s", p)) == 0
            stats = consumer.statistics().fetch_sessions[0]
            assert stats.session_id != 0 and stats.full_fetches == 1
            assert stats.incremental_fetches >= 3 and stats.partitions == TOPIC_PARTS
        fetches = _fetches(broker)
    first = fetches[0]
    assert (first.session_id, first.session_epoch) == (0, 0)
    assert sum(len(t.partitions) for t in first.topics) == TOPIC_PARTS
    incremental = fetches[1:-1]
    assert all(f.session_id == first_sid(broker) for f in incremental)
    # Epochs run 1, 2, 3... without a gap.
    assert [f.session_epoch for f in incremental] == list(range(1, len(incremental) + 1))
    # Each incremental request names only partitions whose offset moved.
    sent = [{p.partition for t in f.topics for p in t.partitions} for f in incremental]
    assert set().union(*sent) <= {0, 3, 5}
    assert any(not s for s in sent)  # idle rounds name nothing
    # Leaving the block closes the session: epoch -1, no partitions.
    last = fetches[-1]
    assert (last.session_id, last.session_epoch) == (first_sid(broker), -1)
    assert last.topics == [] and not broker.sessions


def first_sid(broker: FakeBroker) -> int:
    return 1  # the fake numbers its sessions from 1


@pytest.mark.anyio
async def test_paused_partitions_are_forgotten_and_come_back() -> None:
    broker = FakeBroker(topics={"s": 3}, fetch_sessions=True)
    broker.handlers[1] = _long_polling(broker)
    async with (
        serving(broker),
        open_consumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50
        ) as consumer,
    ):
        consumer.assign([("s", i) for i in range(3)])
        await _read_all(consumer, {})
        with anyio.fail_after(10):
            while consumer.statistics().fetch_sessions.get(0) is None or (
                consumer.statistics().fetch_sessions[0].session_id == 0
            ):
                await anyio.sleep(0.01)
        consumer.pause(("s", 1))
        _produce(broker, 2, 2)
        assert await _read_all(consumer, {2: 2}) == {2: [0, 1]}

        def forgotten() -> list[tuple[Any, list[int]]]:
            return [
                (t.topic_id, list(t.partitions))
                for f in _fetches(broker)
                for t in f.forgotten_topics_data
            ]

        # The fetch that forgets partition 1 may be written but not yet read by the broker.
        with anyio.fail_after(10):
            while not forgotten():
                await anyio.sleep(0.01)
        assert forgotten() == [(broker.topic_id("s"), [1])]
        # Partition 1's records are written only now: a fetch sent before the
        # pause (long polling) could otherwise have brought them, and they
        # would be handed out from the buffer at the resume, not fetched again.
        _produce(broker, 1, 2)
        consumer.resume(("s", 1))
        assert await _read_all(consumer, {1: 2}) == {1: [0, 1]}
        fetches = _fetches(broker)
        gone = next(i for i, f in enumerate(fetches) if f.forgotten_topics_data)
        back = next(
            f
            for f in fetches[gone + 1 :]
            if any(p.partition == 1 for t in f.topics for p in t.partitions)
        )
        assert back.session_epoch > 0  # added to the same session
        assert [p.fetch_offset for t in back.topics for p in t.partitions if p.partition == 1] == [
            0
        ]
        assert consumer.lag(("s", 1)) == 0 and consumer.lag(("s", 2)) == 0


@pytest.mark.anyio
async def test_a_lost_session_starts_over_with_a_full_fetch_and_loses_nothing() -> None:
    broker = FakeBroker(topics={"s": 2}, fetch_sessions=True)
    inner = _long_polling(broker)
    dropped = []

    async def flaky(header: Any, body: Any) -> Any:
        # The broker evicts the session once, after a few rounds.
        if body.session_epoch == 3 and not dropped:
            dropped.append(body.session_id)
            broker.sessions.pop(body.session_id, None)
        return await inner(header, body)

    broker.handlers[1] = flaky
    async with serving(broker):
        _produce(broker, 0, 3)
        async with open_consumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50
        ) as consumer:
            consumer.assign([("s", 0), ("s", 1)])
            got = await _read_all(consumer, {0: 3})
            with anyio.fail_after(10):
                while not dropped:
                    await anyio.sleep(0.01)
            _produce(broker, 0, 2)
            _produce(broker, 1, 2)
            got2 = await _read_all(consumer, {0: 2, 1: 2})
            assert got == {0: [0, 1, 2]} and got2 == {0: [3, 4], 1: [0, 1]}
            assert await consumer.getmany(timeout_ms=100) == {}
        fetches = _fetches(broker)
    i = next(i for i, f in enumerate(fetches) if f.session_epoch == 3)
    again = fetches[i + 1]
    # FETCH_SESSION_ID_NOT_FOUND: Java's INITIAL, a full fetch of every partition.
    assert (again.session_id, again.session_epoch) == (0, 0)
    assert sum(len(t.partitions) for t in again.topics) == 2
    assert fetches[i + 2].session_id == 2


@pytest.mark.anyio
async def test_a_broker_without_sessions_gets_full_fetches() -> None:
    broker = FakeBroker(topics={"s": 3})  # answers session id 0
    broker.handlers[1] = _long_polling(broker)
    async with serving(broker):
        _produce(broker, 1, 3)
        async with open_consumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50
        ) as consumer:
            consumer.assign([("s", i) for i in range(3)])
            assert await _read_all(consumer, {1: 3}) == {1: [0, 1, 2]}
            await _more_fetches(broker, 3)
            stats = consumer.statistics().fetch_sessions[0]
            assert stats.session_id == 0 and stats.incremental_fetches == 0
        fetches = _fetches(broker)
    assert len(fetches) > 2
    assert all((f.session_id, f.session_epoch) == (0, 0) for f in fetches)
    assert all(sum(len(t.partitions) for t in f.topics) == 3 for f in fetches)


@pytest.mark.anyio
async def test_sessions_off_always_send_sessionless_fetches() -> None:
    broker = FakeBroker(topics={"s": 2}, fetch_sessions=True)
    broker.handlers[1] = _long_polling(broker)
    async with serving(broker):
        _produce(broker, 0, 2)
        async with open_consumer(
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
            config={"enable.incremental.fetch.sessions": False},
        ) as consumer:
            consumer.assign([("s", 0), ("s", 1)])
            assert await _read_all(consumer, {0: 2}) == {0: [0, 1]}
            await _more_fetches(broker, 3)
        fetches = _fetches(broker)
    assert len(fetches) > 2
    assert all((f.session_id, f.session_epoch) == (0, -1) for f in fetches)
    assert not broker.sessions


# -- against brokerlite, which serves sessions ----------------------------------------------------


@pytest.fixture(scope="module")
def lite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "fetch-sessions")


@pytest.mark.anyio
async def test_many_partitions_few_producers_against_brokerlite(lite: RunningBroker) -> None:
    topic = fresh("sessions")
    n_parts = 24
    async with open_admin(bootstrap_servers=lite.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, n_parts)])
    written: dict[int, list[bytes]] = {}
    async with open_consumer(
        bootstrap_servers=lite.bootstrap_servers,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    ) as consumer:
        consumer.assign([(topic, p) for p in range(n_parts)])
        # brokerlite makes a session (KIP-227), in its first answer (however long
        # that takes to come): the fetches that follow are incremental.
        with anyio.fail_after(10):
            while not consumer.statistics().fetch_sessions or not all(
                s.session_id for s in consumer.statistics().fetch_sessions.values()
            ):
                await consumer.getmany(timeout_ms=50)
        (node,) = consumer.statistics().fetch_sessions
        got: dict[int, list[bytes]] = {}

        async def produce() -> None:
            async with open_producer(
                bootstrap_servers=lite.bootstrap_servers, linger_ms=0
            ) as producer:
                for i in range(300):
                    p = (3, 7, 19)[i % 3]
                    value = b"%d-%d" % (p, i)
                    written.setdefault(p, []).append(value)
                    await producer.send(topic, value, partition=p)
                    if i % 50 == 0:
                        await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            with anyio.fail_after(30):
                while sum(len(v) for v in got.values()) < 300:
                    batch = await consumer.getmany(timeout_ms=200)
                    for tp, recs in batch.items():
                        got.setdefault(tp.partition, []).extend(r.value for r in recs)
        assert got == written
        assert await consumer.getmany(timeout_ms=300) == {}
        stats = consumer.statistics()
        assert stats.fetch_sessions[node].incremental_fetches > 0
        for p in range(n_parts):
            assert consumer.lag((topic, p)) == 0
            assert await consumer.position((topic, p)) == len(written.get(p, []))


@pytest.mark.anyio
async def test_a_seek_to_the_end_during_a_fetch_still_learns_the_end(lite: RunningBroker) -> None:
    """The answer to a fetch sent before a seek is dropped, but its high watermark
    is the partition's all the same: an incremental session's later answers leave
    the partition out while the watermark stays the same (KIP-227: a partition is
    in an incremental answer only with news), so a dropped watermark was never
    learnt again and ``lag`` stayed unknown (``trafka consume -o s@LATE -e`` hung)."""
    topic = fresh("seek-in-flight")
    async with open_admin(bootstrap_servers=lite.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, 1)])
    async with open_producer(bootstrap_servers=lite.bootstrap_servers) as producer:
        for i in range(6):
            await producer.send(topic, b"m%d" % i, partition=0)
    tp = TopicPartition(topic, 0)
    async with open_consumer(
        bootstrap_servers=lite.bootstrap_servers,
        # The broker holds the first fetch (it wants more bytes than there are)
        # for fetch.max.wait.ms: the seek surely comes while it is in flight.
        fetch_min_bytes=1 << 20,
        fetch_max_wait_ms=500,
    ) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        with anyio.fail_after(10):
            while not consumer.core.fetcher.partitions[tp].in_flight:
                await anyio.sleep(0.01)
        consumer.seek_to_end(tp)
        with anyio.fail_after(10):
            while consumer.lag(tp) is None:
                await consumer.getmany(timeout_ms=100)
        assert consumer.lag(tp) == 0
        assert await consumer.position(tp) == 6
        assert consumer.statistics().fetch_sessions  # the fetches went through a session
