"""``trafka acls``: list, add and remove ACLs (KIP-140), like Kafka's ``kafka-acls.sh``.

Rules:

* The connection options, output conventions and exit statuses are those of
  :mod:`trafka.tools.clikit` (``-b``, ``-X``, ``-m``; data on stdout, notes
  on stderr; a client error exits 1, a usage error 2).
* ``list`` and ``remove`` take the same filter options; each one left out
  matches anything. A name given with ``--topic``/``--group``/
  ``--transactional-id`` is matched exactly (either pattern type) unless
  ``--pattern-type`` says otherwise: ``match`` finds every ACL that applies to
  the named resource (the literal name, ``*`` and each prefix of it),
  ``literal`` or ``prefixed`` only ACLs of that pattern type.
* ``remove`` without any filter is refused unless ``--all`` says that every
  ACL is meant; ``--dry-run`` lists what it would remove and changes nothing.
* ``add`` creates the cross product of its ``--principal`` and
  ``--operation`` options (each repeatable) on one resource pattern; an ACL
  that exists already is no error (the broker keeps one copy).
* Two refusals are explained rather than passed on: SECURITY_DISABLED (the
  broker has no authorizer) and CLUSTER_AUTHORIZATION_FAILED (the client's
  principal may not describe or change ACLs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import click

from trafka.codec import ErrorCode, KafkaError

from .clikit import admin_options, format_table, run_client, with_admin

__all__ = ["acls_command", "parse_operation"]

_RESOURCE_OPTIONS = ("topic", "group", "transactional_id", "cluster")
_CLUSTER = "kafka-cluster"

NO_AUTHORIZER = (
    "the broker has no authorizer, so it keeps no ACLs (SECURITY_DISABLED); "
    "start brokerlite with `trafka broker --authorizer`, or set authorizer.class.name "
    "on a Kafka broker"
)


def _not_allowed(what: str, operation: str) -> str:
    return (
        f"this client's principal may not {what} (CLUSTER_AUTHORIZATION_FAILED): it needs "
        f"{operation} on the cluster, or to be a super user; connect as another user with "
        f"-X sasl.username=... or ask an administrator"
    )


def parse_operation(text: str) -> Any:
    """An :class:`~trafka.sdk.AclOperation` from its name in any common spelling:
    ``READ``, ``read``, ``describe-configs``, ``DescribeConfigs``.

    Raises:
        click.BadParameter: no operation (or ANY/UNKNOWN, which no ACL holds).
    """
    from trafka.sdk import AclOperation

    key = text.strip().replace("-", "").replace("_", "").replace(" ", "").upper()
    for op in AclOperation:
        if op.name.replace("_", "") == key and op not in (AclOperation.ANY, AclOperation.UNKNOWN):
            return op
    names = ", ".join(
        o.name for o in AclOperation if o not in (AclOperation.ANY, AclOperation.UNKNOWN)
    )
    raise click.BadParameter(f"{text!r} is not an operation ({names})", param_hint="--operation")


def _principal(text: str) -> str:
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise click.BadParameter(
            f"{text!r} is not Type:Name (User:alice, or User:* for every principal)",
            param_hint="--principal",
        )
    return text


def _resource_options(fn: Any) -> Any:
    fn = click.option("--cluster", is_flag=True, help=f"The cluster resource ({_CLUSTER}).")(fn)
    fn = click.option(
        "--transactional-id", metavar="NAME", help="A transactional id (`*`: every one)."
    )(fn)
    fn = click.option("--group", metavar="NAME", help="A consumer group (`*`: every group).")(fn)
    fn = click.option("--topic", metavar="NAME", help="A topic (`*`: every topic).")(fn)
    return fn


def _chosen_resource(options: dict[str, Any]) -> tuple[Any, str | None] | None:
    """The resource type and name the options name, None for none; a usage error for two."""
    from trafka.sdk import AclResourceType

    given = [
        (AclResourceType[key.upper()], _CLUSTER if key == "cluster" else options[key])
        for key in _RESOURCE_OPTIONS
        if options.get(key) not in (None, False)
    ]
    if len(given) > 1:
        raise click.UsageError("give one of --topic, --group, --transactional-id and --cluster")
    return given[0] if given else None


def _filter_options(fn: Any) -> Any:
    fn = click.option("--deny", "permission", flag_value="DENY", help="Only DENY ACLs.")(fn)
    fn = click.option("--allow", "permission", flag_value="ALLOW", help="Only ALLOW ACLs.")(fn)
    fn = click.option(
        "--operation",
        "operation",
        metavar="OP",
        help="Only ACLs of this operation (READ, WRITE, ALL...; ALL matches ACLs of ALL only).",
    )(fn)
    fn = click.option("--host", metavar="HOST", help="Only ACLs for this host (`*`: any host).")(fn)
    fn = click.option(
        "--principal", metavar="TYPE:NAME", help="Only ACLs of this principal (User:alice)."
    )(fn)
    fn = click.option(
        "--pattern-type",
        type=click.Choice(["any", "match", "literal", "prefixed"], case_sensitive=False),
        default="any",
        show_default=True,
        help="How the resource name is matched (see `trafka acls --help`).",
    )(fn)
    fn = click.option("--prefixed", is_flag=True, help="Short for --pattern-type prefixed.")(fn)
    return _resource_options(fn)


def _build_filter(options: dict[str, Any]) -> Any:
    from trafka.sdk import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AclResourceType,
        PatternType,
    )

    resource = _chosen_resource(options)
    pattern = options["pattern_type"].upper()
    if options["prefixed"]:
        if pattern not in ("ANY", "PREFIXED"):
            raise click.UsageError("--prefixed and --pattern-type disagree")
        pattern = "PREFIXED"
    rtype, name = resource if resource is not None else (AclResourceType.ANY, None)
    return AclBindingFilter(
        resource_type=rtype,
        name=name,
        pattern_type=PatternType[pattern],
        principal=_principal(options["principal"]) if options["principal"] else None,
        host=options["host"],
        operation=(
            parse_operation(options["operation"]) if options["operation"] else AclOperation.ANY
        ),
        permission=(
            AclPermissionType[options["permission"]]
            if options["permission"]
            else AclPermissionType.ANY
        ),
    )


def _is_open(f: Any) -> bool:
    from trafka.sdk import AclBindingFilter, PatternType

    return bool(f == AclBindingFilter() or f == AclBindingFilter(pattern_type=PatternType.MATCH))


def acl_row(b: Any) -> dict[str, Any]:
    """One ACL as the JSON object ``--json`` prints."""
    return {
        "resource_type": b.resource_type.name,
        "name": b.name,
        "pattern_type": b.pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission": b.permission.name,
    }


def _show(bindings: Iterable[Any], as_json: bool) -> None:
    # Every field in the key: Kafka lists ACLs in no set order (two of one
    # principal on one topic came either way round from 4.x's StandardAuthorizer).
    # Operations and permissions in Kafka's order of their codes (READ before DESCRIBE).
    ordered = sorted(
        bindings,
        key=lambda b: (
            b.resource_type.name,
            b.name,
            b.pattern_type.name,
            b.principal,
            b.host,
            int(b.operation),
            int(b.permission),
        ),
    )
    rows = [acl_row(b) for b in ordered]
    if as_json:
        click.echo(json.dumps(rows))
    elif rows:
        headers = [
            "RESOURCE-TYPE",
            "NAME",
            "PATTERN",
            "PRINCIPAL",
            "HOST",
            "OPERATION",
            "PERMISSION",
        ]
        click.echo(format_table(headers, [list(r.values()) for r in rows]))


def _explained(exc: KafkaError, what: str, operation: str) -> click.ClickException:
    if exc.code == ErrorCode.SECURITY_DISABLED:
        return click.ClickException(NO_AUTHORIZER)
    if exc.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        return click.ClickException(_not_allowed(what, operation))
    name = exc.code.name if isinstance(exc.code, ErrorCode) else str(exc.code)
    return click.ClickException(f"{name}: {exc}")


def _call(cfg: dict[str, Any], fn: Any, what: str, operation: str) -> Any:
    """Run ``fn(admin)``, explaining an authorizer's refusals."""
    return run_client(with_admin, cfg, fn, explain=lambda exc: _explained(exc, what, operation))


