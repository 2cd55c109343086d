"""ShareGroupHeartbeat (key 76), version 1: members of share groups (KIP-932) join,
heartbeat and leave; the coordinator assigns partitions with the ``simple``
assignor, sharing a partition between members when there are more members than
partitions.

Version 1 only, as Kafka 4.1 serves it (version 0 was Kafka 4.0's early-access
form): a version 0 request gets UNSUPPORTED_VERSION. Member ids come from the
client (KIP-1082). Handed to the share coordinator
(:mod:`trafka.brokerlite.groups.share_groups`); never parked.

Authorization: READ on the group (else GROUP_AUTHORIZATION_FAILED), and DESCRIBE on
every topic named in ``subscribed_topic_names`` (else TOPIC_AUTHORIZATION_FAILED
for the heartbeat, which then changes nothing).

While ``share.version`` is finalized at 0 (UpdateFeatures, :mod:`trafka.brokerlite.features`)
share groups are off: every request is answered UNSUPPORTED_VERSION (the broker's
gate, before authorization), as Kafka 4.x answers it.
"""

from __future__ import annotations

from trafka.brokerlite.features import SHARE_VERSION
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k76_share_group_heartbeat as m

from ._authz import enabled, heartbeat_refusal
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.SHARE_GROUP_HEARTBEAT
MIN_VERSION = 1
MAX_VERSION = 1


def handle(
    ctx: RequestContext, request: m.ShareGroupHeartbeatRequest
) -> m.ShareGroupHeartbeatResponse:
    if enabled(ctx):
        refused = heartbeat_refusal(ctx, request.group_id, request.subscribed_topic_names)
        if refused == ErrorCode.GROUP_AUTHORIZATION_FAILED:
            return error_response(request, ctx.version, refused)
        if refused is not None:
            return m.ShareGroupHeartbeatResponse(error_code=refused)
    host = ctx.session.peer.rsplit(":", 1)[0]
    return ctx.share_groups.heartbeat(
        request, ctx.now_ms, client_id=ctx.client_id or "", client_host=f"/{host}"
    )


def error_response(
    request: m.ShareGroupHeartbeatRequest | None, version: int, code: ErrorCode
) -> m.ShareGroupHeartbeatResponse:
    return m.ShareGroupHeartbeatResponse(error_code=code)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    feature=SHARE_VERSION,
    uses="share_groups authorizer",
)
