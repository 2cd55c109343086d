"""Kafka's internal topics on one brokerlite node, as Kafka 4.4 shows them
(issue #84): listed once Kafka would have created them (the first
FindCoordinator of a group or a transactional id, a share group's first
assignment, a Metadata request allowed to create them), with the broker's
partition counts and Kafka's configs, ``is_internal`` set by name; written only
by their coordinators (Produce and DeleteRecords refused as Kafka refuses them);
read as empty partitions, since a single node keeps the data in its journals.
Each fact was checked on a Kafka 4.4 node; the differential conversations
(``test_differential_internal_topics.py``) hold the shared ones to it."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from trafka.brokerlite.storage.internal_topics import KAFKA_CONFIGS
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k02_list_offsets as list_offsets
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k08_offset_commit as commit
from trafka.codec.messages import k09_offset_fetch as offset_fetch
from trafka.codec.messages import k10_find_coordinator as find_coordinator
from trafka.codec.messages import k19_create_topics as create_topics
from trafka.codec.messages import k20_delete_topics as delete_topics
from trafka.codec.messages import k21_delete_records as delete_records
from trafka.codec.messages import k22_init_producer_id as init_pid
from trafka.codec.messages import k23_offset_for_leader_epoch as leader_epoch
from trafka.codec.messages import k32_describe_configs as describe_configs
from trafka.codec.messages import k37_create_partitions as create_partitions
from trafka.codec.messages import k61_describe_producers as describe_producers
from trafka.codec.messages import k68_consumer_group_heartbeat as consumer_heartbeat
from trafka.codec.messages import k75_describe_topic_partitions as dtp
from trafka.codec.messages import k76_share_group_heartbeat as share_heartbeat
from trafka.codec.records import encode_batch

pytestmark = pytest.mark.timeout(60)

OFFSETS, TXN, SHARE = "__consumer_offsets", "__transaction_state", "__share_group_state"
NULL_UUID = uuid.UUID(int=0)
SMALL = {
    "offsets_topic_num_partitions": 5,
    "transaction_state_log_num_partitions": 4,
    "share_coordinator_state_topic_num_partitions": 3,
}
MD = metadata.MetadataRequest


def listed(core: Any) -> dict[str, Any]:
    """Every topic Metadata lists, by name."""
    answer = core.call(3, 12, MD(topics=None, allow_auto_topic_creation=False))
    return {t.name: t for t in answer.topics}


def by_name(core: Any, name: str, *, auto: bool = False, version: int = 12) -> Any:
    wanted = [MD.MetadataRequestTopic(name=name)]
    body = MD(topics=wanted, allow_auto_topic_creation=auto) if version >= 4 else MD(topics=wanted)
    answer = core.call(3, version, body)
    (topic,) = answer.topics
    return topic


def find(core: Any, key: str, key_type: int = 0) -> Any:
    req = find_coordinator.FindCoordinatorRequest(key=key, key_type=key_type)
    answer = core.call(10, 3, req)
    assert answer.error_code == ErrorCode.NONE, answer
    return answer


def configs_of(core: Any, name: str) -> dict[str, tuple[str | None, int]]:
    """A topic's configs: name -> (value, source)."""
    req = describe_configs.DescribeConfigsRequest
    resource = req.DescribeConfigsResource(resource_type=2, resource_name=name)
    (result,) = core.call(32, 4, req(resources=[resource])).results
    assert result.error_code == ErrorCode.NONE, result
    return {c.name: (c.value, c.config_source) for c in result.configs}


def produce_to(core: Any, topic: str, partition: int = 0, *, acks: int = -1) -> Any:
    req = produce.ProduceRequest
    blob = encode_batch([(1_700_000_000_000, None, b"v", ())])
    body = req(
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            req.TopicProduceData(
                name=topic, partition_data=[req.PartitionProduceData(index=partition, records=blob)]
            )
        ],
    )
    if acks == 0:
        return core.send(0, 9, body)
    (topic_answer,) = core.call(0, 9, body).responses
    (partition_answer,) = topic_answer.partition_responses
    return partition_answer


# -- when they are listed -------------------------------------------------------------------------


