"""Admin.alter_partition_reassignments and list_partition_reassignments (KIP-455):
a scripted controller with a move under way, and brokerlite (one node: the
current replicas are a no-op, anything else is refused, nothing is ever moving)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from sdk_brokers import fresh, module_broker
from sdk_fakebroker import FakeBroker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k45_alter_partition_reassignments as apr
from trafka.codec.messages import k46_list_partition_reassignments as lpr
from trafka.sdk import NewTopic, PartitionReassignment, TopicPartition, open_admin

pytestmark = pytest.mark.timeout(60)

A, L = apr.AlterPartitionReassignmentsResponse, lpr.ListPartitionReassignmentsResponse


def _controller(broker: FakeBroker, *, top_level: int = 0) -> None:
    """A controller moving t-0 from [0] to [0, 1]; t-1 cannot be moved to broker 9."""
    base = broker.api_versions

    def versions(header: Any, body: Any) -> Any:
        answer = base(header, body)
        for key in (45, 46):
            answer.api_keys.append(
                type(answer.api_keys[0])(api_key=key, min_version=0, max_version=0)
            )
        return answer

    def alter(header: Any, body: Any) -> Any:
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                code = ErrorCode.INVALID_REPLICA_ASSIGNMENT if 9 in (p.replicas or []) else 0
                parts.append(
                    A.ReassignablePartitionResponse(
                        partition_index=p.partition_index,
                        error_code=code,
                        error_message="broker 9 is not registered" if code else None,
                    )
                )
            topics.append(A.ReassignableTopicResponse(name=t.name, partitions=parts))
        return A(error_code=top_level, error_message=None, responses=topics)

    def listing(header: Any, body: Any) -> Any:
        moving = L.OngoingPartitionReassignment(
            partition_index=0, replicas=[0, 1], adding_replicas=[1], removing_replicas=[]
        )
        return L(
            error_code=top_level, topics=[L.OngoingTopicReassignment(name="t", partitions=[moving])]
        )

    broker.handlers.update({18: versions, 45: alter, 46: listing})


@pytest.mark.anyio
async def test_a_move_under_way(fake_broker: FakeBroker) -> None:
    _controller(fake_broker)
    async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
        result = await admin.alter_partition_reassignments({("t", 0): [0, 1], ("t", 1): [9]})
        assert result[TopicPartition("t", 0)] is None
        refused = result[TopicPartition("t", 1)]
        assert isinstance(refused, KafkaError)
        assert refused.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        assert "broker 9" in str(refused)
        moving = await admin.list_partition_reassignments()
        assert moving == {TopicPartition("t", 0): PartitionReassignment((0, 1), (1,), ())}
        await admin.list_partition_reassignments([("t", 0)])
    sent = [body for key, _, body in fake_broker.requests if key in (45, 46)]
    assert [
        (t.name, [(p.partition_index, p.replicas) for p in t.partitions]) for t in sent[0].topics
    ] == [("t", [(0, [0, 1]), (1, [9])])]
    assert sent[1].topics is None
    assert [(t.name, t.partition_indexes) for t in sent[2].topics] == [("t", [0])]


@pytest.mark.anyio
async def test_a_refused_request(fake_broker: FakeBroker) -> None:
    _controller(fake_broker, top_level=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
        for call in (
            admin.alter_partition_reassignments({("t", 0): None}),
            admin.list_partition_reassignments(),
        ):
            with pytest.raises(KafkaError) as info:
                await call
            assert info.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "reassign")


def test_against_brokerlite(broker: RunningBroker) -> None:
    topic = fresh("reassign")

    async def main() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(topic, 2)])
            node = broker.config.node_id
            found = await admin.alter_partition_reassignments(
                {(topic, 0): [node], (topic, 1): [node, 99], (topic, 7): [node]}
            )
            codes = {tp.partition: e.code if e else 0 for tp, e in found.items()}
            assert codes == {
                0: 0,
                1: ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            }
            cancelled = await admin.alter_partition_reassignments({(topic, 0): None})
            error = cancelled[TopicPartition(topic, 0)]
            assert error is not None and error.code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
            assert await admin.list_partition_reassignments() == {}

    anyio.run(main)
