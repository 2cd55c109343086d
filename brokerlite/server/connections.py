"""The trio driver's connections: one reader and one writer task per connection.

The rules are the package's (``server/__init__.py``): reading requests in
order, the request budget, timeouts, TLS, quotas' mutes, direct writes and the
writer task, the ticker that polls the core. ``Server`` owns the core's
thread: every call into the :class:`~trafka.brokerlite.broker.Broker` is made
from its tasks.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import trio

from trafka.codec import ApiKey
from trafka.codec.errors import DecodeError, FrameTooLargeError
from trafka.codec.framing import FrameReader
from trafka.common import request_budget
from trafka.common.lograte import RateLimitedLog
from trafka.common.request_budget import RequestBudget
from trafka.common.x500 import NoMatchingRule, PrincipalMapper

from ..broker import Broker, Completion
from ..clock import now_ms
from ..config import BrokerConfig, ConfigError
from ..outcomes import Close, NoResponse, Parked, Reply, SaslToken
from ..security.authorizer import certificate_subject, host_of
from ..security.jwks import fetch_jwks
from .writes import (
    _BYTES,
    _COALESCE_LIMIT,
    _PREAD_BLOCK,
    _Buffer,
    _chunk_fd,
    _OutPart,
    _PeerLost,
    _send_parts_tls,
    _ShortFile,
    _unsent,
    _write_all,
    _write_now,
)

__all__ = ["Server", "collapse", "server_ssl_context"]


log = logging.getLogger("trafka.brokerlite")

_RECV_SIZE = 256 * 1024
_SEND_QUEUE = 8
_FRAMES_PER_YIELD = 8
_FETCH_KEY = ApiKey.FETCH
# A TLS client has this long to complete its handshake; closing a TLS connection
# waits this long at most for its close_notify to leave.
_TLS_HANDSHAKE_TIMEOUT = 10.0
_TLS_CLOSE_TIMEOUT = 1.0


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


class Server:
    def __init__(
        self, broker: Broker, config: BrokerConfig, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.broker = broker
        self.config = config
        self._ssl_context = ssl_context
        # A client certificate's subject to its principal's name (KIP-371).
        self._principal_names = PrincipalMapper(config.ssl_principal_mapping_rules)
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
        # The metrics' request and response queues, read at a scrape: each
        # connection being read (its frames received whole and not yet handed to
        # the core), and each one with a writer (its replies not yet written).
        self._reading: dict[int, FrameReader] = {}
        self._writing: dict[int, _Conn] = {}
        broker.metrics.network_queues = self.queue_sizes

    def queue_sizes(self) -> tuple[int, int]:
        """(requests, replies) waiting: the requests received whole and not yet
        handed to the core, over all connections (read ahead of a parked request,
        a reply waiting for room, a quota's mute, or the reader's turn to yield),
        and the replies handed to connections' writers and not yet fully written
        (the one being written included)."""
        requests = sum(frames_in.whole_frames() for frames_in in self._reading.values())
        return requests, sum(conn.queued for conn in self._writing.values())

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
                deadline = now_ms().mono + 1000
            # The core's deadlines are on the monotonic clock (brokerlite.clock).
            self._sleep_until = math.inf if deadline is None else deadline
            timeout = math.inf if deadline is None else max(0.0, (deadline - now_ms().mono) / 1000)
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
            opened, principal = await _tls_identity(tls, peer, self._principal_names, self.quiet)
            if not opened:
                return
            self.broker.connection_opened(conn_id, peer, tls_subject=principal)
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
        self._writing[conn_id] = conn  # until its writer has drained its replies
        try:
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
        finally:
            del self._writing[conn_id]

    async def _reader(self, stream: trio.abc.ReceiveStream, conn: _Conn, conn_id: int) -> None:
        broker = self.broker
        # A frame of a read or more is joined from the pieces it arrives in: one copy
        # (codec/framing.py), not two, and no growing buffer to copy it through.
        frames_in = FrameReader(
            max_frame_size=broker.connections.max_frame_size(conn_id), join_from=_RECV_SIZE
        )
        # Until a SASL connection has authenticated, frames are capped lower.
        authenticating = broker.connections.authenticating(conn_id)
        emit = self._emit if conn.tls is None else self._queue
        peer = conn.peer
        inbound = _Inbound()
        self._reading[conn_id] = frames_in
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
                    if handled == _FRAMES_PER_YIELD:
                        # Many pipelined requests in one chunk: let other connections
                        # in (before taking the next frame, so that it is still
                        # counted as waiting in the request queue meanwhile).
                        await trio.lowlevel.checkpoint()
                        handled = 0
                    try:
                        frame = frames_in.next_frame()
                    except DecodeError as exc:
                        self.quiet.warning(
                            ("frame", host_of(peer)),
                            "closing the connection from %s (client %r): %s%s",
                            peer,
                            broker.connections.client_id(conn_id),
                            exc,
                            _frame_hint(exc, conn, data, authenticating),
                        )
                        return
                    if frame is None:
                        break
                    inbound.frame_deadline = None  # the next frame's clock starts afresh
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
                    if authenticating and not broker.connections.authenticating(conn_id):
                        authenticating = False
                        frames_in.max_frame_size = broker.connections.max_frame_size(conn_id)
                    self._after_request()
        finally:
            del self._reading[conn_id]
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
                        refused = self.broker.connections.early_refusal(
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
                    self.broker.connections.client_id(conn_id),
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
                    self.broker.connections.client_id(conn_id),
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
                    self.broker.connections.client_id(conn_id),
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
            outcome.client_id
            if outcome.client_id is not None
            else self.broker.connections.client_id(conn_id),
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


async def _tls_identity(
    tls: trio.SSLStream[trio.SocketStream],
    peer: str,
    names: PrincipalMapper,
    quiet: RateLimitedLog,
) -> tuple[bool, str | None]:
    """A TLS connection's handshake, then its client's principal name: its
    certificate's subject mapped by ``names`` (KIP-371), None without one.
    (False, None) when either fails, logged through ``quiet``: the connection
    is to be closed, as Kafka closes a client whose authentication failed."""
    try:
        with trio.fail_after(_TLS_HANDSHAKE_TIMEOUT):
            await tls.do_handshake()
    except (trio.BrokenResourceError, trio.TooSlowError) as exc:
        # By reason too (OpenSSL's few): a client without a certificate and
        # one with a stranger's are two things to tell the operator.
        reason = _tls_failure(exc)
        quiet.warning(
            ("tls", host_of(peer), reason),
            "closing the connection from %s: TLS handshake failed: %s",
            peer,
            reason,
        )
        return False, None
    try:
        subject = certificate_subject(tls.getpeercert())
    except (ValueError, ssl.SSLError):
        subject = None
    if subject is None:
        return True, None
    try:
        return True, names.name(subject)
    except NoMatchingRule as exc:
        quiet.warning(
            ("tls-principal", host_of(peer)),
            "closing the connection from %s: %s (ssl_principal_mapping_rules)",
            peer,
            exc,
        )
        return False, None


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


def collapse(group: BaseExceptionGroup[Any]) -> BaseException:
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
