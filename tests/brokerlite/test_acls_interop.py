"""Real admin clients manage ACLs on brokerlite with the authorizer on:
confluent-kafka's AdminClient (librdkafka) and kafka-python's KafkaAdminClient
create, describe and delete ACLs (literal, prefixed and wildcard patterns; ANY,
MATCH, LITERAL and PREFIXED filters), get back exactly what they created, and
see what the other created. A principal that is not a super user is refused
with CLUSTER_AUTHORIZATION_FAILED (except by librdkafka's describe, which drops
DescribeAcls' error code and shows an empty list). Each test has its own broker (the ACLs are
the broker's state) and every client call a timeout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
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

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.codec.errors import ErrorCode

pytestmark = pytest.mark.timeout(90)

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
USERS = {"admin": "admin-pw", "alice": "alice-pw"}
TIMEOUT = 20.0

# An ACL as both clients' objects are compared: names of the enumerations.
Row = tuple[str, str, str, str, str, str, str]


@pytest.fixture
def authz(tmp_path: Path) -> Iterator[RunningBroker]:
    """A PLAINTEXT brokerlite with the authorizer on; anonymous clients are super users."""
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path / "data",
        authorizer_class_name=STANDARD,
        super_users=("User:ANONYMOUS",),
    ) as running:
        yield running


@pytest.fixture
def kp_admin(authz: RunningBroker) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=authz.bootstrap_servers, request_timeout_ms=10_000)
    try:
        yield admin
    finally:
        admin.close()


def ck_binding(
    rtype: ResourceType,
    name: str,
    pattern: ResourcePatternType,
    principal: str,
    host: str,
    op: AclOperation,
    permission: AclPermissionType,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def ck_filter(
    rtype: ResourceType = ResourceType.ANY,
    name: str | None = None,
    pattern: ResourcePatternType = ResourcePatternType.ANY,
    principal: str | None = None,
    host: str | None = None,
    op: AclOperation = AclOperation.ANY,
    permission: AclPermissionType = AclPermissionType.ANY,
) -> AclBindingFilter:
    return AclBindingFilter(rtype, name, pattern, principal, host, op, permission)


def ck_row(b: AclBinding) -> Row:
    # librdkafka calls the cluster resource type BROKER (4); Kafka and kafka-python CLUSTER.
    rtype = "CLUSTER" if b.restype == ResourceType.BROKER else b.restype.name
    return (
        rtype, b.name, b.resource_pattern_type.name, b.principal, b.host,
        b.operation.name, b.permission_type.name,
    )  # fmt: skip


def kp_row(a: ACL) -> Row:
    p = a.resource_pattern
    return (
        p.resource_type.name, p.resource_name, p.pattern_type.name, a.principal, a.host,
        a.operation.name, a.permission_type.name,
    )  # fmt: skip


def kp_filter(
    rtype: KpResourceType = KpResourceType.ANY,
    name: str | None = None,
    pattern: ACLResourcePatternType = ACLResourcePatternType.ANY,
    principal: str | None = None,
    host: str | None = None,
    op: ACLOperation = ACLOperation.ANY,
    permission: ACLPermissionType = ACLPermissionType.ANY,
) -> ACLFilter:
    return ACLFilter(principal, host, op, permission, ResourcePatternFilter(rtype, name, pattern))


def ck_describe(admin: AdminClient, f: AclBindingFilter) -> set[Row]:
    return {ck_row(b) for b in admin.describe_acls(f, request_timeout=TIMEOUT).result(TIMEOUT)}


def ck_create(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT).values():
        assert future.result(TIMEOUT) is None


def kp_describe(admin: KafkaAdminClient, f: ACLFilter) -> set[Row]:
    acls, error = admin.describe_acls(f)
    assert error.errno == 0
    return {kp_row(a) for a in acls}


T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.BROKER
LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
CK_ACLS = [
    ck_binding(T, "orders", LIT, "User:alice", "*", AclOperation.READ, ALLOW),
    ck_binding(T, "orders", LIT, "User:bob", "10.0.0.1", AclOperation.WRITE, ALLOW),
    ck_binding(T, "ord", PRE, "User:*", "*", AclOperation.DESCRIBE, DENY),
    ck_binding(T, "*", LIT, "User:carol", "*", AclOperation.ALL, ALLOW),
    ck_binding(T, "orders-eu", PRE, "User:alice", "*", AclOperation.ALTER_CONFIGS, ALLOW),
    ck_binding(G, "billing", LIT, "User:alice", "*", AclOperation.READ, ALLOW),
    ck_binding(C, "kafka-cluster", LIT, "User:alice", "*", AclOperation.IDEMPOTENT_WRITE, ALLOW),
    ck_binding(
        ResourceType.TRANSACTIONAL_ID, "tx-", PRE, "User:alice", "*", AclOperation.WRITE, ALLOW
    ),
]
ROWS = [ck_row(b) for b in CK_ACLS]


def test_confluent_kafka_creates_describes_and_deletes(authz: RunningBroker) -> None:
    admin = AdminClient({"bootstrap.servers": authz.bootstrap_servers})
    assert ck_describe(admin, ck_filter()) == set()
    ck_create(admin, CK_ACLS)
    assert ck_describe(admin, ck_filter()) == set(ROWS)
    assert ck_describe(admin, ck_filter(pattern=ResourcePatternType.MATCH)) == set(ROWS)
    # LITERAL and PREFIXED: the patterns of that type only.
    assert ck_describe(admin, ck_filter(T, pattern=PRE)) == {ROWS[2], ROWS[4]}
    assert ck_describe(admin, ck_filter(T, "orders", LIT)) == {ROWS[0], ROWS[1]}
    assert ck_describe(admin, ck_filter(T, "ord", PRE)) == {ROWS[2]}
    # MATCH: every ACL that applies to the topic: its name, the wildcard, each prefix.
    match = ck_filter(T, "orders-eu-1", ResourcePatternType.MATCH)
    assert ck_describe(admin, match) == {ROWS[2], ROWS[3], ROWS[4]}
    match = ck_filter(T, "orders", ResourcePatternType.MATCH)
    assert ck_describe(admin, match) == {ROWS[0], ROWS[1], ROWS[2], ROWS[3]}
    # The entry's fields.
    assert ck_describe(admin, ck_filter(principal="User:bob")) == {ROWS[1]}
    assert ck_describe(admin, ck_filter(host="10.0.0.1")) == {ROWS[1]}
    assert ck_describe(admin, ck_filter(permission=DENY)) == {ROWS[2]}
    assert ck_describe(admin, ck_filter(C)) == {ROWS[6]}
    # Deleting: a PREFIXED filter, then a MATCH filter, then everything else.
    futures = admin.delete_acls(
        [ck_filter(T, pattern=PRE, op=AclOperation.DESCRIBE), match], request_timeout=TIMEOUT
    )
    deleted = [{ck_row(b) for b in f.result(TIMEOUT)} for f in futures.values()]
    assert deleted == [{ROWS[2]}, {ROWS[0], ROWS[1], ROWS[3]}]
    (rest,) = admin.delete_acls([ck_filter()], request_timeout=TIMEOUT).values()
    assert {ck_row(b) for b in rest.result(TIMEOUT)} == {ROWS[4], ROWS[5], ROWS[6], ROWS[7]}
    assert ck_describe(admin, ck_filter()) == set()


def test_confluent_kafka_gets_invalid_request_for_a_bad_binding(authz: RunningBroker) -> None:
    admin = AdminClient({"bootstrap.servers": authz.bootstrap_servers})
    good = CK_ACLS[0]
    bad = ck_binding(C, "my-cluster", LIT, "User:alice", "*", AclOperation.ALTER, ALLOW)
    futures = admin.create_acls([good, bad], request_timeout=TIMEOUT)
    assert futures[good].result(TIMEOUT) is None
    with pytest.raises(KafkaException) as info:
        futures[bad].result(TIMEOUT)
    assert info.value.args[0].code() == ErrorCode.INVALID_REQUEST
    assert "kafka-cluster" in info.value.args[0].str()
    assert ck_describe(admin, ck_filter()) == {ROWS[0]}


def test_kafka_python_creates_describes_and_deletes(kp_admin: KafkaAdminClient) -> None:
    topic = KpResourceType.TOPIC
    lit, pre = ACLResourcePatternType.LITERAL, ACLResourcePatternType.PREFIXED
    acls = [
        ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
            ResourcePattern(topic, "orders")),
        ACL("User:*", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
            ResourcePattern(topic, "secret-", pre)),
        ACL("User:bob", "10.0.0.2", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.GROUP, "*")),
        ACL("User:alice", "*", ACLOperation.ALTER, ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.CLUSTER, "kafka-cluster")),
    ]  # fmt: skip
    rows = [kp_row(a) for a in acls]
    result = kp_admin.create_acls(acls)
    assert result["failed"] == [] and result["succeeded"] == acls
    assert kp_describe(kp_admin, kp_filter()) == set(rows)
    assert kp_describe(kp_admin, kp_filter(topic, pattern=pre)) == {rows[1]}
    assert kp_describe(kp_admin, kp_filter(topic, "orders", lit)) == {rows[0]}
    match = kp_filter(topic, "secret-plans", ACLResourcePatternType.MATCH)
    assert kp_describe(kp_admin, match) == {rows[1]}
    assert kp_describe(kp_admin, kp_filter(KpResourceType.GROUP, "billing", ACLResourcePatternType.MATCH)) == {rows[2]}  # fmt: skip
    assert kp_describe(kp_admin, kp_filter(principal="User:alice")) == {rows[0], rows[3]}
    # A bad binding (an empty resource name) fails alone.
    empty = ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                ResourcePattern(topic, ""))  # fmt: skip
    refused = kp_admin.create_acls([empty])
    assert refused["succeeded"] == [] and len(refused["failed"]) == 1
    assert refused["failed"][0].errno == ErrorCode.INVALID_REQUEST
    deleted = kp_admin.delete_acls([match, kp_filter(op=ACLOperation.ALTER)])
    assert [(f, {kp_row(a) for a in found}, e.errno) for f, found, e in deleted] == [
        (match, {rows[1]}, 0),
        (kp_filter(op=ACLOperation.ALTER), {rows[3]}, 0),
    ]
    assert kp_describe(kp_admin, kp_filter()) == {rows[0], rows[2]}


def test_each_client_sees_what_the_other_created(
    authz: RunningBroker, kp_admin: KafkaAdminClient
) -> None:
    ck = AdminClient({"bootstrap.servers": authz.bootstrap_servers})
    ck_create(ck, CK_ACLS[:6])
    seen_by_kp = kp_describe(kp_admin, kp_filter())
    assert seen_by_kp == set(ROWS[:6])
    kp_acl = ACL("User:dave", "*", ACLOperation.CREATE, ACLPermissionType.ALLOW,
                 ResourcePattern(KpResourceType.TOPIC, "new-", ACLResourcePatternType.PREFIXED))  # fmt: skip
    assert kp_admin.create_acls([kp_acl])["failed"] == []
    assert ck_describe(ck, ck_filter(principal="User:dave")) == {kp_row(kp_acl)}
    # What one deletes is gone for the other.
    (gone,) = ck.delete_acls([ck_filter(principal="User:dave")], request_timeout=TIMEOUT).values()
    assert {ck_row(b) for b in gone.result(TIMEOUT)} == {kp_row(kp_acl)}
    ((_, removed, error),) = kp_admin.delete_acls([kp_filter(KpResourceType.GROUP)])
    assert error.errno == 0 and {kp_row(a) for a in removed} == {ROWS[5]}
    assert ck_describe(ck, ck_filter()) == set(ROWS[:5])
    assert kp_describe(kp_admin, kp_filter()) == set(ROWS[:5])


def test_a_principal_that_is_not_a_super_user_is_refused(tmp_path: Path) -> None:
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path / "data",
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        authorizer_class_name=STANDARD,
        super_users=("User:admin",),
    ) as running:

        def ck_as(user: str) -> AdminClient:
            return AdminClient(
                {
                    "bootstrap.servers": running.bootstrap_servers,
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanisms": "PLAIN",
                    "sasl.username": user,
                    "sasl.password": USERS[user],
                }
            )

        alice = ck_as("alice")
        ck_create(ck_as("admin"), [CK_ACLS[1]])
        # librdkafka drops DescribeAcls' top-level error code (rd_kafka_DescribeAclsResponse_parse
        # reads it and returns no error): the refusal shows as an empty listing.
        assert ck_describe(alice, ck_filter()) == set()
        (future,) = alice.create_acls([CK_ACLS[0]], request_timeout=TIMEOUT).values()
        with pytest.raises(KafkaException) as info:
            future.result(TIMEOUT)
        assert info.value.args[0].code() == ErrorCode.CLUSTER_AUTHORIZATION_FAILED

        kp_alice = KafkaAdminClient(
            bootstrap_servers=running.bootstrap_servers,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="alice",
            sasl_plain_password=USERS["alice"],
            request_timeout_ms=10_000,
        )
        try:
            from kafka.errors import ClusterAuthorizationFailedError

            with pytest.raises(ClusterAuthorizationFailedError):
                kp_alice.describe_acls(kp_filter())
            # The super user grants her DESCRIBE on the cluster: she may list, not change.
            describe_cluster = ck_binding(
                C, "kafka-cluster", LIT, "User:alice", "*", AclOperation.DESCRIBE, ALLOW
            )
            ck_create(ck_as("admin"), [describe_cluster])
            assert kp_describe(kp_alice, kp_filter()) == {ROWS[1], ck_row(describe_cluster)}
            assert ck_describe(alice, ck_filter()) == {ROWS[1], ck_row(describe_cluster)}
            refused = kp_alice.create_acls(
                [ACL("User:alice", "*", ACLOperation.ALL, ACLPermissionType.ALLOW,
                     ResourcePattern(KpResourceType.CLUSTER, "kafka-cluster"))]
            )  # fmt: skip
            assert [e.errno for e in refused["failed"]] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
        finally:
            kp_alice.close()
