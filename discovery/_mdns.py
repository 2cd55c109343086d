"""Announcing and finding Kafka services over multicast DNS.

The mDNS work (probing, announcing, answering queries, caching, goodbyes) is
python-zeroconf's, which runs its own thread; this module adapts it to blocking
callers and to anyio (trio or asyncio) tasks, and turns what it sees into
:class:`KafkaService` values through the sans-IO rules in ``_service``.

Invariants:

* Nothing here blocks an event loop: registration, browsing and shutdown run on
  worker threads.
* Announcing never takes a server down: a machine without a multicast-capable
  interface logs one warning and serves on, unannounced.
* Closing an :class:`Announcer` sends goodbyes (TTL 0), so browsers drop the
  service at once instead of after its TTL.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import queue
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio

from trafka.codec.errors import TrafkaError

from ._service import (
    SERVICE_TYPE,
    DiscoverySpec,
    KafkaService,
    instance_name,
    parse_spec,
    read_service,
    sort_services,
    txt_properties,
)

__all__ = [
    "Announcement",
    "Announcer",
    "DiscoveryError",
    "announcing",
    "announcing_listener",
    "bootstrap_list",
    "discover",
    "discover_blocking",
    "local_host_name",
    "resolve_addresses",
]

log = logging.getLogger("trafka.discovery")


class DiscoveryError(TrafkaError, OSError):
    """Multicast DNS could not be used (no usable network interface, say)."""


def local_host_name() -> str:
    """This machine's host name, as announced in the ``host`` TXT key."""
    return socket.gethostname()


def _server_name(host: str) -> str:
    label = re.sub(r"[^A-Za-z0-9-]", "-", host.split(".", 1)[0])[:63].strip("-")
    return f"{label or 'trafka'}.local."


def resolve_addresses(host: str) -> tuple[str, ...]:
    """The IP addresses ``host`` stands for (itself when it is one; blocking
    name resolution otherwise), IPv4 first.

    Raises:
        ValueError: a wildcard address (clients cannot connect to it).
        DiscoveryError: the name does not resolve.
    """
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    if literal is not None:
        if literal.is_unspecified:
            raise ValueError(f"cannot announce the wildcard address {host!r}: advertise a host")
        return (str(literal),)
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise DiscoveryError(f"cannot resolve {host!r} to announce it: {exc}") from None
    found: list[str] = []
    for family, *_, sockaddr in sorted(infos, key=lambda i: i[0] != socket.AF_INET):
        if family in (socket.AF_INET, socket.AF_INET6) and str(sockaddr[0]) not in found:
            found.append(str(sockaddr[0]))
    return tuple(found)


@dataclasses.dataclass(frozen=True, slots=True)
class Announcement:
    """One listener to announce.

    Attributes:
        name: the DNS-SD instance name (see ``instance_name``).
        port: the listener's port.
        addresses: the addresses clients should connect to.
        properties: the TXT entries (see ``txt_properties``).
        host: the host name whose ``<host>.local.`` carries the addresses.
    """

    name: str
    port: int
    addresses: tuple[str, ...]
    properties: Mapping[str, str]
    host: str = dataclasses.field(default_factory=local_host_name)

    def service_info(self) -> Any:
        from zeroconf import ServiceInfo

        return ServiceInfo(
            SERVICE_TYPE,
            f"{self.name}.{SERVICE_TYPE}",
            port=self.port,
            addresses=[ipaddress.ip_address(a).packed for a in self.addresses],
            properties=dict(self.properties),
            server=_server_name(self.host),
        )


