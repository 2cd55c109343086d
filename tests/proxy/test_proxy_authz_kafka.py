"""The proxy's authorization against Apache Kafka 4.4's own: the differential
test of issue #83 item 5.

One Kafka 4.4 broker runs StandardAuthorizer (KIP-801) with a set of ACLs for
``User:bob``; ``User:alice`` is one of its super users. The proxy, in front of
the same broker, holds the same ACLs as rules for ``User:alice``. Each request
below is sent by bob straight to Kafka and by alice through the proxy (both
logged in with SASL PLAIN), and what each answer says of each resource (its
error codes and messages, which resources it names) must be the same: what
Kafka's authorizer refuses, and how, the proxy refuses, and the same way
(KIP-11's operations, KIP-290's prefixed patterns, KIP-679's idempotent
writes, the per-API errors of Kafka's KafkaApis and ControllerApis).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import confluent_kafka
import confluent_kafka.admin
import pytest
from kafka_fixtures import _shared
from kafka_peers import KAFKA_4, KafkaCluster

from trafka.codec import ApiKey, ErrorCode, KafkaError
from trafka.codec.messages import k00_produce as produce_m
from trafka.codec.messages import k01_fetch as fetch_m
from trafka.codec.messages import k02_list_offsets as list_offsets_m
from trafka.codec.messages import k03_metadata as metadata_m
from trafka.codec.messages import k08_offset_commit as commit_m
from trafka.codec.messages import k09_offset_fetch as offset_fetch_m
from trafka.codec.messages import k10_find_coordinator as coordinator_m
from trafka.codec.messages import k11_join_group as join_m
from trafka.codec.messages import k15_describe_groups as describe_groups_m
from trafka.codec.messages import k16_list_groups as list_groups_m
from trafka.codec.messages import k19_create_topics as create_m
from trafka.codec.messages import k20_delete_topics as delete_m
from trafka.codec.messages import k21_delete_records as delete_records_m
from trafka.codec.messages import k22_init_producer_id as init_pid_m
from trafka.codec.messages import k23_offset_for_leader_epoch as epoch_m
from trafka.codec.messages import k24_add_partitions_to_txn as add_partitions_m
from trafka.codec.messages import k25_add_offsets_to_txn as add_offsets_m
from trafka.codec.messages import k26_end_txn as end_txn_m
from trafka.codec.messages import k28_txn_offset_commit as txn_commit_m
from trafka.codec.messages import k32_describe_configs as describe_configs_m
from trafka.codec.messages import k33_alter_configs as alter_configs_m
from trafka.codec.messages import k37_create_partitions as create_partitions_m
from trafka.codec.messages import k42_delete_groups as delete_groups_m
from trafka.codec.messages import k44_incremental_alter_configs as incremental_m
from trafka.codec.messages import k61_describe_producers as producers_m
from trafka.codec.messages import k65_describe_transactions as describe_txn_m
from trafka.codec.messages import k66_list_transactions as list_txn_m
from trafka.codec.messages import k68_consumer_group_heartbeat as cg_heartbeat_m
from trafka.codec.messages import k69_consumer_group_describe as cg_describe_m
from trafka.codec.messages import k75_describe_topic_partitions as describe_partitions_m
from trafka.codec.messages import k76_share_group_heartbeat as share_heartbeat_m
from trafka.codec.messages import k77_share_group_describe as share_describe_m
from trafka.codec.messages import k78_share_fetch as share_fetch_m
from trafka.codec.messages import k79_share_acknowledge as share_ack_m
from trafka.codec.messages import k89_streams_group_describe as streams_describe_m
from trafka.codec.messages import k90_describe_share_group_offsets as share_offsets_m
from trafka.codec.messages import k91_alter_share_group_offsets as alter_share_m
from trafka.codec.messages import k92_delete_share_group_offsets as delete_share_m
from trafka.codec.records import encode_batch
from trafka.proxy import proxy_in_thread
from trafka.proxy.authz import Authorization
from trafka.sdk import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    NewTopic,
    PatternType,
    open_admin,
    open_consumer,
    open_producer,
)
from trafka.sdk.config.client import ClientConfig
from trafka.sdk.connection import BrokerConnection
from trafka.sdk.errors import KafkaConnectionError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
TOPICS = ("open", "readonly", "hidden", "nowrite", "cfg", "pre-x")

# (resource, name, pattern, operation, permission): bob's ACLs on Kafka, alice's rules in the proxy.
ACLS = [
    ("topic", "open", "literal", "All", "allow"),
    ("topic", "readonly", "literal", "Read", "allow"),
    ("topic", "nowrite", "literal", "All", "allow"),
    ("topic", "nowrite", "literal", "Write", "deny"),
    ("topic", "cfg", "literal", "DescribeConfigs", "allow"),
    ("topic", "pre-", "prefixed", "Write", "allow"),
    ("topic", "new-", "prefixed", "Create", "allow"),
    ("topic", "new-", "prefixed", "Describe", "allow"),
    ("topic", "desc-", "prefixed", "Describe", "allow"),
    ("group", "g-ok", "literal", "Read", "allow"),
    ("group", "g-del", "literal", "Delete", "allow"),
    ("transactional_id", "tx-ok", "literal", "Write", "allow"),
]
_TYPES = {
    "topic": AclResourceType.TOPIC,
    "group": AclResourceType.GROUP,
    "transactional_id": AclResourceType.TRANSACTIONAL_ID,
}
_OPS = {
    "All": AclOperation.ALL,
    "Read": AclOperation.READ,
    "Write": AclOperation.WRITE,
    "Create": AclOperation.CREATE,
    "Delete": AclOperation.DELETE,
    "Describe": AclOperation.DESCRIBE,
    "DescribeConfigs": AclOperation.DESCRIBE_CONFIGS,
}
# What the comparison leaves out: what differs between any two answers (offsets,
# ids, members, brokers), not what authorization decides.
_IGNORED = {
    "throttle_time_ms", "unknown_tagged_fields", "records", "high_watermark",
    "last_stable_offset", "log_start_offset", "base_offset", "log_append_time_ms", "offset",
    "timestamp", "producer_id", "producer_epoch", "node_id", "host", "port", "brokers",
    "cluster_id", "controller_id", "member_id", "leader_id", "leader_epoch", "replica_nodes",
    "isr_nodes", "offline_replicas", "session_id", "current_leader", "node_endpoints",
    "aborted_transactions", "preferred_read_replica", "low_watermark", "generation_id",
    "committed_offset", "committed_leader_epoch", "leader", "members", "configs",
    "diverging_epoch", "snapshot_id", "protocol_name", "protocol_type",
    "cluster_authorized_operations",
    "group_state", "group_type", "num_partitions", "replication_factor", "metadata",
    "skip_assignment", "end_offset",
}  # fmt: skip


def shape(value: Any, ids: set[uuid.UUID]) -> Any:
    """What an answer says, without what differs between any two answers (a
    topic id other than the test's topics' is only said to be one, or none)."""
    if isinstance(value, list):
        return sorted((shape(v, ids) for v in value), key=repr)
    if isinstance(value, uuid.UUID):
        return value if value in ids else ("no id" if value.int == 0 else "another id")
    slots = getattr(type(value), "__slots__", None)
    if slots is None:
        return value
    return {f: shape(getattr(value, f), ids) for f in slots if f not in _IGNORED}


@pytest.fixture(scope="module")
def kafka(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """Kafka 4.4 with StandardAuthorizer, a SASL listener and bob's ACLs (module-wide)."""
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    users = " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    yield from _shared(
        request,
        KAFKA_4,
        1,
        listeners={"PLAINTEXT": "PLAINTEXT", "SASL": "SASL_PLAINTEXT"},
        config={
            "listener.name.sasl.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl.plain.sasl.jaas.config": f"{plain} required {users};",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # the brokers' and controllers' own listener, and the admin, may do all;
            # alice too: the proxy's rules are what judges her.
            "super.users": "User:ANONYMOUS;User:admin;User:alice",
        },
    )


