"""Kafka 3.9 (ZooKeeper mode) answers CreateTopics, CreatePartitions and DeleteTopics
at their ``timeout_ms``: REQUEST_TIMED_OUT for a change not seen done by then,
which goes on (DelayedCreatePartitions, DelayedDeleteTopics). With ``timeout_ms``
0 that answer comes at once, once the change is written (ZkAdminManager waits
only when ``timeoutMs > 0``): the one case a test can rely on, since Kafka's
purgatory may complete a short wait late. An empty assignment list in
CreatePartitions is refused (INVALID_REPLICA_ASSIGNMENT); a null one is not.

brokerlite's cluster answers the same (test_cluster.py,
``answers_at_the_requests_timeout``); this file checks that reading of Kafka
against Kafka itself."""

from __future__ import annotations

import uuid

import pytest
import trio
from cluster_helpers import raw_request_to
from kafka_peers import KafkaCluster

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k03_metadata as metadata_msg
from trafka.codec.messages import k19_create_topics as create_msg
from trafka.codec.messages import k20_delete_topics as delete_msg
from trafka.codec.messages import k37_create_partitions as partitions_msg

pytestmark = pytest.mark.timeout(120)


def test_kafka_answers_topic_changes_at_their_timeout(kafka3: KafkaCluster) -> None:
    host, _, port_text = kafka3.nodes[0].address.rpartition(":")
    port = int(port_text)
    tag = uuid.uuid4().hex[:8]
    slow = f"slow-{tag}"

    def create(name: str, timeout_ms: int) -> create_msg.CreateTopicsRequest:
        topic = create_msg.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=2, replication_factor=1, assignments=[], configs=[]
        )
        return create_msg.CreateTopicsRequest(topics=[topic], timeout_ms=timeout_ms)

    async def led(name: str) -> int | None:
        """How many partitions ``name`` has, all with leaders (None: not so)."""
        request = metadata_msg.MetadataRequest(
            topics=[metadata_msg.MetadataRequest.MetadataRequestTopic(name=name)],
            allow_auto_topic_creation=False,
        )
        answer = await raw_request_to(host, port, 3, 12, request)
        [topic] = answer.topics
        if topic.error_code or not all(p.leader_id >= 0 for p in topic.partitions):
            return None
        return len(topic.partitions)

    async def until(name: str, count: int | None) -> None:
        with trio.fail_after(60):
            while await led(name) != count:
                await trio.sleep(0.1)

    async def main() -> None:
        answer = await raw_request_to(host, port, 19, 7, create(slow, 0))
        assert [t.error_code for t in answer.topics] == [ErrorCode.REQUEST_TIMED_OUT]
        await until(slow, 2)  # the creation went on
        # An empty assignment list is not a null one: it names no new partition.
        empty = partitions_msg.CreatePartitionsRequest(
            topics=[
                partitions_msg.CreatePartitionsRequest.CreatePartitionsTopic(
                    name=slow, count=3, assignments=[]
                )
            ],
            timeout_ms=0,
        )
        answer = await raw_request_to(host, port, 37, 3, empty)
        assert [r.error_code for r in answer.results] == [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
        grow = partitions_msg.CreatePartitionsRequest(
            topics=[
                partitions_msg.CreatePartitionsRequest.CreatePartitionsTopic(
                    name=slow, count=3, assignments=None
                )
            ],
            timeout_ms=0,
        )
        answer = await raw_request_to(host, port, 37, 3, grow)
        assert [r.error_code for r in answer.results] == [ErrorCode.REQUEST_TIMED_OUT]
        await until(slow, 3)
        delete = delete_msg.DeleteTopicsRequest(topic_names=[slow], timeout_ms=0)
        answer = await raw_request_to(host, port, 20, 5, delete)
        assert [r.error_code for r in answer.responses] == [ErrorCode.REQUEST_TIMED_OUT]
        await until(slow, None)  # the deletion went on

    trio.run(main)
