"""The share consumer's driver against a scripted share broker
(:mod:`share_scripted_broker`), under trio and asyncio: what goes on the wire
(session epochs, piggy-backed acknowledgements, closing order), implicit and
explicit acknowledgement, redelivery, commits and their callback, session and
member errors, deserialization failures and configuration errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from sdk_fakebroker import FakeBroker, serving
from share_scripted_broker import ShareScriptedBroker

from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k79_share_acknowledge as sa
from trafka.sdk import ConfigError, SerializationError, UsageError, open_producer
from trafka.sdk.connection_state import CLIENT_VERSIONS
from trafka.sdk.errors import ClientClosedError
from trafka.sdk.fetcher import TopicPartition
from trafka.sdk.share_consumer import AcknowledgeType, ShareConsumer, open_share_consumer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


@pytest.fixture
async def broker() -> AsyncIterator[ShareScriptedBroker]:
    async with serving(ShareScriptedBroker(topics={"q": 2})) as b:
        yield b


async def produce(broker: FakeBroker, n: int, topic: str = "q", partitions: int = 2) -> None:
    async with open_producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(n):
            await producer.send(
                topic, b"v%d" % i, key=b"k%d" % i, partition=i % partitions, headers={"h": b"x"}
            )


def settings(broker: FakeBroker, **kw: Any) -> dict[str, Any]:
    return {"bootstrap_servers": broker.bootstrap, "group_id": "g", **kw}


async def drain(consumer: ShareConsumer, want: int, **kw: Any) -> list[Any]:
    got: list[Any] = []
    with anyio.fail_after(15):
        while len(got) < want:
            got += await consumer.poll(timeout_ms=200)
    return got


def share_requests(broker: FakeBroker, key: int) -> list[Any]:
    return [body for k, _, body in broker.requests if k == key]


def acks(broker: ShareScriptedBroker) -> dict[tuple[int, int], list[int]]:
    """(partition, offset) -> the acknowledgement types the broker applied, in order."""
    out: dict[tuple[int, int], list[int]] = {}
    for _, p, o, kind, _ in broker.acknowledgements:
        out.setdefault((p, o), []).append(kind)
    return out


async def test_implicit_mode_accepts_every_record_once(broker: ShareScriptedBroker) -> None:
    await produce(broker, 10)
    async with open_share_consumer("q", **settings(broker, max_poll_records=3)) as consumer:
        got = await drain(consumer, 10)
        assert consumer.acquisition_lock_timeout_ms == broker.lock_ms
        assert consumer.assignment() == {TopicPartition("q", 0), TopicPartition("q", 1)}
    assert sorted(r.value for r in got) == [b"v%d" % i for i in range(10)]
    first = got[0]
    assert first.delivery_count == 1 and first.headers == (("h", b"x"),)
    assert first.key == b"k%d" % int(first.value[1:]) and first.timestamp > 0
    assert acks(broker) == {(p, o): [ACCEPT] for p in (0, 1) for o in range(5)}
    fetches = share_requests(broker, 78)
    assert fetches[0].share_session_epoch == 0
    assert [f.share_session_epoch for f in fetches[1:4]] == [1, 2, 3]
    assert fetches[0].max_records == 3 and fetches[0].batch_size == 3


async def test_acknowledgements_ride_on_fetches_and_close_comes_before_leaving(
    broker: ShareScriptedBroker,
) -> None:
    await produce(broker, 2, partitions=1)
    async with open_share_consumer("q", **settings(broker)) as consumer:
        await drain(consumer, 2)
        await consumer.poll(timeout_ms=300)  # accepts both, on the next fetch
    carried = [
        p.acknowledgement_batches
        for f in share_requests(broker, 78)
        for t in f.topics
        for p in t.partitions
        if p.acknowledgement_batches
    ]
    assert [(b.first_offset, b.last_offset, b.acknowledge_types) for b in carried[0]] == [
        (0, 1, [1])
    ]
    order = [
        (k, b.share_session_epoch if k == 79 else b.member_epoch)
        for k, _, b in broker.requests
        if k in (76, 79)
    ]
    # The session closes (epoch -1), then the member leaves (epoch -1), last.
    assert order[-1] == (76, -1) and order.index((79, -1)) < len(order) - 1


async def test_a_heartbeat_still_on_its_way_reaches_the_coordinator_before_the_leave(
    broker: ShareScriptedBroker,
) -> None:
    # A heartbeat handed out just before close() waits for its connection; the leave
    # must not overtake it (the coordinator would take the member as unknown).
    async with open_share_consumer("q", **settings(broker)) as consumer:
        with anyio.fail_after(10):
            while not consumer.assignment():
                await consumer.poll(timeout_ms=50)
        cluster = consumer.cluster
        plain = cluster.coordinator_connection
        slow = [0.5]

        async def slow_once(coordinator: Any) -> Any:
            if slow:
                await anyio.sleep(slow.pop())
            return await plain(coordinator)

        cluster.coordinator_connection = slow_once  # type: ignore[method-assign]
        with anyio.fail_after(10):
            while slow:  # the next heartbeat takes the slow path
                await anyio.sleep(0.01)
    beats = [(b.member_epoch, b.member_id) for k, _, b in broker.requests if k == 76]
    assert beats[-1][0] == -1 and beats[-2][0] > 0
    assert beats[-1][1] == beats[-2][1] and not broker.members


async def test_two_members_never_get_the_same_record(broker: ShareScriptedBroker) -> None:
    await produce(broker, 40)
    seen: list[bytes] = []
    async with (
        open_share_consumer("q", **settings(broker, max_poll_records=5)) as a,
        open_share_consumer("q", **settings(broker, max_poll_records=5)) as b,
    ):
        with anyio.fail_after(20):
            while len(seen) < 40:
                for c in (a, b):
                    seen += [r.value for r in await c.poll(timeout_ms=50)]
        assert a.member_id != b.member_id
    assert sorted(seen) == sorted(b"v%d" % i for i in range(40))


async def test_explicit_release_redelivers_and_reject_never_does(
    broker: ShareScriptedBroker,
) -> None:
    await produce(broker, 2, partitions=1)
    async with open_share_consumer(
        "q", **settings(broker, share_acknowledgement_mode="explicit")
    ) as consumer:
        first = await drain(consumer, 2)
        by_value = {r.value: r for r in first}
        consumer.acknowledge(by_value[b"v0"], type=RELEASE)
        with pytest.raises(UsageError, match="not acknowledged"):
            await consumer.poll(timeout_ms=0)  # v1 is not acknowledged yet
        consumer.acknowledge_offset("q", 0, by_value[b"v1"].offset, type=REJECT)
        [again] = await drain(consumer, 1)
        assert (again.value, again.delivery_count) == (b"v0", 2)
        consumer.acknowledge(again)  # ACCEPT
        assert await consumer.poll(timeout_ms=300) == []
        assert await consumer.commit() == {}  # everything already sent
    assert acks(broker) == {(0, 0): [RELEASE, ACCEPT], (0, 1): [REJECT]}


async def test_implicit_mode_refuses_explicit_acknowledgements(
    broker: ShareScriptedBroker,
) -> None:
    await produce(broker, 1, partitions=1)
    async with open_share_consumer("q", **settings(broker)) as consumer:
        [record] = await drain(consumer, 1)
        with pytest.raises(UsageError, match="implicit"):
            consumer.acknowledge(record)


async def test_commit_returns_per_partition_outcomes_and_feeds_the_callback(
    broker: ShareScriptedBroker,
) -> None:
    await produce(broker, 4)
    calls: list[tuple[dict[TopicPartition, set[int]], Any]] = []
    async with open_share_consumer(
        "q", **settings(broker, share_acknowledgement_mode="explicit")
    ) as consumer:
        consumer.set_acknowledgement_commit_callback(
            lambda offsets, error: calls.append((offsets, error))
        )
        got = await drain(consumer, 4)
        for r in got:
            consumer.acknowledge(r, type=ACCEPT if r.partition == 0 else REJECT)
        assert await consumer.commit() == {
            TopicPartition("q", 0): None,
            TopicPartition("q", 1): None,
        }
        assert sorted((next(iter(c[0].items())), c[1]) for c in calls) == [
            ((TopicPartition("q", 0), {0, 1}), None),
            ((TopicPartition("q", 1), {0, 1}), None),
        ]
        assert await consumer.commit() == {}
    assert acks(broker) == {(0, 0): [ACCEPT], (0, 1): [ACCEPT], (1, 0): [REJECT], (1, 1): [REJECT]}


async def test_commit_reports_a_partition_the_broker_refused(broker: ShareScriptedBroker) -> None:
    await produce(broker, 1, partitions=1)

    def refuse(header: Any, body: Any) -> Any:
        R = sa.ShareAcknowledgeResponse
        if body.share_session_epoch == -1:
            return broker.share_ack(header, body)
        next_epoch, parts = broker.sessions[body.member_id]
        broker.sessions[body.member_id] = (next_epoch + 1, parts)
        return R(
            responses=[
                R.ShareAcknowledgeTopicResponse(
                    topic_id=t.topic_id,
                    partitions=[
                        R.PartitionData(
                            partition_index=p.partition_index,
                            error_code=ErrorCode.INVALID_RECORD_STATE,
                        )
                        for p in t.partitions
                    ],
                )
                for t in body.topics
            ]
        )

    broker.handlers[79] = refuse
    async with open_share_consumer("q", **settings(broker)) as consumer:
        await drain(consumer, 1)
        pending = consumer.commit_async()
        result = await pending
        assert pending.done()
        error = result[TopicPartition("q", 0)]
        assert isinstance(error, KafkaError) and error.code == ErrorCode.INVALID_RECORD_STATE


async def test_a_lost_share_session_fails_the_acknowledgements_it_carried(
    broker: ShareScriptedBroker,
) -> None:
    await produce(broker, 2, partitions=1)
    failed: list[Any] = []
    async with open_share_consumer("q", **settings(broker)) as consumer:
        consumer.set_acknowledgement_commit_callback(lambda offsets, error: failed.append(error))
        await drain(consumer, 2)
        broker.next_fetch_error.append(ErrorCode.SHARE_SESSION_NOT_FOUND)
        await consumer.poll(timeout_ms=500)  # its acceptance rides on the refused fetch
        await consumer.poll(timeout_ms=100)  # the callback runs in poll
        assert failed and failed[0].code == ErrorCode.SHARE_SESSION_NOT_FOUND
    epochs = [f.share_session_epoch for f in share_requests(broker, 78)]
    assert epochs[:3] == [0, 1, 0]  # the session started again


async def test_an_undeserializable_record_is_released_and_raised(
    broker: ShareScriptedBroker,
) -> None:
    await produce(broker, 3, partitions=1)

    def picky(value: bytes | None) -> str:
        if value == b"v1":
            raise ValueError("not this one")
        return (value or b"").decode()

    async with open_share_consumer("q", **settings(broker, value_deserializer=picky)) as consumer:
        first = await consumer.poll(timeout_ms=5000)
        assert [r.value for r in first] == ["v0"]
        with pytest.raises(SerializationError, match="offset 1"):
            await consumer.poll(timeout_ms=5000)
        rest = await consumer.poll(timeout_ms=5000)
        assert [r.value for r in rest] == ["v2"]
    assert acks(broker)[(0, 1)][0] == RELEASE


async def test_async_iteration_and_closing_releases_what_explicit_mode_left(
    broker: ShareScriptedBroker,
) -> None:
    await produce(broker, 3, partitions=1)
    async with open_share_consumer(
        "q", **settings(broker, share_acknowledgement_mode="explicit")
    ) as consumer:
        with anyio.fail_after(10):
            async for record in consumer:
                if record.offset == 0:
                    consumer.acknowledge(record)
                if record.offset == 2:
                    break
    assert acks(broker) == {(0, 0): [ACCEPT], (0, 1): [RELEASE], (0, 2): [RELEASE]}


async def test_a_block_left_by_an_exception_releases_instead_of_accepting(
    broker: ShareScriptedBroker,
) -> None:
    await produce(broker, 2, partitions=1)
    with pytest.raises(RuntimeError, match="boom"):
        async with open_share_consumer("q", **settings(broker)) as consumer:
            await drain(consumer, 2)
            raise RuntimeError("boom")
    assert acks(broker) == {(0, 0): [RELEASE], (0, 1): [RELEASE]}


async def test_a_fenced_member_rejoins_with_its_own_id(broker: ShareScriptedBroker) -> None:
    await produce(broker, 1, partitions=1)
    async with open_share_consumer("q", **settings(broker)) as consumer:
        await drain(consumer, 1)
        broker.next_heartbeat_error.append(ErrorCode.FENCED_MEMBER_EPOCH)
        with anyio.fail_after(10):
            while sum(1 for b in share_requests(broker, 76) if b.member_epoch == 0) < 2:
                await consumer.poll(timeout_ms=50)
        joins = [b for b in share_requests(broker, 76) if b.member_epoch == 0]
        assert {b.member_id for b in joins} == {consumer.member_id}
        assert joins[1].subscribed_topic_names == ["q"]
        with anyio.fail_after(10):
            while not consumer.assignment():
                await consumer.poll(timeout_ms=50)


async def test_closed_and_unopened_consumers_refuse_calls(broker: ShareScriptedBroker) -> None:
    consumer = ShareConsumer(**settings(broker))
    with pytest.raises(UsageError, match="not open"):
        await consumer.poll(timeout_ms=0)
    async with consumer:
        with pytest.raises(UsageError, match="not subscribed"):
            await consumer.poll(timeout_ms=0)
        consumer.subscribe(["q"])
    with pytest.raises(ClientClosedError):
        await consumer.poll(timeout_ms=0)
    with pytest.raises(TypeError, match="topics"):
        consumer.subscribe("q")  # a string, not a list


async def test_a_consumer_whose_start_failed_half_way_is_not_open(
    broker: ShareScriptedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure while the consumer sets itself up (after its cluster exists) leaves
    a consumer that says it is not open, not one that raises AttributeError."""
    import trafka.sdk.share_consumer as module

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("the fetch driver could not be made")

    monkeypatch.setattr(module, "ShareFetchDriver", broken)
    consumer = ShareConsumer(**settings(broker))
    with pytest.raises(RuntimeError, match="fetch driver"):
        async with consumer:
            pass
    with pytest.raises(UsageError, match="not open"):
        await consumer.client_instance_id()
    with pytest.raises(UsageError):
        consumer.statistics()
    await consumer.close()  # nothing to close


