"""ReadShareGroupState (key 84), version 0: a share-partition leader reads a
share-partition's state from its share coordinator (KIP-932, inter-broker).

Cluster mode: answered by the share coordinator
(:mod:`trafka.brokerlite.shares.coordinator`; the rules shared with keys 83, 85
and 86 are :mod:`._share_state`'s). A share-partition never written is answered
with start offset -1 (not initialized); a leader epoch below the stored one is
FENCED_LEADER_EPOCH, a newer one is recorded (and the answer waits for that
record to replicate). On a single node the share state is a journal of the
share-partition leader's own: every partition is NOT_COORDINATOR.
"""

from __future__ import annotations

from typing import Any

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k84_read_share_group_state as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._share_state import Row, refusal_of, serve

API_KEY = ApiKey.READ_SHARE_GROUP_STATE
MIN_VERSION = 0
MAX_VERSION = 0

Response = m.ReadShareGroupStateResponse


def handle(ctx: RequestContext, request: m.ReadShareGroupStateRequest) -> Response | Parked:
    group = request.group_id

    def act(coordinator: Any, topic_id: str, data: Any) -> tuple[ErrorCode, Any]:
        return coordinator.read(group, topic_id, data.partition, data.leader_epoch)  # type: ignore[no-any-return]

    result: Response | Parked = serve(ctx, group, request.topics, act, _build)
    return result


def _build(rows: list[Row]) -> Response:
    by_topic: dict[Any, list[Response.PartitionResult]] = {}
    for row in rows:
        state = row.payload
        by_topic.setdefault(row.topic_id, []).append(
            Response.PartitionResult(
                partition=row.partition,
                error_code=row.code,
                error_message=None,
                state_epoch=0 if state is None else state.state_epoch,
                start_offset=-1 if state is None else state.start,
                state_batches=[]
                if state is None
                else [
                    Response.StateBatch(
                        first_offset=a, last_offset=b, delivery_state=c, delivery_count=d
                    )
                    for a, b, c, d in state.runs
                ],
            )
        )
    return Response(
        results=[Response.ReadStateResult(topic_id=t, partitions=ps) for t, ps in by_topic.items()]
    )


error_response = refusal_of(_build)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="logs cluster share_coordinator authorizer purgatory",
)
