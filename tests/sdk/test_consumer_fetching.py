"""The consumer's fetch driver: prefetching, failed fetches, and the records it hands out.

Against the scripted fake broker (one batch per Fetch response, long polls at
the log end) and against brokerlite (many small fetches).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from sdk_brokers import module_broker
from sdk_fakebroker import FakeBroker, serving

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.records import encode_batch, read_batch_header, set_base_offset
from trafka.sdk import fetcher as fetcher_module
from trafka.sdk.admin import NewTopic, open_admin
from trafka.sdk.consumer import TopicPartition, open_consumer
from trafka.sdk.producer import open_producer

pytestmark = pytest.mark.anyio

TP = TopicPartition("one", 0)
R = fetch.FetchResponse


def _fill(broker: FakeBroker, n_batches: int, per_batch: int) -> None:
    blobs = []
    for b in range(n_batches):
        base = b * per_batch
        rows = [(1000 + base + i, None, b"v%d" % (base + i), ()) for i in range(per_batch)]
        blobs.append(bytes(set_base_offset(encode_batch(rows), base)))  # type: ignore[arg-type]
    broker.logs[("one", 0)] = blobs
    broker.next_offset[("one", 0)] = n_batches * per_batch


def _one_batch_per_fetch(broker: FakeBroker) -> Any:
    """A Fetch handler answering with the first batch at or after the offset asked,
    and long-polling (up to max_wait_ms) at the log end, as a real broker does."""

    async def handler(header: Any, body: Any) -> Any:
        parts = []
        for t in body.topics:
            for p in t.partitions:
                blob = next(
                    (
                        b
                        for b in broker.logs.get(("one", p.partition), [])
                        if read_batch_header(b).next_offset > p.fetch_offset
                    ),
                    b"",
                )
                if not blob:
                    await anyio.sleep(body.max_wait_ms / 1000)
                parts.append(
                    R.PartitionData(
                        partition_index=p.partition,
                        high_watermark=broker.next_offset.get(("one", p.partition), 0),
                        records=blob,
                    )
                )
        return R(
            responses=[
                R.FetchableTopicResponse(
                    topic="one", topic_id=broker.topic_id("one"), partitions=parts
                )
            ]
        )

    return handler


def _fetch_offsets(broker: FakeBroker) -> list[int]:
    return [
        p.fetch_offset
        for key, _, body in broker.requests
        if key == 1
        for t in body.topics
        for p in t.partitions
    ]


async def test_next_fetch_is_sent_before_the_records_are_consumed(fake_broker: FakeBroker) -> None:
    _fill(fake_broker, 5, 2)
    fake_broker.handlers[1] = _one_batch_per_fetch(fake_broker)
    with anyio.fail_after(20):
        async with open_consumer(
            bootstrap_servers=fake_broker.bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        ) as c:
            c.assign([TP])
            first = await c.getmany(timeout_ms=5000, max_records=1)
            assert [r.offset for r in first[TP]] == [0]
            # The prefetch for offset 2 went out when the first response came in.
            while 2 not in _fetch_offsets(fake_broker):
                await anyio.sleep(0.01)
            got = [0]
            while len(got) < 10:
                for recs in (await c.getmany(timeout_ms=5000, max_records=3)).values():
                    got += [r.offset for r in recs]
            assert got == list(range(10))
            assert await c.position(TP) == 10
    offsets = _fetch_offsets(fake_broker)
    assert offsets[:6] == [0, 2, 4, 6, 8, 10]  # each batch fetched once, in order
    assert set(offsets[6:]) <= {10}  # then long polls at the end


async def test_position_that_cannot_be_looked_up_times_out_as_a_trafka_error(
    fake_broker: FakeBroker,
) -> None:
    from trafka.codec.messages import k02_list_offsets as lo
    from trafka.sdk.errors import ApiTimeoutError, RequestTimeoutError

    def not_yet(header: Any, body: Any) -> Any:
        # Retriable for ever: the position stays unknown.
        R = lo.ListOffsetsResponse
        return R(
            topics=[
                R.ListOffsetsTopicResponse(
                    name=t.name,
                    partitions=[
                        R.ListOffsetsPartitionResponse(
                            partition_index=p.partition_index,
                            error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                        )
                        for p in t.partitions
                    ],
                )
                for t in body.topics
            ]
        )

    fake_broker.handlers[2] = not_yet
    with anyio.fail_after(20):
        async with open_consumer(
            bootstrap_servers=fake_broker.bootstrap, default_api_timeout_ms=300
        ) as c:
            c.assign([TP])
            with pytest.raises(ApiTimeoutError, match=r"default\.api\.timeout\.ms") as caught:
                await c.position(TP)
    assert isinstance(caught.value, RequestTimeoutError | TimeoutError)


async def test_seek_during_a_prefetch(fake_broker: FakeBroker) -> None:
    _fill(fake_broker, 5, 2)
    fake_broker.handlers[1] = _one_batch_per_fetch(fake_broker)
    with anyio.fail_after(20):
        async with open_consumer(
            bootstrap_servers=fake_broker.bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        ) as c:
            c.assign([TP])
            got = []
            while len(got) < 5:
                for recs in (await c.getmany(timeout_ms=5000, max_records=1)).values():
                    got += [r.offset for r in recs]
            c.seek(TP, 1)
            after = []
            while len(after) < 9:
                for recs in (await c.getmany(timeout_ms=5000)).values():
                    after += [r.offset for r in recs]
            assert got == [0, 1, 2, 3, 4]
            assert after == list(range(1, 10))


@pytest.mark.parametrize("failure", ["close", "request error"])
async def test_failed_fetch_is_retried(fake_broker: FakeBroker, failure: str) -> None:
    _fill(fake_broker, 2, 3)
    calls = itertools.count()

    def flaky(header: Any, body: Any) -> Any:
        if next(calls) == 0:
            if failure == "close":
                return "close"
            return R(error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
        return fake_broker.fetch(header, body)

    fake_broker.handlers[1] = flaky
    with anyio.fail_after(20):
        async with open_consumer(
            bootstrap_servers=fake_broker.bootstrap,
            auto_offset_reset="earliest",
            retry_backoff_ms=10,
        ) as c:
            c.assign([TP])
            got: list[int] = []
            while len(got) < 6:
                for recs in (await c.getmany(timeout_ms=5000)).values():
                    got += [r.offset for r in recs]
    assert got == list(range(6))
    assert _fetch_offsets(fake_broker)[:2] == [0, 0]  # the failed fetch was asked again


async def test_a_bug_while_handling_a_response_reaches_the_application(
    fake_broker: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(fake_broker, 1, 3)
    real = fetcher_module.Fetcher.handle_fetch_response
    calls = itertools.count()

    def broken(self: Any, positions: Any, response: Any) -> bool:
        if next(calls) == 0:
            raise RuntimeError("bug")
        return real(self, positions, response)

    monkeypatch.setattr(fetcher_module.Fetcher, "handle_fetch_response", broken)
    with anyio.fail_after(20):
        async with open_consumer(
            bootstrap_servers=fake_broker.bootstrap, auto_offset_reset="earliest"
        ) as c:
            c.assign([TP])
            with pytest.raises(RuntimeError, match="bug"):
                await c.getmany(timeout_ms=5000)
            got = await c.getmany(timeout_ms=5000)  # and the partition is fetched again
            assert [r.offset for r in got[TP]] == [0, 1, 2]


async def test_partition_error_surfaces_once(
    fake_broker: FakeBroker,
) -> None:
    # A partition-level error is the application's to see, once.
    _fill(fake_broker, 1, 2)
    calls = itertools.count()

    def denied(header: Any, body: Any) -> Any:
        if next(calls) == 0:
            return R(
                responses=[
                    R.FetchableTopicResponse(
                        topic="one",
                        topic_id=fake_broker.topic_id("one"),
                        partitions=[
                            R.PartitionData(
                                partition_index=0, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED
                            )
                        ],
                    )
                ]
            )
        return fake_broker.fetch(header, body)

    fake_broker.handlers[1] = denied
    with anyio.fail_after(20):
        async with open_consumer(
            bootstrap_servers=fake_broker.bootstrap, auto_offset_reset="earliest"
        ) as c:
            c.assign([TP])
            with pytest.raises(KafkaError, match="TOPIC_AUTHORIZATION_FAILED"):
                await c.getmany(timeout_ms=5000)
            got = await c.getmany(timeout_ms=5000)
            assert [r.offset for r in got[TP]] == [0, 1]


# -- a partition at its end beside one with a backlog ----------------------------------------

P0 = TopicPartition("two", 0)  # empty: every fetch of it alone waits at the broker
P1 = TopicPartition("two", 1)  # a backlog of 20 batches


def _two_partitions(broker: FakeBroker) -> Any:
    """A Fetch handler answering each partition with its first batch at or after
    the offset asked, and waiting ``max_wait_ms`` only when no partition asked
    for has data, as a broker with fetch.min.bytes 1 does."""

    async def handler(header: Any, body: Any) -> Any:
        parts = []
        for t in body.topics:
            for p in t.partitions:
                tp = ("two", p.partition)
                blob = next(
                    (
                        b
                        for b in broker.logs.get(tp, [])
                        if read_batch_header(b).next_offset > p.fetch_offset
                    ),
                    b"",
                )
                parts.append((p.partition, blob))
        if not any(blob for _, blob in parts):
            await anyio.sleep(body.max_wait_ms / 1000)
        return R(
            responses=[
                R.FetchableTopicResponse(
                    topic="two",
                    topic_id=broker.topic_id("two"),
                    partitions=[
                        R.PartitionData(
                            partition_index=index,
                            high_watermark=broker.next_offset.get(("two", index), 0),
                            records=blob,
                        )
                        for index, blob in parts
                    ],
                )
            ]
        )

    return handler


def _append(broker: FakeBroker, partition: int, n: int) -> None:
    tp = ("two", partition)
    base = broker.next_offset.get(tp, 0)
    rows = [(1000 + i, None, b"p%d-%d" % (partition, base + i), ()) for i in range(n)]
    blob = bytes(set_base_offset(encode_batch(rows), base))  # type: ignore[arg-type]
    broker.logs.setdefault(tp, []).append(blob)
    broker.next_offset[tp] = base + n


def _fetched_partitions(broker: FakeBroker) -> list[set[int]]:
    return [
        {p.partition for t in body.topics for p in t.partitions}
        for key, _, body in broker.requests
        if key == 1
    ]


@asynccontextmanager
async def _backlog_beside_an_empty_partition(
    max_wait_ms: int = 60_000,
) -> AsyncIterator[tuple[FakeBroker, Any]]:
    """A consumer of P0 (empty) and P1 (20 batches of 5 records) that has taken
    one record, once P1's next batch is prefetched: both buffer slots of P1 are
    full. A fetch sent now could only ask for P0, and would wait the whole
    ``fetch.max.wait.ms`` (60 s) at the broker."""
    async with serving(FakeBroker(topics={"two": 2})) as broker:
        for _ in range(20):
            _append(broker, 1, 5)
        broker.handlers[1] = _two_partitions(broker)
        async with open_consumer(
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=max_wait_ms,
        ) as c:
            c.assign([P0, P1])
            first = await c.getmany(timeout_ms=5000, max_records=1)
            assert [r.offset for r in first[P1]] == [0]
            state = c._fetcher.partitions[P1]
            while state.prefetched is None:
                await anyio.sleep(0.005)
            yield broker, c


async def test_no_fetch_waits_at_the_broker_while_a_backlog_is_buffered() -> None:
    """Only one fetch per broker is in flight, so a fetch of P0 alone would keep
    P1 from being fetched again until the broker gives up waiting: the
    consumer would stall as soon as it had taken P1's buffered records."""
    with anyio.fail_after(30):
        async with _backlog_beside_an_empty_partition() as (broker, c):
            got = [0]
            while len(got) < 100:
                for recs in (await c.getmany(timeout_ms=20_000, max_records=3)).values():
                    got += [r.offset for r in recs]
            assert got == list(range(100))
            fetches = _fetched_partitions(broker)
    # P1 was in every fetch until its backlog was read; P0 never went alone.
    assert {0} not in fetches
    assert all(1 in f for f in fetches)


