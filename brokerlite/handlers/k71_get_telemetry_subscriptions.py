"""GetTelemetrySubscriptions (key 71), version 0: a client's KIP-714 subscription.

Answered as Kafka's ``ClientMetricsManager`` answers it
(:mod:`trafka.brokerlite.telemetry` states the rules): the zero id gets a new
client instance id; the subscription (id, requested metric prefixes, push
interval) comes from the client-metrics resources the client matches by its
client id, its software name and version (from the connection's ApiVersions
v3+), its source address and port, and its instance id. ``*`` as the one
requested metric is "every metric", as Kafka sends it (the spec's text says an
empty string; clients read both as all, by prefix). Accepted compression types
are Kafka's list (zstd, lz4, gzip, snappy), the largest push is the broker's
``telemetry_max_bytes``, temporality is delta.

* Asked again before the push interval passed since the last accepted request
  (unless the last push failed with UNKNOWN_SUBSCRIPTION_ID or
  UNSUPPORTED_COMPRESSION_TYPE, or the subscriptions changed since):
  THROTTLING_QUOTA_EXCEEDED, the other fields empty.
* No authorization (Kafka has none for the telemetry APIs).
* An unexpected failure is INVALID_REQUEST, as Kafka's handler answers it.

brokerlite advertises the API always: its receiver is built in, which is what
makes Kafka advertise keys 71 and 72 (a configured telemetry receiver plugin).
"""

from __future__ import annotations

import logging

from trafka.brokerlite.telemetry import ACCEPTED_COMPRESSION_TYPES, ClientInfo
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k71_get_telemetry_subscriptions as m

from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.GET_TELEMETRY_SUBSCRIPTIONS
MIN_VERSION = 0
MAX_VERSION = 0

log = logging.getLogger("trafka.brokerlite")


def client_info(ctx: RequestContext) -> ClientInfo:
    """What the request's connection says about the client (KIP-714's match selectors)."""
    return ClientInfo.of_connection(ctx.client_id, ctx.session.client_software, ctx.session.peer)


def handle(
    ctx: RequestContext, request: m.GetTelemetrySubscriptionsRequest
) -> m.GetTelemetrySubscriptionsResponse:
    telemetry = ctx.telemetry
    try:
        answer = telemetry.get_subscriptions(
            request.client_instance_id, client_info(ctx), ctx.conn_id, ctx.now_ms
        )
    except Exception:
        log.exception("GetTelemetrySubscriptions from %s failed", ctx.session.peer)
        return m.GetTelemetrySubscriptionsResponse(error_code=ErrorCode.INVALID_REQUEST)
    if answer.error:
        return m.GetTelemetrySubscriptionsResponse(error_code=answer.error)
    return m.GetTelemetrySubscriptionsResponse(
        error_code=ErrorCode.NONE,
        client_instance_id=answer.client_instance_id,
        subscription_id=answer.subscription_id,
        accepted_compression_types=list(ACCEPTED_COMPRESSION_TYPES),
        push_interval_ms=answer.push_interval_ms,
        telemetry_max_bytes=telemetry.telemetry_max_bytes,
        delta_temporality=True,
        requested_metrics=list(answer.requested_metrics),
    )


def error_response(
    request: m.GetTelemetrySubscriptionsRequest | None, version: int, code: ErrorCode
) -> m.GetTelemetrySubscriptionsResponse:
    return m.GetTelemetrySubscriptionsResponse(error_code=code)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="telemetry")
