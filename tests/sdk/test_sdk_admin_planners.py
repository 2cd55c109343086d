"""The admin areas' planners and parsers, without sockets: the request built for
given inputs (and that it encodes at the version it was built for), and the
results and errors read from a given decoded answer."""

from __future__ import annotations

from typing import Any

import pytest

from trafka.codec import ErrorCode, KafkaError, UnsupportedVersionError
from trafka.codec.messages import k13_leave_group as lvg
from trafka.codec.messages import k19_create_topics as ct
from trafka.codec.messages import k20_delete_topics as dt
from trafka.codec.messages import k30_create_acls as cacl
from trafka.codec.messages import k32_describe_configs as dc
from trafka.codec.messages import k49_alter_client_quotas as acq
from trafka.codec.messages import k51_alter_user_scram_credentials as ausc
from trafka.codec.messages import k57_update_features as upf
from trafka.codec.messages import k61_describe_producers as dp
from trafka.codec.messages import k92_delete_share_group_offsets as dlsgo
from trafka.codec.protocol import decode_request_body, encode_request_body
from trafka.codec.sasl import salted_password
from trafka.sdk.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)
from trafka.sdk.admin import (
    _common,
    acls,
    cluster,
    configs,
    groups,
    quotas,
    records,
    scram,
    share_groups,
    topics,
    transactions,
)
from trafka.sdk.calls import Again
from trafka.sdk.fetcher import TopicPartition as TP
from trafka.sdk.quotas import ClientQuotaAlteration, ClientQuotaEntity


def roundtrip(key: int, version: int, body: Any) -> Any:
    """``body`` as the broker reads it at ``version``."""
    return decode_request_body(key, version, encode_request_body(key, version, body))


# -- topics ----------------------------------------------------------------------------------


def test_create_topics_request_carries_each_topic_and_fits_old_versions() -> None:
    wanted = topics.new_topics(
        [topics.NewTopic("a", 3, 2, {"cleanup.policy": "compact"}), "b"], 6, 1
    )
    body = topics.create_topics_request(
        5, [wanted["a"], wanted["b"]], timeout_ms=1500, validate_only=True
    )
    got = roundtrip(19, 5, body)
    assert [(t.name, t.num_partitions, t.replication_factor) for t in got.topics] == [
        ("a", 3, 2),
        ("b", 6, 1),
    ]
    assert [(c.name, c.value) for c in got.topics[0].configs] == [("cleanup.policy", "compact")]
    assert got.timeout_ms == 1500 and got.validate_only
    # v0 has no validate_only: the field is left out rather than refused.
    assert not roundtrip(
        19, 0, topics.create_topics_request(0, [wanted["a"]], timeout_ms=1, validate_only=True)
    ).validate_only


def test_delete_topics_request_by_name_before_and_from_v6() -> None:
    assert roundtrip(
        20, 5, topics.delete_topics_request(5, ["a", "b"], timeout_ms=9)
    ).topic_names == ["a", "b"]
    v6 = roundtrip(20, 6, topics.delete_topics_request(6, ["a"], timeout_ms=9))
    assert [t.name for t in v6.topics] == ["a"]


def test_settle_retries_only_what_the_broker_surely_did_not_do() -> None:
    R = ct.CreateTopicsResponse
    resp = R(
        topics=[
            R.CreatableTopicResult(name="a", error_code=0),
            R.CreatableTopicResult(name="b", error_code=ErrorCode.NOT_CONTROLLER),
            R.CreatableTopicResult(
                name="c", error_code=ErrorCode.TOPIC_ALREADY_EXISTS, error_message="exists"
            ),
        ]
    )
    pending = {"a", "b", "c", "d"}
    failed: dict[str, KafkaError] = {}
    with pytest.raises(Again) as again:
        _common.settle(topics.read_create_topics(resp), pending, failed, "creating topic")
    cause = again.value.cause
    assert again.value.refresh and isinstance(cause, KafkaError)
    assert cause.code == ErrorCode.NOT_CONTROLLER
    assert pending == {"b", "d"}
    assert failed["c"].code == ErrorCode.TOPIC_ALREADY_EXISTS and "exists" in str(failed["c"])
    # The next answer forgets d: no answer is a failure, not a success.
    D = dt.DeleteTopicsResponse
    retry = D(responses=[D.DeletableTopicResult(name="b", error_code=0)])
    _common.settle(topics.read_delete_topics(retry), pending, failed, "creating topic")
    assert not pending and failed["d"].code == ErrorCode.UNKNOWN_SERVER_ERROR
    with pytest.raises(KafkaError) as first:
        _common.first_failure(["a", "b", "c", "d"], failed)
    assert first.value.code == ErrorCode.TOPIC_ALREADY_EXISTS


