"""Admin.describe_acls, create_acls and delete_acls (KIP-140): against a scripted
broker with an ACL store (the requests as sent, the bindings read back, per-item
errors), and against brokerlite: without an authorizer (SECURITY_DISABLED, as
Kafka without one) and with one (a round trip that survives a restart, and
CLUSTER_AUTHORIZATION_FAILED for a principal that is not a super user)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from sdk_brokers import module_broker
from sdk_fakebroker import FakeBroker

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k29_describe_acls as dacl
from trafka.codec.messages import k30_create_acls as cacl
from trafka.codec.messages import k31_delete_acls as delacl
from trafka.sdk import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
    open_admin,
)

pytestmark = pytest.mark.timeout(60)

READ_ORDERS = AclBinding(
    AclResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*",
    AclOperation.READ, AclPermissionType.ALLOW,
)  # fmt: skip
DENY_PREFIX = AclBinding(
    AclResourceType.TOPIC, "secret-", PatternType.PREFIXED, "User:*", "10.0.0.1",
    AclOperation.ALL, AclPermissionType.DENY,
)  # fmt: skip
GROUP_READ = AclBinding(
    AclResourceType.GROUP, "billing", PatternType.LITERAL, "User:bob", "*",
    AclOperation.READ, AclPermissionType.ALLOW,
)  # fmt: skip


def _store(broker: FakeBroker) -> list[tuple[int, str, int, str, str, int, int]]:
    """ACL APIs on the scripted broker: an in-memory store, exact-or-ANY matching."""
    acls: list[tuple[int, str, int, str, str, int, int]] = []
    base = broker.api_versions

    def versions(header: Any, body: Any) -> Any:
        answer = base(header, body)
        for key in (29, 30, 31):
            answer.api_keys.append(
                type(answer.api_keys[0])(api_key=key, min_version=1, max_version=3)
            )
        return answer

    def matches(acl: tuple[Any, ...], f: Any) -> bool:
        wanted = (
            f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
            f.principal_filter, f.host_filter, f.operation, f.permission_type,
        )  # fmt: skip
        return all(w in (None, 1) or w == a for w, a in zip(wanted, acl, strict=True))

    def create(header: Any, body: Any) -> Any:
        results = []
        for c in body.creations:
            if not c.resource_name:
                results.append(
                    cacl.CreateAclsResponse.AclCreationResult(
                        error_code=ErrorCode.INVALID_REQUEST, error_message="empty name"
                    )
                )
                continue
            acls.append((
                c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                c.host, c.operation, c.permission_type,
            ))  # fmt: skip
            results.append(
                cacl.CreateAclsResponse.AclCreationResult(error_code=0, error_message=None)
            )
        return cacl.CreateAclsResponse(results=results)

    def describe(header: Any, body: Any) -> Any:
        R = dacl.DescribeAclsResponse
        found = [a for a in acls if matches(a, body)]
        return R(
            error_code=0,
            error_message=None,
            resources=[
                R.DescribeAclsResource(
                    resource_type=a[0],
                    resource_name=a[1],
                    pattern_type=a[2],
                    acls=[
                        R.AclDescription(
                            principal=a[3], host=a[4], operation=a[5], permission_type=a[6]
                        )
                    ],
                )
                for a in found
            ],
        )

    def delete(header: Any, body: Any) -> Any:
        R = delacl.DeleteAclsResponse
        results = []
        for f in body.filters:
            gone = [a for a in acls if matches(a, f)]
            for a in gone:
                acls.remove(a)
            results.append(
                R.DeleteAclsFilterResult(
                    error_code=0,
                    error_message=None,
                    matching_acls=[
                        R.DeleteAclsMatchingAcl(
                            resource_type=a[0],
                            resource_name=a[1],
                            pattern_type=a[2],
                            principal=a[3],
                            host=a[4],
                            operation=a[5],
                            permission_type=a[6],
                        )
                        for a in gone
                    ],
                )
            )
        return R(filter_results=results)

    broker.handlers.update({18: versions, 29: describe, 30: create, 31: delete})
    return acls


@pytest.mark.anyio
async def test_create_describe_delete(fake_broker: FakeBroker) -> None:
    stored = _store(fake_broker)
    async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
        empty_name = AclBinding(
            AclResourceType.TOPIC, "", PatternType.LITERAL, "User:x", "*",
            AclOperation.READ, AclPermissionType.ALLOW,
        )  # fmt: skip
        created = await admin.create_acls([READ_ORDERS, DENY_PREFIX, GROUP_READ, empty_name])
        assert [created[b] for b in (READ_ORDERS, DENY_PREFIX, GROUP_READ)] == [None] * 3
        refused = created[empty_name]
        assert isinstance(refused, KafkaError) and refused.code == ErrorCode.INVALID_REQUEST
        assert len(stored) == 3
        assert set(await admin.describe_acls()) == {READ_ORDERS, DENY_PREFIX, GROUP_READ}
        topics = await admin.describe_acls(AclBindingFilter(resource_type=AclResourceType.TOPIC))
        assert set(topics) == {READ_ORDERS, DENY_PREFIX}
        by_principal = AclBindingFilter(principal="User:bob")
        deleted = await admin.delete_acls([by_principal, READ_ORDERS.as_filter()])
        assert deleted == {by_principal: [GROUP_READ], READ_ORDERS.as_filter(): [READ_ORDERS]}
        assert await admin.describe_acls() == [DENY_PREFIX]
    sent = [body for key, _, body in fake_broker.requests if key == 29]
    assert (sent[1].resource_type_filter, sent[1].resource_name_filter) == (2, None)
    assert sent[1].pattern_type_filter == PatternType.ANY


def test_bindings_are_concrete_and_filters_may_be_open() -> None:
    with pytest.raises(ValueError, match="resource_type cannot be ANY"):
        AclBinding(AclResourceType.ANY, "t", PatternType.LITERAL, "User:a", "*", 3, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pattern_type cannot be MATCH"):
        AclBinding(AclResourceType.TOPIC, "t", PatternType.MATCH, "User:a", "*", 3, 3)  # type: ignore[arg-type]
    binding = AclBinding(2, "t", 3, "User:a", "*", 3, 3)  # type: ignore[arg-type]
    assert binding.operation is AclOperation.READ
    assert binding.resource_type is AclResourceType.TOPIC
    assert binding.as_filter() == AclBindingFilter(
        AclResourceType.TOPIC, "t", PatternType.LITERAL, "User:a", "*",
        AclOperation.READ, AclPermissionType.ALLOW,
    )  # fmt: skip
    assert AclBindingFilter().resource_type is AclResourceType.ANY


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "acls")


def test_brokerlite_has_no_authorizer(broker: RunningBroker) -> None:
    async def main() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            with pytest.raises(KafkaError) as info:
                await admin.describe_acls()
            assert info.value.code == ErrorCode.SECURITY_DISABLED
            created = await admin.create_acls([READ_ORDERS])
            assert created[READ_ORDERS] is not None
            assert created[READ_ORDERS].code == ErrorCode.SECURITY_DISABLED
            deleted = await admin.delete_acls([AclBindingFilter()])
            error = deleted[AclBindingFilter()]
            assert isinstance(error, KafkaError) and error.code == ErrorCode.SECURITY_DISABLED

    anyio.run(main)


# -- brokerlite with the authorizer on --------------------------------------------------

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
USERS = {"admin": "admin-pw", "alice": "alice-pw"}


def _as(user: str) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_username": user,
        "sasl_password": USERS[user],
    }


def test_round_trip_with_the_authorizer_and_a_restart(tmp_path: Any) -> None:
    settings: dict[str, Any] = {
        "port": 0,
        "host": "127.0.0.1",
        "data_dir": tmp_path,
        "authorizer_class_name": STANDARD,
        "super_users": ("User:ANONYMOUS",),
    }
    bad = AclBinding(
        AclResourceType.CLUSTER, "not-the-cluster", PatternType.LITERAL, "User:x", "*",
        AclOperation.ALTER, AclPermissionType.ALLOW,
    )  # fmt: skip

    async def first(bootstrap: str) -> None:
        with anyio.fail_after(30):
            async with open_admin(bootstrap_servers=bootstrap) as admin:
                assert await admin.describe_acls() == []
                created = await admin.create_acls([READ_ORDERS, DENY_PREFIX, GROUP_READ, bad])
                assert [created[b] for b in (READ_ORDERS, DENY_PREFIX, GROUP_READ)] == [None] * 3
                refused = created[bad]
                assert isinstance(refused, KafkaError)
                assert refused.code == ErrorCode.INVALID_REQUEST
                assert "kafka-cluster" in str(refused)
                assert await admin.describe_acls() == [READ_ORDERS, DENY_PREFIX, GROUP_READ]
                # Creating one again is no error and no duplicate.
                assert await admin.create_acls([READ_ORDERS]) == {READ_ORDERS: None}
                applying = AclBindingFilter(
                    AclResourceType.TOPIC, "secret-plans", PatternType.MATCH
                )
                assert await admin.describe_acls(applying) == [DENY_PREFIX]
                prefixed = AclBindingFilter(pattern_type=PatternType.PREFIXED)
                assert await admin.describe_acls(prefixed) == [DENY_PREFIX]
                by_group = AclBindingFilter(AclResourceType.GROUP)
                assert await admin.delete_acls([by_group]) == {by_group: [GROUP_READ]}

    async def second(bootstrap: str) -> None:
        with anyio.fail_after(30):
            async with open_admin(bootstrap_servers=bootstrap) as admin:
                assert await admin.describe_acls() == [READ_ORDERS, DENY_PREFIX]
                everything = AclBindingFilter()
                deleted = await admin.delete_acls([READ_ORDERS.as_filter(), everything])
                assert deleted == {
                    READ_ORDERS.as_filter(): [READ_ORDERS],
                    everything: [DENY_PREFIX],
                }
                assert await admin.describe_acls() == []

    with broker_in_thread(**settings) as running:
        anyio.run(first, running.bootstrap_servers)
    with broker_in_thread(**settings) as running:  # the same data directory
        anyio.run(second, running.bootstrap_servers)


def test_a_principal_that_is_not_a_super_user_is_refused(tmp_path: Any) -> None:
    alter_cluster = AclBinding(
        AclResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:alice", "*",
        AclOperation.ALTER, AclPermissionType.ALLOW,
    )  # fmt: skip

    async def main(bootstrap: str) -> None:
        with anyio.fail_after(30):
            async with open_admin(bootstrap_servers=bootstrap, **_as("alice")) as alice:
                with pytest.raises(KafkaError) as info:
                    await alice.describe_acls()
                assert info.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                created = await alice.create_acls([READ_ORDERS])
                refused = created[READ_ORDERS]
                assert isinstance(refused, KafkaError)
                assert refused.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                deleted = await alice.delete_acls([AclBindingFilter()])
                error = deleted[AclBindingFilter()]
                assert isinstance(error, KafkaError)
                assert error.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                async with open_admin(bootstrap_servers=bootstrap, **_as("admin")) as admin:
                    assert await admin.create_acls([alter_cluster]) == {alter_cluster: None}
                # ALTER on the cluster lets her manage ACLs (and implies DESCRIBE).
                assert await alice.create_acls([READ_ORDERS]) == {READ_ORDERS: None}
                assert await alice.describe_acls() == [alter_cluster, READ_ORDERS]

    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path,
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        authorizer_class_name=STANDARD,
        super_users=("User:admin",),
    ) as running:
        anyio.run(main, running.bootstrap_servers)
