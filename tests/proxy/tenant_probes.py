"""One tenant's requests naming another tenant's resources, for every API the
tenants filter serves (tests/proxy/test_proxy_tenants.py): each is sent
with the other's names as the other knows them, and as the broker holds them
(the other's prefix spelled out), and its topic by id; each answer must be an
error Kafka gives for a resource that does not exist, or an empty answer, and
must name nothing of the other's."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from trafka.codec import ApiKey, ErrorCode
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k02_list_offsets as offsets
from trafka.codec.messages import k03_metadata as md
from trafka.codec.messages import k08_offset_commit as commit
from trafka.codec.messages import k09_offset_fetch as offset_fetch
from trafka.codec.messages import k10_find_coordinator as find_coordinator
from trafka.codec.messages import k12_heartbeat as heartbeat
from trafka.codec.messages import k13_leave_group as leave
from trafka.codec.messages import k14_sync_group as sync
from trafka.codec.messages import k15_describe_groups as describe_groups
from trafka.codec.messages import k16_list_groups as list_groups
from trafka.codec.messages import k20_delete_topics as delete_topics
from trafka.codec.messages import k21_delete_records as delete_records
from trafka.codec.messages import k23_offset_for_leader_epoch as leader_epoch
from trafka.codec.messages import k24_add_partitions_to_txn as add_partitions
from trafka.codec.messages import k25_add_offsets_to_txn as add_offsets
from trafka.codec.messages import k26_end_txn as end_txn
from trafka.codec.messages import k28_txn_offset_commit as txn_commit
from trafka.codec.messages import k32_describe_configs as describe_configs
from trafka.codec.messages import k37_create_partitions as create_partitions
from trafka.codec.messages import k42_delete_groups as delete_groups
from trafka.codec.messages import k44_incremental_alter_configs as incremental
from trafka.codec.messages import k47_offset_delete as offset_delete
from trafka.codec.messages import k61_describe_producers as producers
from trafka.codec.messages import k65_describe_transactions as describe_txns
from trafka.codec.messages import k66_list_transactions as list_txns
from trafka.codec.messages import k69_consumer_group_describe as group_describe
from trafka.codec.messages import k75_describe_topic_partitions as topic_partitions
from trafka.codec.messages import k76_share_group_heartbeat as share_heartbeat
from trafka.codec.messages import k77_share_group_describe as share_describe
from trafka.codec.messages import k78_share_fetch as share_fetch
from trafka.codec.messages import k88_streams_group_heartbeat as streams_heartbeat
from trafka.codec.messages import k89_streams_group_describe as streams_describe
from trafka.codec.messages import k90_describe_share_group_offsets as share_offsets
from trafka.codec.messages import k91_alter_share_group_offsets as alter_share
from trafka.codec.messages import k92_delete_share_group_offsets as delete_share
from trafka.codec.records import encode_batch

Call = Callable[[int, int, Any], Any]

UNKNOWN_TOPIC = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
UNKNOWN_ID = ErrorCode.UNKNOWN_TOPIC_ID
NO_GROUP = ErrorCode.GROUP_ID_NOT_FOUND
# What a request naming a group, or a transaction, that does not exist may meet.
GROUP_ERRORS = {NO_GROUP, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION}
TXN_ERRORS = {
    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
    ErrorCode.INVALID_TXN_STATE,
    ErrorCode.PRODUCER_FENCED,
}


def codes(body: Any) -> set[int]:
    """Every error code in an answer."""
    found: set[int] = set()
    if dataclasses.is_dataclass(body):
        for f in dataclasses.fields(body):
            value = getattr(body, f.name)
            if f.name.endswith("error_code"):
                found.add(value)
            elif isinstance(value, list):
                for item in value:
                    found |= codes(item)
            elif dataclasses.is_dataclass(value):
                found |= codes(value)
    return found


def strings(body: Any) -> list[str]:
    """Every string in an answer."""
    out: list[str] = []
    if isinstance(body, str):
        return [body]
    if isinstance(body, list):
        for item in body:
            out += strings(item)
    elif dataclasses.is_dataclass(body):
        for f in dataclasses.fields(body):
            out += strings(getattr(body, f.name))
    return out


#: Every name a probe of this process gave as the other tenant's (``prefixed``):
#: the asking tenant's own resources once made (its group ``globex.g-1`` is
#: ``acme.globex.g-1`` on the broker), which a later probe's listing (ListGroups)
#: shows when a test before it shared the broker and its tenants' prefixes.
#: A real leak shows the other tenant's own names, never one of these.
_PROBED: set[str] = set()


def probe_every_api(
    call: Call,
    names: dict[str, str],
    prefixed: dict[str, str],
    topic_id: uuid.UUID,
    *,
    streams: bool = False,
    host_suffix: str = "",
) -> set[str]:
    """Send each probe with ``names`` and with ``prefixed``; returns the probes
    run (``streams``: streams groups' too, where the broker serves them;
    ``host_suffix``: the ending of the broker names answers give, which may
    carry the asking tenant's SNI label, ``broker-1.acme.kafka.test``)."""
    seen: set[str] = set()
    _PROBED.update(prefixed.values())

    def check(label: str, key: int, version: int, body: Any, allowed: set[int]) -> Any:
        answer = call(key, version, body)
        got = codes(answer) - {0}
        # an error among those allowed; none only where 0 is allowed or nothing is
        assert got <= allowed and (got or 0 in allowed or not allowed), (label, got, answer)
        # A prefix only ever in a name the request gave (and echoed).
        leaked = [
            s
            for s in strings(answer)
            if not (host_suffix and s.endswith(host_suffix))
            and ("acme." in s or ("globex" in s and not any(v in s for v in _PROBED)))
        ]
        assert not leaked, (label, leaked)
        seen.add(label)
        return answer

    for n in (names, prefixed):
        topic, group, txn = n["topic"], n["group"], n["txn"]
        _topics(check, topic)
        _more_topics(check, topic)
        _groups(check, topic, group)
        _transactions(check, topic, group, txn)
        _coordinators(check, group, txn)
        _share_groups(check, topic, group)
        if streams:
            _streams_groups(check, topic, group)
    _by_id(check, topic_id)
    _share_fetch_by_id(check, topic_id)
    return seen


def _share_groups(check: Any, topic: str, group: str) -> None:
    """Share groups (KIP-932) named as the other tenant names its own: the
    tenant's own group of that name (none: nothing described, no offsets), or
    a heartbeat that makes its own and is given nothing of the other's."""
    check("ShareGroupDescribe", ApiKey.SHARE_GROUP_DESCRIBE, 1,
          share_describe.ShareGroupDescribeRequest(group_ids=[group]), {NO_GROUP})  # fmt: skip
    so = share_offsets.DescribeShareGroupOffsetsRequest
    answer = check(
        "DescribeShareGroupOffsets", ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1,
        so(groups=[so.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
            so.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])])]),
        {0, UNKNOWN_TOPIC, NO_GROUP},
    )  # fmt: skip
    assert all(p.start_offset == -1 for g in answer.groups for t in g.topics for p in t.partitions)
    a = alter_share.AlterShareGroupOffsetsRequest
    check("AlterShareGroupOffsets", ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0,
          a(group_id=group, topics=[a.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
              a.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)])]),
          {NO_GROUP, UNKNOWN_TOPIC})  # fmt: skip
    d = delete_share.DeleteShareGroupOffsetsRequest
    check("DeleteShareGroupOffsets", ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0,
          d(group_id=group, topics=[d.DeleteShareGroupOffsetsRequestTopic(topic_name=topic)]),
          {NO_GROUP, UNKNOWN_TOPIC})  # fmt: skip
    h = share_heartbeat.ShareGroupHeartbeatRequest
    member = uuid.uuid4().hex
    joined = check("ShareGroupHeartbeat", ApiKey.SHARE_GROUP_HEARTBEAT, 1,
                   h(group_id=group, member_id=member, member_epoch=0,
                     subscribed_topic_names=[topic]), set())  # fmt: skip
    assert joined.assignment is None or not joined.assignment.topic_partitions, joined
    check("ShareGroupHeartbeat, leaving", ApiKey.SHARE_GROUP_HEARTBEAT, 1,
          h(group_id=group, member_id=member, member_epoch=-1), set())  # fmt: skip