# -- cluster and features ----------------------------------------------------------------------


def test_update_features_request_per_version() -> None:
    updates = cluster.feature_updates(
        {"group.version": cluster.FeatureUpdate(0, cluster.UpgradeType.SAFE_DOWNGRADE)}
    )
    v0 = roundtrip(
        57, 0, cluster.update_features_request(0, updates, timeout_ms=5, validate_only=False)
    )
    assert v0.feature_updates[0].allow_downgrade and v0.feature_updates[0].max_version_level == 0
    v1 = roundtrip(
        57, 1, cluster.update_features_request(1, updates, timeout_ms=5, validate_only=True)
    )
    assert v1.feature_updates[0].upgrade_type == 2 and v1.validate_only
    with pytest.raises(UnsupportedVersionError):
        cluster.update_features_request(0, updates, timeout_ms=5, validate_only=True)
    with pytest.raises(ValueError):
        cluster.feature_updates({})


def test_update_features_answers() -> None:
    R = upf.UpdateFeaturesResponse
    per_feature = R(
        results=[
            R.UpdatableFeatureResult(feature="a", error_code=0),
            R.UpdatableFeatureResult(
                feature="b", error_code=ErrorCode.INVALID_UPDATE_VERSION, error_message="too high"
            ),
        ]
    )
    out = cluster.read_update_features(1, per_feature, ["a", "b"])
    assert out["a"] is None and out["b"] is not None
    assert out["b"].code == ErrorCode.INVALID_UPDATE_VERSION and "too high" in str(out["b"])
    with pytest.raises(KafkaError, match="no answer"):
        cluster.read_update_features(1, per_feature, ["a", "c"])
    assert cluster.read_update_features(2, R(), ["a", "c"]) == {"a": None, "c": None}
    with pytest.raises(Again) as again:
        cluster.read_update_features(2, R(error_code=ErrorCode.NOT_CONTROLLER), ["a"])
    assert again.value.refresh


# -- configs -----------------------------------------------------------------------------------


def test_alter_configs_requests_set_and_delete() -> None:
    changes = {"t": {"retention.ms": "10", "cleanup.policy": None}}
    inc = configs.incremental_alter_configs_request(configs.TOPIC_RESOURCE, changes)
    [resource] = inc.resources
    assert (resource.resource_type, resource.resource_name) == (configs.TOPIC_RESOURCE, "t")
    assert [(c.name, c.config_operation, c.value) for c in resource.configs] == [
        ("retention.ms", 0, "10"),
        ("cleanup.policy", 1, None),
    ]
    # AlterConfigs replaces the whole config: a key reset to its default is left out.
    legacy = configs.alter_configs_request(configs.TOPIC_RESOURCE, changes)
    assert [(c.name, c.value) for c in legacy.resources[0].configs] == [("retention.ms", "10")]


def test_describe_configs_answer_keeps_overrides_and_maps_errors() -> None:
    R = dc.DescribeConfigsResponse
    entries = [
        R.DescribeConfigsResourceResult(name="retention.ms", value="10", config_source=1),
        R.DescribeConfigsResourceResult(name="segment.ms", value="5", config_source=5),
    ]
    resp = R(results=[R.DescribeConfigsResult(resource_type=2, resource_name="t", configs=entries)])
    assert configs.read_describe_configs(resp, overrides_only=False) == {
        "t": {"retention.ms": "10", "segment.ms": "5"}
    }
    assert configs.read_describe_configs(resp, overrides_only=True) == {"t": {"retention.ms": "10"}}
    refused = R(
        results=[
            R.DescribeConfigsResult(
                resource_type=2,
                resource_name="t",
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                error_message="no",
            )
        ]
    )
    with pytest.raises(KafkaError) as error:
        configs.read_describe_configs(refused, overrides_only=False)
    assert error.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert "describing configs of 't'" in str(error.value)


# -- groups ------------------------------------------------------------------------------------


def test_leave_group_request_needs_v3_and_cuts_the_reason() -> None:
    identities = groups.leaving_members(["i1", "i1", "i2"])
    assert identities == [("", "i1"), ("", "i2")]
    with pytest.raises(KafkaError) as old:
        groups.leave_group_request(2, "g", identities, None)
    assert old.value.code == ErrorCode.UNSUPPORTED_VERSION
    body = roundtrip(13, 5, groups.leave_group_request(5, "g", identities, "x" * 300))
    assert [(m.member_id, m.group_instance_id) for m in body.members] == identities
    assert body.members[0].reason == "x" * 255
    default = groups.leave_group_request(5, "g", identities, None)
    assert default.members[0].reason == groups.DEFAULT_LEAVE_GROUP_REASON
    with pytest.raises(TypeError):
        groups.leaving_members("i1")
    with pytest.raises(ValueError):
        groups.leaving_members([])