@pytest.fixture(scope="module")
def ids(kafka: KafkaCluster) -> dict[str, uuid.UUID]:
    """The test's topics (made, with bob's ACLs) and their ids."""
    return anyio.run(_setup, kafka, backend="trio")


def sasl_address(kafka: KafkaCluster) -> str:
    return f"{kafka.host}:{kafka.nodes[0].ports['SASL']}"


def rules_for(principal: str) -> list[dict[str, Any]]:
    return [
        {"principal": principal, "resource": resource, "name": name, "pattern": pattern,
         "operation": op, "permission": permission}
        for resource, name, pattern, op, permission in ACLS
    ]  # fmt: skip


def _batch() -> bytes:
    return encode_batch([(0, b"k", b"v", [])])


def requests(ids: dict[str, uuid.UUID]) -> list[tuple[str, int, int, Any]]:
    """(what, API, version, request) for each request compared."""
    md, pr, fe = metadata_m.MetadataRequest, produce_m.ProduceRequest, fetch_m.FetchRequest
    lo, oc, of = (
        list_offsets_m.ListOffsetsRequest,
        commit_m.OffsetCommitRequest,
        (offset_fetch_m.OffsetFetchRequest),
    )
    named = [*TOPICS, "missing-1", "new-auto"]

    def produce(topics: list[str], by_id: bool) -> Any:
        return pr(acks=-1, timeout_ms=10_000, topic_data=[
            pr.TopicProduceData(name="" if by_id else t, topic_id=ids[t] if by_id else uuid.UUID(int=0),
                                partition_data=[pr.PartitionProduceData(index=0, records=_batch())])
            for t in topics
        ])  # fmt: skip

    def fetch(topics: list[str], by_id: bool) -> Any:
        return fe(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_epoch=-1,
                  topics=[fe.FetchTopic(topic="" if by_id else t, topic_id=ids[t] if by_id else uuid.UUID(int=0),
                                        partitions=[fe.FetchPartition(partition=0, fetch_offset=0,
                                                                      partition_max_bytes=1 << 16,
                                                                      current_leader_epoch=-1,
                                                                      last_fetched_epoch=-1,
                                                                      log_start_offset=-1)])
                          for t in topics])  # fmt: skip

    commit_topics = [oc.OffsetCommitRequestTopic(name=t, partitions=[
        oc.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)]) for t in ("open", "hidden")]  # fmt: skip
    txn = txn_commit_m.TxnOffsetCommitRequest
    dtp = describe_partitions_m.DescribeTopicPartitionsRequest
    ofle = epoch_m.OffsetForLeaderEpochRequest
    dp = producers_m.DescribeProducersRequest
    dtx = describe_txn_m.DescribeTransactionsRequest
    ltx = list_txn_m.ListTransactionsRequest
    ap = add_partitions_m.AddPartitionsToTxnRequest
    cfg = describe_configs_m.DescribeConfigsRequest
    inc = incremental_m.IncrementalAlterConfigsRequest
    alt = alter_configs_m.AlterConfigsRequest
    cp = create_partitions_m.CreatePartitionsRequest
    dr = delete_records_m.DeleteRecordsRequest
    ct = create_m.CreateTopicsRequest
    return [
        ("metadata named", ApiKey.METADATA, 12,
         md(topics=[md.MetadataRequestTopic(name=t) for t in named], allow_auto_topic_creation=False)),
        ("metadata, authorized operations", ApiKey.METADATA, 10,
         md(topics=[md.MetadataRequestTopic(name=t) for t in TOPICS], allow_auto_topic_creation=False,
            include_topic_authorized_operations=True)),
        ("metadata by id", ApiKey.METADATA, 12,
         md(topics=[md.MetadataRequestTopic(name=None, topic_id=ids[t]) for t in ("open", "hidden")])),
        ("metadata, may not create", ApiKey.METADATA, 12,
         md(topics=[md.MetadataRequestTopic(name="desc-auto")], allow_auto_topic_creation=True)),
        ("produce by name", ApiKey.PRODUCE, 12,
         produce(["open", "readonly", "hidden", "nowrite", "pre-x"], False)),
        ("produce by name, unknown topic", ApiKey.PRODUCE, 12, produce(["missing-2"], False)),
        ("produce by id", ApiKey.PRODUCE, 13, produce(["open", "readonly", "nowrite"], True)),
        ("fetch by name", ApiKey.FETCH, 12, fetch(["open", "readonly", "hidden", "pre-x"], False)),
        ("fetch by id", ApiKey.FETCH, 17, fetch(["open", "readonly", "pre-x"], True)),
        ("describe topic partitions", ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0,
         dtp(topics=[dtp.TopicRequest(name=t) for t in named], response_partition_limit=100)),
        ("describe every topic's partitions", ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0,
         dtp(topics=[], response_partition_limit=100)),
        ("offset for leader epoch", ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, ofle(replica_id=-1, topics=[
            ofle.OffsetForLeaderTopic(topic=t, partitions=[ofle.OffsetForLeaderPartition(
                partition=0, current_leader_epoch=-1, leader_epoch=0)]) for t in ("open", "hidden")])),
        ("describe producers", ApiKey.DESCRIBE_PRODUCERS, 0, dp(topics=[
            dp.TopicRequest(name=t, partition_indexes=[0]) for t in ("open", "readonly", "hidden", "pre-x")])),
        ("describe transactions", ApiKey.DESCRIBE_TRANSACTIONS, 0,
         dtx(transactional_ids=["tx-ok", "tx-no"])),
        ("list transactions", ApiKey.LIST_TRANSACTIONS, 1, ltx()),
        ("list offsets", ApiKey.LIST_OFFSETS, 9, lo(replica_id=-1, topics=[
            lo.ListOffsetsTopic(name=t, partitions=[lo.ListOffsetsPartition(partition_index=0, timestamp=-1)])
            for t in ("open", "hidden", "readonly", "pre-x")])),
        ("find group coordinators", ApiKey.FIND_COORDINATOR, 4,
         coordinator_m.FindCoordinatorRequest(key_type=0, coordinator_keys=["g-ok", "g-no"])),
        ("find transaction coordinators", ApiKey.FIND_COORDINATOR, 4,
         coordinator_m.FindCoordinatorRequest(key_type=1, coordinator_keys=["tx-ok", "tx-no"])),
        ("join a group", ApiKey.JOIN_GROUP, 9, join_m.JoinGroupRequest(
            group_id="g-no", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
            protocol_type="consumer", protocols=[join_m.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])),
        ("commit offsets", ApiKey.OFFSET_COMMIT, 8, oc(group_id="g-ok", generation_id_or_member_epoch=-1, member_id="", topics=commit_topics)),
        ("commit offsets, group refused", ApiKey.OFFSET_COMMIT, 8, oc(group_id="g-no", generation_id_or_member_epoch=-1, member_id="", topics=commit_topics)),
        ("fetch offsets", ApiKey.OFFSET_FETCH, 8, of(groups=[
            of.OffsetFetchRequestGroup(group_id="g-ok", topics=[of.OffsetFetchRequestTopics(name=t, partition_indexes=[0]) for t in ("open", "hidden")]),
            of.OffsetFetchRequestGroup(group_id="g-no", topics=None),
        ])),
        ("fetch every offset", ApiKey.OFFSET_FETCH, 8, of(groups=[of.OffsetFetchRequestGroup(group_id="g-ok", topics=None)])),
        ("consumer group heartbeat (KIP-848)", ApiKey.CONSUMER_GROUP_HEARTBEAT, 0,
         cg_heartbeat_m.ConsumerGroupHeartbeatRequest(
             group_id="g-no", member_id="m-1", member_epoch=0, rebalance_timeout_ms=10_000,
             subscribed_topic_names=["open"], topic_partitions=[])),
        ("consumer group describe (KIP-848)", ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
         cg_describe_m.ConsumerGroupDescribeRequest(group_ids=["g-ok", "g-no"])),
        ("share group heartbeat (KIP-932)", ApiKey.SHARE_GROUP_HEARTBEAT, 1,
         share_heartbeat_m.ShareGroupHeartbeatRequest(
             group_id="g-no", member_id="m-2", member_epoch=0, subscribed_topic_names=["open"])),
        ("share group describe (KIP-932)", ApiKey.SHARE_GROUP_DESCRIBE, 1,
         share_describe_m.ShareGroupDescribeRequest(group_ids=["g-ok", "g-no"])),
        # Kafka 4.4 also asks DESCRIBE on every topic a heartbeat subscribes to.
        ("consumer group heartbeat, a topic refused", ApiKey.CONSUMER_GROUP_HEARTBEAT, 0,
         cg_heartbeat_m.ConsumerGroupHeartbeatRequest(
             group_id="g-ok", member_id="m-3", member_epoch=0, rebalance_timeout_ms=10_000,
             subscribed_topic_names=["open", "hidden"], topic_partitions=[])),
        ("share group heartbeat, a topic refused", ApiKey.SHARE_GROUP_HEARTBEAT, 1,
         share_heartbeat_m.ShareGroupHeartbeatRequest(
             group_id="g-ok", member_id="m-4", member_epoch=0, subscribed_topic_names=["hidden", "open"])),
        ("share fetch, group refused", ApiKey.SHARE_FETCH, 1, share_fetch_m.ShareFetchRequest(
            group_id="g-no", member_id=uuid.UUID(int=5).hex, share_session_epoch=0, max_wait_ms=0,
            min_bytes=0, max_bytes=1 << 20, max_records=10, batch_size=10, topics=[
                share_fetch_m.ShareFetchRequest.FetchTopic(topic_id=ids["open"], partitions=[
                    share_fetch_m.ShareFetchRequest.FetchPartition(partition_index=0)])])),
        ("share acknowledge, group refused", ApiKey.SHARE_ACKNOWLEDGE, 1, share_ack_m.ShareAcknowledgeRequest(
            group_id="g-no", member_id=uuid.UUID(int=6).hex, share_session_epoch=1, topics=[])),
        ("describe share group offsets", ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1,
         share_offsets_m.DescribeShareGroupOffsetsRequest(groups=[
             share_offsets_m.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(
                 group_id="g-ok", topics=[
                     share_offsets_m.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestTopic(
                         topic_name=t, partitions=[0]) for t in ("open", "hidden")]),
             share_offsets_m.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(
                 group_id="g-no", topics=None)])),
        ("alter share group offsets, group refused", ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0,
         alter_share_m.AlterShareGroupOffsetsRequest(group_id="g-no", topics=[
             alter_share_m.AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic(
                 topic_name="open", partitions=[
                     alter_share_m.AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestPartition(
                         partition_index=0, start_offset=0)])])),
        ("delete share group offsets, group refused", ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0,
         delete_share_m.DeleteShareGroupOffsetsRequest(group_id="g-no", topics=[
             delete_share_m.DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name="open")])),
        ("delete share group offsets, a topic refused", ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0,
         delete_share_m.DeleteShareGroupOffsetsRequest(group_id="g-del", topics=[
             delete_share_m.DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name=t)
             for t in ("readonly", "hidden")])),
        ("streams group describe (KIP-1071)", ApiKey.STREAMS_GROUP_DESCRIBE, 0,
         streams_describe_m.StreamsGroupDescribeRequest(group_ids=["g-ok", "g-no"])),
        ("describe groups, authorized operations", ApiKey.DESCRIBE_GROUPS, 5,
         describe_groups_m.DescribeGroupsRequest(groups=["g-ok", "g-no"], include_authorized_operations=True)),
        ("describe groups", ApiKey.DESCRIBE_GROUPS, 5, describe_groups_m.DescribeGroupsRequest(groups=["g-ok", "g-no"])),
        ("list groups", ApiKey.LIST_GROUPS, 4, list_groups_m.ListGroupsRequest()),
        ("delete groups", ApiKey.DELETE_GROUPS, 2, delete_groups_m.DeleteGroupsRequest(groups_names=["g-no", "g-del"])),
        ("transactional producer id, refused", ApiKey.INIT_PRODUCER_ID, 5,
         init_pid_m.InitProducerIdRequest(transactional_id="tx-no", transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1)),
        ("idempotent producer id", ApiKey.INIT_PRODUCER_ID, 5,
         init_pid_m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1)),
        ("add partitions, transaction refused", ApiKey.ADD_PARTITIONS_TO_TXN, 3, ap(
            v3_and_below_transactional_id="tx-no", v3_and_below_producer_id=0, v3_and_below_producer_epoch=0,
            v3_and_below_topics=[ap.AddPartitionsToTxnTopic(name="open", partitions=[0])])),
        ("add partitions, a topic refused", ApiKey.ADD_PARTITIONS_TO_TXN, 3, ap(
            v3_and_below_transactional_id="tx-ok", v3_and_below_producer_id=0, v3_and_below_producer_epoch=0,
            v3_and_below_topics=[ap.AddPartitionsToTxnTopic(name=t, partitions=[0]) for t in ("open", "hidden")])),
        ("add offsets, transaction refused", ApiKey.ADD_OFFSETS_TO_TXN, 3, add_offsets_m.AddOffsetsToTxnRequest(
            transactional_id="tx-no", producer_id=0, producer_epoch=0, group_id="g-ok")),
        ("add offsets, group refused", ApiKey.ADD_OFFSETS_TO_TXN, 3, add_offsets_m.AddOffsetsToTxnRequest(
            transactional_id="tx-ok", producer_id=0, producer_epoch=0, group_id="g-no")),
        ("end a transaction, refused", ApiKey.END_TXN, 3, end_txn_m.EndTxnRequest(
            transactional_id="tx-no", producer_id=0, producer_epoch=0, committed=True)),
        ("transactional offsets, refused", ApiKey.TXN_OFFSET_COMMIT, 3, txn(
            transactional_id="tx-no", group_id="g-ok", producer_id=0, producer_epoch=0, generation_id_or_member_epoch=-1, member_id="",
            topics=[txn.TxnOffsetCommitRequestTopic(name="open", partitions=[txn.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=0)])])),
        ("create topics", ApiKey.CREATE_TOPICS, 7, ct(validate_only=True, timeout_ms=10_000, topics=[
            ct.CreatableTopic(name=n, num_partitions=1, replication_factor=1) for n in ("new-a", "other-a")])),
        ("delete topics", ApiKey.DELETE_TOPICS, 5, delete_m.DeleteTopicsRequest(topic_names=["readonly", "missing-3"], timeout_ms=10_000)),
        ("describe configs", ApiKey.DESCRIBE_CONFIGS, 4, cfg(resources=[
            cfg.DescribeConfigsResource(resource_type=2, resource_name=t, configuration_keys=["cleanup.policy"]) for t in ("cfg", "hidden")
        ] + [cfg.DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=["log.retention.ms"])])),
        ("incremental alter configs", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, inc(validate_only=True, resources=[
            inc.AlterConfigsResource(resource_type=2, resource_name=t, configs=[
                inc.AlterableConfig(name="retention.ms", config_operation=0, value="600000")]) for t in ("cfg", "open")])),
        ("alter configs", ApiKey.ALTER_CONFIGS, 2, alt(validate_only=True, resources=[
            alt.AlterConfigsResource(resource_type=2, resource_name="hidden", configs=[alt.AlterableConfig(name="retention.ms", value="600000")])])),
        ("create partitions", ApiKey.CREATE_PARTITIONS, 3, cp(validate_only=True, timeout_ms=10_000, topics=[
            cp.CreatePartitionsTopic(name=t, count=2) for t in ("readonly", "open")])),
        ("delete records", ApiKey.DELETE_RECORDS, 2, dr(timeout_ms=10_000, topics=[
            dr.DeleteRecordsTopic(name=t, partitions=[dr.DeleteRecordsPartition(partition_index=0, offset=0)]) for t in ("readonly", "open")])),
    ]  # fmt: skip


