"""DescribeShareGroupOffsets (key 90), versions 0-1: share groups' start offsets
(Kafka 4.1; v1 adds each partition's lag, KIP-1226, Kafka 4.2).

Per group and per partition asked for (Topics null: every partition the group
has share state for, by topic name and partition), the share-partition start
offset (SPSO), leader epoch 0 (one node, no elections) and from v1 the lag: the
records from the start offset up to the high watermark that are not yet
acknowledged or archived, as Kafka's coordinator computes it. A partition
without share state (never assigned or fetched, its state deleted, a topic or
partition that does not exist, a group that does not exist or is not a share
group) has start offset -1 and lag -1, without an error: Kafka treats it as
absence of data, as OffsetFetch does, and likewise answers an unknown group
without GROUP_ID_NOT_FOUND (no topics for Topics null). An unknown topic carries
the null topic id. An empty group id is INVALID_GROUP_ID.

Unlike Kafka, whose share coordinator reports -1 until a share-partition's
leader first writes its state (its first acknowledgement), brokerlite reports
the start offset from the moment the share-partition starts: it writes the
state then.

Authorization: DESCRIBE per group, else GROUP_AUTHORIZATION_FAILED for that group.
Named topics the principal may not DESCRIBE are answered per partition
TOPIC_AUTHORIZATION_FAILED (start offset -1, null topic id); with Topics null they
are left out.

While ``share.version`` is finalized at 0 (UpdateFeatures, :mod:`trafka.brokerlite.features`)
share groups are off: every request is answered UNSUPPORTED_VERSION (the broker's
gate, before authorization), as Kafka 4.x answers it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from trafka.brokerlite.features import SHARE_VERSION
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k90_describe_share_group_offsets as m

from ..outcomes import Parked
from ..shares.offsets_port import Job
from ._authz import AclOperation, allowed_topics, enabled, group_allowed
from ._base import HandlerSpec, RequestContext
from ._share_admin import Later, answer
from ._util import LEADER_EPOCH, NULL_UUID

if TYPE_CHECKING:
    from trafka.brokerlite.shares.offsets_admin import ShareOffsetInfo

API_KEY = ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS
MIN_VERSION = 0
MAX_VERSION = 1

R = m.DescribeShareGroupOffsetsResponse
NO_OFFSET = -1  # Kafka's uninitialized start offset, and unknown lag
LAG_VERSION = 1
DENIED = "Topic authorization failed."


def _partition(
    index: int, found: ShareOffsetInfo | None, version: int
) -> R.DescribeShareGroupOffsetsResponsePartition:
    start, lag = (NO_OFFSET, NO_OFFSET) if found is None else (found.start_offset, found.lag)
    return R.DescribeShareGroupOffsetsResponsePartition(
        partition_index=index,
        start_offset=start,
        leader_epoch=LEADER_EPOCH,
        lag=lag if version >= LAG_VERSION else 0,  # (v0 has no Lag: its default)
    )


def _topic(
    ctx: RequestContext, name: str, found: list[tuple[int, ShareOffsetInfo | None]]
) -> R.DescribeShareGroupOffsetsResponseTopic:
    known = ctx.share_offsets.topic_id(name)
    return R.DescribeShareGroupOffsetsResponseTopic(
        topic_name=name,
        topic_id=known if known is not None else NULL_UUID,
        partitions=[_partition(p, info, ctx.version) for p, info in found],
    )


def _group(
    ctx: RequestContext,
    request: m.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup,
) -> Later:
    group_id = request.group_id
    if not group_id:
        return Later.now(
            R.DescribeShareGroupOffsetsResponseGroup(
                group_id=group_id,
                error_code=ErrorCode.INVALID_GROUP_ID,
                error_message="the group id is empty",
            )
        )
    # (Share state belongs to share groups only; other ids have none.)
    is_share = ctx.share_groups.is_share_group(group_id)
    port = ctx.share_offsets
    if request.topics is None:
        job = port.describe(group_id, None) if is_share else Job({})

        def every() -> R.DescribeShareGroupOffsetsResponseGroup:
            by_topic: dict[str, list[tuple[int, ShareOffsetInfo | None]]] = {}
            for (topic, partition), info in job.value.items():
                by_topic.setdefault(topic, []).append((partition, info))
            topics = [_topic(ctx, name, found) for name, found in by_topic.items()]
            return R.DescribeShareGroupOffsetsResponseGroup(group_id=group_id, topics=topics)

        return Later([job], every)
    wanted = [(t.topic_name, p) for t in request.topics for p in t.partitions]
    job = port.describe(group_id, wanted) if is_share else Job(dict.fromkeys(wanted))

    def named() -> R.DescribeShareGroupOffsetsResponseGroup:
        assert request.topics is not None
        topics = [
            _topic(ctx, t.topic_name, [(p, job.value[(t.topic_name, p)]) for p in t.partitions])
            for t in request.topics
        ]
        return R.DescribeShareGroupOffsetsResponseGroup(group_id=group_id, topics=topics)

    return Later([job], named)


def handle(
    ctx: RequestContext, request: m.DescribeShareGroupOffsetsRequest
) -> m.DescribeShareGroupOffsetsResponse | Parked:
    if enabled(ctx):
        groups = [_authorized_group(ctx, g) for g in request.groups]
    else:
        groups = [_group(ctx, g) for g in request.groups]
    later = Later.all(groups, lambda answers: R(groups=answers))
    result: m.DescribeShareGroupOffsetsResponse | Parked = answer(
        ctx, later, lambda code: error_response(request, ctx.version, code)
    )
    return result


def _authorized_group(
    ctx: RequestContext,
    request: m.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup,
) -> Later:
    if not group_allowed(ctx, AclOperation.DESCRIBE, request.group_id):
        return Later.now(
            R.DescribeShareGroupOffsetsResponseGroup(
                group_id=request.group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED
            )
        )
    if request.topics is None:

        def visible(
            answer: R.DescribeShareGroupOffsetsResponseGroup,
        ) -> R.DescribeShareGroupOffsetsResponseGroup:
            names = (t.topic_name for t in answer.topics)
            seen = allowed_topics(ctx, AclOperation.DESCRIBE, names)
            return dataclasses.replace(
                answer, topics=[t for t in answer.topics if t.topic_name in seen]
            )

        return _group(ctx, request).then(visible)
    seen = allowed_topics(ctx, AclOperation.DESCRIBE, (t.topic_name for t in request.topics))
    denied = [t for t in request.topics if t.topic_name not in seen]
    if not denied:
        return _group(ctx, request)
    extra = [
        R.DescribeShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name,
            topic_id=NULL_UUID,
            partitions=[
                R.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=index,
                    start_offset=NO_OFFSET,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    error_message=DENIED,
                )
                for index in t.partitions
            ],
        )
        for t in denied
    ]

    def with_denied(
        answer: R.DescribeShareGroupOffsetsResponseGroup,
    ) -> R.DescribeShareGroupOffsetsResponseGroup:
        if answer.error_code != ErrorCode.NONE:
            return answer
        return dataclasses.replace(answer, topics=[*answer.topics, *extra])

    kept = dataclasses.replace(request, topics=[t for t in request.topics if t.topic_name in seen])
    return _group(ctx, kept).then(with_denied)


def error_response(
    request: m.DescribeShareGroupOffsetsRequest | None, version: int, code: ErrorCode
) -> m.DescribeShareGroupOffsetsResponse:
    groups = request.groups if request is not None else []
    return R(
        groups=[
            R.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, error_code=code)
            for g in groups
        ]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    feature=SHARE_VERSION,
    uses="share_groups share_offsets authorizer purgatory",
)