def _streams_groups(check: Any, topic: str, group: str) -> None:
    """Streams groups (KIP-1071) named as the other tenant names its own
    groups: none described; a heartbeat with a topology of the other's topic
    meets the tenant's own group of that name (a classic one, made by the
    probes before: GROUP_ID_NOT_FOUND, "not a streams group"), or makes it,
    and is given no tasks."""
    check("StreamsGroupDescribe", ApiKey.STREAMS_GROUP_DESCRIBE, 1,
          streams_describe.StreamsGroupDescribeRequest(group_ids=[group]), {NO_GROUP})  # fmt: skip
    h = streams_heartbeat.StreamsGroupHeartbeatRequest
    member = str(uuid.uuid4())
    topology = h.Topology(epoch=0, subtopologies=[
        h.Subtopology(subtopology_id="0", source_topics=[topic])])  # fmt: skip
    joined = check("StreamsGroupHeartbeat", ApiKey.STREAMS_GROUP_HEARTBEAT, 1,
                   h(group_id=group, member_id=member, member_epoch=0, rebalance_timeout_ms=30_000,
                     process_id=str(uuid.uuid4()), topology=topology, active_tasks=[],
                     standby_tasks=[], warmup_tasks=[]), {0, NO_GROUP})  # fmt: skip
    assert not joined.active_tasks and not joined.standby_tasks, joined
    check("StreamsGroupHeartbeat, leaving", ApiKey.STREAMS_GROUP_HEARTBEAT, 1,
          h(group_id=group, member_id=member, member_epoch=-1), {0, *GROUP_ERRORS})  # fmt: skip