async def _setup(kafka: KafkaCluster) -> dict[str, uuid.UUID]:
    async with open_admin(bootstrap_servers=kafka.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(t, 1, 1) for t in TOPICS])
        bindings = [
            AclBinding(
                _TYPES[resource],
                name,
                PatternType.PREFIXED if pattern == "prefixed" else PatternType.LITERAL,
                "User:bob",
                "*",
                _OPS[op],
                AclPermissionType.ALLOW if permission == "allow" else AclPermissionType.DENY,
            )
            for resource, name, pattern, op, permission in ACLS
        ]
        assert set((await admin.create_acls(bindings)).values()) == {None}
        described = await admin.describe_topics(list(TOPICS))
    return {t: described[t].topic_id for t in TOPICS}


async def _answers(
    servers: str, user: str, asked: list[tuple[str, int, int, Any]], ids: set[uuid.UUID]
) -> list[Any]:
    host, _, port = servers.rpartition(":")
    config = ClientConfig.from_dict(
        {
            "bootstrap.servers": servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": USERS[user],
        }
    )
    out = []
    async with anyio.create_task_group() as tg:
        conn = BrokerConnection(-1, host, int(port), config)
        await conn.open(tg)
        # The proxy learns topic ids from the Metadata answers its clients get.
        every = metadata_m.MetadataRequest(topics=None, allow_auto_topic_creation=False)
        seen = await conn.request(ApiKey.METADATA, every, version=12)
        out.append(("metadata, every topic", sorted(t.name for t in seen.topics)))
        for what, key, version, body in asked:
            if not conn.alive:  # a refusal that closed the connection shows as one
                conn = BrokerConnection(-1, host, int(port), config)
                await conn.open(tg)
            try:
                answer = shape(await conn.request(key, body, version=version, timeout=30), ids)
            except KafkaConnectionError as exc:
                answer = f"connection closed: {exc}"
            out.append((what, answer))
        await conn.aclose()
    return out


