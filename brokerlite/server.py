"""The trio driver: sockets and tasks around the sans-IO :class:`~.broker.Broker`.

Rules and invariants:

* One reader task per connection feeds a :class:`~trafka.codec.framing.FrameReader`
  and hands each frame to ``Broker.handle_frame``. It does not take the next
  frame before the current request is answered or known to need no answer
  (Kafka mutes a connection the same way), so responses leave in request
  order and a parked Fetch or JoinGroup delays later requests of its own
  connection only.
* Fast path: when the connection's writer is idle (everything handed to it
  is written) and a reply is made of bytes only, the reader writes it at
  once, without a checkpoint, with one non-blocking write on the socket's
  file descriptor, and hands only what the kernel did not take to the
  writer. Everything else goes to the writer: replies with file ranges
  (Fetch), and every reply while the writer holds anything, so a direct
  write never overtakes an earlier reply.
* One writer task per connection sends what it is handed, serialised, from a
  bounded memory channel (backpressure: a client that does not read its
  responses fills the socket, then the channel, and then stops being read).
  Byte parts go out with non-blocking writes, waiting for the socket to be
  writable when it is full; file ranges with ``os.sendfile`` (pread and write
  where sendfile is unavailable).
* Direct writes rely on trio's sockets being non-blocking (trio sets
  O_NONBLOCK on every socket it wraps; the driver checks it per connection)
  and, like any Python socket send, on Python ignoring SIGPIPE. A write that
  fails (reset, broken pipe) closes that connection only.
* The reader checkpoints once per chunk it receives (``receive_some``) and
  every ``_FRAMES_PER_YIELD`` frames within one chunk, so a busy connection
  cannot starve the others and cancellation reaches it.
* A malformed frame, an unknown API key, a version nobody can answer or an
  oversized frame closes only that connection, with a log line naming the
  peer address and client id (strings from the client are written escaped,
  ``%r``, so that none can forge a line). Errors of one connection never reach
  another or the listener; the broker never crashes because of input.
* What clients can repeat at will (malformed frames, refused requests, failed
  handshakes, timeouts) and failing accepts (out of file descriptors) are
  logged through a :class:`~trafka.common.lograte.RateLimitedLog`: one line a minute per
  kind and client host, with the count of the others.
* Memory of requests still arriving (:mod:`trafka.common.request_budget`,
  ``queued_max_request_bytes``): a frame that did not arrive whole reserves its
  size once its size prefix is in, and the connection is not read again until
  the budget grants it (backpressure); then no more than the rest of that frame
  is read. Besides the budget, a connection holds at most one read
  (``_RECV_SIZE``) of a frame not yet reserved. Before SASL authentication, a
  frame whose header names a request that would be refused anyway closes the
  connection before its body is read.
* Timeouts: between requests a connection may stay silent
  ``connections_max_idle_ms`` (not counting while its request is parked or its
  reply still being written); a request must arrive whole within
  ``request_receive_timeout_ms`` of its first bytes (waiting for the budget not
  counted), so a peer that stops mid-request, or trickles it (slowloris), is
  closed.
* One ticker task calls ``Broker.poll`` at ``Broker.next_deadline()`` or when
  a request made new work (a parked request, data for parked fetches).
* The broker core is only touched from the trio thread, so it needs no locks.
* Leaving :func:`serve_broker` cancels every task, closes listeners and
  connections, then flushes and closes the logs. No ExceptionGroup escapes it.
* TLS (``SSL`` and ``SASL_SSL`` listeners): each accepted socket is wrapped in a
  ``trio.SSLStream`` whose handshake completes (within
  ``_TLS_HANDSHAKE_TIMEOUT``) before the broker core hears of the connection. A
  failed handshake (a plaintext client, an untrusted client certificate) closes
  that connection only, with a log line. Every byte of a TLS connection goes
  through its stream: the reader never writes directly, every reply goes to the
  writer, and file ranges are read into memory (no ``sendfile``). Closing sends
  TLS's close_notify, bounded by ``_TLS_CLOSE_TIMEOUT`` so that a peer that does
  not read cannot hold up a shutdown. Plaintext connections keep the fast paths
  above unchanged.
* Client quotas (:mod:`.quotas`): a reply with a ``throttle_ms`` is sent, then
  the reader sleeps that long before it reads the connection again (Kafka's
  mute, KIP-219); an acks=0 Produce over its quota mutes the same way. A
  connection over its IP's ``connection_creation_rate`` is never read: it is
  closed after the throttle time.
* SASL is the core's (:mod:`.security.sasl`); the driver only lowers a connection's
  largest accepted frame to ``Broker.max_frame_size`` until it has
  authenticated, sends a :class:`~.handlers._base.Close`'s last answer before
  closing, and writes the bare tokens (:class:`~.handlers._base.SaslToken`)
  answering a v0 SaslHandshake's.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import logging
import math
import os
import signal
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, cast

import trio

from trafka.codec.errors import DecodeError, FrameTooLargeError
from trafka.codec.framing import FrameReader
from trafka.common import request_budget
from trafka.common.accept import accept_forever
from trafka.common.lograte import RateLimitedLog
from trafka.common.request_budget import RequestBudget

from .broker import Broker, Completion
from .clock import now_ms
from .config import BrokerConfig, ConfigError
from .outcomes import Close, NoResponse, Parked, Part, Reply, SaslToken
from .security.authorizer import certificate_subject, host_of
from .security.jwks import fetch_jwks

__all__ = ["RunningBroker", "broker_in_thread", "run_broker", "serve_broker"]

log = logging.getLogger("trafka.brokerlite")

_RECV_SIZE = 256 * 1024
_SEND_QUEUE = 8
_COALESCE_LIMIT = 64 * 1024
_PREAD_BLOCK = 1024 * 1024
_FRAMES_PER_YIELD = 8
_FETCH_KEY = 1
# Replies of more byte parts than this are joined before a direct write
# (writev takes at most IOV_MAX buffers).
_WRITEV_MAX = 64
# A TLS client has this long to complete its handshake; closing a TLS connection
# waits this long at most for its close_notify to leave.
_TLS_HANDSHAKE_TIMEOUT = 10.0
_TLS_CLOSE_TIMEOUT = 1.0
_BYTES = (bytes, bytearray, memoryview)
_Buffer = bytes | bytearray | memoryview
# What the writer is handed: a reply's parts, or what is left of them after a
# partial direct write (a memoryview into the first unsent part).
_OutPart = Part | bytearray | memoryview


@dataclasses.dataclass(frozen=True, slots=True)
class RunningBroker:
    """A broker being served.

    Attributes:
        address: the bound (host, port); port 0 in the config becomes the real one.
        bootstrap_servers: ``"host:port"`` for client configuration.
        config: the effective configuration.
        broker: the sans-IO core (for tests and introspection; only touch it
            from the broker's trio thread).
        request_budget: the bytes reserved by requests still arriving
            (``queued_max_request_bytes``; for tests and introspection, as ``broker``).
        metrics_address: the bound (host, port) of the metrics listener, if any.
        console_address: the bound (host, port) of the web console, if any.
    """

    address: tuple[str, int]
    bootstrap_servers: str
    config: BrokerConfig
    broker: Broker
    request_budget: RequestBudget
    metrics_address: tuple[str, int] | None = None
    console_address: tuple[str, int] | None = None


class _Slot:
    """Where the ticker leaves the reply of a connection's parked request."""

    __slots__ = ("event", "reply", "ticket")

    def __init__(self, ticket: int) -> None:
        self.ticket = ticket
        self.event = trio.Event()
        self.reply: Reply | None = None


class _Conn:
    """One connection's reply path, shared by its reader and writer tasks."""

    __slots__ = ("fd", "peer", "queued", "send", "tls")

    def __init__(
        self,
        fd: int,
        peer: str,
        send: trio.MemorySendChannel[list[_OutPart]],
        tls: trio.SSLStream[trio.SocketStream] | None = None,
    ) -> None:
        self.fd = fd
        self.peer = peer
        self.send = send
        # The TLS stream every byte must go through; None for a plaintext connection.
        self.tls = tls
        # Replies handed to the writer and not yet fully written: the reader may
        # write directly only while this is 0.
        self.queued = 0


class _Inbound:
    """A connection's receiving state: its share of the request budget, and the
    time its incomplete frame must be in by (trio's clock; None between frames)."""

    __slots__ = ("frame_deadline", "reserved")

    def __init__(self) -> None:
        self.reserved = 0
        self.frame_deadline: float | None = None


class _PeerLost(Exception):
    """A direct write found the peer gone; the connection closes quietly."""


class _Server:
    def __init__(
        self, broker: Broker, config: BrokerConfig, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.broker = broker
        self.config = config
        self._ssl_context = ssl_context
        self._auth_failure_delay = config.connection_failed_authentication_delay_ms / 1000
        self._slots: dict[int, _Slot] = {}
        self._wake = trio.Event()
        self._sleep_until: float = math.inf  # the deadline the ticker sleeps towards
        self._next_conn = 1
        self._sendfile_ok = hasattr(os, "sendfile")
        limit = config.queued_max_request_bytes
        self.request_budget = RequestBudget(None if limit < 0 else limit)
        # Closes and failures a client can repeat at will: a line a minute each.
        self.quiet = RateLimitedLog(log, clock=trio.current_time)
        self._idle_s = _seconds(config.connections_max_idle_ms)
        self._receive_s = _seconds(config.request_receive_timeout_ms)

    # -- the ticker --------------------------------------------------------------

    def _deliver(self, completions: list[Completion]) -> None:
        for done in completions:
            slot = self._slots.get(done.conn_id)
            if slot is None or slot.ticket != done.ticket:
                continue  # the connection went away meanwhile
            del self._slots[done.conn_id]
            slot.reply = done.reply
            slot.event.set()

    def _poll(self) -> None:
        try:
            self._deliver(self.broker.poll(now_ms()))
        except Exception:
            log.exception("internal error in the broker's periodic work")

    async def ticker(self) -> None:
        while True:
            try:
                deadline = self.broker.next_deadline()
            except Exception:
                log.exception("internal error computing the next deadline")
                deadline = now_ms() + 1000
            self._sleep_until = math.inf if deadline is None else deadline
            timeout = math.inf if deadline is None else max(0.0, (deadline - now_ms()) / 1000)
            with trio.move_on_after(timeout):
                await self._wake.wait()
            self._wake = trio.Event()
            self._poll()

    async def cleaner(self) -> None:
        """Compact partitions one pass at a time; the heavy part runs in a worker thread.

        Only the swap (:meth:`ProducerStates.finish_cleaning`) touches the broker
        core, back on the trio thread. When cancelled mid-pass the thread is told to
        stop and abandoned; its half-written file is deleted at the next open.
        """
        producers = self.broker.producers
        backoff = self.config.log_cleaner_backoff_ms / 1000
        while True:
            try:
                job = producers.plan_cleaning(now_ms())
            except Exception:
                log.exception("cannot plan a compaction pass")
                job = None
            if job is None:
                await trio.sleep(backoff)
                continue
            try:
                await trio.to_thread.run_sync(job.cleaning.run, abandon_on_cancel=True)
            except trio.Cancelled:
                job.cleaning.cancel()
                raise
            except Exception as exc:
                log.exception(
                    "compaction of %s-%d failed; not compacting it again until a restart",
                    job.topic,
                    job.partition,
                )
                producers.abandon_cleaning(job, str(exc))
                continue
            try:
                stats = producers.finish_cleaning(job, now_ms())
            except Exception:
                log.exception("compaction of %s-%d failed", job.topic, job.partition)
                continue
            if stats is not None:
                log.info(
                    "compacted %s-%d: %d of %d records kept, %d bytes to %d",
                    job.topic,
                    job.partition,
                    stats.records_kept,
                    stats.records_read,
                    stats.bytes_read,
                    stats.bytes_written,
                )

    async def refresh_token_keys(self, url: str, *, first: bool) -> bool:
        """Read the OAUTHBEARER key set once (in a worker thread); True when it worked."""
        users = self.broker.sasl_users
        assert users is not None
        try:
            keys = await trio.to_thread.run_sync(fetch_jwks, url, abandon_on_cancel=True)
        except Exception as exc:  # JwksError, or anything odd a key set may provoke
            log.error(
                "OAUTHBEARER keys %s: %s",
                "not read, every token is refused until they are" if first else "not refreshed",
                exc,
            )
            return False
        users.set_token_keys(keys)
        log.info("OAUTHBEARER keys read from %s: %d key(s)", url, len(keys.keys))
        return True

    async def token_key_refresher(self, url: str, ok: bool) -> None:
        """Read the key set again every ``sasl_oauthbearer_jwks_endpoint_refresh_ms``
        (after a failure, within 10 s)."""
        period = self.config.sasl_oauthbearer_jwks_endpoint_refresh_ms / 1000
        while True:
            await trio.sleep(period if ok else min(period, 10.0))
            ok = await self.refresh_token_keys(url, first=False)

    def after_change(self) -> None:
        """The cluster driver changed the core's state: deliver what became ready."""
        self._after_request()

    def _after_request(self) -> None:
        """Deliver what a request made ready; wake the ticker if it set an earlier timer."""
        broker = self.broker
        if broker.has_ready():
            self._poll()
        deadline = broker.next_deadline()
        if deadline is not None and deadline < self._sleep_until:
            self._wake.set()

    # -- connections -------------------------------------------------------------

    async def serve_connection(self, stream: trio.SocketStream) -> None:
        conn_id = self._next_conn
        self._next_conn += 1
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "?"
        throttle = self.broker.connection_throttle(peer, now_ms())
        if throttle:
            # KIP-612: over its IP's connection_creation_rate; Kafka neither reads
            # nor answers such a connection, and closes it after the throttle time.
            self.quiet.log(
                logging.INFO,
                ("throttled", host_of(peer)),
                "closing the connection from %s in %d ms: over its IP's connection_creation_rate",
                peer,
                throttle,
            )
            try:
                await trio.sleep(throttle / 1000)
            finally:
                with trio.CancelScope(shield=True):
                    await stream.aclose()
            return
        if self._ssl_context is not None:
            await self._serve_tls_connection(stream, conn_id, peer, self._ssl_context)
            return
        self.broker.connection_opened(conn_id, peer)
        log.debug("connection %d from %s", conn_id, peer)
        fd = stream.socket.fileno()
        if os.get_blocking(fd):
            os.set_blocking(fd, False)  # trio's already are; direct writes need it
        send, recv = trio.open_memory_channel[list[_OutPart]](_SEND_QUEUE)
        conn = _Conn(fd, peer, send)
        try:
            await self._run_connection(stream, conn, conn_id, recv)
        finally:
            self._connection_done(conn_id, peer)
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _serve_tls_connection(
        self, stream: trio.SocketStream, conn_id: int, peer: str, context: ssl.SSLContext
    ) -> None:
        log.debug("connection %d from %s (TLS)", conn_id, peer)
        tls = trio.SSLStream(stream, context, server_side=True)
        try:
            try:
                with trio.fail_after(_TLS_HANDSHAKE_TIMEOUT):
                    await tls.do_handshake()
            except (trio.BrokenResourceError, trio.TooSlowError) as exc:
                # By reason too (OpenSSL's few): a client without a certificate and
                # one with a stranger's are two things to tell the operator.
                reason = _tls_failure(exc)
                self.quiet.warning(
                    ("tls", host_of(peer), reason),
                    "closing the connection from %s: TLS handshake failed: %s",
                    peer,
                    reason,
                )
                return
            try:
                subject = certificate_subject(tls.getpeercert())
            except (ValueError, ssl.SSLError):
                subject = None
            self.broker.connection_opened(conn_id, peer, tls_subject=subject)
            send, recv = trio.open_memory_channel[list[_OutPart]](_SEND_QUEUE)
            conn = _Conn(-1, peer, send, tls)
            try:
                await self._run_connection(tls, conn, conn_id, recv)
            finally:
                self._connection_done(conn_id, peer)
                with trio.CancelScope(shield=True), trio.move_on_after(_TLS_CLOSE_TIMEOUT):
                    try:
                        await tls.aclose()  # sends close_notify when the session is intact
                    except Exception as exc:
                        log.debug("closing TLS to %s: %r", peer, exc)
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    def _connection_done(self, conn_id: int, peer: str) -> None:
        log.debug("connection %d from %s closed", conn_id, peer)
        self._slots.pop(conn_id, None)
        self.broker.connection_closed(conn_id)
        self._wake.set()  # the coordinator may have a member to expire

    async def _run_connection(
        self,
        stream: trio.abc.ReceiveStream,
        conn: _Conn,
        conn_id: int,
        recv: trio.MemoryReceiveChannel[list[_OutPart]],
    ) -> None:
        peer = conn.peer
        send = conn.send
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer, conn, recv, nursery.cancel_scope)
            async with send:
                try:
                    await self._reader(stream, conn, conn_id)
                except trio.BrokenResourceError:
                    # The writer lost the peer and closed its end of the channel
                    # before its cancellation reached this task: nothing to report.
                    pass
                except _PeerLost as exc:
                    log.debug("connection to %s lost while sending: %s", peer, exc)
                except Exception:
                    log.exception("internal error serving %s; closing the connection", peer)

    async def _reader(self, stream: trio.abc.ReceiveStream, conn: _Conn, conn_id: int) -> None:
        broker = self.broker
        frames_in = FrameReader(max_frame_size=broker.max_frame_size(conn_id))
        # Until a SASL connection has authenticated, frames are capped lower.
        authenticating = broker.authenticating(conn_id)
        emit = self._emit if conn.tls is None else self._queue
        peer = conn.peer
        inbound = _Inbound()
        try:
            while True:
                data = await self._receive(
                    stream, conn, conn_id, frames_in, inbound, authenticating
                )
                if isinstance(data, Close):
                    await self._close(conn, conn_id, data, emit)
                    return
                if data is None:
                    return
                frames_in.feed(data)
                handled = 0
                while True:
                    try:
                        frame = frames_in.next_frame()
                    except DecodeError as exc:
                        self.quiet.warning(
                            ("frame", host_of(peer)),
                            "closing the connection from %s (client %r): %s%s",
                            peer,
                            broker.client_id(conn_id),
                            exc,
                            _frame_hint(exc, conn, data, authenticating),
                        )
                        return
                    if frame is None:
                        break
                    inbound.frame_deadline = None  # the next frame's clock starts afresh
                    if handled == _FRAMES_PER_YIELD:
                        # Many pipelined requests in one chunk: let other connections in.
                        await trio.lowlevel.checkpoint()
                        handled = 0
                    handled += 1
                    started = time.perf_counter()
                    outcome = broker.handle_frame(conn_id, frame, now_ms())
                    if len(frame) >= 2:
                        broker.metrics.handled(
                            frame[0] << 8 | frame[1], time.perf_counter() - started
                        )
                    del frame  # not held while the request is parked or answered
                    if isinstance(outcome, Reply):
                        await emit(conn, outcome)
                        if outcome.throttle_ms:
                            await self._mute(outcome.throttle_ms)
                    elif isinstance(outcome, Parked):
                        slot = _Slot(outcome.ticket)
                        self._slots[conn_id] = slot
                        self._after_request()
                        await slot.event.wait()
                        assert slot.reply is not None
                        await emit(conn, slot.reply)
                        if slot.reply.throttle_ms:
                            await self._mute(slot.reply.throttle_ms)
                    elif isinstance(outcome, Close):
                        await self._close(conn, conn_id, outcome, emit)
                        return
                    elif isinstance(outcome, SaslToken):
                        await emit(conn, outcome)
                    else:
                        assert isinstance(outcome, NoResponse)
                        if outcome.throttle_ms:
                            await self._mute(outcome.throttle_ms)
                    if authenticating and not broker.authenticating(conn_id):
                        authenticating = False
                        frames_in.max_frame_size = broker.max_frame_size(conn_id)
                    self._after_request()
        finally:
            if inbound.reserved:
                self._release(inbound.reserved)

    async def _receive(
        self,
        stream: trio.abc.ReceiveStream,
        conn: _Conn,
        conn_id: int,
        frames_in: FrameReader,
        inbound: _Inbound,
        authenticating: bool,
    ) -> bytes | bytearray | Close | None:
        """The connection's next bytes, once the request budget allows them; None
        when it must close quietly (the peer closed it, a timeout: logged here), a
        :class:`Close` when the frame begun is refused by its header alone.

        Between requests the connection may stay silent ``connections_max_idle_ms``
        (not while a reply is still being written); a request must arrive whole
        within ``request_receive_timeout_ms`` of its first bytes, the time spent
        waiting for the request budget not counted. A request that did not arrive
        whole reserves its size from the budget before any more of it is read, and
        no more than the rest of it is read then (see :mod:`trafka.common.request_budget`).
        """
        peer = conn.peer
        while True:
            pending = frames_in.pending_frame_size
            if inbound.reserved and inbound.reserved != pending:
                self._release(inbound.reserved)  # its frame is in and handled
                inbound.reserved = 0
            now = trio.current_time()
            size = _RECV_SIZE
            if not frames_in.buffered:
                inbound.frame_deadline = None
                deadline = now + self._idle_s
            else:
                if inbound.frame_deadline is None:
                    inbound.frame_deadline = now + self._receive_s
                if pending is not None:
                    head = frames_in.peek(2) if authenticating else None
                    if head is not None:
                        refused = self.broker.early_refusal(
                            conn_id, int.from_bytes(head, "big", signed=True)
                        )
                        if refused is not None:
                            return refused
                    if not inbound.reserved:
                        await self._reserve(pending)
                        inbound.reserved = pending
                        inbound.frame_deadline += trio.current_time() - now
                    size = min(_RECV_SIZE, pending + 4 - frames_in.buffered)
                deadline = inbound.frame_deadline
            data: bytes | bytearray = b""
            with trio.move_on_at(deadline) as waited:
                try:
                    # The reader's regular checkpoint: receive_some yields even when
                    # data is already waiting.
                    data = await stream.receive_some(size)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return None
            if not waited.cancelled_caught:
                break
            if frames_in.buffered:
                self.quiet.warning(
                    ("slow", host_of(peer)),
                    "closing the connection from %s (client %r): %d of %s bytes of a "
                    "request arrived in %d ms (request.receive.timeout.ms)",
                    peer,
                    self.broker.client_id(conn_id),
                    frames_in.buffered,
                    "?" if pending is None else pending + 4,
                    self.config.request_receive_timeout_ms,
                )
                return None
            if not conn.queued:
                log.debug(
                    "closing the connection from %s (client %r): idle for %d ms "
                    "(connections.max.idle.ms)",
                    peer,
                    self.broker.client_id(conn_id),
                    self.config.connections_max_idle_ms,
                )
                return None
            # Still writing a reply: not idle.
        if not data:
            if frames_in.buffered:
                self.quiet.warning(
                    ("cut", host_of(peer)),
                    "connection from %s (client %r) closed inside a frame",
                    peer,
                    self.broker.client_id(conn_id),
                )
            return None
        return data

    async def _close(
        self,
        conn: _Conn,
        conn_id: int,
        outcome: Close,
        emit: Callable[[_Conn, Reply | SaslToken], Awaitable[None]],
    ) -> None:
        """Log why the connection closes, send its last answer, wait out a failed
        authentication's delay."""
        self.quiet.warning(
            ("refused", host_of(conn.peer), outcome.failed_authentication),
            "closing the connection from %s (client %r): %r",
            conn.peer,
            outcome.client_id if outcome.client_id is not None else self.broker.client_id(conn_id),
            outcome.reason,
        )
        if outcome.reply is not None:
            # Written (or queued, and the writer drains its queue) before the close.
            await emit(conn, outcome.reply)
        if outcome.failed_authentication:
            # Kafka's connection.failed.authentication.delay.ms: slows down password
            # guessing, and lets the answer reach clients that drop what arrives
            # together with the close (kafka-python 3 does).
            await trio.sleep(self._auth_failure_delay)

    async def _reserve(self, size: int) -> None:
        """Reserve ``size`` bytes of the request budget, waiting for room."""
        await request_budget.reserve(self.request_budget, size)

    def _release(self, size: int) -> None:
        request_budget.release(self.request_budget, size)

    async def _mute(self, throttle_ms: int) -> None:
        """Do not read the connection for ``throttle_ms`` after the answer of a
        request over a client quota, as Kafka mutes it (KIP-219); clients of
        older versions are slowed down by the mute alone."""
        self._after_request()
        await trio.sleep(throttle_ms / 1000)

    async def _emit(self, conn: _Conn, reply: Reply | SaslToken) -> None:
        """Send ``reply`` now if the writer is idle and it is all bytes, else queue it.

        Returns once the reply is written or handed to the writer (which may wait
        for room in the channel: backpressure).

        Raises:
            _PeerLost: a direct write failed; the connection must close.
            Exception: the reply could not be encoded (a bug; the caller closes
                the connection).
        """
        if isinstance(reply, Reply) and reply.api_key == _FETCH_KEY:
            self.broker.metrics.fetch_answered(reply.body)
        parts: list[_OutPart] = list(reply.encode())
        if not conn.queued and all(isinstance(part, _BYTES) for part in parts):
            buffers = cast(list[_Buffer], parts)
            sent = _write_now(conn.fd, buffers)
            if sent < 0:
                return
            parts = list(_unsent(buffers, sent))
        conn.queued += 1
        try:
            conn.send.send_nowait(parts)
        except trio.WouldBlock:
            await conn.send.send(parts)

    async def _queue(self, conn: _Conn, reply: Reply | SaslToken) -> None:
        """Hand ``reply`` to the writer (a TLS connection's every reply goes this way).

        Returns once it is handed over (backpressure as in :meth:`_emit`).
        """
        if isinstance(reply, Reply) and reply.api_key == _FETCH_KEY:
            self.broker.metrics.fetch_answered(reply.body)
        parts: list[_OutPart] = list(reply.encode())
        conn.queued += 1
        try:
            conn.send.send_nowait(parts)
        except trio.WouldBlock:
            await conn.send.send(parts)

    async def _writer(
        self,
        conn: _Conn,
        recv: trio.MemoryReceiveChannel[list[_OutPart]],
        scope: trio.CancelScope,
    ) -> None:
        peer = conn.peer
        tls = conn.tls
        try:
            async with recv:
                async for parts in recv:
                    if tls is None:
                        await self._send_parts(conn.fd, parts)
                    else:
                        await _send_parts_tls(tls, parts)
                    conn.queued -= 1
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("connection to %s lost while sending: %s", peer, exc)
            scope.cancel()
        except _ShortFile as exc:
            log.warning("closing the connection to %s: %s", peer, exc)
            scope.cancel()
        except Exception:
            # A bug costs this connection only.
            log.exception("internal error sending to %s; closing the connection", peer)
            scope.cancel()

    async def _send_parts(self, fd: int, parts: list[_OutPart]) -> None:
        pending: list[_Buffer] = []
        pending_size = 0
        for part in parts:
            if isinstance(part, _BYTES):
                pending.append(part)
                pending_size += len(part)
                if pending_size >= _COALESCE_LIMIT:
                    await _write_all(fd, pending)
                    pending, pending_size = [], 0
                continue
            if pending:
                await _write_all(fd, pending)
                pending, pending_size = [], 0
            await self._send_file_range(fd, part)
        if pending:
            await _write_all(fd, pending)

    async def _send_file_range(self, sock_fd: int, chunk: Any) -> None:
        fd, owned = _chunk_fd(chunk)
        try:
            position, remaining = chunk.position, chunk.length
            if self._sendfile_ok:
                while remaining > 0:
                    try:
                        sent = os.sendfile(sock_fd, fd, position, remaining)
                    except BlockingIOError:
                        await trio.lowlevel.wait_writable(sock_fd)
                        continue
                    except OSError as exc:
                        if exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                            self._sendfile_ok = False  # e.g. a filesystem without sendfile
                            break
                        raise
                    if sent == 0:
                        raise _ShortFile(f"segment file ended {remaining} bytes early")
                    position += sent
                    remaining -= sent
                    await trio.lowlevel.checkpoint()
            while remaining > 0:
                block = os.pread(fd, min(remaining, _PREAD_BLOCK), position)
                if not block:
                    raise _ShortFile(f"segment file ended {remaining} bytes early")
                await _write_all(sock_fd, [block])
                position += len(block)
                remaining -= len(block)
                await trio.lowlevel.checkpoint()
        finally:
            if owned:
                os.close(fd)


async def _send_parts_tls(tls: trio.SSLStream[trio.SocketStream], parts: list[_OutPart]) -> None:
    """Send ``parts`` through TLS, file ranges read into memory a block at a time.

    Small parts are joined (up to ``_COALESCE_LIMIT``) so that a reply of many
    parts becomes a few TLS records, not one per part.
    """
    pending: list[_Buffer] = []
    pending_size = 0

    async def push(block: _Buffer) -> None:
        nonlocal pending, pending_size
        if len(block) >= _COALESCE_LIMIT:
            if pending:
                await tls.send_all(b"".join(pending))
                pending, pending_size = [], 0
            await tls.send_all(block)
            return
        pending.append(block)
        pending_size += len(block)
        if pending_size >= _COALESCE_LIMIT:
            await tls.send_all(b"".join(pending))
            pending, pending_size = [], 0

    for part in parts:
        if isinstance(part, _BYTES):
            await push(part)
            continue
        fd, owned = _chunk_fd(part)
        try:
            position, remaining = part.position, part.length
            while remaining > 0:
                block = os.pread(fd, min(remaining, _PREAD_BLOCK), position)
                if not block:
                    raise _ShortFile(f"segment file ended {remaining} bytes early")
                position += len(block)
                remaining -= len(block)
                await push(block)
        finally:
            if owned:
                os.close(fd)
    if pending:
        await tls.send_all(b"".join(pending))


def _seconds(ms: int) -> float:
    """A millisecond limit in seconds; -1 (no limit) is forever."""
    return math.inf if ms < 0 else ms / 1000


def _frame_hint(
    exc: DecodeError, conn: _Conn, data: bytes | bytearray, authenticating: bool
) -> str:
    """What a framing error likely means, for its log line."""
    if isinstance(exc, FrameTooLargeError) and authenticating:
        return " before SASL authentication (sasl.server.max.receive.size)"
    if conn.tls is None and data[:2] == b"\x16\x03":
        # A TLS record header (handshake, TLS 1.x) read as a frame size.
        return " (a TLS client? this listener does not use TLS)"
    return ""


def _tls_failure(exc: BaseException) -> str:
    """Why a TLS handshake failed, for the log."""
    if isinstance(exc, trio.TooSlowError):
        return f"not completed within {_TLS_HANDSHAKE_TIMEOUT:g} s"
    cause = exc.__cause__
    if isinstance(cause, ssl.SSLError):
        reason = cause.reason or str(cause)
        if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "RECORD_LAYER_FAILURE"):
            reason += " (a plaintext client on this TLS listener?)"
        return reason
    return str(cause or exc) or type(cause or exc).__name__


