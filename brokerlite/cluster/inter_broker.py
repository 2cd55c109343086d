"""One broker's connection to another, for inter-broker requests: a driver (trio).

The replica fetchers (:mod:`.replica_fetcher`), the transaction markers'
sender (:mod:`trafka.brokerlite.transactions.marker_sender`), KIP-890's
verification (:mod:`.driver.txn_verify`) and ``/metrics/cluster`` talk to other
cluster members through it.

Rules:

* One request at a time, answered before the next is sent: Kafka's framing,
  no pipelining. A caller that needs several in flight opens several
  connections.
* A member is reached at the address it registered in ZooKeeper, within the
  ZooKeeper session timeout: a broker silent that long is gone anyway.
* The connection speaks the listener's protocol (brokerlite has one listener,
  which is Kafka's ``security.inter.broker.protocol``): TLS for SSL and
  SASL_SSL, with the peer's certificate verified against ``ssl_cafile`` (the
  system's authorities without it) and, unless
  ``ssl_endpoint_identification_algorithm`` is empty, its name checked against
  the host the peer registered; the broker presents its own certificate, for a
  listener that asks for one. On SASL_PLAINTEXT and SASL_SSL it logs in with
  ``sasl_mechanism_inter_broker_protocol`` and the broker's own credentials
  before any other request (SaslHandshake v1, then SaslAuthenticate), as a
  Kafka broker does. There is no fallback: a login that fails is an
  :class:`InterBrokerAuthError`, never an anonymous connection.
* A session with a lifetime (KIP-368, ``connections.max.reauth.ms`` on the
  peer) is renewed on the same connection between two requests, early enough
  that a request sent just before the renewal is due (a follower's fetch may
  wait ``replica_fetch_wait_max_ms`` at the peer) is answered before the
  session ends: the peer closes a connection whose next request comes after
  its session ended.
* A closed or broken connection (TCP or TLS) raises :class:`ConnectionError`;
  the callers reopen.
  :class:`InterBrokerAuthError` is one too, so every caller backs off and
  retries; the replica fetcher also logs why.
"""

from __future__ import annotations

import dataclasses
import itertools
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.framing import FrameReader
from trafka.codec.messages import k17_sasl_handshake as handshake_msg
from trafka.codec.messages import k36_sasl_authenticate as authenticate_msg
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.oauthbearer import OAUTHBEARER, client_message, unsecured_token
from trafka.codec.protocol import decode_response_frame, encode_request
from trafka.codec.sasl import SaslAuthenticationError, ScramClient, plain_message

from .. import clock

if TYPE_CHECKING:
    from ..broker import Broker
    from ..config import BrokerConfig

__all__ = [
    "InterBrokerAuthError",
    "InterBrokerConnection",
    "InterBrokerLogin",
    "inter_broker_login",
    "inter_broker_ssl_context",
]

_AUTHENTICATE_VERSION = 2
# Renew a session when this share of its lifetime has passed (the client side of KIP-368
# leaves a margin; the peer closes a connection whose session has ended).
_REAUTH_SHARE = 0.85
# ... less the longest a request waits at the peer, but never before half of it.
_REAUTH_FLOOR = 0.5


class InterBrokerAuthError(ConnectionError):
    """Another broker refused this broker's TLS handshake or SASL login (or would
    not take SASL): a misconfigured cluster, never retried as anyone else."""


@dataclasses.dataclass(frozen=True, slots=True)
class InterBrokerLogin:
    """How a broker logs in to the others: ``mechanism`` as ``user`` with ``password``
    (PLAIN, SCRAM), or for OAUTHBEARER with an unsecured token it makes at each login
    from ``claims`` (Kafka's unsecured login module: ``iat`` now, ``exp`` after
    ``lifetime_ms``)."""

    mechanism: str
    user: str
    password: str = dataclasses.field(default="", repr=False)
    claims: tuple[tuple[str, Any], ...] = dataclasses.field(default=(), repr=False)
    principal_claim: str = "sub"
    lifetime_ms: int = 3_600_000

    def token(self, now_ms: int) -> str:
        """A fresh unsecured token (OAUTHBEARER), issued at ``now_ms``."""
        return unsecured_token(
            self.user,
            now_ms=now_ms,
            lifetime_ms=self.lifetime_ms,
            principal_claim=self.principal_claim,
            claims=dict(self.claims),
        )


