"""anyio drivers: one connection per broker, and the pool that owns them.

Rules:

* A :class:`BrokerConnection` owns a non-blocking TCP socket, a reader task
  and a writer task. Writing a request is synchronous: the frame goes to the
  socket at once, or, when the socket is full, into an ordered queue that the
  writer drains. So no caller can leave a frame half-written, and frames go
  out in the order their correlation ids were assigned. Requests are
  pipelined and matched by correlation id in
  :class:`~trafka.sdk.connection_state.ConnectionState`; callers either await
  :meth:`BrokerConnection.request` or give :meth:`BrokerConnection.send` a
  :class:`Completion` that the reader calls back (the producer's hot path: no
  task or event per request).
* The reader sleeps at most until the earliest in-flight deadline; a request
  past its deadline fails the whole connection with
  :class:`~trafka.sdk.errors.RequestTimeoutError` (a late response could no
  longer be matched). Any socket, framing or decode problem fails every
  waiter with a trafka error and closes the connection. Nothing below this
  module's public methods leaks an ``OSError`` or a codec internal.
* :class:`Cluster` owns the connections, the metadata cache and the tasks
  (readers, metadata refresher) inside the task group it is given. Failed
  connects back off exponentially per broker (``reconnect.backoff.ms`` to
  ``reconnect.backoff.max.ms``, +-20% jitter). A connect is one of those tasks,
  not its caller's: a caller that stops waiting leaves it to finish. It is
  bounded by ``socket.connection.setup.timeout.ms``, the ApiVersions handshake
  included (librdkafka's rule), so a broker that accepts connections but
  answers nothing is out of reach after it.
* Waiting callers are woken through events; no task polls.
* With TLS (``security.protocol`` SSL or SASL_SSL) the socket is an
  :class:`ssl.SSLSocket`, used the same non-blocking way: its "would block"
  errors are ``SSLWantReadError``/``SSLWantWriteError``, a write that would
  block is retried with the same bytes (as OpenSSL requires), and the reader
  never sleeps while the TLS layer still holds decrypted bytes (``pending()``).
  SASL (:mod:`.security`) runs in :meth:`BrokerConnection.open`, so a
  connection is handed out only once it is authenticated.
* Re-authentication (KIP-368): when the broker answers a non-zero
  ``session_lifetime_ms``, the connection re-authenticates in place at a
  random point between 85% and 95% of it (as Kafka's clients do), again and
  again while it lives. Meanwhile, requests other than SaslHandshake and
  SaslAuthenticate are held, in order, and written once it is done (the broker
  refuses anything else mid-exchange); requests already in flight are answered
  first, as the broker serves a connection's requests in order. A failed
  re-authentication fails the connection (and the held requests) like any
  connection failure.
* Quota throttling (KIP-219): once a response says the broker throttles the
  client, for an API and version whose clients throttle themselves
  (:func:`~.connection_state.client_throttles`), new requests on that
  connection are held, in order, until the throttle time after the response
  has passed; a task waits for that moment and writes them. Requests in flight
  are not affected and SaslHandshake/SaslAuthenticate are never held. A held
  request keeps its timeout, counted from when it was made: one still held when
  it runs out fails with RequestTimeoutError, unsent (the connection stays).
  Unthrottled, a request costs one comparison more. A broker throttling the
  client is logged at INFO: the first time for a connection, then at most once
  every 30 s.
* An :class:`~.errors.AuthenticationError` from a connect is kept by the
  :class:`Cluster` (``auth_error``) until a connect succeeds; metadata waits
  and the consumer raise it instead of waiting out their timeouts.
* A broker going out of reach is news the user must hear of even though the
  client retries by itself (librdkafka's ``error_cb``): a failed connect to a
  broker, or an opened connection lost with requests in flight (one the broker
  closed while idle is not), marks the broker unreachable
  (:attr:`Cluster.unreachable_brokers`) and is reported once, as a
  :class:`~.errors.BrokerUnreachableError`, to ``error_cb`` (or logged at
  WARNING without one); the next successful connect clears it. Bootstrap
  addresses are not brokers yet: a command that cannot reach any fails with
  NoBrokersAvailableError anyway.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import random
import socket
import ssl
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import anyio
import anyio.abc
import anyio.lowlevel

from trafka.codec import CodecError, ErrorCode, KafkaError, TrafkaError, UnsupportedVersionError

from ._backoff import backoff_delay
from ._util import loop_clock
from .config import AdminConfig, ClientConfig
from .connection_state import ConnectionState
from .errors import (
    AuthenticationError,
    BrokerUnreachableError,
    KafkaConnectionError,
    NoBrokersAvailableError,
    ProtocolError,
    RequestTimeoutError,
    UsageError,
)
from .metadata import MetadataCache
from .security import authenticate, client_ssl_context
from .statistics import BrokerStatistics, NodeCounters, broker_statistics

__all__ = ["BrokerConnection", "Cluster", "Completion", "backoff_delay"]

log = logging.getLogger("trafka.sdk")

# Bytes asked of the socket per read.
_RECV_SIZE = 1 << 18
# Topic errors in metadata that no wait cures: partitions_for reports them at once.
_FINAL_TOPIC_ERRORS = frozenset(
    {ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.INVALID_TOPIC_EXCEPTION}
)


class _Waiter:
    __slots__ = ("error", "event", "result")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def resolve(self, result: Any) -> None:
        self.result = result
        self.event.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.event.set()


class Completion(Protocol):
    """What :meth:`BrokerConnection.send` calls back with the outcome of a request.

    Both methods run synchronously in the connection's reader (or in whatever
    fails the connection); they must not raise and must not block.
    """

    def resolve(self, result: Any) -> None: ...

    def fail(self, error: BaseException) -> None: ...


class CallbackCompletion:
    """A :class:`Completion` made of two functions (say, a driver's methods with
    the request's own arguments bound), so that a driver answers its requests
    through its own methods, with no object reaching into it."""

    __slots__ = ("fail", "resolve")

    def __init__(
        self, resolve: Callable[[Any], None], fail: Callable[[BaseException], None]
    ) -> None:
        self.resolve = resolve
        self.fail = fail


async def _connect_socket(host: str, port: int) -> socket.socket:
    """A connected non-blocking TCP socket to the first address of ``host`` that accepts."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    last: OSError | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            code = sock.connect_ex(address)
            if code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                await anyio.wait_writable(sock)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise OSError(code, os.strerror(code))
            return sock
        except BaseException as exc:
            _close_socket(sock)
            if not isinstance(exc, OSError):
                raise
            last = exc
    raise last or OSError(f"no address for {host}")


# What a non-blocking send or recv raises when it would block, TLS included.
_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
_MAX_IOV = 512  # buffers handed to one sendmsg (Linux's IOV_MAX is 1024)
_HAS_SENDMSG = hasattr(socket.socket, "sendmsg")  # not on Windows
_SASL_APIS = frozenset({17, 36})  # SaslHandshake, SaslAuthenticate: never held
# Seconds between two log lines about a connection's quota throttling.
_THROTTLE_LOG_INTERVAL = 30.0
# api key, body, completion, version, and the deadline its timeout gives it (this
# driver's clock, from when it was handed to send()).
_Held = tuple[int, Any, "Completion | None", "int | None", float]


async def _tls_handshake(
    sock: socket.socket, context: ssl.SSLContext, host: str, port: int
) -> ssl.SSLSocket:
    """``sock`` wrapped in TLS, its handshake done (the caller bounds the time).

    Raises:
        AuthenticationError: the broker's certificate did not verify.
        KafkaConnectionError: the handshake failed otherwise.
    """
    try:
        tls = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    except (OSError, ValueError) as exc:
        _close_socket(sock)
        raise KafkaConnectionError(f"cannot start TLS with {host}:{port}: {exc}") from None
    try:
        while True:
            try:
                tls.do_handshake()
                return tls
            except ssl.SSLWantReadError:
                await anyio.wait_readable(tls)
            except ssl.SSLWantWriteError:
                await anyio.wait_writable(tls)
    except ssl.SSLCertVerificationError as exc:
        _close_socket(tls)
        raise AuthenticationError(
            f"the TLS certificate of {host}:{port} did not verify: {exc.verify_message}"
        ) from None
    except OSError as exc:
        _close_socket(tls)
        raise KafkaConnectionError(f"TLS handshake with {host}:{port} failed: {exc}") from None
    except BaseException:
        _close_socket(tls)
        raise


def _close_socket(sock: socket.socket) -> None:
    # Tasks waiting on the socket are woken (with ClosedResourceError) before the
    # descriptor goes away, so that a recycled descriptor never wakes them.
    try:
        anyio.notify_closing(sock)
    except RuntimeError:  # no event loop (interpreter shutdown)
        pass
    sock.close()


class BrokerConnection:
    """A connection to one broker.

    Use :meth:`Cluster.connection` rather than creating these directly.
    """

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        config: ClientConfig,
        *,
        tls: ssl.SSLContext | None = None,
        stats: NodeCounters | None = None,
        on_lost: Callable[[BrokerConnection, BaseException], None] | None = None,
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self._config = config
        self._tls = tls
        self._now = loop_clock()  # anyio.current_time, without its backend lookup
        self._state = ConnectionState(
            config.client_id, max_frame_size=config.receive_message_max_bytes, stats=stats
        )
        self.stats = self._state.stats
        self._opened = False  # the handshake completed: a later failure is a disconnect
        self._closing = False  # aclose() was called: a failure is not news
        # Called when the opened connection fails with requests in flight (not on aclose).
        self._on_lost = on_lost
        self._sock: socket.socket | None = None
        # Frames (or their unwritten tails) waiting for the socket, in order.
        self._out: deque[memoryview] = deque()
        self._writer_wake = anyio.Event()
        self._error: BaseException | None = None
        self._recv_scope: anyio.CancelScope | None = None
        self._closed = anyio.Event()
        # Requests held, in order, while re-authenticating or throttled (KIP-219).
        self._held: deque[_Held] = deque()
        self._reauthenticating = False
        # New requests are held until then: the throttle deadline, or +inf while
        # anything is held or a re-authentication runs (one compare in send()).
        self._hold_until = -math.inf
        #: Until when (this driver's clock) the broker throttles this connection.
        self.throttled_until = -math.inf
        self._throttles_seen = 0  # the state's throttled responses acted upon
        self._release_pending = False  # a task will write the held requests
        self._release_scope: anyio.CancelScope | None = None  # that task's wait
        self._throttle_logged_at = -math.inf
        self._throttles_logged = 0
        self._task_group: anyio.abc.TaskGroup | None = None
        #: Completed re-authentications (KIP-368) of this connection.
        self.reauthentications = 0
        #: The socket's file descriptor, for a caller's own readiness check
        #: (``select.poll``) before :meth:`receive_ready`; -1 until connected,
        #: and for TLS (whose decrypted bytes a poll of the socket cannot see).
        self.fileno = -1

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    @property
    def alive(self) -> bool:
        return self._error is None and self._sock is not None

    @property
    def in_flight(self) -> int:
        return self._state.in_flight_count

    def version_for(self, api_key: int) -> int:
        """The negotiated version of ``api_key`` (raises UnsupportedVersionError)."""
        return self._state.version_for(api_key)

    def supports(self, api_key: int) -> bool:
        return self._state.supports(api_key)

    async def open(self, task_group: anyio.abc.TaskGroup) -> None:
        """Connect (TLS included), start the reader and writer in ``task_group``, do
        the ApiVersions handshake, then SASL when configured.

        Raises:
            KafkaConnectionError: connect failed or timed out.
            RequestTimeoutError / ProtocolError: the handshake failed.
            AuthenticationError: TLS or SASL refused this client.
        """
        timeout = self._config.socket_connection_setup_timeout_ms / 1000
        # The setup timeout bounds the ApiVersions handshake too (librdkafka's
        # rule): a broker whose kernel accepts connections but that answers
        # nothing (hung, frozen) is out of reach after it, not after request.timeout.ms.
        setup_deadline = anyio.current_time() + timeout
        try:
            with anyio.fail_after(timeout):
                sock = await _connect_socket(self.host, self.port)
                if self._tls is not None:
                    sock = await _tls_handshake(sock, self._tls, self.host, self.port)
                self._sock = sock
                if self._tls is None:
                    self.fileno = sock.fileno()
        except TimeoutError:
            raise KafkaConnectionError(f"connecting to {self.host}:{self.port} timed out") from None
        except KafkaConnectionError:
            raise
        except OSError as exc:
            raise KafkaConnectionError(
                f"cannot connect to {self.host}:{self.port}: {exc}"
            ) from None
        self._task_group = task_group  # (a throttled handshake schedules a release)
        waiter = _Waiter()
        now = self._now()
        frame = self._state.handshake(now, self._config.request_timeout_ms / 1000, waiter)
        task_group.start_soon(self._reader, name=f"trafka reader {self.host}:{self.port}")
        task_group.start_soon(self._writer, name=f"trafka writer {self.host}:{self.port}")
        self._write(frame)
        with anyio.move_on_at(setup_deadline):
            await waiter.event.wait()
        if not waiter.event.is_set():
            raise KafkaConnectionError(
                f"connecting to {self.host}:{self.port} timed out: no answer to ApiVersions "
                f"within socket.connection.setup.timeout.ms "
                f"({self._config.socket_connection_setup_timeout_ms} ms)"
            )
        if waiter.error is not None:
            raise waiter.error
        lifetime_ms = 0
        if self._config.uses_sasl:
            lifetime_ms = await authenticate(self, self._config)
        self._opened = True
        self.stats.connects += 1
        self._schedule_reauthentication(lifetime_ms)

    def _schedule_reauthentication(self, lifetime_ms: int) -> None:
        """Re-authenticate at a random 85-95% of a session of ``lifetime_ms`` (0: never)."""
        if lifetime_ms <= 0 or self._task_group is None or self._error is not None:
            return
        delay = lifetime_ms * random.uniform(0.85, 0.95) / 1000
        self._task_group.start_soon(
            self._reauthenticate, delay, name=f"trafka re-authentication {self.host}:{self.port}"
        )

    async def _reauthenticate(self, delay: float) -> None:
        """After ``delay`` seconds, run SASL again on this connection, holding other
        requests meanwhile; then schedule the next one. Ends with the connection."""
        with anyio.move_on_after(delay):
            await self._closed.wait()
        if self._error is not None or self._sock is None:
            return
        self._reauthenticating = True
        self._hold_until = math.inf
        try:
            lifetime_ms = await authenticate(self, self._config)
        except TrafkaError as exc:
            log.warning("re-authentication with node %s failed: %s", self.node_id, exc)
            self._fail(exc)
            return
        finally:
            self._reauthenticating = False
            self._release_held()
        self.reauthentications += 1
        log.debug(
            "re-authenticated with node %s; session lifetime %d ms", self.node_id, lifetime_ms
        )
        self._schedule_reauthentication(lifetime_ms)

    def _release_held(self) -> None:
        """Write the held requests, in order, unless a re-authentication or a
        throttle still holds them (then whoever ends it calls this again)."""
        self._expire_held(self._now())
        held = self._held
        while held and self._error is None and not self._reauthenticating:
            now = self._now()
            if now < self.throttled_until:
                self._release_later()
                break
            api_key, body, completion, version, deadline = held.popleft()
            try:
                # The time held counts against the request's timeout.
                self._send_now(api_key, body, completion, deadline - now, version, now)
            except TrafkaError as exc:
                if completion is not None:
                    completion.fail(exc)
        self._update_hold()

    def _update_hold(self) -> None:
        if self._held or self._reauthenticating:
            self._hold_until = math.inf
        else:
            self._hold_until = self.throttled_until

    def _release_later(self) -> None:
        """Have a task write the held requests once the throttle time has passed."""
        if self._release_pending or self._task_group is None or self._error is not None:
            return
        self._release_pending = True
        self._task_group.start_soon(
            self._release_after_throttle, name=f"trafka throttle {self.host}:{self.port}"
        )

    async def _release_after_throttle(self) -> None:
        try:
            # The throttle deadline may move on while this waits (another throttled
            # answer); a held request whose timeout passes first fails meanwhile.
            while self._error is None:
                now = self._now()
                self._expire_held(now)
                if now >= self.throttled_until or not self._held:
                    break  # (a request held later starts another task)
                wake = min([self.throttled_until, *(entry[4] for entry in self._held)])
                with anyio.CancelScope(deadline=wake) as scope:
                    self._release_scope = scope  # send() may bring the wake-up forward
                    await self._closed.wait()
        finally:
            self._release_pending = False
            self._release_scope = None
        self._release_held()

    def _expire_held(self, now: float) -> None:
        """Fail the held requests whose timeout has passed: they were never sent,
        so the connection stays (a request in flight that times out fails it)."""
        expired = [entry for entry in self._held if entry[4] <= now]
        if not expired:
            return
        self._held = deque(entry for entry in self._held if entry[4] > now)
        self.stats.throttle_expired += len(expired)
        why = (
            f"node {self.node_id} throttles this client (KIP-219)"
            if now < self.throttled_until
            else "the connection was re-authenticating"
        )
        for api_key, _, completion, _, _ in expired:
            if completion is None:  # a Produce with acks=0: dropped, as acks=0 allows
                continue
            error = RequestTimeoutError(
                f"API key {api_key} was held past its timeout and never sent: {why}"
            )
            try:
                completion.fail(error)
            except Exception:
                log.exception("completion of a held request failed")
        self._update_hold()

    def _throttle_news(self) -> None:
        """Act on responses that said the broker throttles this client: move the
        hold deadline, and log (rate-limited)."""
        state = self._state
        count = self.stats.throttles
        self._throttles_seen = count
        if state.throttled_until > self.throttled_until:
            self.throttled_until = state.throttled_until
            self._update_hold()
        now = self._now()
        if now - self._throttle_logged_at < _THROTTLE_LOG_INTERVAL:
            return
        api_key, version, throttle_ms = state.last_throttle
        held = " (holding new requests until it has passed)" if self.throttled_until > now else ""
        since = count - self._throttles_logged
        log.info(
            "node %s throttles this client for a quota: %d ms on API key %d v%d%s; "
            "%d throttled response(s) %s",
            self.node_id,
            throttle_ms,
            api_key,
            version,
            held,
            since,
            "so far" if self._throttles_logged == 0 else "since the last such line",
        )
        self._throttle_logged_at = now
        self._throttles_logged = count

    def send(
        self,
        api_key: int,
        body: Any,
        completion: Completion | None,
        *,
        timeout: float | None = None,
        version: int | None = None,
    ) -> None:
        """Write a request now and report its response to ``completion`` later.

        The request is framed and handed to the socket (or queued behind
        earlier frames) before this returns; nothing here waits. While the
        connection re-authenticates or the broker throttles it (KIP-219), the
        request is held instead, in order, and written when that ends. With
        ``completion=None`` no response is expected (Produce with acks=0).

        Raises:
            KafkaConnectionError: the connection is closed or broke while writing.
            UnsupportedVersionError: no common version.
        """
        if self._error is not None or self._sock is None:
            raise KafkaConnectionError(
                f"connection to node {self.node_id} is closed"
            ) from self._error
        now = self._now()
        if now < self._hold_until and api_key not in _SASL_APIS:
            t = self._config.request_timeout_ms / 1000 if timeout is None else timeout
            self._held.append((api_key, body, completion, version, now + t))
            scope = self._release_scope
            if scope is not None and now + t < scope.deadline:
                scope.deadline = now + t
            self._hold_until = math.inf
            if now < self.throttled_until:
                self.stats.throttle_held += 1
            if not self._reauthenticating:
                self._release_later()
            return
        self._send_now(api_key, body, completion, timeout, version, now)

    def _send_now(
        self,
        api_key: int,
        body: Any,
        completion: Completion | None,
        timeout: float | None,
        version: int | None,
        now: float,
    ) -> None:
        """Frame and write a request (see :meth:`send`), holding or not."""
        t = self._config.request_timeout_ms / 1000 if timeout is None else timeout
        try:
            _, parts = self._state.send_request_parts(
                api_key,
                body,
                now=now,
                timeout=t,
                version=version,
                expect_response=completion is not None,
                cookie=completion,
            )
        except UsageError as exc:
            raise KafkaConnectionError(f"connection to node {self.node_id} is broken") from exc
        self._write(parts[0] if len(parts) == 1 else parts)
        if self._error is not None:
            if completion is not None:
                return  # failing the connection failed the completion too
            raise KafkaConnectionError(
                f"connection to node {self.node_id} lost while sending"
            ) from self._error
        scope = self._recv_scope
        if completion is not None and scope is not None and now + t < scope.deadline:
            scope.deadline = now + t

    async def request(
        self,
        api_key: int,
        body: Any,
        *,
        timeout: float | None = None,
        version: int | None = None,
        expect_response: bool = True,
    ) -> Any:
        """Send a request and wait for its response body.

        Args:
            api_key: the API.
            body: the request message, shaped for the negotiated (or given) version.
            timeout: seconds; default ``request.timeout.ms``.
            version: force a version.
            expect_response: False for Produce with acks=0 (returns None at once).

        Raises:
            KafkaConnectionError, RequestTimeoutError, ProtocolError: the
                connection failed (it is closed; every in-flight request fails).
            UnsupportedVersionError: no common version.
        """
        waiter = _Waiter() if expect_response else None
        self.send(api_key, body, waiter, timeout=timeout, version=version)
        if waiter is None:
            return None
        await waiter.event.wait()
        if waiter.error is not None:
            raise waiter.error
        return waiter.result

    # -- the socket ---------------------------------------------------------------------

    def _write(self, data: bytes | list[bytes]) -> None:
        """Write ``data`` (or its parts, in order, in one ``sendmsg`` without
        joining them) after everything queued before it; queue what the socket
        refuses.

        Writing is synchronous, so a frame is never half-written by a
        cancelled caller: whatever the socket does not take now, the writer
        task sends later, in order.
        """
        sock = self._sock
        if sock is None or self._error is not None:
            return
        parts = data if isinstance(data, list) else [data]
        if len(parts) > 1 and (not _HAS_SENDMSG or isinstance(sock, ssl.SSLSocket)):
            parts = [b"".join(parts)]  # TLS (and Windows) has no sendmsg
        out = self._out
        if out:
            out.extend(map(memoryview, parts))
            return
        try:
            if len(parts) == 1:
                n = sock.send(parts[0])
            else:
                # At most _MAX_IOV buffers a call: the rest waits in the queue.
                n = sock.sendmsg(parts if len(parts) <= _MAX_IOV else parts[:_MAX_IOV])
        except _WOULD_BLOCK:
            n = 0
        except OSError as exc:
            self._fail(
                KafkaConnectionError(
                    f"connection to node {self.node_id} lost while sending: {exc!r}"
                )
            )
            return
        for part in parts:
            if n >= len(part):
                n -= len(part)
                continue
            out.append(memoryview(part)[n:])
            n = 0
        if out:
            self._writer_wake.set()

    async def _writer(self) -> None:
        sock = self._sock
        assert sock is not None
        out = self._out
        try:
            while self._error is None:
                await self._writer_wake.wait()
                self._writer_wake = anyio.Event()
                while out and self._error is None:
                    await anyio.wait_writable(sock)
                    while out:
                        head = out[0]
                        try:
                            n = sock.send(head)
                        except _WOULD_BLOCK:
                            break
                        if n < len(head):
                            out[0] = head[n:]
                            break
                        out.popleft()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the connection was closed: _fail has the story
        except OSError as exc:
            self._fail(
                KafkaConnectionError(
                    f"connection to node {self.node_id} lost while sending: {exc!r}"
                )
            )

    def receive_ready(self) -> bool:
        """Read and handle the responses the socket already holds, without waiting.

        For a caller about to wait on one of them: its completion runs now
        rather than once the reader task is scheduled. Anything else the reader
        would have read comes through here too, in order; a failure fails the
        connection as the reader would.

        Returns:
            Whether anything had arrived (bytes, the end of the stream or an error).
        """
        sock = self._sock
        if sock is None or self._error is not None:
            return False
        state = self._state
        stats = self.stats
        plain = self.fileno >= 0
        arrived = False
        try:
            while self._error is None:
                try:
                    data = sock.recv(_RECV_SIZE)
                except _WOULD_BLOCK:
                    return arrived
                arrived = True
                if not data:
                    raise anyio.EndOfStream
                # As in _reader, which keeps its own copy of this loop: a call per
                # chunk there measured up to 10% slower consumption.
                responses = state.receive_data(data, self._now())
                if stats.throttles != self._throttles_seen:
                    self._throttle_news()  # before a completion may send more
                for response in responses:
                    try:
                        response.cookie.resolve(response.body)
                    except Exception:  # a completion's bug must not kill the connection
                        log.exception("completion of API key %s failed", response.api_key)
                retry = state.data_to_send()
                if retry:
                    self._write(retry)
                if plain and len(data) < _RECV_SIZE:
                    # The socket had less than asked for: it was empty then (as
                    # the reader judges), so spare the recv that would fail.
                    break
        except Exception as exc:
            self._fail(self._reader_error(exc))
        return True

    async def _reader(self) -> None:
        sock = self._sock
        assert sock is not None
        state = self._state
        stats = self.stats
        recv = sock.recv
        tls = sock if isinstance(sock, ssl.SSLSocket) else None
        try:
            while True:
                try:
                    data = recv(_RECV_SIZE)
                except _WOULD_BLOCK:
                    await self._wait_readable(sock)
                    continue
                if not data:
                    raise anyio.EndOfStream
                responses = state.receive_data(data, self._now())
                if stats.throttles != self._throttles_seen:
                    self._throttle_news()  # before a completion may send more
                for response in responses:
                    try:
                        response.cookie.resolve(response.body)
                    except Exception:  # a completion's bug must not kill the connection
                        log.exception("completion of API key %s failed", response.api_key)
                retry = state.data_to_send()
                if retry:
                    self._write(retry)
                if (
                    len(data) < _RECV_SIZE
                    and not state.mid_response
                    and (tls is None or not tls.pending())
                ):
                    # Every answer so far is whole and the socket had less than
                    # asked for: it is most likely empty now. Wait for more (which
                    # lets the other tasks run) rather than yield and then find it
                    # empty.
                    await self._wait_readable(sock)
                else:
                    # A large answer keeps arriving: let the other tasks run
                    # between reads (the next read mostly finds more).
                    await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            self._fail(KafkaConnectionError(f"connection to node {self.node_id} closed"))
            raise
        except Exception as exc:
            self._fail(self._reader_error(exc))

    async def _wait_readable(self, sock: socket.socket) -> None:
        """Wait until ``sock`` has data, or fail the request that timed out first.

        Raises:
            RequestTimeoutError: a request in flight passed its deadline.
        """
        state = self._state
        deadline = state.next_deadline()
        with anyio.CancelScope(deadline=math.inf if deadline is None else deadline) as scope:
            self._recv_scope = scope
            await anyio.wait_readable(sock)
        self._recv_scope = None
        if scope.cancelled_caught:
            late = state.expired(self._now())
            if late:
                raise RequestTimeoutError(
                    f"node {self.node_id} sent no response within "
                    f"{self._config.request_timeout_ms} ms (API key {late[0].api_key})"
                ) from None

    def _reader_error(self, exc: Exception) -> BaseException:
        """What a failure of reading ``exc`` fails the connection's requests with."""
        if isinstance(exc, anyio.EndOfStream):
            return KafkaConnectionError(f"node {self.node_id} closed the connection")
        # Before OSError: two of these subclass TimeoutError / ConnectionError.
        if isinstance(exc, (ProtocolError, RequestTimeoutError, KafkaConnectionError)):
            return exc
        if isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError)):
            return KafkaConnectionError(f"connection to node {self.node_id} closed")
        if isinstance(exc, OSError):
            return KafkaConnectionError(f"connection to node {self.node_id} lost: {exc!r}")
        if isinstance(exc, CodecError):  # pragma: no cover - the state translates these
            return ProtocolError(str(exc))
        # A bug of ours: fail the waiters rather than hang them.
        log.error("reader of node %s crashed", self.node_id, exc_info=exc)
        return ProtocolError(f"internal error in the connection reader: {exc!r}")

    def _fail(self, error: BaseException) -> None:
        if self._error is not None:
            return
        self._error = error
        # Lost while waiting for answers: the broker went away (a connection it
        # closed while idle is no news; the next connect says whether it is up).
        lost = (
            self._opened
            and not self._closing
            and (self._state.in_flight_count > 0 or bool(self._held))
        )
        if self._opened:
            self.stats.disconnects += 1
        held, self._held = self._held, deque()
        for _, _, completion, _, _ in held:
            if completion is not None:
                try:
                    completion.fail(error)
                except Exception:
                    log.exception("completion of a held request failed")
        for entry in self._state.fail_all():
            if entry.cookie is not None:
                try:
                    entry.cookie.fail(error)
                except Exception:
                    log.exception("completion of API key %s failed", entry.api_key)
        if self._recv_scope is not None:
            self._recv_scope.cancel()
        self._out.clear()
        self._writer_wake.set()  # the writer ends instead of waiting forever
        sock = self._sock
        if sock is not None:
            _close_socket(sock)
        self._closed.set()
        if lost and self._on_lost is not None:
            self._on_lost(self, error)

    async def aclose(self) -> None:
        """Close the connection; in-flight requests fail with KafkaConnectionError."""
        self._closing = True
        self._fail(KafkaConnectionError(f"connection to node {self.node_id} closed"))
        await anyio.lowlevel.checkpoint()


