"""WriteShareGroupState (key 85), versions 0-1: a share-partition leader writes a
share-partition's state to its share coordinator (KIP-932, inter-broker; v1,
Kafka 4.2's, adds the writer's DeliveryCompleteCount for KIP-1226's lag, which
brokerlite's coordinator counts from the batches instead: they are the whole
in-flight state, so the two cannot differ).

Cluster mode: answered by the share coordinator
(:mod:`trafka.brokerlite.shares.coordinator`; the rules shared with keys 83, 84
and 86 are :mod:`._share_state`'s). The batches are taken as the
share-partition's whole in-flight state (brokerlite's leaders send all of it).
A leader epoch below the stored one is FENCED_LEADER_EPOCH, a state epoch below
it FENCED_STATE_EPOCH; a negative start offset INVALID_REQUEST. The answer waits
until the record is replicated. On a single node every partition is
NOT_COORDINATOR.
"""

from __future__ import annotations

from typing import Any

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k85_write_share_group_state as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._share_state import codes_only, refusal_of, serve

API_KEY = ApiKey.WRITE_SHARE_GROUP_STATE
MIN_VERSION = 0
MAX_VERSION = 1

Response = m.WriteShareGroupStateResponse


def handle(ctx: RequestContext, request: m.WriteShareGroupStateRequest) -> Response | Parked:
    group = request.group_id

    def act(coordinator: Any, topic_id: str, data: Any) -> tuple[ErrorCode, Any]:
        runs = [
            (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in data.state_batches
        ]
        code = coordinator.write(
            group,
            topic_id,
            data.partition,
            state_epoch=data.state_epoch,
            leader_epoch=data.leader_epoch,
            start=data.start_offset,
            runs=runs,
        )
        return code, None

    result: Response | Parked = serve(ctx, group, request.topics, act, _build)
    return result


_build = codes_only(Response, Response.WriteStateResult)
error_response = refusal_of(_build)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="logs cluster share_coordinator authorizer purgatory",
)
