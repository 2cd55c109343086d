"""DeleteShareGroupState (key 86), version 0: a share-partition's state is
forgotten (KIP-932, inter-broker).

Cluster mode: answered by the share coordinator
(:mod:`trafka.brokerlite.shares.coordinator`; the rules shared with keys 83, 84
and 85 are :mod:`._share_state`'s), which writes a tombstone; the answer waits
until it is replicated. On a single node every partition is NOT_COORDINATOR.
"""

from __future__ import annotations

from typing import Any

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k86_delete_share_group_state as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._share_state import codes_only, refusal_of, serve

API_KEY = ApiKey.DELETE_SHARE_GROUP_STATE
MIN_VERSION = 0
MAX_VERSION = 0

Response = m.DeleteShareGroupStateResponse


def handle(ctx: RequestContext, request: m.DeleteShareGroupStateRequest) -> Response | Parked:
    group = request.group_id

    def act(coordinator: Any, topic_id: str, data: Any) -> tuple[ErrorCode, Any]:
        return coordinator.delete(group, topic_id, data.partition), None

    result: Response | Parked = serve(ctx, group, request.topics, act, _build)
    return result


_build = codes_only(Response, Response.DeleteStateResult)
error_response = refusal_of(_build)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="logs cluster share_coordinator authorizer purgatory",
)
