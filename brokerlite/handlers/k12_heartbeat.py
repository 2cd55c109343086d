"""Heartbeat (key 12), versions 0-4: keep a member alive, learn about rebalances.

Handed to the group coordinator; never parked. Authorization: READ on the group,
else GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k12_heartbeat as m

from ._authz import AclOperation, group_allowed
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.HEARTBEAT
MIN_VERSION = 0
MAX_VERSION = 4


def handle(ctx: RequestContext, request: m.HeartbeatRequest) -> m.HeartbeatResponse:
    if not group_allowed(ctx, AclOperation.READ, request.group_id):
        return error_response(request, ctx.version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return ctx.groups.heartbeat(request, ctx.version, ctx.now_ms)


def error_response(
    request: m.HeartbeatRequest | None, version: int, code: ErrorCode
) -> m.HeartbeatResponse:
    return m.HeartbeatResponse(error_code=code)


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="groups authorizer"
)
