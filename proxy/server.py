"""The proxy's core: trio listeners, an upstream connection per client
connection, the filter chain it is given (it builds none and knows none by
type: :mod:`.assembly` puts the user's filters and key routing in it), and a
shared pool of upstream connections for what filters send.

* A *bootstrap* listener forwards to the first reachable upstream bootstrap
  server. Each upstream broker the proxy learns of (from Metadata,
  FindCoordinator or DescribeCluster answers) gets a listener of its own, opened
  at first sight (``node_port_base + node_id``, or an ephemeral port); answers
  name those listeners instead of the brokers, so clients keep coming back
  through the proxy. Named listeners (:mod:`.listeners`) are bootstrap ports
  with broker ports of their own; a connection on one carries its name.
* Each client connection gets its own upstream connection, opened at its first
  request: until then a connection is one task and its socket (an idle one costs
  no upstream connection, no pumps, no buffers). Then two more tasks pump frames:
  upstream to proxy and proxy to client (answers, addresses rewritten; see
  :mod:`.rewrite`); the connection's own task reads the client's requests. When
  either side closes or misbehaves, both connections close; other clients go on.
* Requests of the APIs the filters name (see :mod:`.filters`) are decoded and
  passed through them. A filter may answer a request itself, at once or later (key routing
  does, for the Produce requests it splits over the shared
  :class:`~.pool.UpstreamPool`); a later answer is made by a task in the
  proxy's nursery. The answer pump writes every answer in the order of the
  client's requests: it takes them from a queue of what the client is owed,
  in request order, each either the next answer of the client's own upstream
  connection or one a filter made.
* What no filter asks to see and no rule must read crosses as bytes (see
  :mod:`.rewrite` and docs/proxy.md, "Forwarding"), batched per wake-up: the
  requests of one read go upstream in one write (written first whenever the
  connection would wait: a filter, the budget, the answers owed), and the
  answers ready at once reach the client in one write. What is read from a
  client is acknowledged at once (``TCP_QUICKACK``), not with its answer.
* Frames are read with the codec's :class:`~trafka.codec.framing.FrameReader` and
  ``max_frame_size`` (Kafka's ``socket.request.max.bytes``): a larger size prefix
  closes the connection before its body is read; no buffer is sized from a length
  that has not arrived. A TLS client's certificate names its principal (:mod:`.mtls`).
* Limits, with Kafka's names and meanings as brokerlite has them:
  ``queued_max_request_bytes`` bounds the bytes of requests the proxy holds,
  across all its connections (:mod:`trafka.common.request_budget`): a request
  reserves its size once its size prefix is in (or once it arrived whole in one
  read) and gives it back once it has been written upstream, or, when a filter
  answers it later (key routing's Produce), once that answer is made. A request
  that does not fit pauses its connection's reading (backpressure) until others
  give bytes back; no error. Besides the budget, a connection holds at most one
  read (``_RECV_SIZE``) not yet reserved. A connection holds one reservation of a
  request still arriving at most, and never waits for the budget while holding
  it, so half-received requests never wait for each other.
  ``connections_max_idle_ms``: a connection that has received nothing for this
  long, with no request under way and no answer owed, is closed.
  ``request_receive_timeout_ms``: a request must arrive whole within this long
  of the read that brought its first bytes (time waiting for the budget not
  counted), so a client that stops, or trickles, mid-request is closed.
* What clients can repeat at will (bad requests, failed TLS handshakes, an
  unreachable upstream, unroutable batches) and failing accepts are logged
  through :class:`~trafka.common.lograte.RateLimitedLog`: a line a minute each,
  with a count of the rest. Host names from upstream answers are logged escaped.
* At DEBUG (``-v``) each client connection is logged as it is accepted, as its upstream
  connection opens and as it closes, with its traffic (:mod:`.connlog`).
"""

from __future__ import annotations

import logging
import math
import socket
import struct
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio

from trafka.codec import ApiKey, protocol
from trafka.codec.errors import DecodeError, TrafkaError
from trafka.codec.framing import FrameReader
from trafka.common.accept import accept_forever
from trafka.common.lograte import RateLimitedLog
from trafka.common.request_budget import RequestBudget, release, reserve
from trafka.discovery import announcing_listener

from . import connlog
from .config import ProxyConfig, split_server
from .filters import (
    FRAMES,
    UNSEEN,
    CloseConnection,
    EncodedBody,
    Filter,
    FilterContext,
    FilterError,
    ProxyServices,
    Respond,
    RespondLater,
    Route,
    Session,
    Stage,
    client_software,
    run_close,
    run_request,
    run_response,
    run_upstream,
)
from .metrics import ProxyMetrics, ProxyStatistics
from .mtls import ClientTls
from .pool import UpstreamError, UpstreamPool
from .sockets import ack_now, bind, bind_all, peer_of
from .startup import brokers_named, discover_upstream, shared_listeners, upstream_reachable
from .topics import Topics, metadata_request

