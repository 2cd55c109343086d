"""The proxy's settings (:class:`ProxyConfig`), checked when made."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from trafka.discovery import is_spec, parse_spec
from trafka.sdk.partitioners import KEY_HASHES as HASHES

from .filters import Filter
from .listeners import NamedListener, port_of_node, problems_of
from .mtls import CLIENT_AUTH, PrincipalMapper
from .sni import SniNames, certificate_gaps

__all__ = ["JOURNAL_TOPIC", "ProxyConfig", "split_server"]

JOURNAL_TOPIC = "__trafka_proxy_placements"
"""The placement journal's topic when ``--journal topic`` names none. Here, not in
:mod:`.keyrouting.journal_topic`, so that reading the settings does not load the
journal's SDK clients (admin, producer, consumer: half the proxy's start-up)."""


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """Proxy settings.

    Attributes:
        upstream: the Kafka cluster's bootstrap servers, ``host:port``.
        host: the address to listen on.
        port: the bootstrap listener's port (0: any free port).
        advertised_host: the host name clients are told to connect to
            (default ``host``; required when ``host`` is a wildcard).
        node_port_base: broker ``n`` is served on ``node_port_base + n``
            (default: any free port per broker).
        node_port_span: with ``node_port_base``, how many ports from it are
            this proxy's: a broker whose id is not below it is served on a
            free port (logged). None: no bound. ``trafka proxy --workers``
            gives each worker its own span (see :mod:`.workers`).
        node_ports: ``(node id, port)`` pairs: brokers served on these ports
            before ``node_port_base`` is asked (a restarted worker keeps the
            ports its clients know); a port that cannot be bound falls back
            as ``node_port_base`` does.
        reuse_port: bind the bootstrap listener with ``SO_REUSEPORT``, so that
            other processes of the same user serve the same port and the
            kernel spreads new connections over them (the workers of
            ``trafka proxy --workers``; Linux).
        route_keys: the key hash that places keyed records (``murmur2``, as
            Java's producer; ``crc32``, as librdkafka's ``consistent``;
            ``fnv1a``, as sarama), or ``none`` to forward records where the
            client put them.
        max_frame_size: the largest frame accepted from either side (Kafka's
            ``socket.request.max.bytes``): a larger size prefix closes the
            connection before any of the frame's body is read.
        connect_timeout: seconds to reach an upstream broker (TLS handshake included).
        ssl_certfile, ssl_keyfile, ssl_key_password: serve clients over TLS
            with this certificate (PEM; the key may sit in the certificate file).
        ssl_cafile, ssl_client_auth, ssl_principal_mapping_rules: mutual TLS
            (:mod:`.mtls`): the CAs that sign clients' certificates, whether
            a client certificate is ``required``, ``requested`` or not asked
            for (``none``), as Kafka's ``ssl.client.auth``, and the rules
            mapping a certificate's subject to the client's principal (Kafka's
            ``ssl.principal.mapping.rules``, KIP-371).
        sni_domain, sni_port: one port for the whole cluster (:mod:`.sni`): over
            TLS, clients name broker N ``broker-N.<sni_domain>`` (the bootstrap
            ``bootstrap.<sni_domain>``) in their handshake, all on the
            bootstrap listener, which answers name at ``sni_port`` (default:
            the listener's own port). ``node_ports`` then open nothing (a
            restarted worker of ``--workers`` is given them).
        sni_virtual_hosts: with ``sni_domain``, names may carry a label
            (``broker-N.<label>.<sni_domain>``): the connection's virtual host,
            which answers on it keep and filters read (:mod:`.sni`).
        listeners: named listeners (:mod:`.listeners`): bootstrap ports besides
            ``port``, each with broker ports of its own; a connection on one
            carries its name (``Session.listener``), and answers on it name
            that listener's broker ports. Not with ``sni_domain``.
        upstream_ssl: connect to the brokers over TLS.
        upstream_ssl_certfile, upstream_ssl_keyfile, upstream_ssl_key_password:
            the certificate (PEM) the proxy presents to brokers that ask for
            one (mutual TLS towards the brokers).
        upstream_ssl_cafile: the CAs that sign the brokers' certificates
            (default: the system's).
        upstream_ssl_check_hostname: check the brokers' certificates name them.
        announce: announce the bootstrap listener on the local network
            (zeroconf, ``_kafka._tcp``, role ``proxy``).
        max_decompressed_bytes: the most one batch may inflate to when the
            proxy reads its records to route them; a Produce with a batch
            beyond it is answered MESSAGE_TOO_LARGE and not forwarded.
        journal_dir: a directory where key routing records, before writing
            them, where an idempotent producer's records went, so that a
            restarted proxy writes none of them twice (see :mod:`.keyrouting.journal`);
            None: in memory only (a restart can write in-flight batches twice).
        journal_peer_dirs: with ``journal_dir``, other journal directories
            read (never written) for the placements of producers that come
            from them: the other workers' of ``trafka proxy --workers`` (see
            :mod:`.keyrouting.journal_peers`).
        journal_topic: the name of a compacted topic of the upstream cluster
            where key routing records placements instead (created if missing;
            see :mod:`.keyrouting.journal_topic`): every proxy instance in front of the
            cluster reads it, so any of them takes over a client's retries
            when another is lost. Not with ``journal_dir``.
        journal_takeover_grace_ms: how long a proxy that takes over a
            producer another instance owned waits before it asks the leaders
            for the producer's sequences (the old owner's last writes land
            meanwhile); also, with any journal or none, how long from its
            start a proxy asks no leader about a producer it did not see
            born (a former instance's last writes land meanwhile, see
            :mod:`.keyrouting.exactly_once`). 0: no wait.
        origin_headers: key routing gives each record of a batch it splits
            (some of its records move) a ``trafka-origin`` header saying where
            the client put it (see :func:`~.keyrouting.plan.origin_header`): the
            client's delivery report names no offset for it.
        coalesce: key routing lets a plain producer's requests to one broker
            share upstream requests: while one is in flight, the records of
            the requests after it (from every client connection with the same
            client id) gather, and go together in the next (see
            :mod:`~.keyrouting.coalesce`). Default on. Needs the codec's C
            accelerator: without it (not built, or ``TRAFKA_NO_SPEEDUPS``),
            every request takes the plain plan.
        queued_max_request_bytes: the most bytes of requests the proxy holds
            across all its client connections (Kafka's
            ``queued.max.request.bytes``): from its size prefix until it is
            written upstream (or, when a filter answers it later, until that
            answer is made). A request that does not fit pauses its
            connection's reading until others are handed on (backpressure, no
            error); one larger than the whole budget goes alone. Default
            100 MiB; -1 for no bound.
        connections_max_idle_ms: a client connection that has received nothing
            for this long, with no request under way and no answer owed, is
            closed (Kafka's ``connections.max.idle.ms``, default 10 minutes; -1
            never).
        request_receive_timeout_ms: a request must arrive whole within this long
            of its first bytes (time waiting for ``queued_max_request_bytes``
            not counted); a client that stops or trickles mid-request is closed
            (brokerlite's own setting, default 30 s; -1 never).
        filters: user code that sees (and may change or answer) decoded
            requests and answers, in this order (see :mod:`.filters`). Key
            routing (:class:`~.keyrouting.filter.KeyRouting`, per ``route_keys``)
            follows them, unless the chain already holds a ``KeyRouting``,
            placed where the user wants it.
        principal_credentials: a JSON file of the upstream logins the proxy
            holds per principal (see :mod:`.principals`): a SASL client that
            authenticated (through to the brokers) as one of them has its
            records routed over connections that log in as that principal.
            None: SASL clients' records are forwarded unrouted.
        sasl_without_credentials: what becomes of a SASL client whose
            principal has no login in ``principal_credentials``: ``forward``
            (its records go unrouted, logged and counted) or ``refuse`` (its
            authentication is answered SASL_AUTHENTICATION_FAILED and its
            connection closed).
        sasl_oauthbearer_sub_claim_name: the claim of an OAUTHBEARER client's
            token the brokers take its principal from (set as their
            ``sasl.oauthbearer.sub.claim.name``).
        metrics_listen: ``host:port`` of an HTTP listener serving Prometheus
            metrics (``/metrics``, see :mod:`.metrics`), ``/healthz`` and
            ``/readyz`` (200 once an upstream bootstrap server answered a
            connection; checked every 5 s).

    An ``upstream`` entry may be a zeroconf discovery spec (``zeroconf`` or
    ``zeroconf:cluster=abc``): the proxy looks for the cluster's brokers when it
    starts (role ``broker`` unless the spec names one).
    """

    upstream: tuple[str, ...]
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    node_port_base: int | None = None
    node_port_span: int | None = None
    node_ports: tuple[tuple[int, int], ...] = ()
    reuse_port: bool = False
    route_keys: str = "murmur2"
    max_frame_size: int = 100 * 1024 * 1024
    connect_timeout: float = 10.0
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = None
    ssl_cafile: str | None = None
    ssl_client_auth: str = "none"
    ssl_principal_mapping_rules: str = "DEFAULT"
    sni_domain: str | None = None
    sni_port: int | None = None
    sni_virtual_hosts: bool = False
    listeners: tuple[NamedListener, ...] = ()
    upstream_ssl: bool = False
    upstream_ssl_cafile: str | None = None
    upstream_ssl_certfile: str | None = None
    upstream_ssl_keyfile: str | None = None
    upstream_ssl_key_password: str | None = None
    upstream_ssl_check_hostname: bool = True
    announce: bool = False
    max_decompressed_bytes: int = 16 * 1024 * 1024
    journal_dir: str | None = None
    journal_peer_dirs: tuple[str, ...] = ()
    journal_topic: str | None = None
    journal_takeover_grace_ms: int = 5000
    origin_headers: bool = False
    coalesce: bool = True
    queued_max_request_bytes: int = 104_857_600
    connections_max_idle_ms: int = 600_000
    request_receive_timeout_ms: int = 30_000
    metrics_listen: str | None = None
    filters: tuple[Filter, ...] = ()
    principal_credentials: str | None = None
    sasl_without_credentials: str = "forward"
    sasl_oauthbearer_sub_claim_name: str = "sub"

    def __post_init__(self) -> None:
        if isinstance(self.upstream, str):
            object.__setattr__(self, "upstream", tuple(self.upstream.split(",")))
        if not self.upstream:
            raise ValueError("the proxy needs at least one upstream bootstrap server")
        for server in self.upstream:
            if is_spec(server):
                parse_spec(server)
            else:
                split_server(server)
        if self.route_keys != "none" and self.route_keys not in HASHES:
            raise ValueError(
                f"route_keys must be one of none, {', '.join(HASHES)}; not {self.route_keys!r}"
            )
        if self.host in ("0.0.0.0", "::", "") and not self.advertised_host:
            raise ValueError("listening on a wildcard address needs advertised_host")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port} is out of range")
        for node_id, node_port in self.node_ports:
            if not 0 < node_port <= 65535:
                raise ValueError(f"node_ports: broker {node_id}'s port {node_port} is out of range")
        if self.node_port_span is not None and self.node_port_span <= 0:
            raise ValueError("node_port_span must be positive")
        if self.max_frame_size <= 0:
            raise ValueError("max_frame_size must be positive")
        if self.journal_dir is not None and self.journal_topic is not None:
            raise ValueError("journal_dir and journal_topic: choose one journal")
        if self.journal_takeover_grace_ms < 0:
            raise ValueError("journal_takeover_grace_ms must be >= 0")
        if self.max_decompressed_bytes <= 0:
            raise ValueError("max_decompressed_bytes must be positive")
        for name in (
            "queued_max_request_bytes",
            "connections_max_idle_ms",
            "request_receive_timeout_ms",
        ):
            if getattr(self, name) <= 0 and getattr(self, name) != -1:
                raise ValueError(f"{name} must be positive, or -1 for no limit")
        if self.metrics_listen is not None:
            _, sep, port = self.metrics_listen.rpartition(":")
            if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
                raise ValueError(f"metrics_listen {self.metrics_listen!r} is not host:port")
        if (self.ssl_keyfile or self.ssl_key_password) and not self.ssl_certfile:
            raise ValueError("ssl_keyfile needs ssl_certfile")
        if self.sasl_without_credentials not in ("forward", "refuse"):
            raise ValueError(
                "sasl_without_credentials must be forward or refuse, "
                f"not {self.sasl_without_credentials!r}"
            )
        for name in ("upstream_ssl_cafile", "upstream_ssl_certfile"):
            if getattr(self, name) and not self.upstream_ssl:
                raise ValueError(f"{name} needs upstream_ssl")
        if self.upstream_ssl_keyfile and not self.upstream_ssl_certfile:
            raise ValueError("upstream_ssl_keyfile needs upstream_ssl_certfile")
        if self.ssl_client_auth not in CLIENT_AUTH:
            raise ValueError(
                f"ssl_client_auth must be required, requested or none, not {self.ssl_client_auth!r}"
            )
        if (self.ssl_cafile or self.ssl_client_auth != "none") and not self.ssl_certfile:
            raise ValueError(
                "ssl_cafile and ssl_client_auth need ssl_certfile (TLS towards clients)"
            )
        if self.ssl_client_auth != "none" and not self.ssl_cafile:
            raise ValueError(
                "ssl_client_auth needs ssl_cafile (the CAs of the clients' certificates)"
            )
        PrincipalMapper(self.ssl_principal_mapping_rules)  # raises ValueError
        if self.sni_domain is not None:
            SniNames(self.sni_domain)  # raises ValueError
            if not self.ssl_certfile:
                raise ValueError("sni_domain needs ssl_certfile (SNI is TLS's)")
        if self.sni_port is not None and not (self.sni_domain and 0 < self.sni_port <= 65535):
            raise ValueError("sni_port needs sni_domain, and a port from 1 to 65535")
        if self.sni_virtual_hosts and not self.sni_domain:
            raise ValueError("sni_virtual_hosts needs sni_domain")
        if self.listeners:
            problems = problems_of(self.listeners, self.port, self.advertised_host)
            if self.sni_domain:
                problems.append("listeners and sni_domain: choose one (SNI serves one port)")
            if problems:
                raise ValueError("; ".join(problems))

    def sni_names(self) -> SniNames | None:
        """The names the proxy serves over SNI (None without ``sni_domain``)."""
        if not self.sni_domain:
            return None
        return SniNames(self.sni_domain, self.sni_port, virtual_hosts=self.sni_virtual_hosts)

    def certificate_warnings(self) -> list[str]:
        """What the client certificate does not name of ``sni_domain``'s names
        (:func:`.sni.certificate_gaps`; [] without SNI, or when it cannot be read:
        loading it says why)."""
        if not (self.sni_domain and self.ssl_certfile):
            return []
        try:
            return certificate_gaps(self.ssl_certfile, self.sni_domain)
        except ValueError:
            return []

    def node_port(self, node_id: int) -> int:
        """The port to serve broker ``node_id`` on (0: any free port).

        Raises:
            ValueError: ``node_port_base`` would place it outside ``node_port_span``.
        """
        return port_of_node(node_id, self.node_ports, self.node_port_base, self.node_port_span)

    def client_ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context towards clients (None: plaintext).

        Raises:
            ValueError: the certificate or key cannot be loaded.
        """
        if not self.ssl_certfile:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(
                self.ssl_certfile, self.ssl_keyfile, password=self.ssl_key_password
            )
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load the certificate {self.ssl_certfile}: {exc}") from None
        if self.ssl_cafile:
            try:
                context.load_verify_locations(cafile=self.ssl_cafile)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"cannot load {self.ssl_cafile}: {exc}") from None
        context.verify_mode = CLIENT_AUTH[self.ssl_client_auth]
        return context

    def upstream_ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context towards the brokers (None: plaintext).

        Raises:
            ValueError: the CA file cannot be loaded.
        """
        if not self.upstream_ssl:
            return None
        try:
            context = ssl.create_default_context(cafile=self.upstream_ssl_cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load {self.upstream_ssl_cafile}: {exc}") from None
        context.check_hostname = self.upstream_ssl_check_hostname
        if self.upstream_ssl_certfile:
            try:
                context.load_cert_chain(
                    self.upstream_ssl_certfile,
                    self.upstream_ssl_keyfile,
                    password=self.upstream_ssl_key_password,
                )
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(
                    f"cannot load the certificate {self.upstream_ssl_certfile}: {exc}"
                ) from None
        return context


def split_server(server: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) as (host, port).

    Raises:
        ValueError: not host:port.
    """
    host, sep, port = server.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"upstream server {server!r} is not host:port")
    return host.strip("[]"), int(port)
