"""DescribeGroups (key 15), versions 0-5: state, protocol and members of groups.

Handed to the group coordinator; unknown groups are reported as ``Dead``.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k15_describe_groups as m

from ._base import HandlerSpec, RequestContext

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: RequestContext, request: m.DescribeGroupsRequest) -> m.DescribeGroupsResponse:
    return ctx.broker.groups.describe_groups(request, ctx.version)


def error_response(
    request: m.DescribeGroupsRequest | None, version: int, code: ErrorCode
) -> m.DescribeGroupsResponse:
    groups = request.groups if request is not None else []
    return m.DescribeGroupsResponse(
        groups=[
            m.DescribeGroupsResponse.DescribedGroup(error_code=code, group_id=g) for g in groups
        ]
    )


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
