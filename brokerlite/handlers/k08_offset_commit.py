"""OffsetCommit (key 8), versions 2-9: store a group's consumed positions.

Handed to the group coordinator, which writes the offsets durably before the
response goes out; partitions of unknown topics get
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k08_offset_commit as m

from ._base import HandlerSpec, RequestContext

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9


def handle(ctx: RequestContext, request: m.OffsetCommitRequest) -> m.OffsetCommitResponse:
    return ctx.broker.groups.offset_commit(request, ctx.version, ctx.now_ms)


def error_response(
    request: m.OffsetCommitRequest | None, version: int, code: ErrorCode
) -> m.OffsetCommitResponse:
    if request is None:
        return m.OffsetCommitResponse()
    return m.OffsetCommitResponse(
        topics=[
            m.OffsetCommitResponse.OffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    m.OffsetCommitResponse.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
