"""ConsumerGroupHeartbeat (key 68), versions 0-1: the new consumer group protocol
(KIP-848). Members join, heartbeat and leave; the coordinator assigns partitions
(server assignors ``uniform`` and ``range``). Version 1 adds regex subscriptions
(matched whole, with Python's ``re``, against every topic name, internal ones too,
as Kafka's coordinator matches them).

Handed to the group coordinator (:mod:`trafka.brokerlite.groups.consumer_groups`); never
parked.

Authorization: READ on the group (else GROUP_AUTHORIZATION_FAILED), and DESCRIBE on
every topic named in ``subscribed_topic_names`` (else TOPIC_AUTHORIZATION_FAILED
for the heartbeat, which then changes nothing).

While ``group.version`` is finalized at 0 (UpdateFeatures, :mod:`trafka.brokerlite.features`)
the consumer group protocol is off: every request is answered UNSUPPORTED_VERSION (the broker's
gate, before authorization), as Kafka 4.x answers it.
"""

from __future__ import annotations

from trafka.brokerlite.features import GROUP_VERSION
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k68_consumer_group_heartbeat as m

from ._authz import enabled, heartbeat_refusal
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT
MIN_VERSION = 0
MAX_VERSION = 1


def handle(
    ctx: RequestContext, request: m.ConsumerGroupHeartbeatRequest
) -> m.ConsumerGroupHeartbeatResponse:
    if enabled(ctx):
        refused = heartbeat_refusal(ctx, request.group_id, request.subscribed_topic_names)
        if refused == ErrorCode.GROUP_AUTHORIZATION_FAILED:
            return error_response(request, ctx.version, refused)
        if refused is not None:
            return m.ConsumerGroupHeartbeatResponse(error_code=refused)
    host = ctx.session.peer.rsplit(":", 1)[0]
    return ctx.groups.consumer_group_heartbeat(
        request,
        ctx.version,
        ctx.now_ms,
        client_id=ctx.client_id or "",
        client_host=f"/{host}",
    )


def error_response(
    request: m.ConsumerGroupHeartbeatRequest | None, version: int, code: ErrorCode
) -> m.ConsumerGroupHeartbeatResponse:
    return m.ConsumerGroupHeartbeatResponse(error_code=code)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    feature=GROUP_VERSION,
    uses="groups authorizer",
)
