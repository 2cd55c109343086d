"""What the proxy settles before it serves, shared by one proxy and the
workers of ``trafka proxy --workers`` (:mod:`.workers`): the upstream found
through zeroconf, whether an upstream bootstrap server takes connections
(``/readyz``), the brokers an upstream server names (the listeners a
restarted worker opens at once), and bootstrap listeners bound with
``SO_REUSEPORT``.

Rules:

* A shared bootstrap port: every socket bound to it sets ``SO_REUSEADDR`` and
  ``SO_REUSEPORT``, so the kernel (Linux 3.9 and later) hands each new
  connection to one of the processes listening there. The supervisor keeps one
  such socket bound but not listening for as long as it runs
  (``listen=False``): it gets no connections and holds the port, so a worker
  restarted after a crash can always bind it again, and no other user's
  program can take it meanwhile.
* Port 0 names a port only once: the first address bound picks it and the
  host's other addresses (IPv4 and IPv6 of a name) bind the same one.
"""

from __future__ import annotations

import logging
import math
import socket
from dataclasses import replace
from typing import Any

import trio

from trafka.codec import ApiKey
from trafka.discovery import discover, is_spec, parse_spec
from trafka.sdk.connection_state import ConnectionState, Response

from .config import ProxyConfig, split_server
from .topics import metadata_request

__all__ = ["brokers_named", "discover_upstream", "shared_sockets", "upstream_reachable"]

log = logging.getLogger("trafka.proxy")

_BACKLOG = 128
# Metadata 9: the first flexible version, served from Kafka 2.4 to 4.
_KNOWN_METADATA_VERSION = 9
_RECV_SIZE = 65536


def shared_sockets(host: str, port: int, *, listen: bool = True) -> list[socket.socket]:
    """Sockets bound to ``port`` on every address of ``host`` with ``SO_REUSEPORT``,
    listening unless ``listen`` is false.

    Raises:
        OSError: an address cannot be bound (or ``SO_REUSEPORT`` is not there).
    """
    if not hasattr(socket, "SO_REUSEPORT"):
        raise OSError("SO_REUSEPORT is not available on this system")
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[tuple[int, object]] = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if sockets[0] is not sock:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            if listen:
                sock.listen(_BACKLOG)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def shared_listeners(host: str, port: int) -> list[trio.SocketListener]:
    """:func:`shared_sockets` as trio listeners."""
    return [
        trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        for sock in shared_sockets(host, port)
    ]


async def upstream_reachable(config: ProxyConfig) -> bool:
    """Whether one of the upstream bootstrap servers takes a connection now."""
    for server in config.upstream:
        host, port = split_server(server)
        try:
            with trio.fail_after(config.connect_timeout):
                stream = await trio.open_tcp_stream(host, port)
            await stream.aclose()
            return True
        except (OSError, trio.TooSlowError):
            continue
    return False


async def brokers_named(stream: trio.abc.Stream, max_frame_size: int) -> tuple[int, Any]:
    """(The version, the answer) of one Metadata request (no topics) sent on
    ``stream``, an upstream connection: the brokers the cluster names. Framed
    and matched by the SDK's connection core, as the pool's requests are; the
    caller bounds it with a deadline.

    Raises:
        OSError: the broker closed the connection first.
        TrafkaError: a malformed answer.
    """
    state = ConnectionState("trafka-proxy", max_frame_size=max_frame_size)
    _, request = state.send_request(
        ApiKey.METADATA,
        metadata_request(()),
        now=trio.current_time(),
        timeout=math.inf,  # the caller's scope is the deadline
        version=_KNOWN_METADATA_VERSION,
    )
    await stream.send_all(request)
    answers: list[Response] = []
    while not answers:
        if not (data := await stream.receive_some(_RECV_SIZE)):
            raise OSError("the broker closed the connection")
        answers = state.receive_data(data, trio.current_time())
    return _KNOWN_METADATA_VERSION, answers[0].body


async def discover_upstream(config: ProxyConfig) -> ProxyConfig:
    """``config`` with its zeroconf upstream specs replaced by what they find.

    Raises:
        ValueError: a spec found nothing.
        DiscoveryError: multicast DNS is unavailable.
    """
    if not any(is_spec(s) for s in config.upstream):
        return config
    upstream: list[str] = []
    for server in config.upstream:
        if not is_spec(server):
            upstream.append(server)
            continue
        spec = parse_spec(server)
        if spec.role is None:
            spec = replace(spec, role="broker")
        # The proxy passes SASL through, so only TLS must match.
        protocols = ("SSL", "SASL_SSL") if config.upstream_ssl else ("PLAINTEXT", "SASL_PLAINTEXT")
        found = await discover(spec, first=True, security_protocols=protocols)
        if not found:
            raise ValueError(
                f"upstream {server!r}: zeroconf found no broker ({spec.describe()}) "
                f"within {spec.timeout_ms} ms"
            )
        upstream.extend(f"{h}:{p}" if ":" not in h else f"[{h}]:{p}" for h, p in found[0].endpoints)
    log.info("upstream from zeroconf: %s", ",".join(upstream))
    return replace(config, upstream=tuple(upstream))