def test_a_fresh_node_lists_no_internal_topic_but_names_them_internal(open_core: Any) -> None:
    """Before any group or transaction: none listed; asked by name without
    auto-creation, UNKNOWN_TOPIC_OR_PARTITION with ``is_internal`` true, in
    Metadata and DescribeTopicPartitions alike (Kafka's answers)."""
    core = open_core(**SMALL)
    assert not set(listed(core)) & {OFFSETS, TXN, SHARE}
    for name in (OFFSETS, TXN, SHARE):
        topic = by_name(core, name)
        assert (topic.error_code, topic.is_internal) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True)
        assert topic.topic_id == NULL_UUID and not topic.partitions
    req = dtp.DescribeTopicPartitionsRequest
    answer = core.call(
        75, 0, req(topics=[req.TopicRequest(name=SHARE)], response_partition_limit=9)
    )
    assert [(t.error_code, t.is_internal) for t in answer.topics] == [
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True)
    ]
    # An ordinary unknown name is not internal.
    assert by_name(core, "__not_internal").is_internal is False


def test_other_group_and_transaction_requests_do_not_make_them(open_core: Any) -> None:
    """Kafka makes them on FindCoordinator only: a commit, an idempotent or a
    transactional InitProducerId sent straight to the node list nothing."""
    core = open_core(**SMALL)
    core.broker.logs.create_topic("t", 1)
    req = commit.OffsetCommitRequest
    body = req(
        group_id="g",
        generation_id_or_member_epoch=-1,
        topics=[
            req.OffsetCommitRequestTopic(
                name="t", partitions=[req.OffsetCommitRequestPartition(committed_offset=1)]
            )
        ],
    )
    assert core.call(8, 8, body).topics[0].partitions[0].error_code == ErrorCode.NONE
    for tid in (None, "tx"):
        body = init_pid.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000)
        answer = core.call(22, 4, body)
        assert answer.error_code == ErrorCode.NONE
    assert set(listed(core)) == {"t"}


def test_find_coordinator_lists_the_topic_of_its_key_type(open_core: Any, data_dir: Path) -> None:
    """A group's FindCoordinator lists ``__consumer_offsets``, a transactional
    id's ``__transaction_state``: the broker's partition counts, led by this
    node at epoch 0, internal, a topic id of their own, Kafka's configs; no log
    on disk. They stay, with their ids, across a restart."""
    core = open_core(**SMALL)
    find(core, "g", 0)
    assert set(listed(core)) == {OFFSETS}
    find(core, "tx", 1)
    topics = listed(core)
    assert set(topics) == {OFFSETS, TXN}
    node = core.broker.node_id
    for name, count in ((OFFSETS, 5), (TXN, 4)):
        topic = topics[name]
        assert topic.error_code == ErrorCode.NONE and topic.is_internal is True
        assert topic.topic_id != NULL_UUID
        assert [(p.partition_index, p.leader_id, p.leader_epoch) for p in topic.partitions] == [
            (i, node, 0) for i in range(count)
        ]
        assert all(p.replica_nodes == p.isr_nodes == [node] for p in topic.partitions)
        configs = configs_of(core, name)
        for key, value in KAFKA_CONFIGS[name].items():
            assert configs[key] == (value, 1), key  # 1: DYNAMIC_TOPIC_CONFIG, as Kafka's
    assert configs_of(core, OFFSETS)["cleanup.policy"] == ("compact", 1)
    assert configs_of(core, TXN)["compression.type"] == ("uncompressed", 1)
    assert not [p for p in data_dir.iterdir() if p.name.startswith("__")]
    ids = {name: t.topic_id for name, t in topics.items()}

    core.broker.close()
    again = open_core(**SMALL)
    assert {n: t.topic_id for n, t in listed(again).items()} == ids
    find(again, "g2", 0)  # (nothing made twice)
    assert {n: t.topic_id for n, t in listed(again).items()} == ids


def test_describe_topic_partitions_says_what_metadata_says(open_core: Any) -> None:
    core = open_core(**SMALL)
    find(core, "g", 0)
    req = dtp.DescribeTopicPartitionsRequest
    answer = core.call(75, 0, req(topics=[], response_partition_limit=3))
    (topic,) = answer.topics
    assert (topic.name, topic.is_internal, topic.topic_id) == (
        OFFSETS,
        True,
        listed(core)[OFFSETS].topic_id,
    )
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
    assert (answer.next_cursor.topic_name, answer.next_cursor.partition_index) == (OFFSETS, 3)


