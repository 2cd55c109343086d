"""The DEBUG lines of the proxy's client connections (``trafka proxy -v``):
each connection accepted (from where, on which listener), its upstream
connection (to the bootstrap server or which broker), and its end (after how
long, its requests and bytes each way).

Rules:

* Nothing is formatted unless DEBUG is on for ``trafka.proxy``: a connection
  costs one level check at each of the three moments.
* The counts (:class:`Traffic`) are kept whatever the level: an addition per
  request read and per write to the client.
"""

from __future__ import annotations

import logging

import trio

__all__ = ["Traffic", "accepted", "closed", "shown", "upstream_opened"]

log = logging.getLogger("trafka.proxy")


class Traffic:
    """A client connection's requests and bytes (size prefixes included)."""

    __slots__ = ("received", "requests", "sent")

    def __init__(self) -> None:
        self.requests = 0
        self.received = 0
        self.sent = 0

    def request(self, size: int) -> None:
        """A request of ``size`` bytes (without its size prefix) was read."""
        self.requests += 1
        self.received += size + 4


def shown(address: tuple[str, int] | None) -> str:
    """``host:port`` (``[host]:port`` for IPv6) for a log line."""
    if address is None:
        return "an unknown peer"
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def accepted(
    peer: tuple[str, int] | None,
    raw: trio.SocketStream,
    node_id: int | None,
    name: str | None = None,
) -> float:
    """Log a connection accepted from ``peer`` (``node_id``: on that broker's
    listener; None: the bootstrap one; ``name``: of that named listener,
    :mod:`.listeners`); the time it was (the loop's clock)."""
    if log.isEnabledFor(logging.DEBUG):
        try:
            port = raw.socket.getsockname()[1]
        except (OSError, IndexError):
            port = "?"
        where = "the bootstrap listener" if node_id is None else f"broker {node_id}'s listener"
        where += "" if name is None else f" of listener {name}"
        log.debug("connection from %s accepted on %s (port %s)", shown(peer), where, port)
    return trio.current_time()


def upstream_opened(
    peer: tuple[str, int] | None, address: tuple[str, int], node_id: int | None
) -> None:
    """Log the upstream connection of ``peer``'s connection, opened at its first request."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "connection from %s: its upstream connection to %s (%s)",
            shown(peer),
            shown(address),
            "a bootstrap server" if node_id is None else f"broker {node_id}",
        )


def closed(peer: tuple[str, int] | None, opened: float, traffic: Traffic | None) -> None:
    """Log the end of ``peer``'s connection, accepted at ``opened`` (``traffic``
    None: it sent no request)."""
    if not log.isEnabledFor(logging.DEBUG):
        return
    seconds = trio.current_time() - opened
    if traffic is None:
        log.debug(
            "connection from %s closed after %.1f s, before any request", shown(peer), seconds
        )
        return
    log.debug(
        "connection from %s closed after %.1f s: %d request%s (%d bytes) in, %d bytes out",
        shown(peer),
        seconds,
        traffic.requests,
        "" if traffic.requests == 1 else "s",
        traffic.received,
        traffic.sent,
    )
