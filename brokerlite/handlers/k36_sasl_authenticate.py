"""SaslAuthenticate (key 36), versions 0-2: one SASL token each way (KIP-152).

* On a SASL listener, after a v1 SaslHandshake: the token goes to the
  connection's mechanism; the answer carries the server's token, and, on the
  last, ``session_lifetime_ms`` (v1+, KIP-368; 0 when the session never
  expires: see :mod:`trafka.brokerlite.security.sasl`). The same goes for a
  re-authentication, where changing the principal or the mechanism fails like
  bad credentials. Bad credentials or a malformed token are answered
  SASL_AUTHENTICATION_FAILED with a message (which never says whether the user
  exists), then the connection closes, as Kafka does. Before any handshake:
  ILLEGAL_SASL_STATE, then the connection closes.
* On a PLAINTEXT or SSL listener, or once authenticated: ILLEGAL_SASL_STATE with
  a message, and the connection stays (Kafka's answer).

After a v0 handshake the tokens come without Kafka headers and never reach this
handler (see ``Broker.handle_frame``). The state rules are
:mod:`trafka.brokerlite.security.sasl`'s.
"""

from __future__ import annotations

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k36_sasl_authenticate as m
from trafka.codec.sasl import SaslAuthenticationError

from ..outcomes import Close
from ..security.sasl import SaslState, SaslStateError
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.SASL_AUTHENTICATE
MIN_VERSION = 0
MAX_VERSION = 2


def handle(
    ctx: RequestContext, request: m.SaslAuthenticateRequest
) -> m.SaslAuthenticateResponse | Close:
    session = ctx.session.sasl_exchange()
    if session is None:
        message = (
            "SaslAuthenticate request received after successful authentication"
            if ctx.config.sasl_enabled
            else f"SASL is not enabled on this {ctx.config.security_protocol} listener"
        )
        return m.SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=message
        )
    try:
        token = session.authenticate(request.auth_bytes, ctx.now_ms)
    except SaslStateError as exc:
        answer = m.SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=str(exc)
        )
        return Close(str(exc), ctx.client_id, ctx.reply(answer), failed_authentication=True)
    except SaslAuthenticationError as exc:
        answer = m.SaslAuthenticateResponse(
            error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc)
        )
        reason = f"SASL {session.mechanism}: {exc}"
        return Close(reason, ctx.client_id, ctx.reply(answer), failed_authentication=True)
    lifetime = 0
    if session.state is SaslState.DONE:
        ctx.session.authenticated(session)
        lifetime = session.session_lifetime_ms
    return m.SaslAuthenticateResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        auth_bytes=token,
        session_lifetime_ms=lifetime,
    )


def error_response(
    request: m.SaslAuthenticateRequest | None, version: int, code: ErrorCode
) -> m.SaslAuthenticateResponse:
    return m.SaslAuthenticateResponse(error_code=code)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="config")
