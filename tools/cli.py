"""The ``trafka`` command line: one click group whose subcommands load on demand.

Each part of trafka that has a command registers it in :data:`SUBCOMMANDS` by
import path (``"package.module:attribute"``) with the first sentence of its help,
so this file only grows by one entry per command, running ``trafka decode``
never imports the broker or the proxy, and ``trafka --help`` imports no command
at all: it lists the registered sentences (issue #48: importing every command
to ask it for its help took most of a second).

A subcommand whose module cannot be imported (not written yet, an optional
dependency missing, a bug at import time) does not break the others: running it
fails with the reason and exit status 1. A :class:`LazyGroup` given no sentence
for a command imports it to list it, and lists it as unavailable, with the
reason, when that fails.

Ctrl-C (SIGINT) that reaches a command as KeyboardInterrupt ends it with one
line on stderr and exit status 130 (128 + SIGINT, as a shell reports a process
the signal ended, and as Kafka's own tools exit), never a traceback or click's
"Aborted!" with status 1. While a client command's ``trio.run`` runs, Ctrl-C
cancels it and the KeyboardInterrupt is raised once it is over
(``trafka.tools.cli_faults.run_interruptible``: trio raised it wherever it
landed, inside an ``__exit__`` too). Commands that stop cleanly on a signal (``consume``,
``produce``, ``share-consume``) catch it themselves and exit 128 + its number too.
"""

from __future__ import annotations

import importlib
import signal
from collections.abc import Mapping
from gettext import gettext
from typing import Any

import click

__all__ = ["SUBCOMMANDS", "LazyGroup", "main"]

# name -> ("module:attribute" of a click.Command, the first sentence of its help).
# The sentence is what ``trafka --help`` lists, so listing the commands imports
# none of them; tests/tools/test_cli_help.py checks each against its command.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "decode": (
        "trafka.tools.decode:command",
        "Decode Kafka frames from FILE (default: stdin) into JSON, one line per frame.",
    ),
    "demo": (
        "trafka.tools.demo:command",
        "Run the whole path (services, the proxy, brokerlite, the console, Spark), the SDK's order pipeline, then decode what crosses the wire.",
    ),
    "broker": (
        "trafka.brokerlite.cli:command",
        "Run brokerlite, a Kafka-compatible broker: a single node, or with --zookeeper a member of a cluster of brokerlite nodes (``trafka cluster`` starts a whole one).",
    ),
    "cluster": (
        "trafka.brokerlite.cli:cluster_command",
        "Run a whole brokerlite cluster on this machine: a private ZooKeeper and N brokers on free loopback ports, each broker a process of its own.",
    ),
    "elect-leaders": (
        "trafka.tools.cli_cluster:elect_leaders_command",
        "Elect partition leaders (preferred replicas, or unclean).",
    ),
    "reassign": (
        "trafka.tools.cli_cluster:reassign_command",
        "Move partitions between brokers: generate a plan, execute it, verify it.",
    ),
    "proxy": (
        "trafka.proxy.cli:command",
        "Proxy Kafka clients to a cluster, rewriting broker addresses and routing keyed records to the partition their key hashes to.",
    ),
    "discover": (
        "trafka.discovery.cli:command",
        "Find Kafka brokers and proxies announced on the local network (zeroconf, service type _kafka._tcp).",
    ),
    "produce": (
        "trafka.tools.cli_client:produce_command",
        "Send messages to TOPIC: lines of stdin, or FILES (one message each; -l for lines).",
    ),
    "consume": (
        "trafka.tools.cli_client:consume_command",
        "Print records of TOPICS to stdout.",
    ),
    "schemas": (
        "trafka.tools.cli_schemas:schemas_command",
        "List, show, register, check and delete schemas in a Schema Registry; show and set compatibility.",
    ),
    "share-consume": (
        "trafka.tools.cli_share:share_consume_command",
        "Print records of TOPICS as a member of the share group GROUP, acknowledging each one (--ack); the acknowledgements are committed before it exits.",
    ),
    "topics": (
        "trafka.tools.cli_topics:topics_command",
        "List, create, describe, alter and delete topics; add partitions.",
    ),
    "features": (
        "trafka.tools.cli_topics:features_command",
        "Describe and change the cluster's feature levels (KIP-584), as kafka-features.sh.",
    ),
    "groups": (
        "trafka.tools.cli_groups:groups_command",
        "List and describe groups (consumer groups with lag, share groups with start offsets and lag), reset their offsets, delete them; show and set group configs.",
    ),
    "transactions": (
        "trafka.tools.cli_transactions:transactions_command",
        "List and describe transactions and producers; find, abort hanging transactions.",
    ),
    "users": (
        "trafka.tools.cli_users:users_command",
        "List users' SCRAM credentials; set and delete their passwords.",
    ),
    "acls": (
        "trafka.tools.cli_acls:acls_command",
        "List, add and remove ACLs (the broker needs an authorizer).",
    ),
    "quotas": (
        "trafka.tools.cli_quotas:quotas_command",
        "Describe and alter client quotas (byte rates, request percentage...).",
    ),
    "tokens": (
        "trafka.tools.cli_tokens:tokens_command",
        "Create, renew, expire and describe delegation tokens (KIP-48).",
    ),
    "client-metrics": (
        "trafka.tools.cli_client_metrics:client_metrics_command",
        "List, describe, alter and delete client-metrics resources (KIP-714).",
    ),
    "log-dirs": (
        "trafka.tools.cli_log_dirs:log_dirs_command",
        "Describe brokers' log directories and move replicas between them.",
    ),
    "log": (
        "trafka.tools.cli_log:log_command",
        "Check brokerlite's partition logs on disk.",
    ),
    "console": (
        "trafka.tools.console_cli:command",
        "Serve a web console for a Kafka cluster: brokers, topics, consumer groups and their lag, a message browser, producing, topic and ACL management.",
    ),
}


