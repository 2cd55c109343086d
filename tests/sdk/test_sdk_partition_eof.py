"""End-of-partition events: librdkafka's ``enable.partition.eof``, in trafka's consumers.

The rule, from librdkafka's CONFIGURATION.md: ``enable.partition.eof`` (default
false) "Emit RD_KAFKA_RESP_ERR__PARTITION_EOF event whenever the consumer
reaches the end of a partition"; librdkafka's fetcher reports the end of a
Fetch answer (the high watermark, or the last stable offset under
read_committed) once per end it reaches (its ``eof_offset``), again at a newer
end, and again after the partition starts over (a seek, an assignment). In
trafka the event is a :class:`~trafka.sdk.PartitionEOF` in the record stream,
after the partition's records; without the setting no stream ever holds one.

The first tests drive the fetcher and the consumer's core with decoded Fetch
answers (no socket); the rest run the async and blocking consumers against an
in-process brokerlite.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import anyio.to_thread
import pytest
from sdk_brokers import fresh, module_broker
from sdk_metadata import one_topic_cache

from trafka.brokerlite import RunningBroker
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.records import encode_batch, encode_control_batch, set_base_offset
from trafka.sdk import ArgumentValueError, NewTopic, PartitionEOF, open_admin, open_producer
from trafka.sdk.blocking import Consumer as BlockingConsumer
from trafka.sdk.config import ConsumerConfig, make_config
from trafka.sdk.consumer import Consumer, check_commit, open_consumer
from trafka.sdk.consumer_core import ConsumerCore
from trafka.sdk.fetcher import ConsumerRecord, Fetcher, TopicPartition

pytestmark = pytest.mark.timeout(120)

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
R = fetch.FetchResponse


# -- without I/O: the fetcher and the core -------------------------------------------------------


def batch(base: int, n: int, **kw: Any) -> bytes:
    raw = encode_batch([(1000 + i, None, b"v%d" % (base + i), ()) for i in range(n)], **kw)
    return bytes(set_base_offset(raw, base))


def answer(
    f: Fetcher, tp: TopicPartition, blob: bytes | None, *, hw: int, lso: int = -1, **kw: Any
) -> bool:
    """Fetch ``tp`` at its next offset and apply an answer carrying ``blob``."""
    _, positions = f.build_fetch([tp], 12)
    part = R.PartitionData(
        partition_index=tp.partition,
        high_watermark=hw,
        last_stable_offset=lso,
        records=blob,
        **kw,
    )
    return f.handle_fetch_response(
        positions, R(responses=[R.FetchableTopicResponse(topic=tp.topic, partitions=[part])])
    )


def fetcher(**kw: Any) -> Fetcher:
    f = Fetcher(one_topic_cache("t", 2), partition_eof=True, **kw)
    f.assign([TP])
    f.seek(TP, 0)
    return f


def offsets(records: list[ConsumerRecord]) -> list[int]:
    return [r.offset for r in records]


def test_the_end_is_reported_after_the_last_record_once() -> None:
    f = fetcher()
    assert answer(f, TP, batch(0, 5), hw=5)
    assert offsets(f.take(3)[TP]) == [0, 1, 2]
    assert f.take_eofs() == []  # not at the end yet
    assert offsets(f.take(10)[TP]) == [3, 4]
    assert f.take_eofs() == [PartitionEOF("t", 0, 5)]
    assert f.take_eofs() == []  # once per end reached
    # Answers at the end with nothing new: no data, no second event.
    for _ in range(3):
        assert not answer(f, TP, None, hw=5)
        assert not f.has_data()
        assert f.take_eofs() == []


def test_a_new_end_is_reported_again_after_its_records() -> None:
    f = fetcher()
    answer(f, TP, batch(0, 2), hw=2)
    f.take(10)
    assert f.take_eofs() == [PartitionEOF("t", 0, 2)]
    assert answer(f, TP, batch(2, 3), hw=5)
    assert f.take_eofs() == []  # records first
    assert offsets(f.take(10)[TP]) == [2, 3, 4]
    assert f.take_eofs() == [PartitionEOF("t", 0, 5)]


def test_an_empty_partition_reports_its_end() -> None:
    f = fetcher()
    assert answer(f, TP, None, hw=0)  # the answer wakes the polls: an event is due
    assert f.has_data()
    assert f.take(10) == {}
    assert f.take_eofs() == [PartitionEOF("t", 0, 0)]
    assert not f.has_data()


def test_read_committed_reports_the_last_stable_offset() -> None:
    # An open transaction from offset 3: the answer's LSO is 3, its high watermark 4.
    f = fetcher(read_committed=True)
    answer(f, TP, batch(0, 3), hw=4, lso=3)
    assert offsets(f.take(10)[TP]) == [0, 1, 2]
    assert f.take_eofs() == [PartitionEOF("t", 0, 3)]


def test_an_aborted_transaction_at_the_end_reports_the_end_past_it() -> None:
    f = fetcher(read_committed=True)
    aborted = batch(0, 2, producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
    marker = bytes(
        set_base_offset(
            encode_control_batch(
                0, producer_id=9, producer_epoch=0, coordinator_epoch=0, timestamp=1
            ),
            2,
        )
    )
    aborts = [R.AbortedTransaction(producer_id=9, first_offset=0)]
    answer(f, TP, aborted + marker, hw=3, lso=3, aborted_transactions=aborts)
    assert f.take(10) == {}  # no record to hand out, the position moves past the marker
    assert f.take_eofs() == [PartitionEOF("t", 0, 3)]


def test_a_seek_or_an_assignment_reports_the_end_again() -> None:
    f = fetcher()
    answer(f, TP, batch(0, 5), hw=5)
    f.take(10)
    assert f.take_eofs() == [PartitionEOF("t", 0, 5)]
    f.seek(TP, 3)
    answer(f, TP, batch(3, 2), hw=5)
    assert offsets(f.take(10)[TP]) == [3, 4]
    assert f.take_eofs() == [PartitionEOF("t", 0, 5)]
    f.seek(TP, 5)  # at the end the last answer gave: reported at once
    assert f.has_data()
    assert f.take_eofs() == [PartitionEOF("t", 0, 5)]
    f.assign([TP, TP1])  # librdkafka's assign() starts every partition over
    assert f.take_eofs() == [PartitionEOF("t", 0, 5)]


def test_paused_partitions_report_nothing_until_resumed() -> None:
    f = fetcher()
    answer(f, TP, batch(0, 1), hw=1)
    f.take(10)
    f.pause([TP])
    assert not f.has_data() and f.take_eofs() == []
    f.resume([TP])
    assert f.take_eofs() == [PartitionEOF("t", 0, 1)]


def test_without_the_setting_there_is_no_event() -> None:
    f = Fetcher(one_topic_cache("t", 2))
    f.assign([TP, TP1])
    f.seek(TP, 0)
    f.seek(TP1, 0)
    answer(f, TP, batch(0, 2), hw=2)
    assert not answer(f, TP1, None, hw=0)  # an empty partition's answer wakes no poll
    assert offsets(f.take(10)[TP]) == [0, 1]
    assert not f.has_data()
    assert f.take_eofs() == []


def core(**settings: Any) -> ConsumerCore[Any, Any]:
    config = make_config(
        ConsumerConfig, None, {"bootstrap_servers": "h:1", "enable_partition_eof": True, **settings}
    )
    c: ConsumerCore[Any, Any] = ConsumerCore(config, one_topic_cache("t", 2))
    c.fetcher.assign([TP, TP1])
    c.fetcher.seek(TP, 0)
    c.fetcher.seek(TP1, 0)
    return c


class Seen:
    """An interceptor that keeps what ``on_consume`` saw."""

    def __init__(self) -> None:
        self.seen: list[ConsumerRecord] = []

    def on_consume(
        self, records: dict[TopicPartition, list[ConsumerRecord]]
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        for recs in records.values():
            self.seen.extend(recs)
        return records


def test_a_poll_hands_the_event_out_after_the_records_and_it_moves_no_position() -> None:
    seen = Seen()
    c = core(interceptor_classes=[seen])
    answer(c.fetcher, TP, batch(0, 3), hw=3)
    answer(c.fetcher, TP1, None, hw=0)
    c.poll_started()
    out = c.poll(100, None)
    assert offsets(out[TP]) == [0, 1, 2, 3] and type(out[TP][-1]) is PartitionEOF
    assert out[TP1] == [PartitionEOF("t", 1, 0)]
    assert all(type(r) is not PartitionEOF for r in seen.seen)  # not a record to intercept
    # The empty partition has nothing consumed to commit; the other, its records.
    assert c.consumed_offsets() == {TP: 3}
    assert c.statistics(group=None, brokers={}, telemetry=None).records_consumed == 3


def test_a_poll_of_some_partitions_reports_only_their_ends() -> None:
    c = core()
    answer(c.fetcher, TP, None, hw=0)
    answer(c.fetcher, TP1, None, hw=0)
    assert c.poll(100, {TP1}) == {TP1: [PartitionEOF("t", 1, 0)]}
    assert c.poll(100, None) == {TP: [PartitionEOF("t", 0, 0)]}


def test_one_at_a_time_the_event_follows_the_records_and_is_not_held_as_one() -> None:
    c = core()
    answer(c.fetcher, TP, batch(0, 2), hw=2)
    assert c.fill(100)
    assert c.held_count() == 2 and c.held_per_partition() == {TP: 2}
    handed = []
    while (r := c.next_record()) is not None:
        c.poll_started()
        handed.append(r)
    assert handed == [*handed[:2], PartitionEOF("t", 0, 2)] and offsets(handed) == [0, 1, 2]
    assert c.consumed_offsets() == {TP: 2}  # not 3: the event is no record
    assert not c.fill(100)  # nothing more, and no second event


def test_a_seek_drops_a_held_event_without_counting_it() -> None:
    c = core()
    answer(c.fetcher, TP, batch(0, 2), hw=2)
    c.fill(100)
    c.seek(TP, 0)
    assert c.dropped == 2


def test_an_event_is_not_a_record_to_commit() -> None:
    with pytest.raises(ArgumentValueError, match=r"TopicPartition\('t', 0\): 5\}"):
        check_commit(None, PartitionEOF("t", 0, 5))


def test_the_event_is_typed_and_tells_itself_apart() -> None:
    eof = PartitionEOF("t", 0, 5)
    assert isinstance(eof, ConsumerRecord)
    assert (eof.topic, eof.partition, eof.offset, eof.key, eof.value) == ("t", 0, 5, None, None)
    assert repr(eof) == "PartitionEOF(topic='t', partition=0, offset=5)"
    # A record with the same fields (a legacy message without a timestamp) is not it.
    record = ConsumerRecord("t", 0, 5, -1, None, None, (), -1, -1)
    assert eof != record and record != eof and record not in [eof]
    assert eof == PartitionEOF("t", 0, 5)
    assert pickle.loads(pickle.dumps(eof)) == eof


# -- against brokerlite ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "partition-eof")


async def _topic(bs: str, partitions: int = 1) -> str:
    topic = fresh("eof")
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(topic, partitions)])
    return topic


async def _produce(bs: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    async with open_producer(bootstrap_servers=bs) as producer:
        for value in values:
            await producer.send(topic, value, partition=partition)


def _eof_consumer(bs: str, **settings: Any) -> AbstractAsyncContextManager[Consumer[Any, Any]]:
    """A consumer with end-of-partition events, reading from the log start."""
    return open_consumer(
        bootstrap_servers=bs,
        auto_offset_reset="earliest",
        enable_partition_eof=True,
        fetch_max_wait_ms=50,
        **settings,
    )


def _fetches(consumer: Consumer[Any, Any]) -> int:
    """Fetch requests sent so far (every broker's session counts)."""
    sessions = consumer.statistics().fetch_sessions.values()
    return sum(s.full_fetches + s.incremental_fetches for s in sessions)


async def _until_eofs(
    consumer: Consumer[Any, Any], wanted: set[TopicPartition]
) -> dict[TopicPartition, list[ConsumerRecord]]:
    """Every item ``getmany`` hands out until each of ``wanted`` reported its end."""
    got: dict[TopicPartition, list[ConsumerRecord]] = {}
    ended: set[TopicPartition] = set()
    while not wanted <= ended:
        for tp, items in (await consumer.getmany(timeout_ms=1000)).items():
            got.setdefault(tp, []).extend(items)
            ended |= {tp for r in items if isinstance(r, PartitionEOF)}
    return got


async def _quiet(consumer: Consumer[Any, Any], fetches: int = 3) -> list[ConsumerRecord]:
    """What polls hand out while the consumer sends ``fetches`` more fetches."""
    start = _fetches(consumer)
    out: list[ConsumerRecord] = []
    while _fetches(consumer) < start + fetches:
        for items in (await consumer.getmany(timeout_ms=100)).values():
            out.extend(items)
    return out


@pytest.mark.anyio
async def test_end_after_the_records_once_then_again_after_new_ones(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    with anyio.fail_after(60):
        topic = await _topic(bs)
        tp = TopicPartition(topic, 0)
        await _produce(bs, topic, [b"a", b"b", b"c"])
        async with _eof_consumer(bs) as consumer:
            consumer.assign([tp])
            got = (await _until_eofs(consumer, {tp}))[tp]
            assert [r.value for r in got[:-1]] == [b"a", b"b", b"c"]
            assert got[-1] == PartitionEOF(topic, 0, 3)
            assert await _quiet(consumer) == []  # at the end, nothing new: no second event
            await _produce(bs, topic, [b"d", b"e"])
            got = (await _until_eofs(consumer, {tp}))[tp]
            assert [r.value for r in got[:-1]] == [b"d", b"e"]
            assert got[-1] == PartitionEOF(topic, 0, 5)
            consumer.seek(tp, 4)  # starting over reports the end again
            got = (await _until_eofs(consumer, {tp}))[tp]
            assert [r.value for r in got] == [b"e", None] and got[-1] == PartitionEOF(topic, 0, 5)
            assert consumer.consumed_offsets() == {tp: 5}  # after "e", not past the event
            assert await consumer.position(tp) == 5


@pytest.mark.anyio
async def test_an_empty_partition_reports_its_end_one_at_a_time_too(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    with anyio.fail_after(60):
        topic = await _topic(bs, 2)
        await _produce(bs, topic, [b"x"], partition=1)
        async with _eof_consumer(bs) as consumer:
            consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            items: list[ConsumerRecord] = []
            async for item in consumer:  # getone underneath
                items.append(item)
                if sum(isinstance(i, PartitionEOF) for i in items) == 2:
                    break
    ends = {(r.partition, r.offset) for r in items if isinstance(r, PartitionEOF)}
    assert ends == {(0, 0), (1, 1)}
    records = [r for r in items if not isinstance(r, PartitionEOF)]
    assert [(r.partition, r.value) for r in records] == [(1, b"x")]
    assert items.index(records[0]) < items.index(PartitionEOF(topic, 1, 1))


@pytest.mark.anyio
async def test_read_committed_ends_at_the_open_transaction(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    with anyio.fail_after(60):
        topic = await _topic(bs)
        tp = TopicPartition(topic, 0)
        await _produce(bs, topic, [b"a", b"b"])  # offsets 0, 1
        async with (
            open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as txn,
            _eof_consumer(bs, isolation_level="read_committed") as committed,
            _eof_consumer(bs) as uncommitted,
        ):
            await txn.init_transactions()
            txn.begin_transaction()
            await txn.send_and_wait(topic, b"open", partition=0)  # offset 2: LSO 2, HWM 3
            committed.assign([tp])
            uncommitted.assign([tp])
            got = (await _until_eofs(committed, {tp}))[tp]
            assert [r.value for r in got[:-1]] == [b"a", b"b"]
            assert got[-1] == PartitionEOF(topic, 0, 2)  # the last stable offset
            got = (await _until_eofs(uncommitted, {tp}))[tp]
            assert [r.value for r in got[:-1]] == [b"a", b"b", b"open"]
            assert got[-1] == PartitionEOF(topic, 0, 3)  # the high watermark
            assert await _quiet(committed) == []
            await txn.commit_transaction()  # the marker at 3: LSO 4
            got = (await _until_eofs(committed, {tp}))[tp]
            assert [r.value for r in got[:-1]] == [b"open"]
            assert got[-1] == PartitionEOF(topic, 0, 4)  # past the marker


@pytest.mark.anyio
async def test_without_the_setting_no_stream_ever_holds_an_event(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    with anyio.fail_after(60):
        topic = await _topic(bs, 2)
        await _produce(bs, topic, [b"a", b"b"])  # partition 1 stays empty
        async with open_consumer(
            config={"bootstrap.servers": bs, "auto.offset.reset": "earliest"},
            fetch_max_wait_ms=50,
        ) as consumer:
            assert not consumer.config.enable_partition_eof
            consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            items: list[ConsumerRecord] = []
            while len(items) < 2:
                for recs in (await consumer.getmany(timeout_ms=1000)).values():
                    items.extend(recs)
            items += await _quiet(consumer)  # both partitions at their ends for a while
    assert [(r.partition, r.value) for r in items] == [(0, b"a"), (0, b"b")]
    assert not any(isinstance(r, PartitionEOF) for r in items)


def test_the_blocking_consumer_hands_the_event_out_and_refuses_to_commit_it(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    topic = anyio.run(_topic, bs)
    tp = TopicPartition(topic, 0)
    anyio.run(_produce, bs, topic, [b"a", b"b"])
    conf = {
        "bootstrap.servers": bs,
        "group.id": fresh("eof-g"),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    }
    with BlockingConsumer(topic, config=conf) as consumer:
        items = []
        while not items or not isinstance(items[-1], PartitionEOF):
            item = consumer.getone(timeout_ms=1000)  # confluent-kafka's poll(1.0)
            if item is not None:
                items.append(item)
        assert [r.value for r in items] == [b"a", b"b", None]
        eof = items[-1]
        assert eof == PartitionEOF(topic, 0, 2)
        with pytest.raises(ArgumentValueError, match="end-of-partition event"):
            consumer.commit(message=eof)
        assert consumer.position(tp) == 2
        consumer.commit()  # what was consumed: the two records
        assert consumer.consumed_offsets() == {tp: 2}


# -- against librdkafka: the same events, from confluent-kafka and from trafka ---------------------

Event = tuple[str, int, int]  # ("record" or "eof", partition, offset)


def _collect(poll: Any, until: set[int]) -> list[Event]:
    """What ``poll()`` gives until each partition of ``until`` reported its end
    (at most 150 polls: the test's deadline)."""
    out: list[Event] = []
    for _ in range(150):
        event = poll()
        if event is not None:
            out.append(event)
            if event[0] == "eof":
                until.discard(event[1])
        if not until:
            return out
    raise AssertionError(f"no end of partitions {until} after {out}")


def _scenario(bs: str, topic: str, client: Any) -> list[list[Event]]:
    """Read two partitions (three records and none) to their ends, then two more
    records, then again from offset 3 after a seek, then from the end after a
    seek to it: each step's events."""
    steps = [_collect(client.poll, {0, 1})]
    anyio.run(_produce, bs, topic, [b"d", b"e"])
    steps.append(_collect(client.poll, {0}))
    client.seek(3)
    steps.append(_collect(client.poll, {0}))
    client.seek(5)
    steps.append(_collect(client.poll, {0}))
    return steps


class _Librdkafka:
    def __init__(self, bs: str, topic: str, isolation: str = "read_uncommitted") -> None:
        import confluent_kafka as ck

        self.ck, self.topic = ck, topic
        self.consumer = ck.Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": fresh("eof-ck"),
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 50,
                "isolation.level": isolation,
            }
        )
        self.consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in (0, 1)])

    def poll(self) -> Event | None:
        msg = self.consumer.poll(0.2)
        if msg is None:
            return None
        error = msg.error()
        if error is not None:
            assert error.code() == self.ck.KafkaError._PARTITION_EOF, error
            return ("eof", msg.partition(), msg.offset())
        return ("record", msg.partition(), msg.offset())

    def seek(self, offset: int) -> None:
        self.consumer.seek(self.ck.TopicPartition(self.topic, 0, offset))


class _Trafka:
    def __init__(self, bs: str, topic: str, isolation: str = "read_uncommitted") -> None:
        self.topic = topic
        self.consumer: BlockingConsumer[Any, Any] = BlockingConsumer(
            config={
                "bootstrap.servers": bs,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 50,
                "isolation.level": isolation,
            }
        )
        self.consumer.assign([TopicPartition(topic, p) for p in (0, 1)])

    def poll(self) -> Event | None:
        item = self.consumer.getone(timeout_ms=200)
        if item is None:
            return None
        kind = "eof" if isinstance(item, PartitionEOF) else "record"
        return (kind, item.partition, item.offset)

    def seek(self, offset: int) -> None:
        self.consumer.seek(TopicPartition(self.topic, 0), offset)


def test_the_same_ends_as_librdkafka(broker: RunningBroker) -> None:
    pytest.importorskip("confluent_kafka")
    bs = broker.bootstrap_servers
    heard: dict[str, list[list[Event]]] = {}
    for name, make in (("librdkafka", _Librdkafka), ("trafka", _Trafka)):
        topic = anyio.run(_topic, bs, 2)
        anyio.run(_produce, bs, topic, [b"a", b"b", b"c"])
        client = make(bs, topic)
        try:
            heard[name] = _scenario(bs, topic, client)
        finally:
            client.consumer.close()

    def per_partition(events: list[Event]) -> dict[int, list[Event]]:
        return {p: [e for e in events if e[1] == p] for p in (0, 1)}

    expected = [
        {0: [("record", 0, 0), ("record", 0, 1), ("record", 0, 2), ("eof", 0, 3)],
         1: [("eof", 1, 0)]},
        {0: [("record", 0, 3), ("record", 0, 4), ("eof", 0, 5)], 1: []},
        {0: [("record", 0, 3), ("record", 0, 4), ("eof", 0, 5)], 1: []},
        {0: [("eof", 0, 5)], 1: []},
    ]  # fmt: skip
    for name, steps in heard.items():
        assert [per_partition(step) for step in steps] == expected, name


@pytest.mark.parametrize("client", [_Librdkafka, _Trafka])
def test_read_committed_ends_where_librdkafka_ends(broker: RunningBroker, client: Any) -> None:
    if client is _Librdkafka:
        pytest.importorskip("confluent_kafka")
    bs = broker.bootstrap_servers
    topic = anyio.run(_topic, bs)
    anyio.run(_produce, bs, topic, [b"a", b"b"])
    steps: list[list[Event]] = []

    async def in_a_transaction() -> None:
        async with open_producer(bootstrap_servers=bs, transactional_id=fresh("tx")) as txn:
            await txn.init_transactions()
            txn.begin_transaction()
            await txn.send_and_wait(topic, b"open", partition=0)  # offset 2
            await anyio.to_thread.run_sync(lambda: steps.append(_collect(reader.poll, {0})))
            await txn.commit_transaction()  # the marker at 3

    reader = client(bs, topic, "read_committed")
    try:
        anyio.run(in_a_transaction)
        steps.append(_collect(reader.poll, {0}))
    finally:
        reader.consumer.close()
    assert steps == [
        [("record", 0, 0), ("record", 0, 1), ("eof", 0, 2)],  # the last stable offset
        [("record", 0, 2), ("eof", 0, 4)],  # past the marker
    ]
