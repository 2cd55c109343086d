"""``trafka proxy``: serve the Kafka protocol proxy in the foreground."""

from __future__ import annotations

import logging

import click

from trafka.common.logformat import LINE_FORMAT

from .filters import load_filter
from .journal_topic import TOPIC
from .routing import HASHES
from .server import ProxyConfig, run_proxy
from .workers import DEFAULT_STRIDE, WorkerGaveUp, check_workers, run_workers


@click.command("proxy")
@click.option(
    "--upstream",
    required=True,
    help="The Kafka cluster's bootstrap servers, host:port[,host:port...], or a zeroconf "
    "spec (zeroconf, zeroconf:cluster=ID) to find a broker on the local network.",
)
@click.option(
    "--listen",
    default="127.0.0.1:9092",
    show_default=True,
    help="host:port of the bootstrap listener (port 0: any free port).",
)
@click.option("--advertised-host", help="Host name clients are told to use (default: --listen's).")
@click.option(
    "--node-port-base",
    type=int,
    help="Serve broker N on this port + N (default: a free port per broker).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Proxy processes sharing the bootstrap port (SO_REUSEPORT, Linux), each "
    "serving the brokers on ports of its own; a supervisor restarts one that dies.",
)
@click.option(
    "--node-port-stride",
    type=click.IntRange(min=1),
    default=DEFAULT_STRIDE,
    show_default=True,
    help="With --workers and --node-port-base: worker K serves broker N on "
    "--node-port-base + K * this + N.",
)
@click.option(
    "--route-keys",
    type=click.Choice(["none", *HASHES]),
    default="murmur2",
    show_default=True,
    help="The key hash that places keyed records (murmur2 as Java; none: leave them).",
)
@click.option(
    "--max-frame-size",
    type=int,
    default=100 * 1024 * 1024,
    show_default=True,
    help="The largest frame accepted from a client or a broker (Kafka's "
    "socket.request.max.bytes); a larger size prefix closes the connection.",
)
@click.option("--ssl-certfile", help="Serve clients over TLS with this certificate (PEM).")
@click.option("--ssl-keyfile", help="The certificate's private key (PEM), if not in the certfile.")
@click.option("--upstream-ssl", is_flag=True, help="Connect to the brokers over TLS.")
@click.option("--upstream-ssl-cafile", help="CAs of the brokers' certificates (PEM).")
@click.option(
    "--announce/--no-announce",
    default=False,
    show_default=True,
    help="Announce the proxy on the local network (zeroconf, _kafka._tcp, role proxy); "
    "off unless asked, as for trafka broker.",
)
@click.option(
    "--metrics-listen",
    metavar="HOST:PORT",
    help="Serve Prometheus metrics (/metrics), /healthz and /readyz over HTTP here.",
)
@click.option(
    "--max-decompressed-bytes",
    type=int,
    default=16 * 1024 * 1024,
    show_default=True,
    help="The most one batch may inflate to when routed (beyond: MESSAGE_TOO_LARGE).",
)
@click.option(
    "--journal",
    "journal",
    metavar="DIR|topic[:NAME]",
    help="Record where idempotent producers' records went before writing them, so "
    "that a restarted proxy writes none twice (exactly once across restarts): in a "
    "directory, or in a compacted topic of the upstream cluster (topic: "
    f"{TOPIC}) that every proxy in front of it shares, so that any of them takes "
    "over a client's retries when another is lost.",
)
@click.option(
    "--journal-takeover-grace-ms",
    type=int,
    default=5000,
    show_default=True,
    help="How long a proxy taking over a producer from another (--journal topic), or "
    "just started (any journal or none), waits before asking the leaders for the "
    "sequences of a producer it did not see born, so that the former instance's last "
    "writes land first.",
)
@click.option(
    "--origin-headers",
    is_flag=True,
    help="Give each record of a batch the proxy splits a trafka-origin header saying "
    "where the client put it (its partition, place in the batch, producer and sequence).",
)
@click.option(
    "--coalesce/--no-coalesce",
    default=True,
    show_default=True,
    help="Plain producers' routed requests to one broker share upstream requests: "
    "while one is in flight, the next gathers the records of every request after it.",
)
@click.option(
    "--queued-max-request-bytes",
    type=int,
    default=104_857_600,
    show_default=True,
    help="The most bytes of requests held across all client connections (Kafka's "
    "queued.max.request.bytes); beyond it, reading pauses. -1: no bound.",
)
@click.option(
    "--connections-max-idle-ms",
    type=int,
    default=600_000,
    show_default=True,
    help="Close a client connection idle this long (Kafka's connections.max.idle.ms); -1: never.",
)
@click.option(
    "--request-receive-timeout-ms",
    type=int,
    default=30_000,
    show_default=True,
    help="Close a client connection whose request has not arrived whole this long "
    "after its first bytes (request.receive.timeout.ms); -1: never.",
)
@click.option(
    "--filter",
    "filter_specs",
    multiple=True,
    metavar="MODULE:ATTR",
    help="A trafka.proxy.Filter (class, factory or instance) to run, in the order given.",
)
@click.option(
    "--principal-credentials",
    type=click.Path(dir_okay=False),
    help="A JSON file of the upstream logins the proxy holds per SASL principal "
    "(secrets in the file or named environment variables): those clients' records are "
    "routed over connections that log in as them.",
)
@click.option(
    "--sasl-without-credentials",
    type=click.Choice(["forward", "refuse"]),
    default="forward",
    show_default=True,
    help="A SASL client whose principal has no login held: forward its records unrouted, "
    "or refuse its authentication.",
)
@click.option(
    "--sasl-oauthbearer-sub-claim-name",
    default="sub",
    show_default=True,
    help="The OAuth token claim the brokers take a client's principal from (their "
    "sasl.oauthbearer.sub.claim.name).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log each broker listener and connection.")