def test_a_metadata_request_allowed_to_create_one_makes_it_as_kafka_does(open_core: Any) -> None:
    """Named with auto-creation allowed: created with the internal topic's
    partition count and configs (not ``num.partitions``); without it, or with
    ``auto.create.topics.enable`` off, not."""
    core = open_core(num_partitions=2, **SMALL)
    # The request that makes one is answered as Kafka 3.9 answers a topic it is
    # creating (LEADER_NOT_AVAILABLE, no partitions); the next finds it.
    making = by_name(core, TXN, version=3)  # (v3: always allowed)
    assert (making.error_code, making.partitions) == (ErrorCode.LEADER_NOT_AVAILABLE, [])
    assert len(listed(core)[TXN].partitions) == 4
    making = by_name(core, SHARE, auto=True)
    assert (making.error_code, making.is_internal) == (ErrorCode.LEADER_NOT_AVAILABLE, True)
    topic = by_name(core, SHARE)
    assert (topic.error_code, topic.is_internal, len(topic.partitions)) == (ErrorCode.NONE, True, 3)
    assert configs_of(core, SHARE)["retention.ms"] == ("-1", 1)
    core.broker.close()
    off = open_core(auto_create_topics=False, **SMALL)
    assert by_name(off, OFFSETS, auto=True).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert OFFSETS not in listed(off)


def test_a_share_groups_first_assignment_lists_the_share_state_topic(open_core: Any) -> None:
    """Kafka's share coordinator makes ``__share_group_state`` when it first
    initializes share-partitions: a share group's first assignment with
    partitions. A member subscribed to nothing that exists makes nothing."""
    core = open_core(**SMALL)
    core.broker.logs.create_topic("shared", 1)
    req = share_heartbeat.ShareGroupHeartbeatRequest
    member = uuid.uuid4().hex
    empty = core.call(76, 1, req(group_id="sg0", member_id=member, subscribed_topic_names=["no"]))
    assert empty.error_code == ErrorCode.NONE, empty
    assert SHARE not in listed(core)
    answer = core.call(
        76, 1, req(group_id="sg", member_id=uuid.uuid4().hex, subscribed_topic_names=["shared"])
    )
    assert answer.error_code == ErrorCode.NONE, answer
    topic = listed(core)[SHARE]
    assert (topic.is_internal, len(topic.partitions)) == (True, 3)


# -- what their partitions answer -----------------------------------------------------------------


def test_a_client_may_not_produce_to_them(open_core: Any) -> None:
    """INVALID_TOPIC_EXCEPTION for every partition that exists (Kafka's
    ReplicaManager), UNKNOWN_TOPIC_OR_PARTITION for one that does not; an
    acks=0 producer's connection is closed, as for any failed acks=0 write."""
    core = open_core(**SMALL)
    find(core, "g", 0)
    assert produce_to(core, OFFSETS).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert produce_to(core, OFFSETS, 4).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert produce_to(core, OFFSETS, 5).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce_to(core, TXN).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # not made yet
    assert type(produce_to(core, OFFSETS, acks=0)).__name__ == "Close"


def test_their_partitions_read_as_empty_logs(open_core: Any) -> None:
    """Fetch: no records, watermarks 0; an offset past 0 is out of range.
    ListOffsets: earliest and latest 0 (epoch 0), nothing by time.
    OffsetForLeaderEpoch: epoch 0 ends at 0. DescribeProducers: none.
    DeleteRecords: INVALID_TOPIC_EXCEPTION, as Kafka."""
    core = open_core(**SMALL)
    find(core, "g", 0)
    f = fetch.FetchRequest

    def fetched(offset: int, epoch: int = -1) -> Any:
        part = f.FetchPartition(
            partition=1,
            fetch_offset=offset,
            partition_max_bytes=1 << 20,
            current_leader_epoch=epoch,
        )
        body = f(
            max_wait_ms=0,
            max_bytes=1 << 20,
            topics=[f.FetchTopic(topic=OFFSETS, partitions=[part])],
        )
        return core.call(1, 12, body).responses[0].partitions[0]

    read = fetched(0)
    assert (
        read.error_code,
        read.high_watermark,
        read.last_stable_offset,
        read.log_start_offset,
    ) == (
        0,
        0,
        0,
        0,
    )
    assert not read.records
    assert fetched(3).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert fetched(0, epoch=2).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH

    lo = list_offsets.ListOffsetsRequest

    def offset_at(timestamp: int) -> tuple[int, int, int]:
        part = lo.ListOffsetsPartition(partition_index=0, timestamp=timestamp)
        body = lo(replica_id=-1, topics=[lo.ListOffsetsTopic(name=OFFSETS, partitions=[part])])
        answer = core.call(2, 8, body).topics[0].partitions[0]
        return answer.error_code, answer.offset, answer.leader_epoch

    assert offset_at(-2) == offset_at(-1) == (0, 0, 0)
    assert offset_at(0) == offset_at(-3) == (0, -1, -1)

    ole = leader_epoch.OffsetForLeaderEpochRequest
    part = ole.OffsetForLeaderPartition(partition=0, current_leader_epoch=0, leader_epoch=0)
    body = ole(replica_id=-1, topics=[ole.OffsetForLeaderTopic(topic=OFFSETS, partitions=[part])])
    answer = core.call(23, 4, body).topics[0].partitions[0]
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (0, 0, 0)

    dp = describe_producers.DescribeProducersRequest
    body = dp(topics=[dp.TopicRequest(name=OFFSETS, partition_indexes=[0])])
    answer = core.call(61, 0, body).topics[0].partitions[0]
    assert (answer.error_code, answer.active_producers) == (0, [])

    dr = delete_records.DeleteRecordsRequest
    body = dr(
        topics=[
            dr.DeleteRecordsTopic(
                name=OFFSETS, partitions=[dr.DeleteRecordsPartition(partition_index=0, offset=0)]
            )
        ],
        timeout_ms=5000,
    )
    answer = core.call(21, 2, body).topics[0].partitions[0]
    assert (answer.error_code, answer.low_watermark) == (ErrorCode.INVALID_TOPIC_EXCEPTION, -1)


