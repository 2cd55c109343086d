"""OffsetFetch (key 9), versions 1-9: read a group's committed positions.

Handed to the group coordinator. v8+ asks for several groups at once;
partitions without a commit report offset -1.

``require_stable`` (v7+, sent by read_committed consumers): a partition whose
offset is held by an unfinished transaction (TxnOffsetCommit not yet committed
or aborted) answers UNSTABLE_OFFSET_COMMIT with offset -1 instead of the
committed offset, as Kafka does; the client retries until the transaction
completes, so it never starts from an offset that is about to change.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k09_offset_fetch as m

from ._base import HandlerSpec, RequestContext

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 9

Response = m.OffsetFetchResponse


def handle(ctx: RequestContext, request: m.OffsetFetchRequest) -> Response:
    version = ctx.version
    response = ctx.broker.groups.offset_fetch(request, version, ctx.now_ms)
    if version < 7 or not request.require_stable:
        return response
    txn = ctx.broker.txn
    if version >= 8:
        groups = []
        for group in response.groups:
            pending = txn.pending_offset_partitions(group.group_id)
            if pending:
                group = dataclasses.replace(group, topics=_unstable(group.topics, pending))
            groups.append(group)
        return dataclasses.replace(response, groups=groups)
    pending = txn.pending_offset_partitions(request.group_id)
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


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
