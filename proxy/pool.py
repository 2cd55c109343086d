"""The proxy's own upstream connections: one per broker, shared by every client.

Rules:

* One connection per upstream broker, opened at its first use and opened
  again after it fails. Concurrent first uses wait for the same opening.
* Requests are pipelined: written whole, one writer at a time, in the order
  :meth:`UpstreamPool.send` is called, framed and matched to their answers by
  the SDK's connection core (:class:`~trafka.sdk.connection_state.ConnectionState`,
  its raw answers: the pool hands on each answer's frame undecoded), so
  framing, correlation ids and the in-order check are the client's rules: an
  answer out of order, or to no request, breaks the connection. A broker
  handles one connection's requests in order, so what one client connection
  sends to one broker through the pool is appended in that client's order
  (per-key order holds), while clients sharing the connection do not wait for
  each other's round trips, as they would if one request at a time were let
  through.
* A request fails with :class:`UpstreamError` when its connection cannot be
  opened, breaks before the answer, or the answer does not come by the
  caller's deadline; the error names the Kafka error code the caller can
  stand in (NETWORK_EXCEPTION or REQUEST_TIMED_OUT, both retriable).
* Each connection has a serial number, never reused, by any pool of the process
  (:meth:`UpstreamPool.link`).
  A request bound to one (``send(..., link=serial)``) is written on that
  connection or not at all: the caller knows that what it wrote there before
  reaches the broker first, or with it is lost.
* A connection whose login has a lifetime (KIP-368: the broker's
  ``connections.max.reauth.ms``, told in the SaslAuthenticate answer; see
  :class:`Opened`) takes no new request once :data:`RENEW_SHARE` of it has
  passed: a fresh connection (logged in afresh) takes them, and the old one is
  closed once its answers are in. A broker closes a connection whose session
  expired at its next request, so the proxy never sends one there. (Renewing
  the login in place, as a client does, would hold every request behind the
  exchange; a second connection holds none.)
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from trafka.codec.errors import DecodeError, ErrorCode, TrafkaError
from trafka.codec.produce_response import ProduceAnswer, read_produce_response
from trafka.sdk.connection_state import ConnectionState

__all__ = [
    "RENEW_SHARE",
    "HeldBack",
    "Opened",
    "UpstreamError",
    "UpstreamPool",
    "Waiter",
    "produce_answer",
]

log = logging.getLogger("trafka.proxy")

# Connection serial numbers, unique across every pool of the process (the
# per-principal pools of :mod:`.principals` among them), so that a serial
# names one connection whichever pool a caller got it from.
_SERIALS = itertools.count(1)


#: The share of a login's lifetime after which its connection takes no new
#: request (Kafka's clients re-authenticate between 85% and 95% of it).
RENEW_SHARE = 0.85


@dataclass(frozen=True, slots=True)
class Opened:
    """A connection a pool's ``connect`` opened whose login lasts ``lifetime``
    seconds (a plain stream: no lifetime)."""

    stream: trio.abc.Stream
    lifetime: float


class UpstreamError(Exception):
    """A request through the pool got no answer.

    Attributes:
        code: the error to answer in its stead.
    """

    def __init__(self, message: str, code: ErrorCode = ErrorCode.NETWORK_EXCEPTION) -> None:
        super().__init__(message)
        self.code = code


class HeldBack(UpstreamError):
    """A request part the proxy chose not to write yet (flow control, not a
    failure): the client is answered a retriable error and sends it again."""


class Waiter:
    """One request's answer to come (see :meth:`UpstreamPool.wait`)."""

    __slots__ = ("done", "error", "frame", "sent_at")

    def __init__(self) -> None:
        self.sent_at = 0.0
        self.done = trio.Event()
        self.frame: bytes | None = None
        self.error: UpstreamError | None = None

    def fail(self, error: UpstreamError) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


class _Link:
    def __init__(
        self, node_id: int, stream: trio.abc.Stream, serial: int, max_frame_size: int
    ) -> None:
        self.node_id = node_id
        self.serial = serial
        self.stream = stream
        self.writing = trio.Lock()
        # Framing and correlation (the waiters are its requests' cookies).
        self.state = ConnectionState(None, max_frame_size=max_frame_size)
        self.broken: UpstreamError | None = None
        self.renew_at: float | None = None  # trio's clock: takes no new request from then
        self.retired = False

    def fail(self, error: UpstreamError) -> None:
        self.broken = self.broken or error
        for flight in self.state.fail_all():
            flight.cookie.fail(self.broken)