__all__ = ["ProxyStatistics", "RunningProxy", "serve_core"]

log = logging.getLogger("trafka.proxy")

_SIZE = struct.Struct(">i")
# Answers a client connection may be owed at once; its requests wait beyond that.
_MAX_WAITING_ANSWERS = 1024
# The most read from a client at once (memory follows the bytes that arrive).
_RECV_SIZE = 65536


@dataclass(frozen=True, slots=True)
class RunningProxy:
    """A serving proxy: its bootstrap address and live statistics (and the
    metrics listener's address, when it serves one)."""

    address: tuple[str, int]
    bootstrap_servers: str
    statistics: ProxyStatistics
    metrics_address: tuple[str, int] | None = None
    # The bytes of requests held (``queued_max_request_bytes``; tests, introspection).
    request_budget: RequestBudget = field(default_factory=lambda: RequestBudget(None))
    # What SIGHUP changes (.reload): the TLS side new client connections get, the chain.
    client_tls: ClientTls | None = None
    filters: tuple[Filter, ...] = ()
    # The named listeners' bootstrap addresses, by name (.listeners).
    listeners: dict[str, tuple[str, int]] = field(default_factory=dict)


class _Proxy:
    def __init__(self, config: ProxyConfig, nursery: trio.Nursery) -> None:
        self.config = config
        self.nursery = nursery
        self.topics = Topics()
        self.stats = ProxyStatistics()
        self.advertised = config.advertised_host or config.host
        # node id -> (upstream address, proxy port)
        self.nodes: dict[int, tuple[tuple[str, int], int]] = {}
        # The named listeners (.listeners); their brokers' ports are stats.listener_nodes
        self.named = {n.name: n for n in config.listeners}
        self.client_tls = config.client_ssl_context()
        self.upstream_tls = config.upstream_ssl_context()
        # What clients (and failing accepts) can repeat at will: a line a minute each.
        self.quiet = RateLimitedLog(log, clock=trio.current_time)
        self.sni = config.sni_names()
        settings = (config.connect_timeout, config.ssl_principal_mapping_rules)
        self.tls = ClientTls.of(self.client_tls, settings, self.quiet, self.sni)
        # Shared by every client connection (pooled Produce, metadata refreshes).
        limit = config.queued_max_request_bytes
        self.budget = RequestBudget(None if limit < 0 else limit)
        # The chain as given: the core adds none (see .assembly).
        self.filters = config.filters
        self.metrics = ProxyMetrics(self.stats, self.budget, self.filters)
        self.make_pool = partial(
            UpstreamPool,
            nursery,
            max_frame_size=config.max_frame_size,
            observe=self.metrics.upstream,
        )
        self.pool = self.make_pool(self._connect_node)
        # The filters' own pools (ProxyServices.new_pool: the SASL watch's, per principal).
        self.own_pools: list[UpstreamPool] = []
        # The chain per (API, version), asked once (filters.Route).
        self.chains: dict[tuple[int, int], Route] = {}
        self.upstream_reachable = False
        self.idle_s = _seconds(config.connections_max_idle_ms)
        self.receive_s = _seconds(config.request_receive_timeout_ms)
        self.stale: set[str] = set()
        self.refreshing = False
        services = ProxyServices(
            self.pool,
            self.topics,
            lambda: list(self.nodes),
            self._refresh,
            self._from_upstream,
            nursery,
            self.quiet,
            self.listen_for,
            self._connect_node,
            self._new_pool,
            self.listen_on if self.named else None,
        )
        for f in self.filters:
            f.attach(services)
            self.stats.filters.update(f.statistics())

    def _from_upstream(self, api_key: int, api_version: int, body: Any) -> Any:
        return run_upstream(self.filters, api_key, api_version, body)

    def _new_pool(self, connect: Callable[[int], Any]) -> UpstreamPool:
        pool = self.make_pool(connect)
        self.own_pools.append(pool)
        return pool

    # ProxyServices.listen_for (synchronous, from address rewriting): the listener opens now.
    def listen_for(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        if self.sni is not None:  # one port for all (.sni): no listener to open
            self.nodes[node_id] = ((host, port), self.sni.port)
            self.stats.nodes[node_id] = (self.sni.host_of(node_id), self.sni.port)
            return self.stats.nodes[node_id]
        known = self.nodes.get(node_id)
        if known is not None and known[0] == (host, port):
            return self.advertised, known[1]
        if known is not None:
            # The broker moved: the listener stays, its connections go to the new address.
            self.nodes[node_id] = ((host, port), known[1])
            return self.advertised, known[1]
        bound = self._open_node(node_id, self.config.node_port, self.config.host, None)
        self.nodes[node_id] = ((host, port), bound)
        self.stats.nodes[node_id] = (self.advertised, bound)
        log.info("broker %d (%r port %d) is served on port %d", node_id, host, port, bound)
        return self.advertised, bound

    # ProxyServices.listen_on: a named listener's port for a broker, opened now.
    def listen_on(self, name: str, node_id: int) -> tuple[str, int]:
        named = self.named[name]
        bound = self.stats.listener_nodes.get((name, node_id))
        if bound is None:
            if node_id not in self.nodes:
                raise KeyError(f"broker {node_id} has not been named in any answer")
            bound = self._open_node(node_id, named.node_port, named.host, name)
            self.stats.listener_nodes[name, node_id] = bound
            log.info("broker %d is served on port %d for listener %s", node_id, bound, name)
        return named.advertised_host or self.advertised, bound

    def _open_node(
        self, node_id: int, port_of: Callable[[int], int], host: str, name: str | None
    ) -> int:
        """Open a listener for broker ``node_id`` (on listener ``name``; None:
        the proxy's own) on the port ``port_of`` gives it; its port."""
        wanted = 0
        try:
            wanted = port_of(node_id)
            sock = bind(host, wanted)
        except (OSError, OverflowError, ValueError) as exc:
            if not wanted and not isinstance(exc, ValueError):
                raise
            # Taken, past 65535 or outside the span: the broker is still served,
            # on a port of the system's choosing, and the operator hears why.
            self.quiet.error(
                f"bind-{name}-{node_id}",
                "broker %d cannot be served on port %s (%s): serving it on a free port",
                node_id,
                wanted or "--node-port-base + id",
                exc,
            )
            sock = bind(host, 0)
        self.nursery.start_soon(self.serve, _listening(sock), node_id, name)
        return int(sock.getsockname()[1])

    async def serve(
        self, listener: trio.SocketListener, node_id: int | None, name: str | None = None
    ) -> None:
        """Accept client connections on ``listener`` (a node's own port when
        ``node_id`` is given, else the bootstrap port; of the named listener
        ``name``, None: the proxy's own) until cancelled."""

        # Out of file descriptors and the like: the connections already open go
        # on; accepting resumes shortly.
        def start(stream: trio.SocketStream) -> None:
            self.nursery.start_soon(self._connection, stream, node_id, name)

        await accept_forever(listener, start, self.quiet)

    def _node_of(self, upstream: tuple[str, int]) -> int:
        for node_id, (address, _) in self.nodes.items():
            if address == upstream:
                return node_id
        return -1

    async def _open_upstream(self, node_id: int | None) -> tuple[trio.abc.Stream, tuple[str, int]]:
        if node_id is not None:
            targets = [self.nodes[node_id][0]]
        else:
            targets = [split_server(s) for s in self.config.upstream]
        failures = []
        for host, port in targets:
            try:
                with trio.fail_after(self.config.connect_timeout):
                    if self.upstream_tls is None:
                        return await trio.open_tcp_stream(host, port), (host, port)
                    tls = await trio.open_ssl_over_tcp_stream(
                        host, port, ssl_context=self.upstream_tls
                    )
                    await tls.do_handshake()
                    return tls, (host, port)
            except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
                failures.append(f"{host}:{port}: {exc or type(exc).__name__}")
        raise OSError("no upstream broker reachable (" + "; ".join(failures) + ")")

    async def probe_upstream(self) -> None:
        """Whether an upstream bootstrap server takes connections (for /readyz)."""
        while True:
            self.upstream_reachable = await upstream_reachable(self.config)
            await trio.sleep(5)

    async def open_known_listeners(self) -> None:
        """Open the listeners of ``config.node_ports`` now, not at the first
        Metadata a client sends: a restarted worker's clients come back to
        those ports first. One Metadata request (no topics) to an upstream
        bootstrap server names the brokers (:func:`~.startup.brokers_named`):
        over a connection opened as the client connections' upstream sides are
        (TLS when configured), all within ``connect_timeout``."""
        try:
            stream, _ = await self._open_upstream(None)
            async with stream:
                with trio.fail_after(self.config.connect_timeout):
                    version, body = await brokers_named(stream, self.config.max_frame_size)
            self._from_upstream(ApiKey.METADATA, version, body)
            for name, node_id in [(n, i) for n in self.named for i in list(self.nodes)]:
                self.listen_on(name, node_id)
        except (
            OSError,
            trio.TooSlowError,
            trio.BrokenResourceError,
            TrafkaError,
            FilterError,
        ) as exc:
            why = exc or type(exc).__name__  # a timeout says nothing itself
            self.quiet.warning("known", "the brokers' listeners open at first Metadata: %s", why)

    async def _connect_node(self, node_id: int) -> trio.abc.Stream:
        if node_id not in self.nodes:
            raise OSError(f"broker {node_id} has not been named in any answer")
        stream, _ = await self._open_upstream(node_id)
        return stream

    async def _connection(
        self, raw: trio.SocketStream, node_id: int | None, name: str | None
    ) -> None:
        self.stats.connections += 1
        self.stats.open_connections += 1
        client: trio.abc.Stream = raw
        attached: list[_Client] = []  # the upstream side, once the client has spoken
        peer = peer_of(raw)
        opened = connlog.accepted(peer, raw, node_id, name)
        session = Session()
        try:
            if self.tls is not None:  # the handshake, the client's identity, SNI's broker
                if not (
                    accepted := await self.tls.accept(raw, connlog.shown(peer), node_id, self.nodes)
                ):
                    return
                client, session, node_id = accepted
            session.listener = name  # the core gives it no meaning (.listeners)
            async with client, trio.open_nursery() as pumps:
                await self._requests(client, pumps, node_id, peer, attached, raw.socket, session)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("connection from %s ended: %s", connlog.shown(peer), exc)
        finally:
            self.stats.open_connections -= 1
            for conn in attached:  # first: synchronous, whatever closing raises
                run_close(self.filters, conn.state, conn.session, peer, self.quiet)
            for conn in attached:
                self.stats.upstream_connections -= 1
                await trio.aclose_forcefully(conn.upstream)
            connlog.closed(peer, opened, attached[0].traffic if attached else None)

    async def _attach(
        self,
        client: trio.abc.Stream,
        pumps: trio.Nursery,
        node_id: int | None,
        peer: tuple[str, int] | None,
    ) -> _Client | None:
        """The client's own upstream connection and its pumps, started at its first
        request; None (logged) when no upstream broker is reachable."""
        try:
            upstream, address = await self._open_upstream(node_id)
        except OSError as exc:
            self._closing("upstream_unreachable", "upstream", exc)
            return None
        self.stats.upstream_connections += 1
        connlog.upstream_opened(peer, address, node_id)
        to_writer, answers = trio.open_memory_channel[_Answer](_MAX_WAITING_ANSWERS)
        conn = _Client(client, upstream, address, to_writer, pumps, peer=peer)
        frames_in, frames = trio.open_memory_channel[list[bytes]](_MAX_WAITING_ANSWERS)
        pumps.start_soon(_upstream_frames, conn, frames_in, self.config.max_frame_size, self.quiet)
        pumps.start_soon(self._answers, conn, answers, frames)
        return conn

    async def _requests(
        self,
        client: trio.abc.Stream,
        pumps: trio.Nursery,
        node_id: int | None,
        peer: tuple[str, int] | None,
        attached: list[_Client],
        sock: trio.socket.SocketType,
        session: Session,
    ) -> None:
        """Read the client's requests and hand each on, within the proxy's limits
        (see the module's rules); the upstream side is attached at the first.
        What is read is acknowledged at once (:func:`_ack_now`)."""
        # A large request (its bytes reserved) is kept as the pieces it arrives in.
        reader = FrameReader(self.config.max_frame_size, join_from=_RECV_SIZE)
        budget = self.budget
        conn: _Client | None = None
        reserved = 0  # the request still arriving's reservation
        frame_deadline: float | None = None
        try:
            while True:
                pending = reader.pending_frame_size
                if pending is not None and not reserved:
                    # Its size is in, its body is not: room for it before reading on.
                    paused = trio.current_time()
                    await reserve(budget, pending)
                    reserved = pending
                    if frame_deadline is not None:
                        frame_deadline += trio.current_time() - paused
                if reader.buffered:
                    if frame_deadline is None:
                        frame_deadline = trio.current_time() + self.receive_s
                    deadline = frame_deadline
                else:
                    frame_deadline = None
                    deadline = trio.current_time() + self.idle_s
                with trio.move_on_at(deadline) as timer:
                    data = await client.receive_some(_RECV_SIZE)
                if timer.cancelled_caught:
                    if not reader.buffered and conn is not None and conn.owed:
                        continue  # waiting for answers is not idle
                    self._timed_out(reader, pending, peer)
                    break
                if not data:
                    break
                ack_now(sock)
                reader.feed(data)
                while (frame := reader.next_frame()) is not None:
                    frame_deadline = None  # the next request's clock starts afresh
                    if reserved:  # the request that was still arriving
                        size, reserved = reserved, 0
                    else:
                        size = len(frame)
                        if conn is not None and not _fits_now(budget, size):
                            await self._flush(conn)  # what it holds may be what blocks
                        await reserve(budget, size)
                    if conn is None:
                        conn = await self._attach(client, pumps, node_id, peer)
                        if conn is None:
                            release(budget, size)
                            return
                        attached.append(conn)
                        conn.session = session  # what TLS told (.mtls), else empty
                    conn.reserved = size
                    conn.traffic.request(len(frame))
                    try:
                        await self._request(frame, conn)
                    finally:
                        # Held until the batch is written (or an answer made later).
                        conn.batch_held += conn.reserved
                        conn.reserved = 0
                if conn is not None:
                    await self._flush(conn)
        except (DecodeError, TrafkaError) as exc:
            self.stats.refused_frames += 1
            self.quiet.warning(
                "request", "closing a client connection after a bad request: %s", exc
            )
        except FilterError as exc:
            self._closing("filter", ("filter", str(exc).split(":", 1)[0]), exc, logging.ERROR)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            if reserved:
                release(budget, reserved)
            if conn is not None and conn.batch_held:
                release(budget, conn.batch_held)
                conn.batch_held = 0
        pumps.cancel_scope.cancel()

    def _timed_out(
        self, reader: FrameReader, pending: int | None, peer: tuple[str, int] | None
    ) -> None:
        """Count and log a connection closed by a timeout (a half-received request
        is an error and a warning; an idle connection neither, a debug line)."""
        if reader.buffered:
            self.stats.timeouts += 1
            self.quiet.warning(
                ("slow", None if peer is None else peer[0]),
                "closing the connection from %s: %d of %s bytes of a request arrived "
                "in %d ms (request.receive.timeout.ms)",
                peer,
                reader.buffered,
                "?" if pending is None else pending + 4,
                self.config.request_receive_timeout_ms,
            )
        else:
            self.stats.idle_closed += 1
            log.debug("closing idle connection from %s (connections.max.idle.ms)", peer)

    def _closing(self, kind: str, key: Any, exc: Exception, level: int = logging.WARNING) -> None:
        """Count (``errors{kind}``) and log a client connection the proxy closes."""
        self.stats.closed[kind] = self.stats.closed.get(kind, 0) + 1
        self.quiet.log(level, key, "closing a client connection: %s", exc)

    async def _request(self, frame: bytes, conn: _Client) -> None:
        header, start = protocol.decode_request_header(frame)
        key, version = header.request_api_key, header.request_api_version
        self.metrics.request(key, len(frame) + 4)
        conn.filtered = None
        route = self.chains.get((key, version))
        if route is None:
            route = self.chains[key, version] = Route.of(self.filters, key, version)
        chain, known, asks, answers = route
        if key == ApiKey.API_VERSIONS and version >= 3 and known:
            conn.software = client_software(frame)
        body = None
        if chain:
            ctx = FilterContext(
                key,
                version,
                header.correlation_id,
                header.client_id,
                conn.peer,
                self._node_of(conn.address),
                conn.state,
                conn.session,
                client_software=conn.software,
            )
            if asks:
                # A filter may wait for what the requests before it bring back.
                await self._flush(conn)
                original = frame
                try:
                    frame, body, respond, seen = await run_request(chain, ctx, frame)
                except CloseConnection as exc:
                    self.quiet.warning(
                        ("close", str(exc).split(" ", 1)[0]), "closing a client connection: %s", exc
                    )
                    conn.pumps.cancel_scope.cancel()
                    return
                if frame is not original:
                    start = protocol.decode_request_header(frame)[1]
                if respond is not None:
                    framed = chain[seen - 1].request == FRAMES
                    await self._respond(conn, frame, body, respond, ctx, chain[: seen - 1], framed)
                    return
            if answers:
                conn.filtered = (ctx, chain)
        if key == ApiKey.PRODUCE and known and _acks(frame, start, body, version) == 0:
            # Never answered: nothing for the answer pump to wait for.
            conn.batch += (_SIZE.pack(len(frame)), frame)
            return
        await self._forward(conn, frame, header.correlation_id)

    async def _respond(
        self,
        conn: _Client,
        frame: bytes,
        request: Any,
        respond: Respond | RespondLater,
        ctx: FilterContext,
        earlier: tuple[Stage, ...],
        framed: bool,
    ) -> None:
        """A filter answered the request itself (with a frame when ``framed``):
        nothing goes upstream."""
        key = ctx.api_key
        slot = _Answer(ctx.correlation_id, trio.Event(), api_key=key)
        slot.filtered = (ctx, earlier) if any(s.answer != UNSEEN for s in earlier) else None
        # Started before anything here can be cancelled (the client's connection
        # closing): what the filter began, such as batches written for an
        # idempotent producer, is always settled.
        if isinstance(respond, RespondLater):
            # The request's bytes stay reserved until its answer is made.
            held, conn.reserved = conn.reserved, 0
            self.nursery.start_soon(self._respond_later, slot, ctx, respond, held, framed)
        if key == ApiKey.PRODUCE and _acks(frame, None, request, ctx.api_version) == 0:
            return  # acks=0 is never answered
        if isinstance(respond, Respond):
            _answered(slot, ctx, respond.body, framed)
        await self._owe(conn, slot)

    async def _respond_later(
        self, slot: _Answer, ctx: FilterContext, later: RespondLater, held: int, framed: bool
    ) -> None:
        try:
            body = await later.answer()
        except (DecodeError, TrafkaError) as exc:
            slot.error = exc
        except Exception as exc:
            error = FilterError(f"an answer made later: {exc!r}")
            error.__cause__ = exc
            slot.error = error
        else:
            _answered(slot, ctx, body, framed)
        finally:
            if held:
                release(self.budget, held)
            assert slot.done is not None
            slot.done.set()

    async def _forward(self, conn: _Client, frame: bytes, correlation_id: int) -> None:
        key = int.from_bytes(frame[:2], "big", signed=True)
        slot = _Answer(correlation_id, api_key=key, filtered=conn.filtered)
        await self._owe(conn, slot)
        conn.batch += (_SIZE.pack(len(frame)), frame)

    async def _owe(self, conn: _Client, slot: _Answer) -> None:
        """Queue an answer the client is owed (waiting while too many are)."""
        conn.owed += 1
        try:
            conn.to_writer.send_nowait(slot)
        except trio.WouldBlock:
            # The requests held must reach the broker before waiting for the
            # answer pump to make room.
            await self._flush(conn)
            await conn.to_writer.send(slot)

    async def _flush(self, conn: _Client) -> None:
        """Write the requests held for the client's upstream connection at once
        (one write per wake-up), and give their bytes back to the budget."""
        batch, held = conn.batch, conn.batch_held
        if batch:
            conn.batch = []
            await conn.upstream.send_all(b"".join(batch))
        if held:
            conn.batch_held = 0
            release(self.budget, held)

    def _refresh(self, names: set[str]) -> None:
        """Ask the cluster again for these topics' leaders (one request at a time)."""
        self.stale |= names
        if not self.refreshing:
            self.refreshing = True
            self.nursery.start_soon(self._refresh_metadata)

    async def _refresh_metadata(self) -> None:
        try:
            while self.stale and self.topics.metadata_version >= 0:
                names, self.stale = self.stale, set()
                version = self.topics.metadata_version
                # A SASL cluster answers the filters' pools (logged in), not the shared one.
                routes = [(p, n) for p in (*self.own_pools, self.pool) for n in list(self.nodes)]
                for pool, node_id in routes:
                    try:
                        waiter = await pool.send(
                            node_id,
                            "trafka-proxy",
                            ApiKey.METADATA,
                            version,
                            metadata_request(names),
                        )
                        frame = await pool.wait(
                            waiter, trio.current_time() + self.config.connect_timeout
                        )
                        # Read as a client's answer would be: leaders and brokers learned.
                        _, body = protocol.decode_response(frame, ApiKey.METADATA, version)
                        self._from_upstream(ApiKey.METADATA, version, body)
                    except (UpstreamError, TrafkaError, FilterError) as exc:
                        log.debug("metadata refresh through broker %d failed: %s", node_id, exc)
                        continue
                    self.stats.metadata_refreshes += 1
                    break
        finally:
            self.refreshing = False

    async def _answers(
        self,
        conn: _Client,
        answers: trio.MemoryReceiveChannel[_Answer],
        frames: trio.MemoryReceiveChannel[list[bytes]],
    ) -> None:
        """Write the answers to the client in the order of its requests: those
        ready at once in one write. An answer no filter sees is written as the
        bytes the broker sent, its size prefix put back."""
        ready: deque[bytes] = deque()  # answers read from upstream, not yet matched
        out = _Out(conn, self.metrics)
        try:
            while True:
                try:
                    slot = answers.receive_nowait()
                except trio.WouldBlock:
                    await out.flush()
                    slot = await answers.receive()
                if slot.closed:
                    break
                if slot.done is not None:  # answered by a filter
                    if not slot.done.is_set():
                        await out.flush()
                        await slot.done.wait()
                    if slot.error is not None:
                        raise slot.error
                    assert slot.frame is not None
                    if slot.filtered is None:
                        out.queue_answer(slot.api_key, slot.frame)
                        continue
                    ctx, chain = slot.filtered
                    parts, closing = run_response(chain, ctx, slot.frame[4:])
                    out.queue_answer(slot.api_key, *parts)
                    if closing:
                        break
                    continue
                if not ready:
                    try:
                        ready.extend(frames.receive_nowait())
                    except trio.WouldBlock:
                        await out.flush()
                        ready.extend(await frames.receive())
                frame = ready[0]
                if protocol.peek_correlation_id(frame) != slot.correlation_id:
                    out.settled += 1
                    continue  # that request was not answered; this is a later one's
                ready.popleft()
                if slot.filtered is None:
                    out.queue_answer(slot.api_key, _SIZE.pack(len(frame)), frame)  # byte for byte
                    continue
                ctx, chain = slot.filtered
                parts, closing = run_response(chain, ctx, frame)
                out.queue_answer(slot.api_key, *parts)
                if closing:  # CloseAfter: this answer is the connection's last
                    break
            await out.flush()
        except (DecodeError, TrafkaError) as exc:
            self.quiet.warning(
                "answer", "closing a connection after a bad answer from upstream: %s", exc
            )
        except FilterError as exc:
            self._closing("filter", ("filter", str(exc).split(":", 1)[0]), exc, logging.ERROR)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.EndOfChannel):
            pass
        conn.pumps.cancel_scope.cancel()


