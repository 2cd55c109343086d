"""SASL/OAUTHBEARER (RFC 7628, Kafka's KIP-255): messages, unsecured tokens, validation.

Pure: bytes and strings in and out, no sockets and no clock (times are passed
in as milliseconds since the epoch). The SDK (client side) and brokerlite
(server side) drive these from their own I/O.

Rules and invariants:

* The client sends one message: the GS2 header ``n,,`` (or ``n,a=<authzid>,``)
  then ``0x01``-separated ``key=value`` pairs ending with two ``0x01``:
  ``auth=Bearer <token>`` and any SASL extensions (KIP-342). Extension keys are
  letters only and may not be ``auth``; values are printable ASCII, space, tab,
  CR or LF.
* The server answers success with an empty message. On a bad token it answers
  an RFC 7628 error (JSON with ``status``); the client must then send a single
  ``0x01``, and the authentication fails. :class:`OAuthBearerServer` keeps that
  order and reports the failure's reason on the second message.
* An authorization id, when sent, must equal the token's principal.
* Unsecured tokens (Kafka's default for development,
  ``OAuthBearerUnsecuredJws``) are JWS compact serializations with header
  ``{"alg":"none"}`` and an empty signature. :class:`TokenValidator`
  checks them as Kafka's unsecured validator does: ``exp`` (seconds since the
  epoch) is required, ``iat`` optional, both numbers; the principal claim
  (``sub`` by default) is a non-empty string; the token must not be expired and
  not issued in the future (within the allowed clock skew), ``exp`` must come
  after ``iat``, and every required scope must be in the scope claim (a string
  of space-separated scopes or a list of strings). Audience and issuer are
  checked when expected ones are configured (KIP-768's settings).
* With a key set (:class:`JwkSet`, the identity provider's published keys;
  KIP-768's ``sasl.oauthbearer.jwks.endpoint.url``) :class:`TokenValidator`
  accepts signed tokens only: RS256/384/512, PS256/384/512 or ES256/384/512,
  verified with the key the header's ``kid`` names (or the only one that fits),
  then checked as above. Without one it accepts unsecured tokens only.
* Nothing here ever logs or puts a token into an error message.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeGuard

from .sasl import SaslAuthenticationError, SaslMisuse

__all__ = [
    "OAUTHBEARER",
    "OAuthBearerServer",
    "JwkSet",
    "OAuthClientMessage",
    "TokenValidationError",
    "TokenValidator",
    "ValidatedToken",
    "client_message",
    "parse_client_message",
    "unsecured_token",
]

OAUTHBEARER = "OAUTHBEARER"
_SEP = "\x01"
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
# RFC 6750's b64token: what may follow "Bearer ".
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_AUTHZID = re.compile(r"n,(?:a=([^,]*))?,")


class TokenValidationError(SaslAuthenticationError):
    """A token was refused.

    Attributes:
        status: the RFC 7628 status: ``invalid_token`` or ``insufficient_scope``.
        scope: the scopes that were required, for ``insufficient_scope``.
    """

    def __init__(self, message: str, status: str = "invalid_token", scope: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.scope = scope


# -- the client's message ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class OAuthClientMessage:
    """A parsed client message.

    Attributes:
        token: the bearer token.
        authzid: the authorization id ("" when none).
        extensions: the SASL extensions.
    """

    token: str
    authzid: str = ""
    extensions: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __repr__(self) -> str:  # never show the token
        return f"OAuthClientMessage(authzid={self.authzid!r}, extensions={dict(self.extensions)!r})"


def client_message(
    token: str, *, authzid: str = "", extensions: Mapping[str, str] | None = None
) -> bytes:
    """The one message an OAUTHBEARER client sends.

    Raises:
        ValueError: the token, authzid or an extension cannot be carried.
    """
    if not _TOKEN.fullmatch(token):
        raise ValueError("an OAuth bearer token must be a non-empty b64token (RFC 6750)")
    if "," in authzid or "=" in authzid:
        raise ValueError("the authorization id cannot contain ',' or '='")
    parts = [f"n,{'a=' + authzid if authzid else ''},", f"auth=Bearer {token}"]
    for key, value in (extensions or {}).items():
        _check_extension(key, value, ValueError)
        parts.append(f"{key}={value}")
    return (_SEP.join(parts) + _SEP + _SEP).encode()


def parse_client_message(message: bytes) -> OAuthClientMessage:
    """Parse a client's message.

    Raises:
        SaslAuthenticationError: it is not a well-formed OAUTHBEARER message.
    """
    try:
        text = message.decode("ascii")
    except UnicodeDecodeError:
        raise SaslAuthenticationError("invalid OAUTHBEARER message: not ASCII") from None
    header = _AUTHZID.match(text)
    if header is None or not text.endswith(_SEP + _SEP):
        raise SaslAuthenticationError(
            "invalid OAUTHBEARER message: expected a GS2 header and key=value pairs "
            "separated by 0x01"
        )
    body = text[header.end() :]
    if not body.startswith(_SEP):
        raise SaslAuthenticationError("invalid OAUTHBEARER message: 0x01 must follow the header")
    pairs = body[1:-2].split(_SEP)
    token: str | None = None
    extensions: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SaslAuthenticationError("invalid OAUTHBEARER message: a pair has no '='")
        if key == "auth":
            scheme, _, candidate = value.partition(" ")
            if scheme.lower() != "bearer" or not _TOKEN.fullmatch(candidate) or token is not None:
                raise SaslAuthenticationError(
                    "invalid OAUTHBEARER message: auth must be 'Bearer <token>', once"
                )
            token = candidate
            continue
        _check_extension(key, value, SaslAuthenticationError)
        if key in extensions:
            raise SaslAuthenticationError(f"invalid OAUTHBEARER message: extension {key} twice")
        extensions[key] = value
    if token is None:
        raise SaslAuthenticationError("invalid OAUTHBEARER message: no auth=Bearer <token>")
    return OAuthClientMessage(token, header.group(1) or "", extensions)


def _check_extension(key: str, value: str, error: Callable[[str], Exception]) -> None:
    if key == "auth" or not _KEY.fullmatch(key):
        raise error(f"invalid SASL extension name {key!r}: letters only, and not 'auth'")
    if not _VALUE.fullmatch(value):
        raise error(f"invalid value of SASL extension {key!r}")


# -- unsecured tokens --------------------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise TokenValidationError("the token is not base64url JWS") from None


def unsecured_token(
    principal: str,
    *,
    now_ms: int,
    lifetime_ms: int = 3_600_000,
    scope: Iterable[str] = (),
    principal_claim: str = "sub",
    claims: Mapping[str, Any] | None = None,
) -> str:
    """An unsecured JWS (``alg: none``), as Kafka's and librdkafka's development
    token builders make: for tests and for brokers validating unsecured tokens.

    Args:
        principal: the principal's name.
        now_ms: the issue time.
        lifetime_ms: how long the token is valid.
        scope: scopes, sent as a list claim ``scope``.
        principal_claim: the claim naming the principal.
        claims: more claims (they win over the computed ones).
    """
    payload: dict[str, Any] = {
        principal_claim: principal,
        "iat": now_ms / 1000,
        "exp": (now_ms + lifetime_ms) / 1000,
    }
    scopes = list(scope)
    if scopes:
        payload["scope"] = scopes
    payload.update(claims or {})
    header = _b64url(json.dumps({"alg": "none"}, separators=(",", ":")).encode())
    body = _b64url(json.dumps(payload, separators=(",", ":")).encode())
    return f"{header}.{body}."


@dataclasses.dataclass(frozen=True, slots=True)
class ValidatedToken:
    """What a valid token says.

    Attributes:
        principal: who it names.
        expires_ms: when it expires (ms since the epoch).
        scope: its scopes.
        claims: every claim.
    """

    principal: str
    expires_ms: int
    scope: frozenset[str]
    claims: Mapping[str, Any] = dataclasses.field(repr=False, default_factory=dict)


# JWS algorithms a key set may verify: (key type, hash, padding or curve).
_ALGORITHMS = {
    "RS256": ("RSA", "SHA256", "pkcs1"),
    "RS384": ("RSA", "SHA384", "pkcs1"),
    "RS512": ("RSA", "SHA512", "pkcs1"),
    "PS256": ("RSA", "SHA256", "pss"),
    "PS384": ("RSA", "SHA384", "pss"),
    "PS512": ("RSA", "SHA512", "pss"),
    "ES256": ("EC", "SHA256", "P-256"),
    "ES384": ("EC", "SHA384", "P-384"),
    "ES512": ("EC", "SHA512", "P-521"),
}
_CURVE_BYTES = {"P-256": 32, "P-384": 48, "P-521": 66}


@dataclasses.dataclass(frozen=True, slots=True)
class Jwk:
    """One public key of a JWK set (RFC 7517): RSA or EC, for signatures."""

    kid: str | None
    kty: str
    crv: str | None
    alg: str | None
    public_key: Any = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True, slots=True)
class JwkSet:
    """The public keys an identity provider publishes (its ``jwks_uri``).

    Keys whose ``use`` is not ``sig``, and kinds other than RSA and EC (P-256,
    P-384, P-521), are left out. Needs the ``cryptography`` package.
    """

    keys: tuple[Jwk, ...]

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any]) -> JwkSet:
        """Parse a JWK set document.

        Raises:
            ValueError: not a JWK set, a key that cannot be read, or no usable key.
            ImportError: the ``cryptography`` package is missing.
        """
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        document = json.loads(data) if isinstance(data, bytes | str) else data
        if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
            raise ValueError("a JWK set is a JSON object with a keys list")
        curves = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1(), "P-521": ec.SECP521R1()}
        keys = []
        for entry in document["keys"]:
            if not isinstance(entry, Mapping) or entry.get("use", "sig") != "sig":
                continue
            kty, kid = entry.get("kty"), entry.get("kid")
            try:
                if kty == "RSA":
                    public: Any = rsa.RSAPublicNumbers(
                        _b64_int(entry["e"]), _b64_int(entry["n"])
                    ).public_key()
                    crv = None
                elif kty == "EC" and entry.get("crv") in curves:
                    crv = entry["crv"]
                    public = ec.EllipticCurvePublicNumbers(
                        _b64_int(entry["x"]), _b64_int(entry["y"]), curves[crv]
                    ).public_key()
                else:
                    continue
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"JWK {kid!r} cannot be read: {exc}") from None
            keys.append(
                Jwk(kid if isinstance(kid, str) else None, kty, crv, entry.get("alg"), public)
            )
        if not keys:
            raise ValueError("the JWK set has no RSA or EC signing key")
        return cls(tuple(keys))

    def verify(self, header: Mapping[str, Any], signing_input: bytes, signature: bytes) -> None:
        """Check a JWS signature with the key the header names.

        Raises:
            TokenValidationError: an algorithm not allowed, no such key, or a bad signature.
        """
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding, utils

        alg = header.get("alg")
        if alg not in _ALGORITHMS:
            raise TokenValidationError(
                f"the token's algorithm {alg!r} is not one of {', '.join(_ALGORITHMS)}"
            )
        kty, digest_name, mode = _ALGORITHMS[alg]
        kid = header.get("kid")
        candidates = [
            k
            for k in self.keys
            if k.kty == kty
            and (kid is None or k.kid == kid)
            and (k.alg is None or k.alg == alg)
            and (kty != "EC" or k.crv == mode)
        ]
        if kid is None and len(candidates) > 1:
            raise TokenValidationError("the token names no key (kid) and several keys fit")
        if not candidates:
            raise TokenValidationError(f"no key in the key set verifies the token (kid {kid!r})")
        key = candidates[0].public_key
        digest = getattr(hashes, digest_name)()
        try:
            if kty == "RSA":
                pad: Any = (
                    padding.PKCS1v15()
                    if mode == "pkcs1"
                    else padding.PSS(padding.MGF1(digest), digest.digest_size)
                )
                key.verify(signature, signing_input, pad, digest)
            else:
                size = _CURVE_BYTES[mode]
                if len(signature) != 2 * size:
                    raise TokenValidationError("the token's signature has the wrong length")
                r = int.from_bytes(signature[:size], "big")
                s_ = int.from_bytes(signature[size:], "big")
                key.verify(utils.encode_dss_signature(r, s_), signing_input, ec.ECDSA(digest))
        except InvalidSignature:
            raise TokenValidationError("the token's signature does not verify") from None


def _b64_int(text: Any) -> int:
    if not isinstance(text, str):
        raise ValueError("a key parameter is not a string")
    return int.from_bytes(_b64url_decode(text), "big")


@dataclasses.dataclass(frozen=True, slots=True)
class TokenValidator:
    """Kafka's token validation (see the module rules): unsecured tokens, or
    tokens signed with a key of ``keys`` when a key set is given (KIP-768).

    Attributes:
        principal_claim: the claim naming the principal (Kafka's
            ``sasl.oauthbearer.sub.claim.name``).
        scope_claim: the claim holding the scopes (``sasl.oauthbearer.scope.claim.name``).
        required_scopes: scopes every token must have.
        clock_skew_ms: how far the issue and expiry times may be off.
        expected_audience: when not empty, the ``aud`` claim must name one of these.
        expected_issuer: when set, the ``iss`` claim must equal it.
        keys: the identity provider's public keys; None accepts unsecured tokens
            only (``alg: none``), a key set signed ones only.
    """

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scopes: Sequence[str] = ()
    clock_skew_ms: int = 30_000
    expected_audience: Sequence[str] = ()
    expected_issuer: str | None = None
    keys: JwkSet | None = None

    def validate(self, token: str, now_ms: int) -> ValidatedToken:
        """Check ``token`` at time ``now_ms``.

        Raises:
            TokenValidationError: the token is malformed, expired, not yet
                valid, or lacks a required claim, audience, issuer or scope.
        """
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenValidationError("the token is not a JWS compact serialization")
        header = _json_object(parts[0], "header")
        if self.keys is None:
            if parts[2]:
                raise TokenValidationError(
                    "the token is signed; this broker accepts unsecured tokens (alg none) only"
                )
            if header.get("alg") != "none":
                raise TokenValidationError("the token's header must say alg none")
        else:
            if header.get("alg") == "none" or not parts[2]:
                raise TokenValidationError(
                    "the token is unsecured; this broker accepts signed tokens only"
                )
            signing_input = f"{parts[0]}.{parts[1]}".encode("ascii")
            self.keys.verify(header, signing_input, _b64url_decode(parts[2]))
        claims = _json_object(parts[1], "payload")
        expires = claims.get("exp")
        if not _is_number(expires):
            raise TokenValidationError("the token has no numeric exp claim")
        issued = claims.get("iat")
        if issued is not None and not _is_number(issued):
            raise TokenValidationError("the token's iat claim is not a number")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenValidationError(
                f"the token has no principal (a non-empty {self.principal_claim!r} claim)"
            )
        skew = self.clock_skew_ms
        expires_ms = int(expires * 1000)
        if now_ms > expires_ms + skew:
            raise TokenValidationError("the token has expired")
        if issued is not None:
            issued_ms = int(issued * 1000)
            if issued_ms > now_ms + skew:
                raise TokenValidationError("the token is issued in the future")
            if expires_ms <= issued_ms:
                raise TokenValidationError("the token expires before it is issued")
        if self.expected_issuer is not None and claims.get("iss") != self.expected_issuer:
            raise TokenValidationError("the token's issuer (iss) is not the expected one")
        if self.expected_audience:
            audience = claims.get("aud")
            names = [audience] if isinstance(audience, str) else audience
            if not isinstance(names, list) or not set(names) & set(self.expected_audience):
                raise TokenValidationError("the token's audience (aud) is not an expected one")
        scope = _scopes(claims.get(self.scope_claim))
        missing = [s for s in self.required_scopes if s not in scope]
        if missing:
            raise TokenValidationError(
                f"the token lacks the required scope(s) {' '.join(missing)}",
                status="insufficient_scope",
                scope=" ".join(self.required_scopes),
            )
        return ValidatedToken(principal, expires_ms, scope, claims)


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json_object(part: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(_b64url_decode(part))
    except (ValueError, UnicodeDecodeError):
        raise TokenValidationError(f"the token's {what} is not JSON") from None
    if not isinstance(value, dict):
        raise TokenValidationError(f"the token's {what} is not a JSON object")
    return value


def _scopes(value: Any) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return frozenset(value)
    raise TokenValidationError("the token's scope claim is not a string or a list of strings")


# -- the server --------------------------------------------------------------------------


class OAuthBearerServer:
    """The server side of OAUTHBEARER.

    ``validate(token)`` returns the token's principal or raises
    :class:`TokenValidationError` (any other :class:`SaslAuthenticationError`
    fails the authentication at once).
    """

    def __init__(self, validate: Callable[[str], str]) -> None:
        self._validate = validate
        self._failure: TokenValidationError | None = None
        self._done = False
        self.username: str | None = None
        self.extensions: Mapping[str, str] = {}
        self.complete = False

    def respond(self, message: bytes) -> bytes:
        """Take a client message; returns the answer (empty on success).

        Raises:
            SaslAuthenticationError: a malformed message, or the client's
                ``0x01`` after an error answer (carrying the refusal's reason).
            SaslMisuse: called after the exchange ended.
        """
        if self._done:
            raise SaslMisuse("the OAUTHBEARER exchange is over")
        if self._failure is not None:
            self._done = True
            failure = self._failure
            if message != _SEP.encode():
                raise SaslAuthenticationError(
                    "invalid OAUTHBEARER message: only 0x01 may follow an error answer"
                )
            raise SaslAuthenticationError(f"authentication failed: {failure}")
        parsed = parse_client_message(message)
        try:
            principal = self._validate(parsed.token)
        except TokenValidationError as exc:
            self._failure = exc
            error: dict[str, str] = {"status": exc.status}
            if exc.scope:
                error["scope"] = exc.scope
            return json.dumps(error, separators=(",", ":")).encode()
        if parsed.authzid and parsed.authzid != principal:
            self._done = True
            raise SaslAuthenticationError(
                "authentication failed: the authorization id is not the token's principal"
            )
        self._done = True
        self.username = principal
        self.extensions = dict(parsed.extensions)
        self.complete = True
        return b""