# -- topic admin on them --------------------------------------------------------------------------


def create(core: Any, name: str, partitions: int) -> Any:
    req = create_topics.CreateTopicsRequest
    topic = req.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)
    (answer,) = core.call(19, 7, req(topics=[topic], timeout_ms=5000)).topics
    return answer


def test_topic_admin_answers_as_kafka_4(open_core: Any, data_dir: Path) -> None:
    """CreateTopics of one that exists: TOPIC_ALREADY_EXISTS; of one not made
    yet: made as asked (Kafka makes it as any topic), without logs here.
    CreatePartitions grows one. DeleteTopics deletes one (Kafka 4.4 does too);
    the group's offsets stay in the node's journal (docs/compatibility.md), and
    the next FindCoordinator lists it again."""
    core = open_core(max_partitions=8, **SMALL)
    find(core, "g", 0)
    assert create(core, OFFSETS, 1).error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    made = create(core, SHARE, 2)
    assert (made.error_code, made.num_partitions) == (ErrorCode.NONE, 2)
    assert listed(core)[SHARE].is_internal and configs_of(core, SHARE)["cleanup.policy"][1] == 5
    cp = create_partitions.CreatePartitionsRequest
    body = cp(
        topics=[cp.CreatePartitionsTopic(name=OFFSETS, count=7, assignments=None)], timeout_ms=5000
    )
    assert core.call(37, 3, body).results[0].error_code == ErrorCode.NONE
    assert len(listed(core)[OFFSETS].partitions) == 7
    # None of it holds files, nor counts against max_partitions.
    assert not [p for p in data_dir.iterdir() if p.name.startswith("__")]
    assert create(core, "ordinary", 7).error_code == ErrorCode.NONE  # (and "t", below)

    core.broker.logs.create_topic("t", 1)
    req = commit.OffsetCommitRequest
    body = req(
        group_id="g",
        generation_id_or_member_epoch=-1,
        topics=[
            req.OffsetCommitRequestTopic(
                name="t", partitions=[req.OffsetCommitRequestPartition(committed_offset=7)]
            )
        ],
    )
    core.call(8, 8, body)
    dt = delete_topics.DeleteTopicsRequest
    answer = core.call(20, 6, dt(topics=[dt.DeleteTopicState(name=OFFSETS)], timeout_ms=5000))
    assert answer.responses[0].error_code == ErrorCode.NONE
    assert OFFSETS not in listed(core)
    of = offset_fetch.OffsetFetchRequest
    body = of(group_id="g", topics=[of.OffsetFetchRequestTopic(name="t", partition_indexes=[0])])
    assert core.call(9, 7, body).topics[0].partitions[0].committed_offset == 7
    find(core, "g", 0)
    assert len(listed(core)[OFFSETS].partitions) == 5


# -- KIP-848's regular expressions ----------------------------------------------------------------


