"""ACL requests and answers (DescribeAcls, CreateAcls, DeleteAcls; KIP-140),
for the bindings and filters of :mod:`trafka.sdk.acls`. No I/O;
:class:`~trafka.sdk.admin.Admin` sends them to any broker.

The bindings stay in :mod:`trafka.sdk.acls` (``from trafka.sdk import
AclBinding`` loads it, and only it): they are plain values. This module needs the codec's ACL messages, so it is
loaded with the admin client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trafka.codec import ApiKey, ErrorCode, KafkaError
from trafka.codec.messages import k29_describe_acls as dacl
from trafka.codec.messages import k30_create_acls as cacl
from trafka.codec.messages import k31_delete_acls as delacl

from ..acls import AclBinding, AclBindingFilter
from ..calls import TRANSIENT, check
from ._common import fit, partition_outcome

__all__ = [
    "create_acls_request",
    "delete_acls_request",
    "describe_acls_request",
    "read_create_acls",
    "read_delete_acls",
    "read_describe_acls",
]


def _filter_fields(f: AclBindingFilter) -> dict[str, Any]:
    """A filter as the fields DescribeAcls and DeleteAcls share."""
    return {
        "resource_type_filter": f.resource_type,
        "resource_name_filter": f.name,
        "pattern_type_filter": f.pattern_type,
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": f.operation,
        "permission_type": f.permission,
    }


def _binding(resource: Any, acl: Any) -> AclBinding:
    return AclBinding(
        resource.resource_type,
        resource.resource_name,
        resource.pattern_type,
        acl.principal,
        acl.host,
        acl.operation,
        acl.permission_type,
    )


def describe_acls_request(version: int, acl_filter: AclBindingFilter) -> Any:
    """DescribeAcls at ``version``."""
    return fit(
        ApiKey.DESCRIBE_ACLS, version, dacl.DescribeAclsRequest, **_filter_fields(acl_filter)
    )


def read_describe_acls(resp: Any) -> list[AclBinding]:
    """The ACLs of a DescribeAcls answer.

    Raises:
        Again: a transient error.
        KafkaError: any other error (SECURITY_DISABLED, CLUSTER_AUTHORIZATION_FAILED...).
    """
    check(resp.error_code, "describing ACLs", resp.error_message, again=TRANSIENT)
    return [_binding(r, a) for r in resp.resources for a in r.acls]


def create_acls_request(bindings: Sequence[AclBinding]) -> Any:
    """CreateAcls, one creation per binding in order."""
    req = cacl.CreateAclsRequest
    return req(
        creations=[
            req.AclCreation(
                resource_type=b.resource_type,
                resource_name=b.name,
                resource_pattern_type=b.pattern_type,
                principal=b.principal,
                host=b.host,
                operation=b.operation,
                permission_type=b.permission,
            )
            for b in bindings
        ]
    )


def read_create_acls(
    bindings: Sequence[AclBinding], resp: Any
) -> dict[AclBinding, KafkaError | None]:
    """Per binding, None when created, else its error (answers come in order).

    Raises:
        KafkaError: UNKNOWN_SERVER_ERROR when the answers do not match the creations.
    """
    if len(resp.results) != len(bindings):
        raise KafkaError(
            ErrorCode.UNKNOWN_SERVER_ERROR,
            f"creating ACLs: {len(resp.results)} answers to {len(bindings)} creations",
        )
    return {
        b: partition_outcome(r.error_code, r.error_message, f"creating ACL {b}")
        for b, r in zip(bindings, resp.results, strict=True)
    }


def delete_acls_request(filters: Sequence[AclBindingFilter]) -> Any:
    """DeleteAcls, one filter per filter in order."""
    req = delacl.DeleteAclsRequest
    return req(filters=[req.DeleteAclsFilter(**_filter_fields(f)) for f in filters])


def read_delete_acls(
    filters: Sequence[AclBindingFilter], resp: Any
) -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
    """Per filter, the ACLs deleted, or its error (answers come in order).

    Raises:
        KafkaError: UNKNOWN_SERVER_ERROR when the answers do not match the filters.
    """
    if len(resp.filter_results) != len(filters):
        raise KafkaError(
            ErrorCode.UNKNOWN_SERVER_ERROR,
            f"deleting ACLs: {len(resp.filter_results)} answers to {len(filters)} filters",
        )
    out: dict[AclBindingFilter, list[AclBinding] | KafkaError] = {}
    for f, r in zip(filters, resp.filter_results, strict=True):
        error = partition_outcome(r.error_code, r.error_message, f"deleting ACLs {f}")
        out[f] = (
            error
            if error is not None
            else [_binding(m, m) for m in r.matching_acls if not m.error_code]
        )
    return out
