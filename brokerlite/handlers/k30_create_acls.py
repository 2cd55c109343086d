"""CreateAcls (key 30), versions 1-3, as Kafka answers without an authorizer.

Every creation is answered SECURITY_DISABLED, in request order, and nothing is
stored: brokerlite has no authorizer (see ``k29_describe_acls``).
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k30_create_acls as m

from ._base import HandlerSpec, RequestContext
from .k29_describe_acls import NO_AUTHORIZER

API_KEY = 30
MIN_VERSION = 1
MAX_VERSION = 3


def handle(ctx: RequestContext, request: m.CreateAclsRequest) -> m.CreateAclsResponse:
    return _every(request, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)


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


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
