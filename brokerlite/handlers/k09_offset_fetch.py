"""OffsetFetch (key 9), versions 0-10 (1-10 with ``protocol_version`` 4.0): read a group's committed positions.

Handed to the group coordinator. v8+ asks for several groups at once;
partitions without a commit report offset -1. v10 (KIP-848, stable in Kafka
4.2) names topics by id: an id no topic has is UNKNOWN_TOPIC_ID with offset
-1; every committed topic (topics null) is answered by its id
(:mod:`._topic_ids`).

``require_stable`` (v7+, sent by consumers, not by admin clients): a partition whose
offset is held by an unfinished transaction (TxnOffsetCommit not yet committed
or aborted) answers UNSTABLE_OFFSET_COMMIT with offset -1 instead of the
committed offset, as Kafka does; the client retries until the transaction
completes, so it never starts from an offset that is about to change.

Authorization: DESCRIBE per group, else that group gets GROUP_AUTHORIZATION_FAILED
(v1: on each partition asked for). Topics the principal may not DESCRIBE are
answered TOPIC_AUTHORIZATION_FAILED with offset -1 when named, and left out when
the request asks for every committed partition.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k09_offset_fetch as m

from ._authz import AclOperation, allowed_topics, enabled, group_allowed
from ._base import HandlerSpec, RequestContext
from ._topic_ids import Named, by_name, ids_of

API_KEY = ApiKey.OFFSET_FETCH
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 10
TOPIC_IDS_VERSION = 10

Response = m.OffsetFetchResponse


def handle(ctx: RequestContext, request: m.OffsetFetchRequest) -> Response:
    if ctx.version < TOPIC_IDS_VERSION:
        return _by_name(ctx, request)
    asked: list[Named | None] = []  # per group; None: every committed topic
    groups = []
    for group in request.groups:
        if group.topics is None:
            asked.append(None)
            groups.append(group)
            continue
        named = by_name(ctx, group.topics)
        asked.append(named)
        groups.append(dataclasses.replace(group, topics=named.known))
    answer = _by_name(ctx, dataclasses.replace(request, groups=groups))
    out: list[Response.OffsetFetchResponseGroup] = []
    for fetched, by_id in zip(answer.groups, asked, strict=True):
        if fetched.error_code != ErrorCode.NONE:
            out.append(fetched)
        elif by_id is None:
            out.append(dataclasses.replace(fetched, topics=ids_of(ctx, fetched.topics)))
        else:
            unknown = [
                Response.OffsetFetchResponseTopics(
                    topic_id=t.topic_id,
                    partitions=[
                        Response.OffsetFetchResponsePartitions(
                            partition_index=i,
                            committed_offset=-1,
                            error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                        )
                        for i in t.partition_indexes
                    ],
                )
                for t in by_id.unknown
            ]
            topics = [*unknown, *by_id.answer_ids(fetched.topics)]
            out.append(dataclasses.replace(fetched, topics=topics))
    return dataclasses.replace(answer, groups=out)


def _by_name(ctx: RequestContext, request: m.OffsetFetchRequest) -> Response:
    if not enabled(ctx):
        return _fetch(ctx, request)
    if ctx.version >= 8:
        return _authorized_groups(ctx, request)
    return _authorized_group(ctx, request)


def _authorized_groups(ctx: RequestContext, request: m.OffsetFetchRequest) -> Response:
    """v8+: each group on its own; the coordinator sees only what may be read."""
    asked: list[tuple[bool, list[Any]]] = []  # per group: allowed, topics refused
    permitted = []
    for group in request.groups:
        if not group_allowed(ctx, AclOperation.DESCRIBE, group.group_id):
            asked.append((False, []))
            continue
        refused: list[Any] = []
        if group.topics is not None:
            seen = allowed_topics(ctx, AclOperation.DESCRIBE, (t.name for t in group.topics))
            refused = [t for t in group.topics if t.name not in seen]
            if refused:
                group = dataclasses.replace(
                    group, topics=[t for t in group.topics if t.name in seen]
                )
        asked.append((True, refused))
        permitted.append(group)
    whole = _fetch(ctx, dataclasses.replace(request, groups=permitted))
    fetched = iter(whole.groups)
    groups = []
    for group, (allowed, refused) in zip(request.groups, asked, strict=True):
        if not allowed:
            groups.append(
                Response.OffsetFetchResponseGroup(
                    group_id=group.group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED
                )
            )
            continue
        answer = next(fetched)
        if answer.error_code == ErrorCode.NONE:
            if group.topics is None:
                answer = dataclasses.replace(answer, topics=_describable(ctx, answer.topics))
            elif refused:
                extra = [
                    Response.OffsetFetchResponseTopics(
                        name=t.name,
                        partitions=[
                            Response.OffsetFetchResponsePartitions(
                                partition_index=i,
                                committed_offset=-1,
                                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            )
                            for i in t.partition_indexes
                        ],
                    )
                    for t in refused
                ]
                answer = dataclasses.replace(answer, topics=[*answer.topics, *extra])
        groups.append(answer)
    return dataclasses.replace(whole, groups=groups)


def _authorized_group(ctx: RequestContext, request: m.OffsetFetchRequest) -> Response:
    """v1-7: one group."""
    topics = request.topics
    if not group_allowed(ctx, AclOperation.DESCRIBE, request.group_id):
        if ctx.version >= 2:
            return Response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        # (v1 has no group-level error: each partition carries it.)
        return Response(topics=_errors(topics or [], ErrorCode.GROUP_AUTHORIZATION_FAILED))
    if topics is None:
        answer = _fetch(ctx, request)
        if answer.error_code != ErrorCode.NONE:
            return answer
        return dataclasses.replace(answer, topics=_describable(ctx, answer.topics))
    seen = allowed_topics(ctx, AclOperation.DESCRIBE, (t.name for t in topics))
    refused = [t for t in topics if t.name not in seen]
    if not refused:
        return _fetch(ctx, request)
    answer = _fetch(ctx, dataclasses.replace(request, topics=[t for t in topics if t.name in seen]))
    if answer.error_code != ErrorCode.NONE:
        return answer
    extra = _errors(refused, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return dataclasses.replace(answer, topics=[*answer.topics, *extra])


def _errors(
    topics: list[m.OffsetFetchRequest.OffsetFetchRequestTopic], code: ErrorCode
) -> list[Response.OffsetFetchResponseTopic]:
    return [
        Response.OffsetFetchResponseTopic(
            name=t.name,
            partitions=[
                Response.OffsetFetchResponsePartition(
                    partition_index=i, committed_offset=-1, error_code=code
                )
                for i in t.partition_indexes
            ],
        )
        for t in topics
    ]


def _describable(ctx: RequestContext, topics: list[Any]) -> list[Any]:
    """``topics`` (either response shape) without those the principal may not describe."""
    seen = allowed_topics(ctx, AclOperation.DESCRIBE, (t.name for t in topics))
    return [t for t in topics if t.name in seen]


def _fetch(ctx: RequestContext, request: m.OffsetFetchRequest) -> Response:
    """The coordinator's answer, with ``require_stable`` applied."""
    version = ctx.version
    response = ctx.groups.offset_fetch(request, version, ctx.now_ms)
    if version < 7 or not request.require_stable:
        return response
    pending_of = ctx.broker.pending_offset_partitions
    if version >= 8:
        groups = []
        for group in response.groups:
            pending = pending_of(group.group_id)
            if pending:
                group = dataclasses.replace(group, topics=_unstable(group.topics, pending))
            groups.append(group)
        return dataclasses.replace(response, groups=groups)
    pending = pending_of(request.group_id)
    if not pending:
        return response
    return dataclasses.replace(response, topics=_unstable(response.topics, pending))


def _unstable(topics: list[Any], pending: set[tuple[str, int]]) -> list[Any]:
    """``topics`` (either response shape) with the ``pending`` partitions unstable."""
    out = []
    for topic in topics:
        parts = [
            dataclasses.replace(
                p,
                committed_offset=-1,
                committed_leader_epoch=-1,
                metadata="",
                error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT,
            )
            if (topic.name, p.partition_index) in pending
            else p
            for p in topic.partitions
        ]
        out.append(dataclasses.replace(topic, partitions=parts))
    return out


def error_response(
    request: m.OffsetFetchRequest | None, version: int, code: ErrorCode
) -> m.OffsetFetchResponse:
    if version >= 8:
        groups = request.groups if request is not None else []
        return m.OffsetFetchResponse(
            groups=[
                m.OffsetFetchResponse.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
                for g in groups
            ]
        )
    return m.OffsetFetchResponse(error_code=code if version >= 2 else 0)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="groups authorizer broker logs",
)
