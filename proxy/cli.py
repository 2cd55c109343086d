"""``trafka proxy``: serve the Kafka protocol proxy in the foreground.

Its options are made from the settings' table (:data:`.settings.SETTINGS`),
as are its file's keys and its environment variables: one list, not three.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from trafka.sdk import ConfigError

from .service import check, serve, summary
from .settings import SETTINGS, FilterSpec, Setting, Sources
from .workers import WorkerGaveUp


def _default_text(s: Setting) -> str:
    if s.default in (None, ()):
        return ""
    value = str(s.default).lower() if isinstance(s.default, bool) else s.default
    return f" [default: {value}]"


def _option(s: Setting) -> Callable[[Any], Any]:
    help_text = f"{s.help}{_default_text(s)} [env: {s.env}]"
    names = [s.short] if s.short else []
    if s.kind == "bool":
        names.append(f"{s.flag}/--no-{s.flag[2:]}")
        return click.option(*names, s.name, default=None, help=help_text)
    names.append(s.flag)
    kind: Any = {"int": int, "choice": click.Choice(s.choices)}.get(s.kind, str)
    metavar = {
        "filters": "MODULE:ATTR",
        "path": "FILE",
        "list": "HOST:PORT[,...]",
        "listeners": "NAME=HOST:PORT",
    }.get(s.kind)
    return click.option(
        *names,
        s.name,
        type=kind,
        default=None,
        multiple=s.kind in ("filters", "listeners"),
        metavar=metavar,
        help=help_text,
    )


def _with_settings(f: Callable[..., Any]) -> Callable[..., Any]:
    for s in reversed(SETTINGS):
        f = _option(s)(f)
    return f


def _typed(flags: dict[str, Any]) -> dict[str, Any]:
    """The flags' values as the settings hold them (lists split, filters as specs)."""
    out = dict(flags)
    for s in SETTINGS:
        value = out.get(s.name)
        if s.kind == "list" and value is not None:
            out[s.name] = tuple(x.strip() for x in value.split(",") if x.strip())
        elif s.kind == "filters":
            out[s.name] = tuple(FilterSpec(x) for x in value or ())
        elif s.kind == "listeners":
            out[s.name] = tuple(value or ())  # NAME=HOST:PORT each, read with the rest
    return out


@click.command("proxy")
@click.option(
    "--config",
    "config_path",
    metavar="FILE",
    envvar="TRAFKA_PROXY_CONFIG",
    help="A TOML file of settings (the same names as the flags, with underscores); "
    "flags and TRAFKA_PROXY_* variables override it. Read again on SIGHUP. "
    "[env: TRAFKA_PROXY_CONFIG]",
)
@click.option(
    "--check-config",
    is_flag=True,
    help="Check the whole configuration (file, environment, flags) without binding "
    "anything; print every problem at once. Exit 0 if valid, else 1.",
)
@_with_settings
def command(config_path: str | None, check_config: bool, **flags: Any) -> None:
    """Proxy Kafka clients to a cluster, rewriting broker addresses and routing
    keyed records to the partition their key hashes to.

    Settings come from flags, then TRAFKA_PROXY_<SETTING> variables, then the
    --config file, then defaults. SIGHUP reloads the log level, the filters'
    settings and the TLS certificate (docs/proxy.md, "Operations")."""
    sources = Sources(_typed(flags), dict(os.environ), config_path)
    try:
        loaded = check(sources)
    except ConfigError as exc:
        if check_config:  # exit 1: the answer to the question asked
            raise click.ClickException(str(exc)) from None
        raise click.UsageError(str(exc)) from None  # exit 2, as any bad option
    if check_config:
        click.echo(summary(loaded))
        return
    try:
        serve(loaded, sources)
    except KeyboardInterrupt:
        pass
    except WorkerGaveUp as exc:
        raise click.ClickException(f"the proxy stopped: {exc}") from None
    except (ValueError, OSError) as exc:  # DiscoveryError is an OSError
        raise click.ClickException(f"cannot start the proxy: {exc}") from None