#: Connection ids of coordinators (group and transaction): ``COORDINATOR_BASE -
#: node_id``, so that coordinator traffic has its own connection, apart from the
#: node's produce and fetch requests.
COORDINATOR_BASE = 2**31 - 1


def is_coordinator_id(conn_id: int) -> bool:
    """Whether a connection id is a coordinator's (:data:`COORDINATOR_BASE` - node id)."""
    return conn_id > COORDINATOR_BASE // 2


class Cluster:
    """Connections, metadata and their background tasks for one client.

    Args:
        config: the client's connection settings.
        task_group: where reader and refresher tasks run; the owner cancels it.
    """

    def __init__(self, config: ClientConfig, task_group: anyio.abc.TaskGroup) -> None:
        self._now = loop_clock()  # anyio.current_time, without its backend lookup
        self.config = config
        self._tg = task_group
        self.metadata = MetadataCache(
            max_age=config.metadata_max_age_ms / 1000,
            backoff=config.retry_backoff_ms / 1000,
            # Only consumers have the setting. Producers' metadata requests may create
            # topics (as Java's do); an admin's never do (as Kafka's AdminClient's).
            auto_create=getattr(
                config, "allow_auto_create_topics", not isinstance(config, AdminConfig)
            ),
        )
        self._conns: dict[int, BrokerConnection] = {}
        self._stats: dict[int, NodeCounters] = {}  # per connection id, across reconnects
        self._addresses: dict[int, tuple[str, int]] = {}
        self._connecting: dict[int, anyio.Event] = {}
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}
        self._last_error: dict[int, BaseException] = {}
        self._metadata_event = anyio.Event()
        self._refresh_nudge = anyio.Event()
        self._refresh_lock = anyio.Lock()
        self._static_bootstrap = config.bootstrap_addresses
        self._bootstrap = list(self._static_bootstrap)
        self._specs = config.discovery_specs
        self._discoveries = 0  # completed zeroconf lookups
        self._discover_lock = anyio.Lock()
        self._rng = random.Random()
        self._closed = False
        self._tls = client_ssl_context(config)
        #: The last connect's AuthenticationError, until a connect succeeds.
        self.auth_error: AuthenticationError | None = None
        self.on_change: list[Any] = []  # callables run when connections or metadata change
        #: Why the background metadata refresh last failed (None after a success).
        self.refresh_error: TrafkaError | None = None
        # Brokers out of reach (node id -> why) until a connect to them succeeds.
        self._unreachable: dict[int, BrokerUnreachableError] = {}

    @property
    def uses_tls(self) -> bool:
        """Whether the connections are TLS (their ``fileno`` is then -1)."""
        return self._tls is not None

    # -- connections --------------------------------------------------------------------

    def set_address(self, node_id: int, host: str, port: int) -> None:
        """Register the address of a connection id that metadata does not know (coordinators)."""
        self._addresses[node_id] = (host, port)

    def _address(self, node_id: int) -> tuple[str, int]:
        if node_id in self._addresses:
            return self._addresses[node_id]
        if node_id < 0:
            if not self._bootstrap:
                raise KafkaConnectionError("no bootstrap address yet (zeroconf has found none)")
            return self._bootstrap[(-node_id - 1) % len(self._bootstrap)]
        broker = self.metadata.broker(node_id)
        if broker is None:
            raise KafkaConnectionError(f"node {node_id} is not in the cluster metadata")
        return broker.host, broker.port

    def broker_statistics(self) -> dict[int, BrokerStatistics]:
        """Per broker node id, the totals of its connections (see :mod:`.statistics`)."""
        by_node: dict[int, list[int]] = {}
        for conn_id in self._stats:
            node = COORDINATOR_BASE - conn_id if is_coordinator_id(conn_id) else conn_id
            by_node.setdefault(node, []).append(conn_id)
        out: dict[int, BrokerStatistics] = {}
        now = self._now()
        for node, ids in sorted(by_node.items()):
            live = [c for i in ids if (c := self.ready_connection(i)) is not None]
            out[node] = broker_statistics(
                node,
                (self._stats[i] for i in ids),
                connected=bool(live),
                in_flight=sum(c.in_flight for c in live),
                throttle_remaining=max((c.throttled_until - now for c in live), default=0.0),
            )
        return out

    @property
    def unreachable_brokers(self) -> dict[int, BrokerUnreachableError]:
        """The brokers (node ids) out of reach, each with why: a connect to it
        failed, or its connection was lost with requests in flight, and no
        connect succeeded since. Coordinator connections count for their broker;
        bootstrap addresses, which stand for no broker yet, do not."""
        return dict(self._unreachable)

    def _broker_of(self, conn_id: int) -> int:
        return COORDINATOR_BASE - conn_id if is_coordinator_id(conn_id) else conn_id

    def _out_of_reach(self, conn_id: int, host: str, port: int, cause: BaseException) -> None:
        """A connection to ``conn_id`` failed: tell the user the first time its
        broker goes out of reach (``error_cb``, else a WARNING), not at every retry."""
        node = self._broker_of(conn_id)
        if node < 0 or self._closed or node in self._unreachable:
            return
        error = BrokerUnreachableError(node, host, port, cause)
        self._unreachable[node] = error
        report = self.config.error_cb
        if report is None:
            log.warning("%s (retrying)", error)
            return
        try:
            report(error)
        except Exception:
            log.exception("error_cb raised")

    def _reached(self, conn_id: int, host: str, port: int) -> None:
        if self._unreachable.pop(self._broker_of(conn_id), None) is not None:
            log.info("broker %s at %s:%s is reachable again", self._broker_of(conn_id), host, port)

    def _connection_lost(self, conn: BrokerConnection, error: BaseException) -> None:
        self._out_of_reach(conn.node_id, conn.host, conn.port, error)

    def ready_connection(self, node_id: int) -> BrokerConnection | None:
        """The live connection to ``node_id``, or None (without connecting)."""
        conn = self._conns.get(node_id)
        return conn if conn is not None and conn.alive else None

    def least_loaded_connection(self) -> BrokerConnection | None:
        """The live connection with the fewest requests in flight, or None (no connecting).

        What the client metrics push (KIP-714) picks its broker with, as Java's
        ``leastLoadedNode`` among the ready connections.
        """
        best: BrokerConnection | None = None
        for conn in self._conns.values():
            if conn.alive and (best is None or conn.in_flight < best.in_flight):
                best = conn
                if not conn.in_flight:
                    break
        return best

    def take_peaks(self) -> dict[int, tuple[dict[int, float], int]]:
        """Per broker node id, the highest request latency per API key (ms) and
        throttle (ms) since the last call (see :meth:`NodeCounters.take_peaks`)."""
        out: dict[int, tuple[dict[int, float], int]] = {}
        for conn_id, stats in self._stats.items():
            node = COORDINATOR_BASE - conn_id if is_coordinator_id(conn_id) else conn_id
            latencies, throttle = stats.take_peaks()
            apis, most = out.get(node, ({}, 0))
            for key, latency in latencies.items():
                apis[key] = max(apis.get(key, 0.0), latency * 1000)
            out[node] = (apis, max(most, throttle))
        return out

    def connect_soon(self, node_id: int) -> None:
        """Start connecting to ``node_id`` in the background (if not already)."""
        if self._closed or self.ready_connection(node_id) or node_id in self._connecting:
            return
        self._connecting[node_id] = anyio.Event()
        self._tg.start_soon(self._connect_task, node_id)

    def connect_delay(self, node_id: int) -> float:
        """Seconds until a connect to ``node_id`` may be tried (0: now)."""
        at = self._retry_at.get(node_id)  # None: no failure to back off from
        return 0.0 if at is None else max(0.0, at - self._now())

    async def _connect_task(self, node_id: int) -> None:
        try:
            await self._connect(node_id)
        except (TrafkaError, OSError):
            pass  # recorded in _last_error; callers see it through connection()

    async def _connect(self, node_id: int) -> BrokerConnection:
        event = self._connecting.setdefault(node_id, anyio.Event())
        try:
            delay = self.connect_delay(node_id)
            if delay > 0:
                await anyio.sleep(delay)
            host, port = self._address(node_id)
            stats = self._stats.get(node_id)
            if stats is None:
                stats = self._stats[node_id] = NodeCounters()
            conn = BrokerConnection(
                node_id,
                host,
                port,
                self.config,
                tls=self._tls,
                stats=stats,
                on_lost=self._connection_lost,
            )
            try:
                await conn.open(self._tg)
            except (TrafkaError, UnsupportedVersionError) as exc:
                stats.connect_failures += 1
                await conn.aclose()
                n = self._failures.get(node_id, 0) + 1
                self._failures[node_id] = n
                cfg = self.config
                self._retry_at[node_id] = self._now() + backoff_delay(
                    cfg.reconnect_backoff_ms / 1000,
                    cfg.reconnect_backoff_max_ms / 1000,
                    n,
                    self._rng,
                )
                self._last_error[node_id] = exc
                if isinstance(exc, AuthenticationError):
                    self.auth_error = exc
                    log.error("%s", exc)
                elif isinstance(exc, (KafkaConnectionError, RequestTimeoutError)):
                    self._out_of_reach(node_id, host, port, exc)
                if node_id >= 0:
                    # The broker may have moved: ask for metadata now, not at max age.
                    self.metadata.request_update()
                    self.nudge()
                raise
            except BaseException:
                # The caller was cancelled (its deadline) mid-handshake: the
                # reader and writer already run; close the connection with them.
                with anyio.CancelScope(shield=True):
                    await conn.aclose()
                raise
            self._failures.pop(node_id, None)
            self._retry_at.pop(node_id, None)
            self._last_error.pop(node_id, None)
            self.auth_error = None
            self._reached(node_id, host, port)
            self._conns[node_id] = conn
            return conn
        finally:
            self._connecting.pop(node_id, None)
            event.set()
            self._changed()

    async def connection(self, node_id: int) -> BrokerConnection:
        """A live connection to ``node_id``, connecting (after any backoff) if needed.

        Raises:
            KafkaConnectionError: the connect failed.
            AuthenticationError: the broker refused this client's credentials.
        """
        conn = self.ready_connection(node_id)
        if conn is not None:
            return conn
        # The connect is the cluster's task, not the caller's: a caller that stops
        # waiting (its deadline) leaves it to finish, so that a broker that does not
        # answer is still found out, and reported, at the setup timeout.
        started = node_id not in self._connecting
        if started:
            self._address(node_id)  # a node metadata does not know is said now
            self.connect_soon(node_id)
        pending = self._connecting.get(node_id)
        if pending is not None:
            await pending.wait()
        conn = self.ready_connection(node_id)
        if conn is not None:
            return conn
        last = self._last_error.get(node_id)
        if isinstance(last, AuthenticationError):
            raise last.again()
        if started and last is not None:
            raise last.with_traceback(None)  # what this caller's connect met
        why = "" if last is None else f": {last}"
        raise KafkaConnectionError(f"cannot connect to node {node_id}{why}") from last

    async def coordinator_connection(
        self, coordinator: tuple[int, str, int] | None
    ) -> BrokerConnection:
        """A live connection to a coordinator ``(node_id, host, port)`` (its own, see
        :data:`COORDINATOR_BASE`), or to any broker when ``coordinator`` is None.

        Raises:
            KafkaConnectionError / NoBrokersAvailableError: the connect failed.
        """
        if coordinator is None:
            return await self.any_connection()
        node, host, port = coordinator
        conn_id = COORDINATOR_BASE - node
        self.set_address(conn_id, host, port)
        return await self.connection(conn_id)

    def ready_coordinator_connection(self, node_id: int) -> BrokerConnection | None:
        """The coordinator connection to ``node_id`` if it is up, without waiting."""
        return self.ready_connection(COORDINATOR_BASE - node_id)

    async def any_connection(self) -> BrokerConnection:
        """A live connection to some broker: a connected one, else the first that accepts.

        Raises:
            NoBrokersAvailableError: no known broker or bootstrap server accepted.
            AuthenticationError: none accepted, and one refused this client's
                credentials.
        """
        for conn in list(self._conns.values()):
            if conn.alive:
                return conn
        if not self._specs:
            return await self._connect_any()
        seen = self._discoveries
        if seen == 0:
            await self._discover(seen)
        try:
            return await self._connect_any()
        except NoBrokersAvailableError:
            if seen == 0:
                raise
        # Every address failed: the brokers may have moved; look again, once.
        await self._discover(seen)
        return await self._connect_any()

    async def _discover(self, seen: int) -> None:
        """Replace the discovered bootstrap addresses with what zeroconf finds now
        (unless another task did so since it saw ``seen`` lookups)."""
        from trafka.discovery import DiscoveryError, discover

        async with self._discover_lock:
            if self._discoveries != seen:
                return
            found: list[tuple[str, int]] = []
            for spec in self._specs:
                try:
                    services = await discover(
                        spec, first=True, security_protocols=self.config.security_protocol
                    )
                except DiscoveryError as exc:
                    raise NoBrokersAvailableError(f"zeroconf: {exc}") from None
                if not services and not self._static_bootstrap:
                    raise NoBrokersAvailableError(
                        f"zeroconf found no {self.config.security_protocol.upper()} Kafka "
                        f"service ({spec.describe()}) within {spec.timeout_ms} ms"
                    )
                for service in services:
                    found.extend(service.endpoints)
            log.debug("zeroconf bootstrap: %s", found)
            self._bootstrap = [*self._static_bootstrap, *found]
            for node_id in [n for n in self._failures if n < 0]:
                # Bootstrap slots now stand for other addresses: forget their failures.
                self._failures.pop(node_id, None)
                self._retry_at.pop(node_id, None)
                self._last_error.pop(node_id, None)
            self._discoveries += 1

    async def _connect_any(self) -> BrokerConnection:
        candidates = list(self.metadata.brokers)
        self._rng.shuffle(candidates)
        boot = [-(i + 1) for i in range(len(self._bootstrap))]
        self._rng.shuffle(boot)
        # Known brokers first (their addresses are current), bootstrap servers after.
        order = sorted(candidates + boot, key=self.connect_delay)
        errors = []
        refused: AuthenticationError | None = None
        for node_id in order:
            try:
                return await self.connection(node_id)
            except AuthenticationError as exc:
                refused = refused or exc
                errors.append(f"{node_id}: {exc}")
            except TrafkaError as exc:
                errors.append(f"{node_id}: {exc}")
        if refused is not None:
            raise refused
        raise NoBrokersAvailableError(
            f"no broker available (bootstrap {', '.join(self.config.bootstrap_servers)}): "
            + "; ".join(errors[-3:])
        )

    async def request_any(self, api_key: int, body: Any, **kw: Any) -> tuple[BrokerConnection, Any]:
        conn = await self.any_connection()
        return conn, await conn.request(api_key, body, **kw)

    # -- metadata -----------------------------------------------------------------------

    def _changed(self) -> None:
        for fn in self.on_change:
            fn()

    def start(self) -> None:
        """Start the metadata refresher task."""
        self._tg.start_soon(self._refresher, name="trafka metadata refresher")

    def nudge(self) -> None:
        """Wake the refresher (a refresh was requested)."""
        self._refresh_nudge.set()

    async def _refresher(self) -> None:
        md = self.metadata
        while True:
            now = self._now()
            if md.wanted_topics or md.want_all or not md.brokers:
                at = md.next_update_at(now)
            else:
                at = math.inf
            if at > now:
                self._refresh_nudge = anyio.Event()
                with anyio.move_on_after(min(at - now, 3600.0)):
                    await self._refresh_nudge.wait()
                continue
            try:
                await self.refresh_metadata()
            except TrafkaError as exc:
                log.debug("metadata refresh failed: %s", exc)
                self.refresh_error = exc
                await anyio.sleep(self.metadata.backoff)
            else:
                self.refresh_error = None

    async def refresh_metadata(self, topics: Iterable[str] | None = None) -> None:
        """Fetch metadata for the tracked topics (plus ``topics``) and apply it.

        Concurrent callers share one request.

        Raises:
            NoBrokersAvailableError / KafkaConnectionError / RequestTimeoutError.
        """
        md = self.metadata
        if topics is not None:
            md.add_topics(topics)
        version = md.version
        async with self._refresh_lock:
            if md.version != version and not md.needs_update(self._now()):
                return  # someone else refreshed while we waited
            now = self._now()
            md.attempt_started(now)
            try:
                conn = await self.any_connection()
                v = conn.version_for(3)
                body = await conn.request(3, md.build_request(v))
            except TrafkaError as exc:
                md.failed(self._now())
                if isinstance(exc, AuthenticationError):
                    # Wake the metadata waiters: they raise it (see partitions_for).
                    event, self._metadata_event = self._metadata_event, anyio.Event()
                    event.set()
                raise
            md.update(body, self._now())
            event, self._metadata_event = self._metadata_event, anyio.Event()
            event.set()
            self._changed()

    async def wait_metadata_change(self, timeout: float | None = None) -> bool:
        """Wait for the next applied metadata response. Returns False on timeout."""
        event = self._metadata_event
        self.nudge()
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            await event.wait()
            return True
        return False

    async def partitions_for(self, topic: str, timeout: float) -> int:
        """The partition count of ``topic``, waiting for metadata up to ``timeout`` seconds.

        Raises:
            KafkaError: the topic does not exist (UNKNOWN_TOPIC_OR_PARTITION) or
                another topic error persists past the timeout; at once, from a
                metadata response asked for by this call, when the client may
                not see the topic (TOPIC_AUTHORIZATION_FAILED) or its name is
                invalid (INVALID_TOPIC_EXCEPTION).
            AuthenticationError: the brokers refuse this client's credentials.
        """
        md = self.metadata
        n = md.partition_count(topic)
        if n is not None:
            return n
        if not md.add_topics([topic]) and topic in md.topic_errors:
            md.request_update()  # a known error: ask again now, not at the next max age
        self.nudge()
        deadline = self._now() + timeout
        refreshed = False  # an error cached before this call may be stale
        while True:
            n = md.partition_count(topic)
            if n is not None:
                return n
            code = md.topic_errors.get(topic)
            if refreshed and code in _FINAL_TOPIC_ERRORS:
                # Waiting cannot help (Java's producer and consumer fail at once too).
                raise KafkaError(code, f"topic {topic!r}: {code.name} (from the broker's metadata)")
            refused = self.auth_error
            if refused is not None:
                raise refused.again()
            left = deadline - self._now()
            if left <= 0:
                code = md.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                why = self.refresh_error
                raise KafkaError(
                    code,
                    f"topic {topic!r} not present in metadata after {timeout:g} s"
                    + ("" if why is None else f" (the last metadata refresh failed: {why})"),
                )
            refreshed = await self.wait_metadata_change(left) or refreshed

    # -- shutdown -----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close every connection."""
        self._closed = True
        for conn in list(self._conns.values()):
            await conn.aclose()
        self._conns.clear()
