"""``trafka client-metrics``: list, describe, alter and delete client-metrics
resources (KIP-714 subscriptions), like Kafka's ``kafka-client-metrics.sh``.

Rules:

* The connection options, output conventions and exit statuses are those of
  :mod:`trafka.tools.clikit` (``-b``, ``-X``, ``-m``; data on stdout, notes
  on stderr; a client error exits 1, a usage error 2).
* Exactly one action: ``--list`` (the names), ``--describe`` (every resource,
  or the one ``--name`` gives; a table, or ``--json``), ``--alter`` (``--name``
  or ``--generate-name``, then any of ``--metrics``, ``--interval``,
  ``--match``; each sets that setting, the others are kept) or ``--delete``
  (``--name``: every setting deleted, so the resource is gone).
* ``--metrics`` is a comma-separated list of metric-name prefixes (``*``: all;
  an empty string: none); ``--match`` a comma-separated list of
  ``selector=regex`` (``client_id``, ``client_instance_id``,
  ``client_software_name``, ``client_software_version``,
  ``client_source_address``, ``client_source_port``); ``--interval`` the push
  interval in milliseconds (100 to 3600000).
* The broker's refusals are explained: CLUSTER_AUTHORIZATION_FAILED (the
  principal lacks DESCRIBE_CONFIGS or ALTER_CONFIGS on the cluster),
  INVALID_REQUEST and INVALID_CONFIG with the broker's reason.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import click

from trafka.codec import ErrorCode, KafkaError

from .clikit import admin_options, format_table, run_client, with_admin

__all__ = ["client_metrics_command"]

_SETTINGS = ("metrics", "interval.ms", "match")


def _explained(exc: KafkaError, what: str) -> click.ClickException:
    if exc.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        return click.ClickException(
            f"this client's principal may not {what} (CLUSTER_AUTHORIZATION_FAILED): it needs "
            "DESCRIBE_CONFIGS or ALTER_CONFIGS on the cluster; connect as another user with "
            "-X sasl.username=... or ask an administrator"
        )
    name = exc.code.name if isinstance(exc.code, ErrorCode) else str(exc.code)
    if exc.code in (ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_CONFIG):
        reason = str(exc).partition("] ")[2] or str(exc)
        return click.ClickException(f"the broker refused to {what} ({name}): {reason}")
    return click.ClickException(f"{name}: {exc}")


def _call(cfg: dict[str, Any], fn: Any, what: str) -> Any:
    return run_client(with_admin, cfg, fn, explain=lambda exc: _explained(exc, what))


@click.command("client-metrics")
@click.option("--list", "action", flag_value="list", help="List the client-metrics resources.")
@click.option(
    "--describe", "action", flag_value="describe", help="Describe one resource (--name) or all."
)
@click.option("--alter", "action", flag_value="alter", help="Create or change a resource.")
@click.option("--delete", "action", flag_value="delete", help="Delete a resource (--name).")
@click.option("--name", metavar="NAME", help="The resource (subscription) name.")
@click.option(
    "--generate-name", is_flag=True, help="With --alter: name the new resource with a random id."
)
@click.option(
    "--metrics", metavar="PREFIXES", help="Comma-separated metric-name prefixes (* for all)."
)
@click.option(
    "--interval",
    type=int,
    metavar="MS",
    help="The push interval in milliseconds (100 to 3600000).",
)
@click.option("--match", metavar="SELECTORS", help="Comma-separated selector=regex items.")
@click.option("--json", "as_json", is_flag=True, help="With --describe: JSON output.")
@admin_options
def client_metrics_command(
    cfg: dict[str, Any],
    action: str | None,
    name: str | None,
    generate_name: bool,
    metrics: str | None,
    interval: int | None,
    match: str | None,
    as_json: bool,
) -> None:
    """List, describe, alter and delete client-metrics resources (KIP-714)."""
    if action is None:
        raise click.UsageError("give one of --list, --describe, --alter or --delete")
    changes = {
        k: v
        for k, v in (
            ("metrics", metrics),
            ("interval.ms", None if interval is None else str(interval)),
            ("match", match),
        )
        if v is not None
    }
    if action != "alter" and (changes or generate_name):
        raise click.UsageError("--metrics, --interval, --match and --generate-name go with --alter")
    if action == "list":
        names = _call(cfg, lambda a: a.list_client_metrics_resources(), "list client metrics")
        for n in names:
            click.echo(n)
        return
    if action == "describe":
        _describe(cfg, name, as_json)
        return
    if action == "alter":
        if generate_name:
            if name is not None:
                raise click.UsageError("give --name or --generate-name, not both")
            name = str(uuid.uuid4())
        if not name:
            raise click.UsageError("--alter needs --name (or --generate-name)")
        if not changes:
            raise click.UsageError("--alter needs --metrics, --interval or --match")
        resource = name
        _call(
            cfg,
            lambda a: a.alter_client_metrics_configs(resource, changes),
            "alter client metrics",
        )
        click.echo(f"Altered client metrics config for {name}.", err=True)
        return
    if not name:
        raise click.UsageError("--delete needs --name")
    gone = name
    _call(
        cfg,
        lambda a: a.alter_client_metrics_configs(gone, dict.fromkeys(_SETTINGS)),
        "delete client metrics",
    )
    click.echo(f"Deleted client metrics config for {name}.", err=True)


def _describe(cfg: dict[str, Any], name: str | None, as_json: bool) -> None:
    async def fetch(admin: Any) -> dict[str, dict[str, str | None]]:
        names = [name] if name else await admin.list_client_metrics_resources()
        if not names:
            return {}
        found: dict[str, dict[str, str | None]] = await admin.describe_client_metrics_configs(names)
        return found

    found = _call(cfg, fetch, "describe client metrics")
    if as_json:
        click.echo(json.dumps(found))
        return
    rows = [[n, *(cfgs.get(k) or "" for k in _SETTINGS)] for n, cfgs in sorted(found.items())]
    click.echo(format_table(["name", *_SETTINGS], rows))
