"""One broker's connection to another, for inter-broker requests: a driver (trio)
of the SDK's connection core.

The replica fetchers (:mod:`.replica_fetcher`), the transaction markers'
sender (:mod:`trafka.brokerlite.transactions.marker_sender`), KIP-890's
verification (:mod:`.driver.txn_verify`), the share-state sender
(:mod:`.driver.share_state`) and ``/metrics/cluster`` talk to other cluster
members through it.

Rules:

* The protocol is the SDK's I/O-free core,
  :class:`~trafka.sdk.connection_state.ConnectionState`: framing, correlation
  ids, the ApiVersions handshake that opens every connection, matching answers
  to requests, in-flight deadlines, quota throttling (KIP-219) and the moment a
  session is renewed (:func:`~trafka.sdk.connection_state.reauthentication_delay`).
  SASL (PLAIN, SCRAM, OAUTHBEARER) and the TLS context are the SDK's
  (:func:`~trafka.sdk.security.authenticate`,
  :func:`~trafka.sdk.security.client_ssl_context`), given a client
  configuration made from the broker's (:func:`inter_broker_client_config`).
  This module owns the stream, the lock and the clock only.
* One request at a time (a lock), answered before the next is sent. A caller
  that needs several in flight opens several connections.
* A caller names the version its request body is built for; it is checked
  against the peer's ApiVersions answer (the core's
  :func:`~trafka.sdk.connection_state.choose_version`): a version the peer does
  not serve is an :class:`~trafka.codec.UnsupportedVersionError` before
  anything is sent.
* Each request has a deadline: ``timeout`` seconds, by default
  :data:`REQUEST_TIMEOUT_S` (Kafka's inter-broker ``request.timeout.ms``). A
  request past it closes the connection (a late answer would belong to no
  request) and raises :class:`ConnectionError`.
* A caller cancelled while waiting for its answer leaves the request in flight:
  the next request reads that answer first and drops it (the core matches
  answers to requests in order). Cancelled while writing, the connection is
  closed: the peer may have half a frame.
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
  right after ApiVersions and before any other request, as a Kafka broker
  does. There is no fallback: a login that fails is an
  :class:`InterBrokerAuthError`, never an anonymous connection.
* A session with a lifetime (KIP-368, ``connections.max.reauth.ms`` on the
  peer) is renewed on the same connection between two requests, early enough
  that a request sent just before the renewal is due (a follower's fetch may
  wait ``replica_fetch_wait_max_ms`` at the peer) is answered before the
  session ends: the peer closes a connection whose next request comes after
  its session ended. Brokers renew at the earliest point of the core's range
  (no jitter): a broker has one link per peer and purpose, nothing to spread.
* A closed, broken or timed-out connection (TCP, TLS or protocol) raises
  :class:`ConnectionError`; the callers reopen.
  :class:`InterBrokerAuthError` is one too, so every caller backs off and
  retries; the replica fetcher also logs why.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from trafka.codec.oauthbearer import OAUTHBEARER, unsecured_token
from trafka.sdk.config import ClientConfig
from trafka.sdk.connection_state import ConnectionState, choose_version, reauthentication_delay
from trafka.sdk.errors import AuthenticationError, ConfigError, ProtocolError, UsageError
from trafka.sdk.security import authenticate, client_ssl_context

from .. import clock

if TYPE_CHECKING:
    from ..broker import Broker
    from ..config import BrokerConfig

__all__ = [
    "REQUEST_TIMEOUT_S",
    "InterBrokerAuthError",
    "InterBrokerConnection",
    "InterBrokerLogin",
    "inter_broker_client_config",
    "inter_broker_login",
]

#: The default deadline of an inter-broker request, in seconds (Kafka's
#: ``request.timeout.ms`` and ``replica.socket.timeout.ms``, 30 s).
REQUEST_TIMEOUT_S = 30.0
# What a broker says it is in ApiVersions v3+.
_SOFTWARE = "trafka-brokerlite"
_RECEIVE_BYTES = 1 << 20


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


def inter_broker_client_config(
    config: BrokerConfig, client_id: str, *, now_ms: Callable[[], int] = clock.now_ms
) -> ClientConfig:
    """The SDK client configuration a broker configured by ``config`` reaches the
    others with: its listener's security protocol, its own TLS files and its
    inter-broker login (an OAUTHBEARER token made at each login, issued at
    ``now_ms()``)."""
    sasl = "sasl_" if config.sasl_enabled else ""
    settings: dict[str, Any] = {
        "client_id": client_id,
        "security_protocol": sasl + ("ssl" if config.tls_enabled else "plaintext"),
    }
    if config.tls_enabled:
        settings.update(
            ssl_cafile=None if config.ssl_cafile is None else str(config.ssl_cafile),
            ssl_certfile=None if config.ssl_certfile is None else str(config.ssl_certfile),
            ssl_keyfile=None if config.ssl_keyfile is None else str(config.ssl_keyfile),
            ssl_password=config.ssl_key_password,
            ssl_check_hostname=config.ssl_endpoint_identification_algorithm == "https",
        )
    login = inter_broker_login(config)
    if login is not None:
        settings["sasl_mechanism"] = login.mechanism
        if login.mechanism == OAUTHBEARER:
            settings["sasl_oauth_token_provider"] = lambda: login.token(now_ms())
        else:
            settings.update(sasl_username=login.user, sasl_password=login.password)
    return ClientConfig(**settings)


class InterBrokerConnection:
    """A request/answer connection to another broker (see the module rules)."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        host: str,
        port: int,
        client: ClientConfig,
        max_frame: int,
        *,
        where: str = "the broker",
        user: str = "",
        longest_wait_s: float = 0.0,
    ) -> None:
        """``client`` says how to log in (:func:`inter_broker_client_config`; call
        :meth:`handshake` before anything else) and ``user`` names the login in
        errors; ``longest_wait_s`` is the longest one of the caller's requests may
        wait at the peer (a follower's long poll)."""
        self.host, self.port = host, port
        self._stream = stream
        self._client = client
        self._state = ConnectionState(
            client.client_id, max_frame_size=max_frame, software_name=_SOFTWARE
        )
        self._where = where
        self._user = user
        self._lock = trio.Lock()
        self._reauth_at: float | None = None
        self._longest_wait_s = longest_wait_s
        self._broken: str | None = None

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
        would (TLS, ApiVersions, then SASL as its listener requires), within the
        ZooKeeper session timeout. ``trafka cluster`` checks its nodes' readiness
        this way too, so that it works on every listener kind. ``now_ms`` is the
        wall clock an OAUTHBEARER token is issued by.

        Raises:
            InterBrokerAuthError: the peer refused the TLS handshake or the login.
            ConnectionError: the peer closed the connection or broke the protocol.
            OSError, trio.TooSlowError: the connection failed or took too long.
        """
        client = inter_broker_client_config(config, client_id, now_ms=now_ms)
        try:
            context = client_ssl_context(client)
        except ConfigError as exc:
            raise InterBrokerAuthError(
                f"the broker's own TLS files cannot be used: {exc}"
            ) from None
        with trio.fail_after(config.zookeeper_session_timeout_ms / 1000):
            tcp = await trio.open_tcp_stream(host, port)
            stream: trio.abc.Stream = tcp
            if context is not None:
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
            conn = cls(
                stream,
                host,
                port,
                client,
                config.socket_request_max_bytes,
                where=where,
                user=config.inter_broker_sasl_username or "",
                longest_wait_s=config.replica_fetch_wait_max_ms / 1000,
            )
            try:
                await conn.handshake()
            except BaseException:
                with trio.CancelScope(shield=True):
                    await conn.aclose()
                raise
        return conn

    async def handshake(self) -> None:
        """ApiVersions, then the login when the listener takes SASL.

        Raises:
            InterBrokerAuthError: the peer refused the mechanism or the credentials.
            ConnectionError: the peer closed the connection or broke the protocol.
        """
        async with self._lock:
            cookie = object()
            now = trio.current_time()
            await self._send(self._state.handshake(now, REQUEST_TIMEOUT_S, cookie))
            await self._answer(cookie)
            if self._client.uses_sasl:
                await self._log_in()

    @property
    def client_id(self) -> str | None:
        """Sent in every request header (``broker-<id>-<purpose>``)."""
        return self._state.client_id

    def version_for(self, api_key: int) -> int:
        """The version of ``api_key`` the core chose with the peer (for SASL)."""
        return self._state.version_for(api_key)

    async def request(
        self, api_key: int, body: Any, *, version: int, timeout: float | None = None
    ) -> Any:
        """Send a request built for ``version`` and wait for its answer, for at most
        ``timeout`` seconds (default :data:`REQUEST_TIMEOUT_S`).

        Raises:
            ConnectionError: the connection closed, broke or timed out (it is closed).
            InterBrokerAuthError: renewing the session was refused.
            UnsupportedVersionError: the peer does not serve ``version``.
        """
        async with self._lock:
            if self._reauth_at is not None and trio.current_time() >= self._reauth_at:
                await self._log_in()
            return await self._exchange(api_key, body, version, timeout)

    async def _exchange(
        self, api_key: int, body: Any, version: int | None, timeout: float | None
    ) -> Any:
        state = self._state
        if self._broken is not None:
            raise ConnectionError(f"the connection to {self._where} is closed ({self._broken})")
        if version is not None:
            assert state.api_versions is not None
            choose_version(api_key, state.api_versions.get(api_key), (version, version))
        if trio.current_time() < state.throttled_until:  # KIP-219: the peer mutes us
            await trio.sleep_until(state.throttled_until)
        cookie = object()
        try:
            _, frame = state.send_request(
                api_key,
                body,
                now=trio.current_time(),
                timeout=REQUEST_TIMEOUT_S if timeout is None else timeout,
                version=version,
                cookie=cookie,
            )
        except UsageError as exc:
            raise ConnectionError(f"the connection to {self._where} is closed: {exc}") from None
        await self._send(frame)
        return await self._answer(cookie)

    async def _send(self, data: bytes) -> None:
        try:
            await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            # A broken TCP or TLS stream is a closed connection to every caller.
            raise self._break("the stream broke") from exc
        except BaseException:
            self._break("cancelled while writing")  # the peer may hold half a frame
            raise

    async def _answer(self, cookie: object) -> Any:
        """Read until the answer to the request ``cookie`` names arrives."""
        state = self._state
        while True:
            deadline = state.next_deadline()
            assert deadline is not None  # (our request is in flight)
            with trio.move_on_at(deadline):
                try:
                    data = await self._stream.receive_some(_RECEIVE_BYTES)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    raise self._break("the stream broke") from exc
                if not data:
                    raise self._break("the peer closed it")
                try:
                    responses = state.receive_data(data, trio.current_time())
                except ProtocolError as exc:
                    raise self._break(f"the peer broke the protocol: {exc}") from None
                retry = state.data_to_send()  # ApiVersions again, at the peer's version
                if retry:
                    await self._send(retry)
                for response in responses:
                    if response.cookie is cookie:
                        return response.body
                continue
            late = state.expired(trio.current_time())
            if late:
                raise self._break(f"no answer to API key {late[0].api_key} in time")

    def _break(self, why: str) -> ConnectionError:
        """Mark the connection unusable (the callers close it): the error to raise."""
        if self._broken is None:
            self._broken = why
            self._state.fail_all()
        return ConnectionError(f"the connection to {self._where} is lost: {why}")

    async def _log_in(self) -> None:
        """Log in (or renew the session) with the broker's own credentials.

        Raises:
            InterBrokerAuthError: the peer refused the mechanism or the credentials.
        """
        started = trio.current_time()  # the peer's session starts after this
        client = self._client
        try:
            lifetime_ms = await authenticate(_Unlocked(self, self._exchange), client)
        except AuthenticationError as exc:
            self._break("the login was refused")
            raise InterBrokerAuthError(
                f"{self._where} refused the {client.sasl_mechanism} login of {self._user!r}: {exc}"
            ) from None
        except BaseException:
            self._break("the login did not finish")  # the peer is mid-exchange
            raise
        delay = reauthentication_delay(lifetime_ms, 0.0, longest_wait=self._longest_wait_s)
        self._reauth_at = None if delay is None else started + delay

    async def aclose(self) -> None:
        self._break("closed")
        await self._stream.aclose()


class _Unlocked:
    """The connection as SASL sees it, inside its lock (a login is one of the
    connection's exchanges, not a request of its own)."""

    def __init__(
        self,
        conn: InterBrokerConnection,
        exchange: Callable[[int, Any, int | None, float | None], Awaitable[Any]],
    ) -> None:
        self.host, self.port = conn.host, conn.port
        self.version_for = conn.version_for
        self._exchange = exchange

    async def request(self, api_key: int, body: Any, *, version: int | None = None) -> Any:
        return await self._exchange(api_key, body, version, None)
