"""The admin client's share-group offsets calls (list_share_group_offsets,
alter_share_group_offsets, delete_share_group_offsets; KIP-932 and KIP-1226)
against brokerlite, end to end with trafka's share consumer: start offsets and
lag, an alter that makes the next member start there, a delete after which the
next member starts by share.auto.offset.reset, refusals while a member is in
the group; and against a scripted broker: a loading coordinator waited out, a
transient per-topic error sending only that topic again, a v0 answer without
lag, a broker without the APIs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import anyio.abc
import pytest
from sdk_brokers import fresh, module_broker
from share_scripted_broker import ShareScriptedBroker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k90_describe_share_group_offsets as dsgo
from trafka.codec.messages import k92_delete_share_group_offsets as dlsgo
from trafka.sdk import (
    NewTopic,
    SharePartitionOffsetInfo,
    TopicPartition,
    connection_state,
    open_admin,
    open_producer,
)
from trafka.sdk.share_consumer import AcknowledgeType, ShareConsumer, open_share_consumer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(
        tmp_path_factory,
        "share-offsets",
        group_share_heartbeat_interval_ms=200,
        group_share_min_heartbeat_interval_ms=100,
    )


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def ten_records(bs: str) -> tuple[str, str]:
    """A fresh topic holding ten records (one batch) and a share group reading it
    from the start."""
    topic, group = fresh("offsets-q"), fresh("offsets-g")
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(topic, 1)])
        await admin.alter_group_configs({group: {"share.auto.offset.reset": "earliest"}})
    async with open_producer(bootstrap_servers=bs, linger_ms=10_000) as producer:
        for i in range(10):
            await producer.send(topic, b"%d" % i, partition=0)
        await producer.flush()
    return topic, group


async def poll_some(consumer: ShareConsumer, seconds: float = 30) -> list[Any]:
    with anyio.fail_after(seconds):
        while True:
            records = await consumer.poll(timeout_ms=200)
            if records:
                return records


async def test_describe_alter_delete_end_to_end(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, group = await ten_records(bs)
    tp = TopicPartition(topic, 0)
    async with open_admin(bootstrap_servers=bs) as admin:
        # A group that does not exist yet has no state (and no error, as in Kafka).
        assert await admin.list_share_group_offsets(group) == {}
        assert await admin.list_share_group_offsets(group, [tp]) == {tp: None}

        async with open_share_consumer(
            topic, bootstrap_servers=bs, group_id=group, share_acknowledgement_mode="explicit"
        ) as consumer:
            records = await poll_some(consumer)
            assert [r.offset for r in records] == list(range(10))
            for record in records[:4]:
                consumer.acknowledge(record, AcknowledgeType.ACCEPT)
            assert await consumer.commit() == {tp: None}
            # While the member is in the group, its offsets stay as they are.
            with pytest.raises(KafkaError, match=repr(group)) as caught:
                await admin.alter_share_group_offsets(group, {tp: 8})
            assert caught.value.code == ErrorCode.NON_EMPTY_GROUP
            with pytest.raises(KafkaError) as caught:
                await admin.delete_share_group_offsets(group, [topic])
            assert caught.value.code == ErrorCode.NON_EMPTY_GROUP
        # The close released 4-9 and left the group.

        assert await admin.list_share_group_offsets(group) == {
            tp: SharePartitionOffsetInfo(start_offset=4, leader_epoch=0, lag=6)
        }

        await admin.alter_share_group_offsets(group, {tp: 8})
        assert await admin.list_share_group_offsets(group, [tp]) == {
            tp: SharePartitionOffsetInfo(8, 0, 2)
        }
        async with open_share_consumer(topic, bootstrap_servers=bs, group_id=group) as consumer:
            records = await poll_some(consumer)
            assert [(r.offset, r.delivery_count) for r in records] == [(8, 1), (9, 1)]
        assert await admin.list_share_group_offsets(group) == {
            tp: SharePartitionOffsetInfo(10, 0, 0)
        }

        await admin.delete_share_group_offsets(group, [topic])
        assert await admin.list_share_group_offsets(group) == {}
        assert await admin.list_share_group_offsets(group, [tp]) == {tp: None}
        # The next member starts by share.auto.offset.reset (earliest): all ten again.
        async with open_share_consumer(topic, bootstrap_servers=bs, group_id=group) as consumer:
            got: list[Any] = []
            while len(got) < 10:
                got += await poll_some(consumer)
            assert [(r.offset, r.delivery_count) for r in got] == [(i, 1) for i in range(10)]


async def test_errors_name_what_failed(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, group = await ten_records(bs)
    tp = TopicPartition(topic, 0)
    async with open_admin(bootstrap_servers=bs) as admin:
        # An unknown group is created by the alter; the partitions that exist are set.
        with pytest.raises(KafkaError, match=f"{topic}-3") as caught:
            await admin.alter_share_group_offsets(group, {tp: 2, (topic, 3): 0})
        assert caught.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert await admin.list_share_group_offsets(group, [tp]) == {
            tp: SharePartitionOffsetInfo(2, 0, 8)
        }
        shares = await admin.list_groups(types=["share"])
        assert {(g.group_id, g.state) for g in shares} >= {(group, "Empty")}
        with pytest.raises(KafkaError, match="past the log end") as caught:
            await admin.alter_share_group_offsets(group, {tp: 11})
        assert caught.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        with pytest.raises(KafkaError, match="'nope'") as caught:
            await admin.delete_share_group_offsets(group, ["nope", topic])
        assert caught.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # The named topic that exists was deleted even so.
        assert await admin.list_share_group_offsets(group) == {}
        with pytest.raises(KafkaError, match="no offset information") as caught:
            await admin.delete_share_group_offsets(group, [topic])
        # Not share groups: a classic group, and none at all for a delete.
        classic = fresh("classic")
        await admin.alter_consumer_group_offsets(classic, {tp: 1})
        with pytest.raises(KafkaError, match="not a share group") as caught:
            await admin.alter_share_group_offsets(classic, {tp: 1})
        assert caught.value.code == ErrorCode.GROUP_ID_NOT_FOUND
        assert await admin.list_share_group_offsets(classic, [tp]) == {tp: None}
        with pytest.raises(KafkaError) as caught:
            await admin.delete_share_group_offsets(fresh("ghost"), [topic])
        assert caught.value.code == ErrorCode.GROUP_ID_NOT_FOUND
        # Nothing to do, nothing sent.
        await admin.alter_share_group_offsets(group, {})
        await admin.delete_share_group_offsets(group, [])


async def test_without_lag_on_version_0(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    bs = broker.bootstrap_servers
    topic, group = await ten_records(bs)
    tp = TopicPartition(topic, 0)
    monkeypatch.setitem(connection_state.CLIENT_VERSIONS, 90, (0, 0))
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.alter_share_group_offsets(group, {tp: 3})
        assert await admin.list_share_group_offsets(group) == {
            tp: SharePartitionOffsetInfo(3, 0, None)
        }


# -- a scripted broker -----------------------------------------------------------------------


@pytest.fixture
async def scripted() -> AsyncIterator[ShareScriptedBroker]:
    b = ShareScriptedBroker(topics={"q": 2, "r": 1})
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    b.port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, b.serve)
        yield b
        tg.cancel_scope.cancel()


async def test_a_loading_coordinator_is_waited_out(scripted: ShareScriptedBroker) -> None:
    D = dsgo.DescribeShareGroupOffsetsResponse
    answers = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]

    def describe(header: Any, body: Any) -> Any:
        (g,) = body.groups
        if answers:
            return D(
                groups=[
                    D.DescribeShareGroupOffsetsResponseGroup(
                        group_id=g.group_id, error_code=answers.pop()
                    )
                ]
            )
        part = D.DescribeShareGroupOffsetsResponsePartition
        return D(
            groups=[
                D.DescribeShareGroupOffsetsResponseGroup(
                    group_id=g.group_id,
                    topics=[
                        D.DescribeShareGroupOffsetsResponseTopic(
                            topic_name="q",
                            partitions=[
                                part(partition_index=1, start_offset=7, leader_epoch=-1, lag=-1),
                                part(partition_index=0, start_offset=-1, leader_epoch=0, lag=-1),
                            ],
                        )
                    ],
                )
            ]
        )

    scripted.handlers[90] = describe
    async with open_admin(bootstrap_servers=scripted.bootstrap, retry_backoff_ms=10) as admin:
        got = await admin.list_share_group_offsets("g")
    assert got == {
        TopicPartition("q", 0): None,
        TopicPartition("q", 1): SharePartitionOffsetInfo(7, None, None),
    }
    assert list(got) == [TopicPartition("q", 0), TopicPartition("q", 1)]
    assert [v for k, v, _ in scripted.requests if k == 90] == [1, 1]


async def test_a_transient_topic_error_sends_only_that_topic_again(
    scripted: ShareScriptedBroker,
) -> None:
    D = dlsgo.DeleteShareGroupOffsetsResponse
    sent: list[list[str]] = []

    def delete(header: Any, body: Any) -> Any:
        names = [t.topic_name for t in body.topics]
        sent.append(names)
        code = ErrorCode.KAFKA_STORAGE_ERROR if len(sent) == 1 else 0
        return D(
            responses=[
                D.DeleteShareGroupOffsetsResponseTopic(
                    topic_name=n, error_code=code if n == "r" else 0
                )
                for n in names
            ]
        )

    scripted.handlers[92] = delete
    async with open_admin(bootstrap_servers=scripted.bootstrap, retry_backoff_ms=10) as admin:
        await admin.delete_share_group_offsets("g", ["q", "r", "q"])
    assert sent == [["q", "r"], ["r"]]


async def test_a_broker_without_the_apis_says_so(scripted: ShareScriptedBroker) -> None:
    base = scripted.api_versions

    def versions(header: Any, body: Any) -> Any:
        answer = base(header, body)
        answer.api_keys[:] = [k for k in answer.api_keys if k.api_key not in (90, 91, 92)]
        return answer

    scripted.handlers[18] = versions
    async with open_admin(bootstrap_servers=scripted.bootstrap) as admin:
        for call in (
            admin.list_share_group_offsets("g"),
            admin.alter_share_group_offsets("g", {("q", 0): 1}),
            admin.delete_share_group_offsets("g", ["q"]),
        ):
            with pytest.raises(KafkaError, match=r"Kafka 4\.1") as caught:
                await call
            assert caught.value.code == ErrorCode.UNSUPPORTED_VERSION
