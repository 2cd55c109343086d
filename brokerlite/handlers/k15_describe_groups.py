"""DescribeGroups (key 15), versions 0-6: state, protocol and members of groups.

Handed to the group coordinator; unknown groups, and consumer or share groups,
are reported as ``Dead``: with no error up to v5, with GROUP_ID_NOT_FOUND and a
message from v6 (KIP-1043).

Authorization: DESCRIBE per group; a group the principal may not describe gets
GROUP_AUTHORIZATION_FAILED and nothing else. ``include_authorized_operations``
(v3+) reports what the principal may do on each described group.
"""

from __future__ import annotations

import dataclasses

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k15_describe_groups as m

from ._authz import AclOperation, AclResourceType, enabled, group_allowed
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.DESCRIBE_GROUPS
MIN_VERSION = 0
MAX_VERSION = 6


def handle(ctx: RequestContext, request: m.DescribeGroupsRequest) -> m.DescribeGroupsResponse:
    if not enabled(ctx):
        return ctx.groups.describe_groups(request, ctx.version)
    allowed = [group_allowed(ctx, AclOperation.DESCRIBE, g) for g in request.groups]
    permitted = [g for g, ok in zip(request.groups, allowed, strict=True) if ok]
    described = iter(
        ctx.groups.describe_groups(
            dataclasses.replace(request, groups=permitted), ctx.version
        ).groups
    )
    with_ops = ctx.version >= 3 and request.include_authorized_operations
    groups = []
    for group_id, ok in zip(request.groups, allowed, strict=True):
        if not ok:
            groups.append(
                m.DescribeGroupsResponse.DescribedGroup(
                    error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=group_id
                )
            )
            continue
        group = next(described)
        if with_ops and group.error_code == ErrorCode.NONE:
            group = dataclasses.replace(
                group,
                authorized_operations=ctx.authorized_operations(AclResourceType.GROUP, group_id),
            )
        groups.append(group)
    return m.DescribeGroupsResponse(groups=groups)


def error_response(
    request: m.DescribeGroupsRequest | None, version: int, code: ErrorCode
) -> m.DescribeGroupsResponse:
    groups = request.groups if request is not None else []
    return m.DescribeGroupsResponse(
        groups=[
            m.DescribeGroupsResponse.DescribedGroup(error_code=code, group_id=g) for g in groups
        ]
    )


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="groups authorizer"
)