def _version() -> str:
    # importlib.metadata is imported here, when asked: it takes longer to import
    # than the rest of `trafka --help` (issue #48).
    from importlib import metadata

    try:
        return metadata.version("trafka")
    except metadata.PackageNotFoundError:  # running from a tree that was never installed
        return "unknown"


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: as click's ``version_option``, with the version looked up
    only when asked for."""
    if not value or ctx.resilient_parsing:
        return
    click.echo(f"trafka, version {_version()}", color=ctx.color)
    ctx.exit()


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
            :class:`click.Command`, or ``("module:attribute", summary)`` where
            ``summary`` is the first sentence of the command's help: the help
            lists it without importing the command. Commands added with
            :meth:`add_command` work too.
        All other arguments are :class:`click.Group`'s.
    """

    def __init__(
        self,
        *args: Any,
        lazy_subcommands: Mapping[str, str | tuple[str, str]] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.lazy_subcommands: dict[str, str] = {}
        self.summaries: dict[str, str] = {}
        for name, entry in (lazy_subcommands or {}).items():
            if isinstance(entry, str):
                self.lazy_subcommands[name] = entry
            else:
                self.lazy_subcommands[name], self.summaries[name] = entry
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

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands with what each does, as click lists them; a command not
        loaded yet is listed by its summary, without importing it."""
        listed: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            summary = self.summaries.get(name)
            if summary is not None and name not in self._loaded:
                # A stand-in, so that the summary is shortened as click shortens help.
                listed.append((name, click.Command(name, help=summary)))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                listed.append((name, command))
        if listed:
            # As click sizes it: the width left beside the longest name.
            limit = formatter.width - 6 - max(len(name) for name, _ in listed)
            with formatter.section(gettext("Commands")):
                formatter.write_dl([(name, c.get_short_help_str(limit)) for name, c in listed])

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
@click.option(
    "--version",
    "-V",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_show_version,
    help="Show the version and exit.",
)
def main() -> None:
    """trafka: Apache Kafka's wire protocol for Python."""


if __name__ == "__main__":
    main()
