"""The trio driver: sockets and tasks around the sans-IO :class:`~.broker.Broker`.

Rules and invariants:

* One reader task per connection feeds a :class:`~trafka.codec.framing.FrameReader`
  and hands each frame to ``Broker.handle_frame``. It does not take the next
  frame before the current request is answered or known to need no answer
  (Kafka mutes a connection the same way), so responses leave in request
  order and a parked Fetch or JoinGroup delays later requests of its own
  connection only.
* One writer task per connection sends replies, serialised, from a bounded
  memory channel (backpressure: a client that does not read its responses
  stops being read). A reply is a list of parts of known total size; byte
  parts go out with ``send_all``, file ranges with ``os.sendfile`` (pread and
  send where sendfile is unavailable).
* A malformed frame, an unknown API key, a version nobody can answer or an
  oversized frame closes only that connection, with a log line naming the
  peer address and client id. Errors of one connection never reach another
  or the listener; the broker never crashes because of input.
* One ticker task calls ``Broker.poll`` at ``Broker.next_deadline()`` or when
  a request made new work (a parked request, data for parked fetches).
* The broker core is only touched from the trio thread, so it needs no locks.
* Leaving :func:`serve_broker` cancels every task, closes listeners and
  connections, then flushes and closes the logs. No ExceptionGroup escapes it.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import math
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import trio

from trafka.codec.errors import DecodeError
from trafka.codec.framing import FrameReader

from .broker import Broker, Completion
from .config import BrokerConfig
from .handlers._base import Close, NoResponse, Parked, Part, Reply

__all__ = ["RunningBroker", "broker_in_thread", "run_broker", "serve_broker"]

log = logging.getLogger("trafka.brokerlite")

_RECV_SIZE = 256 * 1024
_SEND_QUEUE = 8
_COALESCE_LIMIT = 64 * 1024
_PREAD_BLOCK = 1024 * 1024


def now_ms() -> int:
    """Wall-clock milliseconds, the broker core's notion of time."""
    return time.time_ns() // 1_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class RunningBroker:
    """A broker being served.

    Attributes:
        address: the bound (host, port); port 0 in the config becomes the real one.
        bootstrap_servers: ``"host:port"`` for client configuration.
        config: the effective configuration.
        broker: the sans-IO core (for tests and introspection; only touch it
            from the broker's trio thread).
    """

    address: tuple[str, int]
    bootstrap_servers: str
    config: BrokerConfig
    broker: Broker


class _Slot:
    """Where the ticker leaves the reply of a connection's parked request."""

    __slots__ = ("event", "reply", "ticket")

    def __init__(self, ticket: int) -> None:
        self.ticket = ticket
        self.event = trio.Event()
        self.reply: Reply | None = None


