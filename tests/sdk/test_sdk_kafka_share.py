"""The SDK's share consumer (KIP-932, queues) against Apache Kafka 4.x, which
serves share groups by default from 4.2.

What KIP-932 defines and this test checks: a share group's members acquire
records (``delivery_count`` 1 on the first delivery); ACCEPT completes a
record, RELEASE makes it available again (delivered anew with
``delivery_count`` 2), REJECT archives it (never delivered again); records a
member held when it closed without acknowledging go back to the group and are
delivered again, to the next member; ``share.auto.offset.reset=earliest`` (a
group config, IncrementalAlterConfigs on the GROUP resource) starts the group
at the log start.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from kafka_peers import KafkaCluster
from sdk_brokers import produce, share_queue

from trafka.sdk import TopicPartition, open_admin
from trafka.sdk.share_consumer import AcknowledgeType, ShareConsumer, open_share_consumer

pytestmark = pytest.mark.anyio

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def _poll(consumer: ShareConsumer, n: int) -> list[Any]:
    got: list[Any] = []
    while len(got) < n:
        got += await consumer.poll(timeout_ms=500)
    return got


@pytest.mark.compat("SDK", "share groups (KIP-932): acquire, accept, release, reject")
async def test_acknowledge_release_reject_and_redelivery(kafka4: KafkaCluster) -> None:
    bs = kafka4.bootstrap_servers
    with anyio.fail_after(120):
        topic, group = await share_queue(bs)
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.list_offsets({TopicPartition(topic, 0): "latest"})
        await produce(bs, topic, [b"keep", b"again", b"bad"])
        async with open_share_consumer(
            topic, bootstrap_servers=bs, group_id=group, share_acknowledgement_mode="explicit"
        ) as consumer:
            first = await _poll(consumer, 3)
            assert [(r.value, r.delivery_count) for r in first] == [
                (b"keep", 1),
                (b"again", 1),
                (b"bad", 1),
            ]
            consumer.acknowledge(first[0], ACCEPT)
            consumer.acknowledge(first[1], RELEASE)
            consumer.acknowledge(first[2], REJECT)
            assert await consumer.commit() == {TopicPartition(topic, 0): None}
            [again] = await _poll(consumer, 1)
            assert (again.offset, again.value, again.delivery_count) == (1, b"again", 2)
            consumer.acknowledge(again, ACCEPT)
            await produce(bs, topic, [b"sentinel", b"held"])
            # The lowest available offsets come first: a redelivered "bad"
            # (offset 2) would come before the sentinel.
            [after, held] = await _poll(consumer, 2)
            assert (after.value, held.value) == (b"sentinel", b"held")
            consumer.acknowledge(after, ACCEPT)
            assert await consumer.commit() == {TopicPartition(topic, 0): None}
            # "held" stays acquired, unacknowledged, when the member closes.
        async with open_share_consumer(topic, bootstrap_servers=bs, group_id=group) as second:
            [back] = await _poll(second, 1)
        assert (back.offset, back.value, back.delivery_count) == (4, b"held", 2)
        async with open_admin(bootstrap_servers=bs) as admin:
            described = (await admin.describe_share_groups([group]))[group]
        assert described.members == ()