@pytest.mark.parametrize("timeout_ms", [0, 20_000])
async def test_a_poll_that_finds_nothing_fetches_what_was_held_back(timeout_ms: int) -> None:
    """Held back while P1's records wait to be taken, P0's fetch still goes out
    when the application asks for P0 alone (with or without waiting)."""
    with anyio.fail_after(30):
        async with _backlog_beside_an_empty_partition() as (broker, c):
            assert c._fetcher.held_back
            _append(broker, 0, 2)
            got: dict[TopicPartition, list[Any]] = {}
            while not got:
                got = await c.getmany(P0, timeout_ms=timeout_ms)
                await anyio.sleep(0.005)
            assert [r.value for r in got[P0]] == [b"p0-0", b"p0-1"]
            # P1's buffered records are still there, in order.
            rest = await c.getmany(P1, timeout_ms=5000, max_records=4)
            assert [r.offset for r in rest[P1]] == [1, 2, 3, 4]


async def test_a_fetch_is_held_back_no_longer_than_fetch_max_wait_ms() -> None:
    """An application slow to take P1's buffered records still gets P0's new
    records: the held fetch goes out once fetch.max.wait.ms has passed."""
    with anyio.fail_after(30):
        async with _backlog_beside_an_empty_partition(max_wait_ms=300) as (broker, c):
            assert c._fetcher.held_back
            sent = len(_fetched_partitions(broker))
            _append(broker, 0, 1)
            while len(_fetched_partitions(broker)) == sent:  # no poll meanwhile
                await anyio.sleep(0.005)
            assert _fetched_partitions(broker)[sent] == {0}
            while not c._fetcher.partitions[P0].completed:
                await anyio.sleep(0.005)
            got = await c.getmany(P0, timeout_ms=5000)
            assert [r.value for r in got[P0]] == [b"p0-0"]


