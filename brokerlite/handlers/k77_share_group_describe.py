"""ShareGroupDescribe (key 77), version 1: state, epochs, assignor (``simple``)
and members of share groups (KIP-932), each member's assignment with topic names.

Version 1 only, as Kafka 4.1 serves it. An empty group id is INVALID_GROUP_ID; an
id that names no group, or a group of another type, is GROUP_ID_NOT_FOUND.
``include_authorized_operations`` gets what the principal may do on the group
(everything a group allows, without an authorizer).

Authorization: DESCRIBE per group, else GROUP_AUTHORIZATION_FAILED. A described
group whose members' assignments hold a topic the principal may not DESCRIBE is
answered TOPIC_AUTHORIZATION_FAILED without members.

While ``share.version`` is finalized at 0 (UpdateFeatures, :mod:`trafka.brokerlite.features`)
share groups are off: every request is answered UNSUPPORTED_VERSION (the broker's
gate, before authorization), as Kafka 4.x answers it.
"""

from __future__ import annotations

from trafka.brokerlite.features import SHARE_VERSION
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k77_share_group_describe as m

from ._authz import describe_groups_authorized
from ._base import HandlerSpec, RequestContext
from ._util import NO_AUTHORIZED_OPERATIONS

API_KEY = ApiKey.SHARE_GROUP_DESCRIBE
MIN_VERSION = 1
MAX_VERSION = 1


def handle(
    ctx: RequestContext, request: m.ShareGroupDescribeRequest
) -> m.ShareGroupDescribeResponse:
    share = ctx.share_groups

    def describe(group_ids: list[str]) -> list[m.ShareGroupDescribeResponse.DescribedGroup]:
        return [
            share.describe(g, ctx.topic_name, authorized_operations=NO_AUTHORIZED_OPERATIONS)
            for g in group_ids
        ]

    groups = describe_groups_authorized(
        ctx,
        request.group_ids,
        describe,
        lambda g: [
            tp.topic_name for member in g.members for tp in member.assignment.topic_partitions
        ],
        lambda group_id, code, message: m.ShareGroupDescribeResponse.DescribedGroup(
            group_id=group_id, error_code=code, error_message=message
        ),
        request.include_authorized_operations,
    )
    return m.ShareGroupDescribeResponse(groups=groups)


def error_response(
    request: m.ShareGroupDescribeRequest | None, version: int, code: ErrorCode
) -> m.ShareGroupDescribeResponse:
    groups = request.group_ids if request is not None else []
    return m.ShareGroupDescribeResponse(
        groups=[
            m.ShareGroupDescribeResponse.DescribedGroup(error_code=code, group_id=g) for g in groups
        ]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    feature=SHARE_VERSION,
    uses="logs share_groups authorizer",
)
