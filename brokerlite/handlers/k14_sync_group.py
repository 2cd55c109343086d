"""SyncGroup (key 14), versions 0-5: the leader hands out assignments.

Handed to the group coordinator. A follower's request is parked until the
leader's SyncGroup sets the assignment (or the rebalance fails); the
leader's request releases every parked follower. Authorization: READ on the
group, else GROUP_AUTHORIZATION_FAILED (never parked).
"""

from __future__ import annotations

from typing import Any

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k14_sync_group as m

from ._authz import AclOperation, group_allowed
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.SYNC_GROUP
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: RequestContext, request: m.SyncGroupRequest) -> Any:
    if not group_allowed(ctx, AclOperation.READ, request.group_id):
        return error_response(request, ctx.version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    token = ctx.group_token()
    released = ctx.groups.sync_group(token, request, ctx.version, ctx.now_ms)
    return ctx.group_outcome(token, released)


def error_response(
    request: m.SyncGroupRequest | None, version: int, code: ErrorCode
) -> m.SyncGroupResponse:
    return m.SyncGroupResponse(error_code=code)


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="groups authorizer purgatory"
)
