"""One connection's state in the broker core: :class:`ConnectionSession`.

The driver opens a session when it accepts a connection
(``Broker.connection_opened``) and drops it when the connection closes
(``Broker.connection_closed``); request handlers reach it as ``ctx.session``.
Whatever the broker knows of a connection lives here and nowhere else, so that
closing a connection forgets it whole.

Rules and invariants:

* A session belongs to one connection id and is never reused: a connection id
  the broker sees again after its close gets a new session. A request on a
  connection the broker has not seen opened gets one too (tests drive the core
  that way); on a SASL listener such a connection starts unauthenticated, so it
  fails closed.
* Fetch sessions (KIP-227) and share sessions (KIP-932) are not a connection's:
  a client may move them to another connection, so they live in their caches
  (:mod:`.fetch_sessions`, bounded by its slots; :mod:`.shares`, which hears of
  a close and releases the records of the sessions last used on it).
* SASL (:class:`SaslPolicy` is a SASL listener's, shared by its sessions): a
  connection is unauthenticated until an exchange (a :class:`~.security.sasl.SaslSession`)
  is done. Until then only ApiVersions, SaslHandshake and SaslAuthenticate are
  handled (:func:`unauthenticated_refusal`), and after a v0 SaslHandshake each
  frame is a bare SASL token (KIP-43). A session with a lifetime (KIP-368:
  ``connections_max_reauth_ms``, or an OAUTHBEARER token's expiry) ends at its
  expiry: the connection's next request is a ``Close``, unanswered, as Kafka
  does (:meth:`ConnectionSession.expired`). Before that, a SaslHandshake may
  re-authenticate the connection in place, at most once a second (Kafka's
  floor); until that is done only SaslAuthenticate may come, and the principal
  stays what it was for ACLs.
"""

from __future__ import annotations

import logging

from trafka.codec import ApiKey
from trafka.codec.messages import API_MODULES
from trafka.codec.protocol import api
from trafka.codec.sasl import SaslAuthenticationError

from .clock import mono_ms
from .outcomes import Close, SaslToken
from .security.authorizer import host_of, principal_for
from .security.sasl import SaslSession, SaslState, UserStore

__all__ = ["ConnectionSession", "SaslPolicy", "unauthenticated_refusal"]

log = logging.getLogger("trafka.brokerlite")

# What a connection of a SASL listener may ask before it has authenticated.
_BEFORE_AUTHENTICATION = frozenset(
    {ApiKey.SASL_HANDSHAKE, ApiKey.API_VERSIONS, ApiKey.SASL_AUTHENTICATE}
)
_MIN_REAUTH_INTERVAL_MS = 1000  # Kafka's floor between two re-authentications


class SaslPolicy:
    """A SASL listener's rules, shared by its connections' sessions, and the
    counts of what those connections did.

    Attributes:
        users: the credentials logins are checked against.
        mechanisms: the enabled SASL mechanisms.
        max_reauth_ms: ``connections_max_reauth_ms`` (0: sessions without a
            lifetime, unless a token has one).
        reauthentications: re-authentications completed since the broker started.
        sessions_expired: connections closed because their SASL session expired.
    """

    __slots__ = ("max_reauth_ms", "mechanisms", "reauthentications", "sessions_expired", "users")

    def __init__(self, users: UserStore, mechanisms: tuple[str, ...], max_reauth_ms: int) -> None:
        self.users = users
        self.mechanisms = mechanisms
        self.max_reauth_ms = max_reauth_ms
        self.reauthentications = 0
        self.sessions_expired = 0

    def exchange(self, reauth_of: tuple[str, str] | None = None) -> SaslSession:
        """A new SASL exchange (of a re-authentication: ``(mechanism, user)``)."""
        return SaslSession(
            self.users, self.mechanisms, max_reauth_ms=self.max_reauth_ms, reauth_of=reauth_of
        )