def inter_broker_login(config: BrokerConfig) -> InterBrokerLogin | None:
    """The login a broker configured by ``config`` uses on its listener (None when the
    listener takes no SASL). The configuration's checks made sure it has one."""
    if not config.sasl_enabled:
        return None
    mechanism = config.sasl_mechanism_inter_broker_protocol
    user = config.inter_broker_sasl_username
    assert mechanism is not None and user is not None
    if mechanism == OAUTHBEARER:
        jaas = next(j for j in config.sasl_jaas_logins if j.mechanism == OAUTHBEARER)
        return InterBrokerLogin(
            mechanism,
            user,
            claims=jaas.claims,
            principal_claim=jaas.principal_claim,
            lifetime_ms=jaas.lifetime_ms,
        )
    password = config.inter_broker_sasl_password
    assert password is not None
    return InterBrokerLogin(mechanism, user, password)


def inter_broker_ssl_context(config: BrokerConfig) -> ssl.SSLContext:
    """The client-side TLS context a broker reaches the others with.

    Raises:
        InterBrokerAuthError: the CA, certificate or key file cannot be used.
    """
    try:
        context = ssl.create_default_context(
            cafile=None if config.ssl_cafile is None else str(config.ssl_cafile)
        )
        context.check_hostname = config.ssl_endpoint_identification_algorithm == "https"
        if config.ssl_certfile is not None:
            context.load_cert_chain(
                config.ssl_certfile, config.ssl_keyfile, password=config.ssl_key_password
            )
    except (OSError, ssl.SSLError) as exc:
        raise InterBrokerAuthError(f"the broker's own TLS files cannot be used: {exc}") from None
    return context