async def _upstream_frames(
    conn: _Client,
    frames: trio.MemorySendChannel[list[bytes]],
    max_frame_size: int,
    quiet: RateLimitedLog,
) -> None:
    """Read the client's own upstream connection, handing on the answers of
    each read together; when it ends, the client's connection ends once the
    answers owed before are written."""
    # A large answer (a Fetch's) is kept as the pieces it arrives in and joined once.
    reader = FrameReader(max_frame_size, join_from=_RECV_SIZE)
    async with frames:
        try:
            while data := await conn.upstream.receive_some(_RECV_SIZE):
                reader.feed(data)
                if whole := list(reader):
                    await frames.send(whole)
        except (DecodeError, TrafkaError) as exc:
            quiet.warning(
                "answer", "closing a connection after a bad answer from upstream: %s", exc
            )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        await conn.to_writer.send(_Answer(-1, closed=True))


class _Out:
    """The answers ready for a client, written at once (:meth:`flush`)."""

    __slots__ = ("conn", "metrics", "parts", "settled")

    def __init__(self, conn: _Client, metrics: ProxyMetrics) -> None:
        self.conn = conn
        self.metrics = metrics
        self.parts: list[bytes] = []
        self.settled = 0  # answers owed that these parts settle

    def queue_answer(self, api_key: int, *parts: bytes) -> None:
        """An owed answer (its frame, size prefix included, as parts)."""
        self.settled += 1
        self.parts += parts
        self.metrics.answered(api_key, sum(map(len, parts)))

    async def flush(self) -> None:
        parts = self.parts
        if parts:
            self.parts = []
            data = parts[0] if len(parts) == 1 else b"".join(parts)
            self.conn.traffic.sent += len(data)
            await self.conn.client.send_all(data)
        # Settled once written, or found to have none.
        self.conn.owed -= self.settled
        self.settled = 0


