"""ListGroups (key 16), versions 0-5: every group, filtered by state (v4+) and type (v5+).

Handed to the group coordinator; all of brokerlite's groups are ``classic``.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k16_list_groups as m

from ._base import HandlerSpec, RequestContext

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: RequestContext, request: m.ListGroupsRequest) -> m.ListGroupsResponse:
    return ctx.broker.groups.list_groups(request, ctx.version)


def error_response(
    request: m.ListGroupsRequest | None, version: int, code: ErrorCode
) -> m.ListGroupsResponse:
    return m.ListGroupsResponse(error_code=code)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