async def test_pausing_the_buffered_partition_releases_the_held_fetch() -> None:
    with anyio.fail_after(30):
        async with _backlog_beside_an_empty_partition() as (broker, c):
            assert c._fetcher.held_back
            sent = len(_fetched_partitions(broker))
            _append(broker, 0, 1)
            c.pause(P1)  # its records will not be taken: nothing to hold P0 back for
            while len(_fetched_partitions(broker)) == sent:
                await anyio.sleep(0.005)
            assert _fetched_partitions(broker)[sent] == {0}
            got = await c.getmany(timeout_ms=5000)
            assert [r.value for r in got[P0]] == [b"p0-0"] and P1 not in got


# -- against brokerlite: many fetches --------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "brokerlite-fetching", num_partitions=1)


async def test_many_small_fetches_hand_out_every_record_once(
    broker: RunningBroker, anyio_backend: str
) -> None:
    bs = broker.bootstrap_servers
    topic = f"small-fetches-{anyio_backend}"
    n = 3000
    with anyio.fail_after(60):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
        async with open_producer(bootstrap_servers=bs, batch_size=2000, linger_ms=2) as p:
            for i in range(n):
                await p.send(topic, b"%06d" % i, partition=0, headers=[("i", b"%d" % i)])
        tp = TopicPartition(topic, 0)
        async with open_consumer(
            bootstrap_servers=bs,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=4096,  # a few batches per fetch
            key_deserializer=lambda k: k,
            value_deserializer=lambda v: int(v),
        ) as c:
            c.assign([tp])
            seen: list[Any] = []
            paused_once = False
            while len(seen) < n:
                got = await c.getmany(timeout_ms=5000, max_records=97)
                seen += got.get(tp, [])
                if not paused_once and len(seen) > n // 3:
                    # Paused: nothing is handed out, buffered or not.
                    c.pause(tp)
                    assert await c.getmany(timeout_ms=50) == {}
                    c.resume(tp)
                    paused_once = True
            assert [r.offset for r in seen] == list(range(n))
            assert [r.value for r in seen] == list(range(n))
            assert all(r.headers == (("i", b"%d" % r.offset),) for r in seen)
            assert await c.position(tp) == n
            # Back to the middle while later data is buffered or in flight.
            c.seek(tp, n // 2)
            again: list[Any] = []
            while len(again) < n - n // 2:
                for recs in (await c.getmany(timeout_ms=5000)).values():
                    again += recs
            assert [r.offset for r in again] == list(range(n // 2, n))