class UpstreamPool:
    """The pooled connections.

    Args:
        nursery: runs each connection's reader.
        connect: opens a stream to a broker by node id (raises OSError).
        max_frame_size: the largest answer accepted.
        observe: called with (node id, seconds) for each answered request.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        connect: Callable[[int], Awaitable[trio.abc.Stream | Opened]],
        max_frame_size: int,
        observe: Callable[[int, float], None] | None = None,
    ) -> None:
        self._observe = observe
        self._nursery = nursery
        self._connect = connect
        self._max_frame_size = max_frame_size
        self._links: dict[int, _Link] = {}
        self._opening: dict[int, trio.Lock] = {}

    async def link(self, node_id: int) -> int:
        """The serial number of the connection to ``node_id`` (opened if need be).

        Raises:
            UpstreamError: the connection cannot be opened.
        """
        return (await self._link(node_id)).serial

    async def send(
        self,
        node_id: int,
        client_id: str | None,
        key: int,
        version: int,
        body: object,
        *,
        answered: bool = True,
        link: int | None = None,
    ) -> Waiter:
        """Write a request to the broker ``node_id``; return its answer's waiter.

        ``body``: the request message, or a body that writes itself on bytes
        (:class:`~trafka.codec.protocol.EncodedRequest`, such as key routing's
        :class:`~trafka.codec.produce_request.ProduceRequestData`), framed by
        the connection's state as a message is.

        ``answered=False``: the broker will not answer (acks=0 Produce); the
        waiter is not kept and never done. ``link``: write it only on the
        connection of this serial number (:meth:`link`).

        Raises:
            UpstreamError: the connection cannot be opened or is broken, or is
                not the one ``link`` names (nothing was written).
        """
        conn = await self._link(node_id)
        if link is not None and conn.serial != link:
            raise UpstreamError(f"broker {node_id}: the connection {link} was lost")
        async with conn.writing:
            if conn.broken is not None:
                raise conn.broken
            waiter = Waiter()
            waiter.sent_at = trio.current_time()
            # No deadline in the core: each caller waits to its own (wait()); an
            # answer that comes later is still the next in order, and dropped.
            _, frame = conn.state.send_request(
                key,
                body,
                now=waiter.sent_at,
                timeout=math.inf,
                version=version,
                expect_response=answered,
                cookie=waiter,
                raw=True,
                client_id=client_id,
            )
            try:
                await conn.stream.send_all(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                self._drop(conn, UpstreamError(f"broker {node_id}: {exc}"))
                raise UpstreamError(f"broker {node_id}: {exc}") from None
        return waiter

    @staticmethod
    async def wait(waiter: Waiter, deadline: float) -> bytes:
        """The answer's frame (without its size prefix).

        Raises:
            UpstreamError: the connection broke, or ``deadline`` (trio's clock) passed.
        """
        with trio.move_on_at(deadline):
            await waiter.done.wait()
        if not waiter.done.is_set():
            waiter.fail(UpstreamError("no answer in time", ErrorCode.REQUEST_TIMED_OUT))
        if waiter.error is not None:
            raise waiter.error
        assert waiter.frame is not None
        return waiter.frame

    async def _link(self, node_id: int) -> _Link:
        link = self._links.get(node_id)
        if link is not None and self._usable(link):
            return link
        async with self._opening.setdefault(node_id, trio.Lock()):
            link = self._links.get(node_id)
            if link is not None and self._usable(link):
                return link
            opened_at = trio.current_time()
            try:
                got = await self._connect(node_id)
            except OSError as exc:
                raise UpstreamError(f"broker {node_id}: {exc}") from None
            stream = got.stream if isinstance(got, Opened) else got
            link = _Link(node_id, stream, next(_SERIALS), self._max_frame_size)
            if isinstance(got, Opened):
                link.renew_at = opened_at + got.lifetime * RENEW_SHARE
            self._links[node_id] = link
            self._nursery.start_soon(self._read, link)
            return link

    def _usable(self, link: _Link) -> bool:
        """Whether ``link`` may take a new request (else a broken one is
        forgotten, an ageing one retired: see the module's rules)."""
        if link.broken is not None:
            return False
        if link.renew_at is None or trio.current_time() < link.renew_at:
            return True
        link.retired = True
        if self._links.get(link.node_id) is link:
            del self._links[link.node_id]
        if not link.state.in_flight_count:
            self._nursery.start_soon(link.stream.aclose)
        return False

    def _drop(self, link: _Link, error: UpstreamError) -> None:
        link.fail(error)
        if self._links.get(link.node_id) is link:
            del self._links[link.node_id]
        self._nursery.start_soon(link.stream.aclose)

    async def _read(self, link: _Link) -> None:
        error = UpstreamError(f"broker {link.node_id} closed the connection")
        try:
            while True:
                data = await link.stream.receive_some(65536)
                if not data:
                    break
                now = trio.current_time()
                for answer in link.state.receive_data(data, now):
                    waiter = answer.cookie
                    if not waiter.done.is_set():  # else its caller stopped waiting
                        waiter.frame = answer.body
                        waiter.done.set()
                        if self._observe is not None:
                            self._observe(link.node_id, now - waiter.sent_at)
                if link.retired and not link.state.in_flight_count:
                    break  # its last answer is in (closed below)
        except (DecodeError, TrafkaError) as exc:
            log.warning("closing the pooled connection to broker %d: %s", link.node_id, exc)
            error = UpstreamError(f"broker {link.node_id}: {exc}")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            error = UpstreamError(f"broker {link.node_id}: {exc}")
        finally:
            with trio.CancelScope(shield=True):
                link.fail(error)
                if self._links.get(link.node_id) is link:
                    del self._links[link.node_id]
                await link.stream.aclose()


async def produce_answer(
    pool: UpstreamPool,
    waiter: Waiter | UpstreamError,
    deadline: float,
    version: int,
    stand_in: Callable[[ErrorCode, str], ProduceAnswer],
) -> tuple[ProduceAnswer, Exception | None]:
    """The answer to a Produce the pool sent, read on bytes
    (:mod:`trafka.codec.produce_response`), or, when it got none or one that
    does not decode, ``stand_in(error, message)`` (an answer failing each of
    its partitions), and why."""
    try:
        if isinstance(waiter, UpstreamError):
            raise waiter
        frame = await pool.wait(waiter, deadline)
        return read_produce_response(frame, version), None
    except UpstreamError as exc:
        return stand_in(exc.code, str(exc)), exc
    except (DecodeError, TrafkaError) as exc:
        return stand_in(ErrorCode.NETWORK_EXCEPTION, str(exc)), exc