def _share_fetch_by_id(check: Any, topic_id: uuid.UUID) -> None:
    """The other tenant's topic by id in a share fetch: unknown, no records."""
    f = share_fetch.ShareFetchRequest
    answer = check(
        "ShareFetch by id", ApiKey.SHARE_FETCH, 1,
        f(group_id="probe-share", member_id=uuid.uuid4().hex, share_session_epoch=0,
          max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, max_records=10, batch_size=10,
          topics=[f.FetchTopic(topic_id=topic_id, partitions=[f.FetchPartition(partition_index=0)])]),
        {UNKNOWN_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_REQUEST},
    )  # fmt: skip
    assert not any(p.records for t in answer.responses for p in t.partitions), answer


def _topics(check: Any, topic: str) -> None:
    m = md.MetadataRequest
    answer = check(
        "Metadata by name", ApiKey.METADATA, 12,
        m(topics=[m.MetadataRequestTopic(name=topic, topic_id=uuid.UUID(int=0))],
          allow_auto_topic_creation=False), {UNKNOWN_TOPIC},
    )  # fmt: skip
    assert [t.name for t in answer.topics] == [topic]
    every = check("Metadata of every topic", ApiKey.METADATA, 12, m(topics=None), set())
    assert topic not in {t.name for t in every.topics}
    batch = encode_batch([(0, b"k", b"alice's", [])])
    p = produce.ProduceRequest
    check(
        "Produce", ApiKey.PRODUCE, 9,
        p(transactional_id=None, acks=-1, timeout_ms=10_000,
          topic_data=[p.TopicProduceData(name=topic, partition_data=[
              p.PartitionProduceData(index=0, records=batch)])]),
        {UNKNOWN_TOPIC},
    )  # fmt: skip
    f = fetch.FetchRequest
    answer = check(
        "Fetch by name", ApiKey.FETCH, 12,
        f(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0,
          session_epoch=-1, topics=[f.FetchTopic(topic=topic, partitions=[
              f.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]),
        {UNKNOWN_TOPIC},
    )  # fmt: skip
    assert not any(p.records for t in answer.responses for p in t.partitions)
    o = offsets.ListOffsetsRequest
    check(
        "ListOffsets", ApiKey.LIST_OFFSETS, 7,
        o(replica_id=-1, topics=[o.ListOffsetsTopic(name=topic, partitions=[
            o.ListOffsetsPartition(partition_index=0, timestamp=-1)])]),
        {UNKNOWN_TOPIC},
    )  # fmt: skip
    c = describe_configs.DescribeConfigsRequest
    check(
        "DescribeConfigs", ApiKey.DESCRIBE_CONFIGS, 4,
        c(resources=[c.DescribeConfigsResource(resource_type=2, resource_name=topic,
                                               configuration_keys=None)]),
        {UNKNOWN_TOPIC},
    )  # fmt: skip
    d = delete_topics.DeleteTopicsRequest
    check(
        "DeleteTopics by name", ApiKey.DELETE_TOPICS, 6,
        d(topics=[d.DeleteTopicState(name=topic, topic_id=uuid.UUID(int=0))], timeout_ms=10_000),
        {UNKNOWN_TOPIC},
    )  # fmt: skip
    r = delete_records.DeleteRecordsRequest
    check(
        "DeleteRecords", ApiKey.DELETE_RECORDS, 2,
        r(topics=[r.DeleteRecordsTopic(name=topic, partitions=[
            r.DeleteRecordsPartition(partition_index=0, offset=1)])], timeout_ms=10_000),
        {UNKNOWN_TOPIC},
    )  # fmt: skip
    cp = create_partitions.CreatePartitionsRequest
    check(
        "CreatePartitions", ApiKey.CREATE_PARTITIONS, 3,
        cp(topics=[cp.CreatePartitionsTopic(name=topic, count=5, assignments=None)],
           timeout_ms=10_000),
        {UNKNOWN_TOPIC},
    )  # fmt: skip


def _more_topics(check: Any, topic: str) -> None:
    e = leader_epoch.OffsetForLeaderEpochRequest
    check(
        "OffsetForLeaderEpoch", ApiKey.OFFSET_FOR_LEADER_EPOCH, 4,
        e(replica_id=-1, topics=[e.OffsetForLeaderTopic(topic=topic, partitions=[
            e.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])]),
        {UNKNOWN_TOPIC},
    )  # fmt: skip
    t = topic_partitions.DescribeTopicPartitionsRequest
    check(
        "DescribeTopicPartitions", ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0,
        t(topics=[t.TopicRequest(name=topic)], response_partition_limit=100), {UNKNOWN_TOPIC},
    )  # fmt: skip
    every = check(
        "DescribeTopicPartitions of every topic", ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0,
        t(topics=[], response_partition_limit=100), set(),
    )  # fmt: skip
    assert topic not in {x.name for x in every.topics}
    p = producers.DescribeProducersRequest
    check(
        "DescribeProducers", ApiKey.DESCRIBE_PRODUCERS, 0,
        p(topics=[p.TopicRequest(name=topic, partition_indexes=[0])]), {UNKNOWN_TOPIC},
    )  # fmt: skip
    i = incremental.IncrementalAlterConfigsRequest
    check(
        "IncrementalAlterConfigs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1,
        i(resources=[i.AlterConfigsResource(resource_type=2, resource_name=topic, configs=[
            i.AlterableConfig(name="retention.ms", config_operation=0, value="1")])]),
        {UNKNOWN_TOPIC},
    )  # fmt: skip
    check(
        "IncrementalAlterConfigs of a broker", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1,
        i(resources=[i.AlterConfigsResource(resource_type=4, resource_name="", configs=[
            i.AlterableConfig(name="log.retention.ms", config_operation=0, value="1")])]),
        {ErrorCode.CLUSTER_AUTHORIZATION_FAILED},
    )  # fmt: skip


def _groups(check: Any, topic: str, group: str) -> None:
    call_offsets(check, group, topic)
    oc = commit.OffsetCommitRequest
    check(
        "OffsetCommit", ApiKey.OFFSET_COMMIT, 8,
        oc(group_id=group, generation_id_or_member_epoch=1, member_id="m",
           topics=[oc.OffsetCommitRequestTopic(name=topic, partitions=[
               oc.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)])]),
        GROUP_ERRORS | {UNKNOWN_TOPIC},
    )  # fmt: skip
    check("Heartbeat", ApiKey.HEARTBEAT, 4,
          heartbeat.HeartbeatRequest(group_id=group, generation_id=1, member_id="m"),
          GROUP_ERRORS)  # fmt: skip
    s = sync.SyncGroupRequest
    check("SyncGroup", ApiKey.SYNC_GROUP, 5,
          s(group_id=group, generation_id=1, member_id="m", protocol_type="consumer",
            protocol_name="range", assignments=[]), GROUP_ERRORS)  # fmt: skip
    lv = leave.LeaveGroupRequest
    check("LeaveGroup", ApiKey.LEAVE_GROUP, 4,
          lv(group_id=group, members=[lv.MemberIdentity(member_id="m")]),
          GROUP_ERRORS)  # fmt: skip
    described = call_describe_groups(check, group)
    assert all(not g.members for g in described.groups)
    listed = check("ListGroups", ApiKey.LIST_GROUPS, 4, list_groups.ListGroupsRequest(), set())
    assert group not in {g.group_id for g in listed.groups}
    described = check(
        "ConsumerGroupDescribe", ApiKey.CONSUMER_GROUP_DESCRIBE, 1,
        group_describe.ConsumerGroupDescribeRequest(group_ids=[group]),
        {NO_GROUP, ErrorCode.GROUP_ID_NOT_FOUND},
    )  # fmt: skip
    assert all(not g.members for g in described.groups)
    check("DeleteGroups", ApiKey.DELETE_GROUPS, 2,
          delete_groups.DeleteGroupsRequest(groups_names=[group]), {NO_GROUP})  # fmt: skip
    od = offset_delete.OffsetDeleteRequest
    check("OffsetDelete", ApiKey.OFFSET_DELETE, 0,
          od(group_id=group, topics=[od.OffsetDeleteRequestTopic(name=topic, partitions=[
              od.OffsetDeleteRequestPartition(partition_index=0)])]), {NO_GROUP})  # fmt: skip


def _coordinators(check: Any, group: str, txn: str) -> None:
    """A tenant finds the coordinator of its own group and transaction of that
    name (found, and named back as asked)."""
    for key_type, key in ((0, group), (1, txn)):
        answer = check(
            "FindCoordinator", ApiKey.FIND_COORDINATOR, 4,
            find_coordinator.FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]),
            set(),
        )  # fmt: skip
        assert [c.key for c in answer.coordinators] == [key]


