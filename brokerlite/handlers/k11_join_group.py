"""JoinGroup (key 11), versions 0-9 (2-9 with ``protocol_version`` 4.0): the classic group protocol's join phase.

Handed to :class:`~trafka.brokerlite.groups.coordinator.GroupCoordinator`. The request is
parked while the group rebalances (the coordinator releases it when the join
phase ends); parking holds back later requests of the same connection only.
DescribeGroups reports the member's host as ``/<peer address>``, like Kafka.

Authorization: READ on the group, else GROUP_AUTHORIZATION_FAILED before the
coordinator sees the request.
"""

from __future__ import annotations

from typing import Any

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k11_join_group as m

from ._authz import AclOperation, group_allowed
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.JOIN_GROUP
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 2
MAX_VERSION = 9


def handle(ctx: RequestContext, request: m.JoinGroupRequest) -> Any:
    if not group_allowed(ctx, AclOperation.READ, request.group_id):
        return error_response(request, ctx.version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    token = ctx.group_token()
    host = ctx.session.peer.rsplit(":", 1)[0]
    released = ctx.groups.join_group(
        token,
        request,
        ctx.version,
        ctx.now_ms,
        client_id=ctx.client_id or "",
        client_host=f"/{host}",
    )
    return ctx.group_outcome(token, released)


def error_response(
    request: m.JoinGroupRequest | None, version: int, code: ErrorCode
) -> m.JoinGroupResponse:
    return m.JoinGroupResponse(
        error_code=code,
        generation_id=-1,
        protocol_name=None if version >= 7 else "",
        member_id=request.member_id if request is not None else "",
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="groups authorizer purgatory",
)
