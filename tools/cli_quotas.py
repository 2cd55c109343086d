"""``trafka quotas``: describe and alter client quotas (KIP-546), like Kafka's
``kafka-configs.sh --entity-type users/clients/ips``.

Rules:

* The connection options, output conventions and exit statuses are those of
  :mod:`trafka.tools.clikit` (``-b``, ``-X``, ``-m``; data on stdout, notes
  on stderr; a client error exits 1, a usage error 2).
* An entity is given with ``--user NAME`` or ``--user-default``, ``--client-id
  NAME`` or ``--client-id-default``, ``--ip ADDRESS`` or ``--ip-default`` (at
  most one of each pair; ``ip`` never with the others). A default entity's
  quotas apply to every name that has none of its own; tables write it
  ``<default>``, JSON ``null``.
* ``describe`` turns the entity options into a filter: each names the part an
  entity must have; other parts are allowed unless ``--strict``. Without any,
  it lists every quota.
* ``alter`` changes exactly the entity given: ``--add-config`` sets keys
  (``key=value``, comma-separated and repeatable), ``--delete-config``
  removes them (removing a key that is not set is no error). ``--dry-run``
  has the broker validate the change (``validate_only``) and changes nothing.
* The broker's refusals are explained: CLUSTER_AUTHORIZATION_FAILED (the
  principal lacks DESCRIBE_CONFIGS or ALTER_CONFIGS on the cluster) and
  INVALID_REQUEST (with the broker's reason: an unknown key, one the entity
  does not take, a value of the wrong kind).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import click

from trafka.codec import ErrorCode, KafkaError

from .clikit import admin_options, format_table, run_client, with_admin

__all__ = ["format_value", "quotas_command"]

_ENTITY_TYPES = (("user", "user"), ("client_id", "client-id"), ("ip", "ip"))


def _entity_options(fn: Any) -> Any:
    for option, metavar, what in reversed(
        (
            ("user", "NAME", "A user (its principal's name; ANONYMOUS without SASL)."),
            ("client-id", "NAME", "A client id."),
            ("ip", "ADDRESS", "A client IP address."),
        )
    ):
        dest = option.replace("-", "_")
        fn = click.option(
            f"--{option}-default",
            f"{dest}_default",
            is_flag=True,
            help=f"The default {option} entity (for every {option} without quotas of its own).",
        )(fn)
        fn = click.option(f"--{option}", dest, metavar=metavar, help=what)(fn)
    return fn


def _chosen(options: dict[str, Any]) -> list[tuple[str, str | None]]:
    """The entity parts the options name: (entity type, name or None for the default)."""
    parts: list[tuple[str, str | None]] = []
    for dest, etype in _ENTITY_TYPES:
        name, default = options[dest], options[f"{dest}_default"]
        flag = etype.replace("_", "-")
        if name is not None and default:
            raise click.UsageError(f"give --{flag} or --{flag}-default, not both")
        if name is not None:
            if not name:
                raise click.BadParameter("the name must not be empty", param_hint=f"--{flag}")
            parts.append((etype, name))
        elif default:
            parts.append((etype, None))
    types = {t for t, _ in parts}
    if "ip" in types and len(types) > 1:
        raise click.UsageError("an ip entity cannot be combined with --user or --client-id")
    return parts


def format_value(value: float) -> str:
    """A quota value as kafka-configs.sh would take it back: whole numbers without ``.0``."""
    return str(int(value)) if value.is_integer() and abs(value) < 2**63 else repr(value)


def _not_allowed(what: str, operation: str) -> str:
    return (
        f"this client's principal may not {what} (CLUSTER_AUTHORIZATION_FAILED): it needs "
        f"{operation} on the cluster, or to be a super user; connect as another user with "
        f"-X sasl.username=... or ask an administrator"
    )


def _explained(exc: KafkaError, what: str, operation: str) -> click.ClickException:
    if exc.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        return click.ClickException(_not_allowed(what, operation))
    name = exc.code.name if isinstance(exc.code, ErrorCode) else str(exc.code)
    if exc.code == ErrorCode.INVALID_REQUEST:
        # The broker's reason, without the code the sentence already names.
        reason = str(exc).partition("] ")[2] or str(exc)
        return click.ClickException(f"the broker refused to {what} (INVALID_REQUEST): {reason}")
    return click.ClickException(f"{name}: {exc}")


def _call(cfg: dict[str, Any], fn: Any, what: str, operation: str) -> Any:
    """Run ``fn(admin)``, explaining the broker's refusals."""
    return run_client(with_admin, cfg, fn, explain=lambda exc: _explained(exc, what, operation))