def call_offsets(check: Any, group: str, topic: str) -> Any:
    of = offset_fetch.OffsetFetchRequest
    answer = check(
        "OffsetFetch", ApiKey.OFFSET_FETCH, 8,
        of(groups=[of.OffsetFetchRequestGroup(group_id=group, topics=[
            of.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])]),
        {NO_GROUP, UNKNOWN_TOPIC, 0},
    )  # fmt: skip
    assert all(
        p.committed_offset == -1 for g in answer.groups for t in g.topics for p in t.partitions
    ), answer
    return answer


def call_describe_groups(check: Any, group: str) -> Any:
    return check(
        "DescribeGroups", ApiKey.DESCRIBE_GROUPS, 5,
        describe_groups.DescribeGroupsRequest(groups=[group]), {NO_GROUP, 0},
    )  # fmt: skip


def _transactions(check: Any, topic: str, group: str, txn: str) -> None:
    a = add_partitions.AddPartitionsToTxnRequest
    check(
        "AddPartitionsToTxn", ApiKey.ADD_PARTITIONS_TO_TXN, 3,
        a(v3_and_below_transactional_id=txn, v3_and_below_producer_id=1,
          v3_and_below_producer_epoch=0, v3_and_below_topics=[
              a.AddPartitionsToTxnTopic(name=topic, partitions=[0])]),
        TXN_ERRORS | {UNKNOWN_TOPIC},
    )  # fmt: skip
    check(
        "AddOffsetsToTxn", ApiKey.ADD_OFFSETS_TO_TXN, 3,
        add_offsets.AddOffsetsToTxnRequest(transactional_id=txn, producer_id=1, producer_epoch=0,
                                           group_id=group),
        TXN_ERRORS,
    )  # fmt: skip
    check(
        "EndTxn", ApiKey.END_TXN, 3,
        end_txn.EndTxnRequest(transactional_id=txn, producer_id=1, producer_epoch=0,
                              committed=True),
        TXN_ERRORS,
    )  # fmt: skip
    t = txn_commit.TxnOffsetCommitRequest
    check(
        "TxnOffsetCommit", ApiKey.TXN_OFFSET_COMMIT, 3,
        t(transactional_id=txn, group_id=group, producer_id=1, producer_epoch=0,
          generation_id_or_member_epoch=-1, member_id="",
          topics=[t.TxnOffsetCommitRequestTopic(name=topic, partitions=[
              t.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=0)])]),
        TXN_ERRORS | {UNKNOWN_TOPIC},
    )  # fmt: skip
    for pattern in (None, ".*"):
        listed = check(
            "ListTransactions", ApiKey.LIST_TRANSACTIONS, 2,
            list_txns.ListTransactionsRequest(transactional_id_pattern=pattern), set(),
        )  # fmt: skip
        assert txn not in {x.transactional_id for x in listed.transaction_states}
    check(
        "DescribeTransactions", ApiKey.DESCRIBE_TRANSACTIONS, 0,
        describe_txns.DescribeTransactionsRequest(transactional_ids=[txn]),
        {ErrorCode.TRANSACTIONAL_ID_NOT_FOUND},
    )  # fmt: skip


def _by_id(check: Any, topic_id: uuid.UUID) -> None:
    m = md.MetadataRequest
    answer = check(
        "Metadata by id", ApiKey.METADATA, 12,
        m(topics=[m.MetadataRequestTopic(name=None, topic_id=topic_id)],
          allow_auto_topic_creation=False), {UNKNOWN_ID},
    )  # fmt: skip
    assert [t.topic_id for t in answer.topics] == [topic_id] and not answer.topics[0].partitions
    f = fetch.FetchRequest
    answer = check(
        "Fetch by id", ApiKey.FETCH, 13,
        f(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0,
          session_epoch=-1, topics=[f.FetchTopic(topic_id=topic_id, partitions=[
              f.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]),
        {UNKNOWN_ID},
    )  # fmt: skip
    assert [t.topic_id for t in answer.responses] == [topic_id]
    assert not any(p.records for t in answer.responses for p in t.partitions)
    d = delete_topics.DeleteTopicsRequest
    check(
        "DeleteTopics by id", ApiKey.DELETE_TOPICS, 6,
        d(topics=[d.DeleteTopicState(name=None, topic_id=topic_id)], timeout_ms=10_000),
        {UNKNOWN_ID},
    )  # fmt: skip
