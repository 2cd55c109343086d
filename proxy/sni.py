"""One port for the whole cluster: over TLS, the host name a client asks for
in its handshake (SNI) picks the broker its connection stands for.

Rules:

* With ``sni_domain`` set (say ``kafka.example.com``), the proxy opens no
  listener per broker: the bootstrap listener serves every broker. Broker
  *n* is named ``broker-n.<domain>``, the cluster's bootstrap
  ``bootstrap.<domain>``; answers that name brokers (Metadata,
  FindCoordinator, DescribeCluster, KIP-951 hints) name ``broker-n.<domain>``
  at the listener's port (``advertised_port`` when a load balancer or a
  Kubernetes Service serves it on another one).
* A connection whose handshake names ``broker-n.<domain>`` of a broker the
  proxy knows goes to that broker; one naming the bootstrap name, or none (a
  client that connects by address), goes to the bootstrap servers. Any other
  name (another domain, a broker the proxy has not learnt) fails the
  connection, logged: forwarding it elsewhere would hand the client a broker
  it did not ask for. Names are compared case-insensitively (DNS).
* One certificate serves them all: a wildcard (``*.<domain>``) or one with
  every name among its SANs.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Container
from contextvars import ContextVar

__all__ = ["BOOTSTRAP_LABEL", "BROKER_LABEL", "SniNames", "UnknownName", "asked_name", "note_names"]

BOOTSTRAP_LABEL = "bootstrap"
BROKER_LABEL = "broker-"
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


# The name the handshake under way in this task asked for: the context's SNI
# callback runs inside ``do_handshake``, in the task that called it.
_ASKED: ContextVar[list[str]] = ContextVar("trafka_proxy_sni")


def note_names(context: ssl.SSLContext) -> None:
    """Make ``context`` note the name each handshake asks for (:func:`asked_name`)."""

    def noted(_tls: object, name: str | None, _context: ssl.SSLContext) -> None:
        held = _ASKED.get(None)
        if held is not None and name:
            held.append(name)

    context.sni_callback = noted


def asked_name() -> list[str]:
    """A list that receives the name the next handshake of this task asks for."""
    held: list[str] = []
    _ASKED.set(held)
    return held


class UnknownName(ValueError):
    """A client asked for a host name that names no broker the proxy serves."""


class SniNames:
    """The names of one domain's brokers.

    Raises:
        ValueError: ``domain`` is not a DNS name.
    """

    def __init__(self, domain: str, advertised_port: int | None = None) -> None:
        domain = domain.strip(".").lower()
        if not domain or not all(_LABEL.fullmatch(label) for label in domain.split(".")):
            raise ValueError(f"sni_domain {domain!r} is not a DNS name")
        self.domain = domain
        self.port = advertised_port or 0  # the listener's, once bound (unless advertised)
        self.bootstrap = f"{BOOTSTRAP_LABEL}.{domain}"

    def host_of(self, node_id: int) -> str:
        """The host name clients use for broker ``node_id``."""
        return f"{BROKER_LABEL}{node_id}.{self.domain}"

    def node_of(self, name: str | None, known: Container[int]) -> int | None:
        """The broker a connection asking for ``name`` stands for (None: the
        bootstrap servers); ``known``: the node ids the proxy serves.

        Raises:
            UnknownName: see the module's rules.
        """
        if name is None or name.lower() == self.bootstrap:
            return None
        host = name.lower()
        label, dot, rest = host.partition(".")
        number = label.removeprefix(BROKER_LABEL)
        if dot and rest == self.domain and label != number and number.isdigit():
            if int(number) in known:
                return int(number)
            raise UnknownName(f"{name!r} names broker {int(number)}, which the proxy has not met")
        raise UnknownName(f"{name!r} is neither {self.bootstrap!r} nor broker-N.{self.domain}")
