"""SASL authentication on brokerlite's listener: users and each connection's state (sans-IO).

The mechanisms themselves (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) are
:mod:`trafka.codec.sasl`'s; this module decides which request may come when.
The broker core keeps one :class:`SaslSession` per connection of a SASL
listener until it has authenticated; the handlers of SaslHandshake (key 17) and
SaslAuthenticate (key 36) and the broker's request gate drive it.

Rules and invariants (Kafka's ``SaslServerAuthenticator``, KIP-43 and KIP-152):

* A connection starts in ``START``. Until it is ``DONE`` the broker answers
  ApiVersions, SaslHandshake and SaslAuthenticate only; any other request
  closes the connection unanswered.
* Transitions (anything not listed fails the session):

  ========== ============================================= =========================
  state      event                                         next
  ========== ============================================= =========================
  START      SaslHandshake v1, enabled mechanism            TOKENS
  START      SaslHandshake v0, enabled mechanism            RAW_TOKENS
  START      SaslHandshake, other mechanism                 FAILED (UNSUPPORTED_SASL_MECHANISM)
  START      SaslAuthenticate                               FAILED (ILLEGAL_SASL_STATE)
  TOKENS     SaslAuthenticate, the mechanism goes on         TOKENS
  TOKENS     SaslAuthenticate, the mechanism succeeds        DONE
  TOKENS     SaslAuthenticate, bad token or credentials      FAILED (SASL_AUTHENTICATION_FAILED)
  TOKENS     SaslHandshake                                  FAILED (ILLEGAL_SASL_STATE)
  RAW_TOKENS a frame: a bare token, answered bare            RAW_TOKENS or DONE
  RAW_TOKENS a frame the mechanism refuses                   FAILED (no answer: none is possible)
  ========== ============================================= =========================

* FAILED is final: the broker sends the error answer (if any) and closes the
  connection. A session never gets a second attempt.
* Once DONE the session is dropped. Its lifetime (KIP-368, Kafka's
  ``SaslServerAuthenticator``) is the smaller of ``connections_max_reauth_ms``
  (when positive) and, for OAUTHBEARER, the time left until the token's
  ``exp`` (for a delegation token login: until the token's expiry); never negative. With neither (PLAIN or SCRAM and the setting 0) the
  lifetime is 0 and the session never expires: SaslHandshake and
  SaslAuthenticate are then answered ILLEGAL_SASL_STATE and the connection
  stays, as Kafka does.
* Re-authentication: a session made with ``reauth_of=(mechanism, principal)``
  runs the same table on an authenticated connection. A handshake naming
  another enabled mechanism is answered NONE (as Kafka does) but the next
  token fails the session; a client that authenticates as another principal
  fails it too (SASL_AUTHENTICATION_FAILED, "cannot change principals").
* A misbehaving mechanism (an unexpected exception) fails the session like bad
  credentials, with a generic message; it never reaches another connection.
* Delegation tokens (KIP-48): a SCRAM client-first message with the extension
  ``tokenauth=true`` names a token id instead of a user; its credential comes
  from the broker's :class:`~.delegation_tokens.DelegationTokens` (derived
  from the token's HMAC), an unknown or expired token fails like a wrong
  password, and the session's principal is the token's owner, its lifetime
  bounded by the token's expiry as for an OAUTHBEARER token.
* Passwords are kept only for PLAIN (it compares them); SCRAM keeps derived
  credentials (salted, 4096 iterations), made when the broker starts. Once the
  broker hands the store its :class:`~.scram.ScramCredentials`, SCRAM logins
  look up there, where AlterUserScramCredentials changes win over the
  configuration (PLAIN passwords only ever come from the configuration).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from trafka.codec.errors import ErrorCode
from trafka.codec.oauthbearer import OAUTHBEARER, JwkSet, OAuthBearerServer, TokenValidator
from trafka.codec.sasl import (
    SCRAM_MECHANISMS,
    PlainServer,
    SaslAuthenticationError,
    ScramCredential,
    ScramServer,
)

from ..clock import mono_ms
from ..config import BrokerConfig, ConfigError, check_user, read_users_file

if TYPE_CHECKING:
    from .delegation_tokens import DelegationTokens, TokenInfo

__all__ = ["ManagedScram", "SaslSession", "SaslState", "SaslStateError", "UserStore"]


class ManagedScram(Protocol):
    """Where SCRAM logins look once credentials are managed through the admin API
    (:class:`~.scram.ScramCredentials`, which imports this module, so the port
    is declared here)."""

    def lookup(self, mechanism: str, user: str) -> ScramCredential | None:
        """The credential ``user`` logs in with by ``mechanism``; None when it has none."""
        ...


log = logging.getLogger("trafka.brokerlite")


class SaslState(enum.Enum):
    START = "start"
    TOKENS = "tokens"  # after a v1 handshake: tokens in SaslAuthenticate requests
    RAW_TOKENS = "raw tokens"  # after a v0 handshake: bare size-prefixed tokens
    DONE = "done"
    FAILED = "failed"


class SaslStateError(Exception):
    """A SASL request came out of order (ILLEGAL_SASL_STATE); the session has failed."""


class UserStore:
    """The users a SASL listener accepts, as each enabled mechanism needs them.

    Args:
        users: ``(name, password)`` pairs.
        mechanisms: the enabled mechanisms; SCRAM credentials are derived only
            for the SCRAM ones, and passwords kept only when PLAIN is enabled.
    """

    def __init__(self, users: Iterable[tuple[str, str]], mechanisms: Iterable[str]) -> None:
        enabled = set(mechanisms)
        users = list(users)
        self.names = frozenset(name for name, _ in users)
        self._passwords: dict[str, str] = {}
        self._scram: dict[str, dict[str, ScramCredential]] = {
            mechanism: {} for mechanism in SCRAM_MECHANISMS if mechanism in enabled
        }
        self._managed: ManagedScram | None = None
        self._tokens: DelegationTokens | None = None
        #: How OAUTHBEARER tokens are checked (Kafka's unsecured validator).
        self.token_validator = TokenValidator()
        keep_passwords = "PLAIN" in enabled
        for name, password in users:
            if keep_passwords:
                self._passwords[name] = password
            for mechanism, credentials in self._scram.items():
                credentials[name] = ScramCredential.from_password(mechanism, password)

    @classmethod
    def from_config(cls, config: BrokerConfig) -> UserStore:
        """The users of ``config.sasl_users`` and ``config.sasl_users_file``.

        Raises:
            ConfigError: the users file cannot be read or is malformed, a user
                is given twice, or there is no user at all.
        """
        users = list(config.sasl_users)
        if config.sasl_users_file is not None:
            seen = {name for name, _ in users}
            for name, password in read_users_file(config.sasl_users_file):
                users.append(check_user(name, password, str(config.sasl_users_file), seen))
        if not users and any(m != OAUTHBEARER for m in config.sasl_enabled_mechanisms):
            raise ConfigError(f"security_protocol {config.security_protocol}: no SASL users")
        store = cls(users, config.sasl_enabled_mechanisms)
        store.token_validator = TokenValidator(
            principal_claim=config.sasl_oauthbearer_sub_claim_name,
            scope_claim=config.sasl_oauthbearer_scope_claim_name,
            required_scopes=config.sasl_oauthbearer_required_scopes,
            clock_skew_ms=config.sasl_oauthbearer_clock_skew_seconds * 1000,
            expected_audience=config.sasl_oauthbearer_expected_audience,
            expected_issuer=config.sasl_oauthbearer_expected_issuer,
            keys=None if config.sasl_oauthbearer_jwks_endpoint_url is None else JwkSet(()),
        )
        return store

    def set_token_keys(self, keys: JwkSet) -> None:
        """Verify OAUTHBEARER tokens with ``keys`` from now on (a JWKS refresh)."""
        self.token_validator = dataclasses.replace(self.token_validator, keys=keys)

    def password(self, name: str) -> str | None:
        """The PLAIN password of ``name``; None for an unknown user."""
        return self._passwords.get(name)

    def scram_credential(self, mechanism: str, name: str) -> ScramCredential | None:
        """The SCRAM credential of ``name`` for ``mechanism``; None when unknown."""
        if self._managed is not None:
            return self._managed.lookup(mechanism, name)
        return self._scram.get(mechanism, {}).get(name)

    def configured_scram(self) -> Mapping[str, Mapping[str, ScramCredential]]:
        """The SCRAM credentials derived from the configuration, by mechanism then user."""
        return self._scram

    def manage_scram(self, credentials: ManagedScram) -> None:
        """Look SCRAM credentials up in ``credentials`` from now on (the
        configuration's, changed through AlterUserScramCredentials)."""
        self._managed = credentials

    def manage_tokens(self, tokens: DelegationTokens) -> None:
        """Accept SCRAM logins with the delegation tokens of ``tokens``."""
        self._tokens = tokens

    def token_credential(
        self, mechanism: str, token_id: str, now_ms: int
    ) -> ScramCredential | None:
        """The SCRAM credential of a live delegation token; None when unknown."""
        tokens = self._tokens
        return None if tokens is None else tokens.scram_credential(mechanism, token_id, now_ms)

    def token_login(self, token_id: str, now_ms: int) -> TokenInfo | None:
        """The live delegation token a SCRAM token login completed with."""
        tokens = self._tokens
        return None if tokens is None else tokens.login(token_id, now_ms)


class SaslSession:
    """One connection's SASL authentication (see the module's transition table).

    Args:
        users: who may authenticate.
        mechanisms: the enabled mechanisms, in the order SaslHandshake lists them.
        max_reauth_ms: ``connections_max_reauth_ms`` (0: no limit of its own).
        reauth_of: for a re-authentication, the connection's mechanism and
            principal, which must not change.

    Once DONE, ``session_lifetime_ms`` is the lifetime to answer (0: none) and
    ``expires_ms`` the time the session ends (monotonic ms; None: never).
    """

    def __init__(
        self,
        users: UserStore,
        mechanisms: tuple[str, ...],
        *,
        max_reauth_ms: int = 0,
        reauth_of: tuple[str, str] | None = None,
    ) -> None:
        self._users = users
        self.mechanisms = mechanisms
        self.state = SaslState.START
        self.mechanism: str | None = None
        self.username: str | None = None
        #: The delegation token a SCRAM login used (``tokenauth=true``); None otherwise.
        self.token_id: str | None = None
        self.reauth_of = reauth_of
        self.session_lifetime_ms = 0
        self.expires_ms: int | None = None
        self._max_reauth_ms = max_reauth_ms
        self._server: PlainServer | ScramServer | OAuthBearerServer | None = None
        self._first_done = False  # SCRAM: the server-first message was sent
        self._now_ms = 0  # the time of the token being checked (OAUTHBEARER)
        self._token_expires_ms: int | None = None  # OAUTHBEARER: the accepted token's exp
        self._bad_mechanism: str | None = None  # re-authentication with another mechanism

    @property
    def raw_tokens(self) -> bool:
        """True when the next frame is a bare token (after a v0 SaslHandshake)."""
        return self.state is SaslState.RAW_TOKENS

    def handshake(self, mechanism: str, version: int) -> ErrorCode:
        """A SaslHandshake asking for ``mechanism``.

        Returns:
            NONE (the tokens follow), or the error to answer with, after which
            the session has FAILED: UNSUPPORTED_SASL_MECHANISM, or
            ILLEGAL_SASL_STATE for a second handshake.
        """
        if self.state is not SaslState.START:
            self.state = SaslState.FAILED
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self.mechanisms:
            self.state = SaslState.FAILED
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        users = self._users
        if mechanism == "PLAIN":
            self._server = PlainServer(users.password)
        elif mechanism == OAUTHBEARER:
            validator = users.token_validator
            self._server = OAuthBearerServer(lambda token: self._check_token(validator, token))
        else:
            self._server = ScramServer(
                mechanism,
                lambda name: users.scram_credential(mechanism, name),
                token_lookup=lambda token_id: users.token_credential(
                    mechanism, token_id, self._now_ms
                ),
            )
        self.mechanism = mechanism
        if self.reauth_of is not None and mechanism != self.reauth_of[0]:
            self._bad_mechanism = (
                f"SASL mechanism {mechanism!r} requested by client is not supported for "
                f"re-authentication of mechanism {self.reauth_of[0]!r}"
            )
        self.state = SaslState.TOKENS if version >= 1 else SaslState.RAW_TOKENS
        return ErrorCode.NONE

    def _check_token(self, validator: TokenValidator, token: str) -> str:
        """The principal of a valid OAUTHBEARER ``token``; keeps its expiry."""
        validated = validator.validate(token, self._now_ms)
        self._token_expires_ms = validated.expires_ms
        return validated.principal

    def authenticate(self, token: bytes, now_ms: int = 0) -> bytes:
        """Feed one client token at ``now_ms``; returns the server's token (possibly empty).

        ``state`` is DONE afterwards when the client has authenticated.

        Raises:
            SaslStateError: no handshake came first (or the session failed).
            SaslAuthenticationError: a malformed token or wrong credentials; the
                message may be shown to the client (it never says which of the
                user name and the password was wrong).
        """
        server = self._server
        if self.state not in (SaslState.TOKENS, SaslState.RAW_TOKENS) or server is None:
            self.state = SaslState.FAILED
            raise SaslStateError(
                "SaslAuthenticate before a SaslHandshake"
                if self.state is SaslState.START or server is None
                else f"SASL token in state {self.state.value}"
            )
        self._now_ms = now_ms
        if self._bad_mechanism is not None:
            self.state = SaslState.FAILED
            raise SaslAuthenticationError(self._bad_mechanism)
        try:
            if isinstance(server, PlainServer | OAuthBearerServer):
                answer = server.respond(token)
            elif not self._first_done:
                answer = server.server_first(token)
                self._first_done = True
            else:
                answer = server.server_final(token)
        except SaslAuthenticationError:
            self.state = SaslState.FAILED
            raise
        except Exception as exc:
            self.state = SaslState.FAILED
            log.exception("internal error in SASL %s authentication", self.mechanism)
            raise SaslAuthenticationError(
                f"authentication failed: internal error with SASL mechanism {self.mechanism}"
            ) from exc
        if server.complete:
            username = server.username
            if isinstance(server, ScramServer) and server.token_auth:
                assert username is not None
                login = self._users.token_login(username, now_ms)
                if login is None:  # removed or expired between the two messages
                    self.state = SaslState.FAILED
                    raise SaslAuthenticationError(
                        "Authentication failed during authentication due to invalid "
                        f"credentials with SASL mechanism {self.mechanism}"
                    )
                self.token_id = login.token_id
                self._token_expires_ms = login.expiry_ms
                username = login.owner.partition(":")[2]
            if self.reauth_of is not None and username != self.reauth_of[1]:
                self.state = SaslState.FAILED
                raise SaslAuthenticationError(
                    "cannot change principals during re-authentication from "
                    f"User:{self.reauth_of[1]} to User:{username}"
                )
            self.username = username
            self.state = SaslState.DONE
            self._set_lifetime(now_ms)
        return answer

    def _set_lifetime(self, now_ms: int) -> None:
        """``session_lifetime_ms`` and ``expires_ms`` of a session just DONE at
        ``now_ms`` (Kafka's rule: see the module docstring). The lifetime is
        measured from the wall clock (a token's ``exp`` is a date), the expiry on
        the monotonic one, as Kafka's ``SaslServerAuthenticator`` adds the
        lifetime to ``Time.nanoseconds``."""
        limits = [self._max_reauth_ms] if self._max_reauth_ms > 0 else []
        if self._token_expires_ms is not None:
            limits.append(self._token_expires_ms - now_ms)
        if not limits:
            return
        self.session_lifetime_ms = max(0, min(limits))
        self.expires_ms = mono_ms(now_ms) + self.session_lifetime_ms
