"""``trafka discover``: list the Kafka services announced on the local network."""

from __future__ import annotations

import dataclasses
import json

import click

from ._mdns import DiscoveryError, bootstrap_list, discover_blocking
from ._service import ROLES, DiscoverySpec, KafkaService

__all__ = ["command"]

_COLUMNS = ("NAME", "ROLE", "CLUSTER", "NODE", "SECURITY", "BOOTSTRAP")


def _row(service: KafkaService) -> tuple[str, ...]:
    return (
        service.name,
        service.role or "-",
        service.cluster_id or "-",
        "-" if service.node_id is None else str(service.node_id),
        service.security_protocol,
        service.bootstrap_servers,
    )


def _table(services: list[KafkaService]) -> str:
    rows = [_COLUMNS, *(_row(s) for s in services)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


@click.command("discover")
@click.option("--cluster", "cluster_id", metavar="ID", help="Only services of this cluster id.")
@click.option("--role", type=click.Choice(ROLES), help="Only brokers or only proxies.")
@click.option("--name", help="Only the service with this instance name.")
@click.option(
    "--security-protocol",
    type=click.Choice(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"], case_sensitive=False),
    help="Only listeners speaking this protocol.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.05),
    default=2.0,
    show_default=True,
    help="Seconds to listen for answers.",
)
@click.option("--first", is_flag=True, help="Stop at the first service found.")
@click.option(
    "--bootstrap",
    "as_bootstrap",
    is_flag=True,
    help="Print only a bootstrap.servers list (for kcat -b, say).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per service.")
def command(
    cluster_id: str | None,
    role: str | None,
    name: str | None,
    security_protocol: str | None,
    timeout: float,
    first: bool,
    as_bootstrap: bool,
    as_json: bool,
) -> None:
    """Find Kafka brokers and proxies announced on the local network (zeroconf,
    service type _kafka._tcp). Exits with status 1 when none answers.

    \b
    For example:
      kcat -b "$(trafka discover --role broker --first --bootstrap)" -L
    """
    if as_bootstrap and as_json:
        raise click.UsageError("--bootstrap and --json exclude each other")
    spec = DiscoverySpec(
        cluster_id=cluster_id, role=role, name=name, timeout_ms=max(1, int(timeout * 1000))
    )
    try:
        services = discover_blocking(spec, first=first, security_protocols=security_protocol)
    except DiscoveryError as exc:
        raise click.ClickException(str(exc)) from None
    if not services:
        click.echo(f"no Kafka service found ({spec.describe()}) in {timeout:g} s", err=True)
        raise SystemExit(1)
    if as_bootstrap:
        click.echo(bootstrap_list(services))
    elif as_json:
        for service in services:
            record = dataclasses.asdict(service)
            record["bootstrap_servers"] = service.bootstrap_servers
            click.echo(json.dumps(record, sort_keys=True))
    else:
        click.echo(_table(services))
