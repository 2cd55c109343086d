"""ConsumerGroupDescribe (key 69), versions 0-1: members, epochs, current and target
assignments of consumer groups (KIP-848). A group id that is not a consumer group
gets GROUP_ID_NOT_FOUND. v1 (KIP-1099) tells each member's type: always 1, a
consumer-protocol member, since a classic member cannot join a consumer group here.

Authorization: DESCRIBE per group, else GROUP_AUTHORIZATION_FAILED. A described
group whose members' assignments (current or target) hold a topic the principal
may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED without members.
``include_authorized_operations`` reports what the principal may do on each group
(without an authorizer: everything a group allows, as Kafka).

While ``group.version`` is finalized at 0 (UpdateFeatures, :mod:`trafka.brokerlite.features`)
the consumer group protocol is off: every request is answered UNSUPPORTED_VERSION (the broker's
gate, before authorization), as Kafka 4.x answers it.
"""

from __future__ import annotations

import dataclasses

from trafka.brokerlite.features import GROUP_VERSION
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k69_consumer_group_describe as m

from ._authz import describe_groups_authorized
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.CONSUMER_GROUP_DESCRIBE
MIN_VERSION = 0
MAX_VERSION = 1


def handle(
    ctx: RequestContext, request: m.ConsumerGroupDescribeRequest
) -> m.ConsumerGroupDescribeResponse:
    def describe(group_ids: list[str]) -> list[m.ConsumerGroupDescribeResponse.DescribedGroup]:
        asked = dataclasses.replace(request, group_ids=group_ids)
        return ctx.groups.consumer_group_describe(asked, ctx.topic_name).groups

    groups = describe_groups_authorized(
        ctx,
        request.group_ids,
        describe,
        lambda g: [
            tp.topic_name
            for member in g.members
            for assignment in (member.assignment, member.target_assignment)
            for tp in assignment.topic_partitions
        ],
        lambda group_id, code, message: m.ConsumerGroupDescribeResponse.DescribedGroup(
            group_id=group_id, error_code=code, error_message=message
        ),
        request.include_authorized_operations,
    )
    return m.ConsumerGroupDescribeResponse(groups=groups)


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


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    feature=GROUP_VERSION,
    uses="logs groups authorizer",
)
