"""ACL enforcement in the topic, config and cluster-admin handlers, as Kafka's
broker enforces it: driven through the sans-IO core with SASL-authenticated
principals (``User:admin`` is a super user, ``alice`` and ``bob`` are not), and
once end to end with librdkafka."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import brokerlite_wire as wire
import pytest

from trafka.brokerlite import broker_in_thread
from trafka.brokerlite.handlers._util import TOPIC_AUTHORIZED_OPERATIONS
from trafka.brokerlite.security.authorizer import CLUSTER_NAME, RESOURCE_OPERATIONS, AclBinding
from trafka.brokerlite.server import RunningBroker
from trafka.codec.acl import AclOperation as Op
from trafka.codec.acl import AclPermissionType, PatternType
from trafka.codec.acl import AclResourceType as Res
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k02_list_offsets as list_offsets
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k19_create_topics as create_topics
from trafka.codec.messages import k20_delete_topics as delete_topics
from trafka.codec.messages import k21_delete_records as delete_records
from trafka.codec.messages import k23_offset_for_leader_epoch as leader_epoch
from trafka.codec.messages import k32_describe_configs as describe_configs
from trafka.codec.messages import k33_alter_configs as alter_configs
from trafka.codec.messages import k34_alter_replica_log_dirs as alter_log_dirs
from trafka.codec.messages import k35_describe_log_dirs as describe_log_dirs
from trafka.codec.messages import k37_create_partitions as create_partitions
from trafka.codec.messages import k43_elect_leaders as elect_leaders
from trafka.codec.messages import k44_incremental_alter_configs as incremental
from trafka.codec.messages import k45_alter_partition_reassignments as alter_reassign
from trafka.codec.messages import k46_list_partition_reassignments as list_reassign
from trafka.codec.messages import k50_describe_user_scram_credentials as describe_scram
from trafka.codec.messages import k51_alter_user_scram_credentials as alter_scram
from trafka.codec.messages import k60_describe_cluster as describe_cluster
from trafka.codec.messages import k61_describe_producers as describe_producers
from trafka.codec.messages import k75_describe_topic_partitions as dtp

pytestmark = pytest.mark.timeout(60)

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
USERS = (("admin", "pw"), ("alice", "pw"), ("bob", "pw"))
ADMIN, ALICE, BOB = 1, 2, 3  # connection ids
TAF = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CAF = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
GAF = ErrorCode.GROUP_AUTHORIZATION_FAILED
NULL_UUID = uuid.UUID(int=0)
TOPIC_TYPE, BROKER_TYPE, BROKER_LOGGER_TYPE, GROUP_TYPE = 2, 4, 8, 32  # ConfigResource types


def secured(open_core: Any, **settings: Any) -> Any:
    core = open_core(
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        authorizer_class_name=AUTHORIZER,
        super_users=("User:admin",),
        **settings,
    )
    for conn, (user, password) in zip((ADMIN, ALICE, BOB), USERS, strict=True):
        core.login(user, password, conn_id=conn, peer=f"127.0.0.1:{50000 + conn}")
    return core


@pytest.fixture
def core(open_core: Any) -> Any:
    return secured(open_core)


def acl(
    core: Any,
    operation: int,
    resource_type: int,
    name: str,
    *,
    principal: str = "User:alice",
    pattern: int = PatternType.LITERAL,
    permission: int = AclPermissionType.ALLOW,
) -> None:
    # plain ints, as the ACL APIs carry them
    binding = AclBinding(
        int(resource_type), name, int(pattern), principal, "*", int(operation), int(permission)
    )
    assert core.broker.authorizer.create([binding]) == [(ErrorCode.NONE, None)]


def topic(core: Any, name: str, partitions: int = 1) -> None:
    wire.create(core, name, partitions)  # as the super user (connection 1)


def produce(core: Any, name: str, conn: int, **kwargs: Any) -> Any:
    body = wire.produce_request(name, wire.batch(core, [b"v"]), **kwargs)
    return core.call(0, 9, body, conn_id=conn).responses[0].partition_responses[0]


def fetch(core: Any, name: str, conn: int) -> Any:
    body = wire.fetch_body(name, max_bytes=1 << 20)
    return core.call(1, 12, body, conn_id=conn).responses[0].partitions[0]


def meta(core: Any, names: list[str] | None, conn: int, version: int = 10, **kw: Any) -> Any:
    topics = (
        None
        if names is None
        else [metadata.MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    )
    return core.call(3, version, metadata.MetadataRequest(topics=topics, **kw), conn_id=conn)


# -- Produce ----------------------------------------------------------------------------------


def test_produce_needs_write_on_the_topic(core: Any) -> None:
    topic(core, "orders")
    assert produce(core, "orders", ALICE).error_code == TAF
    # an unknown topic is refused the same way: its existence is not revealed
    assert produce(core, "nowhere", ALICE).error_code == TAF
    acl(core, Op.WRITE, Res.TOPIC, "ord", pattern=PatternType.PREFIXED)
    assert produce(core, "orders", ALICE).error_code == ErrorCode.NONE
    assert produce(core, "ord-missing", ALICE).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(core, "orders", BOB).error_code == TAF
    assert produce(core, "orders", ADMIN).error_code == ErrorCode.NONE  # super user


def test_produce_refuses_only_the_unwritable_topics_of_a_request(core: Any) -> None:
    topic(core, "mine")
    topic(core, "theirs")
    acl(core, Op.WRITE, Res.TOPIC, "mine")
    records = wire.batch(core, [b"v"])
    body = wire.produce_request("mine", records)
    other = wire.produce_request("theirs", records).topic_data[0]
    body.topic_data.append(other)
    answer = core.call(0, 9, body, conn_id=ALICE)
    codes = {t.name: t.partition_responses[0].error_code for t in answer.responses}
    assert codes == {"mine": ErrorCode.NONE, "theirs": TAF}
    assert wire.read(core, "mine").records is not None
    assert wire.read(core, "theirs").high_watermark == 0


def test_a_deny_overrides_a_wildcard_allow(core: Any) -> None:
    topic(core, "secret")
    topic(core, "public")
    acl(core, Op.WRITE, Res.TOPIC, "*", principal="User:*")
    acl(core, Op.WRITE, Res.TOPIC, "secret", permission=AclPermissionType.DENY)
    assert produce(core, "public", ALICE).error_code == ErrorCode.NONE
    assert produce(core, "secret", ALICE).error_code == TAF
    assert produce(core, "secret", BOB).error_code == ErrorCode.NONE


def test_transactional_batches_need_write_on_the_transactional_id(core: Any) -> None:
    topic(core, "t")
    acl(core, Op.WRITE, Res.TOPIC, "t")
    txn = wire.batch(core, [b"v"], pid=1000, epoch=0, seq=0, txn=True)
    body = wire.produce_request("t", txn, tid="tx-1")
    answer = core.call(0, 9, body, conn_id=ALICE)
    codes = [p.error_code for t in answer.responses for p in t.partition_responses]
    assert codes == [ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]
    # acks=0: Kafka closes the connection instead of answering
    body0 = wire.produce_request("t", txn, tid="tx-1", acks=0)
    assert isinstance(core.send(0, 9, body0, conn_id=ALICE), core.outcome_types[3])
    core.login("alice", "pw", conn_id=4, peer="127.0.0.1:50004")  # alice, reconnected
    acl(core, Op.WRITE, Res.TRANSACTIONAL_ID, "tx-", pattern=PatternType.PREFIXED)
    answer = core.call(0, 9, body, conn_id=4)
    code = answer.responses[0].partition_responses[0].error_code
    assert code != ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # now the txn checks decide
    assert code != ErrorCode.NONE  # (no transaction was begun)


# -- Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords, DescribeProducers -----------------


def test_fetch_needs_read(core: Any) -> None:
    topic(core, "f")
    assert produce(core, "f", ADMIN).error_code == ErrorCode.NONE
    assert fetch(core, "f", ALICE).error_code == TAF
    acl(core, Op.DESCRIBE, Res.TOPIC, "f")
    assert fetch(core, "f", ALICE).error_code == TAF  # DESCRIBE does not imply READ
    acl(core, Op.READ, Res.TOPIC, "f")
    got = fetch(core, "f", ALICE)
    assert got.error_code == ErrorCode.NONE and got.records


def test_fetch_by_topic_id(core: Any) -> None:
    topic(core, "byid")
    topic_id = core.broker.logs.topic("byid").topic_id
    stranger = uuid.uuid4()

    def by_id(tid: uuid.UUID) -> int:
        plain = wire.fetch_body("", max_bytes=1 << 20)
        body = dataclasses.replace(
            plain, topics=[dataclasses.replace(plain.topics[0], topic_id=tid)]
        )
        return core.call(1, 13, body, conn_id=ALICE).responses[0].partitions[0].error_code

    assert by_id(stranger) == ErrorCode.UNKNOWN_TOPIC_ID
    assert by_id(topic_id) == TAF
    acl(core, Op.READ, Res.TOPIC, "byid")
    assert by_id(topic_id) == ErrorCode.NONE


def test_list_offsets_needs_describe_implied_by_read(core: Any) -> None:
    topic(core, "lo")
    body = list_offsets.ListOffsetsRequest(
        replica_id=-1,
        topics=[
            list_offsets.ListOffsetsRequest.ListOffsetsTopic(
                name="lo",
                partitions=[list_offsets.ListOffsetsRequest.ListOffsetsPartition(timestamp=-1)],
            )
        ],
    )
    answer = core.call(2, 7, body, conn_id=ALICE).topics[0].partitions[0]
    assert (answer.error_code, answer.offset) == (TAF, -1)
    acl(core, Op.READ, Res.TOPIC, "lo")
    answer = core.call(2, 7, body, conn_id=ALICE).topics[0].partitions[0]
    assert (answer.error_code, answer.offset) == (ErrorCode.NONE, 0)


def test_offset_for_leader_epoch(core: Any) -> None:
    topic(core, "ep")
    body = leader_epoch.OffsetForLeaderEpochRequest(
        topics=[
            leader_epoch.OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
                topic="ep",
                partitions=[leader_epoch.OffsetForLeaderEpochRequest.OffsetForLeaderPartition()],
            )
        ]
    )

    def code(conn: int) -> int:
        return core.call(23, 4, body, conn_id=conn).topics[0].partitions[0].error_code

    assert code(ALICE) == TAF
    assert code(BOB) == TAF
    acl(core, Op.WRITE, Res.TOPIC, "ep")  # WRITE implies DESCRIBE
    assert code(ALICE) == ErrorCode.NONE
    acl(core, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME, principal="User:bob")
    assert code(BOB) == ErrorCode.NONE


def test_delete_records_needs_delete(core: Any) -> None:
    topic(core, "dr")
    produce(core, "dr", ADMIN)
    body = delete_records.DeleteRecordsRequest(
        topics=[
            delete_records.DeleteRecordsRequest.DeleteRecordsTopic(
                name="dr",
                partitions=[delete_records.DeleteRecordsRequest.DeleteRecordsPartition(offset=-1)],
            )
        ]
    )
    got = core.call(21, 2, body, conn_id=ALICE).topics[0].partitions[0]
    assert (got.error_code, got.low_watermark) == (TAF, -1)
    acl(core, Op.DELETE, Res.TOPIC, "dr")
    got = core.call(21, 2, body, conn_id=ALICE).topics[0].partitions[0]
    assert (got.error_code, got.low_watermark) == (ErrorCode.NONE, 1)


def test_describe_producers_needs_read(core: Any) -> None:
    topic(core, "dp")
    body = describe_producers.DescribeProducersRequest(
        topics=[
            describe_producers.DescribeProducersRequest.TopicRequest(
                name="dp", partition_indexes=[0]
            )
        ]
    )
    assert core.call(61, 0, body, conn_id=ALICE).topics[0].partitions[0].error_code == TAF
    acl(core, Op.DESCRIBE, Res.TOPIC, "dp")
    assert core.call(61, 0, body, conn_id=ALICE).topics[0].partitions[0].error_code == TAF
    acl(core, Op.READ, Res.TOPIC, "dp")
    assert core.call(61, 0, body, conn_id=ALICE).topics[0].partitions[0].error_code == 0


# -- Metadata and DescribeTopicPartitions ---------------------------------------------------------


def test_metadata_hides_and_refuses_topics_without_describe(core: Any) -> None:
    topic(core, "seen")
    topic(core, "unseen")
    acl(core, Op.WRITE, Res.TOPIC, "seen")  # implies DESCRIBE
    every = meta(core, None, ALICE)
    assert [t.name for t in every.topics] == ["seen"]
    named = meta(core, ["seen", "unseen"], ALICE, allow_auto_topic_creation=False)
    by_name = {t.name: t for t in named.topics}
    assert by_name["seen"].error_code == ErrorCode.NONE and by_name["seen"].partitions
    unseen = by_name["unseen"]
    assert (unseen.error_code, unseen.topic_id, unseen.partitions) == (TAF, NULL_UUID, [])


def test_metadata_by_topic_id_without_describe(core: Any) -> None:
    topic(core, "hid")
    tid = core.broker.logs.topic("hid").topic_id
    body = metadata.MetadataRequest(
        topics=[metadata.MetadataRequest.MetadataRequestTopic(topic_id=tid, name=None)]
    )
    got = core.call(3, 12, body, conn_id=ALICE).topics[0]
    assert (got.error_code, got.name, got.topic_id) == (TAF, None, tid)


def test_metadata_auto_creation_needs_create(core: Any) -> None:
    acl(core, Op.DESCRIBE, Res.TOPIC, "auto-", pattern=PatternType.PREFIXED)
    got = meta(core, ["auto-a"], ALICE).topics[0]
    assert got.error_code == TAF
    assert core.broker.logs.topic("auto-a") is None
    acl(core, Op.CREATE, Res.TOPIC, "auto-a")
    got = meta(core, ["auto-a"], ALICE).topics[0]  # made; the answer: not yet (Kafka 3.9's)
    assert got.error_code == ErrorCode.LEADER_NOT_AVAILABLE
    assert core.broker.logs.topic("auto-a") is not None
    acl(core, Op.CREATE, Res.CLUSTER, CLUSTER_NAME)
    assert meta(core, ["auto-b"], ALICE).topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE
    assert core.broker.logs.topic("auto-b") is not None


def test_metadata_authorized_operations(core: Any) -> None:
    topic(core, "ops")
    acl(core, Op.READ, Res.TOPIC, "ops")
    acl(core, Op.ALTER_CONFIGS, Res.TOPIC, "ops")
    got = meta(
        core,
        ["ops"],
        ALICE,
        include_topic_authorized_operations=True,
        include_cluster_authorized_operations=True,
    )
    want = (
        (1 << Op.READ) | (1 << Op.DESCRIBE) | (1 << Op.ALTER_CONFIGS) | (1 << Op.DESCRIBE_CONFIGS)
    )
    assert got.topics[0].topic_authorized_operations == want
    assert got.cluster_authorized_operations == 0  # no DESCRIBE on the cluster
    acl(core, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME)
    again = meta(core, ["ops"], ALICE, include_cluster_authorized_operations=True)
    assert again.cluster_authorized_operations == 1 << Op.DESCRIBE
    admin = meta(core, ["ops"], ADMIN, include_topic_authorized_operations=True)
    assert admin.topics[0].topic_authorized_operations == TOPIC_AUTHORIZED_OPERATIONS


def test_describe_topic_partitions(core: Any) -> None:
    for name in ("a", "b", "c"):
        topic(core, name)
    acl(core, Op.DESCRIBE, Res.TOPIC, "a")
    acl(core, Op.READ, Res.TOPIC, "c")
    every = core.call(75, 0, dtp.DescribeTopicPartitionsRequest(), conn_id=ALICE)
    assert [t.name for t in every.topics] == ["a", "c"]
    assert every.topics[0].topic_authorized_operations == 1 << Op.DESCRIBE
    named = core.call(
        75,
        0,
        dtp.DescribeTopicPartitionsRequest(
            topics=[dtp.DescribeTopicPartitionsRequest.TopicRequest(name=n) for n in "abc"]
        ),
        conn_id=ALICE,
    )
    assert [(t.name, t.error_code) for t in named.topics] == [
        ("a", ErrorCode.NONE),
        ("c", ErrorCode.NONE),
        ("b", TAF),
    ]
    assert named.topics[2].topic_id == NULL_UUID and named.topics[2].partitions == []


# -- CreateTopics, DeleteTopics, CreatePartitions ------------------------------------------------


def _create_body(*names: str) -> Any:
    return create_topics.CreateTopicsRequest(
        topics=[
            create_topics.CreateTopicsRequest.CreatableTopic(
                name=n, num_partitions=2, replication_factor=1
            )
            for n in names
        ]
    )


def test_create_topics_needs_create(core: Any) -> None:
    got = core.call(19, 7, _create_body("new"), conn_id=ALICE).topics[0]
    assert got.error_code == TAF and core.broker.logs.topic("new") is None
    acl(core, Op.CREATE, Res.TOPIC, "ne", pattern=PatternType.PREFIXED)
    got = core.call(19, 7, _create_body("new"), conn_id=ALICE).topics[0]
    # created, but without DESCRIBE_CONFIGS its settings are not shown
    assert got.error_code == ErrorCode.NONE and core.broker.logs.topic("new") is not None
    assert (got.topic_config_error_code, got.num_partitions, got.configs) == (TAF, -1, [])
    acl(core, Op.DESCRIBE_CONFIGS, Res.TOPIC, "*")
    acl(core, Op.CREATE, Res.CLUSTER, CLUSTER_NAME)
    got = core.call(19, 7, _create_body("other"), conn_id=ALICE).topics[0]
    assert (got.error_code, got.topic_config_error_code, got.num_partitions) == (0, 0, 2)
    assert got.configs


def test_delete_topics_by_name_and_id(core: Any) -> None:
    topic(core, "d1")
    topic(core, "d2")

    def delete_names(*names: str) -> list[Any]:
        body = delete_topics.DeleteTopicsRequest(topic_names=list(names))
        return core.call(20, 5, body, conn_id=ALICE).responses

    # without DESCRIBE, existing and missing topics look the same
    assert [r.error_code for r in delete_names("d1", "missing")] == [TAF, TAF]
    acl(core, Op.DESCRIBE, Res.TOPIC, "*")
    assert [r.error_code for r in delete_names("d1", "missing")] == [
        TAF,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    d2 = core.broker.logs.topic("d2").topic_id
    body = delete_topics.DeleteTopicsRequest(
        topics=[delete_topics.DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=d2)]
    )
    got = core.call(20, 6, body, conn_id=BOB).responses[0]
    assert (got.error_code, got.name, got.topic_id) == (TAF, None, d2)  # bob may not see it
    got = core.call(20, 6, body, conn_id=ALICE).responses[0]
    assert (got.error_code, got.name) == (TAF, "d2")  # alice sees it, may not delete it
    stranger = delete_topics.DeleteTopicsRequest(
        topics=[
            delete_topics.DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=uuid.uuid4())
        ]
    )
    assert (
        core.call(20, 6, stranger, conn_id=BOB).responses[0].error_code
        == ErrorCode.UNKNOWN_TOPIC_ID
    )
    acl(core, Op.DELETE, Res.TOPIC, "d1")
    assert [r.error_code for r in delete_names("d1")] == [ErrorCode.NONE]
    assert core.broker.logs.topic("d1") is None
    acl(core, Op.DELETE, Res.CLUSTER, CLUSTER_NAME, principal="User:bob")
    assert core.call(20, 6, body, conn_id=BOB).responses[0].error_code == ErrorCode.NONE


def test_create_partitions_needs_alter(core: Any) -> None:
    topic(core, "grow")
    body = create_partitions.CreatePartitionsRequest(
        topics=[
            create_partitions.CreatePartitionsRequest.CreatePartitionsTopic(
                name="grow", count=3, assignments=None
            )
        ]
    )
    assert core.call(37, 3, body, conn_id=ALICE).results[0].error_code == TAF
    acl(core, Op.ALTER, Res.TOPIC, "grow")
    assert core.call(37, 3, body, conn_id=ALICE).results[0].error_code == ErrorCode.NONE
    assert core.broker.logs.topic("grow").num_partitions == 3


# -- configs ------------------------------------------------------------------------------------


def _describe(core: Any, conn: int, *resources: tuple[int, str]) -> list[int]:
    body = describe_configs.DescribeConfigsRequest(
        resources=[
            describe_configs.DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=kind, resource_name=name, configuration_keys=None
            )
            for kind, name in resources
        ]
    )
    return [r.error_code for r in core.call(32, 4, body, conn_id=conn).results]


def test_describe_configs_per_resource_kind(core: Any) -> None:
    topic(core, "cfg")
    wanted = [(TOPIC_TYPE, "cfg"), (BROKER_TYPE, str(core.broker.node_id)), (GROUP_TYPE, "g1")]
    assert _describe(core, ALICE, *wanted) == [TAF, CAF, GAF]
    acl(core, Op.ALTER_CONFIGS, Res.TOPIC, "cfg")  # implies DESCRIBE_CONFIGS
    acl(core, Op.DESCRIBE_CONFIGS, Res.CLUSTER, CLUSTER_NAME)
    acl(core, Op.DESCRIBE_CONFIGS, Res.GROUP, "g", pattern=PatternType.PREFIXED)
    assert _describe(core, ALICE, *wanted) == [0, 0, 0]
    assert _describe(core, BOB, (TOPIC_TYPE, "cfg")) == [TAF]
    assert _describe(core, ADMIN, *wanted) == [0, 0, 0]


def test_alter_configs_per_resource_kind(core: Any) -> None:
    topic(core, "alt")

    def legacy(conn: int, kind: int, name: str, key: str, value: str) -> int:
        body = alter_configs.AlterConfigsRequest(
            resources=[
                alter_configs.AlterConfigsRequest.AlterConfigsResource(
                    resource_type=kind,
                    resource_name=name,
                    configs=[
                        alter_configs.AlterConfigsRequest.AlterableConfig(name=key, value=value)
                    ],
                )
            ]
        )
        return core.call(33, 2, body, conn_id=conn).responses[0].error_code

    def incr(conn: int, kind: int, name: str, key: str, value: str) -> int:
        body = incremental.IncrementalAlterConfigsRequest(
            resources=[
                incremental.IncrementalAlterConfigsRequest.AlterConfigsResource(
                    resource_type=kind,
                    resource_name=name,
                    configs=[
                        incremental.IncrementalAlterConfigsRequest.AlterableConfig(
                            name=key, value=value
                        )
                    ],
                )
            ]
        )
        return core.call(44, 1, body, conn_id=conn).responses[0].error_code

    node = str(core.broker.node_id)
    for call in (legacy, incr):
        assert call(ALICE, TOPIC_TYPE, "alt", "retention.ms", "1000") == TAF
        assert call(ALICE, GROUP_TYPE, "grp", "share.auto.offset.reset", "earliest") == GAF
        assert call(ALICE, BROKER_TYPE, node, "log.retention.ms", "1") == CAF
    assert incr(ALICE, BROKER_LOGGER_TYPE, node, "root", "DEBUG") == CAF
    acl(core, Op.ALTER_CONFIGS, Res.TOPIC, "alt")
    acl(core, Op.ALTER_CONFIGS, Res.GROUP, "grp")
    acl(core, Op.ALTER_CONFIGS, Res.CLUSTER, CLUSTER_NAME)
    for call in (legacy, incr):
        assert call(ALICE, TOPIC_TYPE, "alt", "retention.ms", "1000") == ErrorCode.NONE
        assert call(ALICE, GROUP_TYPE, "grp", "share.auto.offset.reset", "earliest") == 0
        # authorized, then refused as before: brokerlite's broker configs are static
        assert call(ALICE, BROKER_TYPE, node, "log.retention.ms", "1") == ErrorCode.INVALID_REQUEST
    assert core.broker.logs.describe_configs("alt")  # still there


# -- cluster-level admin APIs --------------------------------------------------------------------

CLUSTER_CALLS: list[tuple[int, int, Any, int]] = [
    (
        34,
        2,
        alter_log_dirs.AlterReplicaLogDirsRequest(
            dirs=[
                alter_log_dirs.AlterReplicaLogDirsRequest.AlterReplicaLogDir(
                    path="/x",
                    topics=[
                        alter_log_dirs.AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(
                            name="t", partitions=[0]
                        )
                    ],
                )
            ]
        ),
        Op.ALTER,
    ),
    (35, 4, describe_log_dirs.DescribeLogDirsRequest(topics=None), Op.DESCRIBE),
    (
        43,
        2,
        elect_leaders.ElectLeadersRequest(
            topic_partitions=[
                elect_leaders.ElectLeadersRequest.TopicPartitions(topic="t", partitions=[0])
            ]
        ),
        Op.ALTER,
    ),
    (  # v0 has no top-level error: the refusal is on each named partition only
        43,
        0,
        elect_leaders.ElectLeadersRequest(
            topic_partitions=[
                elect_leaders.ElectLeadersRequest.TopicPartitions(topic="t", partitions=[0])
            ]
        ),
        Op.ALTER,
    ),
    (
        45,
        0,
        alter_reassign.AlterPartitionReassignmentsRequest(
            topics=[
                alter_reassign.AlterPartitionReassignmentsRequest.ReassignableTopic(
                    name="t",
                    partitions=[
                        alter_reassign.AlterPartitionReassignmentsRequest.ReassignablePartition(
                            partition_index=0
                        )
                    ],
                )
            ]
        ),
        Op.ALTER,
    ),
    (46, 0, list_reassign.ListPartitionReassignmentsRequest(topics=None), Op.DESCRIBE),
    (50, 0, describe_scram.DescribeUserScramCredentialsRequest(users=None), Op.DESCRIBE),
    (
        51,
        0,
        alter_scram.AlterUserScramCredentialsRequest(
            deletions=[
                alter_scram.AlterUserScramCredentialsRequest.ScramCredentialDeletion(
                    name="bob", mechanism=1
                )
            ]
        ),
        Op.ALTER,
    ),
]


def _codes(answer: Any) -> list[int]:
    """Every error code of an answer, top-level and nested, in order."""
    found: list[int] = []

    def walk(value: Any) -> None:
        if isinstance(value, list):
            for item in value:
                walk(item)
        elif hasattr(value, "__dataclass_fields__"):
            for name in value.__dataclass_fields__:
                if name == "error_code":
                    found.append(getattr(value, name))
                else:
                    walk(getattr(value, name))

    walk(answer)
    return found


@pytest.mark.parametrize(
    ("key", "version", "body", "operation"), CLUSTER_CALLS, ids=lambda v: str(v)[:20]
)
def test_cluster_admin_apis(core: Any, key: int, version: int, body: Any, operation: int) -> None:
    topic(core, "t")
    # (A version without a top-level error field decodes it as NONE.)
    denied = _codes(core.call(key, version, body, conn_id=ALICE))
    assert set(denied) - {ErrorCode.NONE} == {CAF}
    other = Op.DESCRIBE if operation == Op.ALTER else Op.ALTER_CONFIGS
    acl(core, other, Res.CLUSTER, CLUSTER_NAME)  # the wrong right does not help
    assert set(_codes(core.call(key, version, body, conn_id=ALICE))) - {ErrorCode.NONE} == {CAF}
    acl(core, operation, Res.CLUSTER, CLUSTER_NAME)
    allowed = _codes(core.call(key, version, body, conn_id=ALICE))
    assert CAF not in allowed
    assert CAF not in _codes(core.call(key, version, body, conn_id=ADMIN))


def test_describe_cluster_reports_cluster_operations(core: Any) -> None:
    body = describe_cluster.DescribeClusterRequest(include_cluster_authorized_operations=True)
    got = core.call(60, 1, body, conn_id=ALICE)
    assert (got.error_code, got.cluster_authorized_operations, len(got.brokers)) == (0, 0, 1)
    acl(core, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME)
    acl(core, Op.IDEMPOTENT_WRITE, Res.CLUSTER, CLUSTER_NAME)
    got = core.call(60, 1, body, conn_id=ALICE)
    assert got.cluster_authorized_operations == (1 << Op.DESCRIBE) | (1 << Op.IDEMPOTENT_WRITE)
    full = sum(1 << op for op in RESOURCE_OPERATIONS[Res.CLUSTER])
    assert core.call(60, 1, body, conn_id=ADMIN).cluster_authorized_operations == full


# -- the authorizer's settings ---------------------------------------------------------------------


def test_allow_everyone_if_no_acl_found(open_core: Any) -> None:
    core = secured(open_core, allow_everyone_if_no_acl_found=True)
    topic(core, "open")
    topic(core, "guarded")
    assert produce(core, "open", BOB).error_code == ErrorCode.NONE
    assert fetch(core, "open", BOB).error_code == ErrorCode.NONE
    acl(core, Op.WRITE, Res.TOPIC, "guarded")  # now an ACL names it: only alice
    assert produce(core, "guarded", ALICE).error_code == ErrorCode.NONE
    assert produce(core, "guarded", BOB).error_code == TAF


def test_without_an_authorizer_everything_is_allowed(open_core: Any) -> None:
    core = open_core(security_protocol="SASL_PLAINTEXT", sasl_users=USERS)
    core.login("bob", "pw", conn_id=BOB)
    topic_body = _create_body("free")
    assert core.call(19, 7, topic_body, conn_id=BOB).topics[0].error_code == ErrorCode.NONE
    assert produce(core, "free", BOB).error_code == ErrorCode.NONE
    assert fetch(core, "free", BOB).error_code == ErrorCode.NONE
    got = meta(core, ["free"], BOB, include_topic_authorized_operations=True)
    assert got.topics[0].topic_authorized_operations == TOPIC_AUTHORIZED_OPERATIONS
    assert set(_codes(core.call(35, 4, CLUSTER_CALLS[1][2], conn_id=BOB))) == {0}


# -- end to end: librdkafka over SASL_PLAINTEXT ---------------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0,
        data_dir=tmp_path / "data",
        group_initial_rebalance_delay_ms=0,
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        authorizer_class_name=AUTHORIZER,
        super_users=("User:admin",),
    ) as running:
        yield running


@pytest.mark.timeout(120)
def test_confluent_producer_needs_write(served: RunningBroker) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    admin_api = pytest.importorskip("confluent_kafka.admin")

    def config(user: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": served.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": user,
            "sasl.password": "pw",
        }

    admin = admin_api.AdminClient(config("admin"))
    for future in admin.create_topics([admin_api.NewTopic("guarded", 1, 1)]).values():
        future.result(timeout=30)

    def produce_once() -> Any:
        reports: list[Any] = []
        producer = confluent_kafka.Producer(
            {**config("alice"), "message.timeout.ms": 10_000, "linger.ms": 0}
        )
        producer.produce(
            "guarded", b"hello", on_delivery=lambda err, msg: reports.append((err, msg.offset()))
        )
        deadline = time.monotonic() + 30
        while not reports and time.monotonic() < deadline:
            producer.poll(0.2)
        producer.flush(10)
        assert reports, "no delivery report"
        err, offset = reports[0]
        assert err is not None or offset == 0, reports
        return err

    def allow(operation: Any) -> None:
        binding = admin_api.AclBinding(
            admin_api.ResourceType.TOPIC,
            "guarded",
            admin_api.ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            operation,
            admin_api.AclPermissionType.ALLOW,
        )
        for future in admin.create_acls([binding]).values():
            future.result(timeout=30)

    # Metadata refuses the topic first (no DESCRIBE)...
    err = produce_once()
    assert err is not None
    assert err.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    # ...and with DESCRIBE the Produce request itself is refused (no WRITE)
    allow(admin_api.AclOperation.DESCRIBE)
    err = produce_once()
    assert err is not None
    assert err.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    allow(admin_api.AclOperation.WRITE)
    assert produce_once() is None
