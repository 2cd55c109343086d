"""Admin.describe_acls, create_acls and delete_acls (KIP-140): against a scripted
broker with an ACL store (the requests as sent, the bindings read back, per-item
errors), and against brokerlite, which has no authorizer (SECURITY_DISABLED, as
Kafka without one)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from sdk_brokers import module_broker
from sdk_fakebroker import FakeBroker

from trafka.brokerlite import RunningBroker
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