@dataclass(slots=True)
class _Answer:
    """An answer the client is owed, in the order of its requests: from its own
    upstream connection (``done`` None), or made by a filter."""

    correlation_id: int
    done: trio.Event | None = None
    frame: bytes | None = None  # size prefix included
    api_key: int = ApiKey.PRODUCE
    # The stages its request reached, to see its answer (and their context).
    filtered: tuple[FilterContext, tuple[Stage, ...]] | None = None
    error: TrafkaError | FilterError | None = None
    closed: bool = False  # the upstream connection ended: nothing more is owed


@dataclass(slots=True)
class _Client:
    """One client connection and its own upstream connection."""

    client: trio.abc.Stream
    upstream: trio.abc.Stream
    address: tuple[str, int]
    to_writer: trio.MemorySendChannel[_Answer]
    pumps: trio.Nursery
    peer: tuple[str, int] | None = None
    software: str | None = None  # the client's software name (ApiVersions v3+, KIP-511)
    state: dict[str, Any] = field(default_factory=dict)  # the filters'
    session: Session = field(default_factory=Session)  # what filters learned of its login
    filtered: tuple[FilterContext, tuple[Stage, ...]] | None = None  # the current request's
    owed: int = 0  # answers queued for the client and not yet written
    reserved: int = 0  # the current request's bytes of the proxy's request budget
    batch: list[bytes] = field(default_factory=list)  # requests to write upstream at once
    batch_held: int = 0  # their bytes of the request budget
    traffic: connlog.Traffic = field(default_factory=connlog.Traffic)  # for the log (-v)


