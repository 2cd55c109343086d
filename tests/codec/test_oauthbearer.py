"""SASL/OAUTHBEARER (RFC 7628, KIP-255): the client message, unsecured tokens and
their validation, and the server's exchange, without I/O."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trafka.codec.oauthbearer import (
    JwkSet,
    OAuthBearerServer,
    TokenValidationError,
    TokenValidator,
    client_message,
    parse_client_message,
    unsecured_token,
)
from trafka.codec.sasl import SaslAuthenticationError, SaslMisuse

NOW = 1_700_000_000_000


def _part(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def jws(claims: dict[str, object], header: dict[str, object] | None = None, sig: str = "") -> str:
    return f"{_part(header or {'alg': 'none'})}.{_part(claims)}.{sig}"


# -- the client's message ------------------------------------------------------------------


def test_the_client_message_is_rfc_7628s() -> None:
    assert client_message("abc.def.") == b"n,,\x01auth=Bearer abc.def.\x01\x01"
    assert (
        client_message("t0k", authzid="alice", extensions={"traceId": "42", "env": "dev"})
        == b"n,a=alice,\x01auth=Bearer t0k\x01traceId=42\x01env=dev\x01\x01"
    )


_ext_keys = st.text(alphabet=st.characters(min_codepoint=65, max_codepoint=90), min_size=1)
_ext_values = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1)


@given(
    token=st.from_regex(r"[A-Za-z0-9\-._~+/]{1,40}={0,2}", fullmatch=True),
    authzid=st.from_regex(r"[a-z0-9]{0,8}", fullmatch=True),
    extensions=st.dictionaries(_ext_keys.filter(lambda k: k != "auth"), _ext_values, max_size=3),
)
def test_messages_round_trip(token: str, authzid: str, extensions: dict[str, str]) -> None:
    parsed = parse_client_message(client_message(token, authzid=authzid, extensions=extensions))
    assert (parsed.token, parsed.authzid, dict(parsed.extensions)) == (token, authzid, extensions)


def test_a_parsed_message_never_shows_its_token() -> None:
    token = unsecured_token("alice", now_ms=NOW)
    parsed = parse_client_message(client_message(token))
    assert parsed.token == token and token not in repr(parsed) and token not in str(parsed)


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"n,,auth=Bearer x\x01\x01",  # no 0x01 after the header
        b"y,,\x01auth=Bearer x\x01\x01",  # channel binding flag
        b"n,,\x01auth=Bearer x\x01",  # one 0x01 at the end
        b"n,,\x01\x01",  # no token
        b"n,,\x01auth=Basic x\x01\x01",
        b"n,,\x01auth=Bearer \x01\x01",
        b"n,,\x01auth=Bearer a b\x01\x01",
        b"n,,\x01auth=Bearer x\x01auth=Bearer y\x01\x01",
        b"n,,\x01auth=Bearer x\x01novalue\x01\x01",
        b"n,,\x01auth=Bearer x\x01bad_key=1\x01\x01",
        b"n,,\x01auth=Bearer x\x01k=1\x01k=2\x01\x01",
        b"n,,\x01auth=Bearer x\x01k=\x01\x01",
        b"n,,\x01auth=Bearer \xff\x01\x01",
    ],
)
def test_malformed_messages_are_refused(message: bytes) -> None:
    with pytest.raises(SaslAuthenticationError, match=r"^invalid "):
        parse_client_message(message)


def test_the_client_refuses_what_it_cannot_send() -> None:
    for bad in ("", "a b", "tök"):
        with pytest.raises(ValueError):
            client_message(bad)
    with pytest.raises(ValueError):
        client_message("t", authzid="a,b")
    with pytest.raises(ValueError):
        client_message("t", extensions={"auth": "x"})
    with pytest.raises(ValueError):
        client_message("t", extensions={"k": "\x00"})


# -- tokens --------------------------------------------------------------------------------


def test_an_unsecured_token_validates() -> None:
    token = unsecured_token("alice", now_ms=NOW, lifetime_ms=60_000, scope=["read", "write"])
    assert token.endswith(".") and token.count(".") == 2
    found = TokenValidator(required_scopes=["read"]).validate(token, NOW + 1000)
    assert found.principal == "alice"
    assert found.expires_ms == NOW + 60_000
    assert found.scope == {"read", "write"}
    # Another principal claim, and scopes as one space-separated string.
    other = jws({"user": "bob", "exp": NOW / 1000 + 60, "roles": "a b"})
    validator = TokenValidator(principal_claim="user", scope_claim="roles")
    assert validator.validate(other, NOW).scope == {"a", "b"}


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("abc", "not a JWS"),
        (jws({"sub": "a", "exp": NOW / 1000 + 60}, sig="c2ln"), "signed"),
        (jws({"sub": "a", "exp": NOW / 1000 + 60}, header={"alg": "HS256"}), "alg none"),
        ("!!!." + _part({"sub": "a"}) + ".", "base64url|not JSON"),
        (_part([1]) + "." + _part({"sub": "a"}) + ".", "not a JSON object"),
        (jws({"sub": "a"}), "no numeric exp"),
        (jws({"sub": "a", "exp": "soon"}), "no numeric exp"),
        (jws({"sub": "a", "exp": True}), "no numeric exp"),
        (jws({"sub": "a", "exp": NOW / 1000 + 60, "iat": "x"}), "iat claim is not a number"),
        (jws({"exp": NOW / 1000 + 60}), "no principal"),
        (jws({"sub": " ", "exp": NOW / 1000 + 60}), "no principal"),
        (jws({"sub": "a", "exp": NOW / 1000 - 31}), "expired"),
        (jws({"sub": "a", "exp": NOW / 1000 + 90, "iat": NOW / 1000 + 31}), "in the future"),
        (jws({"sub": "a", "exp": NOW / 1000 + 5, "iat": NOW / 1000 + 10}), "before it is issued"),
        (jws({"sub": "a", "exp": NOW / 1000 + 60, "scope": 7}), "scope claim"),
    ],
)
def test_bad_tokens_are_refused(token: str, reason: str) -> None:
    with pytest.raises(TokenValidationError, match=reason) as info:
        TokenValidator().validate(token, NOW)
    assert info.value.status == "invalid_token"
    assert token not in str(info.value)


def test_clock_skew_scope_audience_and_issuer() -> None:
    late = jws({"sub": "a", "exp": NOW / 1000 - 5})
    TokenValidator().validate(late, NOW)  # within the default 30 s
    with pytest.raises(TokenValidationError, match="expired"):
        TokenValidator(clock_skew_ms=0).validate(late, NOW)
    token = unsecured_token("a", now_ms=NOW, scope=["read"])
    with pytest.raises(TokenValidationError, match="lacks the required scope") as info:
        TokenValidator(required_scopes=["read", "admin"]).validate(token, NOW)
    assert (info.value.status, info.value.scope) == ("insufficient_scope", "read admin")
    aud = jws({"sub": "a", "exp": NOW / 1000 + 60, "aud": ["kafka", "x"], "iss": "idp"})
    TokenValidator(expected_audience=["kafka"], expected_issuer="idp").validate(aud, NOW)
    with pytest.raises(TokenValidationError, match="audience"):
        TokenValidator(expected_audience=["other"]).validate(aud, NOW)
    with pytest.raises(TokenValidationError, match="audience"):
        TokenValidator(expected_audience=["kafka"]).validate(token, NOW)
    with pytest.raises(TokenValidationError, match="issuer"):
        TokenValidator(expected_issuer="elsewhere").validate(aud, NOW)


# -- the server ----------------------------------------------------------------------------


def _server(now_ms: int = NOW, **validator: object) -> OAuthBearerServer:
    check = TokenValidator(**validator)  # type: ignore[arg-type]
    return OAuthBearerServer(lambda token: check.validate(token, now_ms).principal)


def test_the_server_accepts_a_valid_token() -> None:
    server = _server()
    token = unsecured_token("alice", now_ms=NOW)
    assert server.respond(client_message(token, extensions={"traceId": "7"})) == b""
    assert server.complete and server.username == "alice"
    assert server.extensions == {"traceId": "7"}
    with pytest.raises(SaslMisuse):
        server.respond(b"\x01")


def test_a_bad_token_gets_an_error_answer_then_fails() -> None:
    server = _server(now_ms=NOW + 10 * 3_600_000)
    token = unsecured_token("alice", now_ms=NOW)
    answer = server.respond(client_message(token))
    assert json.loads(answer) == {"status": "invalid_token"}
    assert not server.complete
    with pytest.raises(SaslAuthenticationError, match="expired"):
        server.respond(b"\x01")
    assert not server.complete and server.username is None
    with pytest.raises(SaslMisuse):
        server.respond(b"\x01")


def test_insufficient_scope_names_the_scope() -> None:
    server = _server(required_scopes=["write"])
    answer = server.respond(client_message(unsecured_token("a", now_ms=NOW)))
    assert json.loads(answer) == {"status": "insufficient_scope", "scope": "write"}
    with pytest.raises(SaslAuthenticationError, match="only 0x01"):
        server.respond(client_message(unsecured_token("a", now_ms=NOW)))


def test_the_authorization_id_must_be_the_principal() -> None:
    token = unsecured_token("alice", now_ms=NOW)
    assert _server().respond(client_message(token, authzid="alice")) == b""
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        _server().respond(client_message(token, authzid="mallory"))


# -- signed tokens (a JWK set, KIP-768) ------------------------------------------------------


def _claims(**more: object) -> dict[str, object]:
    return {"sub": "svc", "exp": NOW / 1000 + 600, "iat": NOW / 1000, **more}


@pytest.mark.parametrize("alg", ["RS256", "RS512", "PS256", "ES256", "ES384", "ES512"])
def test_signed_tokens_verify_with_the_key_set(alg: str) -> None:
    from oauth_keys import SigningKey, jwks

    key, other = SigningKey("k1", alg), SigningKey("k2", alg)
    keys = JwkSet.from_json(json.dumps(jwks(key, other)))
    validator = TokenValidator(keys=keys)
    assert validator.validate(key.sign(_claims()), NOW).principal == "svc"
    assert validator.validate(other.sign(_claims(scope="a b")), NOW).scope == {"a", "b"}
    # The wrong key, a changed payload, an unknown kid.
    with pytest.raises(TokenValidationError, match=r"does not verify|wrong length"):
        validator.validate(key.sign(_claims(), kid="k2"), NOW)
    header, _, signature = key.sign(_claims()).split(".")
    forged = _part(_claims(sub="admin"))
    with pytest.raises(TokenValidationError, match="does not verify"):
        validator.validate(f"{header}.{forged}.{signature}", NOW)
    with pytest.raises(TokenValidationError, match="no key"):
        validator.validate(key.sign(_claims(), kid="k9"), NOW)
    # No kid: fine with one key, ambiguous with two.
    assert TokenValidator(keys=JwkSet.from_json(jwks(key))).validate(
        key.sign(_claims(), kid=None), NOW
    )
    with pytest.raises(TokenValidationError, match="several keys"):
        validator.validate(key.sign(_claims(), kid=None), NOW)
    # Signed, but expired: the claims are checked as for unsecured tokens.
    with pytest.raises(TokenValidationError, match="expired"):
        validator.validate(key.sign(_claims(exp=NOW / 1000 - 3600)), NOW)


def test_a_key_set_refuses_unsecured_and_unknown_algorithms() -> None:
    from oauth_keys import SigningKey, jwks

    key = SigningKey("k1")
    validator = TokenValidator(keys=JwkSet.from_json(jwks(key)))
    with pytest.raises(TokenValidationError, match="signed tokens only"):
        validator.validate(unsecured_token("svc", now_ms=NOW), NOW)
    hmac_token = f"{_part({'alg': 'HS256', 'kid': 'k1'})}.{_part(_claims())}.c2lnbmF0dXJl"
    with pytest.raises(TokenValidationError, match="algorithm 'HS256'"):
        validator.validate(hmac_token, NOW)
    # An EC token against an RSA-only set: no key fits.
    with pytest.raises(TokenValidationError, match="no key"):
        validator.validate(SigningKey("k1", "ES256").sign(_claims()), NOW)
    # And without a key set, signed tokens are refused.
    with pytest.raises(TokenValidationError, match="unsecured tokens"):
        TokenValidator().validate(key.sign(_claims()), NOW)


@pytest.mark.parametrize(
    "document",
    [
        "[]",
        '{"keys": 3}',
        '{"keys": []}',
        '{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}',  # symmetric keys are not taken
        '{"keys": [{"kty": "RSA", "use": "enc", "n": "AQAB", "e": "AQAB"}]}',
        '{"keys": [{"kty": "RSA", "kid": "x", "n": 5, "e": "AQAB"}]}',
        '{"keys": [{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}]}',
    ],
)
def test_bad_key_sets(document: str) -> None:
    with pytest.raises(ValueError):
        JwkSet.from_json(document)
