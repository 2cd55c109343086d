"""LeaveGroup (key 13), versions 0-5: members leave (v3+: several at once).

Handed to the group coordinator. The departure may end a join phase: the
JoinGroups it releases are answered on their own connections. A consumer group
of the new protocol (KIP-848) takes it too, as Kafka's
``classicGroupLeaveToConsumerGroup``: the members named (a static one by its
instance id alone: an admin's removal) are fenced and the group epoch bumped.
An unknown group (or a share group) answers UNKNOWN_MEMBER_ID for every member.
Authorization: READ on the group, else GROUP_AUTHORIZATION_FAILED and nobody
leaves.
"""

from __future__ import annotations

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k13_leave_group as m

from ._authz import AclOperation, group_allowed
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.LEAVE_GROUP
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: RequestContext, request: m.LeaveGroupRequest) -> m.LeaveGroupResponse:
    if not group_allowed(ctx, AclOperation.READ, request.group_id):
        return error_response(request, ctx.version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    response, released = ctx.groups.leave_group(request, ctx.version, ctx.now_ms)
    ctx.purgatory.release(released)
    return response


def error_response(
    request: m.LeaveGroupRequest | None, version: int, code: ErrorCode
) -> m.LeaveGroupResponse:
    return m.LeaveGroupResponse(error_code=code)


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="groups authorizer purgatory"
)
