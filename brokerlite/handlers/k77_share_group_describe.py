"""ShareGroupDescribe (key 77), version 1: state, epochs, assignor (``simple``)
and members of share groups (KIP-932), each member's assignment with topic names.

Version 1 only, as Kafka 4.1 serves it. An empty group id is INVALID_GROUP_ID; an
id that names no group, or a group of another type, is GROUP_ID_NOT_FOUND.
``include_authorized_operations`` gets what an unsecured Kafka broker allows on
a group, as DescribeGroups reports it.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k77_share_group_describe as m

from ._base import HandlerSpec, RequestContext
from ._util import GROUP_AUTHORIZED_OPERATIONS, NO_AUTHORIZED_OPERATIONS

API_KEY = 77
MIN_VERSION = 1
MAX_VERSION = 1


def handle(
    ctx: RequestContext, request: m.ShareGroupDescribeRequest
) -> m.ShareGroupDescribeResponse:
    ops = (
        GROUP_AUTHORIZED_OPERATIONS
        if request.include_authorized_operations
        else NO_AUTHORIZED_OPERATIONS
    )
    share = ctx.broker.share_groups
    return m.ShareGroupDescribeResponse(
        groups=[
            share.describe(g, ctx.broker.topic_name, authorized_operations=ops)
            for g in request.group_ids
        ]
    )


def error_response(
    request: m.ShareGroupDescribeRequest | None, version: int, code: ErrorCode
) -> m.ShareGroupDescribeResponse:
    groups = request.group_ids if request is not None else []
    return m.ShareGroupDescribeResponse(
        groups=[
            m.ShareGroupDescribeResponse.DescribedGroup(error_code=code, group_id=g) for g in groups
        ]
    )


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