def test_the_proxy_refuses_what_kafka_refuses_and_as_kafka_does(
    kafka: KafkaCluster, ids: dict[str, uuid.UUID], tmp_path: Path
) -> None:
    sasl = sasl_address(kafka)
    az = Authorization()
    az.configure(
        {"rules": rules_for("User:alice"), "audit": {"path": str(tmp_path / "audit.jsonl")}}
    )
    asked = requests(ids)
    # Once to make what the first asking makes (the offsets and transactions
    # topics, the group): the answers compared are the second's.
    known = set(ids.values())
    anyio.run(_answers, sasl, "bob", asked, known, backend="trio")
    direct = anyio.run(_answers, sasl, "bob", asked, known, backend="trio")
    with proxy_in_thread(upstream=(sasl,), port=0, filters=(az,)) as px:
        through = anyio.run(_answers, px.bootstrap_servers, "alice", asked, known, backend="trio")
    mismatches = [
        f"{what}:\n  kafka: {kafka_says}\n  proxy: {proxy_says}"
        for (what, kafka_says), (_, proxy_says) in zip(direct, through, strict=True)
        if kafka_says != proxy_says
    ]
    assert not mismatches, "\n".join(mismatches)
    denied = sum(n for (d, _, _), n in az.decisions.items() if d == "deny")
    assert denied >= 25  # every refusal above was the proxy's own