class _Server:
    def __init__(self, broker: Broker, config: BrokerConfig) -> None:
        self.broker = broker
        self.config = config
        self._slots: dict[int, _Slot] = {}
        self._wake = trio.Event()
        self._sleep_until: float = math.inf  # the deadline the ticker sleeps towards
        self._next_conn = 1
        self._sendfile_ok = hasattr(os, "sendfile")

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
        self.broker.connection_opened(conn_id, peer)
        log.debug("connection %d from %s", conn_id, peer)
        send, recv = trio.open_memory_channel[Reply](_SEND_QUEUE)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer, stream, recv, peer, nursery.cancel_scope)
                async with send:
                    try:
                        await self._reader(stream, send, conn_id, peer)
                    except trio.BrokenResourceError:
                        # The writer lost the peer and closed its end of the channel
                        # before its cancellation reached this task: nothing to report.
                        pass
                    except Exception:
                        log.exception("internal error reading from %s; closing it", peer)
        finally:
            log.debug("connection %d from %s closed", conn_id, peer)
            self._slots.pop(conn_id, None)
            self.broker.connection_closed(conn_id)
            self._wake.set()  # the coordinator may have a member to expire
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _reader(
        self,
        stream: trio.SocketStream,
        send: trio.MemorySendChannel[Reply],
        conn_id: int,
        peer: str,
    ) -> None:
        frames_in = FrameReader(max_frame_size=self.config.socket_request_max_bytes)
        broker = self.broker
        while True:
            try:
                data = await stream.receive_some(_RECV_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                if frames_in.buffered:
                    log.warning(
                        "connection from %s (client %r) closed inside a frame",
                        peer,
                        broker.client_id(conn_id),
                    )
                return
            frames_in.feed(data)
            while True:
                try:
                    frame = frames_in.next_frame()
                except DecodeError as exc:
                    log.warning(
                        "closing the connection from %s (client %r): %s",
                        peer,
                        broker.client_id(conn_id),
                        exc,
                    )
                    return
                if frame is None:
                    break
                outcome = broker.handle_frame(conn_id, frame, now_ms())
                if isinstance(outcome, Reply):
                    await send.send(outcome)
                elif isinstance(outcome, Parked):
                    slot = _Slot(outcome.ticket)
                    self._slots[conn_id] = slot
                    self._after_request()
                    await slot.event.wait()
                    assert slot.reply is not None
                    await send.send(slot.reply)
                elif isinstance(outcome, Close):
                    log.warning(
                        "closing the connection from %s (client %r): %s",
                        peer,
                        outcome.client_id
                        if outcome.client_id is not None
                        else broker.client_id(conn_id),
                        outcome.reason,
                    )
                    return
                else:
                    assert isinstance(outcome, NoResponse)
                self._after_request()

    async def _writer(
        self,
        stream: trio.SocketStream,
        recv: trio.MemoryReceiveChannel[Reply],
        peer: str,
        scope: trio.CancelScope,
    ) -> None:
        try:
            async with recv:
                async for reply in recv:
                    await self._send_parts(stream, reply.encode())
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("connection to %s lost while sending: %s", peer, exc)
            scope.cancel()
        except _ShortFile as exc:
            log.warning("closing the connection to %s: %s", peer, exc)
            scope.cancel()
        except Exception:
            # A bug (say, an unencodable response) costs this connection only.
            log.exception("internal error sending to %s; closing the connection", peer)
            scope.cancel()

    async def _send_parts(self, stream: trio.SocketStream, parts: list[Part]) -> None:
        pending: list[bytes] = []
        pending_size = 0
        for part in parts:
            if isinstance(part, bytes | bytearray | memoryview):
                pending.append(bytes(part))
                pending_size += len(part)
                if pending_size >= _COALESCE_LIMIT:
                    await stream.send_all(b"".join(pending))
                    pending, pending_size = [], 0
                continue
            if pending:
                await stream.send_all(b"".join(pending))
                pending, pending_size = [], 0
            await self._send_file_range(stream, part)
        if pending:
            await stream.send_all(b"".join(pending))

    async def _send_file_range(self, stream: trio.SocketStream, chunk: Any) -> None:
        fd, owned = _chunk_fd(chunk)
        try:
            position, remaining = chunk.position, chunk.length
            if self._sendfile_ok:
                sock = stream.socket
                while remaining > 0:
                    try:
                        sent = os.sendfile(sock.fileno(), fd, position, remaining)
                    except BlockingIOError:
                        await trio.lowlevel.wait_writable(sock)
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
                await stream.send_all(block)
                position += len(block)
                remaining -= len(block)
        finally:
            if owned:
                os.close(fd)


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
    host = cfg.host or "0.0.0.0"
    listeners = await trio.open_tcp_listeners(cfg.port, host=host)
    try:
        bound = listeners[0].socket.getsockname()[:2]
        broker = Broker(cfg, now_ms=now_ms(), advertised=cfg.advertised_address(bound))
    except BaseException:
        for listener in listeners:
            await listener.aclose()
        raise
    server = _Server(broker, cfg)
    advertised_host, advertised_port = broker.advertised
    running = RunningBroker(
        address=(bound[0], bound[1]),
        bootstrap_servers=f"{advertised_host}:{advertised_port}",
        config=cfg,
        broker=broker,
    )
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.ticker)
            nursery.start_soon(_serve_listeners, server, listeners)
            try:
                yield running
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise _collapse(group) from None
    finally:
        broker.close()


async def _serve_listeners(server: _Server, listeners: list[trio.SocketListener]) -> None:
    async with trio.open_nursery() as connections:
        await trio.serve_listeners(server.serve_connection, listeners, handler_nursery=connections)


async def _run(config: BrokerConfig) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with serve_broker(config) as running:
            log.info(
                "brokerlite node %d ready on %s:%d (advertised %s, data in %s)",
                config.node_id,
                running.address[0],
                running.address[1],
                running.bootstrap_servers,
                config.data_dir,
            )
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                break
    log.info("brokerlite stopped")


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
