"""The ACL APIs (keys 29-31) through the codec both ways (``core``).

Without an authorizer they are answered as a Kafka broker without one answers
them: SECURITY_DISABLED for the describe as a whole, and for each creation and
each deletion filter, in order; nothing is stored (also with confluent-kafka's
and kafka-python's admins). With the authorizer on they create, list and delete
ACLs durably, refuse invalid ones with reasons, and need DESCRIBE (list) or
ALTER (create, delete) on the cluster. Real clients with the authorizer on are
in ``test_acls_interop``."""

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


# -- with the authorizer on ------------------------------------------------------------

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
USERS = {"admin": "admin-pw", "alice": "alice-pw"}
ADMIN_CONN, ALICE_CONN = 1, 2


def _acl(
    name: str,
    principal: str = "User:alice",
    *,
    rtype: int = 2,  # TOPIC
    pattern: int = 3,  # LITERAL
    host: str = "*",
    op: int = 3,  # READ
    permission: int = 3,  # ALLOW
) -> Any:
    return create.CreateAclsRequest.AclCreation(
        resource_type=rtype,
        resource_name=name,
        resource_pattern_type=pattern,
        principal=principal,
        host=host,
        operation=op,
        permission_type=permission,
    )


def _filter_fields(**fields: Any) -> dict[str, Any]:
    wanted = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    wanted.update(fields)
    return wanted


def _describe_all(**fields: Any) -> Any:
    return describe.DescribeAclsRequest(**_filter_fields(**fields))


def _delete_filter(**fields: Any) -> Any:
    return delete.DeleteAclsRequest.DeleteAclsFilter(**_filter_fields(**fields))


def _listed(response: Any) -> list[tuple[Any, ...]]:
    assert response.error_code == ErrorCode.NONE, response
    return [
        (r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
         a.permission_type)
        for r in response.resources
        for a in r.acls
    ]  # fmt: skip


def _as_tuple(c: Any) -> tuple[Any, ...]:
    return (
        c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
        c.operation, c.permission_type,
    )  # fmt: skip


@pytest.fixture
def anonymous_admin(open_core: Any) -> Any:
    """A PLAINTEXT core with the authorizer on, whose anonymous clients are super users."""
    return open_core(authorizer_class_name=STANDARD, super_users=("User:ANONYMOUS",))


@pytest.mark.parametrize("version", [1, 2, 3])
def test_create_describe_delete_with_the_authorizer(anonymous_admin: Any, version: int) -> None:
    core = anonymous_admin
    wanted = [
        _acl("orders"),
        _acl("orders", "User:bob", op=4),  # WRITE
        _acl("logs-", pattern=4, op=2, permission=2),  # PREFIXED, ALL, DENY
        _acl("billing", rtype=3, host="10.0.0.1"),  # GROUP
        _acl("kafka-cluster", rtype=4, op=12),  # CLUSTER, IDEMPOTENT_WRITE
    ]
    created = core.call(30, version, create.CreateAclsRequest(creations=[*wanted, wanted[0]]))
    assert [(r.error_code, r.error_message) for r in created.results] == [
        (ErrorCode.NONE, None)
    ] * 6
    listed = core.call(29, version, _describe_all())
    assert _listed(listed) == [_as_tuple(c) for c in wanted]  # the duplicate stored once
    # ACLs are grouped by resource pattern, in the order the patterns first appear.
    assert [(r.resource_name, len(r.acls)) for r in listed.resources] == [
        ("orders", 2), ("logs-", 1), ("billing", 1), ("kafka-cluster", 1),
    ]  # fmt: skip
    match = core.call(29, version, _describe_all(resource_type_filter=2, resource_name_filter="logs-x", pattern_type_filter=2))  # fmt: skip
    assert _listed(match) == [_as_tuple(wanted[2])]
    by_principal = core.call(29, version, _describe_all(principal_filter="User:bob"))
    assert _listed(by_principal) == [_as_tuple(wanted[1])]
    deleted = core.call(
        31,
        version,
        delete.DeleteAclsRequest(
            filters=[
                _delete_filter(resource_type_filter=2, resource_name_filter="orders"),
                _delete_filter(principal_filter="User:alice", operation=3),
                _delete_filter(resource_type_filter=5),  # TRANSACTIONAL_ID: none
            ]
        ),
    )
    results = deleted.filter_results
    assert [r.error_code for r in results] == [ErrorCode.NONE] * 3
    assert [
        (m.resource_name, m.principal, m.operation, m.error_code) for m in results[0].matching_acls
    ] == [("orders", "User:alice", 3, 0), ("orders", "User:bob", 4, 0)]
    # An ACL two filters match is reported under the first only.
    assert [m.resource_name for m in results[1].matching_acls] == ["billing"]
    assert results[2].matching_acls == []
    assert _listed(core.call(29, version, _describe_all())) == [
        _as_tuple(wanted[2]),
        _as_tuple(wanted[4]),
    ]


