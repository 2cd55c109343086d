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
* ``sni_domain`` may change on SIGHUP (:mod:`.reload`, :meth:`SniNames.move_to`):
  new connections are read by the new domain's names, and answers name
  brokers by them from then on, on every connection (clients move over as
  they refresh their metadata); a connection already open stays with its
  broker. A name of the former domain is then an unknown name, as after a
  restart. A name picks a broker by its number, whatever the domain, so no
  connection is ever handed another broker. Switching SNI on or off, or
  ``sni_virtual_hosts``, changes the listeners or the chain: a restart.
* One certificate serves them all: a wildcard (``*.<domain>``) or one with
  every name among its SANs.
* Virtual hosts (``sni_virtual_hosts``, off by default): a name may carry one
  more DNS label between the broker's and the domain,
  ``broker-n.<label>.<domain>`` or ``bootstrap.<label>.<domain>``. The
  connection is served as the name without the label would be (the same
  broker); the label, lowercased, is the connection's
  :attr:`~.filters.Session.virtual_host`, which filters read (the tenants
  filter picks a tenant by it), and every answer on that connection that
  names brokers names them ``broker-n.<label>.<domain>``
  (:class:`~.rewrite.VirtualHostNames`), so the client stays within its label. The
  core gives a label no meaning: any label passes the handshake. Without the
  setting, a labelled name is an unknown name. A wildcard certificate
  matches one label only (RFC 6125): each label needs its own
  (``*.<label>.<domain>``), or SANs naming every name.
