"""SaslHandshake (key 17), versions 0-1: the client names its SASL mechanism.

Served on every listener, as Kafka does (and advertised everywhere, like Kafka's
ApiVersions, which lists it whatever the listener):

* On a SASL listener, before authentication: an enabled mechanism is answered
  NONE with the enabled mechanisms; the client's tokens follow in SaslAuthenticate
  requests after v1, or as bare size-prefixed frames after v0 (KIP-43). Any
  other mechanism is answered UNSUPPORTED_SASL_MECHANISM with the enabled list,
  and a second handshake ILLEGAL_SASL_STATE; both close the connection after
  the answer.
* Once authenticated with a session lifetime (KIP-368): the handshake starts a
  re-authentication on the same connection, answered as above (a different
  enabled mechanism is answered NONE, but its first token fails, as Kafka
  does). Within a second of the previous re-authentication's start it is
  answered like the next case.
* On a PLAINTEXT or SSL listener, or once authenticated without a session
  lifetime: ILLEGAL_SASL_STATE with no mechanisms, and the connection stays.

The state rules are :mod:`trafka.brokerlite.security.sasl`'s.
"""

from __future__ import annotations

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k17_sasl_handshake as m

from ..outcomes import Close
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.SASL_HANDSHAKE
MIN_VERSION = 0
MAX_VERSION = 1


def handle(ctx: RequestContext, request: m.SaslHandshakeRequest) -> m.SaslHandshakeResponse | Close:
    session = ctx.session.sasl_exchange()
    if session is None:
        session = ctx.session.begin_reauthentication(ctx.now_ms)
    if session is None:
        return m.SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    code = session.handshake(request.mechanism, ctx.version)
    answer = m.SaslHandshakeResponse(error_code=code, mechanisms=list(session.mechanisms))
    if code is ErrorCode.NONE:
        return answer
    reason = (
        f"SASL mechanism {request.mechanism!r} is not enabled "
        f"(enabled: {', '.join(session.mechanisms)})"
        if code is ErrorCode.UNSUPPORTED_SASL_MECHANISM
        else "a second SaslHandshake during SASL authentication"
    )
    return Close(reason, ctx.client_id, ctx.reply(answer), failed_authentication=True)


def error_response(
    request: m.SaslHandshakeRequest | None, version: int, code: ErrorCode
) -> m.SaslHandshakeResponse:
    return m.SaslHandshakeResponse(error_code=code, mechanisms=[])


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