def server_ssl_context(config: BrokerConfig) -> ssl.SSLContext:
    """The TLS context of an SSL or SASL_SSL listener.

    Raises:
        ConfigError: a certificate, key or CA file cannot be read or does not fit.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    assert config.ssl_certfile is not None
    try:
        context.load_cert_chain(
            config.ssl_certfile, config.ssl_keyfile, password=config.ssl_key_password
        )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"ssl_certfile/ssl_keyfile: cannot load the certificate {config.ssl_certfile}"
            + (f" and key {config.ssl_keyfile}" if config.ssl_keyfile else "")
            + f": {exc}"
        ) from None
    if config.ssl_client_auth != "none":
        assert config.ssl_cafile is not None
        try:
            context.load_verify_locations(cafile=config.ssl_cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"ssl_cafile: cannot load {config.ssl_cafile}: {exc}") from None
        context.verify_mode = (
            ssl.CERT_REQUIRED if config.ssl_client_auth == "required" else ssl.CERT_OPTIONAL
        )
    return context


def _write_now(fd: int, buffers: list[_Buffer]) -> int:
    """One non-blocking write of ``buffers``: -1 when all went, else the bytes taken.

    Raises:
        _PeerLost: the socket is broken (reset by the peer, closed).
    """
    if len(buffers) > _WRITEV_MAX:
        buffers = [b"".join(buffers)]
    try:
        if len(buffers) == 1:
            sent = os.write(fd, buffers[0])
            total = len(buffers[0])
        else:
            sent = os.writev(fd, buffers)
            total = sum(len(b) for b in buffers)
    except BlockingIOError:
        return 0
    except OSError as exc:
        raise _PeerLost(str(exc) or type(exc).__name__) from exc
    return -1 if sent == total else sent


def _unsent(buffers: list[_Buffer], sent: int) -> list[_Buffer]:
    """What is left of ``buffers`` after their first ``sent`` bytes went out."""
    for i, buffer in enumerate(buffers):
        size = len(buffer)
        if sent < size:
            return [memoryview(buffer)[sent:] if sent else buffer, *buffers[i + 1 :]]
        sent -= size
    return []


async def _write_all(fd: int, buffers: list[_Buffer]) -> None:
    """Write ``buffers`` in full, waiting for room in the socket when it is full."""
    data = buffers[0] if len(buffers) == 1 else b"".join(buffers)
    view = memoryview(data)
    while view:
        try:
            sent = os.write(fd, view)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(fd)
            continue
        view = view[sent:]


class _ShortFile(Exception):
    """A file range promised in a response could not be read in full."""


def _chunk_fd(chunk: Any) -> tuple[int, bool]:
    """(fd, owned) for a file chunk whose ``path_or_fd`` is an fd, a handle or a path."""
    target = chunk.path_or_fd
    if isinstance(target, int):
        return target, False
    fd = getattr(target, "fd", None)
    if isinstance(fd, int):
        if fd < 0:
            raise _ShortFile("segment file closed before it was sent")
        return fd, False
    try:
        return os.open(os.fspath(target), os.O_RDONLY), True
    except OSError as exc:
        raise _ShortFile(f"segment file gone before it was sent: {exc}") from exc


def _collapse(group: BaseExceptionGroup[Any]) -> BaseException:
    """The one real exception inside a group of it and cancellations, else the group."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    real = [e for e in leaves if not isinstance(e, trio.Cancelled)]
    if len(real) == 1:
        return real[0]
    if not real and leaves:
        return leaves[0]
    return group


