"""Loading ``trafka proxy``'s whole configuration, and reloading on SIGHUP what
can change while it serves.

Rules:

* :func:`load` checks everything a start needs without binding a port: the
  settings (:mod:`.settings`), each filter imported and given its settings
  (whatever the other settings' problems), then what only trying tells: the
  :class:`~.config.ProxyConfig` they make, the TLS certificate and key
  loaded, the principals' credentials file read (each once its files exist),
  and each filter's settings checked with the proxy's
  (:meth:`~.filters.Filter.check_with`).
  Every problem is raised at once (:class:`~trafka.sdk.ConfigError`), a
  filter's each on its own line when it names several (its ``configure``
  raising a ConfigError); a problem that only follows from one already named
  is left out. ``trafka proxy --check-config`` stops there.
* On SIGHUP the file and the environment the process started with are read
  again (the flags stay as given) and checked as a start would be. What may
  change while serving (the settings marked ``reload``): the log level, the
  filters' settings (each filter's :meth:`~.filters.Filter.configure` is
  called again; the chain itself cannot change), and the TLS settings towards
  clients: the certificate and key, the client CAs, ``ssl_client_auth`` and
  ``ssl_principal_mapping_rules`` (a new TLS context is made from the files
  as they are now, even when their names did not change, as certificate
  renewers replace them in place: new connections get it and their
  principals by the new rules; connections already open keep theirs). TLS
  itself cannot be switched on or off. ``sni_domain`` may move to another
  domain (:meth:`~.sni.SniNames.move_to`: new connections are read by its
  names, answers name brokers by them; open connections keep their broker),
  but SNI cannot be switched on or off (the listeners per broker would open
  or close).
* A reload is all or nothing: a configuration with a problem, or one that
  changes anything else, is refused whole, with a log line naming each
  problem or setting, and the proxy goes on with its old settings.
"""

from __future__ import annotations

import logging
import os
import signal
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from trafka.common.logformat import quiet_libraries
from trafka.sdk import ConfigError

from .config import ProxyConfig
from .filters import Filter, load_filter
from .mtls import ClientTls
from .principals import load_credentials
from .settings import BY_NAME, FilterSpec, Sources, gather, proxy_config

__all__ = [
    "Loaded",
    "Reloader",
    "configured_filters",
    "load",
    "log_level",
    "reloader",
    "until_stopped",
]

log = logging.getLogger("trafka.proxy")


@dataclass(frozen=True, slots=True)
class Loaded:
    """A checked configuration: the settings' values, where each came from, and
    the :class:`ProxyConfig` they make (its filters loaded and configured)."""

    values: dict[str, Any]
    origin: dict[str, str]
    config: ProxyConfig


def load(
    sources: Sources, more: Callable[[Mapping[str, Any], ProxyConfig], list[str]] | None = None
) -> Loaded:
    """The configuration of ``sources``, checked (see the module's rules);
    ``more``: further checks (problems) of the values and config.

    Raises:
        ConfigError: every problem found.
    """
    values, origin, problems = gather(sources)
    settings_ok = not problems
    filters: list[Filter] = []
    uses: list[str] = []
    for spec in values["filter"]:
        made, refused = _configured(spec)
        filters += made
        uses += [spec.use] * len(made)
        problems += [f"{origin['filter']}: {p}" for p in refused]
    config = None
    try:
        config = proxy_config(values)
    except ValueError as exc:
        if settings_ok:  # else a consequence of a problem named already
            problems.append(str(exc))
    if config is not None:
        # What only trying tells, of the files the settings found.
        checks = (
            (
                (config.ssl_certfile, config.ssl_keyfile, config.ssl_cafile),
                config.client_ssl_context,
            ),
            (
                (
                    config.upstream_ssl_cafile,
                    config.upstream_ssl_certfile,
                    config.upstream_ssl_keyfile,
                ),
                config.upstream_ssl_context,
            ),
            (
                (config.principal_credentials,),
                partial(load_credentials, config.principal_credentials),
            ),
        )
        for paths, make in checks:
            if all(p is None or os.path.isfile(p) for p in paths):
                try:
                    make()
                except ValueError as exc:
                    problems.append(str(exc))
        for f, use in zip(filters, uses, strict=True):  # with the proxy's settings
            problems += [f"{origin['filter']}: filter {use}: {p}" for p in f.check_with(config)]
        if more is not None and settings_ok:
            problems += more(values, config)
    if problems or config is None:
        raise ConfigError.of(problems)
    return Loaded(values, origin, replace(config, filters=tuple(filters)))


def _configured(spec: FilterSpec) -> tuple[list[Filter], list[str]]:
    """The filter of ``spec`` given its settings, or every problem it has."""
    try:
        made = load_filter(spec.use)
    except ValueError as exc:
        return [], [str(exc)]
    try:
        made.configure(spec.settings)
    except ConfigError as exc:  # a filter naming several problems at once
        return [], [f"filter {spec.use}: {p}" for p in exc.problems]
    except ValueError as exc:
        return [], [f"filter {spec.use}: {exc}"]
    return [made], []