* A certificate that does not name the domain's names is a warning, not an
  error (:func:`certificate_gaps`: at start, on SIGHUP and by
  ``--check-config``): a client that checks host names (Java's and
  librdkafka's do by default) fails its handshake, one that does not still
  works. Checked: ``bootstrap.<domain>``, and some broker name (a wildcard,
  or a SAN ``broker-N.<domain>``: which brokers a cluster has is learnt
  later); not the virtual hosts' names, whose labels are the clients'.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Container
from contextvars import ContextVar

__all__ = [
    "BOOTSTRAP_LABEL",
    "BROKER_LABEL",
    "SniNames",
    "UnknownName",
    "asked_name",
    "certificate_gaps",
    "is_label",
    "note_names",
]

BOOTSTRAP_LABEL = "bootstrap"
BROKER_LABEL = "broker-"
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
_MAX_LABEL = 63  # a DNS label's length at most (RFC 1035)


def is_label(text: str) -> bool:
    """Whether ``text`` is one DNS label (letters, digits, ``-`` inside; at
    most 63 characters), compared lowercased."""
    return len(text) <= _MAX_LABEL and _LABEL.fullmatch(text.lower()) is not None


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
    """The names of one domain's brokers (``virtual_hosts``: with a label, see
    the module's rules).

    Raises:
        ValueError: ``domain`` is not a DNS name.
    """

    def __init__(
        self, domain: str, advertised_port: int | None = None, *, virtual_hosts: bool = False
    ) -> None:
        self.domain = self.bootstrap = ""
        self.move_to(domain)
        self.port = advertised_port or 0  # the listener's, once bound (unless advertised)
        self.virtual_hosts = virtual_hosts

    def move_to(self, domain: str) -> None:
        """Serve ``domain`` from now on (SIGHUP, :mod:`.reload`): the next
        handshakes are read, and the next answers name brokers, by its names;
        a connection already open stays with the broker it stands for.

        Raises:
            ValueError: ``domain`` is not a DNS name (nothing is changed then).
        """
        domain = domain.strip(".").lower()
        if not domain or not all(is_label(label) for label in domain.split(".")):
            raise ValueError(f"sni_domain {domain!r} is not a DNS name")
        self.domain, self.bootstrap = domain, f"{BOOTSTRAP_LABEL}.{domain}"

    def host_of(self, node_id: int, label: str | None = None) -> str:
        """The host name clients use for broker ``node_id`` (within ``label``)."""
        if label is None:
            return f"{BROKER_LABEL}{node_id}.{self.domain}"
        return f"{BROKER_LABEL}{node_id}.{label}.{self.domain}"

    @staticmethod
    def within(host: str, node_id: int, label: str) -> str:
        """``host``, broker ``node_id``'s name in whatever domain
        (:meth:`host_of`), with ``label`` after its first label; any other host
        as it is. Reads no domain, so a domain moved on SIGHUP needs no telling."""
        first, _, rest = host.partition(".")
        if rest and first == f"{BROKER_LABEL}{node_id}":
            return f"{first}.{label}.{rest}"
        return host

    def node_of(self, name: str | None, known: Container[int]) -> int | None:
        """The broker a connection asking for ``name`` stands for (None: the
        bootstrap servers); ``known``: the node ids the proxy serves.

        Raises:
            UnknownName: see the module's rules.
        """
        return self.pick(name, known)[0]

    def pick(self, name: str | None, known: Container[int]) -> tuple[int | None, str | None]:
        """(The broker a connection asking for ``name`` stands for, None: the
        bootstrap servers; the virtual host it named, None: none).

        Raises:
            UnknownName: see the module's rules.
        """
        if name is None:
            return None, None
        host = name.lower()
        first, _, rest = host.partition(".")
        label = None
        if self.virtual_hosts and rest.endswith("." + self.domain):
            middle = rest[: -len(self.domain) - 1]
            if is_label(middle):
                label, rest = middle, self.domain
        if rest == self.domain:
            if first == BOOTSTRAP_LABEL:
                return None, label
            number = first.removeprefix(BROKER_LABEL)
            if first != number and number.isdigit():
                if int(number) in known:
                    return int(number), label
                raise UnknownName(
                    f"{name!r} names broker {int(number)}, which the proxy has not met"
                )
        within = "[.<label>]" if self.virtual_hosts else ""
        raise UnknownName(
            f"{name!r} is neither {BOOTSTRAP_LABEL}{within}.{self.domain} "
            f"nor {BROKER_LABEL}N{within}.{self.domain}"
        )


def _certificate_names(certfile: str) -> list[str]:
    """The DNS names ``certfile``'s (first) certificate is valid for: its DNS
    SANs, else its common names (as OpenSSL's host check and Java's read them).

    Raises:
        ValueError: the file holds no certificate that can be read.
    """
    # CPython's own PEM reader (its ssl tests use it): the standard library
    # offers no public way to read a certificate's names.
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return []
    try:
        cert = decode(certfile)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot read the certificate {certfile}: {exc}") from None
    names = [v for k, v in cert.get("subjectAltName", ()) if k == "DNS"]
    if names:
        return [n.lower() for n in names]
    return [v.lower() for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"]


def _matches(pattern: str, host: str) -> bool:
    """Whether a certificate's name ``pattern`` covers ``host`` (RFC 6125: a
    ``*`` that is the whole leftmost label stands for exactly one label)."""
    first, _, rest = pattern.partition(".")
    if first == "*":
        return bool(rest) and host.partition(".")[2] == rest
    return pattern == host


def certificate_gaps(certfile: str, domain: str) -> list[str]:
    """What ``certfile`` does not name of ``domain``'s names (see the module's
    rules), one line each; [] when it names them all, or when this Python
    cannot read a certificate's names.

    Raises:
        ValueError: the certificate cannot be read.
    """
    names = _certificate_names(certfile)
    if not names:
        return []
    domain = domain.strip(".").lower()
    bootstrap = f"{BOOTSTRAP_LABEL}.{domain}"
    gaps = []
    if not any(_matches(n, bootstrap) for n in names):
        gaps.append(f"{certfile} does not name {bootstrap}")
    wildcard = f"*.{domain}"
    brokers = re.compile(re.escape(BROKER_LABEL) + r"[0-9]+\." + re.escape(domain))
    if wildcard not in names and not any(brokers.fullmatch(n) for n in names):
        gaps.append(f"{certfile} names no {BROKER_LABEL}N.{domain} (nor {wildcard})")
    return gaps
