"""ConsumerGroupDescribe (key 69), version 0: members, epochs, current and target
assignments of consumer groups (KIP-848). A group id that is not a consumer group
gets GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k69_consumer_group_describe as m

from ._base import HandlerSpec, RequestContext

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 0


def handle(
    ctx: RequestContext, request: m.ConsumerGroupDescribeRequest
) -> m.ConsumerGroupDescribeResponse:
    return ctx.broker.groups.consumer_group_describe(request, ctx.broker.topic_name)


def error_response(
    request: m.ConsumerGroupDescribeRequest | None, version: int, code: ErrorCode
) -> m.ConsumerGroupDescribeResponse:
    groups = request.group_ids if request is not None else []
    return m.ConsumerGroupDescribeResponse(
        groups=[
            m.ConsumerGroupDescribeResponse.DescribedGroup(error_code=code, group_id=g)
            for g in groups
        ]
    )


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