def configured_filters(specs: Sequence[FilterSpec]) -> tuple[Filter, ...]:
    """The filters of ``specs``, made and given their settings.

    Raises:
        ValueError: one cannot be loaded, or refused its settings.
    """
    made: list[Filter] = []
    for spec in specs:
        filters, problems = _configured(spec)
        if problems:
            raise ValueError("; ".join(problems))
        made += filters
    return tuple(made)


def log_level(values: Mapping[str, Any]) -> int:
    """The level the proxy logs at (``verbose``: DEBUG whatever ``log_level`` says)."""
    return (
        logging.DEBUG if values["verbose"] else logging.getLevelNamesMapping()[values["log_level"]]
    )


class Reloader:
    """A running proxy's settings, and what SIGHUP changes in them.

    Args:
        sources: where the settings came from (read again on each reload).
        values: the settings it serves with.
        filters: the running chain's filters (the user's first, in order).
        client_tls: the running proxy's TLS side towards clients (None: plaintext).
    """

    def __init__(
        self,
        sources: Sources,
        values: Mapping[str, Any],
        filters: Sequence[Filter],
        client_tls: ClientTls | None,
    ) -> None:
        self.sources = sources
        self.values = dict(values)
        self.filters = tuple(filters)
        self.client_tls = client_tls

    def reload(self) -> bool:
        """Read the configuration again and apply it (see the module's rules);
        whether it was applied."""
        try:
            loaded = load(self.sources)
        except ConfigError as exc:
            for problem in exc.problems:
                log.error("SIGHUP: configuration not reloaded: %s", problem)
            return _kept()
        fresh = loaded.values
        changed = [name for name, value in fresh.items() if value != self.values[name]]
        refused = [name for name in changed if not self._can_change(name, fresh)]
        for name in refused:
            log.error(
                "SIGHUP: configuration not reloaded: %s cannot change without a restart "
                "(%r, was %r)",
                name,
                fresh[name],
                self.values[name],
            )
        if refused:
            return _kept()
        try:
            self._apply(loaded, changed)
        except (ValueError, OSError, ssl.SSLError) as exc:
            log.error("SIGHUP: configuration not reloaded: %s", exc)
            return _kept()
        self.values = fresh
        log.info("SIGHUP: configuration reloaded (%s)", ", ".join(changed) or "nothing changed")
        return True

    def _can_change(self, name: str, fresh: Mapping[str, Any]) -> bool:
        if not BY_NAME[name].reload:
            return False
        if name == "filter":  # their settings, not the chain
            return [s.use for s in fresh[name]] == [s.use for s in self.values[name]]
        if name.startswith("ssl_"):  # another certificate, not TLS switched on or off
            return bool(fresh["ssl_certfile"]) == bool(self.values["ssl_certfile"])
        if name == "sni_domain":  # another domain, not SNI switched on or off
            return bool(fresh[name]) and bool(self.values[name])
        return True

    def _apply(self, loaded: Loaded, changed: list[str]) -> None:
        fresh = loaded.values
        if self.client_tls is not None:  # its files may have been replaced under the same names
            context = loaded.config.client_ssl_context()
            assert context is not None  # TLS is not switched off by a reload (_can_change)
            self.client_tls.renew(context, fresh["ssl_principal_mapping_rules"])
            log.info("SIGHUP: TLS certificate loaded from %s", fresh["ssl_certfile"])
        names = None if self.client_tls is None else self.client_tls.names
        if "sni_domain" in changed and names is not None:  # (a supervisor serves no one)
            names.move_to(fresh["sni_domain"])
            log.info("SIGHUP: new connections are served as %s", names.bootstrap)
        if names is not None:  # the certificate too may have been replaced
            for warning in loaded.config.certificate_warnings():
                log.warning("SIGHUP: %s: clients that check host names will refuse it", warning)
        if "filter" in changed:
            for f, old, new in zip(
                self.filters, self.values["filter"], fresh["filter"], strict=False
            ):
                if old.settings != new.settings:
                    f.configure(new.settings)
        logging.getLogger().setLevel(log_level(fresh))
        quiet_libraries(log_level(fresh))


def _kept() -> bool:
    log.error("SIGHUP: the proxy goes on with its old settings")
    return False


def reloader(
    reload: tuple[Sources, Mapping[str, Any]] | None, filters: Any, client_tls: Any
) -> Reloader | None:
    """The :class:`Reloader` of a running proxy (None: no sources to reload from)."""
    return None if reload is None else Reloader(reload[0], reload[1], filters, client_tls)


async def until_stopped(signals: Any, reloader: Reloader | None) -> None:
    """Return at SIGINT or SIGTERM; reload at SIGHUP."""
    async for signum in signals:
        if signum != signal.SIGHUP:
            log.info("received %s, shutting down", signal.Signals(signum).name)
            return
        if reloader is None:
            log.warning("received SIGHUP: no configuration to reload (started from code)")
            continue
        log.info("received SIGHUP, reloading the configuration")
        reloader.reload()