def test_configuration_errors_name_the_problem() -> None:
    with pytest.raises(ConfigError, match=r"group\.id"):
        ShareConsumer(bootstrap_servers="localhost:9092")
    with pytest.raises(ConfigError, match=r"share\.auto\.offset\.reset"):
        ShareConsumer({"group.id": "g", "auto.offset.reset": "earliest"})
    with pytest.raises(ConfigError, match=r"share\.acknowledgement\.mode"):
        ShareConsumer(group_id="g", share_acknowledgement_mode="sometimes")
    with pytest.raises(ConfigError, match=r"unknown configuration key 'max\.pol\.records'"):
        ShareConsumer({"group.id": "g", "max.pol.records": 5})
    consumer = ShareConsumer(
        {"group.id": "g", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256"},
        sasl_username="u",
        sasl_password="p",
    )
    assert consumer.config.uses_sasl and consumer.config.uses_tls


async def test_a_broker_without_share_groups_fails_the_poll_clearly() -> None:
    plain = FakeBroker(topics={"q": 1})
    base = plain.api_versions

    def versions(header: Any, body: Any) -> Any:
        answer = base(header, body)
        answer.api_keys[:] = [k for k in answer.api_keys if k.api_key not in (76, 77, 78, 79)]
        return answer

    plain.handlers[18] = versions
    plain.handlers[10] = ShareScriptedBroker.find_coordinator.__get__(plain)
    assert 76 in CLIENT_VERSIONS
    async with serving(plain) as b, open_share_consumer("q", **settings(b)) as consumer:
        with anyio.fail_after(10), pytest.raises(KafkaError, match="KIP-932"):
            while True:
                await consumer.poll(timeout_ms=100)


async def test_statistics_count_deliveries_and_acknowledgements(
    broker: ShareScriptedBroker,
) -> None:
    await produce(broker, 3, partitions=1)
    async with open_share_consumer(
        "q", **settings(broker, share_acknowledgement_mode="explicit")
    ) as consumer:
        records = await drain(consumer, 3)
        consumer.acknowledge(records[0])
        consumer.acknowledge(records[1], type=REJECT)
        consumer.acknowledge(records[2], type=RELEASE)
        await consumer.commit()
        stats = consumer.statistics()
        assert stats.records_delivered == 3
        assert stats.acknowledged == {"ACCEPT": 1, "RELEASE": 1, "REJECT": 1}
        assert stats.acknowledgements_failed == {}
        assert stats.member_id == consumer.member_id and stats.member_epoch > 0
        assert stats.joins == 1 and stats.assignment == {
            TopicPartition("q", 0),
            TopicPartition("q", 1),
        }
        assert stats.share_sessions[0] > 0
        assert stats.acquisition_lock_timeout_ms == broker.lock_ms
        assert stats.brokers[0].apis["ShareFetch"].requests >= 1