@asynccontextmanager
async def serve_broker(
    config: BrokerConfig | None = None, **overrides: Any
) -> AsyncIterator[RunningBroker]:
    """Serve a broker for the duration of an ``async with`` block.

    Args:
        config: the settings (default :class:`BrokerConfig`'s defaults).
        **overrides: settings applied on top, by Python or Kafka name
            (``port=0``, ``**{"num.partitions": 3}``).

    Yields:
        The :class:`RunningBroker` (with the bound address).

    Raises:
        ConfigError: an unknown override or invalid value.
        OSError: the port cannot be bound or the data directory is unusable.
    """
    cfg = config or BrokerConfig()
    if overrides:
        cfg = cfg.with_overrides(overrides)
    ssl_context = server_ssl_context(cfg) if cfg.tls_enabled else None
    host = cfg.host or "0.0.0.0"
    listeners = await trio.open_tcp_listeners(cfg.port, host=host)
    try:
        bound = listeners[0].socket.getsockname()[:2]
        broker = Broker(cfg, now_ms=now_ms(), advertised=cfg.advertised_address(bound))
    except BaseException:
        for listener in listeners:
            await listener.aclose()
        raise
    server = _Server(broker, cfg, ssl_context)
    driver = None
    if cfg.cluster_mode:
        from .cluster.driver import ClusterDriver

        try:
            driver = ClusterDriver(broker, cfg, server.after_change)
            await driver.start()
        except BaseException:
            broker.close()
            for listener in listeners:
                await listener.aclose()
            raise
    advertised_host, advertised_port = broker.advertised
    metrics_listeners: list[trio.SocketListener] = []
    if cfg.metrics_listen is not None:
        metrics_host, _, metrics_port = cfg.metrics_listen.rpartition(":")
        try:
            metrics_listeners = await trio.open_tcp_listeners(
                int(metrics_port), host=metrics_host.strip("[]") or None
            )
        except BaseException:
            if driver is not None:
                driver.close()
            broker.close()
            for listener in listeners:
                await listener.aclose()
            raise
    running = RunningBroker(
        address=(bound[0], bound[1]),
        bootstrap_servers=f"{advertised_host}:{advertised_port}",
        config=cfg,
        broker=broker,
        request_budget=server.request_budget,
        metrics_address=(
            tuple(metrics_listeners[0].socket.getsockname()[:2]) if metrics_listeners else None
        ),
    )
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.ticker)
            if metrics_listeners:
                from trafka.common.metrics_http import serve_metrics

                from .metrics import endpoint

                await nursery.start(serve_metrics, endpoint(broker), metrics_listeners)
            jwks_url = cfg.sasl_oauthbearer_jwks_endpoint_url
            if broker.sasl_users is not None and jwks_url is not None:
                ok = await server.refresh_token_keys(jwks_url, first=True)
                nursery.start_soon(server.token_key_refresher, jwks_url, ok)
            if cfg.log_cleaner_enable:
                nursery.start_soon(server.cleaner)
            if driver is not None:
                nursery.start_soon(driver.run)
            nursery.start_soon(_serve_listeners, server, listeners)
            if cfg.console_listen is not None:
                running = await _start_console(nursery, running, cfg.console_listen)
            try:
                if cfg.announce:
                    async with _announced(cfg, broker):
                        yield running
                else:
                    yield running
            finally:
                if driver is not None:
                    # Still serving: leadership moves away before the broker stops.
                    with trio.CancelScope(shield=True):
                        await driver.controlled_shutdown()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise _collapse(group) from None
    finally:
        if driver is not None:
            driver.close()
        broker.close()


