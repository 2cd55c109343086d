"""DescribeAcls (key 29), versions 0-3 (1-3 with ``protocol_version`` 4.0).

Without an authorizer (``authorizer_class_name`` unset) it fails as a whole with
SECURITY_DISABLED and lists no resources, as a Kafka broker without
``authorizer.class.name``. With one, it needs DESCRIBE on the cluster
(CLUSTER_AUTHORIZATION_FAILED) and lists the ACLs the filter matches, grouped by
resource pattern in the order the patterns first appear; a filter with an unknown
enumeration value gets INVALID_REQUEST. Version 0 is not served, as from Kafka 4.0
(KIP-896).
"""

from __future__ import annotations

from trafka.brokerlite.security.authorizer import CLUSTER_NAME, AclFilter
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k29_describe_acls as m

from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.DESCRIBE_ACLS
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 3

NO_AUTHORIZER = "no authorizer is configured on this broker (set authorizer_class_name)"


def handle(ctx: RequestContext, request: m.DescribeAclsRequest) -> m.DescribeAclsResponse:
    authorizer = ctx.authorizer
    if authorizer is None:
        return _failed(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not ctx.allowed(AclOperation.DESCRIBE, AclResourceType.CLUSTER, CLUSTER_NAME):
        return _failed(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"{ctx.principal} may not describe ACLs (DESCRIBE on the cluster)",
        )
    found = authorizer.describe(
        AclFilter(
            request.resource_type_filter,
            request.resource_name_filter,
            request.pattern_type_filter,
            request.principal_filter,
            request.host_filter,
            request.operation,
            request.permission_type,
        )
    )
    if found.error is not None:
        return _failed(*found.error)
    Resource = m.DescribeAclsResponse.DescribeAclsResource
    resources: dict[tuple[int, str, int], list[m.DescribeAclsResponse.AclDescription]] = {}
    for acl in found.acls:
        resources.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(
            m.DescribeAclsResponse.AclDescription(
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission,
            )
        )
    return m.DescribeAclsResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        resources=[
            Resource(resource_type=rtype, resource_name=name, pattern_type=ptype, acls=acls)
            for (rtype, name, ptype), acls in resources.items()
        ],
    )


def _failed(code: ErrorCode, message: str | None) -> m.DescribeAclsResponse:
    return m.DescribeAclsResponse(error_code=code, error_message=message, resources=[])


def error_response(
    request: m.DescribeAclsRequest | None, version: int, code: ErrorCode
) -> m.DescribeAclsResponse:
    return _failed(code, code.message)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="authorizer",
)
