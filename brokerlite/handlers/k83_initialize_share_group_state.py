"""InitializeShareGroupState (key 83), version 0: a share-partition's state
begins afresh at a start offset, with a state epoch (KIP-932, inter-broker).

Cluster mode: answered by the share coordinator
(:mod:`trafka.brokerlite.shares.coordinator`; the rules shared with keys 84, 85
and 86 are :mod:`._share_state`'s): nothing stays in flight, a state epoch
below the stored one is FENCED_STATE_EPOCH, a negative start offset
INVALID_REQUEST. The answer waits until the record is replicated. On a single
node every partition is NOT_COORDINATOR.
"""

from __future__ import annotations

from typing import Any

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k83_initialize_share_group_state as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._share_state import codes_only, refusal_of, serve

API_KEY = ApiKey.INITIALIZE_SHARE_GROUP_STATE
MIN_VERSION = 0
MAX_VERSION = 0

Response = m.InitializeShareGroupStateResponse


def handle(ctx: RequestContext, request: m.InitializeShareGroupStateRequest) -> Response | Parked:
    group = request.group_id

    def act(coordinator: Any, topic_id: str, data: Any) -> tuple[ErrorCode, Any]:
        code = coordinator.initialize(
            group,
            topic_id,
            data.partition,
            state_epoch=data.state_epoch,
            start=data.start_offset,
        )
        return code, None

    result: Response | Parked = serve(ctx, group, request.topics, act, _build)
    return result


_build = codes_only(Response, Response.InitializeStateResult)
error_response = refusal_of(_build)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="logs cluster share_coordinator authorizer purgatory",
)