def _rows(found: dict[Any, dict[str, float]]) -> list[dict[str, Any]]:
    return [{"entity": entity.as_dict(), "quotas": quotas} for entity, quotas in found.items()]


def _show(found: dict[Any, dict[str, float]], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(_rows(found)))
        return
    rows = [
        (str(entity), key, format_value(value))
        for entity, quotas in found.items()
        for key, value in quotas.items()
    ]
    if rows:
        click.echo(format_table(["ENTITY", "QUOTA", "VALUE"], rows))


@click.group("quotas")
def quotas_command() -> None:
    """Describe and alter client quotas (byte rates, request percentage...).

    \b
    Entities: --user NAME | --user-default, --client-id NAME | --client-id-default,
    --ip ADDRESS | --ip-default (ip alone). Keys: producer_byte_rate and
    consumer_byte_rate (bytes/s), request_percentage (% of one broker thread),
    controller_mutation_rate (partitions/s), connection_creation_rate (ip only).
    """


@quotas_command.command("describe")
@_entity_options
@click.option("--strict", is_flag=True, help="Only entities with no parts but those given.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def quotas_describe(cfg: dict[str, Any], strict: bool, as_json: bool, **options: Any) -> None:
    """The quotas of the entities that have the parts given (every quota without any)."""
    from trafka.sdk import ClientQuotaFilterComponent as Filter

    components = [
        Filter.of_default_entity(t) if name is None else Filter.of_entity(t, name)
        for t, name in _chosen(options)
    ]

    async def run(admin: Any) -> dict[Any, dict[str, float]]:
        found: dict[Any, dict[str, float]] = await admin.describe_client_quotas(
            components, strict=strict
        )
        return found

    found = _call(cfg, run, "describe client quotas", "DESCRIBE_CONFIGS")
    _show(found, as_json)
    if not found and not as_json:
        click.echo(
            "no client quotas match" if components or strict else "no client quotas", err=True
        )


def _split(values: Iterable[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _parse_settings(values: Iterable[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in _split(values):
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="--add-config")
        try:
            value = float(text)
        except ValueError:
            raise click.BadParameter(
                f"{key}: {text.strip()!r} is not a number", param_hint="--add-config"
            ) from None
        if key in out:
            raise click.BadParameter(f"{key} given twice", param_hint="--add-config")
        out[key] = value
    return out


@quotas_command.command("alter")
@_entity_options
@click.option(
    "--add-config",
    "add",
    multiple=True,
    metavar="KEY=VALUE[,...]",
    help="Set quotas, e.g. producer_byte_rate=1048576,consumer_byte_rate=2097152 (repeatable).",
)
@click.option(
    "--delete-config",
    "delete",
    multiple=True,
    metavar="KEY[,...]",
    help="Remove quotas, e.g. request_percentage (repeatable).",
)
@click.option(
    "--dry-run", is_flag=True, help="Have the broker validate the change; change nothing."
)
@admin_options
def quotas_alter(
    cfg: dict[str, Any],
    add: tuple[str, ...],
    delete: tuple[str, ...],
    dry_run: bool,
    **options: Any,
) -> None:
    """Set (--add-config) and remove (--delete-config) one entity's quotas."""
    from trafka.sdk import ClientQuotaAlteration, ClientQuotaEntity

    parts = _chosen(options)
    if not parts:
        raise click.UsageError(
            "give the entity: --user/--user-default, --client-id/--client-id-default "
            "(or both), or --ip/--ip-default"
        )
    settings = _parse_settings(add)
    removals = list(dict.fromkeys(_split(delete)))
    if not settings and not removals:
        raise click.UsageError("give --add-config and/or --delete-config")
    both = sorted(set(settings) & set(removals))
    if both:
        raise click.UsageError(f"both set and deleted: {', '.join(both)}")
    entity = ClientQuotaEntity(parts)
    ops: dict[str, float | None] = {**settings, **dict.fromkeys(removals)}
    alteration = ClientQuotaAlteration(entity, ops)

    async def run(admin: Any) -> None:
        await admin.alter_client_quotas([alteration], validate_only=dry_run)

    _call(cfg, run, "alter client quotas", "ALTER_CONFIGS")
    changes = [f"{k}={format_value(v)}" for k, v in settings.items()]
    changes += [f"{k} removed" for k in removals]
    if dry_run:
        click.echo(
            f"dry run: the broker accepts for {entity}: {', '.join(changes)}; nothing changed",
            err=True,
        )
    else:
        click.echo(f"altered the quotas of {entity}: {', '.join(changes)}", err=True)