@click.group("acls")
def acls_command() -> None:
    """List, add and remove ACLs (the broker needs an authorizer).

    \b
    Filters (list, remove): --topic/--group/--transactional-id NAME or --cluster,
    --pattern-type any|match|literal|prefixed (match: every ACL that applies to
    the named resource: its literal name, * and each prefix), --principal,
    --host, --operation and --allow/--deny; each one left out matches anything.
    """


@acls_command.command("list")
@_filter_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@admin_options
def acls_list(cfg: dict[str, Any], as_json: bool, **options: Any) -> None:
    """The ACLs the filters match (every ACL without any)."""
    acl_filter = _build_filter(options)

    async def run(admin: Any) -> list[Any]:
        found: list[Any] = await admin.describe_acls(acl_filter)
        return found

    found = _call(cfg, run, "describe ACLs", "DESCRIBE")
    _show(found, as_json)
    if not found and not as_json:
        click.echo("no ACLs match" if not _is_open(acl_filter) else "no ACLs", err=True)


@acls_command.command("add")
@click.option(
    "--allow",
    "permission",
    flag_value="ALLOW",
    help="Allow the operations (one of --allow/--deny).",
)
@click.option("--deny", "permission", flag_value="DENY", help="Deny the operations.")
@click.option(
    "--principal",
    "principals",
    metavar="TYPE:NAME",
    multiple=True,
    required=True,
    help="Who: User:alice, or User:* for every principal (repeatable).",
)
@click.option(
    "--operation",
    "operations",
    metavar="OP",
    multiple=True,
    required=True,
    help="READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, "
    "ALTER_CONFIGS, IDEMPOTENT_WRITE or ALL (repeatable).",
)
@_resource_options
@click.option(
    "--prefixed", is_flag=True, help="The name is a prefix: the ACL covers every name it starts."
)
@click.option("--host", default="*", show_default=True, help="The client address it applies to.")
@admin_options
def acls_add(
    cfg: dict[str, Any],
    permission: str | None,
    principals: tuple[str, ...],
    operations: tuple[str, ...],
    prefixed: bool,
    host: str,
    **options: Any,
) -> None:
    """Allow or deny principals operations on one resource.

    One ACL is added for each --principal and each --operation.
    """
    from trafka.sdk import AclBinding, AclPermissionType, PatternType

    if permission is None:
        raise click.UsageError("give --allow or --deny")
    resource = _chosen_resource(options)
    if resource is None:
        raise click.UsageError(
            "give the resource: --topic, --group, --transactional-id or --cluster"
        )
    rtype, name = resource
    if not name:
        raise click.UsageError("the resource name must not be empty")
    if not host:
        raise click.BadParameter("the host must not be empty (`*` for any)", param_hint="--host")
    ops = list(dict.fromkeys(parse_operation(o) for o in operations))
    bindings = [
        AclBinding(
            rtype,
            name,
            PatternType.PREFIXED if prefixed else PatternType.LITERAL,
            _principal(p),
            host,
            op,
            AclPermissionType[permission],
        )
        for p in dict.fromkeys(principals)
        for op in ops
    ]

    async def run(admin: Any) -> dict[Any, KafkaError | None]:
        created: dict[Any, KafkaError | None] = await admin.create_acls(bindings)
        return created

    created = _call(cfg, run, "create ACLs", "ALTER")
    failures = [(b, e) for b, e in created.items() if e is not None]
    for b, error in created.items():
        if error is None:
            click.echo(f"added {_sentence(b)}", err=True)
    if failures:
        codes = {e.code for _, e in failures}
        if codes == {ErrorCode.SECURITY_DISABLED}:
            raise click.ClickException(NO_AUTHORIZER)
        if codes == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED}:
            raise click.ClickException(_not_allowed("create ACLs", "ALTER"))
        for b, error in failures:
            click.echo(f"Error: not added: {_sentence(b)}: {_reason(error)}", err=True)
        raise click.exceptions.Exit(1)