class InterBrokerConnection:
    """A minimal request/answer connection to another broker (inter-broker traffic)."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        client_id: str,
        max_frame: int,
        *,
        where: str = "the broker",
        login: InterBrokerLogin | None = None,
        longest_wait_s: float = 0.0,
        now_ms: Callable[[], int] = clock.now_ms,
    ) -> None:
        """``login`` is the broker's own login on a SASL listener (then call
        :meth:`log_in` before anything else); ``longest_wait_s`` the longest one of
        the caller's requests may wait at the peer (a follower's long poll);
        ``now_ms`` the wall clock an OAUTHBEARER token is issued by."""
        self._now_ms = now_ms
        self._stream = stream
        self._client_id = client_id
        self._reader = FrameReader(max_frame)
        self._corr = itertools.count(1)
        self._login = login
        self._where = where
        self._reauth_at: float | None = None
        self._longest_wait_s = longest_wait_s

    @classmethod
    async def to_node(cls, broker: Broker, node: int, purpose: str) -> InterBrokerConnection:
        """Connect to cluster member ``node`` at its registered address, within the
        ZooKeeper session timeout (a broker silent that long is gone anyway), and
        secure the connection as the listener requires (see the module rules).

        Raises:
            ConnectionError: ``node`` is not registered.
            InterBrokerAuthError: ``node`` refused the TLS handshake or the login.
            OSError, trio.TooSlowError: the connection failed or took too long.
        """
        assert broker.cluster is not None
        target = broker.cluster.broker(node)
        if target is None:
            raise ConnectionError(f"broker {node} is not registered")
        where = f"broker {node} ({target.host}:{target.port})"
        return await cls.open(
            broker.config, target.host, target.port, f"broker-{broker.node_id}-{purpose}", where
        )

    @classmethod
    async def open(
        cls,
        config: BrokerConfig,
        host: str,
        port: int,
        client_id: str,
        where: str,
        *,
        now_ms: Callable[[], int] = clock.now_ms,
    ) -> InterBrokerConnection:
        """Connect to the broker at ``host:port`` as a broker configured by ``config``
        would (TLS and SASL as its listener requires), within the ZooKeeper session
        timeout. ``trafka cluster`` checks its nodes' readiness this way too, so that
        it works on every listener kind.

        Raises:
            InterBrokerAuthError: the peer refused the TLS handshake or the login.
            OSError, trio.TooSlowError: the connection failed or took too long.
        """
        with trio.fail_after(config.zookeeper_session_timeout_ms / 1000):
            tcp = await trio.open_tcp_stream(host, port)
            stream: trio.abc.Stream = tcp
            if config.tls_enabled:
                try:
                    context = inter_broker_ssl_context(config)
                except InterBrokerAuthError:
                    await tcp.aclose()
                    raise
                tls = trio.SSLStream(tcp, context, server_hostname=host)
                try:
                    await tls.do_handshake()
                except trio.BrokenResourceError as exc:
                    await tcp.aclose()
                    cause = exc.__cause__ if exc.__cause__ is not None else exc
                    if isinstance(cause, ssl.SSLError):
                        raise InterBrokerAuthError(
                            f"TLS handshake with {where} failed: {cause}"
                        ) from None
                    raise ConnectionError(f"{where} closed the TLS handshake") from None
                stream = tls
            login = inter_broker_login(config)
            conn = cls(
                stream,
                client_id,
                config.socket_request_max_bytes,
                where=where,
                login=login,
                longest_wait_s=config.replica_fetch_wait_max_ms / 1000,
                now_ms=now_ms,
            )
            if login is not None:
                try:
                    await conn.log_in()
                except BaseException:
                    with trio.CancelScope(shield=True):
                        await conn.aclose()
                    raise
        return conn

    async def request(self, key: int, version: int, body: Any) -> Any:
        if self._reauth_at is not None and trio.current_time() >= self._reauth_at:
            await self.log_in()
        return await self._exchange(key, version, body)

    async def _exchange(self, key: int, version: int, body: Any) -> Any:
        corr = next(self._corr)
        header = RequestHeader(
            request_api_key=key,
            request_api_version=version,
            correlation_id=corr,
            client_id=self._client_id,
        )
        try:
            await self._stream.send_all(encode_request(header, body))
            while True:
                frame = self._reader.next_frame()
                if frame is not None:
                    break
                data = await self._stream.receive_some(1 << 20)
                if not data:
                    raise ConnectionError("the broker closed the connection")
                self._reader.feed(data)
        except trio.BrokenResourceError as exc:
            # A broken TCP or TLS stream is a closed connection to every caller.
            raise ConnectionError(f"the connection to {self._where} broke") from exc
        return decode_response_frame(frame, key, version)

    async def log_in(self) -> None:
        """Log in (or renew the session) with the broker's own credentials.

        Raises:
            InterBrokerAuthError: the peer refused the mechanism or the credentials.
        """
        assert self._login is not None
        login = self._login
        mechanism, user = login.mechanism, login.user
        started = trio.current_time()  # the peer's session starts after this
        answer = await self._exchange(
            ApiKey.SASL_HANDSHAKE, 1, handshake_msg.SaslHandshakeRequest(mechanism=mechanism)
        )
        if answer.error_code:
            offered = ", ".join(answer.mechanisms) or "none"
            raise InterBrokerAuthError(
                f"{self._where} refused SASL mechanism {mechanism} "
                f"({_name(answer.error_code)}; it enables: {offered})"
            )
        lifetime_ms = 0

        async def exchange(token: bytes) -> bytes:
            nonlocal lifetime_ms
            body = authenticate_msg.SaslAuthenticateRequest(auth_bytes=token)
            reply = await self._exchange(ApiKey.SASL_AUTHENTICATE, _AUTHENTICATE_VERSION, body)
            if reply.error_code:
                raise InterBrokerAuthError(
                    f"{self._where} refused the {mechanism} login of {user!r}: "
                    f"{reply.error_message or _name(reply.error_code)}"
                )
            lifetime_ms = int(reply.session_lifetime_ms or 0)
            return bytes(reply.auth_bytes)

        try:
            if mechanism == "PLAIN":
                await exchange(plain_message(user, login.password))
            elif mechanism == OAUTHBEARER:
                challenge = await exchange(client_message(login.token(self._now_ms())))
                if challenge:
                    # RFC 7628: the peer refused the token with an error challenge; the
                    # client acknowledges it with one 0x01 and the peer then fails the login.
                    await exchange(b"\x01")
                    raise InterBrokerAuthError(
                        f"{self._where} refused the OAUTHBEARER token of {user!r}: "
                        f"{challenge.decode('ascii', 'replace')}"
                    )
            else:
                scram = ScramClient(mechanism, user, login.password)
                server_final = await exchange(
                    scram.final_message(await exchange(scram.first_message()))
                )
                scram.verify(server_final)
        except SaslAuthenticationError as exc:
            raise InterBrokerAuthError(
                f"{mechanism} login of {user!r} to {self._where} failed: {exc}"
            ) from None
        if lifetime_ms <= 0:
            self._reauth_at = None
            return
        lifetime = lifetime_ms / 1000
        self._reauth_at = started + max(
            lifetime * _REAUTH_SHARE - self._longest_wait_s, lifetime * _REAUTH_FLOOR
        )

    async def aclose(self) -> None:
        await self._stream.aclose()


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
