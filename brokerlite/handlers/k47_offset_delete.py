"""OffsetDelete (key 47), version 0: delete a group's committed offsets.

Handed to the group coordinator (:meth:`GroupCoordinator.delete_offsets`), which
follows Kafka: GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP for a
classic group with members that is not a consumer group, and per partition
GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to its topic (classic
members by their subscription metadata, KIP-848 members by names or regex);
other partitions' offsets are deleted (durably) and answered NONE.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k47_offset_delete as m

from ._base import HandlerSpec, RequestContext

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx: RequestContext, request: m.OffsetDeleteRequest) -> m.OffsetDeleteResponse:
    return ctx.broker.groups.delete_offsets(request)


def error_response(
    request: m.OffsetDeleteRequest | None, version: int, code: ErrorCode
) -> m.OffsetDeleteResponse:
    return m.OffsetDeleteResponse(error_code=code, topics=[])


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