def command(
    upstream: str,
    listen: str,
    advertised_host: str | None,
    node_port_base: int | None,
    workers: int,
    node_port_stride: int,
    route_keys: str,
    max_frame_size: int,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
    upstream_ssl: bool,
    upstream_ssl_cafile: str | None,
    announce: bool,
    metrics_listen: str | None,
    max_decompressed_bytes: int,
    journal: str | None,
    journal_takeover_grace_ms: int,
    origin_headers: bool,
    coalesce: bool,
    queued_max_request_bytes: int,
    connections_max_idle_ms: int,
    request_receive_timeout_ms: int,
    filter_specs: tuple[str, ...],
    principal_credentials: str | None,
    sasl_without_credentials: str,
    sasl_oauthbearer_sub_claim_name: str,
    verbose: bool,
) -> None:
    """Proxy Kafka clients to a cluster, rewriting broker addresses and routing
    keyed records to the partition their key hashes to."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise click.BadParameter(f"{listen!r} is not host:port", param_hint="--listen")
    journal_dir = journal_topic = None
    if journal is not None and (journal == "topic" or journal.startswith("topic:")):
        journal_topic = journal.partition(":")[2] or TOPIC
    else:
        journal_dir = journal
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=LINE_FORMAT)
    try:
        config = ProxyConfig(
            upstream=tuple(s.strip() for s in upstream.split(",") if s.strip()),
            host=host.strip("[]") or "0.0.0.0",
            port=int(port),
            advertised_host=advertised_host,
            node_port_base=node_port_base,
            route_keys=route_keys,
            max_frame_size=max_frame_size,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            upstream_ssl=upstream_ssl,
            upstream_ssl_cafile=upstream_ssl_cafile,
            announce=announce,
            metrics_listen=metrics_listen,
            max_decompressed_bytes=max_decompressed_bytes,
            journal_dir=journal_dir,
            journal_topic=journal_topic,
            journal_takeover_grace_ms=journal_takeover_grace_ms,
            origin_headers=origin_headers,
            coalesce=coalesce,
            queued_max_request_bytes=queued_max_request_bytes,
            connections_max_idle_ms=connections_max_idle_ms,
            request_receive_timeout_ms=request_receive_timeout_ms,
            filters=tuple(load_filter(spec) for spec in filter_specs),
            principal_credentials=principal_credentials,
            sasl_without_credentials=sasl_without_credentials,
            sasl_oauthbearer_sub_claim_name=sasl_oauthbearer_sub_claim_name,
        )
        config.client_ssl_context()
        config.upstream_ssl_context()
        if workers > 1:
            check_workers(config, workers, node_port_stride)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        if workers > 1:
            run_workers(
                config,
                workers,
                stride=node_port_stride,
                filter_specs=filter_specs,
                verbose=verbose,
            )
        else:
            run_proxy(config)
    except KeyboardInterrupt:
        pass
    except WorkerGaveUp as exc:
        raise click.ClickException(f"the proxy stopped: {exc}") from None
    except (ValueError, OSError) as exc:  # DiscoveryError is an OSError
        raise click.ClickException(f"cannot start the proxy: {exc}") from None