@pytest.mark.parametrize("route_keys", ["murmur2", "none"])
def test_clients_through_the_proxy_to_kafka(
    kafka: KafkaCluster, ids: dict[str, uuid.UUID], tmp_path: Path, route_keys: str
) -> None:
    """trafka's SDK and confluent-kafka, logged in as alice (whom Kafka lets do
    all), through the proxy (routing by key, and forwarding: ``route_keys``)
    holding bob's ACLs as alice's rules: plain,
    idempotent and transactional producers, consumers in groups and an admin
    meet the refusals Kafka would give bob, and nothing else; Kafka's Java
    producer (4.4) as alice, plain, idempotent and transactional (tx-ok), is
    let through, each committed record read once and in order."""
    audit = tmp_path / "audit.jsonl"
    az = Authorization()
    az.configure({"rules": rules_for("User:alice"), "audit": {"path": str(audit)}})
    credentials = tmp_path / "principals.json"
    credentials.write_text(
        json.dumps({"User:alice": {"mechanism": "PLAIN", "username": "alice",
                                   "password": USERS["alice"]}})
    )  # fmt: skip
    with proxy_in_thread(
        upstream=(sasl_address(kafka),),
        port=0,
        filters=(az,),
        principal_credentials=str(credentials),
        route_keys=route_keys,
    ) as px:
        sdk = {
            "bootstrap_servers": px.bootstrap_servers,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "alice",
            "sasl_plain_password": USERS["alice"],
        }
        librdkafka = {
            "bootstrap.servers": px.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": USERS["alice"],
        }
        anyio.run(_sdk_clients, sdk, backend="trio")
        _confluent_clients(librdkafka)
        _java_producer(
            px.bootstrap_servers, {k: v for k, v in sdk.items() if k != "bootstrap_servers"}
        )
    denials = [e for e in _events(audit) if e["event"] == "authorization"]
    assert len(denials) == sum(n for (d, _, _), n in az.decisions.items() if d == "deny")
    refused = {(e["operation"], e["resource_type"], e["resource"]) for e in denials}
    assert refused >= {
        ("WRITE", "topic", "nowrite"),
        ("DESCRIBE", "transactional_id", "tx-no"),
        ("DESCRIBE", "group", "g-no"),
        ("WRITE", "topic", "readonly"),
        ("CREATE", "topic", "other-b"),
        ("DESCRIBE_CONFIGS", "topic", "hidden"),
    }


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _refused(coro: Any) -> int:
    with pytest.raises(KafkaError) as refused:
        await coro
    return int(refused.value.code)