def test_leave_group_answer_per_member() -> None:
    R = lvg.LeaveGroupResponse
    identities: list[tuple[str, str | None]] = [("", "i1"), ("", "i2"), ("m3", None)]
    resp = R(
        members=[
            R.MemberResponse(member_id="", group_instance_id="i1", error_code=0),
            R.MemberResponse(
                member_id="", group_instance_id="i2", error_code=ErrorCode.FENCED_INSTANCE_ID
            ),
        ]
    )
    out = groups.read_leave_group(resp, "g", identities)
    assert out["i1"] is None
    assert out["i2"] is not None and out["i2"].code == ErrorCode.FENCED_INSTANCE_ID
    assert out["m3"] is not None and out["m3"].code == ErrorCode.UNKNOWN_SERVER_ERROR
    with pytest.raises(Again):
        groups.read_leave_group(
            R(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), "g", identities
        )
    with pytest.raises(KafkaError) as error:
        groups.read_leave_group(R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED), "g", identities)
    assert error.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_offset_fetch_of_every_partition() -> None:
    with pytest.raises(KafkaError) as old:
        groups.offset_fetch_all_request(1, "g")
    assert old.value.code == ErrorCode.UNSUPPORTED_VERSION
    assert roundtrip(9, 7, groups.offset_fetch_all_request(7, "g")).topics is None
    assert roundtrip(9, 8, groups.offset_fetch_all_request(8, "g")).groups[0].topics is None


# -- share groups ------------------------------------------------------------------------------


