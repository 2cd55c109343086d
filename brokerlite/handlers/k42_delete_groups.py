"""DeleteGroups (key 42), versions 0-2: delete empty groups and their offsets.

Handed to the group coordinator: NON_EMPTY_GROUP while a group has members,
GROUP_ID_NOT_FOUND for unknown groups.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k42_delete_groups as m

from ._base import HandlerSpec, RequestContext

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx: RequestContext, request: m.DeleteGroupsRequest) -> m.DeleteGroupsResponse:
    return ctx.broker.groups.delete_groups(request, ctx.version)


def error_response(
    request: m.DeleteGroupsRequest | None, version: int, code: ErrorCode
) -> m.DeleteGroupsResponse:
    names = request.groups_names if request is not None else []
    return m.DeleteGroupsResponse(
        results=[
            m.DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=code) for g in names
        ]
    )


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