def _reason(error: KafkaError) -> str:
    name = error.code.name if isinstance(error.code, ErrorCode) else str(error.code)
    text = str(error)
    _, sep, rest = text.rpartition("): ")
    return f"{name}: {rest if sep else text}"


def _sentence(b: Any) -> str:
    pattern = " (prefix)" if b.pattern_type.name == "PREFIXED" else ""
    where = "" if b.host == "*" else f" from {b.host}"
    return (
        f"{b.permission.name} {b.principal}{where} {b.operation.name} on "
        f"{b.resource_type.name.lower().replace('_', '-')} {b.name}{pattern}"
    )


@acls_command.command("remove")
@_filter_options
@click.option("--all", "everything", is_flag=True, help="Remove every ACL (no filter needed).")
@click.option("--dry-run", is_flag=True, help="List what would be removed; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the removed ACLs as JSON.")
@admin_options
def acls_remove(
    cfg: dict[str, Any], everything: bool, dry_run: bool, as_json: bool, **options: Any
) -> None:
    """Remove the ACLs the filters match, and print them."""
    acl_filter = _build_filter(options)
    if _is_open(acl_filter) and not everything:
        raise click.UsageError("no filter given: add --all to remove every ACL")

    if dry_run:

        async def look(admin: Any) -> list[Any]:
            found: list[Any] = await admin.describe_acls(acl_filter)
            return found

        found = _call(cfg, look, "describe ACLs", "DESCRIBE")
        _show(found, as_json)
        click.echo(f"dry run: {len(found)} ACL(s) would be removed; nothing changed", err=True)
        return

    async def run(admin: Any) -> Any:
        deleted = await admin.delete_acls([acl_filter])
        return deleted[acl_filter]

    removed = _call(cfg, run, "delete ACLs", "ALTER")
    if isinstance(removed, KafkaError):
        raise _explained(removed, "delete ACLs", "ALTER")
    _show(removed, as_json)
    click.echo(f"removed {len(removed)} ACL(s)", err=True)
