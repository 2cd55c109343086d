"""``trafka console``: serve the web console for a cluster.

It listens on 127.0.0.1:8080 unless ``--listen`` says otherwise, logs one line
naming its address when ready, and stops cleanly on SIGINT or SIGTERM. Client
settings (security, for example) pass through as ``-X key=value`` with Kafka's
names and are used by the console's admin client, consumers and producer.
"""

from __future__ import annotations

import logging
from typing import Any

import click

from trafka.console.server import (
    DEFAULT_LISTEN,
    ConsoleSettings,
    missing_dependencies,
    parse_listen,
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
    help=f"The cluster to show (also ${ENV_BOOTSTRAP}).",
)
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    metavar="HOST:PORT",
    help="Where to serve the console. It has no login: keep it on loopback unless "
    "something in front of it decides who may reach it.",
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
@click.option("-v", "--verbose", is_flag=True, help="Log at DEBUG.")
def command(
    bootstrap: str,
    listen: str,
    sample_interval: float,
    allowed_hosts: tuple[str, ...],
    properties: tuple[str, ...],
    verbose: bool,
) -> None:
    """Serve a web console for a Kafka cluster: brokers, topics, consumer groups
    and their lag, a message browser, producing, topic and ACL management.

    \b
    For example:
      trafka console --bootstrap-server 127.0.0.1:9092 --listen 127.0.0.1:8080
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
    client: dict[str, Any] = {"bootstrap.servers": bootstrap, **parse_pairs(properties, "-X")}
    settings = ConsoleSettings(client, listen, sample_interval, allowed_hosts)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not verbose:
        for name in ("trio", "hypercorn", "trafka.console.http"):
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
