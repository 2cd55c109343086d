"""SASL mechanisms Kafka speaks inside SaslAuthenticate: PLAIN and SCRAM, both sides.

Pure: bytes in, bytes out, no sockets and no clocks; the SDK (client side) and
brokerlite (server side) drive these objects from their own I/O.

Rules and invariants:

* PLAIN (RFC 4616) is one client message, ``authzid NUL authcid NUL passwd``
  (UTF-8), and an empty server answer.
* SCRAM (RFC 5802, with the SHA-256 and SHA-512 hashes of RFC 7677 and Kafka's
  KIP-84) is two round trips: client-first, server-first, client-final,
  server-final. Kafka uses no channel binding: the GS2 header is ``n,,`` (or
  ``n,a=<authzid>,``), so ``c=`` carries base64 of that header.
* Each side is a small state machine that accepts its messages in order only;
  calling a step twice or out of order raises :class:`SaslMisuse` (the
  caller's bug), while a malformed or wrong message from the peer raises
  :class:`SaslAuthenticationError` (the peer's fault, or wrong credentials).
* A server never says which part of the credentials was wrong: an unknown user
  and a wrong password fail alike, and for an unknown user it still answers the
  first message (with a made-up salt) so the client cannot probe for names. The
  made-up salt is keyed by a secret of the process, so it is stable for a name
  but cannot be computed by a client (an unkeyed hash of the name could), and
  the proof of an unknown user is checked against made-up keys, so that both
  failures do the same work.
* The server requires the client-final nonce to be the server-first nonce,
  with one exception kept for interoperability: librdkafka before 2.6.1 sends
  its own nonce once more in front of it (librdkafka issue 4895). That form
  is accepted exactly (not any prefix, unlike Kafka 3.8.1's ``endsWith``): it
  still holds the server's fresh nonce, and the proof covers it, so it gives a
  replay no more chance than the strict form.
* The server checks the channel binding ``c=`` against the GS2 header the
  client actually sent in its first message.
* Proofs and signatures are compared with :func:`hmac.compare_digest`.
* Usernames are escaped as RFC 5802 says (``,`` as ``=2C``, ``=`` as ``=3D``);
  any other ``=`` in a received name is an error.
* SCRAM extensions (Kafka's, KIP-48): ``,key=value`` pairs after the client
  nonce in the client-first message, part of the bare message the proofs
  cover. Kafka knows one, ``tokenauth``: ``true`` (any case, as Java's
  ``Boolean.parseBoolean``) makes the name a delegation token id, whose
  credential the server looks up with ``token_lookup`` instead of ``lookup``.
  Other extensions are kept in ``extensions`` and otherwise ignored, as Kafka
  ignores them; a key must be letters, digits or ``_``, and may not repeat.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping

from .errors import TrafkaError

__all__ = [
    "MECHANISMS",
    "SCRAM_MECHANISMS",
    "SCRAM_MECHANISM_NAMES",
    "SCRAM_MECHANISM_TYPES",
    "PlainServer",
    "SaslAuthenticationError",
    "SaslError",
    "SaslMisuse",
    "ScramClient",
    "ScramCredential",
    "ScramServer",
    "plain_message",
    "salted_password",
]

SCRAM_MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
# Kafka's numbers for the SCRAM mechanisms in DescribeUserScramCredentials and
# AlterUserScramCredentials (KIP-554); 0 is Kafka's UNKNOWN and has no name.
SCRAM_MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
SCRAM_MECHANISM_NAMES = {number: name for name, number in SCRAM_MECHANISM_TYPES.items()}

# Kafka refuses SCRAM credentials below 4096 iterations (and above 16384).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
_NONCE_BYTES = 24
# Keys the made-up salts of unknown users (see the module's rules).
_DECOY_KEY = secrets.token_bytes(32)
_EXTENSION_KEY = re.compile(r"[A-Za-z0-9_]+")


class SaslError(TrafkaError):
    """Root of the SASL errors."""


class SaslAuthenticationError(SaslError):
    """The peer sent a malformed SASL message, or the credentials are wrong."""


class SaslMisuse(SaslError, RuntimeError):
    """A SASL state machine was driven out of order (a bug in the caller)."""


# -- PLAIN -------------------------------------------------------------------------------


def plain_message(username: str, password: str, authzid: str = "") -> bytes:
    """The one message a PLAIN client sends."""
    for name, value in (("username", username), ("password", password), ("authzid", authzid)):
        if "\0" in value:
            raise ValueError(f"a SASL/PLAIN {name} cannot contain NUL")
    if not username:
        raise ValueError("SASL/PLAIN needs a username")
    return f"{authzid}\0{username}\0{password}".encode()


class PlainServer:
    """The server side of PLAIN: one message, checked against ``lookup``.

    ``lookup(username)`` returns the user's password, or None for an unknown user.
    """

    def __init__(self, lookup: Callable[[str], str | None]) -> None:
        self._lookup = lookup
        self.username: str | None = None
        self.complete = False

    def respond(self, message: bytes) -> bytes:
        """Check the client's message; returns the (empty) answer.

        Raises:
            SaslAuthenticationError: malformed message or wrong credentials.
            SaslMisuse: called again after it finished.
        """
        if self.complete:
            raise SaslMisuse("SASL/PLAIN takes one message")
        parts = _utf8(message, "PLAIN message").split("\0")
        if len(parts) != 3:
            raise SaslAuthenticationError(
                "invalid SASL/PLAIN message: expected authzid, username and password "
                "separated by NUL"
            )
        authzid, username, password = parts
        if not username or not password:
            raise SaslAuthenticationError("invalid SASL/PLAIN message: empty username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "SASL/PLAIN authorization id must be empty or equal the username"
            )
        expected = self._lookup(username)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationError(
                "authentication failed: invalid username or password (SASL/PLAIN)"
            )
        self.username = username
        self.complete = True
        return b""


# -- SCRAM -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server stores for a SCRAM user (never the password itself).

    The salt and keys stay out of ``repr``, so that a log line never shows them.
    """

    mechanism: str
    salt: bytes = dataclasses.field(repr=False)
    iterations: int
    stored_key: bytes = dataclasses.field(repr=False)
    server_key: bytes = dataclasses.field(repr=False)

    @classmethod
    def from_password(
        cls,
        mechanism: str,
        password: str,
        *,
        salt: bytes | None = None,
        iterations: int = MIN_ITERATIONS,
    ) -> ScramCredential:
        algo = _algorithm(mechanism)
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(
                f"SCRAM iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"
            )
        salt = secrets.token_bytes(32) if salt is None else salt
        return cls.from_salted_password(
            mechanism, salt, iterations, _salted_password(algo, password, salt, iterations)
        )

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, iterations: int, salted: bytes
    ) -> ScramCredential:
        """The credential of a password a client salted itself (KIP-554's upsertion).

        ``salted`` is ``Hi(password, salt, iterations)`` (:func:`salted_password`);
        the iteration count is not checked here (the caller decides what it accepts).
        """
        algo = _algorithm(mechanism)
        client_key = _hmac(algo, salted, b"Client Key")
        return cls(
            mechanism=mechanism,
            salt=bytes(salt),
            iterations=iterations,
            stored_key=hashlib.new(algo, client_key).digest(),
            server_key=_hmac(algo, salted, b"Server Key"),
        )


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SCRAM's ``SaltedPassword``: PBKDF2 of the UTF-8 password with the mechanism's hash.

    What an AlterUserScramCredentials upsertion carries instead of the password.

    Raises:
        ValueError: an unknown mechanism.
    """
    return _salted_password(_algorithm(mechanism), password, salt, iterations)


class ScramClient:
    """The client side of SCRAM: ``first_message()``, then ``final_message(server_first)``,
    then ``verify(server_final)``.

    ``extensions`` are Kafka's SCRAM extensions (``{"tokenauth": "true"}`` to
    log in with a delegation token: its id as the user, its HMAC in base64 as
    the password). ``nonce`` is for tests (RFC 7677's example); leave it None.

    Raises:
        ValueError: an extension key or value that cannot be sent.
    """

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        extensions: Mapping[str, str] | None = None,
        nonce: str | None = None,
    ) -> None:
        self._algo = _algorithm(mechanism)
        self.mechanism = mechanism
        self._password = password
        self._nonce = nonce or _new_nonce()
        extra = ""
        for key, value in (extensions or {}).items():
            if not _EXTENSION_KEY.fullmatch(key) or "," in value:
                raise ValueError(f"SCRAM extension {key!r}={value!r} cannot be sent")
            extra += f",{key}={value}"
        self._bare = f"n={_escape(username)},r={self._nonce}{extra}"
        self._step = 0
        self._server_signature = b""

    def first_message(self) -> bytes:
        self._advance(0)
        return f"n,,{self._bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        """The client-final message, with the proof, for the server's first message.

        Raises:
            SaslAuthenticationError: the server's message is malformed, its nonce
                does not extend ours, or its iteration count is too low.
        """
        self._advance(1)
        text = _utf8(server_first, "SCRAM server-first message")
        attrs = _attributes(text, "server-first")
        if "e" in attrs:
            raise SaslAuthenticationError(f"SCRAM server error: {attrs['e']}")
        nonce, salt_b64, iterations_text = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if nonce is None or salt_b64 is None or iterations_text is None:
            raise SaslAuthenticationError("SCRAM server-first message lacks r, s or i")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslAuthenticationError("SCRAM server nonce does not extend the client's")
        salt = _b64decode(salt_b64, "salt")
        if not iterations_text.isdigit() or int(iterations_text) < MIN_ITERATIONS:
            raise SaslAuthenticationError(
                f"SCRAM iteration count {iterations_text!r} is invalid or below {MIN_ITERATIONS}"
            )
        if int(iterations_text) > 10 * MAX_ITERATIONS:
            raise SaslAuthenticationError(f"SCRAM iteration count {iterations_text} is too high")
        algo = self._algo
        # Cached: every connection of a client meets the same salt and count.
        salted = _cached_salted_password(algo, self._password, salt, int(iterations_text))
        client_key = _hmac(algo, salted, b"Client Key")
        stored_key = hashlib.new(algo, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_signature = _hmac(algo, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        self._server_signature = _hmac(algo, _hmac(algo, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """Check the server's signature: proof that it knew the credentials too.

        Raises:
            SaslAuthenticationError: the server reported an error, or its
                signature is wrong.
        """
        self._advance(2)
        attrs = _attributes(_utf8(server_final, "SCRAM server-final message"), "server-final")
        if "e" in attrs:
            raise SaslAuthenticationError(f"SCRAM authentication failed: {attrs['e']}")
        signature = attrs.get("v")
        if signature is None:
            raise SaslAuthenticationError("SCRAM server-final message lacks v")
        if not hmac.compare_digest(_b64decode(signature, "signature"), self._server_signature):
            raise SaslAuthenticationError("SCRAM server signature is wrong")

    @property
    def complete(self) -> bool:
        return self._step == 3

    def _advance(self, expected: int) -> None:
        if self._step != expected:
            raise SaslMisuse(f"SCRAM client step {expected + 1} called at step {self._step + 1}")
        self._step += 1


class ScramServer:
    """The server side of SCRAM: ``server_first(client_first)``, then
    ``server_final(client_final)``; ``username`` is set once it succeeded.

    ``lookup(username)`` returns the user's credential for this mechanism, or None;
    ``token_lookup(token_id)`` the credential of a delegation token (a client
    sending ``tokenauth=true``), or None (no token logins without it). Once
    complete, ``username`` is the name the client sent (for a token: its id),
    ``token_auth`` tells which kind it was, and ``extensions`` holds the
    client's extensions.
    """

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        *,
        token_lookup: Callable[[str], ScramCredential | None] | None = None,
        nonce: str | None = None,
    ) -> None:
        self._algo = _algorithm(mechanism)
        self.mechanism = mechanism
        self._lookup = lookup
        self._token_lookup = token_lookup
        self.extensions: dict[str, str] = {}
        self.token_auth = False
        self._server_nonce = nonce or _new_nonce()
        self._step = 0
        self._credential: ScramCredential | None = None
        self._known = False
        self._gs2_header = ""
        self._client_nonce = ""
        self._claimed = ""
        self._client_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.username: str | None = None

    @property
    def complete(self) -> bool:
        return self.username is not None

    def server_first(self, client_first: bytes) -> bytes:
        """Answer the client's first message.

        Raises:
            SaslAuthenticationError: the message is malformed or asks for channel
                binding or an authorization id other than the user.
        """
        self._advance(0)
        text = _utf8(client_first, "SCRAM client-first message")
        gs2, sep, bare = text.partition(",")
        authzid, sep2, bare = bare.partition(",")
        if not sep or not sep2:
            raise SaslAuthenticationError("invalid SCRAM client-first message")
        if gs2 != "n":
            raise SaslAuthenticationError("SCRAM channel binding is not supported")
        name, nonce, extensions = _client_first_bare(bare)
        username = _unescape(name)
        if authzid and authzid != f"a={name}":
            raise SaslAuthenticationError(
                "SCRAM authorization id must be empty or equal the username"
            )
        if any(not (0x21 <= ord(c) <= 0x7E) or c == "," for c in nonce):
            raise SaslAuthenticationError("invalid SCRAM client nonce")
        self.extensions = extensions
        self.token_auth = extensions.get("tokenauth", "").lower() == "true"
        if self.token_auth:
            token_lookup = self._token_lookup
            credential = None if token_lookup is None else token_lookup(username)
        else:
            credential = self._lookup(username)
        if credential is not None and credential.mechanism != self.mechanism:
            credential = None
        self._known = credential is not None
        if credential is None:
            # An unknown user gets a plausible answer; the proof check fails later.
            credential = _decoy_credential(self.mechanism, username)
        self._credential = credential
        self._gs2_header = f"{gs2},{authzid},"
        self._claimed = username
        self._client_bare = bare
        self._client_nonce = nonce
        self._nonce = nonce + self._server_nonce
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def server_final(self, client_final: bytes) -> bytes:
        """Check the client's proof and answer with the server signature.

        Raises:
            SaslAuthenticationError: malformed message, wrong nonce or channel
                binding, or wrong credentials (unknown user and wrong password
                alike).
        """
        self._advance(1)
        text = _utf8(client_final, "SCRAM client-final message")
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationError("SCRAM client-final message lacks p")
        attrs = _attributes(without_proof, "client-final")
        if attrs.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise SaslAuthenticationError("SCRAM channel binding data does not match")
        if attrs.get("r") not in (self._nonce, self._client_nonce + self._nonce):
            raise SaslAuthenticationError("SCRAM nonce does not match")
        proof = _b64decode(proof_part, "proof")
        credential = self._credential
        assert credential is not None  # set by server_first
        algo = self._algo
        auth_message = f"{self._client_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(algo, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise _bad_credentials(self.mechanism)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(algo, client_key).digest(), credential.stored_key):
            raise _bad_credentials(self.mechanism)
        if not self._known:  # (made-up keys never match; this does not rely on it)
            raise _bad_credentials(self.mechanism)
        self.username = self._claimed
        signature = _hmac(algo, credential.server_key, auth_message)
        return f"v={base64.b64encode(signature).decode()}".encode()

    def _advance(self, expected: int) -> None:
        if self._step != expected:
            raise SaslMisuse(f"SCRAM server step {expected + 1} called at step {self._step + 1}")
        self._step += 1


# -- helpers -----------------------------------------------------------------------------


def _algorithm(mechanism: str) -> str:
    try:
        return SCRAM_MECHANISMS[mechanism]
    except KeyError:
        raise ValueError(
            f"unknown SCRAM mechanism {mechanism!r}; known: {', '.join(SCRAM_MECHANISMS)}"
        ) from None


def _decoy_credential(mechanism: str, username: str) -> ScramCredential:
    """Made-up SCRAM credentials of an unknown user: a salt stable for the name
    (keyed, so only this process can compute it) and keys nothing matches."""
    size = hashlib.new(_algorithm(mechanism)).digest_size
    return ScramCredential(
        mechanism=mechanism,
        salt=_hmac("sha256", _DECOY_KEY, f"{mechanism}\0{username}".encode()),
        iterations=MIN_ITERATIONS,
        stored_key=secrets.token_bytes(size),
        server_key=secrets.token_bytes(size),
    )


def _bad_credentials(mechanism: str) -> SaslAuthenticationError:
    # Kafka's words (its broker's answer to any failed SCRAM exchange), which its
    # clients and scripts print as they are
    return SaslAuthenticationError(
        "Authentication failed during authentication due to invalid credentials with "
        f"SASL mechanism {mechanism}"
    )


def _new_nonce() -> str:
    return base64.b64encode(secrets.token_bytes(_NONCE_BYTES)).decode()


def _hmac(algo: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, algo).digest()


def _salted_password(algo: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(algo, password.encode(), salt, iterations)


@functools.lru_cache(maxsize=16)
def _cached_salted_password(algo: str, password: str, salt: bytes, iterations: int) -> bytes:
    return _salted_password(algo, password, salt, iterations)


def _utf8(message: bytes, what: str) -> str:
    try:
        return bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationError(f"{what} is not valid UTF-8") from None


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise SaslAuthenticationError(f"SCRAM {what} is not valid base64") from None


def _attributes(text: str, what: str) -> dict[str, str]:
    """``a=1,b=2`` as a dict; repeated or nameless attributes are errors."""
    attrs: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1 or not key.isalpha() or key in attrs:
            raise SaslAuthenticationError(f"invalid SCRAM {what} message")
        attrs[key] = value
    return attrs


def _client_first_bare(bare: str) -> tuple[str, str, dict[str, str]]:
    """The name, nonce and extensions of a client-first message's bare part
    (``n=<name>,r=<nonce>[,<key>=<value>]...``).

    Raises:
        SaslAuthenticationError: it is malformed.
    """
    items = bare.split(",")
    if len(items) < 2 or not items[0].startswith("n=") or not items[1].startswith("r="):
        raise SaslAuthenticationError("SCRAM client-first message lacks n or r")
    name, nonce = items[0][2:], items[1][2:]
    if not name or not nonce:
        raise SaslAuthenticationError("SCRAM client-first message lacks n or r")
    extensions: dict[str, str] = {}
    for item in items[2:]:
        key, sep, value = item.partition("=")
        if not sep or not _EXTENSION_KEY.fullmatch(key) or key in extensions:
            raise SaslAuthenticationError("invalid SCRAM extension in the client-first message")
        extensions[key] = value
    return name, nonce, extensions


def _escape(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(name):
        if name[i] != "=":
            out.append(name[i])
            i += 1
        elif name[i : i + 3] == "=2C":
            out.append(",")
            i += 3
        elif name[i : i + 3] == "=3D":
            out.append("=")
            i += 3
        else:
            raise SaslAuthenticationError("invalid SCRAM username escape")
    return "".join(out)
