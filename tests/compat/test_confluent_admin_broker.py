"""confluent-kafka's admin calls on the drop-in against a brokerlite broker,
each checked against what the broker holds afterwards (read with trafka's own
admin client): configs altered and described, ACLs created, described and
deleted, a group's offsets altered, listed and described, offsets listed by
spec, records deleted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from unique_names import names as _names

from trafka.compat.confluent import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    TopicCollection,
    TopicPartition,
    Uuid,
)
from trafka.compat.confluent.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
)
from trafka.sdk import blocking

pytestmark = pytest.mark.timeout(120)
WAIT_S = 60


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A brokerlite with Kafka's ACL authorizer (the client, anonymous, a super user)."""
    from trafka.brokerlite.server import broker_in_thread

    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path_factory.mktemp("admin-broker"),
        group_initial_rebalance_delay_ms=0,
        authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        super_users=("User:ANONYMOUS",),
    ) as running:
        yield running.bootstrap_servers


@pytest.fixture(scope="module")
def admin(bootstrap: str) -> Iterator[AdminClient]:
    with AdminClient({"bootstrap.servers": bootstrap}) as client:
        yield client


@pytest.fixture(scope="module")
def truth(bootstrap: str) -> Iterator[Any]:
    """trafka's own admin client: what the broker holds."""
    with blocking.Admin(bootstrap_servers=bootstrap) as client:
        yield client


def new_topic(admin: AdminClient, partitions: int = 1) -> str:
    topic = f"admin-{next(_names)}"
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(WAIT_S)
    return topic


def test_configs_altered_incrementally_are_described_and_held(
    admin: AdminClient, truth: Any
) -> None:
    topic = new_topic(admin)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    resource.add_incremental_config(
        ConfigEntry("retention.ms", "12345", incremental_operation=AlterConfigOpType.SET)
    )
    resource.add_incremental_config(
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)
    )
    assert admin.incremental_alter_configs([resource])[resource].result(WAIT_S) is None
    held = truth.describe_configs([topic], overrides_only=True)[topic]
    assert held["retention.ms"] == "12345"
    assert set(held["cleanup.policy"].split(",")) == {"delete", "compact"}

    described = admin.describe_configs([resource])[resource].result(WAIT_S)
    assert described["retention.ms"].value == "12345"
    assert described["retention.ms"].source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert described["max.message.bytes"].is_default

    undo = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
        ],
    )
    admin.incremental_alter_configs([undo])[undo].result(WAIT_S)
    assert "retention.ms" not in truth.describe_configs([topic], overrides_only=True)[topic]


def test_acls_created_described_and_deleted(admin: AdminClient, truth: Any) -> None:
    topic = f"acl-{next(_names)}"
    binding = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    assert admin.create_acls([binding])[binding].result(WAIT_S) is None
    assert [(b.name, b.principal) for b in truth.describe_acls()] == [(topic, "User:alice")]

    matching = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert admin.describe_acls(matching).result(WAIT_S) == [binding]
    assert admin.delete_acls([matching])[matching].result(WAIT_S) == [binding]
    assert truth.describe_acls() == []


def test_group_offsets_altered_listed_and_described(admin: AdminClient, truth: Any) -> None:
    topic = new_topic(admin, partitions=2)
    group = f"group-{next(_names)}"
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 3)]
    )
    altered = admin.alter_consumer_group_offsets([request])[group].result(WAIT_S)
    assert [(tp.partition, tp.offset) for tp in altered.topic_partitions] == [(0, 7), (1, 3)]
    held = truth.list_consumer_group_offsets(group)
    assert {tp.partition: offset for tp, offset in held.items()} == {0: 7, 1: 3}

    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    assert [
        (tp.topic, tp.partition, tp.offset) for tp in listed.result(WAIT_S).topic_partitions
    ] == [
        (topic, 0, 7),
        (topic, 1, 3),
    ]
    groups = admin.list_consumer_groups().result(WAIT_S)
    assert groups.errors == []
    assert group in {g.group_id for g in groups.valid}
    described = admin.describe_consumer_groups([group])[group].result(WAIT_S)
    assert (described.group_id, described.state, described.members) == (
        group,
        ConsumerGroupState.EMPTY,
        [],
    )


def test_offsets_listed_and_records_deleted(admin: AdminClient, truth: Any, bootstrap: str) -> None:
    topic = new_topic(admin)
    with blocking.Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(5):
            producer.send_and_wait(topic, b"v%d" % i, partition=0)
    tp = TopicPartition(topic, 0)

    def offset(spec: OffsetSpec) -> int:
        (future,) = admin.list_offsets({tp: spec}).values()
        found: int = future.result(WAIT_S).offset
        return found

    assert (offset(OffsetSpec.earliest()), offset(OffsetSpec.latest())) == (0, 5)
    deleted = admin.delete_records([TopicPartition(topic, 0, 2)])
    (future,) = deleted.values()
    assert future.result(WAIT_S).low_watermark == 2
    assert offset(OffsetSpec.earliest()) == 2
    held = truth.list_offsets({(topic, 0): "earliest"})
    assert [o for o, _ in held.values()] == [2]


def test_topics_and_cluster_described(admin: AdminClient, truth: Any) -> None:
    topic = new_topic(admin, partitions=3)
    described = admin.describe_cluster().result(WAIT_S)
    (node,) = described.nodes
    assert described.controller.id == node.id
    assert described.cluster_id == truth.describe_cluster().cluster_id
    metadata = admin.list_topics(topic)
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2]
    assert metadata.brokers[node.id].port == node.port
    (future,) = admin.describe_topics(TopicCollection([topic])).values()
    description = future.result(WAIT_S)
    assert [p.id for p in description.partitions] == [0, 1, 2]
    assert [p.leader.id for p in description.partitions] == [node.id] * 3
    held = truth.describe_topics([topic])[topic]
    assert str(description.topic_id) == str(Uuid(*divmod(held.topic_id.int, 2**64)))
