"""``trafka tokens``: create, renew, expire and describe delegation tokens (KIP-48),
like Kafka's ``kafka-delegation-tokens.sh``.

Rules:

* The connection options, output conventions and exit statuses are those of
  :mod:`trafka.tools.clikit` (``-b``, ``-X``, ``-m``; data on stdout, notes
  on stderr; a client error exits 1, a usage error 2).
* Token requests need a connection that authenticated (SASL, or TLS with a
  client certificate) and did not log in with a token; the token belongs to
  the principal the client logs in as (``-X sasl.username=...``) unless
  ``create --owner`` names another.
* Principals are Kafka's ``Type:name`` (``User:bob``; a bare name is a
  ``User``); a malformed one is a usage error before anything is sent.
* The HMAC is the token's secret (the SCRAM password of a token login, and
  what renew and expire name the token by). ``create`` prints it, since
  handing it out is the point; ``describe`` prints it only with
  ``--show-hmac`` (in the table and in JSON). ``renew`` and ``expire`` take it
  with ``--hmac B64`` or, kept out of ``ps`` and the shell's history, from
  stdin's first line with ``--hmac-stdin``; it must be valid base64 (a usage
  error otherwise) and is never echoed.
* Timestamps print as UTC date-times (``2026-01-31T12:00:00Z``) in tables and
  as milliseconds since the epoch in JSON (the ``*_ms`` keys).
* ``expire`` without ``--expiry-time-period`` (or with a negative one) ends the
  token at once: the broker forgets it and answers the period itself as its
  expiry, printed as ``expired now``.
* The broker's refusals exit 1 with one line naming Kafka's error and what to
  do (tokens disabled, a PLAINTEXT listener, an unknown HMAC...).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import sys
from collections.abc import Iterable
from typing import Any

import click

from trafka.codec import ErrorCode, KafkaError

from .clikit import admin_options, format_table, run_client, with_admin

__all__ = ["format_time", "parse_hmac", "tokens_command"]

# Kafka's error -> why, and what to do about it.
_REFUSALS: dict[ErrorCode, str] = {
    ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED: (
        "delegation tokens are disabled on the broker: set delegation.token.secret.key "
        "in its configuration (brokerlite: delegation_token_secret_key)"
    ),
    ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: (
        "the broker takes token requests only from an authenticated connection that did "
        "not log in with a token: connect to a SASL listener (-X security.protocol="
        "SASL_PLAINTEXT or SASL_SSL, -X sasl.username=... -X sasl.password=...) as a user"
    ),
    ErrorCode.DELEGATION_TOKEN_NOT_FOUND: (
        "no token has that HMAC (it may have expired, or been expired, already)"
    ),
    ErrorCode.DELEGATION_TOKEN_EXPIRED: "the token has expired",
    ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH: (
        "only the token's owner or one of its renewers may renew or expire it"
    ),
    ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED: (
        "this client's principal may not create tokens for that owner: it needs "
        "CREATE_TOKENS on the owner (a User resource), or to be a super user"
    ),
    ErrorCode.INVALID_PRINCIPAL_TYPE: "owners and renewers must be User principals",
}


def _explained(exc: KafkaError, what: str) -> click.ClickException:
    name = exc.code.name if isinstance(exc.code, ErrorCode) else str(exc.code)
    reason = _REFUSALS.get(exc.code) if isinstance(exc.code, ErrorCode) else None
    if reason is None:
        return click.ClickException(f"{name}: {exc}")
    return click.ClickException(f"could not {what} ({name}): {reason}")


def _call(cfg: dict[str, Any], fn: Any, what: str) -> Any:
    """Run ``fn(admin)``, explaining the broker's refusals."""
    return run_client(with_admin, cfg, fn, explain=lambda exc: _explained(exc, what))


def format_time(ms: int) -> str:
    """A timestamp in milliseconds as a UTC date-time to the second
    (``2026-01-31T12:00:00Z``); a negative one (Kafka's "none") as ``-``."""
    if ms < 0:
        return "-"
    try:
        when = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_hmac(text: str, param_hint: str = "--hmac") -> bytes:
    """The HMAC a base64 string names (surrounding white space ignored).

    Raises:
        click.BadParameter: empty, or not base64.
    """
    text = text.strip()
    if not text:
        raise click.BadParameter("the HMAC is empty", param_hint=param_hint)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        # The message never repeats the value: it is a secret.
        raise click.BadParameter("the HMAC is not valid base64", param_hint=param_hint) from None


