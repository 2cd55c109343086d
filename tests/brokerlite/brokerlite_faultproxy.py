"""A loopback TCP proxy that injects faults between Kafka clients and a broker (test helper).

The proxy sits on 127.0.0.1 in front of brokerlite; the broker advertises the
proxy's address, so every connection a client opens (bootstrap, partition
leader, coordinators) goes through it. Requests pass untouched; responses are
where faults happen, because a response is the proof that the broker already
acted on the request. Cutting the connection there is the case idempotence and
transactions exist for: the broker appended the batch, the producer never heard.

Sans-IO core (:class:`FaultyLink`, one client connection, and :class:`FaultPlan`,
the decisions shared by all connections) plus a thread driver (:class:`FaultProxy`).

Rules and invariants of a :class:`FaultyLink`:

* Client bytes are forwarded to the broker at once and unchanged. The link reads
  them through a :class:`~trafka.codec.framing.FrameReader` only to learn each
  request's correlation id and API key from its header.
* Broker bytes are cut into response frames. Each response is matched to its
  request by correlation id and the plan decides, once per response:
  ``PASS`` (send on), ``DELAY`` (hold it, and everything behind it, for a while:
  order is kept), ``SWAP`` (hold it until the next response has gone out, then
  send it: two responses in reverse order), ``REWRITE`` (replace the frame by
  what the plan's ``rewrite`` makes of it: hostile answers) or ``CUT`` (drop it
  and everything after it; the driver closes both sockets).
* A held ``SWAP`` response is sent no later than ``swap_hold_s`` after it arrived,
  alone if no other response came meanwhile, so a client waiting for it only
  sees a late response, never a lost one.
* Once cut, a link forwards nothing more in either direction.
* The plan's decisions depend only on its seed and the order in which responses
  reach it, and it never cuts more than ``max_cuts`` times in all, so a run
  always completes.
* Delays hold a response at most ``delay_s[1]`` and swaps at most ``swap_hold_s``:
  keep both below the clients' request timeouts, or the test measures timeouts.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import random
import select
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable

from trafka.codec import ApiKey
from trafka.codec.framing import FrameReader

__all__ = ["Action", "FaultPlan", "FaultProxy", "FaultyLink"]

_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id
_SIZE = struct.Struct(">i")


class Action(enum.Enum):
    PASS = "pass"
    DELAY = "delay"
    SWAP = "swap"
    REWRITE = "rewrite"
    CUT = "cut"


# (api key, api version, response frame without its size prefix, the plan's
# random source) -> the frame to send instead
Rewrite = Callable[[int, int, bytes, random.Random], bytes]


@dataclasses.dataclass
class FaultPlan:
    """Which responses to tamper with (shared by every link; thread-safe).

    Args:
        seed: seeds the choices.
        api_keys: the APIs whose responses are tampered with (Produce by default).
        cut_every: cut at every ``cut_every``-th eligible response (0: never),
            at most ``max_cuts`` times; deterministic, so a test knows it happened.
        delay: probability of delaying a response, by ``delay_s`` (min, max) seconds.
        swap: probability of swapping one with the next response.
        skip_first: leave this many eligible responses alone (let clients start).
        rewrite: probability of replacing a response by ``rewriter``'s version of it.
    """

    seed: int = 0
    api_keys: frozenset[int] = frozenset({ApiKey.PRODUCE})
    cut_every: int = 0
    max_cuts: int = 0
    delay: float = 0.0
    delay_s: tuple[float, float] = (0.02, 0.2)
    swap: float = 0.0
    swap_hold_s: float = 0.5
    skip_first: int = 0
    rewrite: float = 0.0
    rewriter: Rewrite | None = None

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self.seen = 0
        self.counts: collections.Counter[Action] = collections.Counter()

    def decide(self, api_key: int) -> tuple[Action, float]:
        """The action for one response of ``api_key``, and the delay for DELAY."""
        with self._lock:
            if api_key not in self.api_keys:
                return Action.PASS, 0.0
            self.seen += 1
            if self.seen <= self.skip_first:
                return Action.PASS, 0.0
            roll = self._rng.random()
            action, pause = Action.PASS, 0.0
            n = self.seen - self.skip_first
            if (
                self.cut_every
                and n % self.cut_every == 0
                and self.counts[Action.CUT] < self.max_cuts
            ):
                action = Action.CUT
            elif roll < self.delay:
                action, pause = Action.DELAY, self._rng.uniform(*self.delay_s)
            elif roll < self.delay + self.swap:
                action = Action.SWAP
            elif roll < self.delay + self.swap + self.rewrite and self.rewriter is not None:
                action = Action.REWRITE
            self.counts[action] += 1
            return action, pause

    def rewritten(self, api_key: int, api_version: int, frame: bytes) -> bytes:
        """``frame`` as the plan's rewriter makes it (with the plan's random source)."""
        assert self.rewriter is not None
        with self._lock:
            return self.rewriter(api_key, api_version, frame, self._rng)


class FaultyLink:
    """One client connection through the proxy, without I/O (see the module rules).

    The driver feeds :meth:`from_client` and :meth:`from_broker`, sends what they
    and :meth:`to_client` return, and closes both sockets once :attr:`cut` is set.
    """

    def __init__(self, plan: FaultPlan) -> None:
        self._plan = plan
        self._requests = FrameReader()
        self._responses = FrameReader()
        # correlation id -> (api key, api version), requests in flight
        self._keys: dict[int, tuple[int, int]] = {}
        # responses on their way to the client: (release time, frame bytes)
        self._queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self._swapped: tuple[float, bytes] | None = None  # a response waiting for the next one
        self.cut = False

    def from_client(self, data: bytes) -> bytes:
        """Client bytes in; the bytes to forward to the broker."""
        if self.cut:
            return b""
        self._requests.feed(data)
        for frame in self._requests:
            key, version, corr = _HEADER.unpack_from(frame)
            self._keys[corr] = (key, version)
        return data

    def from_broker(self, data: bytes, now: float) -> None:
        """Broker bytes in; responses are queued (or dropped) by the plan."""
        if self.cut:
            return
        self._responses.feed(data)
        for frame in self._responses:
            corr = _SIZE.unpack_from(frame)[0]
            key, version = self._keys.pop(corr, (-1, -1))
            action, pause = self._plan.decide(key)
            if action is Action.REWRITE:
                frame = self._plan.rewritten(key, version, bytes(frame))
            wire = _SIZE.pack(len(frame)) + bytes(frame)
            if action is Action.CUT:
                self.cut = True
                self._queue.clear()
                self._swapped = None
                return
            if action is Action.SWAP and self._swapped is None:
                self._swapped = (now + self._plan.swap_hold_s, wire)
                continue
            release = now + pause
            if self._queue:
                release = max(release, self._queue[-1][0])  # order is kept behind a delay
            self._queue.append((release, wire))
            if self._swapped is not None:
                self._queue.append((release, self._swapped[1]))
                self._swapped = None

    def to_client(self, now: float) -> bytes:
        """The responses due at ``now``, in the order they must reach the client."""
        if self.cut:
            return b""
        if self._swapped is not None and self._swapped[0] <= now:
            self._queue.append((now, self._swapped[1]))
            self._swapped = None
        out = bytearray()
        while self._queue and self._queue[0][0] <= now:
            out += self._queue.popleft()[1]
        return bytes(out)

    def next_deadline(self) -> float | None:
        """When :meth:`to_client` next has something (monotonic seconds), or None."""
        times = [self._queue[0][0]] if self._queue else []
        if self._swapped is not None:
            times.append(self._swapped[0])
        return min(times) if times else None


class FaultProxy:
    """The thread driver: listens on 127.0.0.1 (port 0), one thread per connection.

    Set :attr:`upstream` to the broker's address before clients connect (the broker
    is usually started after the proxy, advertising :attr:`address`).
    """

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.upstream: tuple[str, int] | None = None
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self.connections = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, name="faultproxy", daemon=True)

    def __enter__(self) -> FaultProxy:
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._acceptor.join(5)
        for thread in self._threads:
            thread.join(5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        assert self.upstream is not None, "set FaultProxy.upstream first"
        link = FaultyLink(self.plan)
        with contextlib.ExitStack() as stack:
            stack.callback(client.close)
            try:
                broker = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                return
            stack.callback(broker.close)
            for sock in (client, broker):
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with selectors.DefaultSelector() as sel:
                sel.register(client, selectors.EVENT_READ, "client")
                sel.register(broker, selectors.EVENT_READ, "broker")
                self._pump(sel, link, client, broker)

    def _pump(
        self,
        sel: selectors.BaseSelector,
        link: FaultyLink,
        client: socket.socket,
        broker: socket.socket,
    ) -> None:
        while not self._stop.is_set():
            deadline = link.next_deadline()
            timeout = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
            for key, _ in sel.select(timeout):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = sock.recv(256 * 1024)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    return
                if not data:
                    return
                if key.data == "client":
                    if not _send_all(broker, link.from_client(data)):
                        return
                else:
                    link.from_broker(data, time.monotonic())
                if link.cut:
                    # Both ends see the connection die: the client with its request
                    # done by the broker but unanswered, the broker with nothing to read.
                    for end in (client, broker):
                        with contextlib.suppress(OSError):
                            end.shutdown(socket.SHUT_RDWR)
                    return
            out = link.to_client(time.monotonic())
            if out and not _send_all(client, out):
                return


def _send_all(sock: socket.socket, data: bytes) -> bool:
    """Blocking-style send on a non-blocking socket; False when the peer is gone."""
    view = memoryview(data)
    while view:
        try:
            sent = sock.send(view)
        except (BlockingIOError, InterruptedError):
            select.select([], [sock], [], 0.05)
            continue
        except OSError:
            return False
        view = view[sent:]
    return True