def test_a_consumer_groups_regex_matches_internal_topics_as_kafkas_coordinator(
    open_core: Any,
) -> None:
    """Kafka 4.4's coordinator resolves a member's regex against every topic,
    internal ones too (its TopicRegexResolver): a member subscribed to
    ``__consumer_offsets|t`` is assigned both (franz-go's
    Test848RegexBrokerResolves expects it)."""
    core = open_core(**SMALL)
    core.broker.logs.create_topic("t", 1)
    find(core, "g", 0)
    req = consumer_heartbeat.ConsumerGroupHeartbeatRequest
    member, epoch = uuid.uuid4().hex, 0
    ids = {t.topic_id: name for name, t in listed(core).items()}
    assigned: dict[str, list[int]] = {}
    for _ in range(5):
        answer = core.call(
            68,
            1,
            req(
                group_id="g848",
                member_id=member,
                member_epoch=epoch,
                rebalance_timeout_ms=30000,
                subscribed_topic_regex=f"{OFFSETS}|t" if epoch == 0 else None,
                topic_partitions=[] if epoch == 0 else None,
            ),
        )
        assert answer.error_code == ErrorCode.NONE, answer
        epoch = answer.member_epoch
        if answer.assignment is not None and answer.assignment.topic_partitions:
            assigned = {
                ids[tp.topic_id]: sorted(tp.partitions) for tp in answer.assignment.topic_partitions
            }
            break
    assert assigned == {OFFSETS: [0, 1, 2, 3, 4], "t": [0]}


# -- a cluster ------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_cluster_lists_its_replicated_internal_topics_as_kafka(zk: str) -> None:
    """Three nodes: a group's FindCoordinator makes ``__consumer_offsets`` with
    the broker's partition count and Kafka's configs, replicated; Metadata and
    DescribeTopicPartitions on every node describe it internal, each partition
    led by the group coordinator of its keys; a client may not produce to it
    nor delete its records; a Metadata request allowed to create
    ``__transaction_state`` makes it as FindCoordinator would."""
    import trio
    from cluster_helpers import raw_request, run, until

    from trafka.brokerlite.dev.local_cluster import serve_cluster

    async def test() -> None:
        async with serve_cluster(
            3, zookeeper_connect=zk, group_initial_rebalance_delay_ms=0, **SMALL
        ) as cluster:
            answer = await raw_request(
                cluster, 1, 10, 3, find_coordinator.FindCoordinatorRequest(key="g", key_type=0)
            )
            assert answer.error_code == ErrorCode.NONE, answer
            view = cluster.node(1).broker.cluster
            assert view is not None
            for node in (1, 2, 3):
                md = await raw_request(cluster, node, 3, 12, MD(topics=None))
                (topic,) = [t for t in md.topics if t.name == OFFSETS]
                assert topic.is_internal and len(topic.partitions) == 5
                assert all(len(p.replica_nodes) == 3 for p in topic.partitions)
                leaders = {p.partition_index: p.leader_id for p in topic.partitions}
                assert leaders == {p: view.leader(OFFSETS, p) for p in range(5)}
            assert answer.node_id == view.coordinator("g")
            req = dtp.DescribeTopicPartitionsRequest
            described = await raw_request(
                cluster, 2, 75, 0, req(topics=[req.TopicRequest(name=OFFSETS)])
            )
            assert [(t.name, t.is_internal) for t in described.topics] == [(OFFSETS, True)]
            image_configs = view.image.configs.get(OFFSETS, {})
            assert {k: image_configs.get(k) for k in KAFKA_CONFIGS[OFFSETS]} == dict(
                KAFKA_CONFIGS[OFFSETS]
            )
            leader = view.leader(OFFSETS, 0)
            blob = encode_batch([(1_700_000_000_000, None, b"v", ())])
            pr = produce.ProduceRequest
            body = pr(
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    pr.TopicProduceData(
                        name=OFFSETS,
                        partition_data=[pr.PartitionProduceData(index=0, records=blob)],
                    )
                ],
            )
            answer = await raw_request(cluster, leader, 0, 9, body)
            code = answer.responses[0].partition_responses[0].error_code
            assert code == ErrorCode.INVALID_TOPIC_EXCEPTION
            dr = delete_records.DeleteRecordsRequest
            body = dr(
                topics=[
                    dr.DeleteRecordsTopic(
                        name=OFFSETS,
                        partitions=[dr.DeleteRecordsPartition(partition_index=0, offset=0)],
                    )
                ],
                timeout_ms=5000,
            )
            answer = await raw_request(cluster, leader, 21, 2, body)
            assert answer.topics[0].partitions[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION

            wanted = [MD.MetadataRequestTopic(name=TXN)]
            first = await raw_request(cluster, 3, 3, 12, MD(topics=wanted))
            assert first.topics[0].is_internal

            async def made() -> Any:
                md = await raw_request(cluster, 3, 3, 12, MD(topics=wanted))
                return md.topics[0] if md.topics[0].error_code == 0 else None

            with trio.fail_after(30):
                while (txn := await made()) is None:
                    await trio.sleep(0.1)
            assert txn.is_internal and len(txn.partitions) == 4
            await until(lambda: TXN in view.image.configs, "__transaction_state's configs")
            assert view.image.configs[TXN]["compression.type"] == "uncompressed"

    run(test)
