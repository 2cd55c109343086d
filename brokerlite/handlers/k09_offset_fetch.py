"""OffsetFetch (key 9), versions 1-9: read a group's committed positions.

Handed to the group coordinator. v8+ asks for several groups at once;
partitions without a commit report offset -1.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k09_offset_fetch as m

from ._base import HandlerSpec, RequestContext

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 9


def handle(ctx: RequestContext, request: m.OffsetFetchRequest) -> m.OffsetFetchResponse:
    return ctx.broker.groups.offset_fetch(request, ctx.version, ctx.now_ms)


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