def test_invalid_creations_and_filters_are_refused_with_reasons(anonymous_admin: Any) -> None:
    core = anonymous_admin
    bad = [
        _acl(""),
        _acl("t", "alice"),
        _acl("my-cluster", rtype=4, op=7),
        _acl("t", pattern=2),  # MATCH
        _acl("t", op=1),  # ANY
        _acl("t", rtype=1),  # ANY
        _acl("t", permission=1),  # ANY
        _acl("t", host=""),
    ]
    created = core.call(30, 3, create.CreateAclsRequest(creations=[*bad, _acl("ok")]))
    codes = [r.error_code for r in created.results]
    assert codes == [ErrorCode.INVALID_REQUEST] * len(bad) + [ErrorCode.NONE]
    messages = [r.error_message for r in created.results[:3]]
    assert "empty" in messages[0] and "Type:Name" in messages[1] and "kafka-cluster" in messages[2]
    assert _listed(core.call(29, 3, _describe_all())) == [_as_tuple(_acl("ok"))]
    unknown = core.call(29, 3, _describe_all(operation=0))
    assert unknown.error_code == ErrorCode.INVALID_REQUEST and unknown.resources == []
    deleted = core.call(
        31, 3, delete.DeleteAclsRequest(filters=[_delete_filter(permission_type=0)])
    )
    assert deleted.filter_results[0].error_code == ErrorCode.INVALID_REQUEST
    assert _listed(core.call(29, 3, _describe_all())) == [_as_tuple(_acl("ok"))]


def test_a_principal_needs_describe_or_alter_on_the_cluster(open_core: Any) -> None:
    core = open_core(
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        authorizer_class_name=STANDARD,
        super_users=("User:admin",),
    )
    core.login("admin", USERS["admin"], conn_id=ADMIN_CONN)
    core.login("alice", USERS["alice"], conn_id=ALICE_CONN, peer="127.0.0.2:50001")
    refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED

    def as_alice(key: int, body: Any) -> Any:
        return core.call(key, 3, body, conn_id=ALICE_CONN)

    listed = as_alice(29, _describe_all())
    assert (listed.error_code, listed.resources) == (refused, [])
    assert "User:alice" in listed.error_message
    created = as_alice(30, create.CreateAclsRequest(creations=[_acl("t"), _acl("u")]))
    assert [r.error_code for r in created.results] == [refused] * 2
    deleted = as_alice(31, delete.DeleteAclsRequest(filters=[_delete_filter()]))
    assert [(r.error_code, r.matching_acls) for r in deleted.filter_results] == [(refused, [])]
    # The super user lets alice describe ACLs (DESCRIBE on the cluster, from her host only).
    describe_cluster = _acl("kafka-cluster", rtype=4, op=8, host="127.0.0.2")
    core.call(30, 3, create.CreateAclsRequest(creations=[describe_cluster]), conn_id=ADMIN_CONN)
    assert _listed(as_alice(29, _describe_all())) == [_as_tuple(describe_cluster)]
    created = as_alice(30, create.CreateAclsRequest(creations=[_acl("t")]))
    assert created.results[0].error_code == refused
    # ALTER on the cluster lets her change them (and implies DESCRIBE).
    alter_cluster = _acl("kafka-cluster", rtype=4, op=7)
    core.call(30, 3, create.CreateAclsRequest(creations=[alter_cluster]), conn_id=ADMIN_CONN)
    created = as_alice(30, create.CreateAclsRequest(creations=[_acl("t")]))
    assert created.results[0].error_code == ErrorCode.NONE
    deleted = as_alice(
        31, delete.DeleteAclsRequest(filters=[_delete_filter(resource_type_filter=4, operation=8)])
    )
    assert [m.operation for m in deleted.filter_results[0].matching_acls] == [8]
    assert _listed(as_alice(29, _describe_all())) == [
        _as_tuple(alter_cluster),
        _as_tuple(_acl("t")),
    ]


def test_acls_survive_a_restart(open_core: Any) -> None:
    settings: dict[str, Any] = {
        "authorizer_class_name": "kafka.security.authorizer.AclAuthorizer",
        "super_users": ("User:ANONYMOUS",),
    }
    first = open_core(**settings)
    wanted = [_acl("orders"), _acl("p-", pattern=4, permission=2), _acl("gone")]
    first.call(30, 3, create.CreateAclsRequest(creations=wanted))
    first.call(
        31, 3, delete.DeleteAclsRequest(filters=[_delete_filter(resource_name_filter="gone")])
    )
    first.broker.close()
    again = open_core(now_ms=first.now + 1000, **settings)
    assert _listed(again.call(29, 3, _describe_all())) == [_as_tuple(c) for c in wanted[:2]]
    # Without the authorizer the ACLs are kept, not served; with it again they are back.
    again.broker.close()
    plain = open_core(now_ms=first.now + 2000)
    assert plain.call(29, 3, _describe_all()).error_code == DISABLED
    plain.broker.close()
    back = open_core(now_ms=first.now + 3000, **settings)
    assert len(_listed(back.call(29, 3, _describe_all()))) == 2


def test_an_unreadable_acl_journal_stops_the_start_and_releases_everything(
    open_core: Any, data_dir: Any
) -> None:
    """The broker refuses to start without its ACLs (it would allow or deny the
    wrong things), closes what it opened, and starts once the journal is readable."""
    from trafka.brokerlite.security.authorizer import ACLS_JOURNAL, AclStoreError

    journal = data_dir / ACLS_JOURNAL
    journal.mkdir(parents=True)
    authorizer = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    with pytest.raises(AclStoreError, match="cannot read journal"):
        open_core(authorizer_class_name=authorizer)
    journal.rmdir()
    core = open_core(authorizer_class_name=authorizer)  # the directory lock was released
    assert core.broker.authorizer is not None and core.broker.authorizer.acls() == []
