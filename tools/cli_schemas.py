"""``trafka schemas``: a Schema Registry's subjects, versions, schemas and
compatibility settings, over Confluent's REST API (brokerlite's registry,
``trafka broker --schema-registry-listen``, or any other).

Rules:

* Every subcommand takes ``-r/--schema-registry URL`` (default
  ``$TRAFKA_SCHEMA_REGISTRY_URL``, then ``http://127.0.0.1:8081``) and
  ``-m/--timeout`` (seconds per request).
* Data on stdout (a schema's text, ids, versions, tables); notes on stderr.
  As the client commands (:mod:`trafka.tools.clikit`): what the registry
  refuses (an unknown subject or version, an incompatible schema, an invalid
  one) or an unreachable registry exits 1 with one line, the registry's
  message and error code; a usage error exits 2. ``check`` exits 1 when the
  schema is incompatible, after printing the registry's reasons.
* A schema file's type is ``--type``, else guessed from its name: ``.proto``
  is Protobuf, ``.avsc`` Avro, a JSON document with ``$schema`` JSON Schema,
  anything else Avro (the registry's default).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from .cli_serdes import ENV_REGISTRY, registry_client, registry_error
from .clikit import echo_err, format_table

__all__ = ["DEFAULT_REGISTRY", "schema_type_of", "schemas_command"]

DEFAULT_REGISTRY = "http://127.0.0.1:8081"
_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json": "JSON"}
_LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)


def schema_type_of(path: str, text: str, given: str | None) -> str:
    """The registry's type of a schema file (see the module doc)."""
    if given is not None:
        return _TYPES[given]
    if path.endswith(".proto"):
        return "PROTOBUF"
    if path.endswith(".avsc"):
        return "AVRO"
    try:
        doc = json.loads(text)
    except ValueError:
        return "AVRO"
    return "JSON" if isinstance(doc, dict) and "$schema" in doc else "AVRO"


def _registry_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The registry options; the command receives a blocking client as ``registry``."""

    @functools.wraps(fn)
    def wrapper(schema_registry: str, timeout: float, **kwargs: Any) -> Any:
        from trafka.sdk.schemas import SchemaRegistryError

        registry = registry_client(schema_registry, timeout)
        try:
            return fn(registry=registry, **kwargs)
        except SchemaRegistryError as exc:
            raise registry_error(exc) from None
        finally:
            registry.close()

    wrapper = click.option(
        "-m",
        "--timeout",
        type=click.FloatRange(min=0.1),
        default=10.0,
        show_default=True,
        help="Seconds per request.",
    )(wrapper)
    return click.option(
        "-r",
        "--schema-registry",
        envvar=ENV_REGISTRY,
        default=DEFAULT_REGISTRY,
        show_default=True,
        metavar="URL",
        help=f"The Schema Registry's URL (also ${ENV_REGISTRY}).",
    )(wrapper)


def _schema_of(path: str, given: str | None, references: tuple[str, ...]) -> Any:
    from trafka.sdk.schemas import Schema, SchemaReference

    text = Path(path).read_text(encoding="utf-8")
    refs = []
    for item in references:
        name, _, at = item.partition("=")
        subject, _, version = at.rpartition(":")
        if not name or not subject or not version.isdigit():
            raise click.BadParameter(
                f"{item!r} is not NAME=SUBJECT:VERSION", param_hint="--reference"
            )
        refs.append(SchemaReference(name, subject, int(version)))
    return Schema(text, schema_type_of(path, text, given), tuple(refs))


def _pretty(text: str) -> str:
    """A JSON schema indented; other text (a .proto) as it is."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text.rstrip("\n")


_type_option = click.option(
    "--type",
    "schema_type",
    type=click.Choice(sorted(_TYPES)),
    help="The schema's type [default: from the file's name and text].",
)
_reference_option = click.option(
    "--reference",
    "references",
    multiple=True,
    metavar="NAME=SUBJECT:VERSION",
    help="A schema this one imports (repeatable).",
)


@click.group("schemas")
def schemas_command() -> None:
    """List, show, register, check and delete schemas in a Schema Registry; show and set compatibility."""


@schemas_command.command("list")
@click.option("--deleted", is_flag=True, help="With the soft-deleted subjects.")
@_registry_options
def list_subjects(registry: Any, deleted: bool) -> None:
    """The registry's subjects, one a line."""
    for subject in sorted(registry.get_subjects(deleted)):
        click.echo(subject)


@schemas_command.command("versions")
@click.argument("subject")
@_registry_options
def list_versions(registry: Any, subject: str) -> None:
    """SUBJECT's versions: number, schema id and type."""
    rows = []
    for number in registry.get_versions(subject):
        registered = registry.get_version(subject, number)
        rows.append((number, registered.schema_id, registered.schema.schema_type))
    click.echo(format_table(["VERSION", "ID", "TYPE"], rows))


