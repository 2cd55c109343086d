"""ListGroups (key 16), versions 0-5: every group, filtered by state (v4+) and type (v5+).

Handed to the group coordinator, which lists classic, consumer and share groups.

Authorization: with DESCRIBE on the cluster every group is listed; otherwise only
the groups the principal may DESCRIBE (never an error).
"""

from __future__ import annotations

import dataclasses

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k16_list_groups as m

from ._authz import CLUSTER_NAME, AclOperation, AclResourceType, enabled, group_allowed
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.LIST_GROUPS
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: RequestContext, request: m.ListGroupsRequest) -> m.ListGroupsResponse:
    response = ctx.groups.list_groups(request, ctx.version)
    if not enabled(ctx) or ctx.allowed(
        AclOperation.DESCRIBE, AclResourceType.CLUSTER, CLUSTER_NAME
    ):
        return response
    return dataclasses.replace(
        response,
        groups=[
            g for g in response.groups if group_allowed(ctx, AclOperation.DESCRIBE, g.group_id)
        ],
    )


def error_response(
    request: m.ListGroupsRequest | None, version: int, code: ErrorCode
) -> m.ListGroupsResponse:
    return m.ListGroupsResponse(error_code=code)


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="groups authorizer"
)