def _framed(correlation_id: int, key: int, version: int, body: bytes) -> bytes:
    """A response frame (size prefix included) around an encoded body."""
    flexible = protocol.api(key).response_header_version(version) >= 1
    head = _SIZE_CORR.pack(len(body) + (5 if flexible else 4), correlation_id)
    return b"".join((head, b"\0", body)) if flexible else head + body


_SIZE_CORR = struct.Struct(">ii")


def _fits_now(budget: RequestBudget, size: int) -> bool:
    """Whether ``size`` bytes of ``budget`` are granted without waiting."""
    limit = budget.limit
    return limit is None or (
        not budget.waiting and (not budget.used or budget.used + size <= limit)
    )


def _listening(sock: socket.socket) -> trio.SocketListener:
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock))


def _seconds(ms: int) -> float:
    """A timeout setting in seconds; -1 (Kafka's "never") as infinity."""
    return math.inf if ms < 0 else ms / 1000


def _answered(slot: _Answer, ctx: FilterContext, body: Any, framed: bool) -> None:
    if framed:  # a filter that sees frames answered with one
        slot.frame = _SIZE.pack(len(body)) + body
    elif isinstance(body, EncodedBody):
        slot.frame = _framed(slot.correlation_id, ctx.api_key, ctx.api_version, body.data)
    else:
        slot.frame = protocol.encode_response(
            slot.correlation_id, ctx.api_key, ctx.api_version, body
        )
    assert slot.done is not None
    slot.done.set()


