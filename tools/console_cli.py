"""``trafka console``: serve the web console for a cluster.

It listens on 127.0.0.1:8080 unless ``--listen`` says otherwise, logs one line
naming its address and who may use it when ready, and stops cleanly on SIGINT
or SIGTERM. Client settings (security, for example) pass through as
``-X key=value`` with Kafka's names and are used by the console's admin client,
consumers and producer.

The console's password comes from ``$TRAFKA_CONSOLE_PASSWORD`` or a file
(``--password-file``), never from the command line, where other users of the
host read it in ``ps``: a ``--password`` option is refused saying so. Options
win over the environment (:func:`trafka.console.server.settings_from_environment`).
"""

from __future__ import annotations

import logging
from typing import Any

import click

from trafka.common.logformat import CHATTY, LINE_FORMAT
from trafka.console.server import (
    DEFAULT_LISTEN,
    ENV_AUTH_HEADER,
    ENV_PASSWORD,
    ENV_PASSWORD_FILE,
    ConsoleSettings,
    access_of,
    check_cluster_name,
    missing_dependencies,
    parse_listen,
    read_password_file,
    settings_from_environment,
)

from .clikit import DEFAULT_BOOTSTRAP, ENV_BOOTSTRAP, parse_pairs

__all__ = ["command"]


@click.command("console")
@click.option(
    "-b",
    "--bootstrap-server",
    "bootstrap",
    envvar=ENV_BOOTSTRAP,
    default=DEFAULT_BOOTSTRAP,
    show_default=True,
    metavar="HOST:PORT[,...]",
    help=f"The cluster to show (also ${ENV_BOOTSTRAP}); not with --cluster.",
)
@click.option(
    "--cluster",
    "clusters",
    multiple=True,
    metavar="NAME=HOST:PORT[,...]",
    help="A cluster by a name of its own (repeatable): each is under /clusters/NAME/, "
    "the first at / too.",
)
@click.option(
    "--cluster-property",
    "cluster_properties",
    multiple=True,
    metavar="NAME:KEY=VALUE",
    help="A client setting of one --cluster only (repeatable); -X settings go to every cluster.",
)
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    metavar="HOST:PORT",
    help="Where to serve the console. Without a password or --auth-header it is "
    "read-only anywhere but on loopback.",
)
@click.option(
    "--password-file",
    metavar="PATH",
    help=f"A file whose first line is the password to log in with (also "
    f"${ENV_PASSWORD_FILE}; or put the password itself in ${ENV_PASSWORD}).",
)
@click.option(
    "--password",
    "password_given",
    hidden=True,
    help="Refused: a password on the command line is visible to every user.",
)
@click.option(
    "--read-only",
    is_flag=True,
    default=None,
    help="Show the cluster only: no page offers or accepts a change.",
)
@click.option(
    "--auth-header",
    metavar="NAME",
    help=f"Trust the reverse proxy in front to name the person in this header "
    f"(e.g. X-Forwarded-User; also ${ENV_AUTH_HEADER}). Only believed from --trusted-proxy.",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    metavar="ADDRESS[/BITS]",
    help="An address or network of the proxy whose --auth-header is believed "
    "(repeatable; default: loopback).",
)
@click.option(
    "--sample-interval",
    type=click.FloatRange(min=0.5),
    default=10.0,
    show_default=True,
    help="Seconds between two samples of every consumer group's lag (for the charts).",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="Another Host name to answer to on a loopback listener (repeatable).",
)
@click.option(
    "-X",
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="A client setting by its Kafka name (repeatable), e.g. -X security.protocol=SSL.",
)
@click.option(
    "--access-log",
    is_flag=True,
    help="Log every HTTP request (combined log format, logger trafka.console.access).",
)
@click.option(
    "-r",
    "--schema-registry",
    envvar="TRAFKA_SCHEMA_REGISTRY_URL",
    metavar="URL",
    help="The (first) cluster's Schema Registry: framed messages shown decoded, and its "
    "subjects (also $TRAFKA_SCHEMA_REGISTRY_URL).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log at DEBUG.")
