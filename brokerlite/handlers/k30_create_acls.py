"""CreateAcls (key 30), versions 0-3 (1-3 with ``protocol_version`` 4.0).

Without an authorizer every creation is answered SECURITY_DISABLED and nothing
is stored (see ``k29_describe_acls``). With one, it needs ALTER on the cluster
(every creation gets CLUSTER_AUTHORIZATION_FAILED otherwise); each creation is
then checked on its own (INVALID_REQUEST, with the reason, for an ANY or
unknown value, an empty name, a cluster not named ``kafka-cluster`` or a
principal not of the form ``Type:Name``) and the valid ones are stored durably
before the answer. A binding that exists already succeeds without a duplicate.
In cluster mode "stored durably" means written to ZooKeeper, in Kafka's layout
(:mod:`trafka.brokerlite.security.zk_acls`), whence every broker applies it;
a resource name that cannot be one znode (``a/b``) is INVALID_REQUEST there.
"""

from __future__ import annotations

from trafka.brokerlite.cluster.view import ZkTask
from trafka.brokerlite.security.authorizer import CLUSTER_NAME, AclBinding, AclStoreError
from trafka.brokerlite.security.zk_acls import name_problem
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k30_create_acls as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import park_on_tasks, task_outcome
from .k29_describe_acls import NO_AUTHORIZER

API_KEY = ApiKey.CREATE_ACLS
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 3


def handle(ctx: RequestContext, request: m.CreateAclsRequest) -> m.CreateAclsResponse | Parked:
    authorizer = ctx.authorizer
    if authorizer is None:
        return _every(request, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not ctx.allowed(AclOperation.ALTER, AclResourceType.CLUSTER, CLUSTER_NAME):
        return _every(
            request,
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"{ctx.principal} may not create ACLs (ALTER on the cluster)",
        )
    bindings = [
        AclBinding(
            c.resource_type,
            c.resource_name,
            c.resource_pattern_type,
            c.principal,
            c.host,
            c.operation,
            c.permission_type,
        )
        for c in request.creations
    ]
    if ctx.cluster is not None:
        # Cluster mode: ZooKeeper holds the ACLs; answered once written there.
        results, new = authorizer.check_create(bindings)
        # A name ZooKeeper cannot hold as one znode is refused before anything is written.
        results = [
            (ErrorCode.INVALID_REQUEST, problem)
            if code == ErrorCode.NONE and (problem := name_problem(b.name)) is not None
            else (code, message)
            for b, (code, message) in zip(bindings, results, strict=True)
        ]
        new = [a for a in new if name_problem(a.name) is None]
        if new:
            task = ZkTask("acls", {"add": new, "remove": []})
            return park_on_tasks(ctx, [task], 30_000, lambda: _answer(results, task))
        return _answer(results, None)
    try:
        results = authorizer.create(bindings)
    except AclStoreError as exc:
        return _every(request, ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot store the ACLs: {exc}")
    return _answer(results, None)


def _answer(
    results: list[tuple[ErrorCode, str | None]], task: ZkTask | None
) -> m.CreateAclsResponse:
    """The response; a valid binding gets the ZooKeeper write's failure, if any."""
    failure = task_outcome(task) if task is not None else (ErrorCode.NONE, None)
    Result = m.CreateAclsResponse.AclCreationResult
    return m.CreateAclsResponse(
        results=[
            Result(error_code=code, error_message=message)
            if code or not failure[0]
            else Result(error_code=failure[0], error_message=failure[1])
            for code, message in results
        ]
    )


def _every(
    request: m.CreateAclsRequest | None, code: ErrorCode, message: str | None
) -> m.CreateAclsResponse:
    count = 0 if request is None else len(request.creations)
    result = m.CreateAclsResponse.AclCreationResult(error_code=code, error_message=message)
    return m.CreateAclsResponse(results=[result] * count)


def error_response(
    request: m.CreateAclsRequest | None, version: int, code: ErrorCode
) -> m.CreateAclsResponse:
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
