"""Share groups through brokerlite's core and the codec: ShareGroupHeartbeat and
ShareGroupDescribe (keys 76/77, v1), the group-id namespace shared with classic
and consumer groups, ListGroups, DescribeGroups, DeleteGroups, GROUP config
resources in DescribeConfigs, IncrementalAlterConfigs and AlterConfigs, session
timeouts through the broker's poll, and restarts."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from trafka.brokerlite.config import BrokerConfig, ConfigError
from trafka.brokerlite.groups.share_groups import ShareGroupSettings
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k08_offset_commit as oc
from trafka.codec.messages import k11_join_group as jg
from trafka.codec.messages import k15_describe_groups as dg
from trafka.codec.messages import k16_list_groups as lg
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k19_create_topics as ct
from trafka.codec.messages import k32_describe_configs as dc
from trafka.codec.messages import k33_alter_configs as ac
from trafka.codec.messages import k42_delete_groups as dlg
from trafka.codec.messages import k44_incremental_alter_configs as iac
from trafka.codec.messages import k68_consumer_group_heartbeat as cgh
from trafka.codec.messages import k76_share_group_heartbeat as hb
from trafka.codec.messages import k77_share_group_describe as sd
from trafka.codec.protocol import api

GROUP_RESOURCE = 32
SET, DELETE, APPEND = 0, 1, 2


def create(core: Any, name: str, partitions: int) -> uuid.UUID:
    body = ct.CreateTopicsRequest(
        topics=[
            ct.CreateTopicsRequest.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=1
            )
        ]
    )
    assert core.call(19, 7, body).topics[0].error_code == 0
    topic_id: uuid.UUID = core.broker.logs.topic(name).topic_id
    return topic_id


def beat(
    core: Any, member: str, epoch: int, topics: list[str] | None = None, group: str = "sg"
) -> hb.ShareGroupHeartbeatResponse:
    body = hb.ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics
    )
    response: hb.ShareGroupHeartbeatResponse = core.call(76, 1, body)
    return response


def describe(core: Any, *groups: str, ops: bool = False) -> list[Any]:
    body = sd.ShareGroupDescribeRequest(group_ids=list(groups), include_authorized_operations=ops)
    return list(core.call(77, 1, body).groups)


def listed(core: Any, version: int = 5, **filters: list[str]) -> dict[str, Any]:
    response = core.call(16, version, lg.ListGroupsRequest(**filters))
    assert response.error_code == 0
    return {g.group_id: g for g in response.groups}


def describe_configs(core: Any, group: str, *keys: str, synonyms: bool = False) -> Any:
    body = dc.DescribeConfigsRequest(
        resources=[
            dc.DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=GROUP_RESOURCE,
                resource_name=group,
                configuration_keys=list(keys) or None,
            )
        ],
        include_synonyms=synonyms,
    )
    return core.call(32, 4, body).results[0]


def alter(core: Any, group: str, *ops: tuple[str, int, str | None], validate: bool = False) -> Any:
    r = iac.IncrementalAlterConfigsRequest
    body = r(
        resources=[
            r.AlterConfigsResource(
                resource_type=GROUP_RESOURCE,
                resource_name=group,
                configs=[
                    r.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops
                ],
            )
        ],
        validate_only=validate,
    )
    return core.call(44, 1, body).responses[0]


def test_the_share_group_apis_are_served_from_version_1(core: Any) -> None:
    # Kafka 4.1 made KIP-932 stable at v1 and Kafka 4.4's specs dropped 4.0's
    # early-access v0, so no client can send it: brokerlite advertises v1 up.
    response = core.call(18, 3, api_versions.ApiVersionsRequest())
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    for key in (76, 77, 78, 79):
        assert ranges[key][0] == 1, key
        assert api(key).min_version == 1, key
    create(core, "t", 1)
    v1 = hb.ShareGroupHeartbeatRequest(
        group_id="sg", member_id="m", member_epoch=0, subscribed_topic_names=["t"]
    )
    assert core.call(76, 1, v1).error_code == 0
    assert core.broker.share_groups.is_share_group("sg")


def test_members_join_share_partitions_and_are_described(core: Any) -> None:
    topic_id = create(core, "orders", 2)
    first = beat(core, "m1", 0, ["orders"])
    assert (first.error_code, first.member_id, first.member_epoch) == (0, "m1", 1)
    assert first.heartbeat_interval_ms == 5000
    assert first.assignment is not None
    assert [(t.topic_id, t.partitions) for t in first.assignment.topic_partitions] == [
        (topic_id, [0, 1])
    ]
    epochs = {"m1": 1}
    for i, member in enumerate(("m2", "m3", "m4")):
        epochs[member] = beat(core, member, 0, ["orders"]).member_epoch
        assert epochs[member] == i + 2
    for member, epoch in epochs.items():  # everyone catches up with epoch 4
        assert beat(core, member, epoch).member_epoch == 4
    (group,) = describe(core, "sg")
    assert (group.error_code, group.group_state, group.assignor_name) == (0, "Stable", "simple")
    assert (group.group_epoch, group.assignment_epoch) == (4, 4)
    assert group.authorized_operations == -(2**31)
    members = {m.member_id: m for m in group.members}
    assert set(members) == {"m1", "m2", "m3", "m4"}
    m1 = members["m1"]
    assert (m1.client_id, m1.client_host, m1.member_epoch) == ("test-client", "/?", 4)
    assert m1.subscribed_topic_names == ["orders"]
    # Four members, two partitions: each member one partition, each partition two members.
    holders = {0: 0, 1: 0}
    for m in members.values():
        (tp,) = m.assignment.topic_partitions
        assert (tp.topic_id, tp.topic_name, len(tp.partitions)) == (topic_id, "orders", 1)
        holders[tp.partitions[0]] += 1
    assert holders == {0: 2, 1: 2}
    (with_ops,) = describe(core, "sg", ops=True)
    assert with_ops.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)


def test_describe_tells_missing_and_foreign_groups_apart(core: Any) -> None:
    create(core, "t", 1)
    commit = oc.OffsetCommitRequest(
        group_id="classic",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            oc.OffsetCommitRequest.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    oc.OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=0
                    )
                ],
            )
        ],
    )
    assert core.call(8, 9, commit).topics[0].partitions[0].error_code == 0
    missing, foreign, empty = describe(core, "nope", "classic", "")
    assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert "not found" in missing.error_message
    assert foreign.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert "not a share group" in foreign.error_message
    assert empty.error_code == ErrorCode.INVALID_GROUP_ID
    # The classic group's id is not a share group's.
    refused = beat(core, "m", 0, ["t"], group="classic")
    assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert "not a share group" in (refused.error_message or "")


def test_other_protocols_are_refused_on_a_share_group_id(core: Any) -> None:
    create(core, "t", 1)
    assert beat(core, "m", 0, ["t"]).error_code == 0
    join = jg.JoinGroupRequest(
        group_id="sg",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[jg.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    joined = core.call(11, 9, join)
    assert (joined.error_code, joined.member_id) == (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
    consumer = core.call(
        68,
        1,
        cgh.ConsumerGroupHeartbeatRequest(
            group_id="sg",
            member_id="c",
            member_epoch=0,
            rebalance_timeout_ms=10_000,
            subscribed_topic_names=["t"],
            topic_partitions=[],
        ),
    )
    assert consumer.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    commit = oc.OffsetCommitRequest(
        group_id="sg",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            oc.OffsetCommitRequest.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    oc.OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=5
                    )
                ],
            )
        ],
    )
    assert core.call(8, 9, commit).topics[0].partitions[0].error_code == (
        ErrorCode.GROUP_ID_NOT_FOUND
    )
    assert core.broker.groups.group("sg") is None
    assert core.broker.groups.consumer_group("sg") is None
    # DescribeGroups (v0-5) reports a share group as Dead, without an error, as Kafka does.
    (described,) = core.call(15, 5, dg.DescribeGroupsRequest(groups=["sg"])).groups
    assert (described.error_code, described.group_state, described.members) == (0, "Dead", [])


def test_list_groups_reports_share_groups_and_honours_its_filters(core: Any) -> None:
    create(core, "t", 1)
    assert beat(core, "m", 0, ["t"], group="busy").error_code == 0
    assert beat(core, "x", 0, ["t"], group="idle").error_code == 0
    assert beat(core, "x", -1, group="idle").member_epoch == -1
    everything = listed(core)
    assert {g: (v.group_type, v.protocol_type, v.group_state) for g, v in everything.items()} == {
        "busy": ("share", "share", "Stable"),
        "idle": ("share", "share", "Empty"),
    }
    assert set(listed(core, types_filter=["share"])) == {"busy", "idle"}
    assert set(listed(core, types_filter=["consumer", "classic"])) == set()
    assert set(listed(core, states_filter=["EMPTY"])) == {"idle"}
    assert set(listed(core, types_filter=["Share"], states_filter=["stable"])) == {"busy"}
    v0 = listed(core, version=0)
    assert v0["busy"].protocol_type == "share"


def test_delete_groups_needs_an_empty_share_group(core: Any) -> None:
    create(core, "t", 1)
    assert beat(core, "m", 0, ["t"]).error_code == 0

    def delete() -> int:
        response = core.call(42, 2, dlg.DeleteGroupsRequest(groups_names=["sg"]))
        code: int = response.results[0].error_code
        return code

    assert delete() == ErrorCode.NON_EMPTY_GROUP
    assert beat(core, "m", -1).error_code == 0
    assert delete() == ErrorCode.NONE
    assert delete() == ErrorCode.GROUP_ID_NOT_FOUND
    (gone,) = describe(core, "sg")
    assert gone.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_a_silent_member_is_fenced_by_the_brokers_poll(open_core: Any) -> None:
    core = open_core(
        group_share_min_session_timeout_ms=1000,
        group_share_session_timeout_ms=1000,
        group_share_min_heartbeat_interval_ms=100,
        group_share_heartbeat_interval_ms=100,
    )
    create(core, "t", 1)
    response = beat(core, "m", 0, ["t"])
    assert response.heartbeat_interval_ms == 100
    assert core.broker.next_deadline() <= core.now + 1000
    core.poll(999)
    assert core.broker.share_groups.is_member("sg", "m")
    core.poll(1)
    assert not core.broker.share_groups.is_member("sg", "m")
    (group,) = describe(core, "sg")
    assert (group.group_state, group.group_epoch, group.members) == ("Empty", 2, [])
    assert beat(core, "m", 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_group_configs_are_described_with_their_sources_and_synonyms(open_core: Any) -> None:
    core = open_core(group_share_record_lock_duration_ms=20_000)
    result = describe_configs(core, "whatever", synonyms=True)
    assert result.error_code == 0
    entries = {e.name: e for e in result.configs}
    assert set(entries) == {
        "consumer.heartbeat.interval.ms",
        "consumer.session.timeout.ms",
        "errors.deadletterqueue.copy.record.enable",
        "errors.deadletterqueue.topic.name",
        "share.auto.offset.reset",
        "share.delivery.count.limit",
        "share.heartbeat.interval.ms",
        "share.isolation.level",
        "share.partition.max.record.locks",
        "share.record.lock.duration.ms",
        "share.renew.acknowledge.enable",
        "share.session.timeout.ms",
    }
    renew = entries["share.renew.acknowledge.enable"]  # (Kafka 4.4's, KIP-1222: a BOOLEAN)
    assert (renew.value, renew.config_source, renew.config_type) == ("true", 5, 1)
    lock = entries["share.record.lock.duration.ms"]
    assert (lock.value, lock.config_source, lock.config_type, lock.read_only) == (
        "20000",
        4,
        3,
        False,
    )
    assert [(s.name, s.value, s.source) for s in lock.synonyms] == [
        ("group.share.record.lock.duration.ms", "20000", 4),
        ("group.share.record.lock.duration.ms", "30000", 5),
    ]
    reset = entries["share.auto.offset.reset"]
    assert (reset.value, reset.config_source, reset.config_type) == ("latest", 5, 2)
    assert alter(core, "whatever", ("share.auto.offset.reset", SET, "earliest")).error_code == 0
    only = describe_configs(core, "whatever", "share.auto.offset.reset", synonyms=True)
    (entry,) = only.configs
    assert (entry.value, entry.config_source) == ("earliest", 8)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("share.auto.offset.reset", "earliest", 8),
        ("share.auto.offset.reset", "latest", 5),
    ]
    empty = describe_configs(core, "")
    assert empty.error_code == ErrorCode.INVALID_REQUEST
    # The broker's own settings include the share-group ones.
    broker = core.call(
        32,
        4,
        dc.DescribeConfigsRequest(
            resources=[
                dc.DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=4,
                    resource_name="",
                    configuration_keys=["group.share.record.lock.duration.ms"],
                )
            ]
        ),
    ).results[0]
    assert [(c.name, c.value, c.config_type) for c in broker.configs] == [
        ("group.share.record.lock.duration.ms", "20000", 3)
    ]


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ((("share.record.lock.duration.ms", SET, "1"),), ErrorCode.INVALID_CONFIG),
        ((("share.session.timeout.ms", SET, "120000"),), ErrorCode.INVALID_CONFIG),
        ((("share.isolation.level", SET, "serializable"),), ErrorCode.INVALID_CONFIG),
        ((("share.auto.offset.reset", SET, "by_duration:yesterday"),), ErrorCode.INVALID_CONFIG),
        ((("share.nope", SET, "1"),), ErrorCode.INVALID_CONFIG),
        ((("share.delivery.count.limit", SET, None),), ErrorCode.INVALID_CONFIG),
        ((("share.delivery.count.limit", APPEND, "3"),), ErrorCode.INVALID_CONFIG),
        (
            (("share.delivery.count.limit", SET, "3"), ("share.delivery.count.limit", SET, "4")),
            ErrorCode.INVALID_REQUEST,
        ),
    ],
)
def test_invalid_group_config_changes_are_refused(
    core: Any, ops: tuple[tuple[str, int, str | None], ...], code: int
) -> None:
    response = alter(core, "sg", *ops)
    assert response.error_code == code and response.error_message
    assert core.broker.share_groups.overrides("sg") == {}


def test_group_configs_change_incrementally_or_as_a_whole_and_survive_a_restart(
    open_core: Any,
) -> None:
    core = open_core()
    create(core, "t", 1)
    assert beat(core, "m", 0, ["t"]).error_code == 0
    response = alter(
        core,
        "sg",
        ("share.delivery.count.limit", SET, "3"),
        ("share.isolation.level", SET, "read_committed"),
        ("share.heartbeat.interval.ms", SET, "6000"),
    )
    assert response.error_code == 0
    assert (
        alter(core, "sg", ("share.auto.offset.reset", SET, "earliest"), validate=True).error_code
        == 0
    )
    assert core.broker.share_groups.config("sg").auto_offset_reset == "latest"
    assert alter(core, "sg", ("share.isolation.level", DELETE, None)).error_code == 0
    assert core.broker.share_groups.overrides("sg") == {
        "share.delivery.count.limit": "3",
        "share.heartbeat.interval.ms": "6000",
    }
    assert beat(core, "m", 1).heartbeat_interval_ms == 6000
    legacy = ac.AlterConfigsRequest(
        resources=[
            ac.AlterConfigsRequest.AlterConfigsResource(
                resource_type=GROUP_RESOURCE,
                resource_name="other",
                configs=[
                    ac.AlterConfigsRequest.AlterableConfig(
                        name="share.auto.offset.reset", value="by_duration:PT30M"
                    )
                ],
            )
        ]
    )
    assert core.call(33, 2, legacy).responses[0].error_code == 0
    core.broker.close()

    again = open_core(now_ms=core.now + 60_000)
    share = again.broker.share_groups
    assert share.config("sg").delivery_count_limit == 3
    assert share.config("other").auto_offset_reset == "by_duration:PT30M"
    # The group, its member and its epochs are back: the member carries on.
    response = beat(again, "m", 1)
    assert (response.error_code, response.member_epoch, response.heartbeat_interval_ms) == (
        0,
        1,
        6000,
    )
    assert response.assignment is None
    (group,) = describe(again, "sg")
    assert (group.group_state, group.group_epoch) == ("Stable", 1)


def test_broker_settings_take_kafka_names_and_are_checked() -> None:
    config = BrokerConfig.from_mapping(
        {"group.share.delivery.count.limit": "7", "group.share.max.size": "3"}
    )
    settings = ShareGroupSettings.from_broker_config(config)
    assert (settings.delivery_count_limit, settings.max_size) == (7, 3)
    assert ("group.share.max.size", "3", False) in config.kafka_entries()
    for bad, needle in [
        ({"group.share.session.timeout.ms": "1000"}, "group.share.min.session.timeout.ms"),
        ({"group.share.delivery.count.limit": "1"}, "group.share.delivery.count.limit"),
        ({"group.share.max.size": "1001"}, "group.share.max.size"),
        (
            {
                "group.share.min.session.timeout.ms": "1000",
                "group.share.session.timeout.ms": "5000",
                "group.share.heartbeat.interval.ms": "5000",
            },
            "must be below",
        ),
    ]:
        with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
            BrokerConfig.from_mapping(bad)