def command(
    bootstrap: str,
    listen: str,
    sample_interval: float,
    password_file: str | None,
    password_given: str | None,
    read_only: bool | None,
    auth_header: str | None,
    trusted_proxies: tuple[str, ...],
    allowed_hosts: tuple[str, ...],
    properties: tuple[str, ...],
    access_log: bool,
    schema_registry: str | None,
    verbose: bool,
    clusters: tuple[str, ...] = (),
    cluster_properties: tuple[str, ...] = (),
) -> None:
    """Serve a web console for a Kafka cluster: brokers, topics, consumer groups
    and their lag, a message browser, producing, topic and ACL management.

    \b
    For example:
      trafka console --bootstrap-server 127.0.0.1:9092 --listen 127.0.0.1:8080
      TRAFKA_CONSOLE_PASSWORD=... trafka console --listen 0.0.0.0:8080
    """
    import signal

    import trio

    from trafka.console.server import serve_console
    from trafka.sdk import ConfigError, TrafkaError

    try:
        parse_listen(listen)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    reason = missing_dependencies()
    if reason is not None:
        raise click.ClickException(reason)
    if password_given is not None:
        raise click.UsageError(
            f"--password: a password on the command line is visible to every user of "
            f"this host; put it in ${ENV_PASSWORD} or a file (--password-file)"
        )
    try:
        protection = settings_from_environment()
        if password_file is not None:
            protection["password"] = read_password_file(password_file)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if read_only is not None:
        protection["read_only"] = read_only
    if auth_header is not None:
        protection["auth_header"] = auth_header
    if trusted_proxies:
        protection["trusted_proxies"] = trusted_proxies
    common = parse_pairs(properties, "-X")
    named = _clusters(clusters, cluster_properties, common)
    if named and click.get_current_context().get_parameter_source("bootstrap") == (
        click.core.ParameterSource.COMMANDLINE
    ):
        raise click.UsageError("--bootstrap-server: give every cluster as --cluster NAME=...")
    if named:
        first, *more = named.items()
        protection["cluster_name"], client = first
        protection["clusters"] = dict(more)
        bootstrap = ", ".join(f"{n}={c['bootstrap.servers']}" for n, c in named.items())
    else:
        client = {"bootstrap.servers": bootstrap, **common}
    protection.update(access_log=access_log, schema_registry=schema_registry)
    settings = ConsoleSettings(client, listen, sample_interval, allowed_hosts, **protection)
    try:
        access_of(settings)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format=LINE_FORMAT,
    )
    if not verbose:
        # httpx: a line per registry request (the schema pages' lookups, their 404s).
        for name in ("trio", "hypercorn", "trafka.console.http", *CHATTY):
            logging.getLogger(name).setLevel(logging.WARNING)

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                host, port = await nursery.start(serve_console, settings)
                click.echo(f"trafka console on http://{host}:{port}/ for {bootstrap}", err=True)
                async for _ in signals:
                    break
                nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    except (OSError, TrafkaError) as exc:
        raise click.ClickException(f"cannot serve the console: {exc}") from None


def _clusters(
    given: tuple[str, ...], properties: tuple[str, ...], common: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """Each ``--cluster NAME=BOOTSTRAP``'s client settings: ``-X``'s, then its
    own ``--cluster-property NAME:KEY=VALUE``."""
    out: dict[str, dict[str, Any]] = {}
    for item in given:
        name, sep, servers = item.partition("=")
        try:
            check_cluster_name(name.strip())
        except ValueError as exc:
            raise click.UsageError(f"--cluster {item!r}: {exc}") from None
        if not sep or not servers.strip():
            raise click.UsageError(f"--cluster must be NAME=HOST:PORT[,...], got {item!r}")
        if name.strip() in out:
            raise click.UsageError(f"--cluster: {name.strip()!r} is given twice")
        out[name.strip()] = {**common, "bootstrap.servers": servers.strip()}
    for item in properties:
        name, sep, pair = item.partition(":")
        if not sep or name not in out:
            raise click.UsageError(
                f"--cluster-property must be NAME:KEY=VALUE naming a --cluster, got {item!r}"
            )
        out[name].update(parse_pairs((pair,), "--cluster-property"))
    return out
