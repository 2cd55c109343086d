"""Share groups and group configs with real admin clients against a running brokerlite:
kafka-python's (list_groups with type and state filters, describe_groups,
delete_groups, GROUP config resources) and confluent-kafka's (GROUP config
resources; its consumer-group listing leaves share groups out, as with Kafka).
The share group's member is a raw ShareGroupHeartbeat client: the ShareConsumers
also need ShareFetch, which is tested with it."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from confluent_kafka.admin import ConfigResource as CkConfigResource
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.admin import NewTopic as KpNewTopic

from trafka.codec.messages import k76_share_group_heartbeat as hb

pytestmark = pytest.mark.timeout(90)


def heartbeat(client: Any, group: str, member: str, epoch: int, topics: list[str] | None) -> Any:
    body = hb.ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics
    )
    return client.request(76, 1, body)


def test_kafka_python_lists_describes_configures_and_deletes_share_groups(
    running: Any, raw_client: Any, topic_name: str
) -> None:
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap_servers)
    try:
        admin.create_topics([KpNewTopic(topic_name, 2, 1)])
        member = raw_client(running.address)
        assert heartbeat(member, "queue", "m1", 0, [topic_name]).error_code == 0
        assert heartbeat(member, "parked", "m2", 0, [topic_name]).error_code == 0
        assert heartbeat(member, "parked", "m2", -1, None).error_code == 0

        groups = {g["group_id"]: g for g in admin.list_groups(types_filter=["share"])}
        assert {g: (v["group_type"], v["group_state"]) for g, v in groups.items()} == {
            "queue": ("share", "Stable"),
            "parked": ("share", "Empty"),
        }
        assert [g["group_id"] for g in admin.list_groups(states_filter=["Empty"])] == ["parked"]
        assert admin.list_groups(types_filter=["classic"]) == []
        # DescribeGroups (classic) sees a share group as Dead, as Kafka's v0-5 do.
        assert admin.describe_groups(["queue"])["queue"]["group_state"] == "Dead"

        resource = ConfigResource(ConfigResourceType.GROUP, "queue")
        described = admin.describe_configs([resource], config_filter="all")
        configs = described["group"]["queue"]
        assert configs["share.auto.offset.reset"]["value"] == "latest"
        assert configs["share.record.lock.duration.ms"]["config_type"] == "INT"
        assert configs["share.isolation.level"]["config_source"] == "DEFAULT_CONFIG"

        change = ConfigResource(
            ConfigResourceType.GROUP,
            "queue",
            configs={"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "3"},
        )
        assert admin.alter_configs([change]) == {"group": {"queue": "OK"}}
        modified = admin.describe_configs([ConfigResource(ConfigResourceType.GROUP, "queue")])
        assert {k: v["value"] for k, v in modified["group"]["queue"].items()} == {
            "share.auto.offset.reset": "earliest",
            "share.delivery.count.limit": "3",
        }
        assert running.broker.share_groups.config("queue").delivery_count_limit == 3

        bad = ConfigResource(
            ConfigResourceType.GROUP, "queue", configs={"share.delivery.count.limit": "50"}
        )
        outcome = admin.alter_configs([bad])["group"]["queue"]
        assert outcome.startswith("[Error 40] InvalidConfigurationError")

        assert admin.reset_configs(
            [ConfigResource(ConfigResourceType.GROUP, "queue", ["share.auto.offset.reset"])]
        ) == {"group": {"queue": "OK"}}
        assert running.broker.share_groups.overrides("queue") == {"share.delivery.count.limit": "3"}

        assert admin.delete_groups(["queue"]) == {"queue": "NonEmptyGroupError"}
        assert heartbeat(member, "queue", "m1", -1, None).error_code == 0
        assert admin.delete_groups(["queue", "parked"]) == {"queue": "OK", "parked": "OK"}
        assert admin.list_groups(types_filter=["share"]) == []
    finally:
        admin.close()


def test_confluent_kafka_configures_groups_and_lists_only_consumer_groups(
    running: Any, raw_client: Any, topic_name: str
) -> None:
    admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
    member = raw_client(running.address)
    for future in admin.create_topics([NewTopic(topic_name, 1, 1)]).values():
        future.result(timeout=30)
    assert heartbeat(member, "ck-queue", "m1", 0, [topic_name]).error_code == 0

    listed = admin.list_consumer_groups(request_timeout=30).result()
    assert "ck-queue" not in [g.group_id for g in listed.valid]

    resource = CkConfigResource(ResourceType.GROUP, "ck-queue")
    (future,) = admin.describe_configs([resource], request_timeout=30).values()
    configs = future.result()
    assert configs["share.session.timeout.ms"].value == "45000"
    assert configs["share.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    change = CkConfigResource(
        ResourceType.GROUP,
        "ck-queue",
        incremental_configs=[
            ConfigEntry(
                "share.isolation.level",
                "read_committed",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    (future,) = admin.incremental_alter_configs([change], request_timeout=30).values()
    future.result()
    (future,) = admin.describe_configs([resource], request_timeout=30).values()
    level = future.result()["share.isolation.level"]
    assert (level.value, level.source) == ("read_committed", ConfigSource.GROUP_CONFIG.value)
    assert running.broker.share_groups.config("ck-queue").isolation_level == "read_committed"

    bad = CkConfigResource(
        ResourceType.GROUP,
        "ck-queue",
        incremental_configs=[
            ConfigEntry(
                "share.heartbeat.interval.ms", "1", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    (future,) = admin.incremental_alter_configs([bad], request_timeout=30).values()
    with pytest.raises(KafkaException) as caught:
        future.result()
    assert caught.value.args[0].name() == "INVALID_CONFIG"
