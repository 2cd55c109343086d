"""The driver of one broker connection: :class:`BrokerConnection` and the
:class:`Completion` its requests are answered through.

The framing, correlation ids and versions are :class:`~trafka.sdk.connection_state.ConnectionState`'s
(I/O-free); the socket, TCP connect and TLS handshake are :mod:`.sockets`'; SASL is
:mod:`.security`'s. This module owns the tasks and the order of writes.

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
"""

from __future__ import annotations

import logging
import math
import random
import socket
import ssl
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import anyio
import anyio.abc
import anyio.lowlevel

from trafka.codec import ApiKey, TrafkaError

from ._util import loop_clock
from .config import ClientConfig
from .connection_state import ConnectionState, reauthentication_delay
from .errors import KafkaConnectionError, RequestTimeoutError, UsageError
from .sockets import close_socket, open_socket, options_of, socket_error
from .statistics.counters import NodeCounters

__all__ = ["BrokerConnection", "CallbackCompletion", "Completion", "request_all"]

log = logging.getLogger("trafka.sdk")

# Bytes asked of the socket per read.
_RECV_SIZE = 1 << 18


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

    async def outcome(self) -> Any:
        """The answer once it came; raises the request's failure."""
        await self.event.wait()
        if self.error is not None:
            raise self.error
        return self.result


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


# What a non-blocking send or recv raises when it would block, TLS included.
_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
_MAX_IOV = 512  # buffers handed to one sendmsg (Linux's IOV_MAX is 1024)
_HAS_SENDMSG = hasattr(socket.socket, "sendmsg")  # not on Windows
_SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})  # never held
# Seconds between two log lines about a connection's quota throttling.
_THROTTLE_LOG_INTERVAL = 30.0
# api key, body, completion, version, and the deadline its timeout gives it (this
# driver's clock, from when it was handed to send()).
_Held = tuple[int, Any, "Completion | None", "int | None", float]


async def _authenticate(conn: BrokerConnection, config: ClientConfig) -> int:
    """Run SASL on ``conn``: the session's lifetime in ms (0: none)."""
    # security.py (SASL, its codec messages, OAuth) loads with the first
    # connection that authenticates, not with every client (issue #48).
    from .security import authenticate

    return await authenticate(conn, config)


def _report_throttle(report: Callable[[Any], Any], node_id: int, throttle_ms: int) -> None:
    """``throttle_cb``, told of a throttled response (librdkafka's ThrottleEvent)."""
    from .statistics.brokers import ThrottleEvent

    try:
        report(ThrottleEvent(f"node-{node_id}", node_id, throttle_ms / 1000))
    except Exception:
        log.exception("throttle_cb raised")


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

    @property
    def finalized_features(self) -> tuple[int, dict[str, int]]:  # (epoch, levels); -1: none
        return self._state.finalized_features_epoch, self._state.finalized_features

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
        sock = await open_socket(self.host, self.port, self._tls, timeout, options_of(self._config))
        log.debug("node %s: connected to %s:%s", self.node_id, self.host, self.port)
        self._sock = sock
        if self._tls is None:
            self.fileno = sock.fileno()
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
            lifetime_ms = await _authenticate(self, self._config)
        self._opened = True
        self.stats.connects += 1
        self._schedule_reauthentication(lifetime_ms)

    def _schedule_reauthentication(self, lifetime_ms: int) -> None:
        """Re-authenticate at a random 85-95% of a session of ``lifetime_ms`` (0: never)."""
        delay = reauthentication_delay(lifetime_ms, random.random())
        if delay is None or self._task_group is None or self._error is not None:
            return
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
            lifetime_ms = await _authenticate(self, self._config)
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
        if self._config.throttle_cb is not None:
            _report_throttle(self._config.throttle_cb, self.node_id, state.last_throttle[2])
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
        return await waiter.outcome()

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
            self._fail(socket_error(self.node_id, exc))
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
            self._closing = True  # the client going away (cancelled), not its broker lost
            self._fail(KafkaConnectionError(f"connection to node {self.node_id} closed"))
            raise
        except Exception as exc:
            self._fail(socket_error(self.node_id, exc))

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
            close_socket(sock)
        self._closed.set()
        if lost and self._on_lost is not None:
            self._on_lost(self, error)

    async def aclose(self) -> None:
        """Close the connection; in-flight requests fail with KafkaConnectionError."""
        self._closing = True
        self._fail(KafkaConnectionError(f"connection to node {self.node_id} closed"))
        await anyio.lowlevel.checkpoint()


async def request_all(
    conn: BrokerConnection, requests: Sequence[tuple[int, Any]], *, timeout: float | None = None
) -> list[Any]:
    """Send ``(api_key, body)`` requests on ``conn`` back to back, in order,
    then wait for every answer (a broker answers a connection's requests in
    the order sent): one round trip for them all. Raises as
    :meth:`BrokerConnection.request` (the first failure among the answers, in
    order)."""
    waiters = []
    for api_key, body in requests:
        waiter = _Waiter()
        conn.send(api_key, body, waiter, timeout=timeout)
        waiters.append(waiter)
    return [await waiter.outcome() for waiter in waiters]