def _principals(
    ctx: click.Context, param: click.Parameter, values: Iterable[str] | str | None
) -> Any:
    """Check ``Type:name`` principals (a bare name becomes ``User:name``)."""
    from trafka.sdk.delegation_tokens import principal

    if values is None:
        return None
    single = isinstance(values, str)
    out = []
    for value in [values] if isinstance(values, str) else values:
        try:
            kind, name = principal(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        out.append(f"{kind}:{name}")
    return out[0] if single else tuple(dict.fromkeys(out))


def _read_hmac(value: str | None, from_stdin: bool) -> bytes:
    if value is not None and from_stdin:
        raise click.UsageError("give --hmac or --hmac-stdin, not both")
    if from_stdin:
        return parse_hmac(sys.stdin.readline(), "--hmac-stdin")
    if value is None:
        raise click.UsageError("give the token's HMAC: --hmac B64, or --hmac-stdin")
    return parse_hmac(value)


_hmac_options = (
    click.option(
        "--hmac",
        "hmac_text",
        metavar="B64",
        help="The token's HMAC, in base64 (as create printed it).",
    ),
    click.option(
        "--hmac-stdin",
        is_flag=True,
        help="Read the HMAC from stdin's first line instead (out of ps and shell history).",
    ),
)


def _with_hmac_options(fn: Any) -> Any:
    for option in reversed(_hmac_options):
        fn = option(fn)
    return fn


def _as_dict(token: Any, show_hmac: bool) -> dict[str, Any]:
    info = token.token_info
    out: dict[str, Any] = {"token_id": info.token_id}
    if show_hmac:
        out["hmac"] = token.hmac_base64
    out.update(
        owner=info.owner,
        token_requester=info.token_requester,
        renewers=list(info.renewers),
        issue_timestamp_ms=info.issue_timestamp_ms,
        expiry_timestamp_ms=info.expiry_timestamp_ms,
        max_timestamp_ms=info.max_timestamp_ms,
    )
    return out


@click.group("tokens")
def tokens_command() -> None:
    """Create, renew, expire and describe delegation tokens (KIP-48).

    \b
    A token lets a process without a password of its own log in as the token's
    owner: SCRAM with the token id as the user name, the HMAC (base64) as the
    password, and -X sasl.scram.tokenauth=true. The broker needs
    delegation.token.secret.key, and token requests a SASL connection.
    """


@tokens_command.command("create")
@click.option(
    "--renewer",
    "--renewer-principal",
    "renewers",
    multiple=True,
    metavar="TYPE:NAME",
    callback=_principals,
    help="A principal that may renew and expire the token besides its owner (repeatable).",
)
@click.option(
    "--owner",
    "--owner-principal",
    "owner",
    metavar="TYPE:NAME",
    callback=_principals,
    help="Create the token for this owner (needs CREATE_TOKENS on it; Kafka 3.3+). "
    "Default: the client's principal.",
)
@click.option(
    "--max-life-time-period",
    "max_lifetime",
    type=int,
    default=-1,
    show_default=True,
    metavar="MS",
    help="The token's maximum lifetime in ms; the broker's delegation.token.max.lifetime.ms "
    "caps it, and -1 means that.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (timestamps in ms).")
@admin_options
def tokens_create(
    cfg: dict[str, Any],
    renewers: tuple[str, ...],
    owner: str | None,
    max_lifetime: int,
    as_json: bool,
) -> None:
    """Create a token, and print it with its HMAC.

    The HMAC is the token's secret (the password of a token login): printing
    it is this command's purpose, so keep the output where only the token's
    users can read it.
    """

    async def run(admin: Any) -> Any:
        return await admin.create_delegation_token(
            renewers=renewers, owner=owner, max_lifetime_ms=max_lifetime
        )

    token = _call(cfg, run, "create a delegation token")
    shown = _as_dict(token, show_hmac=True)
    if as_json:
        click.echo(json.dumps(shown))
        return
    fields = [
        ("token id", shown["token_id"]),
        ("hmac", shown["hmac"]),
        ("owner", shown["owner"]),
        ("requester", shown["token_requester"]),
        ("renewers", ",".join(shown["renewers"]) or "-"),
        ("issued", format_time(shown["issue_timestamp_ms"])),
        ("expires", format_time(shown["expiry_timestamp_ms"])),
        ("max", format_time(shown["max_timestamp_ms"])),
    ]
    width = max(len(k) for k, _ in fields) + 1
    for key, value in fields:
        click.echo(f"{key + ':':<{width}} {value}")
    click.echo(
        "the HMAC is the token's secret: log in with SCRAM as the token id, the HMAC as "
        "the password, and -X sasl.scram.tokenauth=true",
        err=True,
    )


@tokens_command.command("renew")
@_with_hmac_options
@click.option(
    "--renew-time-period",
    "period",
    type=int,
    default=-1,
    show_default=True,
    metavar="MS",
    help="It then expires this long from now; the broker's delegation.token.expiry.time.ms "
    "caps it, and -1 means that. Never past the token's max.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (timestamp in ms).")
@admin_options
def tokens_renew(
    cfg: dict[str, Any], hmac_text: str | None, hmac_stdin: bool, period: int, as_json: bool
) -> None:
    """Renew the token with that HMAC (its owner or a renewer may); print its new expiry."""
    hmac = _read_hmac(hmac_text, hmac_stdin)

    async def run(admin: Any) -> int:
        expiry: int = await admin.renew_delegation_token(hmac, renew_period_ms=period)
        return expiry

    expiry = _call(cfg, run, "renew the delegation token")
    if as_json:
        click.echo(json.dumps({"expiry_timestamp_ms": expiry}))
    else:
        click.echo(format_time(expiry))


@tokens_command.command("expire")
@_with_hmac_options
@click.option(
    "--expiry-time-period",
    "period",
    type=int,
    default=-1,
    show_default=True,
    metavar="MS",
    help="Expire it this long from now (never past its max); negative: now, and the broker "
    "forgets it.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (timestamp in ms).")
@admin_options
def tokens_expire(
    cfg: dict[str, Any], hmac_text: str | None, hmac_stdin: bool, period: int, as_json: bool
) -> None:
    """Expire the token with that HMAC (its owner or a renewer may), now or later;
    print the expiry the broker answered."""
    hmac = _read_hmac(hmac_text, hmac_stdin)

    async def run(admin: Any) -> int:
        expiry: int = await admin.expire_delegation_token(hmac, expiry_period_ms=period)
        return expiry

    expiry = _call(cfg, run, "expire the delegation token")
    if as_json:
        click.echo(json.dumps({"expiry_timestamp_ms": expiry}))
    elif period < 0:
        click.echo("expired now")
    else:
        click.echo(format_time(expiry))


@tokens_command.command("describe")
@click.option(
    "--owner-principal",
    "--owner",
    "owners",
    multiple=True,
    metavar="TYPE:NAME",
    callback=_principals,
    help="Only the tokens this principal owns, requested or may renew (repeatable). "
    "Default: every token the client may see.",
)
@click.option(
    "--show-hmac", is_flag=True, help="Also print each token's HMAC (its secret; off by default)."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (timestamps in ms).")
@admin_options
def tokens_describe(
    cfg: dict[str, Any], owners: tuple[str, ...], show_hmac: bool, as_json: bool
) -> None:
    """The tokens the client may see: its own, those it requested or may renew,
    and those its ACLs let it describe."""

    async def run(admin: Any) -> list[Any]:
        found: list[Any] = await admin.describe_delegation_tokens(owners or None)
        return found

    tokens = _call(cfg, run, "describe delegation tokens")
    rows = [_as_dict(t, show_hmac) for t in tokens]
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no delegation tokens" + (" of those owners" if owners else ""), err=True)
        return
    headers = ["TOKEN-ID", *(["HMAC"] if show_hmac else [])]
    headers += ["OWNER", "REQUESTER", "RENEWERS", "ISSUED", "EXPIRES", "MAX"]
    click.echo(
        format_table(
            headers,
            [
                (
                    r["token_id"],
                    *([r["hmac"]] if show_hmac else []),
                    r["owner"],
                    r["token_requester"],
                    ",".join(r["renewers"]) or None,
                    format_time(r["issue_timestamp_ms"]),
                    format_time(r["expiry_timestamp_ms"]),
                    format_time(r["max_timestamp_ms"]),
                )
                for r in rows
            ],
        )
    )
