"""The ``trafka`` command line: one click group whose subcommands load on demand.

Each part of trafka that has a command registers it in :data:`SUBCOMMANDS` by
import path (``"package.module:attribute"``), so this file only grows by one line
per command, and running ``trafka decode`` never imports the broker or the proxy.

A subcommand whose module cannot be imported (not written yet, an optional
dependency missing, a bug at import time) does not break the others: it is listed
in ``trafka --help`` as unavailable, with the reason, and running it fails with
that reason and exit status 1.

Ctrl-C (SIGINT) that reaches a command as KeyboardInterrupt ends it with one
line on stderr and exit status 130 (128 + SIGINT, as a shell reports a process
the signal ended, and as Kafka's own tools exit), never a traceback or click's
"Aborted!" with status 1. Commands that stop cleanly on a signal (``consume``,
``produce``, ``share-consume``) catch it themselves and exit 128 + its number too.
"""

from __future__ import annotations

import importlib
import signal
from importlib import metadata
from typing import Any

import click

__all__ = ["SUBCOMMANDS", "LazyGroup", "main"]

# name -> "module:attribute" of a click.Command.
SUBCOMMANDS: dict[str, str] = {
    "decode": "trafka.tools.decode:command",
    "demo": "trafka.tools.demo:command",
    "broker": "trafka.brokerlite.cli:command",
    "cluster": "trafka.brokerlite.cli:cluster_command",
    "elect-leaders": "trafka.tools.cli_cluster:elect_leaders_command",
    "reassign": "trafka.tools.cli_cluster:reassign_command",
    "proxy": "trafka.proxy.cli:command",
    "discover": "trafka.discovery.cli:command",
    "produce": "trafka.tools.cli_client:produce_command",
    "consume": "trafka.tools.cli_client:consume_command",
    "share-consume": "trafka.tools.cli_share:share_consume_command",
    "topics": "trafka.tools.cli_topics:topics_command",
    "features": "trafka.tools.cli_topics:features_command",
    "groups": "trafka.tools.cli_groups:groups_command",
    "transactions": "trafka.tools.cli_transactions:transactions_command",
    "users": "trafka.tools.cli_users:users_command",
    "acls": "trafka.tools.cli_acls:acls_command",
    "quotas": "trafka.tools.cli_quotas:quotas_command",
    "tokens": "trafka.tools.cli_tokens:tokens_command",
    "client-metrics": "trafka.tools.cli_client_metrics:client_metrics_command",
    "log-dirs": "trafka.tools.cli_log_dirs:log_dirs_command",
    "log": "trafka.tools.cli_log:log_command",
    "console": "trafka.tools.console_cli:command",
}


def _version() -> str:
    try:
        return metadata.version("trafka")
    except metadata.PackageNotFoundError:  # running from a tree that was never installed
        return "unknown"


def _unavailable(name: str, target: str, reason: str) -> click.Command:
    """A stand-in for a subcommand that failed to load: explains why, exits 1."""

    def fail(**_: Any) -> None:
        raise click.ClickException(f"'{name}' is unavailable ({target}): {reason}")

    return click.Command(
        name,
        callback=fail,
        help=f"Unavailable: {reason}",
        short_help=f"(unavailable: {reason})",
        # Accept whatever the user typed so that the reason, not a usage error, is shown.
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )


class LazyGroup(click.Group):
    """A click group that imports registered subcommands the first time they are used.

    Args:
        lazy_subcommands: subcommand name -> ``"module:attribute"`` of a
            :class:`click.Command`. Commands added with :meth:`add_command` work too.
        All other arguments are :class:`click.Group`'s.
    """

    def __init__(self, *args: Any, lazy_subcommands: dict[str, str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy_subcommands: dict[str, str] = dict(lazy_subcommands or {})
        self._loaded: dict[str, click.Command] = {}

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            pass
        except BaseExceptionGroup as group:
            # trio's nurseries may wrap it; anything else in the group goes on up.
            interrupt, rest = group.split(KeyboardInterrupt)
            if interrupt is None or rest is not None:
                raise
        click.echo("interrupted (SIGINT)", err=True)
        raise click.exceptions.Exit(128 + signal.SIGINT)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy_subcommands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_subcommands:
            return self._load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def _load(self, name: str) -> click.Command:
        cached = self._loaded.get(name)
        if cached is not None:
            return cached
        target = self.lazy_subcommands[name]
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
            command = getattr(module, attr or "command")
            if not isinstance(command, click.Command):
                raise TypeError(f"{target} is a {type(command).__name__}, not a click command")
        except ModuleNotFoundError as exc:
            command = _unavailable(name, target, f"module {exc.name} not found")
        except Exception as exc:  # a half-written module must not take the whole CLI down
            command = _unavailable(name, target, f"{type(exc).__name__}: {exc}")
        self._loaded[name] = command
        return command


@click.group(cls=LazyGroup, lazy_subcommands=SUBCOMMANDS)
@click.version_option(_version(), "--version", "-V", prog_name="trafka")
def main() -> None:
    """trafka: Apache Kafka's wire protocol for Python."""


if __name__ == "__main__":
    main()
