"""DescribeAcls (key 29), versions 1-3, as Kafka answers without an authorizer.

brokerlite has no authorizer (every authenticated client may do everything; see
the security docs), so it answers the ACL APIs as a Kafka broker without
``authorizer.class.name`` does: DescribeAcls fails as a whole with
SECURITY_DISABLED and lists no resources. Version 0 is not served, as from Kafka
4.0 (KIP-896).
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k29_describe_acls as m

from ._base import HandlerSpec, RequestContext

API_KEY = 29
MIN_VERSION = 1
MAX_VERSION = 3

NO_AUTHORIZER = "no authorizer is configured on this broker (brokerlite keeps no ACLs)"


def handle(ctx: RequestContext, request: m.DescribeAclsRequest) -> m.DescribeAclsResponse:
    return m.DescribeAclsResponse(
        error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER, resources=[]
    )


def error_response(
    request: m.DescribeAclsRequest | None, version: int, code: ErrorCode
) -> m.DescribeAclsResponse:
    return m.DescribeAclsResponse(error_code=code, error_message=code.message, resources=[])


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