@schemas_command.command("show")
@click.argument("subject", required=False)
@click.argument("version", required=False, default="latest")
@click.option("--id", "schema_id", type=click.IntRange(min=0), help="The schema with this id.")
@_registry_options
def show(registry: Any, subject: str | None, version: str, schema_id: int | None) -> None:
    """A schema's text: SUBJECT's VERSION (default latest), or --id N's.

    Its subject, version, id, type and references are said on stderr.
    """
    if (subject is None) == (schema_id is None):
        raise click.UsageError("give SUBJECT [VERSION] or --id N")
    if schema_id is not None:
        schema = registry.get_schema(schema_id)
        held = registry.request("GET", f"/schemas/ids/{schema_id}/versions")
        where = ", ".join(f"{v['subject']} version {v['version']}" for v in held) or "no subject"
        echo_err(f"id {schema_id}, {schema.schema_type}, in {where}")
    else:
        if version != "latest" and not version.isdigit():
            raise click.BadParameter(f"{version!r}: a number or latest", param_hint="VERSION")
        body = registry.request(
            "GET", f"/subjects/{quote(subject or '', safe='')}/versions/{version}"
        )
        from trafka.sdk.schemas import RegisteredSchema

        registered = RegisteredSchema.from_json(body)
        schema = registered.schema
        echo_err(
            f"{subject} version {registered.version}, id {registered.schema_id}, {schema.schema_type}"
        )
    for ref in schema.references:
        echo_err(f"references {ref.name} = {ref.subject} version {ref.version}")
    click.echo(_pretty(schema.schema_str))


@schemas_command.command("register")
@click.argument("subject")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@_type_option
@_reference_option
@click.option("--normalize", is_flag=True, help="Ask the registry to normalize the schema.")
@_registry_options
def register(
    registry: Any,
    subject: str,
    file: str,
    schema_type: str | None,
    references: tuple[str, ...],
    normalize: bool,
) -> None:
    """Register FILE's schema under SUBJECT; print its id (the same id when it is there already)."""
    schema = _schema_of(file, schema_type, references)
    registered = registry.register_schema(subject, schema, normalize)
    click.echo(registered.schema_id)


@schemas_command.command("check")
@click.argument("subject")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--version", default="latest", show_default=True, help="Against this version only.")
@_type_option
@_reference_option
@_registry_options
def check(
    registry: Any,
    subject: str,
    file: str,
    version: str,
    schema_type: str | None,
    references: tuple[str, ...],
) -> None:
    """Whether FILE's schema may be registered under SUBJECT, by its compatibility level.

    Exit status 0 when compatible; 1 when not, with the registry's reasons on stderr.
    """
    schema = _schema_of(file, schema_type, references)
    body = registry.request(
        "POST",
        f"/compatibility/subjects/{quote(subject, safe='')}/versions/{version}",
        schema.to_json(),
        {"verbose": "true"},
    )
    if body.get("is_compatible"):
        click.echo("compatible")
        return
    click.echo("incompatible")
    for message in body.get("messages") or ():
        echo_err(str(message))
    raise click.exceptions.Exit(1)


@schemas_command.command("config")
@click.argument("subject", required=False)
@click.option(
    "--compatibility",
    type=click.Choice(_LEVELS, case_sensitive=False),
    help="Set this compatibility level (of SUBJECT, else the global one).",
)
@_registry_options
def config(registry: Any, subject: str | None, compatibility: str | None) -> None:
    """The compatibility level of SUBJECT (and whether it is its own or the global one), or the global one."""
    if compatibility is not None:
        registry.set_compatibility(compatibility.upper(), subject)
    from trafka.sdk.schemas import SchemaRegistryError

    path = "/config" if subject is None else f"/config/{quote(subject, safe='')}"
    try:
        level = registry.request("GET", path)["compatibilityLevel"]
        whose = "global" if subject is None else "own"
    except SchemaRegistryError as exc:
        if exc.error_code != 40408:  # no subject-level config: the global one applies
            raise
        level, whose = registry.request("GET", "/config")["compatibilityLevel"], "global"
    click.echo(f"{level} ({whose})")


@schemas_command.command("delete")
@click.argument("subject")
@click.option("--version", help="Only this version (a number, or latest).")
@click.option(
    "--permanent",
    is_flag=True,
    help="Delete for good (what is not soft-deleted yet is soft-deleted first).",
)
@_registry_options
def delete(registry: Any, subject: str, version: str | None, permanent: bool) -> None:
    """Delete SUBJECT, or one of its versions; print the versions deleted."""
    from trafka.sdk.schemas import SchemaRegistryError

    path = f"/subjects/{quote(subject, safe='')}"
    if version is not None:
        if version != "latest" and not version.isdigit():
            raise click.BadParameter(f"{version!r}: a number or latest", param_hint="--version")
        path += f"/versions/{version}"
    deleted: Any = None
    try:
        deleted = registry.request("DELETE", path)
    except SchemaRegistryError as exc:
        # 40404/40406: soft-deleted already, which --permanent goes on from.
        if not permanent or exc.error_code not in (40404, 40406):
            raise
    if permanent:
        deleted = registry.request("DELETE", path, None, {"permanent": "true"})
    for number in deleted if isinstance(deleted, list) else [deleted]:
        click.echo(number)
    how = "permanently" if permanent else "soft-deleted (--permanent to delete for good)"
    echo_err(f"{subject}: {how}")
