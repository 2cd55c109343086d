"""AlterShareGroupOffsets (key 91), version 0: set a share group's start offsets
(Kafka 4.1, KIP-932).

The group as a whole, as Kafka's coordinator decides
(:meth:`~trafka.brokerlite.groups.share_groups.ShareGroups.offsets_change_refusal`):
an empty group id is INVALID_GROUP_ID, a classic or consumer group
GROUP_ID_NOT_FOUND, a group with members NON_EMPTY_GROUP, each in the top-level
error with no topics; a group id nobody has is created as an empty share group
first. Then per partition (:meth:`~trafka.brokerlite.shares.fetcher.ShareFetcher.alter_start_offsets`):
the share-partition starts afresh at the new offset, its in-flight records and
delivery counts forgotten, and a partition without share state gets it; durable
(one fsynced journal write) before the answer. Per-partition errors: a topic or
partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION (null topic id for
an unknown topic), as in Kafka; a negative offset INVALID_REQUEST; an offset
past the log end offset OFFSET_OUT_OF_RANGE (Kafka takes it, then resets the
share-partition to the log start at its next fetch; brokerlite refuses it
instead of redelivering the whole log); an offset below the log start offset
starts at the log start (where Kafka's next fetch moves it); a failed journal
write KAFKA_STORAGE_ERROR (nothing changed). A partition named twice takes its
last offset and is answered each time.

Authorization: READ on the group, else GROUP_AUTHORIZATION_FAILED (nothing
created); then READ per topic, else that topic's partitions are answered
TOPIC_AUTHORIZATION_FAILED and keep their state.

While ``share.version`` is finalized at 0 (UpdateFeatures, :mod:`trafka.brokerlite.features`)
share groups are off: every request is answered UNSUPPORTED_VERSION (the broker's
gate, before authorization), as Kafka 4.x answers it.
"""

from __future__ import annotations

import dataclasses

from trafka.brokerlite.features import SHARE_VERSION
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k91_alter_share_group_offsets as m

from ..outcomes import Parked
from ._authz import AclOperation, enabled, group_allowed, split_topics
from ._base import HandlerSpec, RequestContext
from ._share_admin import Later, answer
from ._util import NULL_UUID

API_KEY = ApiKey.ALTER_SHARE_GROUP_OFFSETS
MIN_VERSION = 0
MAX_VERSION = 0

R = m.AlterShareGroupOffsetsResponse
DENIED = "Topic authorization failed."


def handle(
    ctx: RequestContext, request: m.AlterShareGroupOffsetsRequest
) -> m.AlterShareGroupOffsetsResponse | Parked:
    result: m.AlterShareGroupOffsetsResponse | Parked = answer(
        ctx, _authorized(ctx, request), lambda code: error_response(request, ctx.version, code)
    )
    return result


def _authorized(ctx: RequestContext, request: m.AlterShareGroupOffsetsRequest) -> Later:
    if not enabled(ctx):
        return _alter(ctx, request)
    if not group_allowed(ctx, AclOperation.READ, request.group_id):
        return Later.now(error_response(request, ctx.version, ErrorCode.GROUP_AUTHORIZATION_FAILED))
    kept, denied = split_topics(ctx, AclOperation.READ, request.topics, lambda t: t.topic_name)
    if not denied:
        return _alter(ctx, request)
    extra = []
    for t in denied:
        known = ctx.share_offsets.topic_id(t.topic_name)
        extra.append(
            R.AlterShareGroupOffsetsResponseTopic(
                topic_name=t.topic_name,
                topic_id=known if known is not None else NULL_UUID,
                partitions=[
                    R.AlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        error_message=DENIED,
                    )
                    for p in t.partitions
                ],
            )
        )

    def with_denied(answer: m.AlterShareGroupOffsetsResponse) -> m.AlterShareGroupOffsetsResponse:
        if answer.error_code != ErrorCode.NONE:
            return answer
        return dataclasses.replace(answer, responses=[*answer.responses, *extra])

    return _alter(ctx, dataclasses.replace(request, topics=kept)).then(with_denied)


def _alter(ctx: RequestContext, request: m.AlterShareGroupOffsetsRequest) -> Later:
    refusal = ctx.share_groups.offsets_change_refusal(request.group_id, create=True)
    if refusal is not None:
        code, message = refusal
        return Later.now(R(error_code=code, error_message=message))
    offsets = {
        (t.topic_name, p.partition_index): p.start_offset
        for t in request.topics
        for p in t.partitions
    }
    port = ctx.share_offsets
    job = port.alter(request.group_id, offsets)

    def build() -> m.AlterShareGroupOffsetsResponse:
        results = job.value
        ctx.share_groups.note_initialized(
            request.group_id, (tp for tp, (code, _) in results.items() if code == ErrorCode.NONE)
        )
        responses = []
        for t in request.topics:
            known = port.topic_id(t.topic_name)
            parts = []
            for p in t.partitions:
                error, why = results[(t.topic_name, p.partition_index)]
                parts.append(
                    R.AlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition_index, error_code=error, error_message=why
                    )
                )
            responses.append(
                R.AlterShareGroupOffsetsResponseTopic(
                    topic_name=t.topic_name,
                    topic_id=known if known is not None else NULL_UUID,
                    partitions=parts,
                )
            )
        return R(responses=responses)

    return Later([job], build)


def error_response(
    request: m.AlterShareGroupOffsetsRequest | None, version: int, code: ErrorCode
) -> m.AlterShareGroupOffsetsResponse:
    return R(error_code=code)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    feature=SHARE_VERSION,
    uses="share_groups share_offsets authorizer purgatory",
)
