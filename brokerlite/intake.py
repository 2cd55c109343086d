"""A request's way in: from a frame to a decoded request of an API and version
the broker serves, or the outcome that refuses it. Pure: no broker state but the
connection's session and the configuration.

Rules and invariants:

* :func:`admit` never raises for bad input: a malformed header or body, an
  unknown API key, a version nobody can answer are a :class:`Close`.
* On a SASL listener, before the connection has authenticated, other requests
  than ApiVersions, SaslHandshake and SaslAuthenticate are a :class:`Close`
  (:func:`~.session.unauthenticated_refusal`); after a v0 SaslHandshake the
  frame is a bare SASL token, answered by a :class:`SaslToken`; after its
  session's expiry, a connection's request is a :class:`Close`, unanswered.
* An ApiVersions of a version the codec does not know is answered v0 with
  UNSUPPORTED_VERSION and the versions served (KIP-511), so that the client
  retries with one; a known version outside the served range gets the API's
  error response, or a :class:`Close` when it has none.
* The KIP-714 client APIs are served and advertised only with
  ``client_telemetry_enabled`` (Kafka serves them only with a telemetry
  receiver plugin configured).
* Trailing bytes after a request body are ignored, as Kafka's broker does.
* The session learns the request's client id, and ApiVersions v3+'s client
  software (KIP-511).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from trafka.codec import ApiKey
from trafka.codec.errors import CodecError, ErrorCode, UnsupportedVersionError
from trafka.codec.messages import API_MODULES
from trafka.codec.messages import k18_api_versions as api_versions_msg
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import api, decode_request_body, decode_request_header

from .config import BrokerConfig
from .handlers import HANDLERS
from .outcomes import Close, Outcome, Reply
from .session import ConnectionSession, unauthenticated_refusal

__all__ = [
    "API_VERSIONS_KEY",
    "Admitted",
    "admit",
    "advertised_versions",
    "decode_body",
    "early_refusal",
    "served_api_keys",
]

API_VERSIONS_KEY = ApiKey.API_VERSIONS
# KIP-714's client APIs (GetTelemetrySubscriptions, PushTelemetry).
TELEMETRY_KEYS = frozenset({ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY})


class Admitted(NamedTuple):
    """A request the broker serves, decoded."""

    header: RequestHeader
    body: Any


def admit(
    session: ConnectionSession, frame: bytes | memoryview, now_ms: int, config: BrokerConfig
) -> Admitted | Outcome:
    """Decode one request frame (without its size prefix) of the connection of
    ``session``: the request when the broker serves it, else its outcome."""
    exchange = None
    if session.sasl_policy is not None:
        exchange = session.sasl_exchange()
        if exchange is not None and exchange.raw_tokens:
            return session.raw_sasl_token(exchange, frame, now_ms)
    try:
        header, body_at = decode_request_header(frame)
    except CodecError as exc:
        return Close(f"malformed request header: {exc}")
    key, version = header.request_api_key, header.request_api_version
    if session.sasl_policy is not None and not (
        # Kafka's SocketServer.processCompletedReceives: a SaslHandshake that may
        # begin a re-authentication does so, expired or not; any other request on
        # an expired session closes the connection unanswered.
        key == ApiKey.SASL_HANDSHAKE and exchange is None and session.may_reauthenticate(now_ms)
    ):
        expired = session.expired(now_ms)
        if expired is not None:
            return expired
    client_id = session.client_id = header.client_id
    if key not in API_MODULES:
        return Close(f"unknown API key {key} (version {version})", client_id)
    info = api(key)
    if exchange is not None:
        refused = unauthenticated_refusal(exchange, key, client_id)
        if refused is not None:
            return refused
    spec = HANDLERS.get(key)
    if key == API_VERSIONS_KEY and (
        not info.supports(version) or version > HANDLERS[key].served(config.protocol_version)[1]
    ):
        low, high = HANDLERS[key].advertised(config.protocol_version)
        # KIP-511: a version above the broker's (one the codec knows or not) is
        # answered with v0 and the versions we do speak, so the client can retry
        # with one of them (franz-go sends Kafka 4.4's v5 first).
        return Reply(
            header.correlation_id,
            key,
            0,
            api_versions_msg.ApiVersionsResponse(
                error_code=ErrorCode.UNSUPPORTED_VERSION,
                api_keys=[
                    api_versions_msg.ApiVersionsResponse.ApiVersion(
                        api_key=key,
                        min_version=low,
                        max_version=high,
                    )
                ],
            ),
        )
    if spec is None:
        return Close(f"{info.name} (key {key}) is not served by brokerlite", client_id)
    if key in TELEMETRY_KEYS and not config.client_telemetry_enabled:
        return Close(
            f"{info.name} (key {key}) is not enabled (client_telemetry_enabled is off)",
            client_id,
        )
    if not info.supports(version):
        return Close(f"{info.name} v{version} is not a known version", client_id)
    try:
        body = decode_body(key, version, frame, body_at)
    except UnsupportedVersionError as exc:
        return Close(f"{info.name} v{version}: {exc}", client_id)
    except CodecError as exc:
        return Close(f"malformed {info.name} v{version} request: {exc}", client_id)
    if key == API_VERSIONS_KEY and version >= 3:
        session.client_software = (body.client_software_name, body.client_software_version)
    low, high = spec.served(config.protocol_version)
    if not low <= version <= high:
        if spec.error_response is None:
            return Close(
                f"{info.name} v{version} is not served (versions {low}-{high})",
                client_id,
            )
        return Reply(
            header.correlation_id,
            key,
            version,
            spec.error_response(body, version, ErrorCode.UNSUPPORTED_VERSION),
        )
    return Admitted(header, body)


def early_refusal(session: ConnectionSession, api_key: int) -> Close | None:
    """The :class:`Close` :func:`admit` will answer a request of ``api_key`` with by
    its key alone, before SASL authentication: the driver may then close the
    connection without receiving the request's body (Kafka checks the key only
    after the whole request, within ``sasl.server.max.receive.size``)."""
    exchange = session.sasl_exchange()
    if exchange is None or exchange.raw_tokens:
        return None
    return unauthenticated_refusal(exchange, api_key, session.client_id)


def decode_body(key: int, version: int, frame: bytes | memoryview, start: int) -> Any:
    """Decode the request body at ``start`` of ``frame``, ignoring bytes after it
    as Kafka does.

    Kafka's broker never checks for trailing bytes and librdkafka relies on that:
    its "all topics" Metadata request (v9+) carries three stray zero bytes.
    """
    return decode_request_body(key, version, frame, allow_trailing=True, start=start)


def advertised_versions(config: BrokerConfig) -> list[tuple[int, int, int]]:
    """(api_key, min_version, max_version) of every API served, by key (the
    KIP-714 client APIs only with ``client_telemetry_enabled``)."""
    telemetry = config.client_telemetry_enabled
    protocol = config.protocol_version
    return [
        (key, *HANDLERS.versions(key).advertised(protocol))
        for key in sorted(HANDLERS)
        if telemetry or key not in TELEMETRY_KEYS
    ]


def served_api_keys() -> Iterable[int]:
    """The API keys brokerlite serves."""
    return sorted(HANDLERS)
