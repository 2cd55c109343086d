"""TLS and SASL for broker connections (``security.protocol`` other than PLAINTEXT).

Rules:

* One :class:`ssl.SSLContext` per client, built from the ``ssl_*`` settings when
  the client opens (a bad file is a :class:`~.errors.ConfigError` then, not a
  connection failure later), or the caller's own ``ssl_context``.
* SASL runs on every new connection right after ApiVersions and before any
  other request, as Kafka requires: SaslHandshake v1 names the mechanism, then
  the mechanism's tokens travel in SaslAuthenticate requests. The mechanisms
  themselves are :mod:`trafka.codec.sasl`.
* Failures that retrying cannot fix (wrong credentials, a mechanism the broker
  does not enable, a listener without SASL, a certificate that does not verify)
  raise :class:`~.errors.AuthenticationError`; callers fail at once rather than
  wait out their timeouts. Everything else stays a connection error.
* :func:`authenticate` returns the session lifetime the broker answered
  (``session_lifetime_ms``, KIP-368; 0 when unlimited or with SaslAuthenticate
  v0). The connection re-authenticates with it before the session ends (see
  :mod:`.transport`); the same exchange runs again, and OAUTHBEARER asks its
  provider for a token again.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from trafka.codec import ApiKey, ErrorCode, UnsupportedVersionError
from trafka.codec.messages import k17_sasl_handshake as handshake_msg
from trafka.codec.messages import k36_sasl_authenticate as authenticate_msg
from trafka.codec.sasl import SaslAuthenticationError, ScramClient, plain_message

from .config import ClientConfig
from .errors import AuthenticationError, ConfigError

__all__ = ["SaslConnection", "authenticate", "client_ssl_context"]


class SaslConnection(Protocol):
    """What SASL needs of a connection (the SDK's
    :class:`~trafka.sdk.connection.BrokerConnection`, or a test's)."""

    host: str
    port: int

    def version_for(self, api_key: int) -> int: ...
    async def request(self, api_key: int, body: Any, *, version: int | None = None) -> Any: ...


def client_ssl_context(config: ClientConfig) -> ssl.SSLContext | None:
    """The TLS context for ``config`` (None without TLS).

    Raises:
        ConfigError: a CA, certificate or key file cannot be read or used.
    """
    if not config.uses_tls:
        return None
    if config.ssl_context is not None:
        context: ssl.SSLContext = config.ssl_context
        return context
    try:
        context = ssl.create_default_context(cafile=config.ssl_cafile)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.cafile {config.ssl_cafile!r} cannot be used: {exc}") from None
    if not config.ssl_check_hostname:
        context.check_hostname = False
    if config.ssl_certfile is not None:
        try:
            context.load_cert_chain(
                config.ssl_certfile, config.ssl_keyfile, password=config.ssl_password
            )
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"ssl.certfile {config.ssl_certfile!r} / ssl.keyfile {config.ssl_keyfile!r} "
                f"cannot be used: {exc}"
            ) from None
    return context


async def authenticate(conn: SaslConnection, config: ClientConfig) -> int:
    """Authenticate ``conn`` with SASL (freshly opened, or re-authenticating).

    Returns:
        The session lifetime in milliseconds the broker answered (0: unlimited).

    Raises:
        AuthenticationError: the broker refused the mechanism or the
            credentials, or does not speak SASL on this listener.
        KafkaConnectionError / RequestTimeoutError: the connection failed meanwhile.
    """
    mechanism = config.sasl_mechanism
    where = f"{conn.host}:{conn.port}"
    try:
        conn.version_for(ApiKey.SASL_HANDSHAKE)
        version = conn.version_for(ApiKey.SASL_AUTHENTICATE)
    except UnsupportedVersionError:
        raise AuthenticationError(
            f"{where} offers no SASL authentication (SaslHandshake v1 and SaslAuthenticate): "
            f"is its listener really {config.security_protocol.upper()}?",
            ErrorCode.ILLEGAL_SASL_STATE,
        ) from None
    answer = await conn.request(
        ApiKey.SASL_HANDSHAKE, handshake_msg.SaslHandshakeRequest(mechanism=mechanism), version=1
    )
    if answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        offered = ", ".join(answer.mechanisms) or "none"
        raise AuthenticationError(
            f"{where} does not enable SASL mechanism {mechanism}; it enables: {offered}",
            ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        )
    if answer.error_code == ErrorCode.ILLEGAL_SASL_STATE:
        # What Kafka answers on a listener without SASL (it lists the API everywhere).
        raise AuthenticationError(
            f"{where} does not take SASL on this listener (SaslHandshake: ILLEGAL_SASL_STATE): "
            f"is its listener really {config.security_protocol.upper()}?",
            ErrorCode.ILLEGAL_SASL_STATE,
        )
    if answer.error_code:
        raise _refused(where, answer.error_code, None)

    lifetime_ms = 0

    async def exchange(token: bytes) -> bytes:
        nonlocal lifetime_ms
        body = authenticate_msg.SaslAuthenticateRequest(auth_bytes=token)
        reply: Any = await conn.request(ApiKey.SASL_AUTHENTICATE, body, version=version)
        if reply.error_code:
            raise _refused(where, reply.error_code, reply.error_message)
        lifetime_ms = int(getattr(reply, "session_lifetime_ms", 0) or 0)
        return bytes(reply.auth_bytes)

    if mechanism == "OAUTHBEARER":
        await _oauthbearer(exchange, config, where)
        return lifetime_ms
    username, password = config.sasl_username, config.sasl_password
    assert username is not None and password is not None  # the config checked
    try:
        if mechanism == "PLAIN":
            await exchange(plain_message(username, password))
        else:
            extensions = {"tokenauth": "true"} if config.sasl_scram_tokenauth else None
            scram = ScramClient(mechanism, username, password, extensions=extensions)
            server_first = await exchange(scram.first_message())
            server_final = await exchange(scram.final_message(server_first))
            scram.verify(server_final)
    except SaslAuthenticationError as exc:
        raise AuthenticationError(
            f"SASL {mechanism} authentication with {where} failed: {exc}",
            ErrorCode.SASL_AUTHENTICATION_FAILED,
        ) from None
    return lifetime_ms


async def _oauthbearer(
    exchange: Callable[[bytes], Awaitable[bytes]], config: ClientConfig, where: str
) -> None:
    """One OAUTHBEARER message; an error answer (RFC 7628) is acknowledged with
    0x01, after which the broker refuses, and that refusal is raised."""
    # Loaded here: only OAUTHBEARER clients need them (import trafka.sdk is lighter).
    from trafka.codec.oauthbearer import client_message as oauth_client_message

    from .oauth import fetch_token

    token, extensions = await fetch_token(config.sasl_oauth_token_provider)
    try:
        message = oauth_client_message(token, extensions=extensions)
    except ValueError as exc:
        raise AuthenticationError(f"cannot send the OAuth token: {exc}") from None
    answer = await exchange(message)
    if answer:
        detail = answer.decode("utf-8", "replace")
        await exchange(b"\x01")  # normally raises: the broker refuses now
        raise AuthenticationError(
            f"{where} refused the OAuth token: {detail}", ErrorCode.SASL_AUTHENTICATION_FAILED
        )


def _refused(where: str, code: int, message: str | None) -> AuthenticationError:
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"error {code}"
    return AuthenticationError(f"{where} refused the SASL authentication: {message or name}", code)
