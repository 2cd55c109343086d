"""Kafka 4.2-4.4's request versions on a cluster of brokerlite nodes (issue #84
item 3), where what they check depends on which node answers:

* ApiVersions v5 (KIP-1242): each node checks the node id the client names
  against its own, and the cluster id against the cluster's (one for all
  nodes): a client that reached another node than it meant is told
  REBOOTSTRAP_REQUIRED.
* AlterPartitionReassignments v1 (KIP-860): with
  ``allow_replication_factor_change`` false, a move to another number of
  replicas is INVALID_REPLICATION_FACTOR and nothing moves; the same move
  with it allowed is taken.
* Produce v13 (KIP-516) by topic id, to the partition's leader, read back.

The single node's answers are held to Kafka 4.4's by
``test_differential_kafka44.py``.
"""

from __future__ import annotations

from typing import Any

import trio
from cluster_helpers import raw_request, run, until

from trafka.brokerlite.dev.local_cluster import serve_cluster
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k45_alter_partition_reassignments as reassign
from trafka.codec.records import encode_batch
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer


def _move(topic: str, replicas: list[int], allow: bool) -> Any:
    req = reassign.AlterPartitionReassignmentsRequest
    return req(
        timeout_ms=30000,
        allow_replication_factor_change=allow,
        topics=[
            req.ReassignableTopic(
                name=topic,
                partitions=[req.ReassignablePartition(partition_index=0, replicas=replicas)],
            )
        ],
    )


def test_kafka_4_4_versions_on_a_cluster(zk: str) -> None:
    async def test() -> None:
        async with serve_cluster(2, zookeeper_connect=zk) as cluster:
            first, second = cluster.node_ids
            cluster_id = cluster.node(first).broker.cluster_id
            assert cluster.node(second).broker.cluster_id == cluster_id
            for node, other in ((first, second), (second, first)):
                for named, code in (
                    (node, ErrorCode.NONE),
                    (other, ErrorCode.REBOOTSTRAP_REQUIRED),
                ):
                    hello = api_versions.ApiVersionsRequest(cluster_id=cluster_id, node_id=named)
                    answer = await raw_request(cluster, node, 18, 5, hello)
                    assert (answer.error_code, bool(answer.api_keys)) == (code, not code), node
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("kips", 1, 1)])
                await until(
                    lambda: all(
                        cluster.node(n).broker.logs.topic("kips") is not None
                        for n in cluster.node_ids
                    ),
                    "every node knows the topic",
                )
                view = cluster.node(first).broker.cluster
                [replica] = view.replicas_of("kips", 0)
                spare = second if replica == first else first
                refused = await raw_request(
                    cluster, first, 45, 1, _move("kips", [replica, spare], allow=False)
                )
                [[part]] = [t.partitions for t in refused.responses]
                assert part.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
                assert refused.allow_replication_factor_change is False
                assert list(view.replicas_of("kips", 0)) == [replica]
                # The same move allowed to change it: taken (the controller moves it).
                taken = await raw_request(
                    cluster, first, 45, 1, _move("kips", [replica, spare], allow=True)
                )
                [[part]] = [t.partitions for t in taken.responses]
                assert part.error_code == ErrorCode.NONE
                await until(
                    lambda: sorted(view.replicas_of("kips", 0)) == sorted([replica, spare]),
                    "the partition has two replicas",
                )
                topic_id = cluster.node(first).broker.logs.topic("kips").topic_id
            leader = cluster.node(first).broker.cluster.image.states[("kips", 0)].leader
            req = produce.ProduceRequest
            body = req(
                acks=-1,
                timeout_ms=30000,
                topic_data=[
                    req.TopicProduceData(
                        topic_id=topic_id,
                        partition_data=[
                            req.PartitionProduceData(
                                index=0, records=encode_batch([(0, None, b"by id", ())])
                            )
                        ],
                    )
                ],
            )
            answer = await raw_request(cluster, leader, 0, 13, body)
            [topic] = answer.responses
            assert (topic.topic_id, topic.partition_responses[0].error_code) == (topic_id, 0)
            async with open_consumer(bootstrap_servers=bs, auto_offset_reset="earliest") as c:
                c.assign([TopicPartition("kips", 0)])
                got: list[bytes] = []
                with trio.fail_after(30):
                    while not got:
                        batches = await c.getmany(timeout_ms=500)
                        got += [r.value for rs in batches.values() for r in rs]
            assert got == [b"by id"]

    run(test)
