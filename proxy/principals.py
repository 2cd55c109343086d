"""Key routing for SASL clients: who a client authenticated as, and pooled
upstream connections that log in as that principal.

The proxy's shared pool (:mod:`.pool`) is not the client: a broker would
authorize its requests as nobody (or refuse them on a SASL listener). So a SASL
client's records were forwarded unrouted. This module lets them be routed while
the brokers keep authorizing every record as the client's own principal.

Rules:

* The client's SASL exchange passes through to the broker on the client's own
  upstream connection, as before: the broker, not the proxy, checks the
  password, token or proof. The proxy only watches (:class:`SaslWatch`): it
  reads the name the client claims from its messages (PLAIN's authcid,
  SCRAM's ``n=``, OAUTHBEARER's ``sub`` claim) and takes it as the client's
  principal once the broker's answers say the exchange succeeded (PLAIN: the
  one answer without error; SCRAM: the server-final answer without error;
  OAUTHBEARER: an answer without error and without an error challenge). A
  refused exchange teaches nothing, and nothing is opened for it.
* A SCRAM login with ``tokenauth`` (a delegation token) names a token id, not
  its owner: no principal is learned, the client stays unrouted.
* Passwords in the client's messages are never kept: only the name is read.
* The operator gives, in a JSON file (:func:`load_credentials`), the logins the
  proxy holds per principal: ``{"User:alice": {"mechanism": "SCRAM-SHA-256",
  "username": "alice", "password_env": "ALICE_PW"}}``; ``password`` may stand
  in the file itself, or the login may be a delegation token (``"tokenauth":
  true``, the token id as ``username``, its HMAC as the password). Secrets come
  from the file or the environment, never from the command line, and are never
  logged or shown (``repr`` hides them).
* :class:`PrincipalPools` opens, per principal, an :class:`~.pool.UpstreamPool`
  whose connections log in (SASL PLAIN or SCRAM, :func:`login`) with that
  principal's held login before their first request. What key routing writes
  for the client goes through them, so the brokers' ACLs apply to the client's
  principal, never to an identity of the proxy's own.
* All of it is a filter, :class:`SaslPrincipals`, which :mod:`.assembly` puts
  in every chain (nearest the brokers, so it judges what the broker got and
  answered): it sees SaslHandshake and SaslAuthenticate requests and
  SaslAuthenticate answers as frames, tells the other filters who the client
  is through the connection's :class:`~.filters.Session` (``authenticated``
  from the client's first SASL request on; ``principal`` and ``pool`` once
  the broker accepted it), opens its pools with ``ProxyServices.new_pool``
  (so the proxy's metadata refreshes may use them) and refuses a client by
  returning :class:`~.filters.CloseAfter`.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import os
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio

from trafka.codec import ApiKey, protocol
from trafka.codec.errors import DecodeError, ErrorCode, TrafkaError
from trafka.codec.messages import k17_sasl_handshake as handshake_msg
from trafka.codec.messages import k36_sasl_authenticate as authenticate_msg
from trafka.codec.sasl import SaslError, ScramClient, plain_message
from trafka.common.lograte import RateLimitedLog
from trafka.sdk.connection_state import ConnectionState

from .config import ProxyConfig
from .filters import CloseAfter, Filter, FilterContext, ProxyServices, Sample
from .pool import Opened, UpstreamPool

__all__ = [
    "PrincipalPools",
    "SaslClient",
    "SaslPrincipals",
    "SaslRouting",
    "SaslWatch",
    "Watch",
    "UpstreamLogin",
    "load_credentials",
    "login",
]

log = logging.getLogger("trafka.proxy")

_LOGIN_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# What a login's answers may hold (a broker answers a few hundred bytes).
_LOGIN_FRAME = 1 << 20


# -- watching a client's exchange ----------------------------------------------------------


class _Exchange:
    """One SASL exchange (from its handshake): what its first message claims."""

    __slots__ = ("claim", "done_at", "mechanism", "sent")

    def __init__(self, mechanism: str | None) -> None:
        self.mechanism = mechanism
        # The answer (1-based) that ends a successful exchange: SCRAM's server-final.
        self.done_at = {"PLAIN": 1, "OAUTHBEARER": 1}.get(mechanism or "", 2)
        self.claim: str | None = None
        self.sent = 0  # its SaslAuthenticate requests so far


class SaslWatch:
    """One client connection's SASL exchange as the proxy sees it pass.

    Feed it the client's SaslHandshake and SaslAuthenticate requests
    (:meth:`handshake`, :meth:`request`) and the broker's SaslAuthenticate
    answers (:meth:`answered`); :attr:`principal` is set once an exchange
    succeeded for a name the proxy could read.

    A client may write its next requests before the broker answered the
    previous ones (a second handshake and another name among them), so each
    answer is judged against the request it answers, never against the latest
    one: the requests wait in order for their answers (a broker answers a
    connection's requests in order).
    """

    __slots__ = ("_exchange", "_sub_claim", "_waiting", "principal")

    def __init__(self, sub_claim: str = "sub") -> None:
        self._sub_claim = sub_claim  # the OAUTHBEARER token claim naming the principal
        self.principal: str | None = None
        self._exchange: _Exchange | None = None
        # (exchange, its message's 1-based step) per request not yet answered.
        self._waiting: deque[tuple[_Exchange | None, int]] = deque()

    def handshake(self, mechanism: str | None) -> None:
        """A (re-)authentication starts with ``mechanism``."""
        self._exchange = _Exchange((mechanism or "").upper() or None)

    def request(self, auth_bytes: bytes) -> None:
        """The client's next SaslAuthenticate message."""
        exchange = self._exchange
        if exchange is None:  # no handshake: the broker refuses it
            self._waiting.append((None, 0))
            return
        exchange.sent += 1
        if exchange.sent == 1:
            exchange.claim = _claimed(exchange.mechanism, auth_bytes, self._sub_claim)
        self._waiting.append((exchange, exchange.sent))

    def answered(self, error_code: int, auth_bytes: bytes) -> str | None:
        """The broker's answer to the oldest message not yet answered; returns
        the principal when this answer completes a successful exchange."""
        if not self._waiting:
            return None  # an answer to no request the proxy saw
        exchange, step = self._waiting.popleft()
        if exchange is None:
            return None
        if error_code != 0:
            exchange.claim = None
            return None
        if exchange.mechanism == "OAUTHBEARER" and auth_bytes:
            exchange.claim = None  # an error challenge (RFC 7628): a refusal follows
            return None
        if step != exchange.done_at or exchange.claim is None:
            return None
        if exchange.done_at == 2 and not auth_bytes.startswith(b"v="):
            return None  # a SCRAM server-final that is not a verifier (RFC 5802 "e=")
        if self.principal is not None and self.principal != exchange.claim:
            # Kafka refuses a re-authentication as another principal; should a
            # broker not, the proxy does not guess which one holds.
            self.principal = None
            return None
        self.principal = exchange.claim
        return self.principal


def _claimed(mechanism: str | None, message: bytes, sub_claim: str) -> str | None:
    """The principal the first message of an exchange claims (``User:<name>``),
    or None when it cannot be read or names no user (a delegation token)."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if mechanism == "PLAIN":
        parts = text.split("\0")
        return f"User:{parts[1]}" if len(parts) == 3 and parts[1] else None
    if mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        return _scram_user(text)
    if mechanism == "OAUTHBEARER":
        return _bearer_subject(text, sub_claim)
    return None


def _scram_user(text: str) -> str | None:
    # gs2-header "n,[a=...]," then "n=<name>,r=<nonce>[,ext=value...]"
    parts = text.split(",")
    if len(parts) < 4 or not parts[2].startswith("n=") or not parts[3].startswith("r="):
        return None
    for extension in parts[4:]:
        key, _, value = extension.partition("=")
        if key == "tokenauth" and value.lower() == "true":
            return None  # a token id, not a user: its owner is the broker's to know
    name = parts[2][2:]
    unescaped = name.replace("=2C", ",").replace("=3D", "=")
    if not name or "=" in name.replace("=2C", "").replace("=3D", ""):
        return None
    return f"User:{unescaped}"


def _bearer_subject(text: str, sub_claim: str) -> str | None:
    # "n,,\x01auth=Bearer <jwt>\x01...\x01\x01": the principal is a claim of the JWT.
    auths = [pair[5:] for pair in text.split("\x01") if pair.startswith("auth=")]
    # More than one auth pair: brokers differ on which token they check (Kafka's
    # parser keeps the last, brokerlite refuses the message), so none is read.
    for value in auths if len(auths) == 1 else ():
        scheme, _, token = value.partition(" ")
        pieces = token.split(".")
        if scheme.lower() != "bearer" or len(pieces) != 3:
            return None
        try:
            padded = pieces[1] + "=" * (-len(pieces[1]) % 4)
            claims = json.loads(base64.urlsafe_b64decode(padded))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None
        sub = claims.get(sub_claim) if isinstance(claims, dict) else None
        return f"User:{sub}" if isinstance(sub, str) and sub else None
    return None


def read_authenticate_answer(frame: bytes, version: int) -> tuple[int, bytes]:
    """A SaslAuthenticate answer's error code and auth bytes.

    Raises:
        DecodeError: it does not decode.
    """
    _, body = protocol.decode_response(frame, ApiKey.SASL_AUTHENTICATE, version)
    return int(body.error_code), bytes(body.auth_bytes or b"")


# -- the logins the proxy holds ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UpstreamLogin:
    """A login the proxy holds for one principal (its secret never shown)."""

    mechanism: str
    username: str
    password: str = field(repr=False)
    tokenauth: bool = False


def load_credentials(path: str | Path | None) -> dict[str, UpstreamLogin]:
    """The logins of a credentials file (see the module's rules); none without one.

    Raises:
        ValueError: the file cannot be read, or an entry is malformed (the
            message names the entry, never a secret).
    """
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the principal credentials {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of principal -> login")
    logins: dict[str, UpstreamLogin] = {}
    for principal, entry in data.items():
        where = f"{path}: {principal!r}"
        if not isinstance(entry, dict) or not principal.startswith("User:"):
            raise ValueError(f'{where}: expected "User:<name>": {{mechanism, username, ...}}')
        mechanism = str(entry.get("mechanism", "")).upper()
        if mechanism not in _LOGIN_MECHANISMS:
            raise ValueError(f"{where}: mechanism must be one of {', '.join(_LOGIN_MECHANISMS)}")
        username = entry.get("username")
        if not isinstance(username, str) or not username:
            raise ValueError(f"{where}: needs a username")
        password = _secret(entry, where)
        tokenauth = entry.get("tokenauth", False) is True
        if tokenauth and not mechanism.startswith("SCRAM"):
            raise ValueError(f"{where}: a delegation token logs in with SCRAM")
        logins[principal] = UpstreamLogin(mechanism, username, password, tokenauth)
    return logins


def _secret(entry: dict[str, Any], where: str) -> str:
    if "password" in entry and "password_env" in entry:
        raise ValueError(f"{where}: give password or password_env, not both")
    if "password_env" in entry:
        name = str(entry["password_env"])
        value = os.environ.get(name)
        if not value:
            raise ValueError(f"{where}: the environment variable {name} is not set")
        return value
    value = entry.get("password")
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: needs a password or password_env")
    return value


class LoginError(OSError):
    """A pooled connection could not log in (an OSError: the pool's failure to connect)."""


async def login(stream: trio.abc.Stream, held: UpstreamLogin, where: str) -> float:
    """Authenticate a fresh upstream connection with ``held`` (SaslHandshake v1,
    then SaslAuthenticate v1 messages); returns the session's lifetime in
    seconds as the broker told it (KIP-368; 0: none).

    Raises:
        LoginError: the broker refused, or the connection broke meanwhile.
    """
    # Framed and matched by the SDK's connection core, as the pool's requests are.
    state = ConnectionState("trafka-proxy", max_frame_size=_LOGIN_FRAME)
    lifetime_ms = 0

    async def call(key: int, version: int, body: Any) -> Any:
        _, frame = state.send_request(key, body, now=0.0, timeout=math.inf, version=version)
        await stream.send_all(frame)
        while True:
            data = await stream.receive_some(65536)
            if not data:
                raise LoginError(f"{where} closed the connection during the SASL login")
            if answers := state.receive_data(data):
                return answers[0].body

    async def exchange(token: bytes) -> bytes:
        nonlocal lifetime_ms
        answer = await call(
            ApiKey.SASL_AUTHENTICATE, 1, authenticate_msg.SaslAuthenticateRequest(auth_bytes=token)
        )
        if answer.error_code:
            raise LoginError(
                f"{where} refused the proxy's {held.mechanism} login for {held.username!r}: "
                f"{_error_name(answer.error_code)}"
            )
        lifetime_ms = max(0, int(answer.session_lifetime_ms))
        return bytes(answer.auth_bytes or b"")

    try:
        shake = await call(
            ApiKey.SASL_HANDSHAKE, 1, handshake_msg.SaslHandshakeRequest(mechanism=held.mechanism)
        )
        if shake.error_code:
            raise LoginError(
                f"{where} does not take SASL {held.mechanism}: {_error_name(shake.error_code)}"
            )
        if held.mechanism == "PLAIN":
            await exchange(plain_message(held.username, held.password))
        else:
            extensions = {"tokenauth": "true"} if held.tokenauth else None
            scram = ScramClient(held.mechanism, held.username, held.password, extensions=extensions)
            server_first = await exchange(scram.first_message())
            scram.verify(await exchange(scram.final_message(server_first)))
    except (SaslError, DecodeError, TrafkaError, ValueError) as exc:
        raise LoginError(f"{where}: the proxy's SASL login failed: {exc}") from None
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        raise LoginError(f"{where}: {exc}") from None
    return lifetime_ms / 1000


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


# -- per-principal pools -------------------------------------------------------------------


class PrincipalPools:
    """An :class:`~.pool.UpstreamPool` per principal with a held login, opened
    at its first use.

    Args:
        logins: principal -> the login the proxy holds for it.
        open_node: opens a plain (or TLS) stream to a broker by node id.
        make_pool: makes a pool around a connect function.
        timeout: seconds a login may take.
        counts: ``logins`` is bumped for each connection that logged in.
    """

    def __init__(
        self,
        logins: dict[str, UpstreamLogin],
        open_node: Callable[[int], Awaitable[trio.abc.Stream]],
        make_pool: Callable[[Callable[[int], Awaitable[trio.abc.Stream | Opened]]], UpstreamPool],
        timeout: float,
        counts: dict[str, int] | None = None,
    ) -> None:
        self._counts = {} if counts is None else counts
        self._logins = logins
        self._open_node = open_node
        self._make_pool = make_pool
        self._timeout = timeout
        self._pools: dict[str, UpstreamPool] = {}

    def pool(self, principal: str) -> UpstreamPool | None:
        """The principal's pool, or None when the proxy holds no login for it."""
        pool = self._pools.get(principal)
        if pool is None and principal in self._logins:
            held = self._logins[principal]

            async def connect(node_id: int) -> trio.abc.Stream | Opened:
                stream = await self._open_node(node_id)
                try:
                    with trio.fail_after(self._timeout):
                        lifetime = await login(stream, held, f"broker {node_id}")
                except BaseException as exc:
                    await trio.aclose_forcefully(stream)
                    if isinstance(exc, trio.TooSlowError):
                        raise LoginError(f"broker {node_id}: the SASL login timed out") from None
                    raise
                self._counts["logins"] = self._counts.get("logins", 0) + 1
                return Opened(stream, lifetime) if lifetime else stream

            pool = self._pools[principal] = self._make_pool(connect)
        return pool


# -- the proxy's side ----------------------------------------------------------------------

#: Sees a forwarded answer (its frame, without size prefix) before the client
#: does; returns None, or an answer (size prefix included) to write instead,
#: after which the client's connection closes.
Watch = Callable[[bytes], bytes | None]


@dataclass(slots=True)
class SaslClient:
    """A client connection that spoke SASL: its exchange, and the pool that
    logs in as its principal once known (None: none, its records go unrouted)."""

    watch: SaslWatch = field(default_factory=SaslWatch)
    pool: UpstreamPool | None = None

    @property
    def principal(self) -> str | None:
        return self.watch.principal


class SaslRouting:
    """What the proxy does with its SASL clients' exchanges.

    Args:
        pools: the per-principal pools.
        refuse: refuse a client whose principal has no login held (else it
            is forwarded unrouted).
        counts: outcome (``routed``, ``unrouted``, ``refused``) -> clients, bumped here.
        quiet: the proxy's rate-limited log.
        sub_claim: the OAUTHBEARER token claim the brokers take the principal
            from (their ``sasl.oauthbearer.sub.claim.name``).
    """

    def __init__(
        self,
        pools: PrincipalPools,
        refuse: bool,
        counts: dict[str, int],
        quiet: RateLimitedLog,
        sub_claim: str = "sub",
    ) -> None:
        self._sub_claim = sub_claim
        self.pools = pools
        self._refuse = refuse
        self._counts = counts
        self._quiet = quiet

    def client(self) -> SaslClient:
        """The state of a client connection that speaks SASL."""
        return SaslClient(SaslWatch(self._sub_claim))

    def request(self, client: SaslClient, key: int, frame: bytes) -> Watch | None:
        """Watch a SaslHandshake or SaslAuthenticate request; for the latter,
        returns what must see its answer before the client does (it returns
        the answer that replaces it, size prefix included, when the client is
        refused: the connection then closes)."""
        try:
            header, body = protocol.decode_request(frame, allow_trailing=True)
        except (DecodeError, TrafkaError):
            return None  # the broker judges it
        if key == ApiKey.SASL_HANDSHAKE:
            client.watch.handshake(body.mechanism)
            return None
        client.watch.request(bytes(body.auth_bytes or b""))
        return partial(self._answered, client, header.request_api_version)

    def _answered(self, client: SaslClient, version: int, frame: bytes) -> bytes | None:
        try:
            code, auth_bytes = read_authenticate_answer(frame, version)
        except (DecodeError, TrafkaError):
            # Judged a failure, so the next answer is still matched to its own request.
            code, auth_bytes = ErrorCode.ILLEGAL_SASL_STATE, b""
        principal = client.watch.answered(code, auth_bytes)
        client.pool = None if client.principal is None else client.pool
        if principal is None or client.pool is not None:
            return None
        client.pool = self.pools.pool(principal)
        if client.pool is not None:
            self._count("routed")
            log.debug("%s authenticated: its records are routed as itself", principal)
            return None
        if not self._refuse:
            self._count("unrouted")
            self._quiet.warning(
                ("sasl-unrouted", principal),
                "%s authenticated, but the proxy holds no upstream login for it "
                "(principal_credentials): its records are forwarded unrouted",
                principal,
            )
            return None
        self._count("refused")
        self._quiet.warning(
            ("sasl-refused", principal),
            "refusing %s: the proxy holds no upstream login for it (principal_credentials, "
            "sasl_without_credentials=refuse)",
            principal,
        )
        refusal = authenticate_msg.SaslAuthenticateResponse(
            error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
            error_message=f"the proxy routes no records for {principal}",
        )
        correlation_id = protocol.peek_correlation_id(frame)
        return protocol.encode_response(correlation_id, ApiKey.SASL_AUTHENTICATE, version, refusal)

    def _count(self, outcome: str) -> None:
        self._counts[outcome] = self._counts.get(outcome, 0) + 1


# The filter's per-connection state (ctx.state) and per-request note (ctx.notes).
_CLIENT = "trafka.proxy.principals:client"
_WATCH = "trafka.proxy.principals:watch"


class SaslPrincipals(Filter):
    """The SASL watch as a filter (see the module's rules).

    Args:
        logins: principal -> the login the proxy holds for it.
        refuse: refuse a client whose principal has no login held.
        sub_claim: the OAUTHBEARER claim naming the principal.
        timeout: seconds a pooled connection's login may take.
    """

    api_keys: frozenset[int] | None = frozenset()

    def __init__(
        self,
        logins: dict[str, UpstreamLogin] | None = None,
        *,
        refuse: bool = False,
        sub_claim: str = "sub",
        timeout: float = 10.0,
    ) -> None:
        self._logins = logins or {}
        self._refuse = refuse
        self._sub_claim = sub_claim
        self._timeout = timeout
        # outcome (routed, unrouted, refused) -> clients; logins -> pooled connections
        self.counts: dict[str, int] = {}
        self._routing: SaslRouting | None = None

    @classmethod
    def configured(cls, config: ProxyConfig) -> SaslPrincipals:
        """The proxy's, as ``config`` says (its credentials file read here).

        Raises:
            ValueError: the credentials file cannot be read or is malformed.
        """
        return cls(
            load_credentials(config.principal_credentials),
            refuse=config.sasl_without_credentials == "refuse",
            sub_claim=config.sasl_oauthbearer_sub_claim_name,
            timeout=config.connect_timeout,
        )

    def attach(self, services: ProxyServices) -> None:
        pools = PrincipalPools(
            self._logins, services.connect, services.new_pool, self._timeout, self.counts
        )
        self._routing = SaslRouting(
            pools, self._refuse, self.counts, services.quiet, self._sub_claim
        )

    def request_frames(self, api_key: int, api_version: int) -> bool:
        return api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)

    def answer_frames(self, api_key: int, api_version: int) -> bool:
        return api_key == ApiKey.SASL_AUTHENTICATE

    def on_request_frame(self, ctx: FilterContext, frame: bytes) -> bytes:
        routing = self._routing
        if routing is None:
            raise RuntimeError("SaslPrincipals is used by a proxy that did not attach it")
        client = ctx.state.get(_CLIENT)
        if client is None:
            client = ctx.state[_CLIENT] = routing.client()
        # The shared pool is not the client: what is sent on its behalf goes
        # over its principal's pool, or nowhere but its own connection.
        ctx.session.authenticated = True
        watch = routing.request(client, ctx.api_key, frame)
        if watch is not None:
            ctx.notes[_WATCH] = watch
        return frame

    def on_response_frame(self, ctx: FilterContext, frame: bytes) -> bytes | CloseAfter:
        watch = ctx.notes.get(_WATCH)
        if watch is None:
            return frame
        refusal = watch(frame)
        client: SaslClient = ctx.state[_CLIENT]
        ctx.session.principal, ctx.session.pool = client.principal, client.pool
        return frame if refusal is None else CloseAfter(refusal[4:])

    def statistics(self) -> dict[str, Any]:
        return {"sasl": self.counts}

    def samples(self) -> list[Sample]:
        counts = self.counts
        clients = [
            Sample(
                "trafka_proxy_sasl_clients",
                "SASL client connections that authenticated, by what became of their records.",
                (("outcome", outcome),),
                counts.get(outcome, 0),
            )
            for outcome in ("routed", "unrouted", "refused")
        ]
        logins = Sample(
            "trafka_proxy_sasl_upstream_logins",
            "Upstream connections the proxy opened and logged in as a client's principal.",
            value=counts.get("logins", 0),
        )
        return [*clients, logins]