def _acks(frame: bytes, start: int | None, body: Any, version: int) -> int:
    """A Produce request's acks: the decoded body's, else read on the frame's
    bytes (``start``: where its body begins, when known) without decoding the
    records the broker judges."""
    if body is None:
        if start is None:
            start = protocol.decode_request_header(frame)[1]
        acks = protocol.peek_produce_acks(frame, start, version)
        if acks is not None:
            return acks
        _, body = protocol.decode_request(frame, allow_trailing=True)
    return int(body.acks)


@asynccontextmanager
async def serve_core(config: ProxyConfig) -> AsyncIterator[RunningProxy]:
    """Serve the proxy's core with ``config.filters`` as its whole chain (the
    core adds no filter: :func:`~.assembly.serve_proxy` assembles the chain,
    key routing included, and is what users call).

    Yields:
        The :class:`RunningProxy` (the bootstrap listener's real port included).

    Raises:
        ValueError: invalid settings.
        OSError: the bootstrap port cannot be bound.
    """
    config = await discover_upstream(config)
    attached: tuple[Filter, ...] = ()
    # What fails while starting (a port taken, a journal that cannot be opened)
    # is raised as itself, not inside the nursery's exception group.
    failed: OSError | ValueError | None = None
    try:
        async with trio.open_nursery() as nursery:
            try:
                proxy = _Proxy(config, nursery)
                attached = proxy.filters
                listeners = (
                    shared_listeners(config.host, config.port)
                    if config.reuse_port
                    else await trio.open_tcp_listeners(config.port, host=config.host)
                )
                served = None
                if config.metrics_listen is not None:
                    metrics_host, _, metrics_port = config.metrics_listen.rpartition(":")
                    served = await trio.open_tcp_listeners(
                        int(metrics_port), host=metrics_host.strip("[]") or None
                    )
                named = bind_all(  # last: none leak
                    ((n, n.host, n.port) for n in config.listeners), shared=config.reuse_port
                )
            except (OSError, ValueError) as exc:
                failed = exc
                nursery.cancel_scope.cancel()
            else:
                try:
                    running = await _start_serving(config, proxy, nursery, listeners, served)
                    for item, sock in named:  # the named listeners' bootstrap ports
                        nursery.start_soon(proxy.serve, _listening(sock), None, item.name)
                        at = (item.advertised_host or proxy.advertised, sock.getsockname()[1])
                        running.listeners[item.name] = at
                        log.info("listener %s on %s:%d", item.name, *at)
                    if config.announce:
                        protocol = "SSL" if config.ssl_certfile else None
                        async with announcing_listener(
                            "proxy",
                            proxy.advertised,
                            running.address[1],
                            security_protocol=protocol,
                        ):
                            yield running
                    else:
                        yield running
                finally:
                    nursery.cancel_scope.cancel()
    finally:
        # Once every task has ended (a journal write among them).
        for f in attached:
            f.detach()
    if failed is not None:
        raise failed