async def _start_console(
    nursery: trio.Nursery, running: RunningBroker, listen: str
) -> RunningBroker:
    """Serve the web console on ``listen`` for this broker (through its own
    listener, as any client); ``running`` with the console's address. The
    console is a companion found among the installed plug-ins (:mod:`.companions`)."""
    from .companions import find

    console = find("console")
    address = await nursery.start(
        functools.partial(console.serve, running.bootstrap_servers, listen)
    )
    return dataclasses.replace(running, console_address=address)


@asynccontextmanager
async def _announced(cfg: BrokerConfig, broker: Broker) -> AsyncIterator[None]:
    """Announce the advertised listener on zeroconf while the block runs (a
    failure to is logged, never fatal: the broker serves on, unannounced)."""
    from trafka.discovery import announcing_listener

    host, port = broker.advertised
    async with announcing_listener(
        "broker",
        host,
        port,
        cluster_id=broker.cluster_id,
        node_id=cfg.node_id,
        security_protocol=cfg.security_protocol,
        sasl_mechanisms=cfg.sasl_enabled_mechanisms if cfg.sasl_enabled else (),
    ):
        yield


async def _serve_listeners(server: _Server, listeners: list[trio.SocketListener]) -> None:
    async with trio.open_nursery() as connections:

        async def serve(stream: trio.SocketStream) -> None:
            try:
                await server.serve_connection(stream)
            finally:
                await trio.aclose_forcefully(stream)

        def start(stream: trio.SocketStream) -> None:
            connections.start_soon(serve, stream)

        for listener in listeners:
            connections.start_soon(accept_forever, listener, start, server.quiet)


