"""PushTelemetry (key 72), version 0: a client's KIP-714 metrics.

Checked as Kafka's ``ClientMetricsManager`` checks a push, in its order (the
rules are in :mod:`trafka.brokerlite.telemetry`): a zero or reserved instance
id is INVALID_REQUEST, as is a push after a terminating one; a push before its
interval THROTTLING_QUOTA_EXCEEDED (except right after GetTelemetrySubscriptions,
and a terminating push); a subscription id that is not the instance's current
one UNKNOWN_SUBSCRIPTION_ID (the client asks for its subscription again); a
compression type outside 0-4 UNSUPPORTED_COMPRESSION_TYPE; metrics over
``telemetry_max_bytes`` (compressed, or decompressed) TELEMETRY_TOO_LARGE.
Then brokerlite's built-in receiver decompresses and decodes the OTLP metrics
and keeps them (``broker.telemetry``); metrics that do not decompress or decode
are INVALID_RECORD (Kafka's answer when its receiver plugin fails). Empty
metrics are accepted and not kept.

No authorization (Kafka has none for the telemetry APIs). An unexpected
failure is INVALID_REQUEST, as Kafka's handler answers it.
"""

from __future__ import annotations

import logging

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k72_push_telemetry as m

from ._base import HandlerSpec, RequestContext
from .k71_get_telemetry_subscriptions import client_info

API_KEY = ApiKey.PUSH_TELEMETRY
MIN_VERSION = 0
MAX_VERSION = 0

log = logging.getLogger("trafka.brokerlite")


def handle(ctx: RequestContext, request: m.PushTelemetryRequest) -> m.PushTelemetryResponse:
    try:
        code, message = ctx.telemetry.push(
            request.client_instance_id,
            request.subscription_id,
            request.terminating,
            request.compression_type,
            bytes(request.metrics),
            client_info(ctx),
            ctx.conn_id,
            ctx.now_ms,
        )
    except Exception:
        log.exception("PushTelemetry from %s failed", ctx.session.peer)
        return m.PushTelemetryResponse(error_code=ErrorCode.INVALID_REQUEST)
    if code:
        log.debug("PushTelemetry from %s refused: %s", ctx.session.peer, message)
    return m.PushTelemetryResponse(error_code=code)


def error_response(
    request: m.PushTelemetryRequest | None, version: int, code: ErrorCode
) -> m.PushTelemetryResponse:
    return m.PushTelemetryResponse(error_code=code)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="telemetry")