async def _start_serving(
    config: ProxyConfig,
    proxy: _Proxy,
    nursery: trio.Nursery,
    listeners: list[trio.SocketListener],
    served: list[trio.SocketListener] | None,
) -> RunningProxy:
    port = listeners[0].socket.getsockname()[1]
    for listener in listeners:
        nursery.start_soon(proxy.serve, listener, None)
    if proxy.sni is not None:
        proxy.sni.port = proxy.sni.port or port
    # SNI, named listeners: clients may come to a broker's port at once (a restart)
    if config.node_ports or proxy.sni is not None or config.listeners:
        nursery.start_soon(proxy.open_known_listeners)
    advertised = proxy.advertised
    log.info("proxy on %s:%d for %s", advertised, port, ",".join(config.upstream))
    metrics_address = None
    if served is not None:
        from trafka.common.metrics_http import Endpoint, serve_metrics

        metrics_address = tuple(served[0].socket.getsockname()[:2])
        endpoint = Endpoint(proxy.metrics.exposition, lambda: proxy.upstream_reachable)
        await nursery.start(serve_metrics, endpoint, served)
        nursery.start_soon(proxy.probe_upstream)
    return RunningProxy(
        (advertised, port),
        f"{advertised}:{port}",
        proxy.stats,
        metrics_address,
        proxy.budget,
        proxy.tls,
        proxy.filters,
    )