async def _run(config: BrokerConfig) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with serve_broker(config) as running:
            log.info(
                "brokerlite node %d ready on %s:%d (advertised %s, data in %s)%s",
                config.node_id,
                running.address[0],
                running.address[1],
                running.bootstrap_servers,
                config.data_dir,
                "" if config.security_protocol == "PLAINTEXT" else _security_summary(config),
            )
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                break
    log.info("brokerlite stopped")


def _security_summary(config: BrokerConfig) -> str:
    """`` with SASL_SSL (PLAIN, SCRAM-SHA-256; 2 users)``, for the ready line."""
    details = []
    if config.sasl_enabled:
        details.append(", ".join(config.sasl_enabled_mechanisms))
    if config.tls_enabled and config.ssl_client_auth != "none":
        details.append(f"client certificates {config.ssl_client_auth}")
    return f" with {config.security_protocol}" + (f" ({'; '.join(details)})" if details else "")


def run_broker(config: BrokerConfig) -> None:
    """Run a broker until SIGINT or SIGTERM (blocking; for the command line).

    Must be called from the main thread. Shuts down cleanly on either signal.
    """
    trio.run(_run, config)


@contextmanager
def broker_in_thread(
    config: BrokerConfig | None = None, *, startup_timeout: float = 30.0, **overrides: Any
) -> Iterator[RunningBroker]:
    """Serve a broker on a background thread (for synchronous clients and tests).

    Args:
        config: the settings; ``port=0`` is the usual choice for tests.
        startup_timeout: seconds to wait for the broker to come up.
        **overrides: settings applied on top of ``config``.

    Yields:
        The :class:`RunningBroker`. Touch ``.broker`` only through
        ``trio.from_thread`` (it belongs to the broker's thread).

    Raises:
        Whatever :func:`serve_broker` raises while starting; TimeoutError if it
        does not start in time.
    """
    started = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        try:
            async with serve_broker(config, **overrides) as running:
                stop = trio.Event()
                state["running"] = running
                state["stop"] = stop
                state["token"] = trio.lowlevel.current_trio_token()
                started.set()
                await stop.wait()
        except BaseException as exc:
            state["error"] = exc
            if not started.is_set():
                started.set()
                return
            raise

    def runner() -> None:
        try:
            trio.run(main)
        except BaseException:
            log.exception("brokerlite thread failed")

    thread = threading.Thread(target=runner, name="brokerlite", daemon=True)
    thread.start()
    if not started.wait(startup_timeout):
        raise TimeoutError("brokerlite did not start in time")
    if "error" in state:
        thread.join()
        raise state["error"]
    try:
        yield state["running"]
    finally:
        trio.from_thread.run_sync(state["stop"].set, trio_token=state["token"])
        thread.join(startup_timeout)
