"""``trafka users``: list users' SCRAM credentials, set and delete passwords (KIP-554).

Rules:

* The connection options, output conventions and exit statuses are those of
  :mod:`trafka.tools.clikit` (``-b``, ``-X``, ``-m``; data on stdout, notes
  on stderr; a client error exits 1, a usage error 2).
* ``list`` and ``describe`` only read (DescribeUserScramCredentials): the
  mechanisms and iteration counts, never a secret.
* ``set-password`` salts and hashes the password here (the SDK's
  :class:`~trafka.sdk.UserScramCredentialUpsertion`); the broker never sees it.
  The password comes from a prompt (hidden, asked twice) or, with
  ``--password-stdin``, from the first line of stdin; it is never an argument
  (it would show in ``ps`` and the shell's history) and never printed.
* Kafka refuses a user named twice in one request, so each mechanism is set
  (or deleted) by a request of its own; a failure stops at that mechanism.
* ``delete`` without ``-M`` deletes every mechanism the user has.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .clikit import admin_options, format_table, run_client, with_admin

__all__ = ["users_command"]

_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_mechanism_option = click.option(
    "-M",
    "--mechanism",
    "mechanisms",
    multiple=True,
    type=click.Choice(_MECHANISMS, case_sensitive=False),
    help="Repeatable; default: both (set-password) or the user's (delete).",
)


@click.group("users")
def users_command() -> None:
    """List users' SCRAM credentials; set and delete their passwords."""


def _rows(found: dict[str, Any]) -> list[dict[str, Any]]:
    # By user and mechanism: Kafka answers in no particular order (4.x's KRaft
    # brokers list a user's mechanisms as their cache's map holds them).
    rows = [
        {"user": d.user, "mechanism": c.mechanism, "iterations": c.iterations}
        for d in found.values()
        for c in d.credential_infos
    ]
    return sorted(rows, key=lambda r: (r["user"], r["mechanism"]))


def _show(found: dict[str, Any], as_json: bool) -> None:
    rows = _rows(found)
    if as_json:
        click.echo(json.dumps(rows))
    elif rows:
        click.echo(
            format_table(
                ["USER", "MECHANISM", "ITERATIONS"],
                [(r["user"], r["mechanism"], r["iterations"]) for r in rows],
            )
        )


@users_command.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def users_list(cfg: dict[str, Any], as_json: bool) -> None:
    """Every user that has a SCRAM credential, with its mechanisms and iterations."""

    async def run(admin: Any) -> dict[str, Any]:
        found: dict[str, Any] = await admin.describe_user_scram_credentials()
        return found

    found = run_client(with_admin, cfg, run)
    _show(found, as_json)
    if not found and not as_json:
        click.echo("no users with SCRAM credentials", err=True)


@users_command.command("describe")
@click.argument("users", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def users_describe(cfg: dict[str, Any], users: tuple[str, ...], as_json: bool) -> None:
    """The SCRAM mechanisms and iteration counts of USERS (an error for one without any)."""

    async def run(admin: Any) -> dict[str, Any]:
        found: dict[str, Any] = await admin.describe_user_scram_credentials(users)
        return found

    _show(run_client(with_admin, cfg, run), as_json)


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        line = sys.stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        password = password[:-1] if password.endswith("\r") else password
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.UsageError("the password is empty")
    return password


@users_command.command("set-password")
@click.argument("user")
@_mechanism_option
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=4096,
    show_default=True,
    help="PBKDF2 rounds (brokers accept 4096 to 16384).",
)
@click.option(
    "--password-stdin", is_flag=True, help="Read the password from stdin's first line (no prompt)."
)
@admin_options
def users_set_password(
    cfg: dict[str, Any],
    user: str,
    mechanisms: tuple[str, ...],
    iterations: int,
    password_stdin: bool,
) -> None:
    """Set USER's SCRAM password (creating the user): asked for at a prompt, or
    read from stdin with --password-stdin."""
    from trafka.sdk import UserScramCredentialUpsertion

    password = _read_password(password_stdin)
    chosen = [m.upper() for m in mechanisms] or list(_MECHANISMS)

    async def run(admin: Any) -> None:
        for mechanism in dict.fromkeys(chosen):
            await admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(user, password, mechanism, iterations)]
            )
            click.echo(f"set the {mechanism} password of {user}", err=True)

    run_client(with_admin, cfg, run)


@users_command.command("delete")
@click.argument("user")
@_mechanism_option
@admin_options
def users_delete(cfg: dict[str, Any], user: str, mechanisms: tuple[str, ...]) -> None:
    """Delete USER's SCRAM credentials (those of -M, or all it has)."""
    from trafka.sdk import UserScramCredentialDeletion

    async def run(admin: Any) -> None:
        chosen = [m.upper() for m in mechanisms]
        if not chosen:
            found = await admin.describe_user_scram_credentials([user])
            chosen = [c.mechanism for c in found[user].credential_infos]
        for mechanism in dict.fromkeys(chosen):
            await admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, mechanism)])
            click.echo(f"deleted the {mechanism} credential of {user}", err=True)

    run_client(with_admin, cfg, run)