def test_delete_share_group_offsets_keeps_only_the_topics_to_retry() -> None:
    R = dlsgo.DeleteShareGroupOffsetsResponse
    T = R.DeleteShareGroupOffsetsResponseTopic
    resp = R(
        responses=[
            T(topic_name="a", error_code=0),
            T(topic_name="b", error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
        ]
    )
    pending = ["a", "b"]
    with pytest.raises(Again):
        share_groups.read_delete_share_group_offsets(resp, pending, "deleting")
    assert pending == ["b"]
    missing = R(responses=[])
    with pytest.raises(KafkaError) as error:
        share_groups.read_delete_share_group_offsets(missing, pending, "deleting")
    assert error.value.code == ErrorCode.UNKNOWN_SERVER_ERROR and "topic 'b'" in str(error.value)


# -- records -----------------------------------------------------------------------------------


def test_offset_specs() -> None:
    targets = records.offset_targets({TP("t", 0): "earliest", TP("t", 1): "latest", TP("t", 2): 7})
    assert list(targets.values()) == [-2, -1, 7]
    with pytest.raises(ValueError):
        records.offset_targets({TP("t", 0): "newest"})
    body = records.delete_records_request(
        {TP("t", 0): 5, TP("u", 1): -1}, [TP("t", 0), TP("u", 1)], timeout_ms=100
    )
    got = roundtrip(21, 2, body)
    assert [
        (t.name, [(p.partition_index, p.offset) for p in t.partitions]) for t in got.topics
    ] == [
        ("t", [(0, 5)]),
        ("u", [(1, -1)]),
    ]


# -- ACLs and quotas ---------------------------------------------------------------------------


def test_create_acls_answers_in_order() -> None:
    binding = AclBinding(
        AclResourceType.TOPIC,
        "t",
        PatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    other = AclBinding(
        AclResourceType.GROUP,
        "g",
        PatternType.PREFIXED,
        "User:bob",
        "*",
        AclOperation.READ,
        AclPermissionType.DENY,
    )
    body = roundtrip(30, 3, acls.create_acls_request([binding, other]))
    assert [(c.resource_name, c.principal) for c in body.creations] == [
        ("t", "User:alice"),
        ("g", "User:bob"),
    ]
    R = cacl.CreateAclsResponse
    out = acls.read_create_acls(
        [binding, other],
        R(
            results=[
                R.AclCreationResult(error_code=0),
                R.AclCreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message="bad"),
            ]
        ),
    )
    assert out[binding] is None
    refused = out[other]
    assert refused is not None and refused.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(KafkaError, match="1 answers to 2 creations"):
        acls.read_create_acls([binding, other], R(results=[R.AclCreationResult()]))


def test_alter_client_quotas_retries_transient_entities() -> None:
    alice, bob = ClientQuotaEntity(user="alice"), ClientQuotaEntity(user="bob", client_id=None)
    wanted = quotas.client_quota_alterations(
        [
            ClientQuotaAlteration(alice, {"producer_byte_rate": 1024, "consumer_byte_rate": None}),
            ClientQuotaAlteration(bob, {"request_percentage": 50}),
        ]
    )
    body = roundtrip(49, 1, quotas.alter_client_quotas_request(wanted.values(), validate_only=True))
    assert [(o.key, o.value, o.remove) for o in body.entries[0].ops] == [
        ("producer_byte_rate", 1024.0, False),
        ("consumer_byte_rate", 0.0, True),
    ]
    assert [(e.entity_type, e.entity_name) for e in body.entries[1].entity] == [
        ("user", "bob"),
        ("client-id", None),
    ]
    R = acq.AlterClientQuotasResponse

    def entry(entity: ClientQuotaEntity, code: int) -> Any:
        parts = [R.EntityData(entity_type=t, entity_name=n) for t, n in entity.entries]
        return R.EntryData(error_code=code, error_message=None, entity=parts)

    pending = set(wanted)
    failed: dict[ClientQuotaEntity, KafkaError] = {}
    resp = R(entries=[entry(alice, 0), entry(bob, ErrorCode.REQUEST_TIMED_OUT)])
    with pytest.raises(Again):
        quotas.read_alter_client_quotas(resp, pending, failed)
    assert pending == {bob} and not failed
    quotas.read_alter_client_quotas(R(entries=[]), pending, failed)
    assert not pending and failed[bob].code == ErrorCode.UNKNOWN_SERVER_ERROR
    with pytest.raises(ValueError):
        quotas.client_quota_alterations(
            [ClientQuotaAlteration(alice, {}), ClientQuotaAlteration(alice, {})]
        )


# -- SCRAM -------------------------------------------------------------------------------------


def test_scram_alterations_are_salted_here_and_sent_for_open_users() -> None:
    plan = scram.scram_alterations(
        [
            scram.UserScramCredentialUpsertion("alice", "pw", "scram-sha-512", 4096, b"salt"),
            scram.UserScramCredentialDeletion("bob"),
        ]
    )
    assert plan.users == ("alice", "bob")
    [upsertion] = plan.upsertions
    assert upsertion.mechanism == 2 and upsertion.salt == b"salt"
    assert upsertion.salted_password == salted_password("SCRAM-SHA-512", "pw", b"salt", 4096)
    body = scram.alter_user_scram_credentials_request(plan, {"bob"})
    assert not body.upsertions and [d.name for d in body.deletions] == ["bob"]
    R = ausc.AlterUserScramCredentialsResponse
    results = scram.read_alter_user_scram_credentials(
        R(results=[R.AlterUserScramCredentialsResult(user="bob", error_code=0)])
    )
    assert results == [("bob", 0, "")]
    with pytest.raises(ValueError, match="unknown SCRAM mechanism"):
        scram.scram_alterations([scram.UserScramCredentialDeletion("bob", "SCRAM-MD5")])


# -- transactions ------------------------------------------------------------------------------


def test_describe_producers_answer_and_hanging_transactions() -> None:
    R = dp.DescribeProducersResponse
    resp = R(
        topics=[
            R.TopicResponse(
                name="t",
                partitions=[
                    R.PartitionResponse(
                        partition_index=0,
                        active_producers=[
                            R.ProducerState(
                                producer_id=7,
                                producer_epoch=1,
                                last_timestamp=1_000,
                                coordinator_epoch=-1,
                                current_txn_start_offset=42,
                            ),
                            R.ProducerState(producer_id=8, last_timestamp=1_000),
                        ],
                    ),
                    R.PartitionResponse(
                        partition_index=1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER
                    ),
                ],
            )
        ]
    )
    out = transactions.read_describe_producers(resp)
    assert isinstance(out[TP("t", 1)], KafkaError)
    states = out[TP("t", 0)]
    assert isinstance(states, list)
    assert states[0].coordinator_epoch is None and states[0].current_transaction_start_offset == 42
    # Only producer 7 has a transaction open there, and long enough.
    suspected = transactions.suspects({TP("t", 0): states}, 10_000, 5_000)
    assert [(tp, s.producer_id) for tp, s in suspected] == [(TP("t", 0), 7)]
    assert transactions.suspects({TP("t", 0): states}, 3_000, 5_000) == []
    live = transactions.TransactionDescription(
        "tx", 1, "Ongoing", 7, 1, 60_000, 1_000, frozenset({TP("t", 0)})
    )
    assert transactions.hanging(suspected, {7: "tx"}, {"tx": live}) == []
    ended = transactions.TransactionDescription(
        "tx", 1, "CompleteAbort", 7, 1, 60_000, 1_000, frozenset()
    )
    assert transactions.hanging(suspected, {7: "tx"}, {"tx": ended}) == suspected
    assert transactions.hanging(suspected, {}, {}) == suspected