async def _sdk_clients(login: dict[str, Any]) -> None:
    with anyio.fail_after(120):
        async with open_producer(**login) as producer:  # idempotent
            await producer.send_and_wait("open", b"sdk-1")
            code = await _refused(producer.send_and_wait("nowrite", b"x"))
            assert code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        async with open_producer(transactional_id="tx-ok", **login) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send("open", b"sdk-2")
            await producer.commit_transaction()
        async with open_producer(transactional_id="tx-no", **login) as producer:
            code = await _refused(producer.init_transactions())
            assert code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        async with open_consumer(
            "open", group_id="g-ok", auto_offset_reset="earliest", isolation_level="read_committed",
            **login,
        ) as consumer:  # fmt: skip
            got: set[bytes] = set()
            while not {b"sdk-1", b"sdk-2"} <= got:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    got.update(r.value for r in records)
            await consumer.commit()
        async with open_consumer("open", group_id="g-no", **login) as consumer:
            code = await _refused(consumer.getmany(timeout_ms=10_000))
            assert code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def _java_producer(servers: str, sdk: dict[str, Any]) -> None:
    """Kafka's Java producer as alice (SASL PLAIN) to ``open``, every mode in
    one JVM (tests/proxy/client_matrix.py), transactions as ``tx-ok``: every
    committed record read once and in order through the proxy, every
    delivery report where its record is."""
    from client_matrix import KEYS, by_partition, java_producer, java_sends, read_committed
    from encryption_helpers import once_in_order
    from proxy_helpers import fresh, misreported

    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="alice" password="{USERS["alice"]}";'
    )
    java = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": jaas,
    }
    prefix = fresh("java")
    reports, sent = java_sends(java_producer(), servers, "open", 10, prefix, "tx-ok", java)
    records = read_committed(servers, "open", 1, sent, **sdk)
    mine = [r for r in records if r.value.startswith(prefix.encode())]
    once_in_order(by_partition(mine, 1), sent, keys=KEYS)
    assert misreported(records, reports) is None, misreported(records, reports)