class ConnectionSession:
    """What the broker knows of one open connection.

    Attributes:
        conn_id: the driver's id of the connection.
        peer: ``host:port`` of the client (``?`` when unknown).
        host: the peer's IP as ACL hosts name it.
        tls_subject: the principal's name from the client's TLS certificate, if it
            showed one: its subject mapped by ``ssl_principal_mapping_rules``.
        client_id: the client id of the connection's latest request header.
        client_software: (name, version) from ApiVersions v3+ (KIP-511).
        sasl_policy: the listener's SASL rules; None on a PLAINTEXT or SSL listener.
        sasl: the SASL exchange in progress (authenticating or re-authenticating).
        sasl_user: the user the connection authenticated as (None before).
        sasl_mechanism: the mechanism it authenticated with.
        token_login: it authenticated with a delegation token.
        sasl_expiry_ms: when its SASL session ends (monotonic ms, as Kafka's
            ``SaslServerAuthenticator`` measures it on ``Time.nanoseconds``; None: never).
        reauth_started_ms: when its latest re-authentication began (monotonic ms).
        parked_ticket: the ticket of its request parked in the core, if any.
    """

    __slots__ = (
        "client_id",
        "client_software",
        "conn_id",
        "host",
        "parked_ticket",
        "peer",
        "reauth_started_ms",
        "sasl",
        "sasl_expiry_ms",
        "sasl_mechanism",
        "sasl_policy",
        "sasl_user",
        "tls_subject",
        "token_login",
    )

    def __init__(
        self,
        conn_id: int,
        peer: str = "?",
        *,
        tls_subject: str | None = None,
        sasl_policy: SaslPolicy | None = None,
    ) -> None:
        self.conn_id = conn_id
        self.peer = peer
        self.host = host_of(peer)
        self.tls_subject = tls_subject or None
        self.client_id: str | None = None
        self.client_software: tuple[str, str] | None = None
        self.sasl_policy = sasl_policy
        self.sasl: SaslSession | None = None
        self.sasl_user: str | None = None
        self.sasl_mechanism: str | None = None
        self.token_login = False
        self.sasl_expiry_ms: int | None = None
        self.reauth_started_ms: int | None = None
        self.parked_ticket: int | None = None

    def __repr__(self) -> str:
        return f"<ConnectionSession {self.conn_id} from {self.peer}>"

    @property
    def principal(self) -> str:
        """The principal for ACLs (``User:alice``, ``User:ANONYMOUS``)."""
        return principal_for(self.sasl_user, self.tls_subject)

    @property
    def quota_user(self) -> str:
        """The user for client quotas: the principal's name."""
        return self.principal.partition(":")[2]

    @property
    def authenticating(self) -> bool:
        """True while a connection of a SASL listener has not authenticated."""
        return self.sasl_policy is not None and self.sasl_user is None

    # -- SASL ---------------------------------------------------------------------------

    def sasl_exchange(self) -> SaslSession | None:
        """The SASL exchange of a connection still authenticating or re-authenticating.

        None on a PLAINTEXT or SSL listener, and once the connection has
        authenticated (until it re-authenticates). An unauthenticated connection
        without one gets a new exchange.
        """
        policy = self.sasl_policy
        if policy is None:
            return None
        if self.sasl is None and self.sasl_user is None:
            self.sasl = policy.exchange()
        return self.sasl

    def may_reauthenticate(self, now_ms: int) -> bool:
        """Whether a SaslHandshake now would begin a re-authentication
        (:meth:`begin_reauthentication`'s conditions, nothing changed)."""
        if self.sasl_policy is None or self.sasl_user is None or self.sasl_expiry_ms is None:
            return False
        started = self.reauth_started_ms
        return started is None or mono_ms(now_ms) - started >= _MIN_REAUTH_INTERVAL_MS

    def begin_reauthentication(self, now_ms: int) -> SaslSession | None:
        """A re-authentication exchange for an authenticated connection (KIP-368).

        Kafka's rule (``KafkaChannel.maybeBeginServerReauthentication``): only a
        session with a lifetime (an expiry) may re-authenticate, and at most
        once a second; otherwise None, and the SaslHandshake is answered as any
        on an authenticated connection (ILLEGAL_SASL_STATE).
        """
        policy, user = self.sasl_policy, self.sasl_user
        if policy is None or user is None or not self.may_reauthenticate(now_ms):
            return None
        self.reauth_started_ms = mono_ms(now_ms)
        assert self.sasl_mechanism is not None
        self.sasl = policy.exchange(reauth_of=(self.sasl_mechanism, user))
        return self.sasl

    def authenticated(self, exchange: SaslSession) -> None:
        """Record that the connection has authenticated or re-authenticated
        (``exchange`` is DONE), with the exchange's expiry."""
        assert exchange.state is SaslState.DONE and exchange.username is not None
        assert exchange.mechanism is not None and self.sasl_policy is not None
        self.sasl = None
        self.sasl_user = exchange.username
        self.sasl_mechanism = exchange.mechanism
        self.token_login = exchange.token_id is not None
        self.sasl_expiry_ms = exchange.expires_ms
        if exchange.reauth_of is not None:
            self.sasl_policy.reauthentications += 1
        log.debug(
            "connection %d from %s %s as %r with SASL %s (session lifetime %d ms)",
            self.conn_id,
            self.peer,
            "re-authenticated" if exchange.reauth_of is not None else "authenticated",
            exchange.username,
            exchange.mechanism,
            exchange.session_lifetime_ms,
        )

    def expired(self, now_ms: int) -> Close | None:
        """The :class:`Close` of a request after the SASL session's expiry without a
        re-authentication begun (Kafka closes such a connection unanswered). A
        SaslHandshake that may begin one is not asked: Kafka's SocketServer lets it
        re-authenticate even after the expiry."""
        expiry, mono = self.sasl_expiry_ms, mono_ms(now_ms)
        if self.sasl is not None or expiry is None or mono <= expiry:
            return None
        assert self.sasl_policy is not None
        self.sasl_policy.sessions_expired += 1
        return Close(
            f"SASL session expired {mono - expiry} ms ago without "
            "re-authentication (connections.max.reauth.ms or the token's expiry)",
            self.client_id,
        )

    def raw_sasl_token(
        self, exchange: SaslSession, frame: bytes | memoryview, now_ms: int
    ) -> SaslToken | Close:
        """Answer a bare SASL token, after a v0 SaslHandshake (KIP-43)."""
        try:
            answer = exchange.authenticate(bytes(frame), now_ms)
        except SaslAuthenticationError as exc:
            # No way to tell the client why: Kafka closes the connection too.
            return Close(
                f"SASL {exchange.mechanism}: {exc}", self.client_id, failed_authentication=True
            )
        if exchange.state is SaslState.DONE:
            self.authenticated(exchange)
        return SaslToken(answer)


def unauthenticated_refusal(exchange: SaslSession, key: int, client_id: str | None) -> Close | None:
    """Why a request of ``key`` cannot come on a connection still (re-)authenticating."""
    name = api(key).name if key in API_MODULES else f"API key {key}"
    if exchange.reauth_of is not None and key != ApiKey.SASL_AUTHENTICATE:
        return Close(
            f"{name} request during SASL re-authentication",
            client_id,
            failed_authentication=True,
        )
    if key not in _BEFORE_AUTHENTICATION:
        return Close(
            f"{name} request before SASL authentication (is the client configured for SASL?)",
            client_id,
        )
    return None