class Announcer:
    """Announces listeners on the local network until closed.

    Thread-safe; :meth:`announce` returns at once (mDNS probing takes about two
    seconds and runs on a worker thread). Use :func:`announcing` from async code.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._zc: Any = None
        self._threads: list[threading.Thread] = []
        self._closed = False
        #: Names as registered (a name taken on the network gets a suffix).
        self.names: list[str] = []
        #: Registrations that failed, as messages.
        self.errors: list[str] = []

    def announce(self, announcement: Announcement) -> None:
        """Start announcing ``announcement`` (in the background).

        Raises:
            DiscoveryError: multicast DNS cannot start on this machine.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("announcer is closed")
            if self._zc is None:
                self._zc = _open_zeroconf()
            zc = self._zc
        info = announcement.service_info()
        thread = threading.Thread(
            target=self._register, args=(zc, info), name="trafka-announce", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _register(self, zc: Any, info: Any) -> None:
        try:
            zc.register_service(info, allow_name_change=True)
        except Exception as exc:  # zeroconf's errors, or closed while probing
            if not self._closed:
                self.errors.append(f"{info.name}: {exc}")
                log.warning("could not announce %s: %s", info.name, exc)
            return
        self.names.append(info.name.removesuffix("." + SERVICE_TYPE))
        log.info("announced %s on zeroconf", info.name.removesuffix("." + SERVICE_TYPE))

    def wait_announced(self, timeout: float = 10.0) -> bool:
        """Block until every registration finished (True) or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def close(self) -> None:
        """Withdraw every announcement (goodbye packets) and stop. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            zc, self._zc = self._zc, None
        if zc is not None:
            try:
                zc.close()
            except Exception as exc:
                log.debug("zeroconf close failed: %s", exc)
        for thread in self._threads:
            thread.join(5.0)


@asynccontextmanager
async def announcing(*announcements: Announcement) -> AsyncIterator[Announcer]:
    """Announce listeners while the block runs; withdraw them when it ends.

    A machine where multicast DNS cannot start logs a warning and the block runs
    unannounced (the yielded announcer then has an entry in ``errors``).
    """
    announcer = Announcer()
    try:
        for announcement in announcements:
            try:
                announcer.announce(announcement)
            except DiscoveryError as exc:
                announcer.errors.append(str(exc))
                log.warning("not announcing %s: %s", announcement.name, exc)
        yield announcer
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(announcer.close)


@asynccontextmanager
async def announcing_listener(
    role: str,
    host: str,
    port: int,
    *,
    cluster_id: str | None = None,
    node_id: int | None = None,
    security_protocol: str | None = "PLAINTEXT",
    sasl_mechanisms: Sequence[str] = (),
) -> AsyncIterator[Announcer | None]:
    """Announce a broker's or proxy's listener while the block runs.

    ``host`` is the advertised host (a name is resolved to its addresses). A
    listener that cannot be announced (a wildcard host, a name that does not
    resolve, no multicast) logs a warning and the block runs unannounced.

    Yields:
        The :class:`Announcer`, or None when nothing could be announced.
    """
    try:
        addresses = await anyio.to_thread.run_sync(resolve_addresses, host)
    except (DiscoveryError, ValueError) as exc:
        log.warning("not announcing on zeroconf: %s", exc)
        yield None
        return
    local = local_host_name()
    announcement = Announcement(
        name=instance_name(role, node_id, local, port),
        port=port,
        addresses=addresses,
        properties=txt_properties(
            role=role,
            host=local,
            cluster_id=cluster_id,
            node_id=node_id,
            security_protocol=security_protocol,
            sasl_mechanisms=sasl_mechanisms,
            version=_trafka_version(),
        ),
        host=local,
    )
    async with announcing(announcement) as announcer:
        yield announcer


def _trafka_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("trafka")
    except metadata.PackageNotFoundError:
        return None


def _open_zeroconf() -> Any:
    from zeroconf import Zeroconf

    try:
        return Zeroconf()
    except Exception as exc:  # OSError from socket setup, or zeroconf's own
        raise DiscoveryError(f"multicast DNS is unavailable: {exc}") from None


def discover_blocking(
    spec: DiscoverySpec | str | None = None,
    *,
    first: bool = False,
    security_protocols: str | Sequence[str] | None = None,
    cancelled: threading.Event | None = None,
) -> list[KafkaService]:
    """Browse the network for Kafka services (blocking).

    Args:
        spec: filters and timeout (a :class:`DiscoverySpec`, or its text form
            ``"zeroconf:cluster=abc&role=broker"``); None finds everything.
        first: return as soon as one service matches, instead of looking for the
            whole timeout.
        security_protocols: keep only services announcing one of these security
            protocols (or none).
        cancelled: set it to stop early (from another thread).

    Returns:
        The matching services, brokers first (see ``sort_services``); empty when
        none answered within the timeout.

    Raises:
        ValueError: a malformed spec.
        DiscoveryError: multicast DNS is unavailable on this machine.
    """
    if spec is None:
        spec = DiscoverySpec()
    elif isinstance(spec, str):
        spec = parse_spec(spec)
    from zeroconf import ServiceBrowser, ServiceInfo, ServiceStateChange

    stop = cancelled or threading.Event()
    deadline = time.monotonic() + spec.timeout_ms / 1000
    changes: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()

    def on_change(**event: Any) -> None:
        changes.put((event["name"], event["state_change"]))

    local_host = local_host_name()
    zc = _open_zeroconf()
    found: dict[str, KafkaService] = {}
    try:
        browser = ServiceBrowser(zc, SERVICE_TYPE, handlers=[on_change])
        try:
            while not stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    name, change = changes.get(timeout=min(remaining, 0.05))
                except queue.Empty:
                    continue
                if change is ServiceStateChange.Removed:
                    found.pop(name, None)
                    continue
                info = ServiceInfo(SERVICE_TYPE, name)
                if not info.request(zc, max(1.0, (deadline - time.monotonic()) * 1000)):
                    continue
                service = read_service(
                    name,
                    info.port or 0,
                    info.parsed_addresses(),
                    info.properties or {},
                    local_host=local_host,
                )
                if service is None or not spec.matches(service, security_protocols):
                    found.pop(name, None)
                    continue
                found[name] = service
                if first:
                    break
        finally:
            browser.cancel()
    finally:
        zc.close()
    return sort_services(found.values())


async def discover(
    spec: DiscoverySpec | str | None = None,
    *,
    first: bool = False,
    security_protocols: str | Sequence[str] | None = None,
) -> list[KafkaService]:
    """Browse the network for Kafka services, from a trio or asyncio task.

    Takes the arguments of :func:`discover_blocking`; the browse runs on a worker
    thread, and cancelling the task stops it.

    Raises:
        ValueError: a malformed spec.
        DiscoveryError: multicast DNS is unavailable on this machine.
    """
    cancelled = threading.Event()
    try:
        return await anyio.to_thread.run_sync(
            lambda: discover_blocking(
                spec, first=first, security_protocols=security_protocols, cancelled=cancelled
            ),
            abandon_on_cancel=True,
        )
    finally:
        cancelled.set()


def bootstrap_list(services: Sequence[KafkaService]) -> str:
    """Every address of ``services``, as one ``bootstrap.servers`` string."""
    return ",".join(s.bootstrap_servers for s in services)