def _confluent_clients(settings: dict[str, Any]) -> None:
    reports: dict[str, Any] = {}
    producer = confluent_kafka.Producer({**settings, "enable.idempotence": True})
    for topic in ("pre-x", "readonly"):
        producer.produce(
            topic, b"ck", on_delivery=lambda err, msg: reports.__setitem__(msg.topic(), err)
        )
    producer.produce("open", b"ck-open")
    assert producer.flush(60) == 0
    assert reports["pre-x"] is None
    assert reports["readonly"].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    consumer = confluent_kafka.Consumer(
        {**settings, "group.id": "g-ok", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["open"])
    try:
        message = None  # g-ok's committed offset may be past the SDK's records: not past this one
        while message is None or message.error() or message.value() != b"ck-open":
            message = consumer.poll(1)
        consumer.commit(message, asynchronous=False)
    finally:
        consumer.close()
    admin = confluent_kafka.admin.AdminClient(settings)
    created = admin.create_topics([confluent_kafka.admin.NewTopic("other-b", 1, 1)])
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        created["other-b"].result(30)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    resource = confluent_kafka.admin.ConfigResource("topic", "hidden")
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        admin.describe_configs([resource])[resource].result(30)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_kafkas_java_tools_meet_the_same_refusals(
    kafka: KafkaCluster, ids: dict[str, uuid.UUID], tmp_path: Path
) -> None:
    """Kafka's own Java admin, console producer and consumer, and kafka-configs
    (one JVM: tests/java_harness.py), as bob straight to Kafka and as alice
    through the proxy: each command ends the same way on both paths."""
    from java_harness import ScriptSession

    tools = "org.apache.kafka.tools."
    az = Authorization()
    az.configure({"rules": rules_for("User:alice")})
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"

    def login(user: str) -> str:
        path = tmp_path / f"{user}.properties"
        path.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            f'sasl.jaas.config={plain} required username="{user}" password="{USERS[user]}";\n'
        )
        return str(path)

    def steps(servers: str, user: str) -> list[tuple[str, list[str], str | None]]:
        b = ["--bootstrap-server", servers, "--command-config", login(user)]
        p = ["--bootstrap-server", servers, "--producer.config", login(user)]
        c = ["--bootstrap-server", servers, "--consumer.config", login(user)]
        return [
            (tools + "TopicCommand", [*b, "--create", "--topic", f"new-java-{user}"], None),
            (tools + "TopicCommand", [*b, "--create", "--topic", "other-java"], None),
            (tools + "ConsoleProducer", [*p, "--topic", "open"], "j1\nj2\n"),
            (tools + "consumer.ConsoleConsumer", [*c, "--topic", "open", "--group", "g-ok",
                                                  "--from-beginning", "--max-messages", "2"], None),
            (tools + "consumer.ConsoleConsumer", [*c, "--topic", "open", "--group", "g-no",
                                                  "--timeout-ms", "3000"], None),
            (tools + "ConfigCommand", [*b, "--describe", "--entity-type", "topics",
                                       "--entity-name", "hidden"], None),
        ]  # fmt: skip

    def ending(outcome: dict[str, Any]) -> tuple[Any, ...]:
        text = outcome["out"] + outcome["err"]
        said = [
            phrase
            for phrase in (
                "Authorization failed",
                "TopicAuthorizationException",
                "GroupAuthorizationException",
                "Processed a total of 2 messages",
                "Processed a total of 0 messages",
                "doesn't exist",
            )
            if phrase in text
        ]
        return outcome["exit"], tuple(said)

    with ScriptSession() as session:
        direct = session.run(steps(sasl_address(kafka), "bob"), timeout=120)
        with proxy_in_thread(upstream=(sasl_address(kafka),), port=0, filters=(az,)) as px:
            through = session.run(steps(px.bootstrap_servers, "alice"), timeout=120)
    kafka_ends = [ending(o) for o in direct]
    assert kafka_ends == [ending(o) for o in through], (direct, through)
    assert kafka_ends[0][0] == 0 and kafka_ends[2][0] == 0  # allowed: created, written
    assert "Authorization failed" in kafka_ends[1][1]
    assert "Processed a total of 2 messages" in kafka_ends[3][1]
    assert "Processed a total of 0 messages" in kafka_ends[4][1]
    assert "doesn't exist" in kafka_ends[5][1]  # a topic bob may not describe is not listed
