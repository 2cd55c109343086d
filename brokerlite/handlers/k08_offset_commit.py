"""OffsetCommit (key 8), versions 0-10 (2-10 with ``protocol_version`` 4.0): store a group's consumed positions.

Handed to the group coordinator, which writes the offsets durably before the
response goes out; partitions of unknown topics get
UNKNOWN_TOPIC_OR_PARTITION. v10 (KIP-848, stable in Kafka 4.2) names topics
by id: an id no topic has is UNKNOWN_TOPIC_ID (:mod:`._topic_ids`).

Authorization: READ on the group, else every partition gets
GROUP_AUTHORIZATION_FAILED; then READ per topic, else that topic's partitions get
TOPIC_AUTHORIZATION_FAILED and only the others are committed.
"""

from __future__ import annotations

import dataclasses

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k08_offset_commit as m

from ._authz import AclOperation, commit_readable_topics, enabled, group_allowed
from ._base import HandlerSpec, RequestContext
from ._topic_ids import by_name

API_KEY = ApiKey.OFFSET_COMMIT
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 2
MAX_VERSION = 10
TOPIC_IDS_VERSION = 10

Topic = m.OffsetCommitResponse.OffsetCommitResponseTopic
Partition = m.OffsetCommitResponse.OffsetCommitResponsePartition


def handle(ctx: RequestContext, request: m.OffsetCommitRequest) -> m.OffsetCommitResponse:
    if ctx.version < TOPIC_IDS_VERSION:
        return _by_name(ctx, request)
    named = by_name(ctx, request.topics)
    answer = _by_name(ctx, dataclasses.replace(request, topics=named.known))
    unknown = [
        Topic(
            topic_id=t.topic_id,
            partitions=[
                Partition(partition_index=p.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_ID)
                for p in t.partitions
            ],
        )
        for t in named.unknown
    ]
    return dataclasses.replace(answer, topics=[*unknown, *named.answer_ids(answer.topics)])


def _by_name(ctx: RequestContext, request: m.OffsetCommitRequest) -> m.OffsetCommitResponse:
    commit = ctx.groups.offset_commit
    if not enabled(ctx):
        return commit(request, ctx.version, ctx.now_ms)
    if not group_allowed(ctx, AclOperation.READ, request.group_id):
        return error_response(request, ctx.version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return commit_readable_topics(ctx, request, commit, error_response, m.OffsetCommitResponse)


def error_response(
    request: m.OffsetCommitRequest | None, version: int, code: ErrorCode
) -> m.OffsetCommitResponse:
    if request is None:
        return m.OffsetCommitResponse()
    return m.OffsetCommitResponse(
        topics=[
            Topic(
                name=t.name,
                topic_id=t.topic_id,
                partitions=[
                    Partition(partition_index=p.partition_index, error_code=code)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="groups authorizer logs",
)
