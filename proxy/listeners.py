"""Named listeners: more bootstrap ports, each with broker ports of its own,
so that a platform team can give each tenant its own address (as
Kroxylicious's virtual clusters each have a bootstrap address and broker
ports of their own).

Rules:

* A named listener (:class:`NamedListener`, ``ProxyConfig.listeners``) is a
  bootstrap port besides the proxy's own (``listen``). Broker *n* is served
  for it on ``node_port_base + n`` (None: a free port per broker), opened at
  first sight as the proxy's own broker ports are, and at start once the
  brokers are known. A port that cannot be bound (taken, past 65535) is
  logged and the broker served on a free port, as for the proxy's own.
* A connection accepted on a named listener's bootstrap or broker ports
  carries the listener's name (``Session.listener``, ``ctx.listener``): the
  core gives it no meaning (the tenants filter picks a tenant by it, the
  audit log writes it). Every answer on that connection that names brokers
  (Metadata, FindCoordinator, DescribeCluster, KIP-951's leader hints) names
  the listener's own broker ports (:class:`~.rewrite.ListenerAddresses`),
  so its clients stay on that listener's ports.
* Names are letters, digits, ``.``, ``_`` and ``-``, unique; ports unique
  among the listeners and the proxy's own (0 aside: a free port). A listener
  on a wildcard address needs an advertised host (its own
  ``advertised_host``, else the proxy's). Not with ``sni_domain`` (one port
  for the whole cluster): refused.
* With ``--workers`` (:mod:`.workers`), every worker serves each listener's
  bootstrap port (shared, as the proxy's own), and broker ports of its own
  for it: worker ``k`` serves broker ``n`` on ``node_port_base + k * stride
  + n`` (free ports without a base), and a worker started again serves the
  ports it served before. Its answers on a listener's connections name that
  worker's ports for that listener, so a client stays with the worker it
  bootstrapped through, as on the proxy's own ports.
* In ``trafka proxy``'s file: ``[[listeners]]`` tables (``name``,
  ``listen``, ``node_port_base``, ``advertised_host``), ``node_port_base``
  defaulting to the listen port + 1 (free ports when the port is 0; -1:
  free ports), as ``listen``'s does. On the command line and in the
  environment: ``NAME=HOST:PORT`` (``--listeners``, repeated;
  ``TRAFKA_PROXY_LISTENERS``, comma-separated), with that default. A
  restart is needed to change them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "NamedListener",
    "listener_of_text",
    "listeners_of_table",
    "port_of_node",
    "problems_of",
]

_NAME = re.compile(r"[A-Za-z0-9._-]+")
_KEYS = ("name", "listen", "node_port_base", "advertised_host")


@dataclass(frozen=True, slots=True)
class NamedListener:
    """A bootstrap port of its own, with broker ports of its own (see the
    module's rules).

    Attributes:
        name: what ``Session.listener`` says of its connections.
        host, port: where it listens (port 0: any free port).
        node_port_base: broker ``n`` on ``node_port_base + n`` (None: free ports).
        advertised_host: the host its answers name (default: the proxy's).
        node_port_span, node_ports: as :class:`~.config.ProxyConfig`'s, a
            worker's (``--workers``: see the module's rules).
    """

    name: str
    host: str
    port: int
    node_port_base: int | None = None
    advertised_host: str | None = None
    node_port_span: int | None = None
    node_ports: tuple[tuple[int, int], ...] = ()

    def node_port(self, node_id: int) -> int:
        """The port to serve broker ``node_id`` on for this listener (0: any).

        Raises:
            ValueError: ``node_port_base`` would place it outside ``node_port_span``.
        """
        return port_of_node(node_id, self.node_ports, self.node_port_base, self.node_port_span)


def port_of_node(
    node_id: int, known: tuple[tuple[int, int], ...], base: int | None, span: int | None
) -> int:
    """The port to serve broker ``node_id`` on: the one it was served on before
    (``known``), else ``base + node_id`` (within ``span`` when bounded), else 0 (any).

    Raises:
        ValueError: ``base`` would place it outside ``span``.
    """
    for node, port in known:
        if node == node_id:
            return port
    if base is None:
        return 0
    if span is not None and not 0 <= node_id < span:
        raise ValueError(f"its id is outside the {span} ports from {base} (--node-port-stride)")
    return base + node_id


def problems_of(
    listeners: tuple[NamedListener, ...], own_port: int, advertised: str | None
) -> list[str]:
    """What is wrong with ``listeners`` beside the proxy's own port and
    advertised host (see the module's rules)."""
    problems = []
    names: set[str] = set()
    ports = {own_port} - {0}
    for item in listeners:
        where = f"listener {item.name!r}"
        if not _NAME.fullmatch(item.name):
            problems.append(f"{where}: a name is letters, digits, '.', '_', '-'")
        if item.name in names:
            problems.append(f"{where}: the name is already a listener's")
        names.add(item.name)
        if not 0 <= item.port <= 65535:
            problems.append(f"{where}: port {item.port} is out of range")
        elif item.port in ports:
            problems.append(f"{where}: port {item.port} is already the proxy's or a listener's")
        ports |= {item.port} - {0}
        if item.node_port_base is not None and not 0 < item.node_port_base <= 65535:
            problems.append(f"{where}: node_port_base {item.node_port_base} is out of range")
        wildcard = item.host in ("0.0.0.0", "::", "")
        if wildcard and not (item.advertised_host or advertised):
            problems.append(f"{where}: listening on a wildcard address needs advertised_host")
    return problems


def _split(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{listen!r} is not host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


def _base(port: int, given: int | None) -> int | None:
    """``trafka proxy``'s default node ports: the listen port + 1 (see the rules)."""
    if given is None:
        return port + 1 if port else None
    return None if given == -1 else given


def listener_of_text(text: str) -> NamedListener:
    """``NAME=HOST:PORT`` (a flag's or a variable's) as a listener.

    Raises:
        ValueError: not ``NAME=HOST:PORT``.
    """
    name, sep, listen = text.strip().partition("=")
    if not sep or not name.strip():
        raise ValueError(f"{text!r} is not NAME=HOST:PORT")
    host, port = _split(listen.strip())
    return NamedListener(name.strip(), host, port, _base(port, None))


def listeners_of_table(raw: Any, where: str, problems: list[str]) -> tuple[NamedListener, ...]:
    """The file's ``[[listeners]]`` tables (a table each, or ``NAME=HOST:PORT``
    strings) as listeners; problems added to ``problems``."""
    out = []
    for i, entry in enumerate(raw if isinstance(raw, list) else [raw]):
        at = f"{where}[{i}]"
        if isinstance(entry, str):
            try:
                out.append(listener_of_text(entry))
            except ValueError as exc:
                problems.append(f"{at}: {exc}")
            continue
        if not isinstance(entry, Mapping):
            problems.append(f"{at}: {entry!r} is not a table (name, listen, node_port_base)")
            continue
        extra = sorted(set(entry) - set(_KEYS))
        if extra:
            problems.append(f"{at}: unknown key {extra[0]!r} ({', '.join(_KEYS)})")
        name, listen = entry.get("name"), entry.get("listen")
        base, advertised = entry.get("node_port_base"), entry.get("advertised_host")
        if not isinstance(name, str) or not name:
            problems.append(f"{at}: name must be a non-empty string")
            continue
        try:
            host, port = _split(listen) if isinstance(listen, str) else _split("")
        except ValueError:
            problems.append(f"{at}: listen {listen!r} is not host:port")
            continue
        if base is not None and (not isinstance(base, int) or isinstance(base, bool)):
            problems.append(f"{at}: node_port_base {base!r} is not an integer")
            continue
        if advertised is not None and not isinstance(advertised, str):
            problems.append(f"{at}: advertised_host {advertised!r} is not a string")
            continue
        out.append(NamedListener(name, host, port, _base(port, base), advertised))
    return tuple(out)
