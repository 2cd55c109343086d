"""DeleteAcls (key 31), versions 0-3 (1-3 with ``protocol_version`` 4.0).

Without an authorizer every filter is answered SECURITY_DISABLED with no
matching ACLs (see ``k29_describe_acls``). With one, it needs ALTER on the
cluster (CLUSTER_AUTHORIZATION_FAILED for every filter otherwise); each filter
then removes the ACLs it matches (an ACL two filters match is reported under the
first), or gets INVALID_REQUEST for an unknown enumeration value. The removal
is stored durably before the answer.
"""

from __future__ import annotations

from trafka.brokerlite.security.authorizer import CLUSTER_NAME, AclFilter, AclStoreError
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k31_delete_acls as m

from ._base import HandlerSpec, RequestContext
from .k29_describe_acls import NO_AUTHORIZER

API_KEY = 31
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 3


def handle(ctx: RequestContext, request: m.DeleteAclsRequest) -> m.DeleteAclsResponse:
    authorizer = ctx.authorizer
    if authorizer is None:
        return _every(request, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not ctx.allowed(AclOperation.ALTER, AclResourceType.CLUSTER, CLUSTER_NAME):
        return _every(
            request,
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"{ctx.principal} may not delete ACLs (ALTER on the cluster)",
        )
    filters = [
        AclFilter(
            f.resource_type_filter,
            f.resource_name_filter,
            f.pattern_type_filter,
            f.principal_filter,
            f.host_filter,
            f.operation,
            f.permission_type,
        )
        for f in request.filters
    ]
    try:
        results = authorizer.delete(filters)
    except AclStoreError as exc:
        return _every(request, ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot store the removal: {exc}")
    Result = m.DeleteAclsResponse.DeleteAclsFilterResult
    Matching = m.DeleteAclsResponse.DeleteAclsMatchingAcl
    return m.DeleteAclsResponse(
        filter_results=[
            Result(
                error_code=code,
                error_message=message,
                matching_acls=[
                    Matching(
                        error_code=ErrorCode.NONE,
                        error_message=None,
                        resource_type=a.resource_type,
                        resource_name=a.name,
                        pattern_type=a.pattern_type,
                        principal=a.principal,
                        host=a.host,
                        operation=a.operation,
                        permission_type=a.permission,
                    )
                    for a in removed
                ],
            )
            for code, message, removed in results
        ]
    )


def _every(
    request: m.DeleteAclsRequest | None, code: ErrorCode, message: str | None
) -> m.DeleteAclsResponse:
    count = 0 if request is None else len(request.filters)
    result = m.DeleteAclsResponse.DeleteAclsFilterResult(
        error_code=code, error_message=message, matching_acls=[]
    )
    return m.DeleteAclsResponse(filter_results=[result] * count)


def error_response(
    request: m.DeleteAclsRequest | None, version: int, code: ErrorCode
) -> m.DeleteAclsResponse:
    return _every(request, code, code.message)


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, old_min=OLD_MIN_VERSION
)
