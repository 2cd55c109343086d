"""The ACL APIs (keys 29-31) answered as a Kafka broker without an authorizer
answers them: SECURITY_DISABLED for the describe as a whole, and for each
creation and each deletion filter, in order; nothing is stored. Through the
codec both ways (``core``), and with confluent-kafka's and kafka-python's admins."""

from __future__ import annotations

from typing import Any

import pytest

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k29_describe_acls as describe
from trafka.codec.messages import k30_create_acls as create
from trafka.codec.messages import k31_delete_acls as delete

pytestmark = pytest.mark.timeout(60)

DISABLED = ErrorCode.SECURITY_DISABLED


def _creation(name: str) -> Any:
    return create.CreateAclsRequest.AclCreation(
        resource_type=2,  # TOPIC
        resource_name=name,
        resource_pattern_type=3,  # LITERAL
        principal="User:alice",
        host="*",
        operation=3,  # READ
        permission_type=3,  # ALLOW
    )


def _filter() -> Any:
    return delete.DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=1,  # ANY
        resource_name_filter=None,
        pattern_type_filter=1,  # ANY
        principal_filter=None,
        host_filter=None,
        operation=1,  # ANY
        permission_type=1,  # ANY
    )


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_acl_call_says_security_is_disabled(core: Any, version: int) -> None:
    created = core.call(
        30, version, create.CreateAclsRequest(creations=[_creation("a"), _creation("b")])
    )
    assert [(r.error_code, bool(r.error_message)) for r in created.results] == [
        (DISABLED, True)
    ] * 2
    deleted = core.call(
        31, version, delete.DeleteAclsRequest(filters=[_filter(), _filter(), _filter()])
    )
    assert [(r.error_code, r.matching_acls) for r in deleted.filter_results] == [(DISABLED, [])] * 3
    request = describe.DescribeAclsRequest(
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    described = core.call(29, version, request)
    assert (described.error_code, described.resources) == (DISABLED, [])
    assert "authorizer" in described.error_message
    # Nothing was stored: an empty request gets an empty answer.
    assert core.call(30, version, create.CreateAclsRequest(creations=[])).results == []


def test_version_0_is_not_served_as_from_kafka_4(core: Any) -> None:
    from trafka.brokerlite.handlers import HANDLERS

    assert all(HANDLERS[key].min_version == 1 for key in (29, 30, 31))


def test_real_admin_clients_are_told_security_is_disabled(running: Any) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import SecurityDisabledError

    bs = running.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    binding = AclBinding(
        ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*",
        AclOperation.READ, AclPermissionType.ALLOW,
    )  # fmt: skip
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    for calls in (admin.create_acls([binding]), admin.delete_acls([everything])):
        for future in calls.values():
            with pytest.raises(KafkaException) as info:
                future.result(30)
            assert info.value.args[0].code() == DISABLED
    kp = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=10_000)
    try:
        with pytest.raises(SecurityDisabledError):
            kp.describe_acls(
                ACLFilter(
                    principal=None,
                    host="*",
                    operation=ACLOperation.ANY,
                    permission_type=ACLPermissionType.ANY,
                    resource_pattern=ResourcePatternFilter(
                        KpResourceType.ANY, None, ACLResourcePatternType.ANY
                    ),
                )
            )
        acl = ACL(
            "User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.TOPIC, "t"),
        )  # fmt: skip
        result = kp.create_acls([acl])
        assert result["succeeded"] == [] and len(result["failed"]) == 1
    finally:
        kp.close()
