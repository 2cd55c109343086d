"""Producer and consumer interceptors against an in-process brokerlite.

Semantics checked are Java's (KIP-42; the javadoc of
``org.apache.kafka.clients.producer.ProducerInterceptor`` and
``org.apache.kafka.clients.consumer.ConsumerInterceptor``): ``onSend`` runs
before serialization and partitioning and its record is what is sent;
``onAcknowledgement`` runs once per record, delivered or failed (a failure in
``send()`` itself included); ``onConsume`` before records reach the
application; ``onCommit`` after a successful commit; ``close`` at close; what
an interceptor throws is logged and fails neither the send nor the poll.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import blocking
from trafka.sdk.admin import NewTopic, open_admin
from trafka.sdk.config import ConsumerConfig, ProducerConfig
from trafka.sdk.consumer import TopicPartition, open_consumer
from trafka.sdk.errors import ConfigError
from trafka.sdk.interceptors import ConsumerInterceptor, ProducerInterceptor, ProducerRecord
from trafka.sdk.producer import open_producer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "interceptors")


class Counting(ProducerInterceptor, ConsumerInterceptor):
    """Records what every hook saw; the instances made from ``interceptor.classes``
    are in :attr:`made`, each with the config it was configured with."""

    made: list[Counting] = []

    def __init__(self) -> None:
        self.sent: list[ProducerRecord] = []
        self.acks: list[tuple[Any, BaseException | None]] = []
        self.consumed: list[tuple[TopicPartition, int, Any]] = []
        self.commits: list[dict[TopicPartition, int]] = []
        self.closed = 0
        self.config: Any = None
        Counting.made.append(self)

    def configure(self, config: Any) -> None:
        self.config = config

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        self.sent.append(record)
        return record

    def on_acknowledgement(self, metadata: Any, error: BaseException | None) -> None:
        self.acks.append((metadata, error))

    def on_consume(self, records: dict[Any, list[Any]]) -> dict[Any, list[Any]]:
        for tp, recs in records.items():
            self.consumed.extend((tp, r.offset, r.value) for r in recs)
        return records

    def on_commit(self, offsets: dict[Any, int]) -> None:
        self.commits.append(offsets)

    def close(self) -> None:
        self.closed += 1


class Raising:
    """Every hook raises (duck-typed: no base class)."""

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        raise RuntimeError("on_send broke")

    def on_acknowledgement(self, metadata: Any, error: BaseException | None) -> None:
        raise RuntimeError("on_acknowledgement broke")

    def on_consume(self, records: dict[Any, list[Any]]) -> dict[Any, list[Any]]:
        raise RuntimeError("on_consume broke")

    def on_commit(self, offsets: dict[Any, int]) -> None:
        raise RuntimeError("on_commit broke")

    def close(self) -> None:
        raise RuntimeError("close broke")


class Shouting(ProducerInterceptor):
    """Sends every value upper-cased, with a header saying so."""

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        return dataclasses.replace(
            record, value=record.value.upper(), headers=[("shouted", b"yes")]
        )


async def _topic(bs: str, partitions: int = 1, **configs: str) -> str:
    name = fresh("icpt")
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(name, partitions, configs=configs)])
    return name


def _place(metadata: Any) -> tuple[str, int, int]:
    return metadata.topic, metadata.partition, metadata.offset


async def _read(bs: str, topic: str, n: int) -> list[Any]:
    out: list[Any] = []
    # 50 ms fetches: the close waits for the fetch the broker holds (#60)
    async with open_consumer(
        bootstrap_servers=bs, auto_offset_reset="earliest", fetch_max_wait_ms=50
    ) as c:
        c.assign([TopicPartition(topic, 0)])
        while len(out) < n:
            for recs in (await c.getmany(timeout_ms=2000)).values():
                out.extend(recs)
    return out


# -- configuration ---------------------------------------------------------------------------


def test_interceptor_classes_take_import_paths_classes_and_objects() -> None:
    obj = Raising()
    for spelling in (f"{__name__}:Counting", f"{__name__}.Counting", Counting):
        config = ProducerConfig.from_dict({"interceptor.classes": spelling})
        assert config.interceptor_classes == (Counting,)
    config = ConsumerConfig(interceptor_classes=[f"{__name__}:Counting", obj])
    assert config.interceptor_classes == (Counting, obj)
    assert ProducerConfig().interceptor_classes == ()


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("no_such_module_xyz:Thing", r"interceptor\.classes: cannot import 'no_such_module_xyz'"),
        (f"{__name__}:Missing", r"has no 'Missing'"),
        ("Counting", r"not an import path"),
        (ConsumerInterceptor, r"none of on_send, on_acknowledgement"),  # a consumer's
        (42, r"none of on_send"),
    ],
)
def test_bad_interceptor_classes_are_refused_naming_the_key(value: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ProducerConfig.from_dict({"interceptor.classes": value})


def test_the_hot_path_is_only_taken_without_interceptors() -> None:
    from trafka.sdk.metadata import MetadataCache
    from trafka.sdk.producer_core import ProducerCore

    assert ProducerCore(ProducerConfig(), MetadataCache(), lambda: 0.0).hot_path
    with_one = ProducerConfig(interceptor_classes=[Counting])
    assert not ProducerCore(with_one, MetadataCache(), lambda: 0.0).hot_path


# -- producer --------------------------------------------------------------------------------


async def test_counting_interceptor_sees_every_send_and_acknowledgement(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    Counting.made.clear()
    with anyio.fail_after(60):
        topic = await _topic(bs, 2, **{"max.message.bytes": "1000"})
        config = {"bootstrap.servers": bs, "interceptor.classes": f"{__name__}:Counting"}
        async with open_producer(config) as producer:
            futures = [await producer.send(topic, b"v%d" % i, partition=i % 2) for i in range(10)]
            assert producer.try_send(topic, b"x") is None  # interceptors take no shortcut
            # Refused in send() itself: a partition the topic does not have.
            with pytest.raises(KafkaError) as refused:
                await producer.send(topic, b"nowhere", partition=5)
            # Refused by the broker later: larger than the topic's max.message.bytes.
            too_large = await producer.send(topic, b"x" * 2000, partition=1)
            with pytest.raises(KafkaError) as late:
                await too_large
            metas = [await f for f in futures]
            (counter,) = Counting.made
            assert counter.closed == 0
        assert counter.closed == 1
    assert late.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert refused.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert isinstance(counter.config, ProducerConfig)
    assert counter.config.bootstrap_servers == (bs,)
    assert [r.value for r in counter.sent] == [b"v%d" % i for i in range(10)] + [
        b"nowhere",
        b"x" * 2000,
    ]
    delivered = [(m, e) for m, e in counter.acks if e is None]
    failed = [(m, e) for m, e in counter.acks if e is not None]
    assert sorted((m for m, _ in delivered), key=_place) == sorted(metas, key=_place)  # once each
    assert len(counter.acks) == 12
    by_error = {id(e): m for m, e in failed}
    assert by_error.keys() == {id(refused.value), id(late.value)}
    assert (by_error[id(refused.value)].topic, by_error[id(refused.value)].partition) == (topic, 5)
    assert by_error[id(refused.value)].offset == -1
    assert (by_error[id(late.value)].partition, by_error[id(late.value)].offset) == (1, -1)


async def test_an_interceptor_that_raises_fails_no_send_or_poll(
    broker: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    bs = broker.bootstrap_servers
    caplog.set_level(logging.WARNING, logger="trafka.sdk.interceptors")
    group = fresh("g")
    with anyio.fail_after(60):
        topic = await _topic(bs)
        async with open_producer(bootstrap_servers=bs, interceptor_classes=[Raising()]) as p:
            metas = [await p.send_and_wait(topic, b"v%d" % i) for i in range(5)]
        assert [m.offset for m in metas] == list(range(5))
        got: list[Any] = []
        async with open_consumer(
            topic,
            bootstrap_servers=bs,
            group_id=group,
            auto_offset_reset="earliest",
            interceptor_classes=[Raising],
        ) as c:
            while len(got) < 5:
                for recs in (await c.getmany(timeout_ms=2000)).values():
                    got.extend(recs)
            await c.commit()
            assert await c.committed(TopicPartition(topic, 0)) == 5
    assert [r.value for r in got] == [b"v%d" % i for i in range(5)]
    logged = {r.getMessage().split(": ", 1)[1] for r in caplog.records}
    for hook in ("on_send", "on_acknowledgement", "on_consume", "on_commit", "close()"):
        assert any(m.startswith(hook) for m in logged), (hook, logged)
    assert all(r.exc_info is not None for r in caplog.records)  # with the traceback


async def test_a_record_modified_in_on_send_is_what_the_broker_has(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    Counting.made.clear()
    with anyio.fail_after(60):
        topic = await _topic(bs)
        counting = Counting()
        # In order: the counter after Shouting sees the shouted record.
        async with open_producer(
            bootstrap_servers=bs, interceptor_classes=[Shouting, counting]
        ) as p:
            meta = await p.send_and_wait(topic, b"quiet please", key=b"k")
        records = await _read(bs, topic, 1)
    assert [r.value for r in counting.sent] == [b"QUIET PLEASE"]
    assert meta.serialized_value_size == len(b"QUIET PLEASE")
    (record,) = records
    assert (record.key, record.value, record.offset) == (b"k", b"QUIET PLEASE", meta.offset)
    assert list(record.headers) == [("shouted", b"yes")]
    assert counting.closed == 1  # an object given is closed with its client


# -- consumer --------------------------------------------------------------------------------


async def test_counting_interceptor_sees_every_record_and_successful_commit(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    group = fresh("g")
    Counting.made.clear()
    with anyio.fail_after(60):
        topic = await _topic(bs, 2)
        async with open_producer(bootstrap_servers=bs) as p:
            for i in range(10):
                await p.send(topic, b"v%d" % i, partition=i % 2)
        handed: list[Any] = []
        async with open_consumer(
            topic,
            bootstrap_servers=bs,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            interceptor_classes=f"{__name__}:Counting",
        ) as c:
            while len(handed) < 4:  # getone and iteration, then getmany
                handed.append(await c.getone())
            while len(handed) < 10:
                for recs in (await c.getmany(timeout_ms=2000)).values():
                    handed.extend(recs)
            await c.commit()
            (counter,) = Counting.made
            committed = {
                tp: await c.committed(tp)
                for tp in (TopicPartition(topic, 0), TopicPartition(topic, 1))
            }
    assert isinstance(counter.config, ConsumerConfig)
    assert sorted(counter.consumed) == sorted(
        (TopicPartition(r.topic, r.partition), r.offset, r.value) for r in handed
    )
    assert len(counter.consumed) == 10
    assert counter.commits == [committed] and set(committed.values()) == {5}
    assert counter.closed == 1


def test_blocking_clients_run_their_interceptors(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    with blocking.Admin(bootstrap_servers=bs) as admin:
        topic = fresh("icpt-blk")
        admin.create_topics([NewTopic(topic, 1)])
    counting = Counting()
    with blocking.Producer(bootstrap_servers=bs, interceptor_classes=[Shouting, counting]) as p:
        futures = [p.send(topic, b"v%d" % i) for i in range(20)]
        with pytest.raises(KafkaError):
            p.send(topic, b"nowhere", partition=3).result(timeout=30)
        p.flush()
        metas = [f.result(timeout=0) for f in futures]
    delivered = [m for m, e in counting.acks if e is None]
    assert sorted(delivered, key=_place) == sorted(metas, key=_place)
    assert [e.code for m, e in counting.acks if e is not None] == [  # type: ignore[attr-defined]
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    ]
    assert len(counting.acks) == 21 and counting.closed == 1
    reader = Counting()
    with blocking.Consumer(
        bootstrap_servers=bs,
        auto_offset_reset="earliest",
        consumer_timeout_ms=1500,
        interceptor_classes=[reader],
    ) as c:
        c.assign([TopicPartition(topic, 0)])
        values = [r.value for r in c]
    assert values == [b"V%d" % i for i in range(20)]
    assert [v for _, _, v in reader.consumed] == values
    assert reader.closed == 1
