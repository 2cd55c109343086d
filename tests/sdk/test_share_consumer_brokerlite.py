"""trafka's share consumer (KIP-932) against brokerlite, end to end: records
produced once go to exactly one of two members; RELEASE delivers again with
delivery_count 2; REJECT never delivers again; a member that closes without
acknowledging gives its records back; a group without share.auto.offset.reset
starts at the log end; the admin calls for share groups (describe, list by
type, group configs); and the blocking share consumer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from sdk_brokers import SHARE_HEARTBEATS, fresh, module_broker, produce, share_queue

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import TopicPartition, open_admin
from trafka.sdk.blocking import ShareConsumer as BlockingShareConsumer
from trafka.sdk.share_consumer import AcknowledgeType, ShareConsumer, open_share_consumer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "share-consumer", **SHARE_HEARTBEATS)


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def poll_until(consumer: ShareConsumer, n: int, seconds: float = 30) -> list[Any]:
    got: list[Any] = []
    with anyio.fail_after(seconds):
        while len(got) < n:
            got += await consumer.poll(timeout_ms=200)
    return got


async def test_each_record_goes_to_exactly_one_of_two_members(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, group = await share_queue(bs, partitions=3)
    values = [b"r%d" % i for i in range(90)]
    await produce(bs, topic, values, partitions=3)
    per_member: dict[str, list[bytes]] = {}
    async with (
        open_share_consumer(topic, bootstrap_servers=bs, group_id=group, max_poll_records=7) as a,
        open_share_consumer(topic, bootstrap_servers=bs, group_id=group, max_poll_records=7) as b,
    ):
        with anyio.fail_after(60):
            # a holds its first batch (nothing more is fetched for it meanwhile)
            # until b has records of its own: both members take part.
            for c in (a, b):
                while not per_member.get(str(c.member_id)):
                    records = await c.poll(timeout_ms=100)
                    per_member.setdefault(str(c.member_id), []).extend(r.value for r in records)
            while sum(map(len, per_member.values())) < len(values):
                for c in (a, b):
                    records = await c.poll(timeout_ms=100)
                    per_member.setdefault(str(c.member_id), []).extend(r.value for r in records)
        async with open_admin(bootstrap_servers=bs) as admin:
            described = (await admin.describe_share_groups([group]))[group]
        assert {m.member_id for m in described.members} == {a.member_id, b.member_id}
    assert len(per_member) == 2 and all(per_member.values())
    seen = [v for vs in per_member.values() for v in vs]
    assert sorted(seen) == sorted(values)  # every record, none twice


async def test_release_delivers_again_and_reject_never(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, group = await share_queue(bs)
    await produce(bs, topic, [b"keep", b"again", b"bad"])
    async with open_share_consumer(
        topic, bootstrap_servers=bs, group_id=group, share_acknowledgement_mode="explicit"
    ) as consumer:
        first = await poll_until(consumer, 3)
        assert [(r.value, r.delivery_count) for r in first] == [
            (b"keep", 1),
            (b"again", 1),
            (b"bad", 1),
        ]
        # The type positionally, as confluent-kafka's acknowledge(message, type)
        # takes it (a second positional argument once meant a partition here,
        # and a RELEASE was silently sent as ACCEPT).
        consumer.acknowledge(first[0], ACCEPT)
        consumer.acknowledge(first[1], RELEASE)
        consumer.acknowledge(first[2], type=REJECT)
        with pytest.raises(TypeError, match="acknowledge_offset"):
            consumer.acknowledge(topic, 0)  # type: ignore[arg-type]
        result = await consumer.commit()
        assert result == {TopicPartition(topic, 0): None}
        [again] = await poll_until(consumer, 1)
        assert (again.offset, again.value, again.delivery_count) == (1, b"again", 2)
        consumer.acknowledge(again)
        await produce(bs, topic, [b"sentinel"])
        # Share partitions deliver the lowest available offsets first: had "bad"
        # (offset 2) come back, it would come before or with the sentinel.
        [after] = await poll_until(consumer, 1)
        assert after.value == b"sentinel"
        consumer.acknowledge(after)
        assert consumer.acquisition_lock_timeout_ms == 30_000


async def test_closing_without_acknowledging_gives_the_records_back(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    topic, group = await share_queue(bs)
    await produce(bs, topic, [b"a", b"b"])
    async with open_share_consumer(
        topic, bootstrap_servers=bs, group_id=group, share_acknowledgement_mode="explicit"
    ) as first:
        taken = await poll_until(first, 2)
        assert [r.delivery_count for r in taken] == [1, 1]
    async with open_share_consumer(topic, bootstrap_servers=bs, group_id=group) as second:
        again = await poll_until(second, 2)
    assert [(r.value, r.delivery_count) for r in again] == [(b"a", 2), (b"b", 2)]


async def test_a_group_left_at_latest_reads_what_comes_after_it_joined(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    topic, group = await share_queue(bs, earliest=False)
    await produce(bs, topic, [b"before"])
    async with open_share_consumer(topic, bootstrap_servers=bs, group_id=group) as consumer:
        with anyio.fail_after(30):
            # The share partition starts (at the log end) when the member first
            # fetches it; the lock timeout comes with the first ShareFetch answer.
            while consumer.acquisition_lock_timeout_ms is None:
                assert await consumer.poll(timeout_ms=100) == []
        await produce(bs, topic, [b"after"])
        got = await poll_until(consumer, 1)
    assert [r.value for r in got] == [b"after"]


async def test_admin_describes_and_lists_share_groups(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, group = await share_queue(bs, partitions=2)
    async with open_share_consumer(topic, bootstrap_servers=bs, group_id=group) as consumer:
        with anyio.fail_after(30):
            while not consumer.assignment():
                await consumer.poll(timeout_ms=100)
        async with open_admin(bootstrap_servers=bs) as admin:
            described = (await admin.describe_share_groups([group]))[group]
            assert described.state == "Stable" and described.group_epoch >= 1
            [member] = described.members
            assert member.member_id == consumer.member_id
            assert member.subscribed_topics == (topic,)
            assert member.assignment == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
            assert member.client_id == "trafka"
            shares = {g.group_id for g in await admin.list_groups(types=["share"])}
            assert group in shares
            assert group not in {g.group_id for g in await admin.list_groups(types=["consumer"])}
            configs = await admin.describe_group_configs([group], overrides_only=True)
            assert configs[group] == {"share.auto.offset.reset": "earliest"}
            with pytest.raises(KafkaError) as missing:
                await admin.describe_share_groups([fresh("no-such-group")])
            assert missing.value.code == ErrorCode.GROUP_ID_NOT_FOUND


def test_the_blocking_share_consumer(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, group = anyio.run(share_queue, bs, backend="trio")
    anyio.run(produce, bs, topic, [b"x", b"y", b"z"], backend="trio")
    with BlockingShareConsumer(
        topic, bootstrap_servers=bs, group_id=group, consumer_timeout_ms=3000
    ) as consumer:
        values = [r.value for r in consumer]
    assert values == [b"x", b"y", b"z"]
    with BlockingShareConsumer(
        topic, bootstrap_servers=bs, group_id=group, consumer_timeout_ms=1000
    ) as consumer:
        assert list(consumer) == []  # all three were accepted
