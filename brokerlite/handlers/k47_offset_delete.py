"""OffsetDelete (key 47), version 0: delete a group's committed offsets.

Handed to the group coordinator (:meth:`GroupCoordinator.delete_offsets`), which
follows Kafka: GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP for a
classic group with members that is not a consumer group, and per partition
GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to its topic (classic
members by their subscription metadata, KIP-848 members by names or regex);
other partitions' offsets are deleted (durably) and answered NONE.

Authorization: DELETE on the group, else GROUP_AUTHORIZATION_FAILED for the
request; then READ per topic, else that topic's partitions get
TOPIC_AUTHORIZATION_FAILED and keep their offsets.
"""

from __future__ import annotations

import dataclasses

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k47_offset_delete as m

from ._authz import AclOperation, enabled, group_allowed, split_topics
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.OFFSET_DELETE
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx: RequestContext, request: m.OffsetDeleteRequest) -> m.OffsetDeleteResponse:
    delete = ctx.groups.delete_offsets
    if not enabled(ctx):
        return delete(request)
    if not group_allowed(ctx, AclOperation.DELETE, request.group_id):
        return error_response(request, ctx.version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    kept, denied = split_topics(ctx, AclOperation.READ, request.topics, lambda t: t.name)
    if not denied:
        return delete(request)
    # (Kafka asks the coordinator even when no topic is left: the group's checks stand.)
    answer = delete(dataclasses.replace(request, topics=kept))
    if answer.error_code != ErrorCode.NONE:
        return answer  # (the group's refusal stands alone, as in Kafka)
    refused = [
        m.OffsetDeleteResponse.OffsetDeleteResponseTopic(
            name=t.name,
            partitions=[
                m.OffsetDeleteResponse.OffsetDeleteResponsePartition(
                    partition_index=p.partition_index,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                )
                for p in t.partitions
            ],
        )
        for t in denied
    ]
    return dataclasses.replace(answer, topics=[*answer.topics, *refused])


def error_response(
    request: m.OffsetDeleteRequest | None, version: int, code: ErrorCode
) -> m.OffsetDeleteResponse:
    return m.OffsetDeleteResponse(error_code=code, topics=[])


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="groups authorizer"
)
