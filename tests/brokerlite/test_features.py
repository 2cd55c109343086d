"""UpdateFeatures (key 57, KIP-584) in brokerlite, through the codec at every version:
upgrades and downgrades (v0's AllowDowngrade, v1+'s UpgradeType), level 0,
Kafka's refusals (all or nothing), ValidateOnly, the epoch, durability across a
restart, authorization, and what the levels switch: the KIP-848 and KIP-932
APIs answer UNSUPPORTED_VERSION while their feature is at 0."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from trafka.brokerlite.features import (
    SUPPORTED,
    FeatureStore,
    FeatureStoreError,
    FeatureUpdateError,
    plan_update,
)
from trafka.codec.acl import AclOperation, AclPermissionType, AclResourceType, PatternType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k18_api_versions as av
from trafka.codec.messages import k30_create_acls as cacl
from trafka.codec.messages import k57_update_features as uf
from trafka.codec.messages import k68_consumer_group_heartbeat as cgh
from trafka.codec.messages import k69_consumer_group_describe as cgd
from trafka.codec.messages import k76_share_group_heartbeat as sgh
from trafka.codec.messages import k77_share_group_describe as sgd
from trafka.codec.messages import k78_share_fetch as sf
from trafka.codec.messages import k79_share_acknowledge as sa
from trafka.codec.messages import k90_describe_share_group_offsets as dsgo
from trafka.codec.messages import k91_alter_share_group_offsets as asgo
from trafka.codec.messages import k92_delete_share_group_offsets as dlsgo

pytestmark = pytest.mark.timeout(60)

R = uf.UpdateFeaturesRequest
VERSIONS = (0, 1, 2)
GV, SV, TV = "group.version", "share.version", "transaction.version"
UPGRADE, SAFE, UNSAFE = 1, 2, 3
INVALID = ErrorCode.INVALID_UPDATE_VERSION


def _key(version: int, name: str, level: int, upgrade_type: int = UPGRADE) -> Any:
    if version == 0:
        return R.FeatureUpdateKey(
            feature=name, max_version_level=level, allow_downgrade=upgrade_type != UPGRADE
        )
    return R.FeatureUpdateKey(feature=name, max_version_level=level, upgrade_type=upgrade_type)


def update(
    core: Any,
    version: int,
    *updates: tuple[str, int] | tuple[str, int, int],
    validate_only: bool = False,
    conn_id: int = 1,
) -> Any:
    body = R(
        timeout_ms=5000,
        feature_updates=[_key(version, *u) for u in updates],
        validate_only=validate_only,
    )
    return core.call(57, version, body, conn_id=conn_id)


def finalized(core: Any, version: int = 3) -> tuple[dict[str, tuple[int, int]], int]:
    answer = core.call(18, version, av.ApiVersionsRequest())
    assert answer.error_code == ErrorCode.NONE
    levels = {f.name: (f.min_version_level, f.max_version_level) for f in answer.finalized_features}
    return levels, answer.finalized_features_epoch


def refused(answer: Any, code: ErrorCode) -> str:
    assert answer.error_code == code, answer
    assert answer.results == []
    assert answer.error_message
    return str(answer.error_message)


def test_a_fresh_broker_has_its_features_at_their_highest_level_epoch_1(core: Any) -> None:
    # transaction.version: supported 0-2 and finalized at 2 on a new cluster, as
    # Kafka 4.x (KIP-890 part 2). Before ApiVersions v4 a feature supported from
    # level 0 is left out (KAFKA-17011; ApiVersionsResponse.json's v4 note).
    for version in (3, 4):
        answer = core.call(18, version, av.ApiVersionsRequest())
        supported = {f.name: (f.min_version, f.max_version) for f in answer.supported_features}
        assert supported == ({GV: (0, 1), SV: (0, 2), TV: (0, 2)} if version == 4 else {})
        assert finalized(core, version) == ({GV: (1, 1), SV: (2, 2), TV: (2, 2)}, 1)


@pytest.mark.parametrize("version", VERSIONS)
def test_downgrade_to_0_removes_the_feature_and_upgrade_restores_it(
    core: Any, version: int
) -> None:
    answer = update(core, version, (GV, 0, SAFE))
    assert answer.error_code == ErrorCode.NONE, answer
    assert answer.error_message is None
    if version <= 1:
        assert [(r.feature, r.error_code, r.error_message) for r in answer.results] == [
            (GV, 0, None)
        ]
    else:
        assert answer.results == []  # v2 has no per-feature results
    assert finalized(core) == ({SV: (2, 2), TV: (2, 2)}, 2)
    assert core.broker.features.level(GV) == 0
    answer = update(core, version, (GV, 1), (SV, 2))
    assert answer.error_code == ErrorCode.NONE, answer
    assert finalized(core) == ({GV: (1, 1), SV: (2, 2), TV: (2, 2)}, 3)
    # The level it has already, with any type, is accepted (and is a change: epoch 4).
    assert update(core, version, (SV, 1, SAFE)).error_code == ErrorCode.NONE
    assert finalized(core)[1] == 4


@pytest.mark.parametrize("version", (1, 2))
def test_an_unsafe_downgrade_is_a_downgrade(core: Any, version: int) -> None:
    assert update(core, version, (SV, 0, UNSAFE)).error_code == ErrorCode.NONE
    assert finalized(core) == ({GV: (1, 1), TV: (2, 2)}, 2)


@pytest.mark.parametrize("version", VERSIONS)
def test_refusals_change_nothing(core: Any, version: int) -> None:
    cases: list[tuple[tuple[Any, ...], ErrorCode, str]] = [
        (((GV, 0),), INVALID, "downgrade"),  # lowering needs a downgrade type
        (((GV, 2),), INVALID, "levels 0 to 1"),  # above what brokerlite supports
        (((SV, -1, SAFE),), INVALID, "negative"),
        ((("metadata.version", 21),), INVALID, "does not support"),
        ((("no.such.feature", 0, SAFE),), INVALID, "does not support"),
        (((GV, 1), (GV, 0, SAFE)), ErrorCode.INVALID_REQUEST, "more than once"),
        # One refused update refuses the request: share.version stays at 2.
        (((SV, 0, SAFE), (GV, 5)), INVALID, "group.version"),
    ]
    for updates, code, why in cases:
        assert why in refused(update(core, version, *updates), code), updates
        assert finalized(core) == ({GV: (1, 1), SV: (2, 2), TV: (2, 2)}, 1)


@pytest.mark.parametrize("version", (1, 2))
def test_upgrade_types_are_checked(core: Any, version: int) -> None:
    assert update(core, version, (GV, 0, SAFE)).error_code == ErrorCode.NONE
    # A downgrade type cannot raise a level; an unknown type is refused outright.
    assert "cannot raise" in refused(update(core, version, (GV, 1, SAFE)), INVALID)
    assert "cannot raise" in refused(update(core, version, (GV, 1, UNSAFE)), INVALID)
    assert "upgrade type 7" in refused(update(core, version, (GV, 0, 7)), INVALID)
    assert "upgrade type 0" in refused(update(core, version, (GV, 0, 0)), INVALID)
    assert finalized(core) == ({SV: (2, 2), TV: (2, 2)}, 2)


@pytest.mark.parametrize("version", (1, 2))
def test_validate_only_changes_nothing(core: Any, version: int) -> None:
    answer = update(core, version, (GV, 0, SAFE), (SV, 0, UNSAFE), validate_only=True)
    assert answer.error_code == ErrorCode.NONE, answer
    assert len(answer.results) == (2 if version == 1 else 0)
    assert finalized(core) == ({GV: (1, 1), SV: (2, 2), TV: (2, 2)}, 1)
    refused(update(core, version, (GV, 0), validate_only=True), INVALID)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_empty_request_changes_nothing(core: Any, version: int) -> None:
    answer = update(core, version)
    assert answer.error_code == ErrorCode.NONE and answer.results == []
    assert finalized(core)[1] == 1


def test_levels_and_epoch_survive_a_restart(open_core: Any) -> None:
    first = open_core()
    assert update(first, 1, (SV, 0, SAFE)).error_code == ErrorCode.NONE
    assert update(first, 2, (GV, 0, SAFE)).error_code == ErrorCode.NONE
    assert update(first, 0, (GV, 1)).error_code == ErrorCode.NONE
    first.broker.close()
    second = open_core()
    assert finalized(second) == ({GV: (1, 1), TV: (2, 2)}, 4)
    assert second.broker.features.level(SV) == 0
    # Compaction keeps a level lowered to 0 (a fresh store would start at 1).
    second.broker.features.compact()
    second.broker.close()
    third = open_core()
    assert finalized(third) == ({GV: (1, 1), TV: (2, 2)}, 4)


def test_a_cluster_node_reads_a_single_node_s_levels_within_its_own(tmp_path: Path) -> None:
    """A single node finalizes share.version 2 (dead-letter queues, KIP-1191) and
    transaction.version 2; a cluster node opening its journal supports both at
    the same levels (its share-partition leaders produce dead letters to the DLQ
    partitions' leaders, its coordinators serve transaction version 2 across
    the nodes) and keeps the levels the single node wrote."""
    path = tmp_path / "f.journal"
    with FeatureStore(path) as store:
        assert store.level(SV) == 2 and store.update({SV: 2, TV: 1}) == 2
    with FeatureStore(path, supported=SUPPORTED) as store:
        assert store.levels() == {GV: 1, SV: 2, TV: 1}
        assert store.supported[SV] == (0, 2) and store.supported[TV] == (0, 2)


def test_the_store_refuses_a_journal_it_cannot_read(tmp_path: Path) -> None:
    path = tmp_path / "f.journal"
    with FeatureStore(path) as store:
        assert store.update({GV: 0}) == 2
    data = bytearray(path.read_bytes())
    data[2] ^= 0xFF  # inside the header: damage, not a torn tail
    path.write_bytes(bytes(data))
    with pytest.raises(FeatureStoreError):
        FeatureStore(path)


def test_plan_update_stops_at_the_first_refusal() -> None:
    with pytest.raises(FeatureUpdateError) as caught:
        plan_update({GV: 1, SV: 1}, [(SV, 0, SAFE), (GV, 2, UPGRADE), ("x", 0, 9)])
    assert caught.value.code == INVALID and GV in str(caught.value)
    assert plan_update({GV: 0, SV: 1}, [(GV, 1, UPGRADE), (SV, 1, UNSAFE)]) == {GV: 1, SV: 1}


# -- authorization ----------------------------------------------------------------------


def _allow_alter_cluster(principal: str) -> Any:
    return cacl.CreateAclsRequest.AclCreation(
        resource_type=AclResourceType.CLUSTER,
        resource_name="kafka-cluster",
        resource_pattern_type=PatternType.LITERAL,
        principal=principal,
        host="*",
        operation=AclOperation.ALTER,
        permission_type=AclPermissionType.ALLOW,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_updates_need_alter_on_the_cluster(open_core: Any, version: int) -> None:
    core = open_core(
        security_protocol="SASL_PLAINTEXT",
        sasl_users={"admin": "pw", "bob": "pw"},
        authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        super_users=("User:admin",),
    )
    core.login("bob", "pw", conn_id=2)
    why = refused(
        update(core, version, (GV, 0, SAFE), conn_id=2), ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    assert "User:bob" in why
    # Refused before anything else: a duplicate is not even looked at.
    refused(
        update(core, version, (GV, 1), (GV, 1), conn_id=2), ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    assert core.broker.features.level(GV) == 1
    core.login("admin", "pw", conn_id=3)
    created = core.call(
        30, 3, cacl.CreateAclsRequest(creations=[_allow_alter_cluster("User:bob")]), conn_id=3
    )
    assert [r.error_code for r in created.results] == [ErrorCode.NONE]
    assert update(core, version, (GV, 0, SAFE), conn_id=2).error_code == ErrorCode.NONE
    assert core.broker.features.level(GV) == 0
    # group.version 0 refuses ConsumerGroupHeartbeat before authorization: bob has
    # no READ on the group, and still gets UNSUPPORTED_VERSION.
    answer = core.call(68, 1, _heartbeat(), conn_id=2)
    assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION


# -- what the levels switch ----------------------------------------------------------------


def _heartbeat() -> Any:
    return cgh.ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id=str(uuid.uuid4()),
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=["t"],
        topic_partitions=[],
    )


def _share_heartbeat() -> Any:
    return sgh.ShareGroupHeartbeatRequest(
        group_id="sg", member_id=str(uuid.uuid4()), member_epoch=0, subscribed_topic_names=["t"]
    )


def _advertised(core: Any) -> set[int]:
    return {k.api_key for k in core.call(18, 3, av.ApiVersionsRequest()).api_keys}


@pytest.mark.parametrize("version", (0, 1))
def test_group_version_0_turns_the_consumer_group_protocol_off(core: Any, version: int) -> None:
    assert update(core, 2, (GV, 0, SAFE)).error_code == ErrorCode.NONE
    answer = core.call(68, version, _heartbeat())
    assert (answer.error_code, answer.member_epoch) == (ErrorCode.UNSUPPORTED_VERSION, 0)
    described = core.call(69, 0, cgd.ConsumerGroupDescribeRequest(group_ids=["g", "h"]))
    assert [(g.group_id, g.error_code) for g in described.groups] == [
        ("g", ErrorCode.UNSUPPORTED_VERSION),
        ("h", ErrorCode.UNSUPPORTED_VERSION),
    ]
    # As in Kafka, the APIs stay advertised; share groups are untouched.
    assert {68, 69} <= _advertised(core)
    assert core.call(76, 1, _share_heartbeat()).error_code == ErrorCode.NONE
    # Raised back, the protocol works again.
    assert update(core, 2, (GV, 1)).error_code == ErrorCode.NONE
    joined = core.call(68, version, _heartbeat())
    assert joined.error_code == ErrorCode.NONE and joined.member_epoch >= 1


def test_share_version_0_turns_share_groups_off(core: Any) -> None:
    assert update(core, 1, (SV, 0, SAFE)).error_code == ErrorCode.NONE
    topic = uuid.uuid4()
    off = ErrorCode.UNSUPPORTED_VERSION
    assert core.call(76, 1, _share_heartbeat()).error_code == off
    described = core.call(77, 1, sgd.ShareGroupDescribeRequest(group_ids=["sg"]))
    assert [g.error_code for g in described.groups] == [off]
    fetched = core.call(
        78,
        1,
        sf.ShareFetchRequest(
            group_id="sg",
            member_id=str(uuid.uuid4()),
            share_session_epoch=0,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            topics=[sf.ShareFetchRequest.FetchTopic(topic_id=topic, partitions=[])],
        ),
    )
    assert fetched.error_code == off
    acked = core.call(
        79,
        1,
        sa.ShareAcknowledgeRequest(
            group_id="sg", member_id=str(uuid.uuid4()), share_session_epoch=1
        ),
    )
    assert acked.error_code == off
    D = dsgo.DescribeShareGroupOffsetsRequest
    offsets = core.call(
        90, 1, D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id="sg", topics=None)])
    )
    assert [g.error_code for g in offsets.groups] == [off]
    assert core.call(91, 0, asgo.AlterShareGroupOffsetsRequest(group_id="sg")).error_code == off
    assert core.call(92, 0, dlsgo.DeleteShareGroupOffsetsRequest(group_id="sg")).error_code == off
    assert {76, 77, 78, 79, 90, 91, 92} <= _advertised(core)
    assert core.call(68, 1, _heartbeat()).error_code == ErrorCode.NONE  # KIP-848 untouched
    assert update(core, 1, (SV, 1)).error_code == ErrorCode.NONE
    assert core.call(76, 1, _share_heartbeat()).error_code == ErrorCode.NONE


def test_a_cluster_node_follows_the_cluster_s_levels(tmp_path: Path) -> None:
    """A cluster node takes the levels of ZooKeeper's ``/feature`` with their epoch
    (a feature it does not list is at 0, a level above the node's highest is
    lowered to it), durably; the same levels and epoch again write nothing."""
    path = tmp_path / "f.journal"
    with FeatureStore(path, supported=SUPPORTED) as store:
        assert store.follow({TV: 1, SV: 9, "other.feature": 3}, 2)
        assert (store.levels(), store.epoch) == ({GV: 0, SV: 2, TV: 1}, 2)
        size = path.stat().st_size
        assert not store.follow({TV: 1, SV: 2}, 2)
        assert path.stat().st_size == size
    with FeatureStore(path, supported=SUPPORTED) as store:
        assert (store.levels(), store.epoch) == ({GV: 0, SV: 2, TV: 1}, 2)
