"""DeleteAcls (key 31), versions 0-3 (1-3 with ``protocol_version`` 4.0).

Without an authorizer every filter is answered SECURITY_DISABLED with no
matching ACLs (see ``k29_describe_acls``). With one, it needs ALTER on the
cluster (CLUSTER_AUTHORIZATION_FAILED for every filter otherwise); each filter
then removes the ACLs it matches (an ACL two filters match is reported under the
first), or gets INVALID_REQUEST for an unknown enumeration value. The removal
is stored durably before the answer (cluster mode: removed from ZooKeeper,
whence every broker applies it).
"""

from __future__ import annotations

from trafka.brokerlite.cluster.view import ZkTask
from trafka.brokerlite.security.authorizer import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclStoreError,
)
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k31_delete_acls as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import park_on_tasks, task_outcome
from .k29_describe_acls import NO_AUTHORIZER

API_KEY = ApiKey.DELETE_ACLS
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 3


def handle(ctx: RequestContext, request: m.DeleteAclsRequest) -> m.DeleteAclsResponse | Parked:
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
    if ctx.cluster is not None:
        # Cluster mode: ZooKeeper holds the ACLs; answered once removed there.
        matched, gone = authorizer.match_delete(filters)
        if gone:
            task = ZkTask("acls", {"add": [], "remove": gone})
            return park_on_tasks(ctx, [task], 30_000, lambda: _answer(matched, task))
        return _answer(matched, None)
    try:
        results = authorizer.delete(filters)
    except AclStoreError as exc:
        return _every(request, ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot store the removal: {exc}")
    return _answer(results, None)


def _answer(
    results: list[tuple[ErrorCode, str | None, list[AclBinding]]], task: ZkTask | None
) -> m.DeleteAclsResponse:
    """The response; a filter that removed ACLs gets the ZooKeeper write's failure, if any."""
    failure = task_outcome(task) if task is not None else (ErrorCode.NONE, None)
    if failure[0]:
        results = [
            (failure[0], failure[1], []) if removed else (code, message, removed)
            for code, message, removed in results
        ]
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
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="cluster authorizer purgatory",
)
