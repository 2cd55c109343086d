"""DeleteGroups (key 42), versions 0-2: delete empty groups and their offsets.

Handed to the group coordinator: NON_EMPTY_GROUP while a group has members,
GROUP_ID_NOT_FOUND for unknown groups.

Authorization: DELETE per group; a group the principal may not delete gets
GROUP_AUTHORIZATION_FAILED and is left alone.
"""

from __future__ import annotations

import dataclasses

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k42_delete_groups as m

from ._authz import AclOperation, enabled, group_allowed
from ._base import HandlerSpec, RequestContext

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx: RequestContext, request: m.DeleteGroupsRequest) -> m.DeleteGroupsResponse:
    if not enabled(ctx):
        return ctx.groups.delete_groups(request, ctx.version)
    names = request.groups_names
    allowed = [group_allowed(ctx, AclOperation.DELETE, g) for g in names]
    permitted = [g for g, ok in zip(names, allowed, strict=True) if ok]
    deleted = iter(
        ctx.groups.delete_groups(
            dataclasses.replace(request, groups_names=permitted), ctx.version
        ).results
    )
    return m.DeleteGroupsResponse(
        results=[
            next(deleted)
            if ok
            else m.DeleteGroupsResponse.DeletableGroupResult(
                group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED
            )
            for g, ok in zip(names, allowed, strict=True)
        ]
    )


def error_response(
    request: m.DeleteGroupsRequest | None, version: int, code: ErrorCode
) -> m.DeleteGroupsResponse:
    names = request.groups_names if request is not None else []
    return m.DeleteGroupsResponse(
        results=[
            m.DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=code) for g in names
        ]
    )


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="groups authorizer"
)
