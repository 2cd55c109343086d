"""DeleteAcls (key 31), versions 1-3, as Kafka answers without an authorizer.

Every filter is answered SECURITY_DISABLED with no matching ACLs, in request
order: brokerlite has no authorizer (see ``k29_describe_acls``).
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k31_delete_acls as m

from ._base import HandlerSpec, RequestContext
from .k29_describe_acls import NO_AUTHORIZER

API_KEY = 31
MIN_VERSION = 1
MAX_VERSION = 3


def handle(ctx: RequestContext, request: m.DeleteAclsRequest) -> m.DeleteAclsResponse:
    return _every(request, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)


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


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
